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
use std::sync::Arc;
use std::time::Duration;

use btl_core::btl::{Access, BtlError, MemHandle};
use btl_core::endpoint::ProcName;
use btl_core::engine::driver::{Io, Nonces};
use btl_core::engine::{ConnectRequest, LinkId, Stream};
use btl_core::time::Instant;
use btl_std::bootstrap::{Bootstrap, Card, Contact, LookupError, PeerContacts};
use btl_std::driver::heap::Buffer;
use btl_std::driver::module::{EventOf, StdEngine, Transport as ModuleTransport};
use btl_std::driver::net::{Net, Readiness, RegistryOf, Watch};
use btl_std::driver::refusals::Refusals;

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
    me: ProcName,
    bootstrap: Arc<dyn Bootstrap>,
    links: Transport<P>,
    book: AddressBook,
    peers: PeerContacts,
    card: Card,
    refusals: Refusals,
    lookup_timeout: Duration,
}

impl<P, N> Verbs<P, N>
where
    P: Provider + 'static,
    N: Net + 'static,
    N::Datagram: 'static,
{
    /// Binds the side channel, registers it with the poller, publishes
    /// this process's card and readies the queue pair transport on
    /// `provider`; each new link's handshake nonce comes from `nonces`
    /// (fresh random bytes: the job key's proof binds them).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        me: ProcName,
        setup: VerbsSetup,
        provider: P,
        bootstrap: Arc<dyn Bootstrap>,
        net: N,
        registry: &RegistryOf<N>,
        nonces: Box<dyn Nonces>,
    ) -> io::Result<Self> {
        // A bootstrap that assigns this process its place (a static list)
        // is obeyed; otherwise the setup's address, on any port it says.
        let assigned = bootstrap
            .assigned(me)
            .and_then(|card| card.contacts_of(NAME).next().map(|c| (c.addr, c.prefix)));
        let (bind_at, prefix) = assigned.unwrap_or(setup.side);
        let (mut socket, at) = net.bind(bind_at)?;
        socket.watch(registry, SIDE, false)?;
        let mut card = Card::new(me);
        card.contacts.push(Contact {
            component: NAME.to_owned(),
            addr: at,
            prefix,
        });
        bootstrap.publish(&card).map_err(io::Error::other)?;
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
            me,
            bootstrap,
            links,
            book,
            peers: PeerContacts::new(NAME),
            card,
            refusals: Refusals::default(),
            lookup_timeout: setup.lookup_timeout,
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
        let _ = self.bootstrap.withdraw(&self.card);
    }
}

impl<P, N> ModuleTransport for Verbs<P, N>
where
    P: Provider + 'static,
    N: Net + 'static,
    N::Datagram: 'static,
{
    type Net = N;
    type Framing = Stream;

    fn framing(&self) -> Stream {
        Stream
    }

    fn net(&self) -> &N {
        &self.net
    }

    fn resolve(&mut self, proc: ProcName, timeout: Duration) -> Result<(), LookupError> {
        if proc == self.me {
            return Err(LookupError::Itself(proc));
        }
        let contacts = self.peers.learn(&*self.bootstrap, proc, timeout)?;
        let at = contacts.first().map(|c| c.addr);
        match at {
            Some(at) => {
                self.book.insert(proc, at);
                Ok(())
            }
            None => Err(self.peers.no_pairing(proc)),
        }
    }

    fn lookup_timeout(&self) -> Duration {
        self.lookup_timeout
    }

    fn card(&self) -> &Card {
        &self.card
    }

    fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    fn on_event<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _registry: &RegistryOf<N>,
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
        _registry: &RegistryOf<N>,
        req: ConnectRequest,
        now: Instant,
    ) {
        Io::connect(&mut self.links, engine, req, now);
    }

    fn close<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _registry: &RegistryOf<N>,
        link: LinkId,
        now: Instant,
    ) {
        Io::close(&mut self.links, engine, link, now);
    }

    fn flush<M: Buffer>(
        &mut self,
        engine: &mut StdEngine<Self, M>,
        _registry: &RegistryOf<N>,
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
        _registry: &RegistryOf<N>,
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
        _registry: &RegistryOf<N>,
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
        let (me, bootstrap) = (opening.me, opening.bootstrap);
        btl_std::Module::open(
            NAME,
            config,
            found.pools,
            Capacities::SOCKET_MODULE,
            Duration::from_micros(50),
            Os,
            move |net, registry| {
                let nonces = Box::new(|| Os.random());
                Verbs::start(me, setup, provider, bootstrap, net, registry, nonces)
            },
        )
        .map_err(|error| OpenError::Io {
            component: NAME,
            error,
        })
    })
}
