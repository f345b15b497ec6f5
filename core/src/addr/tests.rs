extern crate std;

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::string::{String, ToString};
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

fn native(s: &str) -> NativeAddr {
    NativeAddr::parse(s).expect("valid native address")
}

fn lnet(s: &str) -> LnetAddr {
    LnetAddr::parse(s).expect("valid lnet address")
}

fn sock(s: &str) -> SocketAddr {
    s.parse().expect("valid socket address")
}

#[test]
fn native_examples() {
    let a = native("inet:stream:10.0.0.1@3000");
    assert_eq!(a.family, Family::Inet);
    assert_eq!(a.sock_type, SockType::Stream);
    assert_eq!(a.ip, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(a.port, 3000);
    assert_eq!(a.to_socket_addr(), sock("10.0.0.1:3000"));
    assert_eq!(a.to_string(), "inet:stream:10.0.0.1@3000");
    assert_eq!(a, NativeAddr::new(SockType::Stream, sock("10.0.0.1:3000")));

    let d = native("inet:dgram:0.0.0.0@0");
    assert_eq!((d.sock_type, d.port), (SockType::Dgram, 0));
}

#[test]
fn native_type_synonyms_print_canonically() {
    assert_eq!(
        native("inet:tcp:127.0.0.1@3000").to_string(),
        "inet:stream:127.0.0.1@3000"
    );
    assert_eq!(
        native("inet:udp:127.0.0.1@3000").to_string(),
        "inet:dgram:127.0.0.1@3000"
    );
}

#[test]
fn native_ipv6_without_brackets() {
    // The example from Motr's addr_parse() comment.
    let a = native("inet6:dgram:FE80::0202:B3FF:FE1E:8329@6663");
    assert_eq!(a.family, Family::Inet6);
    assert_eq!(a.to_string(), "inet6:dgram:fe80::202:b3ff:fe1e:8329@6663");
    assert_eq!(a.to_socket_addr(), sock("[fe80::202:b3ff:fe1e:8329]:6663"));

    assert_eq!(native("inet6:stream:::1@65535").port, 65535);
    let mapped = "inet6:stream:::ffff:10.0.0.1@80";
    assert_eq!(native(mapped).to_string(), mapped);
}

#[test]
fn native_port_leading_zeros_are_dropped() {
    assert_eq!(
        native("inet:stream:1.2.3.4@0080").to_string(),
        "inet:stream:1.2.3.4@80"
    );
}

#[test]
fn family_consistency() {
    let mut a = NativeAddr::new(SockType::Stream, sock("[::1]:1"));
    assert_eq!(a.family, Family::Inet6);
    assert!(a.family_matches());
    a.family = Family::Inet;
    assert!(!a.family_matches());
}

#[test]
fn lnet_examples() {
    let a = lnet("10.0.2.15@tcp:12345:34:123");
    assert_eq!(
        a.nid,
        LnetNid::Ip {
            addr: Ipv4Addr::new(10, 0, 2, 15),
            net: LnetNet {
                kind: NetKind::Tcp,
                num: 0
            },
        }
    );
    assert_eq!((a.portal, a.tmid), (34, Tmid::Id(123)));
    // 123 | 1 << 10 | (34 - 30) << 11 = 123 + 1024 + 8192.
    assert_eq!(a.port(), Ok(9339));
    assert_eq!(a.to_socket_addr(), Ok(sock("10.0.2.15:9339")));
    assert_eq!(
        a.to_native().expect("has a port").to_string(),
        "inet:stream:10.0.2.15@9339"
    );
    assert_eq!(a.to_string(), "10.0.2.15@tcp:12345:34:123");
}

#[test]
fn lnet_wildcard_tmid_and_numbered_net() {
    // The example from Motr's addr_parse() comment.
    let a = lnet("192.168.96.128@tcp1:12345:31:*");
    assert_eq!(a.tmid, Tmid::Any);
    assert!(matches!(
        a.nid,
        LnetNid::Ip {
            net: LnetNet {
                kind: NetKind::Tcp,
                num: 1
            },
            ..
        }
    ));
    assert_eq!(a.port(), Err(LnetPortError::WildcardTmid));
    assert_eq!(a.to_string(), "192.168.96.128@tcp1:12345:31:*");

    let b = lnet("10.0.0.1@o2ib3:12345:34:1");
    assert!(matches!(
        b.nid,
        LnetNid::Ip {
            net: LnetNet {
                kind: NetKind::O2ib,
                num: 3
            },
            ..
        }
    ));
    assert_eq!(
        lnet("10.0.0.1@tcp0:12345:34:1").to_string(),
        "10.0.0.1@tcp:12345:34:1"
    );
}

#[test]
fn lnet_loopback() {
    let a = lnet("0@lo:12345:34:1");
    assert_eq!(a.nid, LnetNid::Loopback);
    assert_eq!(a.ip(), Ipv4Addr::LOCALHOST);
    assert_eq!(a.to_socket_addr(), Ok(sock("127.0.0.1:9217")));
    assert_eq!(a.to_string(), "0@lo:12345:34:1");
}

#[test]
fn lnet_port_bounds() {
    assert_eq!(lnet("1.1.1.1@tcp:12345:30:0").port(), Ok(1024));
    assert_eq!(lnet("1.1.1.1@tcp:12345:61:1023").port(), Ok(65535));
    assert_eq!(lnet_port(29, 0), Err(LnetPortError::PortalOutOfRange(29)));
    assert_eq!(lnet_port(62, 0), Err(LnetPortError::PortalOutOfRange(62)));
    assert_eq!(
        lnet_port(30, 1024),
        Err(LnetPortError::TmidOutOfRange(1024))
    );
    let built = LnetAddr {
        nid: LnetNid::Loopback,
        portal: 99,
        tmid: Tmid::Id(0),
    };
    assert_eq!(built.port(), Err(LnetPortError::PortalOutOfRange(99)));
    assert_eq!(
        built.to_native().map_err(|e| e.to_string()),
        Err("portal 99 is out of range 30..=61".to_string())
    );
}

#[test]
fn lnet_mapping_is_a_bijection_onto_ports_with_bit_10() {
    let mut seen = std::collections::BTreeSet::new();
    for portal in PORTAL_MIN..=PORTAL_MAX {
        for tmid in 0..=TMID_MAX {
            let port = lnet_port(portal, tmid).expect("in range");
            assert!(port >= 1024);
            assert_eq!(lnet_portal_tmid(port), Some((portal, tmid)));
            assert!(seen.insert(port));
        }
    }
    assert_eq!(seen.len(), 32 * 1024);
    assert_eq!(lnet_portal_tmid(1023), None);
    assert_eq!(lnet_portal_tmid(2048), None);
}

#[test]
fn endpoint_dispatch() {
    let n = EndpointAddr::parse("inet:dgram:10.0.0.1@3000").expect("native");
    assert!(matches!(n, EndpointAddr::Native(_)));
    assert_eq!(n.sock_type(), SockType::Dgram);
    assert_eq!(n.to_socket_addr(), Ok(sock("10.0.0.1:3000")));

    let l: EndpointAddr = "10.0.2.15@tcp:12345:34:123".parse().expect("lnet");
    assert!(matches!(l, EndpointAddr::Lnet(_)));
    assert_eq!(l.sock_type(), SockType::Stream);
    assert_eq!(l.to_socket_addr(), Ok(sock("10.0.2.15:9339")));
    assert_eq!(l.to_string(), "10.0.2.15@tcp:12345:34:123");
}

/// Each error kind, with the offset where it must be reported.
const BAD: &[(&str, ErrorKind, usize)] = &[
    ("", ErrorKind::Empty, 0),
    ("inet", ErrorKind::MissingSeparator(':'), 4),
    ("inet:stream", ErrorKind::MissingSeparator(':'), 11),
    ("inet:stream:1.2.3.4", ErrorKind::MissingSeparator('@'), 19),
    ("unix:dgram:/tmp/socket", ErrorKind::UnknownFamily, 0),
    (" inet:stream:1.2.3.4@1", ErrorKind::UnknownFamily, 0),
    ("inet:raw:1.2.3.4@1", ErrorKind::UnknownType, 5),
    ("inet:verbs:1.2.3.4@1", ErrorKind::UnknownType, 5),
    ("inet::1.2.3.4@1", ErrorKind::UnknownType, 5),
    ("inet:stream:lanl.gov@23", ErrorKind::BadHost, 12),
    ("inet:stream:@23", ErrorKind::BadHost, 12),
    ("inet6:stream:[::1]@80", ErrorKind::BadHost, 13),
    ("inet6:stream:fe80::1%eth0@80", ErrorKind::BadHost, 13),
    (
        "inet:stream:::1@80",
        ErrorKind::FamilyMismatch(Family::Inet),
        12,
    ),
    (
        "inet6:stream:1.2.3.4@80",
        ErrorKind::FamilyMismatch(Family::Inet6),
        13,
    ),
    ("inet:stream:1.2.3.4@", ErrorKind::BadPort, 20),
    ("inet:stream:1.2.3.4@http", ErrorKind::BadPort, 20),
    ("inet:stream:1.2.3.4@-1", ErrorKind::BadPort, 20),
    ("inet:stream:1.2.3.4@+1", ErrorKind::BadPort, 20),
    ("inet:stream:1.2.3.4@70000", ErrorKind::PortOutOfRange, 20),
    (
        "inet:stream:1.2.3.4@99999999999999999999999",
        ErrorKind::PortOutOfRange,
        20,
    ),
    ("inet:stream:1.2.3.4@80x", ErrorKind::TrailingInput, 22),
    ("inet:stream:1.2.3.4@80 ", ErrorKind::TrailingInput, 22),
    ("10.0.2.15:12345:34:1", ErrorKind::MissingSeparator('@'), 20),
    ("10.0.2.300@tcp:12345:34:1", ErrorKind::BadNid, 0),
    ("010.0.2.15@tcp:12345:34:1", ErrorKind::BadNid, 0),
    ("10.0.2.15@gni:12345:34:1", ErrorKind::UnknownNetwork, 10),
    ("10.0.2.15@tcpx:12345:34:1", ErrorKind::UnknownNetwork, 10),
    (
        "10.0.2.15@tcp99999999999:12345:34:1",
        ErrorKind::UnknownNetwork,
        10,
    ),
    ("10.0.2.15@:12345:34:1", ErrorKind::UnknownNetwork, 10),
    ("10.0.2.15@lo:12345:34:1", ErrorKind::NidNetworkMismatch, 0),
    ("0@tcp:12345:34:1", ErrorKind::NidNetworkMismatch, 0),
    ("0@lo1:12345:34:1", ErrorKind::UnknownNetwork, 2),
    ("10.0.2.15@tcp", ErrorKind::MissingSeparator(':'), 13),
    ("10.0.2.15@tcp:12346:34:1", ErrorKind::BadPid, 14),
    ("10.0.2.15@tcp::34:1", ErrorKind::BadPid, 14),
    ("10.0.2.15@tcp:12345", ErrorKind::MissingSeparator(':'), 19),
    ("10.0.2.15@tcp:12345:x:1", ErrorKind::BadPortal, 20),
    ("10.0.2.15@tcp:12345:29:1", ErrorKind::PortalOutOfRange, 20),
    ("10.0.2.15@tcp:12345:62:1", ErrorKind::PortalOutOfRange, 20),
    (
        "10.0.2.15@tcp:12345:34",
        ErrorKind::MissingSeparator(':'),
        22,
    ),
    ("10.0.2.15@tcp:12345:34:", ErrorKind::BadTmid, 23),
    ("10.0.2.15@tcp:12345:34:x", ErrorKind::BadTmid, 23),
    ("10.0.2.15@tcp:12345:34:1024", ErrorKind::TmidOutOfRange, 23),
    ("10.0.2.15@tcp:12345:34:12:5", ErrorKind::TrailingInput, 25),
    ("10.0.2.15@tcp:12345:34:*x", ErrorKind::TrailingInput, 24),
];

#[test]
fn errors_have_kind_and_offset() {
    for &(input, kind, offset) in BAD {
        let e = EndpointAddr::parse(input).expect_err(input);
        assert_eq!((e.kind(), e.offset()), (kind, offset), "{input:?}: {e}");
        assert!(
            e.to_string()
                .starts_with(&std::format!("at byte {offset}: "))
        );
    }
}

#[test]
fn too_long_is_rejected_up_front() {
    let long = "inet:stream:1.2.3.4@".to_string() + &"0".repeat(MAX_LEN);
    let e = EndpointAddr::parse(&long).expect_err("too long");
    assert_eq!(e.kind(), ErrorKind::TooLong { len: MAX_LEN + 20 });
    assert_eq!(e.offset(), MAX_LEN);
    let at_limit = "inet:stream:1.2.3.4@".to_string() + &"0".repeat(MAX_LEN - 21) + "1";
    assert_eq!(at_limit.len(), MAX_LEN);
    assert_eq!(native(&at_limit).port, 1);
}

#[test]
fn error_messages() {
    let msg = |s: &str| EndpointAddr::parse(s).expect_err(s).to_string();
    assert_eq!(
        msg("inet:stream:1.2.3.4@70000"),
        "at byte 20: port `70000` is out of range 0..=65535"
    );
    assert_eq!(
        msg("inet:stream:1.2.3.4"),
        "at byte 19: expected `@` after `1.2.3.4`"
    );
    assert_eq!(msg("inet:stream:@1"), "at byte 12: the host is empty");
    assert_eq!(
        msg("inet:stream:::1@80"),
        "at byte 12: host `::1` is not an IPv4 address, which family `inet` needs"
    );
    assert_eq!(
        msg("10.0.2.15@tcp:12345:34:1024"),
        "at byte 23: tmid `1024` is out of range 0..=1023"
    );
    assert_eq!(
        msg("10.0.2.15@tcp:12345:29:1"),
        "at byte 20: portal `29` is out of range 30..=61"
    );
    assert_eq!(
        msg("10.0.2.15@tcp:1:34:1"),
        "at byte 14: pid `1` is not 12345, the only process id Motr accepts"
    );
    assert_eq!(msg(""), "at byte 0: the address is empty");
}

#[test]
fn long_tokens_are_cut_at_a_char_boundary() {
    let host = "é".repeat(30);
    let input = std::format!("inet:stream:{host}@1");
    let e = EndpointAddr::parse(&input).expect_err("bad host");
    assert_eq!(e.kind(), ErrorKind::BadHost);
    assert_eq!(e.token(), "é".repeat(20));
    assert!(
        e.to_string()
            .ends_with("é…` is not a numeric IPv4 or IPv6 address")
    );
}

// ---- property tests ----

fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    let segment = prop_oneof![Just(0u16), Just(1), Just(0xffff), any::<u16>()];
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        proptest::array::uniform8(segment).prop_map(Ipv6Addr::from),
        any::<u32>().prop_map(|v4| Ipv4Addr::from(v4).to_ipv6_mapped()),
    ]
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        ipv6().prop_map(IpAddr::V6),
    ]
}

fn native_addr() -> impl Strategy<Value = NativeAddr> {
    (any::<bool>(), ip(), any::<u16>()).prop_map(|(stream, ip, port)| {
        let ty = if stream {
            SockType::Stream
        } else {
            SockType::Dgram
        };
        NativeAddr::new(ty, SocketAddr::new(ip, port))
    })
}

fn lnet_addr() -> impl Strategy<Value = LnetAddr> {
    let net = (any::<bool>(), prop_oneof![0..4u32, any::<u32>()]).prop_map(|(tcp, num)| {
        let kind = if tcp { NetKind::Tcp } else { NetKind::O2ib };
        LnetNet { kind, num }
    });
    let nid = prop_oneof![
        Just(LnetNid::Loopback),
        (any::<u32>(), net).prop_map(|(ip, net)| LnetNid::Ip {
            addr: Ipv4Addr::from(ip),
            net,
        }),
    ];
    let tmid = prop_oneof![Just(Tmid::Any), (0..=TMID_MAX).prop_map(Tmid::Id)];
    (nid, PORTAL_MIN..=PORTAL_MAX, tmid).prop_map(|(nid, portal, tmid)| LnetAddr {
        nid,
        portal,
        tmid,
    })
}

fn endpoint_addr() -> impl Strategy<Value = EndpointAddr> {
    prop_oneof![
        native_addr().prop_map(EndpointAddr::from),
        lnet_addr().prop_map(EndpointAddr::from),
    ]
}

/// Parsing `s` must not panic; an error must point inside the input and
/// print; a success must print canonically and parse back to itself.
fn check_any(s: &str) -> Result<(), TestCaseError> {
    match EndpointAddr::parse(s) {
        Ok(a) => {
            let printed = a.to_string();
            prop_assert!(printed.len() <= MAX_DISPLAY_LEN);
            prop_assert_eq!(EndpointAddr::parse(&printed), Ok(a));
        }
        Err(e) => {
            prop_assert!(e.offset() <= s.len(), "{:?}: {}", s, e);
            prop_assert!(e.token().len() <= 40);
            prop_assert!(!e.to_string().is_empty());
        }
    }
    Ok(())
}

/// One edit of an address text: where, what, and a byte to put there.
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![
        Just(b':'),
        Just(b'@'),
        Just(b'*'),
        Just(b'.'),
        b'0'..=b'9',
        any::<u8>(),
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Replace(i, b)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut bytes: Vec<u8> = text.as_bytes().to_vec();
    for e in edits {
        let len = bytes.len();
        match *e {
            Edit::Delete(i) if len > 0 => {
                bytes.remove(i % len);
            }
            Edit::Insert(i, b) => bytes.insert(i % (len + 1), b),
            Edit::Replace(i, b) if len > 0 => bytes[i % len] = b,
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #[test]
    fn native_round_trip(a in native_addr()) {
        let s = a.to_string();
        prop_assert!(s.len() <= MAX_DISPLAY_LEN);
        prop_assert_eq!(NativeAddr::parse(&s), Ok(a));
        prop_assert_eq!(EndpointAddr::parse(&s), Ok(EndpointAddr::Native(a)));
        prop_assert_eq!(a.to_socket_addr(), SocketAddr::new(a.ip, a.port));
    }

    #[test]
    fn lnet_round_trip(a in lnet_addr()) {
        let s = a.to_string();
        prop_assert!(s.len() <= MAX_DISPLAY_LEN);
        prop_assert_eq!(LnetAddr::parse(&s), Ok(a));
        prop_assert_eq!(EndpointAddr::parse(&s), Ok(EndpointAddr::Lnet(a)));
        match a.tmid {
            Tmid::Any => prop_assert_eq!(a.port(), Err(LnetPortError::WildcardTmid)),
            Tmid::Id(t) => {
                let port = a.port().map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(lnet_portal_tmid(port), Some((a.portal, t)));
                prop_assert_eq!(
                    a.to_native().map(|n| n.to_socket_addr()),
                    a.to_socket_addr()
                );
            }
        }
    }

    #[test]
    fn any_string_parses_or_fails_cleanly(s in ".*") {
        check_any(&s)?;
    }

    #[test]
    fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_any(&String::from_utf8_lossy(&b))?;
    }

    #[test]
    fn near_grammar_strings_parse_or_fail_cleanly(
        s in "(inet6?|unix|x)?:?(stream|dgram|tcp|udp|raw)?:?[0-9a-fA-F:.\\[\\]%]{0,42}@?[0-9x+-]{0,7}",
        l in "(0|[0-9.]{1,17})?@?(tcp|o2ib|lo|gni)?[0-9]{0,3}:?(12345|[0-9]{0,6}):?[0-9]{0,3}:?(\\*|[0-9]{0,5})(:[0-9])?",
    ) {
        check_any(&s)?;
        check_any(&l)?;
    }

    #[test]
    fn mutated_addresses_parse_or_fail_cleanly(
        a in endpoint_addr(),
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        check_any(&apply(&a.to_string(), &edits))?;
    }
}
