//! A fixed table of values named by generational keys, in storage the
//! caller provides.
//!
//! A [`Key`] is a slot and the slot's generation: removing a value bumps
//! the generation, so a key kept after its value left never names the value
//! that takes the slot next; it is refused instead. Inserting and removing
//! are O(1) and O(len); the values in use are visited in the order they
//! were inserted, without scanning empty slots, so a table sized for many
//! costs little with few.
//!
//! The storage is two tables the caller chose (an array, a lent slice, a
//! box): one [`Entry`] per slot, and one `u16` per slot for the order of
//! use. Up to 65536 slots are used.

use core::borrow::BorrowMut;
use core::marker::PhantomData;

/// Names a value of a [`Table`] for as long as it stays there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The slot.
    pub index: u16,
    /// The slot's generation when the value was inserted.
    pub generation: u16,
}

/// One slot of a [`Table`].
#[derive(Debug)]
pub struct Entry<T> {
    value: Option<T>,
    generation: u16,
    /// Where the slot stands in the table's order.
    at: u16,
}

impl<T> Entry<T> {
    /// A slot never used.
    pub const EMPTY: Self = Entry {
        value: None,
        generation: 0,
        at: 0,
    };
}

impl<T> Default for Entry<T> {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Values of type `T` in the slots `E`, with their order in `O`.
#[derive(Debug)]
pub struct Table<T, E, O> {
    entries: E,
    /// A permutation of the slots: the first `len` hold values, in the
    /// order they were inserted; the rest are free, the most recently
    /// freed first.
    order: O,
    len: usize,
    _values: PhantomData<T>,
}

impl<T, E: BorrowMut<[Entry<T>]>, O: BorrowMut<[u16]>> Table<T, E, O> {
    /// An empty table over `entries` and `order`; its capacity is the
    /// shorter of the two (at most 65536). Every entry must be empty.
    pub fn new(mut entries: E, mut order: O) -> Self {
        let n = entries
            .borrow()
            .len()
            .min(order.borrow().len())
            .min(1 << 16);
        let (entries_mut, order_mut) = (entries.borrow_mut(), order.borrow_mut());
        for i in 0..n {
            order_mut[i] = i as u16;
            entries_mut[i].at = i as u16;
        }
        Table {
            entries,
            order,
            len: 0,
            _values: PhantomData,
        }
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.entries
            .borrow()
            .len()
            .min(self.order.borrow().len())
            .min(1 << 16)
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every slot holds a value.
    pub fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    /// Puts `value` in a free slot (the one freed last), or hands it back
    /// when the table is full.
    pub fn insert(&mut self, value: T) -> Result<Key, T> {
        if self.is_full() {
            return Err(value);
        }
        Ok(self
            .insert_with(|_| value)
            .unwrap_or_else(|| unreachable!()))
    }

    /// Puts the value `make` makes of its key in a free slot (the one
    /// freed last); `None` when the table is full.
    pub fn insert_with(&mut self, make: impl FnOnce(Key) -> T) -> Option<Key> {
        if self.is_full() {
            return None;
        }
        let index = self.order.borrow()[self.len];
        let entry = &mut self.entries.borrow_mut()[usize::from(index)];
        let key = Key {
            index,
            generation: entry.generation,
        };
        entry.value = Some(make(key));
        entry.at = self.len as u16;
        self.len += 1;
        Some(key)
    }

    /// Takes the value `key` names out; its slot's generation moves on, so
    /// `key` names nothing from now on.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        self.get(key)?;
        let entries = self.entries.borrow_mut();
        let entry = &mut entries[usize::from(key.index)];
        let value = entry.value.take();
        entry.generation = entry.generation.wrapping_add(1);
        let at = usize::from(entry.at);
        // Close the gap, keeping the order of insertion; the slot goes
        // first among the free ones.
        let order = self.order.borrow_mut();
        order[at..self.len].rotate_left(1);
        for (i, &index) in order[at..self.len].iter().enumerate() {
            entries[usize::from(index)].at = (at + i) as u16;
        }
        self.len -= 1;
        value
    }

    /// The value `key` names, unless it has left.
    pub fn get(&self, key: Key) -> Option<&T> {
        let entry = self.entries.borrow().get(usize::from(key.index))?;
        if entry.generation != key.generation {
            return None;
        }
        entry.value.as_ref()
    }

    /// The value `key` names, writable.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let entry = self.entries.borrow_mut().get_mut(usize::from(key.index))?;
        if entry.generation != key.generation {
            return None;
        }
        entry.value.as_mut()
    }

    /// The key of the `i`th value in order of insertion (`i < len`).
    pub fn key_at(&self, i: usize) -> Option<Key> {
        if i >= self.len {
            return None;
        }
        let index = self.order.borrow()[i];
        let generation = self.entries.borrow()[usize::from(index)].generation;
        Some(Key { index, generation })
    }

    /// The key of what slot `index` holds, if it holds a value.
    pub fn key_of_slot(&self, index: usize) -> Option<Key> {
        let entry = self.entries.borrow().get(index)?;
        entry.value.as_ref()?;
        Some(Key {
            index: index as u16,
            generation: entry.generation,
        })
    }

    /// The keys of the values held, in order of insertion.
    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        (0..self.len).filter_map(|i| self.key_at(i))
    }

    /// The values held and their keys, in order of insertion.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &T)> + '_ {
        self.keys().filter_map(|k| Some((k, self.get(k)?)))
    }

    /// The values held, writable, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.entries
            .borrow_mut()
            .iter_mut()
            .filter_map(|e| e.value.as_mut())
    }
}

/// A table held in arrays: `N` slots inline.
pub type InlineTable<T, const N: usize> = Table<T, [Entry<T>; N], [u16; N]>;

impl<T, const N: usize> InlineTable<T, N> {
    /// An empty table of `N` slots.
    pub fn inline() -> Self {
        Table::new([const { Entry::EMPTY }; N], [0; N])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn keys_of_removed_values_name_nothing_even_when_the_slot_is_reused() {
        let mut t = InlineTable::<&str, 2>::inline();
        let a = t.insert("a").expect("room");
        let b = t.insert("b").expect("room");
        assert_eq!(t.insert("c"), Err("c"), "full");
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.remove(a), None, "removed once");
        let c = t.insert("c").expect("the freed slot");
        assert_eq!(c.index, a.index, "the slot freed last is taken first");
        assert_ne!(c, a);
        assert_eq!(t.get(a), None, "the old key is stale");
        assert_eq!((t.get(b), t.get(c)), (Some(&"b"), Some(&"c")));
    }

    #[test]
    fn values_are_visited_in_order_of_insertion() {
        let mut t = InlineTable::<u32, 4>::inline();
        let keys: Vec<Key> = (0..4).map(|v| t.insert(v).expect("room")).collect();
        t.remove(keys[1]);
        let e = t.insert(9).expect("room");
        assert_eq!(e.index, keys[1].index);
        let order: Vec<u32> = t.iter().map(|(_, v)| *v).collect();
        assert_eq!(order, [0, 2, 3, 9]);
        assert_eq!(t.len(), 4);
        for k in [keys[0], keys[2], keys[3], e] {
            t.remove(k);
        }
        assert!(t.is_empty());
        assert_eq!(t.keys().count(), 0);
    }

    #[test]
    fn a_lent_table_is_as_long_as_its_shorter_part() {
        let mut entries: [Entry<u8>; 3] = [const { Entry::EMPTY }; 3];
        let mut order = [0u16; 2];
        let mut t = Table::new(&mut entries[..], &mut order[..]);
        assert_eq!(t.capacity(), 2);
        t.insert(1).expect("room");
        t.insert(2).expect("room");
        assert_eq!(t.insert(3), Err(3));
    }
}
