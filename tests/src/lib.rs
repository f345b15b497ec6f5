//! `btl-tests`: the conformance suite that every btl backend must pass.
//!
//! The suite is written once against a small harness trait and run against
//! each backend. It arrives with the `Btl` interface; until then the crate
//! only fixes its place in the workspace (see `DESIGN.md`).
#![forbid(unsafe_code)]
