use std::sync::atomic::Ordering;

use btl_core::ring::{Consumer, Producer};

use super::*;

/// A name no other test or run uses.
fn name(what: &str) -> String {
    format!("btl-test-{}-{what}", std::process::id())
}

#[test]
fn a_peer_writes_into_the_segment_through_its_own_mapping() {
    let mine = Segment::create(&name("rings"), 4, 1024).expect("a segment");
    let theirs = Segment::open(&name("rings")).expect("the peer maps it");
    assert_eq!(theirs.slots(), 4);
    let who = Claimant {
        proc: ProcName::new(1 << 40 | 3, 7),
        pid: 4242,
        cross: true,
    };
    assert_eq!(mine.claims(), 0);
    let slot = theirs.claim(who).expect("a free slot");
    assert_eq!(
        mine.claimant(slot),
        Some(who),
        "the claim, whole, is in the owner's mapping"
    );
    assert_eq!(mine.claims(), 1, "and counted");
    assert_eq!(
        theirs.claim(who).map(|s| s != slot),
        Some(true),
        "a slot is claimed once"
    );
    assert_eq!(
        (0..4).filter(|&s| mine.claimant(s) == Some(who)).count(),
        2,
        "both claims are the claimant's"
    );
    let mut tx = Producer::attach(theirs.ring_words_of(slot).expect("a ring")).expect("a ring");
    let mut rx = Consumer::attach(mine.ring_words_of(slot).expect("a ring")).expect("a ring");
    let record = |i: u32| i.to_le_bytes().repeat((i % 50) as usize);
    let (mut out, mut got) = ([0u8; 4096], 0u32);
    let mut take = |rx: &mut Consumer<'_>| {
        while let Some(r) = rx.pop(&mut out).expect("sound") {
            assert_eq!(&out[..r.len], &record(got)[..], "record {got}");
            got += 1;
        }
    };
    for i in 0..1000u32 {
        while tx.push(1, &[&record(i)]).is_err() {
            take(&mut rx);
        }
    }
    take(&mut rx);
    assert_eq!(got, 1000, "every record crossed the two mappings");
    let path = mine.path().to_path_buf();
    drop(theirs);
    assert!(path.exists(), "a peer's mapping going removes nothing");
    drop(mine);
    assert!(!path.exists(), "the owner's segment goes with it");
}

#[test]
fn a_slot_reopened_is_free_and_zero_and_a_vacated_mapping_reads_zero() {
    // Rings of several pages, so that whole pages are given back.
    let mine = Segment::create(&name("reopen"), 3, 1 << 12).expect("a segment");
    let theirs = Segment::open(&name("reopen")).expect("mapped");
    let who = Claimant {
        proc: ProcName::new(5, 1),
        pid: 1,
        cross: false,
    };
    let slot = theirs.claim(who).expect("a slot");
    let mut tx = Producer::attach(theirs.ring_words_of(slot).expect("a ring")).expect("a ring");
    while tx.push(1, &[&[0xAB; 1000]]).is_ok() {}
    mine.reopen(slot).expect("reopened");
    assert_eq!(mine.claimant(slot), None, "free again");
    assert!(
        mine.ring_words_of(slot)
            .expect("a ring")
            .iter()
            .all(|w| w.load(Ordering::Relaxed) == 0),
        "every word of the ring is zero"
    );
    assert_eq!(theirs.claim(who), Some(slot), "and claimed anew");
    let mut rx = Consumer::attach(mine.ring_words_of(slot).expect("a ring")).expect("a ring");
    assert_eq!(rx.pop(&mut [0; 1024]), Ok(None), "an empty ring");
    theirs.vacate().expect("vacated");
    assert_eq!(theirs.claimant(slot), None, "the peer's view is zeros");
    assert_eq!(mine.claimant(slot), Some(who), "the owner's is untouched");
}

#[test]
fn a_segment_left_by_a_dead_process_is_removed_and_a_live_ones_is_not() {
    let first = Segment::create(&name("stale"), 1, 64).expect("a segment");
    match Segment::create(&name("stale"), 1, 64) {
        Err(SegmentError::InUse { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("a live process's segment taken: {other:?}"),
    }
    // Its maker dies: a child that has ended.
    let mut child = std::process::Command::new("true").spawn().expect("a child");
    let dead = child.id();
    child.wait().expect("it ends");
    first.words()[2].store(dead, Ordering::Relaxed);
    // Left behind as a crash leaves it: not removed.
    std::mem::forget(first);
    let again = Segment::create(&name("stale"), 2, 64).expect("the stale one removed");
    assert_eq!(again.slots(), 2);
}

#[test]
fn another_users_segment_is_left_alone() {
    let path = Segment::path_of(&name("theirs"));
    std::fs::write(&path, b"not ours").expect("a file");
    if std::os::unix::fs::chown(&path, Some(65534), Some(65534)).is_err() {
        // Only root can give a file away; nothing to check otherwise.
        let _ = std::fs::remove_file(&path);
        return;
    }
    match Segment::create(&name("theirs"), 1, 64) {
        Err(e @ SegmentError::NotOurs { owner: 65534, .. }) => {
            assert!(e.to_string().contains("left alone"), "{e}");
        }
        other => panic!("another user's file taken: {other:?}"),
    }
    assert!(path.exists(), "and not removed");
    std::fs::remove_file(&path).expect("cleaned up");
}

#[test]
fn what_is_no_segment_is_refused() {
    let path = Segment::path_of(&name("junk"));
    std::fs::write(&path, vec![7u8; 4096]).expect("a file");
    assert!(matches!(
        Segment::open(&name("junk")),
        Err(SegmentError::NotASegment { .. })
    ));
    std::fs::remove_file(&path).expect("cleaned up");
    assert!(matches!(
        Segment::create(&name("sizes"), 0, 64),
        Err(SegmentError::BadSize { .. })
    ));
    assert!(matches!(
        Segment::create(&name("sizes"), 1, 100),
        Err(SegmentError::BadSize { .. })
    ));
}

#[test]
fn the_host_is_named_by_its_boot_and_its_shared_memory() {
    let id = host_identity().expect("Linux says both");
    assert_eq!(id, host_identity().expect("again"), "stable");
    assert!(id.len() > 36 && id.contains(':'), "{id}");
}

/// The child of the test below: a separate process that maps the
/// parent's segment, claims a slot and pushes 1,000 records into it.
#[test]
#[ignore = "run by a_child_process_writes_into_the_segment as its child"]
fn child_writes_records() {
    let Ok(segment) = std::env::var("BTL_TEST_SEGMENT") else {
        return;
    };
    let theirs = Segment::open(&segment).expect("the parent's segment");
    let slot = theirs
        .claim(Claimant {
            proc: ProcName::new(1, 1),
            pid: std::process::id(),
            cross: false,
        })
        .expect("a slot");
    let mut tx = Producer::attach(theirs.ring_words_of(slot).expect("a ring")).expect("a ring");
    for i in 0..1000u32 {
        let data = i.to_le_bytes().repeat((i % 50) as usize);
        let start = std::time::Instant::now();
        while tx.push(1, &[&data]).is_err() {
            assert!(start.elapsed().as_secs() < 20, "the parent never read");
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_child_process_writes_into_the_segment() {
    let mine = Segment::create(&name("child"), 2, 256).expect("a segment");
    let mut child = std::process::Command::new(std::env::current_exe().expect("this test"))
        .args([
            "--exact",
            "transports::sm::segment::tests::child_writes_records",
            "--ignored",
            "--nocapture",
        ])
        .env("BTL_TEST_SEGMENT", name("child"))
        .spawn()
        .expect("the child");
    let start = std::time::Instant::now();
    let slot = loop {
        if let Some(slot) = (0..2).find(|&s| mine.claimant(s).map(|c| c.pid) == Some(child.id())) {
            break slot;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "the child never claimed a slot"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let mut rx = Consumer::attach(mine.ring_words_of(slot).expect("a ring")).expect("a ring");
    let (mut out, mut got) = ([0u8; 1024], 0u32);
    while got < 1000 {
        match rx.pop(&mut out).expect("a sound ring") {
            Some(r) => {
                let want = got.to_le_bytes().repeat((got % 50) as usize);
                assert_eq!(&out[..r.len], &want[..], "record {got}");
                got += 1;
            }
            None => {
                assert!(start.elapsed().as_secs() < 20, "{got} records came");
                std::thread::yield_now();
            }
        }
    }
    assert!(child.wait().expect("it ends").success());
}

#[test]
fn a_segment_takes_memory_only_for_the_rings_peers_write() {
    use std::os::unix::fs::MetadataExt;
    // 256 slots of 256 KiB rings: 64 MiB of file, most of it never touched.
    let mine = Segment::create(&name("memory"), 256, 1 << 16).expect("a segment");
    let held = || std::fs::metadata(mine.path()).expect("the file").blocks() * 512;
    assert!(held() <= 32 << 10, "made: {} bytes held", held());
    let theirs = Segment::open(&name("memory")).expect("mapped");
    let who = Claimant {
        proc: ProcName::new(9, 1),
        pid: 1,
        cross: false,
    };
    let slot = theirs.claim(who).expect("a slot");
    let mut tx = Producer::attach(theirs.ring_words_of(slot).expect("a ring")).expect("a ring");
    let mut rx = Consumer::attach(mine.ring_words_of(slot).expect("a ring")).expect("a ring");
    // Two laps of the ring.
    let mut out = [0u8; 4096];
    for _ in 0..256 {
        while tx.push(1, &[&[7u8; 4000]]).is_err() {
            while rx.pop(&mut out).expect("sound").is_some() {}
        }
    }
    let busy = held();
    assert!(
        busy <= (32 << 10) + (256 << 10) + 4096,
        "one busy peer holds its ring and no more: {busy} bytes"
    );
    mine.reopen(slot).expect("reopened");
    assert!(
        held() <= 32 << 10,
        "its ring given back: {} bytes held",
        held()
    );
}
