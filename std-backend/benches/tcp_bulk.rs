//! One thread moving 1 MiB over loopback TCP, sent as four messages of
//! 256 KiB from registered memory and received whole: between two btl
//! modules (the engine over the socket driver, payloads read in place into
//! their receive fragments), and over a plain pair of non-blocking sockets
//! written and read in turn, in the same run. The ratio is what btl's
//! large-message path costs over the kernel's own copies.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};

use btl_core::btl::{Access, Btl, Event, MemSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::engine::HEADER_RESERVE;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "../tests/common/mod.rs"]
mod common;

const MESSAGE: usize = 256 << 10;
const MESSAGES: usize = 4;
const TAG: Tag = Tag(0x83);

/// Writes and reads `len` bytes through `(tx, rx)` in turn until all came.
fn raw_move(tx: &mut TcpStream, rx: &mut TcpStream, out: &[u8], into: &mut [u8]) {
    let (mut put, mut got) = (0, 0);
    while got < into.len() {
        if put < out.len() {
            match tx.write(&out[put..]) {
                Ok(n) => put += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        match rx.read(&mut into[got..]) {
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn raw(c: &mut Criterion) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut tx = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (mut rx, _) = listener.accept().expect("accept");
    for s in [&tx, &rx] {
        s.set_nodelay(true).expect("nodelay");
        s.set_nonblocking(true).expect("non-blocking");
    }
    let out = vec![7u8; MESSAGE * MESSAGES];
    let mut into = vec![0u8; MESSAGE * MESSAGES];
    let mut group = c.benchmark_group("1 MiB over loopback tcp, one thread");
    group.throughput(Throughput::Bytes(out.len() as u64));
    group.bench_function("raw sockets", |b| {
        b.iter(|| raw_move(&mut tx, &mut rx, &out, &mut into));
    });
    group.finish();
}

fn btl(c: &mut Criterion) {
    let mut setup = common::tcp(1);
    setup.engine.checksum = false;
    let pool = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 16,
        max: 16,
        inc: 16,
    };
    setup.pools = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(4096),
        max: pool(MESSAGE),
    };
    let (mut a, mut b, b_at_a, _) =
        common::pair(0x7f02, |me, key, boot| setup.build(me, key, boot));
    let source = a
        .register_mem(vec![7u8; MESSAGE * MESSAGES], Access::empty())
        .expect("registered");
    let send_all = |a: &mut btl_std::TcpModule, b: &mut btl_std::TcpModule| {
        let mut sent = 0;
        let mut received = 0;
        while received < MESSAGES {
            if sent < MESSAGES {
                let data = MemSlice {
                    handle: source,
                    offset: (sent * MESSAGE) as u64,
                    len: MESSAGE as u64,
                };
                if let Ok(d) =
                    a.prepare_src_registered(b_at_a, data, 0, Order(0), DescFlags::BTL_OWNERSHIP)
                {
                    let _ = a.send(b_at_a, d, TAG).expect("send");
                    sent += 1;
                }
            }
            a.progress();
            b.progress();
            while let Some(event) = b.poll_event() {
                if let Event::Received(m) = event {
                    assert_eq!(m.data.len(), MESSAGE);
                    received += 1;
                }
            }
            while a.poll_event().is_some() {}
        }
    };
    // The connection opens with the first round.
    send_all(&mut a, &mut b);
    let mut group = c.benchmark_group("1 MiB over loopback tcp, one thread");
    group.throughput(Throughput::Bytes((MESSAGE * MESSAGES) as u64));
    group.bench_function("btl, 4 sends of 256 KiB", |bench| {
        bench.iter(|| send_all(&mut a, &mut b));
    });
    group.finish();
}

criterion_group!(benches, raw, btl);
criterion_main!(benches);
