//! The benchmark's large messages over shared memory: from the length at
//! which the module says a get moves a message better than sends (its
//! one-copy limit), a message goes as a fetch notice and its receiver gets
//! it in one copy; below that length, or with one copy turned off, it goes
//! in pieces through the rings. Two modules of one process here, the
//! receiving side's counters telling which way each message went. A
//! notice is a peer's word like any other: one the receiver cannot get
//! by loses its sender, and only it.

use std::time::Duration;

use btl_cli::bench::{self, Header, Plan, Side, Test, Waiting};
use btl_core::btl::{Access, Btl, RemoteKey};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_std::{ModuleBuilder, SmModule};

const JOIN: Duration = Duration::from_secs(10);

/// Two joined modules of a fresh job, opened with `params`, and their
/// endpoints for each other.
fn pair(job: u64, params: &[(&str, &str)]) -> ((SmModule, SmModule), (u32, u32)) {
    let dir = std::env::temp_dir().join(format!("btl-bench-fetch-{}-{job}", std::process::id()));
    let open = |rank| {
        let mut builder = ModuleBuilder::new(ProcName::new(job, rank))
            .ignore_environment()
            .shared_dir(&dir);
        for (name, value) in params {
            builder = builder.param(name, value);
        }
        builder.sm().expect("an sm module")
    };
    let (mut a, mut b) = (open(0), open(1));
    let (a, to_b, b, to_a) = std::thread::scope(|s| {
        let joining = s.spawn(move || {
            let ep = b.reach(ProcName::new(job, 0), JOIN).expect("B reaches A");
            (b, ep)
        });
        let to_b = a.reach(ProcName::new(job, 1), JOIN).expect("A reaches B");
        let (b, to_a) = joining.join().expect("B joins");
        (a, to_b, b, to_a)
    });
    let _ = std::fs::remove_dir_all(&dir);
    ((a, b), (to_b.0, to_a.0))
}

/// A ping-pong of `sizes` between the two, B answering on a thread; both
/// modules back.
fn ping_pong(a: SmModule, b: SmModule, to_b: u32, sizes: &[usize]) -> (Plan, SmModule, SmModule) {
    let plan = Plan {
        test: Test::PingPong,
        sizes: sizes.to_vec(),
        warmup: 2,
        iters: 20,
        exact: false,
        window: 1,
    };
    let max = sizes.iter().copied().max().unwrap_or(0);
    let (mut a, mut b) = (a, b);
    std::thread::scope(|s| {
        let answering = s.spawn(|| {
            bench::answer(&mut b, max, Waiting::Poll, Duration::from_secs(20)).expect("B answers")
        });
        bench::lead(&mut a, EndpointId(to_b), &plan, Waiting::Poll, |_| {}).expect("A leads");
        answering.join().expect("B's thread");
    });
    (plan, a, b)
}

/// Messages each side received of at least `from` bytes in `plan`.
fn large_ones(plan: &Plan, from: usize) -> u64 {
    plan.sizes
        .iter()
        .filter(|&&s| s >= from)
        .map(|&s| {
            let (iters, warmup) = plan.iterations(s);
            u64::from(iters + warmup)
        })
        .sum()
}

#[test]
fn messages_from_the_one_copy_limit_are_got_in_one_copy() {
    let ((a, b), (to_b, _)) = pair(1, &[]);
    assert_eq!(a.attributes().rdma_pipeline_send_length, 32 << 10);
    let sizes = [8, 4096, (32 << 10) - 1, 32 << 10, 1 << 20];
    let (plan, a, b) = ping_pong(a, b, to_b, &sizes);
    let got = large_ones(&plan, 32 << 10);
    for (side, module) in [("A", &a), ("B", &b)] {
        let t = module.transfers();
        assert_eq!(t.one_copy, got, "{side}: one get of each large message");
        assert_eq!(t.rings, 0, "{side}: none through the rings");
        assert_eq!(t.fell_back, 0, "{side}");
    }
}

#[test]
fn with_one_copy_off_every_message_goes_in_pieces() {
    let ((a, b), (to_b, _)) = pair(2, &[("btl_sm_single_copy_limit", "0")]);
    assert_eq!(a.attributes().rdma_pipeline_send_length, usize::MAX);
    let (_, a, b) = ping_pong(a, b, to_b, &[8, 1 << 20]);
    for module in [&a, &b] {
        let t = module.transfers();
        assert_eq!((t.one_copy, t.rings), (0, 0), "no get at all");
    }
}

/// Serves `b` as an answering side until `done` holds of it, with A's
/// module moved forward too; fails after 10 s.
fn serve_until(a: &mut SmModule, b: &mut SmModule, side: &mut Side, done: impl Fn(&Side) -> bool) {
    let start = std::time::Instant::now();
    while !done(side) {
        a.progress();
        while a.poll_event().is_some() {}
        side.serve_once(b, Waiting::Poll);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not done in 10 s"
        );
    }
}

#[test]
fn a_notice_naming_no_registration_loses_only_its_sender() {
    let ((mut a, mut b), (to_b, _)) = pair(3, &[]);
    let mut side = Side::new(&mut b, 1 << 20, 1).expect("B's side");
    let header = Header {
        total: 1 << 20,
        window: 1,
        fetch: false,
    };
    let forged = header.notice(RemoteKey(0xdead_0001).slice(0, 1 << 20));
    a.send_copy(EndpointId(to_b), bench::PING, &forged)
        .expect("the notice goes");
    serve_until(&mut a, &mut b, &mut side, |s| s.dropped() == 1);
    assert_eq!(side.peers(), 0, "nothing kept for the dropped peer");
}

#[test]
fn a_notice_to_a_side_that_does_not_get_loses_its_sender() {
    let ((mut a, mut b), (to_b, _)) = pair(4, &[("btl_sm_single_copy_limit", "0")]);
    let mut side = Side::new(&mut b, 1 << 20, 1).expect("B's side");
    let lent = a
        .register_mem(vec![7u8; 1 << 20], Access::REMOTE_READ)
        .expect("A's buffer");
    let header = Header {
        total: 1 << 20,
        window: 1,
        fetch: false,
    };
    let notice = header.notice(lent.remote_key().slice(0, 1 << 20));
    a.send_copy(EndpointId(to_b), bench::PING, &notice)
        .expect("the notice goes");
    serve_until(&mut a, &mut b, &mut side, |s| s.dropped() == 1);
    assert_eq!(
        b.transfers().rings + b.transfers().one_copy,
        0,
        "no get made"
    );
}
