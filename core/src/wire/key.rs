//! KEY (type 11) and KEY_INFO (type 12), since minor version 2: a
//! process asks a peer what one of its registration keys names, so that
//! a device that moves the bytes itself (an RDMA write or read) can be
//! pointed at the region, and the engine's checks still give the
//! engine's refusal codes.
//!
//! KEY:
//!
//! ```text
//!  0  u64  key   the peer's registration key
//! ```
//!
//! KEY_INFO:
//!
//! ```text
//!  0  u64     key         the key KEY asked about
//!  8  u8      code        0: the key names a region; else the RejectCode a
//!                         transfer naming it gets
//!  9  u8      access      what peers may do with it: bit 0 read, bit 1 write
//! 10  u8      flags       bit 0 (DEVICE): the device holds it too, and
//!                         device_key and base say how to reach it
//! 11  [u8;5]  reserved    0
//! 16  u64     len         bytes of the region
//! 24  u64     device_key  the device's key for it (an InfiniBand rkey)
//! 32  u64     base        the device's address of its first byte
//! ```
//!
//! Every field after `code` is 0 when `code` is not, and `device_key` and
//! `base` are 0 without DEVICE. Both packets are reliable. The asker
//! checks each transfer's range and access against the answer, as the
//! owner would, and keeps the answer until the device says the key is no
//! longer good (the region was deregistered: its device key died with
//! it).

use super::field::{Fields, FieldsMut, check_reserved};
use super::{RejectCode, WireError};

/// A KEY body: what does registration `key` name?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct KeyRepr {
    /// The registration key, as the asker's upper layer was given it.
    pub key: u64,
}

impl KeyRepr {
    /// Body length.
    pub const LEN: usize = 8;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a KEY body; every key is valid here (its owner looks it up).
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        Self {
            key: Fields(body).u64::<0>(),
        }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        FieldsMut(buf).set_u64::<0>(self.key);
    }
}

const KEY: usize = 0;
const CODE: usize = 8;
const ACCESS: usize = 9;
const FLAGS: usize = 10;
const RESERVED: usize = 11;
const LEN: usize = 16;
const DEVICE_KEY: usize = 24;
const BASE: usize = 32;

/// The access bits a KEY_INFO may carry.
const ACCESS_BITS: u8 = 0b11;
/// KEY_INFO flag: `device_key` and `base` hold.
const DEVICE: u8 = 1;

/// A KEY_INFO body: the answer to KEY `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyInfoRepr {
    /// The key asked about.
    pub key: u64,
    /// The region it names, or why it names none.
    pub region: Result<KeyRegion, RejectCode>,
}

/// A registered region as KEY_INFO describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct KeyRegion {
    /// Its length in bytes.
    pub len: u64,
    /// What peers may do with it: bit 0 read, bit 1 write (the bits of
    /// [`Access`](crate::btl::Access)).
    pub access: u8,
    /// How its owner's device reaches it, if the device holds it.
    pub device: Option<DeviceKey>,
}

/// How a device names a registered region: its key and the address of
/// its first byte, as an RDMA request names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DeviceKey {
    /// The device's key (an InfiniBand rkey).
    pub key: u64,
    /// The device's address of the region's first byte.
    pub base: u64,
}

impl KeyInfoRepr {
    /// Body length.
    pub const LEN: usize = 40;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a KEY_INFO body, checking that unused fields and bits are 0.
    pub fn parse(body: &[u8; Self::LEN]) -> Result<Self, WireError> {
        let f = Fields(body);
        check_reserved(&f.bytes::<RESERVED, 5>(), "key_info.reserved")?;
        let key = f.u64::<KEY>();
        let code = f.u8::<CODE>();
        let access = f.u8::<ACCESS>();
        let flags = f.u8::<FLAGS>();
        let device = [f.u64::<DEVICE_KEY>(), f.u64::<BASE>()];
        if code != 0 {
            check_reserved(&f.bytes::<ACCESS, 2>(), "key_info.access")?;
            check_reserved(&f.bytes::<LEN, 24>(), "key_info.len")?;
            return Ok(Self {
                key,
                region: Err(RejectCode::from(code)),
            });
        }
        check_reserved(&[access & !ACCESS_BITS], "key_info.access")?;
        check_reserved(&[flags & !DEVICE], "key_info.flags")?;
        let device = if flags & DEVICE != 0 {
            Some(DeviceKey {
                key: device[0],
                base: device[1],
            })
        } else {
            check_reserved(&f.bytes::<DEVICE_KEY, 16>(), "key_info.device_key")?;
            None
        };
        Ok(Self {
            key,
            region: Ok(KeyRegion {
                len: f.u64::<LEN>(),
                access,
                device,
            }),
        })
    }

    /// Writes the body. A region's access bits beyond read and write are
    /// not written.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        let mut f = FieldsMut(buf);
        f.set_u64::<KEY>(self.key);
        f.set_bytes::<RESERVED, 5>([0; 5]);
        match self.region {
            Err(code) => {
                // Code 0 means "found": a refusal never goes out as it.
                f.set_u8::<CODE>(u8::from(code).max(1));
                f.set_bytes::<ACCESS, 2>([0; 2]);
                f.set_bytes::<LEN, 24>([0; 24]);
            }
            Ok(region) => {
                let device = region.device.unwrap_or(DeviceKey { key: 0, base: 0 });
                f.set_u8::<CODE>(0);
                f.set_u8::<ACCESS>(region.access & ACCESS_BITS);
                f.set_u8::<FLAGS>(if region.device.is_some() { DEVICE } else { 0 });
                f.set_u64::<LEN>(region.len);
                f.set_u64::<DEVICE_KEY>(device.key);
                f.set_u64::<BASE>(device.base);
            }
        }
    }
}

/// Only answers in their canonical form: access within its bits, and no
/// refusal coded 0 (which reads back as "found").
#[cfg(any(test, feature = "arbitrary"))]
impl<'a> arbitrary::Arbitrary<'a> for KeyInfoRepr {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let key = u.arbitrary()?;
        let region = if u.arbitrary()? {
            let region: KeyRegion = u.arbitrary()?;
            Ok(KeyRegion {
                access: region.access & ACCESS_BITS,
                ..region
            })
        } else {
            Err(RejectCode::from(u.arbitrary::<u8>()?.max(1)))
        };
        Ok(Self { key, region })
    }
}
