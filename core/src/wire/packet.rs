//! Whole packets: any body with its header, decoded from and encoded to a
//! contiguous frame or, for vectored I/O, a prefix and a payload.

use super::checksum::{Crc32c, check_trailer};
use super::{
    AckRepr, CHECKSUM_LEN, CloseReason, CloseRepr, ControlRepr, CookieRepr, Flags, HEADER_LEN,
    Header, HeaderRepr, HelloAckRepr, HelloRepr, Limits, PacketType, PutRepr, SendRepr, WireError,
};

/// A decoded packet body of any type, borrowing its payload from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum PacketRepr<'a> {
    /// HELLO.
    Hello(HelloRepr),
    /// HELLO_ACK.
    HelloAck(HelloAckRepr),
    /// SEND: fixed fields and the message payload.
    Send {
        /// The fixed fields.
        send: SendRepr,
        /// The message.
        payload: &'a [u8],
    },
    /// PUT: fixed fields and the data for the target registration.
    Put {
        /// The fixed fields.
        put: PutRepr,
        /// The data.
        data: &'a [u8],
    },
    /// ACK.
    Ack(AckRepr),
    /// CLOSE.
    Close(CloseRepr),
    /// COOKIE.
    Cookie(CookieRepr),
    /// GET, REJECT, DONE, NOTIFY, KEY or KEY_INFO: a reliable packet
    /// without payload.
    Control(ControlRepr),
}

impl<'a> PacketRepr<'a> {
    /// The type the header must carry.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Self::Hello(_) => PacketType::Hello,
            Self::HelloAck(_) => PacketType::HelloAck,
            Self::Send { .. } => PacketType::Send,
            Self::Put { .. } => PacketType::Put,
            Self::Ack(_) => PacketType::Ack,
            Self::Close(_) => PacketType::Close,
            Self::Cookie(_) => PacketType::Cookie,
            Self::Control(c) => c.packet_type(),
        }
    }

    /// The SEND payload or PUT data; empty for the other types.
    pub fn payload(&self) -> &'a [u8] {
        match self {
            Self::Send { payload, .. } => payload,
            Self::Put { data, .. } => data,
            _ => &[],
        }
    }

    /// Bytes of the body's fixed fields, which [`emit_fixed`](Self::emit_fixed)
    /// writes.
    pub fn fixed_len(&self) -> usize {
        self.packet_type().fixed_body_len()
    }

    /// Bytes of the whole body, which [`emit_body`](Self::emit_body) writes:
    /// fixed fields and payload.
    pub fn buffer_len(&self) -> usize {
        self.fixed_len().saturating_add(self.payload().len())
    }

    /// The body length the header must carry.
    pub fn body_len(&self) -> u64 {
        self.buffer_len() as u64
    }

    /// Decodes a body of `packet_type`, exactly `body.len()` bytes long.
    pub fn parse(packet_type: PacketType, body: &'a [u8]) -> Result<Self, WireError> {
        let bad_length = WireError::BadLength {
            packet_type,
            len: body.len() as u64,
        };
        Ok(match packet_type {
            PacketType::Hello => Self::Hello(HelloRepr::parse(exact(body, bad_length)?)?),
            PacketType::HelloAck => Self::HelloAck(HelloAckRepr::parse(exact(body, bad_length)?)),
            PacketType::Send => {
                let (fixed, payload) = body.split_first_chunk().ok_or(bad_length)?;
                Self::Send {
                    send: SendRepr::parse(fixed)?,
                    payload,
                }
            }
            PacketType::Put => {
                let (fixed, data) = body.split_first_chunk().ok_or(bad_length)?;
                Self::Put {
                    put: PutRepr::parse(fixed, data.len() as u64)?,
                    data,
                }
            }
            PacketType::Ack => Self::Ack(AckRepr::parse(exact(body, bad_length)?)),
            PacketType::Close => Self::Close(CloseRepr::parse(exact(body, bad_length)?)?),
            PacketType::Cookie => Self::Cookie(CookieRepr::parse(exact(body, bad_length)?)),
            PacketType::Get
            | PacketType::Reject
            | PacketType::Done
            | PacketType::Notify
            | PacketType::Key
            | PacketType::KeyInfo => Self::Control(
                ControlRepr::parse(packet_type, body)?
                    .ok_or(WireError::UnknownType(packet_type as u8))?,
            ),
        })
    }

    /// Writes the body's fixed fields (everything but the payload) at the
    /// start of `buf` and returns their length.
    pub fn emit_fixed(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        match self {
            Self::Hello(r) => r.emit(chunk(buf)?),
            Self::HelloAck(r) => r.emit(chunk(buf)?),
            Self::Send { send, .. } => send.emit(chunk(buf)?),
            Self::Put { put, .. } => put.emit(chunk(buf)?),
            Self::Ack(r) => r.emit(chunk(buf)?),
            Self::Close(r) => r.emit(chunk(buf)?),
            Self::Cookie(r) => r.emit(chunk(buf)?),
            Self::Control(c) => return c.emit(buf),
        }
        Ok(self.fixed_len())
    }

    /// Writes the whole body (fixed fields, then payload) at the start of
    /// `buf` and returns its length.
    pub fn emit_body(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        let have = buf.len();
        let body = buf
            .get_mut(..len)
            .ok_or(WireError::BufferTooSmall { needed: len, have })?;
        let fixed = self.emit_fixed(body)?;
        if let Some(rest) = body.get_mut(fixed..) {
            rest.copy_from_slice(self.payload());
        }
        Ok(len)
    }
}

/// Decodes the packet at the start of `buf`: header, body and, if the
/// header says so, the CRC32C trailer, which is checked before the body is
/// looked at. Returns the header, the body and the length of the frame, so
/// that a stream reader can go on with the next packet; bytes after the
/// frame are not looked at. A seal ([`Flags::SEALED`]) is counted in the
/// frame but not checked: that takes the peer's key ([`Seal::check`](super::Seal::check)).
///
/// Fails with [`WireError::Truncated`] when `buf` ends before the frame
/// does (on a stream: read at least `needed` bytes and call again), and
/// with another [`WireError`] when the packet is invalid.
pub fn parse<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<(HeaderRepr, PacketRepr<'a>, usize), WireError> {
    let header = HeaderRepr::parse(&Header::new_checked(buf)?, limits)?;
    let frame_len = header.frame_len()?;
    let truncated = WireError::Truncated {
        needed: frame_len,
        have: buf.len(),
    };
    let frame = buf.get(..frame_len).ok_or(truncated)?;
    let (covered, trailers) = frame
        .split_at_checked(frame_len.saturating_sub(header.trailer_len()))
        .ok_or(truncated)?;
    if header.flags.contains(Flags::CHECKSUM) {
        let trailer = trailers.first_chunk().copied().ok_or(truncated)?;
        check_trailer(covered, trailer)?;
    }
    let body = covered.get(HEADER_LEN..).ok_or(truncated)?;
    let packet = PacketRepr::parse(header.packet_type, body)?;
    Ok((header, packet, frame_len))
}

/// Decodes a datagram, which must hold exactly one frame: as [`parse`],
/// and bytes after the frame are [`WireError::TrailingBytes`].
pub fn parse_datagram<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<(HeaderRepr, PacketRepr<'a>), WireError> {
    let (header, packet, frame) = parse(buf, limits)?;
    if frame != buf.len() {
        return Err(WireError::TrailingBytes {
            frame,
            have: buf.len(),
        });
    }
    Ok((header, packet))
}

/// Writes the packet's prefix, header and the body's fixed fields, at the
/// start of `buf` and returns its length (at most [`MAX_PREFIX_LEN`](super::MAX_PREFIX_LEN)).
/// The payload and, with [`Flags::CHECKSUM`](super::Flags::CHECKSUM), the
/// trailer (a [`Crc32c`] of prefix and payload) are the caller's to send
/// after it, with vectored I/O and no copy.
///
/// `header` must have the packet's type and body length, as
/// [`HeaderRepr::new`] gives; else [`WireError::HeaderMismatch`].
pub fn emit_prefix(
    header: &HeaderRepr,
    packet: &PacketRepr<'_>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    check_header(header, packet)?;
    let len = HEADER_LEN + packet.fixed_len();
    let have = buf.len();
    let prefix = buf
        .get_mut(..len)
        .ok_or(WireError::BufferTooSmall { needed: len, have })?;
    let (head, fixed) = prefix
        .split_first_chunk_mut()
        .ok_or(WireError::BufferTooSmall { needed: len, have })?;
    header.emit(head);
    packet.emit_fixed(fixed)?;
    Ok(len)
}

/// Writes the whole frame (header, body, and the trailer if the header has
/// [`Flags::CHECKSUM`](super::Flags::CHECKSUM)) at the start of `buf` and
/// returns its length: for datagrams, and for payloads small enough that a
/// copy costs less than a second I/O vector. With
/// [`Flags::SEALED`](super::Flags::SEALED) the frame's last
/// [`SEAL_LEN`](super::SEAL_LEN) bytes are left zero, for
/// [`Seal::seal_frame`](super::Seal::seal_frame).
///
/// `header` must have the packet's type and body length, as
/// [`HeaderRepr::new`] gives; else [`WireError::HeaderMismatch`].
pub fn emit(
    header: &HeaderRepr,
    packet: &PacketRepr<'_>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    check_header(header, packet)?;
    let frame_len = header.frame_len()?;
    let have = buf.len();
    let frame = buf.get_mut(..frame_len).ok_or(WireError::BufferTooSmall {
        needed: frame_len,
        have,
    })?;
    let prefix_len = emit_prefix(header, packet, frame)?;
    let covered_len = prefix_len + packet.payload().len();
    let (covered, trailers) = frame
        .split_at_mut_checked(covered_len)
        .ok_or(WireError::HeaderMismatch)?;
    if let Some(payload) = covered.get_mut(prefix_len..) {
        payload.copy_from_slice(packet.payload());
    }
    trailers.fill(0);
    if header.flags.contains(Flags::CHECKSUM) {
        let trailer = trailers
            .first_chunk_mut::<CHECKSUM_LEN>()
            .ok_or(WireError::HeaderMismatch)?;
        let mut crc = Crc32c::new();
        crc.update(covered);
        *trailer = crc.trailer();
    }
    Ok(frame_len)
}

/// Bytes of a CLOSE frame without a trailer.
pub const CLOSE_FRAME_LEN: usize = HEADER_LEN + CloseRepr::LEN;

/// A whole CLOSE frame saying `reason`, without a trailer: what a driver
/// writes on a connection the engine has no link for (every link slot is
/// taken) before it drops it, so that the peer fails at once and knows why.
pub fn close_frame(reason: CloseReason) -> [u8; CLOSE_FRAME_LEN] {
    let packet = PacketRepr::Close(CloseRepr { reason });
    let mut frame = [0u8; CLOSE_FRAME_LEN];
    // A CLOSE without a trailer is exactly CLOSE_FRAME_LEN bytes, so the
    // encoder has room and nothing to refuse.
    let _ = emit(&HeaderRepr::new(&packet), &packet, &mut frame);
    frame
}

/// Fails with [`WireError::HeaderMismatch`] unless `header` has the type and
/// body length of `packet`.
fn check_header(header: &HeaderRepr, packet: &PacketRepr<'_>) -> Result<(), WireError> {
    if header.packet_type == packet.packet_type() && header.body_len == packet.body_len() {
        Ok(())
    } else {
        Err(WireError::HeaderMismatch)
    }
}

/// `body` as an array, if it is exactly `N` bytes long.
pub(super) fn exact<const N: usize>(
    body: &[u8],
    bad_length: WireError,
) -> Result<&[u8; N], WireError> {
    body.try_into().map_err(|_| bad_length)
}

/// The first `N` bytes of `buf` as an array.
pub(super) fn chunk<const N: usize>(buf: &mut [u8]) -> Result<&mut [u8; N], WireError> {
    let have = buf.len();
    buf.first_chunk_mut()
        .ok_or(WireError::BufferTooSmall { needed: N, have })
}
