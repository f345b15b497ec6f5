//! A process's card: its name and the contacts it listens on, in a text
//! form that goes through environment variables, files and key-value
//! stores unchanged.
//!
//! ```text
//! proc 7.0
//! tcp 10.1.0.1/24 40123
//! udp 10.1.0.1/24 40124
//! sm btl-sm-7-0 0b5e1d6c-5c2b-4c4e-9a51-1f0f6f3c7a10:17 4242
//! ```
//!
//! The `sm` line names the process's shared-memory segment, the host it
//! is on as same-host peers know it (its kernel's boot id and its
//! `/dev/shm`), and its process id.
//!
//! A contact may also be written as an endpoint address in Motr's forms
//! ([`btl_core::addr`]): `inet:tcp:10.1.0.1@40123` (`stream`/`tcp` for
//! the tcp component, `dgram`/`udp` for udp), or an lnet address such as
//! `10.1.0.1@tcp:12345:34:123`, which names the TCP port its portal and
//! transfer machine map to. Such a contact carries no subnet, so its
//! prefix is the whole address (`/32`, `/128`).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use btl_core::addr::{EndpointAddr, SockType};
use btl_core::endpoint::ProcName;

/// One place a process listens: component, address with the prefix length
/// of its subnet (for pairing interfaces), and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Contact {
    /// The component that listens there (`tcp`, `udp`).
    pub component: String,
    /// The address and port.
    pub addr: SocketAddr,
    /// Prefix length of the address's subnet.
    pub prefix: u8,
}

/// Where a process's same-host peers find its shared memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SegmentContact {
    /// Its segment's name in `/dev/shm`.
    pub segment: String,
    /// The host as same-host peers share it: only a peer of the same
    /// identity maps the segment.
    pub host: String,
    /// The process's id, which the segment's header repeats.
    pub pid: u32,
}

/// What a process publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The process.
    pub proc: ProcName,
    /// Where it listens, in order of preference.
    pub contacts: Vec<Contact>,
    /// Its shared-memory segment, if it has one.
    pub segment: Option<SegmentContact>,
}

/// Why a card's text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// A line is neither a `proc` line nor a contact.
    #[error(
        "line {line}: expected `proc JOB.RANK`, `COMPONENT ADDRESS/PREFIX PORT` or `sm SEGMENT HOST PID`, found `{text}`"
    )]
    Syntax {
        /// Line number, from 1.
        line: usize,
        /// The line.
        text: String,
    },
    /// A contact before any `proc` line.
    #[error("line {line}: a contact before any `proc` line")]
    NoProc {
        /// Line number, from 1.
        line: usize,
    },
    /// The text holds no card.
    #[error("no `proc` line")]
    Empty,
}

/// Why an endpoint address cannot be a contact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The text is not an endpoint address.
    #[error("{0}")]
    Parse(btl_core::addr::ParseError),
    /// An lnet address whose transfer machine is `*`: it names no port.
    #[error("{0}")]
    NoPort(btl_core::addr::LnetPortError),
}

impl Contact {
    /// The contact an endpoint address in Motr's forms names: the tcp
    /// component for a stream address (and any lnet address), udp for a
    /// datagram one, with the prefix of the whole address.
    pub fn from_address(text: &str) -> Result<Contact, AddressError> {
        let parsed = EndpointAddr::parse(text).map_err(AddressError::Parse)?;
        let addr = parsed.to_socket_addr().map_err(AddressError::NoPort)?;
        let component = match parsed.sock_type() {
            SockType::Stream => "tcp",
            SockType::Dgram => "udp",
        };
        Ok(Contact {
            component: component.to_string(),
            addr,
            prefix: if addr.is_ipv4() { 32 } else { 128 },
        })
    }
}

impl Card {
    /// A card without contacts.
    pub fn new(proc: ProcName) -> Self {
        Card {
            proc,
            contacts: Vec::new(),
            segment: None,
        }
    }

    /// The contacts of `component`.
    pub fn contacts_of<'a>(&'a self, component: &'a str) -> impl Iterator<Item = &'a Contact> {
        self.contacts
            .iter()
            .filter(move |c| c.component == component)
    }

    /// Parses one card.
    pub fn parse(text: &str) -> Result<Card, CardError> {
        let mut cards = Self::parse_all(text)?;
        match cards.len() {
            0 => Err(CardError::Empty),
            _ => Ok(cards.swap_remove(0)),
        }
    }

    /// Parses any number of cards, each starting at its `proc` line.
    /// Blank lines and `#` comments are skipped.
    pub fn parse_all(text: &str) -> Result<Vec<Card>, CardError> {
        let mut cards: Vec<Card> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let syntax = || CardError::Syntax {
                line,
                text: raw.trim().to_string(),
            };
            let words: Vec<&str> = content.split_whitespace().collect();
            match words.as_slice() {
                ["proc", name] => cards.push(Card::new(parse_proc(name).ok_or_else(syntax)?)),
                [address] => {
                    let contact = Contact::from_address(address).map_err(|_| syntax())?;
                    cards
                        .last_mut()
                        .ok_or(CardError::NoProc { line })?
                        .contacts
                        .push(contact);
                }
                ["sm", segment, host, pid] => {
                    let contact = parse_segment(segment, host, pid).ok_or_else(syntax)?;
                    cards.last_mut().ok_or(CardError::NoProc { line })?.segment = Some(contact);
                }
                [component, addr, port] => {
                    let contact = parse_contact(component, addr, port).ok_or_else(syntax)?;
                    cards
                        .last_mut()
                        .ok_or(CardError::NoProc { line })?
                        .contacts
                        .push(contact);
                }
                _ => return Err(syntax()),
            }
        }
        Ok(cards)
    }
}

impl fmt::Display for Card {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "proc {}", self.proc)?;
        for c in &self.contacts {
            writeln!(
                f,
                "{} {}/{} {}",
                c.component,
                c.addr.ip(),
                c.prefix,
                c.addr.port()
            )?;
        }
        if let Some(s) = &self.segment {
            writeln!(f, "sm {} {} {}", s.segment, s.host, s.pid)?;
        }
        Ok(())
    }
}

/// `JOB.RANK`.
pub(crate) fn parse_proc(text: &str) -> Option<ProcName> {
    let (job, rank) = text.split_once('.')?;
    Some(ProcName::new(job.parse().ok()?, rank.parse().ok()?))
}

fn parse_segment(segment: &str, host: &str, pid: &str) -> Option<SegmentContact> {
    let plain = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    };
    let pid = pid.parse().ok()?;
    (plain(segment) && plain(host) && !segment.starts_with('.')).then(|| SegmentContact {
        segment: segment.to_owned(),
        host: host.to_owned(),
        pid,
    })
}

fn parse_contact(component: &str, addr: &str, port: &str) -> Option<Contact> {
    let valid_name = !component.is_empty()
        && component
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid_name {
        return None;
    }
    let (ip, prefix) = addr.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return None;
    }
    Some(Contact {
        component: component.to_string(),
        addr: SocketAddr::new(ip, port.parse().ok()?),
        prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn card() -> Card {
        Card {
            proc: ProcName::new(7, 3),
            contacts: vec![
                Contact {
                    component: "tcp".into(),
                    addr: "10.1.0.1:40123".parse().expect("addr"),
                    prefix: 24,
                },
                Contact {
                    component: "udp".into(),
                    addr: "[fd00::5]:9".parse().expect("addr"),
                    prefix: 64,
                },
            ],
            segment: None,
        }
    }

    #[test]
    fn text_round_trips() {
        let text = card().to_string();
        assert_eq!(text, "proc 7.3\ntcp 10.1.0.1/24 40123\nudp fd00::5/64 9\n");
        assert_eq!(Card::parse(&text), Ok(card()));
        assert_eq!(card().contacts_of("udp").count(), 1);
    }

    #[test]
    fn a_segment_line_round_trips_and_a_bad_one_is_named() {
        let mut with = card();
        with.segment = Some(SegmentContact {
            segment: "btl-sm-7-3".into(),
            host: "0b5e1d6c-5c2b:17".into(),
            pid: 4242,
        });
        let text = with.to_string();
        assert!(
            text.ends_with("sm btl-sm-7-3 0b5e1d6c-5c2b:17 4242\n"),
            "{text}"
        );
        assert_eq!(Card::parse(&text), Ok(with));
        for bad in [
            "proc 7.3\nsm ../etc/passwd host 1\n",
            "proc 7.3\nsm .hidden host 1\n",
            "proc 7.3\nsm seg host nopid\n",
        ] {
            assert!(
                matches!(Card::parse(bad), Err(CardError::Syntax { line: 2, .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn several_cards_with_comments() {
        let text = "# the job\nproc 1.0\ntcp 127.0.0.1/8 5000\n\nproc 1.1 # second\ntcp 127.0.0.1/8 5001\n";
        let cards = Card::parse_all(text).expect("parses");
        assert_eq!(cards.len(), 2);
        assert_eq!(cards[1].proc, ProcName::new(1, 1));
        assert_eq!(cards[1].contacts[0].addr.port(), 5001);
    }

    #[test]
    fn contacts_may_be_endpoint_addresses() {
        let text = "proc 7.3\ninet:tcp:10.1.0.1@40123\ninet6:dgram:fd00::5@9\n10.0.2.15@tcp:12345:34:123\n";
        let card = Card::parse(text).expect("parses");
        let seen: Vec<(&str, String, u8)> = card
            .contacts
            .iter()
            .map(|c| (c.component.as_str(), c.addr.to_string(), c.prefix))
            .collect();
        assert_eq!(
            seen,
            [
                ("tcp", "10.1.0.1:40123".to_string(), 32),
                ("udp", "[fd00::5]:9".to_string(), 128),
                // tmid 123 | 1 << 10 | (34 - 30) << 11
                ("tcp", "10.0.2.15:9339".to_string(), 32),
            ]
        );
        // Printed in the card's own form, it reads back the same.
        assert_eq!(Card::parse(&card.to_string()), Ok(card));
        assert!(matches!(
            Contact::from_address("0@lo:12345:34:*"),
            Err(AddressError::NoPort(_))
        ));
        assert!(matches!(
            Contact::from_address("inet:sctp:10.0.0.1@1"),
            Err(AddressError::Parse(_))
        ));
        for bad in ["proc 1.0\ninet:tcp:10.0.0.1", "proc 1.0\n0@lo:12345:34:*"] {
            assert!(
                matches!(Card::parse(bad), Err(CardError::Syntax { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            Card::parse("tcp 127.0.0.1/8 1"),
            Err(CardError::NoProc { line: 1 })
        );
        for bad in [
            "proc 1",
            "proc x.1",
            "proc 1.0\ntcp 127.0.0.1 1",
            "proc 1.0\ntcp 127.0.0.1/33 1",
            "proc 1.0\ntcp 127.0.0.1/8 70000",
            "proc 1.0\nTCP 127.0.0.1/8 1",
            "proc 1.0\ntcp 127.0.0.1/8",
        ] {
            assert!(
                matches!(Card::parse(bad), Err(CardError::Syntax { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(Card::parse("# nothing\n"), Err(CardError::Empty));
    }

    proptest! {
        #[test]
        fn any_text_parses_or_fails_cleanly(text in "\\PC{0,200}") {
            let _ = Card::parse_all(&text);
        }
    }
}
