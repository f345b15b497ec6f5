//! What every peer of an engine draws on: its configuration, fragment
//! pools, registered memory, operations and event queue, and the time of
//! the call being served. The engine lends it to a peer for each call; its
//! methods keep the rules that span them (a received message's fragment
//! and its event's place are taken and given back together).

use crate::btl::{
    BtlError, Completion, ErrorEvent, LostReason, MemSlice, Registrations, RejectCode, RemoteSlice,
    Tag,
};
use crate::desc::{DescFlags, Descriptor};
use crate::endpoint::{EndpointId, ProcName};
use crate::pool::{Fragment, FragmentClass, FragmentPools, PoolError, PoolsRef};
use crate::time::Instant;
use crate::wire::PutRepr;

use super::config::EngineConfig;
use super::events::{EventSlot, Events, Pending};
use super::ops::{Op, OpKind, OpSlot, Ops};
use super::share::fair_share;
use super::storage::Storage;

/// The resources an engine's peers share.
pub struct Shared<S: Storage> {
    pub(crate) config: EngineConfig,
    pub(crate) pools: FragmentPools<S::Region>,
    pub(crate) regs: Registrations<S::Memory, S::Registrations>,
    pub(crate) ops: Ops<S::Table<OpSlot>>,
    pub(crate) events: Events<S::Table<EventSlot>>,
    /// Peers on record: what the fair shares of these resources divide
    /// among ([`share`](super::share)).
    pub(crate) peers: usize,
    /// The time of the call being served.
    pub(crate) now: Instant,
    /// Peers lost for a reason other than a clean close, and the last.
    pub(crate) unclean_losses: (u64, Option<(ProcName, LostReason)>),
}

impl<S: Storage> Shared<S> {
    /// The pools' handle.
    pub(crate) fn pools(&self) -> PoolsRef<'_> {
        self.pools.view()
    }

    /// A fragment for a SEND's payload of `len` bytes, with its event's
    /// place kept; none while the pools or the event queue are full (the
    /// SEND waits, as for a fragment: a stream stops being read, a
    /// datagram is dropped and comes again).
    pub(crate) fn take_receive_fragment(&mut self, len: usize) -> Result<Fragment, PoolError> {
        if !self.events.has_room() {
            return Err(PoolError::Exhausted {
                class: FragmentClass::Max,
            });
        }
        let frag = self.pools.view().alloc(len)?;
        self.events.owe();
        Ok(frag)
    }

    /// Frees a SEND's fragment that will not be delivered, and its event's
    /// place.
    pub(crate) fn drop_received(&mut self, frag: Fragment) {
        self.events.forgive();
        let _ = self.pools.view().free(frag);
    }

    /// Delivers a message received from `from` in `frag`: its event takes
    /// the place kept when the fragment was taken.
    pub(crate) fn deliver(&mut self, from: EndpointId, tag: Tag, frag: Fragment, len: usize) {
        self.events.forgive();
        if let Err(Pending::Received { frag, .. }) = self.events.push(Pending::Received {
            from,
            tag,
            frag,
            len,
        }) {
            let _ = self.pools.view().free(frag);
        }
    }

    /// Ends a send to `endpoint`: frees an owned descriptor and queues the
    /// completion its caller is owed. A send that owes none
    /// (`BTL_OWNERSHIP` without `ALWAYS_CALLBACK`, and `sendi`) was reported
    /// complete when it was made, so it ends silently whatever its result;
    /// a lost peer is reported by its error event.
    pub(crate) fn complete_send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        result: Result<(), BtlError>,
    ) {
        let tag = desc.tag();
        let flags = desc.flags();
        let desc = if flags.contains(DescFlags::BTL_OWNERSHIP) {
            let _ = desc.free(self.pools.view());
            None
        } else {
            Some(desc)
        };
        if desc.is_some() || flags.contains(DescFlags::ALWAYS_CALLBACK) {
            // Its place was kept when the send was taken.
            self.events.forgive();
            if let Err(Pending::Done(Completion::Send { desc: Some(d), .. })) =
                self.events.push(Pending::Done(Completion::Send {
                    endpoint,
                    tag,
                    desc,
                    result,
                }))
            {
                let _ = d.free(self.pools.view());
            }
        }
    }

    /// Queues the event of a peer given up: an error, but for a peer that
    /// left, whose goodbye is an event of its own.
    pub(crate) fn report_lost(&mut self, endpoint: EndpointId, error: BtlError) {
        let event = if error == BtlError::PeerLost(crate::btl::LostReason::Left) {
            Completion::PeerLeft { endpoint }
        } else {
            Completion::Error(ErrorEvent {
                fatal: false,
                endpoint: Some(endpoint),
                error,
            })
        };
        let _ = self.events.push(Pending::Done(event));
    }

    /// The largest data one PUT packet to a peer accepting bodies of
    /// `peer_max_body` carries.
    pub(crate) fn put_chunk(&self, peer_max_body: u64) -> u64 {
        self.config
            .put_chunk
            .min(peer_max_body.saturating_sub(PutRepr::LEN as u64))
            .max(1)
    }

    /// Serves a get by putting `local` (checked already) to peer `to` in
    /// packets of `chunk`, as transfer `id`, into the peer's `dst`;
    /// `reply_to` is the process to answer once it lands, if another. The
    /// refusal to answer at once when there is no room: `Busy` when `to`
    /// already holds its share of the operation slots in gets being served
    /// to it (data it has not acknowledged), or no slot is free. The peer
    /// asks again later.
    pub(crate) fn serve(
        &mut self,
        to: EndpointId,
        chunk: u64,
        id: u64,
        local: MemSlice,
        dst: RemoteSlice,
        reply_to: Option<(ProcName, u64)>,
    ) -> Result<(), RejectCode> {
        let share = fair_share(self.ops.capacity(), self.peers);
        if self.ops.count_of(OpKind::Serve, to) >= share {
            return Err(RejectCode::Busy);
        }
        let Some(i) = self.ops.free_slot() else {
            return Err(RejectCode::Busy);
        };
        let mut op = Op::new(OpKind::Serve, to, 0, id, Some(local), dst, local.len, chunk);
        op.reply_to = reply_to;
        self.ops.start(i, op);
        if local.len == 0 {
            self.ops.finish(i, Ok(()), &mut self.events);
        }
        Ok(())
    }
}
