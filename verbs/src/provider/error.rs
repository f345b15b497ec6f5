//! Why a verb was refused at once (failures of work carried out later
//! are completion statuses, not errors).

use super::device::{Cq, QpNum};
use super::qp::QpState;

/// A verb the provider refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// No usable device, with the reason (no driver, no device, the kernel
    /// without verbs support).
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// The handle names nothing this context holds.
    #[error("unknown {0}")]
    Unknown(&'static str),
    /// A queue pair may not take this transition from its state.
    #[error("queue pair {qp} cannot go from {from:?} to {to:?}")]
    BadTransition {
        /// The queue pair.
        qp: QpNum,
        /// Its state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// The queue pair's state does not allow this post (sends before
    /// `Rts`, anything in `Reset`).
    #[error("queue pair {qp} in {state:?} does not take this work request")]
    BadState {
        /// The queue pair.
        qp: QpNum,
        /// Its state.
        state: QpState,
    },
    /// An argument outside what the device supports.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A queue, table or the device is full.
    #[error("out of resources: {0}")]
    Exhausted(&'static str),
    /// The resource is still in use (a region a queue pair's work
    /// requests name, a completion queue a queue pair uses).
    #[error("{0} still in use")]
    Busy(&'static str),
    /// The completion queue overran: completions were lost, and the queue
    /// pairs on it are in `Err`. It must be destroyed.
    #[error("completion queue {0:?} overran")]
    CqOverrun(Cq),
    /// The operating system refused (an `errno`).
    #[error("verbs call failed with errno {0}")]
    Os(i32),
}

/// A post that stopped at one work request: those before it were posted,
/// it and those after it were not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} refused: {error}")]
pub struct PostError {
    /// Index of the first work request not posted.
    pub index: usize,
    /// Why.
    pub error: VerbsError,
}
