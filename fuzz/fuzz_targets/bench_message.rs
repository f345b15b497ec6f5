//! Feeds arbitrary pieces to the benchmark's reassembly, as a peer of `btl
//! serve` would send them: `btl_fuzz::bench_message` says how the input is
//! cut. Nothing may panic, and every answer must be what the protocol
//! says, checked against a model kept here: a message is whole exactly
//! when its pieces brought the length it claimed, never more than the
//! receiver's bound; a fetch notice, between messages and of a notice's
//! length, names what to get; a piece of another message, a notice
//! inside one, a short or bad header, or an overrun is refused.
#![no_main]

use btl_cli::bench::{Arrived, Assembly, Fetch, HEADER, Header, MessageError, NOTICE, Whole};
use btl_core::btl::{RemoteKey, Tag};
use btl_fuzz::bench_message::pieces;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((max, pieces)) = pieces(data) else {
        return;
    };
    let mut assembly = Assembly::new(max);
    // The model: the current message's tag, claimed length and bytes so far.
    let mut current: Option<(Tag, u64, u64)> = None;
    for (tag, piece) in pieces {
        let got = assembly.piece(tag, piece);
        let expected = match Header::parse(piece) {
            Err(e) => Err(e),
            Ok(h) if h.total > max => Err(MessageError::TooLarge {
                total: h.total,
                max,
            }),
            Ok(h) if h.fetch => {
                if current.is_some() {
                    Err(MessageError::Interleaved)
                } else if piece.len() != HEADER + NOTICE {
                    Err(MessageError::Notice { len: piece.len() })
                } else {
                    let word = |at: usize| {
                        let bytes: [u8; 8] = piece[at..at + 8].try_into().expect("8 bytes");
                        bytes
                    };
                    Ok(Some(Arrived::Fetch(Fetch {
                        tag,
                        len: h.total,
                        window: h.window,
                        from: RemoteKey(u64::from_le_bytes(word(HEADER)))
                            .slice(u64::from_be_bytes(word(HEADER + 8)), h.total),
                    })))
                }
            }
            Ok(h) => {
                let (t, total, have) = current.unwrap_or((tag, h.total, 0));
                if (t, total) != (tag, h.total) {
                    Err(MessageError::Interleaved)
                } else {
                    let have = have + (piece.len() - HEADER) as u64;
                    if have > total {
                        Err(MessageError::Overrun { have, total })
                    } else if have == total {
                        current = None;
                        Ok(Some(Arrived::Whole(Whole {
                            tag,
                            len: have,
                            window: h.window,
                        })))
                    } else {
                        current = Some((tag, total, have));
                        Ok(None)
                    }
                }
            }
        };
        assert_eq!(got, expected, "piece of {} bytes, tag {tag:?}", piece.len());
        if got.is_err() {
            // A server drops such a peer: nothing more of it is read.
            return;
        }
    }
});
