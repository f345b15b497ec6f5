//! Backpressure: a receiver with a small capacity that nobody reads holds
//! its peer's sender back (its sends stay pending, its module stays
//! within its pools) and loses nothing: once it is read, everything
//! arrives, in order. Sends to one peer arrive in the order they were
//! called, even when one of them waited for room. A server that
//! answers each request before it reads the next keeps serving when its
//! inbox fills.

mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use btl_tokio::{Endpoint, Tag};
use common::{
    DEADLINE, EAGER, Flavor, Job, TAG, Tcp, Wire, fill, message, number_of, numbered, poll_once,
    reach, run, settled, small_pair, usage, within,
};

/// Messages A sends: many more than B's pools, event queue and credits
/// hold.
const TOTAL: u64 = 1500;

/// A's message `seq`: small and eager ones.
fn stream(seq: u64) -> Vec<u8> {
    numbered(0xbb, seq, [24, 300, EAGER / 2][(seq % 3) as usize])
}

on_runtimes!(held_back: 0x7d10 => an_unread_receiver_holds_the_sender_back, [tcp, udp]);

/// B's inbox holds two messages and nobody reads it: A's sends, one after
/// the other, stop completing well before the last (A is held back, its
/// send pending, B's module within its tables); then B reads, and every
/// message arrives once, in order, and A's sends all complete.
async fn an_unread_receiver_holds_the_sender_back<W: Wire>(job: Job) {
    let (a, b) = (job.open::<W>(0), job.open::<W>(1));
    let mut inbox = b.receiver(TAG..=TAG, 2).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let sent = Cell::new(0u64);
    let sender = async {
        for seq in 0..TOTAL {
            within("a send", a.send(to_b, TAG, stream(seq)))
                .await
                .unwrap_or_else(|e| panic!("send {seq}: {e}"));
            sent.set(seq + 1);
        }
    };
    let reader = async {
        // Nothing is read until A's sends stop completing.
        let start = Instant::now();
        let mut last = sent.get();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = sent.get();
            if now == last && now > 0 {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "A's sends never stopped: {now} done"
            );
            last = now;
        }
        let held = sent.get();
        assert!(
            held < TOTAL,
            "all {TOTAL} sends completed while B read nothing"
        );
        let b_usage = usage(&b).0;
        for seq in 0..TOTAL {
            let m = within("B's next message", inbox.recv())
                .await
                .expect("B's inbox");
            assert_eq!(number_of(&m.data), seq, "the order of A's messages");
            assert!(m.data == stream(seq), "the bytes of message {seq}");
        }
        (held, b_usage)
    };
    let ((), (held, b_usage)) = tokio::join!(sender, reader);
    assert!(held > 0, "A sent nothing before it was held back");
    assert!(
        b_usage.events > 0,
        "B's module held nothing while A was held back: {b_usage:?}"
    );
    assert_eq!(sent.get(), TOTAL, "A's sends that completed");
    assert_eq!(inbox.try_recv(), None, "a message never sent");
    settled("A", &a, 0).await;
    settled("B", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

on_runtimes!(call_order: 0x7d20 => sends_arrive_in_the_order_called);

/// X, a send refused for room (B reads nothing, A's module is full), is
/// called before Y; room comes (B reads what A's module took); Y is then
/// called, and polled before X is polled again. `Endpoint::send` says
/// messages to one peer arrive in the order of the calls, a send that
/// waits for room included: X's before Y's.
async fn sends_arrive_in_the_order_called(job: Job) {
    let (a, b) = small_pair(&job);
    let mut inbox = b.receiver(TAG..=TAG, 1).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let mut next = 0;
    let filled = fill(&a, to_b, &mut next).await;
    let (x, mut x_send) = filled.waiting;
    let sender = async {
        for (seq, send) in filled.pending {
            within("a send taken", send)
                .await
                .unwrap_or_else(|e| panic!("send {seq}: {e}"));
        }
    };
    let receiver = async {
        for _ in 0..filled.taken.len() {
            within("B's next message", inbox.recv())
                .await
                .expect("B's inbox");
        }
    };
    tokio::join!(sender, receiver);
    // Room again: what A's module took is acknowledged and read.
    let y = next;
    let mut y_send = a.send(to_b, TAG, message(y));
    let _ = poll_once(&mut y_send).await;
    let _ = poll_once(&mut x_send).await;
    within("X", x_send).await.expect("X");
    within("Y", y_send).await.expect("Y");
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = within("B's next message", inbox.recv())
            .await
            .expect("B's inbox");
        got.push(number_of(&m.data));
    }
    assert_eq!(
        got,
        [x, y],
        "X was called before Y (X waited for room), and arrived after it"
    );
    settled("A", &a, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}

/// How long the echo exchange may take: it takes well under a second.
const SERVED: Duration = Duration::from_secs(10);

/// Clients and the requests each sends.
const CLIENTS: u8 = 4;
const REQUESTS: u64 = 30;

#[test]
fn a_server_that_awaits_each_reply_keeps_serving() {
    run(Flavor::MultiThread, || {
        server_awaiting_its_replies(Job::new("echo", 0x7d30))
    });
}

/// B serves requests as a simple server does: it reads one, sends its
/// reply and waits for that send to complete, then reads the next; its
/// inbox holds two requests. Four tasks of A each send requests and read
/// their replies. Every reply comes back: B's full inbox does not hold
/// back the completion of the reply B waits for.
async fn server_awaiting_its_replies(job: Job) {
    let a: Endpoint<Tcp> = job.open(0);
    let b: Endpoint<Tcp> = job.open(1);
    let mut requests = b.receiver(Tag(0x40)..=Tag(0x4f), 2).expect("B's receiver");
    let to_b = reach(&a, job.proc(1)).await;
    let server = tokio::spawn({
        let b = b.clone();
        async move {
            for _ in 0..u64::from(CLIENTS) * REQUESTS {
                let Some(m) = requests.recv().await else {
                    return;
                };
                if let Err(e) = b.send(m.from, Tag(m.tag.0 + 0x10), m.data).await {
                    panic!("a reply: {e}");
                }
            }
        }
    });
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let a = a.clone();
        let mut replies = a
            .receiver(Tag(0x50 + c)..=Tag(0x50 + c), 2)
            .expect("a client's receiver");
        clients.spawn(async move {
            let requests = async {
                for seq in 0..REQUESTS {
                    if let Err(e) = a
                        .send(to_b, Tag(0x40 + c), numbered(u64::from(c), seq, 64))
                        .await
                    {
                        panic!("client {c}'s request {seq}: {e}");
                    }
                }
            };
            let replies = async {
                for seq in 0..REQUESTS {
                    let m = replies.recv().await.expect("a client's inbox");
                    assert_eq!(number_of(&m.data), seq, "the order of client {c}'s replies");
                }
            };
            tokio::join!(requests, replies);
        });
    }
    let served = tokio::time::timeout(SERVED, async {
        while let Some(client) = clients.join_next().await {
            client.expect("a client ends well");
        }
    })
    .await;
    if served.is_err() {
        panic!(
            "the exchange stalled: A {:?}, B {:?} (B's module holds events its driver does not take)",
            usage(&a),
            usage(&b)
        );
    }
    within("the server", server)
        .await
        .expect("the server ends well");
    settled("A", &a, 0).await;
    settled("B", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}
