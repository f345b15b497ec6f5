//! Active messages with `prepare_src` + `send`: every size up to
//! `max_send_size` arrives intact exactly once, and every descriptor comes
//! back to its sender exactly once whatever its flags.

use std::collections::HashMap;

use btl_core::btl::{Access, BtlError, Tag};
use btl_core::desc::{DescFlags, Order};

use crate::data::pattern;
use crate::suite::{local, region, register, seq_header, seq_of};
use crate::track::{Message, Seen, Tracker, assert_pools_idle, deliver, round, send};
use crate::world::{Side, World};

/// Every size to 4 KiB, powers of two and their neighbours beyond, and
/// every size within 3 bytes of `eager_limit` and `max_send_size` (none
/// above `max_send_size`).
pub fn sizes(eager_limit: usize, max_send_size: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..=4096).collect();
    let mut p = 8192;
    while p <= max_send_size {
        sizes.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    for edge in [eager_limit, max_send_size] {
        sizes.extend(edge.saturating_sub(3)..=edge + 3);
    }
    sizes.retain(|&n| n <= max_send_size);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The seed of a message's pattern: its size and tag, so a message
/// delivered under the wrong tag or truncated compares unequal.
fn seed(len: usize, tag: Tag) -> u64 {
    (len as u64) << 8 | u64::from(tag.0)
}

/// Every size from 0 to `max_send_size` (see [`sizes`]) sent A → B arrives
/// once, byte for byte, with its tag and from A's endpoint; every
/// descriptor comes back once; every fragment returns to its pool.
pub fn every_size_arrives_intact_once(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let sizes = sizes(attrs.eager_limit, attrs.max_send_size);
    let tags = [Tag(0x40), Tag(0x80), Tag(0xFF)];
    let mut tracker = Tracker::new(world);
    for (i, &n) in sizes.iter().enumerate() {
        let tag = tags[i % tags.len()];
        let data = pattern(seed(n, tag), n);
        send(world, &mut tracker, Side::A, &Message::new(tag, &data));
    }
    deliver(world, &mut tracker, sizes.len());

    let from = world.peer(Side::B);
    let mut got: HashMap<usize, u32> = HashMap::new();
    for s in &tracker.seen {
        if let Seen::Received {
            from: f, tag, data, ..
        } = s
        {
            assert_eq!(
                *f,
                from,
                "sender's endpoint of a {}-byte message",
                data.len()
            );
            assert_eq!(
                *data,
                pattern(seed(data.len(), *tag), data.len()),
                "content of the {}-byte message with {tag:?}",
                data.len()
            );
            *got.entry(data.len()).or_default() += 1;
        }
    }
    for &n in &sizes {
        assert_eq!(got.get(&n), Some(&1), "deliveries of the {n}-byte message");
    }
    assert_eq!(got.len(), sizes.len(), "messages of sizes never sent");

    let mut back: HashMap<usize, u32> = HashMap::new();
    for (tag, bytes) in &tracker.returned {
        assert_eq!(
            *bytes,
            pattern(seed(bytes.len(), *tag), bytes.len()),
            "a returned descriptor is the one sent"
        );
        *back.entry(bytes.len()).or_default() += 1;
    }
    assert_eq!(back, got, "descriptors handed back, by size");
    assert_pools_idle(world, &tracker);
}

/// The four flag combinations: without `BTL_OWNERSHIP` the descriptor
/// comes back exactly once (at once or in its completion); with it, never.
/// With `ALWAYS_CALLBACK` a completion event always follows. The tracker
/// fails on any event nobody is owed.
pub fn descriptors_come_back_exactly_once_for_every_flag(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let flag_sets = [
        DescFlags::empty(),
        DescFlags::BTL_OWNERSHIP,
        DescFlags::ALWAYS_CALLBACK,
        DescFlags::BTL_OWNERSHIP | DescFlags::ALWAYS_CALLBACK,
    ];
    let lens = [0, 1, 100, attrs.eager_limit, attrs.max_send_size];
    let mut tracker = Tracker::new(world);
    for round in 0..3 {
        for (f, &flags) in flag_sets.iter().enumerate() {
            let tag = Tag(0xA0 + f as u8);
            for &n in &lens {
                let data = pattern(seed(n, tag) ^ (round << 40), n);
                let msg = Message {
                    flags,
                    ..Message::new(tag, &data)
                };
                send(world, &mut tracker, Side::A, &msg);
            }
        }
    }
    deliver(world, &mut tracker, 3 * flag_sets.len() * lens.len());

    for (f, &flags) in flag_sets.iter().enumerate() {
        let tag = Tag(0xA0 + f as u8);
        let received = tracker.received().filter(|(t, _)| *t == tag).count();
        assert_eq!(
            received,
            3 * lens.len(),
            "messages delivered with {flags:?}"
        );
        let returned = tracker.returned.iter().filter(|(t, _)| *t == tag).count();
        let expected = if flags.contains(DescFlags::BTL_OWNERSHIP) {
            0
        } else {
            received
        };
        assert_eq!(returned, expected, "descriptors handed back with {flags:?}");
    }
    assert_pools_idle(world, &tracker);
}

/// A header written into the reserve arrives in front of the payload, for
/// reserves of several sizes and totals up to `max_send_size`.
pub fn header_reserve_precedes_the_payload(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let mut tracker = Tracker::new(world);
    let mut expected = Vec::new();
    for reserve in [1, 8, 16, 64] {
        let lens = [
            0,
            1,
            100,
            attrs.eager_limit - reserve,
            attrs.max_send_size - reserve,
        ];
        for n in lens {
            let header = pattern(0xEAD ^ reserve as u64, reserve);
            let payload = pattern(n as u64, n);
            let msg = Message {
                header: &header,
                order: Order(0),
                ..Message::new(Tag(0x81), &payload)
            };
            send(world, &mut tracker, Side::A, &msg);
            expected.push([header, payload].concat());
        }
    }
    deliver(world, &mut tracker, expected.len());
    let got: Vec<&[u8]> = tracker.received().map(|(_, d)| d).collect();
    assert_eq!(got.len(), expected.len(), "messages delivered");
    for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
        assert!(*got == want.as_slice(), "message {i}: header and payload");
    }
    assert_pools_idle(world, &tracker);
}

/// A descriptor from `alloc`, filled in place, sends what was written.
pub fn alloc_then_fill_sends_the_payload(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let mut tracker = Tracker::new(world);
    let lens = [0, 1, 255, 4096, attrs.eager_limit, attrs.max_send_size];
    let ep = world.peer(Side::A);
    for n in lens.into_iter().filter(|&n| n <= attrs.max_send_size) {
        let data = pattern(!(n as u64), n);
        let btl = world.btl(Side::A);
        let mut desc = btl
            .alloc(ep, Order(0), n, DescFlags::empty())
            .expect("alloc");
        desc.payload_mut(btl.pools())
            .expect("payload of a fresh descriptor")
            .copy_from_slice(&data);
        let status = btl
            .send(ep, desc, Tag(0x82))
            .map_err(|e| e.error)
            .expect("send");
        tracker.sent(world, Side::A, Tag(0x82), DescFlags::empty(), status);
        deliver(world, &mut tracker, 1);
        let got: Vec<&[u8]> = tracker.received().map(|(_, d)| d).collect();
        assert_eq!(got, [data.as_slice()], "the {n}-byte allocated message");
        tracker.take();
    }
    assert_pools_idle(world, &tracker);
}

/// `prepare_src_registered` sends a header, then a range of registered
/// memory (referenced in place or copied, as the BTL chooses), up to
/// `max_send_size` in all.
pub fn registered_memory_is_sent(world: &mut dyn World) {
    const RESERVE: usize = 16;
    const OFFSET: usize = 7;
    let attrs = super::a_to_b(world);
    let mut tracker = Tracker::new(world);
    let handle = register(
        world,
        Side::A,
        attrs.max_send_size + OFFSET,
        Access::empty(),
        Some(50),
    );
    let source = region(world, Side::A, handle);
    let header = pattern(51, RESERVE);
    let ep = world.peer(Side::A);
    for n in [
        0,
        1,
        100,
        attrs.eager_limit - RESERVE,
        attrs.max_send_size - RESERVE,
    ] {
        let btl = world.btl(Side::A);
        let slice = local(handle, OFFSET as u64, n as u64);
        let mut desc = btl
            .prepare_src_registered(ep, slice, RESERVE, Order(0), DescFlags::empty())
            .expect("prepare_src_registered");
        desc.header_mut(btl.pools())
            .expect("the header reserve")
            .copy_from_slice(&header);
        let status = btl
            .send(ep, desc, Tag(0x83))
            .map_err(|e| e.error)
            .expect("send");
        tracker.sent(world, Side::A, Tag(0x83), DescFlags::empty(), status);
        deliver(world, &mut tracker, 1);
        let want = [&header[..], &source[OFFSET..OFFSET + n]].concat();
        let got: Vec<&[u8]> = tracker.received().map(|(_, d)| d).collect();
        assert!(got == [want.as_slice()], "{n} bytes of registered memory");
        tracker.take();
    }
    assert_pools_idle(world, &tracker);
}

/// Asking for more than `max_send_size` (header included) is `TooLarge`
/// and takes no fragment.
pub fn larger_than_max_send_size_is_refused(world: &mut dyn World) {
    let max = super::a_to_b(world).max_send_size;
    let ep = world.peer(Side::A);
    let data = vec![7u8; max + 1];
    let btl = world.btl(Side::A);
    let attempts = [
        (
            "prepare_src of max_send_size + 1",
            btl.prepare_src(ep, &data, 0, Order::ANY, DescFlags::empty()),
        ),
        (
            "prepare_src of a 2-byte header and max_send_size - 1",
            btl.prepare_src(ep, &data[2..], 2, Order::ANY, DescFlags::empty()),
        ),
        (
            "alloc of max_send_size + 1",
            btl.alloc(ep, Order::ANY, max + 1, DescFlags::empty()),
        ),
    ];
    for (what, result) in attempts {
        match result {
            Err(BtlError::TooLarge { .. }) => {}
            Err(e) => panic!("{what}: expected TooLarge, got {e}"),
            Ok(desc) => {
                btl.free(desc).expect("free");
                panic!("{what}: accepted");
            }
        }
    }
    let tracker = Tracker::new(world);
    assert_pools_idle(world, &tracker);
}

/// Messages `send_copy` takes for one peer arrive in the order it took
/// them, whichever way each went (`sendi` below `eager_limit`, a
/// descriptor above it, up to `max_send_size`), as the `Btl` docs promise:
/// 600 of them, each numbered, sent while the receiver drains.
pub fn send_copy_keeps_order_per_peer(world: &mut dyn World) {
    const COUNT: u64 = 600;
    let attrs = super::a_to_b(world);
    let lengths = [
        8,
        200,
        attrs.eager_limit,
        attrs.eager_limit + 1,
        attrs.max_send_size,
    ];
    let mut tracker = Tracker::new(world);
    let to = world.peer(Side::A);
    let max_rounds = world.capabilities().max_rounds;
    for i in 0..COUNT {
        let len = lengths[i as usize % lengths.len()].max(8);
        let mut data = pattern(i, len);
        data[..8].copy_from_slice(&seq_header(i));
        let mut refused = 0;
        loop {
            match world.btl(Side::A).send_copy(to, Tag(0x41), &data) {
                Ok(()) => break,
                Err(BtlError::OutOfResource) if refused < max_rounds => {
                    refused += 1;
                    round(world, &mut tracker);
                }
                Err(e) => panic!("send_copy of message {i} ({len} bytes): {e}"),
            }
        }
    }
    deliver(world, &mut tracker, COUNT as usize);
    let order: Vec<u64> = tracker
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::Received { data, .. } => Some(seq_of(data)),
            _ => None,
        })
        .collect();
    assert_eq!(order, (0..COUNT).collect::<Vec<_>>(), "arrival order");
    assert_pools_idle(world, &tracker);
}
