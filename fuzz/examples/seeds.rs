//! Writes the named seeds under `fuzz/seeds/<target>/`: small, meaningful
//! inputs built with btl-core's own encoders (valid frames of every type, a
//! peer's opening of a link, valid transfer machine messages, complete
//! handshakes), so that every fuzz run starts from inputs that get past
//! the decoders. Run it again after a format change:
//!
//! ```sh
//! cd fuzz && cargo run --example seeds
//! ```
//!
//! It overwrites the named seeds it writes and leaves the other files in
//! the seed directories (the minimized corpus of past runs) alone.

use std::fs;
use std::path::Path;

use btl_cli::bench::{HEADER, Header};
use btl_core::btl::{RemoteKey, Tag};
use btl_core::engine::handshake::LocalHello;
use btl_core::wire::{
    self, AckRepr, CloseReason, CloseRepr, ControlRepr, CookieRepr, DeviceKey, DoneRepr, Flags,
    GetRepr, HeaderRepr, HelloAckRepr, KeyInfoRepr, KeyRegion, KeyRepr, NONCE_LEN, NotifyRepr,
    PacketRepr, PutRepr, RejectCode, RejectRepr, SendRepr, hello_proof,
};
use btl_core::xfer::wire as xfer;
use btl_fuzz::bench_message;
use btl_fuzz::engine_input::{self, Carried};
use btl_fuzz::handshake::{
    self as hs, CHECKSUM, CONNECTING, KEY, KEYED, OTHER_KEY, Op, PEER, PEER_CHECKSUM,
};

/// Named inputs of one target.
type Seeds = Vec<(String, Vec<u8>)>;

/// A frame of `packet` with sequence number `seq`, with a CRC32C trailer if
/// `checksum`.
fn frame(packet: &PacketRepr<'_>, seq: u64, checksum: bool) -> Vec<u8> {
    let mut flags = Flags::empty();
    flags.set(Flags::CHECKSUM, checksum);
    let header = HeaderRepr {
        flags,
        seq,
        ..HeaderRepr::new(packet)
    };
    let mut buf = vec![0; 4096];
    let len = wire::emit(&header, packet, &mut buf).expect("a seed frame encodes");
    buf.truncate(len);
    buf
}

/// One packet of every type, each with its sequence number on a link that
/// starts with them in this order.
fn every_packet() -> Vec<(&'static str, PacketRepr<'static>, u64)> {
    let hello = hs::peer(0).repr();
    vec![
        ("hello", PacketRepr::Hello(hello), 0),
        (
            "hello-ack",
            PacketRepr::HelloAck(HelloAckRepr { proof: [0; 32] }),
            0,
        ),
        (
            "send",
            PacketRepr::Send {
                send: SendRepr { tag: 7 },
                payload: b"hello",
            },
            1,
        ),
        (
            "put",
            PacketRepr::Put {
                put: PutRepr {
                    xfer_id: 1,
                    handle: 2,
                    offset: 0,
                    total_len: 4,
                    index: 0,
                    count: 1,
                },
                data: b"data",
            },
            2,
        ),
        (
            "get",
            PacketRepr::Control(ControlRepr::Get(GetRepr {
                xfer_id: 2,
                src_handle: 3,
                src_offset: 8,
                len: 16,
                target_job: 7,
                target_rank: 0,
                dst_handle: 4,
                dst_offset: 0,
            })),
            3,
        ),
        ("ack", PacketRepr::Ack(AckRepr { sack: 0b101 }), 0),
        (
            "reject",
            PacketRepr::Control(ControlRepr::Reject(RejectRepr {
                xfer_id: 2,
                code: RejectCode::OutOfBounds,
            })),
            4,
        ),
        (
            "done",
            PacketRepr::Control(ControlRepr::Done(DoneRepr { xfer_id: 1 })),
            5,
        ),
        (
            "notify",
            PacketRepr::Control(ControlRepr::Notify(NotifyRepr {
                xfer_id: 1,
                handle: 3,
                offset: 0,
                len: 4,
                imm: 9,
            })),
            6,
        ),
        (
            "key",
            PacketRepr::Control(ControlRepr::Key(KeyRepr { key: 3 })),
            7,
        ),
        (
            "key_info",
            PacketRepr::Control(ControlRepr::KeyInfo(KeyInfoRepr {
                key: 3,
                region: Ok(KeyRegion {
                    len: 64,
                    access: 0b11,
                    device: Some(DeviceKey { key: 9, base: 0 }),
                }),
            })),
            8,
        ),
        // Unnumbered: over datagrams, a server's answer to a stranger.
        (
            "cookie",
            PacketRepr::Cookie(CookieRepr { cookie: [0xc0; 16] }),
            0,
        ),
        (
            "close",
            PacketRepr::Close(CloseRepr {
                reason: CloseReason::Normal,
            }),
            9,
        ),
    ]
}

fn parse_packet() -> Seeds {
    let mut seeds = Vec::new();
    for (name, packet, seq) in every_packet() {
        seeds.push((name.to_owned(), frame(&packet, seq, false)));
        seeds.push((format!("{name}-crc"), frame(&packet, seq, true)));
    }
    // Sealed as the target's `A` seals what it sends its `B`.
    let seal = wire::Seal::derive(
        b"fuzz",
        wire::Start {
            job: 1,
            rank: 0,
            epoch: 1,
        },
        wire::Start {
            job: 1,
            rank: 1,
            epoch: 2,
        },
    );
    for (name, packet, seq) in every_packet() {
        if seq != 0 {
            seeds.push((format!("{name}-sealed"), sealed_frame(&packet, seq, &seal)));
        }
    }
    seeds
}

/// A peer opening an accepted link (no key): its HELLO, a HELLO_ACK, then
/// data; over a stream in reads of several sizes, and as datagrams, one
/// frame each.
fn engine_input() -> Seeds {
    let frames: Vec<Vec<u8>> = every_packet()
        .into_iter()
        .map(|(_, packet, seq)| frame(&packet, seq, false))
        .collect();
    let hello = vec![frame(&PacketRepr::Hello(hs::peer(0).repr()), 0, false)];
    // Past the credits: more SENDs than the engine grants (4).
    let mut flood = frames[..2].to_vec();
    for seq in 1..=8 {
        let send = PacketRepr::Send {
            send: SendRepr { tag: 7 },
            payload: b"more",
        };
        flood.push(frame(&send, seq, false));
    }
    let datagrams = Carried::Datagram { keyed: false };
    let keyed = keyed_link();
    [
        (
            "link-in-one-byte-reads",
            Carried::Stream { read: 1 },
            &frames,
        ),
        (
            "link-in-61-byte-reads",
            Carried::Stream { read: 61 },
            &frames,
        ),
        ("hello-in-7-byte-reads", Carried::Stream { read: 7 }, &hello),
        ("link-in-datagrams", datagrams, &frames),
        ("past-the-credits-in-datagrams", datagrams, &flood),
        (
            "sealed-link-in-datagrams",
            Carried::Datagram { keyed: true },
            &keyed,
        ),
        (
            "past-the-credits-in-128-byte-reads",
            Carried::Stream { read: 128 },
            &flood,
        ),
    ]
    .into_iter()
    .map(|(name, how, frames)| (name.to_owned(), engine_input::input(how, frames)))
    .collect()
}

/// A keyed peer opening a link with the target's keyed engine over
/// datagrams (its HELLO, and a HELLO_ACK that proves the key over the
/// engine's own HELLO), then a packet of every other type sealed as that
/// peer seals them, forgeries among them (unsealed, sealed with another
/// key), and last its sealed CLOSE.
fn keyed_link() -> Vec<Vec<u8>> {
    let framing = btl_core::engine::Datagram { mtu: 1500 };
    let ours = engine_input::engine_hello(framing, true).expect("the engine says HELLO");
    let peer = wire::HelloRepr {
        version_minor: wire::VERSION_MINOR,
        link_index: 0,
        job: 2,
        rank: 0,
        capabilities: wire::Capabilities::JOB_KEY,
        nonce: [9; NONCE_LEN],
        max_body: 1 << 16,
        initial_credits: 8,
        epoch: 5,
    };
    let start = |h: &wire::HelloRepr| wire::Start {
        job: h.job,
        rank: h.rank,
        epoch: h.epoch,
    };
    let seal = wire::Seal::derive(engine_input::KEY, start(&peer), start(&ours));
    let forger = wire::Seal::derive(b"another job", start(&peer), start(&ours));
    let proof = hello_proof(engine_input::KEY, &peer, &ours);
    let mut frames = vec![
        frame(&PacketRepr::Hello(peer), 0, false),
        frame(&PacketRepr::HelloAck(HelloAckRepr { proof }), 0, false),
    ];
    for (_, packet, seq) in every_packet() {
        if seq != 0 && !matches!(packet, PacketRepr::Close(_)) {
            frames.push(sealed_frame(&packet, seq, &seal));
        }
    }
    let close = PacketRepr::Close(CloseRepr {
        reason: CloseReason::ProtocolError,
    });
    frames.push(frame(&close, 0, false));
    frames.push(sealed_frame(&close, 0, &forger));
    frames.push(sealed_frame(&close, 0, &seal));
    frames
}

/// [`frame`] with a seal.
fn sealed_frame(packet: &PacketRepr<'_>, seq: u64, seal: &wire::Seal) -> Vec<u8> {
    let header = HeaderRepr {
        flags: Flags::SEALED,
        seq,
        ..HeaderRepr::new(packet)
    };
    let mut buf = vec![0; header.frame_len().expect("a length")];
    wire::emit(&header, packet, &mut buf).expect("a seed frame encodes");
    seal.seal_frame(&mut buf);
    buf
}

/// Benchmark messages as a client sends them: a ping in three pieces, a
/// window's acknowledgement (a header alone), a fetch notice, and pieces
/// that break the protocol (an overrun, a piece of another message, a
/// notice in the middle of a message, a claim past the bound).
fn bench_message() -> Seeds {
    let header = |total: u64| Header {
        total,
        window: 64,
        fetch: false,
    };
    let piece = |total: u64, payload: usize| {
        let mut p = header(total).emit().to_vec();
        p.resize(HEADER + payload, 0xAB);
        p
    };
    let notice = |total: u64| {
        header(total)
            .notice(RemoteKey(0x0001_0000).slice(0, total))
            .to_vec()
    };
    let ping = Tag(0xF0);
    type Named = (&'static str, Vec<(Tag, Vec<u8>)>);
    let seeds: [Named; 6] = [
        ("fetch-notice", vec![(ping, notice(4096))]),
        (
            "notice-inside-a-message",
            vec![(ping, piece(8, 4)), (ping, notice(8))],
        ),
        (
            "ping-in-three-pieces",
            vec![
                (ping, piece(30, 10)),
                (ping, piece(30, 10)),
                (ping, piece(30, 10)),
            ],
        ),
        ("window-ack", vec![(Tag(0xF3), piece(0, 0))]),
        ("overrun", vec![(ping, piece(8, 4)), (ping, piece(8, 5))]),
        (
            "interleaved",
            vec![(ping, piece(8, 4)), (Tag(0xF2), piece(8, 4))],
        ),
    ];
    let mut out: Seeds = seeds
        .into_iter()
        .map(|(name, pieces)| (name.to_owned(), bench_message::input(4096, &pieces)))
        .collect();
    out.push((
        "claims-past-the-bound".to_owned(),
        bench_message::input(4096, &[(ping, piece(256 << 20, 1))]),
    ));
    out
}

fn xfer_message() -> Seeds {
    let mut msg = xfer::msg_header(Tag(0x61), 0x0102_0304_0506_0708).to_vec();
    msg.extend(b"hello");
    vec![
        ("msg".to_owned(), msg),
        (
            "msg-empty".to_owned(),
            xfer::msg_header(Tag(0x7f), 1).to_vec(),
        ),
        ("done-ok".to_owned(), xfer::done(true, 0x0A0B, 300).to_vec()),
        ("done-failed".to_owned(), xfer::done(false, 3, 0).to_vec()),
    ]
}

/// A handshake input: the flags, then the operations.
fn ops(flags: u8, ops: &[Op]) -> Vec<u8> {
    let mut input = vec![flags];
    input.extend(ops.iter().map(|op| op.byte()));
    input
}

/// A `Frame` operation delivering `packet`.
fn frame_op(packet: &PacketRepr<'_>, checksum: bool) -> Vec<u8> {
    let frame = frame(packet, 0, checksum);
    let mut op = vec![Op::Frame.byte(), u8::try_from(frame.len()).expect("short")];
    op.extend(frame);
    op
}

fn hello_body(hello: &LocalHello) -> Vec<u8> {
    let mut body = [0; 64];
    hello.repr().emit(&mut body);
    let mut op = vec![Op::HelloBody.byte()];
    op.extend(body);
    op
}

fn handshake() -> Seeds {
    use Op::*;
    let exchange = [Drain, PeerHello, Drain, PeerAck, Drain];
    let both_crc = KEYED | CONNECTING | CHECKSUM | PEER_CHECKSUM;
    let mut seeds = vec![
        ("unkeyed-accepting", ops(0, &exchange)),
        ("unkeyed-connecting", ops(CONNECTING, &exchange)),
        ("keyed-accepting", ops(KEYED, &exchange)),
        ("keyed-connecting-checksums", ops(both_crc, &exchange)),
        (
            "keyed-wrong-key-then-right",
            ops(
                KEYED,
                &[Drain, PeerHello, Drain, WrongKeyAck, PeerAck, Drain],
            ),
        ),
        (
            "ack-before-hello",
            ops(KEYED, &[PeerAck, Drain, PeerHello, PeerAck, Drain]),
        ),
        (
            "datagram-repeats",
            ops(
                0,
                &[
                    Drain, PeerHello, Drain, Repeat, Drain, RepeatAck, Drain, PeerAck, Drain,
                ],
            ),
        ),
        (
            // Itself, another rank, the peer with the key flipped, then the peer.
            "hostile-hellos-connecting",
            vec![
                KEYED | CONNECTING,
                Drain.byte(),
                HelloVariant.byte(),
                0,
                HelloVariant.byte(),
                5,
                HelloVariant.byte(),
                0x81,
                PeerHello.byte(),
                PeerHello.byte(),
                Drain.byte(),
                PeerAck.byte(),
                Drain.byte(),
            ],
        ),
    ];

    // The keyed exchange again, from encoded bodies and frames.
    let local = hs::local(KEYED);
    let peer = hs::peer(KEYED | PEER_CHECKSUM);
    let proof = hello_proof(KEY, &peer.repr(), &local.repr());
    let mut frames = vec![KEYED, Drain.byte()];
    frames.extend(frame_op(&PacketRepr::Hello(peer.repr()), true));
    frames.push(Drain.byte());
    frames.extend(frame_op(
        &PacketRepr::HelloAck(HelloAckRepr { proof }),
        true,
    ));
    frames.push(Drain.byte());
    seeds.push(("keyed-exchange-in-frames", frames));

    let mut bodies = vec![KEYED | CONNECTING, Drain.byte()];
    bodies.extend(hello_body(&peer));
    bodies.push(AckBody.byte());
    bodies.extend(proof);
    bodies.push(Drain.byte());
    seeds.push(("keyed-exchange-in-bodies", bodies));

    // The peer's HELLO, then a proof made with another key.
    let stranger = LocalHello {
        me: PEER,
        nonce: [0x33; NONCE_LEN],
        ..peer
    };
    let mut other = vec![KEYED, Drain.byte()];
    other.extend(hello_body(&stranger));
    other.push(AckBody.byte());
    other.extend(hello_proof(OTHER_KEY, &stranger.repr(), &local.repr()));
    seeds.push(("keyed-bad-proof-in-bodies", other));

    seeds
        .into_iter()
        .map(|(name, input)| (name.to_owned(), input))
        .collect()
}

/// Side-channel messages of the `oob` CPC from the fake peers: a REQ from
/// each (one more than the transport's bound), what an answer would look
/// like, timeouts in between.
fn cpc_message() -> Seeds {
    use btl_fuzz::cpc_message::{self as cm, PEERS};
    use btl_verbs::cpc::{Kind, MessageRepr, QpCard, RejectReason};
    use btl_verbs::provider::{Gid, Mtu, QpNum};
    let message = |from: usize, kind: Kind, attempt: u32| {
        MessageRepr {
            kind,
            from: PEERS[from],
            attempt,
            incarnation: 7,
            card: QpCard {
                qpn: QpNum(0x500 + from as u32),
                psn: 0x1234,
                lid: 1,
                gid: Gid::default(),
                mtu: Mtu::M4096,
            },
        }
        .emit()
        .to_vec()
    };
    let req = |from| (from, false, message(from, Kind::Request, 1));
    vec![
        ("request".into(), cm::input(&[req(0)])),
        (
            "request-each".into(),
            cm::input(&[req(0), req(1), req(2), req(3)]),
        ),
        (
            "request-twice-then-time-out".into(),
            cm::input(&[
                req(0),
                req(0),
                (1, true, Vec::new()),
                (1, true, Vec::new()),
                (1, true, Vec::new()),
                (1, true, Vec::new()),
                (1, true, Vec::new()),
                req(0),
            ]),
        ),
        (
            "request-then-ready".into(),
            cm::input(&[req(1), (1, false, message(1, Kind::ReadyToUse, 1))]),
        ),
        (
            "strays".into(),
            cm::input(&[
                (2, false, message(2, Kind::Reply, 9)),
                (2, false, message(2, Kind::ReadyToUse, 9)),
                (2, false, message(2, Kind::Reject(RejectReason::Closing), 9)),
                // Sent by one peer, naming another.
                (3, false, message(0, Kind::Request, 1)),
            ]),
        ),
    ]
}

/// Inputs of `ring_input`: the data area of a ring with records in it
/// (one of them wrapped behind a skip), then a script of pushes, one that
/// scribbles the consumer's position.
fn ring_input() -> Seeds {
    use btl_core::ring::{self, Consumer, Producer};
    use core::sync::atomic::{AtomicU32, Ordering};
    let words: Vec<AtomicU32> = (0..ring::words_for(64))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    let mut p = Producer::attach(&words).expect("a ring");
    let mut c = Consumer::attach(&words).expect("a ring");
    let mut out = [0u8; 256];
    for (kind, len) in [(1u8, 8usize), (2, 100), (3, 40)] {
        p.push(kind, &[&vec![kind; len]]).expect("room");
    }
    // Read the first two: the next record wraps behind a skip.
    c.pop(&mut out).expect("sound");
    c.pop(&mut out).expect("sound");
    p.push(4, &[&[4; 90]]).expect("room");
    let memory: Vec<u8> = words[ring::CONTROL_WORDS..]
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    let pushes: Vec<u8> = [(8u8, 1u8), (100, 2), (100, 3), (100, 4), (8, 5)]
        .iter()
        .flat_map(|&(len, kind)| [len, kind])
        .collect();
    let mut scribbling = memory.clone();
    scribbling.extend_from_slice(&pushes);
    scribbling.extend_from_slice(&[0xFF, 0, 0x10, 0, 0, 0]);
    scribbling.extend_from_slice(&pushes);
    let mut clean = memory.clone();
    clean.extend_from_slice(&pushes);
    vec![
        ("records-and-a-skip".into(), memory),
        ("pushes".into(), clean),
        ("a-scribbled-position".into(), scribbling),
    ]
}

/// Inputs of `sm_input`: a peer's records as a module reads them, each a
/// kind, a length and its bytes: a message, a put of two pieces into the
/// module's registration (key of its first registration), a get of it,
/// answers to the module's own put and get, and a goodbye.
fn sm_input() -> Seeds {
    use btl_core::btl::RemoteKey;
    use btl_core::sm::record;
    let key = RemoteKey(0x1_0000_0000);
    let rec = |kind: u8, bytes: &[u8]| {
        let mut r = vec![kind, bytes.len() as u8];
        r.extend_from_slice(bytes);
        r
    };
    let mut message = vec![0x80];
    message.extend_from_slice(b"hello");
    let mut first = record::put_head(9, key, 0, 0, 0).to_vec();
    first.extend_from_slice(&[1; 16]);
    let mut last = record::put_head(9, key, 16, 7, record::LAST | record::NOTIFY).to_vec();
    last.extend_from_slice(&[2; 16]);
    let mut data = record::get_data_head(2, 0, true).to_vec();
    data.extend_from_slice(&[3; 64]);
    let exchange = [
        rec(record::MESSAGE, &message),
        rec(record::PUT, &first),
        rec(record::PUT, &last),
        rec(record::GET, &record::get(4, key, 0, 32)),
        rec(record::PUT_DONE, &record::answer(1, 0)),
        rec(record::GET_DATA, &data),
        rec(record::BYE, &[]),
    ]
    .concat();
    let one_copy = [
        rec(
            record::PUT_ONE,
            &record::put_one(5, key, 0, 64, 0x1000, 3, record::NOTIFY),
        ),
        rec(record::GET_ONE, &record::get_one(6, key, 0, 64, 0x2000)),
        rec(
            record::PUT_DONE,
            &record::answer(1, record::ONE_COPY_REFUSED),
        ),
        rec(record::GET_FAIL, &record::answer(2, 0)),
        rec(
            record::GET_FAIL,
            &record::answer(2, record::ONE_COPY_REFUSED),
        ),
    ]
    .concat();
    vec![
        ("message".into(), rec(record::MESSAGE, &message)),
        ("an-exchange".into(), exchange),
        ("one-copy".into(), one_copy),
    ]
}

/// The engines of the recorded lives: each side's process, the recorded
/// engine made as `journal_replay`'s (`btl_fuzz::engine_input::engine`).
mod lives {
    use btl_core::btl::{Access, Btl, Tag, add_proc};
    use btl_core::desc::{DescFlags, Order};
    use btl_core::endpoint::ProcName;
    use btl_core::engine::config::EngineConfig;
    use btl_core::engine::{
        COOKIE_FRAME_LEN, Capacities, Engine, Framing, LinkId, Source, Storage, Stranger,
    };
    use btl_core::time::{Duration, Instant};
    use btl_fuzz::engine_input::{self, CAPACITIES, KEY, NONCE};
    use btl_std::driver::heap::{Heap, HeapEngine};
    use btl_std::driver::recorder::Recorder;

    /// The other side of a recorded life, which nothing records.
    const PEER: ProcName = ProcName::new(1, 1);

    /// The recorded engine: as the target's, window `W`, with its journal
    /// on.
    pub fn recorded<F: Framing, const W: usize>(
        framing: F,
        keyed: bool,
    ) -> HeapEngine<F, Vec<u8>, W> {
        let mut e = Heap::engine(
            engine_input::config(keyed),
            framing,
            CAPACITIES,
            engine_input::pools(),
            Instant::ZERO,
        )
        .expect("pools");
        *e.journal_mut() = Recorder::with_limit(1 << 20).expect("memory");
        e
    }

    /// The engine the recorded one talks to.
    fn peer<F: Framing>(framing: F, keyed: bool) -> HeapEngine<F> {
        let config = EngineConfig {
            job_key: keyed.then(|| heapless::Vec::from_slice(KEY).expect("a short key")),
            ..EngineConfig::new(PEER)
        };
        Heap::engine(
            config,
            framing,
            Capacities::for_peers(4),
            engine_input::pools(),
            Instant::ZERO,
        )
        .expect("pools")
    }

    fn ms(n: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(n)
    }

    /// What `e` has for `link`, each transmit written whole.
    fn drain<S: Storage, F: Framing, const W: usize>(
        e: &mut Engine<S, F, W>,
        link: LinkId,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(bytes) = e.poll_transmit(link).map(|t| t.segments.concat()) {
            e.handle_written(link, bytes.len());
            out.push(bytes);
        }
        out
    }

    /// Polls `e`'s events, its closes and its connects (each refused).
    fn serve<S: Storage, F: Framing, const W: usize>(e: &mut Engine<S, F, W>, now: Instant)
    where
        Engine<S, F, W>: Btl,
    {
        let _ = e.progress();
        while e.poll_event().is_some() {}
        while let Some(link) = e.poll_close() {
            e.handle_closed(link, now);
        }
    }

    /// Queues messages to `endpoint` every way the upper layer sends: a
    /// descriptor allocated and one prepared, and an inline send.
    fn send_each_way<S: Storage, F: Framing, const W: usize>(
        e: &mut Engine<S, F, W>,
        endpoint: btl_core::endpoint::EndpointId,
    ) where
        Engine<S, F, W>: Btl,
    {
        if let Ok(mut desc) = e.alloc(endpoint, Order::ANY, 8, DescFlags::empty()) {
            desc.set_tag(Tag(1));
            let _ = e.send(endpoint, desc, Tag(1));
        }
        if let Ok(desc) = e.prepare_src(endpoint, b"prepared", 0, Order::ANY, DescFlags::empty()) {
            let _ = e.send(endpoint, desc, Tag(2));
        }
        let _ = e.sendi(
            endpoint,
            b"hdr",
            b"inline",
            Tag(3),
            Order::ANY,
            DescFlags::empty(),
        );
    }

    /// A client's life over a stream, the recorded engine `e` the client:
    /// it registers memory, reaches the peer and sends to it every way,
    /// takes the peer's answer, times out, and finalizes.
    pub fn stream_client<const W: usize>(
        e: &mut HeapEngine<btl_core::engine::Stream, Vec<u8>, W>,
        keyed: bool,
    ) {
        let framing = btl_core::engine::Stream;
        let mut p = peer(framing, keyed);
        let handle = e.register_mem(vec![7; 64], Access::REMOTE_READ).ok();
        let to_peer = add_proc(e, PEER).expect("room").expect("reached");
        send_each_way(e, to_peer);
        let req = e.poll_connect().expect("a connection asked for");
        let le = e.handle_connected(req, NONCE, ms(1)).expect("a link");
        let lp = p
            .handle_accepted(Source(1), [2; 16], ms(1))
            .expect("a link");
        let pump = |e: &mut HeapEngine<_, Vec<u8>, W>, p: &mut HeapEngine<_>, now| loop {
            let (ep, pe) = (drain(e, le).concat(), drain(p, lp).concat());
            if ep.is_empty() && pe.is_empty() {
                return;
            }
            let _ = p.handle_stream(lp, &ep, now);
            let _ = e.handle_stream(le, &pe, now);
        };
        pump(e, &mut p, ms(2));
        serve(&mut p, ms(2));
        let to_me = p.peer_metrics().next().expect("the client").endpoint;
        send_each_way(&mut p, to_me);
        p.acknowledge_now();
        pump(e, &mut p, ms(3));
        serve(e, ms(3));
        e.acknowledge_now();
        pump(e, &mut p, ms(4));
        if let Some(t) = e.poll_timeout() {
            e.handle_timeout(t);
            pump(e, &mut p, t);
        }
        if let Some(handle) = handle {
            let _ = e.deregister_mem(handle);
        }
        let _ = e.finalize();
        pump(e, &mut p, ms(500));
        serve(e, ms(500));
        e.handle_closed(le, ms(501));
        serve(e, ms(501));
    }

    /// A server's life over datagrams, the recorded engine `e` the
    /// server: a stranger's HELLO is answered with a cookie, its echo
    /// admitted; the peer sends every way, and is answered; the link
    /// closes.
    pub fn datagram_server<const W: usize>(
        e: &mut HeapEngine<btl_core::engine::Datagram, Vec<u8>, W>,
        keyed: bool,
    ) {
        let framing = btl_fuzz::journal_replay::DATAGRAM;
        let mut p = peer(framing, keyed);
        let to_server = add_proc(&mut p, engine_input::ME)
            .expect("room")
            .expect("reached");
        send_each_way(&mut p, to_server);
        let req = p.poll_connect().expect("a connection asked for");
        let lp = p.handle_connected(req, [2; 16], ms(1)).expect("a link");
        let address = [127, 0, 0, 1, 0, 9];
        let mut le = None;
        for _ in 0..8 {
            for datagram in drain(&mut p, lp) {
                if let Some(le) = le {
                    let _ = e.handle_datagram(le, &datagram, ms(1));
                    continue;
                }
                let mut answer = [0; COOKIE_FRAME_LEN];
                match e.handle_stranger(&address, &datagram, ms(1), &mut answer) {
                    Stranger::Answer(n) => {
                        let _ = p.handle_datagram(lp, &answer[..n], ms(1));
                    }
                    Stranger::Admit => {
                        le = Some(e.handle_accepted(Source(9), NONCE, ms(1)).expect("a link"));
                    }
                    Stranger::Refuse(why) => panic!("refused: {why:?}"),
                }
            }
            if let Some(le) = le {
                for datagram in drain(e, le) {
                    let _ = p.handle_datagram(lp, &datagram, ms(1));
                }
            }
        }
        let le = le.expect("the peer admitted");
        let pump = |e: &mut HeapEngine<_, Vec<u8>, W>, p: &mut HeapEngine<_>, now| loop {
            let (ep, pe) = (drain(e, le), drain(p, lp));
            if ep.is_empty() && pe.is_empty() {
                return;
            }
            for d in ep {
                let _ = p.handle_datagram(lp, &d, now);
            }
            for d in pe {
                let _ = e.handle_datagram(le, &d, now);
            }
        };
        pump(e, &mut p, ms(2));
        serve(e, ms(2));
        let to_peer = e.peer_metrics().next().expect("the client").endpoint;
        send_each_way(e, to_peer);
        pump(e, &mut p, ms(3));
        serve(&mut p, ms(3));
        p.acknowledge_now();
        pump(e, &mut p, ms(4));
        serve(e, ms(4));
        let _ = p.finalize();
        pump(e, &mut p, ms(5));
        serve(e, ms(5));
        e.handle_closed(le, ms(6));
        serve(e, ms(6));
    }

    /// The journal `e` recorded.
    pub fn journal<F: Framing, const W: usize>(e: &HeapEngine<F, Vec<u8>, W>) -> Vec<u8> {
        assert!(!e.journal().is_full(), "the whole life recorded");
        e.journal().bytes().to_vec()
    }
}

/// Every call, once: what a journal can hold that the recorded lives do
/// not (a stranger's datagram to a stream engine's journal, a payload
/// read, a refusal, an unreplayable call).
fn every_call() -> Vec<u8> {
    use btl_core::btl::{Access, Tag};
    use btl_core::desc::{DescFlags, Order};
    use btl_core::endpoint::{EndpointId, ProcName};
    use btl_core::engine::journal::{Call, DescId, EndpointList, Entry, ProcList};
    use btl_core::engine::{ConnectFailure, ConnectRequest, Source, Stream};
    use btl_core::time::Instant;
    // The first link an engine opens.
    let link = {
        let mut region = vec![0u8; 64 * 1024];
        let mut tables: engine_input::Tables = engine_input::Tables::new();
        let mut e = engine_input::engine(&mut region, &mut tables, Stream, false);
        e.handle_accepted(Source(1), engine_input::NONCE, Instant::ZERO)
            .expect("a link")
    };
    let req = ConnectRequest {
        endpoint: EndpointId(0),
        proc: ProcName::new(1, 1),
        listed_as: ProcName::new(1, 1),
        link_index: 0,
    };
    let now = Instant::from_millis(1);
    let procs = [ProcName::new(1, 1)];
    let calls = [
        Call::Clock(now),
        Call::PollConnect,
        Call::Connected {
            req,
            nonce: [1; NONCE_LEN],
            now,
        },
        Call::Accepted {
            source: Source(1),
            nonce: [2; NONCE_LEN],
            now,
        },
        Call::ConnectFailed {
            req,
            why: ConnectFailure::Refused,
            now,
        },
        Call::Closed { link, now },
        Call::Refused { link, now },
        Call::PollClose,
        Call::Transmit(link),
        Call::Written { link, n: 9 },
        Call::Timeout(now),
        Call::PollReadyLink,
        Call::Stream {
            link,
            data: b"stream",
            now,
        },
        Call::PayloadRead {
            link,
            data: b"payload",
            now,
        },
        Call::Datagram {
            link,
            data: b"datagram",
            now,
        },
        Call::Stranger {
            address: &[127, 0, 0, 1, 0, 9],
            data: b"stranger",
            now,
        },
        Call::AcknowledgeNow,
        Call::Connect(EndpointId(0)),
        Call::AddProcs(ProcList::Given(&procs)),
        Call::DelProcs(EndpointList::Given(&[EndpointId(0)])),
        Call::Alloc {
            endpoint: EndpointId(0),
            order: Order::ANY,
            size: 8,
            flags: DescFlags::empty(),
        },
        Call::Free(DescId { class: 0, index: 0 }),
        Call::PrepareSrc {
            endpoint: EndpointId(0),
            data: b"prepared",
            reserve: 0,
            order: Order::ANY,
            flags: DescFlags::BTL_OWNERSHIP,
        },
        Call::Send {
            endpoint: EndpointId(0),
            desc: DescId { class: 0, index: 1 },
            bytes: b"sent",
            tag: Tag(1),
        },
        Call::Sendi {
            endpoint: EndpointId(0),
            header: b"hdr",
            payload: b"inline",
            tag: Tag(3),
            order: Order::ANY,
            flags: DescFlags::empty(),
        },
        Call::Progress,
        Call::PollEvent,
        Call::Finalize,
        Call::RegisterMem {
            data: &[7; 16],
            access: Access::REMOTE_READ | Access::REMOTE_WRITE,
        },
        Call::Unreplayable("poll_rdma"),
    ];
    let mut out = Vec::new();
    for call in calls {
        out.extend_from_slice(&Entry { call, out: 0 }.to_vec());
    }
    out
}

/// The recorded lives' journals, by name, and the settings that replay
/// each.
fn recorded_journals() -> Vec<(&'static str, btl_fuzz::journal_replay::Settings, Vec<u8>)> {
    use btl_core::engine::Stream;
    use btl_fuzz::journal_replay::{DATAGRAM, Settings};
    let mut out = Vec::new();
    for keyed in [false, true] {
        let mut e = lives::recorded::<_, 8>(Stream, keyed);
        lives::stream_client(&mut e, keyed);
        out.push((
            if keyed {
                "keyed-stream-client"
            } else {
                "stream-client"
            },
            Settings {
                datagram: false,
                keyed,
                mend: false,
            },
            lives::journal(&e),
        ));
        let mut e = lives::recorded::<_, 8>(DATAGRAM, keyed);
        lives::datagram_server(&mut e, keyed);
        out.push((
            if keyed {
                "keyed-datagram-server"
            } else {
                "datagram-server"
            },
            Settings {
                datagram: true,
                keyed,
                mend: false,
            },
            lives::journal(&e),
        ));
    }
    out
}

/// Journals as the flight recorder writes them: the recorded lives, and
/// one entry of every call.
fn journal_decode() -> Seeds {
    let mut seeds: Seeds = recorded_journals()
        .into_iter()
        .map(|(name, _, journal)| (name.to_owned(), journal))
        .collect();
    seeds.push(("every-call".to_owned(), every_call()));
    seeds
}

/// The recorded lives, each with the settings of the engine that recorded
/// it (they replay to the end), and again with a byte of the first
/// stream's or datagram's data changed and the mend bit set, so that the
/// replay goes on past where it goes another way.
fn journal_replay() -> Seeds {
    use btl_core::engine::journal::{Call, Entry};
    use btl_fuzz::journal_replay::{self as jr, Settings};
    let mut seeds = Vec::new();
    for (name, settings, journal) in recorded_journals() {
        let replayed = jr::replay_fresh(settings, &journal)
            .unwrap_or_else(|e| panic!("{name} replays to its end: {e}"));
        assert!(replayed.entries > 20, "{name}: {replayed:?}");
        seeds.push((name.to_owned(), jr::input(settings, &journal)));
        let mut bent = journal.clone();
        let mut offset = 0;
        while offset < journal.len() {
            let (entry, len) = Entry::decode(&journal[offset..]).expect("entries");
            if let Call::Stream { data, .. } | Call::Datagram { data, .. } = entry.call
                && data.len() > 40
            {
                // The last byte of its data: in the body of its last frame.
                bent[offset + len - 8 - 8 - 1] ^= 0x5a;
                break;
            }
            offset += len;
        }
        let mended = Settings {
            mend: true,
            ..settings
        };
        seeds.push((format!("{name}-bent-mended"), jr::input(mended, &bent)));
    }
    seeds
}

/// Record files as a module writes them: each recorded life, from an
/// engine made as a module makes it (a window of 64), which
/// `Record::replay` replays to the end.
fn record_read() -> Seeds {
    use btl_core::engine::Stream;
    use btl_core::time::Instant;
    use btl_fuzz::engine_input::{self, CAPACITIES};
    use btl_fuzz::journal_replay::DATAGRAM;
    use btl_std::driver::recorder::{Framed, Record, Setup};
    let record = |component: &str, framing, keyed, journal| Record {
        setup: Setup {
            component: component.to_owned(),
            framing,
            config: engine_input::config(keyed),
            capacities: CAPACITIES,
            pools: engine_input::pools(),
            start: Instant::ZERO,
        },
        why: "peer 1.1 lost: timeout".to_owned(),
        full: false,
        journal,
    };
    let mut seeds = Vec::new();
    for keyed in [false, true] {
        let mut e = lives::recorded::<_, 64>(Stream, keyed);
        lives::stream_client(&mut e, keyed);
        let tcp = record("tcp", Framed::Stream, keyed, lives::journal(&e));
        let mut e = lives::recorded::<_, 64>(DATAGRAM, keyed);
        lives::datagram_server(&mut e, keyed);
        let udp = record(
            "udp",
            Framed::Datagram { mtu: DATAGRAM.mtu },
            keyed,
            lives::journal(&e),
        );
        let key = if keyed { "keyed-" } else { "" };
        for (name, r) in [("tcp", tcp), ("udp", udp)] {
            let replayed = r
                .replay()
                .unwrap_or_else(|e| panic!("the {name} record replays to its end: {e}"));
            assert!(replayed.entries > 20, "{name}: {replayed:?}");
            seeds.push((format!("{key}{name}"), r.to_bytes()));
        }
    }
    seeds
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let targets: [(&str, Seeds); 11] = [
        ("sm_input", sm_input()),
        ("ring_input", ring_input()),
        ("cpc_message", cpc_message()),
        ("parse_packet", parse_packet()),
        ("engine_input", engine_input()),
        ("xfer_message", xfer_message()),
        ("bench_message", bench_message()),
        ("handshake", handshake()),
        ("journal_decode", journal_decode()),
        ("journal_replay", journal_replay()),
        ("record_read", record_read()),
    ];
    for (target, seeds) in targets {
        let dir = root.join(target);
        fs::create_dir_all(&dir)?;
        for (name, bytes) in seeds {
            fs::write(dir.join(name), bytes)?;
        }
    }
    Ok(())
}
