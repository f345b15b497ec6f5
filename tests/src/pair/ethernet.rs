//! An Ethernet cable in memory, with faults: two smoltcp devices, A's and
//! B's ports, whose frames cross a [`Wire`] that loses, duplicates and
//! reorders them as [`Faults`] say, deterministically from its seed.
//!
//! Each side polls its interface with [`Wire::port`], a
//! [`Device`] that takes the frames queued towards
//! it and queues what it sends towards the other side.

use std::collections::VecDeque;
use std::vec::Vec;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use super::SplitMix64;
use super::datagram::{Faults, NetStats};
use crate::world::Side;

/// The largest Ethernet frame the ports carry: a 1500-byte payload and its
/// 14-byte header.
pub const FRAME: usize = 1514;

/// How far back among the queued frames a reordered one may land.
const REORDER_DEPTH: u64 = 8;

/// Two ports joined by a cable that may lose, duplicate and reorder
/// frames.
pub struct Wire {
    /// Frames on their way to A, then to B.
    queues: [VecDeque<Vec<u8>>; 2],
    capacity: usize,
    faults: Faults,
    random: SplitMix64,
    stats: NetStats,
    /// Sides whose frames are dropped (a dead board).
    cut: [bool; 2],
}

impl Wire {
    /// A perfect cable holding up to `capacity` frames each way (a full
    /// direction drops what comes, as a switch's queue would), its faults
    /// drawn from `seed`.
    pub fn new(capacity: usize, seed: u64) -> Self {
        Wire {
            queues: [VecDeque::new(), VecDeque::new()],
            capacity,
            faults: Faults::NONE,
            random: SplitMix64(seed),
            stats: NetStats::default(),
            cut: [false; 2],
        }
    }

    /// What the cable does from now on.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// What the cable did so far.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Frames waiting for `side`.
    pub fn queued(&self, side: Side) -> usize {
        self.queues[side.index()].len()
    }

    /// Unplugs `side` for good: what it sends and what is sent to it is
    /// dropped.
    pub fn cut(&mut self, side: Side) {
        self.cut[side.index()] = true;
        self.queues[side.index()].clear();
    }

    /// `side`'s end of the cable, for one poll of its interface.
    pub fn port(&mut self, side: Side) -> Port<'_> {
        Port { wire: self, side }
    }

    /// Queues `frame` towards `to`, as the faults say.
    fn send(&mut self, to: Side, frame: Vec<u8>) {
        self.stats.sent += 1;
        let from = to.other();
        if self.cut[to.index()]
            || self.cut[from.index()]
            || chance(&mut self.random, self.faults.loss)
        {
            self.stats.lost += 1;
            return;
        }
        if chance(&mut self.random, self.faults.duplication) {
            self.stats.duplicated += 1;
            self.enqueue(to, frame.clone());
        }
        self.enqueue(to, frame);
    }

    fn enqueue(&mut self, to: Side, frame: Vec<u8>) {
        let queue = &mut self.queues[to.index()];
        if queue.len() >= self.capacity {
            self.stats.overflowed += 1;
            return;
        }
        let queued = queue.len();
        let at = if queued > 0 && chance(&mut self.random, self.faults.reordering) {
            self.stats.reordered += 1;
            queued - (1 + self.random.next() % REORDER_DEPTH.min(queued as u64)) as usize
        } else {
            queued
        };
        queue.insert(at, frame);
    }
}

/// True with probability `per_mille` / 1000.
fn chance(random: &mut SplitMix64, per_mille: u16) -> bool {
    per_mille > 0 && random.next() % 1000 < u64::from(per_mille)
}

/// One side's end of a [`Wire`].
pub struct Port<'w> {
    wire: &'w mut Wire,
    side: Side,
}

impl Device for Port<'_> {
    type RxToken<'a>
        = Received
    where
        Self: 'a;
    type TxToken<'a>
        = Sending<'a>
    where
        Self: 'a;

    fn receive(&mut self, _: Instant) -> Option<(Received, Sending<'_>)> {
        let frame = self.wire.queues[self.side.index()].pop_front()?;
        self.wire.stats.delivered += 1;
        Some((
            Received(frame),
            Sending {
                wire: self.wire,
                to: self.side.other(),
            },
        ))
    }

    fn transmit(&mut self, _: Instant) -> Option<Sending<'_>> {
        Some(Sending {
            wire: self.wire,
            to: self.side.other(),
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = FRAME;
        caps
    }
}

/// A frame taken off the wire.
pub struct Received(Vec<u8>);

impl phy::RxToken for Received {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

/// A frame about to go on the wire.
pub struct Sending<'w> {
    wire: &'w mut Wire,
    to: Side,
}

impl phy::TxToken for Sending<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = std::vec![0; len];
        let r = f(&mut frame);
        self.wire.send(self.to, frame);
        r
    }
}
