//! The `self` BTL: a process talking to itself, after Open MPI's `btl/self`.
//!
//! It reaches only its own process. A `send` hands the descriptor's bytes to
//! the next [`Btl::poll_event`] in place, without a copy; `sendi` copies
//! header and payload into one of its own fixed slots, taking no fragment;
//! `put` and `get` are copies between two registered regions, checked like a
//! peer's. Everything is bounded by the const parameters: `REGS`
//! registrations and `QUEUE` undelivered events (and `QUEUE` sendi slots of
//! [`SENDI_MAX`] bytes).

mod component;

pub use component::{LoopbackSetup, SELF_POOL_PARAMS, SelfComponent};

use heapless::Deque;

use crate::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, Completion, Event, Incoming, Limit, LostReason,
    MemHandle, MemSlice, OpId, RegSlot, RegisterError, Registrations, RemoteSlice, SendError,
    SendStatus, Side, Tag,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::mca::Exclusivity;
use crate::pool::{FragmentPools, PoolsRef, Region};

/// Largest header + payload of one `sendi`.
pub const SENDI_MAX: usize = 256;

/// The loopback's only endpoint: the process itself.
const ME: EndpointId = EndpointId(0);

/// Where the bytes of a received message are.
#[derive(Debug)]
enum Payload {
    /// In the sent descriptor's fragment.
    Descriptor(Descriptor),
    /// In sendi slot `slot`, `len` bytes.
    Slot { slot: usize, len: usize },
}

#[derive(Debug)]
enum Pending {
    Received { tag: Tag, payload: Payload },
    Done(Completion),
}

/// The `self` BTL module. `R` holds the fragment pools' region (see
/// [`FragmentPools`]), `M` registered memory (see [`Btl::Memory`]).
pub struct Loopback<R, M, const REGS: usize, const QUEUE: usize> {
    me: ProcName,
    attributes: Attributes,
    pools: FragmentPools<R>,
    regs: Registrations<M, [RegSlot<M>; REGS]>,
    queue: Deque<Pending, QUEUE>,
    /// The message handed out by the last `poll_event`, released by the next.
    delivered: Option<(Tag, Payload)>,
    slots: [[u8; SENDI_MAX]; QUEUE],
    free_slots: heapless::Vec<u16, QUEUE>,
    endpoint_refs: u32,
    next_op: u64,
    /// A send, put or get was refused with `OutOfResource`: `Room` is
    /// told once the queue is empty (every place, slot and fragment this
    /// module held is back then).
    refused: bool,
    finalized: bool,
}

impl<R: Region, M: AsRef<[u8]> + AsMut<[u8]>, const REGS: usize, const QUEUE: usize>
    Loopback<R, M, REGS, QUEUE>
{
    /// The loopback of process `me`, with descriptors from `pools`.
    pub fn new(me: ProcName, pools: FragmentPools<R>) -> Self {
        assert!(QUEUE <= u16::MAX as usize, "at most 65535 queued events");
        let eager = pools.view().class_size(crate::pool::FragmentClass::Eager);
        let max = pools.view().class_size(crate::pool::FragmentClass::Max);
        Loopback {
            me,
            attributes: Attributes {
                name: "self",
                // The most one `sendi` takes, as the attribute promises:
                // larger messages go in a descriptor.
                eager_limit: eager.min(SENDI_MAX),
                max_send_size: max,
                rdma_pipeline_send_length: usize::MAX,
                rdma_pipeline_frag_size: usize::MAX,
                put_limit: u64::MAX,
                put_alignment: 1,
                get_limit: u64::MAX,
                get_alignment: 1,
                exclusivity: Exclusivity::HIGH,
                latency_us: 0,
                bandwidth_mbps: 100_000,
                flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET,
                registration_handle_size: 8,
            },
            pools,
            regs: Registrations::inline(),
            queue: Deque::new(),
            delivered: None,
            slots: [[0; SENDI_MAX]; QUEUE],
            free_slots: (0..QUEUE as u16).rev().collect(),
            endpoint_refs: 0,
            next_op: 0,
            refused: false,
            finalized: false,
        }
    }

    /// Whether the process has added itself (and not deleted itself
    /// since), or events wait: whether there is anything to serve.
    pub fn in_use(&self) -> bool {
        self.endpoint_refs > 0 || !self.queue.is_empty()
    }

    /// Passes `result` on, noting an `OutOfResource` for `Room`.
    fn noted<T>(&mut self, result: Result<T, BtlError>) -> Result<T, BtlError> {
        self.refused |= matches!(result, Err(BtlError::OutOfResource));
        result
    }

    fn check(&self, endpoint: EndpointId) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        if endpoint != ME || self.endpoint_refs == 0 {
            return Err(BtlError::Unreachable);
        }
        Ok(())
    }

    /// Whether one more entry may be queued. A descriptor lent out by the
    /// last `poll_event` keeps a place for the completion its release
    /// queues, so a send made between two polls cannot take that place and
    /// make the completion (and the descriptor) vanish.
    fn has_room(&self) -> bool {
        self.has_room_for(1)
    }

    /// Whether `n` more events fit the queue.
    fn has_room_for(&self, n: usize) -> bool {
        let reserved = matches!(self.delivered, Some((_, Payload::Descriptor(_))));
        self.queue.len() + usize::from(reserved) + n <= QUEUE
    }

    /// Releases what the previous `poll_event` lent out: a sendi slot goes
    /// back, a descriptor completes.
    fn release_delivered(&mut self) {
        let Some((tag, payload)) = self.delivered.take() else {
            return;
        };
        match payload {
            Payload::Slot { slot, .. } => {
                // The slot came from this list, which has room for all of them.
                let _ = self.free_slots.push(slot as u16);
            }
            Payload::Descriptor(desc) => self.complete_send(tag, desc, Ok(())),
        }
    }

    /// Ends a send: frees an owned descriptor, queues the completion the
    /// flags ask for. The queue has room: this send's own entry just left
    /// it, and while it was lent out `has_room` kept its place.
    fn complete_send(&mut self, tag: Tag, desc: Descriptor, result: Result<(), BtlError>) {
        let flags = desc.flags();
        let owned = flags.contains(DescFlags::BTL_OWNERSHIP);
        let desc = if owned {
            let _ = desc.free(self.pools.view());
            None
        } else {
            Some(desc)
        };
        if desc.is_some() || flags.contains(DescFlags::ALWAYS_CALLBACK) {
            let _ = self.queue.push_back(Pending::Done(Completion::Send {
                endpoint: ME,
                tag,
                desc,
                result,
            }));
        }
    }

    fn next_op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    /// A put or get: a checked copy within the registrations, completed
    /// by an event like on any other BTL.
    fn rdma(
        &mut self,
        endpoint: EndpointId,
        src: Side,
        dst: Side,
        ctx: u64,
        put: bool,
    ) -> Result<OpId, BtlError> {
        self.check(endpoint)?;
        if !self.has_room() {
            self.refused = true;
            return Err(BtlError::OutOfResource);
        }
        let op = self.next_op();
        let result = self
            .regs
            .copy(src, dst)
            .map_err(|e| BtlError::Rejected(e.into()));
        let pending = Pending::Done(if put {
            Completion::Put { op, ctx, result }
        } else {
            Completion::Get { op, ctx, result }
        });
        // Room checked above.
        let _ = self.queue.push_back(pending);
        Ok(op)
    }
}

impl<R: Region, M: AsRef<[u8]> + AsMut<[u8]>, const REGS: usize, const QUEUE: usize> Btl
    for Loopback<R, M, REGS, QUEUE>
{
    type Memory = M;

    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn pools(&self) -> PoolsRef<'_> {
        self.pools.view()
    }

    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        for (i, (proc, ep)) in procs.iter().zip(endpoints.iter_mut()).enumerate() {
            *ep = None;
            if *proc == self.me && reachable.set(i) {
                *ep = Some(ME);
                self.endpoint_refs = self.endpoint_refs.saturating_add(1);
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for &ep in endpoints {
            if ep != ME || self.endpoint_refs == 0 {
                return Err(BtlError::Unreachable);
            }
            self.endpoint_refs -= 1;
            if self.endpoint_refs == 0 {
                // The process forgot itself: what it had not yet received
                // fails, as to any removed peer.
                let _ = self.fail_undelivered(BtlError::PeerLost(LostReason::Removed));
            }
        }
        Ok(())
    }

    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check(endpoint)?;
        let desc = Descriptor::alloc(self.pools.view(), 0, 0, size, order, flags);
        self.noted(desc.map_err(BtlError::from))
    }

    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        desc.free(self.pools.view())
            .map_err(|_| BtlError::Memory(crate::btl::MemError::UnknownRegion))
    }

    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check(endpoint)?;
        let desc = Descriptor::prepare_src(self.pools.view(), 0, reserve, data, order, flags);
        self.noted(desc.map_err(BtlError::from))
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check(endpoint)?;
        // No SEND_INPLACE: a received message is one contiguous slice, so
        // registered data is copied like any other.
        let bytes = self.regs.slice(data)?;
        let desc = Descriptor::prepare_src(self.pools.view(), 0, reserve, bytes, order, flags);
        self.noted(desc.map_err(BtlError::from))
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        mut desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        if let Err(error) = self.check(endpoint) {
            return Err(SendError { error, desc });
        }
        if !self.has_room() {
            self.refused = true;
            return Err(SendError {
                error: BtlError::OutOfResource,
                desc,
            });
        }
        desc.set_tag(tag);
        let owned = desc.flags().contains(DescFlags::BTL_OWNERSHIP);
        let quiet = !desc.flags().contains(DescFlags::ALWAYS_CALLBACK);
        let pending = Pending::Received {
            tag,
            payload: Payload::Descriptor(desc),
        };
        match self.queue.push_back(pending) {
            Ok(()) if owned && quiet => Ok(SendStatus::Completed(None)),
            Ok(()) => Ok(SendStatus::Queued),
            Err(Pending::Received {
                payload: Payload::Descriptor(desc),
                ..
            }) => {
                self.refused = true;
                Err(SendError {
                    error: BtlError::OutOfResource,
                    desc,
                })
            }
            Err(_) => unreachable!("push_back returns the value it was given"),
        }
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        _order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        self.check(endpoint)?;
        let len = header.len() + payload.len();
        Limit::Here.admits(len, SENDI_MAX)?;
        if !self.has_room() {
            return Err(BtlError::OutOfResource);
        }
        let slot = usize::from(self.free_slots.pop().ok_or(BtlError::OutOfResource)?);
        let bytes = &mut self.slots[slot];
        bytes[..header.len()].copy_from_slice(header);
        bytes[header.len()..len].copy_from_slice(payload);
        // Room checked above.
        let _ = self.queue.push_back(Pending::Received {
            tag,
            payload: Payload::Slot { slot, len },
        });
        // A sendi is complete on return: no event follows, whatever the flags.
        let _ = flags;
        Ok(())
    }

    fn register_mem(&mut self, region: M, access: Access) -> Result<MemHandle, RegisterError<M>> {
        if self.finalized {
            return Err(RegisterError {
                error: BtlError::Finalized,
                region,
            });
        }
        Ok(self.regs.register(region, access)?)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<M, BtlError> {
        Ok(self.regs.deregister(handle)?)
    }

    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError> {
        Ok(self.regs.region(handle)?)
    }

    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError> {
        Ok(self.regs.region_mut(handle)?)
    }

    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.check(endpoint)?;
        self.regs.slice(local)?;
        self.rdma(
            endpoint,
            Side::Local(local),
            Side::Remote(remote),
            ctx,
            true,
        )
    }

    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.check(endpoint)?;
        self.regs.slice(local)?;
        // This process is the target too: its event and the put's.
        if !self.has_room_for(2) {
            self.refused = true;
            return Err(BtlError::OutOfResource);
        }
        let landed = self.regs.check_remote(remote, Access::REMOTE_WRITE);
        let op = self.rdma(
            endpoint,
            Side::Local(local),
            Side::Remote(remote),
            ctx,
            true,
        )?;
        if let (Ok(slice), Some(Pending::Done(Completion::Put { result: Ok(()), .. }))) =
            (landed, self.queue.back())
        {
            let arrived = Completion::PutArrived {
                from: ME,
                slice,
                imm,
            };
            // Room for both was checked: the target's event goes first.
            if let Some(put) = self.queue.pop_back() {
                let _ = self.queue.push_back(Pending::Done(arrived));
                let _ = self.queue.push_back(put);
            }
        }
        Ok(op)
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.check(endpoint)?;
        self.regs.slice(local)?;
        self.rdma(
            endpoint,
            Side::Remote(remote),
            Side::Local(local),
            ctx,
            false,
        )
    }

    fn progress(&mut self) -> usize {
        // A refusal's `Room` follows the queued events.
        self.queue.len() + usize::from(self.refused)
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        self.release_delivered();
        let Some(pending) = self.queue.pop_front() else {
            // All this module held is back: what was refused fits.
            return core::mem::take(&mut self.refused).then_some(Event::Room { endpoint: ME });
        };
        match pending {
            Pending::Received { tag, payload } => {
                self.delivered = Some((tag, payload));
                let (_, payload) = self.delivered.as_ref()?;
                let data = match payload {
                    Payload::Slot { slot, len } => &self.slots[*slot][..*len],
                    Payload::Descriptor(desc) => desc.fragment_bytes(self.pools.view()).ok()?,
                };
                Some(Event::Received(Incoming {
                    from: ME,
                    tag,
                    data,
                }))
            }
            Pending::Done(c) => Some(c.into()),
        }
    }

    fn finalize(&mut self) -> crate::btl::Undelivered {
        if self.finalized {
            return crate::btl::Undelivered::default();
        }
        self.finalized = true;
        self.refused = false;
        crate::btl::Undelivered {
            outstanding: self.fail_undelivered(BtlError::Finalized),
        }
    }
}

impl<R: Region, M: AsRef<[u8]> + AsMut<[u8]>, const REGS: usize, const QUEUE: usize>
    Loopback<R, M, REGS, QUEUE>
{
    /// Fails every undelivered message's send with `error`; every other
    /// event stays to be polled.
    /// Fails every message not yet delivered with `error`; how many.
    fn fail_undelivered(&mut self, error: BtlError) -> usize {
        self.release_delivered();
        let n = self.queue.len();
        let mut failed = 0;
        for _ in 0..n {
            match self.queue.pop_front() {
                Some(Pending::Received {
                    tag,
                    payload: Payload::Descriptor(desc),
                }) => {
                    self.complete_send(tag, desc, Err(error));
                    failed += 1;
                }
                Some(Pending::Received {
                    payload: Payload::Slot { slot, .. },
                    ..
                }) => {
                    let _ = self.free_slots.push(slot as u16);
                    failed += 1;
                }
                Some(other) => {
                    let _ = self.queue.push_back(other);
                }
                None => break,
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests;
