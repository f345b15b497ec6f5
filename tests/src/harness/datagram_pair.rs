//! The sans-I/O engine in datagram framing over an in-memory network that
//! loses, duplicates and reorders: two [`Engine`](btl_core::engine::Engine)s, A and B (two processes
//! of one job, holding its key), driven by
//! [`DatagramPair`].
//! Every datagram either engine sends is dropped with probability
//! [`FAULTS`]`.loss`, delivered twice with `.duplication`, and queued ahead
//! of earlier ones with `.reordering`; the engines must still deliver
//! every message and complete every operation exactly once.
//!
//! Fault hooks:
//!
//! - `pause` stops driving a side: what is sent to it waits in its queue
//!   (and is dropped once the queue is full, as a network would).
//! - `kill` stops a side for good and drops everything sent to it. Over
//!   datagrams nobody is told: the survivor finds out by its peer timeout,
//!   which the harness shortens to [`PEER_TIMEOUT`].

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::{Capacities, Datagram};
use btl_core::time::{Duration, Instant};
use btl_std::driver::heap::{Heap, HeapEngine};

use crate::pair::datagram::{DatagramPair, Faults, NetStats};
use crate::world::{Capabilities, Memory, Side, World};

/// What an engine of the harness holds: more registrations than any suite
/// keeps at once.
pub const CAPACITIES: Capacities = Capacities {
    peers: 4,
    links: 4,
    ops: 64,
    events: 256,
    registrations: 16,
};

/// The engine the harness runs on each side.
pub type PairEngine = HeapEngine<Datagram>;

/// Largest datagram: an Ethernet frame's payload.
pub const MTU: usize = 1500;
/// Datagrams in flight per direction: more than both send windows.
pub const IN_FLIGHT: usize = 160;

/// The driver of A and B.
pub type Pair = DatagramPair<PairEngine, IN_FLIGHT, MTU, Box<PairEngine>>;

/// What the network does: 3 % lost, 2 % duplicated, 5 % reordered.
pub const FAULTS: Faults = Faults {
    loss: 30,
    duplication: 20,
    reordering: 50,
};

/// The job of A and B.
pub const JOB: u64 = 0xD6A4;
/// A's process name.
pub const A_NAME: ProcName = ProcName::new(JOB, 1);
/// B's process name.
pub const B_NAME: ProcName = ProcName::new(JOB, 0);
/// The job key A and B hold.
pub const KEY: &[u8] = b"datagram-pair job key";
/// The seed of faults and nonces: every run is the same.
pub const SEED: u64 = 0xD6A4_5EED;

/// Payload of an eager fragment; the largest message (`max_send_size`)
/// is what one datagram holds.
pub const EAGER: usize = 1024;
/// Fragments of each class.
pub const FRAGMENTS: u32 = 64;
/// Fake nanoseconds per progress round.
pub const TICK: Duration = Duration::from_millis(1);
/// A peer silent this long is lost: short, so that a killed peer is found
/// within the suite's rounds, and far above any pause the suite makes and
/// the longest retransmission timeout (100 rounds).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);
/// Silence after which a keepalive goes out.
pub const KEEPALIVE: Duration = Duration::from_millis(200);
/// Progress rounds within which anything must finish (the peer timeout
/// included).
pub const MAX_ROUNDS: u32 = 6_000;

/// A and B as two engines over a lossy in-memory datagram network.
pub struct DatagramPairWorld {
    pair: Box<Pair>,
    peers: [EndpointId; 2],
}

impl DatagramPairWorld {
    /// Two engines of one job, each knowing the other, no link yet, the
    /// network faulty from the start (the handshake too).
    pub fn new() -> Self {
        let mut pair = Box::new(Pair::new(
            engine_of(A_NAME),
            engine_of(B_NAME),
            [A_NAME, B_NAME],
            SEED,
        ));
        pair.set_tick(TICK);
        pair.set_faults(FAULTS);
        let peers = pair.introduce().expect("A and B reach each other");
        DatagramPairWorld { pair, peers }
    }

    /// What the network did so far.
    pub fn stats(&self) -> NetStats {
        self.pair.stats()
    }
}

impl Default for DatagramPairWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for DatagramPairWorld {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            // Long enough for a late duplicate and a retransmission.
            linger_rounds: 50,
            max_rdma_len: 64 << 20,
            sendi_max: self.pair.engine(Side::A).attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, s: Side) -> &mut dyn Btl<Memory = Memory> {
        self.pair.engine_mut(s)
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        self.pair.round();
    }

    fn pause(&mut self, s: Side) {
        self.pair.pause(s);
    }

    fn resume(&mut self, s: Side) {
        self.pair.resume(s);
    }

    fn kill(&mut self, s: Side) {
        self.pair.kill(s);
    }
}

/// An engine of process `me` in datagram framing, holding the job key,
/// with CRC32C trailers.
fn engine_of(me: ProcName) -> Box<PairEngine> {
    let mut config = super::engine_config(me, KEY, TICK, 100);
    config.peer_timeout = PEER_TIMEOUT;
    config.keepalive = KEEPALIVE;
    let cfg = super::pools(EAGER, MTU, FRAGMENTS);
    let mut e = Box::new(
        Heap::engine(
            config,
            Datagram { mtu: MTU },
            CAPACITIES,
            cfg,
            Instant::ZERO,
        )
        .expect("engine pools"),
    );
    e.set_name("datagram-pair");
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite;

    /// The faults are real: a suite run over the harness meets losses,
    /// duplicates and reordering, and the engines' handshake and data
    /// survive them.
    #[test]
    fn the_network_loses_duplicates_and_reorders() {
        let mut world = DatagramPairWorld::new();
        suite::send::every_size_arrives_intact_once(&mut world);
        let stats = world.stats();
        assert!(
            stats.lost > 0 && stats.duplicated > 0 && stats.reordered > 0,
            "{stats:?}"
        );
        assert_eq!(stats.oversized, 0, "every transmit fits the MTU");
    }
}
