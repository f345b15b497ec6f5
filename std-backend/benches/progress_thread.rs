//! Round trips of 8 bytes between two modules that progress threads serve
//! (TCP on loopback, one process), against the same round trip over plain
//! blocking `std::net` sockets with a thread echoing: both sides wait in
//! the kernel, so the ratio is the cost of the thread mode's extra hop
//! (the progress thread hands the reply to the waiting caller) and of the
//! engine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::channel;

use btl_core::btl::{Btl, Event, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_std::driver::progress_thread::ProgressThread;
use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../tests/common/mod.rs"]
mod common;

const PING: Tag = Tag(0x81);
const PONG: Tag = Tag(0x82);

fn raw(c: &mut Criterion) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = listener.local_addr().expect("address");
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = [0u8; 8];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut s = TcpStream::connect(at).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let mut buf = [7u8; 8];
    c.bench_function("round trip 8 B/raw blocking socket", |b| {
        b.iter(|| {
            s.write_all(&buf).expect("write");
            s.read_exact(&mut buf).expect("read");
        })
    });
    drop(s);
    echo.join().expect("echo thread");
}

fn threaded(c: &mut Criterion) {
    let (a, b, b_at_a, a_at_b) =
        common::pair(0x7f01, |me, key, boot| common::tcp(1).build(me, key, boot));
    let (tx, rx) = channel();
    let a = ProgressThread::spawn(a, move |_, event| {
        if let Event::Received(m) = event {
            let _ = tx.send(m.data.len());
        }
    })
    .expect("A's thread");
    let b = ProgressThread::spawn(b, move |served, event| {
        if let Event::Received(m) = event {
            served.with(|b| {
                b.sendi(a_at_b, &[], m.data, PONG, Order(0), DescFlags::empty())
                    .expect("pong")
            });
        }
    })
    .expect("B's thread");
    let payload = [7u8; 8];
    // The first message opens the connection (sendi needs it open).
    a.with(|a| {
        let d = a
            .prepare_src(b_at_a, &payload, 0, Order(0), DescFlags::BTL_OWNERSHIP)
            .expect("descriptor");
        let _ = a.send(b_at_a, d, PING).expect("first ping");
    });
    rx.recv().expect("first pong");
    c.bench_function("round trip 8 B/btl tcp, progress threads", |bench| {
        bench.iter(|| {
            a.with(|a| {
                a.sendi(b_at_a, &[], &payload, PING, Order(0), DescFlags::empty())
                    .expect("ping")
            });
            rx.recv().expect("pong");
        })
    });
    drop(a);
    drop(b);
}

criterion_group!(benches, raw, threaded);
criterion_main!(benches);
