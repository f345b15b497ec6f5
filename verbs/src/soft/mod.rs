//! A software HCA: reliable-connected queue pairs with the semantics of
//! real ones, in memory, for tests and simulations.
//!
//! A [`SoftFabric`] holds devices; each process (each BTL under test)
//! opens a [`SoftHca`] context on one, as `ibv_open_device` would, and
//! what the context allocates goes with it when it is dropped, as when a
//! process dies. Two contexts on one device are two processes on one
//! host.
//!
//! What it keeps of reliable-connected semantics:
//!
//! - Messages, RDMA writes and reads of one queue pair are carried out in
//!   order, each exactly once, and a request that waits holds back those
//!   behind it.
//! - A send or a write with immediate data that finds no receive posted is
//!   tried again after the responder's RNR timer, `rnr_retry` times (7:
//!   without end), then fails with [`WcStatus::RnrRetryExceeded`] and the
//!   requester goes to `Err`.
//! - A responder that is missing, not in `Rtr` or `Rts`, connected to
//!   another queue pair, behind a port that is down, addressed wrongly
//!   (LID on InfiniBand, GID on RoCE), expecting another PSN or running a
//!   smaller path MTU sends no acknowledgement: the request goes again
//!   after the ACK timeout, `retry_cnt` times, then fails with
//!   [`WcStatus::RetryExceeded`].
//! - Every RDMA operation's key, range and access are checked against the
//!   responder's region and queue pair; a refusal completes with
//!   [`WcStatus::RemoteAccess`] and both queue pairs go to `Err`.
//! - A message longer than its receive completes the receive with
//!   [`WcStatus::LocalLength`] and the send with
//!   [`WcStatus::RemoteInvalidRequest`]; both queue pairs go to `Err`.
//! - A local scatter/gather entry outside its region or domain fails with
//!   [`WcStatus::LocalProtection`].
//! - A queue pair in `Err` completes every outstanding request, and every
//!   request posted to it, with [`WcStatus::Flushed`]; unsignaled sends
//!   too.
//! - A completion queue that is full when a completion comes overruns:
//!   polling it fails with [`VerbsError::CqOverrun`] from then on, and the
//!   queue pairs on it go to `Err`.
//!
//! Time is the fabric's own: it moves only by [`SoftFabric::advance`] or
//! [`SoftFabric::set_now`], so a test decides when a timer fires and every
//! run is the same. Work is carried out during calls into the fabric, as
//! soon as it can be, without waiting for the responder's process to call
//! anything: RDMA writes and reads land while the target is busy
//! elsewhere, as on hardware.

mod cq;
mod fabric;
mod mr;
mod qp;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use btl_core::time::{Duration, Instant};

use crate::provider::{
    Access, Cq, DeviceAttr, Gid, LentMemory, LentRegion, LinkLayer, Lkey, Mr, Mtu, Pd, PortAttr,
    PortState, PostError, Provider, QpInit, QpNum, QpState, RecvWr, SendWr, Srq, Transition,
    VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use cq::CompletionQueue;
pub use fabric::Counters;
use fabric::{Device, Fabric, QpKey, SharedQueue};
use mr::{Memory, Region};

/// What touching lent memory through the provider answers: it is its
/// owner's.
const LENT: VerbsError = VerbsError::Invalid("lent memory is its owner's");
use qp::{MAX_SGE, QueuePair, RecvReq, SendReq};

/// Most work requests one queue holds on a soft device.
pub const MAX_QP_WR: u32 = 16_384;
/// Most entries of one soft completion queue.
pub const MAX_CQE: u32 = 1 << 20;
/// Most memory regions of one soft device.
pub const MAX_MR: usize = 1 << 16;
/// Most queue pairs of one soft device.
pub const MAX_QP: usize = 1 << 16;
/// The largest message of one work request (2 GiB, as InfiniBand's).
pub const MAX_MSG_SIZE: u32 = 1 << 31;

/// A process's context, unique in its fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ContextId(pub(crate) u32);

/// A device to add to a fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Its name, unique in the fabric.
    pub name: String,
    /// InfiniBand (peers addressed by LID) or Ethernet (RoCE, by GID).
    pub link_layer: LinkLayer,
    /// Its ports' active MTU.
    pub mtu: Mtu,
}

impl DeviceSpec {
    /// An InfiniBand device with a 4 KiB MTU.
    pub fn infiniband(name: &str) -> Self {
        DeviceSpec {
            name: name.to_owned(),
            link_layer: LinkLayer::InfiniBand,
            mtu: Mtu::M4096,
        }
    }

    /// A RoCE device with a 1 KiB MTU (what a 1500-byte Ethernet MTU
    /// allows).
    pub fn roce(name: &str) -> Self {
        DeviceSpec {
            name: name.to_owned(),
            link_layer: LinkLayer::Ethernet,
            mtu: Mtu::M1024,
        }
    }
}

/// A fabric of soft devices; clones share it.
#[derive(Debug, Clone)]
pub struct SoftFabric {
    inner: Arc<Mutex<Fabric>>,
}

impl Default for SoftFabric {
    fn default() -> Self {
        SoftFabric::new()
    }
}

impl SoftFabric {
    /// An empty fabric at instant zero.
    pub fn new() -> Self {
        SoftFabric {
            inner: Arc::new(Mutex::new(Fabric::new())),
        }
    }

    /// A fabric with one InfiniBand device named `name`.
    pub fn with_device(name: &str) -> Self {
        let fabric = SoftFabric::new();
        fabric
            .add_device(DeviceSpec::infiniband(name))
            .expect("the first device's name is free");
        fabric
    }

    fn lock(&self) -> MutexGuard<'_, Fabric> {
        // A panic while holding the lock leaves plain data behind: keep on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a device with one port, active. Its LID and GID are unique in
    /// the fabric.
    pub fn add_device(&self, spec: DeviceSpec) -> Result<(), VerbsError> {
        let mut f = self.lock();
        if f.devices.iter().any(|d| d.attr.name == spec.name) {
            return Err(VerbsError::Invalid("a device of that name exists"));
        }
        let index = f.devices.len() as u16 + 1;
        let guid = 0x0002_c903_0000_0000 | u64::from(index);
        let mut gid = [0u8; 16];
        match spec.link_layer {
            LinkLayer::InfiniBand => {
                gid[..2].copy_from_slice(&[0xfe, 0x80]);
                gid[8..].copy_from_slice(&guid.to_be_bytes());
            }
            LinkLayer::Ethernet => {
                // ::ffff:10.0.0.n, as RoCE v2 over IPv4.
                gid[10..12].copy_from_slice(&[0xff, 0xff]);
                gid[12..].copy_from_slice(&[10, 0, (index >> 8) as u8, index as u8]);
            }
        }
        let port = PortAttr {
            state: PortState::Active,
            link_layer: spec.link_layer,
            lid: match spec.link_layer {
                LinkLayer::InfiniBand => index,
                LinkLayer::Ethernet => 0,
            },
            gid: Gid(gid),
            active_mtu: spec.mtu,
            max_msg_size: MAX_MSG_SIZE,
        };
        let attr = DeviceAttr {
            name: spec.name,
            guid,
            ports: 1,
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE as u32,
            max_cqe: MAX_CQE,
        };
        // Queue pair numbers differ from device to device, as they would.
        let first_qpn = 0x100 * u32::from(index) + 0x11;
        f.devices.push(Device::new(attr, vec![port], first_qpn));
        Ok(())
    }

    /// The fabric's devices.
    pub fn devices(&self) -> Vec<DeviceAttr> {
        self.lock().devices.iter().map(|d| d.attr.clone()).collect()
    }

    /// Opens a context on device `name`: a process's view of it.
    pub fn open(&self, name: &str) -> Result<SoftHca, VerbsError> {
        let mut f = self.lock();
        let dev = f
            .devices
            .iter()
            .position(|d| d.attr.name == name)
            .ok_or_else(|| VerbsError::NoDevice(format!("no soft device named {name}")))?;
        let ctx = ContextId(f.next_ctx);
        f.next_ctx += 1;
        Ok(SoftHca {
            fabric: self.clone(),
            dev,
            ctx,
        })
    }

    /// The fabric's clock.
    pub fn now(&self) -> Instant {
        self.lock().now
    }

    /// Moves the clock on by `by`, and carries out what was waiting for
    /// it.
    pub fn advance(&self, by: Duration) {
        let mut f = self.lock();
        f.now += by;
        f.pump();
    }

    /// Moves the clock to `now` (never back), and carries out what was
    /// waiting for it.
    pub fn set_now(&self, now: Instant) {
        let mut f = self.lock();
        if now > f.now {
            f.now = now;
        }
        f.pump();
    }

    /// When a request waiting for a timer (ACK timeout, RNR timer) is tried
    /// next, if any is.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().next_deadline()
    }

    /// Sets a port's state: a port that is not active answers nothing and
    /// sends nothing.
    pub fn set_port_state(
        &self,
        device: &str,
        port: u8,
        state: PortState,
    ) -> Result<(), VerbsError> {
        let mut f = self.lock();
        let p = f
            .devices
            .iter_mut()
            .find(|d| d.attr.name == device)
            .and_then(|d| d.ports.get_mut(usize::from(port).checked_sub(1)?))
            .ok_or(VerbsError::Unknown("port"))?;
        p.state = state;
        f.pump();
        Ok(())
    }

    /// What the fabric has seen happen so far.
    pub fn counters(&self) -> Counters {
        self.lock().counters
    }

    /// Overruns completion queue `cq` of `device` now, as one completion
    /// too many would: polling it fails from then on, and its queue pairs
    /// go to `Err`.
    pub fn overrun_cq(&self, device: &str, cq: Cq) -> Result<(), VerbsError> {
        let mut f = self.lock();
        let dev = f
            .devices
            .iter()
            .position(|d| d.attr.name == device)
            .ok_or(VerbsError::Unknown("device"))?;
        let (_, queue) = f.devices[dev]
            .cqs
            .get_mut(&cq.0)
            .ok_or(VerbsError::Unknown("completion queue"))?;
        if !queue.is_overrun() {
            queue.overrun();
            f.counters.cq_overruns += 1;
            f.fail_queue_pairs_on(dev, cq.0);
        }
        Ok(())
    }

    /// A fatal error on queue pair `qp` of `device`, as the hardware might
    /// report one: it goes to `Err`.
    pub fn fail_qp(&self, device: &str, qp: QpNum) -> Result<(), VerbsError> {
        let mut f = self.lock();
        let dev = f
            .devices
            .iter()
            .position(|d| d.attr.name == device)
            .ok_or(VerbsError::Unknown("device"))?;
        let key = QpKey { dev, qpn: qp.0 };
        if f.qp(key).is_none() {
            return Err(VerbsError::Unknown("queue pair"));
        }
        f.fail(key);
        Ok(())
    }
}

/// One process's context on a soft device: a [`Provider`].
#[derive(Debug)]
pub struct SoftHca {
    fabric: SoftFabric,
    dev: usize,
    ctx: ContextId,
}

impl Drop for SoftHca {
    fn drop(&mut self) {
        let (dev, ctx) = (self.dev, self.ctx);
        self.fabric.lock().close_context(dev, ctx);
    }
}

impl SoftHca {
    /// The fabric it is open on.
    pub fn fabric(&self) -> &SoftFabric {
        &self.fabric
    }

    /// Runs `f` on this context's device, after checking that `what` is
    /// one of this context's: the fabric's work is carried out after.
    fn on_device<R>(&self, f: impl FnOnce(&mut Fabric, usize, ContextId) -> R) -> R {
        let mut fabric = self.fabric.lock();
        let r = f(&mut fabric, self.dev, self.ctx);
        fabric.pump();
        r
    }

    /// Registers `memory` in `pd` with `access`, zero-based.
    fn register(&mut self, pd: Pd, access: Access, memory: Memory) -> Result<Mr, VerbsError> {
        access.check_region()?;
        let len = memory.len();
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_pd(d, ctx, pd)?;
            let region = Region {
                ctx,
                pd,
                access,
                memory,
            };
            let key = d.regions.register(region, MAX_MR)?;
            let (lkey, rkey) = mr::keys(key);
            Ok(Mr {
                lkey,
                rkey,
                len,
                base: 0,
            })
        })
    }

    fn own_pd(d: &Device, ctx: ContextId, pd: Pd) -> Result<(), VerbsError> {
        match d.pds.get(&pd.0) {
            Some(c) if *c == ctx => Ok(()),
            _ => Err(VerbsError::Unknown("protection domain")),
        }
    }

    fn own_cq(d: &Device, ctx: ContextId, cq: Cq) -> Result<(), VerbsError> {
        match d.cqs.get(&cq.0) {
            Some((c, _)) if *c == ctx => Ok(()),
            _ => Err(VerbsError::Unknown("completion queue")),
        }
    }

    fn own_qp(d: &Device, ctx: ContextId, qp: QpNum) -> Result<&QueuePair, VerbsError> {
        d.qps
            .get(&qp.0)
            .filter(|q| q.ctx == ctx)
            .ok_or(VerbsError::Unknown("queue pair"))
    }
}

impl Provider for SoftHca {
    fn device(&self) -> DeviceAttr {
        self.fabric.lock().devices[self.dev].attr.clone()
    }

    fn port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        self.fabric.lock().devices[self.dev]
            .port(port)
            .copied()
            .ok_or(VerbsError::Unknown("port"))
    }

    fn alloc_pd(&mut self) -> Result<Pd, VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            let id = d.take_id();
            d.pds.insert(id, ctx);
            Ok(Pd(id))
        })
    }

    fn dealloc_pd(&mut self, pd: Pd) -> Result<(), VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_pd(d, ctx, pd)?;
            let used = d.qps.values().any(|q| q.pd == pd)
                || d.srqs.values().any(|s| s.pd == pd)
                || d.regions.uses_pd(ctx, pd);
            if used {
                return Err(VerbsError::Busy("protection domain"));
            }
            d.pds.remove(&pd.0);
            Ok(())
        })
    }

    fn create_cq(&mut self, entries: u32) -> Result<Cq, VerbsError> {
        if entries == 0 || entries > MAX_CQE {
            return Err(VerbsError::Invalid("completion queue size"));
        }
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            let id = d.take_id();
            d.cqs
                .insert(id, (ctx, CompletionQueue::new(entries as usize)));
            Ok(Cq(id))
        })
    }

    fn destroy_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_cq(d, ctx, cq)?;
            if d.qps
                .values()
                .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
            {
                return Err(VerbsError::Busy("completion queue"));
            }
            d.cqs.remove(&cq.0);
            Ok(())
        })
    }

    fn create_srq(&mut self, pd: Pd, max_wr: u32, max_sge: u32) -> Result<Srq, VerbsError> {
        if max_wr == 0 || max_wr > MAX_QP_WR || max_sge as usize > MAX_SGE {
            return Err(VerbsError::Invalid("shared receive queue size"));
        }
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_pd(d, ctx, pd)?;
            let id = d.take_id();
            d.srqs.insert(
                id,
                SharedQueue {
                    ctx,
                    pd,
                    max_wr,
                    max_sge,
                    queue: VecDeque::with_capacity(max_wr as usize),
                },
            );
            Ok(Srq(id))
        })
    }

    fn destroy_srq(&mut self, srq: Srq) -> Result<(), VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            if d.srqs.get(&srq.0).is_none_or(|s| s.ctx != ctx) {
                return Err(VerbsError::Unknown("shared receive queue"));
            }
            if d.qps.values().any(|q| q.init.srq == Some(srq)) {
                return Err(VerbsError::Busy("shared receive queue"));
            }
            d.srqs.remove(&srq.0);
            Ok(())
        })
    }

    fn create_qp(&mut self, pd: Pd, init: &QpInit) -> Result<QpNum, VerbsError> {
        let caps = init.caps;
        if caps.max_send_wr == 0
            || caps.max_send_wr > MAX_QP_WR
            || caps.max_recv_wr > MAX_QP_WR
            || caps.max_send_sge as usize > MAX_SGE
            || caps.max_recv_sge as usize > MAX_SGE
        {
            return Err(VerbsError::Invalid("queue pair capabilities"));
        }
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_pd(d, ctx, pd)?;
            Self::own_cq(d, ctx, init.send_cq)?;
            Self::own_cq(d, ctx, init.recv_cq)?;
            if let Some(srq) = init.srq
                && d.srqs.get(&srq.0).is_none_or(|s| s.ctx != ctx)
            {
                return Err(VerbsError::Unknown("shared receive queue"));
            }
            if d.qps.len() >= MAX_QP {
                return Err(VerbsError::Exhausted("queue pairs"));
            }
            let num = loop {
                let n = d.next_qpn;
                d.next_qpn = (d.next_qpn + 1) & qp::PSN_MASK;
                if n > 1 && !d.qps.contains_key(&n) {
                    break QpNum(n);
                }
            };
            d.qps.insert(num.0, QueuePair::new(num, ctx, pd, *init));
            Ok(num)
        })
    }

    fn modify_qp(&mut self, qp: QpNum, to: &Transition) -> Result<(), VerbsError> {
        self.on_device(|f, dev, ctx| {
            let key = QpKey { dev, qpn: qp.0 };
            let d = &f.devices[dev];
            let from = Self::own_qp(d, ctx, qp)?.state;
            if !to.allowed_from(from) {
                return Err(VerbsError::BadTransition {
                    qp,
                    from,
                    to: to.target(),
                });
            }
            match *to {
                Transition::Init(a) => {
                    if d.port(a.port).is_none() {
                        return Err(VerbsError::Unknown("port"));
                    }
                    if a.access.contains(Access::LOCAL_WRITE) {
                        return Err(VerbsError::Invalid("a queue pair's access is remote only"));
                    }
                }
                Transition::Rtr(a) => {
                    let port = Self::own_qp(d, ctx, qp)?.port;
                    if d.port(port).is_none_or(|p| a.path_mtu > p.active_mtu) {
                        return Err(VerbsError::Invalid("path MTU above the port's"));
                    }
                }
                Transition::Rts(a) => {
                    if a.retry_cnt > crate::provider::MAX_RETRY
                        || a.rnr_retry > crate::provider::MAX_RETRY
                    {
                        return Err(VerbsError::Invalid("retry counts are 3 bits"));
                    }
                }
                Transition::Err => {
                    f.fail(key);
                    return Ok(());
                }
                Transition::Reset => {}
            }
            if let Some(q) = f.qp_mut(key) {
                q.apply(to);
            }
            Ok(())
        })
    }

    fn qp_state(&self, qp: QpNum) -> Result<QpState, VerbsError> {
        let f = self.fabric.lock();
        Self::own_qp(&f.devices[self.dev], self.ctx, qp).map(|q| q.state)
    }

    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_qp(d, ctx, qp)?;
            d.qps.remove(&qp.0);
            Ok(())
        })
    }

    fn reg_mr(&mut self, pd: Pd, memory: Vec<u8>, access: Access) -> Result<Mr, VerbsError> {
        self.register(pd, access, Memory::Owned(memory))
    }

    /// Registers the region by its owner's name only: its bytes are
    /// reached through the owner, while it serves the device
    /// ([`serve`](Provider::serve)); `region.addr` is never read.
    #[allow(unsafe_code)]
    unsafe fn reg_lent(
        &mut self,
        pd: Pd,
        region: LentRegion,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        if region.len == 0 {
            return Err(VerbsError::Invalid("an empty memory region"));
        }
        let len = region.len as u64;
        self.register(pd, access, Memory::Lent { id: region.id, len })
    }

    fn serve(&mut self, memory: &mut dyn LentMemory) {
        let (dev, ctx) = (self.dev, self.ctx);
        self.fabric.lock().serve(dev, ctx, memory);
    }

    fn dereg_mr(&mut self, lkey: Lkey) -> Result<Vec<u8>, VerbsError> {
        self.on_device(|f, dev, ctx| f.devices[dev].regions.deregister(lkey.0, ctx))
    }

    fn with_mr<R>(&self, lkey: Lkey, f: impl FnOnce(&[u8]) -> R) -> Result<R, VerbsError> {
        let fabric = self.fabric.lock();
        let regions = &fabric.devices[self.dev].regions;
        regions
            .get(lkey.0)
            .filter(|r| r.ctx == self.ctx)
            .ok_or(VerbsError::Unknown("memory region"))?;
        let bytes = regions.owned(lkey.0).ok_or(LENT)?;
        Ok(f(bytes))
    }

    fn with_mr_mut<R>(
        &mut self,
        lkey: Lkey,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, VerbsError> {
        let mut fabric = self.fabric.lock();
        let regions = &mut fabric.devices[self.dev].regions;
        regions
            .get(lkey.0)
            .filter(|r| r.ctx == self.ctx)
            .ok_or(VerbsError::Unknown("memory region"))?;
        let bytes = regions.owned_mut(lkey.0).ok_or(LENT)?;
        Ok(f(bytes))
    }

    fn post_send(&mut self, qp: QpNum, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.on_device(|f, dev, ctx| {
            let key = QpKey { dev, qpn: qp.0 };
            let at = |index, error| PostError { index, error };
            let q = Self::own_qp(&f.devices[dev], ctx, qp).map_err(|e| at(0, e))?;
            let (state, caps) = (q.state, q.init.caps);
            if !matches!(state, QpState::Rts | QpState::Err) {
                return Err(at(0, VerbsError::BadState { qp, state }));
            }
            for (i, wr) in wrs.iter().enumerate() {
                let req = SendReq::new(wr, caps.max_send_sge).map_err(|e| at(i, e))?;
                let q = f.qp_mut(key).expect("checked above");
                if q.state == QpState::Err {
                    let (cq, wc) = (q.init.send_cq.0, flushed(qp, wr.wr_id, req.opcode()));
                    f.complete(dev, cq, wc);
                    continue;
                }
                if q.sq.len() >= caps.max_send_wr as usize {
                    return Err(at(i, VerbsError::Exhausted("send queue")));
                }
                q.sq.push_back(req);
            }
            Ok(())
        })
    }

    fn post_recv(&mut self, qp: QpNum, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.on_device(|f, dev, ctx| {
            let key = QpKey { dev, qpn: qp.0 };
            let at = |index, error| PostError { index, error };
            let q = Self::own_qp(&f.devices[dev], ctx, qp).map_err(|e| at(0, e))?;
            let (state, caps) = (q.state, q.init.caps);
            if q.init.srq.is_some() {
                return Err(at(
                    0,
                    VerbsError::Invalid("its receives come from a shared queue"),
                ));
            }
            if state == QpState::Reset {
                return Err(at(0, VerbsError::BadState { qp, state }));
            }
            for (i, wr) in wrs.iter().enumerate() {
                let req = RecvReq::new(wr, caps.max_recv_sge).map_err(|e| at(i, e))?;
                let q = f.qp_mut(key).expect("checked above");
                if q.state == QpState::Err {
                    let (cq, wc) = (q.init.recv_cq.0, flushed(qp, wr.wr_id, WcOpcode::Recv));
                    f.complete(dev, cq, wc);
                    continue;
                }
                if q.rq.len() >= caps.max_recv_wr as usize {
                    return Err(at(i, VerbsError::Exhausted("receive queue")));
                }
                q.rq.push_back(req);
            }
            Ok(())
        })
    }

    fn post_srq_recv(&mut self, srq: Srq, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.on_device(|f, dev, ctx| {
            let at = |index, error| PostError { index, error };
            let s = f.devices[dev]
                .srqs
                .get_mut(&srq.0)
                .filter(|s| s.ctx == ctx)
                .ok_or(at(0, VerbsError::Unknown("shared receive queue")))?;
            for (i, wr) in wrs.iter().enumerate() {
                let req = RecvReq::new(wr, s.max_sge).map_err(|e| at(i, e))?;
                if s.queue.len() >= s.max_wr as usize {
                    return Err(at(i, VerbsError::Exhausted("shared receive queue")));
                }
                s.queue.push_back(req);
            }
            Ok(())
        })
    }

    fn set_time(&mut self, now: Instant) {
        self.fabric.set_now(now);
    }

    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        self.on_device(|f, dev, ctx| {
            let d = &mut f.devices[dev];
            Self::own_cq(d, ctx, cq)?;
            let (_, queue) = d.cqs.get_mut(&cq.0).expect("checked above");
            queue.poll(out).ok_or(VerbsError::CqOverrun(cq))
        })
    }
}

/// The completion of a request posted to a queue pair in `Err`.
fn flushed(qp: QpNum, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Flushed,
        opcode,
        byte_len: 0,
        imm: None,
        qp,
    }
}
