//! Components of other crates that a [`Bml`](super::Bml) holds beside its
//! own (the verbs one, in `btl-verbs`, which depends on this crate): what
//! a builder is offered with [`ModuleBuilder::offer`], and how the `Bml`
//! opens it.

use std::sync::Arc;

use btl_core::mca::{Candidate, Exclusivity};

use super::{Member, Shared};
use crate::builder::{ModuleBuilder, OpenError};
use crate::driver::heap::Buffer;
use crate::driver::module::{Module, Transport};

/// A component of another crate whose module is a [`Module`] over its own
/// transport, as the `Bml`'s selection sees it.
pub trait Offered: Send + Sync + 'static {
    /// The transport of its module.
    type Transport: Transport + Send + 'static;

    /// Its name, as the `btl` list spells it.
    fn name(&self) -> &'static str;

    /// Its exclusivity: a `Bml` routes each peer to the module of highest
    /// exclusivity that reaches it (`verbs`: [`Exclusivity::DEFAULT`],
    /// above the networks' `tcp` and `udp`).
    fn exclusivity(&self) -> Exclusivity;

    /// Opens its module as `builder` says (the process, the `Bml`'s
    /// bootstrap and key, the parameters' sources), holding registered
    /// memory as buffers of type `M`; [`OpenError::NotAvailable`] when it
    /// cannot run here.
    fn open<M: Buffer>(
        &self,
        builder: ModuleBuilder,
    ) -> Result<Module<Self::Transport, M>, OpenError>
    where
        Module<Self::Transport, M>: Send;
}

/// How a `Bml` opens an offered component's module.
type Opener = dyn Fn(ModuleBuilder) -> Result<Box<dyn Member>, OpenError> + Send + Sync;

/// A component offered to the `Bml`s a builder opens.
#[derive(Clone)]
pub struct Offer {
    name: &'static str,
    exclusivity: Exclusivity,
    open: Arc<Opener>,
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offer")
            .field("name", &self.name)
            .field("exclusivity", &self.exclusivity)
            .finish_non_exhaustive()
    }
}

impl Offer {
    /// The component `offered`.
    // The bound names the `Bml`'s region type, which no caller names: it
    // holds for every transport whose module may move between threads.
    #[allow(private_bounds)]
    pub fn new<O: Offered>(offered: O) -> Self
    where
        Module<O::Transport, Shared>: Send,
    {
        let (name, exclusivity) = (offered.name(), offered.exclusivity());
        Offer {
            name,
            exclusivity,
            open: Arc::new(move |builder| {
                let module: Module<O::Transport, Shared> = offered.open(builder)?;
                Ok(Box::new(module) as Box<dyn Member>)
            }),
        }
    }

    /// A component this build cannot open, for `reason` (verbs without
    /// RDMA support): the selection lists it, and a list that names it
    /// fails with the reason.
    pub fn unavailable(name: &'static str, exclusivity: Exclusivity, reason: &'static str) -> Self {
        Offer {
            name,
            exclusivity,
            open: Arc::new(move |_| {
                Err(OpenError::NotAvailable {
                    component: name,
                    reason: reason.to_owned(),
                })
            }),
        }
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// How the selection ranks it: below the `Bml`'s own components of
    /// equal exclusivity.
    pub(crate) fn candidate(&self) -> Candidate<'static> {
        Candidate {
            name: self.name,
            exclusivity: self.exclusivity,
            priority: -1,
        }
    }

    /// Opens its module from `builder`.
    pub(crate) fn open(&self, builder: ModuleBuilder) -> Result<Box<dyn Member>, OpenError> {
        (self.open)(builder)
    }
}
