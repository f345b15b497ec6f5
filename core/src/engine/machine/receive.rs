//! The read path: a link's bytes into frames, a frame's payload into a
//! receive fragment or registered memory, and the peer's packets through its
//! receive window, delivered in order.

use super::bulk::OpKind;
use super::link::LinkState;
use super::reliable::Answer;
use super::{Engine, GET_REPLY, Pending};
use crate::btl::{BtlError, LostReason, MemSlice, RejectCode, Tag};
use crate::engine::mover::{PayloadTarget, ReadStep};
use crate::engine::window::{Ack, Arrival, Refused};
use crate::pool::Fragment;
use crate::wire::{
    AckRepr, CloseReason, CloseRepr, DoneRepr, Flags, GetRepr, HeaderRepr, HelloAckRepr, HelloRepr,
    PacketType, PutRepr, RejectRepr, SendRepr,
};

/// What the reader is receiving into.
#[derive(Debug)]
pub(super) enum Receiving {
    None,
    Send {
        tag: Tag,
        seq: u64,
        frag: Fragment,
        have: usize,
        len: usize,
    },
    /// A SEND whose payload waits for a receive fragment.
    WaitingFragment {
        tag: Tag,
        seq: u64,
        len: usize,
    },
    Put {
        put: PutRepr,
        seq: u64,
        dst: Result<MemSlice, RejectCode>,
        have: u64,
    },
    /// A SEND or PUT received before: its payload is dropped unread, and
    /// the peer is owed an acknowledgement (it evidently missed one).
    Duplicate,
    Control(ControlIn),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum ControlIn {
    Hello(HelloRepr),
    HelloAck(HelloAckRepr),
    Get { seq: u64, get: GetRepr },
    Ack(AckRepr),
    Close { reason: CloseReason },
    Reject { seq: u64, reject: RejectRepr },
    Done { seq: u64, done: DoneRepr },
}

/// What a receive window holds until delivery in order.
#[derive(Debug)]
pub(super) enum Held {
    Send {
        tag: Tag,
        frag: Fragment,
        len: usize,
    },
    Put {
        xfer_id: u64,
        len: u64,
    },
    /// A PUT whose target was refused: answered once per transfer.
    Refused {
        xfer_id: u64,
        code: RejectCode,
    },
    Get(GetRepr),
    Reject(RejectRepr),
    Done(DoneRepr),
    Close(CloseReason),
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Feeds `data` to the link's reader until it takes no more (it waits
    /// for more bytes, or for a receive fragment); returns the bytes taken,
    /// or `None` once the link failed or is closing (the rest is dropped).
    pub(super) fn read_all(&mut self, slot: usize, data: &[u8]) -> Option<usize> {
        let mut taken = 0;
        loop {
            match self.read_some(slot, &data[taken..]) {
                Ok((0, false)) => return Some(taken),
                Ok((n, _)) => taken += n,
                Err(reason) => {
                    self.fail_link(slot, reason);
                    return None;
                }
            }
            if self.links[slot]
                .as_ref()
                .is_none_or(|l| l.state == LinkState::Closing)
            {
                return None;
            }
        }
    }

    /// Reads from `input` into the link's current frame; returns the bytes
    /// taken and whether anything happened (a frame may end without input).
    fn read_some(&mut self, slot: usize, input: &[u8]) -> Result<(usize, bool), CloseReason> {
        if let Some(l) = self.links[slot].as_ref()
            && let Receiving::WaitingFragment { tag, seq, len } = l.receiving
        {
            let Ok(frag) = self.take_receive_fragment(len) else {
                return Ok((0, false));
            };
            let Some(l) = self.links[slot].as_mut() else {
                self.drop_received(frag);
                return Ok((0, false));
            };
            l.receiving = Receiving::Send {
                tag,
                seq,
                frag,
                have: 0,
                len,
            };
            l.reader.set_target(PayloadTarget::Engine);
        }
        let Some(l) = self.links[slot].as_mut() else {
            return Ok((input.len(), false));
        };
        let mut used = 0;
        let step = l
            .reader
            .step(input, &mut used)
            .map_err(|e| e.close_reason())?;
        match step {
            ReadStep::NeedMore => Ok((used, false)),
            ReadStep::Prefix { header } => {
                self.on_prefix(slot, header)?;
                Ok((used, true))
            }
            ReadStep::Payload { len } => {
                let bytes = &input[..len];
                self.on_payload(slot, bytes);
                if let Some(l) = self.links[slot].as_mut() {
                    l.reader.consume_payload(bytes);
                }
                Ok((len, true))
            }
            ReadStep::Done { header } => {
                self.on_frame(slot, header)?;
                Ok((used, true))
            }
        }
    }

    /// Header and fixed fields are in: decode them and choose the target.
    fn on_prefix(&mut self, slot: usize, header: HeaderRepr) -> Result<(), CloseReason> {
        let Some(l) = self.links[slot].as_ref() else {
            return Ok(());
        };
        let open = l.state == LinkState::Open;
        let peer = l.peer;
        let payload_left = l.reader.payload_left();
        let mut fixed = [0u8; HelloRepr::LEN];
        let n = l.reader.fixed().len().min(fixed.len());
        fixed[..n].copy_from_slice(&l.reader.fixed()[..n]);
        let fixed = &fixed[..n];
        let bad = |e: crate::wire::WireError| e.close_reason();
        let control = |c| (Receiving::Control(c), PayloadTarget::Discard);
        let discard = (Receiving::None, PayloadTarget::Discard);
        // A SEND or PUT already received: its payload is not read again (a
        // late duplicate must not overwrite memory the user owns again).
        let duplicate = matches!(header.packet_type, PacketType::Send | PacketType::Put)
            && peer.and_then(|p| self.peers[p].as_ref()).is_some_and(|p| {
                matches!(
                    p.recv.classify(header.seq),
                    Arrival::Duplicate | Arrival::OutsideWindow
                )
            });
        let (receiving, target) = match header.packet_type {
            PacketType::Hello => control(ControlIn::Hello(
                HelloRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            )),
            PacketType::HelloAck => {
                control(ControlIn::HelloAck(HelloAckRepr::parse(chunk_ref(fixed)?)))
            }
            PacketType::Close => control(ControlIn::Close {
                reason: CloseRepr::parse(chunk_ref(fixed)?).map_err(bad)?.reason,
            }),
            // Over datagrams the peer may finish its handshake first, and
            // its packets overtake the last of it: dropped, they come again.
            _ if !open && self.datagram() => discard,
            _ if !open => return Err(CloseReason::ProtocolError),
            _ if duplicate => (Receiving::Duplicate, PayloadTarget::Discard),
            PacketType::Ack => control(ControlIn::Ack(AckRepr::parse(chunk_ref(fixed)?))),
            PacketType::Reject => control(ControlIn::Reject {
                seq: header.seq,
                reject: RejectRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            }),
            PacketType::Get => control(ControlIn::Get {
                seq: header.seq,
                get: GetRepr::parse(chunk_ref(fixed)?).map_err(bad)?,
            }),
            PacketType::Done => control(ControlIn::Done {
                seq: header.seq,
                done: DoneRepr::parse(chunk_ref(fixed)?),
            }),
            PacketType::Send => {
                let tag = Tag(SendRepr::parse(chunk_ref(fixed)?).map_err(bad)?.tag);
                let len = usize::try_from(payload_left).map_err(|_| CloseReason::ProtocolError)?;
                match self.take_receive_fragment(len) {
                    Ok(frag) => (
                        Receiving::Send {
                            tag,
                            seq: header.seq,
                            frag,
                            have: 0,
                            len,
                        },
                        PayloadTarget::Engine,
                    ),
                    // No fragment now: the payload waits in the stream.
                    Err(crate::pool::PoolError::Exhausted { .. }) => {
                        if let Some(l) = self.links[slot].as_mut() {
                            l.receiving = Receiving::WaitingFragment {
                                tag,
                                seq: header.seq,
                                len,
                            };
                        }
                        // Take the header's acknowledgement and credits now:
                        // the fragments may all be held by this side's own
                        // sends, which only an acknowledgement gives back,
                        // and every later one waits behind this payload.
                        // (Taken again with the whole frame: a repeated
                        // acknowledgement releases nothing.)
                        if let Some(p) = peer {
                            let ack = Ack {
                                cumulative: header.ack,
                                sack: 0,
                            };
                            self.on_ack(p, ack, header.credits)?;
                        }
                        return Ok(());
                    }
                    Err(_) => return Err(CloseReason::ProtocolError),
                }
            }
            PacketType::Put => {
                let put = PutRepr::parse(chunk_ref(fixed)?, payload_left).map_err(bad)?;
                let dst = self.put_target(peer, &put, payload_left);
                let target = if dst.is_ok() {
                    PayloadTarget::Engine
                } else {
                    PayloadTarget::Discard
                };
                (
                    Receiving::Put {
                        put,
                        seq: header.seq,
                        dst,
                        have: 0,
                    },
                    target,
                )
            }
        };
        if let Some(l) = self.links[slot].as_mut() {
            l.receiving = receiving;
            l.reader.set_target(target);
        }
        Ok(())
    }

    fn on_payload(&mut self, slot: usize, bytes: &[u8]) {
        let Some(l) = self.links[slot].as_mut() else {
            return;
        };
        match &mut l.receiving {
            Receiving::Send { frag, have, .. } => {
                if let Ok(buf) = self.pools.view().bytes_mut(frag)
                    && let Some(dst) = buf.get_mut(*have..*have + bytes.len())
                {
                    dst.copy_from_slice(bytes);
                }
                *have += bytes.len();
            }
            Receiving::Put {
                dst: Ok(dst), have, ..
            } => {
                let part = MemSlice {
                    handle: dst.handle,
                    offset: dst.offset + *have,
                    len: bytes.len() as u64,
                };
                if let Ok(region) = self.regs.slice_mut(part) {
                    region.copy_from_slice(bytes);
                }
                *have += bytes.len() as u64;
            }
            _ => {}
        }
    }

    /// A whole frame arrived (trailer checked).
    fn on_frame(&mut self, slot: usize, header: HeaderRepr) -> Result<(), CloseReason> {
        let key = self.config.job_key.clone();
        let datagram = self.datagram();
        let Some(l) = self.links[slot].as_mut() else {
            return Ok(());
        };
        let receiving = core::mem::replace(&mut l.receiving, Receiving::None);
        let peer = l.peer;
        match receiving {
            Receiving::None => Ok(()),
            // Over datagrams handshake packets are repeated until they get
            // through: a repeated HELLO means the peer still waits for this
            // side's HELLO_ACK; a repeated HELLO_ACK is dropped.
            Receiving::Control(ControlIn::Hello(hello))
                if datagram && l.handshake.peer() == Some(&hello) =>
            {
                l.handshake.repeat_ack();
                self.flush_handshake(slot);
                Ok(())
            }
            // Over datagrams a new start of the peer's process sends from
            // the old one's address: the old start's link ends, quietly
            // (nobody is left to tell), and the HELLO, repeated, opens a
            // new one.
            Receiving::Control(ControlIn::Hello(hello))
                if datagram
                    && l.handshake.peer().is_some_and(|old| {
                        (old.job, old.rank) == (hello.job, hello.rank) && old.epoch != hello.epoch
                    }) =>
            {
                self.end_link_quietly(slot, CloseReason::Normal);
                Ok(())
            }
            Receiving::Control(ControlIn::HelloAck(_))
                if datagram && (l.handshake.is_verified() || l.handshake.peer().is_none()) =>
            {
                Ok(())
            }
            Receiving::Control(ControlIn::Hello(hello)) => {
                l.handshake.on_hello(hello).map_err(|e| e.close_reason())?;
                self.flush_handshake(slot);
                Ok(())
            }
            Receiving::Control(ControlIn::HelloAck(ack)) => {
                l.handshake
                    .on_hello_ack(&ack, key.as_deref())
                    .map_err(|e| e.close_reason())?;
                self.flush_handshake(slot);
                Ok(())
            }
            Receiving::Control(ControlIn::Close { reason, .. }) => {
                // The peer is closing this link: nothing more goes out on it.
                l.state = LinkState::Closing;
                l.end = Some((reason, true));
                l.tx.clear();
                l.written = 0;
                let index = l.index;
                let _ = self.closes.push_back(self.link_id(slot));
                // Only the peer's current link can take the peer with it; any
                // other is a duplicate the peer drops (both connected at once).
                // A Normal close of the current link is such a drop too, when
                // the peer kept the other connection (which may not have
                // opened here yet): the link is gone, not the peer.
                let current = self.link_id(slot);
                if let Some(p) = peer
                    && self.peers[p]
                        .as_mut()
                        .is_some_and(|peer| peer.forget_link(current))
                {
                    if reason == CloseReason::Normal {
                        let proc = self.peers[p].as_ref().map(|peer| peer.proc);
                        // A connection in its handshake takes over, and
                        // sends again what this one may have lost.
                        if !proc.is_some_and(|proc| self.link_coming(proc, index)) {
                            self.link_gone(p, index);
                        }
                    } else {
                        self.deliver(p, Held::Close(reason));
                    }
                }
                Ok(())
            }
            other => {
                let p = peer.ok_or(CloseReason::ProtocolError)?;
                self.on_peer_packet(p, header, other)
            }
        }
    }

    /// A packet of an open link's peer: acknowledgement and credits first,
    /// then the packet itself through the receive window.
    fn on_peer_packet(
        &mut self,
        p: usize,
        header: HeaderRepr,
        receiving: Receiving,
    ) -> Result<(), CloseReason> {
        let now = self.now;
        let datagram = self.datagram();
        let sack = match &receiving {
            Receiving::Control(ControlIn::Ack(a)) => a.sack,
            _ => 0,
        };
        if let Some(peer) = self.peers[p].as_mut() {
            if datagram && peer.probe_unanswered() {
                // The answer to probes sent again and again: the path works
                // again, and their backoff ends.
                peer.rtt.on_progress();
            }
            peer.last_heard = now;
            // A keepalive or credit probe, or a packet the peer sent
            // before (it missed the acknowledgement): answer.
            if header.flags.contains(Flags::ACK_REQUEST)
                || matches!(receiving, Receiving::Duplicate)
            {
                peer.owe_ack(now, true);
            }
        }
        let ack = Ack {
            cumulative: header.ack,
            sack,
        };
        let held = match receiving {
            Receiving::Send {
                tag,
                seq,
                frag,
                len,
                ..
            } => Some((seq, Held::Send { tag, frag, len })),
            Receiving::Put {
                put,
                seq,
                dst,
                have,
            } => {
                let held = match dst {
                    Ok(_) => Held::Put {
                        xfer_id: put.xfer_id,
                        len: have,
                    },
                    Err(code) => Held::Refused {
                        xfer_id: put.xfer_id,
                        code,
                    },
                };
                Some((seq, held))
            }
            Receiving::Control(ControlIn::Get { seq, get }) => Some((seq, Held::Get(get))),
            Receiving::Control(ControlIn::Reject { seq, reject }) => {
                Some((seq, Held::Reject(reject)))
            }
            Receiving::Control(ControlIn::Done { seq, done }) => Some((seq, Held::Done(done))),
            _ => None,
        };
        let Some((seq, item)) = held else {
            return self.on_ack(p, ack, header.credits);
        };
        let initial_credits = self.config.initial_credits;
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        let send = matches!(item, Held::Send { .. });
        match peer.recv.receive(seq, item) {
            Ok(_) if send => {
                // Every new SEND spends one credit: a peer that sends past
                // what this side granted breaks the protocol (its SENDs
                // would fill the fragments every other peer needs).
                peer.sends_received = peer.sends_received.wrapping_add(1);
                if !peer.within_credits(initial_credits) {
                    return Err(CloseReason::ProtocolError);
                }
            }
            Ok(_) => {}
            Err(Refused::Duplicate(item)) | Err(Refused::OutsideWindow(item)) => {
                if let Held::Send { frag, .. } = item {
                    self.drop_received(frag);
                }
            }
        }
        if let Some(peer) = self.peers[p].as_mut() {
            peer.owe_ack(now, false);
        }
        while let Some((_, item)) = self.peers[p].as_mut().and_then(|peer| peer.recv.pop()) {
            self.deliver(p, item);
        }
        // The body before the acknowledgement: a REJECT must fail its put
        // before the ack of the refused packets could complete it.
        self.on_ack(p, ack, header.credits)
    }

    fn deliver(&mut self, p: usize, item: Held) {
        let from = self.endpoint(p);
        match item {
            Held::Send { tag, frag, len } => {
                // Its place was kept when its fragment was taken.
                self.owed = self.owed.saturating_sub(1);
                if let Err(Pending::Received { frag, .. }) =
                    self.events.push_back(Pending::Received {
                        from,
                        tag,
                        frag,
                        len,
                    })
                {
                    let _ = self.pools.view().free(frag);
                }
            }
            Held::Put { xfer_id, len } if xfer_id & GET_REPLY != 0 => {
                let id = xfer_id & !GET_REPLY;
                if let Some(i) = self.find_op(OpKind::Get, p, id)
                    && let Some(op) = self.ops[i].as_mut()
                {
                    op.done = op.done.saturating_add(len);
                    if op.done >= op.len {
                        self.finish_op(i, Ok(()));
                    }
                }
            }
            Held::Put { .. } => {}
            Held::Refused { xfer_id, code } => {
                let peer = self.peers[p].as_mut();
                if let Some(peer) = peer
                    && peer.last_rejected != Some(xfer_id)
                {
                    peer.last_rejected = Some(xfer_id);
                    self.answer(p, Answer::Reject(RejectRepr { xfer_id, code }));
                }
            }
            Held::Get(get) => self.serve_get(p, get),
            Held::Reject(reject) => {
                // Any of this side's transfers to the peer: its put or get,
                // or the data of a get it serves.
                let id = reject.xfer_id;
                let found = self
                    .ops
                    .iter()
                    .position(|o| o.is_some_and(|o| o.peer == p && o.id == id));
                if let Some(i) = found {
                    self.finish_op(i, Err(BtlError::Rejected(reject.code)));
                }
            }
            Held::Done(done) => {
                if let Some(i) = self.find_op(OpKind::GetThirdParty, p, done.xfer_id) {
                    self.finish_op(i, Ok(()));
                }
            }
            Held::Close(reason) => {
                self.lose_peer(
                    p,
                    LostReason::of_close(reason).unwrap_or(LostReason::Closed),
                );
            }
        }
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Whether one more event may be owed: a message received, or an
    /// operation that ends with one. Room is kept for every event owed,
    /// and for lost peers' errors, so that none is ever dropped.
    pub(super) fn has_event_room(&self) -> bool {
        self.events.len() + self.owed + super::ERROR_ROOM < super::EVENTS
    }

    /// A fragment for a SEND's payload of `len` bytes, with its event's
    /// place kept; none while the pools or the event queue are full (the
    /// SEND waits, as for a fragment: a stream stops being read, a
    /// datagram is dropped and comes again).
    fn take_receive_fragment(&mut self, len: usize) -> Result<Fragment, crate::pool::PoolError> {
        if !self.has_event_room() {
            return Err(crate::pool::PoolError::Exhausted {
                class: crate::pool::FragmentClass::Max,
            });
        }
        let frag = self.pools.view().alloc(len)?;
        self.owed += 1;
        Ok(frag)
    }

    /// Frees a SEND's fragment that will not be delivered, and its event's
    /// place.
    pub(super) fn drop_received(&mut self, frag: Fragment) {
        self.owed = self.owed.saturating_sub(1);
        let _ = self.pools.view().free(frag);
    }
}

fn chunk_ref<const N: usize>(b: &[u8]) -> Result<&[u8; N], CloseReason> {
    b.first_chunk().ok_or(CloseReason::ProtocolError)
}
