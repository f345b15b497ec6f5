//! The operations under way: this side's puts and gets, gets it asked a
//! source to put into a third process, and peers' gets it serves, each in
//! a slot of a table the caller lends until it ends.
//!
//! An operation is keyed by its peer and a transfer id the peer sees in
//! every packet of it. Its bulk data is handed out a packet at a time
//! ([`Ops::next_put`]) and credited as packets are acknowledged or arrive
//! ([`Ops::credit`]); it ends exactly once ([`Ops::finish`]), with the
//! event its caller is owed, or, for a get served on behalf of a third
//! process, with an answer to that process. Work that concerns a peer
//! other than the one whose packet started it (a get into a third
//! process, an answer to the process that asked for one) waits in its slot
//! as [`Mail`] until the engine, which knows every peer, takes it.

use core::borrow::BorrowMut;

use super::LinkId;
use super::events::{EventSlot, Events, Pending};
use super::packet::Answer;
use crate::btl::{
    Access, BtlError, Completion, MemSlice, OpId, RejectCode, RemoteKey, RemoteSlice,
};
use crate::endpoint::{EndpointId, ProcName};
use crate::wire::{DeviceKey, DoneRepr, GetRepr, NotifyRepr, PutRepr, RejectRepr};

/// Bit of a PUT's `xfer_id` marking data that answers the receiver's GET.
pub(crate) const GET_REPLY: u64 = 1 << 63;

/// The GET of get `id`, asking for `remote` into process `me`.
pub(crate) fn get_request(id: u64, remote: RemoteSlice, me: ProcName) -> GetRepr {
    GetRepr {
        xfer_id: id,
        src_handle: remote.key.0,
        src_offset: remote.offset,
        len: remote.len,
        target_job: me.job,
        target_rank: me.rank,
        dst_handle: 0,
        dst_offset: 0,
    }
}

/// What a GET asks for: its source in the process it is sent to, its
/// destination in the target process, and the target.
pub(crate) fn get_parts(get: &GetRepr) -> (RemoteSlice, RemoteSlice, ProcName) {
    let slice = |handle, offset| RemoteSlice {
        key: RemoteKey(handle),
        offset,
        len: get.len,
    };
    (
        slice(get.src_handle, get.src_offset),
        slice(get.dst_handle, get.dst_offset),
        ProcName::new(get.target_job, get.target_rank),
    )
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// This side puts its data into the peer's memory.
    Put,
    /// This side gets the peer's data into its memory.
    Get,
    /// This side asked the peer to put its data into a third process; the
    /// peer answers DONE or REJECT.
    GetThirdParty,
    /// This side serves a peer's get: it puts, nobody here is told.
    Serve,
}

/// How an operation's bytes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// In PUT packets: this side's (a put, a served get) or the peer's (a
    /// get).
    Packets,
    /// By the driver's device, once the peer has said what its key names
    /// ([`keys`](super::keys)).
    Key,
    /// A get the peer answered `Busy` (it had no room for it then): its
    /// GET goes again when the peer's retry is due, in packets.
    Busy,
    /// By the driver's device, into or out of the peer's region `remote`;
    /// handed to the driver for `posted`, its link, once it has been
    /// ([`Engine::poll_rdma`](super::Engine::poll_rdma)).
    Device {
        /// How the peer's device reaches the region.
        remote: DeviceKey,
        /// The link the driver carries it on, while it does.
        posted: Option<LinkId>,
    },
}

/// One operation.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// The peer its packets go to (or come from).
    pub peer: EndpointId,
    /// The caller's value, given back in the event.
    pub ctx: u64,
    /// The transfer id its packets carry.
    pub id: u64,
    /// Bytes it moves.
    pub len: u64,
    /// Local data: put source, get destination, served get's source. A get
    /// for a third process has none here.
    pub local: Option<MemSlice>,
    /// Where the data lands at the peer (a put's destination).
    pub remote: RemoteSlice,
    /// A get served for a third process: the process that asked, to be
    /// answered DONE or REJECT under its transfer id.
    pub reply_to: Option<(ProcName, u64)>,
    /// Bytes handed to packets so far.
    pub queued: u64,
    /// Bytes acknowledged (sent) or received (a get) so far.
    pub done: u64,
    /// Packets of the transfer, for PUT headers.
    pub count: u32,
    /// Index of the next PUT packet.
    pub next_index: u32,
    /// A put's notice to its target, if it asked for one.
    pub notice: Option<Notice>,
    /// How its bytes move.
    pub path: Path,
    /// Why it fails once the driver gives it back: its peer was lost
    /// while the device had it, and its memory is the device's until the
    /// device is done with it.
    pub failed: Option<BtlError>,
}

/// A put's notice to its target ([`Btl::put_notify`]): its value, and how
/// far it got. It goes after the put's last data, and the put is done
/// once the target has acknowledged it.
///
/// [`Btl::put_notify`]: crate::btl::Btl::put_notify
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    /// The value for the target's event.
    pub imm: u64,
    /// Handed to a packet.
    pub sent: bool,
    /// Acknowledged by the target.
    pub taken: bool,
}

/// What an operation hands its peer's window next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A PUT packet: its header fields, its data and the slot of its
    /// operation.
    Put {
        /// The header fields.
        put: PutRepr,
        /// The data.
        data: MemSlice,
        /// The operation's slot.
        op: u16,
    },
    /// A put's notice, after its last data.
    Notice {
        /// The packet.
        notify: NotifyRepr,
        /// The operation's slot.
        op: u16,
    },
}

impl Op {
    /// An operation of `kind` moving `len` bytes, in packets of at most
    /// `chunk`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: OpKind,
        peer: EndpointId,
        ctx: u64,
        id: u64,
        local: Option<MemSlice>,
        remote: RemoteSlice,
        len: u64,
        chunk: u64,
    ) -> Self {
        Op {
            kind,
            peer,
            ctx,
            id,
            len,
            local,
            remote,
            reply_to: None,
            queued: 0,
            done: 0,
            count: u32::try_from(len.div_ceil(chunk.max(1)).max(1)).unwrap_or(u32::MAX),
            next_index: 0,
            notice: None,
            path: Path::Packets,
            failed: None,
        }
    }

    /// The same operation telling its target with `imm`, if given (a put).
    pub fn noticed(self, imm: Option<u64>) -> Self {
        Op {
            notice: imm.map(|imm| Notice {
                imm,
                sent: false,
                taken: false,
            }),
            ..self
        }
    }

    /// The GET that asks the peer for a get's data, for this process `me`.
    pub fn get_request(&self, me: ProcName) -> GetRepr {
        get_request(self.id, self.remote, me)
    }

    /// Whether it waits for the driver to take it to its device.
    fn is_for_device(&self) -> bool {
        matches!(self.path, Path::Device { posted: None, .. })
    }

    /// Whether it still has data, or its notice, to hand to packets.
    fn is_sending(&self) -> bool {
        matches!(self.kind, OpKind::Put | OpKind::Serve)
            && self.path == Path::Packets
            && (self.queued < self.len || self.notice.is_some_and(|n| !n.sent))
    }

    /// Whether all its bytes are done and its notice, if any, taken.
    fn is_done(&self) -> bool {
        self.done >= self.len && self.notice.is_none_or(|n| n.taken)
    }
}

/// Work for the engine that concerns another peer than the one whose
/// packet made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mail {
    /// A peer's get whose data goes to a third process: the engine finds
    /// that process and serves it, or refuses with `NoTarget`.
    Route {
        /// The peer that asked.
        from: EndpointId,
        /// What it asked for.
        get: GetRepr,
    },
    /// The end of a get served for a third process, for the process that
    /// asked.
    Answer {
        /// The process that asked.
        to: ProcName,
        /// DONE or REJECT.
        answer: Answer,
    },
}

/// One slot of the operation table.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpSlot(Slot);

#[derive(Debug, Clone, Copy, Default)]
enum Slot {
    #[default]
    Free,
    Op(Op),
    Mail(Mail),
}

impl OpSlot {
    /// A free slot.
    pub const EMPTY: Self = OpSlot(Slot::Free);
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its event is queued (a put or get of this side's).
    Reported,
    /// Nobody is told (a get served for the peer itself).
    Silent,
    /// Its answer waits as mail for the process that asked.
    Answered,
}

/// The operations under way, in slots `C`.
#[derive(Debug)]
pub struct Ops<C> {
    slots: C,
    next_id: u64,
    /// Operations with data left to hand out, and operations waiting for
    /// the driver's device: when none, nothing is scanned for them.
    sending: usize,
    for_device: usize,
    /// Slots holding mail: when none, taking mail scans nothing (the
    /// engine asks at every call).
    mail: usize,
}

impl<C: BorrowMut<[OpSlot]>> Ops<C> {
    /// An empty table over `slots`.
    pub fn new(slots: C) -> Self {
        Ops {
            slots,
            next_id: 0,
            sending: 0,
            for_device: 0,
            mail: 0,
        }
    }

    fn slots(&self) -> &[OpSlot] {
        self.slots.borrow()
    }

    fn slots_mut(&mut self) -> &mut [OpSlot] {
        self.slots.borrow_mut()
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.slots().len()
    }

    /// Operations under way (mail not counted).
    pub fn len(&self) -> usize {
        self.ops().count()
    }

    /// A mark of the operations under way: every one started so far has
    /// an id at or below it.
    pub fn mark(&self) -> u64 {
        self.next_id
    }

    /// Whether an operation started at or before `mark` is still under
    /// way.
    pub fn any_at_or_below(&self, mark: u64) -> bool {
        self.ops().any(|(_, op)| op.id <= mark)
    }

    /// The next transfer id (never with the [`GET_REPLY`] bit).
    pub fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id & !GET_REPLY
    }

    /// A free slot, if any.
    pub fn free_slot(&self) -> Option<usize> {
        self.slots().iter().position(|s| matches!(s.0, Slot::Free))
    }

    /// Starts `op` in slot `i` (free, from [`free_slot`](Self::free_slot)).
    pub fn start(&mut self, i: usize, op: Op) {
        self.count(&op, true);
        if let Some(slot) = self.slots_mut().get_mut(i) {
            slot.0 = Slot::Op(op);
        }
    }

    /// Frees slot `i` without ending its operation: one that never got
    /// under way (its request could not be queued).
    pub fn abandon(&mut self, i: usize) {
        if let Some(slot) = self.slots_mut().get_mut(i)
            && let Slot::Op(op) = slot.0
        {
            slot.0 = Slot::Free;
            self.count(&op, false);
        }
    }

    /// Counts `op` in (`add`) or out of the operations that are scanned
    /// for.
    fn count(&mut self, op: &Op, add: bool) {
        let (sending, for_device) = (
            usize::from(op.is_sending()),
            usize::from(op.is_for_device()),
        );
        if add {
            self.sending += sending;
            self.for_device += for_device;
        } else {
            self.sending -= sending;
            self.for_device -= for_device;
        }
    }

    /// Leaves `mail` for the engine in slot `i` (free).
    pub fn post(&mut self, i: usize, mail: Mail) {
        if let Some(slot) = self.slots_mut().get_mut(i) {
            slot.0 = Slot::Mail(mail);
            self.mail += 1;
        }
    }

    /// Whether mail waits to be taken.
    pub fn has_mail(&self) -> bool {
        self.mail != 0
    }

    /// Takes a mail left, freeing its slot (the one in the first slot).
    pub fn take_mail(&mut self) -> Option<Mail> {
        if self.mail == 0 {
            return None;
        }
        let mail = self.slots_mut().iter_mut().find_map(|s| match s.0 {
            Slot::Mail(mail) => {
                s.0 = Slot::Free;
                Some(mail)
            }
            _ => None,
        })?;
        self.mail -= 1;
        Some(mail)
    }

    /// The operation in slot `i`.
    pub fn get(&self, i: usize) -> Option<&Op> {
        match &self.slots().get(i)?.0 {
            Slot::Op(op) => Some(op),
            _ => None,
        }
    }

    fn ops(&self) -> impl Iterator<Item = (usize, &Op)> + '_ {
        self.slots()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.0 {
                Slot::Op(op) => Some((i, op)),
                _ => None,
            })
    }

    /// The slot of the operation of `kind` to `peer` with transfer `id`.
    pub fn find(&self, kind: OpKind, peer: EndpointId, id: u64) -> Option<usize> {
        self.ops()
            .find(|(_, o)| o.kind == kind && o.peer == peer && o.id == id)
            .map(|(i, _)| i)
    }

    /// Operations of `kind` to `peer` under way.
    pub fn count_of(&self, kind: OpKind, peer: EndpointId) -> usize {
        self.ops()
            .filter(|(_, o)| o.kind == kind && o.peer == peer)
            .count()
    }

    /// The slot of any operation to `peer` with transfer `id`: what a
    /// REJECT names.
    pub fn find_any(&self, peer: EndpointId, id: u64) -> Option<usize> {
        self.ops()
            .find(|(_, o)| o.peer == peer && o.id == id)
            .map(|(i, _)| i)
    }

    /// Whether an operation under way reads or writes registration
    /// `handle`.
    pub fn uses(&self, handle: crate::btl::MemHandle) -> bool {
        self.ops()
            .any(|(_, o)| o.local.is_some_and(|l| l.handle == handle))
    }

    /// Hands out what goes next to `peer`: a PUT packet of at most `chunk`
    /// bytes, or the notice that follows a put's last one.
    pub fn next_put(&mut self, peer: EndpointId, chunk: u64) -> Option<Next> {
        if self.sending == 0 {
            return None;
        }
        let slots: &mut [OpSlot] = self.slots.borrow_mut();
        let (i, op) = slots
            .iter_mut()
            .enumerate()
            .find_map(|(i, s)| match &mut s.0 {
                Slot::Op(op) if op.peer == peer && op.is_sending() => Some((i, op)),
                _ => None,
            })?;
        let next = if op.queued < op.len {
            let local = op.local?;
            let len = chunk.max(1).min(op.len - op.queued);
            let put = PutRepr {
                xfer_id: op.id,
                handle: op.remote.key.0,
                offset: op.remote.offset + op.queued,
                total_len: op.len,
                index: op.next_index,
                count: op.count,
            };
            let data = MemSlice {
                handle: local.handle,
                offset: local.offset + op.queued,
                len,
            };
            op.queued += len;
            op.next_index += 1;
            Next::Put {
                put,
                data,
                op: i as u16,
            }
        } else {
            let notice = op.notice.as_mut()?;
            notice.sent = true;
            Next::Notice {
                notify: NotifyRepr {
                    xfer_id: op.id,
                    handle: op.remote.key.0,
                    offset: op.remote.offset,
                    len: op.len,
                    imm: notice.imm,
                },
                op: i as u16,
            }
        };
        let done_sending = !op.is_sending();
        self.sending -= usize::from(done_sending);
        Some(next)
    }

    /// Whether a PUT packet handed out by [`next_put`](Self::next_put) could
    /// not go after all: its data is handed out again.
    pub fn unput(&mut self, i: usize, len: u64) {
        self.hand_back(i, |op| {
            op.queued -= len.min(op.queued);
            op.next_index = op.next_index.saturating_sub(1);
        });
    }

    /// Whether a notice handed out by [`next_put`](Self::next_put) could not
    /// go after all (no credit): it is handed out again.
    pub fn unnotice(&mut self, i: usize) {
        self.hand_back(i, |op| {
            if let Some(n) = op.notice.as_mut() {
                n.sent = false;
            }
        });
    }

    fn hand_back(&mut self, i: usize, undo: impl FnOnce(&mut Op)) {
        if let Some(OpSlot(Slot::Op(op))) = self.slots_mut().get_mut(i) {
            let was = op.is_sending();
            undo(op);
            if !was && op.is_sending() {
                self.sending += 1;
            }
        }
    }

    /// Changes the operation in slot `i` with `change`, if it is still
    /// transfer `id` of `peer`; `None` if it is not.
    pub fn update<R>(
        &mut self,
        i: usize,
        peer: EndpointId,
        id: u64,
        change: impl FnOnce(&mut Op) -> R,
    ) -> Option<R> {
        let before = *self.op_of(i, peer, id)?;
        let op = self.op_of(i, peer, id)?;
        let out = change(op);
        let after = *op;
        self.count(&before, false);
        self.count(&after, true);
        Some(out)
    }

    /// Hands the next operation to `peer` that its device is to carry out
    /// to the driver, for `link`.
    pub fn next_device(&mut self, peer: EndpointId, link: LinkId) -> Option<(usize, Op)> {
        if self.for_device == 0 {
            return None;
        }
        let slots: &mut [OpSlot] = self.slots.borrow_mut();
        let taken = slots
            .iter_mut()
            .enumerate()
            .find_map(|(i, s)| match &mut s.0 {
                Slot::Op(op) if op.peer == peer => match &mut op.path {
                    Path::Device { posted, .. } if posted.is_none() => {
                        *posted = Some(link);
                        Some((i, *op))
                    }
                    _ => None,
                },
                _ => None,
            })?;
        self.for_device -= 1;
        Some(taken)
    }

    /// `link` is gone, and the device is done with what it carried: those
    /// operations are handed out again, or end if their peer was lost
    /// meanwhile.
    pub fn unpost<E: BorrowMut<[EventSlot]>>(&mut self, link: LinkId, events: &mut Events<E>) {
        for i in 0..self.capacity() {
            let Some(op) = self.get(i) else { continue };
            let Path::Device { remote, posted } = op.path else {
                continue;
            };
            if posted != Some(link) {
                continue;
            }
            match op.failed {
                Some(error) => {
                    self.finish(i, Err(error), events);
                }
                None => {
                    let (peer, id) = (op.peer, op.id);
                    self.update(i, peer, id, |op| {
                        op.path = Path::Device {
                            remote,
                            posted: None,
                        }
                    });
                }
            }
        }
    }

    /// The notice of the put in slot `i` was acknowledged (or failed), if
    /// it is still transfer `id` of `peer`; how the put ended, if it did.
    pub fn notice_taken<E: BorrowMut<[EventSlot]>>(
        &mut self,
        i: usize,
        peer: EndpointId,
        id: u64,
        result: Result<(), BtlError>,
        events: &mut Events<E>,
    ) -> Option<Ended> {
        let op = self.op_of(i, peer, id)?;
        if let Some(n) = op.notice.as_mut() {
            n.taken = true;
        }
        if result.is_err() || op.is_done() {
            return self.finish(i, result, events);
        }
        None
    }

    /// `len` bytes of the operation in slot `i` were acknowledged (a put's
    /// packet) or arrived (a get's), if it is still transfer `id` of
    /// `peer`; it ends once all its bytes are done, or at once with an
    /// error. How it ended, if it did.
    pub fn credit<E: BorrowMut<[EventSlot]>>(
        &mut self,
        i: usize,
        peer: EndpointId,
        id: u64,
        len: u64,
        result: Result<(), BtlError>,
        events: &mut Events<E>,
    ) -> Option<Ended> {
        let op = self.op_of(i, peer, id)?;
        op.done = op.done.saturating_add(len);
        if result.is_err() || op.is_done() {
            return self.finish(i, result, events);
        }
        None
    }

    /// The operation in slot `i`, if it is still transfer `id` of `peer`
    /// (a slot freed early and taken by another operation is not).
    fn op_of(&mut self, i: usize, peer: EndpointId, id: u64) -> Option<&mut Op> {
        match &mut self.slots_mut().get_mut(i)?.0 {
            Slot::Op(op) if op.id == id && op.peer == peer => Some(op),
            _ => None,
        }
    }

    /// Ends the operation in slot `i` with `result`: a put or get of this
    /// side's queues its event (its place was kept when it started), a get
    /// served for a third process leaves its answer as mail, one served for
    /// the peer itself ends silently.
    pub fn finish<E: BorrowMut<[EventSlot]>>(
        &mut self,
        i: usize,
        result: Result<(), BtlError>,
        events: &mut Events<E>,
    ) -> Option<Ended> {
        let Slot::Op(op) = self.slots().get(i)?.0 else {
            return None;
        };
        self.count(&op, false);
        let slot = self.slots_mut().get_mut(i)?;
        slot.0 = Slot::Free;
        let (op_id, ctx) = (OpId(op.id), op.ctx);
        let done = match op.kind {
            OpKind::Put => Completion::Put {
                op: op_id,
                ctx,
                result,
            },
            OpKind::Get | OpKind::GetThirdParty => Completion::Get {
                op: op_id,
                ctx,
                result,
            },
            OpKind::Serve => {
                let Some((to, xfer_id)) = op.reply_to else {
                    return Some(Ended::Silent);
                };
                let answer = match result {
                    Ok(()) => Answer::Done(DoneRepr { xfer_id }),
                    // Nothing is owed after finalize.
                    Err(BtlError::Finalized) => return Some(Ended::Silent),
                    Err(BtlError::Rejected(code)) => Answer::Reject(RejectRepr { xfer_id, code }),
                    Err(_) => Answer::Reject(RejectRepr {
                        xfer_id,
                        code: RejectCode::NoTarget,
                    }),
                };
                slot.0 = Slot::Mail(Mail::Answer { to, answer });
                self.mail += 1;
                return Some(Ended::Answered);
            }
        };
        events.push_owed(Pending::Done(done));
        Some(Ended::Reported)
    }

    /// Ends every operation to `peer` with `error`.
    pub fn fail_peer<E: BorrowMut<[EventSlot]>>(
        &mut self,
        peer: EndpointId,
        error: BtlError,
        events: &mut Events<E>,
    ) {
        for i in 0..self.capacity() {
            let Some(op) = self.get(i).filter(|o| o.peer == peer) else {
                continue;
            };
            let with_device = matches!(
                op.path,
                Path::Device {
                    posted: Some(_),
                    ..
                }
            );
            if with_device && error != BtlError::Finalized {
                // Its memory is the device's until the device gives it
                // back: it ends then.
                let id = op.id;
                self.update(i, peer, id, |op| op.failed = Some(error));
                continue;
            }
            self.finish(i, Err(error), events);
        }
    }

    /// Where a PUT's data from `peer` lands: an outstanding get's buffer
    /// for a reply, a registration for a peer's put (checked by
    /// `registered`); the refusal code otherwise.
    pub fn put_target(
        &self,
        peer: EndpointId,
        put: &PutRepr,
        len: u64,
        registered: impl FnOnce(RemoteSlice, Access) -> Result<MemSlice, RejectCode>,
    ) -> Result<MemSlice, RejectCode> {
        if put.xfer_id & GET_REPLY != 0 {
            let i = self
                .find(OpKind::Get, peer, put.xfer_id & !GET_REPLY)
                .ok_or(RejectCode::BadHandle)?;
            let op = self.get(i).ok_or(RejectCode::BadHandle)?;
            let local = op.local.ok_or(RejectCode::BadHandle)?;
            let end = put.offset.checked_add(len).ok_or(RejectCode::OutOfBounds)?;
            if end > op.len {
                return Err(RejectCode::OutOfBounds);
            }
            return Ok(MemSlice {
                handle: local.handle,
                offset: local.offset + put.offset,
                len,
            });
        }
        let remote = RemoteSlice {
            key: RemoteKey(put.handle),
            offset: put.offset,
            len,
        };
        registered(remote, Access::REMOTE_WRITE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btl::MemHandle;
    use crate::engine::testkit::link;

    const P: EndpointId = EndpointId(1);

    fn events() -> Events<[EventSlot; 8]> {
        Events::new([const { EventSlot::EMPTY }; 8])
    }

    fn local(handle: MemHandle, len: u64) -> MemSlice {
        MemSlice {
            handle,
            offset: 0,
            len,
        }
    }

    fn handle() -> MemHandle {
        let mut regs =
            crate::btl::Registrations::<&mut [u8], [crate::btl::RegSlot<&mut [u8]>; 1]>::inline();
        let mut bytes = [0u8; 1];
        match regs.register(&mut bytes[..], Access::empty()) {
            Ok(h) => h,
            Err(_) => panic!("a free slot"),
        }
    }

    fn remote(len: u64) -> RemoteSlice {
        RemoteSlice {
            key: RemoteKey(9),
            offset: 100,
            len,
        }
    }

    #[test]
    fn a_put_is_handed_out_in_chunks_and_ends_once_all_is_acknowledged() {
        let mut ops = Ops::new([OpSlot::EMPTY; 4]);
        let mut ev = events();
        let h = handle();
        let i = ops.free_slot().expect("room");
        let id = ops.new_id();
        assert!(ev.owe());
        ops.start(
            i,
            Op::new(OpKind::Put, P, 7, id, Some(local(h, 10)), remote(10), 10, 4),
        );
        let mut pieces = std::vec::Vec::new();
        while let Some(next) = ops.next_put(P, 4) {
            let Next::Put {
                put,
                data,
                op: slot,
            } = next
            else {
                panic!("no notice was asked for: {next:?}");
            };
            assert_eq!(usize::from(slot), i);
            pieces.push((put.offset, put.index, put.count, data.len));
        }
        assert_eq!(pieces, [(100, 0, 3, 4), (104, 1, 3, 4), (108, 2, 3, 2)]);
        assert_eq!(ops.next_put(P, 4), None, "all handed out");
        assert_eq!(ops.credit(i, P, id, 4, Ok(()), &mut ev), None);
        assert_eq!(
            ops.credit(i, P, id + 1, 6, Ok(()), &mut ev),
            None,
            "another transfer"
        );
        assert_eq!(
            ops.credit(i, P, id, 6, Ok(()), &mut ev),
            Some(Ended::Reported)
        );
        assert!(matches!(
            ev.pop(),
            Some(Pending::Done(Completion::Put {
                ctx: 7,
                result: Ok(()),
                ..
            }))
        ));
        assert_eq!(ops.len(), 0);
        assert_eq!(ops.finish(i, Ok(()), &mut ev), None, "ends once");
    }

    #[test]
    fn a_notice_follows_the_last_data_and_the_put_ends_once_it_is_taken() {
        let mut ops = Ops::new([OpSlot::EMPTY; 2]);
        let mut ev = events();
        let h = handle();
        let i = ops.free_slot().expect("room");
        let id = ops.new_id();
        assert!(ev.owe());
        let op = Op::new(OpKind::Put, P, 7, id, Some(local(h, 6)), remote(6), 6, 4);
        ops.start(i, op.noticed(Some(0xfeed)));
        assert!(matches!(ops.next_put(P, 4), Some(Next::Put { .. })));
        assert!(matches!(ops.next_put(P, 4), Some(Next::Put { .. })));
        let notify = NotifyRepr {
            xfer_id: id,
            handle: 9,
            offset: 100,
            len: 6,
            imm: 0xfeed,
        };
        let op_slot = i as u16;
        assert_eq!(
            ops.next_put(P, 4),
            Some(Next::Notice {
                notify,
                op: op_slot
            })
        );
        assert_eq!(ops.next_put(P, 4), None, "one notice");
        ops.unnotice(i);
        assert_eq!(
            ops.next_put(P, 4),
            Some(Next::Notice {
                notify,
                op: op_slot
            }),
            "handed out again when it could not go"
        );
        assert_eq!(
            ops.credit(i, P, id, 6, Ok(()), &mut ev),
            None,
            "the data is in, the notice is not yet taken"
        );
        assert_eq!(
            ops.notice_taken(i, P, id, Ok(()), &mut ev),
            Some(Ended::Reported)
        );
        assert!(matches!(
            ev.pop(),
            Some(Pending::Done(Completion::Put { result: Ok(()), .. }))
        ));
        // An empty put with a notice is the notice alone.
        let i = ops.free_slot().expect("room");
        let id = ops.new_id();
        assert!(ev.owe());
        let op = Op::new(OpKind::Put, P, 0, id, Some(local(h, 0)), remote(0), 0, 4);
        ops.start(i, op.noticed(Some(1)));
        assert!(matches!(ops.next_put(P, 4), Some(Next::Notice { .. })));
        assert_eq!(
            ops.notice_taken(i, P, id, Err(BtlError::NotSupported), &mut ev),
            Some(Ended::Reported)
        );
    }

    #[test]
    fn a_device_transfer_is_handed_out_once_per_link_and_again_when_its_link_goes() {
        let mut ops = Ops::new([OpSlot::EMPTY; 2]);
        let mut ev = events();
        let i = ops.free_slot().expect("room");
        let id = ops.new_id();
        assert!(ev.owe());
        ops.start(
            i,
            Op::new(
                OpKind::Put,
                P,
                7,
                id,
                Some(local(handle(), 8)),
                remote(8),
                8,
                4,
            ),
        );
        let remote = DeviceKey { key: 3, base: 0 };
        let (l1, l2) = (link(1), link(2));
        assert!(ops.next_device(P, l1).is_none(), "in packets");
        ops.update(i, P, id, |o| {
            o.path = Path::Device {
                remote,
                posted: None,
            }
        });
        assert_eq!(ops.next_put(P, 4), None, "the device's, not the packets'");
        let (slot, op) = ops.next_device(P, l1).expect("handed out");
        assert_eq!(
            (slot, op.path),
            (
                i,
                Path::Device {
                    remote,
                    posted: Some(l1)
                }
            )
        );
        assert!(ops.next_device(P, l1).is_none(), "once");
        ops.unpost(l2, &mut ev);
        assert!(
            ops.next_device(P, l2).is_none(),
            "another link's loss changes nothing"
        );
        ops.unpost(l1, &mut ev);
        assert!(ops.next_device(P, l2).is_some(), "again, on the next link");
        assert_eq!(ev.len(), 0);
        assert_eq!(ops.for_device, 0, "none waits for the device");
        ops.unpost(l2, &mut ev);
        assert_eq!(ops.for_device, 1, "it waits again");
        assert_eq!(ops.finish(i, Ok(()), &mut ev), Some(Ended::Reported));
        assert_eq!((ops.for_device, ops.sending), (0, 0), "counted out");
    }

    #[test]
    fn a_lost_peers_device_transfer_ends_once_the_device_lets_go() {
        let mut ops = Ops::new([OpSlot::EMPTY; 2]);
        let mut ev = events();
        let i = ops.free_slot().expect("room");
        let id = ops.new_id();
        assert!(ev.owe());
        let op = Op::new(
            OpKind::Get,
            P,
            7,
            id,
            Some(local(handle(), 8)),
            remote(8),
            8,
            4,
        );
        ops.start(i, op);
        let remote = DeviceKey { key: 3, base: 0 };
        ops.update(i, P, id, |o| {
            o.path = Path::Device {
                remote,
                posted: None,
            }
        });
        let _ = ops.next_device(P, link(1));
        let lost = BtlError::PeerLost(crate::btl::LostReason::Timeout);
        ops.fail_peer(P, lost, &mut ev);
        assert_eq!(ev.len(), 0, "the device may still write its memory");
        assert_eq!(ops.get(i).and_then(|o| o.failed), Some(lost));
        ops.unpost(link(1), &mut ev);
        assert!(matches!(
            ev.pop(),
            Some(Pending::Done(Completion::Get { result: Err(e), .. })) if e == lost
        ));
        assert_eq!(ops.len(), 0);
        // Finalize does not wait: the driver's device goes with it.
        let i = ops.free_slot().expect("room");
        assert!(ev.owe());
        ops.start(i, op);
        ops.update(i, P, id, |o| {
            o.path = Path::Device {
                remote,
                posted: Some(link(1)),
            }
        });
        ops.fail_peer(P, BtlError::Finalized, &mut ev);
        assert_eq!(ev.len(), 1);
    }

    #[test]
    fn a_served_get_for_a_third_process_answers_it_by_mail() {
        let mut ops = Ops::new([OpSlot::EMPTY; 2]);
        let mut ev = events();
        let i = ops.free_slot().expect("room");
        let mut op = Op::new(
            OpKind::Serve,
            P,
            0,
            5,
            Some(local(handle(), 8)),
            remote(8),
            8,
            64,
        );
        let asker = ProcName::new(1, 2);
        op.reply_to = Some((asker, 33));
        ops.start(i, op);
        assert_eq!(
            ops.finish(
                i,
                Err(BtlError::Rejected(RejectCode::AccessDenied)),
                &mut ev
            ),
            Some(Ended::Answered)
        );
        assert_eq!(ev.len(), 0, "nobody here is told");
        assert_eq!(
            ops.take_mail(),
            Some(Mail::Answer {
                to: asker,
                answer: Answer::Reject(RejectRepr {
                    xfer_id: 33,
                    code: RejectCode::AccessDenied
                })
            })
        );
        assert_eq!(ops.take_mail(), None);
        assert_eq!(ops.free_slot(), Some(0), "the mail's slot is free again");
    }

    #[test]
    fn reply_data_lands_only_in_its_get_and_within_it() {
        let mut ops = Ops::new([OpSlot::EMPTY; 2]);
        let h = handle();
        let i = ops.free_slot().expect("room");
        ops.start(
            i,
            Op::new(OpKind::Get, P, 0, 3, Some(local(h, 16)), remote(16), 16, 64),
        );
        let reply = |offset| PutRepr {
            xfer_id: 3 | GET_REPLY,
            handle: 0,
            offset,
            total_len: 16,
            index: 0,
            count: 1,
        };
        let refuse = |_, _| Err(RejectCode::BadHandle);
        assert_eq!(
            ops.put_target(P, &reply(8), 8, refuse),
            Ok(MemSlice {
                handle: h,
                offset: 8,
                len: 8
            })
        );
        assert_eq!(
            ops.put_target(P, &reply(9), 8, refuse),
            Err(RejectCode::OutOfBounds)
        );
        assert_eq!(
            ops.put_target(EndpointId(2), &reply(0), 8, refuse),
            Err(RejectCode::BadHandle),
            "another peer's reply"
        );
    }
}
