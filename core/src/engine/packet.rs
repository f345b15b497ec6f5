//! The packets an engine sends, as it keeps them until they are written:
//! control frames emitted in place, and the reliable packets a peer
//! retains until they are acknowledged, written as slices of fragments and
//! registered memory without a copy.

use heapless::Vec;

use crate::btl::{MemError, MemSlice, RegSlot, Registrations};
use crate::desc::Descriptor;
use crate::pool::PoolsRef;
use crate::wire::{
    self, AckRepr, CHECKSUM_LEN, CloseRepr, ControlRepr, CookieRepr, Crc32c, DoneRepr, Flags,
    GetRepr, HEADER_LEN, HeaderRepr, HelloAckRepr, HelloRepr, KeyInfoRepr, MAX_TRAILER_LEN,
    PacketRepr, PacketType, PutRepr, RejectRepr, Seal, SendRepr,
};

/// Bytes a descriptor keeps in front of its payload for the engine's
/// packet header: what [`Btl::alloc`](crate::btl::Btl::alloc) and
/// `prepare_src` reserve, and what a fragment must hold beyond the payload
/// of the largest message it carries.
pub const HEADER_RESERVE: usize = HEADER_LEN + SendRepr::LEN;

/// Header and fixed fields of a PUT packet, kept with it.
pub(crate) const PUT_PREFIX: usize = HEADER_LEN + PutRepr::LEN;

/// Most slices one transmit hands out (coalesced small packets).
pub const MAX_SEGMENTS: usize = 16;

/// Largest control frame: a HELLO with its trailers.
const CONTROL_MAX: usize = HEADER_LEN + HelloRepr::LEN + MAX_TRAILER_LEN;

/// The slices a link writes, in order.
pub type Segments<'a> = Vec<&'a [u8], MAX_SEGMENTS>;

/// Registered memory as the engine reads and writes packets from it.
pub(crate) trait Registered {
    /// The bytes of a local slice.
    fn slice(&self, s: MemSlice) -> Result<&[u8], MemError>;
}

impl<M: AsRef<[u8]> + AsMut<[u8]>, C: core::borrow::BorrowMut<[RegSlot<M>]>> Registered
    for Registrations<M, C>
{
    fn slice(&self, s: MemSlice) -> Result<&[u8], MemError> {
        Registrations::slice(self, s)
    }
}

/// What follows the body of every packet to one peer: a CRC32C trailer if
/// both HELLOs asked for one, and a seal once a keyed handshake over
/// datagrams derived the keys ([`Seal`]). None before a link opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailers {
    /// Whether a CRC32C trailer follows each body.
    pub checksum: bool,
    /// The keys each datagram is sealed and checked with.
    pub seal: Option<Seal>,
}

impl Trailers {
    /// The header flags that announce them.
    pub fn flags(&self) -> Flags {
        let mut flags = Flags::empty();
        flags.set(Flags::CHECKSUM, self.checksum);
        flags.set(Flags::SEALED, self.seal.is_some());
        flags
    }

    /// Whether a frame with header `flags` carries only trailers the
    /// handshake agreed on: one that did not would have this side sum or
    /// check what was never asked for, a protocol error.
    pub fn allow(&self, flags: Flags) -> bool {
        self.flags()
            .contains(flags.intersection(Flags::CHECKSUM | Flags::SEALED))
    }

    /// The trailers of a frame whose header and fixed fields are
    /// `prefix`, as it is stamped: the seal of the prefix, and whether a
    /// CRC32C of the whole frame goes before it. The CRC is taken as the
    /// frame is written ([`Outbox`](super::outbox::Outbox)), over the bytes
    /// that go out: a payload in registered memory may change before then
    /// (a put landing in it), and a CRC taken earlier would then fail at
    /// the peer.
    fn stamped(&self, prefix: &[u8]) -> Trailer {
        let mut trailer = Trailer {
            crc: self.checksum,
            ..Trailer::default()
        };
        if let Some(seal) = &self.seal {
            trailer.push(&seal.tag(prefix));
        }
        trailer
    }
}

/// The trailers a retained packet was stamped with: whether a CRC32C of
/// the frame goes after its payload (taken as it is written), and the
/// stamped bytes that follow it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trailer {
    bytes: [u8; MAX_TRAILER_LEN],
    len: u8,
    /// Whether a CRC32C goes before the stamped bytes.
    pub crc: bool,
}

impl Trailer {
    fn push(&mut self, bytes: &[u8]) {
        let at = usize::from(self.len);
        if let Some(room) = self.bytes.get_mut(at..at + bytes.len()) {
            room.copy_from_slice(bytes);
            self.len += bytes.len() as u8;
        }
    }

    /// The bytes, in order.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A whole packet without payload (HELLO, HELLO_ACK, ACK, CLOSE, and the
/// reliable GET, REJECT and DONE), its trailers included.
#[derive(Debug, Clone)]
pub struct ControlFrame {
    bytes: [u8; CONTROL_MAX],
    len: u8,
}

impl ControlFrame {
    /// `packet` behind a header of `credits`, `seq`, `ack` and `flags`,
    /// with `trailers`.
    pub fn new(
        packet: PacketRepr<'_>,
        credits: u32,
        seq: u64,
        ack: u64,
        flags: Flags,
        trailers: &Trailers,
    ) -> Self {
        let header = HeaderRepr {
            flags: flags | trailers.flags(),
            credits,
            seq,
            ack,
            ..HeaderRepr::new(&packet)
        };
        let mut bytes = [0u8; CONTROL_MAX];
        // Every control packet fits: the largest is a HELLO.
        let len = wire::emit(&header, &packet, &mut bytes).unwrap_or(0);
        if let Some(seal) = &trailers.seal {
            seal.seal_frame(&mut bytes[..len]);
        }
        ControlFrame {
            bytes,
            len: len as u8,
        }
    }

    /// A handshake packet (no sequence number, credits or acknowledgement,
    /// no trailer: nothing is agreed yet).
    pub fn hello(hello: HelloRepr) -> Self {
        Self::new(
            PacketRepr::Hello(hello),
            0,
            0,
            0,
            Flags::empty(),
            &Trailers::default(),
        )
    }

    /// The answer to a HELLO.
    pub fn hello_ack(ack: HelloAckRepr) -> Self {
        Self::new(
            PacketRepr::HelloAck(ack),
            0,
            0,
            0,
            Flags::empty(),
            &Trailers::default(),
        )
    }

    /// A CLOSE saying why, with `seal` if the link's peer seals.
    pub fn close(close: CloseRepr, seal: Option<&Seal>) -> Self {
        let trailers = Trailers {
            checksum: false,
            seal: seal.cloned(),
        };
        Self::new(PacketRepr::Close(close), 0, 0, 0, Flags::empty(), &trailers)
    }

    /// A COOKIE (a server's, or a client's echo of it).
    pub fn cookie(cookie: CookieRepr) -> Self {
        Self::new(
            PacketRepr::Cookie(cookie),
            0,
            0,
            0,
            Flags::empty(),
            &Trailers::default(),
        )
    }

    /// The frame's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// An answer owed to one of the peer's transfers; it goes before anything
/// else queued to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The transfer was refused.
    Reject(RejectRepr),
    /// The get for a third process landed.
    Done(DoneRepr),
    /// What the registration key the peer asked about names: described
    /// when the answer goes (only the key waits, not its description).
    KeyInfo(u64),
}

impl Answer {
    /// Whether it answers what `other` answers: the same transfer, or the
    /// same key.
    pub fn answers_as(&self, other: &Answer) -> bool {
        match (self, other) {
            (Answer::KeyInfo(a), Answer::KeyInfo(b)) => a == b,
            (Answer::KeyInfo(_), _) | (_, Answer::KeyInfo(_)) => false,
            _ => self.xfer_id() == other.xfer_id(),
        }
    }

    fn xfer_id(&self) -> u64 {
        match self {
            Answer::Reject(r) => r.xfer_id,
            Answer::Done(d) => d.xfer_id,
            Answer::KeyInfo(key) => *key,
        }
    }

    /// The packet that gives it, a key described by `describe`.
    pub fn packet(self, describe: impl FnOnce(u64) -> KeyInfoRepr) -> ControlRepr {
        match self {
            Answer::Reject(r) => ControlRepr::Reject(r),
            Answer::Done(d) => ControlRepr::Done(d),
            Answer::KeyInfo(key) => ControlRepr::KeyInfo(describe(key)),
        }
    }
}

/// A packet this side made, waiting for the link, credit or window room.
#[derive(Debug)]
pub enum Queued {
    /// A message.
    Send(Descriptor),
    /// A request for the peer's data.
    Get(GetRepr),
}

/// A retained reliable packet, kept until the peer acknowledges it.
#[derive(Debug)]
pub enum Outgoing {
    /// An active message: its prefix in the descriptor's headroom.
    Send {
        /// The message.
        desc: Descriptor,
        /// Its trailers, as it was stamped.
        trailer: Trailer,
    },
    /// A piece of a put (or of the data answering a peer's get).
    Put {
        /// Header and fixed fields.
        prefix: [u8; PUT_PREFIX],
        /// The data, in registered memory.
        data: MemSlice,
        /// The operation's slot and id: a slot freed early (by a REJECT)
        /// and taken by another operation is not credited with this data.
        op: u16,
        /// The transfer.
        xfer_id: u64,
        /// Its trailers, as it was stamped.
        trailer: Trailer,
    },
    /// A packet without payload.
    Control {
        /// What it says.
        packet: ControlRepr,
        /// Its bytes, with the latest header.
        frame: ControlFrame,
    },
}

impl Outgoing {
    /// A PUT packet of `put` carrying `data`, for operation `op`.
    pub(crate) fn put(put: &PutRepr, data: MemSlice, op: u16) -> Self {
        let mut prefix = [0u8; PUT_PREFIX];
        if let Some((_, fixed)) = prefix.split_first_chunk_mut::<HEADER_LEN>()
            && let Some(fixed) = fixed.first_chunk_mut()
        {
            put.emit(fixed);
        }
        Outgoing::Put {
            prefix,
            data,
            op,
            xfer_id: put.xfer_id,
            trailer: Trailer::default(),
        }
    }

    /// A control packet, stamped when it is numbered.
    pub(crate) fn control(packet: ControlRepr) -> Self {
        Outgoing::Control {
            packet,
            frame: ControlFrame::new(
                PacketRepr::Control(packet),
                0,
                0,
                0,
                Flags::empty(),
                &Trailers::default(),
            ),
        }
    }

    /// Writes the packet's header as `seq` with the acknowledgement `ack`
    /// and the credit total `credits`, and its stamped `trailers` (a seal;
    /// a CRC32C is taken as it is written): done once, as it is put on a
    /// link, so that the header handed to the driver never changes
    /// afterwards.
    pub(crate) fn stamp(
        &mut self,
        seq: u64,
        ack: u64,
        credits: u32,
        trailers: &Trailers,
        pools: PoolsRef<'_>,
    ) {
        let flags = trailers.flags();
        match self {
            Outgoing::Send { desc, trailer } => {
                let body = (desc.len() - HEADER_RESERVE) as u64 + SendRepr::LEN as u64;
                let header = HeaderRepr {
                    packet_type: PacketType::Send,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: body,
                };
                let tag = desc.tag();
                if let Ok(room) = desc.headroom_mut(pools)
                    && let Some((head, fixed)) = room.split_first_chunk_mut()
                    && let Some(fixed) = fixed.first_chunk_mut()
                {
                    header.emit(head);
                    SendRepr { tag: tag.0 }.emit(fixed);
                }
                let inline = desc.fragment_bytes(pools).unwrap_or(&[]);
                let prefix = &inline[..HEADER_RESERVE.min(inline.len())];
                *trailer = trailers.stamped(prefix);
            }
            Outgoing::Put {
                prefix,
                data,
                trailer,
                ..
            } => {
                let header = HeaderRepr {
                    packet_type: PacketType::Put,
                    flags,
                    credits,
                    seq,
                    ack,
                    body_len: PutRepr::LEN as u64 + data.len,
                };
                if let Some(head) = prefix.first_chunk_mut() {
                    header.emit(head);
                }
                *trailer = trailers.stamped(prefix);
            }
            Outgoing::Control { packet, frame } => {
                *frame = ControlFrame::new(
                    PacketRepr::Control(*packet),
                    credits,
                    seq,
                    ack,
                    Flags::empty(),
                    trailers,
                );
            }
        }
    }

    /// The frame's bytes before its trailers, in two pieces (header and
    /// inline data, then data in registered memory), and its stamped
    /// trailers (`None` for a control frame, which holds its own).
    pub(crate) fn body<'a>(
        &'a self,
        pools: PoolsRef<'a>,
        regs: &'a impl Registered,
    ) -> ([&'a [u8]; 2], Option<&'a Trailer>) {
        match self {
            Outgoing::Send { desc, trailer } => (
                [
                    desc.fragment_bytes(pools).unwrap_or(&[]),
                    desc.referenced()
                        .and_then(|r| regs.slice(r).ok())
                        .unwrap_or(&[]),
                ],
                Some(trailer),
            ),
            Outgoing::Put {
                prefix,
                data,
                trailer,
                ..
            } => ([prefix, regs.slice(*data).unwrap_or(&[])], Some(trailer)),
            Outgoing::Control { frame, .. } => ([frame.as_bytes(), &[]], None),
        }
    }

    /// Appends the packet's bytes as they are written to `out`, with `crc`
    /// as its CRC32C trailer if it has one, after dropping the first
    /// `skip` (already written); `skip` is what remains to drop after this
    /// packet.
    pub(crate) fn segments<'a>(
        &'a self,
        pools: PoolsRef<'a>,
        regs: &'a impl Registered,
        crc: &'a [u8; CHECKSUM_LEN],
        out: &mut Segments<'a>,
        skip: &mut usize,
    ) {
        let ([first, second], trailer) = self.body(pools, regs);
        push_skipping(out, first, skip);
        push_skipping(out, second, skip);
        if let Some(trailer) = trailer {
            if trailer.crc {
                push_skipping(out, crc, skip);
            }
            push_skipping(out, trailer.as_bytes(), skip);
        }
    }

    /// Bytes the packet takes on the wire.
    pub(crate) fn wire_len(&self, pools: PoolsRef<'_>, regs: &impl Registered) -> usize {
        let ([first, second], trailer) = self.body(pools, regs);
        let trailer = trailer.map_or(0, |t| {
            t.as_bytes().len() + if t.crc { CHECKSUM_LEN } else { 0 }
        });
        first.len() + second.len() + trailer
    }

    /// Whether a CRC32C of the frame goes after its payload.
    pub(crate) fn has_crc(&self) -> bool {
        matches!(self, Outgoing::Send { trailer, .. } | Outgoing::Put { trailer, .. } if trailer.crc)
    }

    /// Adds the frame's bytes before its trailers from `from` to `to`
    /// (offsets into them, clamped to their length) to `crc`.
    pub(crate) fn sum_body(
        &self,
        pools: PoolsRef<'_>,
        regs: &impl Registered,
        crc: &mut Crc32c,
        from: usize,
        to: usize,
    ) {
        let ([first, second], _) = self.body(pools, regs);
        let mut at = 0;
        for piece in [first, second] {
            let (start, end) = (from.max(at), to.min(at + piece.len()));
            if start < end {
                crc.update(&piece[start - at..end - at]);
            }
            at += piece.len();
        }
    }

    /// Whether the packet reads registered memory `handle`: such a region
    /// must stay registered until the packet is done with.
    pub(crate) fn reads(&self, handle: crate::btl::MemHandle) -> bool {
        match self {
            Outgoing::Send { desc, .. } => desc.referenced().is_some_and(|r| r.handle == handle),
            Outgoing::Put { data, .. } => data.handle == handle,
            Outgoing::Control { .. } => false,
        }
    }
}

/// An ACK carrying `ack` and the credit total `credits`, with `flags`
/// (`ACK_REQUEST` for a probe) and `trailers`.
pub(crate) fn ack_frame(
    ack: crate::engine::window::Ack,
    credits: u32,
    trailers: &Trailers,
    flags: Flags,
) -> ControlFrame {
    ControlFrame::new(
        PacketRepr::Ack(AckRepr { sack: ack.sack }),
        credits,
        0,
        ack.cumulative,
        flags,
        trailers,
    )
}

/// Appends `bytes` to `out` after dropping the first `skip` of them.
pub(crate) fn push_skipping<'a>(out: &mut Segments<'a>, bytes: &'a [u8], skip: &mut usize) {
    if *skip >= bytes.len() {
        *skip -= bytes.len();
        return;
    }
    let _ = out.push(&bytes[*skip..]);
    *skip = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::window::Ack;
    use crate::wire::{Limits, parse};

    #[test]
    fn control_frames_parse_back_with_their_header() {
        let done = ControlRepr::Done(DoneRepr { xfer_id: 7 });
        let mut out = Outgoing::control(done);
        let regs = Registrations::<&mut [u8], [RegSlot<&mut [u8]>; 0]>::inline();
        let cfg = crate::pool::FragmentPoolsConfig {
            small: small(),
            eager: small(),
            max: small(),
        };
        let mut region = std::vec![0u8; cfg.required_bytes()];
        let pools = crate::pool::FragmentPools::new(&mut region, cfg).expect("pools");
        let (me, them) = (
            crate::wire::Start {
                job: 1,
                rank: 0,
                epoch: 5,
            },
            crate::wire::Start {
                job: 1,
                rank: 1,
                epoch: 9,
            },
        );
        let trailers = Trailers {
            checksum: true,
            seal: Some(Seal::derive(b"job key", me, them)),
        };
        out.stamp(5, 3, 9, &trailers, pools.view());
        let mut segments = Segments::new();
        out.segments(
            pools.view(),
            &regs,
            &[0; CHECKSUM_LEN],
            &mut segments,
            &mut 0,
        );
        assert_eq!(segments.len(), 1, "a control packet is one slice");
        let (header, packet, _) = parse(segments[0], &Limits::new(1024)).expect("a frame");
        assert_eq!((header.seq, header.ack, header.credits), (5, 3, 9));
        assert!(header.flags.contains(Flags::CHECKSUM | Flags::SEALED));
        assert_eq!(
            packet,
            PacketRepr::Control(ControlRepr::Done(DoneRepr { xfer_id: 7 }))
        );
        assert_eq!(
            out.wire_len(pools.view(), &regs),
            segments[0].len(),
            "the length is what is written"
        );
        let theirs = Seal::derive(b"job key", them, me);
        assert_eq!(theirs.check(segments[0]), Ok(()), "the peer takes it");
        assert_eq!(
            trailers.seal.as_ref().map(|s| s.check(segments[0])),
            Some(Err(crate::wire::WireError::BadSeal)),
            "reflected back to its sender, it is refused"
        );
        let ack = ack_frame(
            Ack {
                cumulative: 4,
                sack: 1,
            },
            2,
            &Trailers::default(),
            Flags::ACK_REQUEST,
        );
        let (header, packet, _) = parse(ack.as_bytes(), &Limits::new(1024)).expect("a frame");
        assert_eq!((header.ack, header.credits), (4, 2));
        assert!(header.flags.contains(Flags::ACK_REQUEST));
        assert_eq!(packet, PacketRepr::Ack(AckRepr { sack: 1 }));
    }

    #[test]
    fn skipping_drops_what_was_written() {
        let mut out = Segments::new();
        let mut skip = 5;
        push_skipping(&mut out, b"abc", &mut skip);
        assert!(out.is_empty() && skip == 2);
        push_skipping(&mut out, b"defg", &mut skip);
        assert_eq!((out.as_slice(), skip), (&[&b"fg"[..]][..], 0));
    }

    fn small() -> crate::pool::FragmentPoolConfig {
        crate::pool::FragmentPoolConfig {
            fragment_size: 64,
            num: 1,
            max: 1,
            inc: 1,
        }
    }
}
