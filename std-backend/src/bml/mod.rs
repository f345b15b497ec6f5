//! The BTL multiplexer (Open MPI's BML): one [`Btl`] over every selected
//! module, each peer routed to the best module that reaches it.
//!
//! A service opens it with [`ModuleBuilder::open`](crate::ModuleBuilder::open),
//! which reads the framework parameter `btl` (`self,sm,tcp`, `^udp`),
//! opens the components it names, and orders them by exclusivity: `self`
//! for this process, `sm` for the processes of this host, then the
//! networks (`tcp`, then `udp`). [`Bml::reach`] and `add_procs` ask each
//! module in that order and route the peer to the first that reaches it,
//! so a peer on this host goes over shared memory and one elsewhere over
//! TCP, with no choice made in the service's code.
//!
//! Everything else is the chosen module's: a send, put or get to a peer is
//! the module's own call, its events are the module's events, and a peer
//! lost is reported once, by the one module that carried it. What a peer
//! sends on its own (a client that connects) arrives on whichever module
//! it came by. A registered region is registered with every module, so a
//! peer reaches it over whichever module carries that peer, without a copy.
//!
//! Endpoints name their module: the `Bml`'s endpoint is the module's with
//! the module's place in bits 13 to 15, which every module of btl-std
//! leaves clear (their tables hold fewer than 8,192 peers). Operation ids
//! are the module's shifted left by 3 with the place below.

mod member;
mod offer;
#[allow(unsafe_code)]
mod region;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use btl_core::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, ErrorEvent, Event, Incoming, MemError, MemHandle,
    MemSlice, OpId, RegisterError, RemoteSlice, SendError, SendStatus, Tag, Undelivered,
};
use btl_core::desc::{DescFlags, Descriptor, Order};
use btl_core::endpoint::{EndpointError, EndpointId, ProcName, Reachability};
use btl_core::engine::Usage;
use btl_core::mca::{Candidate, Exclusivity, ListValue, select};
use btl_core::pool::{PoolSets, PoolsRef};

pub(crate) use member::Member;
pub use offer::{Offer, Offered};
pub(crate) use region::Shared;

use crate::ReachError;
use crate::bootstrap::Contact;
use crate::driver::module::{Unflushed, WaitError, wait_for_event};
use crate::metrics::{Observed, Snapshot};

/// The most modules one `Bml` holds: its place must fit in 3 bits.
pub const MAX_MEMBERS: usize = 8;

/// The bits of an endpoint that name its module.
const PLACE_SHIFT: u32 = 13;
const PLACE_MASK: u32 = 0b111 << PLACE_SHIFT;

/// A module with no peer is served, and its events polled, only every
/// this many passes (for the peers that come to it on their own): an idle
/// TCP module costs a system call per pass that a peer over shared memory
/// would pay for nothing.
const IDLE_EVERY: u32 = 256;

/// What became of one component when a `Bml` was opened: `btl info` and
/// [`Bml::selection`] list these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The component.
    pub component: String,
    /// Selected and opened, or why not.
    pub outcome: Outcome,
}

/// Whether a component runs in a `Bml`, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Opened; its exclusivity ranks it among the others.
    Selected {
        /// Its exclusivity.
        exclusivity: Exclusivity,
    },
    /// The `btl` parameter leaves it out.
    Excluded {
        /// The parameter's value, as read.
        by: String,
    },
    /// Not named, and not used unless named (`udp`, which reaches the
    /// peers `tcp` does).
    OnlyIfNamed,
    /// It cannot run here.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Selected { exclusivity } => write!(f, "selected (exclusivity {exclusivity})"),
            Outcome::Excluded { by } => write!(f, "left out by btl={by}"),
            Outcome::OnlyIfNamed => f.write_str("not named in btl (used only when named)"),
            Outcome::Unavailable { reason } => write!(f, "unavailable: {reason}"),
        }
    }
}

/// A component a [`Bml`] can open, as its selection sees it.
struct Selectable {
    candidate: Candidate<'static>,
    /// Whether an empty `btl` list takes it.
    by_default: bool,
}

const fn own(name: &'static str, exclusivity: Exclusivity, priority: i32) -> Selectable {
    Selectable {
        candidate: Candidate {
            name,
            exclusivity,
            priority,
        },
        by_default: true,
    }
}

/// The components a [`Bml`] opens; `select` orders them by the
/// exclusivities and priorities they declare.
const BML_COMPONENTS: [Selectable; 4] = [
    own("self", Exclusivity::HIGH, 0),
    own("sm", Exclusivity::SHARED_MEMORY, 0),
    own("tcp", Exclusivity::LOW.plus(100), 1),
    // It reaches the peers tcp reaches, after it: opened only when named.
    Selectable {
        by_default: false,
        ..own("udp", Exclusivity::LOW.plus(100), 0)
    },
];

/// What the `btl` list `list` makes of each component a [`Bml`] opens
/// (its own, and those of other crates `offers` adds): those it selects
/// first, best first (`Selected`, to be opened), then the others and why
/// not. A name no component has is refused, with the names there are; so
/// is a list that mixes included and excluded names. Whether a selected
/// component can run here is known once it is opened
/// ([`ModuleBuilder::open`](crate::ModuleBuilder::open)).
pub fn choose(list: &ListValue, offers: &[Offer]) -> Result<Vec<Choice>, String> {
    let offered = offers.iter().map(|o| Selectable {
        candidate: o.candidate(),
        by_default: true,
    });
    let components: Vec<Selectable> = BML_COMPONENTS.into_iter().chain(offered).collect();
    let candidates: Vec<Candidate<'static>> = components.iter().map(|o| o.candidate).collect();
    let names: Vec<&str> = candidates.iter().map(|c| c.name).collect();
    let unknown: Vec<&str> = list.items().filter(|item| !names.contains(item)).collect();
    if !unknown.is_empty() {
        return Err(format!(
            "no component {} among those a Bml opens: they are {}",
            unknown.join(", "),
            names.join(", ")
        ));
    }
    let selection = select::<MAX_MEMBERS>(list, &candidates).map_err(|e| e.to_string())?;
    let by = list.to_string();
    // The selected best first, as `select` orders them, then the rest.
    let chosen = selection.indices();
    let rest = (0..components.len()).filter(|i| !chosen.contains(i));
    Ok(chosen
        .iter()
        .copied()
        .chain(rest)
        .map(|i| {
            let offer = &components[i];
            let outcome = if !chosen.contains(&i) {
                Outcome::Excluded { by: by.clone() }
            } else if list.is_empty() && !offer.by_default {
                Outcome::OnlyIfNamed
            } else {
                Outcome::Selected {
                    exclusivity: offer.candidate.exclusivity,
                }
            };
            Choice {
                component: offer.candidate.name.into(),
                outcome,
            }
        })
        .collect())
}

/// The modules of a `Bml`, best first.
struct Members(Vec<Box<dyn Member>>);

impl PoolSets for Members {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn set(&self, i: usize) -> Option<PoolsRef<'_>> {
        self.0.get(i).map(|m| m.pools())
    }
}

/// Every selected module under one [`Btl`], each peer routed to the best
/// that reaches it. See the [module documentation](self).
pub struct Bml {
    members: Members,
    /// Whether each module has peers, looked at every [`IDLE_EVERY`] passes.
    busy: Vec<bool>,
    attributes: Attributes,
    choices: Vec<Choice>,
    passes: u32,
    /// The module whose events are polled first.
    next: usize,
}

impl Observed for Bml {
    fn snapshots(&self, out: &mut Vec<Snapshot>) {
        out.extend(self.members.0.iter().filter_map(|m| m.snapshot()));
    }
}

impl std::fmt::Debug for Bml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bml")
            .field("modules", &self.names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A module's endpoint as the `Bml` names it.
fn outer(place: usize, inner: EndpointId) -> EndpointId {
    EndpointId(inner.0 | (place as u32) << PLACE_SHIFT)
}

/// A module's operation as the `Bml` names it.
fn outer_op(place: usize, op: OpId) -> OpId {
    OpId(op.0 << 3 | place as u64)
}

/// The event of module `place` as the `Bml` hands it out.
fn outer_event(place: usize, event: Event<'_>) -> Event<'_> {
    let ep = |e| outer(place, e);
    match event {
        Event::Received(m) => Event::Received(Incoming {
            from: ep(m.from),
            ..m
        }),
        Event::SendComplete {
            endpoint,
            tag,
            desc,
            result,
        } => Event::SendComplete {
            endpoint: ep(endpoint),
            tag,
            desc,
            result,
        },
        Event::PutComplete { op, ctx, result } => Event::PutComplete {
            op: outer_op(place, op),
            ctx,
            result,
        },
        Event::GetComplete { op, ctx, result } => Event::GetComplete {
            op: outer_op(place, op),
            ctx,
            result,
        },
        Event::PutArrived { from, slice, imm } => Event::PutArrived {
            from: ep(from),
            slice,
            imm,
        },
        Event::PeerLeft { endpoint } => Event::PeerLeft {
            endpoint: ep(endpoint),
        },
        Event::Room { endpoint } => Event::Room {
            endpoint: ep(endpoint),
        },
        Event::Error(e) => Event::Error(ErrorEvent {
            endpoint: e.endpoint.map(ep),
            ..e
        }),
    }
}

/// The attributes every module keeps: the narrowest limits, the flags all
/// share.
fn common(members: &[Box<dyn Member>]) -> Attributes {
    let all = || members.iter().map(|m| m.attributes());
    let min_usize = |f: fn(&Attributes) -> usize| all().map(f).min().unwrap_or(0);
    let min_u64 = |f: fn(&Attributes) -> u64| all().map(f).min().unwrap_or(0);
    Attributes {
        name: "bml",
        eager_limit: min_usize(|a| a.eager_limit),
        max_send_size: min_usize(|a| a.max_send_size),
        rdma_pipeline_send_length: min_usize(|a| a.rdma_pipeline_send_length),
        rdma_pipeline_frag_size: min_usize(|a| a.rdma_pipeline_frag_size),
        put_limit: min_u64(|a| a.put_limit),
        put_alignment: all().map(|a| a.put_alignment).max().unwrap_or(0),
        get_limit: min_u64(|a| a.get_limit),
        get_alignment: all().map(|a| a.get_alignment).max().unwrap_or(0),
        exclusivity: all()
            .map(|a| a.exclusivity)
            .max()
            .unwrap_or(Exclusivity::LOW),
        latency_us: all().map(|a| a.latency_us).min().unwrap_or(0),
        bandwidth_mbps: all().map(|a| a.bandwidth_mbps).max().unwrap_or(0),
        flags: all().fold(BtlFlags::all(), |f, a| f & a.flags),
        registration_handle_size: min_usize(|a| a.registration_handle_size),
    }
}

impl Bml {
    /// A `Bml` over `members`, best first, with the `choices` that made
    /// them.
    pub(crate) fn new(members: Vec<Box<dyn Member>>, choices: Vec<Choice>) -> Self {
        assert!(
            members.len() <= MAX_MEMBERS,
            "at most {MAX_MEMBERS} modules"
        );
        let attributes = common(&members);
        Bml {
            busy: vec![true; members.len()],
            members: Members(members),
            attributes,
            choices,
            passes: 0,
            next: 0,
        }
    }

    /// What became of every component: selected (best first), or why not.
    pub fn selection(&self) -> &[Choice] {
        &self.choices
    }

    /// The names of the modules, best first.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.members.0.iter().map(|m| m.attributes().name)
    }

    /// Where its network modules listen, best module first: what a server
    /// tells its clients.
    pub fn contacts(&self) -> Vec<Contact> {
        self.members
            .0
            .iter()
            .filter_map(|m| m.directory())
            .flat_map(|d| d.card().contacts.iter().cloned())
            .collect()
    }

    /// How much of their engines' storage its modules use, summed (a
    /// region registered with the `Bml` counts once per module that holds
    /// an engine).
    pub fn usage(&self) -> Usage {
        let mut sum = Usage::default();
        for u in self.members.0.iter().filter_map(|m| m.usage()) {
            sum.peers += u.peers;
            sum.links += u.links;
            sum.handshaking += u.handshaking;
            sum.registrations += u.registrations;
            sum.operations += u.operations;
            sum.events += u.events;
            sum.events_owed += u.events_owed;
        }
        sum
    }

    /// The refusals of strangers by its network modules so far, by
    /// reason.
    pub fn refusals(&self) -> BTreeMap<&'static str, u64> {
        let mut sum = BTreeMap::new();
        for d in self.members.0.iter().filter_map(|m| m.directory()) {
            for (reason, n) in d.refusals().by_reason() {
                *sum.entry(*reason).or_insert(0) += n;
            }
        }
        sum
    }

    /// The name of the module that carries `endpoint` (`self`, `sm`,
    /// `tcp`), or `None` for an endpoint no module gave.
    pub fn carrier(&self, endpoint: EndpointId) -> Option<&'static str> {
        self.route(endpoint)
            .ok()
            .map(|(place, _)| self.members.0[place].attributes().name)
    }

    /// The module of `endpoint` and its own endpoint.
    fn route(&self, endpoint: EndpointId) -> Result<(usize, EndpointId), BtlError> {
        let place = ((endpoint.0 & PLACE_MASK) >> PLACE_SHIFT) as usize;
        if place < self.members.0.len() {
            Ok((place, EndpointId(endpoint.0 & !PLACE_MASK)))
        } else {
            Err(BtlError::Endpoint(EndpointError::Unknown(endpoint)))
        }
    }

    /// The module of `endpoint`, and its own endpoint, to call.
    fn member(&mut self, endpoint: EndpointId) -> Result<(&mut dyn Member, EndpointId), BtlError> {
        let (place, inner) = self.route(endpoint)?;
        Ok((self.members.0[place].as_mut(), inner))
    }

    /// Starts a put or get on the module of `endpoint` (`start` given the
    /// module and its own endpoint): its id as the `Bml` names it.
    fn operation(
        &mut self,
        endpoint: EndpointId,
        start: impl FnOnce(&mut dyn Member, EndpointId) -> Result<OpId, BtlError>,
    ) -> Result<OpId, BtlError> {
        let (place, inner) = self.route(endpoint)?;
        start(self.members.0[place].as_mut(), inner).map(|op| outer_op(place, op))
    }

    /// `inner` of module `place`, unless it has bits that name a module
    /// (a module with more peers than a `Bml` can number): then it is
    /// given back and refused.
    fn adopt(&mut self, place: usize, inner: EndpointId) -> Result<EndpointId, BtlError> {
        if inner.0 & PLACE_MASK != 0 {
            let _ = self.members.0[place].del_procs(&[inner]);
            return Err(BtlError::OutOfResource);
        }
        self.busy[place] = true;
        Ok(outer(place, inner))
    }

    /// Joins `proc` over the best module that reaches it, each module
    /// waiting up to what is left of `timeout`: its endpoint, or what each
    /// module said.
    pub fn reach(&mut self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError> {
        let start = Instant::now();
        let mut said = Vec::new();
        for place in 0..self.members.0.len() {
            let left = timeout.saturating_sub(start.elapsed());
            match self.members.0[place].reach(proc, left) {
                Ok(inner) => {
                    return self
                        .adopt(place, inner)
                        .map_err(|error| ReachError::Btl { proc, error });
                }
                Err(e) => said.push(format!("{}: {e}", self.members.0[place].attributes().name)),
            }
        }
        Err(ReachError::NoModule {
            proc,
            said: said.join("; "),
        })
    }

    /// Reaches the process listening at `address` (`HOST:PORT`) over the
    /// first network module selected (`tcp`, else `udp`), knowing nothing
    /// else of it, as [`Module::connect_to`](crate::Module::connect_to)
    /// does: its endpoint and the name its handshake told.
    pub fn connect_to(
        &mut self,
        address: &str,
        timeout: Duration,
    ) -> Result<(EndpointId, ProcName), ReachError> {
        for place in 0..self.members.0.len() {
            if let Some(reached) = self.members.0[place].connect_to(address, timeout) {
                let (inner, proc) = reached?;
                let ep = self
                    .adopt(place, inner)
                    .map_err(|error| ReachError::Btl { proc, error })?;
                return Ok((ep, proc));
            }
        }
        let names: Vec<&str> = self.names().collect();
        Err(ReachError::Address {
            address: address.to_owned(),
            component: "network",
            reason: format!(
                "none of the modules selected ({}) reaches a process by address: select tcp or udp",
                names.join(",")
            ),
        })
    }

    /// Waits up to `timeout` for an event: serves the modules, then waits
    /// in the one that has peers, or in each in turn, a slice of a
    /// millisecond at most, when several or none have (a server waiting
    /// for its first peer waits in every listener). Returns how many
    /// events are ready.
    pub fn wait(&mut self, timeout: Duration) -> usize {
        let start = Instant::now();
        loop {
            let ready = self.progress();
            if ready > 0 {
                return ready;
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return 0;
            }
            let busy = self.busy.iter().filter(|b| **b).count();
            let ready = match self.busy.iter().position(|b| *b) {
                Some(one) if busy == 1 => self.members.0[one].wait(left),
                // Several modules have peers, or none does (a server
                // waiting for its first): each waits in turn, a slice each.
                _ => {
                    let turns = if busy == 0 { self.busy.len() } else { busy };
                    let slice = left.min(Duration::from_millis(1)) / turns.max(1) as u32;
                    let mut ready = 0;
                    for (m, busy_one) in self.members.0.iter_mut().zip(&self.busy) {
                        if *busy_one || busy == 0 {
                            ready += m.wait(slice);
                        }
                    }
                    ready
                }
            };
            if ready > 0 {
                return ready;
            }
        }
    }

    /// Serves the modules until `take` takes one of the events, for at
    /// most `timeout` (as [`Module::wait_for`](crate::Module::wait_for)).
    pub fn wait_for<R>(
        &mut self,
        timeout: Duration,
        take: impl FnMut(Event<'_>) -> Option<R>,
    ) -> Result<R, WaitError> {
        self.progress();
        wait_for_event(self, timeout, take, |b, left| {
            b.wait(left);
            Ok(())
        })
    }

    /// Makes dropping this `Bml` close its socket modules without a word,
    /// as a killed process's are ([`Module::abort_on_drop`](crate::Module::abort_on_drop)).
    pub fn abort_on_drop(&mut self) {
        for m in &mut self.members.0 {
            m.abort_on_drop();
        }
    }

    /// Waits up to `timeout` for what every module sent to be
    /// acknowledged (as [`Module::flush`](crate::Module::flush)).
    pub fn flush(&mut self, timeout: Duration) -> Result<(), Unflushed> {
        let start = Instant::now();
        for m in &mut self.members.0 {
            m.flush(timeout.saturating_sub(start.elapsed()))?;
        }
        Ok(())
    }
}

impl Btl for Bml {
    type Memory = Vec<u8>;

    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn attributes_for(&self, endpoint: EndpointId) -> &Attributes {
        match self.route(endpoint) {
            Ok((place, inner)) => self.members.0[place].attributes_for(inner),
            Err(_) => &self.attributes,
        }
    }

    /// The pools of every module: a descriptor's bytes are found in the
    /// pools of the module that made it.
    fn pools(&self) -> PoolsRef<'_> {
        PoolsRef::many(&self.members)
    }

    /// Asks each module in turn, best first, and routes each process to
    /// the first that reaches it.
    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        for (i, (proc, ep)) in procs.iter().zip(endpoints.iter_mut()).enumerate() {
            *ep = None;
            for place in 0..self.members.0.len() {
                let Some(inner) = btl_core::btl::add_proc(self.members.0[place].as_mut(), *proc)?
                else {
                    continue;
                };
                if reachable.set(i) {
                    *ep = Some(self.adopt(place, inner)?);
                }
                break;
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        for &endpoint in endpoints {
            let (m, inner) = self.member(endpoint)?;
            m.del_procs(&[inner])?;
        }
        Ok(())
    }

    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let (m, inner) = self.member(endpoint)?;
        m.alloc(inner, order, size, flags)
    }

    /// Gives the descriptor back to the module whose pools made it.
    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        match self
            .members
            .0
            .iter_mut()
            .find(|m| m.pools().owns(desc.fragment()))
        {
            Some(m) => m.free(desc),
            None => Err(BtlError::Memory(MemError::UnknownRegion)),
        }
    }

    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let (m, inner) = self.member(endpoint)?;
        m.prepare_src(inner, data, reserve, order, flags)
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let (m, inner) = self.member(endpoint)?;
        m.prepare_src_registered(inner, data, reserve, order, flags)
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        match self.member(endpoint) {
            Ok((m, inner)) => m.send(inner, desc, tag),
            Err(error) => Err(SendError { error, desc }),
        }
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        let (m, inner) = self.member(endpoint)?;
        m.sendi(inner, header, payload, tag, order, flags)
    }

    /// The module's own `send_copy`, with its own limits.
    fn send_copy(&mut self, endpoint: EndpointId, tag: Tag, data: &[u8]) -> Result<(), BtlError> {
        let (m, inner) = self.member(endpoint)?;
        m.send_copy(inner, tag, data)
    }

    /// Registers the region with every module, under one handle: a peer
    /// reaches it over whichever module carries that peer.
    fn register_mem(
        &mut self,
        region: Vec<u8>,
        access: Access,
    ) -> Result<MemHandle, RegisterError<Vec<u8>>> {
        let shared = Shared::new(region);
        let mut handle = None;
        for place in 0..self.members.0.len() {
            let error = match self.members.0[place].register_mem(shared.holder(), access) {
                // Every module numbers registrations alike (the first free
                // slot, its generation raised), so one handle names the
                // region in each.
                Ok(h) if handle.is_none_or(|first| first == h) => {
                    handle = Some(h);
                    continue;
                }
                Ok(h) => {
                    let _ = self.members.0[place].deregister_mem(h);
                    BtlError::Memory(MemError::UnknownRegion)
                }
                Err(refused) => refused.error,
            };
            // The modules that took it let go, and the region goes back.
            if let Some(h) = handle {
                for m in &mut self.members.0[..place] {
                    let _ = m.deregister_mem(h);
                }
            }
            return Err(RegisterError {
                error,
                region: shared.into_inner().unwrap_or_default(),
            });
        }
        // A `Bml` has a module at least.
        handle.ok_or(RegisterError {
            error: BtlError::Memory(MemError::Full),
            region: Vec::new(),
        })
    }

    /// Deregisters the region from every module and gives it back; while
    /// an operation of any module uses it, none lets go (`InUse`).
    fn deregister_mem(&mut self, handle: MemHandle) -> Result<Vec<u8>, BtlError> {
        if self.members.0.iter().any(|m| m.region_in_use(handle)) {
            return Err(BtlError::Memory(MemError::InUse));
        }
        let mut last = None;
        for m in &mut self.members.0 {
            last = Some(m.deregister_mem(handle)?);
        }
        last.ok_or(BtlError::Memory(MemError::UnknownRegion))?
            .into_inner()
            .map_err(|_| BtlError::Memory(MemError::InUse))
    }

    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError> {
        self.members
            .0
            .first()
            .ok_or(BtlError::Memory(MemError::UnknownRegion))?
            .region(handle)
    }

    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError> {
        self.members
            .0
            .first_mut()
            .ok_or(BtlError::Memory(MemError::UnknownRegion))?
            .region_mut(handle)
    }

    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.operation(endpoint, |m, inner| m.put(inner, local, remote, ctx))
    }

    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.operation(endpoint, |m, inner| {
            m.put_notify(inner, local, remote, imm, ctx)
        })
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.operation(endpoint, |m, inner| m.get(inner, local, remote, ctx))
    }

    /// Serves every module with peers, and each idle one every
    /// 256th pass (for peers that come to it).
    fn progress(&mut self) -> usize {
        self.passes = self.passes.wrapping_add(1);
        let look = self.passes.is_multiple_of(IDLE_EVERY);
        let mut ready = 0;
        for (m, busy) in self.members.0.iter_mut().zip(&mut self.busy) {
            if look {
                *busy = m.peers() > 0;
            }
            if *busy || look {
                let made = m.progress();
                // Its events are polled until the next look.
                *busy |= made > 0;
                ready += made;
            }
        }
        ready
    }

    /// The next event of any module with peers, or with events its last
    /// serving made, the one that gave the last first.
    fn poll_event(&mut self) -> Option<Event<'_>> {
        let start = self.next.min(self.members.0.len());
        let (before, after) = self.members.0.split_at_mut(start);
        let order = after
            .iter_mut()
            .enumerate()
            .map(|(i, m)| (start + i, m))
            .chain(before.iter_mut().enumerate());
        let busy = &self.busy;
        for (place, m) in order.filter(|(place, _)| busy[*place]) {
            if let Some(event) = m.poll_event() {
                self.next = place;
                return Some(outer_event(place, event));
            }
        }
        None
    }

    /// Finalizes every module; what each left undelivered, summed.
    fn finalize(&mut self) -> Undelivered {
        let outstanding = self
            .members
            .0
            .iter_mut()
            .map(|m| m.finalize().outstanding)
            .sum();
        Undelivered { outstanding }
    }
}
