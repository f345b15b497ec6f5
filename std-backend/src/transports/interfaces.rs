//! Which local addresses a component listens on, and which pairs of local
//! and remote addresses its links use.
//!
//! Wrong interface pairing is the most reported cause of hangs with Open
//! MPI's TCP BTL, so the rules are few and explicit:
//! - `if_include` / `if_exclude` (never both) name interfaces by name
//!   (`eth0`, or a prefix with `*`: `ib*`) or by subnet (`10.1.0.0/16`).
//! - With neither set, loopback and virtual bridges (`docker*`, `virbr*`,
//!   `veth*`) are left out, unless nothing else is up: then they are the
//!   only way to reach a peer, and they are used.
//! - [`pair`] computes the pairs from both processes' address lists in the
//!   same canonical order on both sides, same subnet first, so the two ends
//!   of link *i* always agree on its addresses.

use std::fmt;
use std::net::IpAddr;

use btl_core::endpoint::ProcName;
use ipnet::IpNet;

use crate::bootstrap::Contact;

/// Interfaces left out unless named or the only ones up.
pub const DEFAULT_EXCLUDED: &[&str] = &["lo", "docker*", "virbr*", "veth*"];

/// One address of a local interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAddr {
    /// The interface's name.
    pub interface: String,
    /// The address and the prefix length of its subnet.
    pub net: IpNet,
}

impl LocalAddr {
    /// The address.
    pub fn ip(&self) -> IpAddr {
        self.net.addr()
    }
}

impl fmt::Display for LocalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.net, self.interface)
    }
}

/// The largest UDP payload that leaves the interface with address `ip`
/// whole: its MTU less the IP and UDP headers, at most 65,507. `None` if
/// the address is on no interface of this host, or its MTU cannot be read
/// (only Linux tells it here, in `/sys/class/net`).
pub fn datagram_mtu(ip: IpAddr) -> Option<usize> {
    let all = if_addrs::get_if_addrs().ok()?;
    let interface = all.iter().find(|i| i.ip() == ip)?;
    let path = format!("/sys/class/net/{}/mtu", interface.name);
    let mtu: usize = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    let headers = if ip.is_ipv4() { 20 + 8 } else { 40 + 8 };
    Some(mtu.saturating_sub(headers).min(MAX_UDP_PAYLOAD))
}

/// The largest UDP payload over IPv4 (65,535 less its headers).
const MAX_UDP_PAYLOAD: usize = u16::MAX as usize - 28;

/// The addresses of this host's interfaces that are up, in the kernel's
/// order; IPv6 link-local addresses are left out (they need a scope to be
/// reached, which a card does not carry).
pub fn local_addrs() -> std::io::Result<Vec<LocalAddr>> {
    let mut out = Vec::new();
    for i in if_addrs::get_if_addrs()? {
        if i.is_link_local() && i.ip().is_ipv6() {
            continue;
        }
        let prefix = match &i.addr {
            if_addrs::IfAddr::V4(a) => a.prefixlen,
            if_addrs::IfAddr::V6(a) => a.prefixlen,
        };
        if let Ok(net) = IpNet::new(i.ip(), prefix) {
            out.push(LocalAddr {
                interface: i.name,
                net,
            });
        }
    }
    Ok(out)
}

/// An interface named by its name (a trailing `*` matches any rest) or by
/// a subnet its address lies in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// By name.
    Name(String),
    /// By subnet.
    Net(IpNet),
}

impl Selector {
    /// Reads `eth0`, `ib*`, `10.0.0.0/8` or `fd00::/8`.
    pub fn parse(text: &str) -> Result<Self, SelectionError> {
        let text = text.trim();
        if text.contains('/') {
            return text
                .parse::<IpNet>()
                .map(|n| Selector::Net(n.trunc()))
                .map_err(|_| SelectionError::BadSelector(text.to_string()));
        }
        let stem = text.strip_suffix('*').unwrap_or(text);
        let name_ok = !stem.is_empty()
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-@:".contains(&b));
        if !name_ok {
            return Err(SelectionError::BadSelector(text.to_string()));
        }
        Ok(Selector::Name(text.to_string()))
    }

    /// Whether `addr` is what this selects.
    pub fn matches(&self, addr: &LocalAddr) -> bool {
        match self {
            Selector::Name(name) => match name.strip_suffix('*') {
                Some(prefix) => addr.interface.starts_with(prefix),
                None => addr.interface == *name,
            },
            Selector::Net(net) => net.contains(&addr.ip()),
        }
    }
}

/// Why an interface selection is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// Both lists are set: which one wins would be a guess.
    #[error("if_include and if_exclude are both set; set one of them")]
    Both,
    /// An entry is neither an interface name nor a subnet.
    #[error("`{0}` is neither an interface name (eth0, ib*) nor a subnet (10.0.0.0/8)")]
    BadSelector(String),
    /// Nothing is left to listen on.
    #[error("no interface is left to use ({0})")]
    Nothing(String),
}

/// The rules of one component (`btl_tcp_if_include`, `btl_tcp_if_exclude`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    include: Vec<Selector>,
    exclude: Vec<Selector>,
}

impl Selection {
    /// The rules from two comma-separated lists, either empty.
    pub fn new(include: &str, exclude: &str) -> Result<Self, SelectionError> {
        let list = |text: &str| -> Result<Vec<Selector>, SelectionError> {
            text.split(',')
                .filter(|s| !s.trim().is_empty())
                .map(Selector::parse)
                .collect()
        };
        let (include, exclude) = (list(include)?, list(exclude)?);
        if !include.is_empty() && !exclude.is_empty() {
            return Err(SelectionError::Both);
        }
        Ok(Selection { include, exclude })
    }

    /// The addresses of `all` to use: those included; or all but those
    /// excluded; or, with no rule, all but loopback and virtual bridges,
    /// unless nothing else is left.
    pub fn apply(&self, all: &[LocalAddr]) -> Result<Vec<LocalAddr>, SelectionError> {
        let any = |rules: &[Selector], a: &LocalAddr| rules.iter().any(|r| r.matches(a));
        let chosen: Vec<LocalAddr> = if !self.include.is_empty() {
            all.iter()
                .filter(|a| any(&self.include, a))
                .cloned()
                .collect()
        } else if !self.exclude.is_empty() {
            all.iter()
                .filter(|a| !any(&self.exclude, a))
                .cloned()
                .collect()
        } else {
            let defaults: Vec<Selector> = DEFAULT_EXCLUDED
                .iter()
                .map(|n| Selector::Name((*n).to_string()))
                .collect();
            let kept: Vec<LocalAddr> = all
                .iter()
                .filter(|a| !any(&defaults, a) && !a.ip().is_loopback())
                .cloned()
                .collect();
            if kept.is_empty() { all.to_vec() } else { kept }
        };
        if chosen.is_empty() {
            let have: Vec<String> = all.iter().map(ToString::to_string).collect();
            return Err(SelectionError::Nothing(format!(
                "have: {}",
                have.join(", ")
            )));
        }
        Ok(chosen)
    }
}

/// An address as one side of a pair sees it: address and subnet prefix.
pub type Endpoint = IpNet;

/// How well two addresses suit a link: 2 on one subnet, 1 of one family
/// (routed), 0 unusable.
fn affinity(a: &Endpoint, b: &Endpoint) -> u8 {
    let same_family = a.addr().is_ipv4() == b.addr().is_ipv4();
    if !same_family {
        0
    } else if a.contains(&b.addr()) && b.contains(&a.addr()) {
        2
    } else {
        1
    }
}

/// The `links` pairs of addresses for the links between two processes,
/// `lower` the address list of the process with the lower name and
/// `higher` the other's: pair *i* is (`lower` address, `higher` address)
/// of link *i*. Both processes call this with the same arguments and so
/// agree. Pairs on one subnet come first, then routed ones; an address is
/// used once while unused ones of suitable family remain, then the pairs
/// found are reused in turn. Empty when no pair is usable.
pub fn pair(lower: &[Endpoint], higher: &[Endpoint], links: usize) -> Vec<(Endpoint, Endpoint)> {
    let mut candidates: Vec<(u8, usize, usize)> = Vec::new();
    for (i, a) in lower.iter().enumerate() {
        for (j, b) in higher.iter().enumerate() {
            let score = affinity(a, b);
            if score > 0 {
                candidates.push((score, i, j));
            }
        }
    }
    // Best affinity first, then list order: a deterministic total order.
    candidates.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let mut matched: Vec<(usize, usize)> = Vec::new();
    let (mut used_lower, mut used_higher) = (vec![false; lower.len()], vec![false; higher.len()]);
    for &(_, i, j) in &candidates {
        if !used_lower[i] && !used_higher[j] {
            used_lower[i] = true;
            used_higher[j] = true;
            matched.push((i, j));
        }
    }
    if matched.is_empty() {
        return Vec::new();
    }
    (0..links.max(1))
        .map(|k| {
            let (i, j) = matched[k % matched.len()];
            (lower[i], higher[j])
        })
        .collect()
}

/// A contact's address with its subnet prefix.
pub fn net_of(c: &Contact) -> IpNet {
    IpNet::new(c.addr.ip(), c.prefix).unwrap_or_else(|_| IpNet::from(c.addr.ip()))
}

/// The (local, remote) addresses of link `index` between `me` and `peer`
/// (each a process and its contacts of one component), from the pairs both
/// compute alike ([`pair`], the lower name's list first). `None` when no
/// pair is usable.
pub fn link_addresses(
    me: (ProcName, &[Contact]),
    peer: (ProcName, &[Contact]),
    links: u8,
    index: u8,
) -> Option<(IpNet, std::net::SocketAddr)> {
    let mine: Vec<IpNet> = me.1.iter().map(net_of).collect();
    let theirs: Vec<IpNet> = peer.1.iter().map(net_of).collect();
    let links = usize::from(links.max(1));
    let pairs: Vec<(IpNet, IpNet)> = if me.0 < peer.0 {
        pair(&mine, &theirs, links)
    } else {
        pair(&theirs, &mine, links)
            .into_iter()
            .map(|(a, b)| (b, a))
            .collect()
    };
    let (local, remote) = *pairs.get(usize::from(index) % pairs.len().max(1))?;
    let port = peer.1.iter().find(|c| net_of(c) == remote)?.addr.port();
    Some((local, std::net::SocketAddr::new(remote.addr(), port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_datagram_mtu_is_the_interfaces_less_the_headers() {
        let lo: usize = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .expect("loopback's MTU")
            .trim()
            .parse()
            .expect("a number");
        let ip = IpAddr::from([127, 0, 0, 1]);
        assert_eq!(datagram_mtu(ip), Some((lo - 28).min(65_507)));
        // TEST-NET-1 (RFC 5737) is on no interface.
        assert_eq!(datagram_mtu(IpAddr::from([192, 0, 2, 1])), None);
    }

    fn addr(interface: &str, net: &str) -> LocalAddr {
        LocalAddr {
            interface: interface.into(),
            net: net.parse().expect("net"),
        }
    }

    fn host() -> Vec<LocalAddr> {
        vec![
            addr("lo", "127.0.0.1/8"),
            addr("eth0", "10.1.0.5/24"),
            addr("ib0", "192.168.7.5/24"),
            addr("docker0", "172.17.0.1/16"),
            addr("veth12ab", "169.254.3.1/16"),
            addr("eth0", "fd00::5/64"),
        ]
    }

    fn names(v: &[LocalAddr]) -> Vec<String> {
        v.iter().map(|a| format!("{}", a.net)).collect()
    }

    #[test]
    fn by_default_loopback_and_bridges_are_left_out() {
        let chosen = Selection::default().apply(&host()).expect("some");
        assert_eq!(
            names(&chosen),
            ["10.1.0.5/24", "192.168.7.5/24", "fd00::5/64"]
        );
    }

    #[test]
    fn when_nothing_else_is_up_loopback_is_used() {
        let only = vec![addr("lo", "127.0.0.1/8"), addr("lo", "::1/128")];
        assert_eq!(Selection::default().apply(&only).expect("lo"), only);
    }

    #[test]
    fn include_and_exclude_by_name_prefix_and_subnet() {
        let inc = Selection::new("ib*, 10.0.0.0/8", "").expect("rules");
        assert_eq!(
            names(&inc.apply(&host()).expect("some")),
            ["10.1.0.5/24", "192.168.7.5/24"]
        );
        let lo = Selection::new("lo", "").expect("rules");
        assert_eq!(names(&lo.apply(&host()).expect("some")), ["127.0.0.1/8"]);
        let exc = Selection::new("", "eth0,docker*,127.0.0.0/8").expect("rules");
        assert_eq!(
            names(&exc.apply(&host()).expect("some")),
            ["192.168.7.5/24", "169.254.3.1/16"]
        );
        assert_eq!(
            Selection::new("eth9", "")
                .expect("rules")
                .apply(&host())
                .map(|_| ()),
            Err(SelectionError::Nothing(
                "have: 127.0.0.1/8 (lo), 10.1.0.5/24 (eth0), 192.168.7.5/24 (ib0), \
                 172.17.0.1/16 (docker0), 169.254.3.1/16 (veth12ab), fd00::5/64 (eth0)"
                    .into()
            ))
        );
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        assert_eq!(Selection::new("eth0", "lo"), Err(SelectionError::Both));
        for bad in ["10.0.0.0/40", "eth 0", "e*th", "*"] {
            assert!(
                matches!(Selection::new(bad, ""), Err(SelectionError::BadSelector(_))),
                "{bad}"
            );
        }
    }

    fn nets(list: &[&str]) -> Vec<Endpoint> {
        list.iter().map(|s| s.parse().expect("net")).collect()
    }

    #[test]
    fn pairs_prefer_one_subnet_and_agree_on_both_sides() {
        let a = nets(&["192.168.7.5/24", "10.1.0.5/24"]);
        let b = nets(&["10.1.0.9/24", "192.168.7.9/24", "fd00::9/64"]);
        let pairs = pair(&a, &b, 2);
        assert_eq!(
            pairs,
            [(a[0], b[1]), (a[1], b[0])],
            "each address once, same subnet"
        );
        // More links than pairs: the pairs are reused in turn.
        let four = pair(&a, &b, 4);
        assert_eq!(four[2], four[0]);
        assert_eq!(four[3], four[1]);
    }

    #[test]
    fn routed_pairs_come_after_one_subnet_and_families_never_mix() {
        let a = nets(&["10.2.0.5/24", "10.1.0.5/24"]);
        let b = nets(&["10.1.0.9/24"]);
        assert_eq!(pair(&a, &b, 1), [(a[1], b[0])]);
        let routed = pair(&nets(&["10.2.0.5/24"]), &b, 1);
        assert_eq!(routed.len(), 1, "routed, but usable");
        assert!(pair(&nets(&["fd00::5/64"]), &b, 1).is_empty());
    }

    #[test]
    fn this_host_has_at_least_loopback() {
        let all = local_addrs().expect("getifaddrs");
        assert!(all.iter().any(|a| a.ip().is_loopback()), "{all:?}");
        assert!(
            !Selection::default()
                .apply(&all)
                .expect("something")
                .is_empty()
        );
    }
}
