//! Network buffers as a transfer machine tracks them: the registered memory,
//! what the user asked for (idle, queued, completed), and what the BTL still
//! holds. The two are apart on purpose: a cancel or a timeout completes the
//! buffer for the user at once, while the BTL may still hold a send or a
//! put of it; the buffer is reusable only once both are over.

use super::{NetBufDesc, Passive, Queue, TmAddr, XferError};
use crate::btl::{BtlError, MemSlice, OpId};
use crate::endpoint::EndpointId;
use crate::pool::FragmentClass;
use crate::time::Instant;

/// A buffer registered with a transfer machine: slot and generation, so an
/// id kept after `deregister_buffer` is refused even once the slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferId {
    pub(crate) index: u16,
    pub(crate) generation: u32,
}

/// One slot of the buffer table.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) generation: u32,
    pub(crate) buffer: Option<Buffer>,
}

/// A registered buffer.
#[derive(Debug)]
pub(crate) struct Buffer {
    pub(crate) mem: MemSlice,
    /// Counts adds; with the slot index it makes the current add's cookie.
    pub(crate) adds: u32,
    pub(crate) work: Work,
    pub(crate) hold: Hold,
}

/// The user's side of a buffer. `Done` is entered only from `Queued`, and
/// left only when the completion is polled: one completion per add.
#[derive(Debug)]
pub(crate) enum Work {
    Idle,
    Queued(Queued),
    Done {
        queue: Queue,
        result: Result<u64, XferError>,
    },
}

/// What the BTL holds of a buffer, whatever the user was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    Nothing,
    /// A send descriptor referencing the buffer, until its send completion;
    /// named by its fragment (class and index), which the BTL hands back
    /// with the completion and no other live descriptor shares.
    Send(FragmentClass, usize),
    /// A put or get, until its completion.
    Rdma(OpId),
}

/// A queued buffer.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) op: Op,
    pub(crate) deadline: Option<Instant>,
    /// When it was added: MSG_RECV buffers fill in this order.
    pub(crate) order: u64,
}

/// The operation of a queued buffer and its progress.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    MsgRecv {
        min_receive_size: u64,
        max_messages: u32,
        used: u64,
        messages: u32,
    },
    MsgSend {
        to: TmAddr,
        len: u64,
        /// The BTL took the send; its completion ends the buffer.
        in_btl: bool,
    },
    Passive {
        queue: Passive,
        /// The only process whose BULK_DONE completes it.
        peer: EndpointId,
        len: u64,
    },
    Active {
        peer: EndpointId,
        desc: NetBufDesc,
        /// Bytes to move.
        len: u64,
        phase: Phase,
    },
}

/// Progress of an active bulk buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The put or get is yet to be issued (or was refused for now).
    Start,
    /// The put or get is with the BTL.
    Moving,
    /// The data phase ended; the BULK_DONE is yet to be sent.
    Notify(Result<(), BtlError>),
}

impl Op {
    pub(crate) fn queue(&self) -> Queue {
        match self {
            Op::MsgRecv { .. } => Queue::MsgRecv,
            Op::MsgSend { .. } => Queue::MsgSend,
            Op::Passive { queue, .. } => (*queue).into(),
            Op::Active { desc, .. } => match desc.queue {
                Passive::Recv => Queue::ActiveBulkSend,
                Passive::Send => Queue::ActiveBulkRecv,
            },
        }
    }

    /// The peer the operation depends on, if one.
    pub(crate) fn peer(&self) -> Option<EndpointId> {
        match self {
            Op::MsgRecv { .. } => None,
            Op::MsgSend { to, .. } => Some(to.endpoint),
            Op::Passive { peer, .. } | Op::Active { peer, .. } => Some(*peer),
        }
    }
}

/// The cookie of add number `adds` of slot `index`.
pub(crate) fn cookie(index: usize, adds: u32) -> u64 {
    (u64::from(adds) << 16) | (index as u64 & 0xFFFF)
}

/// Slot index and add number of a cookie; `None` when it cannot be one.
pub(crate) fn split_cookie(cookie: u64) -> Option<(usize, u32)> {
    let adds = u32::try_from(cookie >> 16).ok()?;
    Some(((cookie & 0xFFFF) as usize, adds))
}
