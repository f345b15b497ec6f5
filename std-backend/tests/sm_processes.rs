//! The shared-memory BTL between two processes, each with its own segment
//! in `/dev/shm` holding the ring the other writes: a put of 1 MiB with a
//! notice, checked by its target; a get of it back, checked by the
//! getter; messages both ways; and the goodbye when one finalizes.

use std::pin::Pin;
use std::process::Command;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteKey, RemoteSlice, Tag};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig, PoolCell};
use btl_core::sm::SharedMemory;
use btl_std::driver::heap::Heap;
use btl_std::transports::sm::segment::Segment;

type Sm<'a> = SharedMemory<'a, Pin<Box<[PoolCell]>>, Vec<u8>, 2, 4, 8, 64>;

const LEN: usize = 1 << 20;
const KEY: Tag = Tag(0x80);
const CHECKED: Tag = Tag(0x81);
const DONE: Tag = Tag(0x82);
const DEADLINE: Duration = Duration::from_secs(20);

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

fn segment_name(job: u32, rank: u32) -> String {
    format!("btl-test-sm-{job}-{rank}")
}

/// This process's segment, the peer's, and the slot this side claimed in
/// the peer's (its ring to the peer) and the one the peer claimed in this
/// side's (the ring from it).
fn join(job: u32, rank: u32) -> (Segment, Segment, usize, usize) {
    let mine = Segment::create(&segment_name(job, rank), 1, 1 << 14).expect("this segment");
    let start = Instant::now();
    let theirs = loop {
        if let Ok(s) = Segment::open(&segment_name(job, 1 - rank)) {
            break s;
        }
        assert!(start.elapsed() < DEADLINE, "the peer's segment never came");
        std::thread::sleep(Duration::from_millis(1));
    };
    let out = theirs
        .claim(rank + 1)
        .expect("a slot in the peer's segment");
    let inbound = loop {
        if mine.claimant(0) == Some(2 - rank) {
            break 0;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the peer never claimed its slot"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    (mine, theirs, out, inbound)
}

fn module<'a>(
    mine: &'a Segment,
    theirs: &'a Segment,
    out: usize,
    inbound: usize,
    peer: ProcName,
) -> (Sm<'a>, EndpointId) {
    let class = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 16,
        max: 16,
        inc: 4,
    };
    let pools = Heap::<Vec<u8>>::pools(FragmentPoolsConfig {
        small: class(256),
        eager: class(4096),
        max: class(32 << 10),
    })
    .expect("pools");
    let mut sm: Sm<'a> = SharedMemory::new(pools);
    sm.attach(
        peer,
        theirs.ring_words_of(out).expect("a ring"),
        mine.ring_words_of(inbound).expect("a ring"),
    )
    .expect("attach");
    let mut eps = [None];
    let mut words = [0u64];
    sm.add_procs(&[peer], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    (sm, eps[0].expect("reachable"))
}

/// Serves `sm` until `take` takes an event.
fn wait<R>(sm: &mut Sm<'_>, mut take: impl FnMut(Event<'_>) -> Option<R>) -> R {
    let start = Instant::now();
    loop {
        sm.progress();
        while let Some(event) = sm.poll_event() {
            if let Some(r) = take(event) {
                return r;
            }
        }
        assert!(start.elapsed() < DEADLINE, "nothing came");
        std::thread::yield_now();
    }
}

/// The other process: lends 1 MiB, checks what was put there, leaves when
/// told.
#[test]
#[ignore = "run by the test below as its child"]
fn child() {
    let Ok(job) = std::env::var("BTL_SM_JOB") else {
        return;
    };
    let job: u32 = job.parse().expect("a job");
    let (mine, theirs, out, inbound) = join(job, 1);
    let (mut sm, parent) = module(
        &mine,
        &theirs,
        out,
        inbound,
        ProcName::new(u64::from(job), 0),
    );
    let lent = sm
        .register_mem(vec![0u8; LEN], Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("lent");
    let key = lent.remote_key().0.to_le_bytes();
    while sm.send_copy(parent, KEY, &key).is_err() {
        sm.progress();
    }
    let slice = wait(&mut sm, |e| match e {
        Event::PutArrived { slice, imm: 7, .. } => Some(slice),
        _ => None,
    });
    let intact = slice.len == LEN as u64
        && sm
            .region(lent)
            .expect("lent")
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i));
    while sm.send_copy(parent, CHECKED, &[u8::from(intact)]).is_err() {
        sm.progress();
    }
    wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == DONE => Some(()),
        _ => None,
    });
    let _ = sm.finalize();
    let start = Instant::now();
    // The goodbye goes out as the ring has room.
    while start.elapsed() < Duration::from_millis(200) {
        sm.progress();
    }
}

#[test]
fn two_processes_put_get_and_talk_through_their_segments() {
    let job = std::process::id();
    let mut child = Command::new(std::env::current_exe().expect("this test"))
        .args(["--exact", "child", "--ignored", "--nocapture"])
        .env("BTL_SM_JOB", job.to_string())
        .spawn()
        .expect("the child");
    let (mine, theirs, out, inbound) = join(job, 0);
    let (mut sm, peer) = module(
        &mine,
        &theirs,
        out,
        inbound,
        ProcName::new(u64::from(job), 1),
    );
    let key = wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == KEY => {
            Some(RemoteKey(u64::from_le_bytes(m.data.try_into().ok()?)))
        }
        _ => None,
    });
    let src = sm
        .register_mem((0..LEN).map(pattern).collect(), Access::empty())
        .expect("src");
    let whole = MemSlice {
        handle: src,
        offset: 0,
        len: LEN as u64,
    };
    let remote = RemoteSlice {
        key,
        offset: 0,
        len: LEN as u64,
    };
    sm.put_notify(peer, whole, remote, 7, 1).expect("put");
    let put = wait(&mut sm, |e| match e {
        Event::PutComplete { result, .. } => Some(result),
        _ => None,
    });
    assert_eq!(put, Ok(()));
    let checked = wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == CHECKED => Some(m.data == [1]),
        _ => None,
    });
    assert!(checked, "the child found its memory as put");
    let back = sm
        .register_mem(vec![0u8; LEN], Access::empty())
        .expect("back");
    sm.get(
        peer,
        MemSlice {
            handle: back,
            offset: 0,
            len: LEN as u64,
        },
        remote,
        2,
    )
    .expect("get");
    let got = wait(&mut sm, |e| match e {
        Event::GetComplete { result, .. } => Some(result),
        _ => None,
    });
    assert_eq!(got, Ok(()));
    assert!(
        sm.region(back)
            .expect("back")
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i))
    );
    while sm.send_copy(peer, DONE, &[]).is_err() {
        sm.progress();
    }
    wait(&mut sm, |e| {
        matches!(e, Event::PeerLeft { .. }).then_some(())
    });
    assert!(child.wait().expect("it ends").success());
}
