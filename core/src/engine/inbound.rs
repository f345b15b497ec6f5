//! The read path: a link's bytes into frames, each frame's payload
//! straight into its target (a receive fragment, registered memory), and
//! each whole frame to the link (handshake, CLOSE) or to its peer.

use crate::btl::{MemSlice, RejectCode, Tag};
use crate::endpoint::EndpointId;
use crate::time::Instant;
use crate::wire::{
    self, AckRepr, CloseReason, CloseRepr, ControlRepr, CookieRepr, Flags, Header, HeaderRepr,
    HelloAckRepr, HelloRepr, Limits, PacketType, PutRepr, SendRepr, WireError,
};

use super::framing::{Datagram, Framing, Stream};
use super::journal::{self, Journal, journal_call, journal_out};
use super::link::{Handshaken, LinkState, Receiving};
use super::mover::{PayloadTarget, ReadStep};
use super::packet::Trailers;
use super::scheduled::Links;
use super::share::fair_share;
use super::shared::Shared;
use super::storage::Storage;
use super::window::Ack;
use super::{Engine, LinkError, LinkId, Peers};
use crate::pool::{FragmentClass, PoolError};

impl<S: Storage, const W: usize> Engine<S, Stream, W> {
    /// Bytes read from `link`; returns how many were taken. Fewer than
    /// given means the engine waits for receive fragments: hand the rest
    /// again after the upper layer has polled its events.
    pub fn handle_stream(
        &mut self,
        link: LinkId,
        data: &[u8],
        now: Instant,
    ) -> Result<usize, LinkError> {
        let result = self.read_stream(link, data, now);
        journal_call!(self, journal::Call::Stream { link, data, now });
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn read_stream(&mut self, link: LinkId, data: &[u8], now: Instant) -> Result<usize, LinkError> {
        self.shared.now = now;
        let l = self.links.get_mut(link.0).ok_or(LinkError::UnknownLink)?;
        if !data.is_empty() {
            l.mark_heard();
        }
        let taken = self.read_all(link, data).unwrap_or(data.len());
        self.settle();
        Ok(taken)
    }
}

impl<S: Storage, const W: usize> Engine<S, Stream, W> {
    /// Where `link`'s next bytes may be read straight to: the rest of the
    /// payload being received, in its receive fragment or in the
    /// registered memory a put writes, when the driver holds none of the
    /// link's bytes unread; `None` between payloads. A driver that reads
    /// into it and says how much with [`handle_payload_read`] spares the
    /// copy out of its read buffer: a large message then costs the
    /// kernel's copy and no other, as Motr's movers read into the buffer.
    ///
    /// [`handle_payload_read`]: Self::handle_payload_read
    pub fn payload_buffer(&mut self, link: LinkId) -> Option<&mut [u8]> {
        let Engine { shared, links, .. } = self;
        payload_room(shared, links, link)
    }

    /// `n` bytes were read into the front of
    /// [`payload_buffer`](Self::payload_buffer): they count as received,
    /// and the frame is complete if they were the last of it. Bytes beyond
    /// what the buffer offered are not counted.
    pub fn handle_payload_read(
        &mut self,
        link: LinkId,
        n: usize,
        now: Instant,
    ) -> Result<(), LinkError> {
        if self.journal.is_on() {
            // The bytes the driver read into the payload's place, which
            // the engine never saw go by.
            let Engine {
                shared,
                links,
                journal,
                journal_clock,
                ..
            } = self;
            journal::clock(journal, journal_clock, shared.now);
            let data = payload_room(shared, links, link).map_or(&[][..], |b| &b[..n.min(b.len())]);
            journal.call(&journal::Call::PayloadRead { link, data, now });
        }
        let result = self.payload_read(link, n, now);
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn payload_read(&mut self, link: LinkId, n: usize, now: Instant) -> Result<(), LinkError> {
        self.shared.now = now;
        let Engine { shared, links, .. } = self;
        let l = links.get_mut(link.0).ok_or(LinkError::UnknownLink)?;
        if n > 0 {
            l.mark_heard();
        }
        let (reader, receiving) = l.reader_mut();
        if !reader.in_payload() {
            return Ok(());
        }
        let n = n.min(usize::try_from(reader.payload_left()).unwrap_or(usize::MAX));
        if let Some(read) = payload_target(shared, receiving, n) {
            reader.consume_payload(read);
            advance(receiving, n);
        }
        // The last of a payload ends its frame (a trailer, if any, is
        // read from the stream as ever).
        let _ = self.read_all(link, &[]);
        self.settle();
        Ok(())
    }
}

impl<S: Storage, const W: usize> Engine<S, Datagram, W> {
    /// One datagram received on `link`: one whole frame.
    ///
    /// A datagram that is damaged, cut short or not a frame is dropped, as
    /// the network might have dropped it, and retransmission repairs the
    /// loss; only during the handshake does it fail the link, with a CLOSE
    /// that says why. A frame that finds no receive fragment is dropped
    /// too, unacknowledged, and comes again. Between keyed processes,
    /// once the link is open, a datagram without the peer's seal is
    /// dropped as well, whatever it says: someone else sent it from the
    /// peer's address ([`Seal`](crate::wire::Seal)).
    pub fn handle_datagram(
        &mut self,
        link: LinkId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), LinkError> {
        let result = self.take_datagram(link, datagram, now);
        journal_call!(
            self,
            journal::Call::Datagram {
                link,
                data: datagram,
                now
            }
        );
        journal_out!(self, journal::Digest::of(&result));
        result
    }

    fn take_datagram(
        &mut self,
        link: LinkId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), LinkError> {
        self.shared.now = now;
        if self.links.get(link.0).is_none() {
            return Err(LinkError::UnknownLink);
        }
        if self.read_datagram(link, datagram)
            && let Some(l) = self.links.get_mut(link.0)
        {
            l.mark_heard();
        }
        self.settle();
        Ok(())
    }

    /// Reads one datagram on `link`; whether it came from the peer (as far
    /// as this side can tell), so that the link counts as heard from.
    fn read_datagram(&mut self, link: LinkId, datagram: &[u8]) -> bool {
        let limits = Limits::new(self.shared.config.max_body);
        let Some(l) = self.links.get_mut(link.0) else {
            return false;
        };
        if l.state() == LinkState::Closing || datagram.is_empty() {
            return false;
        }
        let trailers = l
            .peer()
            .filter(|_| l.is_open())
            .and_then(|p| self.peers.get(p))
            .map(|p| p.trailers());
        let header = Header::new_checked(datagram).ok();
        let (raw_type, raw_flags) = header.map_or((0, 0), |h| (h.type_raw(), h.flags_raw()));
        if let Some(seal) = trailers.and_then(|t| t.seal.as_ref())
            && seal.check(datagram).is_err()
        {
            // Not the peer's. Only a handshake packet without trailers is
            // looked at: a repeated HELLO (the peer has not opened yet), or
            // a new start's, which is doubted before it changes anything.
            let handshake = matches!(
                PacketType::from_u8(raw_type),
                Some(PacketType::Hello | PacketType::HelloAck | PacketType::Cookie)
            );
            if !handshake || raw_flags != 0 {
                return false;
            }
        }
        // An open link's frames carry trailers only if the handshake agreed
        // on them: a flag it did not is refused before any byte is summed.
        let flags = Flags::from_bits_truncate(raw_flags);
        if trailers.is_some_and(|t| !t.allow(flags)) {
            self.fail_link(link, CloseReason::ProtocolError);
            return true;
        }
        if let Err(e) = wire::parse_datagram(datagram, &limits) {
            let damaged = matches!(e, WireError::ChecksumMismatch { .. });
            if l.is_handshaking() && !damaged {
                self.fail_link(link, e.close_reason());
            }
            return !damaged;
        }
        // A fresh reader per datagram, each one frame from its start,
        // whose checksum parse_datagram has just checked.
        let dropped = l.read_datagram(limits);
        let peer = l.peer();
        self.release_dropped(peer, dropped);
        let Some(taken) = self.read_all(link, datagram) else {
            return true;
        };
        if taken < datagram.len()
            && let Some(l) = self.links.get_mut(link.0)
        {
            // Waiting for a receive fragment or an event place, which holds
            // nothing yet: the datagram is dropped and comes again.
            let (_, receiving) = l.reader_mut();
            *receiving = Receiving::None;
        }
        true
    }
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// Feeds `data` to the link's reader until it takes no more (it waits
    /// for more bytes, or for a receive fragment); returns the bytes taken,
    /// or `None` once the link failed or is closing (the rest is dropped).
    fn read_all(&mut self, link: LinkId, data: &[u8]) -> Option<usize> {
        let mut taken = 0;
        loop {
            match self.read_some(link, &data[taken..]) {
                Ok((0, false)) => return Some(taken),
                Ok((n, _)) => taken += n,
                Err(reason) => {
                    self.fail_link(link, reason);
                    return None;
                }
            }
            if self
                .links
                .get(link.0)
                .is_none_or(|l| l.state() == LinkState::Closing)
            {
                return None;
            }
        }
    }

    /// Reads from `input` into the link's current frame; returns the bytes
    /// taken and whether anything happened (a frame may end without input).
    fn read_some(&mut self, link: LinkId, input: &[u8]) -> Result<(usize, bool), CloseReason> {
        let Engine {
            shared,
            links,
            peers,
            ..
        } = self;
        let Some(l) = links.get_mut(link.0) else {
            return Ok((input.len(), false));
        };
        let peer = l.peer();
        let (reader, receiving) = l.reader_mut();
        if let Receiving::WaitingEventRoom { seq, notify } = *receiving {
            if !may_claim(shared, peers, peer, seq) || !shared.events.owe() {
                return Ok((0, false));
            }
            *receiving = Receiving::Control {
                seq,
                packet: ControlRepr::Notify(notify),
            };
        }
        if let Receiving::WaitingFragment { tag, seq, len } = *receiving {
            if !may_claim(shared, peers, peer, seq) {
                return Ok((0, false));
            }
            let Ok(frag) = shared.take_receive_fragment(len) else {
                return Ok((0, false));
            };
            *receiving = Receiving::Send {
                tag,
                seq,
                frag,
                have: 0,
                len,
            };
            reader.set_target(PayloadTarget::Engine);
        }
        let mut used = 0;
        let step = reader
            .step(input, &mut used)
            .map_err(|e| e.close_reason())?;
        match step {
            ReadStep::NeedMore => Ok((used, false)),
            ReadStep::Prefix { header } => {
                self.on_prefix(link, header)?;
                Ok((used, true))
            }
            ReadStep::Payload { len } => {
                let bytes = &input[..len];
                if let Some(target) = payload_target(shared, receiving, len) {
                    target.copy_from_slice(bytes);
                }
                advance(receiving, len);
                reader.consume_payload(bytes);
                Ok((len, true))
            }
            ReadStep::Done { header } => {
                self.on_frame(link, header)?;
                Ok((used, true))
            }
        }
    }

    /// Header and fixed fields are in: decodes them and chooses where the
    /// payload goes.
    fn on_prefix(&mut self, link: LinkId, header: HeaderRepr) -> Result<(), CloseReason> {
        let Engine {
            framing,
            shared,
            peers,
            links,
            ..
        } = self;
        let Some(l) = links.get_mut(link.0) else {
            return Ok(());
        };
        let open = l.is_open();
        let peer_id = l.peer();
        let (reader, receiving) = l.reader_mut();
        let payload_left = reader.payload_left();
        let mut fixed = [0u8; HelloRepr::LEN];
        let n = reader.fixed().len().min(fixed.len());
        fixed[..n].copy_from_slice(&reader.fixed()[..n]);
        let fixed = &fixed[..n];
        let bad = |e: WireError| e.close_reason();
        // What the frame is, its payload (if it has one) read into nothing.
        let keep_no_payload = |receiving| (receiving, PayloadTarget::Discard);
        let within_share = may_claim(shared, peers, peer_id, header.seq);
        let peer = peer_id.and_then(|p| peers.get_mut(p));
        // A trailer the handshake did not agree on breaks the protocol:
        // the peer would have this side sum every byte it sends, for
        // nothing. (A seal never comes over a stream.)
        let allowed = peer.as_ref().map_or_else(
            || Trailers::default().allow(header.flags),
            |p| p.trailers().allow(header.flags),
        );
        if open && !allowed {
            return Err(CloseReason::ProtocolError);
        }
        // A SEND or PUT already received: its payload is not read again (a
        // late duplicate must not overwrite memory the user owns again).
        let duplicate = matches!(header.packet_type, PacketType::Send | PacketType::Put)
            && peer.as_ref().is_some_and(|p| p.is_duplicate(header.seq));
        let (next, target) = match header.packet_type {
            PacketType::Hello => keep_no_payload(Receiving::Hello(
                HelloRepr::parse(chunk(fixed)?).map_err(bad)?,
            )),
            PacketType::HelloAck => {
                keep_no_payload(Receiving::HelloAck(HelloAckRepr::parse(chunk(fixed)?)))
            }
            PacketType::Close => keep_no_payload(Receiving::Close {
                reason: CloseRepr::parse(chunk(fixed)?).map_err(bad)?.reason,
            }),
            // Only a datagram server sends it, to a stranger's HELLO.
            PacketType::Cookie if !F::LOSSY => return Err(CloseReason::ProtocolError),
            PacketType::Cookie => {
                keep_no_payload(Receiving::Cookie(CookieRepr::parse(chunk(fixed)?)))
            }
            _ if !open => {
                framing.before_open()?;
                keep_no_payload(Receiving::None)
            }
            _ if duplicate => keep_no_payload(Receiving::Duplicate),
            PacketType::Ack => keep_no_payload(Receiving::Ack(AckRepr::parse(chunk(fixed)?))),
            PacketType::Send => {
                let tag = Tag(SendRepr::parse(chunk(fixed)?).map_err(bad)?.tag);
                let len = usize::try_from(payload_left).map_err(|_| CloseReason::ProtocolError)?;
                let frag = if within_share {
                    shared.take_receive_fragment(len)
                } else {
                    Err(PoolError::Exhausted {
                        class: FragmentClass::Max,
                    })
                };
                match frag {
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
                    // No fragment now, or none within the peer's share: the
                    // payload waits in the stream.
                    Err(PoolError::Exhausted { .. }) => {
                        *receiving = Receiving::WaitingFragment {
                            tag,
                            seq: header.seq,
                            len,
                        };
                        // Take the header's acknowledgement and credits now:
                        // the fragments may all be held by this side's own
                        // sends, which only an acknowledgement gives back,
                        // and every later one waits behind this payload.
                        // (Taken again with the whole frame: a repeated
                        // acknowledgement releases nothing.)
                        if let Some(peer) = peer {
                            let ack = Ack {
                                cumulative: header.ack,
                                sack: 0,
                            };
                            peer.on_ack(ack, header.credits, framing, shared)?;
                        }
                        return Ok(());
                    }
                    Err(_) => return Err(CloseReason::ProtocolError),
                }
            }
            PacketType::Put => {
                let put = PutRepr::parse(chunk(fixed)?, payload_left).map_err(bad)?;
                let dst = put_target(shared, peer_id, &put, payload_left);
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
            packet_type => {
                let packet = ControlRepr::parse(packet_type, fixed)
                    .map_err(bad)?
                    .ok_or(CloseReason::ProtocolError)?;
                // A notice's event place is kept now; none free (or none
                // within the peer's share): the frame waits in the stream
                // (a datagram is dropped and comes again).
                if let ControlRepr::Notify(notify) = packet
                    && (!within_share || !shared.events.owe())
                {
                    *receiving = Receiving::WaitingEventRoom {
                        seq: header.seq,
                        notify,
                    };
                    reader.set_target(PayloadTarget::Discard);
                    return Ok(());
                }
                keep_no_payload(Receiving::Control {
                    seq: header.seq,
                    packet,
                })
            }
        };
        *receiving = next;
        reader.set_target(target);
        Ok(())
    }

    /// A whole frame arrived (trailer checked): handshake packets and
    /// CLOSEs are the link's, the rest its peer's.
    fn on_frame(&mut self, link: LinkId, header: HeaderRepr) -> Result<(), CloseReason> {
        let Engine {
            framing,
            shared,
            peers,
            links,
            ..
        } = self;
        let Some(l) = links.get_mut(link.0) else {
            return Ok(());
        };
        let key = shared.config.job_key.as_deref();
        let (_, receiving) = l.reader_mut();
        let receiving = core::mem::replace(receiving, Receiving::None);
        let peer = l.peer();
        match receiving {
            Receiving::None => Ok(()),
            Receiving::Hello(hello) => {
                match l.on_hello::<F>(hello, key)? {
                    Handshaken::Continue => self.maybe_open(link),
                    Handshaken::PeerRestarted => self.doubt_restart(link),
                }
                Ok(())
            }
            Receiving::HelloAck(ack) => {
                l.on_hello_ack::<F>(&ack, key)?;
                self.maybe_open(link);
                Ok(())
            }
            Receiving::Close { reason } => {
                self.on_close(link, peer, reason);
                Ok(())
            }
            Receiving::Cookie(cookie) => {
                l.on_cookie(cookie, key);
                Ok(())
            }
            other => {
                let p = peer.ok_or(CloseReason::ProtocolError)?;
                if let Some(peer) = peers.get_mut(p) {
                    peer.on_packet(&header, other, framing, shared)?;
                }
                // What the packet lets go, or asks for, goes now: an answer
                // is numbered with the acknowledgement of what came so far
                // (a REJECT must reach the peer before the acknowledgement
                // of a later transfer's packets could complete it).
                self.flush_peer(p);
                Ok(())
            }
        }
    }

    /// A HELLO of another start of the peer came on its open `link` (over
    /// datagrams, from its address): the peer is asked first, and the link
    /// ends only if the old start does not answer (its `Doubt` timer). A
    /// forged HELLO, or a stranger's from a spoofed address, then ends
    /// nothing.
    fn doubt_restart(&mut self, link: LinkId) {
        match self.links.get(link.0).and_then(|l| l.peer()) {
            Some(p) => self.doubt(link, p),
            None => self.end_link_quietly(link, CloseReason::Normal),
        }
    }

    /// The peer closes `link` for `reason`: nothing more goes out on it.
    /// Only the peer's current link can take the peer with it; any other
    /// is a duplicate the peer drops (both connected at once). A `Normal`
    /// close of the current link is such a drop too, when the peer kept
    /// the other connection (which may not have opened here yet): the link
    /// is gone, not the peer.
    fn on_close(&mut self, link: LinkId, peer: Option<EndpointId>, reason: CloseReason) {
        let Some(l) = self.links.get_mut(link.0) else {
            return;
        };
        let index = l.index();
        let dropped = l.end(reason, true);
        self.close_hint = true;
        self.release_dropped(peer, dropped);
        let Some(p) = peer else {
            return;
        };
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        if peer.forget_link(link).is_none() {
            return;
        }
        if reason == CloseReason::Normal {
            let proc = peer.proc();
            // A connection in its handshake takes over, and sends again
            // what this one may have lost.
            if !self.link_coming(proc, index)
                && let Some(peer) = self.peers.get_mut(p)
            {
                peer.link_superseded(index, &mut self.shared);
            }
        } else {
            self.lose_peer(
                p,
                crate::btl::LostReason::of_close(reason).unwrap_or(crate::btl::LostReason::Closed),
            );
        }
    }
}

/// Whether peer `p`'s SEND or NOTIFY numbered `seq` may claim an event
/// place (and a SEND its fragment) now: within the peer's share of the
/// places ([`Peer::may_hold`](super::peer::Peer::may_hold)), so that what
/// a peer holds past a gap it does not fill counts against its own share
/// only.
fn may_claim<S: Storage, const W: usize>(
    shared: &super::shared::Shared<S>,
    peers: &Peers<S, W>,
    p: Option<EndpointId>,
    seq: u64,
) -> bool {
    p.and_then(|p| peers.get(p)).is_none_or(|peer| {
        peer.may_hold(seq, || fair_share(shared.events.claimable(), peers.len()))
    })
}

/// Where `link`'s next bytes may be read straight to
/// ([`Engine::payload_buffer`]).
fn payload_room<'a, S: Storage, const W: usize>(
    shared: &'a mut Shared<S>,
    links: &'a mut Links<S, W>,
    link: LinkId,
) -> Option<&'a mut [u8]> {
    let (reader, receiving) = links.peek_mut(link.0)?.reader_mut();
    if !reader.in_payload() {
        return None;
    }
    let left = usize::try_from(reader.payload_left()).ok()?;
    payload_target(shared, receiving, left)
}

/// The next `len` bytes of the payload being received, where they go: in
/// its receive fragment, or in the registered memory a put writes.
fn payload_target<'a, S: Storage>(
    shared: &'a mut super::shared::Shared<S>,
    receiving: &'a mut Receiving,
    len: usize,
) -> Option<&'a mut [u8]> {
    match receiving {
        Receiving::Send { frag, have, .. } => shared
            .pools
            .view()
            .bytes_mut(frag)
            .ok()?
            .get_mut(*have..have.checked_add(len)?),
        Receiving::Put {
            dst: Ok(dst), have, ..
        } => shared
            .regs
            .slice_mut(MemSlice {
                handle: dst.handle,
                offset: dst.offset.checked_add(*have)?,
                len: len as u64,
            })
            .ok(),
        _ => None,
    }
}

/// `n` more bytes of the payload being received are in.
fn advance(receiving: &mut Receiving, n: usize) {
    match receiving {
        Receiving::Send { have, .. } => *have += n,
        Receiving::Put {
            dst: Ok(_), have, ..
        } => *have += n as u64,
        _ => {}
    }
}

/// Where a PUT's data from `peer` lands: an outstanding get's buffer for a
/// reply, a registration for a peer's put; the refusal code otherwise.
fn put_target<S: Storage>(
    shared: &super::shared::Shared<S>,
    peer: Option<EndpointId>,
    put: &PutRepr,
    len: u64,
) -> Result<MemSlice, RejectCode> {
    let peer = peer.ok_or(RejectCode::BadHandle)?;
    shared.ops.put_target(peer, put, len, |remote, access| {
        shared
            .regs
            .check_remote(remote, access)
            .map_err(RejectCode::from)
    })
}

fn chunk<const N: usize>(b: &[u8]) -> Result<&[u8; N], CloseReason> {
    b.first_chunk().ok_or(CloseReason::ProtocolError)
}
