//! Endpoints shared by many tasks on a multi-thread runtime: on each of
//! A and B, 32 tasks, each with a clone of its endpoint and a receiver of
//! its own tag, send their own stream of numbered messages to the other
//! endpoint while they read the stream meant for them; every message
//! arrives once, intact and in order per task. The endpoint, its futures
//! and its inboxes are `Send` (and the endpoint `Sync` and `Clone`):
//! checked when this file compiles.

mod common;

use std::future::Future;

use btl_tokio::{
    Arrivals, Endpoint, PeerEvents, Receiver, Tag, TcpEndpoint, Transfer, UdpEndpoint,
};
use common::{Flavor, Job, Tcp, Udp, number_of, numbered, reach, run, settled, within};

/// What a service shares between tasks and moves into them.
const _: () = {
    const fn shared<T: Send + Sync + Clone + 'static>() {}
    const fn moved<T: Send + 'static>() {}
    shared::<TcpEndpoint>();
    shared::<UdpEndpoint>();
    moved::<btl_tokio::Send<Tcp, Vec<u8>>>();
    moved::<btl_tokio::Send<Udp, &'static [u8]>>();
    moved::<Transfer<Tcp>>();
    moved::<Receiver<Tcp>>();
    moved::<Arrivals<Udp>>();
    moved::<PeerEvents<Tcp>>();
};

/// The futures of the `async fn`s of an endpoint and an inbox may be
/// spawned: checked at compile time (never called).
#[allow(dead_code)]
fn async_fns_are_send(ep: &'static TcpEndpoint, inbox: &'static mut Receiver<Tcp>) {
    fn spawnable<F: Future + Send + 'static>(_: F) {}
    spawnable(ep.flush());
    spawnable(ep.close());
    spawnable(ep.reach(btl_tokio::ProcName::new(0, 0), std::time::Duration::ZERO));
    spawnable(inbox.recv());
}

/// Tasks sharing each endpoint.
const TASKS: u8 = 32;
/// Messages each task sends.
const PER_TASK: u64 = 40;
/// The tags of A's tasks' streams; B's tasks' streams go under the tags
/// `TO_A` on.
const TO_B: u8 = 0x40;
const TO_A: u8 = 0x60;

/// Message `seq` of the stream under `tag`: lengths from 8 bytes to past
/// the eager limit, so that both fragment classes interleave.
fn message(tag: u8, seq: u64) -> Vec<u8> {
    let len = [8, 100, 1000, common::EAGER + 100][(seq % 4) as usize];
    numbered(u64::from(tag) << 32, seq, len)
}

#[test]
fn many_tasks_share_one_endpoint() {
    run(Flavor::MultiThread, || {
        tasks_share_one_endpoint(Job::new("many_tasks", 0x7c10))
    });
}

/// Spawns `TASKS` tasks on `ep`: task `t` sends its stream under tag
/// `send + t` to `to`, and reads the stream under `recv + t`.
fn spawn_tasks(
    tasks: &mut tokio::task::JoinSet<(u8, u8)>,
    ep: &Endpoint<Tcp>,
    to: btl_tokio::EndpointId,
    send: u8,
    recv: u8,
) {
    for t in 0..TASKS {
        let ep = ep.clone();
        let (out, mine) = (send + t, Tag(recv + t));
        let mut inbox = ep.receiver(mine..=mine, 4).expect("a task's receiver");
        tasks.spawn(async move {
            let sends = async {
                for seq in 0..PER_TASK {
                    within("a task's send", ep.send(to, Tag(out), message(out, seq)))
                        .await
                        .unwrap_or_else(|e| panic!("stream {out:#x}, send {seq}: {e}"));
                }
            };
            let receives = async {
                for seq in 0..PER_TASK {
                    let m = within("a task's message", inbox.recv())
                        .await
                        .expect("a task's inbox");
                    assert_eq!(m.tag, mine, "a message's tag");
                    assert_eq!(number_of(&m.data), seq, "the order of stream {:#x}", mine.0);
                    assert!(
                        m.data == message(mine.0, seq),
                        "the bytes of stream {:#x}'s message {seq}",
                        mine.0
                    );
                }
                assert_eq!(inbox.try_recv(), None, "a message never sent");
            };
            tokio::join!(sends, receives);
            (out, mine.0)
        });
    }
}

async fn tasks_share_one_endpoint(job: Job) {
    let a: Endpoint<Tcp> = job.open(0);
    let b: Endpoint<Tcp> = job.open(1);
    let to_b = reach(&a, job.proc(1)).await;
    let to_a = reach(&b, job.proc(0)).await;
    let mut tasks = tokio::task::JoinSet::new();
    spawn_tasks(&mut tasks, &a, to_b, TO_B, TO_A);
    spawn_tasks(&mut tasks, &b, to_a, TO_A, TO_B);
    let mut done = Vec::new();
    while let Some(task) = within("the tasks", tasks.join_next()).await {
        done.push(task.expect("a task ends well"));
    }
    done.sort_unstable();
    let expected: Vec<(u8, u8)> = (0..TASKS)
        .map(|t| (TO_B + t, TO_A + t))
        .chain((0..TASKS).map(|t| (TO_A + t, TO_B + t)))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(done, expected, "the tasks that ended");
    settled("A", &a, 0).await;
    settled("B", &b, 0).await;
    within("A's close", a.close()).await.expect("A closes");
    within("B's close", b.close()).await.expect("B closes");
}
