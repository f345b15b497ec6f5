//! The lnet form `nid@net:pid:portal:tmid`, e.g. `10.0.2.15@tcp:12345:34:123`,
//! and Motr's mapping of portal and tmid onto a TCP port.

use core::fmt;
use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::str::FromStr;

use super::error::{ErrorKind, LnetPortError, ParseError};
use super::native::{NativeAddr, SockType};
use super::{
    Family, PID, PORTAL_MAX, PORTAL_MIN, TMID_MAX, check_len, decimal, field, final_number, missing,
};

/// Bit set in every mapped port, which keeps it above the reserved ports.
const PORT_MARK: u16 = 1 << 10;

/// The TCP port Motr's sock transport derives from an lnet portal and tmid:
/// bits 0..=9 hold the tmid, bit 10 is set, bits 11..=15 hold
/// `portal - 30`. Every result lies in 1024..=65535.
pub fn lnet_port(portal: u32, tmid: u32) -> Result<u16, LnetPortError> {
    if !(PORTAL_MIN..=PORTAL_MAX).contains(&portal) {
        return Err(LnetPortError::PortalOutOfRange(portal));
    }
    if tmid > TMID_MAX {
        return Err(LnetPortError::TmidOutOfRange(tmid));
    }
    // Both fit after the checks: 5 bits and 10 bits.
    let high = ((portal - PORTAL_MIN) as u16) << 11;
    Ok(high | PORT_MARK | tmid as u16)
}

/// The inverse of [`lnet_port`]: the portal and tmid a port stands for, or
/// `None` for a port that no lnet address maps to (bit 10 clear).
pub fn lnet_portal_tmid(port: u16) -> Option<(u32, u32)> {
    if port & PORT_MARK == 0 {
        return None;
    }
    let portal = PORTAL_MIN + u32::from(port >> 11);
    let tmid = u32::from(port) & TMID_MAX;
    Some((portal, tmid))
}

/// Kind of an lnet network with an IP nid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetKind {
    /// `tcp`: LNet's socket driver.
    Tcp,
    /// `o2ib`: LNet's InfiniBand driver; the sock transport still reaches
    /// the nid (an IPoIB address) over TCP.
    O2ib,
}

impl NetKind {
    /// The name used in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::O2ib => "o2ib",
        }
    }
}

/// An lnet network with an IP nid: kind and number, `tcp1` is
/// `{ Tcp, 1 }`. Number 0 prints without a number, as LNet does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LnetNet {
    /// Network kind.
    pub kind: NetKind,
    /// Network number; `tcp` and `tcp0` are the same network.
    pub num: u32,
}

impl fmt::Display for LnetNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if self.num != 0 {
            write!(f, "{}", self.num)?;
        }
        Ok(())
    }
}

/// The node part of an lnet address (`nid@net`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LnetNid {
    /// `0@lo`: this node; the sock transport uses 127.0.0.1.
    Loopback,
    /// `a.b.c.d@tcp[N]` or `a.b.c.d@o2ib[N]`.
    Ip {
        /// The node's IPv4 address.
        addr: Ipv4Addr,
        /// The network it is on.
        net: LnetNet,
    },
}

/// Transfer-machine id of an lnet address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tmid {
    /// `*`: pick a free id when the transfer machine starts.
    Any,
    /// A given id.
    Id(u32),
}

impl fmt::Display for Tmid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Id(id) => write!(f, "{id}"),
        }
    }
}

/// An lnet-compatible address as Motr's sock transport reads it:
/// `nid@net:12345:portal:tmid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LnetAddr {
    /// Node and network.
    pub nid: LnetNid,
    /// Portal; 30..=61 for the address to have a port.
    pub portal: u32,
    /// Transfer-machine id; 0..=1023 for the address to have a port.
    pub tmid: Tmid,
}

impl LnetAddr {
    /// Parses the lnet form; see the [module documentation](super) for the
    /// grammar.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        check_len(s)?;

        let (nid_text, at_sign) = field(s, 0, b'@');
        let at_sign = at_sign.ok_or_else(|| missing('@', s, nid_text))?;
        let nid_ip = if nid_text == "0" {
            None
        } else {
            let ip = Ipv4Addr::from_str(nid_text)
                .map_err(|_| ParseError::new(ErrorKind::BadNid, 0, nid_text))?;
            Some(ip)
        };

        let net_at = at_sign + 1;
        let (net_text, colon) = field(s, net_at, b':');
        let net = parse_net(net_text)
            .ok_or_else(|| ParseError::new(ErrorKind::UnknownNetwork, net_at, net_text))?;
        let nid = match (nid_ip, net) {
            (None, Net::Lo) => LnetNid::Loopback,
            (Some(addr), Net::Ip(net)) => LnetNid::Ip { addr, net },
            _ => {
                let both = &s[..net_at + net_text.len()];
                return Err(ParseError::new(ErrorKind::NidNetworkMismatch, 0, both));
            }
        };
        let colon = colon.ok_or_else(|| missing(':', s, net_text))?;

        let pid_at = colon + 1;
        let (pid_text, colon) = field(s, pid_at, b':');
        if decimal(pid_text) != Some(u64::from(PID)) {
            return Err(ParseError::new(ErrorKind::BadPid, pid_at, pid_text));
        }
        let colon = colon.ok_or_else(|| missing(':', s, pid_text))?;

        let portal_at = colon + 1;
        let (portal_text, colon) = field(s, portal_at, b':');
        let portal = decimal(portal_text)
            .ok_or_else(|| ParseError::new(ErrorKind::BadPortal, portal_at, portal_text))?;
        if !(u64::from(PORTAL_MIN)..=u64::from(PORTAL_MAX)).contains(&portal) {
            return Err(ParseError::new(
                ErrorKind::PortalOutOfRange,
                portal_at,
                portal_text,
            ));
        }
        let colon = colon.ok_or_else(|| missing(':', s, portal_text))?;

        let tmid_at = colon + 1;
        let tmid = if s[tmid_at..].starts_with('*') {
            let rest = tmid_at + 1;
            if rest < s.len() {
                return Err(ParseError::new(ErrorKind::TrailingInput, rest, &s[rest..]));
            }
            Tmid::Any
        } else {
            let id = final_number(
                s,
                tmid_at,
                u64::from(TMID_MAX),
                ErrorKind::BadTmid,
                ErrorKind::TmidOutOfRange,
            )?;
            // `final_number` checked the bound.
            Tmid::Id(id as u32)
        };

        Ok(Self {
            nid,
            // Checked against the portal range above.
            portal: portal as u32,
            tmid,
        })
    }

    /// The IPv4 address the sock transport connects to: the nid, or
    /// 127.0.0.1 for `0@lo`.
    pub fn ip(&self) -> Ipv4Addr {
        match self.nid {
            LnetNid::Loopback => Ipv4Addr::LOCALHOST,
            LnetNid::Ip { addr, .. } => addr,
        }
    }

    /// The TCP port Motr's mapping gives this address (see [`lnet_port`]);
    /// an error for a wildcard tmid or a portal or tmid out of range.
    pub fn port(&self) -> Result<u16, LnetPortError> {
        match self.tmid {
            Tmid::Any => Err(LnetPortError::WildcardTmid),
            Tmid::Id(tmid) => lnet_port(self.portal, tmid),
        }
    }

    /// The socket address the sock transport uses for this address.
    pub fn to_socket_addr(&self) -> Result<SocketAddr, LnetPortError> {
        Ok(SocketAddr::V4(SocketAddrV4::new(self.ip(), self.port()?)))
    }

    /// The same endpoint in native form: the sock transport always reaches
    /// lnet addresses over a TCP stream socket on IPv4.
    pub fn to_native(&self) -> Result<NativeAddr, LnetPortError> {
        Ok(NativeAddr {
            family: Family::Inet,
            sock_type: SockType::Stream,
            ip: self.ip().into(),
            port: self.port()?,
        })
    }
}

/// A network name as read, before it is paired with the nid.
enum Net {
    /// `lo`, which goes with nid `0`.
    Lo,
    /// `tcp[N]` or `o2ib[N]`, which go with an IPv4 nid.
    Ip(LnetNet),
}

/// Reads a network name; `None` if it is not one of `tcp[N]`, `o2ib[N]`
/// or `lo`.
fn parse_net(text: &str) -> Option<Net> {
    if text == "lo" {
        return Some(Net::Lo);
    }
    let (kind, num) = if let Some(num) = text.strip_prefix("tcp") {
        (NetKind::Tcp, num)
    } else if let Some(num) = text.strip_prefix("o2ib") {
        (NetKind::O2ib, num)
    } else {
        return None;
    };
    let num = if num.is_empty() {
        0
    } else {
        u32::try_from(decimal(num)?).ok()?
    };
    Some(Net::Ip(LnetNet { kind, num }))
}

impl FromStr for LnetAddr {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Self::parse(s)
    }
}

impl fmt::Display for LnetAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.nid {
            LnetNid::Loopback => f.write_str("0@lo")?,
            LnetNid::Ip { addr, net } => write!(f, "{addr}@{net}")?,
        }
        write!(f, ":{PID}:{}:{}", self.portal, self.tmid)
    }
}
