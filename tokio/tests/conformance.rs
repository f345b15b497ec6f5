//! The conformance suite's promises (sends, puts, gets, peer loss, close)
//! kept through the async face, each test on a current-thread and on a
//! multi-thread runtime, over TCP and, where the transport changes what
//! happens, over UDP: every size up to the module's largest arrives intact
//! and in order, a larger one fails `TooLarge` and the endpoint goes on;
//! puts, notified puts and gets move bytes exactly and hand their buffer
//! back, on success and on failure (a buffer too short, a region lent
//! read-only); a peer that crashes fails every future waiting on it once
//! and is told by `peer_events`; `flush` waits for every acknowledgement,
//! and after `close` every operation fails `Closed` and inboxes end once
//! empty.

mod common;

use std::task::Poll;
use std::time::Duration;

use btl_std::RejectCode;
use btl_tokio::{
    Access, BtlError, Endpoint, Error, LostReason, PeerEvent, RemoteSlice, Tag, TransferError,
};
use common::{
    EAGER, Job, MAX_SEND, PEER_REGION, SyncPeer, Wire, by, pattern, poll_once, reach, settled,
    usage, within,
};

/// Every size to 16 bytes, each power of two from 32 and its neighbours,
/// and every size within 3 bytes of the eager limit and of `max`: none
/// above `max`.
fn sizes(max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..=16).collect();
    let mut p = 32;
    while p <= max {
        sizes.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    for edge in [EAGER, max] {
        sizes.extend(edge.saturating_sub(3)..=edge + 3);
    }
    sizes.retain(|&n| n <= max);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The seed of the message of `len` bytes with `tag`: a message truncated
/// or delivered under the wrong tag compares unequal.
fn seed(len: usize, tag: Tag) -> u64 {
    (len as u64) << 8 | u64::from(tag.0)
}

/// The largest message A may send B, once a link is open.
fn max_send<W: Wire>(a: &Endpoint<W>, to_b: btl_tokio::EndpointId) -> usize {
    a.with(|m| m.max_send_to(to_b))
        .expect("the largest message to a known peer")
}

on_runtimes!(every_size: 0x7a10 => every_size_arrives_intact_and_in_order, [tcp, udp]);

/// Messages of every size from 0 to the module's largest, under three
/// tags, each sent once its predecessor completed: B gets each once, in
/// the order sent, byte for byte, with its tag, from A's endpoint; both
/// modules are idle afterwards.
async fn every_size_arrives_intact_and_in_order<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let mut inbox = b.receiver(Tag(0x40)..=Tag(0xff), 8).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let to_a = reach(&b, job.proc(0)).await;
    within("a first message", a.send(to_b, Tag(0x40), Vec::new()))
        .await
        .expect("a first message");
    within("the first message received", inbox.recv())
        .await
        .expect("the first message");
    let max = max_send(&a, to_b);
    assert_eq!(max, MAX_SEND, "the largest message the module was given");

    let tags = [Tag(0x40), Tag(0x80), Tag(0xff)];
    let messages: Vec<(Tag, Vec<u8>)> = sizes(max)
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let tag = tags[i % tags.len()];
            (tag, pattern(seed(n, tag), n))
        })
        .collect();
    let sender = async {
        for (i, (tag, data)) in messages.iter().enumerate() {
            within("a send", a.send(to_b, *tag, data.as_slice()))
                .await
                .unwrap_or_else(|e| panic!("send {i} ({} bytes): {e}", data.len()));
        }
    };
    let receiver = async {
        for (i, (tag, data)) in messages.iter().enumerate() {
            let m = within("a message", inbox.recv())
                .await
                .expect("B's inbox open");
            assert_eq!(m.from, to_a, "the sender's endpoint of message {i}");
            assert_eq!(m.tag, *tag, "the tag of message {i}");
            assert_eq!(
                m.data.len(),
                data.len(),
                "the length of message {i}: messages out of order or cut"
            );
            assert!(
                m.data == *data,
                "the bytes of message {i} ({} bytes)",
                data.len()
            );
        }
    };
    tokio::join!(sender, receiver);
    assert_eq!(inbox.try_recv(), None, "a message never sent");
    settled("A after its sends", &a, 0).await;
    settled("B after its messages", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(too_large: 0x7a20 => too_large_is_refused_and_the_endpoint_goes_on, [tcp, udp]);

/// A message one byte over the largest fails `TooLarge` (this side's
/// limit, its length and the limit said) and sends nothing; the endpoint
/// goes on: a message of the largest size, then a small one, arrive.
async fn too_large_is_refused_and_the_endpoint_goes_on<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let mut inbox = b.receiver(Tag(0x40)..=Tag(0x4f), 4).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    within("a first message", a.send(to_b, Tag(0x40), b"hello"))
        .await
        .expect("a first message");
    let max = max_send(&a, to_b);
    let refused = within(
        "a send too large",
        a.send(to_b, Tag(0x41), vec![1u8; max + 1]),
    )
    .await;
    match refused {
        Err(Error::Btl(BtlError::TooLarge {
            len, max: limit, ..
        })) => {
            assert_eq!(len, max as u64 + 1, "the length refused");
            assert_eq!(limit, max as u64, "the limit said");
        }
        other => panic!("a message over the largest: {other:?}"),
    }
    let largest = pattern(0x1a, max);
    within(
        "the largest message",
        a.send(to_b, Tag(0x42), largest.as_slice()),
    )
    .await
    .expect("the largest message after a refusal");
    within("a small message", a.send(to_b, Tag(0x43), b"after"))
        .await
        .expect("a small message after a refusal");
    let got: Vec<(Tag, Vec<u8>)> = {
        let mut got = Vec::new();
        for _ in 0..3 {
            let m = within("a message", inbox.recv()).await.expect("a message");
            got.push((m.tag, m.data.to_vec()));
        }
        got
    };
    let expected = vec![
        (Tag(0x40), b"hello".to_vec()),
        (Tag(0x42), largest),
        (Tag(0x43), b"after".to_vec()),
    ];
    assert!(
        got == expected,
        "what arrived: the refused message is not among them"
    );
    settled("A after a refusal", &a, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

/// Bytes of B's region lent in the one-sided tests.
const REGION: usize = 256 << 10;

on_runtimes!(one_sided: 0x7a30 => puts_and_gets_move_bytes_exactly, [tcp, udp]);

/// Puts, notified puts and gets of 1 byte to the whole region, at offsets
/// that cross fragments: the region holds exactly what was put (and
/// nothing else changed), each notice says where and what `imm`, a get
/// reads exactly its range into the front of its buffer and leaves the
/// rest alone, and every buffer comes back (the same allocation). The
/// region comes back at reclaim, as the puts left it.
async fn puts_and_gets_move_bytes_exactly<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let mut arrivals = b.arrivals(4);
    let to_b = reach(&a, job.proc(1)).await;
    let to_a = reach(&b, job.proc(0)).await;
    let mut model = pattern(0xb0, REGION);
    let lent = b
        .lend(model.clone(), Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("B lends its region");
    assert_eq!(lent.len(), REGION);
    let ranges: [(u64, usize); 4] = [(0, 1), (7, EAGER - 1), (100, 70_000), (0, REGION)];
    for (round, &(offset, len)) in ranges.iter().enumerate() {
        let round = round as u64;
        let remote = lent.remote(offset, len as u64);
        let at = offset as usize..offset as usize + len;

        let data = pattern(0x100 + round, len);
        let given = data.clone();
        let ptr = given.as_ptr();
        let back = within("a put", a.put(to_b, given, remote))
            .await
            .unwrap_or_else(|e| panic!("put of {len} bytes at {offset}: {e}"));
        assert_eq!(back.as_ptr(), ptr, "the put's own buffer back");
        assert!(back == data, "the put's buffer as it was given");
        model[at.clone()].copy_from_slice(&data);
        let region = b.with_lent(&lent, |r| r.to_vec()).expect("B's region");
        assert!(
            region == model,
            "B's region after a put of {len} bytes at {offset}"
        );

        let data = pattern(0x200 + round, len);
        let imm = 0xfeed_0000 + round;
        let back = within(
            "a notified put",
            a.put_notify(to_b, data.clone(), remote, imm),
        )
        .await
        .unwrap_or_else(|e| panic!("notified put of {len} bytes at {offset}: {e}"));
        assert!(back == data, "the notified put's buffer back");
        model[at.clone()].copy_from_slice(&data);
        let notice = within("the put's notice", arrivals.recv())
            .await
            .expect("B's arrivals open");
        assert_eq!(notice.from, to_a, "who put");
        assert_eq!(notice.imm, imm, "the notice's imm");
        assert_eq!(
            (notice.slice.offset, notice.slice.len),
            (offset, len as u64),
            "where the notice says the data lies"
        );
        assert_eq!(
            notice.slice.handle.remote_key(),
            lent.remote_key(),
            "in the region lent"
        );
        let region = b.with_lent(&lent, |r| r.to_vec()).expect("B's region");
        assert!(region == model, "B's region after a notified put");

        let mut buffer = vec![0xee; len + 13];
        buffer[len..].copy_from_slice(&pattern(0x300 + round, 13));
        let ptr = buffer.as_ptr();
        let tail = buffer[len..].to_vec();
        let got = within("a get", a.get(to_b, buffer, remote))
            .await
            .unwrap_or_else(|e| panic!("get of {len} bytes at {offset}: {e}"));
        assert_eq!(got.as_ptr(), ptr, "the get's own buffer back");
        assert_eq!(got.len(), len + 13, "the get's buffer, its length kept");
        assert!(
            got[..len] == model[at],
            "the bytes a get of {len} bytes at {offset} read"
        );
        assert!(
            got[len..] == tail,
            "the get's buffer beyond what it read, untouched"
        );
    }
    assert_eq!(arrivals.try_recv(), None, "a notice of a put without one");
    settled("A after its puts and gets", &a, 0).await;
    settled("B after serving them", &b, 1).await;
    let region = within("B's reclaim", b.reclaim(lent))
        .await
        .expect("B takes its region back");
    assert!(region == model, "the region reclaimed, as the puts left it");
    settled("B after its reclaim", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(short_buffer: 0x7a40 => a_get_into_a_short_buffer_fails_with_its_buffer, [tcp]);

/// A get of 100 bytes into 99 fails `BufferTooShort` (what it needed, what
/// it had), hands the buffer back untouched and registers nothing; a get
/// into a buffer long enough then works.
async fn a_get_into_a_short_buffer_fails_with_its_buffer<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let to_b = reach(&a, job.proc(1)).await;
    let lent = b
        .lend(pattern(0xb1, 4096), Access::REMOTE_READ)
        .expect("B lends its region");
    let buffer = pattern(0xa1, 99);
    let (ptr, before) = (buffer.as_ptr(), buffer.clone());
    match within(
        "a get into a short buffer",
        a.get(to_b, buffer, lent.remote(10, 100)),
    )
    .await
    {
        Err(TransferError { error, buffer }) => {
            assert_eq!(
                error,
                Error::BufferTooShort {
                    needed: 100,
                    len: 99
                },
                "why a get into a short buffer failed"
            );
            assert_eq!(buffer.as_ptr(), ptr, "the short buffer back");
            assert!(buffer == before, "the short buffer untouched");
        }
        Ok(_) => panic!("a get of 100 bytes into 99 succeeded"),
    }
    assert_eq!(
        usage(&a).0.registrations,
        0,
        "a registration left by a refused get"
    );
    let got = within("a get", a.get(to_b, vec![0; 100], lent.remote(10, 100)))
        .await
        .expect("a get into a buffer long enough");
    assert!(got == pattern(0xb1, 4096)[10..110], "the bytes read");
    settled("A after its gets", &a, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(read_only: 0x7a50 => a_put_into_read_only_memory_is_refused, [tcp, udp]);

/// A put into a region lent for reading only is refused by the peer
/// (`Rejected(AccessDenied)`), its buffer back, the region unchanged; the
/// endpoint goes on (a get from the same region works).
async fn a_put_into_read_only_memory_is_refused<W: Wire>(job: Job) {
    // Over TCP the rest of a refused put's packets are acknowledged only
    // with the next keepalive (the engine's doing, 10 s by default), and
    // the put's buffer is read until then: keepalives every second.
    let keepalive = format!("btl_{}_keepalive", W::NAME);
    let open = |rank| W::open(job.builder::<W>(rank).param(&keepalive, 1000));
    let (a, b) = (open(0), open(1));
    let to_b = reach(&a, job.proc(1)).await;
    let original = pattern(0xb2, 8192);
    let lent = b
        .lend(original.clone(), Access::REMOTE_READ)
        .expect("B lends its region");
    let data = pattern(0xa2, 5000);
    let given = data.clone();
    let ptr = given.as_ptr();
    match within(
        "a put into read-only memory",
        a.put(to_b, given, lent.remote(0, 5000)),
    )
    .await
    {
        Err(TransferError { error, buffer }) => {
            assert_eq!(
                error,
                Error::Btl(BtlError::Rejected(RejectCode::AccessDenied)),
                "why a put into read-only memory failed"
            );
            assert_eq!(buffer.as_ptr(), ptr, "the put's buffer back");
            assert!(buffer == data, "the put's buffer as given");
        }
        Ok(_) => panic!("a put into memory lent read-only succeeded"),
    }
    let region = b.with_lent(&lent, |r| r.to_vec()).expect("B's region");
    assert!(region == original, "a region lent read-only, written");
    let got = within("a get", a.get(to_b, vec![0; 5000], lent.remote(0, 5000)))
        .await
        .expect("a get after a refused put");
    assert!(got == original[..5000], "the bytes read");
    settled("A after a refused put", &a, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

/// How soon after its crash a peer is found lost: its refusals last the
/// refusal timeout (250 ms), and a backoff.
const LOSS_FOUND: Duration = Duration::from_secs(5);

on_runtimes!(peer_loss: 0x7a60 => a_lost_peer_fails_every_waiting_future_once, [tcp, udp]);

/// Whether `error` is what an operation towards a crashed peer ends with:
/// the peer lost, not for a goodbye.
fn lost(error: &Error) -> bool {
    matches!(error, Error::Btl(BtlError::PeerLost(reason)) if *reason != LostReason::Left)
}

/// A talks with B, a synchronous module in a thread, which stops serving;
/// A starts sends (small, eager, the largest), a put and a get, and B
/// crashes (its sockets closed, no goodbye). Every one of A's futures ends
/// with the loss, within seconds (the refusals, not the peer timeout), once (polled again, it says so), the put's and get's
/// buffers back; `peer_events` tells the loss once; a later operation
/// towards B fails; A's module is idle again.
async fn a_lost_peer_fails_every_waiting_future_once<W: Wire>(job: Job) {
    let a = job.open::<W>(0);
    let mut events = a.peer_events(4);
    let peer = SyncPeer::start::<W>(&job, 1);
    let to_b = reach(&a, job.proc(1)).await;
    within("a first send", a.send(to_b, Tag(0x40), b"hello"))
        .await
        .expect("a first send to a serving peer");
    let got = within(
        "a first get",
        a.get(
            to_b,
            vec![0; 64],
            RemoteSlice {
                key: peer.key,
                offset: 0,
                len: 64,
            },
        ),
    )
    .await
    .expect("a first get from a serving peer");
    assert!(
        got == pattern(0x5eed, PEER_REGION)[..64],
        "the bytes of a first get"
    );

    let key = peer.key;
    peer.pause();
    let mut sends: Vec<_> = [16, EAGER, MAX_SEND, 100]
        .into_iter()
        .map(|n| a.send(to_b, Tag(0x41), pattern(n as u64, n)))
        .collect();
    let put_data = pattern(0xa3, 2048);
    let put_ptr = put_data.as_ptr();
    let remote = |offset| RemoteSlice {
        key,
        offset,
        len: 2048,
    };
    let mut put = a.put(to_b, put_data, remote(0));
    let get_buffer = vec![0; 2048];
    let get_ptr = get_buffer.as_ptr();
    let mut get = a.get(to_b, get_buffer, remote(4096));
    for (i, send) in sends.iter_mut().enumerate() {
        assert!(
            poll_once(send).await.is_pending(),
            "send {i} done with its peer paused"
        );
    }
    assert!(
        poll_once(&mut put).await.is_pending(),
        "a put done with its peer paused"
    );
    assert!(
        poll_once(&mut get).await.is_pending(),
        "a get done with its peer paused"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    peer.crash();
    // Its sockets are closed: A's reconnections or datagrams are refused,
    // and the refusal timeout (250 ms) and a backoff later B is lost, long
    // before the peer timeout (30 s).
    let lost_by = tokio::time::Instant::now() + LOSS_FOUND;

    for (i, send) in sends.iter_mut().enumerate() {
        match by(lost_by, "a send to a crashed peer", &mut *send).await {
            Err(e) if lost(&e) => {}
            other => panic!("send {i} to a crashed peer: {other:?}"),
        }
        assert_eq!(
            poll_once(send).await,
            Poll::Ready(Err(Error::Polled)),
            "send {i} polled after it ended"
        );
    }
    match by(lost_by, "a put to a crashed peer", &mut put).await {
        Err(TransferError { error, buffer }) if lost(&error) => {
            assert_eq!(buffer.as_ptr(), put_ptr, "the put's buffer back");
            assert!(buffer == pattern(0xa3, 2048), "the put's buffer as given");
        }
        other => panic!("a put to a crashed peer: {other:?}"),
    }
    match by(lost_by, "a get from a crashed peer", &mut get).await {
        Err(TransferError { error, buffer }) if lost(&error) => {
            assert_eq!(buffer.as_ptr(), get_ptr, "the get's buffer back");
            assert_eq!(buffer.len(), 2048, "the get's buffer, its length kept");
        }
        other => panic!("a get from a crashed peer: {other:?}"),
    }
    for (what, ended) in [
        ("put", poll_once(&mut put).await),
        ("get", poll_once(&mut get).await),
    ] {
        match ended {
            Poll::Ready(Err(TransferError {
                error: Error::Polled,
                ..
            })) => {}
            other => panic!("a {what} polled after it ended: {other:?}"),
        }
    }

    match by(lost_by, "the loss told", events.recv()).await {
        Some(PeerEvent::Lost(ep, error)) => {
            assert_eq!(ep, to_b, "the peer lost");
            assert!(lost(&Error::Btl(error)), "why the peer was lost: {error}");
        }
        other => panic!("what peer_events told of a crash: {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), events.recv())
            .await
            .is_err(),
        "a peer lost once is told once"
    );
    match within("a send after the loss", a.send(to_b, Tag(0x42), b"late")).await {
        Err(Error::Btl(BtlError::PeerLost(_) | BtlError::Unreachable)) => {}
        other => panic!("a send to a peer lost: {other:?}"),
    }
    match within("a put after the loss", a.put(to_b, vec![1; 10], remote(0))).await {
        Err(TransferError {
            error: Error::Btl(BtlError::PeerLost(_) | BtlError::Unreachable),
            buffer,
        }) => assert_eq!(buffer, vec![1; 10], "the late put's buffer back"),
        other => panic!("a put to a peer lost: {other:?}"),
    }
    settled("A after its peer's loss", &a, 0).await;
    within("A's close", a.close()).await.expect("A closes");
}

on_runtimes!(close: 0x7a70 => flush_and_close_end_everything, [tcp, udp]);

/// `flush` returns once everything sent is acknowledged. `close` makes
/// every later operation fail `Closed` (sends, puts and gets with their
/// buffers back, new receivers, flushes, another close), ends a pending
/// `recv`, lets an inbox hand out what it held and then end, and the peer
/// is told A left.
async fn flush_and_close_end_everything<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let mut a_inbox = a.receiver(Tag(0x40)..=Tag(0x4f), 8).expect("A's receiver");
    let mut a_other = a
        .receiver(Tag(0x50)..=Tag(0x5f), 8)
        .expect("A's other receiver");
    let mut b_inbox = b.receiver(Tag(0x40)..=Tag(0x4f), 16).expect("B's receiver");
    let mut b_events = b.peer_events(4);
    let to_b = reach(&a, job.proc(1)).await;
    let to_a = reach(&b, job.proc(0)).await;
    let lent = b
        .lend(vec![0; 64], Access::REMOTE_READ | Access::REMOTE_WRITE)
        .expect("B lends a region");

    // Taken as they are called; a flush waits for them all.
    let sends: Vec<_> = (0..10u64)
        .map(|i| {
            a.send(
                to_b,
                Tag(0x40),
                common::numbered(0xa4, i, 16 + 500 * i as usize),
            )
        })
        .collect();
    within("A's flush", a.flush()).await.expect("A's flush");
    assert_eq!(usage(&a).1, 0, "A owes its peer something after a flush");
    for send in sends {
        within("a send flushed", send)
            .await
            .expect("a send flushed");
    }
    for i in 0..10u64 {
        let m = within("a message", b_inbox.recv())
            .await
            .expect("a message");
        assert_eq!(common::number_of(&m.data), i, "the order of A's messages");
    }

    for i in 0..3u64 {
        within(
            "B's send",
            b.send(to_a, Tag(0x41), common::numbered(0xb4, i, 64)),
        )
        .await
        .expect("B's send");
    }
    let (closed, pending) = tokio::join!(
        within("A's close", a.close()),
        within("a pending recv", a_other.recv())
    );
    closed.expect("A closes");
    assert_eq!(pending, None, "a recv pending when its endpoint closed");

    for i in 0..3u64 {
        let m = within("what A's inbox held", a_inbox.recv())
            .await
            .expect("a message received before the close");
        assert_eq!(common::number_of(&m.data), i, "the order of B's messages");
    }
    assert_eq!(
        within("A's inbox, empty", a_inbox.recv()).await,
        None,
        "an inbox after the close"
    );
    assert_eq!(
        within("A's send after its close", a.send(to_b, Tag(0x40), b"late")).await,
        Err(Error::Closed),
        "a send after the close"
    );
    for (what, op) in [
        ("put", a.put(to_b, vec![2; 10], lent.remote(0, 10))),
        ("get", a.get(to_b, vec![2; 10], lent.remote(0, 10))),
    ] {
        match within("a transfer after the close", op).await {
            Err(TransferError {
                error: Error::Closed,
                buffer,
            }) => {
                assert_eq!(buffer, vec![2; 10], "the {what}'s buffer back");
            }
            other => panic!("a {what} after the close: {other:?}"),
        }
    }
    assert_eq!(
        a.receiver(Tag(0x60)..=Tag(0x6f), 4).map(|_| ()),
        Err(Error::Closed),
        "a receiver made after the close"
    );
    assert_eq!(
        within("A's flush after its close", a.flush()).await,
        Err(Error::Closed)
    );
    assert_eq!(
        within("A's second close", a.close()).await,
        Err(Error::Closed)
    );

    match within("B told A left", b_events.recv()).await {
        Some(PeerEvent::Left(ep)) => assert_eq!(ep, to_a, "who left"),
        other => panic!("what B was told of A's close: {other:?}"),
    }
    assert!(
        within("B's send to A gone", b.send(to_a, Tag(0x40), b"anyone?"))
            .await
            .is_err(),
        "a send to a peer that left succeeded"
    );
    within("B's close", b.close()).await.expect("B closes");
}
