//! A module's own capture of what it sends and receives
//! (`btl_<c>_capture`), over TCP and UDP on loopback: two modules
//! exchange messages of several sizes and a put, close, and tshark with
//! the repository's dissector reads each one's capture: every frame is
//! btl and whole as far as it was kept, both directions are there, the
//! handshake, the messages (one SEND each, of the length sent), the
//! acknowledgements and the goodbyes. A ring of tiny files keeps no more
//! files than it is given, each readable alone; a capture file that
//! cannot be made keeps the module from opening, with an error that says
//! why.

mod tshark;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, BtlError, Event, MemSlice, RemoteSlice, Tag};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_std::driver::module::Transport;
use btl_std::{Module, ModuleBuilder, OpenError};
use tshark::{Packet, Severity};

/// Longest any wait of the exchange may take.
const DEADLINE: Duration = Duration::from_secs(5);
const TAG: Tag = Tag(0x81);

/// btl's packet types, as `btl.type` shows them.
const HELLO: u64 = 1;
const HELLO_ACK: u64 = 2;
const SEND: u64 = 3;
const PUT: u64 = 4;
const ACK: u64 = 6;
const CLOSE: u64 = 7;
const COOKIE: u64 = 13;

/// A directory of the test's own, removed when it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("btl-capture-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a module of the test is opened: its component's name and the
/// builder's call.
trait Component {
    type Transport: Transport;
    const NAME: &'static str;
    fn open(builder: ModuleBuilder) -> Result<Module<Self::Transport>, OpenError>;
}

struct Tcp;
struct Udp;

impl Component for Tcp {
    type Transport = btl_std::transports::tcp::Tcp<btl_std::driver::net::Os>;
    const NAME: &'static str = "tcp";
    fn open(builder: ModuleBuilder) -> Result<btl_std::TcpModule, OpenError> {
        builder.tcp()
    }
}

impl Component for Udp {
    type Transport = btl_std::transports::udp::Udp<btl_std::driver::net::Os>;
    const NAME: &'static str = "udp";
    fn open(builder: ModuleBuilder) -> Result<btl_std::UdpModule, OpenError> {
        builder.udp()
    }
}

/// The builder of rank `rank` of job `job`, its card in `dir`, its
/// component's parameters `params` (short names: `capture`).
fn builder<C: Component>(
    dir: &Path,
    job: u64,
    rank: u32,
    params: &[(&str, String)],
) -> ModuleBuilder {
    let mut builder = ModuleBuilder::new(ProcName::new(job, rank))
        .ignore_environment()
        .on_loopback()
        .shared_dir(dir.join("cards"))
        .job_key("capture test");
    for (name, value) in params {
        builder = builder.param(&format!("btl_{}_{name}", C::NAME), value);
    }
    builder
}

/// Progresses both until `done` says so; fails past the deadline.
fn run<M: Btl>(a: &mut M, b: &mut M, what: &str, mut done: impl FnMut(&mut M, &mut M) -> bool) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        a.progress();
        b.progress();
    }
}

/// Sends `data` from `from`, retrying while the module has no room; what
/// `other` receives meanwhile is added to `got`.
fn send<M: Btl>(from: &mut M, other: &mut M, to: EndpointId, data: &[u8], got: &mut Vec<usize>) {
    run(from, other, "a send taken", |from, other| {
        receive(other, got);
        match from.send_copy(to, TAG, data) {
            Ok(()) => true,
            Err(BtlError::OutOfResource) => false,
            Err(e) => panic!("send of {} bytes: {e}", data.len()),
        }
    });
}

/// The lengths of the messages `m` received so far, added to `got`.
fn receive<M: Btl>(m: &mut M, got: &mut Vec<usize>) {
    while let Some(event) = m.poll_event() {
        if let Event::Received(message) = event {
            got.push(message.data.len());
        }
    }
}

/// What A and B sent each other: the lengths of their messages.
struct Sent {
    a: Vec<usize>,
    b: Vec<usize>,
}

/// A and B of a fresh job, both capturing under `dir` as `params` say
/// besides the path, exchange messages of `sizes` (A to B) and one back,
/// A puts `put` bytes into B, and both close: A first, B once it heard.
fn exchange<C: Component>(
    dir: &Path,
    job: u64,
    params: &[(&str, String)],
    sizes: &[usize],
    put: usize,
) -> Sent {
    let path = dir.join(format!("{}.{{rank}}.pcapng", C::NAME));
    let mut params = params.to_vec();
    params.push(("capture", path.display().to_string()));
    let mut a = C::open(builder::<C>(dir, job, 0, &params)).expect("A opens");
    let mut b = C::open(builder::<C>(dir, job, 1, &params)).expect("B opens");
    let b_at_a = btl_core::btl::add_proc(&mut a, ProcName::new(job, 1))
        .expect("add B")
        .expect("B reachable");
    let a_at_b = btl_core::btl::add_proc(&mut b, ProcName::new(job, 0))
        .expect("add A")
        .expect("A reachable");

    let mut got = Vec::new();
    for &size in sizes {
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        send(&mut a, &mut b, b_at_a, &data, &mut got);
    }
    run(&mut a, &mut b, "A's messages", |_, b| {
        receive(b, &mut got);
        got.len() == sizes.len()
    });
    assert_eq!(got, sizes, "B received A's messages in order");
    let reply = vec![7u8; 40];
    let mut replies = Vec::new();
    send(&mut b, &mut a, a_at_b, &reply, &mut replies);
    run(&mut a, &mut b, "B's reply", |a, _| {
        receive(a, &mut replies);
        !replies.is_empty()
    });

    let source = a
        .register_mem(vec![5u8; put], Access::empty())
        .expect("A's region");
    let target = b
        .register_mem(vec![0u8; put], Access::REMOTE_WRITE)
        .expect("B's region");
    let local = MemSlice {
        handle: source,
        offset: 0,
        len: put as u64,
    };
    let remote = RemoteSlice {
        key: target.remote_key(),
        offset: 0,
        len: put as u64,
    };
    a.put(b_at_a, local, remote, 1).expect("put");
    let mut put_done = None;
    run(&mut a, &mut b, "the put", |a, b| {
        receive(b, &mut Vec::new());
        while let Some(event) = a.poll_event() {
            if let Event::PutComplete { result, .. } = event {
                put_done = Some(result);
            }
        }
        put_done.is_some()
    });
    assert_eq!(put_done, Some(Ok(())), "the put");

    // Nothing left unacknowledged either way, so that each finalize's
    // wait ends at once; then A leaves, and B once it heard A's CLOSE.
    run(&mut a, &mut b, "everything acknowledged", |a, b| {
        receive(a, &mut Vec::new());
        receive(b, &mut Vec::new());
        a.outstanding() == 0 && b.outstanding() == 0
    });
    let undelivered = a.finalize();
    assert!(undelivered.is_empty(), "A: {undelivered}");
    let start = Instant::now();
    let mut left = false;
    while !left && start.elapsed() < DEADLINE {
        b.progress();
        while let Some(event) = b.poll_event() {
            left |= matches!(event, Event::PeerLeft { .. });
        }
    }
    assert!(left, "B heard A leave");
    let undelivered = b.finalize();
    assert!(undelivered.is_empty(), "B: {undelivered}");
    drop((a, b));
    Sent {
        a: sizes.to_vec(),
        b: vec![reply.len()],
    }
}

/// A number as tshark shows it: decimal, or hexadecimal after `0x`.
fn number(show: &str) -> u64 {
    match show.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => show.parse(),
    }
    .unwrap_or_else(|_| panic!("`{show}` is not a number"))
}

/// Field `name` of `packet` as a number.
fn field(packet: &Packet, name: &str) -> u64 {
    number(
        &packet
            .field(name)
            .unwrap_or_else(|| panic!("no {name} in {packet:?}"))
            .show,
    )
}

/// Whether a frame was sent (0) or received (1) by the capturing side.
const SENT: u64 = 0;
const RECEIVED: u64 = 1;

/// Dissects the capture at `path` and checks that it holds nothing but
/// btl frames that dissect cleanly (truncated ones are fine); returns its
/// packets.
fn clean(path: &Path) -> Vec<Packet> {
    let packets = tshark::dissect(path);
    assert!(!packets.is_empty(), "{}: no packets", path.display());
    for (i, packet) in packets.iter().enumerate() {
        assert!(
            packet.protocols.iter().any(|p| p == "btl"),
            "{} packet {i} is not btl: {:?}",
            path.display(),
            packet.protocols
        );
        let problems = packet.problems(Severity::Error);
        assert!(
            problems.is_empty(),
            "{} packet {i}: {problems:?}",
            path.display()
        );
    }
    packets
}

/// Checks the capture of one side at `path`, which sent messages of
/// `sent` lengths; `types` must all appear. Returns its packets.
fn check_capture(path: &Path, sent: &[usize], types: &[u64]) -> Vec<Packet> {
    let packets = clean(path);
    let name = path.display();
    let directions: BTreeSet<u64> = packets.iter().map(|p| field(p, "btl.direction")).collect();
    assert_eq!(
        directions,
        BTreeSet::from([SENT, RECEIVED]),
        "{name}: both ways"
    );
    let seen: BTreeSet<u64> = packets.iter().map(|p| field(p, "btl.type")).collect();
    for t in types {
        assert!(
            seen.contains(t),
            "{name}: no packet of type {t} in {seen:?}"
        );
    }
    // One SEND per message, whatever went again: of the length sent.
    let mut sends = BTreeMap::new();
    for p in &packets {
        if field(p, "btl.type") == SEND && field(p, "btl.direction") == SENT {
            let len = field(p, "btl.body_len") - 8;
            let again = sends.insert(field(p, "btl.seq"), len);
            assert!(
                again.is_none_or(|l| l == len),
                "{name}: a SEND sent again changed"
            );
        }
    }
    let mut lengths: Vec<u64> = sends.into_values().collect();
    let mut want: Vec<u64> = sent.iter().map(|&l| l as u64).collect();
    lengths.sort_unstable();
    want.sort_unstable();
    assert_eq!(lengths, want, "{name}: the SENDs are the messages sent");
    packets
}

/// The capture files in `dir` of the module whose path had `stem`.
fn files(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the capture directory")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(stem) && name.ends_with(".pcapng")
        })
        .collect();
    files.sort();
    files
}

fn captures_both_ways<C: Component>(job: u64, sizes: &[usize], put: usize, types: &[u64]) {
    let scratch = Scratch::new(C::NAME);
    let sent = exchange::<C>(&scratch.0, job, &[], sizes, put);
    for (rank, sent) in [(0, &sent.a), (1, &sent.b)] {
        let stem = format!("{}.{rank}.", C::NAME);
        let files = files(&scratch.0, &stem);
        assert_eq!(files.len(), 1, "one file of rank {rank}: {files:?}");
        let packets = check_capture(&files[0], sent, types);
        if rank == 0 {
            let puts = packets.iter().filter(|p| field(p, "btl.type") == PUT);
            assert!(puts.count() > 0, "A's capture shows its put");
        }
    }
}

#[test]
fn tcp_modules_capture_what_they_send_and_receive() {
    captures_both_ways::<Tcp>(
        0x7c01,
        &[16, 3000, 100 << 10],
        200 << 10,
        &[HELLO, HELLO_ACK, SEND, PUT, ACK, CLOSE],
    );
}

#[test]
fn udp_modules_capture_what_they_send_and_receive() {
    captures_both_ways::<Udp>(
        0x7c02,
        &[16, 1000, 4000],
        100 << 10,
        &[HELLO, HELLO_ACK, SEND, PUT, ACK, CLOSE, COOKIE],
    );
}

/// A ring of two files of 4 KiB, and enough frames for several: the
/// older files are gone, the two left read alone.
fn keeps_its_ring<C: Component>(job: u64, sizes: &[usize]) {
    let scratch = Scratch::new(&format!("{}-ring", C::NAME));
    let params = [
        ("capture_file_size", "4k".to_owned()),
        ("capture_files", "2".to_owned()),
    ];
    exchange::<C>(&scratch.0, job, &params, sizes, 64 << 10);
    for rank in 0..2 {
        let stem = format!("{}.{rank}.", C::NAME);
        let files = files(&scratch.0, &stem);
        assert_eq!(files.len(), 2, "two files of rank {rank}: {files:?}");
        let numbers: Vec<u64> = files
            .iter()
            .map(|file| {
                let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let number = name
                    .strip_prefix(&stem)
                    .and_then(|n| n.strip_suffix(".pcapng"));
                number.and_then(|n| n.parse().ok()).expect("a file number")
            })
            .collect();
        assert!(
            numbers[0] >= 1 && numbers[1] == numbers[0] + 1,
            "the newest two files, older ones deleted: {files:?}"
        );
        for file in &files {
            clean(file);
        }
    }
}

#[test]
fn a_tcp_capture_keeps_its_ring() {
    keeps_its_ring::<Tcp>(0x7c03, &[16; 200]);
}

#[test]
fn a_udp_capture_keeps_its_ring() {
    keeps_its_ring::<Udp>(0x7c04, &[16; 200]);
}

#[test]
fn a_capture_file_that_cannot_be_made_keeps_the_module_from_opening() {
    let scratch = Scratch::new("unwritable");
    // A directory that cannot be made: its parent is a file.
    let file = scratch.0.join("a file");
    std::fs::write(&file, b"").expect("a file");
    let path = file.join("btl.pcapng");
    let params = [("capture", path.display().to_string())];
    let error = Tcp::open(builder::<Tcp>(&scratch.0, 0x7c05, 0, &params))
        .expect_err("no directory for the capture");
    let text = error.to_string();
    assert!(text.contains("btl.0.pcapng"), "names the file: {text}");
    assert!(
        text.contains("File exists") || text.contains("Not a directory"),
        "says what the system said: {text}"
    );
    assert!(text.contains("btl_tcp_capture"), "says what to set: {text}");
    let error = Udp::open(builder::<Udp>(&scratch.0, 0x7c05, 1, &params))
        .expect_err("no directory for the capture");
    assert!(error.to_string().contains("btl_udp_capture"), "{error}");
}
