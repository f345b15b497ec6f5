//! `btl-sim`: proofs of btl under faults and concurrency.
//!
//! Today it holds the loom models of the core's concurrent pieces, under
//! `tests/loom_*.rs`; run them with `RUSTFLAGS="--cfg loom" cargo test -p
//! btl-sim --release --test loom_pool`. The turmoil driver and its fault
//! scenarios join when the engine exists.
#![forbid(unsafe_code)]
