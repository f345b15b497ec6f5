//! All 256 active-message tags are carried, by `send` and by `sendi`, and
//! each message arrives with the tag it was sent with.

use std::collections::HashMap;

use btl_core::btl::Tag;
use btl_core::desc::Order;

use crate::track::{Message, Tracker, assert_pools_idle, deliver, send, sendi};
use crate::world::{Side, World};

/// The payload of the message with `tag` on path `path` (0 = send,
/// 1 = sendi): it names both, so a message under the wrong tag shows.
fn payload(tag: u8, path: u8) -> [u8; 4] {
    [tag, path, !tag, tag ^ 0x5A]
}

/// Every tag 0..=255, once with `send` and once with `sendi`, arrives once
/// with that tag.
pub fn every_tag_arrives_with_its_tag(world: &mut dyn World) {
    let mut tracker = Tracker::new(world);
    for t in 0..=255u8 {
        let data = payload(t, 0);
        send(world, &mut tracker, Side::A, &Message::new(Tag(t), &data));
    }
    for t in 0..=255u8 {
        sendi(
            world,
            &mut tracker,
            Side::A,
            &[],
            &payload(t, 1),
            Tag(t),
            Order::ANY,
        );
    }
    deliver(world, &mut tracker, 512);
    let mut got: HashMap<(u8, u8), u32> = HashMap::new();
    for (tag, data) in tracker.received() {
        assert_eq!(data.len(), 4, "message with {tag:?}");
        assert_eq!(
            data,
            payload(tag.0, data[1]),
            "message delivered with {tag:?}"
        );
        *got.entry((tag.0, data[1])).or_default() += 1;
    }
    assert_eq!(got.len(), 512, "distinct messages delivered");
    for t in 0..=255u8 {
        for path in [0, 1] {
            assert_eq!(
                got.get(&(t, path)),
                Some(&1),
                "deliveries of tag {t:#04x} by {}",
                ["send", "sendi"][usize::from(path)]
            );
        }
    }
    assert_pools_idle(world, &tracker);
}
