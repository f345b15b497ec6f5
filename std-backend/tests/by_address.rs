//! A client that knows only its server's `HOST:PORT` reaches it, over real
//! loopback sockets (TCP and UDP): the server's name comes from its
//! handshake, with no job or rank agreed beforehand and no bootstrap
//! shared; a server started after its client is waited for; nothing
//! listening is an error that says so once the time given has passed, and
//! leaves nothing behind.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, Event, Tag};
use btl_core::endpoint::ProcName;
use btl_std::ReachError;
use btl_std::bootstrap::{Bootstrap, StaticPeers};
use btl_std::driver::module::{Module, Transport};
use btl_std::transports::Ports;

mod common;
use common::{DEADLINE, tcp, udp};

/// The server's name: nothing the client is told.
const SERVER: ProcName = ProcName::new(0x5e27e2, 3);
/// The client's, of another job.
const CLIENT: ProcName = ProcName::new(0xc11e47, 0);
const KEY: &[u8] = b"the service's key";

/// A bootstrap of one process: knows no one, shared with no one.
fn alone() -> Arc<dyn Bootstrap> {
    Arc::new(StaticPeers::new(Vec::new(), "no list"))
}

/// How a test opens a module: process, key, bootstrap and the port it
/// listens on (0: any).
type Open<T> = fn(ProcName, Arc<dyn Bootstrap>, u16) -> Module<T>;

fn tcp_module(
    me: ProcName,
    boot: Arc<dyn Bootstrap>,
    port: u16,
) -> Module<btl_std::transports::tcp::Tcp<btl_std::driver::net::Os>> {
    let mut setup = tcp(1);
    setup.tcp.ports = Ports {
        min: port,
        range: 1,
    };
    setup.build(me, Some(KEY), boot).expect("a TCP module")
}

fn udp_module(
    me: ProcName,
    boot: Arc<dyn Bootstrap>,
    port: u16,
) -> Module<btl_std::transports::udp::Udp<btl_std::driver::net::Os>> {
    let mut setup = udp();
    setup.udp.ports = Ports {
        min: port,
        range: 1,
    };
    setup.build(me, Some(KEY), boot).expect("a UDP module")
}

/// A loopback port nothing listens on now (bound, then let go).
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    socket.local_addr().expect("its address").port()
}

/// A server on `port` (0: any), opened after `delay` in a thread of its
/// own, serving until the first message comes; its address, once known,
/// goes out on the channel, and the thread ends with the message.
fn serve<T: Transport + Send + 'static>(
    open: Open<T>,
    port: u16,
    delay: Duration,
) -> (std::sync::mpsc::Receiver<String>, JoinHandle<Vec<u8>>)
where
    Module<T>: Send,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        std::thread::sleep(delay);
        let mut m = open(SERVER, alone(), port);
        let at = m.directory().card().contacts[0].addr;
        let _ = tx.send(at.to_string());
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < DEADLINE, "no message came");
            m.progress();
            while let Some(event) = m.poll_event() {
                if let Event::Received(incoming) = event {
                    let got = incoming.data.to_vec();
                    let _ = m.flush(Duration::from_secs(1));
                    return got;
                }
            }
        }
    });
    (rx, server)
}

/// Sends `data` to `ep` and flushes it.
fn send<T: Transport>(m: &mut Module<T>, ep: btl_core::endpoint::EndpointId, data: &[u8]) {
    let start = Instant::now();
    while m.send_copy(ep, Tag(0x90), data).is_err() {
        assert!(start.elapsed() < DEADLINE, "the send never went");
        m.progress();
    }
    m.flush(DEADLINE).expect("acknowledged");
}

fn reaches_a_server_by_its_address_alone<T: Transport + Send + 'static>(open: Open<T>)
where
    Module<T>: Send,
{
    let (at, server) = serve(open, 0, Duration::ZERO);
    let at = at.recv_timeout(DEADLINE).expect("the server's address");
    let mut client = open(CLIENT, alone(), 0);
    let (ep, name) = client
        .connect_to(&at, Duration::from_secs(10))
        .expect("reached");
    assert_eq!(name, SERVER, "its name, from its handshake");
    send(&mut client, ep, b"by address");
    assert_eq!(server.join().expect("the server"), b"by address");
}

#[test]
fn over_tcp_a_server_is_reached_by_its_address_alone() {
    reaches_a_server_by_its_address_alone(tcp_module);
}

#[test]
fn over_udp_a_server_is_reached_by_its_address_alone() {
    reaches_a_server_by_its_address_alone(udp_module);
}

fn waits_for_a_server_started_later<T: Transport + Send + 'static>(open: Open<T>)
where
    Module<T>: Send,
{
    let port = free_port();
    let late = Duration::from_millis(400);
    let mut client = open(CLIENT, alone(), 0);
    let start = Instant::now();
    let (_, server) = serve(open, port, late);
    let (ep, name) = client
        .connect_to(&format!("127.0.0.1:{port}"), Duration::from_secs(15))
        .expect("reached once it listens");
    assert!(start.elapsed() >= late, "not before it listened");
    assert_eq!(name, SERVER);
    assert!(
        client.poll_event().is_none(),
        "the refused tries are no events"
    );
    send(&mut client, ep, b"late");
    assert_eq!(server.join().expect("the server"), b"late");
}

#[test]
fn over_tcp_a_server_started_after_its_client_is_waited_for() {
    waits_for_a_server_started_later(tcp_module);
}

#[test]
fn over_udp_a_server_started_after_its_client_is_waited_for() {
    waits_for_a_server_started_later(udp_module);
}

fn nothing_listening_is_an_error_after_the_time_given<T: Transport>(open: Open<T>) {
    let port = free_port();
    let mut client = open(CLIENT, alone(), 0);
    let given = Duration::from_millis(500);
    let start = Instant::now();
    let err = client
        .connect_to(&format!("127.0.0.1:{port}"), given)
        .expect_err("nothing listens");
    let took = start.elapsed();
    assert!(
        took >= given && took < given + Duration::from_secs(2),
        "{took:?}"
    );
    assert!(
        matches!(
            err,
            ReachError::NoAnswer {
                lost: None,
                refused: true,
                ..
            }
        ),
        "{err:?}"
    );
    let said = err.to_string();
    assert!(
        said.contains("nothing listens at 127.0.0.1:") && said.contains("is the server started"),
        "{said}"
    );
    assert!(client.poll_event().is_none(), "no event for it");
    assert_eq!(client.usage().peers, 0, "nothing left behind");
}

#[test]
fn over_tcp_nothing_listening_is_an_error_after_the_time_given() {
    nothing_listening_is_an_error_after_the_time_given(tcp_module);
}

#[test]
fn over_udp_nothing_listening_is_an_error_after_the_time_given() {
    nothing_listening_is_an_error_after_the_time_given(udp_module);
}

#[test]
fn an_address_without_a_port_is_an_error_naming_it() {
    let mut client = tcp_module(CLIENT, alone(), 0);
    let err = client
        .connect_to("127.0.0.1", Duration::from_secs(1))
        .expect_err("no port");
    assert!(matches!(err, ReachError::Address { .. }), "{err:?}");
    assert!(
        err.to_string().contains("`127.0.0.1` is not a tcp address"),
        "{err}"
    );
}

/// A TCP server sized for `peers` peers (`btl_tcp_max_peers`), serving
/// until `stop` is set; its address goes out on the channel.
fn sized_server(
    peers: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (std::sync::mpsc::Receiver<String>, JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let mut setup = tcp(1);
        setup.capacities = btl_core::engine::Capacities::for_peers(peers);
        let mut m = setup
            .build(SERVER, Some(KEY), alone())
            .expect("a TCP module");
        let _ = tx.send(m.directory().card().contacts[0].addr.to_string());
        let start = Instant::now();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(start.elapsed() < DEADLINE, "never stopped");
            m.progress();
            while m.poll_event().is_some() {}
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    (rx, server)
}

#[test]
fn a_server_holds_as_many_peers_as_its_tables_and_refuses_the_next() {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (at, server) = sized_server(3, stop.clone());
    let at = at.recv_timeout(DEADLINE).expect("the server's address");
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let mut client = tcp_module(ProcName::new(0xc11e47, i), alone(), 0);
            let reached = client.connect_to(&at, Duration::from_secs(10));
            (client, reached)
        })
        .collect();
    for (i, (_, reached)) in clients.iter().take(3).enumerate() {
        assert!(reached.is_ok(), "client {i}: {reached:?}");
    }
    let refused = &clients[3].1;
    assert!(
        matches!(
            refused,
            Err(ReachError::NoAnswer {
                lost: Some(btl_core::btl::LostReason::NoRoom),
                ..
            })
        ),
        "the fourth: {refused:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().expect("the server");
}
