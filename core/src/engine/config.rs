//! What an engine is built with: who it is, what it accepts, and its timers.

use crate::endpoint::ProcName;

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
    /// A handshake not finished within this many nanoseconds fails its link.
    pub handshake_timeout: u64,
    /// A peer not heard from within this many nanoseconds counts as lost
    /// (`btl_peer_timeout`); the engine reconnects until then.
    pub peer_timeout: u64,
}

impl EngineConfig {
    /// Defaults for process `me`: 1 MiB bodies, 16 credits, 64 KiB PUT
    /// packets, 5 s handshake, 30 s peer timeout, no job key, no
    /// checksum.
    pub fn new(me: ProcName) -> Self {
        EngineConfig {
            me,
            job_key: None,
            checksum: false,
            max_body: 1 << 20,
            initial_credits: 16,
            put_chunk: 64 << 10,
            handshake_timeout: 5_000_000_000,
            peer_timeout: 30_000_000_000,
        }
    }

    /// The job key as bytes, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.job_key.as_deref()
    }
}
