//! What a peer's registration keys name, as the peer said (KEY_INFO),
//! for the puts and gets a driver's device carries out itself.
//!
//! A device that writes and reads a peer's memory (an RDMA NIC) needs the
//! peer's device key for the region, and the engine's refusal codes need
//! the region's length and access, which only the peer knows. The first
//! transfer naming a key asks the peer once (KEY); the answer is kept
//! here, so later transfers go at once. An answer is dropped when the
//! device refuses the key (its region was deregistered: the device key
//! died with it), and all of them with the peer's record when the peer
//! restarts.
//!
//! The cache has [`KEY_CACHE`] entries per peer. When all of them wait
//! for answers, a transfer naming yet another key goes in PUT packets
//! instead; a known entry makes room by going.

use heapless::Vec;

use crate::wire::{KeyInfoRepr, KeyRegion, KeyRepr};

/// Keys kept per peer.
pub const KEY_CACHE: usize = 4;

/// Where a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A transfer needs it; KEY not sent yet.
    Wanted,
    /// KEY sent; no answer yet.
    Asked,
    /// The peer's answer.
    Known(KeyRegion),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key: u64,
    state: State,
}

/// What [`KeyCache::lookup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The peer said so.
    Known(KeyRegion),
    /// The peer is asked (or is about to be): wait for its answer.
    Asking,
    /// No room to ask: the transfer goes without the device.
    Full,
}

/// One peer's keys, as it described them.
#[derive(Debug, Default)]
pub struct KeyCache {
    entries: Vec<Entry, KEY_CACHE>,
}

impl KeyCache {
    /// What `key` names, asking the peer if nobody has yet.
    pub fn lookup(&mut self, key: u64) -> Lookup {
        if let Some(e) = self.entries.iter().find(|e| e.key == key) {
            return match e.state {
                State::Known(region) => Lookup::Known(region),
                State::Wanted | State::Asked => Lookup::Asking,
            };
        }
        if self.entries.is_full() {
            let Some(i) = self
                .entries
                .iter()
                .position(|e| matches!(e.state, State::Known(_)))
            else {
                return Lookup::Full;
            };
            self.entries.remove(i);
        }
        let _ = self.entries.push(Entry {
            key,
            state: State::Wanted,
        });
        Lookup::Asking
    }

    /// The next KEY to send; the key counts as asked from now on.
    pub fn poll_query(&mut self) -> Option<KeyRepr> {
        let e = self.entries.iter_mut().find(|e| e.state == State::Wanted)?;
        e.state = State::Asked;
        Some(KeyRepr { key: e.key })
    }

    /// The peer's answer: kept if it names a region, dropped with its
    /// entry if it refuses. `false` for an answer nobody asked for (it
    /// changes nothing).
    pub fn answer(&mut self, info: &KeyInfoRepr) -> bool {
        let Some(i) = self
            .entries
            .iter()
            .position(|e| e.key == info.key && e.state == State::Asked)
        else {
            return false;
        };
        match info.region {
            Ok(region) => self.entries[i].state = State::Known(region),
            Err(_) => {
                self.entries.remove(i);
            }
        }
        true
    }

    /// What the cache holds for `key`, without asking.
    #[cfg(test)]
    pub fn known(&self, key: u64) -> Option<KeyRegion> {
        self.entries.iter().find_map(|e| match e.state {
            State::Known(region) if e.key == key => Some(region),
            _ => None,
        })
    }

    /// Drops `key`: the device refused it.
    pub fn forget(&mut self, key: u64) {
        self.entries.retain(|e| e.key != key);
    }

    /// Drops every key waiting for an answer, the peer cannot give one
    /// (it does not know KEY); their transfers go without the device.
    pub fn drop_pending(&mut self) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| matches!(e.state, State::Known(_)));
        before != self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DeviceKey, RejectCode};

    fn region(len: u64) -> KeyRegion {
        KeyRegion {
            len,
            access: 0b11,
            device: Some(DeviceKey { key: 7, base: 0 }),
        }
    }

    #[test]
    fn a_key_is_asked_once_and_then_known() {
        let mut c = KeyCache::default();
        assert_eq!(c.lookup(5), Lookup::Asking);
        assert_eq!(c.lookup(5), Lookup::Asking, "one entry");
        assert_eq!(c.poll_query(), Some(KeyRepr { key: 5 }));
        assert_eq!(c.poll_query(), None, "asked once");
        let info = KeyInfoRepr {
            key: 5,
            region: Ok(region(64)),
        };
        assert!(c.answer(&info));
        assert!(!c.answer(&info), "a second answer is nobody's");
        assert_eq!(c.lookup(5), Lookup::Known(region(64)));
        assert_eq!(c.known(5), Some(region(64)));
        c.forget(5);
        assert_eq!(c.known(5), None);
        assert_eq!(
            c.lookup(5),
            Lookup::Asking,
            "asked again after the device refused it"
        );
    }

    #[test]
    fn an_unasked_answer_changes_nothing_and_a_refusal_is_not_kept() {
        let mut c = KeyCache::default();
        let forged = KeyInfoRepr {
            key: 9,
            region: Ok(region(1 << 40)),
        };
        assert!(!c.answer(&forged));
        assert_eq!(c.known(9), None);
        assert_eq!(c.lookup(9), Lookup::Asking);
        assert!(!c.answer(&forged), "wanted, but not asked yet");
        let _ = c.poll_query();
        let refused = KeyInfoRepr {
            key: 9,
            region: Err(RejectCode::BadHandle),
        };
        assert!(c.answer(&refused));
        assert_eq!(c.known(9), None);
        assert_eq!(c.poll_query(), None);
    }

    #[test]
    fn a_full_cache_makes_room_from_known_keys_only() {
        let mut c = KeyCache::default();
        for key in 0..KEY_CACHE as u64 {
            assert_eq!(c.lookup(key), Lookup::Asking);
        }
        assert_eq!(c.lookup(100), Lookup::Full, "every entry waits");
        let _ = c.poll_query();
        assert!(c.answer(&KeyInfoRepr {
            key: 0,
            region: Ok(region(8)),
        }));
        assert_eq!(c.lookup(100), Lookup::Asking, "the known key made room");
        assert_eq!(c.known(0), None);
        assert!(c.drop_pending());
        assert!(!c.drop_pending());
        assert_eq!(c.poll_query(), None);
    }
}
