//! What a BTL module publishes about itself, as data: the upper layer reads
//! these to choose protocols (eager or rendezvous, send or put) and to rank
//! modules, as Open MPI's PML reads `mca_btl_base_module_t`'s fields.

use bitflags::bitflags;

use crate::mca::Exclusivity;

bitflags! {
    /// Operations a BTL module offers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct BtlFlags: u32 {
        /// Active-message `send` and `sendi`.
        const SEND = 1 << 0;
        /// `put` into a peer's registered memory.
        const PUT = 1 << 1;
        /// `get` from a peer's registered memory.
        const GET = 1 << 2;
        /// `prepare_src` may reference registered memory instead of copying.
        const SEND_INPLACE = 1 << 3;
    }
}

/// The published attributes of one BTL module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attributes {
    /// Component name, e.g. `self` or `tcp`.
    pub name: &'static str,
    /// Largest message (header included) sent without a rendezvous, and
    /// the most one `sendi` takes.
    pub eager_limit: usize,
    /// Largest payload of one `send` (and of `send_copy`); a larger
    /// message moves by put.
    pub max_send_size: usize,
    /// Messages at least this long are better moved by put/get than by
    /// sends (`usize::MAX`: none are). The `btl` command's benchmark sends
    /// them as a notice that the receiver gets the message by.
    pub rdma_pipeline_send_length: usize,
    /// Size of each put/get piece of a pipelined large transfer.
    pub rdma_pipeline_frag_size: usize,
    /// Largest single `put`.
    pub put_limit: u64,
    /// Required alignment of put offsets and lengths (1 = none).
    pub put_alignment: u32,
    /// Largest single `get`.
    pub get_limit: u64,
    /// Required alignment of get offsets and lengths (1 = none).
    pub get_alignment: u32,
    /// Of the BTLs reaching a peer, only those of the highest exclusivity are used.
    pub exclusivity: Exclusivity,
    /// Typical one-way latency in microseconds, for ranking.
    pub latency_us: u32,
    /// Typical bandwidth in Mbit/s, for ranking and striping.
    pub bandwidth_mbps: u32,
    /// The operations offered.
    pub flags: BtlFlags,
    /// Bytes of a registration key shipped to peers.
    pub registration_handle_size: usize,
}
