//! Big-endian fields at fixed offsets of fixed-size blocks.
//!
//! Every header and body of the protocol has a fixed size, so each field is
//! read from and written to a `[u8; L]` at a constant offset. The offset and
//! width are const parameters and checked against `L` when the code is
//! compiled, so no access here can fall outside its block at run time.
//!
//! Public so that the formats of other crates (the verbs connection
//! messages) are read and written the same way.

/// Read access to the fields of an `L`-byte block.
pub struct Fields<'b, const L: usize>(pub &'b [u8; L]);

impl<const L: usize> Fields<'_, L> {
    /// The `N` bytes at offset `AT`.
    pub fn bytes<const AT: usize, const N: usize>(&self) -> [u8; N] {
        const { assert!(AT + N <= L, "field outside its block") };
        let mut out = [0; N];
        out.copy_from_slice(&self.0[AT..AT + N]);
        out
    }

    /// A `u8` at offset `AT`.
    pub fn u8<const AT: usize>(&self) -> u8 {
        u8::from_be_bytes(self.bytes::<AT, 1>())
    }

    /// A big-endian `u16` at offset `AT`.
    pub fn u16<const AT: usize>(&self) -> u16 {
        u16::from_be_bytes(self.bytes::<AT, 2>())
    }

    /// A big-endian `u32` at offset `AT`.
    pub fn u32<const AT: usize>(&self) -> u32 {
        u32::from_be_bytes(self.bytes::<AT, 4>())
    }

    /// A big-endian `u64` at offset `AT`.
    pub fn u64<const AT: usize>(&self) -> u64 {
        u64::from_be_bytes(self.bytes::<AT, 8>())
    }
}

/// Write access to the fields of an `L`-byte block.
pub struct FieldsMut<'b, const L: usize>(pub &'b mut [u8; L]);

impl<const L: usize> FieldsMut<'_, L> {
    /// Writes `value` at offset `AT`.
    pub fn set_bytes<const AT: usize, const N: usize>(&mut self, value: [u8; N]) {
        const { assert!(AT + N <= L, "field outside its block") };
        self.0[AT..AT + N].copy_from_slice(&value);
    }

    /// Writes a `u8` at offset `AT`.
    pub fn set_u8<const AT: usize>(&mut self, value: u8) {
        self.set_bytes::<AT, 1>(value.to_be_bytes());
    }

    /// Writes a big-endian `u16` at offset `AT`.
    pub fn set_u16<const AT: usize>(&mut self, value: u16) {
        self.set_bytes::<AT, 2>(value.to_be_bytes());
    }

    /// Writes a big-endian `u32` at offset `AT`.
    pub fn set_u32<const AT: usize>(&mut self, value: u32) {
        self.set_bytes::<AT, 4>(value.to_be_bytes());
    }

    /// Writes a big-endian `u64` at offset `AT`.
    pub fn set_u64<const AT: usize>(&mut self, value: u64) {
        self.set_bytes::<AT, 8>(value.to_be_bytes());
    }
}

/// Fails with [`WireError::ReservedNonZero`](super::WireError::ReservedNonZero)
/// naming `field` unless every byte of it is zero.
pub fn check_reserved(bytes: &[u8], field: &'static str) -> Result<(), super::WireError> {
    if bytes.iter().all(|&b| b == 0) {
        Ok(())
    } else {
        Err(super::WireError::ReservedNonZero { field })
    }
}
