//! The writer's files read back with a small pcapng reader of the tests'
//! own, written from the specification rather than from the writer.

use std::io;
use std::path::{Path, PathBuf};

use super::block::EXPORTED_PDU_HEADER;
use super::{Capture, CaptureConfig, Direction};

/// A pcapng block as the reader understood it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Block {
    Section {
        application: String,
    },
    Interface {
        link_type: u16,
        snaplen: u32,
        name: String,
        description: String,
        tsresol: u8,
    },
    Packet {
        interface: u32,
        time_ns: u64,
        original_len: u32,
        data: Vec<u8>,
        flags: u32,
    },
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The options from `at` to the end of `body`: code and value.
fn options(body: &[u8], mut at: usize) -> Vec<(u16, Vec<u8>)> {
    let mut found = Vec::new();
    loop {
        let code = u16_at(body, at);
        let len = usize::from(u16_at(body, at + 2));
        if code == 0 {
            assert_eq!(len, 0, "end of options has no value");
            assert_eq!(at + 4, body.len(), "nothing after the end of options");
            return found;
        }
        found.push((code, body[at + 4..at + 4 + len].to_vec()));
        at += 4 + len.div_ceil(4) * 4;
    }
}

fn text(options: &[(u16, Vec<u8>)], code: u16) -> String {
    options
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, v)| String::from_utf8(v.clone()).expect("utf-8 option"))
        .unwrap_or_default()
}

/// Reads a whole little-endian pcapng file.
fn read(path: &Path) -> Vec<Block> {
    let bytes = std::fs::read(path).expect("read capture");
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let block_type = u32_at(&bytes, at);
        let len = u32_at(&bytes, at + 4) as usize;
        assert_eq!(len % 4, 0, "blocks are aligned");
        assert_eq!(u32_at(&bytes, at + len - 4), len as u32, "length repeated");
        let body = &bytes[at + 8..at + len - 4];
        blocks.push(match block_type {
            0x0a0d_0d0a => {
                assert_eq!(u32_at(body, 0), 0x1a2b_3c4d, "byte-order magic");
                assert_eq!((u16_at(body, 4), u16_at(body, 6)), (1, 0), "version");
                assert_eq!(&body[8..16], &[0xff; 8], "section length -1");
                Block::Section {
                    application: text(&options(body, 16), 4),
                }
            }
            1 => {
                let opts = options(body, 8);
                let tsresol = opts.iter().find(|(c, _)| *c == 9).expect("if_tsresol");
                Block::Interface {
                    link_type: u16_at(body, 0),
                    snaplen: u32_at(body, 4),
                    name: text(&opts, 2),
                    description: text(&opts, 3),
                    tsresol: tsresol.1[0],
                }
            }
            6 => {
                let captured = u32_at(body, 12) as usize;
                let opts = options(body, 20 + captured.div_ceil(4) * 4);
                let flags = opts.iter().find(|(c, _)| *c == 2).expect("epb_flags");
                Block::Packet {
                    interface: u32_at(body, 0),
                    time_ns: u64::from(u32_at(body, 4)) << 32 | u64::from(u32_at(body, 8)),
                    original_len: u32_at(body, 16),
                    data: body[20..20 + captured].to_vec(),
                    flags: u32::from_le_bytes(flags.1[..].try_into().expect("4 bytes")),
                }
            }
            other => panic!("unexpected block type {other:#x}"),
        });
        at += len;
    }
    blocks
}

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("btl-capture-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test directory");
    dir
}

fn with_header(frame: &[u8]) -> Vec<u8> {
    [&EXPORTED_PDU_HEADER[..], frame].concat()
}

fn interface(name: &str, description: &str, snaplen: u32) -> Block {
    Block::Interface {
        link_type: 252,
        snaplen: snaplen + 12,
        name: name.into(),
        description: description.into(),
        tsresol: 9,
    }
}

#[test]
fn file_reads_back() {
    let dir = dir("reads-back");
    let config = CaptureConfig::new(dir.join("btl.pcapng"));
    let mut capture = Capture::create(config.clone()).expect("create");
    capture
        .add_link(7, "tcp/1", "peer (1, 2) over TCP")
        .expect("add link");
    let frame: Vec<u8> = (0..45).collect();
    let time = 1_700_000_000_123_456_789;
    capture
        .frame(7, Direction::Out, time, &[&frame[..10], &[], &frame[10..]])
        .expect("frame");
    capture
        .frame(7, Direction::In, time + 1, &[&frame[..3]])
        .expect("frame");
    capture.flush().expect("flush");
    assert_eq!(capture.files(), vec![dir.join("btl.0.pcapng")]);
    assert_eq!(
        read(&config.file_path(0)),
        vec![
            Block::Section {
                application: "btl-std".into()
            },
            interface("tcp/1", "peer (1, 2) over TCP", 256),
            Block::Packet {
                interface: 0,
                time_ns: time,
                original_len: 12 + 45,
                data: with_header(&frame),
                flags: 0b10,
            },
            Block::Packet {
                interface: 0,
                time_ns: time + 1,
                original_len: 12 + 3,
                data: with_header(&frame[..3]),
                flags: 0b01,
            },
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cuts_a_frame_longer_than_snaplen() {
    let dir = dir("snaplen");
    let config = CaptureConfig {
        snaplen: 40,
        ..CaptureConfig::new(dir.join("cut.pcapng"))
    };
    let mut capture = Capture::create(config.clone()).expect("create");
    capture.add_link(1, "udp", "").expect("add link");
    let frame = [5u8; 100];
    capture
        .frame(1, Direction::In, 1, &[&frame[..30], &frame[30..]])
        .expect("frame");
    capture
        .frame_prefix(1, Direction::Out, 2, &[&frame[..40]], 5000)
        .expect("frame prefix");
    drop(capture);
    let blocks = read(&config.file_path(0));
    assert_eq!(blocks[1], interface("udp", "", 40));
    let packets: Vec<(Vec<u8>, u32)> = blocks
        .into_iter()
        .filter_map(|b| match b {
            Block::Packet {
                data, original_len, ..
            } => Some((data, original_len)),
            _ => None,
        })
        .collect();
    assert_eq!(
        packets,
        vec![
            (with_header(&frame[..40]), 112),
            (with_header(&frame[..40]), 5012)
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_a_frame_on_an_unknown_link() {
    let dir = dir("unknown-link");
    let mut capture = Capture::create(CaptureConfig::new(dir.join("x.pcapng"))).expect("create");
    let refused = capture.frame(3, Direction::In, 0, &[b"frame"]);
    assert_eq!(
        refused.map_err(|e| e.kind()),
        Err(io::ErrorKind::InvalidInput)
    );
    capture.add_link(3, "a", "b").expect("add link");
    capture.remove_link(3);
    assert!(capture.frame(3, Direction::In, 0, &[b"frame"]).is_err());
    let none = CaptureConfig {
        files: 0,
        ..CaptureConfig::new(dir.join("y.pcapng"))
    };
    assert_eq!(
        Capture::create(none).map(drop).map_err(|e| e.kind()),
        Err(io::ErrorKind::InvalidInput)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gives_a_reused_link_a_new_interface() {
    let dir = dir("reused-link");
    let config = CaptureConfig::new(dir.join("btl.pcapng"));
    let mut capture = Capture::create(config.clone()).expect("create");
    capture.add_link(1, "tcp/1", "first peer").expect("add");
    capture.add_link(2, "tcp/2", "other").expect("add");
    capture.frame(1, Direction::In, 1, &[b"a"]).expect("frame");
    capture.add_link(1, "tcp/1", "second peer").expect("re-add");
    capture.frame(1, Direction::In, 2, &[b"b"]).expect("frame");
    capture.frame(2, Direction::In, 3, &[b"c"]).expect("frame");
    drop(capture);
    let blocks = read(&config.file_path(0));
    assert_eq!(blocks[4], interface("tcp/1", "second peer", 256));
    let interfaces: Vec<u32> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Packet { interface, .. } => Some(*interface),
            _ => None,
        })
        .collect();
    assert_eq!(interfaces, vec![0, 2, 1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn file_names_number_the_ring() {
    let named = |path: &str, index| CaptureConfig::new(path).file_path(index);
    assert_eq!(named("d/btl.pcapng", 0), Path::new("d/btl.0.pcapng"));
    assert_eq!(named("d/btl.pcapng", 12), Path::new("d/btl.12.pcapng"));
    assert_eq!(named("capture", 3), Path::new("capture.3"));
}

#[test]
fn ring_keeps_its_newest_files_each_readable_alone() {
    let dir = dir("ring");
    let config = CaptureConfig {
        file_bytes: 600,
        files: 3,
        ..CaptureConfig::new(dir.join("ring.pcapng"))
    };
    let mut capture = Capture::create(config.clone()).expect("create");
    capture.add_link(10, "tcp/10", "ten").expect("add");
    capture.add_link(20, "udp/20", "twenty").expect("add");
    let frame = [1u8; 60];
    let frames = 40u64;
    for time in 0..frames {
        if time == 30 {
            capture.remove_link(20);
        }
        let link = if time % 2 == 0 || time >= 30 { 10 } else { 20 };
        capture
            .frame(link, Direction::Out, time, &[&frame])
            .expect("frame");
    }
    capture.flush().expect("flush");
    let files = capture.files();
    assert_eq!(files.len(), 3);
    let existing = (0..100)
        .map(|i| config.file_path(i))
        .filter(|p| p.exists())
        .collect::<Vec<_>>();
    assert_eq!(existing, files, "only the ring's files are left");

    let mut times = Vec::new();
    for path in &files {
        let blocks = read(path);
        let size = std::fs::metadata(path).expect("metadata").len();
        let declared: Vec<&Block> = blocks
            .iter()
            .skip(1)
            .take_while(|b| matches!(b, Block::Interface { .. }))
            .collect();
        assert!(matches!(blocks[0], Block::Section { .. }), "{path:?}");
        assert!(!declared.is_empty(), "{path:?} declares its links");
        let packets: Vec<&Block> = blocks.iter().skip(1 + declared.len()).collect();
        assert!(size <= 600 || packets.len() == 1, "{path:?}: {size} bytes");
        for packet in packets {
            let Block::Packet {
                interface, time_ns, ..
            } = packet
            else {
                panic!("{path:?}: only packets after the interfaces")
            };
            let Block::Interface { name, .. } = declared[*interface as usize] else {
                panic!("interface")
            };
            let expected = if *time_ns % 2 == 0 || *time_ns >= 30 {
                "tcp/10"
            } else {
                "udp/20"
            };
            assert_eq!(name, expected, "frame {time_ns}");
            times.push(*time_ns);
        }
    }
    let last = read(files.last().expect("a file"));
    assert_eq!(
        last[1..2],
        [interface("tcp/10", "ten", 256)],
        "a removed link is not declared again"
    );
    assert!(!matches!(last[2], Block::Interface { .. }));
    let first = times[0];
    assert!(first > 0, "the oldest frames are gone");
    assert_eq!(times, (first..frames).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_capture_is_made_with_its_directories_and_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let base = dir("private");
    let path = base.join("job").join("btl.pcapng");
    let config = CaptureConfig::new(&path);
    let first = config.file_path(0);
    let mut capture = Capture::create(config).expect("made with its directory");
    capture.flush().expect("flushed");
    let mode = std::fs::metadata(&first)
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "mode {mode:o}: the owner's alone");
    let _ = std::fs::remove_dir_all(&base);
}
