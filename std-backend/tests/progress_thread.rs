//! Modules served by progress threads, over TCP and UDP on loopback: the
//! handler sees every event once, with the lock released (it replies from
//! inside the callback), callers post from several threads at once, and a
//! stopped thread hands back a module that works without it.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use btl_core::btl::{Access, Btl, Event, Tag};
use btl_core::endpoint::EndpointId;
use btl_std::driver::module::{Module, Transport};
use btl_std::driver::net::Os;
use btl_std::driver::progress_thread::{ProgressThread, Served};

mod common;
use common::{DEADLINE, job, local, pair, remote, tcp, udp};

/// Tag of the messages B sends back.
const ECHO: Tag = Tag(0x90);

/// What a handler saw, as owned values for a channel.
#[derive(Debug)]
enum Seen {
    Message(Tag, Vec<u8>),
    Put(Result<(), btl_core::btl::BtlError>),
    Lost,
}

/// A handler that sends what it sees to `tx`, and answers every message
/// that is not an echo with an echo to `peer` (from inside the callback).
fn handler<T: Transport>(
    peer: EndpointId,
    tx: Sender<Seen>,
) -> impl FnMut(&Served<T>, Event<'_>) + Send + 'static {
    move |served, event| match event {
        Event::Received(m) => {
            if m.tag != ECHO {
                served
                    .with(|module| module.send_copy(peer, ECHO, m.data))
                    .expect("an echo");
            }
            let _ = tx.send(Seen::Message(m.tag, m.data.to_vec()));
        }
        Event::PutComplete { result, .. } => {
            let _ = tx.send(Seen::Put(result));
        }
        Event::Error(_) | Event::PeerLeft { .. } => {
            let _ = tx.send(Seen::Lost);
        }
        Event::SendComplete { .. }
        | Event::GetComplete { .. }
        | Event::PutArrived { .. }
        | Event::Room { .. } => {}
    }
}

/// The `i`th test message, at most `max` bytes: its length and bytes
/// differ by `i`.
fn message(i: u32, max: u32) -> Vec<u8> {
    (0..(i * 997) % max.min(9000))
        .map(|x| (x ^ i) as u8)
        .collect()
}

fn next(rx: &Receiver<Seen>) -> Seen {
    rx.recv_timeout(DEADLINE)
        .expect("an event within the deadline")
}

/// A and B served by threads: messages from two caller threads at once,
/// each echoed back by B's handler; then a put; then both stopped and
/// used without threads.
fn echo<T: Transport<Net = Os> + Send + 'static>(
    a: Module<T>,
    b: Module<T>,
    b_at_a: EndpointId,
    a_at_b: EndpointId,
) {
    const EACH: u32 = 200;
    let max = a.attributes().max_send_size as u32;
    const WINDOW: u32 = 8;
    let (a_tx, a_rx) = channel();
    let (b_tx, b_rx) = channel();
    let a = ProgressThread::spawn(a, handler(b_at_a, a_tx)).expect("A's thread");
    let b = ProgressThread::spawn(b, handler(a_at_b, b_tx)).expect("B's thread");

    // Two threads post at once, each on its own tag, each in windows so
    // that credits never run out; A's handler reports the echoes.
    let tags = [Tag(0x81), Tag(0x82)];
    let (win_tx, win_rx): (Vec<_>, Vec<_>) = tags.iter().map(|_| channel::<()>()).unzip();
    std::thread::scope(|s| {
        for (&tag, acks) in tags.iter().zip(win_rx) {
            let a = &a;
            s.spawn(move || {
                for i in 0..EACH {
                    if i >= WINDOW {
                        acks.recv_timeout(DEADLINE).expect("an echo");
                    }
                    a.with(|m| m.send_copy(b_at_a, tag, &message(i, max)))
                        .expect("a message");
                }
            });
        }
        let mut echoed = [0u32; 2];
        while echoed.iter().sum::<u32>() < 2 * EACH {
            let Seen::Message(tag, data) = next(&a_rx) else {
                panic!("A saw more than echoes");
            };
            assert_eq!(tag, ECHO);
            // Which sender's message it is: they interleave, each in order.
            let k = (0..2)
                .find(|&k| echoed[k] < EACH && data == message(echoed[k], max))
                .expect("each sender's echoes come back in its order");
            echoed[k] += 1;
            let _ = win_tx[k].send(());
        }
    });
    let mut at_b = [0u32; 2];
    for _ in 0..2 * EACH {
        let Seen::Message(tag, data) = next(&b_rx) else {
            panic!("B saw more than messages");
        };
        let k = tags.iter().position(|&t| t == tag).expect("a sender's tag");
        assert_eq!(data, message(at_b[k], max), "in order per sender");
        at_b[k] += 1;
    }

    // A put of 1 MiB completes once, through A's handler.
    const LEN: usize = 1 << 20;
    let src: Vec<u8> = (0..LEN).map(|x| (x % 253) as u8).collect();
    let dst: Vec<u8> = vec![0u8; LEN];
    let hs = a.with(|m| m.register_mem(src, Access::empty()).expect("src"));
    let hd = b.with(|m| m.register_mem(dst, Access::REMOTE_WRITE).expect("dst"));
    a.with(|m| {
        m.put(b_at_a, local(hs, LEN), remote(hd, LEN), 7)
            .expect("put")
    });
    assert!(matches!(next(&a_rx), Seen::Put(Ok(()))));
    assert!(
        a_rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the put completed once"
    );
    let same = b.with(|bm| a.with(|am| bm.region(hd).ok() == am.region(hs).ok()));
    assert!(same, "B holds what A put");

    // Stopped, the modules work as before, driven by their owners.
    let mut a = a.stop().expect("A stops");
    let mut b = b.stop().expect("B stops");
    a.send_copy(b_at_a, Tag(0x83), b"after").expect("a message");
    let start = std::time::Instant::now();
    let mut got = None;
    while got.is_none() {
        assert!(start.elapsed() < DEADLINE, "no message after stopping");
        a.progress();
        b.progress();
        if let Some(Event::Received(m)) = b.poll_event() {
            got = Some(m.data.to_vec());
        }
    }
    assert_eq!(got.as_deref(), Some(&b"after"[..]));
    assert!(b_rx.try_recv().is_err() && a_rx.try_recv().is_err());
}

#[test]
fn tcp_modules_served_by_threads() {
    let (a, b, b_at_a, a_at_b) = pair(0x7e01, |me, key, boot| tcp(2).build(me, key, boot));
    echo(a, b, b_at_a, a_at_b);
}

#[test]
fn udp_modules_served_by_threads() {
    let (a, b, b_at_a, a_at_b) = pair(0x7e02, |me, key, boot| udp().build(me, key, boot));
    echo(a, b, b_at_a, a_at_b);
}

#[test]
fn a_stopped_thread_can_be_started_again() {
    let (boot, dir, na, _) = job(0x7e03);
    let a = tcp(1).build(na, Some(b"k"), boot).expect("A");
    let _ = std::fs::remove_dir_all(dir);
    let a = ProgressThread::spawn(a, |_, _| {}).expect("a thread");
    let a = a.stop().expect("stops");
    // Once stopped, it can be served again.
    let a = ProgressThread::spawn(a, |_, _| {}).expect("a thread again");
    drop(a);
}
