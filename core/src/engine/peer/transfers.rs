//! A peer's part in one-sided transfers: serving the GETs the peer sends
//! (a copy within this process, a reply in PUT packets, or mail for the
//! engine when a third process is the target), and choosing how this
//! side's puts and gets to the peer go (in packets, by the driver's
//! device, or after asking the peer what a registration key names).

use crate::btl::{Access, BtlError, RejectCode, Side};
use crate::wire::{DoneRepr, GetRepr, KeyRegion, RejectRepr};

use super::super::keys::Lookup;
use super::super::ops::{GET_REPLY, Mail, Op, OpKind, Path, get_parts};
use super::super::packet::Answer;
use super::super::rdma::{Route, route};
use super::super::shared::Shared;
use super::super::storage::Storage;
use super::Peer;

impl<const W: usize> Peer<W> {
    /// The peer's get: copied within this process, or put back to the peer
    /// as a reply; one for a third process waits as mail for the engine.
    pub(super) fn serve_get<S: Storage>(&mut self, get: GetRepr, shared: &mut Shared<S>) {
        let reject = |code| {
            Answer::Reject(RejectRepr {
                xfer_id: get.xfer_id,
                code,
            })
        };
        let (src, dst, target) = get_parts(&get);
        if target == shared.config.me {
            // Into another of this process's registrations: one copy.
            let answer = match shared.regs.copy(Side::Remote(src), Side::Remote(dst)) {
                Ok(()) => Answer::Done(DoneRepr {
                    xfer_id: get.xfer_id,
                }),
                Err(e) => reject(e.into()),
            };
            self.answer(answer, shared);
            return;
        }
        if target != self.proc {
            // Only within a job whose peers proved its key: a stranger
            // would have this process push its memory to whichever process
            // it names, and learn from the answers which ones it knows.
            // Without a key every such get is answered alike.
            if shared.config.job_key.is_none() {
                return self.answer(reject(RejectCode::NoTarget), shared);
            }
            match shared.ops.free_slot() {
                Some(i) => shared.ops.post(i, Mail::Route { from: self.id, get }),
                None => self.answer(reject(RejectCode::Busy), shared),
            }
            return;
        }
        let local = match shared.regs.check_remote(src, Access::REMOTE_READ) {
            Ok(local) => local,
            Err(e) => return self.answer(reject(e.into()), shared),
        };
        let chunk = self.put_chunk(shared);
        if let Err(code) = shared.serve(self.id, chunk, get.xfer_id | GET_REPLY, local, dst, None) {
            self.answer(reject(code), shared);
        }
    }

    /// The peer described `key` as `region`: the operations waiting for
    /// it go their way.
    pub(super) fn settle_key<S: Storage>(
        &mut self,
        key: u64,
        region: Result<KeyRegion, RejectCode>,
        shared: &mut Shared<S>,
    ) {
        let waiting = |op: &Op| op.path == Path::Key && op.remote.key.0 == key;
        self.reroute(shared, waiting, |_, op| route(op, region));
    }

    /// The peer does not answer KEY: the operations waiting for an answer
    /// go in packets.
    pub(super) fn keys_unanswerable<S: Storage>(&mut self, shared: &mut Shared<S>) {
        self.reroute(shared, |op| op.path == Path::Key, |_, _| Route::Packets);
    }

    /// Sends each of this side's operations to the peer that `pick`
    /// chooses the way `route` says.
    pub(super) fn reroute<S: Storage>(
        &mut self,
        shared: &mut Shared<S>,
        pick: impl Fn(&Op) -> bool,
        route: impl Fn(&mut Self, &Op) -> Route,
    ) {
        for i in 0..shared.ops.capacity() {
            let Some(op) = shared.ops.get(i).copied() else {
                continue;
            };
            if op.peer == self.id && pick(&op) {
                let route = route(self, &op);
                self.take_route(i, op, route, shared);
            }
        }
    }

    /// How this side's put or get `op`, in slot `i`, goes: it fails,
    /// waits for the peer to describe its key, goes by the driver's device,
    /// or goes in packets (a get asks the peer with a GET).
    pub fn take_route<S: Storage>(
        &mut self,
        i: usize,
        op: Op,
        route: Route,
        shared: &mut Shared<S>,
    ) {
        let path = match route {
            Route::Refused(code) => {
                let error = Err(BtlError::Rejected(code));
                shared.ops.finish(i, error, &mut shared.events);
                return;
            }
            Route::Ask => Path::Key,
            Route::Device(remote) => Path::Device {
                remote,
                posted: None,
            },
            Route::Packets => Path::Packets,
        };
        shared.ops.update(i, op.peer, op.id, |o| o.path = path);
        if path == Path::Packets
            && op.kind == OpKind::Get
            && !self.queue_get(op.get_request(shared.config.me))
        {
            let error = Err(BtlError::OutOfResource);
            shared.ops.finish(i, error, &mut shared.events);
        }
    }

    /// How a put or get of this side's naming `key` goes, from what the
    /// peer said of the key, asking it if nobody has.
    pub fn lookup_key(&mut self, op: &Op) -> Route {
        if !self.answers_keys() {
            return Route::Packets;
        }
        match self.keys.lookup(op.remote.key.0) {
            Lookup::Known(region) => route(op, Ok(region)),
            Lookup::Asking => Route::Ask,
            Lookup::Full => Route::Packets,
        }
    }

    /// The device refused `key` (its region is gone): what the peer said of
    /// it is forgotten, and the transfers about to use it ask again.
    pub fn key_refused<S: Storage>(&mut self, key: u64, shared: &mut Shared<S>) {
        self.keys.forget(key);
        let about_to = |op: &Op| {
            matches!(op.path, Path::Device { posted: None, .. }) && op.remote.key.0 == key
        };
        self.reroute(shared, about_to, |peer, op| peer.lookup_key(op));
    }
}
