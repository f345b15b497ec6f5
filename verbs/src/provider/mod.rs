//! The verbs the BTL needs, as one trait over a real HCA and the software
//! one.
//!
//! A [`Provider`] is one process's open context on one device: what it
//! allocates (protection domains, completion queues, queue pairs, memory
//! regions) belongs to it and goes with it. Only reliable-connected queue
//! pairs exist here, the only kind the BTL uses.
//!
//! Memory is registered in one of two ways. The transport's own buffers
//! are handed to the provider and owned by it until deregistered
//! ([`Provider::reg_mr`]), zero-based: a region's addresses, for this
//! process and for its peers, are offsets from its start. The upper
//! layer's regions stay their owner's and are lent in place
//! ([`Provider::reg_lent`]): a real HCA reaches them whenever it works, the
//! software HCA only through their owner ([`Provider::serve`]), so that it
//! never touches memory its owner may hold a reference to. Either way a
//! region's addresses are `base + offset` ([`Mr::base`]), never a pointer
//! of this process.
//!
//! Every call returns at once. Work the HCA carries out later ends in a
//! [`WorkCompletion`] on a completion queue, which [`Provider::poll_cq`]
//! takes.

mod device;
mod error;
mod qp;
mod work;

pub use device::{
    Access, Cq, DeviceAttr, Gid, LentMemory, LentRegion, LinkLayer, Lkey, Mr, Mtu, Pd, PortAttr,
    PortState, QpNum, Rkey, Srq,
};
pub use error::{PostError, VerbsError};
pub use qp::{
    AckTimeout, MAX_RETRY, PortAddr, QpCaps, QpInit, QpState, RNR_RETRY_FOREVER, RnrTimer, ToInit,
    ToRtr, ToRts, Transition,
};
pub use work::{RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};

/// One process's context on one RDMA device.
pub trait Provider {
    /// The device this context is open on.
    fn device(&self) -> DeviceAttr;

    /// Port `port` (from 1) of the device.
    fn port(&self, port: u8) -> Result<PortAttr, VerbsError>;

    /// A new protection domain.
    fn alloc_pd(&mut self) -> Result<Pd, VerbsError>;

    /// Releases a protection domain nothing uses any more.
    fn dealloc_pd(&mut self, pd: Pd) -> Result<(), VerbsError>;

    /// A completion queue of at least `entries` entries; more completions
    /// outstanding at once overrun it.
    fn create_cq(&mut self, entries: u32) -> Result<Cq, VerbsError>;

    /// Destroys a completion queue no queue pair uses; completions still
    /// in it are lost.
    fn destroy_cq(&mut self, cq: Cq) -> Result<(), VerbsError>;

    /// A shared receive queue of at most `max_wr` receives, each of at most
    /// `max_sge` entries, in `pd`.
    fn create_srq(&mut self, pd: Pd, max_wr: u32, max_sge: u32) -> Result<Srq, VerbsError>;

    /// Destroys a shared receive queue no queue pair uses; its receives are
    /// dropped.
    fn destroy_srq(&mut self, srq: Srq) -> Result<(), VerbsError>;

    /// A reliable-connected queue pair in `pd`, in `Reset`.
    fn create_qp(&mut self, pd: Pd, init: &QpInit) -> Result<QpNum, VerbsError>;

    /// Moves a queue pair to another state (see [`Transition`]).
    fn modify_qp(&mut self, qp: QpNum, to: &Transition) -> Result<(), VerbsError>;

    /// A queue pair's state.
    fn qp_state(&self, qp: QpNum) -> Result<QpState, VerbsError>;

    /// Destroys a queue pair: its outstanding work requests are dropped
    /// without completions.
    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), VerbsError>;

    /// Registers `memory` in `pd` with `access`; the provider owns it until
    /// [`dereg_mr`](Self::dereg_mr) gives it back.
    fn reg_mr(&mut self, pd: Pd, memory: Vec<u8>, access: Access) -> Result<Mr, VerbsError>;

    /// Registers memory its owner keeps, in place, in `pd` with `access`.
    /// The device reaches it until [`dereg_mr`](Self::dereg_mr): a real
    /// HCA at any time, the software HCA during
    /// [`serve`](Self::serve) only, through the owner.
    ///
    /// # Safety
    ///
    /// `region.addr` must point to `region.len` bytes that stay valid and
    /// in place until the region is deregistered, and the caller must not
    /// rely on their contents while a device operation on them may be
    /// under way (an RDMA write or read by a peer, or by this process):
    /// a real HCA writes them behind any reference the caller holds.
    // The one contract of memory shared with a device; see the crate's
    // rule on `unsafe`.
    #[allow(unsafe_code)]
    unsafe fn reg_lent(
        &mut self,
        pd: Pd,
        region: LentRegion,
        access: Access,
    ) -> Result<Mr, VerbsError>;

    /// Deregisters a region and gives back the memory handed to it (an
    /// empty `Vec` for memory lent in place, which stays its owner's).
    /// Its keys are dead from then on: a peer's RDMA naming them fails
    /// with [`WcStatus::RemoteAccess`], and no later region takes them.
    /// Once it returns, the device no longer touches the memory.
    fn dereg_mr(&mut self, lkey: Lkey) -> Result<Vec<u8>, VerbsError>;

    /// Runs `f` on a region's bytes. Call it only on bytes no outstanding
    /// work request reads or writes; `f` must not call the provider.
    fn with_mr<R>(&self, lkey: Lkey, f: impl FnOnce(&[u8]) -> R) -> Result<R, VerbsError>;

    /// Runs `f` on a region's bytes, to change them; as
    /// [`with_mr`](Self::with_mr).
    fn with_mr_mut<R>(
        &mut self,
        lkey: Lkey,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, VerbsError>;

    /// Posts send work requests, in order, on `qp` (which must be in `Rts`,
    /// or in `Err`, where they complete flushed).
    fn post_send(&mut self, qp: QpNum, wrs: &[SendWr<'_>]) -> Result<(), PostError>;

    /// Posts receives on `qp`'s own receive queue (in `Init`, `Rtr`, `Rts`,
    /// or `Err`, where they complete flushed).
    fn post_recv(&mut self, qp: QpNum, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;

    /// Posts receives on a shared receive queue.
    fn post_srq_recv(&mut self, srq: Srq, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;

    /// Takes up to `out.len()` completions from `cq`, oldest first; how
    /// many. An overrun queue answers [`VerbsError::CqOverrun`].
    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> Result<usize, VerbsError>;

    /// Lets a device that reaches lent memory only through its owner
    /// ([`reg_lent`](Self::reg_lent)) do now what it has to do there:
    /// write what peers wrote, read what they read, place what this
    /// process read, take what it writes. The software HCA's work on lent
    /// memory waits for this call; a real HCA needs none.
    fn serve(&mut self, memory: &mut dyn LentMemory) {
        let _ = memory;
    }

    /// Tells a provider whose timers run on its caller's clock (the
    /// software HCA's RNR and ACK timers) what time it is. A real HCA keeps
    /// its own time and ignores it.
    fn set_time(&mut self, now: btl_core::time::Instant) {
        let _ = now;
    }
}
