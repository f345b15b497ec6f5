//! The bytes of packets on the wire: control packets emitted in place, and
//! the slices a queued item or a retained packet is written as.

use heapless::Vec;

use super::link::TxItem;
use super::peer::Peer;
use super::reliable::Outgoing;
use super::{CONTROL_MAX, MAX_SEGMENTS};
use crate::pool::PoolsRef;
use crate::wire::{CHECKSUM_LEN, Flags, HEADER_LEN, HeaderRepr, PacketType};

/// The bytes of a retained packet as the writer sends them, after dropping
/// the first `skip` bytes (already written).
fn frame_segments<'a, const REGS: usize>(
    out: &'a Outgoing,
    checksum: bool,
    pools: PoolsRef<'a>,
    regs: &'a super::Regs<'_, REGS>,
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    skip: &mut usize,
) {
    let (first, second, trailer): (&[u8], &[u8], &[u8]) = match out {
        Outgoing::Send { desc, trailer } => (
            desc.fragment_bytes(pools).unwrap_or(&[]),
            desc.referenced()
                .and_then(|r| regs.slice(r).ok())
                .unwrap_or(&[]),
            trailer,
        ),
        Outgoing::Put {
            prefix,
            data,
            trailer,
            ..
        } => (prefix, regs.slice(*data).unwrap_or(&[]), trailer),
        Outgoing::Control { bytes, len } => (&bytes[..usize::from(*len)], &[], &[]),
    };
    push_skipping(segments, first, skip);
    push_skipping(segments, second, skip);
    if checksum && !matches!(out, Outgoing::Control { .. }) {
        push_skipping(segments, trailer, skip);
    }
}

/// The bytes of one queued item as the writer sends them, after dropping
/// the first `skip`; nothing for a retained packet acknowledged since.
/// `detached` is the link's detached packet.
pub(super) fn item_segments<'a, const REGS: usize>(
    item: &'a TxItem,
    peer: Option<&'a Peer>,
    detached: Option<&'a Outgoing>,
    pools: PoolsRef<'a>,
    regs: &'a super::Regs<'_, REGS>,
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    skip: &mut usize,
) {
    match item {
        TxItem::Control { bytes, len } => {
            push_skipping(segments, &bytes[..usize::from(*len)], skip);
        }
        TxItem::Reliable { seq } => {
            if let Some(peer) = peer
                && let Some(out) = peer.send.get(*seq)
            {
                frame_segments(out, peer.checksum, pools, regs, segments, skip);
            }
        }
        TxItem::Detached => {
            if let Some(out) = detached {
                let checksum = peer.is_some_and(|p| p.checksum);
                frame_segments(out, checksum, pools, regs, segments, skip);
            }
        }
    }
}

/// Bytes a retained packet takes on the wire.
pub(super) fn frame_len<const REGS: usize>(
    out: &Outgoing,
    checksum: bool,
    pools: PoolsRef<'_>,
    regs: &super::Regs<'_, REGS>,
) -> usize {
    let mut segments: Vec<&[u8], MAX_SEGMENTS> = Vec::new();
    let mut skip = 0;
    frame_segments(out, checksum, pools, regs, &mut segments, &mut skip);
    segments.iter().map(|s| s.len()).sum()
}

/// Pushes `bytes` after dropping the first `skip` of the stream.
fn push_skipping<'a>(
    segments: &mut Vec<&'a [u8], MAX_SEGMENTS>,
    bytes: &'a [u8],
    skip: &mut usize,
) {
    if *skip >= bytes.len() {
        *skip -= bytes.len();
        return;
    }
    if !bytes[*skip..].is_empty() {
        let _ = segments.push(&bytes[*skip..]);
    }
    *skip = 0;
}

pub(super) fn emit_control(
    bytes: &mut [u8; CONTROL_MAX],
    packet_type: PacketType,
    credits: u32,
    seq: u64,
    ack: u64,
    flags: Flags,
    body: impl FnOnce(&mut [u8]),
) -> u8 {
    let fixed = packet_type.fixed_body_len();
    let checksum = flags.contains(Flags::CHECKSUM);
    let header = HeaderRepr {
        packet_type,
        flags,
        credits,
        seq,
        ack,
        body_len: fixed as u64,
    };
    let (head, rest) = bytes.split_at_mut(HEADER_LEN);
    header.emit(chunk_mut(head));
    body(&mut rest[..fixed]);
    let mut n = HEADER_LEN + fixed;
    if checksum {
        let t = crate::wire::crc32c(&bytes[..n]).to_be_bytes();
        bytes[n..n + CHECKSUM_LEN].copy_from_slice(&t);
        n += CHECKSUM_LEN;
    }
    n as u8
}

pub(super) fn chunk<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    chunk_mut(b)
}

pub(super) fn chunk_mut<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    b.first_chunk_mut()
        .expect("callers size the buffer for the packet")
}
