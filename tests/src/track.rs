//! Bookkeeping shared by the suites: every event seen, every completion
//! still owed, and bounded loops that drive a [`World`] until something
//! holds.
//!
//! The [`Tracker`] is what makes "exactly once" checkable: each operation
//! that owes an event is recorded when it starts, each event pays one debt,
//! and an event nobody is owed fails the test on the spot.

use std::collections::HashMap;

use btl_core::btl::{
    BtlError, ErrorEvent, Event, MemSlice, OpId, RemoteSlice, SendError, SendStatus, Tag,
};
use btl_core::desc::{DescFlags, Descriptor, Order};
use btl_core::endpoint::EndpointId;
use btl_core::pool::{FragmentClass, PoolsRef};

use crate::world::{Capabilities, Side, World};

/// Most events one drain takes from one BTL before it counts as a flood.
const DRAIN_LIMIT: usize = 1 << 20;

/// An event as the suite keeps it: owned, with the side whose BTL was
/// polled (always [`Side::A`] when [`Capabilities::same_btl`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A message arrived.
    Received {
        /// Side polled.
        at: Side,
        /// Sender's endpoint as the receiver names it.
        from: EndpointId,
        /// Its tag.
        tag: Tag,
        /// Header reserve and payload.
        data: Vec<u8>,
    },
    /// A send completed; a descriptor that came back has been freed.
    SendComplete {
        /// Side polled.
        at: Side,
        /// The peer it went to.
        endpoint: EndpointId,
        /// Its tag.
        tag: Tag,
        /// What the caller wrote in the returned descriptor (see
        /// [`written_bytes`]), or `None` when the BTL owned and freed it.
        desc: Option<Vec<u8>>,
        /// How it ended.
        result: Result<(), BtlError>,
    },
    /// A put completed.
    PutComplete {
        /// Side polled.
        at: Side,
        /// The operation.
        op: OpId,
        /// Its context value.
        ctx: u64,
        /// How it ended.
        result: Result<(), BtlError>,
    },
    /// A get completed.
    GetComplete {
        /// Side polled.
        at: Side,
        /// The operation.
        op: OpId,
        /// Its context value.
        ctx: u64,
        /// How it ended.
        result: Result<(), BtlError>,
    },
    /// A peer's put with a notice landed here.
    PutArrived {
        /// Side polled.
        at: Side,
        /// The peer that put, as this side names it.
        from: EndpointId,
        /// Where its data lies.
        slice: MemSlice,
        /// The value it gave.
        imm: u64,
    },
    /// A peer said goodbye.
    PeerLeft {
        /// Where it was seen.
        at: Side,
        /// The peer.
        endpoint: EndpointId,
    },
    /// Room again for what was refused for a peer.
    Room {
        /// Where it was seen.
        at: Side,
        /// The peer.
        endpoint: EndpointId,
    },
    /// An error outside any one operation.
    Error {
        /// Side polled.
        at: Side,
        /// The error.
        error: ErrorEvent,
    },
}

/// Which one-sided operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rdma {
    /// `put`: local to remote.
    Put,
    /// `get`: remote to local.
    Get,
}

/// One message for the sending helpers.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Active-message tag.
    pub tag: Tag,
    /// Written into the descriptor's header reserve.
    pub header: &'a [u8],
    /// Copied behind the header by `prepare_src`.
    pub payload: &'a [u8],
    /// Ordering channel.
    pub order: Order,
    /// Ownership and callback flags.
    pub flags: DescFlags,
}

impl<'a> Message<'a> {
    /// A message of `payload` only, on [`Order::ANY`], with no flags.
    pub fn new(tag: Tag, payload: &'a [u8]) -> Self {
        Message {
            tag,
            header: &[],
            payload,
            order: Order::ANY,
            flags: DescFlags::empty(),
        }
    }
}

/// Every event seen and every completion still owed.
#[derive(Debug)]
pub struct Tracker {
    caps: Capabilities,
    /// Sides still polled: a killed side is dropped.
    live: Vec<Side>,
    /// Events in the order they were polled.
    pub seen: Vec<Seen>,
    /// What the caller wrote in each descriptor handed back (see
    /// [`written_bytes`]), by send at once or in a completion, with its
    /// tag: each non-owned send's exactly once.
    pub returned: Vec<(Tag, Vec<u8>)>,
    /// SendComplete events owed, by (side polled, tag, with descriptor).
    owed_sends: HashMap<(Side, Tag, bool), u32>,
    /// Put and get completions owed, by (side polled, op): kind and ctx.
    owed_rdma: HashMap<(Side, OpId), (Rdma, u64)>,
}

impl Tracker {
    /// A tracker for `world`, owing nothing.
    pub fn new(world: &dyn World) -> Self {
        let caps = world.capabilities();
        Tracker {
            caps,
            live: if caps.same_btl {
                vec![Side::A]
            } else {
                Side::BOTH.to_vec()
            },
            seen: Vec::new(),
            returned: Vec::new(),
            owed_sends: HashMap::new(),
            owed_rdma: HashMap::new(),
        }
    }

    /// The side whose BTL reports the events of operations `side` starts.
    pub fn home(&self, side: Side) -> Side {
        if self.caps.same_btl { Side::A } else { side }
    }

    /// The distinct, live sides to poll.
    pub fn sides(&self) -> Vec<Side> {
        self.live.clone()
    }

    /// Stops polling a killed side and forgets what its operations owed.
    pub fn kill(&mut self, side: Side) {
        assert!(!self.caps.same_btl, "one side of a single BTL cannot die");
        self.live.retain(|&s| s != side);
        self.owed_sends.retain(|&(s, _, _), _| s != side);
        self.owed_rdma.retain(|&(s, _), _| s != side);
    }

    /// Accounts for a successful `send` from `from` of a descriptor with
    /// `flags`: checks the descriptor came back exactly when it should,
    /// frees it, and records the completion event still owed.
    pub fn sent(
        &mut self,
        world: &mut dyn World,
        from: Side,
        tag: Tag,
        flags: DescFlags,
        status: SendStatus,
    ) {
        let owned = flags.contains(DescFlags::BTL_OWNERSHIP);
        let always = flags.contains(DescFlags::ALWAYS_CALLBACK);
        match status {
            SendStatus::Completed(Some(desc)) => {
                assert!(!owned, "a BTL_OWNERSHIP descriptor came back from send");
                let btl = world.btl(from);
                let bytes = written_bytes(&desc, btl.pools());
                btl.free(desc)
                    .expect("freeing a descriptor send handed back");
                self.returned.push((tag, bytes));
                if always {
                    self.owe_send(from, tag, false);
                }
            }
            SendStatus::Completed(None) => {
                assert!(
                    owned,
                    "send completed without handing back a descriptor it does not own"
                );
                if always {
                    self.owe_send(from, tag, false);
                }
            }
            SendStatus::Queued => self.owe_send(from, tag, !owned),
        }
    }

    fn owe_send(&mut self, from: Side, tag: Tag, with_desc: bool) {
        *self
            .owed_sends
            .entry((self.home(from), tag, with_desc))
            .or_default() += 1;
    }

    /// Records a started put or get, owed one completion with `ctx`.
    pub fn started(&mut self, from: Side, kind: Rdma, op: OpId, ctx: u64) {
        let previous = self.owed_rdma.insert((self.home(from), op), (kind, ctx));
        assert!(
            previous.is_none(),
            "{op:?} handed out again before its completion"
        );
    }

    /// Polls one event from `side`'s BTL, checks it against what is owed,
    /// frees a returned descriptor, and records it.
    pub fn poll(&mut self, world: &mut dyn World, side: Side) -> Option<&Seen> {
        let btl = world.btl(side);
        let raw = match btl.poll_event()? {
            Event::Received(m) => Ok(Seen::Received {
                at: side,
                from: m.from,
                tag: m.tag,
                data: m.data.to_vec(),
            }),
            Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            } => Err((endpoint, tag, desc, result)),
            Event::PutComplete { op, ctx, result } => Ok(Seen::PutComplete {
                at: side,
                op,
                ctx,
                result,
            }),
            Event::GetComplete { op, ctx, result } => Ok(Seen::GetComplete {
                at: side,
                op,
                ctx,
                result,
            }),
            Event::PutArrived { from, slice, imm } => Ok(Seen::PutArrived {
                at: side,
                from,
                slice,
                imm,
            }),
            Event::PeerLeft { endpoint } => Ok(Seen::PeerLeft { at: side, endpoint }),
            Event::Room { endpoint } => Ok(Seen::Room { at: side, endpoint }),
            Event::Error(error) => Ok(Seen::Error { at: side, error }),
        };
        let seen = match raw {
            Ok(seen) => seen,
            Err((endpoint, tag, desc, result)) => {
                let desc = desc.map(|d| {
                    let bytes = written_bytes(&d, btl.pools());
                    btl.free(d).expect("freeing a returned descriptor");
                    bytes
                });
                Seen::SendComplete {
                    at: side,
                    endpoint,
                    tag,
                    desc,
                    result,
                }
            }
        };
        self.pay(&seen);
        if let Seen::SendComplete {
            tag,
            desc: Some(bytes),
            ..
        } = &seen
        {
            self.returned.push((*tag, bytes.clone()));
        }
        self.seen.push(seen);
        self.seen.last()
    }

    fn pay(&mut self, seen: &Seen) {
        match seen {
            Seen::SendComplete { at, tag, desc, .. } => {
                let key = (*at, *tag, desc.is_some());
                match self.owed_sends.get_mut(&key) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => panic!(
                        "a completion nobody is owed (duplicate, or wrong descriptor handling): {seen:?}"
                    ),
                }
            }
            Seen::PutComplete { at, op, ctx, .. } | Seen::GetComplete { at, op, ctx, .. } => {
                let kind = if matches!(seen, Seen::PutComplete { .. }) {
                    Rdma::Put
                } else {
                    Rdma::Get
                };
                match self.owed_rdma.remove(&(*at, *op)) {
                    Some(owed) => assert_eq!(owed, (kind, *ctx), "completion of {op:?}"),
                    None => {
                        panic!("a completion nobody is owed (duplicate or unknown op): {seen:?}")
                    }
                }
            }
            Seen::Received { .. }
            | Seen::PutArrived { .. }
            | Seen::PeerLeft { .. }
            | Seen::Room { .. }
            | Seen::Error { .. } => {}
        }
    }

    /// Polls `side` until it has no event.
    pub fn drain_side(&mut self, world: &mut dyn World, side: Side) {
        for _ in 0..DRAIN_LIMIT {
            if self.poll(world, side).is_none() {
                return;
            }
        }
        panic!("side {side:?} produced more than {DRAIN_LIMIT} events in one drain");
    }

    /// Polls every BTL until none has an event.
    pub fn drain(&mut self, world: &mut dyn World) {
        for side in self.sides() {
            self.drain_side(world, side);
        }
    }

    /// True when no completion is owed.
    pub fn settled(&self) -> bool {
        self.owed_sends.values().all(|&n| n == 0) && self.owed_rdma.is_empty()
    }

    /// Completions still owed, for failure messages.
    pub fn owed(&self) -> String {
        let sends: Vec<_> = self.owed_sends.iter().filter(|(_, n)| **n > 0).collect();
        format!("sends {sends:?}, rdma {:?}", self.owed_rdma)
    }

    /// Takes the events recorded so far.
    pub fn take(&mut self) -> Vec<Seen> {
        std::mem::take(&mut self.seen)
    }

    /// The messages received so far: tag and bytes.
    pub fn received(&self) -> impl Iterator<Item = (Tag, &[u8])> {
        self.seen.iter().filter_map(|s| match s {
            Seen::Received { tag, data, .. } => Some((*tag, data.as_slice())),
            _ => None,
        })
    }

    /// The error events seen so far.
    pub fn errors(&self) -> impl Iterator<Item = (Side, ErrorEvent)> + '_ {
        self.seen.iter().filter_map(|s| match s {
            Seen::Error { at, error } => Some((*at, *error)),
            _ => None,
        })
    }
}

/// The bytes a caller wrote in a descriptor: its first segment (header
/// reserve and inline payload) without the headroom in front, which is the
/// BTL's own (its packet header, for an engine).
pub fn written_bytes(desc: &Descriptor, pools: PoolsRef<'_>) -> Vec<u8> {
    let bytes = desc
        .fragment_bytes(pools)
        .expect("a returned descriptor's bytes");
    bytes[desc.headroom()..].to_vec()
}

/// Drains, then runs progress rounds (draining after each) until `done`
/// holds; fails after [`Capabilities::max_rounds`] rounds, naming `what`.
pub fn run_until(
    world: &mut dyn World,
    tracker: &mut Tracker,
    what: &str,
    mut done: impl FnMut(&Tracker) -> bool,
) {
    let max = world.capabilities().max_rounds;
    for _ in 0..=max {
        tracker.drain(world);
        if done(tracker) {
            return;
        }
        world.progress();
    }
    panic!(
        "{what}: not done after {max} progress rounds (owed: {})",
        tracker.owed()
    );
}

/// Runs until every completion owed has come.
pub fn settle(world: &mut dyn World, tracker: &mut Tracker) {
    run_until(
        world,
        tracker,
        "every operation completes",
        Tracker::settled,
    );
}

/// Runs until every completion owed has come and `count` messages have
/// arrived, lingers [`Capabilities::linger_rounds`] more rounds, and fails
/// unless exactly `count` arrived: none lost, none twice.
pub fn deliver(world: &mut dyn World, tracker: &mut Tracker, count: usize) {
    run_until(world, tracker, "every message arrives", |t| {
        t.settled() && t.received().count() >= count
    });
    for _ in 0..world.capabilities().linger_rounds {
        round(world, tracker);
    }
    assert_eq!(
        tracker.received().count(),
        count,
        "messages delivered (none lost, none duplicated)"
    );
    assert!(
        tracker.settled(),
        "completions after lingering: {}",
        tracker.owed()
    );
}

/// One round: progress, then drain every BTL.
pub fn round(world: &mut dyn World, tracker: &mut Tracker) {
    world.progress();
    tracker.drain(world);
}

/// One attempt to send `msg` from `from` with `prepare_src` + `send`. On
/// success the tracker has accounted for it; on failure nothing is
/// outstanding (a refused descriptor is freed) and the error is returned.
pub fn try_send(
    world: &mut dyn World,
    tracker: &mut Tracker,
    from: Side,
    msg: &Message<'_>,
) -> Result<(), BtlError> {
    let ep = world.peer(from);
    let btl = world.btl(from);
    let mut desc = btl.prepare_src(ep, msg.payload, msg.header.len(), msg.order, msg.flags)?;
    desc.header_mut(btl.pools())
        .expect("the header reserve of a fresh descriptor")
        .copy_from_slice(msg.header);
    match btl.send(ep, desc, msg.tag) {
        Ok(status) => {
            tracker.sent(world, from, msg.tag, msg.flags, status);
            Ok(())
        }
        Err(SendError { error, desc }) => {
            btl.free(desc)
                .expect("a refused descriptor is still the caller's");
            Err(error)
        }
    }
}

/// Sends `msg` from `from`, running rounds between attempts while the BTL
/// says `OutOfResource`; fails on any other error or after
/// [`Capabilities::max_rounds`] refusals in a row. Returns how many
/// attempts were refused.
pub fn send(world: &mut dyn World, tracker: &mut Tracker, from: Side, msg: &Message<'_>) -> u32 {
    let max = world.capabilities().max_rounds;
    for refused in 0..=max {
        match try_send(world, tracker, from, msg) {
            Ok(()) => return refused,
            Err(BtlError::OutOfResource) => round(world, tracker),
            Err(e) => panic!(
                "send of {} bytes with {:?}: {e}",
                msg.payload.len(),
                msg.tag
            ),
        }
    }
    panic!("send stayed OutOfResource for {max} rounds");
}

/// One attempt at `sendi` from `from` (no flags); a success owes nothing.
pub fn try_sendi(
    world: &mut dyn World,
    from: Side,
    header: &[u8],
    payload: &[u8],
    tag: Tag,
    order: Order,
) -> Result<(), BtlError> {
    let ep = world.peer(from);
    world
        .btl(from)
        .sendi(ep, header, payload, tag, order, DescFlags::empty())
}

/// `sendi` from `from`, running rounds between attempts while the BTL says
/// `OutOfResource`; fails on any other error or after
/// [`Capabilities::max_rounds`] refusals in a row. Returns how many
/// attempts were refused.
pub fn sendi(
    world: &mut dyn World,
    tracker: &mut Tracker,
    from: Side,
    header: &[u8],
    payload: &[u8],
    tag: Tag,
    order: Order,
) -> u32 {
    let max = world.capabilities().max_rounds;
    for refused in 0..=max {
        match try_sendi(world, from, header, payload, tag, order) {
            Ok(()) => return refused,
            Err(BtlError::OutOfResource) => round(world, tracker),
            Err(e) => panic!(
                "sendi of {} + {} bytes with {tag:?}: {e}",
                header.len(),
                payload.len()
            ),
        }
    }
    panic!("sendi stayed OutOfResource for {max} rounds");
}

/// Starts a put or get from `from` to the other side, running rounds while
/// the BTL says `OutOfResource`, and records the completion owed.
pub fn start_rdma(
    world: &mut dyn World,
    tracker: &mut Tracker,
    from: Side,
    kind: Rdma,
    local: MemSlice,
    remote: RemoteSlice,
    ctx: u64,
) -> OpId {
    let max = world.capabilities().max_rounds;
    for _ in 0..=max {
        match try_rdma(world, from, kind, local, remote, ctx) {
            Ok(op) => {
                tracker.started(from, kind, op, ctx);
                return op;
            }
            Err(BtlError::OutOfResource) => round(world, tracker),
            Err(e) => panic!("{kind:?} of {} bytes: {e}", local.len),
        }
    }
    panic!("{kind:?} stayed OutOfResource for {max} rounds");
}

/// Starts a put from `from` to the other side that tells the target with
/// `imm`, running rounds while the BTL says `OutOfResource`, and records
/// the completion owed.
pub fn start_put_notify(
    world: &mut dyn World,
    tracker: &mut Tracker,
    from: Side,
    local: MemSlice,
    remote: RemoteSlice,
    imm: u64,
    ctx: u64,
) -> OpId {
    let max = world.capabilities().max_rounds;
    for _ in 0..=max {
        let ep = world.peer(from);
        match world.btl(from).put_notify(ep, local, remote, imm, ctx) {
            Ok(op) => {
                tracker.started(from, Rdma::Put, op, ctx);
                return op;
            }
            Err(BtlError::OutOfResource) => round(world, tracker),
            Err(e) => panic!("put_notify of {} bytes: {e}", local.len),
        }
    }
    panic!("put_notify stayed OutOfResource for {max} rounds");
}

/// One attempt at a put or get; the caller records a started operation.
pub fn try_rdma(
    world: &mut dyn World,
    from: Side,
    kind: Rdma,
    local: MemSlice,
    remote: RemoteSlice,
    ctx: u64,
) -> Result<OpId, BtlError> {
    let ep = world.peer(from);
    let btl = world.btl(from);
    match kind {
        Rdma::Put => btl.put(ep, local, remote, ctx),
        Rdma::Get => btl.get(ep, local, remote, ctx),
    }
}

/// Fragments of every class that `side`'s BTL has lent out.
pub fn in_use(world: &mut dyn World, side: Side) -> Vec<(FragmentClass, u32)> {
    world
        .pool_stats(side)
        .iter()
        .map(|&(class, stats)| (class, stats.in_use))
        .collect()
}

/// Fails unless every pool of every BTL has all its fragments back.
pub fn assert_pools_idle(world: &mut dyn World, tracker: &Tracker) {
    for side in tracker.sides() {
        let busy: Vec<_> = in_use(world, side)
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect();
        assert!(
            busy.is_empty(),
            "side {side:?} still has fragments in use: {busy:?}"
        );
    }
}

/// Fails if any pool of `side` has more fragments out than its capacity.
pub fn assert_pools_bounded(world: &mut dyn World, side: Side) {
    for (class, s) in world.pool_stats(side) {
        assert!(
            s.in_use <= s.capacity,
            "side {side:?}: {class} pool has {} of {} fragments out",
            s.in_use,
            s.capacity
        );
    }
}
