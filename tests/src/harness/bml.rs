//! btl-std's `Bml` as a world: A and B are two processes of one job as
//! far as their `Bml`s can tell (names, one card each in a shared
//! directory, the job key), each opened with the same `btl` selection
//! and joined by `add_procs` on two threads, so that the route the rules
//! choose (shared memory, or TCP on loopback) carries the suite.
//!
//! `kill` drops a side without a goodbye; only over TCP, where the
//! survivor finds out by its connections and peer timeout (over shared
//! memory it would watch its peer's process, which is this one).

use std::time::Duration;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_std::{Bml, ModuleBuilder};

use super::TempDir;
use super::sockets::{KEY, MAX_ROUNDS, PEER_TIMEOUT};
use crate::world::{Capabilities, Memory, Side, World};

/// A and B as two `Bml`s.
pub struct BmlWorld {
    bmls: [Option<Bml>; 2],
    peers: [EndpointId; 2],
    paused: [bool; 2],
    /// The module that carries A's peer.
    route: &'static str,
    _dir: TempDir,
}

/// A `Bml` of process `me` with `selection`, its cards in `dir`.
pub fn open(me: ProcName, dir: &std::path::Path, selection: &str) -> Bml {
    let millis = |d: Duration| d.as_millis().to_string();
    ModuleBuilder::new(me)
        .ignore_environment()
        .shared_dir(dir)
        .job_key(KEY.to_vec())
        .on_loopback()
        .param("btl", selection)
        .param("btl_tcp_peer_timeout", millis(PEER_TIMEOUT))
        .param("btl_tcp_keepalive", millis(PEER_TIMEOUT / 4))
        .param("btl_tcp_handshake_timeout", millis(PEER_TIMEOUT))
        .param("btl_tcp_lookup_timeout", "5000")
        .open()
        .expect("a Bml")
}

impl BmlWorld {
    /// Two `Bml`s of a fresh job opened with `selection` (`self,sm,tcp`),
    /// each reaching the other.
    pub fn over(selection: &str) -> Self {
        let (job, dir) = super::fresh_job("bml-world");
        let names = [ProcName::new(job, 0), ProcName::new(job, 1)];
        let ([a, b], peers) = super::join_pair(
            open(names[0], &dir.0, selection),
            open(names[1], &dir.0, selection),
            names,
        );
        let route = a.carrier(peers[0]).expect("A's peer has a module");
        assert_eq!(
            b.carrier(peers[1]),
            Some(route),
            "both sides take the same route"
        );
        BmlWorld {
            bmls: [Some(a), Some(b)],
            peers,
            paused: [false; 2],
            route,
            _dir: dir,
        }
    }

    /// The module that carries the two sides' messages.
    pub fn route(&self) -> &'static str {
        self.route
    }
}

impl World for BmlWorld {
    fn capabilities(&self) -> Capabilities {
        let over_tcp = self.route == "tcp";
        Capabilities {
            same_btl: false,
            max_rounds: if over_tcp { MAX_ROUNDS } else { 200_000 },
            linger_rounds: 200,
            max_rdma_len: 16 << 20,
            sendi_max: self.bmls[0]
                .as_ref()
                .map_or(0, |b| b.attributes_for(self.peers[0]).eager_limit),
            pause: true,
            peer_loss: over_tcp,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        self.bmls[side as usize]
            .as_mut()
            .expect("the suite does not touch a killed side")
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side as usize]
    }

    fn progress(&mut self) {
        for (i, b) in self.bmls.iter_mut().enumerate() {
            if let Some(b) = b
                && !self.paused[i]
            {
                b.progress();
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
        if let Some(b) = self.bmls[side as usize].as_mut() {
            b.abort_on_drop();
        }
        self.bmls[side as usize] = None;
    }
}
