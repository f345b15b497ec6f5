//! A software queue pair: its state, its attributes, its two queues and
//! the retry state of the request at the head of its send queue.

use std::collections::VecDeque;

use btl_core::time::Instant;

use crate::provider::{
    Access, Pd, QpInit, QpNum, QpState, RecvWr, SendOp, SendWr, Sge, ToRtr, ToRts, Transition,
    VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use super::ContextId;

/// Most scatter/gather entries of one work request on the soft device.
pub(crate) const MAX_SGE: usize = 4;

/// PSNs are 24 bits.
pub(crate) const PSN_MASK: u32 = 0x00FF_FFFF;

/// A scatter/gather list kept inline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SgList {
    len: usize,
    entries: [Sge; MAX_SGE],
}

impl SgList {
    fn new(sg: &[Sge], max: u32) -> Result<Self, VerbsError> {
        if sg.len() > MAX_SGE || sg.len() > max as usize {
            return Err(VerbsError::Invalid("too many scatter/gather entries"));
        }
        let mut entries = [Sge {
            lkey: crate::provider::Lkey(0),
            offset: 0,
            len: 0,
        }; MAX_SGE];
        entries[..sg.len()].copy_from_slice(sg);
        Ok(SgList {
            len: sg.len(),
            entries,
        })
    }

    pub(crate) fn as_slice(&self) -> &[Sge] {
        &self.entries[..self.len]
    }

    /// Bytes the list names.
    pub(crate) fn bytes(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.len)).sum()
    }
}

/// A posted send work request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendReq {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) sg: SgList,
    pub(crate) signaled: bool,
}

impl SendReq {
    pub(crate) fn new(wr: &SendWr<'_>, max_sge: u32) -> Result<Self, VerbsError> {
        Ok(SendReq {
            wr_id: wr.wr_id,
            op: wr.op,
            sg: SgList::new(wr.sg, max_sge)?,
            signaled: wr.signaled,
        })
    }

    pub(crate) fn opcode(&self) -> WcOpcode {
        match self.op {
            SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
            SendOp::RdmaWrite(_) | SendOp::RdmaWriteWithImm(..) => WcOpcode::RdmaWrite,
            SendOp::RdmaRead(_) => WcOpcode::RdmaRead,
        }
    }
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvReq {
    pub(crate) wr_id: u64,
    pub(crate) sg: SgList,
}

impl RecvReq {
    pub(crate) fn new(wr: &RecvWr<'_>, max_sge: u32) -> Result<Self, VerbsError> {
        Ok(RecvReq {
            wr_id: wr.wr_id,
            sg: SgList::new(wr.sg, max_sge)?,
        })
    }
}

/// What the request at the head of the send queue waits for before it is
/// tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// An acknowledgement that did not come: tried again at `until`
    /// (never, with no ACK timeout), `left` more times.
    Ack { until: Option<Instant>, left: u8 },
    /// A receive the peer had not posted: tried again at `until`, `left`
    /// more times (`None`: without end).
    Rnr { until: Instant, left: Option<u8> },
}

impl Wait {
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        match *self {
            Wait::Ack { until, .. } => until.is_some_and(|t| now >= t),
            Wait::Rnr { until, .. } => now >= until,
        }
    }
}

/// A reliable-connected queue pair on the soft device.
#[derive(Debug)]
pub(crate) struct QueuePair {
    pub(crate) num: QpNum,
    pub(crate) ctx: ContextId,
    pub(crate) pd: Pd,
    pub(crate) init: QpInit,
    pub(crate) state: QpState,
    pub(crate) port: u8,
    /// What peers' RDMA may do here.
    pub(crate) access: Access,
    pub(crate) rtr: Option<ToRtr>,
    pub(crate) rts: Option<ToRts>,
    /// Next PSN to send, and next expected.
    pub(crate) sq_psn: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq: VecDeque<SendReq>,
    pub(crate) rq: VecDeque<RecvReq>,
    pub(crate) wait: Option<Wait>,
    /// The head request's bytes, once taken from lent memory whose owner
    /// served the device, while the memory they go to waits for its own
    /// owner.
    pub(crate) staged: Option<Vec<u8>>,
}

impl QueuePair {
    pub(crate) fn new(num: QpNum, ctx: ContextId, pd: Pd, init: QpInit) -> Self {
        QueuePair {
            num,
            ctx,
            pd,
            init,
            state: QpState::Reset,
            port: 0,
            access: Access::empty(),
            rtr: None,
            rts: None,
            sq_psn: 0,
            rq_psn: 0,
            sq: VecDeque::with_capacity(init.caps.max_send_wr as usize),
            rq: VecDeque::with_capacity(init.caps.max_recv_wr as usize),
            wait: None,
            staged: None,
        }
    }

    /// Takes a transition whose attributes the device checked.
    pub(crate) fn apply(&mut self, to: &Transition) {
        match *to {
            Transition::Init(a) => {
                self.port = a.port;
                self.access = a.access;
            }
            Transition::Rtr(a) => {
                self.rq_psn = a.rq_psn & PSN_MASK;
                self.rtr = Some(a);
            }
            Transition::Rts(a) => {
                self.sq_psn = a.sq_psn & PSN_MASK;
                self.rts = Some(a);
            }
            Transition::Err | Transition::Reset => {}
        }
        if matches!(to, Transition::Reset) {
            *self = QueuePair::new(self.num, self.ctx, self.pd, self.init);
            return;
        }
        self.state = to.target();
    }

    /// Whether the responder side takes packets.
    pub(crate) fn receives(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts)
    }

    /// The completions of every outstanding request, flushed: the QP is in
    /// `Err`. Receives of a shared queue stay there.
    pub(crate) fn flush(&mut self) -> impl Iterator<Item = (bool, WorkCompletion)> + '_ {
        let qp = self.num;
        self.wait = None;
        self.staged = None;
        let sends = self.sq.drain(..).map(move |r| {
            (
                true,
                WorkCompletion {
                    wr_id: r.wr_id,
                    status: WcStatus::Flushed,
                    opcode: r.opcode(),
                    byte_len: 0,
                    imm: None,
                    qp,
                },
            )
        });
        let recvs = self.rq.drain(..).map(move |r| {
            (
                false,
                WorkCompletion {
                    wr_id: r.wr_id,
                    status: WcStatus::Flushed,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp,
                },
            )
        });
        sends.chain(recvs)
    }
}

/// The number of packets a message of `len` bytes takes at `mtu` bytes:
/// the PSNs it uses.
pub(crate) fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1).min(u64::from(PSN_MASK)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Cq, QpCaps, ToInit};

    fn qp() -> QueuePair {
        let init = QpInit {
            send_cq: Cq(1),
            recv_cq: Cq(1),
            srq: None,
            caps: QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 2,
                max_recv_sge: 2,
            },
        };
        QueuePair::new(QpNum(0x11), ContextId(1), Pd(1), init)
    }

    #[test]
    fn reset_forgets_the_peer_and_the_queues() {
        let mut q = qp();
        q.apply(&Transition::Init(ToInit {
            port: 1,
            access: Access::REMOTE_WRITE,
        }));
        assert_eq!(q.state, QpState::Init);
        q.rq.push_back(RecvReq {
            wr_id: 7,
            sg: SgList::new(&[], 2).expect("no entries"),
        });
        q.apply(&Transition::Reset);
        assert_eq!(q.state, QpState::Reset);
        assert!(q.rq.is_empty());
        assert_eq!(q.access, Access::empty());
    }

    #[test]
    fn a_flush_completes_sends_then_receives() {
        let mut q = qp();
        let sg = SgList::new(&[], 2).expect("no entries");
        q.sq.push_back(SendReq {
            wr_id: 1,
            op: SendOp::Send,
            sg,
            signaled: false,
        });
        q.rq.push_back(RecvReq { wr_id: 2, sg });
        let flushed: Vec<_> = q.flush().collect();
        assert_eq!(flushed.len(), 2);
        assert!(flushed[0].0 && flushed[0].1.wr_id == 1);
        assert!(!flushed[1].0 && flushed[1].1.opcode == WcOpcode::Recv);
        assert!(
            flushed.iter().all(|(_, wc)| wc.status == WcStatus::Flushed),
            "an unsignaled send completes too when flushed"
        );
    }

    #[test]
    fn too_many_entries_are_refused() {
        let sg = [Sge {
            lkey: crate::provider::Lkey(1),
            offset: 0,
            len: 1,
        }; 3];
        assert!(SgList::new(&sg, 2).is_err());
        assert!(SgList::new(&sg[..2], 2).is_ok());
    }

    #[test]
    fn a_message_uses_one_psn_per_packet() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(1 << 20, 4096), 256);
    }
}
