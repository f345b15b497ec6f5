//! Cancellation: a future dropped at any of its await points takes nothing
//! with it and leaves nothing behind. A send, put or get starts when it is
//! called: dropped unpolled, or after the module took it, it finishes in
//! the background; dropped while it waits for room to a peer whose queue
//! is full, it is withdrawn (nothing reaches the peer). Either way the module's
//! counters come back to idle (no registration, operation or event left),
//! and the futures that stayed get their own completion, once. A `recv`
//! dropped while pending, or losing a `select!` or a timeout, loses no
//! message; a receiver dropped with messages hands them to the next
//! receiver of their tags. A driver dropped (never spawned, or its task
//! aborted) fails every operation with `DriverGone` and ends the inboxes.

mod common;

use std::task::Poll;
use std::time::Duration;

use btl_std::driver::module::Module;
use btl_tokio::{Access, Endpoint, EndpointId, Error, Tag, TokioNet, TransferError};
use common::{
    Job, PEER_REGION, SyncPeer, TAG, Tcp, fill, message, number_of, pattern, poll_once, reach,
    settled, small_pair, taken_mark, usage, within,
};

on_runtimes!(send_dropped: 0x7b10 => a_send_dropped_at_any_point_leaves_nothing_behind);

/// A send dropped before its first poll, or after the module took it, is
/// delivered all the same (it was taken when called); one dropped while it
/// waits for room (B's inbox full and unread, A's module full) is
/// withdrawn. The sends kept complete once B reads; B gets exactly the
/// messages taken, each once; both modules end idle.
async fn a_send_dropped_at_any_point_leaves_nothing_behind(job: Job) {
    let (a, b) = small_pair(&job);
    let mut inbox = b.receiver(TAG..=TAG, 1).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    within("a first send", a.send(to_b, TAG, message(0)))
        .await
        .expect("a first send");
    let mut expected = vec![0];
    let mut next = 1;

    // Never polled: taken when called, it goes all the same.
    drop(a.send(to_b, TAG, message(next)));
    expected.push(next);
    next += 1;

    // Taken, polled, then dropped (on a multi-thread runtime the peer may
    // have acknowledged it by the poll already: then it is dropped done).
    let mut send = a.send(to_b, TAG, message(next));
    if let Poll::Ready(done) = poll_once(&mut send).await {
        done.expect("a send acknowledged");
    }
    drop(send);
    expected.push(next);
    next += 1;

    // Waiting for room, then dropped.
    let filled = fill(&a, to_b, &mut next).await;
    let refused = filled.waiting.0;
    drop(filled.waiting);
    expected.extend(&filled.taken);
    let held = usage(&a).0;

    let sender = async {
        for (seq, send) in filled.pending {
            within("a send kept", send)
                .await
                .unwrap_or_else(|e| panic!("send {seq}, kept while B's inbox was full: {e}"));
        }
        let last = next;
        within("a last send", a.send(to_b, TAG, message(last)))
            .await
            .expect("a last send");
        last
    };
    let receiver = async {
        let mut got = Vec::new();
        while got.last() != Some(&next) {
            let m = within("B's next message", inbox.recv())
                .await
                .expect("B's inbox");
            assert!(
                m.data == message(number_of(&m.data)),
                "the bytes of a message"
            );
            got.push(number_of(&m.data));
        }
        got
    };
    let (last, mut got) = tokio::join!(sender, receiver);
    expected.push(last);
    assert!(
        !got.contains(&refused),
        "message {refused}, dropped while its send waited for room, was sent ({held:?})"
    );
    assert!(
        got.contains(&1),
        "message 1, taken when called and dropped unpolled, was not sent"
    );
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(got, expected, "the messages B got, each once");
    assert_eq!(inbox.try_recv(), None, "a message after the last");
    settled("A after its dropped sends", &a, 0).await;
    settled("B", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(transfer_dropped: 0x7b20 => a_transfer_dropped_at_any_point_leaves_nothing_behind);

/// Puts and gets dropped before their first poll, or after, end in the
/// background (they were taken when called: the put's bytes land) and
/// their buffers are freed; the
/// next put and get get their own buffers back, not the dropped ones'.
/// Dropped while they wait for room (A's module full: sends, then puts
/// and gets, polled until it refuses one), they are withdrawn: the region
/// keeps its bytes. A's registrations and operations come back to zero
/// each time.
async fn a_transfer_dropped_at_any_point_leaves_nothing_behind(job: Job) {
    let (a, b) = small_pair(&job);
    let mut inbox = b.receiver(TAG..=TAG, 1).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let mut model = pattern(0xb0, PEER_REGION);
    let lent = b
        .lend(model.clone(), Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("B lends a region");
    let region = |b: &Endpoint<Tcp>| b.with_lent(&lent, |r| r.to_vec()).expect("B's region");
    within("a first send", a.send(to_b, TAG, message(0)))
        .await
        .expect("a first send");
    within("the first message", inbox.recv())
        .await
        .expect("the first message");

    // Never polled: taken when called, they go all the same, and their
    // buffers are freed when they end.
    let unpolled = pattern(0xa0, 4096);
    drop(a.put(to_b, unpolled.clone(), lent.remote(0, 4096)));
    drop(a.get(to_b, vec![0; 4096], lent.remote(0, 4096)));
    settled("A after puts and gets dropped unpolled", &a, 0).await;
    model[..4096].copy_from_slice(&unpolled);
    assert!(region(&b) == model, "a put dropped unpolled landed");

    // Taken, then dropped; the next ones get their own buffers back.
    let landed = pattern(0xa1, 4096);
    let mut put = a.put(to_b, landed.clone(), lent.remote(0, 4096));
    // (Done by the poll already, on a multi-thread runtime, it is dropped
    // done.)
    if let Poll::Ready(done) = poll_once(&mut put).await {
        done.expect("a put");
    }
    drop(put);
    model[..4096].copy_from_slice(&landed);
    let mut get = a.get(to_b, vec![0; 4096], lent.remote(0, 4096));
    if let Poll::Ready(done) = poll_once(&mut get).await {
        done.expect("a get");
    }
    drop(get);
    let second = pattern(0xa2, 3000);
    let given = second.clone();
    let ptr = given.as_ptr();
    let back = within(
        "a put after a dropped one",
        a.put(to_b, given, lent.remote(8192, 3000)),
    )
    .await
    .expect("a put after a dropped one");
    assert_eq!(
        back.as_ptr(),
        ptr,
        "a put's own buffer back, not a dropped one's"
    );
    assert!(back == second, "a put's own bytes back");
    model[8192..11192].copy_from_slice(&second);
    let buffer = vec![0xee; 3000];
    let ptr = buffer.as_ptr();
    let got = within(
        "a get after a dropped one",
        a.get(to_b, buffer, lent.remote(8192, 3000)),
    )
    .await
    .expect("a get after a dropped one");
    assert_eq!(
        got.as_ptr(),
        ptr,
        "a get's own buffer back, not a dropped one's"
    );
    assert!(got == second, "what a get read");
    settled("A after its dropped transfers", &a, 0).await;
    assert!(
        region(&b) == model,
        "B's region after a put dropped once taken (it goes on)"
    );

    // Waiting for room (A's module takes no more), then dropped: puts
    // until one is refused (those taken go on), then gets likewise.
    let mut next = 1;
    let filled = fill(&a, to_b, &mut next).await;
    let mut puts = Vec::new();
    let (put_at, refused_put) = loop {
        assert!(
            puts.len() < 64,
            "64 puts taken while A's module refuses sends"
        );
        let at = 16384 + 256 * puts.len();
        let data = pattern(0xc0 + puts.len() as u64, 256);
        let before = taken_mark(&a);
        let mut put = a.put(to_b, data.clone(), lent.remote(at as u64, 256));
        let polled = poll_once(&mut put).await;
        let took = taken_mark(&a) != before;
        assert!(polled.is_pending(), "a put done while B reads nothing");
        if !took {
            break (at, put);
        }
        model[at..at + 256].copy_from_slice(&data);
        puts.push(put);
    };
    let mut gets = Vec::new();
    let refused_get = loop {
        assert!(
            gets.len() < 64,
            "64 gets taken while A's module refuses puts"
        );
        let before = taken_mark(&a);
        let mut get = a.get(to_b, vec![0; 256], lent.remote(0, 256));
        let polled = poll_once(&mut get).await;
        let took = taken_mark(&a) != before;
        assert!(polled.is_pending(), "a get done while B reads nothing");
        if !took {
            break get;
        }
        gets.push(get);
    };
    drop(refused_put);
    drop(refused_get);
    drop(filled.waiting);

    let sender = async {
        for (seq, send) in filled.pending {
            within("a send kept", send)
                .await
                .unwrap_or_else(|e| panic!("send {seq}: {e}"));
        }
        for put in puts {
            within("a put kept", put).await.expect("a put kept");
        }
        for get in gets {
            let got = within("a get kept", get).await.expect("a get kept");
            assert!(got == landed[..256], "what a get kept read");
        }
    };
    let receiver = async {
        let mut got = Vec::new();
        for _ in 0..filled.taken.len() {
            let m = within("B's next message", inbox.recv())
                .await
                .expect("B's inbox");
            got.push(number_of(&m.data));
        }
        got.sort_unstable();
        assert_eq!(got, filled.taken, "the messages B got");
    };
    tokio::join!(sender, receiver);
    settled("A after its withdrawn transfers", &a, 0).await;
    assert!(
        region(&b)[put_at..put_at + 256] == model[put_at..put_at + 256],
        "the bytes of a put withdrawn while it waited for room, written"
    );
    assert!(region(&b) == model, "B's region after the puts kept");
    assert_eq!(inbox.try_recv(), None, "a message withdrawn, sent");
    settled("B", &b, 1).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(recv_dropped: 0x7b30 => a_recv_dropped_loses_no_message);

/// Messages A sends.
const STREAM: u64 = 300;

/// B's `recv` times out with nothing there, then races every message
/// against `yield_now` in `select!` (dropped while pending when the yield
/// wins) and against a timeout of microseconds: every message arrives
/// once, in order, though many `recv`s were dropped.
async fn a_recv_dropped_loses_no_message(job: Job) {
    let (a, b) = (job.open::<Tcp>(0), job.open::<Tcp>(1));
    let mut inbox = b.receiver(TAG..=TAG, 4).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(20), inbox.recv())
            .await
            .is_err(),
        "a message before any was sent"
    );
    let sender = async {
        for seq in 0..STREAM {
            within("a send", a.send(to_b, TAG, message(seq)))
                .await
                .expect("a send");
        }
    };
    let receiver = async {
        let mut got = Vec::new();
        let (mut lost_races, mut timed_out) = (0u32, 0u32);
        while (got.len() as u64) < STREAM {
            if got.len() % 2 == 0 {
                tokio::select! {
                    m = inbox.recv() => got.push(number_of(&m.expect("B's inbox").data)),
                    () = tokio::task::yield_now() => lost_races += 1,
                }
            } else {
                match tokio::time::timeout(Duration::from_micros(50), inbox.recv()).await {
                    Ok(m) => got.push(number_of(&m.expect("B's inbox").data)),
                    Err(_) => timed_out += 1,
                }
            }
        }
        (got, lost_races, timed_out)
    };
    let ((), (got, lost_races, timed_out)) =
        within("the stream", async { tokio::join!(sender, receiver) }).await;
    assert_eq!(got, (0..STREAM).collect::<Vec<_>>(), "the messages B got");
    assert!(
        lost_races + timed_out > 0,
        "no recv was dropped: the test tested nothing"
    );
    assert_eq!(inbox.try_recv(), None, "a message twice");
    settled("B after dropped recvs", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(receiver_dropped: 0x7b40 => a_dropped_receiver_hands_its_messages_on);

/// A receiver dropped with five messages in it: its tags are free again,
/// and the next receiver of them gets those five, then what came since,
/// in order; a receiver of tags already taken is refused.
async fn a_dropped_receiver_hands_its_messages_on(job: Job) {
    let (a, b) = (job.open::<Tcp>(0), job.open::<Tcp>(1));
    let first = b.receiver(Tag(0x40)..=Tag(0x4f), 8).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let tag = |seq: u64| Tag(0x40 + (seq % 3) as u8);
    for seq in 0..5 {
        within("a send", a.send(to_b, tag(seq), message(seq)))
            .await
            .expect("a send");
    }
    // In the receiver: B's module holds none of them any more.
    common::until(
        "B's driver takes the messages",
        || {
            let u = usage(&b).0;
            u.events == 0 && u.events_owed == 0
        },
        || usage(&b),
    )
    .await;
    drop(first);
    for seq in 5..8 {
        within("a send", a.send(to_b, tag(seq), message(seq)))
            .await
            .expect("a send");
    }
    let mut second = b
        .receiver(Tag(0x40)..=Tag(0x4f), 8)
        .expect("a receiver of the tags a dropped one had");
    match b.receiver(Tag(0x4f)..=Tag(0x50), 1) {
        Err(Error::TagsTaken { asked, taken }) => {
            assert_eq!(
                (asked, taken),
                ((0x4f, 0x50), (0x40, 0x4f)),
                "the ranges said"
            );
        }
        other => panic!("a receiver of tags taken: {other:?}"),
    }
    for seq in 0..8 {
        let m = within("a message", second.recv()).await.expect("B's inbox");
        assert_eq!(
            (number_of(&m.data), m.tag),
            (seq, tag(seq)),
            "the messages the next receiver got"
        );
        assert!(m.data == message(seq), "the bytes of message {seq}");
    }
    assert_eq!(second.try_recv(), None, "a message twice");
    settled("B", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

/// How soon a dropped driver's operations fail: at once, really.
const GONE: Duration = Duration::from_secs(5);

/// Process `rank`'s TCP module in the current runtime's reactor, with no
/// driver yet.
fn tcp_module(job: &Job, rank: u32) -> Module<Tcp> {
    let builder = job.builder::<Tcp>(rank);
    let setup = builder.tcp_setup().expect("the TCP setup");
    let opening = builder.opening().expect("the process's opening");
    setup
        .build_on(
            TokioNet::new().expect("a network in the runtime"),
            opening.me,
            opening.job_key.as_deref(),
            opening.bootstrap,
        )
        .expect("a TCP module")
}

/// `fut`, which a driver's end must end within [`GONE`].
async fn soon<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(GONE, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not ended within {GONE:?} of the driver's end"),
    }
}

/// What every operation of `a`, whose driver is gone, comes to: sends,
/// puts (their buffers back), flushes, closes and new receivers fail
/// `DriverGone`; `inbox` ends.
async fn all_gone(
    a: &Endpoint<Tcp>,
    to: EndpointId,
    inbox: &mut btl_tokio::Receiver<Tcp>,
    key: btl_tokio::RemoteKey,
) {
    let sent = soon("a send", a.send(to, TAG, b"late")).await;
    assert_eq!(sent, Err(Error::DriverGone), "a send without a driver");
    let remote = btl_tokio::RemoteSlice {
        key,
        offset: 0,
        len: 10,
    };
    match soon("a put", a.put(to, vec![5; 10], remote)).await {
        Err(TransferError {
            error: Error::DriverGone,
            buffer,
        }) => {
            assert_eq!(buffer, vec![5; 10], "a put's buffer back");
        }
        other => panic!("a put without a driver: {other:?}"),
    }
    assert_eq!(
        soon("a recv", inbox.recv()).await,
        None,
        "a recv without a driver"
    );
    assert_eq!(
        soon("a flush", a.flush()).await,
        Err(Error::DriverGone),
        "a flush without a driver"
    );
    assert_eq!(
        soon("a close", a.close()).await,
        Err(Error::DriverGone),
        "a close without a driver"
    );
    assert_eq!(
        a.receiver(Tag(0x80)..=Tag(0x80), 1).map(|_| ()),
        Err(Error::DriverGone),
        "a receiver without a driver"
    );
}

on_runtimes!(driver_never_run: 0x7b50 => a_driver_dropped_unpolled_fails_everything);

/// The driver `Endpoint::new` returns, dropped without being spawned:
/// every operation fails `DriverGone`, the inbox ends.
async fn a_driver_dropped_unpolled_fails_everything(job: Job) {
    let b = job.open::<Tcp>(1);
    let key = b
        .lend(vec![0; 64], Access::REMOTE_WRITE)
        .expect("B lends a region")
        .remote_key();
    let (a, driver) = Endpoint::new(tcp_module(&job, 0));
    let mut inbox = a.receiver(TAG..=TAG, 4).expect("A's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    drop(driver);
    all_gone(&a, to_b, &mut inbox, key).await;
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(driver_aborted: 0x7b60 => an_aborted_driver_fails_what_waits);

/// The driver task aborted while a send, a put and a get wait for a
/// paused peer and a `recv` waits: each ends with `DriverGone` (the put's
/// and get's buffers back), the `recv` with `None`, and every later
/// operation fails so too.
async fn an_aborted_driver_fails_what_waits(job: Job) {
    let (a, driver) = Endpoint::new(tcp_module(&job, 0));
    let task = tokio::spawn(driver);
    let peer = SyncPeer::start::<Tcp>(&job, 1);
    let key = peer.key;
    let mut inbox = a.receiver(TAG..=TAG, 4).expect("A's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    within("a first send", a.send(to_b, TAG, b"hello"))
        .await
        .expect("a first send");
    peer.pause();
    let mut send = a.send(to_b, TAG, message(1));
    let put_data = pattern(0xa5, 2048);
    let put_ptr = put_data.as_ptr();
    let remote = |offset| btl_tokio::RemoteSlice {
        key,
        offset,
        len: 2048,
    };
    let mut put = a.put(to_b, put_data, remote(0));
    let get_buffer = vec![0; 2048];
    let get_ptr = get_buffer.as_ptr();
    let mut get = a.get(to_b, get_buffer, remote(4096));
    assert!(
        poll_once(&mut send).await.is_pending(),
        "a send to a paused peer, done"
    );
    assert!(
        poll_once(&mut put).await.is_pending(),
        "a put to a paused peer, done"
    );
    assert!(
        poll_once(&mut get).await.is_pending(),
        "a get from a paused peer, done"
    );
    let ((), received) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            task.abort();
            assert!(
                within("the driver's end", task)
                    .await
                    .is_err_and(|e| e.is_cancelled()),
                "the driver task, aborted"
            );
        },
        soon("a recv", inbox.recv()),
    );
    assert_eq!(received, None, "a recv when the driver went");
    let sent = soon("a send", &mut send).await;
    assert_eq!(
        sent,
        Err(Error::DriverGone),
        "a send waiting when the driver went"
    );
    match soon("a put", &mut put).await {
        Err(TransferError {
            error: Error::DriverGone,
            buffer,
        }) => {
            assert_eq!(buffer.as_ptr(), put_ptr, "the put's buffer back");
            assert!(buffer == pattern(0xa5, 2048), "the put's bytes back");
        }
        other => panic!("a put waiting when the driver went: {other:?}"),
    }
    match soon("a get", &mut get).await {
        Err(TransferError {
            error: Error::DriverGone,
            buffer,
        }) => {
            assert_eq!(buffer.as_ptr(), get_ptr, "the get's buffer back");
            assert_eq!(buffer.len(), 2048, "the get's buffer, its length kept");
        }
        other => panic!("a get waiting when the driver went: {other:?}"),
    }
    all_gone(&a, to_b, &mut inbox, key).await;
    drop(peer);
}
