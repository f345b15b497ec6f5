//! The soft fabric's state: its devices, what each context holds on them,
//! and the transport that carries out send work requests.
//!
//! A send request at the head of a queue pair in `Rts` is tried whenever
//! the fabric is called. It finds its responder by the address and queue
//! pair number the requester was given in `Rtr`, and the responder must
//! name the requester the same way and expect the PSN the requester sends
//! with: otherwise no acknowledgement comes, and the request goes again
//! after the ACK timeout, `retry_cnt` times, then fails. A send that finds
//! no receive posted goes again after the responder's RNR timer,
//! `rnr_retry` times. Requests of one queue pair run in order; one that
//! waits holds back those behind it.

use std::collections::{BTreeMap, VecDeque};

use btl_core::time::Instant;

use crate::provider::{
    Access, DeviceAttr, LentMemory, LinkLayer, Pd, PortAddr, PortAttr, PortState, QpNum, QpState,
    RNR_RETRY_FOREVER, SendOp, WcOpcode, WcStatus, WorkCompletion,
};

use super::ContextId;
use super::cq::CompletionQueue;
use super::mr::{Refused, Regions};
use super::qp::{PSN_MASK, QueuePair, RecvReq, SendReq, Wait, packets};

/// A queue pair's place in the fabric: its device and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QpKey {
    pub(crate) dev: usize,
    pub(crate) qpn: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct SharedQueue {
    pub(crate) ctx: ContextId,
    pub(crate) pd: Pd,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) queue: VecDeque<RecvReq>,
}

/// One device and everything its contexts hold on it.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) attr: DeviceAttr,
    pub(crate) ports: Vec<PortAttr>,
    pub(crate) pds: BTreeMap<u32, ContextId>,
    pub(crate) cqs: BTreeMap<u32, (ContextId, CompletionQueue)>,
    pub(crate) srqs: BTreeMap<u32, SharedQueue>,
    pub(crate) qps: BTreeMap<u32, QueuePair>,
    pub(crate) regions: Regions,
    /// Next protection domain, completion queue and shared queue number.
    pub(crate) next_id: u32,
    pub(crate) next_qpn: u32,
}

impl Device {
    pub(crate) fn new(attr: DeviceAttr, ports: Vec<PortAttr>, first_qpn: u32) -> Self {
        Device {
            attr,
            ports,
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            regions: Regions::default(),
            next_id: 1,
            next_qpn: first_qpn,
        }
    }

    pub(crate) fn port(&self, port: u8) -> Option<&PortAttr> {
        self.ports.get(usize::from(port).checked_sub(1)?)
    }

    pub(crate) fn take_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// Whether `addr` names port `port` of this device.
    fn answers_to(&self, port: u8, addr: &PortAddr) -> bool {
        let Some(p) = self.port(port) else {
            return false;
        };
        match p.link_layer {
            LinkLayer::InfiniBand => p.lid == addr.lid && addr.gid.is_none_or(|g| g == p.gid),
            LinkLayer::Ethernet => addr.gid == Some(p.gid),
        }
    }
}

/// What trying a send request came to.
enum Outcome {
    /// It was carried out; the responder's receive completed if it took
    /// one.
    Done {
        byte_len: u32,
        responder_wc: Option<(QpKey, WorkCompletion)>,
    },
    /// No acknowledgement: the responder is missing, not connected to this
    /// queue pair, or out of step.
    NoResponse,
    /// The responder had no receive posted.
    NotReady { timer: btl_core::time::Duration },
    /// It failed with `status`; the responder's queue pair fails too if
    /// given, after its receive completes with the given completion.
    Failed {
        status: WcStatus,
        responder: Option<(QpKey, Option<WorkCompletion>)>,
    },
    /// It needs lent memory whose owner is not serving the device now: it
    /// waits, at the head of its queue, for the owner's next
    /// [`serve`](Fabric::serve).
    AwaitMemory,
}

/// The lent memory of one context, while that context serves the device.
pub(crate) struct View<'a> {
    pub(crate) dev: usize,
    pub(crate) ctx: ContextId,
    pub(crate) memory: &'a mut dyn LentMemory,
}

/// The lent memory of `owner` on device `dev`, if `view` is it.
fn lender<'v>(
    view: &'v mut Option<View<'_>>,
    dev: usize,
    owner: ContextId,
) -> Option<&'v mut dyn LentMemory> {
    match view {
        Some(v) if v.dev == dev && v.ctx == owner => Some(&mut *v.memory),
        _ => None,
    }
}

/// What a fabric has seen happen, for tests to check that a path ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Sends and writes with immediate data that found no receive posted.
    pub rnr_naks: u64,
    /// Tries that got no acknowledgement (the responder missing or out of
    /// step).
    pub unanswered: u64,
    /// RDMA operations the responder refused (key, range, access).
    pub remote_access_errors: u64,
    /// Work requests completed with a flush status.
    pub flushed: u64,
    /// Completion queues that overran.
    pub cq_overruns: u64,
    /// RDMA writes carried out (with or without immediate data).
    pub rdma_writes: u64,
    /// RDMA reads carried out.
    pub rdma_reads: u64,
}

/// Every device of a soft fabric and its clock.
#[derive(Debug)]
pub(crate) struct Fabric {
    pub(crate) now: Instant,
    pub(crate) counters: Counters,
    pub(crate) devices: Vec<Device>,
    pub(crate) next_ctx: u32,
    /// Bytes on their way, reused from one request to the next.
    scratch: Vec<u8>,
    /// The queue pairs one pass tries, reused.
    ready: Vec<QpKey>,
}

impl Fabric {
    pub(crate) fn new() -> Self {
        Fabric {
            now: Instant::ZERO,
            counters: Counters::default(),
            devices: Vec::new(),
            next_ctx: 1,
            scratch: Vec::new(),
            ready: Vec::new(),
        }
    }

    pub(crate) fn qp(&self, key: QpKey) -> Option<&QueuePair> {
        self.devices.get(key.dev)?.qps.get(&key.qpn)
    }

    pub(crate) fn qp_mut(&mut self, key: QpKey) -> Option<&mut QueuePair> {
        self.devices.get_mut(key.dev)?.qps.get_mut(&key.qpn)
    }

    /// Adds a completion to completion queue `cq` of device `dev`. A full
    /// queue overruns, and every queue pair on it fails.
    pub(crate) fn complete(&mut self, dev: usize, cq: u32, wc: WorkCompletion) {
        let Some((_, queue)) = self.devices[dev].cqs.get_mut(&cq) else {
            return;
        };
        if wc.status == WcStatus::Flushed {
            self.counters.flushed += 1;
        }
        let was_overrun = queue.is_overrun();
        if queue.push(wc) || was_overrun {
            return;
        }
        self.counters.cq_overruns += 1;
        self.fail_queue_pairs_on(dev, cq);
    }

    /// Every queue pair of device `dev` that uses completion queue `cq`
    /// goes to `Err`: the queue overran.
    pub(crate) fn fail_queue_pairs_on(&mut self, dev: usize, cq: u32) {
        let on_it: Vec<u32> = self.devices[dev]
            .qps
            .values()
            .filter(|q| {
                q.state != QpState::Err && (q.init.send_cq.0 == cq || q.init.recv_cq.0 == cq)
            })
            .map(|q| q.num.0)
            .collect();
        for qpn in on_it {
            self.fail(QpKey { dev, qpn });
        }
    }

    /// Moves a queue pair to `Err`: every request it holds completes
    /// flushed.
    pub(crate) fn fail(&mut self, key: QpKey) {
        let Some(q) = self.qp_mut(key) else {
            return;
        };
        q.state = QpState::Err;
        let (send_cq, recv_cq) = (q.init.send_cq.0, q.init.recv_cq.0);
        let flushed: Vec<(bool, WorkCompletion)> = q.flush().collect();
        for (send, wc) in flushed {
            self.complete(key.dev, if send { send_cq } else { recv_cq }, wc);
        }
    }

    /// The earliest instant a waiting request is tried again.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.devices
            .iter()
            .flat_map(|d| d.qps.values())
            .filter(|q| q.state == QpState::Rts && !q.sq.is_empty())
            .filter_map(|q| match q.wait? {
                Wait::Ack { until, .. } => until,
                Wait::Rnr { until, .. } => Some(until),
            })
            .min()
    }

    /// Tries the request at the head of every sending queue pair until
    /// none moves.
    pub(crate) fn pump(&mut self) {
        self.pump_with(&mut None);
    }

    /// [`pump`](Self::pump) while context `ctx` of device `dev` lends its
    /// memory: what waited for it moves now.
    pub(crate) fn serve(&mut self, dev: usize, ctx: ContextId, memory: &mut dyn LentMemory) {
        self.pump_with(&mut Some(View { dev, ctx, memory }));
    }

    fn pump_with(&mut self, view: &mut Option<View<'_>>) {
        let mut ready = std::mem::take(&mut self.ready);
        loop {
            ready.clear();
            for (dev, d) in self.devices.iter().enumerate() {
                ready.extend(
                    d.qps
                        .values()
                        .filter(|q| q.state == QpState::Rts && !q.sq.is_empty())
                        .map(|q| QpKey { dev, qpn: q.num.0 }),
                );
            }
            let mut moved = false;
            for &key in &ready {
                moved |= self.step(key, view);
            }
            if !moved {
                break;
            }
        }
        self.ready = ready;
    }

    /// Tries the head request of `key`; whether it ended.
    fn step(&mut self, key: QpKey, view: &mut Option<View<'_>>) -> bool {
        let now = self.now;
        let Some(q) = self.qp(key) else {
            return false;
        };
        if q.state != QpState::Rts {
            return false;
        }
        let Some(req) = q.sq.front().copied() else {
            return false;
        };
        match q.wait {
            Some(w) if !w.is_over(now) => return false,
            // The last try's acknowledgement never came.
            Some(Wait::Ack { left: 0, .. }) => {
                self.fail_head(key, &req, WcStatus::RetryExceeded);
                return true;
            }
            _ => {}
        }
        match self.attempt(key, &req, view) {
            Outcome::Done {
                byte_len,
                responder_wc,
            } => {
                match req.op {
                    SendOp::RdmaWrite(_) | SendOp::RdmaWriteWithImm(..) => {
                        self.counters.rdma_writes += 1;
                    }
                    SendOp::RdmaRead(_) => self.counters.rdma_reads += 1,
                    SendOp::Send | SendOp::SendWithImm(_) => {}
                }
                let q = self.qp_mut(key).expect("present above");
                q.sq.pop_front();
                q.wait = None;
                let send_cq = q.init.send_cq.0;
                let qp = q.num;
                if req.signaled {
                    let wc = WorkCompletion {
                        wr_id: req.wr_id,
                        status: WcStatus::Success,
                        opcode: req.opcode(),
                        byte_len,
                        imm: None,
                        qp,
                    };
                    self.complete(key.dev, send_cq, wc);
                }
                if let Some((rkey, wc)) = responder_wc
                    && let Some(r) = self.qp(rkey)
                {
                    let recv_cq = r.init.recv_cq.0;
                    self.complete(rkey.dev, recv_cq, wc);
                }
                true
            }
            Outcome::NoResponse => {
                self.counters.unanswered += 1;
                self.wait_ack(key)
            }
            Outcome::NotReady { timer } => {
                self.counters.rnr_naks += 1;
                self.wait_rnr(key, timer)
            }
            Outcome::AwaitMemory => false,
            Outcome::Failed { status, responder } => {
                if status == WcStatus::RemoteAccess {
                    self.counters.remote_access_errors += 1;
                }
                if let Some((rkey, wc)) = responder {
                    if let Some(wc) = wc
                        && let Some(r) = self.qp(rkey)
                    {
                        let recv_cq = r.init.recv_cq.0;
                        self.complete(rkey.dev, recv_cq, wc);
                    }
                    self.fail(rkey);
                }
                self.fail_head(key, &req, status);
                true
            }
        }
    }

    /// The head request fails with `status`, and its queue pair with it.
    fn fail_head(&mut self, key: QpKey, req: &SendReq, status: WcStatus) {
        let Some(q) = self.qp_mut(key) else {
            return;
        };
        q.sq.pop_front();
        let wc = WorkCompletion {
            wr_id: req.wr_id,
            status,
            opcode: req.opcode(),
            byte_len: 0,
            imm: None,
            qp: q.num,
        };
        let send_cq = q.init.send_cq.0;
        self.complete(key.dev, send_cq, wc);
        self.fail(key);
    }

    /// No acknowledgement came: the head request waits for its ACK
    /// timeout before it goes again (`retry_cnt` times; the last wait ends
    /// in [`WcStatus::RetryExceeded`], see [`step`](Self::step)).
    fn wait_ack(&mut self, key: QpKey) -> bool {
        let now = self.now;
        let Some(q) = self.qp_mut(key) else {
            return false;
        };
        let Some(rts) = q.rts else {
            return false;
        };
        let left = match q.wait {
            // The retry just made was one of them.
            Some(Wait::Ack { left, .. }) => left.saturating_sub(1),
            _ => rts.retry_cnt,
        };
        q.wait = Some(Wait::Ack {
            until: rts.timeout.duration().map(|t| now + t),
            left,
        });
        false
    }

    /// The responder had no receive: the head request goes again after the
    /// RNR timer, or fails at once when the NAK was the last its
    /// `rnr_retry` allows. Whether it ended.
    fn wait_rnr(&mut self, key: QpKey, timer: btl_core::time::Duration) -> bool {
        let now = self.now;
        let Some(q) = self.qp_mut(key) else {
            return false;
        };
        let Some(rts) = q.rts else {
            return false;
        };
        let left = match q.wait {
            Some(Wait::Rnr { left: None, .. }) => None,
            // The retry just made was one of them.
            Some(Wait::Rnr { left: Some(l), .. }) => Some(l.saturating_sub(1)),
            _ => (rts.rnr_retry < RNR_RETRY_FOREVER).then_some(rts.rnr_retry),
        };
        if left == Some(0) {
            let req = q.sq.front().copied().expect("a head request");
            self.fail_head(key, &req, WcStatus::RnrRetryExceeded);
            return true;
        }
        q.wait = Some(Wait::Rnr {
            until: now + timer,
            left,
        });
        false
    }

    /// The responder of requester `key`: the queue pair its `Rtr`
    /// attributes name, if that one is connected back to it, takes
    /// packets, and expects the PSN it sends with.
    fn responder(&self, key: QpKey) -> Option<QpKey> {
        let q = self.qp(key)?;
        let rtr = q.rtr?;
        let mine = self.devices[key.dev].port(q.port)?;
        if mine.state != PortState::Active {
            return None;
        }
        let (dev, d) = self
            .devices
            .iter()
            .enumerate()
            .find(|(_, d)| (1..=d.attr.ports).any(|p| d.answers_to(p, &rtr.dest)))?;
        let r = d.qps.get(&rtr.dest_qp.0)?;
        let theirs = d.port(r.port)?;
        let r_rtr = r.rtr?;
        let connected = r.receives()
            && theirs.state == PortState::Active
            && theirs.link_layer == mine.link_layer
            && d.answers_to(r.port, &rtr.dest)
            && r_rtr.dest_qp == q.num
            && self.devices[key.dev].answers_to(q.port, &r_rtr.dest)
            && r.rq_psn == q.sq_psn
            && rtr.path_mtu <= r_rtr.path_mtu;
        connected.then_some(QpKey { dev, qpn: r.num.0 })
    }

    /// Tries `req`, the head request of `key`, and carries it out if it
    /// can be.
    fn attempt(&mut self, key: QpKey, req: &SendReq, view: &mut Option<View<'_>>) -> Outcome {
        let q = self.qp(key).expect("checked by the caller");
        let (pd, port, path_mtu) = (q.pd, q.port, q.rtr.map_or(256, |r| r.path_mtu.bytes()));
        let len = req.sg.bytes();
        let local_need = match req.op {
            SendOp::RdmaRead(_) => Access::LOCAL_WRITE,
            _ => Access::empty(),
        };
        let d = &self.devices[key.dev];
        if d.regions
            .check_list(req.sg.as_slice(), pd, local_need)
            .is_err()
        {
            return Outcome::Failed {
                status: WcStatus::LocalProtection,
                responder: None,
            };
        }
        if d.port(port).is_none_or(|p| len > u64::from(p.max_msg_size)) {
            return Outcome::Failed {
                status: WcStatus::LocalLength,
                responder: None,
            };
        }
        let Some(rkey) = self.responder(key) else {
            return Outcome::NoResponse;
        };
        let r = self.qp(rkey).expect("found above");
        let r_access = r.access;
        let r_pd = r.pd;
        let r_srq = r.init.srq;
        let r_timer = r.rtr.map(|a| a.min_rnr_timer.duration());
        let r_reads = r.rtr.is_some_and(|a| a.max_dest_rd_atomic > 0);
        let rq_empty = match r_srq {
            Some(s) => self.devices[rkey.dev]
                .srqs
                .get(&s.0)
                .is_none_or(|s| s.queue.is_empty()),
            None => r.rq.is_empty(),
        };
        let remote_fault = |status| Outcome::Failed {
            status,
            responder: Some((rkey, None)),
        };
        let local_fault = |status| Outcome::Failed {
            status,
            responder: None,
        };
        let check_remote = |need: Access, at: &crate::provider::RemoteAddr| {
            if !r_access.contains(need) {
                return Err(Refused::Access);
            }
            self.devices[rkey.dev]
                .regions
                .check(at.rkey.0, r_pd, at.offset, len, need)
        };
        // What the request needs of the responder, checked before anything
        // moves.
        let (takes_receive, imm) = match req.op {
            SendOp::Send => (true, None),
            SendOp::SendWithImm(imm) => (true, Some(imm)),
            SendOp::RdmaWrite(at) => {
                if check_remote(Access::REMOTE_WRITE, &at).is_err() {
                    return remote_fault(WcStatus::RemoteAccess);
                }
                (false, None)
            }
            SendOp::RdmaWriteWithImm(at, imm) => {
                if check_remote(Access::REMOTE_WRITE, &at).is_err() {
                    return remote_fault(WcStatus::RemoteAccess);
                }
                (true, Some(imm))
            }
            SendOp::RdmaRead(at) => {
                if !r_reads {
                    return remote_fault(WcStatus::RemoteInvalidRequest);
                }
                if check_remote(Access::REMOTE_READ, &at).is_err() {
                    return remote_fault(WcStatus::RemoteAccess);
                }
                (false, None)
            }
        };
        if takes_receive && rq_empty {
            return Outcome::NotReady {
                timer: r_timer.unwrap_or_default(),
            };
        }
        // Lent memory is reached through its owner only: the bytes wait at
        // the head of the queue for the owner of the memory they come from,
        // then for the owner of the memory they go to.
        let ((src_dev, src_owner), (dst_dev, dst_owner)) = self.lent_owners(key, rkey, req);
        let serving = |view: &Option<View<'_>>, dev: usize, owner: Option<ContextId>| {
            owner.is_none_or(|o| view.as_ref().is_some_and(|v| v.dev == dev && v.ctx == o))
        };
        let staged = self.qp_mut(key).and_then(|q| q.staged.take());
        if staged.is_none() && !serving(view, src_dev, src_owner) {
            return Outcome::AwaitMemory;
        }
        let data = match staged {
            Some(bytes) => bytes,
            None => {
                let mut bytes = std::mem::take(&mut self.scratch);
                bytes.clear();
                let from = src_owner.and_then(|o| lender(view, src_dev, o));
                if !self.take_source(key, rkey, req, from, &mut bytes) {
                    self.scratch = bytes;
                    // Its owner no longer lends it.
                    return match req.op {
                        SendOp::RdmaRead(_) => remote_fault(WcStatus::RemoteAccess),
                        _ => local_fault(WcStatus::LocalProtection),
                    };
                }
                bytes
            }
        };
        if !serving(view, dst_dev, dst_owner) {
            if let Some(q) = self.qp_mut(key) {
                q.staged = Some(data);
            }
            return Outcome::AwaitMemory;
        }
        // The receive it takes, if any.
        let receive = if takes_receive {
            let taken = match r_srq {
                Some(s) => self.devices[rkey.dev]
                    .srqs
                    .get_mut(&s.0)
                    .and_then(|s| s.queue.pop_front()),
                None => self.qp_mut(rkey).and_then(|r| r.rq.pop_front()),
            };
            let Some(taken) = taken else {
                if let Some(q) = self.qp_mut(key) {
                    q.staged = Some(data);
                }
                return Outcome::NotReady {
                    timer: r_timer.unwrap_or_default(),
                };
            };
            Some(taken)
        } else {
            None
        };
        let recv_wc = |wr_id, status, opcode, byte_len| WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
            qp: QpNum(rkey.qpn),
        };
        // A message must fit its receive, and the receive's own entries
        // must be good in the responder's domain.
        if let Some(rcv) = &receive {
            let regions = &self.devices[rkey.dev].regions;
            if matches!(req.op, SendOp::Send | SendOp::SendWithImm(_)) {
                if len > rcv.sg.bytes() {
                    let wc = recv_wc(rcv.wr_id, WcStatus::LocalLength, WcOpcode::Recv, 0);
                    return Outcome::Failed {
                        status: WcStatus::RemoteInvalidRequest,
                        responder: Some((rkey, Some(wc))),
                    };
                }
                // A receive into lent memory is refused: it would wait for
                // its owner with the message already taken.
                let lent = regions.lent_owner(rcv.sg.as_slice()).is_some();
                if lent
                    || regions
                        .check_list(rcv.sg.as_slice(), r_pd, Access::LOCAL_WRITE)
                        .is_err()
                {
                    let wc = recv_wc(rcv.wr_id, WcStatus::LocalProtection, WcOpcode::Recv, 0);
                    return Outcome::Failed {
                        status: WcStatus::RemoteOperation,
                        responder: Some((rkey, Some(wc))),
                    };
                }
            }
        }
        // Everything checked: the bytes land.
        let to = dst_owner.and_then(|o| lender(view, dst_dev, o));
        let placed = match req.op {
            SendOp::Send | SendOp::SendWithImm(_) => receive.as_ref().is_none_or(|rcv| {
                self.devices[rkey.dev]
                    .regions
                    .scatter(rcv.sg.as_slice(), None, &data)
            }),
            SendOp::RdmaWrite(at) | SendOp::RdmaWriteWithImm(at, _) => self.devices[rkey.dev]
                .regions
                .write(at.rkey.0, at.offset, to, &data),
            SendOp::RdmaRead(_) => {
                self.devices[key.dev]
                    .regions
                    .scatter(req.sg.as_slice(), to, &data)
            }
        };
        self.scratch = data;
        if !placed {
            // The owner no longer lends the memory: it was deregistered
            // while the bytes were on their way.
            return match req.op {
                SendOp::RdmaRead(_) => local_fault(WcStatus::LocalProtection),
                _ => remote_fault(WcStatus::RemoteAccess),
            };
        }
        let used = packets(len, path_mtu);
        if let Some(q) = self.qp_mut(key) {
            q.sq_psn = q.sq_psn.wrapping_add(used) & PSN_MASK;
        }
        if let Some(r) = self.qp_mut(rkey) {
            r.rq_psn = r.rq_psn.wrapping_add(used) & PSN_MASK;
        }
        let byte_len = len as u32;
        let responder_wc = receive.map(|rcv| {
            let opcode = match req.op {
                SendOp::RdmaWriteWithImm(..) => WcOpcode::RecvRdmaWithImm,
                _ => WcOpcode::Recv,
            };
            (
                rkey,
                recv_wc(rcv.wr_id, WcStatus::Success, opcode, byte_len),
            )
        });
        Outcome::Done {
            byte_len: if matches!(req.op, SendOp::RdmaRead(_)) {
                byte_len
            } else {
                0
            },
            responder_wc,
        }
    }

    /// Where `req`'s bytes come from and go to, as (device, owner of lent
    /// memory there, if any): a send's and a write's from the requester
    /// `key`, a read's from the responder `rkey`. A receive is never lent
    /// memory (the responder's receive checks refuse it).
    fn lent_owners(
        &self,
        key: QpKey,
        rkey: QpKey,
        req: &SendReq,
    ) -> ((usize, Option<ContextId>), (usize, Option<ContextId>)) {
        let local = self.devices[key.dev].regions.lent_owner(req.sg.as_slice());
        match req.op {
            SendOp::Send | SendOp::SendWithImm(_) => ((key.dev, local), (rkey.dev, None)),
            SendOp::RdmaWrite(at) | SendOp::RdmaWriteWithImm(at, _) => (
                (key.dev, local),
                (
                    rkey.dev,
                    self.devices[rkey.dev].regions.lent_owner_of(at.rkey.0),
                ),
            ),
            SendOp::RdmaRead(at) => (
                (
                    rkey.dev,
                    self.devices[rkey.dev].regions.lent_owner_of(at.rkey.0),
                ),
                (key.dev, local),
            ),
        }
    }

    /// Appends the bytes `req` moves to `out`, lent ones through `lender`;
    /// `false` if they were out of reach.
    fn take_source(
        &mut self,
        key: QpKey,
        rkey: QpKey,
        req: &SendReq,
        lender: Option<&mut dyn LentMemory>,
        out: &mut Vec<u8>,
    ) -> bool {
        match req.op {
            SendOp::RdmaRead(at) => {
                let len = req.sg.bytes() as usize;
                self.devices[rkey.dev]
                    .regions
                    .read(at.rkey.0, at.offset, len, lender, out)
            }
            _ => self.devices[key.dev]
                .regions
                .gather(req.sg.as_slice(), lender, out),
        }
    }

    /// Removes everything context `ctx` holds: its queue pairs go without
    /// completions, its regions' keys die.
    pub(crate) fn close_context(&mut self, dev: usize, ctx: ContextId) {
        let Some(d) = self.devices.get_mut(dev) else {
            return;
        };
        d.qps.retain(|_, q| q.ctx != ctx);
        d.srqs.retain(|_, s| s.ctx != ctx);
        d.cqs.retain(|_, (c, _)| *c != ctx);
        d.pds.retain(|_, c| *c != ctx);
        d.regions.drop_context(ctx);
    }
}
