//! The contacts a socket transport knows of its peers: each peer's
//! addresses of one component, looked up through the bootstrap, and why a
//! peer cannot be reached when it cannot.

use std::collections::HashMap;
use std::time::Duration;

use btl_core::endpoint::ProcName;

use super::{Bootstrap, BootstrapError, Contact};

/// Why a socket transport cannot reach a process.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The bootstrap has no card for it (not published in time, not in a
    /// static list, unreadable).
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// Its card names no address of this component.
    #[error("process {proc} publishes no {component} address")]
    NoContact {
        /// The process.
        proc: ProcName,
        /// The component (`tcp`, `udp`).
        component: &'static str,
    },
    /// None of its addresses pairs with one of this process (another
    /// address family, or interfaces left out on one side).
    #[error("no local {component} address pairs with any of process {proc}'s: {addresses}")]
    NoPairing {
        /// The process.
        proc: ProcName,
        /// The component.
        component: &'static str,
        /// Its addresses.
        addresses: String,
    },
    /// It is this process, which a socket module does not reach.
    #[error("process {0} is this process")]
    Itself(ProcName),
}

/// Peers' contacts of one component.
#[derive(Debug)]
pub struct PeerContacts {
    component: &'static str,
    known: HashMap<ProcName, Vec<Contact>>,
}

impl PeerContacts {
    /// None known yet, for `component` (`tcp`, `udp`).
    pub fn new(component: &'static str) -> Self {
        PeerContacts {
            component,
            known: HashMap::new(),
        }
    }

    /// The contacts of `proc`, looked up (waiting up to `timeout` for its
    /// card) until a lookup finds some; or why there are none.
    pub fn learn(
        &mut self,
        bootstrap: &dyn Bootstrap,
        proc: ProcName,
        timeout: Duration,
    ) -> Result<&[Contact], LookupError> {
        if !self.known.contains_key(&proc) {
            let card = bootstrap.lookup(proc, timeout)?;
            let contacts: Vec<Contact> = card.contacts_of(self.component).cloned().collect();
            if contacts.is_empty() {
                return Err(LookupError::NoContact {
                    proc,
                    component: self.component,
                });
            }
            self.known.insert(proc, contacts);
        }
        Ok(self.get(proc).unwrap_or_default())
    }

    /// The contacts of `proc`, if known.
    pub fn get(&self, proc: ProcName) -> Option<&[Contact]> {
        self.known.get(&proc).map(Vec::as_slice)
    }

    /// Why `proc`, whose contacts are known, pairs with no local address.
    pub fn no_pairing(&self, proc: ProcName) -> LookupError {
        let addresses = self
            .get(proc)
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
}
