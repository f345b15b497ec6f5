//! `btl-sim`: proofs of btl under faults and concurrency.
//!
//! - [`SimNet`] runs btl-std's TCP and UDP transports, unchanged, over
//!   turmoil's simulated network, between simulated hosts whose clock,
//!   randomness and faults (partitions, crashes, latency, loss) are all a
//!   function of one seed. `tests/scenarios.rs` holds the scenarios; the
//!   book's "Simulation" chapter shows how to write one for your own code.
//! - btl-tokio's async face runs over the same network: `SimNet` is a
//!   [`Reactor`](btl_tokio::Reactor), so an async service's `Endpoint`
//!   runs between simulated hosts, deterministic and replayable by seed
//!   (`tests/async_scenarios.rs`).
//! - The loom models of the core's concurrent pieces are under
//!   `tests/loom_*.rs`; run them with `RUSTFLAGS="--cfg loom" cargo test -p
//!   btl-sim --release --test loom_pool`.
#![forbid(unsafe_code)]

#[cfg(not(loom))]
mod net;

#[cfg(not(loom))]
pub use net::{SimDatagram, SimEvent, SimListener, SimNet, SimPoller, SimStream};
