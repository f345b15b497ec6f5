//! Loopback (`self` BTL) costs: one 8-byte `sendi` delivered through
//! `poll_event`, a window of them (message rate), and a descriptor send.
//! Open MPI reports 0.18 µs for a send to self; the target is well under.

use btl_core::btl::{Btl, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{ProcName, Reachability};
use btl_core::loopback::Loopback;
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

const WINDOW: usize = 64;

fn bench(c: &mut Criterion) {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 64,
        max: 64,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(65536),
    };
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let pools = FragmentPools::new(&mut region, cfg).expect("pools");
    let me = ProcName::new(1, 0);
    let mut btl = Loopback::<_, &mut [u8], 4, WINDOW>::new(me, pools);
    let mut eps = [None];
    let mut words = [0u64];
    btl.add_procs(&[me], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    let ep = eps[0].expect("self");
    let payload = [7u8; 8];
    let tag = Tag(0x80);

    let mut group = c.benchmark_group("loopback");
    group.bench_function("sendi 8 B + poll", |b| {
        b.iter(|| {
            btl.sendi(
                ep,
                &[],
                black_box(&payload),
                tag,
                Order::ANY,
                DescFlags::empty(),
            )
            .expect("sendi");
            match btl.poll_event() {
                Some(Event::Received(m)) => {
                    black_box(m.data);
                }
                _ => unreachable!(),
            }
        })
    });
    // Release the message the last iteration left lent out.
    while btl.poll_event().is_some() {}
    group.throughput(Throughput::Elements(WINDOW as u64));
    group.bench_function("sendi 8 B rate (window 64)", |b| {
        b.iter(|| {
            for _ in 0..WINDOW {
                btl.sendi(
                    ep,
                    &[],
                    black_box(&payload),
                    tag,
                    Order::ANY,
                    DescFlags::empty(),
                )
                .expect("sendi");
            }
            while let Some(ev) = btl.poll_event() {
                black_box(&ev);
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("prepare_src + send 8 B + poll (btl-owned)", |b| {
        b.iter(|| {
            let d = btl
                .prepare_src(
                    ep,
                    black_box(&payload),
                    0,
                    Order::ANY,
                    DescFlags::BTL_OWNERSHIP,
                )
                .expect("descriptor");
            let _ = btl.send(ep, d, tag).expect("send");
            while let Some(ev) = btl.poll_event() {
                black_box(&ev);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
