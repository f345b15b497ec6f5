//! Fair reading over real loopback sockets: a peer that keeps its TCP
//! connection full does not hold the module on that connection. A fake
//! process completes a real handshake with a module, then writes the same
//! SEND again and again (duplicates, which the engine reads and drops),
//! without end and without pause; meanwhile an ordinary module connects
//! to the same module and sends it a message, which must arrive.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::ProcName;
use btl_core::wire::{
    self, Capabilities, HEADER_LEN, HeaderRepr, HelloAckRepr, HelloRepr, Limits, PROOF_LEN,
    PacketRepr, PacketType, SendRepr, VERSION_MINOR,
};
use btl_std::bootstrap::SharedDir;

mod common;
use common::{add, job, tcp};

/// The tag of the ordinary peer's message.
const MESSAGE_TAG: u8 = 0x42;
/// The tag of the flood's SEND.
const FLOOD_TAG: u8 = 0x43;
/// The flooded module's socket receive buffer: larger than its largest
/// read (256 KiB), so that the flood keeps each read full, as a fast
/// reader's autotuned buffer is (a read that comes back short is taken
/// for the socket drained, and ends the read however long it took). The
/// kernel holds it to `net.core.rmem_max`.
const RCVBUF: usize = 4 << 20;
/// Bytes the flooder writes before the ordinary peer starts: more than
/// the two sockets' buffers hold, so the module is reading the flood.
const FLOOD_UNDER_WAY: u64 = 32 << 20;
/// How long the ordinary peer's message may take, flood or not (the
/// handshake timeout). Without fair reading it never comes.
const DELIVERY: Duration = Duration::from_secs(5);
/// How long any other step of the test may take.
const STEP: Duration = Duration::from_secs(10);

/// A whole frame of `packet`, `seq` and `ack` as given.
fn frame(packet: &PacketRepr<'_>, seq: u64, ack: u64) -> Vec<u8> {
    let header = HeaderRepr {
        seq,
        ack,
        ..HeaderRepr::new(packet)
    };
    let mut buf = vec![0; HEADER_LEN + packet.buffer_len() + wire::CHECKSUM_LEN];
    let len = wire::emit(&header, packet, &mut buf).expect("a frame of a valid packet");
    buf.truncate(len);
    buf
}

/// A raw connection to `at` that completes a handshake as process `me`
/// (no job key: a HELLO_ACK with no proof), as a `btl` peer would.
fn join(at: SocketAddr, me: ProcName) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&at, STEP)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(STEP))?;
    stream.set_write_timeout(Some(Duration::from_millis(100)))?;
    let hello = PacketRepr::Hello(HelloRepr {
        version_minor: VERSION_MINOR,
        link_index: 0,
        job: me.job,
        rank: me.rank,
        capabilities: Capabilities::empty(),
        nonce: [7; wire::NONCE_LEN],
        max_body: 1 << 20,
        initial_credits: 16,
        epoch: 1,
    });
    stream.write_all(&frame(&hello, 0, 0))?;
    // The module's HELLO and HELLO_ACK.
    let limits = Limits::new(1 << 20);
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut acked = false;
    while !acked {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&chunk[..n]);
        while let Ok((header, _, used)) = wire::parse(&got, &limits) {
            acked |= header.packet_type == PacketType::HelloAck;
            got.drain(..used);
        }
    }
    let ack = PacketRepr::HelloAck(HelloAckRepr {
        proof: [0; PROOF_LEN],
    });
    stream.write_all(&frame(&ack, 0, 0))?;
    Ok(stream)
}

/// Writes the same SEND (sequence number 1) to `stream` without pause
/// until `stop`, counting the bytes in `written`: the first is
/// delivered, every other is a duplicate that the module reads and
/// drops. The module's answers are never read.
fn flood(mut stream: TcpStream, written: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let payload = [0x5a; 32];
    let send = PacketRepr::Send {
        send: SendRepr { tag: FLOOD_TAG },
        payload: &payload,
    };
    let burst = frame(&send, 1, 1).repeat(4096);
    std::thread::spawn(move || {
        let mut at = 0;
        while !stop.load(Ordering::Relaxed) {
            match stream.write(&burst[at..]) {
                Ok(n) => {
                    written.fetch_add(n as u64, Ordering::Relaxed);
                    at = (at + n) % burst.len();
                }
                // The write timeout: the module reads slower than this
                // writes, which is the point.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    })
}

/// The flooded module, `me`, in a thread of its own (without fair
/// reading, it is stuck in the flood's connection): it says where it
/// listens, then that the ordinary peer's message came, and serves until
/// `stop`.
fn flooded(
    me: ProcName,
    boot: Arc<SharedDir>,
    stop: Arc<AtomicBool>,
    listening: Sender<SocketAddr>,
    delivered: Sender<()>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut setup = tcp(1);
        setup.tcp.rcvbuf = RCVBUF;
        let mut m = setup.build(me, None, boot).expect("the flooded module");
        let at = m.transport().contacts().next().expect("a contact").addr;
        let _ = listening.send(at);
        while !stop.load(Ordering::Relaxed) {
            let _ = m.wait(Duration::from_millis(10));
            while let Some(event) = m.poll_event() {
                if matches!(event, Event::Received(msg) if msg.tag == Tag(MESSAGE_TAG)) {
                    let _ = delivered.send(());
                }
            }
        }
    })
}

/// Waits, at most `wait`, for `written` to reach `bytes`.
fn until_written(written: &AtomicU64, bytes: u64, wait: Duration) -> bool {
    let start = Instant::now();
    while written.load(Ordering::Relaxed) < bytes {
        if start.elapsed() > wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Progresses `peer` until the flooded module says the message came, at
/// most `wait`; how long it took.
fn until_delivered<B: Btl>(
    peer: &mut B,
    delivered: &Receiver<()>,
    wait: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < wait {
        let _ = peer.progress();
        while peer.poll_event().is_some() {}
        if delivered.recv_timeout(Duration::from_millis(1)).is_ok() {
            return Some(start.elapsed());
        }
    }
    None
}

#[test]
fn a_peer_that_keeps_its_connection_full_does_not_starve_another() {
    let (boot, dir, victim, ordinary) = job(0xfa1e);
    let flooder = ProcName::new(victim.job, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let (listening, at) = mpsc::channel();
    let (said_delivered, delivered) = mpsc::channel();
    let server = flooded(
        victim,
        boot.clone(),
        stop.clone(),
        listening,
        said_delivered,
    );
    let at = at.recv_timeout(STEP).expect("the flooded module started");

    let stream = join(at, flooder).expect("the flooder's handshake");
    let written = Arc::new(AtomicU64::new(0));
    let writer = flood(stream, written.clone(), stop.clone());
    let under_way = until_written(&written, FLOOD_UNDER_WAY, STEP);

    // An ordinary peer, while the flood goes on.
    let mut peer = tcp(1)
        .build(ordinary, None, boot)
        .expect("the ordinary peer");
    let to = add(&mut peer, victim);
    let desc = peer
        .prepare_src(to, b"hello", 0, Order(0), DescFlags::BTL_OWNERSHIP)
        .expect("a descriptor");
    let _ = peer.send(to, desc, Tag(MESSAGE_TAG)).expect("send");
    let took = until_delivered(&mut peer, &delivered, DELIVERY);

    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the flooder");
    server.join().expect("the flooded module");
    drop(peer);
    let _ = std::fs::remove_dir_all(dir);
    assert!(under_way, "the flooded module read no flood");
    let Some(took) = took else {
        panic!("the message of a peer beside a flood did not arrive within {DELIVERY:?}");
    };
    eprintln!("delivered beside the flood in {took:?}");
}
