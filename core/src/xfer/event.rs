//! What a transfer machine tells its user, one event at a time from
//! `poll_event`: Motr's buffer and transfer machine callbacks as values.

use super::{BufferId, Queue, TmAddr, TmState, XferError};
use crate::btl::BtlError;

/// The end of one add of a buffer: it is the user's again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The buffer.
    pub buffer: BufferId,
    /// The queue it was on.
    pub queue: Queue,
    /// Bytes transferred (sent, received, or filled for MSG_RECV), or why
    /// the operation failed.
    pub result: Result<u64, XferError>,
}

/// Something that happened, handed out by `TransferMachine::poll_event` in
/// the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XferEvent {
    /// The machine changed state.
    StateChanged {
        /// The new state.
        state: TmState,
        /// For `Failed`, the BTL's fatal error.
        error: Option<BtlError>,
    },
    /// A message landed in a MSG_RECV buffer, which stays queued: it
    /// completes separately, after its last message.
    Received {
        /// The receive buffer.
        buffer: BufferId,
        /// Where the message starts, from the start of the buffer.
        offset: u64,
        /// Its length.
        len: u64,
        /// The sending machine, to reply to.
        from: TmAddr,
    },
    /// A buffer completed: exactly one per add.
    Completed(Completion),
    /// Messages arrived that no MSG_RECV buffer could take and were lost
    /// (Motr's `-ENOBUFS` event); successive losses are counted in one event.
    Dropped {
        /// Messages lost.
        count: u32,
    },
}
