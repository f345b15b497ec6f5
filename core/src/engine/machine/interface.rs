//! The `Btl` interface of the engine, as the upper layer calls it: processes,
//! descriptors, sends, registrations, puts and gets, events and finalize.

use super::bulk::OpKind;
use super::peer::PeerState;
use super::reliable::{Outgoing, Queued};
use super::{Engine, Pending, SEND_PREFIX};
use crate::btl::{
    Access, Attributes, Btl, BtlError, Event, Incoming, LostReason, MemHandle, MemSlice, OpId,
    RegisterError, RemoteSlice, SendError, SendStatus, Tag,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName, Reachability};
use crate::pool::PoolsRef;
use crate::wire::{GetRepr, SendRepr};

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize> Btl
    for Engine<'r, 'm, PEERS, LINKS, REGS>
{
    type Memory = &'m mut [u8];

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
            if *proc == self.config.me {
                continue;
            }
            let Some(p) = self.find_or_add_peer(*proc) else {
                return Err(BtlError::OutOfResource);
            };
            if let Some(peer) = self.peers[p].as_mut() {
                peer.refs = peer.refs.saturating_add(1);
            }
            if reachable.set(i) {
                *ep = Some(self.endpoint(p));
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for ep in endpoints {
            let p = self.peer_slot(*ep).ok_or(BtlError::Unreachable)?;
            let peer = self.peers[p].as_mut().ok_or(BtlError::Unreachable)?;
            peer.refs = peer.refs.saturating_sub(1);
            if peer.refs == 0 {
                self.lose_peer(p, LostReason::Removed);
                self.forget_peer(p);
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
        self.check_endpoint(endpoint)?;
        self.check_send_size(size)?;
        self.check_send_room(size)?;
        Descriptor::alloc(self.pools.view(), SEND_PREFIX as u16, 0, size, order, flags)
            .map_err(desc_error)
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
        self.check_endpoint(endpoint)?;
        self.check_send_size(data.len().saturating_add(reserve))?;
        self.check_send_room(data.len().saturating_add(reserve))?;
        Descriptor::prepare_src(
            self.pools.view(),
            SEND_PREFIX as u16,
            reserve,
            data,
            order,
            flags,
        )
        .map_err(desc_error)
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        self.check_endpoint(endpoint)?;
        self.regs.slice(data)?;
        if data.len as usize + reserve <= self.attributes.eager_limit {
            self.check_send_room(data.len as usize + reserve)?;
            let bytes = self.regs.slice(data)?;
            return Descriptor::prepare_src(
                self.pools.view(),
                SEND_PREFIX as u16,
                reserve,
                bytes,
                order,
                flags,
            )
            .map_err(desc_error);
        }
        if data.len as usize + reserve > self.attributes.max_send_size {
            return Err(BtlError::TooLarge {
                len: data.len,
                max: self.attributes.max_send_size as u64,
            });
        }
        Descriptor::prepare_src_inplace(
            self.pools.view(),
            SEND_PREFIX as u16,
            reserve,
            data,
            order,
            flags,
        )
        .map_err(desc_error)
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        mut desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        let p = match self.check_endpoint(endpoint) {
            Ok(p) => p,
            Err(error) => return Err(SendError { error, desc }),
        };
        if desc.headroom() != SEND_PREFIX {
            return Err(SendError {
                error: BtlError::NotSupported,
                desc,
            });
        }
        if let Err(error) = self
            .check_send_size(desc.len() - SEND_PREFIX)
            .and_then(|()| self.check_peer_accepts(p, desc.len() - SEND_PREFIX))
        {
            return Err(SendError { error, desc });
        }
        desc.set_tag(tag);
        // An owned descriptor without ALWAYS_CALLBACK owes its caller
        // nothing: the send counts as complete now (SendStatus::Completed
        // promises no event), and complete_send ends it silently.
        let quiet = desc.flags().contains(DescFlags::BTL_OWNERSHIP)
            && !desc.flags().contains(DescFlags::ALWAYS_CALLBACK);
        // A send that ends with an event is taken only with room for it.
        if !quiet && !self.has_event_room() {
            return Err(SendError {
                error: BtlError::OutOfResource,
                desc,
            });
        }
        let Some(peer) = self.peers[p].as_mut() else {
            return Err(SendError {
                error: BtlError::Unreachable,
                desc,
            });
        };
        if let Err(Queued::Send(desc)) = peer.queue.push_back(Queued::Send(desc)) {
            return Err(SendError {
                error: BtlError::OutOfResource,
                desc,
            });
        }
        if !quiet {
            self.owed += 1;
        }
        self.progress_queues();
        Ok(if quiet {
            SendStatus::Completed(None)
        } else {
            SendStatus::Queued
        })
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
        let p = self.check_endpoint(endpoint)?;
        let len = header.len() + payload.len();
        // sendi is the path of small messages: what one eager fragment holds.
        if len > self.attributes.eager_limit {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max: self.attributes.eager_limit as u64,
            });
        }
        let ready = self.peers[p].as_ref().is_some_and(|peer| {
            peer.state == PeerState::Open
                && peer.queue.is_empty()
                && peer.answers.is_empty()
                && peer.has_credit()
                && !peer.send.is_full()
        });
        if !ready {
            return Err(BtlError::OutOfResource);
        }
        self.check_peer_accepts(p, len)?;
        self.check_send_room(len)?;
        let mut desc = Descriptor::alloc(
            self.pools.view(),
            SEND_PREFIX as u16,
            0,
            len,
            order,
            flags | DescFlags::BTL_OWNERSHIP,
        )
        .map_err(desc_error)?;
        if let Ok(bytes) = desc.payload_mut(self.pools.view()) {
            bytes[..header.len()].copy_from_slice(header);
            bytes[header.len()..].copy_from_slice(payload);
        }
        desc.set_tag(tag);
        let desc_flags = desc.flags() - DescFlags::ALWAYS_CALLBACK;
        desc.set_flags(desc_flags);
        self.transmit_send(p, desc);
        Ok(())
    }

    fn register_mem(
        &mut self,
        region: &'m mut [u8],
        access: Access,
    ) -> Result<MemHandle, RegisterError<&'m mut [u8]>> {
        if self.finalized {
            return Err(RegisterError {
                error: BtlError::Finalized,
                region,
            });
        }
        Ok(self.regs.register(region, access)?)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<&'m mut [u8], BtlError> {
        // A frame that reads the region must keep its length: a region
        // taken away mid-send would shorten the frame and desynchronise
        // the stream.
        let by_op = self
            .ops
            .iter()
            .flatten()
            .any(|o| o.local.is_some_and(|l| l.handle == handle));
        let by_packet = self.peers.iter_mut().flatten().any(|peer| {
            peer.send.unacked_mut().any(|(_, out)| match out {
                Outgoing::Send { desc, .. } => {
                    desc.referenced().is_some_and(|r| r.handle == handle)
                }
                Outgoing::Put { data, .. } => data.handle == handle,
                Outgoing::Control { .. } => false,
            }) || peer.queue.iter().any(|q| match q {
                Queued::Send(desc) => desc.referenced().is_some_and(|r| r.handle == handle),
                Queued::Get(_) => false,
            })
        });
        if by_op || by_packet {
            return Err(BtlError::Memory(crate::btl::MemError::InUse));
        }
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
        let p = self.check_endpoint(endpoint)?;
        self.start_op(OpKind::Put, p, local, remote, ctx)
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let p = self.check_endpoint(endpoint)?;
        let op = self.start_op(OpKind::Get, p, local, remote, ctx)?;
        let Some(i) = self.find_op(OpKind::Get, p, op.0) else {
            // Ended at once (empty, or refused): nothing to ask the peer.
            return Ok(op);
        };
        let me = self.config.me;
        let get = GetRepr {
            xfer_id: op.0,
            src_handle: remote.key.0,
            src_offset: remote.offset,
            len: remote.len,
            target_job: me.job,
            target_rank: me.rank,
            dst_handle: 0,
            dst_offset: 0,
        };
        self.queue_get(p, i, get)?;
        Ok(op)
    }

    fn progress(&mut self) -> usize {
        self.progress_queues();
        self.events.len()
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        self.release_delivered();
        match self.events.pop_front()? {
            Pending::Received {
                from,
                tag,
                frag,
                len,
            } => {
                self.delivered = Some((from, frag));
                let (_, frag) = self.delivered.as_ref()?;
                let data = self.pools.view().bytes(frag).ok()?.get(..len)?;
                Some(Event::Received(Incoming { from, tag, data }))
            }
            Pending::Done(c) => Some(c.into()),
        }
    }

    fn finalize(&mut self) {
        if self.finalized {
            return;
        }
        for p in self.present_peers.clone() {
            self.fail_peer(usize::from(p), LostReason::Removed, BtlError::Finalized);
        }
        self.finalized = true;
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// A fragment for a message of `len` bytes to send leaves a quarter of
    /// its class (at least one fragment) for receiving: were the process's
    /// own unacknowledged sends to hold every fragment of a class, it could
    /// not take in the very packet whose acknowledgement would free them
    /// (the simulation found that deadlock: five hosts sending each other
    /// large messages at once). Beyond it, a send is refused with
    /// `OutOfResource` and is tried again after progress.
    fn check_send_room(&self, len: usize) -> Result<(), BtlError> {
        let total = len.saturating_add(SEND_PREFIX);
        let Ok(class) = self.pools.view().class_for(total) else {
            // Too large for any class: the allocation says so itself.
            return Ok(());
        };
        let stats = self.pools.view().stats(class);
        let free = stats.capacity.saturating_sub(stats.in_use);
        let reserve = (stats.capacity / 4).max(1);
        if free <= reserve {
            return Err(BtlError::OutOfResource);
        }
        Ok(())
    }

    /// A message of `len` bytes (reserve included) must fit one packet.
    fn check_send_size(&self, len: usize) -> Result<(), BtlError> {
        let max = self.attributes.max_send_size;
        if len > max {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max: max as u64,
            });
        }
        Ok(())
    }

    /// A message of `len` bytes must fit the body the peer announced, once
    /// it has (a peer not yet open is checked when the message leaves).
    fn check_peer_accepts(&self, p: usize, len: usize) -> Result<(), BtlError> {
        let Some(peer) = self.peers[p].as_ref().filter(|peer| peer.was_open) else {
            return Ok(());
        };
        let max = peer.peer_max_body.saturating_sub(SendRepr::LEN as u64);
        if len as u64 > max {
            return Err(BtlError::TooLarge {
                len: len as u64,
                max,
            });
        }
        Ok(())
    }

    fn release_delivered(&mut self) {
        if let Some((from, frag)) = self.delivered.take() {
            let _ = self.pools.view().free(frag);
            if let Some(p) = self.peer_slot(from)
                && let Some(peer) = self.peers[p].as_mut()
            {
                peer.granted = peer.granted.wrapping_add(1);
                peer.owe_ack(self.now, false);
            }
        }
    }
}

fn desc_error(e: crate::desc::DescError) -> BtlError {
    match e {
        crate::desc::DescError::Pool(p) => p.into(),
        crate::desc::DescError::LengthOverflow => BtlError::TooLarge {
            len: u64::MAX,
            max: u64::from(u32::MAX),
        },
    }
}
