//! What the btl-tokio tests share: runtimes of both flavours, a job's
//! bootstrap directory (removed when the test ends), endpoints over TCP
//! and UDP with small pools on loopback, a synchronous peer in a thread of
//! its own that can crash, and bounded waits.

#![allow(dead_code)] // each test file uses a part

use std::future::Future;
use std::path::PathBuf;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use btl_core::engine::Usage;
use btl_std::Btl;
use btl_std::driver::module::{FlushMark, Module, Transport};
use btl_std::driver::net::Os;
use btl_tokio::{
    Access, Endpoint, EndpointId, ModuleBuilder, ProcName, RemoteKey, Tag, TcpEndpoint, TokioNet,
    UdpEndpoint,
};

/// How long any one wait of a test may last.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// How long a whole test may last.
const TEST_DEADLINE: Duration = Duration::from_secs(60);

/// Which tokio runtime a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// One thread: the test, its tasks and the endpoints' drivers take
    /// turns.
    CurrentThread,
    /// Two workers: the drivers run beside the test, on other threads.
    MultiThread,
}

/// Runs `body` to its end on a fresh runtime of `flavor`, within the
/// test's deadline.
pub fn run<F: Future<Output = ()>>(flavor: Flavor, body: impl FnOnce() -> F) {
    let runtime = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    }
    .expect("a tokio runtime");
    runtime.block_on(async {
        tokio::time::timeout(TEST_DEADLINE, body())
            .await
            .expect("the test ends within its deadline");
    });
}

/// Makes, for each test named, a module of that name with one `#[test]`
/// per runtime flavour (and per transport where given), each a job of its
/// own: `base` for the first, `base + 1` for the next...
///
/// ```ignore
/// on_runtimes!(sizes_arrive: 0x7a10 => sizes_arrive_in_order, [tcp, udp]);
/// on_runtimes!(close_ends: 0x7a20 => close_ends_everything);
/// ```
#[macro_export]
macro_rules! on_runtimes {
    ($test:ident: $base:expr => $body:ident, [tcp, udp]) => {
        mod $test {
            use super::*;
            use $crate::common::{Flavor, Job, Tcp, Udp, run};
            const NAME: &str = stringify!($test);
            #[test]
            fn tcp_current_thread() {
                run(Flavor::CurrentThread, || {
                    $body::<Tcp>(Job::new(NAME, $base))
                });
            }
            #[test]
            fn tcp_multi_thread() {
                run(Flavor::MultiThread, || {
                    $body::<Tcp>(Job::new(NAME, $base + 1))
                });
            }
            #[test]
            fn udp_current_thread() {
                run(Flavor::CurrentThread, || {
                    $body::<Udp>(Job::new(NAME, $base + 2))
                });
            }
            #[test]
            fn udp_multi_thread() {
                run(Flavor::MultiThread, || {
                    $body::<Udp>(Job::new(NAME, $base + 3))
                });
            }
        }
    };
    ($test:ident: $base:expr => $body:ident, [tcp]) => {
        mod $test {
            use super::*;
            use $crate::common::{Flavor, Job, Tcp, run};
            const NAME: &str = stringify!($test);
            #[test]
            fn tcp_current_thread() {
                run(Flavor::CurrentThread, || {
                    $body::<Tcp>(Job::new(NAME, $base))
                });
            }
            #[test]
            fn tcp_multi_thread() {
                run(Flavor::MultiThread, || {
                    $body::<Tcp>(Job::new(NAME, $base + 1))
                });
            }
        }
    };
    ($test:ident: $base:expr => $body:ident) => {
        mod $test {
            use super::*;
            use $crate::common::{Flavor, Job, run};
            const NAME: &str = stringify!($test);
            #[test]
            fn current_thread() {
                run(Flavor::CurrentThread, || $body(Job::new(NAME, $base)));
            }
            #[test]
            fn multi_thread() {
                run(Flavor::MultiThread, || $body(Job::new(NAME, $base + 1)));
            }
        }
    };
}

/// The TCP transport of an endpoint.
pub type Tcp = btl_std::transports::tcp::Tcp<TokioNet>;
/// The UDP transport of an endpoint.
pub type Udp = btl_std::transports::udp::Udp<TokioNet>;

/// A transport an endpoint runs over, and its synchronous twin (the same
/// protocol over the operating system's sockets), for a peer that
/// crashes.
pub trait Wire: Transport<Net = TokioNet> + Send + 'static {
    /// Its component's name, as in its parameters' (`btl_tcp_...`).
    const NAME: &'static str;
    /// The synchronous module's transport.
    type Twin: Transport + 'static;

    /// Opens an endpoint as `builder` says, its driver spawned.
    fn open(builder: ModuleBuilder) -> Endpoint<Self>;

    /// Opens a synchronous module as `builder` says.
    fn open_twin(builder: ModuleBuilder) -> Module<Self::Twin>;
}

impl Wire for Tcp {
    const NAME: &'static str = "tcp";
    type Twin = btl_std::transports::tcp::Tcp<Os>;

    fn open(builder: ModuleBuilder) -> Endpoint<Self> {
        TcpEndpoint::tcp(builder).expect("a TCP endpoint")
    }

    fn open_twin(builder: ModuleBuilder) -> Module<Self::Twin> {
        builder.tcp().expect("a synchronous TCP module")
    }
}

impl Wire for Udp {
    const NAME: &'static str = "udp";
    type Twin = btl_std::transports::udp::Udp<Os>;

    fn open(builder: ModuleBuilder) -> Endpoint<Self> {
        UdpEndpoint::udp(builder).expect("a UDP endpoint")
    }

    fn open_twin(builder: ModuleBuilder) -> Module<Self::Twin> {
        builder.udp().expect("a synchronous UDP module")
    }
}

/// Payload of the small, eager and largest fragments of the tests'
/// modules: small pools, so that they fill quickly.
pub const SMALL: usize = 256;
/// The eager limit.
pub const EAGER: usize = 4096;
/// The largest message.
pub const MAX_SEND: usize = 32 << 10;

/// One test's job: its number, and its bootstrap directory under the
/// system's temporary directory, removed when the test ends.
pub struct Job {
    job: u64,
    dir: PathBuf,
}

impl Job {
    /// The job `job` of the test `name`, its directory fresh.
    pub fn new(name: &str, job: u64) -> Job {
        let dir = std::env::temp_dir().join(format!(
            "btl-tokio-test-{}-{name}-{job:x}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Job { job, dir }
    }

    /// Process `rank` of the job.
    pub fn proc(&self, rank: u32) -> ProcName {
        ProcName::new(self.job, rank)
    }

    /// What opens process `rank`'s module of component `component`: on
    /// loopback, small pools, checksums on, nothing from the environment.
    pub fn builder_of(&self, component: &str, rank: u32) -> ModuleBuilder {
        let p = |name: &str| format!("btl_{component}_{name}");
        ModuleBuilder::new(self.proc(rank))
            .shared_dir(&self.dir)
            .on_loopback()
            .ignore_environment()
            .job_key(b"btl-tokio tests".to_vec())
            .param(&p("small_size"), SMALL)
            .param(&p("eager_limit"), EAGER)
            .param(&p("max_send_size"), MAX_SEND)
            .param(&p("free_list_num"), 8)
            .param(&p("free_list_max"), 64)
            .param(&p("free_list_inc"), 8)
            .param(&p("checksum"), true)
    }

    /// What opens process `rank`'s module over `W`.
    pub fn builder<W: Wire>(&self, rank: u32) -> ModuleBuilder {
        self.builder_of(W::NAME, rank)
    }

    /// Process `rank`'s endpoint over `W`.
    pub fn open<W: Wire>(&self, rank: u32) -> Endpoint<W> {
        W::open(self.builder::<W>(rank))
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `fut`, which must end within [`DEADLINE`]; `what` names it if not.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not done within {DEADLINE:?}"),
    }
}

/// `fut`, which must end by `deadline`; `what` names it if not.
pub async fn by<F: Future>(deadline: tokio::time::Instant, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout_at(deadline, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not done in time"),
    }
}

/// Waits until `done` holds, looking every few milliseconds, for at most
/// [`DEADLINE`]; `what` names it, and `state` says how things stand, if
/// it never does.
pub async fn until<S: std::fmt::Debug>(
    what: &str,
    mut done: impl FnMut() -> bool,
    state: impl Fn() -> S,
) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not so within {DEADLINE:?}: {:?}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Polls `fut` once, with the task's waker.
pub async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx: &mut Context<'_>| Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx)))
        .await
}

/// The module's counters and what it owes its peers.
pub fn usage<W: Transport>(ep: &Endpoint<W>) -> (Usage, usize) {
    ep.with(|m| (m.usage(), m.outstanding()))
}

/// Waits until `ep`'s module is idle: nothing outstanding, no operation
/// under way, no event waiting or owed, and `registrations` regions
/// registered (those lent): nothing an operation took is left behind.
pub async fn settled<W: Transport>(what: &str, ep: &Endpoint<W>, registrations: usize) {
    until(
        &format!("{what}: the module idle with {registrations} registrations"),
        || {
            let (u, outstanding) = usage(ep);
            outstanding == 0
                && u.operations == 0
                && u.events == 0
                && u.events_owed == 0
                && u.registrations == registrations
        },
        || usage(ep),
    )
    .await;
}

/// `len` bytes that depend on `seed` and on their place: a message
/// truncated, shifted or mixed with another compares unequal.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Message `seq` of `len` bytes (at least 8): its number, then the pattern
/// of `seed`.
pub fn numbered(seed: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut data = pattern(seed ^ seq, len.max(8));
    data[..8].copy_from_slice(&seq.to_le_bytes());
    data
}

/// The number at the front of a message made by [`numbered`].
pub fn number_of(data: &[u8]) -> u64 {
    let head: [u8; 8] = data
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .expect("a numbered message");
    u64::from_le_bytes(head)
}

/// `to`'s endpoint at `from`, looked up through the job's directory.
pub async fn reach<W: Transport>(from: &Endpoint<W>, to: ProcName) -> EndpointId {
    within("the peer's lookup", from.reach(to, DEADLINE))
        .await
        .expect("the peer reached")
}

/// What a test tells its synchronous peer.
enum Order {
    /// Stop serving (no progress at all) until told otherwise.
    Pause,
    /// Serve again.
    Resume,
    /// Die: drop the module without a goodbye, its sockets closed as a
    /// killed process's are.
    Crash,
}

/// A synchronous module of the same protocol in a thread of its own,
/// serving its peers (taking every event) until paused or crashed.
pub struct SyncPeer {
    orders: mpsc::Sender<Order>,
    acks: mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The key of the region it lends, 64 KiB that peers may read and
    /// write, filled with [`pattern`] of `0x5eed`.
    pub key: RemoteKey,
}

/// Length of a [`SyncPeer`]'s region.
pub const PEER_REGION: usize = 64 << 10;

impl SyncPeer {
    /// Process `rank` of `job` over `W`'s twin, serving.
    pub fn start<W: Wire>(job: &Job, rank: u32) -> SyncPeer {
        let builder = job.builder::<W>(rank);
        let (orders, ordered) = mpsc::channel();
        let (acked, acks) = mpsc::channel();
        let (keyed, key) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut module = W::open_twin(builder);
            let region = module
                .register_mem(
                    pattern(0x5eed, PEER_REGION),
                    Access::REMOTE_READ | Access::REMOTE_WRITE,
                )
                .expect("the peer's region registered");
            let _ = keyed.send(region.remote_key());
            let mut paused = false;
            loop {
                let order = if paused {
                    ordered.recv().ok()
                } else {
                    match ordered.try_recv() {
                        Ok(order) => Some(order),
                        Err(mpsc::TryRecvError::Empty) => {
                            let _ = module.wait(Duration::from_millis(5));
                            while module.poll_event().is_some() {}
                            continue;
                        }
                        Err(mpsc::TryRecvError::Disconnected) => None,
                    }
                };
                match order {
                    Some(Order::Pause) => paused = true,
                    Some(Order::Resume) => paused = false,
                    Some(Order::Crash) => {
                        module.abort_on_drop();
                        drop(module);
                        let _ = acked.send(());
                        return;
                    }
                    None => return,
                }
                let _ = acked.send(());
            }
        });
        let key = key.recv_timeout(DEADLINE).expect("the peer's region key");
        SyncPeer {
            orders,
            acks,
            thread: Some(thread),
            key,
        }
    }

    fn order(&self, order: Order) {
        self.orders.send(order).expect("the peer's thread");
        self.acks
            .recv_timeout(DEADLINE)
            .expect("the peer's thread obeys");
    }

    /// Stops serving: no progress, no acknowledgement, until resumed.
    pub fn pause(&self) {
        self.order(Order::Pause);
    }

    /// Serves again.
    pub fn resume(&self) {
        self.order(Order::Resume);
    }

    /// Dies without a word: its sockets closed, no goodbye.
    pub fn crash(mut self) {
        self.order(Order::Crash);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the peer's thread ends");
        }
    }
}

impl Drop for SyncPeer {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.orders.send(Order::Crash);
            let _ = thread.join();
        }
    }
}

/// The tag of the messages A sends B in the tests of a full module.
pub const TAG: Tag = Tag(0x40);

/// A's message number `seq`, in the tests of a full module.
pub fn message(seq: u64) -> Vec<u8> {
    numbered(0xca, seq, 100)
}

/// Endpoints A and B of `job` over TCP, with small tables (4 peers: 16
/// events, a quarter of them kept for errors), so that a peer that reads
/// nothing stops taking messages after a few.
pub fn small_pair(job: &Job) -> (Endpoint<Tcp>, Endpoint<Tcp>) {
    let open = |rank| {
        TcpEndpoint::tcp(job.builder::<Tcp>(rank).param("btl_tcp_max_peers", 4))
            .expect("a TCP endpoint")
    };
    (open(0), open(1))
}

/// Events A's module owes (completions of what it took): it takes a send,
/// put or get only with a place for its event.
pub fn owed(a: &Endpoint<Tcp>) -> usize {
    usage(a).0.events_owed
}

/// A mark of everything A's module took so far: it moves when the module
/// takes a send (to any peer), a put or a get, and only then (what
/// completes meanwhile does not move it back).
pub fn taken_mark(a: &Endpoint<Tcp>) -> FlushMark {
    a.with(|m| m.flush_mark())
}

/// Polls `op` once: whether A's module took it, and how the poll went.
pub async fn poll_taken<F: Future + Unpin>(
    a: &Endpoint<Tcp>,
    op: &mut F,
) -> (bool, Poll<F::Output>) {
    let before = taken_mark(a);
    let polled = poll_once(op).await;
    (taken_mark(a) != before, polled)
}

/// A send of A's, and the number of its message.
pub type Numbered = (u64, btl_tokio::Send<Tcp, Vec<u8>>);

/// A's module filled by [`fill`].
pub struct Filled {
    /// The messages it took, in the order it took them.
    pub taken: Vec<u64>,
    /// The sends it took that have not completed yet.
    pub pending: Vec<Numbered>,
    /// A send it refused, which waits for room.
    pub waiting: Numbered,
}

/// Sends [`message`]s from A to B, which reads nothing, each polled once,
/// until A's module refuses one when it is called (it then waits for
/// room). Numbers from `next`.
pub async fn fill(a: &Endpoint<Tcp>, to_b: EndpointId, next: &mut u64) -> Filled {
    let mut taken = Vec::new();
    let mut pending = Vec::new();
    for _ in 0..1000 {
        let seq = *next;
        *next += 1;
        // A send is taken when called, if the module has room.
        let before = taken_mark(a);
        let mut send = a.send(to_b, TAG, message(seq));
        let took = taken_mark(a) != before;
        let polled = poll_once(&mut send).await;
        if !took {
            assert!(polled.is_pending(), "a send refused, and done");
            return Filled {
                taken,
                pending,
                waiting: (seq, send),
            };
        }
        taken.push(seq);
        match polled {
            Poll::Ready(r) => r.expect("a send acknowledged at once"),
            Poll::Pending => pending.push((seq, send)),
        }
    }
    panic!("1000 sends taken while B reads nothing: no backpressure");
}
