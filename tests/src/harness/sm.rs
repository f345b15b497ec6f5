//! The shared-memory BTL's core as a world: A and B are two modules in one
//! process, each writing the ring the other reads, as two processes do
//! through a segment. Killing a side is what the driver's watch on the
//! peer's process would report: the survivor loses it.

use std::os::unix::net::{UnixListener, UnixStream};
use std::pin::Pin;
use std::process::{Child, Command};
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, LostReason};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::pool::{FragmentClass, FragmentPools, PoolCell, PoolStats};
use btl_core::ring;
use btl_core::sm::SharedMemory;
use btl_std::driver::heap::Heap;

use super::remote::RemoteBtl;
use super::{TempDir, fresh_job};
use crate::world::{Capabilities, Memory, Side, World};

/// The module the harness runs: 4 peers, 16 registrations, 32 operations,
/// 64 events.
pub type SmBtl = SharedMemory<'static, Pin<Box<[PoolCell]>>, Memory, 4, 16, 32, 64>;

/// Data words of each ring: 256 KiB, records of up to 128 KiB.
const RING: usize = 1 << 16;

/// A and B over two rings.
pub struct SmWorld {
    btls: [SmBtl; 2],
    peers: [EndpointId; 2],
    paused: [bool; 2],
    killed: [bool; 2],
}

const NAMES: [ProcName; 2] = [ProcName::new(0x5a, 0), ProcName::new(0x5a, 1)];

/// What the shared-memory worlds offer: no handshake or garbage hooks (a
/// ring has no connection to refuse or to break), pause, peer loss where
/// the harness can end a side, puts and gets up to 16 MiB, and `sendi`
/// up to the modules' eager limit.
fn capabilities(max_rounds: u32, sendi_max: usize, peer_loss: bool) -> Capabilities {
    Capabilities {
        same_btl: false,
        max_rounds,
        linger_rounds: 2,
        max_rdma_len: 16 << 20,
        sendi_max,
        pause: true,
        peer_loss,
        handshake: false,
        garbage: false,
    }
}

/// A ring for the world's lifetime: the harness leaks it, as a segment
/// outlives the modules that map it.
fn ring_words() -> &'static [AtomicU32] {
    let words: Vec<AtomicU32> = (0..ring::words_for(RING))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    Box::leak(words.into_boxed_slice())
}

fn module() -> SmBtl {
    let cfg = super::pools(64 << 10, 128 << 10, 32);
    let pools = FragmentPools::owning(
        Heap::<Memory>::region(FragmentPools::required_bytes(&cfg)),
        cfg,
    )
    .expect("pools");
    SharedMemory::new(pools)
}

impl SmWorld {
    /// Two modules joined by two fresh rings.
    pub fn new() -> Self {
        let (ab, ba) = (ring_words(), ring_words());
        let mut btls = [module(), module()];
        btls[0].attach(NAMES[1], ab, ba).expect("attach");
        btls[1].attach(NAMES[0], ba, ab).expect("attach");
        let peers = [
            super::add_peer(&mut btls[0], NAMES[1]),
            super::add_peer(&mut btls[1], NAMES[0]),
        ];
        SmWorld {
            btls,
            peers,
            paused: [false; 2],
            killed: [false; 2],
        }
    }
}

impl Default for SmWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for SmWorld {
    fn capabilities(&self) -> Capabilities {
        capabilities(5000, self.btls[0].attributes().eager_limit, true)
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut self.btls[side as usize]
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        for s in 0..2 {
            if !self.paused[s] && !self.killed[s] {
                self.btls[s].progress();
            }
        }
    }

    fn pause(&mut self, side: Side) {
        self.paused[side as usize] = true;
    }

    fn resume(&mut self, side: Side) {
        self.paused[side as usize] = false;
    }

    fn kill(&mut self, side: Side) {
        let s = side as usize;
        self.killed[s] = true;
        let other = 1 - s;
        self.btls[other].lose(self.peers[other], LostReason::Refused);
    }
}

/// The shared-memory component's modules as a world: A and B are two
/// modules in one process, as two processes of one job (names, cards in a
/// shared directory, a segment each in `/dev/shm`), opened with the
/// component's default parameters and joined by their `add_procs`, run at
/// once on two threads as two processes would. The kernel is not
/// involved once they are joined.
///
/// No `kill`: the survivor learns of a dead peer from its process ending,
/// and both are this process. [`SmProcessesWorld`] kills one.
pub struct SmModuleWorld {
    modules: [btl_std::SmModule; 2],
    peers: [EndpointId; 2],
    paused: [bool; 2],
    _dir: TempDir,
}

impl SmModuleWorld {
    /// Two modules of a fresh job, joined.
    pub fn new() -> Self {
        let (job, dir) = fresh_job("sm-world");
        let names = [ProcName::new(job, 0), ProcName::new(job, 1)];
        let (modules, peers) =
            super::join_pair(open_sm(&dir.0, names[0]), open_sm(&dir.0, names[1]), names);
        SmModuleWorld {
            modules,
            peers,
            paused: [false; 2],
            _dir: dir,
        }
    }
}

impl Default for SmModuleWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for SmModuleWorld {
    fn capabilities(&self) -> Capabilities {
        capabilities(200_000, self.modules[0].attributes().eager_limit, false)
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut self.modules[side as usize]
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        for s in 0..2 {
            if !self.paused[s] {
                self.modules[s].progress();
            }
        }
    }

    fn pause(&mut self, side: Side) {
        self.paused[side as usize] = true;
    }

    fn resume(&mut self, side: Side) {
        self.paused[side as usize] = false;
    }
}

/// The shared-memory component's modules in two processes: A is a module
/// of this process, B one of a child process (this test binary started
/// again, running [`serve_side_b`]), reached through a [`RemoteBtl`].
/// Both are opened with the component's default parameters and joined
/// through a shared directory, as two processes of a job are.
///
/// Everything the one-process world does, and `kill`: B's process is
/// killed (SIGKILL), and A learns of it from its watch on B's process.
pub struct SmProcessesWorld {
    a: btl_std::SmModule,
    b: RemoteBtl,
    peers: [EndpointId; 2],
    paused: [bool; 2],
    child: Child,
    killed: bool,
    _dir: TempDir,
}

/// The environment variable that makes a child serve side B: the shared
/// directory, then the job.
const SIDE_B: &str = "BTL_TESTS_SM_SIDE_B";

/// What the child test that serves side B is called: the name
/// [`sm_side_b_process!`](crate::sm_side_b_process) gives it.
pub const SIDE_B_TEST: &str = "sm_side_b";

/// How long the child has to start, join and answer.
const CHILD_DEADLINE: Duration = Duration::from_secs(20);

/// Defines the test that is side B's process when a [`SmProcessesWorld`]
/// starts this test binary; run alone, it does nothing. Every test file
/// that makes such worlds calls this once.
#[macro_export]
macro_rules! sm_side_b_process {
    () => {
        #[test]
        #[ignore = "side B of the two-process worlds, started by them as their child"]
        fn sm_side_b() {
            $crate::harness::sm::serve_side_b();
        }
    };
}

/// Side B's process: opens its module, joins A, and serves it to the
/// parent until told to stop. Does nothing unless the parent started it.
pub fn serve_side_b() {
    let Some(asked) = std::env::var_os(SIDE_B) else {
        return;
    };
    let asked = asked.to_string_lossy().into_owned();
    let (dir, job) = asked
        .rsplit_once('\n')
        .expect("the directory, then the job");
    let job: u64 = job.parse().expect("a job number");
    let dir = std::path::Path::new(dir);
    let control = UnixStream::connect(dir.join("control")).expect("the parent's socket");
    let mut b = open_sm(dir, ProcName::new(job, 1));
    super::add_peer(&mut b, ProcName::new(job, 0));
    super::remote::serve(&mut b, control);
}

fn open_sm(dir: &std::path::Path, me: ProcName) -> btl_std::SmModule {
    btl_std::ModuleBuilder::new(me)
        .ignore_environment()
        .shared_dir(dir)
        .sm()
        .expect("an sm module")
}

impl SmProcessesWorld {
    /// A module here and one in a child process, of a fresh job, joined.
    pub fn new() -> Self {
        let (job, dir) = fresh_job("sm-processes");
        let listener = UnixListener::bind(dir.0.join("control")).expect("a control socket");
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", SIDE_B_TEST, "--ignored", "--nocapture"])
            .env(SIDE_B, format!("{}\n{job}", dir.0.display()))
            .spawn()
            .expect("side B's process");
        let mut a = open_sm(&dir.0, ProcName::new(job, 0));
        let to_b = super::add_peer(&mut a, ProcName::new(job, 1));
        let control = accept(&listener, &mut child);
        let setup = btl_std::ModuleBuilder::new(ProcName::new(job, 1))
            .ignore_environment()
            .sm_setup()
            .expect("sm's parameters");
        let mut b = RemoteBtl::new(control, setup.pools, 64);
        // B reaches A first of all, so A is its first endpoint.
        let to_a = btl_core::btl::add_proc(&mut b, ProcName::new(job, 0))
            .expect("add_procs")
            .expect("B reaches A");
        SmProcessesWorld {
            a,
            b,
            peers: [to_b, to_a],
            paused: [false; 2],
            child,
            killed: false,
            _dir: dir,
        }
    }
}

/// The child's connection, once it has made it; fails if the child ends
/// first or takes longer than [`CHILD_DEADLINE`].
fn accept(listener: &UnixListener, child: &mut Child) -> UnixStream {
    listener.set_nonblocking(true).expect("a polled listener");
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("a blocking stream");
                stream
                    .set_read_timeout(Some(CHILD_DEADLINE))
                    .expect("a bounded wait for each answer");
                return stream;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accepting side B's process: {e}"),
        }
        if let Some(status) = child.try_wait().expect("side B's process") {
            panic!("side B's process ended before it connected: {status}");
        }
        assert!(
            start.elapsed() < CHILD_DEADLINE,
            "side B's process did not connect within {CHILD_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Default for SmProcessesWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SmProcessesWorld {
    fn drop(&mut self) {
        if !self.killed {
            self.b.quit();
        }
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > CHILD_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl World for SmProcessesWorld {
    fn capabilities(&self) -> Capabilities {
        capabilities(200_000, self.a.attributes().eager_limit, true)
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        match side {
            // A call of A's may move bytes into B's regions.
            Side::A => {
                self.b.touched();
                &mut self.a
            }
            Side::B => {
                self.b.refresh();
                &mut self.b
            }
        }
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        if !self.paused[0] {
            self.a.progress();
            self.b.touched();
        }
        if self.killed {
            // A learns of B's end from its watch, which looks every
            // `WATCH_EVERY` of real time: the rounds must take some.
            std::thread::sleep(Duration::from_micros(20));
        } else if !self.paused[1] {
            self.b.progress();
        }
    }

    fn pool_stats(&mut self, side: Side) -> [(FragmentClass, PoolStats); 3] {
        match side {
            Side::A => {
                let pools = self.a.pools();
                FragmentClass::ALL.map(|class| (class, pools.stats(class)))
            }
            Side::B => self.b.pool_stats(),
        }
    }

    fn pause(&mut self, side: Side) {
        self.paused[side as usize] = true;
    }

    fn resume(&mut self, side: Side) {
        self.paused[side as usize] = false;
    }

    fn kill(&mut self, side: Side) {
        assert_eq!(side, Side::B, "only side B has a process of its own");
        self.child.kill().expect("SIGKILL to side B's process");
        self.child.wait().expect("side B's process ends");
        self.killed = true;
    }
}
