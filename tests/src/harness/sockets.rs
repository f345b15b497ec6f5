//! The TCP and UDP components over real sockets on loopback: two modules,
//! A and B, each a process of one job as far as the modules can tell
//! (names, cards published to a shared directory, the job key), driven in
//! turn by one test thread. The kernel carries the bytes.
//!
//! Fault hooks:
//!
//! - `pause` stops driving a side: what is sent to it waits in the
//!   kernel's socket buffers (a sender then stalls as on a real network).
//! - `kill` drops a side's module: its sockets close as when a process
//!   dies. Over TCP the survivor sees its connections end, fails to
//!   reconnect (nothing listens) and loses the peer after its peer
//!   timeout, which the harness shortens to [`PEER_TIMEOUT`]; over UDP it
//!   finds out by that timeout alone.
//! - `inject_handshake` (TCP) has a rogue third process connect to the
//!   target's listener with a plain socket and send a HELLO of another
//!   major version, a HELLO without the job key's capability, or garbage.
//!   The outcome is `Refused` once the target closes that socket. UDP
//!   offers no such hook: a refused datagram handshake is only dropped,
//!   which a plain socket cannot tell from a slow answer.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::HEADER_RESERVE;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::rtt::RttConfig;
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time;
use btl_std::bootstrap::SharedDir;
use btl_std::transports::interfaces::Selection;
use btl_std::transports::tcp::{TcpConfig, TcpModule, TcpSetup};
use btl_std::transports::udp::{UdpConfig, UdpModule, UdpSetup};

use btl_core::wire::{Capabilities as WireCapabilities, NONCE_LEN};

use crate::rogue;
use crate::world::{BadHandshake, Capabilities, HandshakeOutcome, Memory, Side, World};

/// How long a silent peer takes to count as lost: short, so that the
/// peer-loss tests end quickly.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The job key A and B hold.
pub const KEY: &[u8] = b"sockets job key";
/// Rounds (one `progress` of each module) any operation must finish in:
/// real time passes between them (a fraction of a microsecond to a few),
/// so this bounds a test to seconds while covering the peer timeout.
pub const MAX_ROUNDS: u32 = 20_000_000;

/// Worlds made so far in this process: each gets a job of its own.
static WORLDS: AtomicU64 = AtomicU64::new(0);

/// A module of one of the socket components.
pub trait SocketModule: Btl<Memory = Memory> + Sized + 'static {
    /// Builds the module of process `me` publishing to `boot`.
    fn build(me: ProcName, boot: Arc<SharedDir>) -> Self;

    /// Where a rogue connects to knock on this module (a TCP listener), or
    /// `None` where the harness has no rogue.
    fn listener(&self) -> Option<SocketAddr> {
        None
    }

    /// Dropped, the module closes no link and says no goodbye: a killed
    /// process's.
    fn abort_on_drop(&mut self);
}

/// The rogue of `inject_handshake`: its socket to the target.
struct Rogue {
    stream: TcpStream,
    refused: bool,
}

fn engine() -> EngineConfig {
    // No CRC trailers: TCP and UDP check their bytes already, and an
    // unoptimised CRC of the 64 MiB transfers would dominate the run.
    let mut c = EngineConfig::new(ProcName::new(0, 0));
    c.peer_timeout = PEER_TIMEOUT.into();
    c.keepalive = c.peer_timeout / 4;
    c.handshake_timeout = c.peer_timeout;
    c.rtt = RttConfig {
        initial_rto: time::Duration::from_millis(5),
        min_rto: time::Duration::from_millis(1),
        max_rto: time::Duration::from_millis(50),
    };
    c
}

fn pools(max_send: usize) -> FragmentPoolsConfig {
    let class = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 64,
        max: 64,
        inc: 16,
    };
    FragmentPoolsConfig {
        small: class(256),
        eager: class(4096.min(max_send)),
        max: class(max_send),
    }
}

impl SocketModule for TcpModule {
    fn build(me: ProcName, boot: Arc<SharedDir>) -> Self {
        let setup = TcpSetup {
            tcp: TcpConfig {
                selection: Selection::new("lo", "").expect("lo"),
                lookup_timeout: Duration::from_secs(5),
                connect_timeout: PEER_TIMEOUT,
                ..TcpConfig::default()
            },
            pools: pools(64 << 10),
            engine: engine(),
            capacities: btl_core::engine::Capacities::SOCKET_MODULE,
        };
        setup
            .build(me, Some(KEY), boot)
            .expect("a TCP module on loopback")
    }

    fn listener(&self) -> Option<SocketAddr> {
        self.transport().contacts().next().map(|c| c.addr)
    }

    fn abort_on_drop(&mut self) {
        btl_std::Module::abort_on_drop(self);
    }
}

impl SocketModule for UdpModule {
    fn build(me: ProcName, boot: Arc<SharedDir>) -> Self {
        let setup = UdpSetup {
            udp: UdpConfig {
                selection: Selection::new("lo", "").expect("lo"),
                lookup_timeout: Duration::from_secs(5),
                // Loopback carries large datagrams: fewer per put.
                mtu: Some(16 << 10),
                ..UdpConfig::default()
            },
            pools: pools(16 << 10),
            engine: engine(),
            capacities: btl_core::engine::Capacities::SOCKET_MODULE,
        };
        setup
            .build(me, Some(KEY), boot)
            .expect("a UDP module on loopback")
    }

    fn abort_on_drop(&mut self) {
        btl_std::Module::abort_on_drop(self);
    }
}

/// A and B as two socket modules of type `M`.
pub struct SocketWorld<M> {
    modules: [Option<M>; 2],
    peers: [EndpointId; 2],
    paused: [bool; 2],
    /// The name the rogue gives in its HELLO: a third process of the job.
    rogue_name: ProcName,
    rogue: Option<Rogue>,
}

impl<M: SocketModule> SocketWorld<M> {
    /// Two modules of a fresh job, each knowing the other.
    pub fn new() -> Self {
        let n = WORLDS.fetch_add(1, Ordering::Relaxed);
        let job = u64::from(std::process::id()) << 20 | n;
        let dir = std::env::temp_dir().join(format!("btl-sockets-world-{job:x}"));
        let _ = std::fs::remove_dir_all(&dir);
        let boot = Arc::new(SharedDir::new(&dir));
        let names = [ProcName::new(job, 1), ProcName::new(job, 0)];
        let mut modules = [M::build(names[0], boot.clone()), M::build(names[1], boot)];
        let mut peers = [EndpointId(0); 2];
        for (i, m) in modules.iter_mut().enumerate() {
            let mut ep = [None];
            let mut words = [0u64];
            m.add_procs(&[names[1 - i]], &mut ep, &mut Reachability::new(&mut words))
                .expect("add_procs");
            peers[i] = ep[0].expect("the other process is reachable on loopback");
        }
        let _ = std::fs::remove_dir_all(&dir);
        let [a, b] = modules;
        SocketWorld {
            modules: [Some(a), Some(b)],
            peers,
            paused: [false; 2],
            rogue_name: ProcName::new(job, 2),
            rogue: None,
        }
    }
}

impl<M: SocketModule> Default for SocketWorld<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: SocketModule> World for SocketWorld<M> {
    fn capabilities(&self) -> Capabilities {
        let module = self.modules.iter().flatten().next();
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            linger_rounds: 200,
            max_rdma_len: 64 << 20,
            sendi_max: module.map_or(0, |m| m.attributes().eager_limit),
            pause: true,
            peer_loss: true,
            handshake: module.is_some_and(|m| m.listener().is_some()),
            garbage: false,
        }
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        self.modules[side as usize]
            .as_mut()
            .expect("the suite does not touch a killed side")
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        for (i, m) in self.modules.iter_mut().enumerate() {
            if let Some(m) = m
                && !self.paused[i]
            {
                m.progress();
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
        if let Some(m) = self.modules[side as usize].as_mut() {
            m.abort_on_drop();
        }
        self.modules[side as usize] = None;
    }

    fn inject_handshake(&mut self, target: Side, kind: BadHandshake) {
        let at = self.modules[target as usize]
            .as_ref()
            .and_then(SocketModule::listener)
            .expect("a live target with a listener");
        let nonce = [0x5A; NONCE_LEN];
        let bytes = match kind {
            BadHandshake::WrongVersion => rogue::hello_of_another_version(self.rogue_name, nonce),
            BadHandshake::WrongJobKey => {
                rogue::hello(self.rogue_name, nonce, WireCapabilities::empty())
            }
            BadHandshake::Garbage => rogue::garbage(0x6A7B_0003),
        };
        let mut stream = TcpStream::connect(at).expect("the rogue connects");
        stream.write_all(&bytes).expect("the rogue's bytes");
        stream.set_nonblocking(true).expect("a non-blocking rogue");
        self.rogue = Some(Rogue {
            stream,
            refused: false,
        });
    }

    fn handshake_outcome(&mut self) -> HandshakeOutcome {
        let Some(rogue) = self.rogue.as_mut() else {
            return HandshakeOutcome::Pending;
        };
        // What the target answers is read and dropped, until it closes.
        let mut answer = [0u8; 512];
        while !rogue.refused {
            match rogue.stream.read(&mut answer) {
                Ok(0) => rogue.refused = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => rogue.refused = true,
            }
        }
        if rogue.refused {
            HandshakeOutcome::Refused
        } else {
            HandshakeOutcome::Pending
        }
    }
}
