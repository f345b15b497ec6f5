//! The engine over reliable-connected queue pairs of the software HCA:
//! A and B each open a context on one soft device (two processes on one
//! host), run the `oob` CPC over an in-memory side channel, and carry the
//! engine's bytes through SENDs into posted receives
//! ([`btl_verbs::transport`]). The clock is the harness's: every round
//! moves it and the fabric's by a tick, so RNR and ACK retries, CPC
//! timeouts and the engine's timers all run on it.
//!
//! - `pause` stops driving a side: the HCA still fills its posted
//!   receives, then answers RNR, and the peer's sends wait on the RNR
//!   timer, without end.
//! - `kill` drops the side's context and its side-channel end, as a
//!   process that dies: its queue pairs vanish, the survivor's requests go
//!   unacknowledged until their retries are spent, its queue pair fails,
//!   and its CPC's new attempts go unanswered until the peer timeout.

use btl_core::btl::{Access, Btl, BtlError, MemHandle, RegisterError};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::engine::{Capacities, Stream};
use btl_core::mca::{Params, Registry};
use btl_core::time::{Duration, Instant};
use btl_core::wire::NONCE_LEN;
use btl_std::driver::heap::{Heap, HeapEngine};
use btl_verbs::cpc::{Cpc, Oob, OobConfig, QpTuning};
use btl_verbs::provider::{AckTimeout, RnrTimer};
use btl_verbs::soft::{SoftFabric, SoftHca};
use btl_verbs::transport::{MemoryHub, Transport, VerbsConfig};

use crate::pair::SplitMix64;
use crate::world::{Capabilities, Memory, Side, World};

/// The engine each side runs.
pub type VerbsEngine = HeapEngine<Stream>;

/// The job of A and B.
pub const JOB: u64 = 0x7E4B;
/// A's process name.
pub const A_NAME: ProcName = ProcName::new(JOB, 1);
/// B's process name.
pub const B_NAME: ProcName = ProcName::new(JOB, 0);
/// The job key both hold.
pub const KEY: &[u8] = b"verbs job key";
/// The soft device both open.
pub const DEVICE: &str = "soft0";

/// Largest message sent eagerly.
pub const EAGER: usize = 4096;
/// Largest message.
pub const MAX_SEND: usize = 64 << 10;
/// Fragments of each class.
pub const FRAGMENTS: u32 = 64;
/// Bytes of each send and receive buffer: smaller than the largest
/// frames, so frames are cut across SENDs all the time.
pub const BUFFER: usize = 8 << 10;
/// Receives posted and sends outstanding per queue pair.
pub const BUFFERS: usize = 8;
/// Fake time per round.
pub const TICK: Duration = Duration::from_millis(1);
/// Rounds within which anything must finish (a peer timeout included).
pub const MAX_ROUNDS: u32 = 4_000;
/// A peer silent this long is lost.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a CPC attempt waits for an answer: longer than any pause of
/// the suite, since a paused process answers no REQ (the engine's
/// handshake waits for it the same way), and longer than the peer timeout,
/// so that a killed peer is lost by the engine's timer, not for want of a
/// connection.
pub const CPC_TIMEOUT: Duration = Duration::from_secs(2);

/// The harness's queue pairs: a 4.2 ms ACK timeout three times, so a
/// dead peer is found within 20 rounds; a 10 µs RNR timer, retried without
/// end.
pub const TUNING: QpTuning = QpTuning {
    ack_timeout: AckTimeout(10),
    retry_cnt: 3,
    rnr_retry: btl_verbs::provider::RNR_RETRY_FOREVER,
    min_rnr_timer: RnrTimer(1),
    max_rd_atomic: 4,
};

const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 8,
    ops: 64,
    events: 256,
    registrations: 16,
};

/// One process: its engine and, while alive, its transport. As the
/// suite's BTL it is the engine, but for registrations: a region goes to
/// the device too (puts and gets from it are RDMA writes and reads), and
/// leaves the device before the engine gives it back.
struct Proc {
    // The transport drops first: its device reaches the engine's memory.
    transport: Option<Transport<SoftHca>>,
    engine: Box<VerbsEngine>,
    paused: bool,
}

impl Btl for Proc {
    type Memory = Memory;

    btl_core::forward_btl_operations!(engine);

    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        self.engine.add_procs(procs, endpoints, reachable)
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        self.engine.del_procs(endpoints)
    }

    fn register_mem(
        &mut self,
        region: Memory,
        access: Access,
    ) -> Result<MemHandle, RegisterError<Memory>> {
        let handle = self.engine.register_mem(region, access)?;
        if let Some(t) = self.transport.as_mut() {
            // A region the device refuses (an empty one) goes in packets.
            let _ = t.register(&mut self.engine, handle, access);
        }
        Ok(handle)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<Memory, BtlError> {
        match self.transport.as_mut() {
            Some(t) => t.deregister(&mut self.engine, handle),
            None => self.engine.deregister_mem(handle),
        }
    }

    fn progress(&mut self) -> usize {
        self.engine.progress()
    }

    fn finalize(&mut self) -> btl_core::btl::Undelivered {
        self.engine.finalize()
    }
}

/// A and B over RC queue pairs of the software HCA.
pub struct VerbsWorld {
    fabric: SoftFabric,
    hub: MemoryHub,
    tuning: QpTuning,
    seeds: SplitMix64,
    sides: [Proc; 2],
    peers: [EndpointId; 2],
    now: Instant,
}

impl VerbsWorld {
    /// A and B, each knowing the other; no queue pair yet.
    pub fn new() -> Self {
        Self::with_tuning(TUNING)
    }

    /// As [`new`](Self::new), with queue pairs of other timers and retry
    /// counts.
    pub fn with_tuning(tuning: QpTuning) -> Self {
        let fabric = SoftFabric::with_device(DEVICE);
        let hub = MemoryHub::new();
        let mut seeds = SplitMix64(0x7E4B_5EED);
        let mut side = |me: ProcName| {
            let seed = seeds.next();
            Proc {
                engine: engine_of(me, seed, Instant::ZERO),
                transport: Some(transport_of(&fabric, &hub, me, seed, tuning)),
                paused: false,
            }
        };
        let mut sides = [side(A_NAME), side(B_NAME)];
        let peers = [
            super::add_peer(&mut *sides[0].engine, B_NAME),
            super::add_peer(&mut *sides[1].engine, A_NAME),
        ];
        VerbsWorld {
            fabric,
            hub,
            tuning,
            seeds,
            sides,
            peers,
            now: Instant::ZERO,
        }
    }

    /// Starts `side` again as a new start of the same process, as after a
    /// crash: the old one dies (its context and side-channel end go), and
    /// a new engine, with another epoch, and a new transport, with another
    /// incarnation, take its place and learn of the other side.
    pub fn restart(&mut self, side: Side) {
        let me = [A_NAME, B_NAME][side.index()];
        let other = [B_NAME, A_NAME][side.index()];
        self.sides[side.index()].transport = None;
        let seed = self.seeds.next();
        let mut engine = engine_of(me, seed, self.now);
        self.peers[side.index()] = super::add_peer(&mut *engine, other);
        self.sides[side.index()] = Proc {
            engine,
            transport: Some(transport_of(&self.fabric, &self.hub, me, seed, self.tuning)),
            paused: false,
        };
    }

    /// Queue pairs `side` holds.
    pub fn queue_pairs(&self, side: Side) -> usize {
        self.sides[side.index()]
            .transport
            .as_ref()
            .map_or(0, Transport::queue_pairs)
    }

    /// The fabric, for faults of its own and its counters.
    pub fn fabric(&self) -> &SoftFabric {
        &self.fabric
    }

    /// A fatal error on the queue pair carrying `side`'s link, as the
    /// hardware might report one; whether there was one.
    pub fn fail_queue_pair(&mut self, side: Side) -> bool {
        let Some(t) = self.sides[side.index()].transport.as_ref() else {
            return false;
        };
        let Some((_, qp)) = t.links().next() else {
            return false;
        };
        self.fabric.fail_qp(DEVICE, qp).is_ok()
    }

    /// Overruns `side`'s completion queue, as one completion too many
    /// would.
    pub fn overrun_cq(&mut self, side: Side) {
        if let Some(t) = self.sides[side.index()].transport.as_ref() {
            self.fabric
                .overrun_cq(DEVICE, t.cq())
                .expect("the side's completion queue");
        }
    }
}

impl Default for VerbsWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for VerbsWorld {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            linger_rounds: 2,
            max_rdma_len: 64 << 20,
            sendi_max: self.sides[0].engine.attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, s: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut self.sides[s.index()]
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side.index()]
    }

    fn progress(&mut self) {
        self.now += TICK;
        self.fabric.set_now(self.now);
        for p in &mut self.sides {
            if p.paused {
                continue;
            }
            if let Some(t) = p.transport.as_mut() {
                // A few passes, as a busy driver makes several per tick.
                for _ in 0..4 {
                    if !t.progress(&mut *p.engine, self.now) {
                        break;
                    }
                }
            }
        }
    }

    fn pause(&mut self, s: Side) {
        self.sides[s.index()].paused = true;
    }

    fn resume(&mut self, s: Side) {
        self.sides[s.index()].paused = false;
    }

    fn kill(&mut self, s: Side) {
        self.sides[s.index()].transport = None;
    }
}

/// An engine of process `me` in its start `epoch`, made at `now`, one
/// link per peer.
fn engine_of(me: ProcName, epoch: u64, now: Instant) -> Box<VerbsEngine> {
    let mut config = super::engine_config(me, KEY, TICK, 100);
    config.links = 1;
    config.peer_timeout = PEER_TIMEOUT;
    config.epoch = epoch;
    let cfg = super::pools(EAGER, MAX_SEND, FRAGMENTS);
    let mut e = Box::new(Heap::engine(config, Stream, CAPACITIES, cfg, now).expect("engine pools"));
    e.set_name("verbs");
    e
}

/// Process `me`'s transport: a context on the soft device, the `oob` CPC
/// on the hub, nonces from `seed`.
fn transport_of(
    fabric: &SoftFabric,
    hub: &MemoryHub,
    me: ProcName,
    seed: u64,
    tuning: QpTuning,
) -> Transport<SoftHca> {
    let hca = fabric.open(DEVICE).expect("the soft device");
    let mut cpc = Oob::new(OobConfig {
        timeout: CPC_TIMEOUT,
        max_peers: 4,
    });
    let params = Registry::<4>::new();
    debug_assert!(params.is_empty());
    <Oob as Cpc<btl_verbs::transport::Host<SoftHca>>>::init(&mut cpc, &params, me, seed)
        .expect("the CPC starts");
    let config = VerbsConfig {
        port: 1,
        max_peers: 4,
        recv_buffers: BUFFERS,
        send_buffers: BUFFERS,
        buffer_size: BUFFER,
        rdma_depth: BUFFERS,
        tuning,
    };
    let mut nonces = SplitMix64(seed);
    let nonce = move || {
        let mut n = [0u8; NONCE_LEN];
        n[..8].copy_from_slice(&nonces.next().to_le_bytes());
        n[8..].copy_from_slice(&nonces.next().to_le_bytes());
        n
    };
    Transport::new(
        hca,
        config,
        Box::new(cpc),
        Box::new(hub.join(me)),
        Box::new(nonce),
    )
    .expect("the transport's buffers")
}
