//! The native form `family:type:host@port`, e.g. `inet:stream:10.0.0.1@3000`.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::str::FromStr;

use super::error::{ErrorKind, ParseError};
use super::{Family, check_len, field, final_number, missing};

/// Socket type of a native address: which transport the peer listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SockType {
    /// `stream` (or its synonym `tcp`): a TCP stream socket.
    Stream,
    /// `dgram` (or its synonym `udp`): a UDP datagram socket.
    Dgram,
}

impl SockType {
    /// The canonical name, the one printing uses (Motr's sock transport
    /// prints `stream` and `dgram`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Dgram => "dgram",
        }
    }

    /// Looks up a type name: the canonical names and the `tcp` / `udp`
    /// spellings that Motr's later parser in `net/ip.c` uses.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "stream" | "tcp" => Some(Self::Stream),
            "dgram" | "udp" => Some(Self::Dgram),
            _ => None,
        }
    }
}

impl fmt::Display for SockType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A native sock-transport address: `family:type:host@port`, with a numeric
/// host written without brackets, as in `inet6:dgram:fe80::1@6663`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NativeAddr {
    /// Address family; must match the IP version of `ip`.
    pub family: Family,
    /// Socket type.
    pub sock_type: SockType,
    /// Host address.
    pub ip: IpAddr,
    /// TCP or UDP port.
    pub port: u16,
}

impl NativeAddr {
    /// An address for a socket of `sock_type` at `sa`, with the family taken
    /// from the IP version.
    pub fn new(sock_type: SockType, sa: SocketAddr) -> Self {
        Self {
            family: Family::of(sa.ip()),
            sock_type,
            ip: sa.ip(),
            port: sa.port(),
        }
    }

    /// Parses the native form; see the [module documentation](super) for
    /// the grammar.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        check_len(s)?;

        let (family_text, colon) = field(s, 0, b':');
        let family = match family_text {
            "inet" => Family::Inet,
            "inet6" => Family::Inet6,
            _ => return Err(ParseError::new(ErrorKind::UnknownFamily, 0, family_text)),
        };
        let colon = colon.ok_or_else(|| missing(':', s, family_text))?;

        let type_at = colon + 1;
        let (type_text, colon) = field(s, type_at, b':');
        let sock_type = SockType::from_name(type_text)
            .ok_or_else(|| ParseError::new(ErrorKind::UnknownType, type_at, type_text))?;
        let colon = colon.ok_or_else(|| missing(':', s, type_text))?;

        let host_at = colon + 1;
        let (host_text, at_sign) = field(s, host_at, b'@');
        let at_sign = at_sign.ok_or_else(|| missing('@', s, host_text))?;
        let ip = parse_host(family, host_text)
            .map_err(|kind| ParseError::new(kind, host_at, host_text))?;

        let port = final_number(
            s,
            at_sign + 1,
            u64::from(u16::MAX),
            ErrorKind::BadPort,
            ErrorKind::PortOutOfRange,
        )?;
        Ok(Self {
            family,
            sock_type,
            ip,
            // `final_number` checked the bound.
            port: port as u16,
        })
    }

    /// Whether `family` matches the IP version of `ip`; always true for
    /// parsed addresses and those from [`NativeAddr::new`].
    pub fn family_matches(&self) -> bool {
        self.family == Family::of(self.ip)
    }

    /// The socket address to bind or connect to.
    pub fn to_socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

/// Parses a numeric host of `family`; a valid address of the other version
/// is a family mismatch rather than a bad host.
fn parse_host(family: Family, text: &str) -> Result<IpAddr, ErrorKind> {
    let v4 = Ipv4Addr::from_str(text);
    let v6 = Ipv6Addr::from_str(text);
    match (family, v4, v6) {
        (Family::Inet, Ok(ip), _) => Ok(IpAddr::V4(ip)),
        (Family::Inet6, _, Ok(ip)) => Ok(IpAddr::V6(ip)),
        (Family::Inet, _, Ok(_)) | (Family::Inet6, Ok(_), _) => {
            Err(ErrorKind::FamilyMismatch(family))
        }
        _ => Err(ErrorKind::BadHost),
    }
}

impl FromStr for NativeAddr {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Self::parse(s)
    }
}

impl fmt::Display for NativeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}@{}",
            self.family, self.sock_type, self.ip, self.port
        )
    }
}

impl From<NativeAddr> for SocketAddr {
    fn from(a: NativeAddr) -> Self {
        a.to_socket_addr()
    }
}
