//! Why a socket transport cannot reach a peer: the errors of a module's
//! lookups ([`Directory`](crate::driver::directory::Directory)).

use btl_core::endpoint::ProcName;

use super::BootstrapError;

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
