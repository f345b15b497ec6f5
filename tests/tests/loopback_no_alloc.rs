//! The loopback's data path allocates nothing: after a warm-up round,
//! sendi, send, put, get and event polling never touch the global
//! allocator. (The engine's counterpart, over the in-memory stream pair,
//! is in the btl-tests crate.)

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{ProcName, Reachability};
use btl_core::loopback::Loopback;
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig, PoolCell};
use btl_tests::alloc_count::{Counting, allocations};

#[global_allocator]
static GLOBAL: Counting = Counting;

type Self16<'r, 'm> = Loopback<&'r [PoolCell], &'m mut [u8], 2, 16>;

#[test]
fn the_loopback_data_path_does_not_allocate() {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 8,
        max: 8,
        inc: 1,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(65536),
    };
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let mut memory = vec![0u8; 1 << 16];
    let pools = FragmentPools::new(&mut region, cfg).expect("pools");
    let me = ProcName::new(3, 1);
    let mut btl = Self16::new(me, pools);
    let mut eps = [None];
    let mut words = [0u64];
    btl.add_procs(&[me], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    let ep = eps[0].expect("self");
    let handle = btl
        .register_mem(&mut memory, Access::all())
        .expect("register");
    let payload = [9u8; 1000];

    let round = |btl: &mut Self16<'_, '_>| {
        btl.sendi(
            ep,
            b"h",
            &payload[..8],
            Tag(0x80),
            Order::ANY,
            DescFlags::empty(),
        )
        .expect("sendi");
        let d = btl
            .prepare_src(ep, &payload, 8, Order::ANY, DescFlags::BTL_OWNERSHIP)
            .expect("descriptor");
        let _ = btl.send(ep, d, Tag(0x81)).expect("send");
        let local = MemSlice {
            handle,
            offset: 0,
            len: 4096,
        };
        let remote = RemoteSlice {
            key: handle.remote_key(),
            offset: 8192,
            len: 4096,
        };
        btl.put(ep, local, remote, 1).expect("put");
        btl.get(ep, local, remote, 2).expect("get");
        let mut events = 0;
        while let Some(ev) = btl.poll_event() {
            if let Event::Received(m) = &ev {
                assert!(!m.data.is_empty());
            }
            events += 1;
        }
        assert_eq!(events, 4);
    };

    round(&mut btl);
    let before = allocations();
    for _ in 0..1000 {
        round(&mut btl);
    }
    assert_eq!(allocations() - before, 0);
}
