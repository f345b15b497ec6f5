//! The engine's peer and link tables, each with its [`Schedule`]: taking a
//! peer or a link writable marks it touched, so that the end of a call
//! settles, times and writes what the call moved and nothing else. A
//! process with a thousand idle peers then pays for the one it talks to.

use super::link::Link;
use super::peer::Peer;
use super::schedule::{Schedule, Slot};
use super::storage::Storage;
use crate::endpoint::{EndpointId, EndpointSlot, EndpointTable, ProcName};
use crate::table::{Entry, Key, Table};
use crate::time::Instant;

/// The peers of an engine with window `W`, held as `S` says.
pub(super) struct Peers<S: Storage, const W: usize> {
    table: EndpointTable<Peer<W>, S::Table<EndpointSlot<Peer<W>>>, S::Table<u16>>,
    schedule: Schedule<S::Table<Slot>>,
    /// The peer the engine is settling: what it changes in that peer then
    /// is the settling itself, and touches nothing.
    settling: Option<EndpointId>,
}

impl<S: Storage, const W: usize> Peers<S, W> {
    /// Empty, over the tables given.
    pub fn new(
        slots: S::Table<EndpointSlot<Peer<W>>>,
        order: S::Table<u16>,
        schedule: S::Table<Slot>,
    ) -> Self {
        Peers {
            table: EndpointTable::new(slots, order),
            schedule: Schedule::new(schedule),
            settling: None,
        }
    }

    /// Peers the table holds at most.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Peers on record.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether a call touched one since they were last settled.
    pub fn has_touched(&self) -> bool {
        self.schedule.has_touched()
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.table.is_full()
    }

    /// The endpoint of `proc`, if it has one.
    pub fn find(&self, proc: ProcName) -> Option<EndpointId> {
        self.table.find(proc)
    }

    /// Records `proc` with the peer `make` makes; touched.
    pub fn insert_with(
        &mut self,
        proc: ProcName,
        make: impl FnOnce(EndpointId) -> Peer<W>,
    ) -> Option<EndpointId> {
        let id = self.table.insert_with(proc, make)?;
        self.schedule.touch(id.slot());
        Some(id)
    }

    /// One more reference to `id`.
    pub fn add_ref(&mut self, id: EndpointId) -> Result<u32, crate::endpoint::EndpointError> {
        self.table.add_ref(id)
    }

    /// One reference less to `id`.
    pub fn release(&mut self, id: EndpointId) -> Result<u32, crate::endpoint::EndpointError> {
        self.table.release(id)
    }

    /// References to `id`.
    pub fn refs(&self, id: EndpointId) -> u32 {
        self.table.refs(id)
    }

    /// Forgets `id` and its deadline.
    pub fn remove(&mut self, id: EndpointId) -> Option<(ProcName, Peer<W>)> {
        let removed = self.table.remove(id)?;
        self.schedule.set(id.slot(), None);
        Some(removed)
    }

    /// The process behind `id`.
    pub fn proc(&self, id: EndpointId) -> Result<ProcName, crate::endpoint::EndpointError> {
        self.table.proc(id)
    }

    /// Gives `id` the name `proc`.
    pub fn rename(
        &mut self,
        id: EndpointId,
        proc: ProcName,
    ) -> Result<(), crate::endpoint::EndpointError> {
        self.table.rename(id, proc)
    }

    /// Peer `id`.
    pub fn get(&self, id: EndpointId) -> Option<&Peer<W>> {
        self.table.get(id)
    }

    /// Peer `id`, writable: touched, unless the engine is settling it.
    pub fn get_mut(&mut self, id: EndpointId) -> Option<&mut Peer<W>> {
        let peer = self.table.get_mut(id)?;
        if self.settling != Some(id) {
            self.schedule.touch(id.slot());
        }
        Some(peer)
    }

    /// Peer `id`, writable without touching it: for a caller that touches
    /// it ([`touch`](Self::touch)) only if it changed something.
    pub fn peek_mut(&mut self, id: EndpointId) -> Option<&mut Peer<W>> {
        self.table.get_mut(id)
    }

    /// Marks `id` touched, to be settled and timed at the end of the call.
    pub fn touch(&mut self, id: EndpointId) {
        if self.table.get(id).is_some() {
            self.schedule.touch(id.slot());
        }
    }

    /// The `i`th peer in the order they came.
    pub fn id_at(&self, i: usize) -> Option<EndpointId> {
        self.table.id_at(i)
    }

    /// Every peer's endpoint, in the order they came.
    pub fn ids(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.table.ids()
    }

    /// Every peer, with its endpoint and process.
    pub fn iter(&self) -> impl Iterator<Item = (EndpointId, ProcName, &Peer<W>)> + '_ {
        self.table.iter()
    }

    /// Takes the list of the peers touched so far: its first slot, to walk
    /// with [`next_to_settle`](Self::next_to_settle). Peers touched from
    /// now on start a new list.
    pub fn take_touched(&mut self) -> Option<usize> {
        self.schedule.detach_touched()
    }

    /// The next peer to settle from `cursor` (a slot of the list
    /// [`take_touched`](Self::take_touched) took), which moves on; slots
    /// emptied meanwhile are passed over. Until the next call, what the
    /// engine changes in that peer touches nothing: it is the settling.
    pub fn next_to_settle(&mut self, cursor: &mut Option<usize>) -> Option<EndpointId> {
        self.settling = None;
        while let Some(slot) = *cursor {
            *cursor = self.schedule.next_detached(slot);
            if let Some(id) = self.table.id_of_slot(slot) {
                self.settling = Some(id);
                return Some(id);
            }
        }
        None
    }

    /// Peer `id`'s next deadline: `at`, or none.
    pub fn set_deadline(&mut self, id: EndpointId, at: Option<Instant>) {
        if self.table.get(id).is_some() {
            self.schedule.set(id.slot(), at);
        }
    }

    /// The earliest deadline of any peer.
    pub fn earliest(&self) -> Option<Instant> {
        self.schedule.earliest().map(|(_, at)| at)
    }

    /// A peer whose deadline has come by `now`, its deadline taken off
    /// and the peer touched (to be settled and timed again).
    pub fn pop_due(&mut self, now: Instant) -> Option<EndpointId> {
        let table = &self.table;
        self.schedule
            .pop_due_live(now, |slot| table.id_of_slot(slot))
    }
}

/// The links of an engine with window `W`, held as `S` says.
pub(super) struct Links<S: Storage, const W: usize> {
    table: Table<Link<W>, S::Table<Entry<Link<W>>>, S::Table<u16>>,
    schedule: Schedule<S::Table<Slot>>,
}

impl<S: Storage, const W: usize> Links<S, W> {
    /// Empty, over the tables given.
    pub fn new(
        slots: S::Table<Entry<Link<W>>>,
        order: S::Table<u16>,
        schedule: S::Table<Slot>,
    ) -> Self {
        Links {
            table: Table::new(slots, order),
            schedule: Schedule::new(schedule),
        }
    }

    /// Links the table holds at most.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Links held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether a call touched one since they were last settled.
    pub fn has_touched(&self) -> bool {
        self.schedule.has_touched()
    }

    /// Holds `link`; touched. `None` when every slot is taken.
    pub fn insert(&mut self, link: Link<W>) -> Option<Key> {
        let key = self.table.insert_with(|_| link)?;
        self.schedule.touch(usize::from(key.index));
        Some(key)
    }

    /// Lets link `key` go, and its deadline.
    pub fn remove(&mut self, key: Key) -> Option<Link<W>> {
        let link = self.table.remove(key)?;
        self.schedule.set(usize::from(key.index), None);
        Some(link)
    }

    /// Link `key`.
    pub fn get(&self, key: Key) -> Option<&Link<W>> {
        self.table.get(key)
    }

    /// Link `key`, writable: touched.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut Link<W>> {
        let link = self.table.get_mut(key)?;
        self.schedule.touch(usize::from(key.index));
        Some(link)
    }

    /// Link `key`, writable without touching it: for a caller that touches
    /// it ([`touch`](Self::touch)) only if it changed something.
    pub fn peek_mut(&mut self, key: Key) -> Option<&mut Link<W>> {
        self.table.get_mut(key)
    }

    /// Marks link `key` touched, to be timed and written.
    pub fn touch(&mut self, key: Key) {
        if self.table.get(key).is_some() {
            self.schedule.touch(usize::from(key.index));
        }
    }

    /// The key of the `i`th link in the order they came.
    pub fn key_at(&self, i: usize) -> Option<Key> {
        self.table.key_at(i)
    }

    /// Every link, with its key.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &Link<W>)> + '_ {
        self.table.iter()
    }

    /// Takes the links touched so far: each is given to `each` (to be
    /// timed again) and listed ready to write.
    pub fn retime_touched(&mut self, mut each: impl FnMut(&Link<W>) -> Option<Instant>) {
        let mut cursor = self.schedule.detach_touched();
        while let Some(slot) = cursor {
            cursor = self.schedule.next_detached(slot);
            let Some(key) = self.table.key_of_slot(slot) else {
                continue;
            };
            let at = self.table.get(key).and_then(&mut each);
            self.schedule.set(slot, at);
            self.schedule.make_ready(slot);
        }
    }

    /// The next link that may have bytes to write, taken off the list.
    pub fn pop_ready(&mut self) -> Option<Key> {
        while let Some(slot) = self.schedule.pop_ready() {
            if let Some(key) = self.table.key_of_slot(slot) {
                return Some(key);
            }
        }
        None
    }

    /// The earliest deadline of any link.
    pub fn earliest(&self) -> Option<Instant> {
        self.schedule.earliest().map(|(_, at)| at)
    }

    /// A link whose deadline has come by `now`, its deadline taken off and
    /// the link touched (to be timed again).
    pub fn pop_due(&mut self, now: Instant) -> Option<Key> {
        let table = &self.table;
        self.schedule
            .pop_due_live(now, |slot| table.key_of_slot(slot))
    }
}
