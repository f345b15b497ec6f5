//! What the CPC works with: the provider, the BTL's domain and completion
//! queue, the buffers each queue pair sends from and receives into, and
//! the queue pairs themselves.
//!
//! Each queue pair gets a slot of buffers when its receives are posted:
//! `recv_buffers` receives and `send_buffers` sends of `buffer_size`
//! bytes, in two regions registered once. A work request's identifier
//! names its kind, its slot and its buffer, so a completion finds its
//! bytes whatever its status.

use std::collections::{BTreeMap, VecDeque};

use btl_core::endpoint::ProcName;
use btl_core::engine::{ConnectFailure, LinkId, RdmaToken};

use super::VerbsConfig;
use super::channel::SideChannel;
use crate::cpc::{CpcHost, QpTuning};
use crate::provider::{
    Access, Cq, Mr, Pd, Provider, QpCaps, QpInit, QpNum, RecvWr, Sge, VerbsError,
};

/// The top two bits of a work request identifier: its kind.
const KIND_SHIFT: u32 = 62;

/// What a work request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrKind {
    /// A receive into buffer `index`.
    Recv = 0,
    /// A SEND from buffer `index`.
    Send = 1,
    /// The last work request of an RDMA write or read the engine asked
    /// for; `index` is its number on its queue pair.
    Rdma = 2,
}

/// What a work request identifier says: its kind, the slot of its queue
/// pair, and its buffer or number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrId {
    pub(crate) kind: WrKind,
    pub(crate) slot: usize,
    pub(crate) index: usize,
}

impl WrId {
    pub(crate) fn encode(self) -> u64 {
        (self.kind as u64) << KIND_SHIFT
            | ((self.slot as u64) << 32) & !(3 << KIND_SHIFT)
            | (self.index as u64 & 0xFFFF_FFFF)
    }

    pub(crate) fn decode(id: u64) -> Self {
        WrId {
            kind: match id >> KIND_SHIFT {
                0 => WrKind::Recv,
                1 => WrKind::Send,
                _ => WrKind::Rdma,
            },
            slot: ((id & !(3 << KIND_SHIFT)) >> 32) as usize,
            index: (id & 0xFFFF_FFFF) as usize,
        }
    }
}

/// An RDMA transfer posted on a queue pair: its number (that of its last,
/// signaled work request), the engine's token, and how many work requests
/// it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posted {
    pub(crate) number: u32,
    pub(crate) token: RdmaToken,
    pub(crate) requests: usize,
}

/// Received bytes the engine has not taken all of yet, in the order they
/// came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) index: usize,
    pub(crate) len: usize,
    pub(crate) taken: usize,
}

/// One queue pair of the BTL.
#[derive(Debug)]
pub(crate) struct QpLink {
    pub(crate) slot: usize,
    pub(crate) peer: Option<ProcName>,
    pub(crate) link: Option<LinkId>,
    pub(crate) held: VecDeque<Held>,
    /// Sends posted and not yet completed, the oldest at `send_first`.
    pub(crate) sends_out: usize,
    pub(crate) send_first: usize,
    /// RDMA transfers posted and not yet completed, oldest first, the
    /// work requests they hold, and the next one's number.
    pub(crate) rdma: VecDeque<Posted>,
    pub(crate) rdma_requests: usize,
    pub(crate) rdma_next: u32,
    /// The engine is done with the link: the queue pair goes once its
    /// sends and transfers have completed.
    pub(crate) closing: bool,
}

impl QpLink {
    /// Whether nothing posted on it is outstanding.
    pub(crate) fn is_idle(&self) -> bool {
        self.sends_out == 0 && self.rdma.is_empty()
    }
}

/// What the CPC reported, for the transport to tell the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostEvent {
    Connected(ProcName, QpNum),
    Failed(ProcName, ConnectFailure),
    /// A queue pair that carried `LinkId` was destroyed.
    LinkGone(LinkId),
}

/// The BTL side of the CPC (see [`CpcHost`]).
pub struct Host<P: Provider> {
    pub(crate) provider: P,
    pub(crate) config: VerbsConfig,
    pub(crate) pd: Pd,
    pub(crate) cq: Cq,
    pub(crate) recv: Mr,
    pub(crate) send: Mr,
    pub(crate) channel: Box<dyn SideChannel + Send>,
    pub(crate) free_slots: Vec<usize>,
    pub(crate) qps: BTreeMap<QpNum, QpLink>,
    pub(crate) events: VecDeque<HostEvent>,
    psn: u64,
}

impl<P: Provider> Host<P> {
    pub(crate) fn new(
        mut provider: P,
        config: VerbsConfig,
        channel: Box<dyn SideChannel + Send>,
        seed: u64,
    ) -> Result<Self, VerbsError> {
        let slots = config.max_peers;
        let pd = provider.alloc_pd()?;
        let per_slot = config.recv_buffers + config.send_buffers + config.rdma_depth;
        let entries = u32::try_from(slots * per_slot + 16)
            .map_err(|_| VerbsError::Invalid("too many buffers for one completion queue"))?;
        let cq = provider.create_cq(entries)?;
        let region = |n: usize| vec![0u8; slots * n * config.buffer_size];
        let recv = provider.reg_mr(pd, region(config.recv_buffers), Access::LOCAL_WRITE)?;
        let send = provider.reg_mr(pd, region(config.send_buffers), Access::empty())?;
        Ok(Host {
            provider,
            config,
            pd,
            cq,
            recv,
            send,
            channel,
            free_slots: (0..slots).rev().collect(),
            qps: BTreeMap::new(),
            events: VecDeque::new(),
            psn: seed | 1,
        })
    }

    /// Replaces the completion queue, which overran: every queue pair on
    /// it must be gone already.
    pub(crate) fn renew_cq(&mut self) -> Result<(), VerbsError> {
        let per_slot = self.config.recv_buffers + self.config.send_buffers + self.config.rdma_depth;
        let entries = (self.config.max_peers * per_slot + 16) as u32;
        let _ = self.provider.destroy_cq(self.cq);
        self.cq = self.provider.create_cq(entries)?;
        Ok(())
    }

    /// Where receive buffer `index` of `slot` starts in the receive region.
    pub(crate) fn recv_offset(&self, slot: usize, index: usize) -> u64 {
        ((slot * self.config.recv_buffers + index) * self.config.buffer_size) as u64
    }

    /// Where send buffer `index` of `slot` starts in the send region.
    pub(crate) fn send_offset(&self, slot: usize, index: usize) -> u64 {
        ((slot * self.config.send_buffers + index) * self.config.buffer_size) as u64
    }

    /// Posts receive buffer `index` of `slot` on `qp`.
    pub(crate) fn post_recv(
        &mut self,
        qp: QpNum,
        slot: usize,
        index: usize,
    ) -> Result<(), VerbsError> {
        let sg = [Sge {
            lkey: self.recv.lkey,
            offset: self.recv_offset(slot, index),
            len: self.config.buffer_size as u32,
        }];
        let wr_id = WrId {
            kind: WrKind::Recv,
            slot,
            index,
        }
        .encode();
        self.provider
            .post_recv(qp, &[RecvWr { wr_id, sg: &sg }])
            .map_err(|e| e.error)
    }
}

impl<P: Provider> CpcHost for Host<P> {
    type Provider = P;

    fn provider(&mut self) -> &mut P {
        &mut self.provider
    }

    fn port(&self) -> u8 {
        self.config.port
    }

    fn pd(&self) -> Pd {
        self.pd
    }

    fn qp_init(&self) -> QpInit {
        QpInit {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            caps: QpCaps {
                max_send_wr: (self.config.send_buffers + self.config.rdma_depth) as u32,
                max_recv_wr: self.config.recv_buffers as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
            },
        }
    }

    fn qp_access(&self) -> Access {
        Access::REMOTE_WRITE | Access::REMOTE_READ
    }

    fn qp_tuning(&self) -> QpTuning {
        self.config.tuning
    }

    fn psn(&mut self) -> u32 {
        // xorshift64: PSNs need to differ, not to be secret.
        self.psn ^= self.psn << 13;
        self.psn ^= self.psn >> 7;
        self.psn ^= self.psn << 17;
        (self.psn >> 40) as u32
    }

    fn post_recvs(&mut self, qp: QpNum) -> Result<(), VerbsError> {
        let slot = self
            .free_slots
            .pop()
            .ok_or(VerbsError::Exhausted("queue pair buffer slots"))?;
        for index in 0..self.config.recv_buffers {
            if let Err(e) = self.post_recv(qp, slot, index) {
                self.free_slots.push(slot);
                return Err(e);
            }
        }
        self.qps.insert(
            qp,
            QpLink {
                slot,
                peer: None,
                link: None,
                held: VecDeque::new(),
                sends_out: 0,
                send_first: 0,
                rdma: VecDeque::new(),
                rdma_requests: 0,
                rdma_next: 0,
                closing: false,
            },
        );
        Ok(())
    }

    fn connected(&mut self, peer: ProcName, qp: QpNum) {
        self.events.push_back(HostEvent::Connected(peer, qp));
    }

    fn connect_failed(&mut self, peer: ProcName, why: ConnectFailure) {
        self.events.push_back(HostEvent::Failed(peer, why));
    }

    fn disconnected(&mut self, _peer: ProcName, qp: QpNum) {
        // The CPC destroys it too; what ran over it goes with it.
        self.destroy_qp(qp);
    }

    fn destroy_qp(&mut self, qp: QpNum) {
        let _ = self.provider.destroy_qp(qp);
        if let Some(q) = self.qps.remove(&qp) {
            self.free_slots.push(q.slot);
            if let Some(link) = q.link {
                self.events.push_back(HostEvent::LinkGone(link));
            }
        }
    }

    fn send_message(&mut self, peer: ProcName, message: &[u8]) {
        self.channel.send(peer, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_request_ids_round_trip() {
        for id in [
            WrId {
                kind: WrKind::Send,
                slot: 0,
                index: 0,
            },
            WrId {
                kind: WrKind::Recv,
                slot: 1023,
                index: 77,
            },
            WrId {
                kind: WrKind::Rdma,
                slot: 5,
                index: u32::MAX as usize,
            },
        ] {
            assert_eq!(WrId::decode(id.encode()), id);
        }
    }
}
