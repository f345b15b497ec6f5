//! The Wireshark dissector (`wireshark/btl.lua`) against btl-core's own
//! decoders: the golden vectors of the book's protocol chapter, written to
//! a capture by btl-std's writer and dissected by tshark, must show every
//! field of their type with the value btl-core decodes, and nothing else.

mod tshark;

use std::path::PathBuf;

use btl_core::wire::{
    self, ControlRepr, Flags, HEADER_LEN, Header, HeaderRepr, Limits, MAGIC, PacketRepr, SEAL_LEN,
    Seal, Start, VERSION_MAJOR,
};
use btl_std::capture::{Capture, CaptureConfig, Direction};
use tshark::{Packet, Severity};

/// Every field of the dissector: a field it gains or loses must be added
/// here, and checked against btl-core by a golden vector.
const FIELDS: &[&str] = &[
    "btl.direction",
    "btl.type",
    "btl.flags",
    "btl.flags.checksum",
    "btl.flags.ack_request",
    "btl.flags.sealed",
    "btl.reserved",
    "btl.credits",
    "btl.seq",
    "btl.ack",
    "btl.body_len",
    "btl.hello.magic",
    "btl.hello.version_major",
    "btl.hello.version_minor",
    "btl.hello.link_index",
    "btl.hello.job",
    "btl.hello.rank",
    "btl.hello.capabilities",
    "btl.hello.capabilities.crc32c",
    "btl.hello.capabilities.job_key",
    "btl.hello.nonce",
    "btl.hello.max_body",
    "btl.hello.initial_credits",
    "btl.hello.reserved",
    "btl.hello.epoch",
    "btl.hello_ack.proof",
    "btl.send.tag",
    "btl.send.reserved",
    "btl.put.xfer_id",
    "btl.put.handle",
    "btl.put.offset",
    "btl.put.total_len",
    "btl.put.index",
    "btl.put.count",
    "btl.get.xfer_id",
    "btl.get.src_handle",
    "btl.get.src_offset",
    "btl.get.len",
    "btl.get.target_job",
    "btl.get.target_rank",
    "btl.get.reserved",
    "btl.get.dst_handle",
    "btl.get.dst_offset",
    "btl.ack.sack",
    "btl.close.reason",
    "btl.close.reserved",
    "btl.reject.xfer_id",
    "btl.reject.code",
    "btl.reject.reserved",
    "btl.done.xfer_id",
    "btl.notify.xfer_id",
    "btl.notify.handle",
    "btl.notify.offset",
    "btl.notify.len",
    "btl.notify.imm",
    "btl.key.key",
    "btl.key_info.key",
    "btl.key_info.code",
    "btl.key_info.access",
    "btl.key_info.access.read",
    "btl.key_info.access.write",
    "btl.key_info.flags",
    "btl.key_info.flags.device",
    "btl.key_info.reserved",
    "btl.key_info.len",
    "btl.key_info.device_key",
    "btl.key_info.base",
    "btl.cookie.cookie",
    "btl.payload",
    "btl.crc32c",
    "btl.seal",
];

/// Every expert item of the dissector: what it says of malformed frames.
const EXPERTS: &[&str] = &[
    "btl.expert.unknown_type",
    "btl.expert.bad_length",
    "btl.expert.truncated",
    "btl.expert.short",
    "btl.expert.trailing",
    "btl.expert.reserved_not_zero",
    "btl.expert.unknown_flags",
    "btl.expert.seq_not_zero",
    "btl.expert.bad_magic",
    "btl.expert.unsupported_version",
    "btl.expert.bad_checksum",
    "btl.expert.bad_field",
];

/// The job key of the golden vectors, and the processes of the sealed one:
/// (42, 3) seals for (42, 5), both started under this epoch.
const GOLDEN_KEY: &[u8] = b"golden job key";
const GOLDEN_EPOCH: u64 = 0x0102_0304_0506_0708;

/// A field's value as btl-core decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Number(u64),
    Bytes(Vec<u8>),
    Flag(bool),
}

use Value::{Bytes, Flag, Number};

/// The golden blocks of the book: name and bytes. A block is a
/// `<!-- golden: NAME -->` line followed by a fenced block of hex bytes,
/// where `#` starts a comment.
fn golden_blocks() -> Vec<(String, Vec<u8>)> {
    let path = tshark::repo().join("book/src/protocol.md");
    let book = std::fs::read_to_string(&path).expect("read the protocol chapter");
    let mut blocks = Vec::new();
    let mut lines = book.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- golden:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        assert_eq!(lines.next().map(str::trim), Some("```text"), "{name}");
        let mut bytes = Vec::new();
        for line in lines.by_ref().take_while(|line| line.trim() != "```") {
            let hex = line.split('#').next().unwrap_or_default();
            for token in hex.split_whitespace() {
                for pair in token.as_bytes().chunks(2) {
                    let pair = std::str::from_utf8(pair).expect("ascii");
                    bytes.push(u8::from_str_radix(pair, 16).expect("hex byte"));
                }
            }
        }
        blocks.push((name.trim().to_owned(), bytes));
    }
    assert!(blocks.len() >= 13, "a golden vector per packet type");
    blocks
}

/// The fields the dissector must show for `frame`, with btl-core's values.
fn expected(frame: &[u8], direction: Direction) -> Vec<(&'static str, Value)> {
    let (header, packet, len) = wire::parse(frame, &Limits::new(65536)).expect("golden decodes");
    assert_eq!(len, frame.len());
    let raw = Header::new_checked(frame).expect("header");
    let flag = |f: Flags| Flag(header.flags.contains(f));
    let mut fields = vec![
        (
            "btl.direction",
            Number(match direction {
                Direction::Out => 0,
                Direction::In => 1,
            }),
        ),
        ("btl.type", Number(header.packet_type as u64)),
        ("btl.flags", Number(header.flags.bits().into())),
        ("btl.flags.checksum", flag(Flags::CHECKSUM)),
        ("btl.flags.ack_request", flag(Flags::ACK_REQUEST)),
        ("btl.flags.sealed", flag(Flags::SEALED)),
        ("btl.reserved", Number(raw.reserved().into())),
        ("btl.credits", Number(header.credits.into())),
        ("btl.seq", Number(header.seq)),
        ("btl.ack", Number(header.ack)),
        ("btl.body_len", Number(header.body_len)),
    ];
    fields.extend(body_fields(&packet));
    if !packet.payload().is_empty() {
        fields.push(("btl.payload", Bytes(packet.payload().to_vec())));
    }
    let covered = HEADER_LEN + header.body_len as usize;
    if header.flags.contains(Flags::CHECKSUM) {
        fields.push(("btl.crc32c", Number(wire::crc32c(&frame[..covered]).into())));
    }
    if header.flags.contains(Flags::SEALED) {
        check_seal(frame, &header);
        fields.push(("btl.seal", Bytes(frame[frame.len() - SEAL_LEN..].to_vec())));
    }
    fields
}

/// The body's fields, reserved ones (which the decoder checked are zero)
/// included.
fn body_fields(packet: &PacketRepr<'_>) -> Vec<(&'static str, Value)> {
    let n = Number;
    match *packet {
        PacketRepr::Hello(h) => vec![
            ("btl.hello.magic", Bytes(MAGIC.to_vec())),
            ("btl.hello.version_major", n(VERSION_MAJOR.into())),
            ("btl.hello.version_minor", n(h.version_minor.into())),
            ("btl.hello.link_index", n(h.link_index.into())),
            ("btl.hello.job", n(h.job)),
            ("btl.hello.rank", n(h.rank.into())),
            ("btl.hello.capabilities", n(h.capabilities.bits().into())),
            (
                "btl.hello.capabilities.crc32c",
                Flag(h.capabilities.contains(wire::Capabilities::CRC32C)),
            ),
            (
                "btl.hello.capabilities.job_key",
                Flag(h.capabilities.contains(wire::Capabilities::JOB_KEY)),
            ),
            ("btl.hello.nonce", Bytes(h.nonce.to_vec())),
            ("btl.hello.max_body", n(h.max_body)),
            ("btl.hello.initial_credits", n(h.initial_credits.into())),
            ("btl.hello.reserved", n(0)),
            ("btl.hello.epoch", n(h.epoch)),
        ],
        PacketRepr::HelloAck(a) => vec![("btl.hello_ack.proof", Bytes(a.proof.to_vec()))],
        PacketRepr::Send { send, .. } => vec![
            ("btl.send.tag", n(send.tag.into())),
            ("btl.send.reserved", Bytes(vec![0; 7])),
        ],
        PacketRepr::Put { put, .. } => vec![
            ("btl.put.xfer_id", n(put.xfer_id)),
            ("btl.put.handle", n(put.handle)),
            ("btl.put.offset", n(put.offset)),
            ("btl.put.total_len", n(put.total_len)),
            ("btl.put.index", n(put.index.into())),
            ("btl.put.count", n(put.count.into())),
        ],
        PacketRepr::Ack(a) => vec![("btl.ack.sack", n(a.sack))],
        PacketRepr::Close(c) => vec![
            ("btl.close.reason", n(u8::from(c.reason).into())),
            ("btl.close.reserved", Bytes(vec![0; 7])),
        ],
        PacketRepr::Cookie(c) => vec![("btl.cookie.cookie", Bytes(c.cookie.to_vec()))],
        PacketRepr::Control(ControlRepr::Get(g)) => vec![
            ("btl.get.xfer_id", n(g.xfer_id)),
            ("btl.get.src_handle", n(g.src_handle)),
            ("btl.get.src_offset", n(g.src_offset)),
            ("btl.get.len", n(g.len)),
            ("btl.get.target_job", n(g.target_job)),
            ("btl.get.target_rank", n(g.target_rank.into())),
            ("btl.get.reserved", n(0)),
            ("btl.get.dst_handle", n(g.dst_handle)),
            ("btl.get.dst_offset", n(g.dst_offset)),
        ],
        PacketRepr::Control(ControlRepr::Reject(r)) => vec![
            ("btl.reject.xfer_id", n(r.xfer_id)),
            ("btl.reject.code", n(u8::from(r.code).into())),
            ("btl.reject.reserved", Bytes(vec![0; 7])),
        ],
        PacketRepr::Control(ControlRepr::Done(d)) => vec![("btl.done.xfer_id", n(d.xfer_id))],
        PacketRepr::Control(ControlRepr::Notify(m)) => vec![
            ("btl.notify.xfer_id", n(m.xfer_id)),
            ("btl.notify.handle", n(m.handle)),
            ("btl.notify.offset", n(m.offset)),
            ("btl.notify.len", n(m.len)),
            ("btl.notify.imm", n(m.imm)),
        ],
        PacketRepr::Control(ControlRepr::Key(k)) => vec![("btl.key.key", n(k.key))],
        PacketRepr::Control(ControlRepr::KeyInfo(k)) => {
            let (code, region) = match k.region {
                Ok(region) => (0, Some(region)),
                Err(code) => (u8::from(code), None),
            };
            let access = region.map_or(0, |r| r.access);
            let device = region.and_then(|r| r.device);
            vec![
                ("btl.key_info.key", n(k.key)),
                ("btl.key_info.code", n(code.into())),
                ("btl.key_info.access", n(access.into())),
                ("btl.key_info.access.read", Flag(access & 1 != 0)),
                ("btl.key_info.access.write", Flag(access & 2 != 0)),
                ("btl.key_info.flags", n(device.is_some().into())),
                ("btl.key_info.flags.device", Flag(device.is_some())),
                ("btl.key_info.reserved", Bytes(vec![0; 5])),
                ("btl.key_info.len", n(region.map_or(0, |r| r.len))),
                ("btl.key_info.device_key", n(device.map_or(0, |d| d.key))),
                ("btl.key_info.base", n(device.map_or(0, |d| d.base))),
            ]
        }
    }
}

/// Checks the golden sealed frame's seal as its receiver, (42, 5), does.
fn check_seal(frame: &[u8], header: &HeaderRepr) {
    let start = |rank| Start {
        job: 42,
        rank,
        epoch: GOLDEN_EPOCH,
    };
    let receiver = Seal::derive(GOLDEN_KEY, start(5), start(3));
    receiver
        .check(frame)
        .unwrap_or_else(|e| panic!("the golden {:?} seal checks: {e}", header.packet_type));
}

/// Whether tshark's `show` of a field is `value`.
fn shows(show: &str, value: &Value) -> bool {
    match value {
        Number(n) => {
            let parsed = match show.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => show.parse(),
            };
            parsed == Ok(*n)
        }
        Bytes(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            show.replace(':', "").eq_ignore_ascii_case(&hex)
        }
        Flag(set) => matches!(
            (show, set),
            ("1" | "True" | "true", true) | ("0" | "False" | "false", false)
        ),
    }
}

/// A fresh directory for this test's captures.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("dissector-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

fn direction(index: usize) -> Direction {
    if index.is_multiple_of(2) {
        Direction::Out
    } else {
        Direction::In
    }
}

/// Writes `frames` (the bytes at hand of each, and its whole length) to a
/// one-file capture on link 0, alternating directions, with at most
/// `snaplen` bytes of each, and dissects it.
fn dissect(name: &str, frames: &[(Vec<u8>, usize)], snaplen: u32) -> Vec<Packet> {
    let dir = scratch(name);
    let config = CaptureConfig {
        snaplen,
        ..CaptureConfig::new(dir.join("capture.pcapng"))
    };
    let mut capture = Capture::create(config.clone()).expect("create capture");
    capture
        .add_link(0, "golden", "the book's golden vectors")
        .expect("add link");
    for (i, (bytes, len)) in frames.iter().enumerate() {
        let time = 1_700_000_000_000_000_000 + i as u64 * 1000;
        capture
            .frame_prefix(0, direction(i), time, &[bytes], *len)
            .expect("write frame");
    }
    drop(capture);
    let packets = tshark::dissect(&config.file_path(0));
    assert_eq!(packets.len(), frames.len(), "one packet per frame");
    let _ = std::fs::remove_dir_all(&dir);
    packets
}

#[test]
fn golden_vectors_dissect_to_btl_cores_values() {
    let blocks = golden_blocks();
    let frames: Vec<(Vec<u8>, usize)> = blocks
        .iter()
        .map(|(_, bytes)| (bytes.clone(), bytes.len()))
        .collect();
    let packets = dissect("golden", &frames, 256);
    let mut checked = std::collections::BTreeSet::new();
    for (i, ((name, frame), packet)) in blocks.iter().zip(&packets).enumerate() {
        assert!(
            packet.protocols.iter().any(|p| p == "btl"),
            "{name}: dissected as {:?}",
            packet.protocols
        );
        let problems = packet.problems(Severity::Warning);
        assert!(problems.is_empty(), "{name}: {problems:?}");
        let expected = expected(frame, direction(i));
        for (field, value) in &expected {
            let shown = packet
                .field(field)
                .unwrap_or_else(|| panic!("{name}: no field {field}"));
            assert!(
                shows(&shown.show, value),
                "{name}: {field} shows {:?} ({}), btl-core decodes {value:?}",
                shown.show,
                shown.showname
            );
            checked.insert(*field);
        }
        let mut names: Vec<&str> = packet
            .fields_under("btl.")
            .map(|f| f.name.as_str())
            .collect();
        let mut wanted: Vec<&str> = expected.iter().map(|(field, _)| *field).collect();
        names.sort_unstable();
        wanted.sort_unstable();
        assert_eq!(names, wanted, "{name}: the fields shown, each once");
    }
    let all: std::collections::BTreeSet<&str> = FIELDS.iter().copied().collect();
    assert_eq!(checked, all, "every field is checked by a golden vector");
}

#[test]
fn dissector_fields_are_the_expected_ones() {
    let mut expected: Vec<String> = FIELDS
        .iter()
        .chain(EXPERTS)
        .map(|f| f.to_string())
        .collect();
    expected.sort();
    assert_eq!(tshark::field_names(), expected);
}

/// A frame the dissector must flag, and how.
struct Flagged {
    what: &'static str,
    /// The bytes captured.
    bytes: Vec<u8>,
    /// The frame's whole length.
    len: usize,
    /// The expert item it must show.
    expert: &'static str,
    /// Whether that is an error (else a note or a warning).
    error: bool,
}

#[test]
fn truncated_and_malformed_frames_are_flagged_without_dissector_errors() {
    let blocks = golden_blocks();
    let frame = |name: &str| {
        blocks
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, bytes)| bytes.clone())
            .unwrap_or_else(|| panic!("golden {name}"))
    };
    let put = frame("put");
    let mut long_put = put.clone();
    long_put.extend_from_slice(&[0x55; 1000]);
    long_put[24..32].copy_from_slice(&(44u64 + 1000).to_be_bytes());
    let mut unknown_type = frame("done");
    unknown_type[0] = 0x63;
    let mut bad_length = frame("done");
    bad_length[31] = 9;
    bad_length.push(0);
    let mut reserved = frame("close");
    reserved[HEADER_LEN + 3] = 1;
    let mut bad_crc = frame("send");
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let mut trailing = frame("done");
    trailing.extend_from_slice(&[0; 3]);
    let mut bad_magic = frame("hello");
    bad_magic[HEADER_LEN] = b'X';
    let mut bad_index = put.clone();
    bad_index[HEADER_LEN + 35] = 3;
    let mut unknown_flag = frame("done");
    unknown_flag[1] = 0x80;
    let mut cases = vec![
        Flagged {
            what: "a PUT longer than the snap length",
            len: long_put.len(),
            bytes: long_put,
            expert: "btl.expert.truncated",
            error: false,
        },
        Flagged {
            what: "half a header captured",
            bytes: put[..20].to_vec(),
            len: put.len(),
            expert: "btl.expert.truncated",
            error: false,
        },
    ];
    let whole = [
        ("half a header sent", put[..20].to_vec(), "short", true),
        ("an unknown type", unknown_type, "unknown_type", true),
        ("a DONE of 9 bytes", bad_length, "bad_length", true),
        ("a reserved byte set", reserved, "reserved_not_zero", false),
        ("a bad CRC32C", bad_crc, "bad_checksum", true),
        ("bytes after a datagram's frame", trailing, "trailing", true),
        ("a HELLO without the magic", bad_magic, "bad_magic", true),
        (
            "a PUT's index not below count",
            bad_index,
            "bad_field",
            false,
        ),
        ("an unknown flag", unknown_flag, "unknown_flags", false),
    ];
    for (what, bytes, expert, error) in whole {
        let expert = EXPERTS
            .iter()
            .find(|e| e.strip_prefix("btl.expert.") == Some(expert))
            .expect("a known expert item");
        cases.push(Flagged {
            what,
            len: bytes.len(),
            bytes,
            expert,
            error,
        });
    }
    let frames: Vec<(Vec<u8>, usize)> = cases.iter().map(|c| (c.bytes.clone(), c.len)).collect();
    // Room for every fixed field, not for the long PUT's data.
    let packets = dissect("flagged", &frames, 100);
    for (case, packet) in cases.iter().zip(&packets) {
        let what = case.what;
        assert!(packet.protocols.iter().any(|p| p == "btl"), "{what}");
        assert!(packet.field("btl.type").is_some(), "{what}: header shown");
        assert!(
            packet.field(case.expert).is_some(),
            "{what}: no {}",
            case.expert
        );
        let failures = packet.failures();
        assert!(failures.is_empty(), "{what}: {failures:?}");
        let errors = packet.problems(Severity::Error);
        assert_eq!(!errors.is_empty(), case.error, "{what}: {errors:?}");
    }
}
