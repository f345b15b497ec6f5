//! The shared-memory component between processes, each with its module
//! and its segment in `/dev/shm`, joined through a shared directory: a
//! put of 1 MiB with a notice, checked by its target; a get of it back,
//! checked by the getter; messages both ways; the goodbye when one
//! finalizes. Then the faults: a peer killed (SIGKILL) is lost as
//! `Exited` within the watch's period, and a new start of it under the
//! same name is joined again as a new endpoint.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use btl_core::btl::{
    Access, Btl, BtlError, Event, LostReason, MemSlice, RemoteKey, RemoteSlice, Tag,
};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_std::{ModuleBuilder, SmModule};

type Sm = SmModule;

const LEN: usize = 1 << 20;
const KEY: Tag = Tag(0x80);
const CHECKED: Tag = Tag(0x81);
const DONE: Tag = Tag(0x82);
const HELLO: Tag = Tag(0x83);
const DEADLINE: Duration = Duration::from_secs(20);

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// The job's shared directory.
fn dir(job: u32) -> PathBuf {
    std::env::temp_dir().join(format!("btl-test-sm-processes-{job}"))
}

/// The module of rank `rank` of job `job`.
fn open(job: u32, rank: u32) -> Sm {
    ModuleBuilder::new(ProcName::new(u64::from(job), rank))
        .ignore_environment()
        .shared_dir(dir(job))
        .sm()
        .expect("an sm module")
}

/// `proc`'s endpoint, once it has joined.
fn reach(sm: &mut Sm, proc: ProcName) -> EndpointId {
    let mut eps = [None];
    let mut words = [0u64];
    sm.add_procs(&[proc], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    eps[0].expect("reachable")
}

/// This test binary as rank `rank`'s process, running the ignored test
/// `which`.
fn start(which: &str, job: u32, rank: u32) -> Child {
    Command::new(std::env::current_exe().expect("this test"))
        .args(["--exact", which, "--ignored", "--nocapture"])
        .env("BTL_SM_JOB", job.to_string())
        .env("BTL_SM_RANK", rank.to_string())
        .spawn()
        .expect("the child")
}

/// The job and rank a child was started as, if it was.
fn started_as() -> Option<(u32, u32)> {
    let var = |v| std::env::var(v).ok()?.parse().ok();
    Some((var("BTL_SM_JOB")?, var("BTL_SM_RANK")?))
}

/// Serves `sm` until `take` takes an event.
fn wait<R>(sm: &mut Sm, mut take: impl FnMut(Event<'_>) -> Option<R>) -> R {
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
    let Some((job, rank)) = started_as() else {
        return;
    };
    let mut sm = open(job, rank);
    let parent = reach(&mut sm, ProcName::new(u64::from(job), 0));
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
    let mut child = start("child", job, 1);
    let mut sm = open(job, 0);
    let peer = reach(&mut sm, ProcName::new(u64::from(job), 1));
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
    let transfers = sm.transfers();
    if cross_memory_allowed() {
        assert_eq!(
            (transfers.one_copy, transfers.rings, transfers.fell_back),
            (2, 0, 0),
            "the child copied the put and the get in one go each"
        );
    } else {
        assert_eq!(
            (transfers.one_copy, transfers.rings),
            (0, 2),
            "{transfers:?}"
        );
    }
    while sm.send_copy(peer, DONE, &[]).is_err() {
        sm.progress();
    }
    wait(&mut sm, |e| {
        matches!(e, Event::PeerLeft { .. }).then_some(())
    });
    assert!(child.wait().expect("it ends").success());
    let _ = std::fs::remove_dir_all(dir(job));
}

/// Whether this host lets a process copy into another of its user
/// (`process_vm_writev`): no Yama, a `ptrace_scope` of 0, or root.
fn cross_memory_allowed() -> bool {
    rustix::process::geteuid().is_root()
        || std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .map_or(true, |scope| scope.trim() == "0")
}

/// A child that joins rank 0, says hello, and then waits to be killed.
#[test]
#[ignore = "run by the test below as its child"]
fn child_to_be_killed() {
    let Some((job, rank)) = started_as() else {
        return;
    };
    let mut sm = open(job, rank);
    let parent = reach(&mut sm, ProcName::new(u64::from(job), 0));
    while sm.send_copy(parent, HELLO, &rank.to_le_bytes()).is_err() {
        sm.progress();
    }
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        sm.progress();
        while sm.poll_event().is_some() {}
        std::thread::yield_now();
    }
}

#[test]
fn a_killed_peer_is_lost_at_once_and_its_new_start_joined_again() {
    let job = std::process::id() ^ 0x5a5a;
    let peer = ProcName::new(u64::from(job), 1);
    let mut sm = open(job, 0);
    let mut child = start("child_to_be_killed", job, 1);
    let first = reach(&mut sm, peer);
    wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == HELLO => Some(()),
        _ => None,
    });
    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    child.wait().expect("reaped");
    let reason = wait(&mut sm, |e| match e {
        Event::Error(err) if err.endpoint == Some(first) => Some(err.error),
        _ => None,
    });
    let noticed = killed.elapsed();
    assert_eq!(reason, BtlError::PeerLost(LostReason::Exited));
    eprintln!("the killed peer was lost {noticed:?} after SIGKILL");
    assert!(
        noticed < Duration::from_millis(500),
        "lost within the watch's 10 ms period of progress, not {noticed:?}"
    );
    assert_eq!(
        sm.send_copy(first, HELLO, &[]),
        Err(BtlError::PeerLost(LostReason::Exited)),
        "sends to it fail as lost"
    );
    // The same rank again: its new segment replaces the one the kill left.
    let mut again = start("child_to_be_killed", job, 1);
    let second = reach(&mut sm, peer);
    assert_ne!(second, first, "a new start is a new endpoint");
    wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == HELLO && m.from == second => Some(()),
        _ => None,
    });
    again.kill().expect("SIGKILL");
    again.wait().expect("reaped");
    let _ = std::fs::remove_dir_all(dir(job));
}

/// CPU time this process has run, from `/proc/thread-self/schedstat`.
fn cpu_time() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .expect("time on CPU");
    Duration::from_nanos(ns)
}

/// A child that joins rank 0, then waits, asleep, for its message, and
/// answers with the CPU time and the time it waited, and how often its
/// peers rang its bell.
#[test]
#[ignore = "run by the test below as its child"]
fn child_sleeper() {
    let Some((job, rank)) = started_as() else {
        return;
    };
    let mut sm = open(job, rank);
    let parent = reach(&mut sm, ProcName::new(u64::from(job), 0));
    let (cpu, start) = (cpu_time(), Instant::now());
    sm.wait_for(DEADLINE, |e| match e {
        Event::Received(m) if m.tag == HELLO => Some(()),
        _ => None,
    })
    .expect("woken by the message");
    let (cpu, waited) = (cpu_time() - cpu, start.elapsed());
    let rung = sm
        .segment()
        .bell_words()
        .1
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut answer = [0u8; 20];
    answer[..8].copy_from_slice(&(cpu.as_nanos() as u64).to_le_bytes());
    answer[8..16].copy_from_slice(&(waited.as_nanos() as u64).to_le_bytes());
    answer[16..].copy_from_slice(&rung.to_le_bytes());
    while sm.send_copy(parent, CHECKED, &answer).is_err() {
        sm.progress();
    }
    let _ = sm.finalize();
}

#[test]
fn a_module_waiting_asleep_is_woken_by_a_push_and_spends_no_cpu_meanwhile() {
    let job = std::process::id() ^ 0x1ee9;
    let mut sm = open(job, 0);
    let mut child = start("child_sleeper", job, 1);
    let peer = reach(&mut sm, ProcName::new(u64::from(job), 1));
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    while sm.send_copy(peer, HELLO, &[]).is_err() {
        sm.progress();
    }
    let answer = wait(&mut sm, |e| match e {
        Event::Received(m) if m.tag == CHECKED => m.data.try_into().ok().map(|a: [u8; 20]| a),
        _ => None,
    });
    let round_trip = sent.elapsed();
    let field = |r: std::ops::Range<usize>| {
        Duration::from_nanos(u64::from_le_bytes(answer[r].try_into().expect("8 bytes")))
    };
    let (cpu, waited) = (field(0..8), field(8..16));
    let rung = u32::from_le_bytes(answer[16..].try_into().expect("4 bytes"));
    assert!(rung >= 1, "the parent's push rang the child's bell");
    eprintln!(
        "the child waited {waited:?} using {cpu:?} of CPU; the answer came {round_trip:?} after the message"
    );
    assert!(
        waited >= Duration::from_millis(200),
        "it waited for the message: {waited:?}"
    );
    assert!(
        cpu < waited / 10,
        "it slept while it waited: {cpu:?} of CPU in {waited:?}"
    );
    assert!(
        round_trip < Duration::from_millis(100),
        "woken by the push, not by its 10 ms naps alone: {round_trip:?}"
    );
    assert!(child.wait().expect("it ends").success());
    let _ = std::fs::remove_dir_all(dir(job));
}

#[test]
fn reaching_a_process_that_is_not_there_says_why() {
    let job = std::process::id() ^ 0x7ea;
    let mut sm = open(job, 0);
    let missing = sm
        .reach(ProcName::new(u64::from(job), 5), Duration::from_millis(50))
        .expect_err("nobody is rank 5");
    assert!(missing.to_string().contains("no card"), "{missing}");
    let me = sm
        .reach(ProcName::new(u64::from(job), 0), Duration::from_millis(50))
        .expect_err("this process");
    assert!(me.to_string().contains("self BTL"), "{me}");
    drop(sm);
    let _ = std::fs::remove_dir_all(dir(job));
}
