//! How the values of the `Btl` interface travel between the parent and the
//! child: each call and each answer is one frame (a 4-byte little-endian
//! length, then the bytes), and each value inside it is written by its
//! [`Wire`] impl.
//!
//! Both ends are this crate, so a frame that does not decode is a bug of
//! the harness, not a peer to survive: reading one panics, naming what was
//! missing.

use std::io::{Read, Write};

use btl_core::btl::{
    Access, BtlError, Limit, LostReason, MemError, OpId, RemoteKey, RemoteSlice, Tag, Undelivered,
};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::{EndpointError, EndpointId, ProcName};
use btl_core::pool::PoolStats;
use btl_core::wire::RejectCode;

/// A frame being written.
#[derive(Debug, Default)]
pub struct Out(Vec<u8>);

impl Out {
    /// An empty frame.
    pub fn new() -> Self {
        Out(Vec::new())
    }

    /// Appends `value`.
    pub fn put<T: Wire>(&mut self, value: &T) -> &mut Self {
        value.put(self);
        self
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    /// Sends the frame.
    pub fn send(&self, to: &mut impl Write) -> std::io::Result<()> {
        let len = u32::try_from(self.0.len()).expect("a frame under 4 GiB");
        let mut frame = Vec::with_capacity(4 + self.0.len());
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&self.0);
        to.write_all(&frame)
    }
}

/// A frame being read.
#[derive(Debug)]
pub struct In {
    bytes: Vec<u8>,
    at: usize,
}

impl In {
    /// The next frame from `from`; `None` once the other end has closed.
    pub fn receive(from: &mut impl Read) -> Option<In> {
        let mut len = [0u8; 4];
        from.read_exact(&mut len).ok()?;
        let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
        from.read_exact(&mut bytes).ok()?;
        Some(In { bytes, at: 0 })
    }

    /// The next value.
    pub fn take<T: Wire>(&mut self) -> T {
        T::take(self)
    }

    fn raw<const N: usize>(&mut self) -> [u8; N] {
        let bytes = self
            .bytes
            .get(self.at..self.at + N)
            .and_then(|b| b.try_into().ok())
            .expect("a frame of the harness cut short");
        self.at += N;
        bytes
    }

    fn slice(&mut self, len: usize) -> &[u8] {
        let bytes = self
            .bytes
            .get(self.at..self.at + len)
            .expect("a frame of the harness cut short");
        self.at += len;
        bytes
    }
}

/// A value that crosses between the two processes.
pub trait Wire: Sized {
    /// Writes it.
    fn put(&self, out: &mut Out);
    /// Reads it back.
    fn take(from: &mut In) -> Self;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn put(&self, out: &mut Out) {
                out.raw(&self.to_le_bytes());
            }
            fn take(from: &mut In) -> Self {
                <$t>::from_le_bytes(from.raw())
            }
        }
    )*};
}

wire_int!(u8, u16, u32, u64);

impl Wire for usize {
    fn put(&self, out: &mut Out) {
        (*self as u64).put(out);
    }
    fn take(from: &mut In) -> Self {
        usize::try_from(u64::take(from)).expect("a length this process can hold")
    }
}

impl Wire for bool {
    fn put(&self, out: &mut Out) {
        u8::from(*self).put(out);
    }
    fn take(from: &mut In) -> Self {
        u8::take(from) != 0
    }
}

impl Wire for Vec<u8> {
    fn put(&self, out: &mut Out) {
        self.len().put(out);
        out.raw(self);
    }
    fn take(from: &mut In) -> Self {
        let len = usize::take(from);
        from.slice(len).to_vec()
    }
}

impl Wire for String {
    fn put(&self, out: &mut Out) {
        self.as_bytes().to_vec().put(out);
    }
    fn take(from: &mut In) -> Self {
        String::from_utf8(Vec::take(from)).expect("a name in UTF-8")
    }
}

impl<T: Wire> Wire for Option<T> {
    fn put(&self, out: &mut Out) {
        match self {
            None => false.put(out),
            Some(v) => {
                true.put(out);
                v.put(out);
            }
        }
    }
    fn take(from: &mut In) -> Self {
        bool::take(from).then(|| T::take(from))
    }
}

impl<T: Wire, E: Wire> Wire for Result<T, E> {
    fn put(&self, out: &mut Out) {
        match self {
            Ok(v) => {
                true.put(out);
                v.put(out);
            }
            Err(e) => {
                false.put(out);
                e.put(out);
            }
        }
    }
    fn take(from: &mut In) -> Self {
        if bool::take(from) {
            Ok(T::take(from))
        } else {
            Err(E::take(from))
        }
    }
}

impl Wire for () {
    fn put(&self, _: &mut Out) {}
    fn take(_: &mut In) -> Self {}
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, out: &mut Out) {
        self.0.put(out);
        self.1.put(out);
    }
    fn take(from: &mut In) -> Self {
        let a = A::take(from);
        (a, B::take(from))
    }
}

impl<T: Wire> Wire for Vec<T>
where
    T: NotByte,
{
    fn put(&self, out: &mut Out) {
        self.len().put(out);
        for v in self {
            v.put(out);
        }
    }
    fn take(from: &mut In) -> Self {
        let len = usize::take(from);
        (0..len).map(|_| T::take(from)).collect()
    }
}

/// Every element type of a list but bytes, which go as one run.
pub trait NotByte {}

/// A newtype over one integer.
macro_rules! wire_newtype {
    ($($t:ident($inner:ty)),*) => {$(
        impl Wire for $t {
            fn put(&self, out: &mut Out) {
                self.0.put(out);
            }
            fn take(from: &mut In) -> Self {
                $t(<$inner>::take(from))
            }
        }
        impl NotByte for $t {}
    )*};
}

wire_newtype!(
    Tag(u8),
    Order(u8),
    EndpointId(u32),
    OpId(u64),
    RemoteKey(u64)
);

/// Bit flags, by their bits; bits the type does not know are a bug.
macro_rules! wire_bits {
    ($($t:ident),*) => {$(
        impl Wire for $t {
            fn put(&self, out: &mut Out) {
                self.bits().put(out);
            }
            fn take(from: &mut In) -> Self {
                $t::from_bits(Wire::take(from)).expect("known flags")
            }
        }
    )*};
}

wire_bits!(DescFlags, Access);

/// An enum without fields, by its variant's place in the list; the match
/// fails to compile when the type gains a variant the list lacks. With
/// `enum` in front, declares the enum too.
macro_rules! wire_unit_enum {
    ($(#[$m:meta])* enum $t:ident { $($v:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum $t { $($v),* }
        wire_unit_enum!($t { $($v),* });
    };
    ($t:ident { $($v:ident),* $(,)? }) => {
        impl Wire for $t {
            fn put(&self, out: &mut Out) {
                const NAMES: &[&str] = &[$(stringify!($v)),*];
                let name = match self { $($t::$v => stringify!($v)),* };
                let place = NAMES.iter().position(|n| *n == name).unwrap_or_default();
                (place as u8).put(out);
            }
            fn take(from: &mut In) -> Self {
                let all = [$($t::$v),*];
                all[usize::from(u8::take(from))]
            }
        }
    };
}

pub(crate) use wire_unit_enum;

wire_unit_enum!(LostReason {
    Timeout,
    HandshakeTimeout,
    ProtocolViolation,
    VersionMismatch,
    AuthFailed,
    Closed,
    Left,
    Removed,
    Restarted,
    Refused,
    Unreachable,
    NoRoom,
    Stalled,
    Exited,
    Duplicate,
});

wire_unit_enum!(Limit { Here, Peer });

impl Wire for RejectCode {
    fn put(&self, out: &mut Out) {
        u8::from(*self).put(out);
    }
    fn take(from: &mut In) -> Self {
        RejectCode::from(u8::take(from))
    }
}

impl Wire for EndpointError {
    fn put(&self, out: &mut Out) {
        match self {
            EndpointError::Full => 0u8.put(out),
            EndpointError::Unknown(ep) => {
                out.put(&1u8).put(ep);
            }
        }
    }
    fn take(from: &mut In) -> Self {
        match u8::take(from) {
            0 => EndpointError::Full,
            _ => EndpointError::Unknown(from.take()),
        }
    }
}

impl Wire for MemError {
    fn put(&self, out: &mut Out) {
        match *self {
            MemError::Full => 0u8.put(out),
            MemError::UnknownRegion => 1u8.put(out),
            MemError::OutOfBounds { offset, len, size } => {
                out.put(&2u8).put(&offset).put(&len).put(&size);
            }
            MemError::AccessDenied => 3u8.put(out),
            MemError::InUse => 4u8.put(out),
        }
    }
    fn take(from: &mut In) -> Self {
        match u8::take(from) {
            0 => MemError::Full,
            1 => MemError::UnknownRegion,
            2 => MemError::OutOfBounds {
                offset: from.take(),
                len: from.take(),
                size: from.take(),
            },
            3 => MemError::AccessDenied,
            _ => MemError::InUse,
        }
    }
}

impl Wire for BtlError {
    fn put(&self, out: &mut Out) {
        match self {
            BtlError::OutOfResource => 0u8.put(out),
            BtlError::Unreachable => 1u8.put(out),
            BtlError::Endpoint(e) => {
                out.put(&2u8).put(e);
            }
            BtlError::PeerLost(r) => {
                out.put(&3u8).put(r);
            }
            BtlError::Memory(e) => {
                out.put(&4u8).put(e);
            }
            BtlError::Rejected(c) => {
                out.put(&5u8).put(c);
            }
            BtlError::TooLarge { len, max, whose } => {
                out.put(&6u8).put(len).put(max).put(whose);
            }
            BtlError::NotSupported => 7u8.put(out),
            BtlError::Finalized => 8u8.put(out),
        }
    }
    fn take(from: &mut In) -> Self {
        match u8::take(from) {
            0 => BtlError::OutOfResource,
            1 => BtlError::Unreachable,
            2 => BtlError::Endpoint(from.take()),
            3 => BtlError::PeerLost(from.take()),
            4 => BtlError::Memory(from.take()),
            5 => BtlError::Rejected(from.take()),
            6 => BtlError::TooLarge {
                len: from.take(),
                max: from.take(),
                whose: from.take(),
            },
            7 => BtlError::NotSupported,
            _ => BtlError::Finalized,
        }
    }
}

impl NotByte for BtlError {}

impl Wire for RemoteSlice {
    fn put(&self, out: &mut Out) {
        out.put(&self.key).put(&self.offset).put(&self.len);
    }
    fn take(from: &mut In) -> Self {
        from.take::<RemoteKey>().slice(from.take(), from.take())
    }
}

impl Wire for ProcName {
    fn put(&self, out: &mut Out) {
        out.put(&self.job).put(&self.rank);
    }
    fn take(from: &mut In) -> Self {
        ProcName::new(from.take(), from.take())
    }
}

impl NotByte for ProcName {}

impl Wire for Undelivered {
    fn put(&self, out: &mut Out) {
        self.outstanding.put(out);
    }
    fn take(from: &mut In) -> Self {
        Undelivered {
            outstanding: from.take(),
        }
    }
}

impl Wire for PoolStats {
    fn put(&self, out: &mut Out) {
        out.put(&self.in_use)
            .put(&self.high_water)
            .put(&self.failed_allocs)
            .put(&self.ready)
            .put(&self.capacity);
    }
    fn take(from: &mut In) -> Self {
        PoolStats {
            in_use: from.take(),
            high_water: from.take(),
            failed_allocs: from.take(),
            ready: from.take(),
            capacity: from.take(),
        }
    }
}

impl NotByte for PoolStats {}
impl<T: NotByte> NotByte for Option<T> {}
impl<A, B> NotByte for (A, B) {}
impl NotByte for u64 {}
impl NotByte for Vec<u8> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(value: T) {
        let mut out = Out::new();
        out.put(&value);
        let mut sent = Vec::new();
        out.send(&mut sent).expect("into memory");
        let mut back = In::receive(&mut sent.as_slice()).expect("a frame");
        assert_eq!(back.take::<T>(), value);
        assert_eq!(back.at, back.bytes.len(), "every byte read");
    }

    #[test]
    fn every_error_comes_back_as_it_went() {
        for e in [
            BtlError::OutOfResource,
            BtlError::Unreachable,
            BtlError::Endpoint(EndpointError::Full),
            BtlError::Endpoint(EndpointError::Unknown(EndpointId(7))),
            BtlError::PeerLost(LostReason::Exited),
            BtlError::PeerLost(LostReason::Timeout),
            BtlError::Memory(MemError::OutOfBounds {
                offset: 1,
                len: 2,
                size: 3,
            }),
            BtlError::Memory(MemError::InUse),
            BtlError::Rejected(RejectCode::AccessDenied),
            BtlError::TooLarge {
                len: 9,
                max: 8,
                whose: Limit::Peer,
            },
            BtlError::NotSupported,
            BtlError::Finalized,
        ] {
            round_trip(e);
        }
    }

    #[test]
    fn values_and_lists_come_back_as_they_went() {
        round_trip(Some((OpId(3), vec![1u8, 2, 3])));
        round_trip(Result::<usize, BtlError>::Ok(5));
        round_trip(vec![Some(EndpointId(1)), None]);
        round_trip(DescFlags::ALWAYS_CALLBACK | DescFlags::BTL_OWNERSHIP);
        round_trip(RemoteKey(42).slice(1, 2));
        round_trip(String::from("sm"));
    }
}
