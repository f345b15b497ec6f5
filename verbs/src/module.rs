//! Verbs as a `btl-std` module: the queue pair [`Transport`] under
//! `btl-std`'s [`Module`], so that the module, its waiting, its progress
//! thread and its bootstrap are the sockets' own.
//!
//! The side channel is one datagram socket, published in the process's
//! card as its `verbs` contact; a peer's is found in its card when the
//! module looks it up (`add_procs`). Busy progress polls the completion
//! queue on every pass; the poller wakes a waiting module for side-channel
//! messages only, so a module that waits for a peer's SENDs should spin
//! (a real HCA's completion channel is a later step).
//!
//! [`Module`]: btl_std::driver::module::Module

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use btl_core::btl::{Access, BtlError, MemHandle};
use btl_core::endpoint::ProcName;
use btl_core::engine::driver::{Io, Nonces};
use btl_core::engine::{ConnectRequest, LinkId, Stream};
use btl_core::time::Instant;
use btl_std::bootstrap::{Bootstrap, Contact, LookupError};
use btl_std::driver::directory::Directory;
use btl_std::driver::heap::Buffer;
use btl_std::driver::module::{Context, EventOf, StdEngine, Transport as ModuleTransport};
use btl_std::driver::net::{Net, Readiness, RegistryOf, Watch};

use crate::cpc::{Cpc, Oob, OobConfig};
use crate::provider::Provider;
use crate::transport::{AddressBook, DatagramChannel, Host, Transport, VerbsConfig};

/// The component's name, as cards and parameters spell it.
pub const NAME: &str = "verbs";
/// The side channel socket's poller token.
const SIDE: usize = 0;

/// How a verbs module starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsSetup {
    /// Queue pairs, buffers and their timers.
    pub config: VerbsConfig,
    /// The CPC's handshake timeout and bound.
    pub oob: OobConfig,
    /// Where the side channel's socket binds (port 0: any), and the prefix
    /// length its card gives the address.
    pub side: (SocketAddr, u8),
    /// How long a lookup waits for a peer's card.
    pub lookup_timeout: Duration,
}

/// The verbs side of a module, on provider `P` and network `N`.
pub struct Verbs<P: Provider, N: Net> {
    net: N,
    links: Transport<P>,
    book: AddressBook,
    /// Where its side channel listens.
    side: Contact,
}

impl<P, N> Verbs<P, N>
where
    P: Provider + 'static,
    N: Net + 'static,
    N::Datagram: Send + 'static,
{
    /// Binds the side channel (where `bootstrap` assigns `me`, if it
    /// does), registers it with the poller and readies the queue pair
    /// transport on `provider`; each new link's handshake nonce comes from
    /// `nonces` (fresh random bytes: the job key's proof binds them).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        me: ProcName,
        setup: VerbsSetup,
        provider: P,
        bootstrap: &dyn Bootstrap,
        net: N,
        registry: &RegistryOf<N>,
        nonces: Box<dyn Nonces + Send>,
    ) -> io::Result<Self> {
        // A bootstrap that assigns this process its place (a static list)
        // is obeyed; otherwise the setup's address, on any port it says.
        let assigned = bootstrap
            .assigned(me)
            .and_then(|card| card.contacts_of(NAME).next().map(|c| (c.addr, c.prefix)));
        let (bind_at, prefix) = assigned.unwrap_or(setup.side);
        let (mut socket, at) = net.bind(bind_at)?;
        socket.watch(registry, SIDE, false)?;
        let side = Contact {
            component: NAME.to_owned(),
            addr: at,
            prefix,
        };
        let book = AddressBook::new();
        let mut cpc = Oob::new(setup.oob);
        let params = btl_core::mca::Registry::<1>::new();
        let [a, b, c, d, e, f, g, h, ..] = net.random();
        let incarnation = u64::from_le_bytes([a, b, c, d, e, f, g, h]);
        <Oob as Cpc<Host<P>>>::init(&mut cpc, &params, me, incarnation)
            .map_err(|e| io::Error::other(e.reason().to_owned()))?;
        let links = Transport::new(
            provider,
            setup.config,
            Box::new(cpc),
            Box::new(DatagramChannel::new(socket, me, book.clone())),
            nonces,
        )
        .map_err(io::Error::other)?;
        Ok(Verbs {
            net,
            links,
            book,
            side,
        })
    }

    /// The queue pair transport, to inspect it.
    pub fn links(&self) -> &Transport<P> {
        &self.links
    }
}

impl<P: Provider, N: Net> Drop for Verbs<P, N> {
    fn drop(&mut self) {
        self.links.finalize();
    }
}

impl<P, N> ModuleTransport for Verbs<P, N>
where
    P: Provider + 'static,
    N: Net + 'static,
    N::Datagram: Send + 'static,
{
    type Net = N;
    type Framing = Stream;

    fn framing(&self) -> Stream {
        Stream
    }

    fn net(&self) -> &N {
        &self.net
    }

    fn contacts(&self) -> Vec<Contact> {
        vec![self.side.clone()]
    }

    /// Its side channel's address goes in the address book.
    fn pairs_with(&mut self, directory: &Directory, name: ProcName) -> Result<(), LookupError> {
        match directory.contacts_of(name).and_then(<[Contact]>::first) {
            Some(contact) => {
                self.book.insert(name, contact.addr);
                Ok(())
            }
            None => Err(directory.no_pairing(name)),
        }
    }

    fn on_event<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        event: &EventOf<N>,
        now: Instant,
    ) {
        if event.token() == SIDE && event.is_readable() {
            self.links.poll(engine, now);
        }
    }

    fn connect<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        req: ConnectRequest,
        now: Instant,
    ) {
        Io::connect(&mut self.links, engine, req, now);
    }

    fn close<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        link: LinkId,
        now: Instant,
    ) {
        Io::close(&mut self.links, engine, link, now);
    }

    fn flush<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        now: Instant,
    ) {
        self.links.poll(engine, now);
        Io::write(&mut self.links, engine, now);
    }

    fn few_sockets(&self) -> bool {
        true
    }

    /// Registers the region with the device too, so that puts and gets
    /// from it are RDMA; a region the device refuses goes in packets.
    fn registered<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        handle: MemHandle,
        access: Access,
    ) {
        if let Err(e) = self.links.register(engine, handle, access) {
            tracing::debug!(
                "verbs: a region stays off the device ({e}): its transfers go in packets"
            );
        }
    }

    fn deregister<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        handle: MemHandle,
    ) -> Result<M, BtlError> {
        self.links.deregister(engine, handle)
    }

    /// Nothing: the side channel and the completions are read by every
    /// flush, each pass, up to their bounds.
    fn read_ready<M: Buffer>(
        &mut self,
        _engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        _now: Instant,
    ) -> bool {
        false
    }

    fn left_unread(&self) -> bool {
        self.links.side_channel_left()
    }

    fn read_directly<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _cx: &mut Context<'_, N>,
        now: Instant,
    ) -> bool {
        self.links.poll(engine, now)
    }
}

/// A verbs module on a real HCA, over the OS's sockets.
#[cfg(feature = "rdma")]
pub type RdmaModule = btl_std::Module<Verbs<crate::rdma::RdmaProvider, btl_std::driver::net::Os>>;

/// Opens a verbs module on a real HCA as `builder` says: the parameters
/// (`btl_verbs_*`) from its sources, the device and port the component
/// finds. The side channel binds to the loopback for a run on one host
/// ([`ModuleBuilder::on_loopback`](btl_std::ModuleBuilder::on_loopback)),
/// else where a static peer list assigns this process its `verbs`
/// contact.
#[cfg(feature = "rdma")]
pub fn open(builder: btl_std::ModuleBuilder) -> Result<RdmaModule, btl_std::OpenError> {
    open_as(builder)
}

/// [`open`], holding registered memory as buffers of type `M`.
#[cfg(feature = "rdma")]
fn open_as<M: Buffer>(
    builder: btl_std::ModuleBuilder,
) -> Result<
    btl_std::Module<Verbs<crate::rdma::RdmaProvider, btl_std::driver::net::Os>, M>,
    btl_std::OpenError,
> {
    use btl_core::engine::Capacities;
    use btl_core::engine::config::EngineConfig;
    use btl_std::OpenError;
    use btl_std::driver::net::Os;

    use crate::component::VerbsComponent;
    use crate::rdma::RdmaProvider;

    let na = |reason: String| OpenError::NotAvailable {
        component: NAME,
        reason,
    };
    builder.open_with(&mut VerbsComponent::default(), |found, opening| {
        let assigned = opening
            .bootstrap
            .assigned(opening.me)
            .is_some_and(|card| card.contacts_of(NAME).next().is_some());
        if !opening.loopback && !assigned {
            return Err(na(
                "across hosts, the static peer list (BTL_PEERS) must give each process a verbs \
                 contact for its side channel"
                    .to_owned(),
            ));
        }
        let provider =
            RdmaProvider::open(Some(&found.found.device)).map_err(|e| na(e.to_string()))?;
        let setup = VerbsSetup {
            config: found.config,
            oob: found.oob,
            side: (SocketAddr::from(([127, 0, 0, 1], 0)), 8),
            lookup_timeout: Duration::from_secs(30),
        };
        let config = opening.engine_config(NAME, EngineConfig::new(opening.me))?;
        let me = opening.me;
        let directory = Directory::new(me, NAME, opening.bootstrap, setup.lookup_timeout);
        btl_std::Module::open(
            NAME,
            config,
            found.pools,
            Capacities::SOCKET_MODULE,
            Duration::from_micros(50),
            Os,
            directory,
            move |net, registry, directory| {
                let nonces = Box::new(|| Os.random());
                let bootstrap = directory.bootstrap();
                Verbs::start(me, setup, provider, bootstrap, net, registry, nonces)
            },
        )
        .map_err(|error| OpenError::Io {
            component: NAME,
            error,
        })
    })
}

/// The verbs component on a real HCA, offered to the `Bml`s a builder
/// opens ([`ModuleBuilder::offer`](btl_std::ModuleBuilder::offer)): `btl`
/// lists select it as `verbs`, and it carries the peers it reaches before
/// `tcp` and `udp` do (exclusivity [`Exclusivity::DEFAULT`], as Open MPI's
/// openib), after `self` and `sm`. A host without an HCA leaves it out,
/// saying why; a list that names it then fails.
///
/// [`Exclusivity::DEFAULT`]: btl_core::mca::Exclusivity::DEFAULT
#[cfg(feature = "rdma")]
#[derive(Debug, Clone, Copy, Default)]
pub struct VerbsOffer;

#[cfg(feature = "rdma")]
impl btl_std::bml::Offered for VerbsOffer {
    type Transport = Verbs<crate::rdma::RdmaProvider, btl_std::driver::net::Os>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn exclusivity(&self) -> btl_core::mca::Exclusivity {
        btl_core::mca::Exclusivity::DEFAULT
    }

    fn open<M: Buffer>(
        &self,
        builder: btl_std::ModuleBuilder,
    ) -> Result<btl_std::Module<Self::Transport, M>, btl_std::OpenError>
    where
        btl_std::Module<Self::Transport, M>: Send,
    {
        open_as(builder)
    }
}
