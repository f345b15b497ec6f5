//! What a driver knows of each of its engine's links, in a table indexed
//! by the link's slot ([`LinkId::slot`]): found in one index and one
//! compare on every write and read, where a hash map hashed the id each
//! time.

use btl_core::engine::LinkId;

/// A value per live link.
#[derive(Debug)]
pub struct LinkMap<V> {
    slots: Vec<Option<(LinkId, V)>>,
    len: usize,
}

impl<V> Default for LinkMap<V> {
    fn default() -> Self {
        LinkMap {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> LinkMap<V> {
    /// `link`'s value, if it has one (a link of an older generation in the
    /// same slot has none).
    pub fn get(&self, link: LinkId) -> Option<&V> {
        match self.slots.get(link.slot())? {
            Some((id, v)) if *id == link => Some(v),
            _ => None,
        }
    }

    /// Gives `link` `value`, in place of what it or an older link of its
    /// slot had.
    pub fn insert(&mut self, link: LinkId, value: V) {
        let slot = link.slot();
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        if self.slots[slot].replace((link, value)).is_none() {
            self.len += 1;
        }
    }

    /// Takes `link`'s value.
    pub fn remove(&mut self, link: LinkId) -> Option<V> {
        let entry = self.slots.get_mut(link.slot())?;
        if !matches!(entry, Some((id, _)) if *id == link) {
            return None;
        }
        self.len -= 1;
        entry.take().map(|(_, v)| v)
    }

    /// Links with a value.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no link has a value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use btl_core::endpoint::ProcName;
    use btl_core::engine::config::EngineConfig;
    use btl_core::engine::{Capacities, Source, Stream};
    use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
    use btl_core::time::Instant;

    use super::*;
    use crate::driver::heap::{Heap, HeapEngine};

    /// An engine whose links the test makes and closes.
    fn engine() -> HeapEngine<Stream> {
        let class = |fragment_size| FragmentPoolConfig {
            fragment_size,
            num: 4,
            max: 4,
            inc: 1,
        };
        let pools = FragmentPoolsConfig {
            small: class(256),
            eager: class(1024),
            max: class(4096),
        };
        let capacities = Capacities {
            peers: 2,
            links: 2,
            ops: 2,
            events: 8,
            registrations: 2,
        };
        let config = EngineConfig::new(ProcName::new(1, 0));
        Heap::engine(config, Stream, capacities, pools, Instant::ZERO).expect("pools")
    }

    #[test]
    fn a_value_belongs_to_its_link_not_to_a_later_link_of_the_slot() {
        let mut e = engine();
        let accept = |e: &mut HeapEngine<Stream>, n: u8| {
            e.handle_accepted(Source(u64::from(n)), [n; 16], Instant::ZERO)
                .expect("a slot")
        };
        let (a, b) = (accept(&mut e, 1), accept(&mut e, 2));
        let mut map = LinkMap::default();
        assert!(map.is_empty());
        map.insert(a, "a");
        map.insert(b, "b");
        map.insert(b, "b again");
        assert_eq!(map.len(), 2);
        assert_eq!((map.get(a), map.get(b)), (Some(&"a"), Some(&"b again")));
        e.handle_closed(a, Instant::ZERO);
        let c = accept(&mut e, 3);
        assert_eq!(c.slot(), a.slot(), "the slot serves a new link");
        assert_eq!(map.get(c), None, "a's value is not c's");
        assert_eq!(map.remove(c), None);
        assert_eq!(map.remove(a), Some("a"));
        assert_eq!(map.get(a), None);
        map.insert(c, "c");
        assert_eq!((map.get(c), map.len()), (Some(&"c"), 2));
    }
}
