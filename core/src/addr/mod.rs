//! Endpoint addresses in the two text forms of Motr's sock transport:
//! parse, print, and turn into socket addresses.
//!
//! ```text
//! address = native | lnet                  ; lnet iff the first byte is a digit
//! native  = family ":" type ":" host "@" port
//! family  = "inet" | "inet6"
//! type    = "stream" | "dgram" | "tcp" | "udp"   ; tcp = stream, udp = dgram
//! host    = IPv4 | IPv6                     ; numeric, IPv6 without brackets
//! port    = DIGIT+                          ; 0..=65535
//! lnet    = nid "@" net ":" pid ":" portal ":" tmid
//! nid     = IPv4 | "0"                      ; "0" only with net "lo"
//! net     = ("tcp" | "o2ib") [DIGIT+] | "lo"
//! pid     = "12345"
//! portal  = DIGIT+                          ; 30..=61
//! tmid    = DIGIT+ | "*"                    ; 0..=1023, "*" = pick a free one
//! ```
//!
//! For example `inet:stream:10.0.0.1@3000`,
//! `inet6:dgram:fe80::202:b3ff:fe1e:8329@6663`, `10.0.2.15@tcp:12345:34:123`
//! and `0@lo:12345:34:*`. An lnet address maps to the TCP port
//! `tmid | 1 << 10 | (portal - 30) << 11` (see [`lnet_port`]), so the last
//! one but one is `10.0.2.15:9339`.
//!
//! Texts come from users and from the wire, so parsing never panics: it
//! rejects texts longer than [`MAX_LEN`] up front and reports any problem as
//! a [`ParseError`] that says what was wrong and at which byte. Printing is
//! canonical (`stream`/`dgram`, the shortest IP form, no number for network
//! 0), and parsing what was printed gives back the same value.

mod error;
mod lnet;
mod native;
#[cfg(test)]
mod tests;

use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::str::FromStr;

pub use error::{ErrorKind, LnetPortError, ParseError};
pub use lnet::{LnetAddr, LnetNet, LnetNid, NetKind, Tmid, lnet_port, lnet_portal_tmid};
pub use native::{NativeAddr, SockType};

/// Longest address text accepted, in bytes; longer input is rejected before
/// it is looked at. Canonical addresses are at most [`MAX_DISPLAY_LEN`]
/// bytes, which leaves room for leading zeros and uncompressed IPv6.
pub const MAX_LEN: usize = 128;

/// Longest text any address prints as, in bytes, for sizing fixed buffers
/// (`inet6:stream:` plus a full IPv6 address plus `@65535` is 58).
pub const MAX_DISPLAY_LEN: usize = 64;

/// The only process id an lnet address may carry: Lustre's
/// `LUSTRE_SRV_LNET_PID`, which Motr hard-codes.
pub const PID: u32 = 12345;
/// Smallest portal the port mapping can encode.
pub const PORTAL_MIN: u32 = 30;
/// Largest portal the port mapping can encode (5 bits above `PORTAL_MIN`).
pub const PORTAL_MAX: u32 = PORTAL_MIN + 31;
/// Largest tmid the port mapping can encode (10 bits).
pub const TMID_MAX: u32 = 1023;

/// Address family of a native address: which IP version the host is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `inet`: IPv4.
    Inet,
    /// `inet6`: IPv6.
    Inet6,
}

impl Family {
    /// The family an IP address belongs to, so that a native address built
    /// from a socket address is consistent by construction.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::Inet,
            IpAddr::V6(_) => Self::Inet6,
        }
    }

    /// The name used in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Self::Inet => "inet",
            Self::Inet6 => "inet6",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An endpoint address in either form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointAddr {
    /// `family:type:host@port`.
    Native(NativeAddr),
    /// `nid@net:pid:portal:tmid`.
    Lnet(LnetAddr),
}

impl EndpointAddr {
    /// Parses either form, choosing as Motr does: lnet if the text starts
    /// with a digit, native otherwise.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        check_len(s)?;
        if s.as_bytes()[0].is_ascii_digit() {
            LnetAddr::parse(s).map(Self::Lnet)
        } else {
            NativeAddr::parse(s).map(Self::Native)
        }
    }

    /// The socket type the sock transport uses: lnet addresses are always
    /// reached over stream sockets.
    pub fn sock_type(&self) -> SockType {
        match self {
            Self::Native(a) => a.sock_type,
            Self::Lnet(_) => SockType::Stream,
        }
    }

    /// The socket address to bind or connect to; lnet addresses fail when
    /// they have no port (see [`LnetAddr::port`]).
    pub fn to_socket_addr(&self) -> Result<SocketAddr, LnetPortError> {
        match self {
            Self::Native(a) => Ok(a.to_socket_addr()),
            Self::Lnet(a) => a.to_socket_addr(),
        }
    }
}

impl FromStr for EndpointAddr {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Self::parse(s)
    }
}

impl fmt::Display for EndpointAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Native(a) => a.fmt(f),
            Self::Lnet(a) => a.fmt(f),
        }
    }
}

impl From<NativeAddr> for EndpointAddr {
    fn from(a: NativeAddr) -> Self {
        Self::Native(a)
    }
}

impl From<LnetAddr> for EndpointAddr {
    fn from(a: LnetAddr) -> Self {
        Self::Lnet(a)
    }
}

/// Rejects empty and over-long texts, before any other work.
fn check_len(s: &str) -> Result<(), ParseError> {
    if s.is_empty() {
        Err(ParseError::new(ErrorKind::Empty, 0, ""))
    } else if s.len() > MAX_LEN {
        Err(ParseError::new(
            ErrorKind::TooLong { len: s.len() },
            MAX_LEN,
            "",
        ))
    } else {
        Ok(())
    }
}

/// The field of `s` that starts at `from` and ends before the next `sep`
/// (or at the end), and the index of that `sep` if there is one.
fn field(s: &str, from: usize, sep: u8) -> (&str, Option<usize>) {
    match s.as_bytes()[from..].iter().position(|&b| b == sep) {
        Some(i) => (&s[from..from + i], Some(from + i)),
        None => (&s[from..], None),
    }
}

/// The value of a field made only of ASCII digits (saturating, so that any
/// overlong number is simply out of range), or `None` if it is empty or has
/// another character.
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Reads the last field of an address, a number at most `max` running from
/// `from` to the end of `s`: `bad` if it does not start with a digit,
/// `out_of_range` if it is above `max`, trailing input if something follows
/// the digits.
fn final_number(
    s: &str,
    from: usize,
    max: u64,
    bad: ErrorKind,
    out_of_range: ErrorKind,
) -> Result<u64, ParseError> {
    let rest = &s[from..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Some(n) = decimal(&rest[..digits]) else {
        return Err(ParseError::new(bad, from, rest));
    };
    if n > max {
        return Err(ParseError::new(out_of_range, from, &rest[..digits]));
    }
    if digits < rest.len() {
        return Err(ParseError::new(
            ErrorKind::TrailingInput,
            from + digits,
            &rest[digits..],
        ));
    }
    Ok(n)
}

/// A missing-separator error at the end of `s`, after the field `after`.
fn missing(sep: char, s: &str, after: &str) -> ParseError {
    ParseError::new(ErrorKind::MissingSeparator(sep), s.len(), after)
}
