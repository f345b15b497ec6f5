//! The 32-byte header every packet starts with.
//!
//! ```text
//!  0  u8   type       PacketType
//!  1  u8   flags      Flags (bit 0 CHECKSUM, 1 ACK_REQUEST, 2 SEALED)
//!  2  u16  reserved   0
//!  4  u32  credits    running total of credits granted to the receiver
//!  8  u64  seq        sequence number of a reliable packet, else 0
//! 16  u64  ack        cumulative acknowledgement
//! 24  u64  body_len   bytes of body after the header, trailers excluded
//! ```

use core::fmt;

use bitflags::bitflags;

use super::field::{Fields, FieldsMut, check_reserved};
use super::{
    AckRepr, CHECKSUM_LEN, CloseRepr, CookieRepr, DoneRepr, GetRepr, HEADER_LEN, HelloAckRepr,
    HelloRepr, KeyInfoRepr, KeyRepr, Limits, NotifyRepr, PacketRepr, PutRepr, RejectRepr, SEAL_LEN,
    SendRepr, WireError,
};

const TYPE: usize = 0;
const FLAGS: usize = 1;
const RESERVED: usize = 2;
const CREDITS: usize = 4;
const SEQ: usize = 8;
const ACK: usize = 16;
const BODY_LEN: usize = 24;

/// The kind of a packet, from the header's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
#[repr(u8)]
pub enum PacketType {
    /// Opens a connection: who the sender is and what it can do.
    Hello = 1,
    /// Answers the peer's HELLO with the job-key proof.
    HelloAck = 2,
    /// An active message: a tag and a payload.
    Send = 3,
    /// One packet of a bulk transfer into a registered region of the peer.
    Put = 4,
    /// Asks the peer to PUT a registered region somewhere.
    Get = 5,
    /// Acknowledges reliable packets and grants credits.
    Ack = 6,
    /// Ends the connection, with a reason.
    Close = 7,
    /// Refuses a PUT or GET that failed the registration check.
    Reject = 8,
    /// Reports a GET for a third process complete at its target.
    Done = 9,
    /// Tells the target of a PUT that its data has landed (since minor
    /// version 1).
    Notify = 10,
    /// Asks what a registration key names (since minor version 2).
    Key = 11,
    /// Answers a KEY (since minor version 2).
    KeyInfo = 12,
    /// Over datagrams, a server's answer to a stranger's HELLO, and the
    /// stranger's echo of it (since minor version 3).
    Cookie = 13,
}

impl PacketType {
    /// Every packet type, in type-number order.
    pub const ALL: [PacketType; 13] = [
        Self::Hello,
        Self::HelloAck,
        Self::Send,
        Self::Put,
        Self::Get,
        Self::Ack,
        Self::Close,
        Self::Reject,
        Self::Done,
        Self::Notify,
        Self::Key,
        Self::KeyInfo,
        Self::Cookie,
    ];

    /// The type with wire number `raw`, if there is one.
    pub const fn from_u8(raw: u8) -> Option<Self> {
        Some(match raw {
            1 => Self::Hello,
            2 => Self::HelloAck,
            3 => Self::Send,
            4 => Self::Put,
            5 => Self::Get,
            6 => Self::Ack,
            7 => Self::Close,
            8 => Self::Reject,
            9 => Self::Done,
            10 => Self::Notify,
            11 => Self::Key,
            12 => Self::KeyInfo,
            13 => Self::Cookie,
            _ => return None,
        })
    }

    /// The upper-case name the specification uses (`HELLO_ACK`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Hello => "HELLO",
            Self::HelloAck => "HELLO_ACK",
            Self::Send => "SEND",
            Self::Put => "PUT",
            Self::Get => "GET",
            Self::Ack => "ACK",
            Self::Close => "CLOSE",
            Self::Reject => "REJECT",
            Self::Done => "DONE",
            Self::Notify => "NOTIFY",
            Self::Key => "KEY",
            Self::KeyInfo => "KEY_INFO",
            Self::Cookie => "COOKIE",
        }
    }

    /// Whether packets of this type carry a sequence number and are
    /// acknowledged (and, over datagrams, retransmitted). HELLO, HELLO_ACK,
    /// COOKIE and ACK are not: the handshake repeats itself and an ACK is
    /// superseded by the next one.
    pub const fn is_reliable(self) -> bool {
        !matches!(
            self,
            Self::Hello | Self::HelloAck | Self::Cookie | Self::Ack
        )
    }

    /// Whether the body has a variable-length payload after its fixed
    /// fields (SEND and PUT).
    pub const fn has_payload(self) -> bool {
        matches!(self, Self::Send | Self::Put)
    }

    /// Length of the body's fixed fields: the whole body for every type but
    /// SEND and PUT, whose payload follows. A stream reader reads this much
    /// of the body into scratch space, decodes it, and then reads the
    /// payload straight into its target.
    pub const fn fixed_body_len(self) -> usize {
        match self {
            Self::Hello => HelloRepr::LEN,
            Self::HelloAck => HelloAckRepr::LEN,
            Self::Send => SendRepr::LEN,
            Self::Put => PutRepr::LEN,
            Self::Get => GetRepr::LEN,
            Self::Ack => AckRepr::LEN,
            Self::Close => CloseRepr::LEN,
            Self::Reject => RejectRepr::LEN,
            Self::Done => DoneRepr::LEN,
            Self::Notify => NotifyRepr::LEN,
            Self::Key => KeyRepr::LEN,
            Self::KeyInfo => KeyInfoRepr::LEN,
            Self::Cookie => CookieRepr::LEN,
        }
    }

    /// Checks that a body of `len` bytes suits this type.
    pub fn check_body_len(self, len: u64) -> Result<(), WireError> {
        let fixed = self.fixed_body_len() as u64;
        let fits = if self.has_payload() {
            len >= fixed
        } else {
            len == fixed
        };
        if fits {
            Ok(())
        } else {
            Err(WireError::BadLength {
                packet_type: self,
                len,
            })
        }
    }
}

impl From<PacketType> for u8 {
    fn from(t: PacketType) -> u8 {
        t as u8
    }
}

impl TryFrom<u8> for PacketType {
    type Error = WireError;

    fn try_from(raw: u8) -> Result<Self, WireError> {
        Self::from_u8(raw).ok_or(WireError::UnknownType(raw))
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

bitflags! {
    /// Per-packet options in the header's flags byte. Bits without a
    /// meaning here must be zero: a receiver refuses them, so that they can
    /// be given a meaning later without old peers misreading them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Flags: u8 {
        /// A CRC32C of header and body follows the body. Set only when both
        /// HELLOs announced [`Capabilities::CRC32C`](super::Capabilities::CRC32C).
        const CHECKSUM = 1 << 0;
        /// The receiver should answer with an acknowledgement soon: a
        /// keepalive, or a sender waiting for credits over datagrams, where
        /// the ACK that carried them may have been lost.
        const ACK_REQUEST = 1 << 1;
        /// A [`Seal`](super::Seal) ends the frame, after the CRC32C
        /// trailer if any (since minor version 4). Set on every datagram
        /// between two processes that both hold the job key, once their
        /// handshake opened the link; never over a stream.
        const SEALED = 1 << 2;
    }
}

#[cfg(any(test, feature = "arbitrary"))]
impl<'a> arbitrary::Arbitrary<'a> for Flags {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Self::from_bits_truncate(u.arbitrary()?))
    }
}

/// A read-only view of a packet header in a buffer of at least
/// [`HEADER_LEN`] bytes, giving the raw, unchecked field values.
///
/// A stream reader reads the first 32 bytes of a frame into scratch space,
/// wraps them in a `Header` and asks [`frame_len`](Self::frame_len) how much
/// more to read; [`HeaderRepr::parse`] checks and decodes the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps `buffer`, which must hold at least [`HEADER_LEN`] bytes (any
    /// beyond are ignored).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let have = buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(WireError::Truncated {
                needed: HEADER_LEN,
                have,
            });
        }
        Ok(Self { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn fields(&self) -> Fields<'_, HEADER_LEN> {
        // `new_checked` made sure the header is there; the fallback (an
        // all-zero header, type 0, which no decoder accepts) only serves an
        // `AsRef` that changes its length between calls.
        Fields(
            self.buffer
                .as_ref()
                .first_chunk()
                .unwrap_or(&[0; HEADER_LEN]),
        )
    }

    /// The raw type byte.
    pub fn type_raw(&self) -> u8 {
        self.fields().u8::<TYPE>()
    }

    /// The raw flags byte.
    pub fn flags_raw(&self) -> u8 {
        self.fields().u8::<FLAGS>()
    }

    /// The reserved 16 bits.
    pub fn reserved(&self) -> u16 {
        self.fields().u16::<RESERVED>()
    }

    /// Credits granted to the receiver.
    pub fn credits(&self) -> u32 {
        self.fields().u32::<CREDITS>()
    }

    /// Sequence number.
    pub fn seq(&self) -> u64 {
        self.fields().u64::<SEQ>()
    }

    /// Cumulative acknowledgement.
    pub fn ack(&self) -> u64 {
        self.fields().u64::<ACK>()
    }

    /// The announced body length, unchecked.
    pub fn body_len(&self) -> u64 {
        self.fields().u64::<BODY_LEN>()
    }

    /// Checks the header against `limits` and returns the length of the
    /// whole frame: header, body and, with [`Flags::CHECKSUM`], the trailer.
    pub fn frame_len(&self, limits: &Limits) -> Result<usize, WireError> {
        HeaderRepr::parse(self, limits)?.frame_len()
    }
}

/// A decoded, checked packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct HeaderRepr {
    /// What the body is.
    pub packet_type: PacketType,
    /// Per-packet options.
    pub flags: Flags,
    /// Running total (mod 2^32) of the eager-fragment credits the sender has
    /// granted the receiver beyond the HELLO's initial ones; a total, so a
    /// lost or repeated packet loses or repeats no grant.
    pub credits: u32,
    /// Sequence number of a reliable packet; 0 for HELLO, HELLO_ACK and ACK.
    pub seq: u64,
    /// Cumulative acknowledgement: every reliable packet with a lower
    /// sequence number has been received (0: none yet).
    pub ack: u64,
    /// Bytes of body after the header, trailer excluded.
    pub body_len: u64,
}

impl HeaderRepr {
    /// A header for `packet`, with its type and body length, no flags, no
    /// credits and zero `seq` and `ack`; set those with struct update
    /// syntax: `HeaderRepr { seq, ack, ..HeaderRepr::new(&packet) }`.
    pub fn new(packet: &PacketRepr<'_>) -> Self {
        Self {
            packet_type: packet.packet_type(),
            flags: Flags::empty(),
            credits: 0,
            seq: 0,
            ack: 0,
            body_len: packet.body_len(),
        }
    }

    /// Decodes and checks a header: known type and flags, zero reserved
    /// bits, zero `seq` on an unreliable packet, a body length that suits
    /// the type and is within `limits`.
    pub fn parse<T: AsRef<[u8]>>(header: &Header<T>, limits: &Limits) -> Result<Self, WireError> {
        let packet_type = PacketType::try_from(header.type_raw())?;
        let flags_raw = header.flags_raw();
        let flags = Flags::from_bits(flags_raw).ok_or(WireError::UnknownFlags(flags_raw))?;
        check_reserved(&header.reserved().to_be_bytes(), "header.reserved")?;
        let seq = header.seq();
        if !packet_type.is_reliable() {
            check_reserved(&seq.to_be_bytes(), "header.seq of an unsequenced packet")?;
        }
        let body_len = header.body_len();
        if body_len > limits.max_body() {
            return Err(WireError::BodyTooLong {
                len: body_len,
                max: limits.max_body(),
            });
        }
        packet_type.check_body_len(body_len)?;
        Ok(Self {
            packet_type,
            flags,
            credits: header.credits(),
            seq,
            ack: header.ack(),
            body_len,
        })
    }

    /// Bytes [`emit`](Self::emit) writes: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes after the body: [`CHECKSUM_LEN`] with [`Flags::CHECKSUM`],
    /// and [`SEAL_LEN`] more with [`Flags::SEALED`].
    pub fn trailer_len(&self) -> usize {
        let mut len = 0;
        if self.flags.contains(Flags::CHECKSUM) {
            len += CHECKSUM_LEN;
        }
        if self.flags.contains(Flags::SEALED) {
            len += SEAL_LEN;
        }
        len
    }

    /// Length of the whole frame: header, body and trailer. Fails with
    /// [`WireError::BodyTooLong`] if that does not fit in `usize`, which a
    /// header from [`parse`](Self::parse) never does.
    pub fn frame_len(&self) -> Result<usize, WireError> {
        usize::try_from(self.body_len)
            .ok()
            .and_then(|body| body.checked_add(HEADER_LEN + self.trailer_len()))
            .ok_or(WireError::BodyTooLong {
                len: self.body_len,
                max: super::MAX_MAX_BODY,
            })
    }

    /// Writes the header.
    pub fn emit(&self, buf: &mut [u8; HEADER_LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u8::<TYPE>(self.packet_type.into());
        f.set_u8::<FLAGS>(self.flags.bits());
        f.set_u16::<RESERVED>(0);
        f.set_u32::<CREDITS>(self.credits);
        f.set_u64::<SEQ>(self.seq);
        f.set_u64::<ACK>(self.ack);
        f.set_u64::<BODY_LEN>(self.body_len);
    }
}
