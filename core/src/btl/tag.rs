//! Active-message tags and the table that dispatches them.
//!
//! Every send carries an 8-bit [`Tag`]; the receiver looks the tag up in its
//! [`TagTable`] and runs the handler registered for it with the message in
//! place. As in Open MPI, the 256 tags are split into ranges, one per layer,
//! so that layers stacked on one BTL cannot take each other's tags.
//!
//! The table may be shared between threads: registration takes a short
//! write lock, dispatch copies the handler out under a read lock and runs it
//! after releasing the lock, so a handler may itself register tags.

use core::fmt;
use core::ops::RangeInclusive;

use crate::endpoint::EndpointId;

/// Active-message tag: selects the receive handler on the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u8);

/// A range of tags reserved for one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagRange {
    /// The layer that owns it, for messages.
    pub owner: &'static str,
    /// First tag of the range.
    pub first: u8,
    /// Last tag of the range, included.
    pub last: u8,
}

impl TagRange {
    /// Tags the BTLs use internally.
    pub const BTL: TagRange = TagRange {
        owner: "btl",
        first: 0x00,
        last: 0x3F,
    };
    /// Tags of a point-to-point messaging layer (Open MPI's PML).
    pub const PML: TagRange = TagRange {
        owner: "pml",
        first: 0x40,
        last: 0x5F,
    };
    /// Tags of the Motr-style transfer machines.
    pub const XFER: TagRange = TagRange {
        owner: "xfer",
        first: 0x60,
        last: 0x7F,
    };
    /// Tags left to applications.
    pub const USER: TagRange = TagRange {
        owner: "user",
        first: 0x80,
        last: 0xFF,
    };

    /// The tags of the range.
    pub fn tags(&self) -> RangeInclusive<u8> {
        self.first..=self.last
    }

    /// Whether `tag` lies in the range.
    pub fn contains(&self, tag: Tag) -> bool {
        self.tags().contains(&tag.0)
    }
}

/// A message as a receive handler sees it: valid only during the call.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// Who sent it.
    pub from: EndpointId,
    /// Its tag.
    pub tag: Tag,
    /// Its bytes, in place in the receive fragment.
    pub data: &'a [u8],
}

/// A receive handler: the caller's context and the message.
pub type Handler<C> = fn(&mut C, &Incoming<'_>);

/// Why a tag could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagError {
    /// The tag lies outside the range the layer registers in.
    OutsideRange {
        /// The tag.
        tag: Tag,
        /// The range.
        range: TagRange,
    },
    /// The tag already has a handler.
    Taken(Tag),
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagError::OutsideRange { tag, range } => write!(
                f,
                "tag {:#04x} is outside the {} range {:#04x}..={:#04x}",
                tag.0, range.owner, range.first, range.last
            ),
            TagError::Taken(tag) => write!(f, "tag {:#04x} already has a handler", tag.0),
        }
    }
}

impl core::error::Error for TagError {}

/// Receive handlers by tag, for a context type `C`.
pub struct TagTable<C> {
    handlers: spin::RwLock<[Option<Handler<C>>; 256]>,
}

impl<C> Default for TagTable<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> fmt::Debug for TagTable<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registered = self.handlers.read().iter().filter(|h| h.is_some()).count();
        f.debug_struct("TagTable")
            .field("registered", &registered)
            .finish()
    }
}

impl<C> TagTable<C> {
    /// A table with no handler.
    pub const fn new() -> Self {
        TagTable {
            handlers: spin::RwLock::new([None; 256]),
        }
    }

    /// Registers `handler` for `tag`, which must lie in the layer's `range`
    /// and be free.
    pub fn register(&self, range: TagRange, tag: Tag, handler: Handler<C>) -> Result<(), TagError> {
        if !range.contains(tag) {
            return Err(TagError::OutsideRange { tag, range });
        }
        let mut handlers = self.handlers.write();
        let slot = &mut handlers[usize::from(tag.0)];
        if slot.is_some() {
            return Err(TagError::Taken(tag));
        }
        *slot = Some(handler);
        Ok(())
    }

    /// Removes the handler of `tag`; returns whether there was one.
    pub fn deregister(&self, tag: Tag) -> bool {
        self.handlers.write()[usize::from(tag.0)].take().is_some()
    }

    /// Runs the handler of `msg.tag` with `ctx`; returns false (and runs
    /// nothing) when the tag has none.
    pub fn dispatch(&self, ctx: &mut C, msg: &Incoming<'_>) -> bool {
        // Copy the handler out so that it runs without the lock held.
        let handler = self.handlers.read()[usize::from(msg.tag.0)];
        match handler {
            Some(h) => {
                h(ctx, msg);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn record(log: &mut Vec<(u8, Vec<u8>)>, msg: &Incoming<'_>) {
        log.push((msg.tag.0, msg.data.to_vec()));
    }

    #[test]
    fn registered_handlers_see_their_messages() {
        let table = TagTable::<Vec<(u8, Vec<u8>)>>::new();
        table
            .register(TagRange::USER, Tag(0x80), record)
            .expect("register");
        let mut log = Vec::new();
        let msg = Incoming {
            from: EndpointId(0),
            tag: Tag(0x80),
            data: b"hi",
        };
        assert!(table.dispatch(&mut log, &msg));
        let unknown = Incoming {
            tag: Tag(0x81),
            ..msg
        };
        assert!(!table.dispatch(&mut log, &unknown));
        assert_eq!(log, [(0x80, b"hi".to_vec())]);
    }

    #[test]
    fn ranges_and_duplicates_are_enforced() {
        let table = TagTable::<Vec<(u8, Vec<u8>)>>::new();
        assert_eq!(
            table.register(TagRange::PML, Tag(0x80), record),
            Err(TagError::OutsideRange {
                tag: Tag(0x80),
                range: TagRange::PML
            })
        );
        table
            .register(TagRange::PML, Tag(0x40), record)
            .expect("first");
        assert_eq!(
            table.register(TagRange::PML, Tag(0x40), record),
            Err(TagError::Taken(Tag(0x40)))
        );
        assert!(table.deregister(Tag(0x40)));
        assert!(!table.deregister(Tag(0x40)));
        table
            .register(TagRange::PML, Tag(0x40), record)
            .expect("again");
    }

    #[test]
    fn ranges_cover_every_tag_once() {
        let ranges = [TagRange::BTL, TagRange::PML, TagRange::XFER, TagRange::USER];
        for t in 0..=255u8 {
            assert_eq!(
                ranges.iter().filter(|r| r.contains(Tag(t))).count(),
                1,
                "tag {t}"
            );
        }
    }

    #[test]
    fn a_handler_may_register_another_tag() {
        static TABLE: TagTable<u32> = TagTable::new();
        fn second(n: &mut u32, _: &Incoming<'_>) {
            *n += 10;
        }
        fn first(n: &mut u32, _: &Incoming<'_>) {
            *n += 1;
            TABLE
                .register(TagRange::USER, Tag(0x91), second)
                .expect("no deadlock");
        }
        TABLE
            .register(TagRange::USER, Tag(0x90), first)
            .expect("register");
        let mut n = 0;
        let msg = Incoming {
            from: EndpointId(1),
            tag: Tag(0x90),
            data: &[],
        };
        assert!(TABLE.dispatch(&mut n, &msg));
        assert!(TABLE.dispatch(
            &mut n,
            &Incoming {
                tag: Tag(0x91),
                ..msg
            }
        ));
        assert_eq!(n, 11);
    }
}
