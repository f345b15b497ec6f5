//! One card for a process whose several modules each publish their part
//! (a [`Bml`](crate::Bml)'s `tcp` its addresses, its `sm` its segment):
//! each part is added to the process's card, and the whole card goes to
//! the bootstrap once every module has added its part
//! ([`Bootstrap::published`]), so that no module's card hides another's
//! and no peer reads a card that lacks a part.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use btl_core::endpoint::ProcName;

use super::{Bootstrap, BootstrapError, Card};

/// A bootstrap that publishes the union of what its users publish.
pub struct OneCard {
    inner: Arc<dyn Bootstrap>,
    card: Mutex<Held>,
}

/// The process's card so far, and whether it has gone out.
#[derive(Default)]
struct Held {
    card: Option<Card>,
    out: bool,
}

impl OneCard {
    /// Publishes through `inner`.
    pub fn new(inner: Arc<dyn Bootstrap>) -> Self {
        OneCard {
            inner,
            card: Mutex::new(Held::default()),
        }
    }
}

impl std::fmt::Debug for OneCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneCard").finish_non_exhaustive()
    }
}

impl Bootstrap for OneCard {
    /// Adds `card`'s contacts and segment to the process's card; publishes
    /// the whole if it has gone out already.
    fn publish(&self, card: &Card) -> Result<(), BootstrapError> {
        let mut held = self.card.lock().unwrap_or_else(PoisonError::into_inner);
        let out = held.out;
        let whole = held.card.get_or_insert_with(|| Card::new(card.proc));
        for contact in &card.contacts {
            if !whole.contacts.contains(contact) {
                whole.contacts.push(contact.clone());
            }
        }
        if card.segment.is_some() {
            whole.segment.clone_from(&card.segment);
        }
        if out {
            self.inner.publish(whole)
        } else {
            Ok(())
        }
    }

    /// Publishes the whole card: every module has added its part.
    fn published(&self) -> Result<(), BootstrapError> {
        let mut held = self.card.lock().unwrap_or_else(PoisonError::into_inner);
        held.out = true;
        if let Some(whole) = &held.card {
            self.inner.publish(whole)?;
        }
        self.inner.published()
    }

    fn lookup(&self, proc: ProcName, timeout: Duration) -> Result<Card, BootstrapError> {
        self.inner.lookup(proc, timeout)
    }

    /// Takes `card`'s part out of the process's card: what is left is
    /// published again, and the card withdrawn once nothing is left.
    fn withdraw(&self, card: &Card) -> Result<(), BootstrapError> {
        let mut held = self.card.lock().unwrap_or_else(PoisonError::into_inner);
        let out = held.out;
        let Some(whole) = held.card.as_mut() else {
            return if out {
                self.inner.withdraw(card)
            } else {
                Ok(())
            };
        };
        let published = whole.clone();
        whole.contacts.retain(|c| !card.contacts.contains(c));
        if card.segment.is_some() && whole.segment == card.segment {
            whole.segment = None;
        }
        if whole.contacts.is_empty() && whole.segment.is_none() {
            held.card = None;
            // The card as it was published, which the bootstrap compares
            // with what it holds.
            if out {
                self.inner.withdraw(&published)
            } else {
                Ok(())
            }
        } else if out {
            self.inner.publish(whole)
        } else {
            Ok(())
        }
    }

    fn assigned(&self, proc: ProcName) -> Option<Card> {
        self.inner.assigned(proc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{Contact, SegmentContact, SharedDir};

    #[test]
    fn each_module_adds_its_part_and_takes_it_back() {
        let dir = std::env::temp_dir().join(format!("btl-one-card-{}", std::process::id()));
        let shared: Arc<dyn Bootstrap> = Arc::new(SharedDir::new(&dir));
        let one = OneCard::new(Arc::clone(&shared));
        let me = ProcName::new(4, 1);
        let mut tcp = Card::new(me);
        tcp.contacts.push(Contact {
            component: "tcp".into(),
            addr: "127.0.0.1:4000".parse().expect("address"),
            prefix: 8,
        });
        let mut sm = Card::new(me);
        sm.segment = Some(SegmentContact {
            segment: "btl-sm-4-1".into(),
            host: "h".into(),
            pid: 7,
        });
        one.publish(&tcp).expect("tcp");
        one.publish(&sm).expect("sm");
        assert!(
            shared.lookup(me, Duration::from_millis(20)).is_err(),
            "no part goes out before the whole card"
        );
        one.published().expect("out");
        let seen = shared.lookup(me, Duration::ZERO).expect("published");
        assert_eq!(seen.contacts, tcp.contacts, "the tcp part stays");
        assert_eq!(seen.segment, sm.segment, "beside the sm part");

        one.withdraw(&tcp).expect("tcp withdrawn");
        let seen = shared.lookup(me, Duration::ZERO).expect("still published");
        assert!(seen.contacts.is_empty());
        assert_eq!(seen.segment, sm.segment);
        one.withdraw(&sm).expect("sm withdrawn");
        assert!(
            shared.lookup(me, Duration::from_millis(20)).is_err(),
            "nothing left: the card is gone"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
