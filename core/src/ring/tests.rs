use std::vec;
use std::vec::Vec;

use super::*;

fn ring(capacity: usize) -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..words_for(capacity))
        .map(|_| AtomicU32::new(0))
        .collect();
    init(&words).expect("a ring");
    words
}

/// Record `i`'s payload: its length and bytes differ by `i`.
fn payload(i: u32, max: usize) -> Vec<u8> {
    let len = (i as usize * 37) % (max + 1);
    (0..len)
        .map(|x| (x as u32 ^ i.wrapping_mul(7)) as u8)
        .collect()
}

#[test]
fn records_come_out_as_they_went_in_across_many_laps() {
    let words = ring(64);
    let mut p = Producer::attach(&words).expect("producer");
    let mut c = Consumer::attach(&words).expect("consumer");
    let max = p.max_payload();
    assert_eq!(max, (64 / 2 - 4) * 4);
    let mut out = vec![0u8; max];
    let (mut sent, mut got) = (0u32, 0u32);
    while got < 2000 {
        // Fill until full, then drain part: every offset and skip is met.
        loop {
            let data = payload(sent, max);
            // Split in three uneven parts, as a header and a payload are.
            let (a, rest) = data.split_at(data.len() / 3);
            let (b, d) = rest.split_at(rest.len() / 2);
            match p.push((sent % 200) as u8, &[a, b, d]) {
                Ok(()) => sent += 1,
                Err(PushError::Full) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        for _ in 0..3 {
            let Some(record) = c.pop(&mut out).expect("a sound ring") else {
                break;
            };
            let want = payload(got, max);
            assert_eq!(record.kind, (got % 200) as u8);
            assert_eq!(&out[..record.len], &want[..], "record {got}");
            got += 1;
        }
    }
    while let Some(record) = c.pop(&mut out).expect("sound") {
        assert_eq!(&out[..record.len], &payload(got, max)[..]);
        got += 1;
    }
    assert_eq!(got, sent, "everything pushed came out once");
}

#[test]
fn a_full_ring_takes_again_once_the_consumer_has_read() {
    let words = ring(64);
    let mut p = Producer::attach(&words).expect("producer");
    let mut c = Consumer::attach(&words).expect("consumer");
    let mut pushed = 0;
    while p.push(1, &[&[9; 20]]).is_ok() {
        pushed += 1;
    }
    assert_eq!(p.push(1, &[&[9; 20]]), Err(PushError::Full));
    let mut out = [0u8; 20];
    let mut popped = 0;
    while c.pop(&mut out).expect("sound").is_some() {
        popped += 1;
    }
    assert_eq!(popped, pushed);
    p.push(1, &[&[9; 20]])
        .expect("room once the consumer has found the ring empty");
}

#[test]
fn limits_are_said() {
    let words = ring(64);
    let mut p = Producer::attach(&words).expect("producer");
    let too_long = vec![0u8; p.max_payload() + 1];
    assert_eq!(p.push(1, &[&too_long]), Err(PushError::TooLarge));
    assert_eq!(p.push(SKIP, &[b"x"]), Err(PushError::ReservedKind));
    let mut c = Consumer::attach(&words).expect("consumer");
    p.push(2, &[b"twelve bytes"]).expect("room");
    let mut small = [0u8; 4];
    assert_eq!(c.pop(&mut small), Err(PopError::BufferTooSmall { len: 12 }));
    let mut out = [0u8; 12];
    assert_eq!(
        c.pop(&mut out),
        Ok(Some(Record { kind: 2, len: 12 })),
        "the record stayed for a larger buffer"
    );
    assert_eq!(&out, b"twelve bytes");
}

#[test]
fn words_that_are_no_ring_are_refused() {
    let words: Vec<AtomicU32> = (0..words_for(64)).map(|_| AtomicU32::new(0)).collect();
    assert_eq!(Producer::attach(&words).err(), Some(RingError::NotARing));
    let odd: Vec<AtomicU32> = (0..words_for(48)).map(|_| AtomicU32::new(0)).collect();
    assert_eq!(init(&odd), Err(RingError::NotARing), "not a power of two");
    let words = ring(64);
    words[1].store(128, Ordering::Relaxed);
    assert_eq!(
        Consumer::attach(&words).err(),
        Some(RingError::NotARing),
        "a capacity beyond the words"
    );
}

#[test]
fn payload_bytes_that_look_like_stamps_are_not_records() {
    // Every payload word is the stamp its own slot would carry a lap
    // later, were a record to start there: only the producer's zero past
    // each record keeps the consumer from taking them for records.
    let words = ring(64);
    let mut p = Producer::attach(&words).expect("producer");
    let mut c = Consumer::attach(&words).expect("consumer");
    let mut out = vec![0u8; p.max_payload()];
    let mut position = 0u32;
    for i in 0..500u32 {
        let len = 8 + (i as usize * 12) % 96;
        let fake: Vec<u8> = (0..len / 4)
            .flat_map(|k| {
                let slot = position.wrapping_add((HEADER_WORDS + k) as u32);
                (!slot.wrapping_add(64)).to_le_bytes()
            })
            .collect();
        p.push(1, &[&fake]).expect("room: read as it goes");
        let record = c.pop(&mut out).expect("sound").expect("the record");
        assert_eq!(&out[..record.len], &fake[..]);
        assert_eq!(c.pop(&mut out), Ok(None), "nothing more after record {i}");
        position = position.wrapping_add(record_words(len) as u32);
    }
}

#[test]
fn a_scribbling_peer_is_caught_never_followed() {
    let words = ring(64);
    let mut c = Consumer::attach(&words).expect("consumer");
    let mut out = [0u8; 512];
    // A stamp in place and a length past the end of the area.
    words[CONTROL_WORDS].store(!0, Ordering::Relaxed);
    words[CONTROL_WORDS + 1].store(meta(1, 4 * 64), Ordering::Relaxed);
    assert_eq!(c.pop(&mut out), Err(PopError::Corrupt));
    // A skip that does not reach the end.
    words[CONTROL_WORDS + 1].store(meta(SKIP, 8), Ordering::Relaxed);
    assert_eq!(c.pop(&mut out), Err(PopError::Corrupt));

    // The consumer's position beyond what was produced.
    let words = ring(64);
    let mut p = Producer::attach(&words).expect("producer");
    while p.push(1, &[&[0; 40]]).is_ok() {}
    words[TAIL_AT].store(1000, Ordering::Relaxed);
    assert_eq!(p.push(1, &[&[0; 40]]), Err(PushError::Corrupt));
}

#[test]
fn arbitrary_words_never_make_the_consumer_misbehave() {
    // A cheap stand-in for the fuzz target: random rings, every outcome a
    // value.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u32
    };
    for _ in 0..2000 {
        let words = ring(16);
        for w in &words[CONTROL_WORDS..] {
            w.store(next(), Ordering::Relaxed);
        }
        // Often a stamp where the consumer looks.
        if next() % 2 == 0 {
            words[CONTROL_WORDS].store(!0, Ordering::Relaxed);
        }
        let mut c = Consumer::attach(&words).expect("consumer");
        let mut out = [0u8; 64];
        for _ in 0..4 {
            match c.pop(&mut out) {
                Ok(Some(r)) => assert!(r.len <= out.len()),
                Ok(None) | Err(_) => break,
            }
        }
    }
}

#[test]
fn two_threads_move_records_through_one_ring() {
    // Two threads stand in for two cores sharing RAM: no operating system
    // service is used beyond the threads themselves.
    let words = ring(256);
    const RECORDS: u32 = 20_000;
    std::thread::scope(|s| {
        let words = &words;
        s.spawn(move || {
            let mut p = Producer::attach(words).expect("producer");
            let max = p.max_payload();
            let mut i = 0;
            while i < RECORDS {
                match p.push((i % 250) as u8, &[&payload(i, max)]) {
                    Ok(()) => i += 1,
                    Err(PushError::Full) => std::hint::spin_loop(),
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        let mut c = Consumer::attach(words).expect("consumer");
        let mut out = vec![0u8; 4096];
        // What the producer's max_payload is for 256 words.
        let max = (256 / 2 - HEADER_WORDS - 2) * 4;
        let mut i = 0;
        while i < RECORDS {
            match c.pop(&mut out).expect("sound") {
                Some(r) => {
                    assert_eq!(r.kind, (i % 250) as u8);
                    assert_eq!(&out[..r.len], &payload(i, max)[..], "record {i}");
                    i += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
    });
}
