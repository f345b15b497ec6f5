//! The transfer machine and what its user calls: lifecycle, buffer
//! registration, the six adds, `del`, and the event queue.

use core::fmt;

use heapless::Deque;

use super::buffer::{Buffer, Hold, Op, Phase, Queued, Slot, Work, cookie};
use super::{
    BufferId, Completion, NetBufDesc, Passive, Stats, TmAddr, TmState, XferError, XferEvent,
};
use crate::btl::{Btl, BtlError, MemError, MemSlice, Tag, TagError, TagRange};
use crate::desc::Descriptor;
use crate::endpoint::{EndpointId, ProcName};
use crate::time::Instant;

/// At most four state changes ever happen (the machine only moves forward).
const STATE_EVENTS: usize = 8;

/// A message taken from the BTL and not yet copied into a receive buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Staged {
    pub(crate) from: TmAddr,
    pub(crate) len: usize,
}

/// A Motr-style transfer machine over any [`Btl`]: up to `BUFS` registered
/// buffers, `EVENTS` undelivered message events, messages of up to `MSG`
/// payload bytes.
///
/// It never calls back: the caller drives it with `progress` (or `offer` and
/// `run`) and takes what happened from [`TransferMachine::poll_event`], so
/// Motr's "callbacks run outside the lock" holds trivially: there is no lock
/// and no callback, and the user may add, delete or stop from any event.
pub struct TransferMachine<const BUFS: usize, const EVENTS: usize, const MSG: usize> {
    pub(crate) me: ProcName,
    pub(crate) tag: Tag,
    pub(crate) state: TmState,
    pub(crate) failure: Option<BtlError>,
    /// The latest time the caller passed in; deadlines are compared with it.
    pub(crate) now: Instant,
    /// Orders adds and events.
    pub(crate) seq: u64,
    pub(crate) slots: [Slot; BUFS],
    /// One received message between `offer` and `run`: its bytes are
    /// borrowed from the BTL and must be copied out before the BTL can be
    /// used to reach the receive buffer's memory.
    pub(crate) staging: [u8; MSG],
    pub(crate) staged: Option<Staged>,
    /// Send descriptors the BTL handed back, to free and account in `run`.
    /// At most one per slot is ever in the BTL, so `BUFS` places suffice.
    pub(crate) returned: Deque<(Descriptor, Result<(), BtlError>), BUFS>,
    pub(crate) received: Deque<(u64, XferEvent), EVENTS>,
    /// Slots whose completion awaits polling; a slot is here at most once.
    pub(crate) completions: Deque<(u64, u16), BUFS>,
    pub(crate) states: Deque<(u64, TmState), STATE_EVENTS>,
    /// Lost messages not yet reported: when the first was lost, and how many.
    pub(crate) drops: Option<(u64, u32)>,
    pub(crate) stats: Stats,
}

impl<const BUFS: usize, const EVENTS: usize, const MSG: usize> fmt::Debug
    for TransferMachine<BUFS, EVENTS, MSG>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registered = self.slots.iter().filter(|s| s.buffer.is_some()).count();
        f.debug_struct("TransferMachine")
            .field("me", &self.me)
            .field("tag", &self.tag)
            .field("state", &self.state)
            .field("registered", &registered)
            .field("pending_events", &self.pending_events())
            .finish()
    }
}

impl<const BUFS: usize, const EVENTS: usize, const MSG: usize> TransferMachine<BUFS, EVENTS, MSG> {
    /// A machine of process `me` on `tag`, which must be an XFER tag and
    /// differ from every other machine's on the same BTL.
    pub fn new(me: ProcName, tag: Tag) -> Result<Self, XferError> {
        assert!(BUFS <= 1 << 16, "at most 65536 buffers");
        assert!(EVENTS > 0, "room for at least one message event");
        if !TagRange::XFER.contains(tag) {
            return Err(XferError::Tag(TagError::OutsideRange {
                tag,
                range: TagRange::XFER,
            }));
        }
        Ok(TransferMachine {
            me,
            tag,
            state: TmState::Initialized,
            failure: None,
            now: Instant::ZERO,
            seq: 0,
            slots: core::array::from_fn(|_| Slot::default()),
            staging: [0; MSG],
            staged: None,
            returned: Deque::new(),
            received: Deque::new(),
            completions: Deque::new(),
            states: Deque::new(),
            drops: None,
            stats: Stats::default(),
        })
    }

    /// The process the machine belongs to.
    pub fn me(&self) -> ProcName {
        self.me
    }

    /// The machine's tag.
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// The machine's address as seen through `endpoint` (the endpoint a peer
    /// has for this process).
    pub fn addr(&self, endpoint: EndpointId) -> TmAddr {
        TmAddr {
            endpoint,
            tag: self.tag,
        }
    }

    /// Where the machine is in its life.
    pub fn state(&self) -> TmState {
        self.state
    }

    /// The fatal BTL error that failed the machine, if one did.
    pub fn failure(&self) -> Option<BtlError> {
        self.failure
    }

    /// The machine's counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Starts the machine: Starting now, Started at the next `run`.
    pub fn start(&mut self) -> Result<(), XferError> {
        self.require("start", &[TmState::Initialized])?;
        self.set_state(TmState::Starting);
        Ok(())
    }

    /// Stops the machine: every queued buffer completes with `Cancelled` at
    /// once, messages are no longer accepted, and the machine is Stopped at
    /// the first `run` after the BTL has given back all it holds.
    pub fn stop(&mut self) -> Result<(), XferError> {
        self.require(
            "stop",
            &[TmState::Initialized, TmState::Starting, TmState::Started],
        )?;
        self.set_state(TmState::Stopping);
        self.discard_staged();
        for index in 0..BUFS {
            self.complete(index, Err(XferError::Cancelled));
        }
        Ok(())
    }

    /// Registers `mem`, memory already registered with `btl`, as a buffer
    /// (Motr's `m0_net_buffer_register`); `btl` checks that it exists.
    pub fn register_buffer(
        &mut self,
        btl: &(impl Btl + ?Sized),
        mem: MemSlice,
    ) -> Result<BufferId, XferError> {
        let size = btl.region(mem.handle)?.len() as u64;
        if mem.offset.checked_add(mem.len).is_none_or(|end| end > size) {
            return Err(XferError::Btl(BtlError::Memory(MemError::OutOfBounds {
                offset: mem.offset,
                len: mem.len,
                size,
            })));
        }
        let (index, slot) = self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.buffer.is_none())
            .ok_or(XferError::Full)?;
        slot.generation = slot.generation.wrapping_add(1).max(1);
        slot.buffer = Some(Buffer {
            mem,
            adds: 0,
            work: Work::Idle,
            hold: Hold::Nothing,
        });
        Ok(BufferId {
            index: index as u16,
            generation: slot.generation,
        })
    }

    /// Ends a buffer's registration and gives its memory back. It must be
    /// idle: not queued, completion polled, nothing held by the BTL.
    pub fn deregister_buffer(&mut self, id: BufferId) -> Result<MemSlice, XferError> {
        let buffer = self.buffer(id)?;
        check_idle(buffer)?;
        let mem = buffer.mem;
        self.slots[usize::from(id.index)].buffer = None;
        Ok(mem)
    }

    /// The memory of a registered buffer.
    pub fn memory(&self, id: BufferId) -> Result<MemSlice, XferError> {
        Ok(self.buffer(id)?.mem)
    }

    /// Adds a buffer to MSG_RECV. Messages fill it one after the other; it
    /// completes once `max_messages` have arrived or less than
    /// `min_receive_size` bytes of room are left (both must be non-zero).
    pub fn add_msg_recv(
        &mut self,
        id: BufferId,
        min_receive_size: u64,
        max_messages: u32,
        deadline: Option<Instant>,
    ) -> Result<(), XferError> {
        if min_receive_size == 0 || max_messages == 0 {
            return Err(XferError::ZeroReceiveLimit);
        }
        self.enqueue("add_msg_recv", id, deadline, |_| {
            Ok(Op::MsgRecv {
                min_receive_size,
                max_messages,
                used: 0,
                messages: 0,
            })
        })?;
        Ok(())
    }

    /// Adds a buffer to MSG_SEND: its first `len` bytes go to the machine
    /// `to` as one message.
    pub fn add_msg_send(
        &mut self,
        id: BufferId,
        to: TmAddr,
        len: u64,
        deadline: Option<Instant>,
    ) -> Result<(), XferError> {
        self.enqueue("add_msg_send", id, deadline, |mem| {
            fits(len, mem.len)?;
            Ok(Op::MsgSend {
                to,
                len,
                in_btl: false,
            })
        })?;
        Ok(())
    }

    /// Adds a buffer to PASSIVE_BULK_RECV: `peer` may write the whole
    /// buffer. Ship the returned descriptor to it.
    pub fn add_passive_recv(
        &mut self,
        id: BufferId,
        peer: EndpointId,
        deadline: Option<Instant>,
    ) -> Result<NetBufDesc, XferError> {
        self.add_passive(id, Passive::Recv, peer, None, deadline)
    }

    /// Adds a buffer to PASSIVE_BULK_SEND: `peer` may read its first `len`
    /// bytes. Ship the returned descriptor to it.
    pub fn add_passive_send(
        &mut self,
        id: BufferId,
        peer: EndpointId,
        len: u64,
        deadline: Option<Instant>,
    ) -> Result<NetBufDesc, XferError> {
        self.add_passive(id, Passive::Send, peer, Some(len), deadline)
    }

    /// Adds a buffer to ACTIVE_BULK_RECV: reads the peer's PASSIVE_BULK_SEND
    /// buffer `desc` (all `desc.len` bytes, which must fit) from `peer`, the
    /// endpoint of `desc.owner`.
    pub fn add_active_recv(
        &mut self,
        id: BufferId,
        peer: EndpointId,
        desc: &NetBufDesc,
        deadline: Option<Instant>,
    ) -> Result<(), XferError> {
        self.add_active(id, Passive::Send, peer, desc, desc.len, deadline)
    }

    /// Adds a buffer to ACTIVE_BULK_SEND: writes its first `len` bytes into
    /// the peer's PASSIVE_BULK_RECV buffer `desc` (which must hold them) at
    /// `peer`, the endpoint of `desc.owner`.
    pub fn add_active_send(
        &mut self,
        id: BufferId,
        peer: EndpointId,
        desc: &NetBufDesc,
        len: u64,
        deadline: Option<Instant>,
    ) -> Result<(), XferError> {
        self.add_active(id, Passive::Recv, peer, desc, len, deadline)
    }

    /// Cancels a queued buffer (Motr's `m0_net_buffer_del`): it completes
    /// with `Cancelled` now; whatever the BTL later reports for it is ignored.
    pub fn del(&mut self, id: BufferId) -> Result<(), XferError> {
        let Work::Queued(queued) = &self.buffer(id)?.work else {
            return Err(XferError::NotQueued);
        };
        let queue = queued.op.queue();
        self.stats.queue_mut(queue).deletes += 1;
        self.complete(usize::from(id.index), Err(XferError::Cancelled));
        Ok(())
    }

    /// The next event, in the order things happened. A buffer's `Received`
    /// events all come before its `Completed`, and the completion hands the
    /// buffer back: it can be added again only after this returned it.
    pub fn poll_event(&mut self) -> Option<XferEvent> {
        loop {
            let heads = [
                self.received.front().map(|e| e.0),
                self.completions.front().map(|e| e.0),
                self.states.front().map(|e| e.0),
                self.drops.map(|d| d.0),
            ];
            let (source, _) = heads
                .iter()
                .enumerate()
                .filter_map(|(i, seq)| seq.map(|s| (i, s)))
                .min_by_key(|&(_, seq)| seq)?;
            match source {
                0 => return self.received.pop_front().map(|(_, e)| e),
                1 => {
                    let (_, index) = self.completions.pop_front()?;
                    if let Some(event) = self.take_completion(usize::from(index)) {
                        return Some(event);
                    }
                }
                2 => {
                    let (_, state) = self.states.pop_front()?;
                    let error = if state == TmState::Failed {
                        self.failure
                    } else {
                        None
                    };
                    return Some(XferEvent::StateChanged { state, error });
                }
                _ => {
                    return self
                        .drops
                        .take()
                        .map(|(_, count)| XferEvent::Dropped { count });
                }
            }
        }
    }

    /// How many events `poll_event` has ready.
    pub fn pending_events(&self) -> usize {
        self.received.len()
            + self.completions.len()
            + self.states.len()
            + usize::from(self.drops.is_some())
    }

    fn add_passive(
        &mut self,
        id: BufferId,
        queue: Passive,
        peer: EndpointId,
        len: Option<u64>,
        deadline: Option<Instant>,
    ) -> Result<NetBufDesc, XferError> {
        let call = match queue {
            Passive::Recv => "add_passive_recv",
            Passive::Send => "add_passive_send",
        };
        let (mem, cookie, op) = self.enqueue(call, id, deadline, |mem| {
            let len = len.unwrap_or(mem.len);
            fits(len, mem.len)?;
            Ok(Op::Passive { queue, peer, len })
        })?;
        let len = match op {
            Op::Passive { len, .. } => len,
            _ => mem.len,
        };
        Ok(NetBufDesc {
            owner: self.me,
            tag: self.tag,
            queue,
            key: mem.handle.remote_key(),
            offset: mem.offset,
            len,
            cookie,
        })
    }

    fn add_active(
        &mut self,
        id: BufferId,
        expected: Passive,
        peer: EndpointId,
        desc: &NetBufDesc,
        len: u64,
        deadline: Option<Instant>,
    ) -> Result<(), XferError> {
        if desc.queue != expected {
            return Err(XferError::WrongDirection);
        }
        if !TagRange::XFER.contains(desc.tag) {
            return Err(XferError::Tag(TagError::OutsideRange {
                tag: desc.tag,
                range: TagRange::XFER,
            }));
        }
        // The active queue that pairs with the passive one.
        let call = match expected {
            Passive::Send => "add_active_recv",
            Passive::Recv => "add_active_send",
        };
        let desc = *desc;
        self.enqueue(call, id, deadline, |mem| {
            fits(len, mem.len)?;
            fits(len, desc.len)?;
            Ok(Op::Active {
                peer,
                desc,
                len,
                phase: Phase::Start,
            })
        })?;
        Ok(())
    }

    /// Queues an idle buffer with the operation `make` builds (and
    /// validates) from its memory; returns the memory, the add's cookie and
    /// the operation. `call` is the public method adding it, for the error
    /// when the machine is not Started.
    fn enqueue(
        &mut self,
        call: &'static str,
        id: BufferId,
        deadline: Option<Instant>,
        make: impl FnOnce(MemSlice) -> Result<Op, XferError>,
    ) -> Result<(MemSlice, u64, Op), XferError> {
        self.require(call, &[TmState::Started])?;
        if deadline.is_some_and(|d| d <= self.now) {
            return Err(XferError::Expired);
        }
        let order = self.next_seq();
        let index = usize::from(id.index);
        let buffer = self.buffer_mut(id)?;
        check_idle(buffer)?;
        let op = make(buffer.mem)?;
        buffer.adds = buffer.adds.wrapping_add(1);
        let cookie = cookie(index, buffer.adds);
        let mem = buffer.mem;
        buffer.work = Work::Queued(Queued {
            op,
            deadline,
            order,
        });
        self.stats.queue_mut(op.queue()).adds += 1;
        Ok((mem, cookie, op))
    }

    /// Refuses `call` unless the machine is in one of the states it `needs`.
    fn require(&self, call: &'static str, needs: &'static [TmState]) -> Result<(), XferError> {
        if needs.contains(&self.state) {
            Ok(())
        } else {
            Err(XferError::State {
                call,
                state: self.state,
                needs,
            })
        }
    }

    fn buffer(&self, id: BufferId) -> Result<&Buffer, XferError> {
        self.slots
            .get(usize::from(id.index))
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.buffer.as_ref())
            .ok_or(XferError::UnknownBuffer)
    }

    fn buffer_mut(&mut self, id: BufferId) -> Result<&mut Buffer, XferError> {
        self.slots
            .get_mut(usize::from(id.index))
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.buffer.as_mut())
            .ok_or(XferError::UnknownBuffer)
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub(crate) fn set_state(&mut self, state: TmState) {
        self.state = state;
        let seq = self.next_seq();
        // Each state is entered at most once, so the queue never fills.
        let _ = self.states.push_back((seq, state));
    }

    /// Completes slot `index` if it is queued, and only then: the one place
    /// a buffer leaves `Queued`, so each add completes exactly once.
    pub(crate) fn complete(&mut self, index: usize, result: Result<u64, XferError>) {
        let Some(buffer) = self.slots.get_mut(index).and_then(|s| s.buffer.as_mut()) else {
            return;
        };
        let Work::Queued(queued) = &buffer.work else {
            return;
        };
        let queue = queued.op.queue();
        buffer.work = Work::Done { queue, result };
        let stats = self.stats.queue_mut(queue);
        match result {
            Ok(bytes) => {
                stats.succeeded += 1;
                stats.bytes += bytes;
            }
            Err(_) => stats.failed += 1,
        }
        let seq = self.next_seq();
        // A slot is queued here only while `Done`, once: `BUFS` places suffice.
        let _ = self.completions.push_back((seq, index as u16));
    }

    fn take_completion(&mut self, index: usize) -> Option<XferEvent> {
        let slot = self.slots.get_mut(index)?;
        let generation = slot.generation;
        let buffer = slot.buffer.as_mut()?;
        let Work::Done { queue, result } = buffer.work else {
            return None;
        };
        buffer.work = Work::Idle;
        Some(XferEvent::Completed(Completion {
            buffer: BufferId {
                index: index as u16,
                generation,
            },
            queue,
            result,
        }))
    }

    /// Counts a lost message and reports it (coalesced with unreported ones).
    pub(crate) fn drop_message(&mut self) {
        self.stats.dropped_messages += 1;
        self.drops = match self.drops {
            Some((seq, count)) => Some((seq, count.saturating_add(1))),
            None => Some((self.next_seq(), 1)),
        };
    }

    pub(crate) fn discard_staged(&mut self) {
        if self.staged.take().is_some() {
            self.drop_message();
        }
    }

    /// The queued operation of slot `index`.
    pub(crate) fn op(&self, index: usize) -> Option<&Op> {
        match &self.slots.get(index)?.buffer.as_ref()?.work {
            Work::Queued(q) => Some(&q.op),
            _ => None,
        }
    }

    pub(crate) fn op_mut(&mut self, index: usize) -> Option<&mut Op> {
        match &mut self.slots.get_mut(index)?.buffer.as_mut()?.work {
            Work::Queued(q) => Some(&mut q.op),
            _ => None,
        }
    }
}

/// A buffer may be added or deregistered only when it is idle for the user
/// and the BTL alike.
fn check_idle(buffer: &Buffer) -> Result<(), XferError> {
    match (&buffer.work, buffer.hold) {
        (Work::Idle, Hold::Nothing) => Ok(()),
        (Work::Idle, _) => Err(XferError::InFlight),
        _ => Err(XferError::Busy),
    }
}

fn fits(len: u64, max: u64) -> Result<(), XferError> {
    if len > max {
        return Err(XferError::TooLong { len, max });
    }
    Ok(())
}
