//! The atomics the core's concurrent pieces use: `core`'s normally, loom's
//! under `--cfg loom` so that the loom models explore every interleaving.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, Ordering, fence};
