//! A peer list written in advance: every process of the job, where it
//! listens, from a file or the environment. Each process listens where the
//! list says; nothing is published at run time.

use std::path::Path;
use std::time::Duration;

use btl_core::endpoint::ProcName;

use super::{Bootstrap, BootstrapError, Card};

/// Environment variable holding the list itself (cards separated by
/// newlines or `;`).
pub const PEERS_VAR: &str = "BTL_PEERS";
/// Environment variable naming a file that holds the list.
pub const PEERS_FILE_VAR: &str = "BTL_PEERS_FILE";

/// A fixed list of cards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPeers {
    cards: Vec<Card>,
    source: String,
}

impl StaticPeers {
    /// The list of `cards`, made by a program (a launcher, a simulation);
    /// `source` names it for errors.
    pub fn new(cards: Vec<Card>, source: &str) -> Self {
        StaticPeers {
            cards,
            source: source.to_owned(),
        }
    }

    /// The list in `text` (cards as [`Card::parse_all`] reads them; `;`
    /// separates lines too, for an environment variable); `source` names
    /// where it came from, for errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, BootstrapError> {
        let text = text.replace(';', "\n");
        let cards = Card::parse_all(&text).map_err(|e| BootstrapError::Card {
            source: e,
            where_: source.to_string(),
        })?;
        Ok(StaticPeers {
            cards,
            source: source.to_string(),
        })
    }

    /// The list in the file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, BootstrapError> {
        let text = std::fs::read_to_string(path).map_err(|e| BootstrapError::Io {
            what: format!("reading the peer list {}", path.display()),
            source: e,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The list from [`PEERS_VAR`], else from the file [`PEERS_FILE_VAR`]
    /// names; `None` when neither is set.
    pub fn from_env() -> Option<Result<Self, BootstrapError>> {
        if let Ok(text) = std::env::var(PEERS_VAR) {
            return Some(Self::parse(&text, PEERS_VAR));
        }
        let path = std::env::var_os(PEERS_FILE_VAR)?;
        Some(Self::from_file(Path::new(&path)))
    }

    /// Every card of the list.
    pub fn cards(&self) -> &[Card] {
        &self.cards
    }

    fn find(&self, proc: ProcName) -> Option<&Card> {
        self.cards.iter().find(|c| c.proc == proc)
    }
}

impl Bootstrap for StaticPeers {
    /// Checks that `card` is what the list says for the components it
    /// names (each component publishes its own contacts): a listed process
    /// that listens elsewhere could never be reached. A process the list
    /// does not name publishes nowhere: it can reach the listed ones, and
    /// they learn of it when it connects (`btl connect`).
    fn publish(&self, card: &Card) -> Result<(), BootstrapError> {
        let Some(listed) = self.find(card.proc) else {
            return Ok(());
        };
        let differs = card.contacts.iter().any(|c| {
            let published: Vec<_> = card.contacts_of(&c.component).collect();
            let fixed: Vec<_> = listed.contacts_of(&c.component).collect();
            published != fixed
        });
        if differs {
            return Err(BootstrapError::Mismatch {
                proc: card.proc,
                published: card.to_string().replace('\n', "; "),
                listed: listed.to_string().replace('\n', "; "),
            });
        }
        Ok(())
    }

    fn lookup(&self, proc: ProcName, _timeout: Duration) -> Result<Card, BootstrapError> {
        self.find(proc)
            .cloned()
            .ok_or(BootstrapError::Unknown(proc))
    }

    fn assigned(&self, proc: ProcName) -> Option<Card> {
        self.find(proc).cloned()
    }
}

impl std::fmt::Display for StaticPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "static list ({}, {} processes)",
            self.source,
            self.cards.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_assignment_come_from_the_list() {
        let peers = StaticPeers::parse(
            "proc 3.0; tcp 127.0.0.1/8 5000; proc 3.1; tcp 127.0.0.1/8 5001",
            "test",
        )
        .expect("list");
        let one = peers
            .lookup(ProcName::new(3, 1), Duration::ZERO)
            .expect("listed");
        assert_eq!(one.contacts[0].addr.port(), 5001);
        assert_eq!(
            peers
                .assigned(ProcName::new(3, 0))
                .map(|c| c.contacts.len()),
            Some(1)
        );
        assert!(matches!(
            peers.lookup(ProcName::new(3, 2), Duration::ZERO),
            Err(BootstrapError::Unknown(_))
        ));
        assert!(peers.publish(&one).is_ok());
        assert!(
            peers.publish(&Card::new(ProcName::new(3, 9))).is_ok(),
            "unlisted"
        );
        let mut moved = one.clone();
        moved.contacts[0].addr.set_port(6000);
        let err = peers.publish(&moved).expect_err("mismatch");
        assert!(err.to_string().contains("6000"), "{err}");
        assert!(err.to_string().contains("5001"), "{err}");
    }

    #[test]
    fn a_bad_list_names_its_source() {
        let err = StaticPeers::parse("proc 3.0; tcp nowhere 1", "BTL_PEERS").expect_err("bad");
        assert!(err.to_string().contains("BTL_PEERS"), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }
}
