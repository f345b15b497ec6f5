//! Endpoint addresses (placeholder until written).
