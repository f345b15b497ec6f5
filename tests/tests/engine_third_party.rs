//! Third-party gets: process A asks B to put B's memory into C's. Three
//! engines over in-memory pipes, with a small driver of their own (the
//! pair drivers join two).

use btl_core::engine::config::EngineConfig;
use btl_core::engine::rtt::RttConfig;
use btl_tests::pair::pipe::{Pipe, read_link, write_link};
mod common;
use btl_core::btl::{Access, Btl, BtlError, MemHandle, RejectCode, RemoteSlice};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::{ConnectFailure, LinkId, Source};
use btl_core::time::{Duration, Instant};
use common::{E, drain, engine_with, in_use};

const A: ProcName = ProcName::new(6, 0);
const B: ProcName = ProcName::new(6, 1);
const C: ProcName = ProcName::new(6, 2);
/// A process nobody runs.
const D: ProcName = ProcName::new(6, 3);
/// The job key the processes share.
const KEY: &[u8] = b"the third-party job";
const MS: Duration = Duration::from_millis(1);

/// One connection: (engine, link) at each end, a pipe towards each.
struct Conn {
    ends: [(usize, LinkId); 2],
    to: [Pipe<4096>; 2],
    open: bool,
}

/// Engines joined by connections on demand, driven round by round; an
/// engine that is `down` is not driven and cannot be reached.
struct Mesh {
    engines: Vec<E>,
    names: Vec<ProcName>,
    down: Vec<bool>,
    conns: Vec<Conn>,
    now: Instant,
    nonces: u8,
}

impl Mesh {
    /// Engines for `names`, holding job key `key`, if any.
    fn with_key(names: &[ProcName], key: Option<&[u8]>) -> Self {
        Mesh {
            engines: names
                .iter()
                .map(|&n| {
                    let mut config = EngineConfig::new(n);
                    config.checksum = true;
                    config.job_key = key.map(|k| heapless::Vec::from_slice(k).expect("short"));
                    config.peer_timeout = 200 * MS;
                    config.rtt = RttConfig {
                        initial_rto: 5 * MS,
                        min_rto: MS,
                        max_rto: 20 * MS,
                    };
                    engine_with(config)
                })
                .collect(),
            names: names.to_vec(),
            down: vec![false; names.len()],
            conns: Vec::new(),
            now: Instant::ZERO,
            nonces: 0,
        }
    }

    /// Makes engine `i` know each of `procs`; returns their endpoints.
    fn know(&mut self, i: usize, procs: &[ProcName]) -> Vec<EndpointId> {
        let mut endpoints = vec![None; procs.len()];
        let mut words = [0u64];
        self.engines[i]
            .add_procs(procs, &mut endpoints, &mut Reachability::new(&mut words))
            .expect("add_procs");
        endpoints
            .into_iter()
            .map(|e| e.expect("reachable"))
            .collect()
    }

    fn nonce(&mut self) -> [u8; 16] {
        self.nonces = self.nonces.wrapping_add(1);
        [self.nonces; 16]
    }

    /// One round: time passes by a millisecond, then connects, bytes and
    /// closes are served once.
    fn round(&mut self) {
        self.now += MS;
        let now = self.now;
        for (i, e) in self.engines.iter_mut().enumerate() {
            if self.down[i] {
                continue;
            }
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            e.progress();
        }
        for i in 0..self.engines.len() {
            while !self.down[i]
                && let Some(req) = self.engines[i].poll_connect()
            {
                let j = self.names.iter().position(|&n| n == req.proc);
                let Some(j) = j.filter(|&j| !self.down[j]) else {
                    self.engines[i].handle_connect_failed(req, ConnectFailure::Unreachable, now);
                    continue;
                };
                let (n1, n2) = (self.nonce(), self.nonce());
                let from = self.engines[i].handle_connected(req, n1, now);
                let to = self.engines[j].handle_accepted(Source(0), n2, now);
                let (Ok(from), Ok(to)) = (from, to) else {
                    panic!("no link slot");
                };
                self.conns.push(Conn {
                    ends: [(i, from), (j, to)],
                    to: [Pipe::new(), Pipe::new()],
                    open: true,
                });
            }
        }
        for c in self.conns.iter_mut().filter(|c| c.open) {
            for t in 0..2 {
                let (fe, fl) = c.ends[1 - t];
                let (te, tl) = c.ends[t];
                if !self.down[fe] {
                    let _ = write_link(&mut self.engines[fe], fl, Some(&mut c.to[t]));
                }
                if !self.down[te] && !c.to[t].is_empty() {
                    let _ = read_link(&mut self.engines[te], tl, &mut c.to[t], now);
                }
            }
        }
        for i in 0..self.engines.len() {
            while let Some(link) = self.engines[i].poll_close() {
                self.engines[i].handle_closed(link, now);
                if let Some(c) = self
                    .conns
                    .iter_mut()
                    .find(|c| c.open && c.ends.contains(&(i, link)))
                {
                    c.open = false;
                    let (j, other) = c.ends[usize::from(c.ends[0] == (i, link))];
                    self.engines[j].handle_closed(other, now);
                }
            }
        }
    }

    /// `ticks` rounds.
    fn run(&mut self, ticks: u32) {
        for _ in 0..ticks {
            self.round();
        }
    }

    /// Takes engine `i` down: its connections reset, as when its host dies.
    fn crash(&mut self, i: usize) {
        self.down[i] = true;
        let now = self.now;
        for c in self.conns.iter_mut().filter(|c| c.open) {
            if let Some(k) = c.ends.iter().position(|&(e, _)| e == i) {
                c.open = false;
                let (j, link) = c.ends[1 - k];
                self.engines[j].handle_closed(link, now);
            }
        }
    }
}

fn whole(h: MemHandle, len: u64) -> RemoteSlice {
    RemoteSlice {
        key: h.remote_key(),
        offset: 0,
        len,
    }
}

/// A knows B; B knows A and C; C knows B. B exposes `LEN` readable bytes,
/// C `LEN` writable zeros. Returns the mesh, B at A, and the handles.
const LEN: u64 = 100_000;
fn three() -> (Mesh, EndpointId, MemHandle, MemHandle) {
    three_keyed(Some(KEY))
}

/// As [`three`], the processes holding job key `key`, if any.
fn three_keyed(key: Option<&[u8]>) -> (Mesh, EndpointId, MemHandle, MemHandle) {
    let mut mesh = Mesh::with_key(&[A, B, C], key);
    let b_at_a = mesh.know(0, &[B])[0];
    mesh.know(1, &[A, C]);
    mesh.know(2, &[B]);
    let src = (0..LEN).map(|x| (x % 253) as u8).collect();
    let hs = mesh.engines[1]
        .register_mem(src, Access::REMOTE_READ)
        .expect("src");
    let hd = mesh.engines[2]
        .register_mem(vec![0; LEN as usize], Access::REMOTE_WRITE)
        .expect("dst");
    (mesh, b_at_a, hs, hd)
}

#[test]
fn a_get_for_a_third_process_lands_there_and_completes_once_it_has() {
    let (mut mesh, b_at_a, hs, hd) = three();
    let _ = mesh.engines[0]
        .get_third_party(b_at_a, whole(hs, LEN), C, whole(hd, LEN), 1)
        .expect("get");
    let mut done_at = None;
    for round in 0..2000 {
        mesh.round();
        let events = drain(&mut mesh.engines[0]);
        if !events.is_empty() {
            assert_eq!(events, ["get 1 Ok(())"]);
            // Remote completion: C holds every byte when A hears of it.
            assert_eq!(
                mesh.engines[2].region(hd).expect("dst"),
                mesh.engines[1].region(hs).expect("src")
            );
            assert!(done_at.is_none(), "completed twice");
            done_at = Some(round);
        }
    }
    assert!(done_at.is_some(), "never completed");
    // Neither B nor C is told anything; nothing is held anywhere.
    assert!(drain(&mut mesh.engines[1]).is_empty());
    assert!(drain(&mut mesh.engines[2]).is_empty());
    for e in &mesh.engines {
        assert_eq!(in_use(e), 0);
    }
    // B's source and C's destination are free again.
    assert!(mesh.engines[1].deregister_mem(hs).is_ok());
    assert!(mesh.engines[2].deregister_mem(hd).is_ok());
}

#[test]
fn a_refused_or_unreachable_target_fails_the_get_with_its_reason() {
    let (mut mesh, b_at_a, hs, hd) = three();
    let ro = mesh.engines[2]
        .register_mem(vec![7; 100], Access::REMOTE_READ)
        .expect("read-only");
    let a = &mut mesh.engines[0];
    // Into C's read-only region: C refuses B's put, B tells A.
    let _ = a.get_third_party(b_at_a, whole(hs, 100), C, whole(ro, 100), 1);
    // Past the end of C's region.
    let past = RemoteSlice {
        offset: LEN - 50,
        ..whole(hd, 100)
    };
    let _ = a.get_third_party(b_at_a, whole(hs, 100), C, past, 2);
    // From beyond B's source: B refuses before anything moves.
    let beyond = RemoteSlice {
        offset: LEN,
        ..whole(hs, 1)
    };
    let _ = a.get_third_party(b_at_a, beyond, C, whole(hd, 1), 3);
    // To a process B does not know.
    let _ = a.get_third_party(b_at_a, whole(hs, 100), D, whole(hd, 100), 4);
    mesh.run(500);
    let mut events = drain(&mut mesh.engines[0]);
    events.sort();
    let rejected = |ctx, code| format!("get {ctx} {:?}", Err::<(), _>(BtlError::Rejected(code)));
    assert_eq!(
        events,
        [
            rejected(1, RejectCode::AccessDenied),
            rejected(2, RejectCode::OutOfBounds),
            rejected(3, RejectCode::OutOfBounds),
            rejected(4, RejectCode::NoTarget),
        ]
    );
    assert_eq!(mesh.engines[2].region(ro).expect("ro"), &[7; 100][..]);
    assert!(
        mesh.engines[2]
            .region(hd)
            .expect("dst")
            .iter()
            .all(|&b| b == 0)
    );
    for e in &mesh.engines {
        assert_eq!(in_use(e), 0);
    }
}

#[test]
fn the_source_or_the_initiator_may_be_the_target() {
    let (mut mesh, b_at_a, hs, _) = three();
    // Into another of B's own registrations: a copy at B.
    let copy = mesh.engines[1]
        .register_mem(vec![0; 1000], Access::REMOTE_WRITE)
        .expect("copy");
    // Into A's registration, named by key as any target's is.
    let mine = mesh.engines[0]
        .register_mem(vec![0; 1000], Access::REMOTE_WRITE)
        .expect("mine");
    let a = &mut mesh.engines[0];
    let _ = a.get_third_party(b_at_a, whole(hs, 1000), B, whole(copy, 1000), 1);
    let _ = a.get_third_party(b_at_a, whole(hs, 1000), A, whole(mine, 1000), 2);
    mesh.run(200);
    let mut events = drain(&mut mesh.engines[0]);
    events.sort();
    assert_eq!(events, ["get 1 Ok(())", "get 2 Ok(())"]);
    let expect = &mesh.engines[1].region(hs).expect("src")[..1000];
    assert_eq!(mesh.engines[1].region(copy).expect("copy"), expect);
    assert_eq!(mesh.engines[0].region(mine).expect("mine"), expect);
}

#[test]
fn a_target_lost_mid_transfer_fails_the_get_once_and_spares_the_rest() {
    let (mut mesh, b_at_a, hs, hd) = three();
    let _ = mesh.engines[0]
        .get_third_party(b_at_a, whole(hs, LEN), C, whole(hd, LEN), 1)
        .expect("get");
    // Some packets reach C, then its host dies.
    for _ in 0..100 {
        if mesh.engines[2]
            .region(hd)
            .expect("dst")
            .iter()
            .any(|&b| b != 0)
        {
            break;
        }
        mesh.round();
    }
    assert!(
        mesh.engines[2].region(hd).expect("dst")[..1000]
            .iter()
            .any(|&b| b != 0)
    );
    assert!(drain(&mut mesh.engines[0]).is_empty());
    mesh.crash(2);
    mesh.run(1000);
    assert_eq!(
        drain(&mut mesh.engines[0]),
        [format!(
            "get 1 {:?}",
            Err::<(), _>(BtlError::Rejected(RejectCode::NoTarget))
        )]
    );
    // B lost C, and only C: A and B still talk.
    let events = drain(&mut mesh.engines[1]);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].starts_with("error PeerLost(Timeout)"),
        "{events:?}"
    );
    let back = mesh.engines[0]
        .register_mem(vec![0; 10], Access::empty())
        .expect("back");
    let local = btl_core::btl::MemSlice {
        handle: back,
        offset: 0,
        len: 10,
    };
    let _ = mesh.engines[0].get(b_at_a, local, whole(hs, 10), 2);
    mesh.run(100);
    assert_eq!(drain(&mut mesh.engines[0]), ["get 2 Ok(())"]);
    for e in &mesh.engines[..2] {
        assert_eq!(in_use(e), 0);
    }
}

#[test]
fn an_empty_or_mismatched_third_party_get_needs_no_peer() {
    let (mut mesh, b_at_a, hs, hd) = three();
    let a = &mut mesh.engines[0];
    let _ = a
        .get_third_party(b_at_a, whole(hs, 0), C, whole(hd, 0), 1)
        .expect("empty");
    assert_eq!(drain(a), ["get 1 Ok(())"]);
    assert!(matches!(
        a.get_third_party(b_at_a, whole(hs, 10), C, whole(hd, 11), 2),
        Err(BtlError::Memory(_))
    ));
    let unknown = EndpointId(3);
    assert_eq!(
        a.get_third_party(unknown, whole(hs, 10), C, whole(hd, 10), 3),
        Err(BtlError::Unreachable)
    );
}

/// Without a job key, B serves no third-party get: each is answered
/// `NoTarget`, for a process B knows (C) as for one it does not (D), so
/// a stranger can neither have B push its memory to another process nor
/// tell from the answers which processes B knows. Gets into B itself,
/// or back to A, are served as ever.
#[test]
fn without_a_key_no_third_party_get_is_served_nor_tells_who_is_known() {
    let (mut mesh, b_at_a, hs, hd) = three_keyed(None);
    let a = &mut mesh.engines[0];
    let _ = a.get_third_party(b_at_a, whole(hs, 100), C, whole(hd, 100), 1);
    let _ = a.get_third_party(b_at_a, whole(hs, 100), D, whole(hd, 100), 2);
    let bad = RemoteSlice {
        key: btl_core::btl::RemoteKey(0xdead),
        offset: 0,
        len: 100,
    };
    let _ = a.get_third_party(b_at_a, bad, C, whole(hd, 100), 3);
    mesh.run(500);
    let mut events = drain(&mut mesh.engines[0]);
    events.sort();
    let no_target = |ctx| {
        format!(
            "get {ctx} {:?}",
            Err::<(), _>(BtlError::Rejected(RejectCode::NoTarget))
        )
    };
    assert_eq!(events, [no_target(1), no_target(2), no_target(3)]);
    assert!(
        mesh.engines[2]
            .region(hd)
            .expect("dst")
            .iter()
            .all(|&b| b == 0),
        "nothing reached C"
    );
    for e in &mesh.engines {
        assert_eq!(in_use(e), 0);
    }
}
