//! Work requests and their completions.
//!
//! A work request names memory as scatter/gather entries: a region's
//! local key, an offset into it and a length. Every request completes
//! exactly once on its queue's completion queue, with a status: a send
//! posted unsignaled completes silently when it succeeds, never when it
//! fails.

use core::fmt;

use super::device::{Lkey, QpNum, Rkey};

/// A piece of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// The region's local key.
    pub lkey: Lkey,
    /// First byte, from the region's start.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
}

/// Where in a peer's region an RDMA operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The region's remote key.
    pub rkey: Rkey,
    /// First byte, from the region's start.
    pub offset: u64,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// A message into the peer's next posted receive.
    Send,
    /// A message carrying 32 bits of immediate data with it.
    SendWithImm(u32),
    /// The local bytes into the peer's region; nothing completes there.
    RdmaWrite(RemoteAddr),
    /// The local bytes into the peer's region, then a completion there
    /// with the immediate data, which takes one of its posted receives.
    RdmaWriteWithImm(RemoteAddr, u32),
    /// The peer's bytes into the local scatter list.
    RdmaRead(RemoteAddr),
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// What it does.
    pub op: SendOp,
    /// The local bytes: gathered for sends and writes, scattered into by
    /// reads.
    pub sg: &'a [Sge],
    /// Whether it completes on success too (it always does on failure).
    pub signaled: bool,
}

/// A receive work request: where the next message arriving goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The bytes a message is scattered into, in order.
    pub sg: &'a [Sge],
}

/// How a work request ended, as verbs report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// It did what it was asked.
    Success,
    /// A message was longer than the receive it landed in (on the
    /// receiving side; the sender sees `RemoteInvalidRequest`).
    LocalLength,
    /// A scatter/gather entry named no region of this protection domain,
    /// lay outside its region, or needed `LOCAL_WRITE` it lacks.
    LocalProtection,
    /// The queue pair was in `Err`: the request was not carried out.
    Flushed,
    /// The peer refused the request as invalid: a message longer than its
    /// receive, an operation its queue pair does not allow.
    RemoteInvalidRequest,
    /// The peer refused an RDMA access: unknown or stale key, range
    /// outside the region, access the region or its queue pair does not
    /// allow.
    RemoteAccess,
    /// The peer failed to carry the request out.
    RemoteOperation,
    /// No acknowledgement came after every retry: the peer's queue pair is
    /// gone, not connected to this one, or unreachable.
    RetryExceeded,
    /// The peer had no receive posted after every RNR retry.
    RnrRetryExceeded,
    /// Another status a real device reported (its verbs number).
    Other(u32),
}

impl WcStatus {
    /// Whether the request succeeded.
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocalLength => "local length error",
            WcStatus::LocalProtection => "local protection error",
            WcStatus::Flushed => "work request flushed",
            WcStatus::RemoteInvalidRequest => "remote invalid request",
            WcStatus::RemoteAccess => "remote access error",
            WcStatus::RemoteOperation => "remote operation error",
            WcStatus::RetryExceeded => "transport retry counter exceeded",
            WcStatus::RnrRetryExceeded => "RNR retry counter exceeded",
            WcStatus::Other(n) => return write!(f, "status {n}"),
        };
        f.write_str(s)
    }
}

/// What kind of work request completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A send (with or without immediate data).
    Send,
    /// An RDMA write (with or without immediate data).
    RdmaWrite,
    /// An RDMA read.
    RdmaRead,
    /// A receive that a send filled.
    Recv,
    /// A receive that an RDMA write with immediate data took.
    RecvRdmaWithImm,
}

/// One completed work request. Its `Default` is a blank slot for
/// [`poll_cq`](super::Provider::poll_cq) to fill, meaning nothing until
/// it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The identifier it was posted with.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was (for a failed request, what was posted).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (RDMA reads).
    pub byte_len: u32,
    /// Immediate data that came with a message or a write.
    pub imm: Option<u32>,
    /// The local queue pair it belonged to.
    pub qp: QpNum,
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm: None,
            qp: QpNum(0),
        }
    }
}
