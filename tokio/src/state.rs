//! What an endpoint's handles and its driver share: the module, the
//! operations under way with the wakers of their futures, the inboxes
//! events are routed to, and why the endpoint stopped, if it did.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use btl_core::btl::Completion;
use btl_core::pool::FragmentClass;
use btl_std::driver::module::{Module, Transport};
use btl_std::{Btl, BtlError, EndpointId, ErrorEvent, Event, MemHandle, Tag};
use bytes::BytesMut;

use crate::Error;
use crate::inbox::{Arrival, Message, PeerEvent, Queue};
use crate::room::Room;

/// The state behind an endpoint's handles, under one lock.
pub struct Shared<T: Transport> {
    state: Mutex<State<T>>,
}

impl<T: Transport> Shared<T> {
    pub(crate) fn new(module: Module<T>) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(State::new(module)),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Every engine call leaves the module whole; a panic under the
        // lock (a caller's closure in `Endpoint::with`) is the caller's.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How an operation under way stands, by its ticket.
pub(crate) enum Outcome {
    /// Not yet complete; its future's waker.
    Waiting(Option<Waker>),
    /// Complete; the buffer of a put or get comes back with it.
    Done(Result<(), BtlError>, Option<Vec<u8>>),
    /// Its future was dropped: the driver forgets it when it completes,
    /// and frees its buffer.
    Abandoned,
}

/// A delivery the driver could not place yet: its inbox is full, or there
/// is none for it. Events behind it wait in the module.
pub(crate) enum Held {
    Message(Message),
    Arrival(Arrival),
    Peer(PeerEvent),
}

/// Messages of a range of tags, for one [`Receiver`](crate::Receiver).
pub(crate) struct Route {
    pub(crate) id: u64,
    pub(crate) tags: RangeInclusive<Tag>,
    pub(crate) queue: Queue<Message>,
}

pub struct State<T: Transport> {
    pub(crate) module: Module<T>,
    /// Why the endpoint takes no more operations, once it does not.
    pub(crate) stopped: Option<Error>,
    /// The driver task's waker, and whether a handle asked it for a pass.
    pub(crate) driver: Option<Waker>,
    pub(crate) kicked: bool,
    /// Whether the driver is passing over the sockets without sleeping:
    /// what a call queues then goes with its next pass.
    pub(crate) driver_busy: bool,
    /// When the sleeping driver wakes for the engine's timer.
    pub(crate) driver_wakes_at: Option<Instant>,
    /// Calls that queued something since the driver's last pass.
    calls_since_pass: u32,
    /// The longest the driver spins ([`Endpoint::set_spin_limit`](crate::Endpoint::set_spin_limit)).
    pub(crate) spin_limit: Duration,
    next_id: u64,
    /// Sends under way, by the fragment their descriptor holds until it
    /// comes back with its completion.
    pub(crate) sends: HashMap<(FragmentClass, usize), u64>,
    /// Registrations of puts' and gets' buffers, by ticket.
    pub(crate) transfers: HashMap<u64, MemHandle>,
    /// By ticket, in the order the operations started (a stop wakes their
    /// futures in that order, the same on every run).
    pub(crate) outcomes: BTreeMap<u64, Outcome>,
    /// Buffers whose deregistration the module refused while still in
    /// use; tried again after every pass.
    reclaim: Vec<(u64, MemHandle, Result<(), BtlError>)>,
    /// Operations waiting for room to a peer, in the order they were
    /// called.
    pub(crate) room: Room,
    /// Flushes and closes, woken after every pass to look again.
    pub(crate) watchers: Vec<Waker>,
    pub(crate) routes: Vec<Route>,
    pub(crate) arrivals: Option<(u64, Queue<Arrival>)>,
    pub(crate) peer_events: Option<(u64, Queue<PeerEvent>)>,
    pub(crate) held: VecDeque<Held>,
    /// Tags already warned about as taken by no receiver.
    warned: Vec<Tag>,
    /// Where received messages are copied to.
    arena: BytesMut,
}

/// Bytes the arena of received messages takes at a time (a new chunk of
/// about this size when the last is full and still in use).
const ARENA: usize = 1 << 20;

impl<T: Transport> State<T> {
    fn new(module: Module<T>) -> Self {
        State {
            module,
            stopped: None,
            driver: None,
            kicked: false,
            driver_busy: false,
            driver_wakes_at: None,
            calls_since_pass: 0,
            spin_limit: crate::endpoint::DEFAULT_SPIN_LIMIT,
            next_id: 1,
            sends: HashMap::new(),
            transfers: HashMap::new(),
            outcomes: BTreeMap::new(),
            reclaim: Vec::new(),
            room: Room::default(),
            watchers: Vec::new(),
            routes: Vec::new(),
            arrivals: None,
            peer_events: None,
            held: VecDeque::new(),
            warned: Vec::new(),
            arena: BytesMut::with_capacity(ARENA),
        }
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Whether the endpoint still takes operations; why not if it does not.
    pub(crate) fn check_open(&self) -> Result<(), Error> {
        match &self.stopped {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// After a call queued something: it leaves now unless the driver's
    /// next pass takes it, and the driver is woken if the call made
    /// events or a timer earlier than the one it sleeps for.
    pub(crate) fn after_call(&mut self) {
        // The first call since the driver's last pass is written now: a
        // reply leaves without waiting for the driver's turn. Those that
        // follow it before the next pass (a burst of sends polled
        // together) go with that pass, in one write.
        if !self.driver_busy || self.calls_since_pass == 0 {
            self.module.serve_queued();
        }
        self.calls_since_pass += 1;
        let earlier_timer = self.module.until_timer().is_some_and(|d| {
            self.driver_wakes_at
                .is_none_or(|at| Instant::now() + d < at)
        });
        if self.module.pending_events() > 0 || earlier_timer {
            self.kick();
        }
    }

    /// Asks the driver for a pass.
    pub(crate) fn kick(&mut self) {
        self.kicked = true;
        if !self.driver_busy
            && let Some(driver) = &self.driver
        {
            driver.wake_by_ref();
        }
    }

    /// A put or get ended: its buffer comes back from the module, to its
    /// future or, if that was dropped, to nothing.
    fn end_transfer(&mut self, ticket: u64, result: Result<(), BtlError>) {
        let Some(handle) = self.transfers.remove(&ticket) else {
            return self.settle(ticket, result, None);
        };
        match self.module.deregister_mem(handle) {
            Ok(buffer) => self.settle(ticket, result, Some(buffer)),
            // Packets not yet acknowledged still read it (a put the peer
            // refused midway): the future waits until it comes back.
            Err(_) => self.reclaim.push((ticket, handle, result)),
        }
    }

    /// Records the outcome of `ticket` and wakes its future; forgets it if
    /// the future is gone.
    fn settle(&mut self, ticket: u64, result: Result<(), BtlError>, buffer: Option<Vec<u8>>) {
        match self.outcomes.remove(&ticket) {
            Some(Outcome::Waiting(waker)) => {
                self.outcomes.insert(ticket, Outcome::Done(result, buffer));
                if let Some(w) = waker {
                    w.wake();
                }
            }
            Some(Outcome::Abandoned) | None => {}
            Some(done @ Outcome::Done(..)) => {
                self.outcomes.insert(ticket, done);
            }
        }
    }

    /// One pass of the driver: the module moves bytes (reading sockets
    /// directly if `direct`, else those the reactor reported), then its
    /// events go where they belong. Whether anything happened.
    pub(crate) fn pass(&mut self, direct: bool) -> bool {
        self.kicked = false;
        self.calls_since_pass = 0;
        let moved = if direct {
            self.module.progress_moved()
        } else {
            self.module.poll_ready().unwrap_or(false)
        };
        let took = self.take_events();
        self.retry_reclaim();
        if moved || took {
            for w in self.watchers.drain(..) {
                w.wake();
            }
        }
        moved || took
    }

    fn retry_reclaim(&mut self) {
        for (ticket, handle, result) in std::mem::take(&mut self.reclaim) {
            match self.module.deregister_mem(handle) {
                Ok(buffer) => self.settle(ticket, result, Some(buffer)),
                Err(_) => self.reclaim.push((ticket, handle, result)),
            }
        }
    }

    /// Takes the module's events, unless a delivery is held: each to the
    /// future, inbox or waiters it concerns. Whether any was taken.
    fn take_events(&mut self) -> bool {
        let mut took = self.place_held();
        // Past what is held, the completions of this endpoint's own
        // operations are still taken: a task that awaits its send before
        // it reads its full inbox would otherwise wait forever.
        while !self.held.is_empty() {
            let Some(completion) = self.module.poll_completion() else {
                break;
            };
            took = true;
            self.take_completion(completion);
        }
        while self.held.is_empty() {
            let Some(event) = self.module.poll_event() else {
                break;
            };
            took = true;
            let held = match event {
                Event::Received(m) => {
                    // Copied into the arena, whose space comes back once
                    // the messages cut from it are dropped: no allocation
                    // per message while the caller keeps up.
                    self.arena.reserve(m.data.len());
                    self.arena.extend_from_slice(m.data);
                    Some(Held::Message(Message {
                        from: m.from,
                        tag: m.tag,
                        data: self.arena.split().freeze(),
                    }))
                }
                Event::SendComplete {
                    endpoint,
                    tag,
                    desc,
                    result,
                } => {
                    let send = Completion::Send {
                        endpoint,
                        tag,
                        desc,
                        result,
                    };
                    self.take_completion(send);
                    None
                }
                Event::PutComplete { op, ctx, result } => {
                    self.take_completion(Completion::Put { op, ctx, result });
                    None
                }
                Event::GetComplete { op, ctx, result } => {
                    self.take_completion(Completion::Get { op, ctx, result });
                    None
                }
                Event::PutArrived { from, slice, imm } => {
                    Some(Held::Arrival(Arrival { from, slice, imm }))
                }
                Event::Room { endpoint } => {
                    self.wake_room(endpoint);
                    None
                }
                Event::PeerLeft { endpoint } => {
                    self.wake_room(endpoint);
                    Some(Held::Peer(PeerEvent::Left(endpoint)))
                }
                Event::Error(ErrorEvent {
                    fatal: false,
                    endpoint: Some(endpoint),
                    error,
                }) => {
                    self.wake_room(endpoint);
                    Some(Held::Peer(PeerEvent::Lost(endpoint, error)))
                }
                Event::Error(ErrorEvent { error, .. }) => {
                    tracing::error!("btl endpoint stopped: {error}");
                    self.stop(Error::Failed(error));
                    None
                }
            };
            if let Some(held) = held {
                self.held.push_back(held);
                self.place_held();
            }
        }
        took
    }

    /// A send, put or get of this endpoint ended: its future learns how.
    fn take_completion(&mut self, completion: Completion) {
        match completion {
            Completion::Send {
                desc: Some(desc),
                result,
                ..
            } => {
                let key = (desc.fragment().class(), desc.fragment().index());
                let _ = self.module.free(desc);
                if let Some(ticket) = self.sends.remove(&key) {
                    self.settle(ticket, result, None);
                }
            }
            Completion::Put { ctx, result, .. } | Completion::Get { ctx, result, .. } => {
                self.end_transfer(ctx, result);
            }
            _ => {}
        }
    }

    /// There may be room to `peer` now (or it is gone): the first
    /// operation waiting for it tries again.
    fn wake_room(&mut self, peer: EndpointId) {
        self.room.wake_first(peer);
    }

    /// Places held deliveries in their inboxes, in order, while there is
    /// room; whether any was placed.
    fn place_held(&mut self) -> bool {
        let mut placed = false;
        while let Some(held) = self.held.pop_front() {
            let refused = match held {
                Held::Message(m) => {
                    match self.routes.iter_mut().find(|r| r.tags.contains(&m.tag)) {
                        Some(route) => route.queue.offer(m).err().map(Held::Message),
                        None => {
                            if !self.warned.contains(&m.tag) {
                                self.warned.push(m.tag);
                                tracing::warn!(
                                    "a message of tag {} from {:?} waits, and every event behind it: no receiver takes tag {}; make one (Endpoint::receiver)",
                                    m.tag.0,
                                    m.from,
                                    m.tag.0
                                );
                            }
                            Some(Held::Message(m))
                        }
                    }
                }
                Held::Arrival(a) => match &mut self.arrivals {
                    Some((_, queue)) => queue.offer(a).err().map(Held::Arrival),
                    // Nobody asked to be told: the data is in its region.
                    None => None,
                },
                Held::Peer(p) => match &mut self.peer_events {
                    Some((_, queue)) => queue.offer(p).err().map(Held::Peer),
                    // Nobody asked: the peer's operations fail with it.
                    None => None,
                },
            };
            match refused {
                Some(held) => {
                    self.held.push_front(held);
                    break;
                }
                None => placed = true,
            }
        }
        placed
    }

    /// Stops the endpoint for `why`: every future waiting ends with it.
    pub(crate) fn stop(&mut self, why: Error) {
        if self.stopped.is_some() {
            return;
        }
        self.stopped = Some(why);
        for outcome in self.outcomes.values_mut() {
            if let Outcome::Waiting(waker) = outcome
                && let Some(w) = waker.take()
            {
                w.wake();
            }
        }
        self.room.wake_all();
        for w in self.watchers.drain(..) {
            w.wake();
        }
        for route in &mut self.routes {
            route.queue.wake();
        }
        if let Some((_, q)) = &mut self.arrivals {
            q.wake();
        }
        if let Some((_, q)) = &mut self.peer_events {
            q.wake();
        }
        if let Some(driver) = &self.driver {
            driver.wake_by_ref();
        }
    }

    /// A receiver went: what it held waits for the next one of its tags,
    /// ahead of what came since.
    pub(crate) fn unroute(&mut self, id: u64) {
        if let Some(i) = self.routes.iter().position(|r| r.id == id) {
            let route = self.routes.remove(i);
            for m in route.queue.into_items().into_iter().rev() {
                self.held.push_front(Held::Message(m));
            }
        }
    }

    /// How long until the engine's next timer.
    pub(crate) fn until_timer(&self) -> Option<Duration> {
        self.module.until_timer()
    }
}
