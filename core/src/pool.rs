//! Fragment pools (placeholder until written).
