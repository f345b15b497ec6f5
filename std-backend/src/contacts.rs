//! The contacts a socket transport knows of its peers: each peer's
//! addresses of one component, looked up once through the bootstrap.

use std::collections::HashMap;
use std::time::Duration;

use btl_core::endpoint::ProcName;

use crate::bootstrap::{Bootstrap, BootstrapError, Contact};

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
    /// card) the first time; `None` when it has none of this component or
    /// the lookup failed (said in the log).
    pub fn learn(
        &mut self,
        bootstrap: &dyn Bootstrap,
        proc: ProcName,
        timeout: Duration,
    ) -> Option<&[Contact]> {
        if !self.known.contains_key(&proc) {
            match bootstrap.lookup(proc, timeout) {
                Ok(card) => {
                    let contacts: Vec<Contact> =
                        card.contacts_of(self.component).cloned().collect();
                    if contacts.is_empty() {
                        return None;
                    }
                    self.known.insert(proc, contacts);
                }
                Err(BootstrapError::Unknown(_)) => return None,
                Err(e) => {
                    tracing::warn!("{}: no address for {proc}: {e}", self.component);
                    return None;
                }
            }
        }
        self.get(proc)
    }

    /// The contacts of `proc`, if known.
    pub fn get(&self, proc: ProcName) -> Option<&[Contact]> {
        self.known.get(&proc).map(Vec::as_slice)
    }
}
