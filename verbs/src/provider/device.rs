//! Devices, ports and the handles of what a context allocates on them.

use core::fmt;

use bitflags::bitflags;

/// A device as the provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// The device's name (`mlx5_0`, `soft0`).
    pub name: String,
    /// Its node GUID.
    pub guid: u64,
    /// Ports, numbered from 1.
    pub ports: u8,
    /// Most work requests one queue may hold.
    pub max_qp_wr: u32,
    /// Most scatter/gather entries one work request may carry.
    pub max_sge: u32,
    /// Most entries one completion queue may hold.
    pub max_cqe: u32,
}

/// Whether a port carries traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// No link.
    Down,
    /// Link up, not yet configured by the subnet manager.
    Init,
    /// Ready for traffic.
    Active,
}

/// What a port's packets travel on, which decides how a peer is
/// addressed: by LID on InfiniBand, by GID on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: a peer port is named by its LID.
    InfiniBand,
    /// RoCE: a peer port is named by its GID (an IPv6 address, or an IPv4
    /// one mapped into IPv6).
    Ethernet,
}

/// A port's 128-bit global identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// A path MTU: the largest packet payload between two ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1,024 bytes.
    M1024,
    /// 2,048 bytes.
    M2048,
    /// 4,096 bytes.
    M4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }

    /// The MTU of `bytes`, if it is one of the five.
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        Some(match bytes {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }
}

/// What a port is and how peers reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Whether it carries traffic.
    pub state: PortState,
    /// InfiniBand or Ethernet (RoCE).
    pub link_layer: LinkLayer,
    /// Its local identifier on an InfiniBand subnet (0 on RoCE).
    pub lid: u16,
    /// Its GID at index 0.
    pub gid: Gid,
    /// The MTU it runs at.
    pub active_mtu: Mtu,
    /// The largest message one work request may move.
    pub max_msg_size: u32,
}

/// A protection domain: memory regions and queue pairs of one domain only
/// work together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pd(pub u32);

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cq(pub u32);

/// A shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Srq(pub u32);

/// A queue pair's number, unique on its device (24 bits on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

impl fmt::Display for QpNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

/// The key this process names a memory region with in its own work
/// requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lkey(pub u32);

/// The key a peer names a memory region with in RDMA writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rkey(pub u32);

bitflags! {
    /// What a memory region, or a queue pair's responder, allows.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The HCA may write it for this process (receives, RDMA read
        /// results).
        const LOCAL_WRITE = 1;
        /// Peers may write it with RDMA writes.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may read it with RDMA reads.
        const REMOTE_READ = 1 << 2;
    }
}

impl Access {
    /// Whether a memory region may be registered with this access: verbs
    /// require local write wherever remote write is allowed.
    pub fn check_region(self) -> Result<(), super::VerbsError> {
        if self.contains(Access::REMOTE_WRITE) && !self.contains(Access::LOCAL_WRITE) {
            return Err(super::VerbsError::Invalid("REMOTE_WRITE needs LOCAL_WRITE"));
        }
        Ok(())
    }
}

/// A registered memory region. The device's address of its byte `i` is
/// `base + i`, for this process (a scatter/gather entry's offset) and for
/// peers (an RDMA request's remote offset) alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Its local key.
    pub lkey: Lkey,
    /// Its remote key.
    pub rkey: Rkey,
    /// Its length in bytes.
    pub len: u64,
    /// The device's address of its first byte: 0 for memory handed to the
    /// provider ([`Provider::reg_mr`](super::Provider::reg_mr)), less
    /// than a page for memory lent in place
    /// ([`Provider::reg_lent`](super::Provider::reg_lent)).
    pub base: u64,
}

/// Memory its owner keeps and lends a device in place
/// ([`Provider::reg_lent`](super::Provider::reg_lent)), as a BTL's upper
/// layer lends it the regions it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LentRegion {
    /// The owner's name for it, by which a device that reaches it only
    /// through its owner asks for it ([`LentMemory`]).
    pub id: u64,
    /// Its first byte.
    pub addr: *mut u8,
    /// Its length in bytes (at least 1).
    pub len: usize,
}

/// The owner of lent memory, as a device that reaches that memory only
/// through its owner sees it ([`Provider::serve`](super::Provider::serve)).
pub trait LentMemory {
    /// The bytes of region `id`, or `None` if the owner no longer lends
    /// them.
    fn bytes(&mut self, id: u64) -> Option<&mut [u8]>;
}
