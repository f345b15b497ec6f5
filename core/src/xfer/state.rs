//! The life of a transfer machine, after Motr's `m0_net_tm_state`.

use core::fmt;

/// Where a transfer machine is in its life. It only moves forward:
/// Initialized → Starting → Started → Stopping → Stopped, or to Failed from
/// any state before Stopped. A stopped or failed machine is not restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TmState {
    /// Built; buffers may be registered but not added.
    Initialized,
    /// `start` was called; the next `run` makes it Started.
    Starting,
    /// Active: buffers may be added, messages are accepted.
    Started,
    /// `stop` was called: every queued buffer was cancelled; it waits for
    /// the BTL to give back what it still holds.
    Stopping,
    /// Stopped: the BTL holds nothing of it any more.
    Stopped,
    /// The BTL reported a fatal error; every queued buffer failed with it.
    Failed,
}

impl fmt::Display for TmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TmState::Initialized => "initialized",
            TmState::Starting => "starting",
            TmState::Started => "started",
            TmState::Stopping => "stopping",
            TmState::Stopped => "stopped",
            TmState::Failed => "failed",
        })
    }
}
