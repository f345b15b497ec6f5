//! Puts and gets that the driver's device carries out itself, as an RDMA
//! NIC writes and reads a peer's memory without the peer's processor.
//!
//! A driver whose device can do that registers each region the upper
//! layer registers with the device too, and tells the engine how the
//! device reaches it ([`Engine::set_device_key`]). A put or get from such
//! a region, to a peer that answers KEY (protocol minor 2), then goes by
//! the device:
//!
//! 1. The first transfer naming a peer's key asks the peer what the key
//!    names (KEY), once: the answer is kept. It says the region's length
//!    and access, so the transfer is checked here as the peer would check
//!    it, and refused with the same [`RejectCode`]; and it says the peer
//!    device's key for the region.
//! 2. The driver takes the transfer ([`Engine::poll_rdma`]) for one of the
//!    peer's links, carries it out (an RDMA write or read on that link's
//!    queue pair), and reports it ([`Engine::handle_rdma`]).
//! 3. A put with a notice sends its NOTIFY once the device has written
//!    the data, so the target's event comes after the data.
//!
//! The transfer stays the engine's: it ends exactly once, with its event.
//! When its link goes (the driver reports the link closed only once the
//! device can no longer touch the memory), it is handed out again on the
//! peer's next link, as PUT packets are sent again: writes and reads are
//! idempotent while the memory is the transfer's. If the peer is lost
//! meanwhile, it fails once the link is gone, not before: until then the
//! device may still read or write its memory. A key the device refuses
//! (the peer deregistered the region, and its device key died with it)
//! fails the transfer with `Rejected(BadHandle)`, and the key is asked
//! about again before anything else uses it.
//!
//! A region without a device key, a peer that does not answer KEY, or a
//! key the cache has no room for: the transfer goes in packets, as over
//! any other transport.

use super::framing::Framing;
use super::journal::{self, journal_call, journal_out};
use super::ops::{Op, OpKind, Path};
use super::storage::Storage;
use super::{Engine, LinkId};
use crate::btl::memory::check_described;
use crate::btl::{Access, BtlError, MemHandle, MemSlice, RejectCode};
use crate::wire::{DeviceKey, KeyRegion};

/// How a put or get goes, once what its key names is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// It fails with this code, as the peer would have refused it.
    Refused(RejectCode),
    /// It waits for the peer to describe the key.
    Ask,
    /// The device carries it out, with the peer's region reached so.
    Device(DeviceKey),
    /// It goes in packets.
    Packets,
}

/// The route of `op`, a put or get whose peer described its key as
/// `region`: the checks the peer would make, then the device if the
/// peer's device holds the region.
pub fn route(op: &Op, region: Result<KeyRegion, RejectCode>) -> Route {
    let region = match region {
        Ok(region) => region,
        Err(code) => return Route::Refused(code),
    };
    let need = match op.kind {
        OpKind::Put => Access::REMOTE_WRITE,
        _ => Access::REMOTE_READ,
    };
    if let Err(e) = check_described(&region, op.remote, need) {
        return Route::Refused(e.into());
    }
    match region.device {
        // The device's addresses of the range must exist too.
        Some(d)
            if d.base
                .checked_add(op.remote.offset.saturating_add(op.len))
                .is_none() =>
        {
            Route::Refused(RejectCode::OutOfBounds)
        }
        Some(d) => Route::Device(d),
        None => Route::Packets,
    }
}

/// Which way a device transfer moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaKind {
    /// From `local` into the peer's memory (a put): an RDMA write.
    Write,
    /// From the peer's memory into `local` (a get): an RDMA read.
    Read,
}

/// Names a device transfer when the driver reports it; only the
/// transfer as handed out, on its link, answers to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaToken {
    slot: u16,
    id: u64,
    link: LinkId,
}

impl RdmaToken {
    /// The link it was handed out for.
    pub fn link(&self) -> LinkId {
        self.link
    }
}

/// A transfer for the driver's device to carry out on the link it was
/// asked for ([`Engine::poll_rdma`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rdma {
    /// What to report it with ([`Engine::handle_rdma`]).
    pub token: RdmaToken,
    /// A write or a read.
    pub kind: RdmaKind,
    /// This side's bytes: a registration the driver gave a device key.
    pub local: MemSlice,
    /// The peer device's key for its region.
    pub remote_key: u64,
    /// The peer device's address of the first byte.
    pub remote_addr: u64,
}

/// Why the driver's device did not carry out a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaFailure {
    /// The device refused the peer's key (an RDMA remote access error):
    /// the peer's region is gone. The transfer fails with `BadHandle`.
    KeyRefused,
    /// The device cannot carry this one (larger than its queues take):
    /// it goes in packets instead.
    Declined,
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// Records how the driver's device reaches registration `handle`
    /// (`None`: it does not), once the driver has registered the region
    /// with it. Puts and gets from the region then go by the device, and
    /// peers that ask about its key are told.
    ///
    /// The driver must take the region away from the device before the
    /// upper layer deregisters it, so that no peer can reach the memory
    /// once it is the user's again.
    pub fn set_device_key(
        &mut self,
        handle: MemHandle,
        device: Option<DeviceKey>,
    ) -> Result<(), BtlError> {
        journal_call!(self, journal::Call::Unreplayable("set_device_key"));
        journal_out!(self, 0);
        Ok(self.shared.regs.set_device(handle, device)?)
    }

    /// How the driver's device reaches registration `handle`, if it does.
    pub fn device_key(&self, handle: MemHandle) -> Option<DeviceKey> {
        self.shared.regs.device(handle)
    }

    /// The next put or get for the driver's device to carry out on `link`
    /// (an open link of its peer). The driver reports it with
    /// [`handle_rdma`](Self::handle_rdma), or reports the link closed
    /// ([`handle_closed`](Self::handle_closed)) once the device can no
    /// longer touch its memory: it is then handed out again on another
    /// link.
    pub fn poll_rdma(&mut self, link: LinkId) -> Option<Rdma> {
        journal_call!(self, journal::Call::Unreplayable("poll_rdma"));
        journal_out!(self, 0);
        let l = self.links.get(link.0)?;
        let p = l.peer().filter(|_| l.is_open())?;
        if !self.peers.get(p).is_some_and(|peer| peer.is_open()) {
            return None;
        }
        let (slot, op) = self.shared.ops.next_device(p, link)?;
        let Path::Device { remote, .. } = op.path else {
            return None;
        };
        Some(Rdma {
            token: RdmaToken {
                slot: slot as u16,
                id: op.id,
                link,
            },
            kind: match op.kind {
                OpKind::Put => RdmaKind::Write,
                _ => RdmaKind::Read,
            },
            local: op.local?,
            remote_key: remote.key,
            // Checked when the route was chosen.
            remote_addr: remote.base + op.remote.offset,
        })
    }

    /// The driver's device carried out the transfer `token` names, or
    /// did not ([`RdmaFailure`]). A report for a transfer handed out again
    /// since, or already ended, changes nothing.
    pub fn handle_rdma(&mut self, token: RdmaToken, result: Result<(), RdmaFailure>) {
        journal_call!(self, journal::Call::Unreplayable("handle_rdma"));
        journal_out!(self, 0);
        let i = usize::from(token.slot);
        let Some(op) = self.shared.ops.get(i).copied() else {
            return;
        };
        let posted = matches!(op.path, Path::Device { posted: Some(l), .. } if l == token.link);
        if op.id != token.id || !posted {
            return;
        }
        let shared = &mut self.shared;
        if let Some(error) = op.failed {
            shared.ops.finish(i, Err(error), &mut shared.events);
            return;
        }
        match result {
            Ok(()) if op.kind == OpKind::Put && op.notice.is_some() => {
                // The data is in: the notice follows it in a packet.
                shared.ops.update(i, op.peer, op.id, |o| {
                    o.queued = o.len;
                    o.done = o.len;
                    o.path = Path::Packets;
                });
            }
            Ok(()) => {
                shared.ops.finish(i, Ok(()), &mut shared.events);
            }
            Err(RdmaFailure::KeyRefused) => {
                let error = Err(BtlError::Rejected(RejectCode::BadHandle));
                shared.ops.finish(i, error, &mut shared.events);
                if let Some(peer) = self.peers.get_mut(op.peer) {
                    peer.key_refused(op.remote.key.0, &mut self.shared);
                }
            }
            Err(RdmaFailure::Declined) => {
                if let Some(peer) = self.peers.get_mut(op.peer) {
                    peer.take_route(i, op, Route::Packets, &mut self.shared);
                }
            }
        }
        self.flush_peer(op.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btl::{RemoteKey, RemoteSlice};
    use crate::endpoint::EndpointId;

    fn op(kind: OpKind, offset: u64, len: u64) -> Op {
        let remote = RemoteSlice {
            key: RemoteKey(5),
            offset,
            len,
        };
        Op::new(kind, EndpointId(1), 0, 1, None, remote, len, 64)
    }

    fn region(len: u64, access: Access, device: Option<DeviceKey>) -> KeyRegion {
        KeyRegion {
            len,
            access: access.bits(),
            device,
        }
    }

    const DEVICE: Option<DeviceKey> = Some(DeviceKey {
        key: 9,
        base: 0x1000,
    });

    #[test]
    fn the_route_makes_the_owners_checks_in_the_owners_order() {
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let put = op(OpKind::Put, 8, 8);
        let get = op(OpKind::Get, 8, 8);
        assert_eq!(
            route(&put, Err(RejectCode::BadHandle)),
            Route::Refused(RejectCode::BadHandle)
        );
        assert_eq!(
            route(&put, Ok(region(16, rw, DEVICE))),
            Route::Device(DEVICE.expect("some"))
        );
        assert_eq!(
            route(&put, Ok(region(15, rw, DEVICE))),
            Route::Refused(RejectCode::OutOfBounds)
        );
        assert_eq!(
            route(&put, Ok(region(1, Access::REMOTE_READ, DEVICE))),
            Route::Refused(RejectCode::AccessDenied),
            "access before range"
        );
        assert_eq!(
            route(&get, Ok(region(16, Access::REMOTE_WRITE, DEVICE))),
            Route::Refused(RejectCode::AccessDenied)
        );
        assert_eq!(route(&get, Ok(region(16, rw, None))), Route::Packets);
        let far = Some(DeviceKey {
            key: 9,
            base: u64::MAX - 8,
        });
        assert_eq!(
            route(&get, Ok(region(16, rw, far))),
            Route::Refused(RejectCode::OutOfBounds),
            "the device's addresses of the range must exist"
        );
    }
}
