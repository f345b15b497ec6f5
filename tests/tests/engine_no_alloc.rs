//! The engine's data path allocates nothing: after a warm-up round, sendi,
//! send, put, get and event polling over the in-memory stream pair never
//! touch the global allocator. The engines run as a board's would, on
//! storage lent from an inline struct and memory lent from the stack.

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Engine, Inline, Lent, Stream};
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use btl_core::time::Instant;
use btl_tests::alloc_count::{Counting, allocations};
use btl_tests::pair::stream::StreamPair;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Two peers, two links, a window of 16, eight operations, 64 events, two
/// registrations of lent memory.
type Tables<'m> = Inline<2, 2, 16, 8, 64, 2, &'m mut [u8]>;
type E<'a> = Engine<Lent<'a>, Stream, 16>;
/// Engines held by value, 16 KiB pipes, two connection slots.
type Pair<'a> = StreamPair<E<'a>, { 16 << 10 }, 2>;

#[test]
fn the_engine_data_path_does_not_allocate() {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 16,
        max: 16,
        inc: 16,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096 + 64),
        max: pool(65536 + 64),
    };
    let names = [ProcName::new(3, 0), ProcName::new(3, 1)];
    let mut region_a = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let mut region_b = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let mut memory_a = vec![0u8; 1 << 16];
    let mut memory_b = vec![0u8; 1 << 16];
    let (mut tables_a, mut tables_b) = (Tables::new(), Tables::new());
    let config = |me| {
        let mut config = EngineConfig::new(me);
        config.checksum = true;
        config
    };
    let mut pair = Pair::new(
        E::new(
            config(names[0]),
            Stream,
            tables_a.lend(),
            FragmentPools::new(&mut region_a, cfg).expect("pools"),
            Instant::ZERO,
        ),
        E::new(
            config(names[1]),
            Stream,
            tables_b.lend(),
            FragmentPools::new(&mut region_b, cfg).expect("pools"),
            Instant::ZERO,
        ),
        names,
        7,
    );
    let [ep_b, _] = pair.introduce().expect("each reaches the other");
    let ha = pair
        .a()
        .register_mem(&mut memory_a[..], Access::all())
        .expect("register at A");
    let hb = pair
        .b()
        .register_mem(&mut memory_b[..], Access::all())
        .expect("register at B");
    let payload = [9u8; 1000];

    let round = |pair: &mut Pair<'_>| {
        let a = pair.a();
        a.sendi(
            ep_b,
            b"h",
            &payload[..8],
            Tag(0x80),
            Order::ANY,
            DescFlags::empty(),
        )
        .expect("sendi");
        let d = a
            .prepare_src(ep_b, &payload, 8, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("descriptor");
        let _ = a.send(ep_b, d, Tag(0x81)).expect("send");
        let put = (
            MemSlice {
                handle: ha,
                offset: 0,
                len: 4096,
            },
            RemoteSlice {
                key: hb.remote_key(),
                offset: 8192,
                len: 4096,
            },
        );
        let get = (
            MemSlice {
                handle: ha,
                offset: 16384,
                len: 4096,
            },
            RemoteSlice {
                key: hb.remote_key(),
                offset: 0,
                len: 4096,
            },
        );
        a.put(ep_b, put.0, put.1, 1).expect("put");
        a.get(ep_b, get.0, get.1, 2).expect("get");
        pair.run_until_idle(1000).expect("the pair goes quiet");
        let mut received = 0;
        while let Some(ev) = pair.b().poll_event() {
            match ev {
                Event::Received(m) => {
                    assert!(!m.data.is_empty());
                    received += 1;
                }
                other => panic!("at B: {other:?}"),
            }
        }
        let mut completed = 0;
        while let Some(ev) = pair.a().poll_event() {
            match ev {
                Event::PutComplete { result, .. } | Event::GetComplete { result, .. } => {
                    assert_eq!(result, Ok(()));
                    completed += 1;
                }
                other => panic!("at A: {other:?}"),
            }
        }
        assert_eq!((received, completed), (2, 2));
    };

    // The first sendi finds no connection: it asks for one, and the
    // message waits for it.
    pair.a()
        .sendi(ep_b, b"h", &[], Tag(0x80), Order::ANY, DescFlags::empty())
        .expect("taken before the handshake");
    pair.run_until_idle(1000).expect("connected");
    match pair.b().poll_event() {
        Some(Event::Received(m)) => assert_eq!(m.data, b"h"),
        other => panic!("the first message: {other:?}"),
    }
    round(&mut pair);
    let before = allocations();
    for _ in 0..1000 {
        round(&mut pair);
    }
    assert_eq!(allocations() - before, 0);
}
