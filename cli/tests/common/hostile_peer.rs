//! What the hostile tests' attackers send `btl serve`: frames built with
//! `btl_core::wire`, fake peers that complete a real handshake (as a
//! `btl connect` client would, over TCP or UDP) and then misbehave,
//! sockets dialled from a chosen source address, deterministic junk, and a
//! pacer that spreads an attack of a fixed size over a fixed time.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use btl_core::btl::{Access, RegSlot, Registrations};
use btl_core::endpoint::ProcName;
use btl_core::wire::{
    self, AckRepr, Capabilities, CloseReason, CloseRepr, ControlRepr, Flags, GetRepr, HEADER_LEN,
    HeaderRepr, HelloAckRepr, HelloRepr, Limits, NONCE_LEN, PROOF_LEN, PacketRepr, PacketType,
    PutRepr, SendRepr, VERSION_MINOR,
};

/// The benchmark's ping tag (`PING` in `cli/src/bench/mod.rs`): the
/// server answers a complete ping with a pong of the same length.
pub const PING_TAG: u8 = 0xF0;
/// The benchmark's header at the start of every send's payload: the
/// message's total length (u64 BE), the sender's window (u32 BE), 4 zero
/// bytes.
pub const BENCH_HEADER: usize = 16;
/// How long a fake peer waits for the server's side of a handshake.
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(3);
/// How long dialling the server may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest body a fake peer accepts, announced in its HELLO.
const MAX_BODY: u64 = 1 << 20;

/// A small deterministic generator (xorshift64*): an attack sends the same
/// bytes on every run, so a failure replays.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `range` (`start..end`, end exclusive, start < end).
    pub fn below(&mut self, range: std::ops::Range<usize>) -> usize {
        range.start + (self.next_u64() % (range.end - range.start) as u64) as usize
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// Spreads `total` steps of an attack evenly over `span`: step `i` waits
/// until `i / total` of the span has passed. An attacker that falls behind
/// (a slow server) does not sleep; it catches up.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    start: Instant,
    step: Duration,
}

impl Pacer {
    /// A pacer for `total` steps over `span`, starting now.
    pub fn new(total: u64, span: Duration) -> Self {
        Pacer {
            start: Instant::now(),
            step: span.div_f64(total.max(1) as f64),
        }
    }

    /// Waits for step `i`'s turn.
    pub fn turn(&self, i: u64) {
        let due = self.start + self.step.mul_f64(i as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

/// A TCP connection to `server` from address `source` (any port): the
/// attackers that must not share the legit client's source address bind
/// to another loopback address (all of 127/8 is loopback). `rcvbuf`, if
/// set, is the socket's receive buffer, fixed before the connect so that
/// the kernel does not autotune it (a peer that never reads then stops
/// the server's writes early).
pub fn dial(server: SocketAddr, source: IpAddr, rcvbuf: Option<usize>) -> io::Result<TcpStream> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(server),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size)?;
    }
    socket.bind(&SockAddr::from(SocketAddr::new(source, 0)))?;
    socket.connect_timeout(&SockAddr::from(server), DIAL_TIMEOUT)?;
    let stream = TcpStream::from(socket);
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HANDSHAKE_WAIT))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(stream)
}

/// A whole frame: `header` (type and body length as the packet needs) and
/// `packet`.
pub fn frame(header: HeaderRepr, packet: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0; HEADER_LEN + packet.buffer_len() + wire::CHECKSUM_LEN];
    let len = wire::emit(&header, packet, &mut buf).expect("a frame of a valid packet");
    buf.truncate(len);
    buf
}

/// What a fake peer's headers say of the server's packets: the cumulative
/// acknowledgement (every reliable packet of the server's numbered below
/// `ack` has arrived) and the running total of credits granted to the
/// server beyond the HELLO's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acking {
    /// The header's `ack`.
    pub ack: u64,
    /// The header's `credits`.
    pub credits: u32,
}

/// What a fake peer that has received nothing says: `ack` 1 (no reliable
/// packet of the server's has arrived), no credit granted beyond its
/// HELLO's.
pub const NOTHING_RECEIVED: Acking = Acking { ack: 1, credits: 0 };

/// `packet` framed as the `seq`th after a handshake, acknowledging the
/// server's first frame.
fn after_handshake(seq: u64, packet: &PacketRepr<'_>) -> Vec<u8> {
    numbered(seq, NOTHING_RECEIVED, packet)
}

/// `packet` framed with sequence number `seq` and what `acking` says.
fn numbered(seq: u64, acking: Acking, packet: &PacketRepr<'_>) -> Vec<u8> {
    frame(
        HeaderRepr {
            seq,
            ack: acking.ack,
            credits: acking.credits,
            ..HeaderRepr::new(packet)
        },
        packet,
    )
}

/// The HELLO a fake process `from` sends on its link `link_index`, with a
/// nonce from `rng`. Its epoch is derived from its name, so that every
/// connection of one fake process announces the same start of it.
pub fn hello(from: ProcName, link_index: u16, rng: &mut Rng) -> HelloRepr {
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut nonce);
    HelloRepr {
        version_minor: VERSION_MINOR,
        link_index,
        job: from.job,
        rank: from.rank,
        capabilities: Capabilities::empty(),
        nonce,
        max_body: MAX_BODY,
        initial_credits: 16,
        epoch: from.job.rotate_left(17) ^ u64::from(from.rank) ^ 0x5eed,
    }
}

/// The frame of `hello`.
pub fn hello_frame(hello: HelloRepr) -> Vec<u8> {
    let packet = PacketRepr::Hello(hello);
    frame(HeaderRepr::new(&packet), &packet)
}

/// A HELLO_ACK with an all-zero proof: what a process without a job key
/// sends (`btl serve` has none in these tests, so it checks no proof).
pub fn hello_ack_frame() -> Vec<u8> {
    let packet = PacketRepr::HelloAck(HelloAckRepr {
        proof: [0; PROOF_LEN],
    });
    frame(HeaderRepr::new(&packet), &packet)
}

/// A SEND with sequence number `seq` and `tag`, carrying the benchmark's
/// header (a message of `total` bytes, window 1) and `data`: one piece of
/// a benchmark message as `btl connect` sends it. `ack` 1 says that no
/// reliable packet of the server's has arrived.
pub fn bench_send(seq: u64, tag: u8, total: u64, data: &[u8]) -> Vec<u8> {
    bench_send_acking(seq, NOTHING_RECEIVED, tag, total, data)
}

/// As [`bench_send`], with a header that says what `acking` says.
pub fn bench_send_acking(seq: u64, acking: Acking, tag: u8, total: u64, data: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(BENCH_HEADER + data.len());
    payload.extend_from_slice(&total.to_be_bytes());
    payload.extend_from_slice(&1u32.to_be_bytes());
    payload.extend_from_slice(&[0; 4]);
    payload.extend_from_slice(data);
    let packet = PacketRepr::Send {
        send: SendRepr { tag },
        payload: &payload,
    };
    numbered(seq, acking, &packet)
}

/// A complete benchmark PING of `len` bytes in one SEND.
pub fn ping(seq: u64, len: usize) -> Vec<u8> {
    ping_acking(seq, NOTHING_RECEIVED, len)
}

/// As [`ping`], with a header that says what `acking` says.
pub fn ping_acking(seq: u64, acking: Acking, len: usize) -> Vec<u8> {
    bench_send_acking(seq, acking, PING_TAG, len as u64, &vec![0x5a; len])
}

/// An ACK that says what `acking` says, and nothing selectively: what
/// answers a keepalive.
pub fn ack_frame(acking: Acking) -> Vec<u8> {
    let packet = PacketRepr::Ack(AckRepr { sack: 0 });
    frame(
        HeaderRepr {
            ack: acking.ack,
            credits: acking.credits,
            ..HeaderRepr::new(&packet)
        },
        &packet,
    )
}

/// A GET with sequence number `seq`.
pub fn get_frame(seq: u64, get: GetRepr) -> Vec<u8> {
    after_handshake(seq, &PacketRepr::Control(ControlRepr::Get(get)))
}

/// A PUT with sequence number `seq`, `data`, and the CHECKSUM flag (its
/// CRC32C trailer after the body), whether or not the HELLOs agreed on
/// checksums.
pub fn checksummed_put(seq: u64, put: PutRepr, data: &[u8]) -> Vec<u8> {
    let packet = PacketRepr::Put { put, data };
    frame(
        HeaderRepr {
            flags: Flags::CHECKSUM,
            seq,
            ack: NOTHING_RECEIVED.ack,
            ..HeaderRepr::new(&packet)
        },
        &packet,
    )
}

/// Whether a frame of the server's asks for an acknowledgement soon: a
/// keepalive (or a credit probe).
pub fn is_probe(header: &HeaderRepr) -> bool {
    header.flags.contains(Flags::ACK_REQUEST)
}

/// The key a process gives peers for its first registration: the first
/// slot's first generation (`btl serve` registers its send buffer, and
/// only that, as it starts).
pub fn first_registration_key() -> u64 {
    let mut table = Registrations::<Vec<u8>, [RegSlot<Vec<u8>>; 1]>::default();
    table
        .register(vec![0], Access::REMOTE_READ)
        .map(|h| h.remote_key().0)
        .unwrap_or_else(|_| panic!("an empty table registers a region"))
}

/// A CLOSE with sequence number `seq` and `reason`.
pub fn close_frame(seq: u64, reason: CloseReason) -> Vec<u8> {
    let packet = PacketRepr::Close(CloseRepr { reason });
    after_handshake(seq, &packet)
}

/// A frame header of a type no version of the protocol has (0x7F), with an
/// empty body: a protocol violation however it is read.
pub fn unknown_type_frame() -> Vec<u8> {
    let mut bytes = vec![0u8; HEADER_LEN];
    bytes[0] = 0x7F;
    bytes
}

/// Reads frames from `stream` until the server's HELLO has come, and its
/// HELLO_ACK too if `ack` (within [`HANDSHAKE_WAIT`]); the HELLO. A CLOSE,
/// an end of stream or undecodable bytes are errors: the server refused.
pub fn read_server_handshake(stream: &mut TcpStream, ack: bool) -> io::Result<HelloRepr> {
    let deadline = Instant::now() + HANDSHAKE_WAIT;
    let limits = Limits::new(MAX_BODY);
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let (mut hello, mut acked) = (None, false);
    loop {
        loop {
            match wire::parse(&buf, &limits) {
                Ok((header, packet, used)) => {
                    match (header.packet_type, packet) {
                        (_, PacketRepr::Hello(h)) => hello = Some(h),
                        (PacketType::HelloAck, _) => acked = true,
                        (PacketType::Close, p) => {
                            return Err(io::Error::new(
                                io::ErrorKind::ConnectionRefused,
                                format!("the server closed the handshake: {p:?}"),
                            ));
                        }
                        _ => {}
                    }
                    buf.drain(..used);
                }
                Err(wire::WireError::Truncated { .. }) => break,
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the server sent no frame: {e:?}"),
                    ));
                }
            }
        }
        if let Some(hello) = hello
            && (acked || !ack)
        {
            return Ok(hello);
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no HELLO (and HELLO_ACK) from the server",
            ));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server ended the stream during the handshake",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The server's process name, from the HELLO it sends every connection
/// (a connection from `source` that then closes).
pub fn server_name(server: SocketAddr, source: IpAddr) -> io::Result<ProcName> {
    let mut stream = dial(server, source, None)?;
    let hello = read_server_handshake(&mut stream, false)?;
    let name = ProcName::new(hello.job, hello.rank);
    let _ = stream.shutdown(Shutdown::Write);
    drain_until_closed(&mut stream, Duration::from_millis(200));
    Ok(name)
}

/// A fake process over TCP that completed a real handshake with the
/// server: its HELLO (to replay elsewhere), the server's, and the next
/// sequence number of its reliable packets.
#[derive(Debug)]
pub struct FakePeer {
    /// The connection.
    pub stream: TcpStream,
    /// The HELLO this peer sent.
    pub hello_frame: Vec<u8>,
    /// The server's HELLO.
    pub server: HelloRepr,
    /// The sequence number of this peer's next reliable packet.
    pub next_seq: u64,
    /// Bytes of the server's read and not yet a whole frame.
    rx: Vec<u8>,
}

impl FakePeer {
    /// Connects from `source` and completes a handshake as process `me`
    /// (HELLO, the server's HELLO and HELLO_ACK, our HELLO_ACK).
    pub fn join(
        server: SocketAddr,
        source: IpAddr,
        me: ProcName,
        rcvbuf: Option<usize>,
        rng: &mut Rng,
    ) -> io::Result<Self> {
        let mut stream = dial(server, source, rcvbuf)?;
        let hello_frame = hello_frame(hello(me, 0, rng));
        stream.write_all(&hello_frame)?;
        let server = read_server_handshake(&mut stream, true)?;
        stream.write_all(&hello_ack_frame())?;
        Ok(FakePeer {
            stream,
            hello_frame,
            server,
            next_seq: 1,
            rx: Vec::new(),
        })
    }

    /// Reads what the server has sent, without waiting, and hands each
    /// whole frame to `each` in order. The end of the stream (after the
    /// frames before it) or bytes that are no frame are errors.
    pub fn read_available(
        &mut self,
        mut each: impl FnMut(&HeaderRepr, &PacketRepr<'_>),
    ) -> io::Result<()> {
        self.stream.set_nonblocking(true)?;
        let mut chunk = [0u8; 16 << 10];
        let read = loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    break Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server ended the stream",
                    ));
                }
                Ok(n) => self.rx.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.stream.set_nonblocking(false)?;
        let limits = Limits::new(MAX_BODY);
        let mut used = 0;
        loop {
            match wire::parse(&self.rx[used..], &limits) {
                Ok((header, packet, n)) => {
                    each(&header, &packet);
                    used += n;
                }
                Err(wire::WireError::Truncated { .. }) => break,
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the server sent no frame: {e:?}"),
                    ));
                }
            }
        }
        self.rx.drain(..used);
        read
    }

    /// Reads what the server has sent, without waiting, and answers a
    /// keepalive among it with an ACK that says what `acking` says; an
    /// error once the server has ended the connection.
    pub fn answer_probes(&mut self, acking: Acking) -> io::Result<()> {
        let mut probed = false;
        self.read_available(|header, _| probed |= is_probe(header))?;
        if probed {
            self.stream.write_all(&ack_frame(acking))?;
        }
        Ok(())
    }

    /// Takes the next sequence number.
    pub fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Ends the connection as a finishing process does: a CLOSE with
    /// reason Shutdown, then the end of the stream.
    pub fn close_cleanly(mut self) {
        let seq = self.seq();
        let _ = self
            .stream
            .write_all(&close_frame(seq, CloseReason::Shutdown));
        let _ = self.stream.shutdown(Shutdown::Write);
        drain_until_closed(&mut self.stream, Duration::from_millis(200));
    }
}

/// Reads and discards what `stream` brings until its end, an error or
/// `wait` passes.
pub fn drain_until_closed(stream: &mut TcpStream, wait: Duration) {
    let deadline = Instant::now() + wait;
    let mut sink = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// A UDP socket bound to `source` (any port), its reads bounded.
pub fn udp_socket(source: IpAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0))?;
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    Ok(socket)
}

/// Shows the UDP server at `server` that `socket` receives at its
/// address, as a client must before the server keeps anything for it:
/// sends `hello`, and echoes the COOKIE the server answers it with.
/// Whatever else comes first is skipped.
pub fn pass_cookie(socket: &UdpSocket, server: SocketAddr, hello: &[u8]) -> io::Result<()> {
    let deadline = Instant::now() + HANDSHAKE_WAIT;
    let mut buf = vec![0u8; 1 << 16];
    while Instant::now() < deadline {
        socket.send_to(hello, server)?;
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if from != server {
            continue;
        }
        if let Ok((_, PacketRepr::Cookie(_))) =
            wire::parse_datagram(&buf[..n], &Limits::new(MAX_BODY))
        {
            socket.send_to(&buf[..n], server)?;
            return Ok(());
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "no COOKIE from the server",
    ))
}

/// A fake process over UDP that completed a real handshake with the
/// server from a socket of its own.
#[derive(Debug)]
pub struct DatagramPeer {
    /// Its socket.
    pub socket: UdpSocket,
    /// The server.
    pub server: SocketAddr,
}

impl DatagramPeer {
    /// How often the HELLO goes again while the server's side of the
    /// handshake has not come.
    const HELLO_REPEAT: Duration = Duration::from_millis(250);

    /// Completes a handshake with `server` as process `me` from a socket
    /// bound to `source`: HELLO, the server's COOKIE echoed, HELLO again
    /// (and again while unanswered), the server's HELLO and HELLO_ACK, our
    /// HELLO_ACK.
    pub fn join(
        server: SocketAddr,
        source: IpAddr,
        me: ProcName,
        rng: &mut Rng,
    ) -> io::Result<Self> {
        let socket = udp_socket(source)?;
        socket.set_read_timeout(Some(Self::HELLO_REPEAT))?;
        let hello = hello_frame(hello(me, 0, rng));
        pass_cookie(&socket, server, &hello)?;
        let limits = Limits::new(MAX_BODY);
        let deadline = Instant::now() + HANDSHAKE_WAIT;
        let (mut hello_seen, mut acked, mut buf) = (false, false, vec![0u8; 1 << 16]);
        let mut sent_at: Option<Instant> = None;
        while !(hello_seen && acked) {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HELLO and HELLO_ACK from the server",
                ));
            }
            if sent_at.is_none_or(|t| t.elapsed() >= Self::HELLO_REPEAT) {
                socket.send_to(&hello, server)?;
                sent_at = Some(Instant::now());
            }
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            if from != server {
                continue;
            }
            match wire::parse_datagram(&buf[..n], &limits) {
                Ok((_, PacketRepr::Hello(_))) => hello_seen = true,
                Ok((_, PacketRepr::HelloAck(_))) => acked = true,
                Ok((_, PacketRepr::Close(c))) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!("the server closed the handshake: {:?}", c.reason),
                    ));
                }
                _ => {}
            }
        }
        socket.send_to(&hello_ack_frame(), server)?;
        Ok(DatagramPeer { socket, server })
    }

    /// Sends one frame as one datagram.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        self.socket.send_to(frame, self.server).map(|_| ())
    }

    /// Reads what the server has sent, without waiting, and answers a
    /// keepalive among it with an ACK that says what `acking` says.
    /// Datagrams that are no frame are skipped, as the engine skips them.
    pub fn answer_probes(&mut self, acking: Acking) -> io::Result<()> {
        self.socket.set_nonblocking(true)?;
        let (limits, mut buf, mut probed) = (Limits::new(MAX_BODY), vec![0u8; 1 << 16], false);
        let read = loop {
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) if from == self.server => {
                    if let Ok((header, _)) = wire::parse_datagram(&buf[..n], &limits) {
                        probed |= is_probe(&header);
                    }
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.socket.set_nonblocking(false)?;
        read?;
        if probed {
            self.send(&ack_frame(acking))?;
        }
        Ok(())
    }
}

/// Sends UDP datagrams under any source address and port, as an attacker
/// off the path does: a raw socket that writes the IPv4 header itself
/// (root, or `CAP_NET_RAW`).
pub struct Forger(socket2::Socket);

impl Forger {
    /// The raw socket; fails without the privilege.
    pub fn new() -> io::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP))?;
        socket.set_header_included_v4(true)?;
        Ok(Forger(socket))
    }

    /// Sends `payload` to `to` as a datagram from `from`. The kernel fills
    /// in the IP header's checksum and identification; the UDP checksum
    /// is left out (0, which IPv4 allows).
    pub fn send(&self, from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> io::Result<()> {
        let udp_len = u16::try_from(8 + payload.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
        let ip_len = udp_len + 20;
        let mut packet = Vec::with_capacity(usize::from(ip_len));
        // Version 4, 5 words of header, no TOS; length; id 0, don't
        // fragment; TTL 64, UDP; checksum 0 (the kernel's to fill in).
        packet.extend([0x45, 0]);
        packet.extend(ip_len.to_be_bytes());
        packet.extend([0, 0, 0x40, 0, 64, 17, 0, 0]);
        packet.extend(from.ip().octets());
        packet.extend(to.ip().octets());
        packet.extend(from.port().to_be_bytes());
        packet.extend(to.port().to_be_bytes());
        packet.extend(udp_len.to_be_bytes());
        packet.extend([0, 0]);
        packet.extend(payload);
        let to = SocketAddr::V4(SocketAddrV4::new(*to.ip(), 0));
        self.0.send_to(&packet, &to.into())?;
        Ok(())
    }
}
