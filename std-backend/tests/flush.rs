//! `Module::flush` while a peer streams requests at the module's progress
//! thread, which answers each: it ends as soon as the peer has
//! acknowledged what was sent, which the acknowledgement delay bounds, not
//! at the next keepalive probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, BtlError, Event, Tag};
use btl_core::endpoint::ProcName;
use btl_std::bootstrap::SharedDir;
use btl_std::driver::module::{Module, Transport};
use btl_std::driver::net::Os;
use btl_std::driver::progress_thread::ProgressThread;

mod common;
use common::{pair, tcp, udp};

const REQUEST: Tag = Tag(0x51);
const REPLY: Tag = Tag(0x52);
/// Requests the client keeps outstanding.
const WINDOW: usize = 32;
/// Flushes timed per transport.
const FLUSHES: usize = 20;

fn flush_under_a_streaming_peer<T: Transport<Net = Os> + Send + 'static>(
    n: u64,
    build: impl Fn(ProcName, Option<&[u8]>, Arc<SharedDir>) -> std::io::Result<Module<T>>,
) -> Vec<Duration> {
    let (a, mut b, _, a_at_b) = pair(n, build);
    let server = ProgressThread::spawn(a, |served, event| {
        if let Event::Received(m) = event {
            let (from, data) = (m.from, m.data.to_vec());
            served.with(|module| {
                // A reply that finds no room is dropped: the client sends
                // again when it has room, and this test times flushes.
                let _ = module.send_copy(from, REPLY, &data);
            });
        }
    })
    .expect("a progress thread");
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let client = std::thread::spawn(move || {
        let mut outstanding = 0usize;
        let mut last_reply = Instant::now();
        while !stopping.load(Ordering::Relaxed) {
            b.progress();
            while let Some(event) = b.poll_event() {
                if let Event::Received(m) = event
                    && m.tag == REPLY
                {
                    outstanding = outstanding.saturating_sub(1);
                    last_reply = Instant::now();
                }
            }
            // Replies dropped for want of room are given up after a while.
            if last_reply.elapsed() > Duration::from_millis(50) {
                outstanding = 0;
            }
            while outstanding < WINDOW {
                match b.send_copy(a_at_b, REQUEST, &[7; 64]) {
                    Ok(()) => outstanding += 1,
                    Err(BtlError::OutOfResource) => break,
                    Err(e) => panic!("a request: {e}"),
                }
            }
        }
        b
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut took = Vec::new();
    for _ in 0..FLUSHES {
        let start = Instant::now();
        let flushed = server.flush(Duration::from_secs(20));
        took.push(start.elapsed());
        assert!(flushed.is_ok(), "{flushed:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let _b = client.join().expect("the client");
    drop(server);
    took
}

#[test]
fn flush_under_a_streaming_peer_over_tcp() {
    let took = flush_under_a_streaming_peer(0x7f31, |me, key, boot| tcp(1).build(me, key, boot));
    eprintln!("tcp flushes: {took:?}");
    let max = took.iter().max().copied().unwrap_or_default();
    assert!(max < Duration::from_millis(500), "{took:?}");
}

#[test]
fn flush_under_a_streaming_peer_over_udp() {
    let took = flush_under_a_streaming_peer(0x7f32, |me, key, boot| udp().build(me, key, boot));
    eprintln!("udp flushes: {took:?}");
    let max = took.iter().max().copied().unwrap_or_default();
    assert!(max < Duration::from_millis(500), "{took:?}");
}
