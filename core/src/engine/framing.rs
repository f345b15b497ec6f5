//! How an engine's links carry frames: a reliable byte stream, or
//! datagrams that may be lost, duplicated or reordered.
//!
//! Wherever the two differ, the engine, its links and its peers ask the
//! [`Framing`] they were built with: an engine's framing is part of its
//! type (`Engine<S, Stream>` reads with `handle_stream`, `Engine<S,
//! Datagram>` with `handle_datagram`), so no code path tests a flag.

use core::fmt;

use super::config::EngineConfig;
use super::packet::HEADER_RESERVE;
use super::rtt::RttEstimator;
use crate::time::Duration;
use crate::wire::{CHECKSUM_LEN, CloseReason, SEAL_LEN};

/// What a transport's framing changes in the engine.
pub trait Framing: Copy + fmt::Debug + Send + Sync + 'static {
    /// Frames one transmit may carry: small packets are coalesced into one
    /// write over a stream; a datagram carries one frame.
    const FRAMES_PER_TRANSMIT: usize;

    /// Whether the transport may lose, duplicate or reorder frames: then
    /// the engine numbers, retransmits and reorders them itself, repeats
    /// its handshake, and drops what it cannot take (it comes again).
    const LOSSY: bool;

    /// Fits the engine's sizes to the framing: `eager` and `max` (the
    /// largest messages), the configuration's PUT packet size, credits and
    /// links per peer, for a send window of `window` packets.
    fn fit(&self, config: &mut EngineConfig, eager: &mut usize, max: &mut usize, window: usize);

    /// How long an acknowledgement may wait for a packet going back to
    /// carry it; `None`: it never waits.
    fn ack_delay(&self, config: &EngineConfig) -> Option<Duration>;

    /// How long a retained packet waits for its acknowledgement before it
    /// goes again; `None`: never (the transport repeats it, and the engine
    /// resends only after a reconnection).
    fn retransmit_timeout(&self, rtt: &RttEstimator) -> Option<Duration>;

    /// How long a handshake waits for the peer's answer before its packets
    /// go again; `None`: never (the transport delivers them).
    fn hello_repeat(&self, config: &EngineConfig) -> Option<Duration>;

    /// What a packet other than a handshake's, arriving before the
    /// handshake is complete, means: `Err` fails the link with that reason.
    fn before_open(&self) -> Result<(), CloseReason>;
}

/// A reliable byte stream (TCP, a pipe, a serial line): frames follow each
/// other in order, the transport retransmits, and a write may take part
/// of what it is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stream;

impl Framing for Stream {
    const FRAMES_PER_TRANSMIT: usize = usize::MAX;
    const LOSSY: bool = false;

    fn fit(
        &self,
        _config: &mut EngineConfig,
        _eager: &mut usize,
        _max: &mut usize,
        _window: usize,
    ) {
    }

    fn ack_delay(&self, config: &EngineConfig) -> Option<Duration> {
        Some(config.ack_delay)
    }

    fn retransmit_timeout(&self, _rtt: &RttEstimator) -> Option<Duration> {
        None
    }

    fn hello_repeat(&self, _config: &EngineConfig) -> Option<Duration> {
        None
    }

    fn before_open(&self) -> Result<(), CloseReason> {
        Err(CloseReason::ProtocolError)
    }
}

/// Datagrams of at most `mtu` bytes (UDP): one frame each, any of which
/// may be lost, duplicated or reordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Largest datagram, header and trailer included. Messages and PUT
    /// packets are sized to fit it.
    pub mtu: usize,
}

impl Framing for Datagram {
    const FRAMES_PER_TRANSMIT: usize = 1;
    const LOSSY: bool = true;

    fn fit(&self, config: &mut EngineConfig, eager: &mut usize, max: &mut usize, window: usize) {
        // One frame per datagram: messages and PUT packets fit the MTU;
        // one association per peer.
        config.links = 1;
        // A message is one packet of at most the MTU: with fewer credits
        // than the window, a run of messages could not fill it (16 credits
        // of 1,472 bytes would hold a peer to 23 KB in flight).
        config.initial_credits = config
            .initial_credits
            .max(u32::try_from(window).unwrap_or(u32::MAX));
        // Room for the trailers a frame may carry: a CRC, and with a job
        // key the seal.
        let trailers = CHECKSUM_LEN
            + if config.job_key.is_some() {
                SEAL_LEN
            } else {
                0
            };
        let room = self.mtu.saturating_sub(HEADER_RESERVE + trailers);
        *eager = (*eager).min(room);
        *max = (*max).min(room);
        let put_room = self
            .mtu
            .saturating_sub(super::packet::PUT_PREFIX + trailers) as u64;
        config.put_chunk = config.put_chunk.min(put_room).max(1);
    }

    fn ack_delay(&self, _config: &EngineConfig) -> Option<Duration> {
        // Acknowledgements time the sender's retransmissions: they never
        // wait.
        None
    }

    fn retransmit_timeout(&self, rtt: &RttEstimator) -> Option<Duration> {
        Some(rtt.rto())
    }

    fn hello_repeat(&self, config: &EngineConfig) -> Option<Duration> {
        Some(config.rtt.normalized().initial_rto)
    }

    fn before_open(&self) -> Result<(), CloseReason> {
        // The peer may finish its handshake first, and its packets overtake
        // the last of it: dropped, they come again.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ProcName;

    fn config() -> EngineConfig {
        EngineConfig::new(ProcName::new(0, 0))
    }

    #[test]
    fn datagrams_fit_the_mtu_and_credits_cover_the_window() {
        let mut c = config();
        let (mut eager, mut max) = (64 << 10, 64 << 10);
        Datagram { mtu: 1472 }.fit(&mut c, &mut eager, &mut max, 64);
        let room = 1472 - HEADER_RESERVE - CHECKSUM_LEN;
        assert_eq!((eager, max), (room, room));
        assert_eq!(
            c.initial_credits, 64,
            "16 credits of one packet each would not fill 64"
        );
        assert_eq!(c.links, 1);
        assert!(c.put_chunk <= 1472);
        // More credits than the window stay as they are.
        let mut c = config();
        c.initial_credits = 100;
        Datagram { mtu: 1472 }.fit(&mut c, &mut eager, &mut max, 64);
        assert_eq!(c.initial_credits, 100);
    }

    #[test]
    fn a_stream_leaves_sizes_and_credits_alone() {
        let mut c = config();
        let (mut eager, mut max) = (64 << 10, 256 << 10);
        Stream.fit(&mut c, &mut eager, &mut max, 64);
        assert_eq!((eager, max), (64 << 10, 256 << 10));
        assert_eq!(c, config());
    }
}
