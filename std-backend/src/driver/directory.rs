//! What a module says of itself and knows of others, apart from its
//! sockets: its card, published through the bootstrap once its transport
//! listens and withdrawn when the module goes; its peers' contacts of its
//! component, looked up through the bootstrap or listed under a stand-in
//! name for a peer reached by address alone; and the strangers it refused.
//!
//! A [`Transport`](super::module::Transport) is the socket-level
//! operations; the module owns its `Directory` and lends it to the
//! transport's calls that pair addresses or refuse a stranger.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;

use crate::bootstrap::{Bootstrap, Card, Contact, LookupError};
use crate::driver::refusals::Refusals;

/// A module's card, its peers' contacts and its refusals of strangers.
pub struct Directory {
    me: ProcName,
    component: &'static str,
    bootstrap: Arc<dyn Bootstrap>,
    /// This process's card: its contacts once published.
    card: Card,
    published: bool,
    /// Each peer's contacts of the component, by the name they are listed
    /// under.
    known: HashMap<ProcName, Vec<Contact>>,
    lookup_timeout: Duration,
    /// Stand-in names given so far ([`ProcName::unnamed`]).
    stand_ins: u32,
    refusals: Refusals,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("card", &self.card)
            .field("known", &self.known.len())
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// The directory of process `me`'s module of `component` (`tcp`,
    /// `udp`, `verbs`), over `bootstrap`; a lookup waits up to
    /// `lookup_timeout` for a card unless told otherwise. Nothing is
    /// published yet.
    pub fn new(
        me: ProcName,
        component: &'static str,
        bootstrap: Arc<dyn Bootstrap>,
        lookup_timeout: Duration,
    ) -> Self {
        Directory {
            me,
            component,
            bootstrap,
            card: Card::new(me),
            published: false,
            known: HashMap::new(),
            lookup_timeout,
            stand_ins: 0,
            refusals: Refusals::default(),
        }
    }

    /// The bootstrap, for what it assigns this process (a static list
    /// says where each process listens).
    pub fn bootstrap(&self) -> &dyn Bootstrap {
        &*self.bootstrap
    }

    /// The process whose directory this is.
    pub fn me(&self) -> ProcName {
        self.me
    }

    /// Publishes this process's card with `contacts`, where its transport
    /// listens.
    pub fn publish(&mut self, contacts: Vec<Contact>) -> io::Result<()> {
        self.card.contacts = contacts;
        self.bootstrap
            .publish(&self.card)
            .map_err(io::Error::other)?;
        self.published = true;
        Ok(())
    }

    /// This process's card: where it listens.
    pub fn card(&self) -> &Card {
        &self.card
    }

    /// How long [`Btl::add_procs`](btl_core::btl::Btl::add_procs) waits
    /// for a card.
    pub fn lookup_timeout(&self) -> Duration {
        self.lookup_timeout
    }

    /// The contacts of `proc`, looked up (waiting up to `timeout` for its
    /// card) unless known; or why there are none.
    pub fn lookup(&mut self, proc: ProcName, timeout: Duration) -> Result<&[Contact], LookupError> {
        if proc == self.me {
            return Err(LookupError::Itself(proc));
        }
        if !self.known.contains_key(&proc) {
            let card = self.bootstrap.lookup(proc, timeout)?;
            let contacts: Vec<Contact> = card.contacts_of(self.component).cloned().collect();
            if contacts.is_empty() {
                return Err(LookupError::NoContact {
                    proc,
                    component: self.component,
                });
            }
            self.known.insert(proc, contacts);
        }
        Ok(self.contacts_of(proc).unwrap_or_default())
    }

    /// Lists `contacts`, a peer's addresses known without its name, under
    /// a new stand-in name ([`ProcName::unnamed`]): the name to reach it
    /// by until its handshake tells its own.
    pub fn list(&mut self, contacts: Vec<Contact>) -> ProcName {
        let name = ProcName::unnamed(self.stand_ins);
        self.stand_ins = self.stand_ins.wrapping_add(1);
        self.known.insert(name, contacts);
        name
    }

    /// Takes `name`'s contacts off the list: a stand-in whose peer never
    /// answered.
    pub fn unlist(&mut self, name: ProcName) {
        self.known.remove(&name);
    }

    /// The contacts of `address` (`HOST:PORT`, or an IP address and port)
    /// for this directory's component: every address the host name
    /// resolves to, each its own host (a prefix of 32 or 128 bits).
    pub fn contacts_at(&self, address: &str) -> Result<Vec<Contact>, io::Error> {
        use std::net::ToSocketAddrs;
        let contacts: Vec<Contact> = address
            .to_socket_addrs()?
            .map(|addr| Contact {
                component: self.component.to_owned(),
                addr,
                prefix: if addr.is_ipv4() { 32 } else { 128 },
            })
            .collect();
        if contacts.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the name resolves to no address",
            ));
        }
        Ok(contacts)
    }

    /// The component whose contacts it keeps (`tcp`, `udp`, `verbs`).
    pub fn component(&self) -> &'static str {
        self.component
    }

    /// The contacts listed under `name`, if known.
    pub fn contacts_of(&self, name: ProcName) -> Option<&[Contact]> {
        self.known.get(&name).map(Vec::as_slice)
    }

    /// Why `proc`, whose contacts are known, pairs with no local address.
    pub fn no_pairing(&self, proc: ProcName) -> LookupError {
        let addresses = self
            .contacts_of(proc)
            .unwrap_or_default()
            .iter()
            .map(|c| c.addr.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        LookupError::NoPairing {
            proc,
            component: self.component,
            addresses,
        }
    }

    /// The refusals of strangers so far, by reason.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// The refusals, to count one more.
    pub fn refusals_mut(&mut self) -> &mut Refusals {
        &mut self.refusals
    }
}

impl Drop for Directory {
    /// The card goes with the module: nobody is to look for this process
    /// there any more.
    fn drop(&mut self) {
        if self.published
            && let Err(e) = self.bootstrap.withdraw(&self.card)
        {
            tracing::debug!("{} {}: withdrawing its card: {e}", self.component, self.me);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::StaticPeers;

    fn contact(component: &str, at: &str) -> Contact {
        Contact {
            component: component.into(),
            addr: at.parse().expect("an address"),
            prefix: 32,
        }
    }

    #[test]
    fn a_peer_is_looked_up_once_and_a_card_without_the_component_says_so() {
        let card = |rank, component, at| {
            let mut card = Card::new(ProcName::new(1, rank));
            card.contacts.push(contact(component, at));
            card
        };
        let list = vec![
            card(1, "tcp", "127.0.0.1:7000"),
            card(2, "udp", "127.0.0.1:7001"),
        ];
        let boot = Arc::new(StaticPeers::new(list, "a test"));
        let mut dir = Directory::new(ProcName::new(1, 0), "tcp", boot, Duration::ZERO);
        let one = ProcName::new(1, 1);
        assert_eq!(dir.lookup(one, Duration::ZERO).expect("listed").len(), 1);
        assert_eq!(dir.contacts_of(one).map(<[_]>::len), Some(1));
        assert!(matches!(
            dir.lookup(ProcName::new(1, 2), Duration::ZERO),
            Err(LookupError::NoContact { .. })
        ));
        assert!(matches!(
            dir.lookup(ProcName::new(1, 0), Duration::ZERO),
            Err(LookupError::Itself(_))
        ));
    }

    #[test]
    fn each_address_listed_without_a_name_gets_its_own_stand_in() {
        let boot = Arc::new(StaticPeers::new(Vec::new(), "a test"));
        let mut dir = Directory::new(ProcName::new(1, 0), "tcp", boot, Duration::ZERO);
        let a = dir.list(vec![contact("tcp", "127.0.0.1:7000")]);
        let b = dir.list(vec![contact("tcp", "127.0.0.1:7000")]);
        assert!(a.is_unnamed() && b.is_unnamed());
        assert_ne!(a, b);
        assert_eq!(dir.contacts_of(a).map(<[_]>::len), Some(1));
    }
}
