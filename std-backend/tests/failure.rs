//! How socket modules fail, over real loopback sockets: fast and by name
//! (a peer that died is `Refused` within the refusal timeout, a dropped
//! module's peers hear a CLOSE at once), nothing lost at a graceful close
//! (`flush` then `finalize`), errors a library user can see (why a lookup
//! failed, bounded), no card left behind, and a panicking progress-thread
//! handler that loses nothing but its event.

use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, BtlError, Event, LostReason, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointId, ProcName};
use std::sync::Arc;

use btl_std::bootstrap::{Bootstrap, BootstrapError, LookupError, SharedDir};
use btl_std::driver::module::{Module, Transport};
use btl_std::driver::progress_thread::ProgressThread;

mod common;
use common::{DEADLINE, job, local, pair, remote, tcp, udp};

/// Progresses both modules until `a` has an error event: its error and
/// how long it took.
fn until_error<T: Transport, U: Transport>(
    a: &mut Module<T>,
    mut b: Option<&mut Module<U>>,
) -> (BtlError, Duration) {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "no error event within the deadline"
        );
        a.progress();
        if let Some(b) = b.as_mut() {
            b.progress();
            while b.poll_event().is_some() {}
        }
        while let Some(ev) = a.poll_event() {
            match ev {
                Event::Error(e) => return (e.error, start.elapsed()),
                // A goodbye, told as the loss it is.
                Event::PeerLeft { .. } => {
                    return (BtlError::PeerLost(LostReason::Left), start.elapsed());
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Sends `n` small messages with `sendi`, progressing while it waits for
/// the link or credits (another thread progresses the peer).
fn sendi_all<T: Transport>(a: &mut Module<T>, to: EndpointId, n: u32) {
    for i in 0..n {
        let start = Instant::now();
        while a
            .sendi(
                to,
                &[],
                &i.to_be_bytes(),
                Tag(0x81),
                Order(0),
                DescFlags::empty(),
            )
            .is_err()
        {
            assert!(start.elapsed() < DEADLINE, "sendi never went");
            a.progress();
        }
    }
}

/// A sends B one message, both progressing until B has it: the link is up.
fn first_message<T: Transport>(a: &mut Module<T>, b: &mut Module<T>, b_at_a: EndpointId) {
    let start = Instant::now();
    while a
        .sendi(
            b_at_a,
            &[],
            b"first",
            Tag(0x81),
            Order(0),
            DescFlags::empty(),
        )
        .is_err()
    {
        assert!(start.elapsed() < DEADLINE, "never connected");
        a.progress();
        b.progress();
    }
    while !matches!(b.poll_event(), Some(Event::Received(_))) {
        assert!(start.elapsed() < DEADLINE, "never arrived");
        a.progress();
        b.progress();
    }
}

#[test]
fn a_dropped_module_is_lost_by_its_peers_at_once() {
    let (mut a, mut b, b_at_a, _) = pair(0x7f01, |me, key, boot| tcp(1).build(me, key, boot));
    first_message(&mut a, &mut b, b_at_a);
    // B returns early (or panics): dropped without finalize.
    drop(b);
    let (error, took) =
        until_error::<_, btl_std::transports::tcp::Tcp<btl_std::driver::net::Os>>(&mut a, None);
    assert_eq!(
        error,
        BtlError::PeerLost(LostReason::Left),
        "a goodbye (Event::PeerLeft), not an error"
    );
    assert!(
        took < Duration::from_secs(2),
        "{took:?}, not the peer timeout"
    );
}

/// `a` has talked with `b`; `b` is killed (no CLOSE, its sockets gone)
/// and `a` sends it one more message: `a` loses it as `Refused` within
/// the refusal timeout and a backoff, not the peer timeout. Over TCP the
/// reconnections are reset; over UDP the datagrams are answered with an
/// ICMP port unreachable, which the socket's error queue reports.
fn a_killed_peer_is_refused<T: Transport>(mut a: Module<T>, mut b: Module<T>, b_at_a: EndpointId) {
    first_message(&mut a, &mut b, b_at_a);
    b.abort_on_drop();
    drop(b);
    let start = Instant::now();
    let _ = a.send_copy(b_at_a, Tag(0x81), b"are you there?");
    let (error, _) = until_error::<_, T>(&mut a, None);
    let took = start.elapsed();
    assert_eq!(error, BtlError::PeerLost(LostReason::Refused));
    // 250 ms of refusals (the default), and a backoff.
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(
        took < Duration::from_secs(3),
        "{took:?}, not the peer timeout"
    );
    eprintln!("a killed peer found in {took:?}");
}

#[test]
fn a_killed_tcp_peer_is_lost_as_refused_within_the_refusal_timeout() {
    let (a, b, b_at_a, _) = pair(0x7f02, |me, key, boot| tcp(1).build(me, key, boot));
    a_killed_peer_is_refused(a, b, b_at_a);
}

#[test]
fn a_killed_udp_peer_is_lost_as_refused_within_the_refusal_timeout() {
    let (a, b, b_at_a, _) = pair(0x7f04, |me, key, boot| udp().build(me, key, boot));
    a_killed_peer_is_refused(a, b, b_at_a);
}

/// B publishes its card and dies before A reaches it: A's first message
/// is refused by name at once.
fn a_first_message_to_a_closed_port_is_refused<T: Transport>(
    job_id: u64,
    build: impl Fn(ProcName, Arc<SharedDir>) -> Module<T>,
) {
    let (boot, dir, na, nb) = job(job_id);
    let mut a = build(na, boot.clone());
    let mut b = build(nb, boot.clone());
    let card = b.directory().card().clone();
    b.abort_on_drop();
    drop(b);
    boot.publish(&card).expect("B's card, left behind");
    let ep = a.reach(nb, DEADLINE).expect("its card says where");
    let _ = a.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty());
    let (error, took) = until_error::<_, T>(&mut a, None);
    assert_eq!(error, BtlError::PeerLost(LostReason::Refused));
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(
        error.to_string(),
        "peer lost: nothing listens at its address (its process is gone)"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_first_connection_to_a_closed_port_is_refused_by_name() {
    a_first_message_to_a_closed_port_is_refused(0x7f03, |me, boot| {
        tcp(1).build(me, Some(b"k"), boot).expect("a module")
    });
}

#[test]
fn a_first_datagram_to_a_closed_port_is_refused_by_name() {
    a_first_message_to_a_closed_port_is_refused(0x7f05, |me, boot| {
        udp().build(me, Some(b"k"), boot).expect("a module")
    });
}

/// `sendi` success, then a graceful close: every message is delivered.
fn flush_then_finalize_loses_nothing<
    T: Transport<Net = btl_std::driver::net::Os> + Send + 'static,
>(
    mut a: Module<T>,
    mut b: Module<T>,
    b_at_a: EndpointId,
) {
    const N: u32 = 500;
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < N as usize && start.elapsed() < DEADLINE {
            b.progress();
            while let Some(ev) = b.poll_event() {
                if let Event::Received(m) = ev {
                    got.push(u32::from_be_bytes(m.data.try_into().expect("4 bytes")));
                }
            }
        }
        // The sender's CLOSE too.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            b.progress();
            while b.poll_event().is_some() {}
        }
        got
    });
    sendi_all(&mut a, b_at_a, N);
    a.flush(DEADLINE).expect("everything acknowledged");
    assert_eq!(a.usage().operations, 0);
    a.finalize();
    let got = receiver.join().expect("the receiver");
    assert_eq!(
        got,
        (0..N).collect::<Vec<_>>(),
        "every message, once, in order"
    );
}

#[test]
fn a_flushed_tcp_module_loses_nothing_at_finalize() {
    let (a, b, b_at_a, _) = pair(0x7f04, |me, key, boot| tcp(1).build(me, key, boot));
    flush_then_finalize_loses_nothing(a, b, b_at_a);
}

#[test]
fn a_flushed_udp_module_loses_nothing_at_finalize() {
    let (a, b, b_at_a, _) = pair(0x7f05, |me, key, boot| udp().build(me, key, boot));
    flush_then_finalize_loses_nothing(a, b, b_at_a);
}

#[test]
fn a_flush_says_what_a_silent_peer_did_not_acknowledge() {
    let (mut a, mut b, b_at_a, _) = pair(0x7f06, |me, key, boot| tcp(1).build(me, key, boot));
    first_message(&mut a, &mut b, b_at_a);
    let start = Instant::now();
    while a.flush(Duration::from_millis(1)).is_err() {
        assert!(start.elapsed() < DEADLINE, "the first is acknowledged");
        b.progress();
    }
    // B stops progressing: what A sends now stays unacknowledged.
    for i in 0..4u8 {
        a.sendi(b_at_a, &[], &[i], Tag(1), Order(0), DescFlags::empty())
            .expect("credit for four");
    }
    let start = Instant::now();
    let left = a
        .flush(Duration::from_millis(200))
        .expect_err("B does not read");
    assert_eq!(left.outstanding, 4);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "bounded by its timeout"
    );
    drop(b);
}

#[test]
fn a_lookup_says_why_and_is_bounded_by_the_caller() {
    let (boot, dir, na, nb) = job(0x7f07);
    let mut setup = tcp(1);
    setup.tcp.lookup_timeout = Duration::from_millis(100);
    let mut a = setup.build(na, Some(b"k"), boot).expect("A");
    let start = Instant::now();
    let err = a
        .reach(nb, Duration::from_millis(100))
        .expect_err("B never published a card");
    assert!(start.elapsed() < Duration::from_secs(1), "bounded");
    assert!(
        matches!(
            err,
            btl_std::driver::module::ReachError::Lookup(LookupError::Bootstrap(
                BootstrapError::Timeout { .. }
            ))
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains(&format!("{nb}")), "{err}");
    // add_procs, which cannot say why, keeps the cause for the caller.
    let mut ep = [None];
    let mut word = [0u64];
    let other = ProcName::new(nb.job, 7);
    a.add_procs(
        &[other],
        &mut ep,
        &mut btl_core::endpoint::Reachability::new(&mut word),
    )
    .expect("add_procs itself succeeds");
    assert_eq!(ep, [None]);
    assert!(a.why_unreachable(other).is_some());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_modules_card_goes_with_it() {
    let (boot, dir, na, _) = job(0x7f08);
    let a = tcp(1).build(na, Some(b"k"), boot.clone()).expect("A");
    let card = SharedDir::new(&dir).path_of(na);
    assert!(card.exists(), "published");
    drop(a);
    assert!(!card.exists(), "withdrawn");
    let u = udp().build(na, Some(b"k"), boot).expect("A over UDP");
    assert!(card.exists(), "published");
    drop(u);
    assert!(!card.exists(), "withdrawn");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_panicking_handler_loses_its_event_not_the_module() {
    let (a, mut b, _, a_at_b) = pair(0x7f09, |me, key, boot| tcp(1).build(me, key, boot));
    let (tx, rx) = std::sync::mpsc::channel();
    let a = ProgressThread::spawn(a, move |_, event| {
        if let Event::Received(m) = event {
            assert!(m.data != b"boom", "the handler's own panic");
            let _ = tx.send(m.data.to_vec());
        }
    })
    .expect("A's thread");
    for data in [&b"one"[..], b"boom", b"two"] {
        let start = Instant::now();
        while b
            .sendi(a_at_b, &[], data, Tag(1), Order(0), DescFlags::empty())
            .is_err()
        {
            assert!(start.elapsed() < DEADLINE);
            b.progress();
        }
    }
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < 2 {
        assert!(start.elapsed() < DEADLINE, "got {got:?}");
        b.progress();
        if let Ok(m) = rx.try_recv() {
            got.push(m);
        }
    }
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    let a = a.stop().expect("the thread stops cleanly");
    drop(a);
}

/// A peer that finalizes says goodbye: its peers are told with
/// `Event::PeerLeft`, an event of its own, and no `Event::Error` (a
/// server's log of clients that left normally holds no errors). A send to
/// it afterwards fails `PeerLost(Left)`.
fn a_goodbye_is_no_error<T: Transport>(mut a: Module<T>, mut b: Module<T>, b_at_a: EndpointId) {
    first_message(&mut a, &mut b, b_at_a);
    b.finalize();
    drop(b);
    let start = Instant::now();
    let left = loop {
        assert!(start.elapsed() < DEADLINE, "no goodbye within the deadline");
        a.progress();
        match a.poll_event() {
            Some(Event::PeerLeft { endpoint }) => break endpoint,
            Some(Event::Error(e)) => panic!("a goodbye told as an error: {e:?}"),
            _ => std::thread::sleep(Duration::from_micros(200)),
        }
    };
    assert_eq!(left, b_at_a);
    assert_eq!(
        a.sendi(
            b_at_a,
            &[],
            b"late",
            Tag(0x81),
            Order(0),
            DescFlags::empty()
        ),
        Err(BtlError::PeerLost(LostReason::Left))
    );
}

#[test]
fn a_goodbye_is_no_error_over_tcp() {
    let (a, b, b_at_a, _) = pair(0x7f21, |me, key, boot| tcp(1).build(me, key, boot));
    a_goodbye_is_no_error(a, b, b_at_a);
}

#[test]
fn a_goodbye_is_no_error_over_udp() {
    let (a, b, b_at_a, _) = pair(0x7f22, |me, key, boot| udp().build(me, key, boot));
    a_goodbye_is_no_error(a, b, b_at_a);
}

/// A message `send_copy` took arrives though its module is dropped (or
/// finalized) at once after, without a flush: finalizing waits its linger
/// for the acknowledgement. On a fresh connection (the handshake not even
/// begun) and on a warm one.
fn a_message_outlives_its_module<T: Transport<Net = btl_std::driver::net::Os> + Send + 'static>(
    mut a: Module<T>,
    mut b: Module<T>,
    b_at_a: EndpointId,
    warm: bool,
    finalize: bool,
) {
    if warm {
        first_message(&mut a, &mut b, b_at_a);
    }
    let start = Instant::now();
    while a.send_copy(b_at_a, Tag(0x82), b"last words").is_err() {
        assert!(start.elapsed() < DEADLINE, "send_copy never took it");
        a.progress();
    }
    // B is served meanwhile, as a live peer is.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = std::sync::Arc::clone(&stop);
    let receiver = std::thread::spawn(move || {
        let start = Instant::now();
        let mut got = None;
        while got.is_none()
            && start.elapsed() < DEADLINE
            && !stopping.load(std::sync::atomic::Ordering::Relaxed)
        {
            b.progress();
            while let Some(ev) = b.poll_event() {
                if let Event::Received(m) = ev {
                    got = Some(m.data.to_vec());
                }
            }
        }
        got
    });
    if finalize {
        let undelivered = a.finalize();
        assert!(undelivered.is_empty(), "{undelivered}");
    }
    drop(a);
    let got = receiver.join().expect("the receiver");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(got.as_deref(), Some(&b"last words"[..]));
}

#[test]
fn a_message_outlives_its_dropped_module() {
    for (i, (warm, finalize)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let n = 0x7f40 + 2 * i as u64;
        let (a, b, b_at_a, _) = pair(n, |me, key, boot| tcp(1).build(me, key, boot));
        a_message_outlives_its_module(a, b, b_at_a, warm, finalize);
        let (a, b, b_at_a, _) = pair(n + 1, |me, key, boot| udp().build(me, key, boot));
        a_message_outlives_its_module(a, b, b_at_a, warm, finalize);
    }
}

/// A peer that takes nothing: `finalize` waits its linger, then says how
/// much it could not deliver.
#[test]
fn finalize_says_what_it_could_not_deliver() {
    let (mut a, mut b, b_at_a, _) = pair(0x7f50, |me, key, boot| tcp(1).build(me, key, boot));
    first_message(&mut a, &mut b, b_at_a);
    // B stops serving (it lives, so its sockets stay open).
    for i in 0..8u8 {
        let start = Instant::now();
        while a.send_copy(b_at_a, Tag(0x83), &[i; 64 << 10]).is_err() {
            assert!(start.elapsed() < DEADLINE, "send_copy never took it");
            a.progress();
        }
    }
    let start = Instant::now();
    let undelivered = a.finalize();
    let took = start.elapsed();
    assert!(
        !undelivered.is_empty(),
        "B took nothing, yet: {undelivered:?}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "the linger (1 s): {took:?}"
    );
    drop(b);
}

/// Over UDP a first connection to a port where nothing listens gets no
/// answer, and the peer is lost when the handshake's timer fires: the
/// error names that timer (`HandshakeTimeout`), not the peer timeout.
#[test]
fn a_udp_peer_that_never_answers_is_lost_to_the_handshake_timeout() {
    let (boot, dir, na, nb) = job(0x7f60);
    let mut setup = udp();
    setup.engine.handshake_timeout = btl_core::time::Duration::from_millis(300);
    let mut a = setup.build(na, Some(b"k"), boot.clone()).expect("A");
    let mut b = udp().build(nb, Some(b"k"), boot.clone()).expect("B");
    let card = b.directory().card().clone();
    b.abort_on_drop();
    drop(b);
    // Something holds B's port and answers nothing: no refusal comes.
    let _silent = std::net::UdpSocket::bind(card.contacts[0].addr).expect("B's port");
    boot.publish(&card).expect("B's card, left behind");
    let ep = a.reach(nb, DEADLINE).expect("its card says where");
    let _ = a.sendi(ep, &[], b"x", Tag(1), Order(0), DescFlags::empty());
    let (error, took) =
        until_error::<_, btl_std::transports::udp::Udp<btl_std::driver::net::Os>>(&mut a, None);
    assert_eq!(error, BtlError::PeerLost(LostReason::HandshakeTimeout));
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        error.to_string(),
        "peer lost: no handshake within the handshake timeout"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_send_beyond_the_peers_limit_names_the_peers_limit() {
    // A raised its own max send size to 256 KiB; B keeps 64 KiB.
    let (mut a, mut b, b_at_a, _) = pair(0x7f06, |me, key, boot| {
        let mut setup = tcp(1);
        if me.rank == 0 {
            setup.pools.max.fragment_size = (256 << 10) + btl_core::engine::HEADER_RESERVE;
        }
        setup.build(me, key, boot)
    });
    assert_eq!(a.attributes().max_send_size, 256 << 10);
    assert_eq!(
        a.max_send_to(b_at_a),
        Some(256 << 10),
        "before the handshake only A's own limit is known"
    );
    first_message(&mut a, &mut b, b_at_a);
    let limit = a.max_send_to(b_at_a).expect("a known peer");
    assert!(
        limit < 256 << 10 && limit >= b.attributes().max_send_size,
        "B's limit, as its handshake said: {limit}"
    );
    let error = a
        .send_copy(b_at_a, Tag(0x81), &vec![1; limit + 1])
        .expect_err("beyond B's limit");
    assert_eq!(
        error,
        BtlError::TooLarge {
            len: limit as u64 + 1,
            max: limit as u64,
            whose: btl_std::Limit::Peer,
        }
    );
    assert!(error.to_string().contains("the peer's limit"), "{error}");
    a.send_copy(b_at_a, Tag(0x81), &vec![1; limit])
        .expect("B's limit itself goes");
}

/// A put into bytes that a get of the same peer reads at that moment,
/// over TCP with checksums on: the user's race, whose cost is at worst
/// wrong bytes in what the get brought back, never a lost peer. (The get's
/// reply was checksummed when it was made, and the put changed its bytes
/// before they were written: the peer saw `ChecksumMismatch`.)
#[test]
fn a_put_into_bytes_a_get_is_reading_loses_no_peer() {
    const LEN: usize = 2 << 20;
    let (mut a, mut b, b_at_a, _) = pair(0x7ace, |me, key, boot| tcp(1).build(me, key, boot));
    let src = a
        .register_mem(vec![0xa5u8; LEN], Access::empty())
        .expect("src");
    let back = a
        .register_mem(vec![0u8; LEN], Access::empty())
        .expect("back");
    let target = b
        .register_mem(
            vec![0x5au8; LEN],
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .expect("target");
    let start = Instant::now();
    for round in 0..20u64 {
        // The get's reply is written out of B's region while the put
        // lands in it.
        a.get(b_at_a, local(back, LEN), remote(target, LEN), 2 * round)
            .expect("get");
        a.put(b_at_a, local(src, LEN), remote(target, LEN), 2 * round + 1)
            .expect("put");
        let mut done = 0;
        while done < 2 {
            assert!(start.elapsed() < DEADLINE, "round {round}: not done");
            a.progress();
            b.progress();
            while let Some(event) = b.poll_event() {
                assert!(
                    !matches!(event, Event::Error(_)),
                    "round {round}: B {event:?}"
                );
            }
            while let Some(event) = a.poll_event() {
                match event {
                    Event::PutComplete { result, .. } | Event::GetComplete { result, .. } => {
                        assert_eq!(result, Ok(()), "round {round}");
                        done += 1;
                    }
                    Event::Error(e) => panic!("round {round}: A lost B: {e:?}"),
                    _ => {}
                }
            }
        }
    }
}
