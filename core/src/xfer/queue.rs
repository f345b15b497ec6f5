//! The six logical queues of a transfer machine, after Motr's
//! `m0_net_queue_type`: a buffer is added to one of them, and the queue says
//! what the buffer is for until it completes.

use core::fmt;

/// What a buffer added to a transfer machine is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    /// Receives messages from any peer; the user provisions these buffers.
    MsgRecv,
    /// Sends one message to a peer transfer machine.
    MsgSend,
    /// Waits for a peer to write into it (the peer's ACTIVE_BULK_SEND).
    PassiveBulkRecv,
    /// Waits for a peer to read from it (the peer's ACTIVE_BULK_RECV).
    PassiveBulkSend,
    /// Reads a peer's passive buffer into it, with `get`.
    ActiveBulkRecv,
    /// Writes it into a peer's passive buffer, with `put`.
    ActiveBulkSend,
}

impl Queue {
    /// Every queue, in Motr's order (the index of [`Queue::index`]).
    pub const ALL: [Queue; 6] = [
        Queue::MsgRecv,
        Queue::MsgSend,
        Queue::PassiveBulkRecv,
        Queue::PassiveBulkSend,
        Queue::ActiveBulkRecv,
        Queue::ActiveBulkSend,
    ];

    /// Position in [`Queue::ALL`], for per-queue tables.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Motr's name for the queue, e.g. `MSG_RECV`.
    pub const fn name(self) -> &'static str {
        match self {
            Queue::MsgRecv => "MSG_RECV",
            Queue::MsgSend => "MSG_SEND",
            Queue::PassiveBulkRecv => "PASSIVE_BULK_RECV",
            Queue::PassiveBulkSend => "PASSIVE_BULK_SEND",
            Queue::ActiveBulkRecv => "ACTIVE_BULK_RECV",
            Queue::ActiveBulkSend => "ACTIVE_BULK_SEND",
        }
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The queue of a passive buffer, as its descriptor names it: it tells the
/// active side whether to write (`put`) or read (`get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Passive {
    /// PASSIVE_BULK_RECV: the peer writes into the buffer.
    Recv,
    /// PASSIVE_BULK_SEND: the peer reads from the buffer.
    Send,
}

impl From<Passive> for Queue {
    fn from(p: Passive) -> Self {
        match p {
            Passive::Recv => Queue::PassiveBulkRecv,
            Passive::Send => Queue::PassiveBulkSend,
        }
    }
}
