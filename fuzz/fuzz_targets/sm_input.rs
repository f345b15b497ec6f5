//! A hostile peer writing whatever records it likes into the ring a
//! shared-memory module reads (messages, pieces of puts, gets, answers to
//! operations never asked, goodbyes, with any fields), while the module
//! has a registration a put may land in and a get may read, and a put and
//! a get of its own under way: nothing may panic, a peer that breaks the
//! protocol is lost once, and the module's put and get each end exactly
//! once (by the peer's answers, its loss, or finalize).
//!
//! The input: records, each a kind byte, a length byte and that many
//! bytes (a length of 0xFF stretches the record to 4 KiB of the input's
//! bytes, repeated).
#![no_main]

use core::sync::atomic::AtomicU32;

use btl_core::btl::{Access, Btl, Event, MemSlice, RemoteKey, RemoteSlice};
use btl_core::endpoint::{ProcName, Reachability};
use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig, PoolCell};
use btl_core::ring::{self, Producer};
use btl_core::sm::{CrossCopy, SharedMemory};
use libfuzzer_sys::fuzz_target;

const CAPACITY: usize = 1 << 12;

fn ring_words() -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..ring::words_for(CAPACITY))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    words
}

fuzz_target!(|data: &[u8]| {
    let (to_us, from_us) = (ring_words(), ring_words());
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 8,
        max: 8,
        inc: 8,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(256),
        eager: pool(2048),
        max: pool(8192),
    };
    let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
    let pools = FragmentPools::new(&mut region, cfg).expect("pools");
    let mut sm: SharedMemory<'_, &[PoolCell], Vec<u8>, 2, 4, 4, 16> = SharedMemory::new(pools);
    let peer = ProcName::new(1, 1);
    sm.attach(peer, &from_us, &to_us).expect("attach");
    let mut eps = [None];
    let mut words = [0u64];
    sm.add_procs(&[peer], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    let ep = eps[0].expect("reachable");
    // Copies across "succeed" without touching memory, so that the peer's
    // puts and gets in one copy are answered as done, and the module's
    // own go in one copy, for the peer to answer as it likes.
    fn pretend_read(_: u32, _: u64, into: &mut [u8]) -> bool {
        into.fill(0xAB);
        true
    }
    fn pretend_write(_: u32, _: u64, _: &[u8]) -> bool {
        true
    }
    sm.set_one_copy_min(32);
    sm.set_cross_copy(
        ep,
        Some(CrossCopy {
            process: 0,
            read: pretend_read,
            write: pretend_write,
        }),
        true,
    );
    let mine = sm
        .register_mem(vec![0u8; 4096], Access::REMOTE_WRITE | Access::REMOTE_READ)
        .expect("a registration");
    let local = MemSlice {
        handle: mine,
        offset: 0,
        len: 64,
    };
    let theirs = RemoteSlice {
        key: RemoteKey(0x1_0000_0000),
        offset: 0,
        len: 64,
    };
    let _ = sm.put(ep, local, theirs, 1);
    let _ = sm.get(ep, local, theirs, 2);

    let mut hostile = Producer::attach(&to_us).expect("a ring");
    let mut rest = data;
    let mut lost = 0;
    // How often each of the module's own operations ended: once at most
    // while the peer plays, exactly once after finalize.
    let mut ended = [0u32; 2];
    let count = |event: Event<'_>, lost: &mut u32, ended: &mut [u32; 2]| match event {
        Event::Error(e) => {
            assert_eq!(e.endpoint, Some(ep));
            *lost += 1;
        }
        Event::PutComplete { ctx, .. } | Event::GetComplete { ctx, .. } => {
            ended[ctx as usize - 1] += 1;
        }
        _ => {}
    };
    while let [kind, len, tail @ ..] = rest {
        let n = if *len == 0xFF {
            4096
        } else {
            usize::from(*len)
        };
        let take = n.min(tail.len());
        let mut bytes = tail[..take].to_vec();
        bytes.resize(n, 0x5A);
        rest = &tail[take..];
        // The ring itself keeps kind 0xFF; anything else goes in.
        let _ = hostile.push(*kind, &[&bytes]);
        sm.progress();
        while let Some(event) = sm.poll_event() {
            count(event, &mut lost, &mut ended);
        }
        assert!(
            ended.iter().all(|&n| n <= 1),
            "an operation ends once: {ended:?}"
        );
    }
    assert!(lost <= 1, "a peer is lost once");
    let _ = sm.finalize();
    while let Some(event) = sm.poll_event() {
        count(event, &mut lost, &mut ended);
    }
    assert_eq!(ended, [1, 1], "every operation ends exactly once");
});
