//! Descriptors (placeholder until written).
