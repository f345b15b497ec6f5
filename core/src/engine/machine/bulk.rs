//! Bulk transfers: puts, gets (also into a third process) and the peers'
//! gets this side serves, each an operation in a fixed slot until it
//! completes, and the answers owed to peers about their transfers.

use super::peer::PeerState;
use super::reliable::{Answer, Queued};
use super::{Engine, GET_REPLY, Pending};
use crate::btl::{
    Access, Btl, BtlError, Completion, LostReason, MemSlice, OpId, RejectCode, RemoteKey,
    RemoteSlice, Side,
};
use crate::endpoint::{EndpointId, ProcName};
use crate::wire::{DoneRepr, GetRepr, PutRepr, RejectRepr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Put,
    Get,
    /// A get whose data goes to a third process: `peer` puts it there and
    /// answers DONE.
    GetThirdParty,
    /// Serving a peer's get: this side puts, nobody here is told.
    Serve,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Op {
    pub(super) kind: OpKind,
    pub(super) peer: usize,
    ctx: u64,
    pub(super) id: u64,
    /// Bytes the operation moves.
    pub(super) len: u64,
    /// Local data: put source, get destination, served get's source.
    /// A get for a third process has none here.
    pub(super) local: Option<MemSlice>,
    /// Put destination (key, offset) at the peer.
    pub(super) remote: RemoteSlice,
    /// A get served for a third process: the process that asked, to be
    /// answered DONE or REJECT under its transfer id.
    reply_to: Option<(ProcName, u64)>,
    /// Bytes handed to packets so far / acknowledged or received so far.
    pub(super) queued: u64,
    pub(super) done: u64,
    /// Packets of the transfer (for PUT headers).
    pub(super) count: u32,
    pub(super) next_index: u32,
}

impl<'r, 'm, const PEERS: usize, const LINKS: usize, const REGS: usize>
    Engine<'r, 'm, PEERS, LINKS, REGS>
{
    /// Asks the peer `source` to put its `src` into `dst`, a registration
    /// of process `target` (a third-party get, as Motr allows): the data
    /// moves from the source to the target without passing through this
    /// process. Completes with [`Event::GetComplete`] once the target holds
    /// the data, or with the error the source or target gave
    /// (`Rejected(NoTarget)` when the source does not reach the target).
    ///
    /// `target` may be this process (then it is [`get`](Btl::get) into the
    /// registration `dst` names) or the source itself (a copy between two
    /// of its registrations). `src` and `dst` must be the same length.
    ///
    /// [`Event::GetComplete`]: crate::btl::Event::GetComplete
    pub fn get_third_party(
        &mut self,
        source: EndpointId,
        src: RemoteSlice,
        target: ProcName,
        dst: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        if target == self.config.me {
            let local = self.regs.check_remote(dst, Access::REMOTE_WRITE)?;
            return self.get(source, local, src, ctx);
        }
        let p = self.check_endpoint(source)?;
        if src.len != dst.len {
            return Err(BtlError::Memory(crate::btl::MemError::OutOfBounds {
                offset: dst.offset,
                len: src.len,
                size: dst.len,
            }));
        }
        let i = self.claim_op_slot()?;
        self.next_op += 1;
        let id = self.next_op & !GET_REPLY;
        self.ops[i] = Some(Op {
            kind: OpKind::GetThirdParty,
            peer: p,
            ctx,
            id,
            len: src.len,
            local: None,
            remote: src,
            queued: 0,
            done: 0,
            count: 0,
            next_index: 0,
            reply_to: None,
        });
        if src.len == 0 {
            self.finish_op(i, Ok(()));
            return Ok(OpId(id));
        }
        if src.offset.checked_add(src.len).is_none() || dst.offset.checked_add(dst.len).is_none() {
            self.finish_op(i, Err(BtlError::Rejected(RejectCode::OutOfBounds)));
            return Ok(OpId(id));
        }
        let get = GetRepr {
            xfer_id: id,
            src_handle: src.key.0,
            src_offset: src.offset,
            len: src.len,
            target_job: target.job,
            target_rank: target.rank,
            dst_handle: dst.key.0,
            dst_offset: dst.offset,
        };
        self.queue_get(p, i, get)?;
        Ok(OpId(id))
    }

    /// Checks a put's or get's ranges and starts it.
    pub(super) fn start_op(
        &mut self,
        kind: OpKind,
        p: usize,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.regs.slice(local)?;
        if local.len != remote.len {
            return Err(BtlError::Memory(crate::btl::MemError::OutOfBounds {
                offset: remote.offset,
                len: local.len,
                size: remote.len,
            }));
        }
        let i = self.claim_op_slot()?;
        self.next_op += 1;
        let id = self.next_op & !GET_REPLY;
        let chunk = self.put_chunk(p);
        self.ops[i] = Some(Op {
            kind,
            peer: p,
            ctx,
            id,
            len: local.len,
            local: Some(local),
            remote,
            queued: 0,
            done: 0,
            count: packet_count(local.len, chunk),
            next_index: 0,
            reply_to: None,
        });
        self.update_sending(i);
        if local.len == 0 {
            self.finish_op(i, Ok(()));
        } else if remote.offset.checked_add(remote.len).is_none() {
            // A range that wraps around u64 is outside any region; no packet
            // may carry it (the peer would take it for a protocol error).
            self.finish_op(i, Err(BtlError::Rejected(RejectCode::OutOfBounds)));
        } else {
            self.progress_queues();
        }
        Ok(OpId(id))
    }

    /// A free slot for an operation of this side's, which ends with an
    /// event: its place in the event queue is kept from now on.
    fn claim_op_slot(&mut self) -> Result<usize, BtlError> {
        if !self.has_event_room() {
            return Err(BtlError::OutOfResource);
        }
        let i = self
            .ops
            .iter()
            .position(Option::is_none)
            .ok_or(BtlError::OutOfResource)?;
        self.owed += 1;
        Ok(i)
    }

    /// Queues a GET for the operation in slot `i`; a full queue ends the
    /// operation unreported, and the caller returns `OutOfResource`.
    pub(super) fn queue_get(&mut self, p: usize, i: usize, get: GetRepr) -> Result<(), BtlError> {
        if let Some(peer) = self.peers[p].as_mut()
            && peer.queue.push_back(Queued::Get(get)).is_err()
        {
            self.ops[i] = None;
            self.owed = self.owed.saturating_sub(1);
            return Err(BtlError::OutOfResource);
        }
        self.progress_queues();
        Ok(())
    }

    /// Where a PUT's data lands: an outstanding get's buffer for a reply, a
    /// registration for a peer's put; the refusal code otherwise.
    pub(super) fn put_target(
        &self,
        peer: Option<usize>,
        put: &PutRepr,
        len: u64,
    ) -> Result<MemSlice, RejectCode> {
        if put.xfer_id & GET_REPLY != 0 {
            let op = self
                .ops
                .iter()
                .flatten()
                .find(|o| {
                    o.kind == OpKind::Get
                        && Some(o.peer) == peer
                        && o.id == put.xfer_id & !GET_REPLY
                })
                .ok_or(RejectCode::BadHandle)?;
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
        self.regs
            .check_remote(remote, Access::REMOTE_WRITE)
            .map_err(RejectCode::from)
    }

    pub(super) fn put_chunk(&self, p: usize) -> u64 {
        let peer_max = self.peers[p]
            .as_ref()
            .map_or(crate::wire::MIN_MAX_BODY, |peer| peer.peer_max_body);
        self.config
            .put_chunk
            .min(peer_max.saturating_sub(PutRepr::LEN as u64))
            .max(1)
    }

    pub(super) fn find_op(&self, kind: OpKind, peer: usize, id: u64) -> Option<usize> {
        self.ops
            .iter()
            .position(|o| o.is_some_and(|o| o.kind == kind && o.peer == peer && o.id == id))
    }

    /// Keeps [`sending`](Engine::sending) in step with slot `i`: its bit is
    /// set while the operation there still has packets to hand out.
    pub(super) fn update_sending(&mut self, i: usize) {
        let bit = 1u64 << i;
        let active = self.ops[i]
            .is_some_and(|o| matches!(o.kind, OpKind::Put | OpKind::Serve) && o.queued < o.len);
        if active {
            self.sending |= bit;
        } else {
            self.sending &= !bit;
        }
    }

    pub(super) fn finish_op(&mut self, i: usize, result: Result<(), BtlError>) {
        let Some(op) = self.ops[i].take() else {
            return;
        };
        self.update_sending(i);
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
                if let Some((origin, xfer_id)) = op.reply_to {
                    self.answer_third_party(origin, xfer_id, result);
                }
                return;
            }
        };
        // Its place was kept when the operation was taken.
        self.owed = self.owed.saturating_sub(1);
        let _ = self.events.push_back(Pending::Done(done));
    }

    /// A peer's get: check the source, then put it back as a reply, put it
    /// to the third process it names, or copy it within this process.
    pub(super) fn serve_get(&mut self, p: usize, get: GetRepr) {
        let reject = |code| {
            Answer::Reject(RejectRepr {
                xfer_id: get.xfer_id,
                code,
            })
        };
        let src = RemoteSlice {
            key: RemoteKey(get.src_handle),
            offset: get.src_offset,
            len: get.len,
        };
        let dst = RemoteSlice {
            key: RemoteKey(get.dst_handle),
            offset: get.dst_offset,
            len: get.len,
        };
        let target = ProcName::new(get.target_job, get.target_rank);
        if target == self.config.me {
            // Into another of this process's registrations: one copy.
            let answer = match self.regs.copy(Side::Remote(src), Side::Remote(dst)) {
                Ok(()) => Answer::Done(DoneRepr {
                    xfer_id: get.xfer_id,
                }),
                Err(e) => reject(e.into()),
            };
            self.answer(p, answer);
            return;
        }
        let (to, id, reply_to) = if self.peers[p]
            .as_ref()
            .is_some_and(|peer| peer.proc == target)
        {
            (p, get.xfer_id | GET_REPLY, None)
        } else {
            let Some(q) = self.reach(target) else {
                self.answer(p, reject(RejectCode::NoTarget));
                return;
            };
            self.next_op += 1;
            (
                q,
                self.next_op & !GET_REPLY,
                Some((self.peer_proc(p), get.xfer_id)),
            )
        };
        let local = match self.regs.check_remote(src, Access::REMOTE_READ) {
            Ok(local) => local,
            Err(e) => {
                self.answer(p, reject(e.into()));
                return;
            }
        };
        let Some(i) = self.ops.iter().position(Option::is_none) else {
            self.answer(p, reject(RejectCode::TooLarge));
            return;
        };
        let chunk = self.put_chunk(to);
        self.ops[i] = Some(Op {
            kind: OpKind::Serve,
            peer: to,
            ctx: 0,
            id,
            len: get.len,
            local: Some(local),
            remote: dst,
            queued: 0,
            done: 0,
            count: packet_count(get.len, chunk),
            next_index: 0,
            reply_to,
        });
        self.update_sending(i);
        if get.len == 0 {
            self.finish_op(i, Ok(()));
        }
        self.progress_queues();
    }

    /// Queues an answer to one of peer `p`'s transfers, ahead of everything
    /// else it is owed; until a REJECT is numbered no bare ACK goes out, so
    /// the refused packets are never acknowledged before their refusal. A
    /// transfer already waiting for its answer gets no second one. A peer
    /// that outgrows [`ANSWERS`] breaks the protocol and is lost.
    ///
    /// [`ANSWERS`]: super::ANSWERS
    pub(super) fn answer(&mut self, p: usize, answer: Answer) {
        let Some(peer) = self.peers[p].as_mut() else {
            return;
        };
        if peer.answers.iter().any(|a| a.xfer_id() == answer.xfer_id()) {
            return;
        }
        if peer.answers.push_back(answer).is_err() {
            let lost = LostReason::ProtocolViolation;
            self.fail_peer(p, lost, BtlError::PeerLost(lost));
            return;
        }
        self.progress_queues();
    }

    /// Tells the process that asked for a get on behalf of a third one how
    /// it ended: DONE once the target has acknowledged all of the data,
    /// REJECT with the target's code, or `NoTarget` when the target was
    /// lost. Nothing is owed to a process already lost, nor after finalize.
    fn answer_third_party(&mut self, origin: ProcName, xfer_id: u64, result: Result<(), BtlError>) {
        let answer = match result {
            Ok(()) => Answer::Done(DoneRepr { xfer_id }),
            Err(BtlError::Finalized) => return,
            Err(BtlError::Rejected(code)) => Answer::Reject(RejectRepr { xfer_id, code }),
            Err(_) => Answer::Reject(RejectRepr {
                xfer_id,
                code: RejectCode::NoTarget,
            }),
        };
        let found = self.peers.iter().position(|peer| {
            peer.as_ref().is_some_and(|peer| {
                peer.proc == origin && !matches!(peer.state, PeerState::Lost(_))
            })
        });
        if let Some(p) = found {
            self.answer(p, answer);
        }
    }
}

fn packet_count(len: u64, chunk: u64) -> u32 {
    u32::try_from(len.div_ceil(chunk).max(1)).unwrap_or(u32::MAX)
}
