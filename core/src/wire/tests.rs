use std::string::ToString;
use std::vec::Vec;

use arbitrary::{Arbitrary, Unstructured};
use proptest::collection::vec;
use proptest::prelude::*;

use super::golden::{GOLDEN_KEY, HELLO_A, HELLO_B, encode, vectors};
use super::*;

const LIMITS: Limits = Limits::new(1 << 16);

/// The golden vector `name`, encoded.
fn golden(name: &str) -> Vec<u8> {
    let (_, header, packet) = vectors()
        .into_iter()
        .find(|(n, ..)| *n == name)
        .expect("golden vector");
    encode(&header, &packet)
}

fn parse_err(bytes: &[u8]) -> WireError {
    parse(bytes, &LIMITS).expect_err("packet should be refused")
}

/// `bytes` with the big-endian `value` written at `at`.
fn patched(mut bytes: Vec<u8>, at: usize, value: &[u8]) -> Vec<u8> {
    bytes[at..at + value.len()].copy_from_slice(value);
    bytes
}

/// A valid, reliable-aware header for `packet` from arbitrary fields.
fn header_for(packet: &PacketRepr<'_>, fields: HeaderRepr) -> HeaderRepr {
    let reliable = packet.packet_type().is_reliable();
    HeaderRepr {
        flags: fields.flags,
        credits: fields.credits,
        seq: if reliable { fields.seq } else { 0 },
        ack: fields.ack,
        ..HeaderRepr::new(packet)
    }
}

/// `packet` with the fields the decoder checks made consistent.
fn valid(packet: PacketRepr<'_>) -> PacketRepr<'_> {
    match packet {
        PacketRepr::Put { mut put, data } => {
            let len = data.len() as u64;
            put.count = put.count.max(1);
            put.index %= put.count;
            put.total_len = put.total_len.max(len);
            put.offset = put.offset.min(u64::MAX - len);
            PacketRepr::Put { put, data }
        }
        PacketRepr::Control(ControlRepr::Get(mut get)) => {
            get.src_offset = get.src_offset.min(u64::MAX - get.len);
            get.dst_offset = get.dst_offset.min(u64::MAX - get.len);
            PacketRepr::Control(ControlRepr::Get(get))
        }
        other => other,
    }
}

/// An arbitrary valid packet and header from `u`, encoded.
fn arbitrary_frame(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let packet = valid(PacketRepr::arbitrary(u)?);
    let header = header_for(&packet, HeaderRepr::arbitrary(u)?);
    Ok(encode(&header, &packet))
}

// ---- header ----

#[test]
fn packet_type_numbers_round_trip() {
    for t in PacketType::ALL {
        assert_eq!(PacketType::try_from(u8::from(t)), Ok(t));
        assert_eq!(t.to_string(), t.name());
    }
    assert_eq!(PacketType::try_from(0), Err(WireError::UnknownType(0)));
    assert_eq!(PacketType::try_from(14), Err(WireError::UnknownType(14)));
    let reliable: Vec<_> = PacketType::ALL.iter().filter(|t| t.is_reliable()).collect();
    assert_eq!(
        reliable,
        [
            &PacketType::Send,
            &PacketType::Put,
            &PacketType::Get,
            &PacketType::Close,
            &PacketType::Reject,
            &PacketType::Done,
            &PacketType::Notify,
            &PacketType::Key,
            &PacketType::KeyInfo
        ]
    );
}

#[test]
fn header_view_reads_raw_fields_and_frame_len() {
    let bytes = golden("send");
    let header = Header::new_checked(&bytes[..]).expect("long enough");
    assert_eq!(header.type_raw(), 3);
    assert_eq!(header.flags_raw(), 1);
    assert_eq!(header.reserved(), 0);
    assert_eq!(header.credits(), 2);
    assert_eq!(header.seq(), 7);
    assert_eq!(header.ack(), 4);
    assert_eq!(header.body_len(), 13);
    assert_eq!(header.frame_len(&LIMITS), Ok(bytes.len()));
    // The first 32 bytes are enough to size the frame.
    let head = Header::new_checked(&bytes[..HEADER_LEN]).expect("header");
    assert_eq!(head.frame_len(&LIMITS), Ok(49));
    assert_eq!(head.into_inner().len(), HEADER_LEN);
}

#[test]
fn truncated_header() {
    let bytes = golden("ack");
    assert_eq!(
        Header::new_checked(&bytes[..31]),
        Err(WireError::Truncated {
            needed: 32,
            have: 31
        })
    );
    assert_eq!(
        parse_err(&[]),
        WireError::Truncated {
            needed: 32,
            have: 0
        }
    );
}

#[test]
fn truncated_body() {
    let bytes = golden("put");
    assert_eq!(
        parse_err(&bytes[..bytes.len() - 1]),
        WireError::Truncated {
            needed: 76,
            have: 75
        }
    );
    let send = golden("send");
    // Only the trailer missing.
    assert_eq!(
        parse_err(&send[..45]),
        WireError::Truncated {
            needed: 49,
            have: 45
        }
    );
}

#[test]
fn unknown_type() {
    for t in [0, 14, 0xff] {
        assert_eq!(
            parse_err(&patched(golden("ack"), 0, &[t])),
            WireError::UnknownType(t)
        );
    }
}

#[test]
fn key_info_unused_fields_and_bits_must_be_zero() {
    // Body starts at 32: code 40, access 41, flags 42, reserved 43..48,
    // len 48, device_key 56, base 64.
    let good = golden("key_info");
    for (at, value, field) in [
        (43, &[1u8][..], "key_info.reserved"),
        (41, &[0x04], "key_info.access"),
        (42, &[0x02], "key_info.flags"),
    ] {
        assert_eq!(
            parse_err(&patched(good.clone(), at, value)),
            WireError::ReservedNonZero { field }
        );
    }
    // Without DEVICE, the device's fields are unused.
    let no_device = patched(good.clone(), 42, &[0]);
    assert_eq!(
        parse_err(&no_device),
        WireError::ReservedNonZero {
            field: "key_info.device_key"
        }
    );
    let bare = patched(patched(no_device, 56, &[0; 8]), 64, &[0; 8]);
    let (_, packet, _) = parse(&bare, &LIMITS).expect("a region without a device");
    assert_eq!(
        packet,
        PacketRepr::Control(ControlRepr::KeyInfo(KeyInfoRepr {
            key: 0xabcd,
            region: Ok(KeyRegion {
                len: 10000,
                access: 0b11,
                device: None
            })
        }))
    );
    // A refusal carries nothing else.
    let refused = patched(good.clone(), 40, &[1]);
    assert_eq!(
        parse_err(&refused),
        WireError::ReservedNonZero {
            field: "key_info.access"
        }
    );
    let mut bare_refusal = patched(refused, 41, &[0, 0]);
    bare_refusal[48..72].fill(0);
    let (_, packet, _) = parse(&bare_refusal, &LIMITS).expect("a refusal");
    assert_eq!(
        packet,
        PacketRepr::Control(ControlRepr::KeyInfo(KeyInfoRepr {
            key: 0xabcd,
            region: Err(RejectCode::BadHandle)
        }))
    );
    let mut with_len = bare_refusal.clone();
    with_len[55] = 1;
    assert_eq!(
        parse_err(&with_len),
        WireError::ReservedNonZero {
            field: "key_info.len"
        }
    );
}

#[test]
fn unknown_flags() {
    assert_eq!(
        parse_err(&patched(golden("ack"), 1, &[0x08])),
        WireError::UnknownFlags(0x08)
    );
    assert_eq!(
        parse_err(&patched(golden("ack"), 1, &[0x81])),
        WireError::UnknownFlags(0x81)
    );
}

#[test]
fn header_reserved_non_zero() {
    assert_eq!(
        parse_err(&patched(golden("ack"), 2, &[0, 1])),
        WireError::ReservedNonZero {
            field: "header.reserved"
        }
    );
}

#[test]
fn seq_on_unsequenced_packets_is_refused() {
    for name in ["hello", "hello_ack", "ack"] {
        assert!(matches!(
            parse_err(&patched(golden(name), 8, &1u64.to_be_bytes())),
            WireError::ReservedNonZero { .. }
        ));
    }
}

#[test]
fn body_too_long_is_refused_from_the_header_alone() {
    let limits = Limits::new(100);
    let mut header = [0; HEADER_LEN];
    HeaderRepr {
        packet_type: PacketType::Send,
        flags: Flags::empty(),
        credits: 0,
        seq: 0,
        ack: 0,
        body_len: 101,
    }
    .emit(&mut header);
    let view = Header::new_checked(&header).expect("header");
    assert_eq!(
        view.frame_len(&limits),
        Err(WireError::BodyTooLong { len: 101, max: 100 })
    );
    assert_eq!(
        parse(&header, &limits).map(|_| ()),
        Err(WireError::BodyTooLong { len: 101, max: 100 })
    );
    // A huge announced length is refused the same way, never allocated or
    // waited for.
    let huge = patched(header.to_vec(), 24, &u64::MAX.to_be_bytes());
    assert_eq!(
        parse(&huge, &limits).map(|_| ()),
        Err(WireError::BodyTooLong {
            len: u64::MAX,
            max: 100
        })
    );
}

#[test]
fn limits_are_clamped() {
    assert_eq!(Limits::new(0).max_body(), MIN_MAX_BODY);
    assert_eq!(Limits::new(1000).max_body(), 1000);
    assert_eq!(Limits::new(u64::MAX).max_body(), MAX_MAX_BODY);
    // The smallest limit still lets every control packet through.
    let smallest = Limits::new(0);
    for name in ["hello", "hello_ack", "get", "ack", "close", "reject"] {
        assert!(parse(&golden(name), &smallest).is_ok(), "{name}");
    }
}

#[test]
fn body_length_must_suit_the_type() {
    let cases: [(&str, u64); 10] = [
        ("hello", 63),
        ("hello", 65),
        ("hello_ack", 31),
        ("get", 8),
        ("ack", 0),
        ("ack", 16),
        ("close", 9),
        ("reject", 8),
        ("send", 7),
        ("put", 39),
    ];
    for (name, len) in cases {
        let bytes = patched(golden(name), 24, &len.to_be_bytes());
        let t = PacketType::try_from(bytes[0]).expect("type");
        assert_eq!(
            parse_err(&bytes),
            WireError::BadLength {
                packet_type: t,
                len
            },
            "{name} with body_len {len}"
        );
        assert!(PacketRepr::parse(t, &[0; 70][..len as usize]).is_err());
    }
}

#[test]
fn checksum_mismatch() {
    let bytes = golden("send");
    let mut damaged = bytes.clone();
    damaged[40] ^= 0x20; // payload 'h' -> 'H'
    assert!(matches!(
        parse_err(&damaged),
        WireError::ChecksumMismatch { received, .. } if received == 0xc1ae1e65
    ));
    let mut trailer = bytes.clone();
    trailer[48] ^= 1;
    assert_eq!(
        parse_err(&trailer),
        WireError::ChecksumMismatch {
            computed: 0xc1ae1e65,
            received: 0xc1ae1e64
        }
    );
}

#[test]
fn crc32c_is_castagnoli() {
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    let mut crc = Crc32c::new();
    crc.update(b"1234");
    crc.update(b"");
    crc.update(b"56789");
    assert_eq!(crc.clone().finalize(), 0xe306_9283);
    assert_eq!(crc.trailer(), [0xe3, 0x06, 0x92, 0x83]);
    assert_eq!(
        check_trailer(b"123456789", [0xe3, 0x06, 0x92, 0x83]),
        Ok(())
    );
    assert!(check_trailer(b"123456789", [0; 4]).is_err());
}

// ---- bodies ----

#[test]
fn hello_bad_magic() {
    let bytes = patched(golden("hello"), 32, b"MPI\0");
    assert_eq!(parse_err(&bytes), WireError::BadMagic { found: *b"MPI\0" });
}

#[test]
fn hello_other_major_version_is_unsupported() {
    for (major, minor) in [(0, 0), (2, 0), (2, 7), (255, 255)] {
        let bytes = patched(golden("hello"), 36, &[major, minor]);
        let err = parse_err(&bytes);
        assert_eq!(err, WireError::UnsupportedVersion { major, minor });
        assert_eq!(err.close_reason(), CloseReason::VersionMismatch);
        let text = err.to_string();
        assert!(text.contains(&std::format!("{major}.{minor}")), "{text}");
        let ours = std::format!("{VERSION_MAJOR}.{VERSION_MINOR}");
        assert!(text.contains(&ours), "{text}");
    }
}

#[test]
fn hello_higher_minor_is_accepted() {
    let bytes = patched(golden("hello"), 37, &[9]);
    let (_, packet, _) = parse(&bytes, &LIMITS).expect("minor 9 accepted");
    let PacketRepr::Hello(hello) = packet else {
        panic!("not a HELLO: {packet:?}");
    };
    assert_eq!(hello.version_minor, 9);
    assert_eq!(
        HelloRepr {
            version_minor: 0,
            ..hello
        },
        HELLO_A
    );
}

#[test]
fn hello_unknown_capabilities_are_ignored() {
    let bytes = patched(golden("hello"), 52, &0xffff_fff1u32.to_be_bytes());
    let (_, packet, _) = parse(&bytes, &LIMITS).expect("unknown capability bits ignored");
    let PacketRepr::Hello(hello) = packet else {
        panic!("not a HELLO: {packet:?}");
    };
    assert_eq!(hello.capabilities, Capabilities::CRC32C);
}

#[test]
fn body_reserved_fields_non_zero() {
    let cases = [
        ("hello", 32 + 52, "hello.reserved_52"),
        ("send", 32 + 1, "send.reserved"),
        ("get", 32 + 44, "get.reserved"),
        ("close", 32 + 7, "close.reserved"),
        ("reject", 32 + 9, "reject.reserved"),
    ];
    for (name, at, field) in cases {
        let mut bytes = golden(name);
        bytes[at] = 1;
        if name == "send" {
            // Keep the checksum right so the reserved check is reached.
            let end = bytes.len() - CHECKSUM_LEN;
            let crc = crc32c(&bytes[..end]).to_be_bytes();
            bytes[end..].copy_from_slice(&crc);
        }
        assert_eq!(
            parse_err(&bytes),
            WireError::ReservedNonZero { field },
            "{name}"
        );
    }
}

#[test]
fn put_index_must_be_below_count() {
    let bytes = golden("put");
    assert_eq!(
        parse_err(&patched(bytes.clone(), 32 + 32, &3u32.to_be_bytes())),
        WireError::BadIndex { index: 3, count: 3 }
    );
    let zero = patched(patched(bytes, 32 + 32, &0u32.to_be_bytes()), 68, &[0; 4]);
    assert_eq!(parse_err(&zero), WireError::BadIndex { index: 0, count: 0 });
}

#[test]
fn put_data_must_fit_the_total() {
    assert_eq!(
        parse_err(&patched(golden("put"), 32 + 24, &3u64.to_be_bytes())),
        WireError::DataExceedsTotal { len: 4, total: 3 }
    );
}

#[test]
fn put_offset_must_not_overflow() {
    let offset = u64::MAX - 3;
    assert_eq!(
        parse_err(&patched(golden("put"), 32 + 16, &offset.to_be_bytes())),
        WireError::OffsetOverflow { offset, len: 4 }
    );
    // The last byte of the address space is reachable.
    let offset = u64::MAX - 4;
    assert!(
        parse(
            &patched(golden("put"), 32 + 16, &offset.to_be_bytes()),
            &LIMITS
        )
        .is_ok()
    );
}

#[test]
fn get_ranges_must_not_overflow() {
    let src = u64::MAX - 9999;
    assert_eq!(
        parse_err(&patched(golden("get"), 32 + 16, &src.to_be_bytes())),
        WireError::OffsetOverflow {
            offset: src,
            len: 10000
        }
    );
    let dst = u64::MAX;
    assert_eq!(
        parse_err(&patched(golden("get"), 32 + 56, &dst.to_be_bytes())),
        WireError::OffsetOverflow {
            offset: dst,
            len: 10000
        }
    );
}

#[test]
fn unknown_close_reasons_and_reject_codes_are_kept() {
    let bytes = patched(golden("close"), 32, &[200]);
    let (_, packet, _) = parse(&bytes, &LIMITS).expect("unknown reason");
    assert_eq!(
        packet,
        PacketRepr::Close(CloseRepr {
            reason: CloseReason::Other(200)
        })
    );
    for raw in 0..=u8::MAX {
        assert_eq!(u8::from(CloseReason::from(raw)), raw);
        assert_eq!(u8::from(RejectCode::from(raw)), raw);
    }
    assert_eq!(RejectCode::from(0), RejectCode::Other(0));
    assert_eq!(RejectCode::from(5), RejectCode::NoTarget);
    assert_eq!(CloseReason::from(6), CloseReason::Shutdown);
    assert_eq!(CloseReason::Other(9).to_string(), "unknown reason 9");
    assert_eq!(
        RejectCode::BadHandle.to_string(),
        "no registration with that handle"
    );
}

#[test]
fn sack_bits() {
    let ack = AckRepr { sack: 0b101 };
    let acked: Vec<u64> = (0..80).filter(|&seq| ack.is_acked(10, seq)).collect();
    assert_eq!(acked, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13]);
    let full = AckRepr { sack: u64::MAX };
    assert!(full.is_acked(0, 64));
    assert!(!full.is_acked(0, 65));
    assert!(!full.is_acked(u64::MAX, u64::MAX));
}

// ---- datagrams and emit ----

#[test]
fn datagram_with_trailing_bytes() {
    let mut bytes = golden("ack");
    bytes.push(0);
    assert_eq!(
        parse_datagram(&bytes, &LIMITS).map(|_| ()),
        Err(WireError::TrailingBytes {
            frame: 40,
            have: 41
        })
    );
    // On a stream the next frame may follow.
    assert_eq!(parse(&bytes, &LIMITS).map(|(.., used)| used), Ok(40));
}

#[test]
fn stream_of_frames() {
    let mut stream = Vec::new();
    for (_, header, packet) in vectors() {
        stream.extend(encode(&header, &packet));
    }
    let mut rest = &stream[..];
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let (header, _, used) = parse(rest, &LIMITS).expect("frame");
        seen.push(header.packet_type);
        rest = &rest[used..];
    }
    // Every type once, and a sealed CLOSE.
    let mut every = PacketType::ALL.to_vec();
    every.push(PacketType::Close);
    assert_eq!(seen, every);
}

#[test]
fn emit_refuses_a_header_that_does_not_fit_the_packet() {
    let packet = PacketRepr::Ack(AckRepr { sack: 0 });
    let mut buf = [0; 64];
    let wrong_type = HeaderRepr {
        packet_type: PacketType::Close,
        ..HeaderRepr::new(&packet)
    };
    assert_eq!(
        emit(&wrong_type, &packet, &mut buf),
        Err(WireError::HeaderMismatch)
    );
    let wrong_len = HeaderRepr {
        body_len: 9,
        ..HeaderRepr::new(&packet)
    };
    assert_eq!(
        emit_prefix(&wrong_len, &packet, &mut buf),
        Err(WireError::HeaderMismatch)
    );
    let huge = HeaderRepr {
        body_len: u64::MAX,
        ..HeaderRepr::new(&packet)
    };
    assert_eq!(
        emit(&huge, &packet, &mut buf),
        Err(WireError::HeaderMismatch)
    );
}

#[test]
fn emit_refuses_a_small_buffer() {
    let (_, header, packet) = vectors().swap_remove(2);
    let mut buf = [0; 48];
    assert_eq!(
        emit(&header, &packet, &mut buf),
        Err(WireError::BufferTooSmall {
            needed: 49,
            have: 48
        })
    );
    assert_eq!(
        emit_prefix(&header, &packet, &mut buf[..39]),
        Err(WireError::BufferTooSmall {
            needed: 40,
            have: 39
        })
    );
    assert_eq!(
        packet.emit_body(&mut buf[..12]),
        Err(WireError::BufferTooSmall {
            needed: 13,
            have: 12
        })
    );
    assert_eq!(
        packet.emit_fixed(&mut buf[..7]),
        Err(WireError::BufferTooSmall { needed: 8, have: 7 })
    );
}

#[test]
fn vectored_emit_equals_contiguous_emit() {
    for (name, header, packet) in vectors() {
        let mut prefix = [0; MAX_PREFIX_LEN];
        let len = emit_prefix(&header, &packet, &mut prefix).expect("prefix");
        let mut frame = prefix[..len].to_vec();
        frame.extend_from_slice(packet.payload());
        if header.flags.contains(Flags::CHECKSUM) {
            let mut crc = Crc32c::new();
            crc.update(&prefix[..len]);
            crc.update(packet.payload());
            frame.extend_from_slice(&crc.trailer());
        }
        if header.flags.contains(Flags::SEALED) {
            let seal = super::golden::golden_seal(&HELLO_A, &HELLO_B).tag(&prefix[..len]);
            frame.extend_from_slice(&seal);
        }
        assert_eq!(frame, encode(&header, &packet), "{name}");
    }
}

/// What a stream reader does to land a PUT's data straight in its target:
/// header and fixed fields into scratch space, data where they say.
#[test]
fn stream_reader_reads_payload_in_place() {
    let bytes = golden("put");
    let mut scratch = [0; MAX_PREFIX_LEN];
    scratch[..HEADER_LEN].copy_from_slice(&bytes[..HEADER_LEN]);
    let head = Header::new_checked(&scratch[..HEADER_LEN]).expect("header");
    let header = HeaderRepr::parse(&head, &LIMITS).expect("valid header");
    assert_eq!(head.frame_len(&LIMITS), Ok(bytes.len()));

    let fixed_len = header.packet_type.fixed_body_len();
    let fixed = &bytes[HEADER_LEN..HEADER_LEN + fixed_len];
    let data_len = header.body_len - fixed_len as u64;
    let put = PutRepr::parse(fixed.try_into().expect("40 bytes"), data_len).expect("put");
    assert_eq!(put.end(data_len), Ok(4100));

    let mut registration = [0u8; 8192];
    let start = put.offset as usize;
    registration[start..start + data_len as usize]
        .copy_from_slice(&bytes[HEADER_LEN + fixed_len..]);
    assert_eq!(&registration[4096..4100], &[0xde, 0xad, 0xbe, 0xef]);
}

// ---- proof ----

#[test]
fn proof_verifies_with_the_same_key() {
    let proof = hello_proof(GOLDEN_KEY, &HELLO_A, &HELLO_B);
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &proof, &HELLO_A, &HELLO_B),
        Ok(())
    );
    // The other direction has its own proof.
    let back = hello_proof(GOLDEN_KEY, &HELLO_B, &HELLO_A);
    assert_ne!(back, proof);
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &back, &HELLO_B, &HELLO_A),
        Ok(())
    );
}

#[test]
fn proof_fails_with_another_key_or_handshake() {
    let proof = hello_proof(GOLDEN_KEY, &HELLO_A, &HELLO_B);
    let err = verify_proof(Some(b"another key"), &proof, &HELLO_A, &HELLO_B);
    assert_eq!(err, Err(WireError::BadProof));
    assert_eq!(WireError::BadProof.close_reason(), CloseReason::AuthFailed);
    // Reflected back to its sender.
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &proof, &HELLO_B, &HELLO_A),
        Err(WireError::BadProof)
    );
    // Replayed on a connection with a fresh nonce.
    let fresh = HelloRepr {
        nonce: [0x55; NONCE_LEN],
        ..HELLO_B
    };
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &proof, &HELLO_A, &fresh),
        Err(WireError::BadProof)
    );
    let mut flipped = proof;
    flipped[31] ^= 1;
    assert_eq!(
        verify_proof(Some(GOLDEN_KEY), &flipped, &HELLO_A, &HELLO_B),
        Err(WireError::BadProof)
    );
}

#[test]
fn proof_key_presence_must_match() {
    let unkeyed = HelloRepr {
        capabilities: Capabilities::CRC32C,
        ..HELLO_A
    };
    let zeros = [0; PROOF_LEN];
    // Neither side has a key: nothing to check.
    assert_eq!(verify_proof(None, &zeros, &unkeyed, &HELLO_B), Ok(()));
    // Only this side has one.
    let err = verify_proof(Some(GOLDEN_KEY), &zeros, &unkeyed, &HELLO_B);
    assert_eq!(
        err,
        Err(WireError::KeyMismatch {
            local_has_key: true
        })
    );
    // Only the peer has one.
    let proof = hello_proof(GOLDEN_KEY, &HELLO_A, &HELLO_B);
    assert_eq!(
        verify_proof(None, &proof, &HELLO_A, &HELLO_B),
        Err(WireError::KeyMismatch {
            local_has_key: false
        })
    );
    for local_has_key in [true, false] {
        let e = WireError::KeyMismatch { local_has_key };
        assert_eq!(e.close_reason(), CloseReason::AuthFailed);
    }
}

#[test]
fn proof_accepts_keys_of_any_length() {
    for len in [0, 1, 32, 64, 65, 200] {
        let key = std::vec![0xa5; len];
        let proof = hello_proof(&key, &HELLO_A, &HELLO_B);
        assert_ne!(proof, [0; PROOF_LEN]);
        assert_eq!(verify_proof(Some(&key), &proof, &HELLO_A, &HELLO_B), Ok(()));
    }
}

// ---- errors ----

#[test]
fn every_error_displays_a_message() {
    let errors = [
        WireError::Truncated { needed: 9, have: 1 },
        WireError::BufferTooSmall { needed: 9, have: 1 },
        WireError::TrailingBytes { frame: 9, have: 10 },
        WireError::UnknownType(9),
        WireError::UnknownFlags(2),
        WireError::ReservedNonZero {
            field: "header.reserved",
        },
        WireError::BodyTooLong { len: 9, max: 1 },
        WireError::BadLength {
            packet_type: PacketType::Send,
            len: 3,
        },
        WireError::BadLength {
            packet_type: PacketType::Ack,
            len: 3,
        },
        WireError::ChecksumMismatch {
            computed: 1,
            received: 2,
        },
        WireError::BadMagic { found: *b"GET " },
        WireError::UnsupportedVersion { major: 2, minor: 1 },
        WireError::BadIndex { index: 3, count: 3 },
        WireError::DataExceedsTotal { len: 4, total: 3 },
        WireError::OffsetOverflow {
            offset: u64::MAX,
            len: 1,
        },
        WireError::HeaderMismatch,
        WireError::BadProof,
        WireError::KeyMismatch {
            local_has_key: true,
        },
        WireError::KeyMismatch {
            local_has_key: false,
        },
    ];
    let texts: Vec<_> = errors.iter().map(ToString::to_string).collect();
    for (i, text) in texts.iter().enumerate() {
        assert!(!text.is_empty());
        assert!(!texts[..i].contains(text), "duplicate message: {text}");
    }
    assert_eq!(
        texts[7],
        "SEND body of 3 bytes is shorter than its 8 fixed bytes"
    );
    assert_eq!(texts[8], "ACK body of 3 bytes, expected exactly 8");
    assert_eq!(
        WireError::UnknownType(9).close_reason(),
        CloseReason::ProtocolError
    );
}

// ---- properties ----

proptest! {
    #[test]
    fn arbitrary_packets_round_trip(bytes in vec(any::<u8>(), 0..600)) {
        let mut u = Unstructured::new(&bytes);
        let (Ok(packet), Ok(fields)) = (PacketRepr::arbitrary(&mut u), HeaderRepr::arbitrary(&mut u)) else {
            return Ok(());
        };
        let packet = valid(packet);
        let header = header_for(&packet, fields);
        let frame = encode(&header, &packet);
        prop_assert_eq!(frame.len(), header.frame_len().expect("fits"));
        prop_assert_eq!(parse(&frame, &LIMITS), Ok((header, packet, frame.len())));
        prop_assert_eq!(parse_datagram(&frame, &LIMITS), Ok((header, packet)));
        let view = Header::new_checked(&frame[..HEADER_LEN]).expect("header");
        prop_assert_eq!(HeaderRepr::parse(&view, &LIMITS), Ok(header));
    }

    #[test]
    fn header_round_trips(fields in any::<[u8; 32]>()) {
        let mut u = Unstructured::new(&fields);
        let Ok(header) = HeaderRepr::arbitrary(&mut u) else { return Ok(()) };
        let mut buf = [0; HEADER_LEN];
        header.emit(&mut buf);
        let view = Header::new_checked(&buf).expect("header");
        let limits = Limits::new(u64::MAX);
        let checked = header.packet_type.check_body_len(header.body_len).is_ok()
            && (header.packet_type.is_reliable() || header.seq == 0)
            && header.body_len <= limits.max_body();
        match HeaderRepr::parse(&view, &limits) {
            Ok(parsed) => prop_assert!(checked && parsed == header),
            Err(_) => prop_assert!(!checked),
        }
    }

    #[test]
    fn any_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        let _ = parse(&bytes, &LIMITS);
        let _ = parse_datagram(&bytes, &LIMITS);
        if let Ok(header) = Header::new_checked(&bytes[..]) {
            let _ = header.frame_len(&LIMITS);
        }
    }

    /// Random bytes behind each valid header, so that the body decoders
    /// see garbage too, not only the header checks.
    #[test]
    fn any_body_never_panics(t in 1u8..=8, flags in 0u8..2, body in vec(any::<u8>(), 0..128)) {
        let mut bytes = std::vec![t, flags, 0, 0];
        bytes.extend_from_slice(&[0; 20]);
        let body_len = body.len().saturating_sub(usize::from(flags) * CHECKSUM_LEN);
        bytes.extend_from_slice(&(body_len as u64).to_be_bytes());
        bytes.extend_from_slice(&body);
        let _ = parse(&bytes, &LIMITS);
        if let Some(t) = PacketType::from_u8(t) {
            let _ = PacketRepr::parse(t, &body);
        }
    }

    #[test]
    fn truncated_packets_are_truncated(bytes in vec(any::<u8>(), 0..300), cut in any::<prop::sample::Index>()) {
        let Ok(frame) = arbitrary_frame(&mut Unstructured::new(&bytes)) else { return Ok(()) };
        let len = cut.index(frame.len());
        let err = parse(&frame[..len], &LIMITS).map(|_| ());
        let expected = if len < HEADER_LEN { HEADER_LEN } else { frame.len() };
        prop_assert_eq!(err, Err(WireError::Truncated { needed: expected, have: len }));
    }

    #[test]
    fn any_changed_byte_of_a_checksummed_packet_is_caught(
        bytes in vec(any::<u8>(), 0..300),
        at in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        let mut u = Unstructured::new(&bytes);
        let (Ok(packet), Ok(fields)) = (PacketRepr::arbitrary(&mut u), HeaderRepr::arbitrary(&mut u)) else {
            return Ok(());
        };
        let packet = valid(packet);
        let header = HeaderRepr { flags: Flags::CHECKSUM, ..header_for(&packet, fields) };
        let mut frame = encode(&header, &packet);
        let at = at.index(frame.len());
        frame[at] ^= xor;
        prop_assert!(parse_datagram(&frame, &LIMITS).is_err(), "byte {} ^ {:#x} went unnoticed", at, xor);
    }

    /// Structured damage driven by `arbitrary`: a valid frame, then cuts,
    /// flips, overwritten header fields and appended garbage.
    #[test]
    fn damaged_packets_never_panic(bytes in vec(any::<u8>(), 0..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok(mut frame) = arbitrary_frame(&mut u) else { return Ok(()) };
        while let Ok(op) = u.int_in_range(0u8..=4) {
            if u.is_empty() {
                break;
            }
            match op {
                0 => {
                    let len = u.choose_index(frame.len() + 1).unwrap_or(0);
                    frame.truncate(len);
                }
                1 if !frame.is_empty() => {
                    let at = u.choose_index(frame.len()).unwrap_or(0);
                    frame[at] ^= u.arbitrary::<u8>().unwrap_or(1);
                }
                2 if frame.len() >= HEADER_LEN => {
                    let field = [4usize, 8, 16, 24][u.choose_index(4).unwrap_or(0)];
                    let value: u64 = u.arbitrary().unwrap_or(u64::MAX);
                    let width = if field == 4 { 4 } else { 8 };
                    frame[field..field + width].copy_from_slice(&value.to_be_bytes()[8 - width..]);
                }
                3 => frame.extend(u.bytes(u.len().min(16)).unwrap_or_default()),
                _ => {}
            }
            let _ = parse(&frame, &LIMITS);
            let _ = parse_datagram(&frame, &Limits::new(0));
        }
    }
}

#[test]
fn a_close_frame_is_one_whole_close_with_its_reason() {
    for reason in [CloseReason::ResourceExhausted, CloseReason::Shutdown] {
        let frame = close_frame(reason);
        let (_, body, len) = parse(&frame, &LIMITS).expect("a valid frame");
        assert_eq!(len, CLOSE_FRAME_LEN);
        assert_eq!(body, PacketRepr::Close(CloseRepr { reason }));
    }
}
