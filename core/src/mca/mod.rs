//! Components and parameters (placeholder until written).
