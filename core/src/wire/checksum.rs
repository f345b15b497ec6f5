//! The optional CRC32C trailer.
//!
//! With [`Flags::CHECKSUM`](super::Flags::CHECKSUM) set, the four bytes
//! after the body are the CRC32C (Castagnoli polynomial, as in iSCSI and
//! SCTP) of header and body, big-endian. TCP's own checksum is weak and
//! NICs that offload it check it before the data crosses PCIe and memory;
//! this one covers the path end to end.

use crc::{CRC_32_ISCSI, Crc};

use super::{CHECKSUM_LEN, WireError};

/// The CRC32C algorithm and its 1 KiB lookup table, built at compile time.
static CASTAGNOLI: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// The CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    CASTAGNOLI.checksum(bytes)
}

/// A CRC32C computed piece by piece, for a frame that is never contiguous:
/// a sender that writes header and payload with vectored I/O, or a reader
/// that receives the payload straight into its target.
#[derive(Clone)]
pub struct Crc32c {
    digest: crc::Digest<'static, u32>,
}

impl Crc32c {
    /// An empty checksum.
    pub fn new() -> Self {
        Self {
            digest: CASTAGNOLI.digest(),
        }
    }

    /// Adds `bytes`, which follow whatever was added before.
    pub fn update(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
    }

    /// The checksum of everything added.
    pub fn finalize(self) -> u32 {
        self.digest.finalize()
    }

    /// The trailer to send after the body: the checksum, big-endian.
    pub fn trailer(self) -> [u8; CHECKSUM_LEN] {
        self.finalize().to_be_bytes()
    }

    /// Checks a received `trailer` against the checksum of everything added.
    pub fn check(self, trailer: [u8; CHECKSUM_LEN]) -> Result<(), WireError> {
        check(self.finalize(), trailer)
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Crc32c {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Crc32c").finish_non_exhaustive()
    }
}

/// Checks that `trailer` is the checksum of `covered` (header and body).
pub fn check_trailer(covered: &[u8], trailer: [u8; CHECKSUM_LEN]) -> Result<(), WireError> {
    check(crc32c(covered), trailer)
}

fn check(computed: u32, trailer: [u8; CHECKSUM_LEN]) -> Result<(), WireError> {
    let received = u32::from_be_bytes(trailer);
    if computed == received {
        Ok(())
    } else {
        Err(WireError::ChecksumMismatch { computed, received })
    }
}
