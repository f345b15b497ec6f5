//! The `Btl` interface of the engine, as the upper layer calls it:
//! processes, descriptors, sends, registrations, puts and gets, events and
//! finalize. Each call checks what it is given, hands the work to the peer
//! it concerns, and moves the peer's queues.

use crate::btl::{
    Access, Attributes, Btl, BtlError, Completion, Event, Incoming, Limit, LostReason, MemError,
    MemHandle, MemSlice, OpId, RegisterError, RejectCode, RemoteSlice, SendError, SendStatus, Tag,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::pool::{FragmentClass, PoolsRef};
use crate::wire::GetRepr;

use super::events::Pending;
use super::framing::Framing;
use super::journal::{self, Journal, journal_call, journal_out};
use super::ops::{Op, OpKind, get_request};
use super::packet::HEADER_RESERVE;
use super::rdma::Route;
use super::room::Wanted;
use super::share::fair_share;
use super::storage::Storage;
use super::{Engine, MAX_PEER_LINKS};

impl<S: Storage, F: Framing, const W: usize> Btl for Engine<S, F, W> {
    type Memory = S::Memory;

    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn pools(&self) -> PoolsRef<'_> {
        self.shared.pools.view()
    }

    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        let result = self.add_peers(procs, endpoints, reachable);
        journal_call!(
            self,
            journal::Call::AddProcs(journal::ProcList::Given(procs))
        );
        journal_out!(self, journal::Digest::of(&(&result, &*endpoints)));
        result
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        let result = self.remove_peers(endpoints);
        journal_call!(
            self,
            journal::Call::DelProcs(journal::EndpointList::Given(endpoints))
        );
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let result = self.alloc_desc(endpoint, order, size, flags);
        journal_call!(
            self,
            journal::Call::Alloc {
                endpoint,
                order,
                size,
                flags,
            }
        );
        journal_out!(self, desc_digest(&result));
        result
    }

    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        journal_call!(self, journal::Call::Free(journal::DescId::of(&desc)));
        let result = self.free_desc(desc);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let result = self.copy_in(endpoint, data, reserve, order, flags);
        journal_call!(
            self,
            journal::Call::PrepareSrc {
                endpoint,
                data,
                reserve,
                order,
                flags,
            }
        );
        journal_out!(self, desc_digest(&result));
        result
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        journal_call!(
            self,
            journal::Call::PrepareSrcRegistered {
                endpoint,
                slice: data,
                bytes: self.shared.regs.slice(data).unwrap_or(&[]),
                reserve,
                order,
                flags,
            }
        );
        let result = self.prepare_registered(endpoint, data, reserve, order, flags);
        journal_out!(self, desc_digest(&result));
        result
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        journal_call!(
            self,
            journal::Call::Send {
                endpoint,
                desc: journal::DescId::of(&desc),
                bytes: desc.fragment_bytes(self.shared.pools()).unwrap_or(&[]),
                tag,
            }
        );
        let result = self.queue_send(endpoint, desc, tag);
        journal_out!(self, journal::Digest::of_send(&result));
        result
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        let result = self.send_inline(endpoint, header, payload, tag, order, flags);
        journal_call!(
            self,
            journal::Call::Sendi {
                endpoint,
                header,
                payload,
                tag,
                order,
                flags,
            }
        );
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn register_mem(
        &mut self,
        region: S::Memory,
        access: Access,
    ) -> Result<MemHandle, RegisterError<S::Memory>> {
        journal_call!(
            self,
            journal::Call::RegisterMem {
                data: region.as_ref(),
                access,
            }
        );
        let result = self.register(region, access);
        journal_out!(
            self,
            journal::Digest::of(&result.as_ref().map_err(|e| e.error))
        );
        result
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<S::Memory, BtlError> {
        let result = self.deregister(handle);
        journal_call!(self, journal::Call::DeregisterMem(handle));
        journal_out!(self, journal::Digest::of(&result.as_ref().map(|_| ())));
        result
    }

    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError> {
        Ok(self.shared.regs.region(handle)?)
    }

    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError> {
        Ok(self.shared.regs.region_mut(handle)?)
    }

    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        journal_call!(
            self,
            journal::Call::Rdma {
                kind: journal::RdmaCall::Put,
                endpoint,
                local,
                remote,
                ctx,
                imm: 0,
                bytes: self.shared.regs.slice(local).unwrap_or(&[]),
            }
        );
        let result = self.start_put(endpoint, local, remote, ctx);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        journal_call!(
            self,
            journal::Call::Rdma {
                kind: journal::RdmaCall::PutNotify,
                endpoint,
                local,
                remote,
                ctx,
                imm,
                bytes: self.shared.regs.slice(local).unwrap_or(&[]),
            }
        );
        let result = self.start_put_notify(endpoint, local, remote, imm, ctx);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        journal_call!(
            self,
            journal::Call::Rdma {
                kind: journal::RdmaCall::Get,
                endpoint,
                local,
                remote,
                ctx,
                imm: 0,
                bytes: &[],
            }
        );
        let result = self.start_get(endpoint, local, remote, ctx);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn progress(&mut self) -> usize {
        let idle = !self.peers.has_touched()
            && !self.links.has_touched()
            && !self.lost_unheld
            && !self.shared.ops.has_mail()
            && !self.room_hint
            && !self.room_ready;
        let result = self.settle_turn();
        if !idle {
            journal_call!(self, journal::Call::Progress);
            journal_out!(self, journal::Digest::of(&result));
        }
        result
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        let idle = self.delivered.is_none() && !self.room_hint;
        let next = self.next_event();
        if self.journal.is_on() && (next.is_some() || !idle) {
            let digest = match &next {
                Some(Next::Received { from, tag, len }) => {
                    let data = self.delivered_bytes(*len).unwrap_or(&[]);
                    journal::Digest::of_event(&Event::Received(Incoming {
                        from: *from,
                        tag: *tag,
                        data,
                    }))
                }
                Some(Next::Other(event)) => journal::Digest::of_event(event),
                None => journal::Digest::of(&None::<()>),
            };
            journal_call!(self, journal::Call::PollEvent);
            journal_out!(self, digest);
        }
        match next? {
            Next::Received { from, tag, len } => Some(Event::Received(Incoming {
                from,
                tag,
                data: self.delivered_bytes(len)?,
            })),
            Next::Other(event) => Some(event),
        }
    }

    fn finalize(&mut self) -> crate::btl::Undelivered {
        let result = self.finalize_all();
        journal_call!(self, journal::Call::Finalize);
        journal_out!(self, journal::Digest::of(&result));
        result
    }
}

/// The upper layer's calls as they act, unrecorded: the [`Btl`] methods
/// record each in the journal around them.
impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    fn prepare_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        self.shared.regs.slice(data)?;
        let len = data.len as usize + reserve;
        if len <= self.attributes.eager_limit {
            let bytes = self.shared.regs.slice(data)?;
            let desc = self.check_send_room(p, len).and_then(|()| {
                Descriptor::prepare_src(
                    self.shared.pools.view(),
                    HEADER_RESERVE as u16,
                    reserve,
                    bytes,
                    order,
                    flags,
                )
                .map_err(BtlError::from)
            });
            return self.note_fragment_refusal(p, len, desc);
        }
        Limit::Here.admits(len, self.attributes.max_send_size)?;
        let desc = self.check_send_room(p, reserve).and_then(|()| {
            Descriptor::prepare_src_inplace(
                self.shared.pools(),
                HEADER_RESERVE as u16,
                reserve,
                data,
                order,
                flags,
            )
            .map_err(BtlError::from)
        });
        self.note_fragment_refusal(p, reserve, desc)
    }

    fn start_put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let started = self.start_op(OpKind::Put, p, local, remote, ctx, None);
        let (id, _) = self.note_refusal(p, Wanted::OP, started)?;
        Ok(id)
    }

    fn start_put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        if !self.peers.get(p).is_some_and(|peer| peer.takes_notices()) {
            return Err(BtlError::NotSupported);
        }
        let started = self.start_op(OpKind::Put, p, local, remote, ctx, Some(imm));
        let (id, _) = self.note_refusal(p, Wanted::OP, started)?;
        Ok(id)
    }

    fn start_get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let started = self.start_op(OpKind::Get, p, local, remote, ctx, None);
        let (op, under_way) = self.note_refusal(p, Wanted::OP, started)?;
        if !under_way {
            // Ended at once (empty, or refused), or going by the device:
            // nothing to ask the peer.
            return Ok(op);
        }
        let get = get_request(op.0, remote, self.shared.config.me);
        let queued = self.queue_get(p, op, get);
        self.note_refusal(p, Wanted::QUEUE, queued)?;
        Ok(op)
    }

    fn next_completion(&mut self) -> Option<Completion> {
        let own = |p: &Pending| {
            matches!(
                p,
                Pending::Done(
                    Completion::Send { .. } | Completion::Put { .. } | Completion::Get { .. }
                )
            )
        };
        match self.shared.events.take_first(own)? {
            Pending::Done(c) => Some(c),
            Pending::Received { .. } => None,
        }
    }

    fn start_get_third_party(
        &mut self,
        source: EndpointId,
        src: RemoteSlice,
        target: ProcName,
        dst: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        if target == self.shared.config.me {
            let local = self.shared.regs.check_remote(dst, Access::REMOTE_WRITE)?;
            return self.start_get(source, local, src, ctx);
        }
        let p = self.check_endpoint(source)?;
        same_length(src.len, dst)?;
        let claimed = self.claim_op_slot();
        let i = self.note_refusal(p, Wanted::OP, claimed)?;
        let id = self.shared.ops.new_id();
        let op = Op::new(OpKind::GetThirdParty, p, ctx, id, None, src, src.len, 1);
        self.shared.ops.start(i, op);
        if src.len == 0 {
            self.shared.ops.finish(i, Ok(()), &mut self.shared.events);
            return Ok(OpId(id));
        }
        if src.offset.checked_add(src.len).is_none() || dst.offset.checked_add(dst.len).is_none() {
            self.shared.ops.finish(
                i,
                Err(BtlError::Rejected(RejectCode::OutOfBounds)),
                &mut self.shared.events,
            );
            return Ok(OpId(id));
        }
        let get = GetRepr {
            xfer_id: id,
            src_handle: src.key.0,
            src_offset: src.offset,
            len: src.len,
            target_job: target.job,
            target_rank: target.rank,
            dst_handle: dst.key.0,
            dst_offset: dst.offset,
        };
        let queued = self.queue_get(p, OpId(id), get);
        self.note_refusal(p, Wanted::QUEUE, queued)?;
        Ok(OpId(id))
    }

    /// The next event, the upper layer's last message freed first: a
    /// message is told by where its bytes are ([`delivered_bytes`](Self::delivered_bytes)).
    fn next_event(&mut self) -> Option<Next> {
        self.release_delivered();
        let Some(pending) = self.shared.events.pop() else {
            return self.poll_room().map(Next::Other);
        };
        match pending {
            Pending::Received {
                from,
                tag,
                frag,
                len,
            } => {
                self.delivered = Some((from, frag));
                Some(Next::Received { from, tag, len })
            }
            Pending::Done(c) => {
                // A notice's credit goes back as a message's does, once the
                // upper layer has seen it.
                if let Completion::PutArrived { from, .. } = c
                    && let Some(peer) = self.peers.get_mut(from)
                {
                    peer.give_back_credit(self.shared.now);
                }
                Some(Next::Other(c.into()))
            }
        }
    }

    /// The first `len` bytes of the message handed out last.
    fn delivered_bytes(&self, len: usize) -> Option<&[u8]> {
        let (_, frag) = self.delivered.as_ref()?;
        self.shared.pools.view().bytes(frag).ok()?.get(..len)
    }

    fn add_peers(
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
            if *proc == self.shared.config.me {
                continue;
            }
            let p = self
                .find_or_add_peer(*proc)
                .ok_or(BtlError::OutOfResource)?;
            let _ = self.peers.add_ref(p);
            if reachable.set(i) {
                *ep = Some(p);
            }
        }
        Ok(())
    }

    fn remove_peers(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for &ep in endpoints {
            let refs = self.peers.release(ep).map_err(|_| BtlError::Unreachable)?;
            if refs == 0 {
                self.lose_peer(ep, LostReason::Removed);
                self.forget_peer(ep);
            }
        }
        self.settle();
        Ok(())
    }

    fn alloc_desc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        self.check_send_size(size)?;
        let desc = self.check_send_room(p, size).and_then(|()| {
            Descriptor::alloc(
                self.shared.pools(),
                HEADER_RESERVE as u16,
                0,
                size,
                order,
                flags,
            )
            .map_err(BtlError::from)
        });
        self.note_fragment_refusal(p, size, desc)
    }

    fn free_desc(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        desc.free(self.shared.pools())
            .map_err(|_| BtlError::Memory(MemError::UnknownRegion))
    }

    fn copy_in(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let len = data.len().saturating_add(reserve);
        self.check_send_size(len)?;
        let desc = self.check_send_room(p, len).and_then(|()| {
            Descriptor::prepare_src(
                self.shared.pools(),
                HEADER_RESERVE as u16,
                reserve,
                data,
                order,
                flags,
            )
            .map_err(BtlError::from)
        });
        self.note_fragment_refusal(p, len, desc)
    }

    fn queue_send(
        &mut self,
        endpoint: EndpointId,
        mut desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        let refuse = |error, desc| Err(SendError { error, desc });
        let p = match self.check_endpoint(endpoint) {
            Ok(p) => p,
            Err(error) => return refuse(error, desc),
        };
        if desc.headroom() != HEADER_RESERVE {
            return refuse(BtlError::NotSupported, desc);
        }
        let len = desc.len() - HEADER_RESERVE;
        let accepted = self.check_send_size(len).and_then(|()| {
            self.peers
                .get(p)
                .map_or(Err(BtlError::Unreachable), |peer| peer.accepts(len))
        });
        if let Err(error) = accepted {
            return refuse(error, desc);
        }
        desc.set_tag(tag);
        // An owned descriptor without ALWAYS_CALLBACK owes its caller
        // nothing: the send counts as complete now (SendStatus::Completed
        // promises no event), and the peer ends it silently.
        let quiet = desc.flags().contains(DescFlags::BTL_OWNERSHIP)
            && !desc.flags().contains(DescFlags::ALWAYS_CALLBACK);
        // A send that ends with an event is taken only with room for it.
        if !quiet && !self.shared.events.owe() {
            self.want_room(p, Wanted::EVENT);
            return refuse(BtlError::OutOfResource, desc);
        }
        let Some(peer) = self.peers.get_mut(p) else {
            return refuse(BtlError::Unreachable, desc);
        };
        if let Err(desc) = peer.queue_send(desc) {
            if !quiet {
                self.shared.events.forgive();
            }
            self.want_room(p, Wanted::QUEUE);
            return refuse(BtlError::OutOfResource, desc);
        }
        self.flush_peer(p);
        Ok(if quiet {
            SendStatus::Completed(None)
        } else {
            SendStatus::Queued
        })
    }

    fn send_inline(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let len = header.len() + payload.len();
        // sendi is the path of small messages: what one eager fragment holds.
        Limit::Here.admits(len, self.attributes.eager_limit)?;
        let peer = self.peers.get(p).ok_or(BtlError::Unreachable)?;
        if !peer.takes_sendi() {
            return Err(BtlError::OutOfResource);
        }
        peer.accepts(len)?;
        self.check_send_room(p, len)?;
        let mut desc = Descriptor::alloc(
            self.shared.pools(),
            HEADER_RESERVE as u16,
            0,
            len,
            order,
            flags | DescFlags::BTL_OWNERSHIP,
        )?;
        if let Ok(bytes) = desc.payload_mut(self.shared.pools()) {
            bytes[..header.len()].copy_from_slice(header);
            bytes[header.len()..].copy_from_slice(payload);
        }
        desc.set_tag(tag);
        desc.set_flags(desc.flags() - DescFlags::ALWAYS_CALLBACK);
        if let Some(peer) = self.peers.get_mut(p)
            && let Err(desc) = peer.queue_send(desc)
        {
            // Not when it takes sendi: the queue had room.
            let _ = desc.free(self.shared.pools());
            return Err(BtlError::OutOfResource);
        }
        self.flush_peer(p);
        Ok(())
    }

    fn register(
        &mut self,
        region: S::Memory,
        access: Access,
    ) -> Result<MemHandle, RegisterError<S::Memory>> {
        if self.finalized {
            return Err(RegisterError {
                error: BtlError::Finalized,
                region,
            });
        }
        Ok(self.shared.regs.register(region, access)?)
    }

    fn deregister(&mut self, handle: MemHandle) -> Result<S::Memory, BtlError> {
        // A frame that reads the region must keep its length: a region
        // taken away mid-send would shorten the frame and desynchronise
        // the stream.
        // The driver's device must let go of it first (set_device_key with
        // None): a peer's RDMA must never reach memory the user owns
        // again.
        if self.region_in_use(handle) || self.shared.regs.device(handle).is_some() {
            return Err(BtlError::Memory(MemError::InUse));
        }
        Ok(self.shared.regs.deregister(handle)?)
    }

    fn settle_turn(&mut self) -> usize {
        self.settle();
        // Once a turn, not once an input: a scan of the waiting peers.
        self.room_ready = self.room_hint && self.any_room();
        self.pending_events()
    }

    fn finalize_all(&mut self) -> crate::btl::Undelivered {
        if self.finalized {
            return crate::btl::Undelivered::default();
        }
        let undelivered = crate::btl::Undelivered {
            outstanding: self.outstanding(),
        };
        for i in 0..self.peers.len() {
            let Some(p) = self.peers.id_at(i) else {
                continue;
            };
            if let Some(peer) = self.peers.get_mut(p) {
                peer.fail(LostReason::Removed, BtlError::Finalized, &mut self.shared);
            }
            self.drop_links_of_lost(p);
        }
        self.finalized = true;
        undelivered
    }
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// The oldest completion of this side's own sends, puts and gets,
    /// taken past the messages and other events queued before it (which
    /// keep their order): for an upper layer that cannot take a message
    /// now (its queue for it is full) but must still learn that its
    /// operations ended, or it would wait for them and never read. A
    /// received message's bytes stay valid as before.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let result = self.next_completion();
        if result.is_some() {
            journal_call!(self, journal::Call::PollCompletion);
            journal_out!(self, journal::Digest::of(&result));
        }
        result
    }

    /// Whether a put, a get or a send under way reads or writes
    /// registration `handle`: its deregistration is refused (`InUse`)
    /// until they end. A driver whose device holds the region asks before
    /// it takes the region from the device.
    pub fn region_in_use(&self, handle: MemHandle) -> bool {
        self.shared.ops.uses(handle) || self.peers.iter().any(|(_, _, peer)| peer.reads(handle))
    }

    /// Asks the peer `source` to put its `src` into `dst`, a registration
    /// of process `target` (a third-party get, as Motr allows): the data
    /// moves from the source to the target without passing through this
    /// process. Completes with [`Event::GetComplete`] once the target holds
    /// the data, or with the error the source or target gave
    /// (`Rejected(NoTarget)` when the source does not reach the target).
    ///
    /// `target` may be this process (then it is [`get`](Btl::get) into the
    /// registration `dst` names) or the source itself (a copy between two
    /// of its registrations). `src` and `dst` must be the same length.
    pub fn get_third_party(
        &mut self,
        source: EndpointId,
        src: RemoteSlice,
        target: ProcName,
        dst: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        journal_call!(
            self,
            journal::Call::GetThirdParty {
                source,
                src,
                target,
                dst,
                ctx,
            }
        );
        let result = self.start_get_third_party(source, src, target, dst, ctx);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    /// Checks a put's or get's ranges and starts it, a put with the value
    /// `notice` for its target's event if it has one; its id, and whether
    /// a get is to ask the peer with a GET (it did not end at once, empty
    /// or refused, and does not go by the driver's device).
    fn start_op(
        &mut self,
        kind: OpKind,
        p: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
        notice: Option<u64>,
    ) -> Result<(OpId, bool), BtlError> {
        self.shared.regs.slice(local)?;
        same_length(local.len, remote)?;
        let i = self.claim_op_slot()?;
        let id = self.shared.ops.new_id();
        let chunk = self
            .peers
            .get(p)
            .map_or(1, |peer| peer.put_chunk(&self.shared));
        let op = Op::new(kind, p, ctx, id, Some(local), remote, local.len, chunk).noticed(notice);
        self.shared.ops.start(i, op);
        if local.len == 0 && notice.is_none() {
            self.shared.ops.finish(i, Ok(()), &mut self.shared.events);
            return Ok((OpId(id), false));
        }
        if remote.offset.checked_add(remote.len).is_none() {
            // A range that wraps around u64 is outside any region; no
            // packet may carry it (the peer would take it for a protocol
            // error).
            self.shared.ops.finish(
                i,
                Err(BtlError::Rejected(RejectCode::OutOfBounds)),
                &mut self.shared.events,
            );
            return Ok((OpId(id), false));
        }
        let mut packets = true;
        if self.shared.regs.device(local.handle).is_some()
            && local.len > 0
            && let Some(peer) = self.peers.get_mut(p)
            && let Some(op) = self.shared.ops.get(i).copied()
        {
            let route = peer.lookup_key(&op);
            if route != Route::Packets {
                packets = false;
                peer.take_route(i, op, route, &mut self.shared);
            }
        }
        self.flush_peer(p);
        Ok((OpId(id), packets))
    }

    /// A free slot for an operation of this side's, which ends with an
    /// event: its place in the event queue is kept from now on.
    fn claim_op_slot(&mut self) -> Result<usize, BtlError> {
        let i = self.shared.ops.free_slot().ok_or(BtlError::OutOfResource)?;
        if !self.shared.events.owe() {
            return Err(BtlError::OutOfResource);
        }
        Ok(i)
    }

    /// Queues the GET of operation `op` to peer `p`; a full queue ends the
    /// operation unreported, and the caller returns `OutOfResource`.
    fn queue_get(&mut self, p: EndpointId, op: OpId, get: GetRepr) -> Result<(), BtlError> {
        let queued = self
            .peers
            .get_mut(p)
            .is_some_and(|peer| peer.queue_get(get));
        if !queued {
            if let Some(i) = self.shared.ops.find_any(p, op.0) {
                self.shared.ops.abandon(i);
            }
            self.shared.events.forgive();
            return Err(BtlError::OutOfResource);
        }
        self.flush_peer(p);
        Ok(())
    }

    /// A fragment for a message of `len` bytes to send leaves a quarter of
    /// its class (at least one fragment) for receiving: were the process's
    /// own unacknowledged sends to hold every fragment of a class, it could
    /// not take in the very packet whose acknowledgement would free them
    /// (the simulation found that deadlock: five hosts sending each other
    /// large messages at once). Beyond it, a send is refused with
    /// `OutOfResource` and is tried again after progress.
    ///
    /// Of the three quarters left, peer `p` may hold only its share
    /// ([`share`](super::share)) in messages queued to it or sent and not
    /// acknowledged: a peer that acknowledges nothing cannot take a class
    /// from every other peer, and only sends to it wait.
    fn check_send_room(&self, p: EndpointId, len: usize) -> Result<(), BtlError> {
        let pools = self.shared.pools();
        match pools.class_for(len.saturating_add(HEADER_RESERVE)) {
            Ok(class) => self.class_room(p, class),
            // Too large for any class: the allocation says so itself.
            Err(_) => Ok(()),
        }
    }

    /// [`check_send_room`](Self::check_send_room) for a fragment of
    /// `class`.
    pub(super) fn class_room(&self, p: EndpointId, class: FragmentClass) -> Result<(), BtlError> {
        let stats = self.shared.pools().stats(class);
        let capacity = stats.capacity as usize;
        let free = capacity.saturating_sub(stats.in_use as usize);
        let kept = (capacity / 4).max(1);
        if free <= kept {
            return Err(BtlError::OutOfResource);
        }
        let share = fair_share(capacity - kept, self.peers.len());
        if self
            .peers
            .get(p)
            .is_some_and(|peer| peer.holds_sends(share))
        {
            return Err(BtlError::OutOfResource);
        }
        Ok(())
    }

    /// A message of `len` bytes (reserve included) must fit one packet.
    fn check_send_size(&self, len: usize) -> Result<(), BtlError> {
        Limit::Here.admits(len, self.attributes.max_send_size)
    }

    /// Frees the message the last `poll_event` handed out, and gives its
    /// credit back to its sender with the next acknowledgement.
    fn release_delivered(&mut self) {
        if let Some((from, frag)) = self.delivered.take() {
            let _ = self.shared.pools.view().free(frag);
            if let Some(peer) = self.peers.get_mut(from) {
                peer.give_back_credit(self.shared.now);
            }
        }
    }
}

const _: () = assert!(MAX_PEER_LINKS <= 8, "link indexes are bits of a byte");

/// A transfer of `len` bytes into or out of `remote` must fit it exactly.
fn same_length(len: u64, remote: RemoteSlice) -> Result<(), BtlError> {
    if len != remote.len {
        return Err(BtlError::Memory(MemError::OutOfBounds {
            offset: remote.offset,
            len,
            size: remote.len,
        }));
    }
    Ok(())
}

/// The digest of a call's descriptor, or of why there is none.
fn desc_digest(result: &Result<Descriptor, BtlError>) -> u64 {
    match result {
        Ok(desc) => journal::Digest::of_desc(desc),
        Err(e) => journal::Digest::of(e),
    }
}

/// What [`Btl::poll_event`] hands out next: a message (its bytes are the
/// fragment delivered last), or any other event.
enum Next {
    Received {
        from: EndpointId,
        tag: Tag,
        len: usize,
    },
    Other(Event<'static>),
}
