//! A burst of 44 datagrams of 1,472 bytes (64 KB, what one segmented send
//! carries at an Ethernet MTU) from one loopback UDP socket to another,
//! sent and received: with the offloads (one `sendmsg` with
//! `UDP_SEGMENT`, reads that `UDP_GRO` coalesces), against one system call
//! per datagram each way, as the UDP transport did without them.

use std::io::{self, IoSlice};
use std::net::SocketAddr;

use btl_std::driver::net::{DatagramSocket, Segments};
use btl_std::driver::udp_offload::OffloadedUdp;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mio::net::UdpSocket;

const DATAGRAM: usize = 1472;
const BURST: usize = 44;

fn socket() -> OffloadedUdp {
    OffloadedUdp::new(UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind"))
}

/// Reads until `want` bytes came, each read as `recv` does it.
fn drain(want: usize, mut recv: impl FnMut() -> io::Result<usize>) {
    let mut got = 0;
    while got < want {
        match recv() {
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("receive: {e}"),
        }
    }
}

fn bench(c: &mut Criterion) {
    let (a, b) = (socket(), socket());
    let to = b.local_addr().expect("address");
    let burst = vec![7u8; DATAGRAM * BURST];
    let mut buf = vec![0u8; 1 << 16];
    let mut group = c.benchmark_group("udp burst of 44 x 1472 B");
    group.throughput(Throughput::Bytes(burst.len() as u64));
    group.bench_function("offloaded", |bench| {
        bench.iter(|| {
            assert_eq!(
                a.send_segments(&burst, DATAGRAM, to).expect("send"),
                burst.len()
            );
            drain(burst.len(), || {
                b.recv_segments(&mut buf).map(|s: Segments| s.len)
            });
        });
    });
    group.bench_function("one call per datagram", |bench| {
        bench.iter(|| {
            for d in burst.chunks(DATAGRAM) {
                a.send_to_vectored(&[IoSlice::new(d)], to).expect("send");
            }
            drain(burst.len(), || b.recv_from(&mut buf).map(|(n, _)| n));
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
