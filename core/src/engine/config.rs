//! What an engine is built with: who it is, what it accepts, and its
//! timers.

use super::rtt::RttConfig;
use crate::endpoint::ProcName;
use crate::time::Duration;

/// Largest job key, in bytes.
pub const MAX_KEY_LEN: usize = 64;

/// The configuration of one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// This process.
    pub me: ProcName,
    /// The job key peers must prove they hold; `None` skips the proof
    /// (`btl info` says so), and then keyed peers are refused.
    pub job_key: Option<heapless::Vec<u8, MAX_KEY_LEN>>,
    /// Ask for CRC32C trailers; used only when the peer asks too.
    pub checksum: bool,
    /// Largest packet body accepted (at least the eager and max send sizes
    /// plus the fixed fields).
    pub max_body: u64,
    /// SENDs a peer may have in this side's fragments at once.
    pub initial_credits: u32,
    /// Largest data carried by one PUT packet.
    pub put_chunk: u64,
    /// A handshake not finished within this long fails its link.
    pub handshake_timeout: Duration,
    /// A peer not heard from within this long counts as lost
    /// (`btl_<component>_peer_timeout`); the engine reconnects until then.
    pub peer_timeout: Duration,
    /// A peer silent this long is asked for an acknowledgement (a
    /// keepalive), so that a vanished peer is found even when nothing is
    /// outstanding to it; zero turns keepalives off. The interval is at most
    /// a third of `peer_timeout`, whatever is set here. A process that
    /// stops progressing for longer than `peer_timeout` is then taken for
    /// lost.
    pub keepalive: Duration,
    /// Bounds of the retransmission timeout over datagrams (and of the
    /// handshake's repetition there).
    pub rtt: RttConfig,
    /// Over streams, how long an acknowledgement may wait for a packet
    /// going the other way to carry it (a reply usually does) before it
    /// goes alone; a run of received packets or grants, a probe, or a
    /// duplicate send it at once. Over datagrams acknowledgements never
    /// wait: they time the sender's retransmissions.
    pub ack_delay: Duration,
    /// Connections per peer used in parallel over streams
    /// (`btl_tcp_links`): PUT packets are striped across them, and when
    /// one breaks the others carry what it had not delivered. From 1 to
    /// [`MAX_PEER_LINKS`](super::MAX_PEER_LINKS); datagram framing uses 1.
    pub links: u8,
    /// A peer that was open and whose host refuses every reconnection
    /// (nothing listens there: the process died) is lost with
    /// `PeerLost(Refused)` once the refusals have lasted this long,
    /// counted from the first refused reconnection; other
    /// failures (no route, no answer) are retried until `peer_timeout`.
    pub refused_timeout: Duration,
    /// Connections (and datagram sources) that peers opened and that are
    /// still in their handshake, at most, whoever opened them (at most 64,
    /// and the link slots): unverified strangers cannot take the link
    /// slots of verified peers. A new one beyond it pushes out one of the
    /// source holding the most, a silent one first (see the engine's
    /// `admission`).
    pub handshake_budget: u16,
    /// As `handshake_budget`, from one source (one network address, as the
    /// driver names it): one host cannot take the whole budget.
    pub handshake_budget_per_source: u16,
    /// Without a job key, the part of the peer slots and of the link slots
    /// that the peers and connections from one source may hold, in
    /// percent (at least one slot each; 100: no bound). Without a key
    /// anyone who reaches the port can hold a slot, and one host could
    /// take them all; with a key, every peer proved it belongs to the job,
    /// and none is held to this.
    pub source_share: u8,
    /// The secret this side's address cookies are made with, over
    /// datagrams ([`Engine::handle_stranger`](super::Engine::handle_stranger)):
    /// a driver draws it at random when the process starts. With the
    /// default (zeros) anyone can make this side's cookies, and they prove
    /// nothing.
    pub cookie_secret: [u8; 16],
    /// How long a driver's `finalize` waits for what was sent to be
    /// acknowledged before it shuts the engine down (the engine itself
    /// never waits: `Engine::finalize` is at once). What is still
    /// outstanding then is counted in `finalize`'s
    /// [`Undelivered`](crate::btl::Undelivered).
    pub linger: Duration,
    /// This start of the process, sent in every HELLO: a driver sets a
    /// fresh value each time the process starts (a random number, a boot
    /// counter), so that its peers tell a restart from a reconnection and
    /// fail what was outstanding to the old start. Engines that never
    /// restart may leave it 0.
    pub epoch: u64,
}

impl EngineConfig {
    /// Defaults for process `me`: 1 MiB bodies, 16 credits,
    /// 64 KiB PUT packets, 5 s handshake, 30 s peer timeout, 10 s
    /// keepalive, 1 s of linger, 250 ms of refused reconnections, 32 handshakes of
    /// strangers at once (8 from one source), a tenth of the peer and link
    /// slots for one source without a key, data-centre retransmission
    /// bounds, 50 µs acknowledgement delay, one link per peer, no job key,
    /// no checksum.
    pub fn new(me: ProcName) -> Self {
        EngineConfig {
            me,
            job_key: None,
            checksum: false,
            max_body: 1 << 20,
            initial_credits: 16,
            put_chunk: 64 << 10,
            handshake_timeout: Duration::from_secs(5),
            peer_timeout: Duration::from_secs(30),
            keepalive: Duration::from_secs(10),
            rtt: RttConfig::DATA_CENTRE,
            ack_delay: Duration::from_micros(50),
            links: 1,
            refused_timeout: Duration::from_millis(250),
            handshake_budget: 32,
            handshake_budget_per_source: 8,
            source_share: 10,
            cookie_secret: [0; 16],
            linger: Duration::from_secs(1),
            epoch: 0,
        }
    }

    /// The job key as bytes, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.job_key.as_deref()
    }
}
