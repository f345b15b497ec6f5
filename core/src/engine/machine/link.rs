//! The links: a connection's state and write queue, how a driver's link id
//! finds its slot, the handshake that opens a peer over a link, and failing
//! a link with a CLOSE.

use heapless::{Deque, Vec};

use super::frame::{chunk, emit_control};
use super::peer::PeerState;
use super::receive::Receiving;
use super::reliable::Outgoing;
use super::{CONTROL_MAX, Engine, LinkError, LinkId, MAX_PEER_LINKS, Source, TX_ITEMS, WINDOW};
use crate::btl::LostReason;
use crate::endpoint::ProcName;
use crate::engine::handshake::{Handshake, HandshakePacket, LocalHello};
use crate::engine::mover::StreamReader;
use crate::time::Instant;
use crate::wire::{CloseReason, CloseRepr, Flags, Limits, NONCE_LEN, PacketType};

#[derive(Debug)]
pub(super) enum TxItem {
    /// A handshake packet, ACK or CLOSE, complete in place.
    Control { bytes: [u8; CONTROL_MAX], len: u8 },
    /// A retained packet of the link's peer.
    Reliable { seq: u64 },
    /// The packet in [`Link::detached`]: acknowledged (it reached the peer
    /// another way) while partly written here; its last bytes must follow
    /// for the stream to stay framed.
    Detached,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LinkState {
    Handshaking,
    Open,
    /// Sending a CLOSE, then to be closed by the driver.
    Closing,
}

#[derive(Debug)]
pub(super) struct Link {
    pub(super) id: LinkId,
    pub(super) peer: Option<usize>,
    /// Which of the peer's links this is: asked for by this side, or
    /// named by the peer's HELLO.
    pub(super) index: u8,
    pub(super) state: LinkState,
    pub(super) handshake: Handshake,
    pub(super) reader: StreamReader,
    pub(super) receiving: Receiving,
    pub(super) tx: Deque<TxItem, TX_ITEMS>,
    /// Bytes of the front item already written.
    pub(super) written: usize,
    /// A packet the peer acknowledged while its front item was partly
    /// written, kept until its last byte is: then it completes.
    pub(super) detached: Option<Outgoing>,
    pub(super) opened_at: Instant,
    /// When the handshake packets last went out (repeated over datagrams).
    pub(super) hello_sent_at: Instant,
    /// Why the link is closing and whether the peer said so, once it is.
    pub(super) end: Option<(CloseReason, bool)>,
    /// Where a link the peer opened comes from; `None` for one this side
    /// opened. What the handshake budget counts.
    pub(super) source: Option<Source>,
    /// Whether any byte has come on the link: a silent stranger is the
    /// first to go when the handshake budget is short.
    pub(super) heard: bool,
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// The slot of a current link; `None` for an id that is stale (closed,
    /// its slot perhaps reused) or was never handed out.
    pub(super) fn slot_of(&self, id: LinkId) -> Option<usize> {
        let slot = usize::from(id.slot);
        self.links
            .get(slot)?
            .as_ref()
            .is_some_and(|l| l.id == id)
            .then_some(slot)
    }

    pub(super) fn link_mut(&mut self, id: LinkId) -> Option<&mut Link> {
        let slot = self.slot_of(id)?;
        self.links[slot].as_mut()
    }

    /// The id of the link in `slot` (a stale one if there is none).
    pub(super) fn link_id(&self, slot: usize) -> LinkId {
        self.links.get(slot).and_then(Option::as_ref).map_or(
            LinkId {
                slot: slot as u16,
                generation: 0,
            },
            |l| l.id,
        )
    }

    pub(super) fn new_link(
        &mut self,
        expected: Option<ProcName>,
        nonce: [u8; NONCE_LEN],
        now: Instant,
        index: u8,
    ) -> Result<LinkId, LinkError> {
        let slot = self
            .links
            .iter()
            .position(Option::is_none)
            .ok_or(LinkError::TooManyLinks)?;
        let local = LocalHello {
            me: self.config.me,
            link_index: u16::from(index),
            nonce,
            checksum: self.config.checksum,
            keyed: self.config.job_key.is_some(),
            max_body: self.config.max_body,
            initial_credits: self.config.initial_credits,
            epoch: self.config.epoch,
        };
        self.links_made = self.links_made.wrapping_add(1);
        let id = LinkId {
            slot: slot as u16,
            generation: self.links_made,
        };
        let _ = self.present_links.push(slot as u16);
        self.links[slot] = Some(Link {
            id,
            peer: None,
            index,
            state: LinkState::Handshaking,
            handshake: Handshake::new(&local, expected),
            reader: StreamReader::new(Limits::new(self.config.max_body)),
            receiving: Receiving::None,
            tx: Deque::new(),
            written: 0,
            detached: None,
            opened_at: now,
            hello_sent_at: now,
            end: None,
            source: None,
            heard: false,
        });
        Ok(id)
    }

    /// Notes that bytes came on the link in `slot`.
    pub(super) fn mark_heard(&mut self, slot: usize, data: &[u8]) {
        if !data.is_empty()
            && let Some(l) = self.links[slot].as_mut()
        {
            l.heard = true;
        }
    }

    /// Keeps the links strangers opened within the handshake budget before
    /// one more from `source` comes: past the budget of its source, or the
    /// whole budget, the oldest goes (of that source, or of all), one that
    /// has sent nothing before one that has. It is closed with
    /// `ResourceExhausted`; no verified peer's link is ever chosen.
    pub(super) fn make_room_for_stranger(&mut self, source: Source) {
        let strangers = || {
            self.present_links
                .iter()
                .map(|&s| usize::from(s))
                .filter_map(|s| Some((s, self.links[s].as_ref()?)))
                .filter(|(_, l)| l.state == LinkState::Handshaking && l.source.is_some())
        };
        let from_source = strangers()
            .filter(|(_, l)| l.source == Some(source))
            .count();
        let all = strangers().count();
        let per_source = usize::from(self.config.handshake_budget_per_source);
        let budget = usize::from(self.config.handshake_budget);
        let only = if from_source >= per_source {
            Some(source)
        } else if all >= budget {
            None
        } else {
            return;
        };
        // Silent before heard, then oldest first.
        let victim = strangers()
            .filter(|(_, l)| only.is_none() || l.source == only)
            .min_by_key(|(_, l)| (l.heard, l.opened_at, l.id.generation))
            .map(|(s, _)| s);
        if let Some(slot) = victim {
            self.fail_link(slot, CloseReason::ResourceExhausted);
        }
    }

    /// Queues whatever handshake packets are due on a link.
    pub(super) fn flush_handshake(&mut self, slot: usize) {
        let key = self.config.job_key.clone();
        while let Some(packet) = self.links[slot]
            .as_mut()
            .and_then(|l| l.handshake.poll_send(key.as_deref()))
        {
            let mut bytes = [0u8; CONTROL_MAX];
            let len = match packet {
                HandshakePacket::Hello(h) => emit_control(
                    &mut bytes,
                    PacketType::Hello,
                    0,
                    0,
                    0,
                    Flags::empty(),
                    |b| h.emit(chunk(b)),
                ),
                HandshakePacket::HelloAck(a) => emit_control(
                    &mut bytes,
                    PacketType::HelloAck,
                    0,
                    0,
                    0,
                    Flags::empty(),
                    |b| a.emit(chunk(b)),
                ),
            };
            if let Some(l) = self.links[slot].as_mut() {
                let _ = l.tx.push_back(TxItem::Control { bytes, len });
            }
        }
        self.maybe_open(slot);
    }

    /// Opens the link's peer once its handshake completes.
    fn maybe_open(&mut self, slot: usize) {
        let Some(l) = self.links[slot].as_ref() else {
            return;
        };
        if l.state != LinkState::Handshaking || !l.handshake.is_complete() {
            return;
        }
        let Some(hello) = l.handshake.peer().copied() else {
            return;
        };
        let checksum = l.handshake.checksum();
        let (outbound, own_index) = (l.peer.is_some(), l.index);
        let proc = ProcName::new(hello.job, hello.rank);
        // A finalized engine opens nothing more.
        if self.finalized {
            self.fail_link(slot, CloseReason::Shutdown);
            return;
        }
        let index = match l.peer {
            Some(p) => p,
            None => {
                if self.peer_named(proc).is_none() && self.was_forgotten(proc, hello.epoch) {
                    // The same start of a process this side gave up and
                    // forgot: it stays lost, and is told so.
                    self.fail_link(slot, CloseReason::Shutdown);
                    return;
                }
                match self.find_or_add_peer(proc) {
                    Some(p) => p,
                    None => {
                        self.fail_link(slot, CloseReason::ResourceExhausted);
                        return;
                    }
                }
            }
        };
        // Another epoch is another start of the process: what the old one
        // owed fails, and the new one is a fresh peer. The same start of a
        // lost peer stays lost, and is told so.
        let (lost, restarted) = self.peers[index].as_ref().map_or((false, false), |p| {
            let lost = matches!(p.state, PeerState::Lost(_));
            let known = p.epoch.or(lost.then_some(hello.epoch));
            (lost, known.is_some_and(|e| e != hello.epoch))
        });
        if restarted {
            self.renew_peer(index);
        } else if lost {
            self.fail_link(slot, CloseReason::Shutdown);
            return;
        }
        let link_index = if outbound {
            own_index
        } else {
            match u8::try_from(hello.link_index) {
                Ok(i) if usize::from(i) < MAX_PEER_LINKS => i,
                _ => {
                    self.fail_link(slot, CloseReason::ResourceExhausted);
                    return;
                }
            }
        };
        let id = self.link_id(slot);
        let i = usize::from(link_index);
        // Both sides connected link `i` at once: the connection opened by
        // the lower process name survives, the other is closed.
        let crossed = self.peers[index]
            .as_ref()
            .and_then(|peer| peer.links[i])
            .filter(|&old| old != id)
            .and_then(|old| self.slot_of(old));
        if let Some(old) = crossed {
            let initiator = if outbound { self.config.me } else { proc };
            let other = if outbound { proc } else { self.config.me };
            if initiator > other {
                self.fail_link(slot, CloseReason::Normal);
                return;
            }
            self.fail_link(old, CloseReason::Normal);
        }
        // Whether another open link carries the peer already.
        let carried = self.peers[index].as_ref().is_some_and(|peer| {
            peer.state == PeerState::Open
                && peer.links.iter().enumerate().any(|(j, l)| {
                    j != i
                        && l.and_then(|l| self.slot_of(l))
                            .and_then(|s| self.links[s].as_ref())
                            .is_some_and(|l| l.state == LinkState::Open)
                })
        });
        let Some(peer) = self.peers[index].as_mut() else {
            return;
        };
        peer.links[i] = Some(id);
        peer.link_retry[i] = None;
        peer.refused_since = None;
        peer.state = PeerState::Open;
        if peer.was_open && !carried {
            // A reconnect: tell the peer at once what arrived, so it
            // resends no more than it must.
            peer.owe_ack(self.now, true);
        }
        peer.was_open = true;
        peer.epoch = Some(hello.epoch);
        peer.checksum = checksum;
        peer.peer_max_body = hello.max_body;
        peer.peer_initial = hello.initial_credits;
        peer.last_heard = self.now;
        if let Some(l) = self.links[slot].as_mut() {
            l.peer = Some(index);
            l.index = link_index;
            l.state = LinkState::Open;
        }
        // What the peer has not acknowledged goes out again when no other
        // link carried the peer (a reconnect) or this link replaced one
        // (both sides connected at once): what was written on the old one
        // may be lost. The peer drops duplicates.
        if !carried || crossed.is_some() {
            let mut retained: Vec<u64, WINDOW> = Vec::new();
            if let Some(peer) = self.peers[index].as_mut() {
                for resend in peer.send.resend_all(self.now) {
                    let _ = retained.push(resend.seq);
                }
            }
            for seq in retained {
                self.resend(index, seq);
            }
        }
        // The side that opened the link asks for the peer's other links.
        if outbound {
            for j in 0..self.config.links {
                if self.peers[index]
                    .as_ref()
                    .is_some_and(|peer| peer.links[usize::from(j)].is_none())
                {
                    self.request_connect(index, j);
                }
            }
        }
        self.progress_queues();
    }

    /// Ends a link after a protocol failure: a CLOSE goes out first.
    /// Ends a link without a CLOSE, keeping its peer: the peer's other
    /// links, or a new one, carry on, and what was not acknowledged goes
    /// again. For a datagram link whose peer process started again from
    /// the same address (nobody is left to read a CLOSE), and for a stream
    /// that stopped carrying anything (a CLOSE would be lost in it too).
    pub(super) fn end_link_quietly(&mut self, slot: usize, reason: CloseReason) {
        let Some(l) = self.links[slot].as_mut() else {
            return;
        };
        l.state = LinkState::Closing;
        l.end = Some((reason, false));
        l.tx.clear();
        l.written = 0;
        let (id, index, peer) = (l.id, l.index, l.peer);
        let _ = self.closes.push_back(id);
        if let Some(p) = peer
            && self.peers[p]
                .as_mut()
                .is_some_and(|peer| peer.forget_link(id))
        {
            self.link_gone(p, index);
        }
    }

    pub(super) fn fail_link(&mut self, slot: usize, reason: CloseReason) {
        let Some(l) = self.links[slot].as_mut() else {
            return;
        };
        if l.state == LinkState::Closing {
            return;
        }
        l.state = LinkState::Closing;
        l.end = Some((reason, false));
        let mid_frame = l.written > 0;
        l.tx.clear();
        l.written = 0;
        let detached = l.detached.take();
        if mid_frame {
            // A CLOSE after part of a frame would be read as the rest of
            // that frame (into a peer's memory, for a PUT): just close.
            let _ = self.closes.push_back(l.id);
        } else {
            let mut bytes = [0u8; CONTROL_MAX];
            let len = emit_control(
                &mut bytes,
                PacketType::Close,
                0,
                0,
                0,
                Flags::empty(),
                |b| CloseRepr { reason }.emit(chunk(b)),
            );
            let _ = l.tx.push_back(TxItem::Control { bytes, len });
        }
        let receiving = core::mem::replace(&mut l.receiving, Receiving::None);
        let (peer, id) = (l.peer, l.id);
        if let Receiving::Send { frag, .. } = receiving {
            self.drop_received(frag);
        }
        if let (Some(p), Some(out)) = (peer, detached) {
            // The peer has it: only the rest of its frame is not written.
            self.release(p, out, Ok(()));
        }
        if let Some(p) = peer
            && self.peers[p]
                .as_mut()
                .is_some_and(|peer| peer.forget_link(id))
        {
            // This side's reasons: any but these is the peer's fault.
            let lost = match reason {
                CloseReason::Normal => return,
                CloseReason::VersionMismatch | CloseReason::AuthFailed | CloseReason::Timeout => {
                    LostReason::of_close(reason).unwrap_or(LostReason::ProtocolViolation)
                }
                _ => LostReason::ProtocolViolation,
            };
            self.lose_peer(p, lost);
        }
    }
}
