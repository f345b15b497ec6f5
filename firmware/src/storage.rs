//! Everything btl's engines hold, reserved at link time: their tables
//! ([`Inline`], lent to the engine), their fragment pools' regions, and the
//! memory the conversations register. One set per engine (the TCP one runs
//! first, then the UDP one), each lent once as `&'static mut`.

use btl_core::engine::{Capacities, HEADER_RESERVE, Inline, Lent};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig, PoolRegion};

use crate::cell::StaticCell;
use crate::sockets::UDP_MTU;

/// How the engines hold registered memory: lent from a static for good.
pub type Memory = &'static mut [u8];
/// How the engines hold their state: everything lent for good.
pub type Storage = Lent<'static, Memory>;

/// Packets in flight per peer each way. The peer on Linux (btl-std) uses
/// 64: each side sends within its own window, and over a stream packets
/// arrive in order, so a smaller receive window loses nothing; over
/// datagrams a packet beyond it is dropped and sent again. 8 keeps a peer
/// slot at about 4 KiB (64 would take 24.7 KiB).
pub const WINDOW: usize = 8;
/// Peers on record: the Linux side, and room for one stranger.
pub const PEERS: usize = 2;
/// Links at once: the peer's, one crossing it, and closing ones.
pub const LINKS: usize = 4;
/// Puts and gets under way (this side's and the peer's served gets).
pub const OPS: usize = 8;
/// Events waiting to be polled or owed.
pub const EVENTS: usize = 64;
/// Registrations: the conversation's region, and one to spare.
pub const REGISTRATIONS: usize = 2;

/// The capacities the tables below have.
pub const CAPACITIES: Capacities = Capacities {
    peers: PEERS,
    links: LINKS,
    ops: OPS,
    events: EVENTS,
    registrations: REGISTRATIONS,
};

/// One engine's tables.
pub type Tables = Inline<PEERS, LINKS, WINDOW, OPS, EVENTS, REGISTRATIONS, Memory>;

// `table_bytes` counts the slots; the inline struct adds its padding.
const _: () = assert!(
    CAPACITIES.table_bytes::<WINDOW, Memory>() <= core::mem::size_of::<Tables>()
        && core::mem::size_of::<Tables>() < CAPACITIES.table_bytes::<WINDOW, Memory>() + 64,
    "the capacities describe the inline tables"
);

/// Fragments of each class: at least the 16 credits each side gives the
/// other, so that a peer's messages never wait for a fragment.
const FRAGMENTS: u32 = 16;

/// A class of `num` fragments of `payload` bytes after the header.
const fn class(payload: usize, num: u32) -> FragmentPoolConfig {
    FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num,
        max: num,
        inc: 1,
    }
}

/// The TCP engine's pools: every ping (1400 bytes at most) fits an eager
/// fragment; the max class sets the largest PUT packet the peer sends
/// (the body limit this side announces), 4 KiB.
pub const TCP_POOLS: FragmentPoolsConfig = FragmentPoolsConfig {
    small: class(256, FRAGMENTS),
    eager: class(1536, FRAGMENTS),
    max: class(4 << 10, 2),
};

/// The UDP engine's pools: nothing larger than a datagram, and fewer of
/// the largest (a PUT packet is written where it lands, so only messages
/// take max fragments).
pub const UDP_POOLS: FragmentPoolsConfig = FragmentPoolsConfig {
    small: class(256, FRAGMENTS),
    eager: class(1024, FRAGMENTS),
    max: class(UDP_MTU, 8),
};

/// Bytes of the TCP engine's pool region.
pub const TCP_POOL_BYTES: usize = TCP_POOLS.required_bytes();
/// Bytes of the UDP engine's pool region.
pub const UDP_POOL_BYTES: usize = UDP_POOLS.required_bytes();

/// Each half of the registered region: what is put, and what is got.
pub const BULK: usize = 4 << 20;

/// The TCP engine's tables.
pub static TCP_TABLES: StaticCell<Tables> = StaticCell::new(Inline::new());
/// The UDP engine's tables.
pub static UDP_TABLES: StaticCell<Tables> = StaticCell::new(Inline::new());
/// The TCP engine's pool region.
pub static TCP_POOL_REGION: StaticCell<PoolRegion<TCP_POOL_BYTES>> =
    StaticCell::new(PoolRegion::new());
/// The UDP engine's pool region.
pub static UDP_POOL_REGION: StaticCell<PoolRegion<UDP_POOL_BYTES>> =
    StaticCell::new(PoolRegion::new());
/// The memory each conversation registers: `2 × BULK` bytes, lent to one
/// engine at a time.
pub static REGION: StaticCell<[u8; 2 * BULK]> = StaticCell::new([0; 2 * BULK]);
