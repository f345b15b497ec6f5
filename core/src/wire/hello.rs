//! HELLO (type 1): opens a connection, each side sends one.
//!
//! ```text
//!  0  [u8;4]  magic            "BTL\0"
//!  4  u8      version_major    1
//!  5  u8      version_minor    0
//!  6  u16     link_index
//!  8  u64     job
//! 16  u32     rank
//! 20  u32     capabilities     bit 0 CRC32C, bit 1 JOB_KEY
//! 24  [u8;16] nonce
//! 40  u64     max_body
//! 48  u32     initial_credits
//! 52  u32     reserved         0
//! 56  u64     epoch            the sender's incarnation
//! ```

use bitflags::bitflags;

use super::WireError;
use super::field::{Fields, FieldsMut, check_reserved};

/// The first four bytes of every HELLO body: a peer that speaks something
/// else is recognised at once.
pub const MAGIC: [u8; 4] = *b"BTL\0";
/// Major protocol version: peers with different majors cannot talk.
pub const VERSION_MAJOR: u8 = 1;
/// Minor protocol version: a higher minor only adds what a peer uses with
/// those that announce it (minor 1 added NOTIFY, minor 2 KEY and
/// KEY_INFO), so peers with the same major talk whatever their minors;
/// minor 3 added COOKIE, which a datagram server sends every stranger
/// before anything else, so that a client of minor 2 or less cannot open
/// a link with it over datagrams; minor 4 added the seal
/// ([`Flags::SEALED`](super::Flags::SEALED)), which two keyed processes put
/// on every datagram once both announce minor 4 or more.
pub const VERSION_MINOR: u8 = 4;
/// Bytes of the per-connection random nonce that the job-key proof binds.
pub const NONCE_LEN: usize = 16;

const MAGIC_AT: usize = 0;
const MAJOR: usize = 4;
const MINOR: usize = 5;
const LINK_INDEX: usize = 6;
const JOB: usize = 8;
const RANK: usize = 16;
const CAPABILITIES: usize = 20;
const NONCE: usize = 24;
const MAX_BODY: usize = 40;
const INITIAL_CREDITS: usize = 48;
const RESERVED_1: usize = 52;
const EPOCH: usize = 56;

bitflags! {
    /// What the sender of a HELLO supports or has configured. Bits this
    /// version does not know are ignored, so a newer peer can announce new
    /// abilities without being refused.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// The sender can check and send CRC32C trailers; they are used
        /// when both HELLOs have this bit.
        const CRC32C = 1 << 0;
        /// The sender has a job key and will prove it in its HELLO_ACK.
        const JOB_KEY = 1 << 1;
    }
}

#[cfg(any(test, feature = "arbitrary"))]
impl<'a> arbitrary::Arbitrary<'a> for Capabilities {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Self::from_bits_truncate(u.arbitrary()?))
    }
}

/// A HELLO body: who the sender is and what it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct HelloRepr {
    /// The sender's minor protocol version (the major is always
    /// [`VERSION_MAJOR`]: another one fails to decode).
    pub version_minor: u8,
    /// Which of the sender's links to the peer this connection is, for
    /// peers connected over several interfaces.
    pub link_index: u16,
    /// The sender's job id.
    pub job: u64,
    /// The sender's rank within its job.
    pub rank: u32,
    /// What the sender supports.
    pub capabilities: Capabilities,
    /// Fresh random bytes for this connection, so that a recorded
    /// HELLO_ACK cannot be replayed on another one.
    pub nonce: [u8; NONCE_LEN],
    /// The largest body the sender accepts.
    pub max_body: u64,
    /// Eager-fragment credits the sender grants the peer to start with.
    pub initial_credits: u32,
    /// The sender's incarnation: the same on every connection of one
    /// start of the process, another after a restart, so that a peer tells
    /// a restarted process from one that reconnects.
    pub epoch: u64,
}

impl HelloRepr {
    /// Body length.
    pub const LEN: usize = 64;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a HELLO body, checking magic, major version and reserved
    /// fields.
    pub fn parse(body: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(body);
        let magic = f.bytes::<MAGIC_AT, 4>();
        if magic != MAGIC {
            return Err(WireError::BadMagic { found: magic });
        }
        let (major, minor) = (f.u8::<MAJOR>(), f.u8::<MINOR>());
        if major != VERSION_MAJOR {
            return Err(WireError::UnsupportedVersion { major, minor });
        }
        check_reserved(&f.bytes::<RESERVED_1, 4>(), "hello.reserved_52")?;
        Ok(Self {
            version_minor: minor,
            link_index: f.u16::<LINK_INDEX>(),
            job: f.u64::<JOB>(),
            rank: f.u32::<RANK>(),
            capabilities: Capabilities::from_bits_truncate(f.u32::<CAPABILITIES>()),
            nonce: f.bytes::<NONCE, NONCE_LEN>(),
            max_body: f.u64::<MAX_BODY>(),
            initial_credits: f.u32::<INITIAL_CREDITS>(),
            epoch: f.u64::<EPOCH>(),
        })
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_bytes::<MAGIC_AT, 4>(MAGIC);
        f.set_u8::<MAJOR>(VERSION_MAJOR);
        f.set_u8::<MINOR>(self.version_minor);
        f.set_u16::<LINK_INDEX>(self.link_index);
        f.set_u64::<JOB>(self.job);
        f.set_u32::<RANK>(self.rank);
        f.set_u32::<CAPABILITIES>(self.capabilities.bits());
        f.set_bytes::<NONCE, NONCE_LEN>(self.nonce);
        f.set_u64::<MAX_BODY>(self.max_body);
        f.set_u32::<INITIAL_CREDITS>(self.initial_credits);
        f.set_u32::<RESERVED_1>(0);
        f.set_u64::<EPOCH>(self.epoch);
    }
}
