//! Where a socket component listens: on the contacts a static peer list
//! assigns this process, or else on every address the interface selection
//! keeps, each on a port of the configured range (or any free one).

use std::io;
use std::net::SocketAddr;

use btl_core::endpoint::ProcName;

use crate::bootstrap::{Bootstrap, Contact};
use crate::transports::interfaces::{self, Selection};

/// The ports a component may listen on: `min` and the `range - 1` after
/// it, or any free one when `min` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// The lowest port, 0 for any.
    pub min: u16,
    /// How many ports from `min` on.
    pub range: u16,
}

impl Ports {
    fn candidates(self) -> Vec<u16> {
        if self.min == 0 {
            return vec![0];
        }
        (0..self.range.max(1))
            .filter_map(|k| self.min.checked_add(k))
            .collect()
    }
}

/// Binds a socket of `component` (made by `bind`, which returns it with the
/// address it is bound to) on each address `me` listens on, and returns
/// them with the contacts to publish.
pub fn listen_all<S>(
    me: ProcName,
    component: &str,
    bootstrap: &dyn Bootstrap,
    selection: &Selection,
    ports: Ports,
    bind: impl Fn(SocketAddr) -> io::Result<(S, SocketAddr)>,
) -> io::Result<Vec<(S, Contact)>> {
    if let Some(card) = bootstrap.assigned(me) {
        let assigned: Vec<Contact> = card.contacts_of(component).cloned().collect();
        if !assigned.is_empty() {
            return assigned
                .into_iter()
                .map(|c| Ok((bind(c.addr)?.0, c)))
                .collect();
        }
    }
    let all = interfaces::local_addrs()?;
    let chosen = selection.apply(&all).map_err(io::Error::other)?;
    let mut out = Vec::new();
    for addr in chosen {
        let mut last = io::Error::new(io::ErrorKind::AddrInUse, "no port in range");
        let mut bound = None;
        for port in ports.candidates() {
            match bind(SocketAddr::new(addr.ip(), port)) {
                Ok(ok) => {
                    bound = Some(ok);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let Some((socket, at)) = bound else {
            return Err(io::Error::new(
                last.kind(),
                format!(
                    "{component}: no port to listen on {} from {} on ({} ports): {last}",
                    addr.ip(),
                    ports.min,
                    ports.range
                ),
            ));
        };
        let contact = Contact {
            component: component.to_string(),
            addr: at,
            prefix: addr.net.prefix_len(),
        };
        out.push((socket, contact));
    }
    Ok(out)
}
