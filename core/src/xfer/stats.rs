//! Counters a transfer machine keeps, after Motr's `m0_net_qstats`.

use super::Queue;

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Buffers added.
    pub adds: u64,
    /// Buffers cancelled with `del`.
    pub deletes: u64,
    /// Buffers completed with success.
    pub succeeded: u64,
    /// Buffers completed with an error (cancel and timeout included).
    pub failed: u64,
    /// Bytes of the successful completions.
    pub bytes: u64,
}

/// Counters of a transfer machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per queue, indexed by [`Queue::index`].
    pub queues: [QueueStats; 6],
    /// Messages lost: no MSG_RECV buffer with room, too long, or not started.
    pub dropped_messages: u64,
    /// Messages on the machine's tag that were not valid, or came from the
    /// wrong peer.
    pub bad_messages: u64,
    /// BTL completions and notifications for operations that had already
    /// ended (cancelled or timed out): ignored, as they must be.
    pub stale: u64,
    /// BTL events that were not the machine's, dropped by `progress`.
    pub foreign_events: u64,
}

impl Stats {
    /// The counters of one queue.
    pub fn queue(&self, q: Queue) -> &QueueStats {
        &self.queues[q.index()]
    }

    pub(crate) fn queue_mut(&mut self, q: Queue) -> &mut QueueStats {
        &mut self.queues[q.index()]
    }
}
