//! The layout of `engine_input`'s inputs: one byte of settings, then the
//! bytes a hostile peer sends on one accepted link.
//!
//! - Settings bit 0: stream (0) or datagram (1) framing; bits 1..7: over a
//!   stream, the bytes of each read less one (1 to 128); over datagrams
//!   unused.
//! - Over a stream, the rest is the stream, cut into reads of that size.
//! - Over datagrams, the rest is a list of datagrams, each a big-endian
//!   `u16` length and that many bytes (a short last one is cut off), so
//!   that a whole HELLO (96 bytes) and larger frames fit one datagram.
//!
//! Between two reads or datagrams the engine's clock moves 1 ms, so that
//! handshake, acknowledgement and keepalive timers fire.

/// How the engine's link carries the peer's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// One stream, read `read` bytes at a time.
    Stream {
        /// Bytes per read, 1 to 128.
        read: usize,
    },
    /// Datagrams, one frame each.
    Datagram,
}

/// The settings byte for `carried`.
pub fn settings(carried: Carried) -> u8 {
    match carried {
        Carried::Stream { read } => (read.clamp(1, 128) as u8 - 1) << 1,
        Carried::Datagram => 1,
    }
}

/// The settings an input's first byte says.
pub fn carried(settings: u8) -> Carried {
    if settings & 1 == 1 {
        Carried::Datagram
    } else {
        Carried::Stream {
            read: usize::from(settings >> 1) + 1,
        }
    }
}

/// The pieces `rest` is cut into as `carried` says: reads or datagrams.
pub fn pieces(carried: Carried, rest: &[u8]) -> Vec<&[u8]> {
    match carried {
        Carried::Stream { read } => rest.chunks(read).collect(),
        Carried::Datagram => {
            let mut out = Vec::new();
            let mut rest = rest;
            while let Some((len, tail)) = rest.split_first_chunk::<2>() {
                let n = usize::from(u16::from_be_bytes(*len)).min(tail.len());
                let (datagram, after) = tail.split_at(n);
                out.push(datagram);
                rest = after;
            }
            out
        }
    }
}

/// An input that carries `frames` as `carried` says: the settings byte,
/// then the stream, or each frame as one length-prefixed datagram.
pub fn input(carried: Carried, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![settings(carried)];
    for frame in frames {
        if carried == Carried::Datagram {
            out.extend((frame.len() as u16).to_be_bytes());
        }
        out.extend(frame);
    }
    out
}
