//! The three pcapng blocks a capture is made of, encoded by hand after the
//! specification (draft-ietf-opsawg-pcapng), little-endian.
//!
//! ```text
//! every block    u32 type, u32 total length, body, u32 total length again
//! SHB (0x0a0d0d0a)  u32 byte-order magic 0x1a2b3c4d, u16 major 1, u16 minor 0,
//!                   i64 section length -1 (unknown), options
//! IDB (1)           u16 link type 252, u16 reserved, u32 snap length, options
//!                   if_name (2), if_description (3), if_tsresol (9) = 9
//! EPB (6)           u32 interface id, u32 time high, u32 time low,
//!                   u32 captured length, u32 original length,
//!                   data padded to 4, options epb_flags (2)
//! option            u16 code, u16 length, value padded to 4; code 0 ends
//! ```
//!
//! Every packet's data starts with an exported-PDU header naming the
//! dissector `btl` (link type `LINKTYPE_WIRESHARK_UPPER_PDU`), so that
//! Wireshark hands the frame after it to the btl dissector whatever the
//! transport was.

use std::io::{self, Write};

use super::Direction;

/// `LINKTYPE_WIRESHARK_UPPER_PDU`: each packet starts with exported-PDU
/// tags that say which dissector reads the rest.
const LINKTYPE_WIRESHARK_UPPER_PDU: u16 = 252;

const SHB: u32 = 0x0a0d_0d0a;
const IDB: u32 = 1;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

const OPT_END: u16 = 0;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;

/// `if_tsresol` 9: timestamps count nanoseconds.
const NANOSECONDS: u8 = 9;

/// The exported-PDU header before every frame: tag 12
/// (`EXP_PDU_TAG_DISSECTOR_NAME`), length 4, `"btl\0"`, then the end tag
/// (0, length 0); big-endian, whatever the file's byte order.
pub(super) const EXPORTED_PDU_HEADER: [u8; 12] = [0, 12, 0, 4, b'b', b't', b'l', 0, 0, 0, 0, 0];

/// Bytes of an EPB's fixed fields, its length repeated at the end, and its
/// options (`epb_flags` and the end of options), for a packet of
/// `captured` bytes.
pub(super) fn epb_len(captured: usize) -> u64 {
    const FIXED: u64 = 8 + 20 + 8 + 4 + 4;
    FIXED + padded(captured) as u64
}

/// Writes a section header block and returns its length.
pub(super) fn write_shb(out: &mut impl Write) -> io::Result<u64> {
    let mut body = Vec::with_capacity(32);
    body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    option(&mut body, SHB_USERAPPL, b"btl-std");
    option(&mut body, OPT_END, &[]);
    write_block(out, SHB, &body)
}

/// Writes an interface description block for a link whose packets keep at
/// most `snaplen` bytes of data (exported-PDU header included), and
/// returns its length.
pub(super) fn write_idb(
    out: &mut impl Write,
    name: &str,
    description: &str,
    snaplen: u32,
) -> io::Result<u64> {
    let mut body = Vec::with_capacity(32 + name.len() + description.len());
    body.extend_from_slice(&LINKTYPE_WIRESHARK_UPPER_PDU.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&snaplen.to_le_bytes());
    if !name.is_empty() {
        option(&mut body, IF_NAME, name.as_bytes());
    }
    if !description.is_empty() {
        option(&mut body, IF_DESCRIPTION, description.as_bytes());
    }
    option(&mut body, IF_TSRESOL, &[NANOSECONDS]);
    option(&mut body, OPT_END, &[]);
    write_block(out, IDB, &body)
}

/// What an enhanced packet block says besides its data.
pub(super) struct PacketInfo {
    /// The interface, numbered in the order of the section's IDBs.
    pub interface: u32,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// Bytes of the packet on the wire, exported-PDU header included.
    pub original_len: u32,
    /// Which way it went.
    pub direction: Direction,
}

/// Writes an enhanced packet block whose data is the exported-PDU header
/// and then the first `kept` bytes of `pieces` (a frame's pieces in
/// order, or its first bytes), and returns its length.
pub(super) fn write_epb(
    out: &mut impl Write,
    info: &PacketInfo,
    pieces: &[&[u8]],
    kept: usize,
) -> io::Result<u64> {
    let too_long = || io::Error::new(io::ErrorKind::InvalidInput, "packet too long for pcapng");
    if pieces.iter().map(|piece| piece.len()).sum::<usize>() < kept {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "fewer bytes at hand than the packet keeps",
        ));
    }
    let data_len = EXPORTED_PDU_HEADER.len() + kept;
    let captured_len = u32::try_from(data_len).map_err(|_| too_long())?;
    let total = epb_len(data_len);
    let total32 = u32::try_from(total).map_err(|_| too_long())?;
    let mut head = [0u8; 28];
    let fields = [
        EPB,
        total32,
        info.interface,
        (info.time_ns >> 32) as u32,
        info.time_ns as u32,
        captured_len,
        info.original_len,
    ];
    for (slot, value) in head.chunks_exact_mut(4).zip(fields) {
        slot.copy_from_slice(&value.to_le_bytes());
    }
    out.write_all(&head)?;
    out.write_all(&EXPORTED_PDU_HEADER)?;
    let mut room = kept;
    for piece in pieces {
        let take = piece.len().min(room);
        out.write_all(&piece[..take])?;
        room -= take;
    }
    out.write_all(&[0; 3][..padded(data_len) - data_len])?;
    let flags: u32 = match info.direction {
        Direction::In => 0b01,
        Direction::Out => 0b10,
    };
    // epb_flags (code 2, length 4, the flags), the end of options, and
    // the block's length again.
    let mut tail = [0u8; 16];
    tail[..2].copy_from_slice(&EPB_FLAGS.to_le_bytes());
    tail[2..4].copy_from_slice(&4u16.to_le_bytes());
    tail[4..8].copy_from_slice(&flags.to_le_bytes());
    tail[12..].copy_from_slice(&total32.to_le_bytes());
    out.write_all(&tail)?;
    Ok(total)
}

/// Appends an option: code, length, value padded to 4 bytes. A value
/// longer than an option holds (64 KiB) is cut.
fn option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    body.resize(body.len() + padded(value.len()) - value.len(), 0);
}

/// Writes a block of `body` (already padded) between its type and lengths.
fn write_block(out: &mut impl Write, block_type: u32, body: &[u8]) -> io::Result<u64> {
    let total = 12 + body.len() as u32;
    out.write_all(&block_type.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())?;
    Ok(u64::from(total))
}

/// `len` rounded up to a multiple of 4, as pcapng aligns data and options.
fn padded(len: usize) -> usize {
    len.div_ceil(4) * 4
}
