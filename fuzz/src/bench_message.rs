//! The layout of `bench_message`'s inputs: the receiver's bound on a
//! message (a big-endian `u32`), then pieces, each a tag byte, a big-endian
//! `u16` length and that many bytes (a short last one is cut off).

use btl_core::btl::Tag;

/// Pieces as they arrive: each with its tag.
pub type Pieces<'a> = Vec<(Tag, &'a [u8])>;

/// The bound and the pieces of `data`, or `None` when it is too short to
/// say the bound.
pub fn pieces(data: &[u8]) -> Option<(u64, Pieces<'_>)> {
    let (max, mut rest) = data.split_first_chunk::<4>()?;
    let mut out = Vec::new();
    while let Some((&tag, tail)) = rest.split_first()
        && let Some((len, tail)) = tail.split_first_chunk::<2>()
    {
        let n = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (piece, after) = tail.split_at(n);
        out.push((Tag(tag), piece));
        rest = after;
    }
    Some((u64::from(u32::from_be_bytes(*max)), out))
}

/// An input of `max` and `pieces`.
pub fn input(max: u32, pieces: &[(Tag, Vec<u8>)]) -> Vec<u8> {
    let mut out = max.to_be_bytes().to_vec();
    for (tag, piece) in pieces {
        out.push(tag.0);
        out.extend((piece.len() as u16).to_be_bytes());
        out.extend(piece);
    }
    out
}
