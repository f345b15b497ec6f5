//! Golden byte vectors: one fixed packet of each type and its exact bytes,
//! checked against the hex blocks of the book's protocol chapter so that
//! the specification and the code cannot drift apart.

use std::string::String;
use std::vec::Vec;

use super::*;

/// The protocol chapter, whose `<!-- golden: NAME -->` blocks hold the
/// vectors.
const BOOK: &str = include_str!("../../../book/src/protocol.md");

/// The job key of the HELLO_ACK vector.
pub(super) const GOLDEN_KEY: &[u8] = b"golden job key";

/// The HELLO of process (42, 3), which the `hello` vector carries.
pub(super) const HELLO_A: HelloRepr = HelloRepr {
    version_minor: 0,
    link_index: 1,
    job: 42,
    rank: 3,
    capabilities: Capabilities::CRC32C.union(Capabilities::JOB_KEY),
    nonce: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    max_body: 65536,
    initial_credits: 16,
    epoch: 0x0102_0304_0506_0708,
};

/// The HELLO of process (42, 5), which (42, 3) answers in the `hello_ack`
/// vector.
pub(super) const HELLO_B: HelloRepr = HelloRepr {
    rank: 5,
    nonce: [
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
        0x1f,
    ],
    ..HELLO_A
};

/// Every vector: its name in the book, header and packet.
pub(super) fn vectors() -> Vec<(&'static str, HeaderRepr, PacketRepr<'static>)> {
    let hello_ack = PacketRepr::HelloAck(HelloAckRepr {
        proof: hello_proof(GOLDEN_KEY, &HELLO_A, &HELLO_B),
    });
    let send = PacketRepr::Send {
        send: SendRepr { tag: 9 },
        payload: b"hello",
    };
    let put = PacketRepr::Put {
        put: PutRepr {
            xfer_id: 0x1001,
            handle: 0xabcd,
            offset: 4096,
            total_len: 10000,
            index: 1,
            count: 3,
        },
        data: &[0xde, 0xad, 0xbe, 0xef],
    };
    let get = PacketRepr::Control(ControlRepr::Get(GetRepr {
        xfer_id: 0x1002,
        src_handle: 0xabcd,
        src_offset: 0,
        len: 10000,
        target_job: 42,
        target_rank: 6,
        dst_handle: 0x5678,
        dst_offset: 512,
    }));
    let ack = PacketRepr::Ack(AckRepr { sack: 0b101 });
    let close = PacketRepr::Close(CloseRepr {
        reason: CloseReason::AuthFailed,
    });
    let reject = PacketRepr::Control(ControlRepr::Reject(RejectRepr {
        xfer_id: 0x1002,
        code: RejectCode::OutOfBounds,
    }));
    let done = PacketRepr::Control(ControlRepr::Done(DoneRepr { xfer_id: 0x1003 }));
    let notify = PacketRepr::Control(ControlRepr::Notify(NotifyRepr {
        xfer_id: 0x1001,
        handle: 0xabcd,
        offset: 0,
        len: 10000,
        imm: 0x0102_0304,
    }));
    let key = PacketRepr::Control(ControlRepr::Key(KeyRepr { key: 0xabcd }));
    let key_info = PacketRepr::Control(ControlRepr::KeyInfo(KeyInfoRepr {
        key: 0xabcd,
        region: Ok(KeyRegion {
            len: 10000,
            access: 0b11,
            device: Some(DeviceKey {
                key: 0x1234,
                base: 0x10000,
            }),
        }),
    }));
    let hello = PacketRepr::Hello(HELLO_A);
    let cookie = PacketRepr::Cookie(CookieRepr {
        cookie: [
            0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad,
            0xae, 0xaf,
        ],
    });
    std::vec![
        ("hello", HeaderRepr::new(&hello), hello),
        ("hello_ack", HeaderRepr::new(&hello_ack), hello_ack),
        (
            "send",
            HeaderRepr {
                flags: Flags::CHECKSUM,
                credits: 2,
                seq: 7,
                ack: 4,
                ..HeaderRepr::new(&send)
            },
            send,
        ),
        ("put", reliable(&put, 8), put),
        ("get", reliable(&get, 9), get),
        (
            "ack",
            HeaderRepr {
                credits: 4,
                ack: 10,
                ..HeaderRepr::new(&ack)
            },
            ack,
        ),
        ("close", reliable(&close, 11), close),
        ("reject", reliable(&reject, 12), reject),
        ("done", reliable(&done, 13), done),
        ("notify", reliable(&notify, 14), notify),
        ("key", reliable(&key, 15), key),
        ("key_info", reliable(&key_info, 16), key_info),
        ("cookie", HeaderRepr::new(&cookie), cookie),
        (
            "sealed_close",
            HeaderRepr {
                flags: Flags::SEALED,
                ..reliable(&close, 11)
            },
            close,
        ),
    ]
}

/// The seal (42, 3) puts on what it sends (42, 5), each with the start its
/// HELLO vector says.
pub(super) fn golden_seal(sender: &HelloRepr, receiver: &HelloRepr) -> Seal {
    let start = |h: &HelloRepr| Start {
        job: h.job,
        rank: h.rank,
        epoch: h.epoch,
    };
    Seal::derive(GOLDEN_KEY, start(sender), start(receiver))
}

fn reliable(packet: &PacketRepr<'_>, seq: u64) -> HeaderRepr {
    HeaderRepr {
        seq,
        ack: 4,
        ..HeaderRepr::new(packet)
    }
}

pub(super) fn encode(header: &HeaderRepr, packet: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = std::vec![0; header.frame_len().expect("golden frame length")];
    let len = emit(header, packet, &mut buf).expect("golden vector encodes");
    assert_eq!(len, buf.len());
    if header.flags.contains(Flags::SEALED) {
        golden_seal(&HELLO_A, &HELLO_B).seal_frame(&mut buf);
    }
    buf
}

/// The golden blocks of the book: name and bytes, in order. A block is a
/// `<!-- golden: NAME -->` line followed by a fenced block of hex bytes,
/// where `#` starts a comment.
fn book_blocks() -> Vec<(String, Vec<u8>)> {
    let mut blocks = Vec::new();
    let mut lines = BOOK.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- golden:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let name = name.trim();
        assert_eq!(
            lines.next().map(str::trim),
            Some("```text"),
            "golden block `{name}` must open with ```text right after its marker"
        );
        let mut bytes = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let hex = line.split('#').next().unwrap_or_default();
            for token in hex.split_whitespace() {
                assert!(
                    token.len() % 2 == 0,
                    "odd hex token `{token}` in golden block `{name}`"
                );
                for pair in token.as_bytes().chunks(2) {
                    let pair = core::str::from_utf8(pair).expect("ascii hex");
                    bytes.push(
                        u8::from_str_radix(pair, 16).unwrap_or_else(|_| {
                            panic!("bad hex `{pair}` in golden block `{name}`")
                        }),
                    );
                }
            }
        }
        blocks.push((String::from(name), bytes));
    }
    blocks
}

#[test]
fn book_has_exactly_the_golden_vectors() {
    let book: Vec<String> = book_blocks().into_iter().map(|(name, _)| name).collect();
    let code: Vec<&str> = vectors().into_iter().map(|(name, ..)| name).collect();
    assert_eq!(book, code);
}

#[test]
fn book_bytes_equal_encoder_output() {
    let blocks = book_blocks();
    for (name, header, packet) in vectors() {
        let (_, book) = blocks
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no golden block `{name}` in the book"));
        let code = encode(&header, &packet);
        assert_eq!(
            hex(&code),
            hex(book),
            "golden vector `{name}`: encoder (left) differs from the book (right)"
        );
    }
}

#[test]
fn golden_vectors_decode_to_their_reprs() {
    let limits = Limits::new(65536);
    for (name, header, packet) in vectors() {
        let bytes = encode(&header, &packet);
        let (h, p, used) = parse(&bytes, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((h, p, used), (header, packet, bytes.len()), "{name}");
    }
}

#[test]
fn golden_hello_ack_proof_verifies() {
    let vectors = vectors();
    let Some((_, _, PacketRepr::HelloAck(ack))) = vectors.iter().find(|(n, ..)| *n == "hello_ack")
    else {
        panic!("no hello_ack vector");
    };
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &ack.proof, &HELLO_A, &HELLO_B),
        Ok(())
    );
}

#[test]
fn golden_seal_checks_at_the_receiver_only() {
    let vectors = vectors();
    let Some((_, header, packet)) = vectors.iter().find(|(n, ..)| *n == "sealed_close") else {
        panic!("no sealed_close vector");
    };
    let bytes = encode(header, packet);
    assert_eq!(golden_seal(&HELLO_B, &HELLO_A).check(&bytes), Ok(()));
    assert_eq!(
        golden_seal(&HELLO_A, &HELLO_B).check(&bytes),
        Err(WireError::BadSeal),
        "the sender's own key is the other direction's"
    );
}

#[test]
fn golden_lengths() {
    let lengths: Vec<(&str, usize)> = vectors()
        .iter()
        .map(|(name, h, p)| (*name, encode(h, p).len()))
        .collect();
    assert_eq!(
        lengths,
        [
            ("hello", 96),
            ("hello_ack", 64),
            ("send", 49),
            ("put", 76),
            ("get", 96),
            ("ack", 40),
            ("close", 40),
            ("reject", 48),
            ("done", 40),
            ("notify", 72),
            ("key", 40),
            ("key_info", 72),
            ("cookie", 48),
            ("sealed_close", 56),
        ]
    );
}

fn hex(bytes: &[u8]) -> String {
    use core::fmt::Write;
    let mut s = String::new();
    for (i, b) in bytes.iter().enumerate() {
        let sep = if i % 16 == 15 { "\n" } else { " " };
        let _ = write!(s, "{b:02x}{sep}");
    }
    s
}
