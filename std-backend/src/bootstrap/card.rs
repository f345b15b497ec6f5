//! A process's card: its name and the contacts it listens on, in a text
//! form that goes through environment variables, files and key-value
//! stores unchanged.
//!
//! ```text
//! proc 7.0
//! tcp 10.1.0.1/24 40123
//! udp 10.1.0.1/24 40124
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};

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

/// What a process publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The process.
    pub proc: ProcName,
    /// Where it listens, in order of preference.
    pub contacts: Vec<Contact>,
}

/// Why a card's text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// A line is neither a `proc` line nor a contact.
    #[error(
        "line {line}: expected `proc JOB.RANK` or `COMPONENT ADDRESS/PREFIX PORT`, found `{text}`"
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

impl Card {
    /// A card without contacts.
    pub fn new(proc: ProcName) -> Self {
        Card {
            proc,
            contacts: Vec::new(),
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
        Ok(())
    }
}

/// `JOB.RANK`.
pub(crate) fn parse_proc(text: &str) -> Option<ProcName> {
    let (job, rank) = text.split_once('.')?;
    Some(ProcName::new(job.parse().ok()?, rank.parse().ok()?))
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
    fn several_cards_with_comments() {
        let text = "# the job\nproc 1.0\ntcp 127.0.0.1/8 5000\n\nproc 1.1 # second\ntcp 127.0.0.1/8 5001\n";
        let cards = Card::parse_all(text).expect("parses");
        assert_eq!(cards.len(), 2);
        assert_eq!(cards[1].proc, ProcName::new(1, 1));
        assert_eq!(cards[1].contacts[0].addr.port(), 5001);
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
