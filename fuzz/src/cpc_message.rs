//! The layout of `cpc_message`'s inputs: records, each a control byte and
//! a length byte, then that many bytes (a short last one is cut off) that
//! one of the fake peers sends on the side channel. The control byte's low
//! two bits choose the sender (one of [`PEERS`]); its top bit moves the
//! clock a tick forward first.

use btl_core::endpoint::ProcName;

/// The fake peers that send, by index.
pub const PEERS: [ProcName; 4] = [
    ProcName::new(9, 1),
    ProcName::new(9, 2),
    ProcName::new(9, 3),
    ProcName::new(8, 1),
];

/// The process under test.
pub const ME: ProcName = ProcName::new(9, 0);

/// One message of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Index into [`PEERS`].
    pub from: usize,
    /// Whether the clock moves a tick before it.
    pub tick: bool,
    /// What is sent.
    pub bytes: &'a [u8],
}

/// The records of `data`.
pub fn records(mut data: &[u8]) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    while let Some((&control, tail)) = data.split_first()
        && let Some((&len, tail)) = tail.split_first()
    {
        let n = usize::from(len).min(tail.len());
        let (bytes, rest) = tail.split_at(n);
        out.push(Record {
            from: usize::from(control & 3),
            tick: control & 0x80 != 0,
            bytes,
        });
        data = rest;
    }
    out
}

/// An input of `records`.
pub fn input(records: &[(usize, bool, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (from, tick, bytes) in records {
        out.push((*from as u8 & 3) | if *tick { 0x80 } else { 0 });
        out.push(bytes.len().min(255) as u8);
        out.extend(&bytes[..bytes.len().min(255)]);
    }
    out
}
