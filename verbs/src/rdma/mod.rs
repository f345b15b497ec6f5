//! The real HCA: [`Provider`] over libibverbs (feature `rdma`).
//!
//! An [`RdmaProvider`] is one open context on one device, as a
//! [`SoftHca`](crate::soft::SoftHca) is on a soft one, and keeps the same
//! semantics wherever the hardware allows. What it allocates it keeps in
//! tables of its own, destroyed with it: protection domains, completion
//! queues and shared receive queues under numbers it hands out, queue
//! pairs under their queue pair number, memory regions under their lkey.
//!
//! - Regions are registered zero-based, at I/O virtual address 0: every
//!   address a work request carries, of a local scatter/gather entry and of
//!   a peer's region alike, is its offset from the region's start. The
//!   kernel takes IOVA 0 only for memory that starts on a page boundary,
//!   so other memory is moved to page-aligned storage for as long as it is
//!   registered (see `memory`); [`Provider::dereg_mr`] gives the bytes back
//!   in a new `Vec` then.
//! - A post hands the driver the whole slice at once, as one chain of C
//!   work requests linked through `next`; the request the driver refuses
//!   (`bad_wr`) becomes the [`PostError`]'s index: the ones before it were
//!   posted. A request with more scatter/gather entries than the device
//!   takes is refused before the driver sees it, with those before it
//!   posted. Immediate data travels in network byte order.
//! - A completion's opcode is what was posted, even when it failed and the
//!   device left the opcode undefined: each queue pair remembers its
//!   outstanding requests (see `posted`).
//! - What the soft HCA refuses at once is refused here too, before the
//!   hardware sees it: unknown handles ([`VerbsError::Unknown`]), sizes
//!   beyond the device's ([`VerbsError::Invalid`]), resources still in use
//!   ([`VerbsError::Busy`]), transitions the queue pair's state does not
//!   allow ([`VerbsError::BadTransition`]). The rest is the driver's to
//!   refuse: posting to a queue pair in the wrong state, or to a full
//!   queue, comes back as the `errno` it returns ([`VerbsError::Os`]), as
//!   does any failed verbs call; a call that returns NULL is failed with
//!   the `errno` it left.
//! - A completion queue the driver cannot poll (it answers a negative
//!   count) is [`VerbsError::CqOverrun`]: whether it overran or failed
//!   otherwise, completions are lost, the queue pairs on it are broken and
//!   the queue must be destroyed, which is what that error tells the
//!   caller. Verbs report the overrun itself as the asynchronous event
//!   `IBV_EVENT_CQ_ERR`, which this provider does not read: with a driver
//!   that goes on polling an overrun queue without failing, the overrun
//!   shows only as missing completions and queue pairs in `Err`.

mod device;
mod memory;
mod posted;
mod qp;
mod work;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::fmt;
use std::ptr::{self, NonNull};

use ibverbs_sys as sys;

use crate::provider::{
    Access, Cq, DeviceAttr, LentRegion, Lkey, Mr, Pd, PortAttr, PostError, Provider, QpInit, QpNum,
    QpState, RecvWr, Rkey, SendWr, Srq, Transition, VerbsError, WcOpcode, WorkCompletion,
};

pub use device::devices;

/// What touching lent memory through the provider answers: it is its
/// owner's.
const LENT: VerbsError = VerbsError::Invalid("lent memory is its owner's");
use device::{Context, DeviceList, device_attr, last_os_error, mtu_from_raw, port_attr};
use memory::Memory;
use posted::Outstanding;
use work::{Chain, RawWc};

/// Linux's `EOPNOTSUPP`: what a driver without a data-path verb answers.
const EOPNOTSUPP: i32 = 95;

/// The result of a verbs call that returns 0 or an `errno` (a driver that
/// returns it negated is read the same).
fn errno_result(rc: c_int) -> Result<(), VerbsError> {
    match rc {
        0 => Ok(()),
        rc => Err(VerbsError::Os(rc.saturating_abs())),
    }
}

/// A non-NULL object a verbs call returned, or the `errno` it left.
fn created<T>(raw: *mut T) -> Result<NonNull<T>, VerbsError> {
    NonNull::new(raw).ok_or_else(last_os_error)
}

/// A shared receive queue and its domain.
struct SrqEntry {
    raw: NonNull<sys::ibv_srq>,
    pd: Pd,
}

/// A queue pair, what it was created with, and what it has outstanding.
struct QpEntry {
    raw: NonNull<sys::ibv_qp>,
    pd: Pd,
    init: QpInit,
    /// Its port, from its `Init` transition on.
    port: Option<u8>,
    outstanding: Outstanding,
}

/// A memory region and the bytes it covers.
struct MrEntry {
    raw: NonNull<sys::ibv_mr>,
    pd: Pd,
    memory: Memory,
}

/// What the device allows of a shared receive queue.
#[derive(Debug, Clone, Copy)]
struct SrqLimits {
    max_wr: u32,
    max_sge: u32,
}

/// One process's context on an RDMA device: a [`Provider`] over
/// libibverbs.
///
/// It is [`Send`]: it may move to another thread, libibverbs' objects
/// being usable from any. It is not `Sync`: its calls are made from one
/// thread at a time.
pub struct RdmaProvider {
    attr: DeviceAttr,
    srq_limits: SrqLimits,
    page: usize,
    next_id: u32,
    pds: BTreeMap<u32, NonNull<sys::ibv_pd>>,
    cqs: BTreeMap<u32, NonNull<sys::ibv_cq>>,
    srqs: BTreeMap<u32, SrqEntry>,
    qps: BTreeMap<u32, QpEntry>,
    mrs: BTreeMap<u32, MrEntry>,
    sends: Chain<sys::ibv_send_wr>,
    recvs: Chain<sys::ibv_recv_wr>,
    wcs: Vec<sys::ibv_wc>,
    /// Closed when dropped, after `Drop` has destroyed everything above.
    ctx: Context,
}

// SAFETY: libibverbs' objects may be used from any thread (the library and
// its drivers lock what they share), and the provider owns its objects,
// their memory and its scratch vectors outright: nothing of it stays
// behind with the thread it leaves. It is not `Sync`.
unsafe impl Send for RdmaProvider {}

impl fmt::Debug for RdmaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaProvider")
            .field("device", &self.attr.name)
            .field("pds", &self.pds.len())
            .field("cqs", &self.cqs.len())
            .field("srqs", &self.srqs.len())
            .field("qps", &self.qps.len())
            .field("mrs", &self.mrs.len())
            .finish()
    }
}

impl RdmaProvider {
    /// Opens a context on the device named `name`, or on the first device
    /// if `None`.
    ///
    /// Fails with [`VerbsError::NoDevice`] when there is no such device (or
    /// none at all, saying why), and with [`VerbsError::Os`] when it cannot
    /// be opened.
    pub fn open(name: Option<&str>) -> Result<Self, VerbsError> {
        let list = DeviceList::get()?;
        let device = list
            .iter()
            .find(|d| name.is_none_or(|n| d.name() == n))
            .ok_or_else(|| {
                VerbsError::NoDevice(format!("no RDMA device named {}", name.unwrap_or_default()))
            })?;
        let ctx = device.open()?;
        let raw = ctx.query_device()?;
        Ok(RdmaProvider {
            attr: device_attr(device.name(), &raw),
            srq_limits: SrqLimits {
                max_wr: device::count(raw.max_srq_wr),
                max_sge: device::count(raw.max_srq_sge),
            },
            page: memory::page_size(),
            next_id: 1,
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            mrs: BTreeMap::new(),
            sends: Chain::default(),
            recvs: Chain::default(),
            wcs: Vec::new(),
            ctx,
        })
    }

    fn take_id(&mut self) -> Result<u32, VerbsError> {
        let id = self.next_id;
        self.next_id = id.checked_add(1).ok_or(VerbsError::Exhausted("handles"))?;
        Ok(id)
    }

    fn pd(&self, pd: Pd) -> Result<NonNull<sys::ibv_pd>, VerbsError> {
        self.pds
            .get(&pd.0)
            .copied()
            .ok_or(VerbsError::Unknown("protection domain"))
    }

    fn cq(&self, cq: Cq) -> Result<NonNull<sys::ibv_cq>, VerbsError> {
        self.cqs
            .get(&cq.0)
            .copied()
            .ok_or(VerbsError::Unknown("completion queue"))
    }

    fn qp(&self, qp: QpNum) -> Result<&QpEntry, VerbsError> {
        self.qps.get(&qp.0).ok_or(VerbsError::Unknown("queue pair"))
    }

    /// A queue pair's state as verbs report it.
    fn query_state(qp: NonNull<sys::ibv_qp>) -> Result<sys::ibv_qp_state::Type, VerbsError> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int;
        // SAFETY: `qp` is a live queue pair of this context; `attr` and
        // `init` are valid places for the answer.
        errno_result(unsafe { sys::ibv_query_qp(qp.as_ptr(), &mut attr, mask, &mut init) })?;
        Ok(attr.qp_state)
    }

    /// Checks what the soft HCA checks of a transition before the
    /// hardware sees it; the port the queue pair is on after it.
    fn check_transition(&self, qp: QpNum, to: &Transition) -> Result<u8, VerbsError> {
        let entry = self.qp(qp)?;
        qp::check(to)?;
        // A state this crate does not use is the driver's to judge.
        if let Some(from) = qp::state_from_raw(Self::query_state(entry.raw)?)
            && !to.allowed_from(from)
        {
            return Err(VerbsError::BadTransition {
                qp,
                from,
                to: to.target(),
            });
        }
        match *to {
            Transition::Init(a) if a.port == 0 || a.port > self.attr.ports => {
                Err(VerbsError::Unknown("port"))
            }
            Transition::Init(a) => Ok(a.port),
            Transition::Rtr(a) => {
                let port = entry
                    .port
                    .ok_or(VerbsError::Invalid("no port before Init"))?;
                let active = mtu_from_raw(self.ctx.query_port(port)?.active_mtu);
                if active.is_none_or(|mtu| a.path_mtu > mtu) {
                    return Err(VerbsError::Invalid("path MTU above the port's"));
                }
                Ok(port)
            }
            // Any port will do for transitions that set none.
            _ => Ok(entry.port.unwrap_or(1)),
        }
    }
}

/// How many of the first requests, whose scatter/gather lists are `lens`
/// long, a device taking `max_sge` entries per request takes: the index of
/// the first it refuses, or all of them.
fn fitting(max_sge: u32, lens: impl IntoIterator<Item = usize>) -> usize {
    lens.into_iter()
        .take_while(|&len| len <= max_sge as usize)
        .count()
}

/// The post error of a request the device cannot take: too many
/// scatter/gather entries.
fn too_many_sges(index: usize) -> PostError {
    PostError {
        index,
        error: VerbsError::Invalid("more scatter/gather entries than the device takes"),
    }
}

impl Provider for RdmaProvider {
    fn device(&self) -> DeviceAttr {
        self.attr.clone()
    }

    fn port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        if port == 0 || port > self.attr.ports {
            return Err(VerbsError::Unknown("port"));
        }
        let attr = self.ctx.query_port(port)?;
        let gid = self.ctx.query_gid(port, 0)?;
        port_attr(&attr, gid)
    }

    fn alloc_pd(&mut self) -> Result<Pd, VerbsError> {
        let id = self.take_id()?;
        // SAFETY: the context is open.
        let pd = created(unsafe { sys::ibv_alloc_pd(self.ctx.as_ptr()) })?;
        self.pds.insert(id, pd);
        Ok(Pd(id))
    }

    fn dealloc_pd(&mut self, pd: Pd) -> Result<(), VerbsError> {
        let raw = self.pd(pd)?;
        if self.qps.values().any(|q| q.pd == pd)
            || self.srqs.values().any(|s| s.pd == pd)
            || self.mrs.values().any(|m| m.pd == pd)
        {
            return Err(VerbsError::Busy("protection domain"));
        }
        // SAFETY: `raw` is a live domain of this context, nothing uses it
        // any more, and it leaves the table once released.
        errno_result(unsafe { sys::ibv_dealloc_pd(raw.as_ptr()) })?;
        self.pds.remove(&pd.0);
        Ok(())
    }

    fn create_cq(&mut self, entries: u32) -> Result<Cq, VerbsError> {
        if entries == 0 || entries > self.attr.max_cqe {
            return Err(VerbsError::Invalid("completion queue size"));
        }
        let cqe =
            c_int::try_from(entries).map_err(|_| VerbsError::Invalid("completion queue size"))?;
        let id = self.take_id()?;
        // SAFETY: the context is open; no completion channel nor context
        // pointer is given, and vector 0 always exists.
        let cq = created(unsafe {
            sys::ibv_create_cq(self.ctx.as_ptr(), cqe, ptr::null_mut(), ptr::null_mut(), 0)
        })?;
        self.cqs.insert(id, cq);
        Ok(Cq(id))
    }

    fn destroy_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        let raw = self.cq(cq)?;
        if self
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(VerbsError::Busy("completion queue"));
        }
        // SAFETY: `raw` is a live queue of this context, no queue pair uses
        // it, and it leaves the table once destroyed.
        errno_result(unsafe { sys::ibv_destroy_cq(raw.as_ptr()) })?;
        self.cqs.remove(&cq.0);
        Ok(())
    }

    fn create_srq(&mut self, pd: Pd, max_wr: u32, max_sge: u32) -> Result<Srq, VerbsError> {
        let limits = self.srq_limits;
        if max_wr == 0 || max_wr > limits.max_wr || max_sge > limits.max_sge {
            return Err(VerbsError::Invalid("shared receive queue size"));
        }
        let raw_pd = self.pd(pd)?;
        let id = self.take_id()?;
        let mut init = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: `raw_pd` is a live domain of this context and `init` a
        // valid description, which the call may update.
        let raw = created(unsafe { sys::ibv_create_srq(raw_pd.as_ptr(), &mut init) })?;
        self.srqs.insert(id, SrqEntry { raw, pd });
        Ok(Srq(id))
    }

    fn destroy_srq(&mut self, srq: Srq) -> Result<(), VerbsError> {
        let raw = self
            .srqs
            .get(&srq.0)
            .ok_or(VerbsError::Unknown("shared receive queue"))?
            .raw;
        if self.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(VerbsError::Busy("shared receive queue"));
        }
        // SAFETY: `raw` is a live queue of this context, no queue pair uses
        // it, and it leaves the table once destroyed.
        errno_result(unsafe { sys::ibv_destroy_srq(raw.as_ptr()) })?;
        self.srqs.remove(&srq.0);
        Ok(())
    }

    fn create_qp(&mut self, pd: Pd, init: &QpInit) -> Result<QpNum, VerbsError> {
        let caps = init.caps;
        let (max_wr, max_sge) = (self.attr.max_qp_wr, self.attr.max_sge);
        if caps.max_send_wr == 0
            || caps.max_send_wr > max_wr
            || caps.max_recv_wr > max_wr
            || caps.max_send_sge > max_sge
            || caps.max_recv_sge > max_sge
        {
            return Err(VerbsError::Invalid("queue pair capabilities"));
        }
        let raw_pd = self.pd(pd)?;
        let send_cq = self.cq(init.send_cq)?;
        let recv_cq = self.cq(init.recv_cq)?;
        let srq = match init.srq {
            Some(srq) => self
                .srqs
                .get(&srq.0)
                .ok_or(VerbsError::Unknown("shared receive queue"))?
                .raw
                .as_ptr(),
            None => ptr::null_mut(),
        };
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq,
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: 0,
            },
            qp_type: sys::ibv_qp_type::IBV_QPT_RC,
            // Each send says whether it completes on success.
            sq_sig_all: 0,
        };
        // SAFETY: the domain, queues and shared receive queue are live
        // objects of this context, and `attr` a valid description, which
        // the call may update.
        let raw = created(unsafe { sys::ibv_create_qp(raw_pd.as_ptr(), &mut attr) })?;
        // SAFETY: `raw` is the queue pair just created.
        let num = unsafe { (*raw.as_ptr()).qp_num };
        self.qps.insert(
            num,
            QpEntry {
                raw,
                pd,
                init: *init,
                port: None,
                outstanding: Outstanding::default(),
            },
        );
        Ok(QpNum(num))
    }

    fn modify_qp(&mut self, qp: QpNum, to: &Transition) -> Result<(), VerbsError> {
        let port = self.check_transition(qp, to)?;
        let entry = self
            .qps
            .get_mut(&qp.0)
            .ok_or(VerbsError::Unknown("queue pair"))?;
        let (mut attr, mask) = qp::qp_attr(to, port);
        // SAFETY: `entry.raw` is a live queue pair of this context and
        // `attr` holds every attribute `mask` names.
        errno_result(unsafe {
            sys::ibv_modify_qp(entry.raw.as_ptr(), &mut attr, mask.0 as c_int)
        })?;
        match to {
            Transition::Init(_) => entry.port = Some(port),
            Transition::Reset => entry.outstanding.clear(),
            _ => {}
        }
        Ok(())
    }

    fn qp_state(&self, qp: QpNum) -> Result<QpState, VerbsError> {
        let raw = Self::query_state(self.qp(qp)?.raw)?;
        qp::state_from_raw(raw).ok_or(VerbsError::Invalid(
            "the queue pair is in a state this crate does not use",
        ))
    }

    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), VerbsError> {
        let raw = self.qp(qp)?.raw;
        // SAFETY: `raw` is a live queue pair of this context, and it leaves
        // the table once destroyed.
        errno_result(unsafe { sys::ibv_destroy_qp(raw.as_ptr()) })?;
        self.qps.remove(&qp.0);
        Ok(())
    }

    fn reg_mr(&mut self, pd: Pd, memory: Vec<u8>, access: Access) -> Result<Mr, VerbsError> {
        access.check_region()?;
        let raw_pd = self.pd(pd)?;
        let len = memory.len();
        let mut memory = Memory::place(memory, self.page)?;
        let flags = qp::access_flags(access).0 as c_int;
        // SAFETY: `raw_pd` is a live domain of this context; the `len`
        // bytes from `start` belong to `memory`, which stays where it is
        // and alive until the region is deregistered (it is kept with it).
        // IOVA 0 makes the region zero-based.
        let raw = created(unsafe {
            sys::ibv_reg_mr_iova(raw_pd.as_ptr(), memory.start(), len, 0, flags)
        })?;
        // SAFETY: `raw` is the region just registered.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        self.mrs.insert(lkey, MrEntry { raw, pd, memory });
        Ok(Mr {
            lkey: Lkey(lkey),
            rkey: Rkey(rkey),
            len: len as u64,
            base: 0,
        })
    }

    /// Registers the owner's memory where it is, at the IOVA of its offset
    /// in its page (the kernel maps an IOVA only onto memory at the same
    /// offset in its page).
    unsafe fn reg_lent(
        &mut self,
        pd: Pd,
        region: LentRegion,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        access.check_region()?;
        if region.len == 0 || region.addr.is_null() {
            return Err(VerbsError::Invalid("an empty memory region"));
        }
        let raw_pd = self.pd(pd)?;
        let base = Memory::lent_base(region.addr, self.page);
        let flags = qp::access_flags(access).0 as c_int;
        // SAFETY: `raw_pd` is a live domain of this context; the caller
        // keeps the `len` bytes at `addr` valid and in place until the
        // region is deregistered (this function's contract). The IOVA has
        // the offset in its page of `addr`, as the kernel requires.
        let raw = created(unsafe {
            sys::ibv_reg_mr_iova(raw_pd.as_ptr(), region.addr.cast(), region.len, base, flags)
        })?;
        // SAFETY: `raw` is the region just registered.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        let memory = Memory::Lent;
        self.mrs.insert(lkey, MrEntry { raw, pd, memory });
        Ok(Mr {
            lkey: Lkey(lkey),
            rkey: Rkey(rkey),
            len: region.len as u64,
            base,
        })
    }

    fn dereg_mr(&mut self, lkey: Lkey) -> Result<Vec<u8>, VerbsError> {
        let raw = self
            .mrs
            .get(&lkey.0)
            .ok_or(VerbsError::Unknown("memory region"))?
            .raw;
        // SAFETY: `raw` is a live region of this context; its memory is
        // released only after it is deregistered.
        errno_result(unsafe { sys::ibv_dereg_mr(raw.as_ptr()) })?;
        let entry = self
            .mrs
            .remove(&lkey.0)
            .ok_or(VerbsError::Unknown("memory region"))?;
        Ok(entry.memory.into_vec())
    }

    fn with_mr<R>(&self, lkey: Lkey, f: impl FnOnce(&[u8]) -> R) -> Result<R, VerbsError> {
        let entry = self
            .mrs
            .get(&lkey.0)
            .ok_or(VerbsError::Unknown("memory region"))?;
        Ok(f(entry.memory.as_slice().ok_or(LENT)?))
    }

    fn with_mr_mut<R>(
        &mut self,
        lkey: Lkey,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, VerbsError> {
        let entry = self
            .mrs
            .get_mut(&lkey.0)
            .ok_or(VerbsError::Unknown("memory region"))?;
        Ok(f(entry.memory.as_mut_slice().ok_or(LENT)?))
    }

    fn post_send(&mut self, qp: QpNum, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let fit = fitting(self.attr.max_sge, wrs.iter().map(|wr| wr.sg.len()));
        let post = self.ctx.ops().post_send;
        let entry = self
            .qps
            .get_mut(&qp.0)
            .ok_or(at(0, VerbsError::Unknown("queue pair")))?;
        let (posting, refused) = wrs.split_at(fit);
        if !posting.is_empty() {
            let post = post.ok_or(at(0, VerbsError::Os(EOPNOTSUPP)))?;
            let head = self.sends.sends(posting);
            let mut bad = ptr::null_mut();
            // SAFETY: `entry.raw` is a live queue pair of this context and
            // `head` a chain of valid work requests that stays untouched
            // until the call returns; `bad` is a valid place for the
            // refused request.
            let rc = unsafe { post(entry.raw.as_ptr(), head, &mut bad) };
            if let Err(error) = errno_result(rc) {
                let index = self.sends.index_of(bad);
                entry.outstanding.sent(&posting[..index]);
                return Err(at(index, error));
            }
            entry.outstanding.sent(posting);
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(too_many_sges(fit))
        }
    }

    fn post_recv(&mut self, qp: QpNum, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let fit = fitting(self.attr.max_sge, wrs.iter().map(|wr| wr.sg.len()));
        let post = self.ctx.ops().post_recv;
        let entry = self
            .qps
            .get_mut(&qp.0)
            .ok_or(at(0, VerbsError::Unknown("queue pair")))?;
        if entry.init.srq.is_some() {
            return Err(at(
                0,
                VerbsError::Invalid("its receives come from a shared queue"),
            ));
        }
        let (posting, refused) = wrs.split_at(fit);
        if !posting.is_empty() {
            let post = post.ok_or(at(0, VerbsError::Os(EOPNOTSUPP)))?;
            let head = self.recvs.recvs(posting);
            let mut bad = ptr::null_mut();
            // SAFETY: `entry.raw` is a live queue pair of this context and
            // `head` a chain of valid work requests that stays untouched
            // until the call returns; `bad` is a valid place for the
            // refused request.
            let rc = unsafe { post(entry.raw.as_ptr(), head, &mut bad) };
            if let Err(error) = errno_result(rc) {
                let index = self.recvs.index_of(bad);
                entry.outstanding.received(&posting[..index]);
                return Err(at(index, error));
            }
            entry.outstanding.received(posting);
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(too_many_sges(fit))
        }
    }

    fn post_srq_recv(&mut self, srq: Srq, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let raw = self
            .srqs
            .get(&srq.0)
            .ok_or(at(0, VerbsError::Unknown("shared receive queue")))?
            .raw;
        let fit = fitting(self.attr.max_sge, wrs.iter().map(|wr| wr.sg.len()));
        let (posting, refused) = wrs.split_at(fit);
        if !posting.is_empty() {
            let post = self
                .ctx
                .ops()
                .post_srq_recv
                .ok_or(at(0, VerbsError::Os(EOPNOTSUPP)))?;
            let head = self.recvs.recvs(posting);
            let mut bad = ptr::null_mut();
            // SAFETY: `raw` is a live shared receive queue of this context
            // and `head` a chain of valid work requests that stays
            // untouched until the call returns; `bad` is a valid place for
            // the refused request.
            let rc = unsafe { post(raw.as_ptr(), head, &mut bad) };
            if let Err(error) = errno_result(rc) {
                return Err(at(self.recvs.index_of(bad), error));
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(too_many_sges(fit))
        }
    }

    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let raw = self.cq(cq)?;
        let poll = self.ctx.ops().poll_cq.ok_or(VerbsError::Os(EOPNOTSUPP))?;
        let want = out.len().min(c_int::MAX as usize);
        if want == 0 {
            return Ok(0);
        }
        self.wcs.clear();
        self.wcs.resize(want, sys::ibv_wc::default());
        // SAFETY: `raw` is a live queue of this context, and `wcs` has room
        // for the `want` completions the driver may write.
        let n = unsafe { poll(raw.as_ptr(), want as c_int, self.wcs.as_mut_ptr()) };
        // A negative count: the driver could not read the queue. Its
        // completions are lost and its queue pairs broken, which is what an
        // overrun means to the caller (see the module's documentation).
        let n = usize::try_from(n).map_err(|_| VerbsError::CqOverrun(cq))?;
        for (slot, wc) in out.iter_mut().zip(&self.wcs[..n.min(want)]) {
            let raw = RawWc::from(wc);
            let reported = work::wc_opcode(raw.opcode);
            let success = work::wc_status(raw.status).is_success();
            let opcode = match self.qps.get_mut(&raw.qp_num) {
                Some(q) => q.outstanding.complete(raw.wr_id, reported, success),
                // A queue pair destroyed since: nothing is known of it.
                None => reported.unwrap_or(WcOpcode::Recv),
            };
            *slot = work::completion(&raw, opcode);
        }
        Ok(n.min(want))
    }
}

impl Drop for RdmaProvider {
    /// Destroys everything the context holds, users before what they use,
    /// then (as the context field drops) closes it. A failure leaves
    /// nothing to do but go on; a region the device would not deregister
    /// keeps its memory, leaked, rather than free it under the HCA.
    fn drop(&mut self) {
        for (_, q) in std::mem::take(&mut self.qps) {
            // SAFETY: a live queue pair of this context, destroyed once.
            unsafe { sys::ibv_destroy_qp(q.raw.as_ptr()) };
        }
        for (_, s) in std::mem::take(&mut self.srqs) {
            // SAFETY: a live shared receive queue of this context, no
            // queue pair left on it, destroyed once.
            unsafe { sys::ibv_destroy_srq(s.raw.as_ptr()) };
        }
        for (_, m) in std::mem::take(&mut self.mrs) {
            // SAFETY: a live region of this context, deregistered once.
            if unsafe { sys::ibv_dereg_mr(m.raw.as_ptr()) } != 0 {
                std::mem::forget(m.memory);
            }
        }
        for (_, cq) in std::mem::take(&mut self.cqs) {
            // SAFETY: a live completion queue of this context, no queue
            // pair left on it, destroyed once.
            unsafe { sys::ibv_destroy_cq(cq.as_ptr()) };
        }
        for (_, pd) in std::mem::take(&mut self.pds) {
            // SAFETY: a live domain of this context, nothing left in it,
            // released once.
            unsafe { sys::ibv_dealloc_pd(pd.as_ptr()) };
        }
    }
}
