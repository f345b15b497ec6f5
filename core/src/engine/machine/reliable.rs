//! The reliable packets this side sends: queued until credit and window room
//! allow, numbered, retained until acknowledged and sent again when lost;
//! and the acknowledgements and credits both ways.

use heapless::Vec;

use super::frame::{chunk, chunk_mut, emit_control};
use super::link::{LinkState, TxItem};
use super::peer::PeerState;
use super::{CONTROL_MAX, Engine, MAX_PEER_LINKS, PUT_PREFIX, Pending, SEND_PREFIX, WINDOW};
use crate::btl::{BtlError, Completion, MemSlice};
use crate::desc::{DescFlags, Descriptor};
use crate::engine::window::Ack;
use crate::wire::{
    AckRepr, CHECKSUM_LEN, CloseReason, Crc32c, DoneRepr, Flags, GetRepr, HEADER_LEN, HeaderRepr,
    PacketType, PutRepr, RejectRepr, SendRepr,
};

/// Received packets and grants after which a stream's acknowledgement goes
/// at once, without waiting for its delay: the sender keeps going.
const ACK_BATCH: u32 = 8;

/// A retained reliable packet, kept until the peer acknowledges it.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// An active message: prefix in the descriptor's headroom.
    Send {
        desc: Descriptor,
        trailer: [u8; CHECKSUM_LEN],
    },
    /// A piece of a put (or of the answer to a peer's get).
    Put {
        prefix: [u8; PUT_PREFIX],
        data: MemSlice,
        /// The operation's slot and id: a slot freed early (by a REJECT)
        /// and taken by another operation is not credited with this data.
        op: u16,
        xfer_id: u64,
        trailer: [u8; CHECKSUM_LEN],
    },
    /// A packet without payload (GET, REJECT, CLOSE).
    Control { bytes: [u8; CONTROL_MAX], len: u8 },
}

/// A packet of this side's making waiting for the link, credit or window
/// room.
#[derive(Debug)]
pub(super) enum Queued {
    Send(Descriptor),
    Get(GetRepr),
}

/// A packet answering one of the peer's transfers, waiting for window room.
#[derive(Debug, Clone, Copy)]
pub(super) enum Answer {
    Reject(RejectRepr),
    Done(DoneRepr),
}

impl Answer {
    pub(super) fn xfer_id(&self) -> u64 {
        match self {
            Answer::Reject(r) => r.xfer_id,
            Answer::Done(d) => d.xfer_id,
        }
    }
}

/// A reliable packet without payload, as it is numbered and written.
#[derive(Debug, Clone, Copy)]
enum ControlPacket {
    Get(GetRepr),
    Reject(RejectRepr),
    Done(DoneRepr),
}

impl From<Answer> for ControlPacket {
    fn from(a: Answer) -> Self {
        match a {
            Answer::Reject(r) => ControlPacket::Reject(r),
            Answer::Done(d) => ControlPacket::Done(d),
        }
    }
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Moves queued packets and bulk transfers into the send windows and
    /// onto the links, as credits, windows and links allow.
    pub(super) fn progress_queues(&mut self) {
        for p in self.present_peers.clone().into_iter().map(usize::from) {
            let Some(peer) = self.peers[p].as_ref() else {
                continue;
            };
            if peer.state != PeerState::Open {
                continue;
            }
            // Answers to the peer's transfers first.
            while let Some(peer) = self.peers[p].as_mut() {
                if peer.send.is_full() {
                    break;
                }
                let Some(answer) = peer.answers.pop_front() else {
                    break;
                };
                self.transmit_control(p, answer.into());
            }
            // Queued sends and gets, in order.
            while let Some(peer) = self.peers[p].as_mut() {
                let ready = match peer.queue.front() {
                    Some(Queued::Send(_)) => peer.has_credit() && !peer.send.is_full(),
                    Some(Queued::Get(_)) => !peer.send.is_full(),
                    None => false,
                };
                if !ready {
                    break;
                }
                match peer.queue.pop_front() {
                    Some(Queued::Send(desc)) => self.transmit_send(p, desc),
                    Some(Queued::Get(get)) => self.transmit_control(p, ControlPacket::Get(get)),
                    None => break,
                }
            }
            // Bulk packets of the operations that have some left.
            let mut bits = self.sending;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                while self.sending & (1 << i) != 0
                    && self.ops[i].as_ref().is_some_and(|op| op.peer == p)
                    && self.peers[p]
                        .as_ref()
                        .is_some_and(|peer| !peer.send.is_full())
                {
                    self.transmit_put(i);
                }
            }
        }
    }

    pub(super) fn transmit_send(&mut self, p: usize, desc: Descriptor) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        // Never more than the peer announced it accepts (it would take the
        // frame for a protocol violation).
        let payload = (desc.len() - SEND_PREFIX) as u64;
        let room = peer.peer_max_body.saturating_sub(SendRepr::LEN as u64);
        if payload > room {
            let error = BtlError::TooLarge {
                len: payload,
                max: room,
            };
            self.complete_send(p, desc, Err(error));
            return;
        }
        peer.sends_sent = peer.sends_sent.wrapping_add(1);
        let out = Outgoing::Send {
            desc,
            trailer: [0; CHECKSUM_LEN],
        };
        match peer.send.push(out, now) {
            Ok(seq) => self.enqueue_reliable(p, seq),
            Err(e) => {
                if let Outgoing::Send { desc, .. } = e.into_item() {
                    self.complete_send(p, desc, Err(BtlError::OutOfResource));
                }
            }
        }
    }

    fn transmit_control(&mut self, p: usize, packet: ControlPacket) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        let out = Outgoing::Control {
            bytes: [0; CONTROL_MAX],
            len: 0,
        };
        if let Ok(seq) = peer.send.push(out, now) {
            if let Some(Outgoing::Control { bytes, len }) = peer.send.get_mut(seq) {
                *len = match packet {
                    ControlPacket::Get(g) => {
                        emit_control(bytes, PacketType::Get, 0, seq, 0, Flags::empty(), |b| {
                            g.emit(chunk(b))
                        })
                    }
                    ControlPacket::Reject(r) => {
                        emit_control(bytes, PacketType::Reject, 0, seq, 0, Flags::empty(), |b| {
                            r.emit(chunk(b))
                        })
                    }
                    ControlPacket::Done(d) => {
                        emit_control(bytes, PacketType::Done, 0, seq, 0, Flags::empty(), |b| {
                            d.emit(chunk(b))
                        })
                    }
                };
            }
            self.enqueue_reliable(p, seq);
        }
    }

    fn transmit_put(&mut self, i: usize) {
        let now = self.now;
        let Some(op) = self.ops[i] else {
            return;
        };
        let Some(local) = op.local else {
            return;
        };
        let chunk = self.put_chunk(op.peer);
        let len = chunk.min(op.len - op.queued);
        let put = PutRepr {
            xfer_id: op.id,
            handle: op.remote.key.0,
            offset: op.remote.offset + op.queued,
            total_len: op.len,
            index: op.next_index,
            count: op.count,
        };
        let data = MemSlice {
            handle: local.handle,
            offset: local.offset + op.queued,
            len,
        };
        let mut prefix = [0u8; PUT_PREFIX];
        let (_, fixed) = prefix.split_at_mut(HEADER_LEN);
        put.emit(chunk_mut(fixed));
        let out = Outgoing::Put {
            prefix,
            data,
            op: i as u16,
            xfer_id: op.id,
            trailer: [0; CHECKSUM_LEN],
        };
        let Some(peer) = self.peers[op.peer].as_mut() else {
            return;
        };
        if let Ok(seq) = peer.send.push(out, now) {
            if let Some(o) = self.ops[i].as_mut() {
                o.queued += len;
                o.next_index += 1;
            }
            self.update_sending(i);
            self.enqueue_reliable(op.peer, seq);
        }
    }

    /// The slot of the open link that carries the peer's next packet: PUT
    /// packets (`stripe`) go to its open links in turn, everything else to
    /// the first, so small messages queued together leave in one write.
    pub(super) fn send_slot(&mut self, p: usize, stripe: bool) -> Option<usize> {
        let peer = self.peers[p].as_ref()?;
        let mut open: Vec<usize, MAX_PEER_LINKS> = Vec::new();
        for id in peer.links.iter().flatten() {
            if let Some(s) = self.slot_of(*id)
                && self.links[s]
                    .as_ref()
                    .is_some_and(|l| l.state == LinkState::Open)
            {
                let _ = open.push(s);
            }
        }
        if !stripe || open.len() < 2 {
            return open.first().copied();
        }
        let peer = self.peers[p].as_mut()?;
        peer.stripe = peer.stripe.wrapping_add(1);
        open.get(usize::from(peer.stripe) % open.len()).copied()
    }

    /// Puts a retained packet on one of its peer's open links.
    pub(super) fn enqueue_reliable(&mut self, p: usize, seq: u64) {
        let stripe = self.peers[p]
            .as_ref()
            .is_some_and(|peer| matches!(peer.send.get(seq), Some(Outgoing::Put { .. })));
        let Some(slot) = self.send_slot(p, stripe) else {
            return;
        };
        // The header is written once, now, with the current ack and
        // credits: bytes handed to the driver never change afterwards.
        self.refresh(p, seq);
        if let Some(l) = self.links[slot].as_mut() {
            let _ = l.tx.push_back(TxItem::Reliable { seq });
        }
    }

    /// Puts a retained packet on a link of its peer again (lost over
    /// datagrams, or with a link that broke), unless it still waits on one:
    /// its bytes must not change under the driver.
    pub(super) fn resend(&mut self, p: usize, seq: u64) {
        let Some(peer) = self.peers[p].as_ref() else {
            return;
        };
        let waiting = peer.links.iter().flatten().any(|id| {
            self.slot_of(*id)
                .and_then(|s| self.links[s].as_ref())
                .is_some_and(|l| {
                    l.tx.iter()
                        .any(|t| matches!(t, TxItem::Reliable { seq: s } if *s == seq))
                })
        });
        if !waiting {
            self.enqueue_reliable(p, seq);
        }
    }

    /// Writes a retained packet's header with the current ack and credits.
    fn refresh(&mut self, p: usize, seq: u64) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        let checksum = peer.checksum;
        let (ack, credits) = (peer.recv.ack().cumulative, peer.granted);
        // This packet carries the acknowledgement and credits: no bare ACK
        // is owed for them any more.
        peer.ack_sent();
        let flags = if checksum {
            Flags::CHECKSUM
        } else {
            Flags::empty()
        };
        let Some(out) = peer.send.get_mut(seq) else {
            return;
        };
        match out {
            Outgoing::Send { desc, trailer } => {
                let body = (desc.len() - SEND_PREFIX) as u64 + SendRepr::LEN as u64;
                let header = HeaderRepr {
                    packet_type: PacketType::Send,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: body,
                };
                let tag = desc.tag();
                if let Ok(room) = desc.headroom_mut(self.pools.view()) {
                    let (head, fixed) = room.split_at_mut(HEADER_LEN);
                    header.emit(chunk_mut(head));
                    SendRepr { tag: tag.0 }.emit(chunk_mut(fixed));
                }
                if checksum {
                    let mut crc = Crc32c::new();
                    if let Ok(bytes) = desc.fragment_bytes(self.pools.view()) {
                        crc.update(bytes);
                    }
                    if let Some(r) = desc.referenced()
                        && let Ok(bytes) = self.regs.slice(r)
                    {
                        crc.update(bytes);
                    }
                    *trailer = crc.trailer();
                }
            }
            Outgoing::Put {
                prefix,
                data,
                trailer,
                ..
            } => {
                let body = PutRepr::LEN as u64 + data.len;
                let header = HeaderRepr {
                    packet_type: PacketType::Put,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: body,
                };
                let (head, _) = prefix.split_at_mut(HEADER_LEN);
                header.emit(chunk_mut(head));
                if checksum {
                    let mut crc = Crc32c::new();
                    crc.update(prefix);
                    if let Ok(bytes) = self.regs.slice(*data) {
                        crc.update(bytes);
                    }
                    *trailer = crc.trailer();
                }
            }
            Outgoing::Control { bytes, len } => {
                let Ok(packet_type) = PacketType::try_from(bytes[0]) else {
                    return;
                };
                let fixed = packet_type.fixed_body_len();
                let header = HeaderRepr {
                    packet_type,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: fixed as u64,
                };
                header.emit(chunk_mut(&mut bytes[..HEADER_LEN]));
                let mut n = HEADER_LEN + fixed;
                if checksum {
                    let t = crate::wire::crc32c(&bytes[..n]).to_be_bytes();
                    bytes[n..n + CHECKSUM_LEN].copy_from_slice(&t);
                    n += CHECKSUM_LEN;
                }
                *len = n as u8;
            }
        }
    }

    /// Takes an acknowledgement and a credit total from the peer.
    pub(super) fn on_ack(&mut self, p: usize, ack: Ack, credits: u32) -> Result<(), CloseReason> {
        let now = self.now;
        let datagram = self.datagram();
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        if (credits.wrapping_sub(peer.peer_granted) as i32) > 0 {
            peer.peer_granted = credits;
        }
        if ack.cumulative == 0 {
            return Ok(());
        }
        let mut released: Vec<(u64, Outgoing), WINDOW> = Vec::new();
        let acked = peer
            .send
            .on_ack(ack, now, |seq, out| {
                let _ = released.push((seq, out));
            })
            .map_err(|_| CloseReason::ProtocolError)?;
        match acked.rtt {
            Some(rtt) => peer.rtt.on_sample(rtt),
            None if acked.released > 0 => peer.rtt.on_progress(),
            None => {}
        }
        // Holes the selective acknowledgement reveals go again at once.
        let mut lost: Vec<u64, WINDOW> = Vec::new();
        if datagram {
            while let Some(resend) = peer.send.next_fast_retransmit(now) {
                let _ = lost.push(resend.seq);
            }
        }
        for (seq, out) in released {
            self.release_or_detach(p, seq, out);
        }
        for seq in lost {
            self.resend(p, seq);
        }
        self.progress_queues();
        Ok(())
    }

    /// An acknowledged packet completes, unless a link of its peer is
    /// partway through writing it (sent there again after another link
    /// broke, it reached the peer first the other way): then it stays with
    /// that link until its last byte is written, for the stream's framing
    /// and because its bytes must not change meanwhile.
    fn release_or_detach(&mut self, p: usize, seq: u64, out: Outgoing) {
        let writing = self.peers[p].as_ref().and_then(|peer| {
            peer.links.iter().flatten().find_map(|id| {
                let s = self.slot_of(*id)?;
                let l = self.links[s].as_ref()?;
                let mid = l.written > 0
                    && matches!(l.tx.front(), Some(TxItem::Reliable { seq: f }) if *f == seq);
                mid.then_some(s)
            })
        });
        match writing.and_then(|s| self.links[s].as_mut()) {
            Some(l) => {
                if let Some(front) = l.tx.front_mut() {
                    *front = TxItem::Detached;
                }
                l.detached = Some(out);
            }
            None => self.release(p, out, Ok(())),
        }
    }

    /// A retained packet is done with: its operation may complete.
    pub(super) fn release(&mut self, p: usize, out: Outgoing, result: Result<(), BtlError>) {
        match out {
            Outgoing::Send { desc, .. } => self.complete_send(p, desc, result),
            Outgoing::Put {
                op: i,
                xfer_id,
                data,
                ..
            } => {
                let i = usize::from(i);
                if let Some(op) = self.ops[i].as_mut()
                    && op.id == xfer_id
                    && op.peer == p
                {
                    op.done = op.done.saturating_add(data.len);
                    let all = op.done >= op.len;
                    if result.is_err() || all {
                        self.finish_op(i, result);
                    }
                }
            }
            Outgoing::Control { .. } => {}
        }
    }

    /// Ends a send: frees an owned descriptor and queues the completion
    /// its caller is owed. A send that owes none (`BTL_OWNERSHIP` without
    /// `ALWAYS_CALLBACK`, and `sendi`) was reported complete when it was
    /// made, so it ends silently whatever its result; a lost peer is
    /// reported by its error event.
    pub(super) fn complete_send(
        &mut self,
        p: usize,
        desc: Descriptor,
        result: Result<(), BtlError>,
    ) {
        let endpoint = self.endpoint(p);
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
            self.owed = self.owed.saturating_sub(1);
            if let Err(Pending::Done(Completion::Send { desc: Some(d), .. })) =
                self.events.push_back(Pending::Done(Completion::Send {
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

    /// Queues an ACK on the peer's link when one is owed and nothing else
    /// would carry it soon.
    pub(super) fn queue_ack_if_owed(&mut self, slot: usize) {
        let datagram = self.datagram();
        let Some(l) = self.links[slot].as_ref() else {
            return;
        };
        let Some(p) = l.peer else {
            return;
        };
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        // Over datagrams, packets held past a hole are reported at once:
        // only an ACK carries the selective acknowledgement.
        let holes = datagram && peer.recv.held() > 0;
        if l.state != LinkState::Open || (!l.tx.is_empty() && !holes) {
            return;
        }
        let Some(since) = peer.ack_owed_since else {
            return;
        };
        // Over a stream an acknowledgement may wait a little for a packet
        // going back to carry it, unless it is urgent or a run built up.
        let waits = !datagram
            && !peer.ack_urgent
            && peer.acks_pending < ACK_BATCH
            && self.now - since < self.config.ack_delay;
        if waits {
            return;
        }
        let reject_waiting = peer.answers.iter().any(|a| matches!(a, Answer::Reject(_)));
        if reject_waiting {
            return;
        }
        // The link is idle, so no packet would carry the acknowledgement:
        // send it now rather than stall the peer's window or credits.
        self.push_ack(p, slot, Flags::empty());
    }

    /// Queues an ACK (with `flags`) to peer `p` on its link `slot`: it
    /// carries the acknowledgement and credits owed.
    fn push_ack(&mut self, p: usize, slot: usize, flags: Flags) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.ack_sent();
        let ack = peer.recv.ack();
        let credits = peer.granted;
        let flags = if peer.checksum {
            flags | Flags::CHECKSUM
        } else {
            flags
        };
        let mut bytes = [0u8; CONTROL_MAX];
        let len = emit_control(
            &mut bytes,
            PacketType::Ack,
            credits,
            0,
            ack.cumulative,
            flags,
            |b| AckRepr { sack: ack.sack }.emit(chunk(b)),
        );
        if let Some(l) = self.links[slot].as_mut() {
            let _ = l.tx.push_back(TxItem::Control { bytes, len });
        }
    }

    /// Sends the acknowledgement owed to peer `p` on one of its links: its
    /// delay ran out with no packet going back to carry it.
    pub(super) fn flush_ack(&mut self, p: usize) {
        if let Some(slot) = self.send_slot(p, false) {
            self.queue_ack_if_owed(slot);
        }
    }

    /// Asks peer `p` for an acknowledgement: a keepalive, or a credit probe.
    pub(super) fn probe(&mut self, p: usize) {
        let now = self.now;
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        peer.last_probe = now;
        if let Some(slot) = self.send_slot(p, false) {
            self.push_ack(p, slot, Flags::ACK_REQUEST);
        }
    }
}
