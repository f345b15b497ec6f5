//! How a transfer machine moves: it takes the BTL's events that are its own
//! (`offer`), then acts with the BTL (`run`): copies received messages into
//! MSG_RECV buffers, issues sends, puts, gets and BULK_DONE notifications,
//! expires deadlines. `progress` does both for a machine that is the BTL's
//! only user.
//!
//! Events are split from actions because a BTL event borrows the BTL: a
//! received message's bytes live in the BTL until the next `poll_event`,
//! and the receive buffer is memory the BTL holds too. So `offer` copies the
//! message into the machine's staging area, and `run`, with the BTL free
//! again, copies it into the buffer.

use super::buffer::{Hold, Op, Phase, Work, cookie, split_cookie};
use super::machine::{Staged, TransferMachine};
use super::wire::{self, Message};
use super::{BufferId, NetBufDesc, Passive, TmAddr, TmState, XferError, XferEvent};
use crate::btl::{
    Btl, BtlError, ErrorEvent, Event, Limit, MemError, MemSlice, OpId, RemoteSlice, SendError,
    SendStatus, Tag, TagRange,
};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::EndpointId;
use crate::time::Instant;

impl<const BUFS: usize, const EVENTS: usize, const MSG: usize> TransferMachine<BUFS, EVENTS, MSG> {
    /// Drives a machine that is the only user of `btl`: progresses the BTL,
    /// takes its events, acts, and returns how many events `poll_event` has
    /// ready. `now` is the caller's clock (any unit, say nanoseconds; it
    /// never goes back: an earlier value is ignored).
    ///
    /// Events that are not the machine's are dropped and counted in
    /// [`Stats::foreign_events`](super::Stats::foreign_events) (a send
    /// descriptor among them is freed). An application that also uses the
    /// BTL itself polls the BTL and calls [`TransferMachine::offer`] and
    /// [`TransferMachine::run`] instead.
    ///
    /// While a received message waits for room in the event queue, no more
    /// BTL events are taken: poll the machine's events to make room.
    pub fn progress(&mut self, btl: &mut (impl Btl + ?Sized), now: Instant) -> usize {
        btl.progress();
        self.run(btl, now);
        while self.staged.is_none() {
            let Some(event) = btl.poll_event() else {
                break;
            };
            let orphan = match self.offer(event) {
                // The machine tries what was refused again on every run.
                None | Some(Event::Error(_) | Event::PeerLeft { .. } | Event::Room { .. }) => None,
                Some(Event::SendComplete { desc, .. }) => {
                    self.stats.foreign_events += 1;
                    desc
                }
                Some(_) => {
                    self.stats.foreign_events += 1;
                    None
                }
            };
            if let Some(desc) = orphan {
                let _ = btl.free(desc);
            }
            self.run(btl, now);
        }
        self.pending_events()
    }

    /// Offers one BTL event: takes it when it is the machine's (a message
    /// on its tag, the completion of one of its sends, puts or gets) and
    /// returns `None`, or gives it back. An `Error` event is handled (a
    /// fatal one fails the machine, a peer's fails the buffers that depend
    /// on the peer) and given back too, since it concerns every user.
    ///
    /// Call [`TransferMachine::run`] after each taken event: the machine
    /// stages one received message at a time, and a message offered while
    /// another waits is dropped.
    ///
    /// ```
    /// use btl_core::btl::{Btl, Event};
    /// use btl_core::time::Instant;
    /// use btl_core::xfer::TransferMachine;
    ///
    /// /// Drives a machine next to the application's own tags.
    /// fn drive(btl: &mut (impl Btl + ?Sized), tm: &mut TransferMachine<8, 8, 256>, now: Instant) {
    ///     btl.progress();
    ///     tm.run(btl, now);
    ///     while let Some(event) = btl.poll_event() {
    ///         let own_descriptor = match tm.offer(event) {
    ///             None => None,                                    // the machine's
    ///             Some(Event::SendComplete { desc, .. }) => desc, // the application's
    ///             Some(_other) => None,                            // handle it here
    ///         };
    ///         if let Some(desc) = own_descriptor {
    ///             let _ = btl.free(desc);
    ///         }
    ///         tm.run(btl, now);
    ///     }
    /// }
    /// ```
    pub fn offer<'a>(&mut self, event: Event<'a>) -> Option<Event<'a>> {
        match event {
            Event::Received(msg) if msg.tag == self.tag => {
                self.on_message(msg.from, msg.data);
                None
            }
            // The completion carries the destination's tag, not this
            // machine's: the descriptor itself says whose send it was.
            Event::SendComplete {
                endpoint,
                tag,
                desc: Some(desc),
                result,
            } if self.holds_send(&desc) => match self.returned.push_back((desc, result)) {
                Ok(()) => None,
                // Not while the BTL gives back each descriptor once.
                Err((desc, result)) => Some(Event::SendComplete {
                    endpoint,
                    tag,
                    desc: Some(desc),
                    result,
                }),
            },
            // A BULK_DONE the BTL owned and freed. It went out on the
            // passive machine's tag, so it is some machine's; none acts on it.
            Event::SendComplete {
                tag, desc: None, ..
            } if TagRange::XFER.contains(tag) => None,
            Event::PutComplete { op, ctx, result } => {
                if self.on_rdma(op, ctx, result) {
                    None
                } else {
                    Some(Event::PutComplete { op, ctx, result })
                }
            }
            Event::GetComplete { op, ctx, result } => {
                if self.on_rdma(op, ctx, result) {
                    None
                } else {
                    Some(Event::GetComplete { op, ctx, result })
                }
            }
            Event::Error(e) => {
                self.on_error(e);
                Some(Event::Error(e))
            }
            // A peer that left fails its transfers as a lost one does.
            Event::PeerLeft { endpoint } => {
                self.on_error(ErrorEvent {
                    fatal: false,
                    endpoint: Some(endpoint),
                    error: BtlError::PeerLost(crate::btl::LostReason::Left),
                });
                Some(Event::PeerLeft { endpoint })
            }
            other => Some(other),
        }
    }

    /// Acts with the BTL on what was offered and what was added: moves
    /// Starting to Started, frees returned send descriptors, delivers the
    /// staged message, expires buffers whose deadline is at or before `now`,
    /// issues pending sends, puts, gets and notifications (retrying those the
    /// BTL refused with `OutOfResource`), and moves Stopping to Stopped once
    /// the BTL holds nothing of the machine.
    pub fn run(&mut self, btl: &mut (impl Btl + ?Sized), now: Instant) {
        self.now = self.now.max(now);
        if self.state == TmState::Starting {
            self.set_state(TmState::Started);
        }
        self.take_back_descriptors(btl);
        self.deliver(btl);
        self.expire();
        if self.state == TmState::Started {
            for index in 0..BUFS {
                self.issue(btl, index);
            }
        }
        let held = self
            .slots
            .iter()
            .any(|s| s.buffer.as_ref().is_some_and(|b| b.hold != Hold::Nothing));
        if self.state == TmState::Stopping && !held && self.returned.is_empty() {
            self.set_state(TmState::Stopped);
        }
    }

    fn on_message(&mut self, from: EndpointId, data: &[u8]) {
        match wire::parse(data) {
            Some(Message::Msg {
                sender, payload, ..
            }) => {
                let from = TmAddr {
                    endpoint: from,
                    tag: sender,
                };
                let room = self.state == TmState::Started && self.staged.is_none();
                if room && payload.len() <= MSG {
                    self.staging[..payload.len()].copy_from_slice(payload);
                    self.staged = Some(Staged {
                        from,
                        len: payload.len(),
                    });
                } else {
                    self.drop_message();
                }
            }
            Some(Message::Done { ok, cookie, len }) => self.on_done(from, ok, cookie, len),
            None => self.stats.bad_messages += 1,
        }
    }

    /// A BULK_DONE: completes the passive buffer it names, if it is still
    /// queued and the notification comes from the peer it was offered to.
    fn on_done(&mut self, from: EndpointId, ok: bool, cookie: u64, len: u64) {
        let Some(index) = self.queued(cookie) else {
            self.stats.stale += 1;
            return;
        };
        let Some(&Op::Passive {
            peer, len: offered, ..
        }) = self.op(index)
        else {
            self.stats.bad_messages += 1;
            return;
        };
        if peer != from {
            self.stats.bad_messages += 1;
            return;
        }
        let result = if !ok {
            Err(XferError::RemoteFailed)
        } else if len > offered {
            Err(XferError::Protocol)
        } else {
            Ok(len)
        };
        self.complete(index, result);
    }

    /// A put or get completed: the machine's if `ctx` names a slot whose
    /// operation is `op`.
    fn on_rdma(&mut self, op: OpId, ctx: u64, result: Result<(), BtlError>) -> bool {
        let Some((index, adds)) = split_cookie(ctx) else {
            return false;
        };
        let Some(buffer) = self.slots.get_mut(index).and_then(|s| s.buffer.as_mut()) else {
            return false;
        };
        if buffer.hold != Hold::Rdma(op) || buffer.adds != adds {
            return false;
        }
        buffer.hold = Hold::Nothing;
        match &mut buffer.work {
            Work::Queued(q) => match &mut q.op {
                Op::Active { phase, .. } if *phase == Phase::Moving => {
                    *phase = Phase::Notify(result);
                }
                _ => self.stats.stale += 1,
            },
            _ => self.stats.stale += 1,
        }
        true
    }

    fn on_error(&mut self, e: ErrorEvent) {
        if e.fatal {
            self.fail(e.error);
            return;
        }
        let Some(endpoint) = e.endpoint else {
            return;
        };
        for index in 0..BUFS {
            if self.op(index).and_then(Op::peer) == Some(endpoint) {
                self.complete(index, Err(XferError::Btl(e.error)));
            }
        }
    }

    /// A fatal BTL error: every queued buffer fails with it, then the
    /// machine is Failed.
    fn fail(&mut self, error: BtlError) {
        if matches!(self.state, TmState::Stopped | TmState::Failed) {
            return;
        }
        self.failure = Some(error);
        self.discard_staged();
        for index in 0..BUFS {
            self.complete(index, Err(XferError::Btl(error)));
        }
        self.set_state(TmState::Failed);
    }

    /// Whether `desc` is a send descriptor the BTL holds for this machine.
    fn holds_send(&self, desc: &Descriptor) -> bool {
        let held = Hold::Send(desc.fragment().class(), desc.fragment().index());
        self.slots
            .iter()
            .any(|s| s.buffer.as_ref().is_some_and(|b| b.hold == held))
    }

    /// The slot of a cookie whose add is still queued.
    fn queued(&self, cookie: u64) -> Option<usize> {
        let (index, adds) = split_cookie(cookie)?;
        let buffer = self.slots.get(index)?.buffer.as_ref()?;
        (buffer.adds == adds && matches!(buffer.work, Work::Queued(_))).then_some(index)
    }

    /// Frees the send descriptors the BTL gave back and completes their
    /// MSG_SEND buffers, found by the cookie in the descriptor's header
    /// (behind the headroom, where the BTL may have written its own).
    fn take_back_descriptors(&mut self, btl: &mut (impl Btl + ?Sized)) {
        while let Some((desc, result)) = self.returned.pop_front() {
            let cookie = desc
                .fragment_bytes(btl.pools())
                .ok()
                .and_then(|bytes| bytes.get(desc.headroom()..))
                .and_then(wire::msg_cookie);
            let _ = btl.free(desc);
            match cookie {
                Some(cookie) => self.on_send_complete(cookie, result),
                None => self.stats.bad_messages += 1,
            }
        }
    }

    fn on_send_complete(&mut self, cookie: u64, result: Result<(), BtlError>) {
        let buffer = split_cookie(cookie).and_then(|(index, adds)| {
            let b = self.slots.get_mut(index)?.buffer.as_mut()?;
            (b.adds == adds && matches!(b.hold, Hold::Send(..))).then_some((index, b))
        });
        let Some((index, buffer)) = buffer else {
            self.stats.stale += 1;
            return;
        };
        buffer.hold = Hold::Nothing;
        match self.op(index) {
            Some(&Op::MsgSend {
                len, in_btl: true, ..
            }) => self.complete(index, result.map(|()| len).map_err(XferError::Btl)),
            _ => self.stats.stale += 1,
        }
    }

    /// Copies the staged message into the first-added MSG_RECV buffer with
    /// room, or drops it when there is none. Waits while the event queue is
    /// full, so that every delivered message has its event.
    fn deliver(&mut self, btl: &mut (impl Btl + ?Sized)) {
        let Some(staged) = self.staged else {
            return;
        };
        if self.state != TmState::Started {
            self.discard_staged();
            return;
        }
        if self.received.is_full() {
            return;
        }
        let len = staged.len as u64;
        while let Some((index, mem, used)) = self.receiver(len) {
            let written = match self.staging.get(..staged.len) {
                Some(data) => write_at(btl, mem, used, data),
                None => Err(BtlError::TooLarge {
                    len,
                    max: MSG as u64,
                    whose: Limit::Here,
                }),
            };
            match written {
                Ok(()) => {
                    self.staged = None;
                    self.received_into(index, staged.from, len);
                    return;
                }
                // The memory went from under the buffer: it fails, the
                // message goes to the next one.
                Err(e) => self.complete(index, Err(XferError::Btl(e))),
            }
        }
        self.discard_staged();
    }

    /// The first-added MSG_RECV buffer with `len` bytes of room: slot,
    /// memory, bytes used.
    fn receiver(&self, len: u64) -> Option<(usize, MemSlice, u64)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let buffer = slot.buffer.as_ref()?;
                let Work::Queued(q) = &buffer.work else {
                    return None;
                };
                let Op::MsgRecv { used, .. } = q.op else {
                    return None;
                };
                (buffer.mem.len.saturating_sub(used) >= len)
                    .then_some((q.order, (index, buffer.mem, used)))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, found)| found)
    }

    /// Accounts a message copied into slot `index`: its event, then the
    /// buffer's completion if a limit is reached.
    fn received_into(&mut self, index: usize, from: TmAddr, len: u64) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let generation = slot.generation;
        let Some(buffer) = slot.buffer.as_mut() else {
            return;
        };
        let size = buffer.mem.len;
        let Work::Queued(q) = &mut buffer.work else {
            return;
        };
        let Op::MsgRecv {
            min_receive_size,
            max_messages,
            used,
            messages,
        } = &mut q.op
        else {
            return;
        };
        let offset = *used;
        *used += len;
        *messages += 1;
        let full = *messages >= *max_messages || size.saturating_sub(*used) < *min_receive_size;
        let total = *used;
        let seq = self.next_seq();
        // Room was checked before the copy.
        let _ = self.received.push_back((
            seq,
            XferEvent::Received {
                buffer: BufferId {
                    index: index as u16,
                    generation,
                },
                offset,
                len,
                from,
            },
        ));
        if full {
            self.complete(index, Ok(total));
        }
    }

    fn expire(&mut self) {
        let now = self.now;
        for index in 0..BUFS {
            let expired = self.slots[index].buffer.as_ref().is_some_and(
                |b| matches!(&b.work, Work::Queued(q) if q.deadline.is_some_and(|d| d <= now)),
            );
            if expired {
                self.complete(index, Err(XferError::Timeout));
            }
        }
    }

    /// Issues what slot `index` waits to do with the BTL, if anything.
    fn issue(&mut self, btl: &mut (impl Btl + ?Sized), index: usize) {
        let Some(buffer) = self.slots[index].buffer.as_ref() else {
            return;
        };
        let Work::Queued(q) = &buffer.work else {
            return;
        };
        let (mem, cookie) = (buffer.mem, cookie(index, buffer.adds));
        match q.op {
            Op::MsgSend {
                to,
                len,
                in_btl: false,
            } => self.send_message(btl, index, MemSlice { len, ..mem }, to, cookie),
            Op::Active {
                peer,
                desc,
                len,
                phase: Phase::Start,
            } => self.move_data(btl, index, MemSlice { len, ..mem }, peer, &desc, cookie),
            Op::Active {
                peer,
                desc,
                len,
                phase: Phase::Notify(result),
            } => self.notify(btl, index, peer, &desc, len, result),
            _ => {}
        }
    }

    /// Sends a MSG_SEND buffer: with `sendi` when small (through the staging
    /// area, free at this point unless a message waits there), else as a
    /// descriptor referencing the registered memory.
    fn send_message(
        &mut self,
        btl: &mut (impl Btl + ?Sized),
        index: usize,
        data: MemSlice,
        to: TmAddr,
        cookie: u64,
    ) {
        let header = wire::msg_header(self.tag, cookie);
        if self.staged.is_none()
            && let Some(sent) = self.try_sendi(btl, data, to, &header)
        {
            self.complete(index, sent.map(|()| data.len).map_err(XferError::Btl));
            return;
        }
        let prepared = btl.prepare_src_registered(
            to.endpoint,
            data,
            wire::MSG_HEADER_LEN,
            Order::ANY,
            DescFlags::empty(),
        );
        let mut desc = match prepared {
            Ok(desc) => desc,
            Err(BtlError::OutOfResource) => return,
            Err(e) => return self.complete(index, Err(XferError::Btl(e))),
        };
        let written = desc
            .header_mut(btl.pools())
            .map_err(BtlError::from)
            .and_then(|h| copy_exact(h, &header));
        if let Err(e) = written {
            let _ = btl.free(desc);
            return self.complete(index, Err(XferError::Btl(e)));
        }
        let held = Hold::Send(desc.fragment().class(), desc.fragment().index());
        match btl.send(to.endpoint, desc, to.tag) {
            Ok(SendStatus::Completed(desc)) => {
                if let Some(desc) = desc {
                    let _ = btl.free(desc);
                }
                self.complete(index, Ok(data.len));
            }
            Ok(SendStatus::Queued) => {
                if let Some(Op::MsgSend { in_btl, .. }) = self.op_mut(index) {
                    *in_btl = true;
                }
                if let Some(buffer) = self.slots[index].buffer.as_mut() {
                    buffer.hold = held;
                }
            }
            Err(SendError { error, desc }) => {
                let _ = btl.free(desc);
                if error != BtlError::OutOfResource {
                    self.complete(index, Err(XferError::Btl(error)));
                }
            }
        }
    }

    /// `None` when `sendi` does not apply or could not send now (the caller
    /// then uses a descriptor); otherwise the send's outcome.
    fn try_sendi(
        &mut self,
        btl: &mut (impl Btl + ?Sized),
        data: MemSlice,
        to: TmAddr,
        header: &[u8],
    ) -> Option<Result<(), BtlError>> {
        let len = usize::try_from(data.len)
            .ok()
            .filter(|&n| n <= MSG && header.len() + n <= btl.attributes().eager_limit)?;
        let payload = &mut self.staging[..len];
        if let Err(e) = read_into(btl, data, payload) {
            return Some(Err(e));
        }
        match btl.sendi(
            to.endpoint,
            header,
            payload,
            to.tag,
            Order::ANY,
            DescFlags::empty(),
        ) {
            Ok(()) => Some(Ok(())),
            Err(BtlError::OutOfResource | BtlError::TooLarge { .. }) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Issues the put (into a PASSIVE_BULK_RECV) or get (from a
    /// PASSIVE_BULK_SEND) of an active buffer.
    fn move_data(
        &mut self,
        btl: &mut (impl Btl + ?Sized),
        index: usize,
        local: MemSlice,
        peer: EndpointId,
        desc: &NetBufDesc,
        cookie: u64,
    ) {
        let remote = RemoteSlice {
            key: desc.key,
            offset: desc.offset,
            len: local.len,
        };
        let issued = match desc.queue {
            Passive::Recv => btl.put(peer, local, remote, cookie),
            Passive::Send => btl.get(peer, local, remote, cookie),
        };
        let (phase, hold) = match issued {
            Ok(op) => (Phase::Moving, Hold::Rdma(op)),
            Err(BtlError::OutOfResource) => return,
            // Still tell the passive side, so it fails now rather than at
            // its deadline.
            Err(e) => (Phase::Notify(Err(e)), Hold::Nothing),
        };
        if let Some(Op::Active { phase: p, .. }) = self.op_mut(index) {
            *p = phase;
        }
        if let Some(buffer) = self.slots[index].buffer.as_mut() {
            buffer.hold = hold;
        }
    }

    /// Sends the BULK_DONE of an active buffer whose data phase ended, then
    /// completes it: with the data phase's error, or the notification's.
    fn notify(
        &mut self,
        btl: &mut (impl Btl + ?Sized),
        index: usize,
        peer: EndpointId,
        desc: &NetBufDesc,
        len: u64,
        result: Result<(), BtlError>,
    ) {
        let moved = if result.is_ok() { len } else { 0 };
        let message = wire::done(result.is_ok(), desc.cookie, moved);
        let Some(sent) = send_small(btl, peer, desc.tag, &message) else {
            return;
        };
        let outcome = result.and(sent).map(|()| len).map_err(XferError::Btl);
        self.complete(index, outcome);
    }
}

/// Sends a few bytes with `sendi`, or a BTL-owned descriptor when `sendi`
/// cannot; `None` when the BTL is out of resources (retry later).
fn send_small(
    btl: &mut (impl Btl + ?Sized),
    endpoint: EndpointId,
    tag: Tag,
    bytes: &[u8],
) -> Option<Result<(), BtlError>> {
    match btl.sendi(endpoint, bytes, &[], tag, Order::ANY, DescFlags::empty()) {
        Ok(()) => return Some(Ok(())),
        Err(BtlError::OutOfResource | BtlError::TooLarge { .. }) => {}
        Err(e) => return Some(Err(e)),
    }
    let desc = match btl.prepare_src(endpoint, bytes, 0, Order::ANY, DescFlags::BTL_OWNERSHIP) {
        Ok(desc) => desc,
        Err(BtlError::OutOfResource) => return None,
        Err(e) => return Some(Err(e)),
    };
    match btl.send(endpoint, desc, tag) {
        Ok(SendStatus::Completed(desc)) => {
            if let Some(desc) = desc {
                let _ = btl.free(desc);
            }
            Some(Ok(()))
        }
        Ok(SendStatus::Queued) => Some(Ok(())),
        Err(SendError { error, desc }) => {
            let _ = btl.free(desc);
            (error != BtlError::OutOfResource).then_some(Err(error))
        }
    }
}

/// Copies `src` into `dst` when they are the same length.
fn copy_exact(dst: &mut [u8], src: &[u8]) -> Result<(), BtlError> {
    if dst.len() != src.len() {
        return Err(BtlError::TooLarge {
            len: src.len() as u64,
            max: dst.len() as u64,
            whose: Limit::Here,
        });
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// The byte range of a slice within its region, checked.
fn range(size: usize, offset: u64, len: u64) -> Result<core::ops::Range<usize>, BtlError> {
    let err = BtlError::Memory(MemError::OutOfBounds {
        offset,
        len,
        size: size as u64,
    });
    let end = offset.checked_add(len).ok_or(err)?;
    if end > size as u64 {
        return Err(err);
    }
    Ok(offset as usize..end as usize)
}

/// Reads registered memory `data` into `out` (of the same length).
fn read_into(btl: &(impl Btl + ?Sized), data: MemSlice, out: &mut [u8]) -> Result<(), BtlError> {
    let region = btl.region(data.handle)?;
    copy_exact(out, &region[range(region.len(), data.offset, data.len)?])
}

/// Writes `data` at byte `at` of the buffer `mem`.
fn write_at(
    btl: &mut (impl Btl + ?Sized),
    mem: MemSlice,
    at: u64,
    data: &[u8],
) -> Result<(), BtlError> {
    let len = data.len() as u64;
    if at.checked_add(len).is_none_or(|end| end > mem.len) {
        return Err(BtlError::Memory(MemError::OutOfBounds {
            offset: at,
            len,
            size: mem.len,
        }));
    }
    let region = btl.region_mut(mem.handle)?;
    let r = range(region.len(), mem.offset + at, len)?;
    copy_exact(&mut region[r], data)
}
