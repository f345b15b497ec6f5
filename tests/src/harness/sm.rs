//! The shared-memory BTL's core as a world: A and B are two modules in one
//! process, each writing the ring the other reads, as two processes do
//! through a segment. Killing a side is what the driver's watch on the
//! peer's process would report: the survivor loses it.

use std::pin::Pin;
use std::sync::atomic::AtomicU32;

use btl_core::btl::{Btl, LostReason};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::pool::{FragmentPools, PoolCell};
use btl_core::ring;
use btl_core::sm::SharedMemory;
use btl_std::driver::heap::Heap;

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
        Capabilities {
            same_btl: false,
            max_rounds: 5000,
            linger_rounds: 2,
            max_rdma_len: 16 << 20,
            sendi_max: self.btls[0].attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: false,
            garbage: false,
        }
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
/// and both are this process. The two-process tests of btl-std kill one
/// (`std-backend/tests/sm_processes.rs`).
pub struct SmModuleWorld {
    modules: [btl_std::SmModule; 2],
    peers: [EndpointId; 2],
    paused: [bool; 2],
    _dir: TempDir,
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl SmModuleWorld {
    /// Two modules of a fresh job, joined.
    pub fn new() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static WORLDS: AtomicU32 = AtomicU32::new(0);
        let n = WORLDS.fetch_add(1, Ordering::Relaxed);
        let job = (u64::from(std::process::id()) << 16) | u64::from(n);
        let dir = std::env::temp_dir().join(format!("btl-sm-world-{job:x}"));
        let names = [ProcName::new(job, 0), ProcName::new(job, 1)];
        let open = |me| {
            btl_std::ModuleBuilder::new(me)
                .ignore_environment()
                .shared_dir(&dir)
                .sm()
                .expect("an sm module")
        };
        let (mut a, mut b) = (open(names[0]), open(names[1]));
        let (a, b, peers) = std::thread::scope(|s| {
            let joining = s.spawn(move || {
                let ep = super::add_peer(&mut a, names[1]);
                (a, ep)
            });
            let to_a = super::add_peer(&mut b, names[0]);
            let (a, to_b) = joining.join().expect("A joins B");
            (a, b, [to_b, to_a])
        });
        SmModuleWorld {
            modules: [a, b],
            peers,
            paused: [false; 2],
            _dir: TempDir(dir),
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
        Capabilities {
            same_btl: false,
            max_rounds: 200_000,
            linger_rounds: 2,
            max_rdma_len: 16 << 20,
            sendi_max: self.modules[0].attributes().eager_limit,
            pause: true,
            peer_loss: false,
            handshake: false,
            garbage: false,
        }
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
