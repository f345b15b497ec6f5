//! Feeds arbitrary memory to the shared-memory ring's consumer and an
//! arbitrary consumer position to its producer, as a peer scribbling on
//! the segment would: neither may panic or read or write outside the
//! ring, and what one side pushes, the other pops unchanged when nobody
//! scribbles.
//!
//! The input: the first 256 bytes are the data area the consumer reads
//! (64 words); each following pair of bytes is a push of that many bytes
//! (the first byte, less than the ring's largest record) of a kind (the
//! second), and a first byte of 0xFF instead sets the consumer's position
//! to the next four bytes.
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use btl_core::ring::{self, Consumer, PopError, Producer, PushError};
use libfuzzer_sys::fuzz_target;

const CAPACITY: usize = 64;

fn new_ring() -> Vec<AtomicU32> {
    let words: Vec<AtomicU32> = (0..ring::words_for(CAPACITY))
        .map(|_| AtomicU32::new(0))
        .collect();
    ring::init(&words).expect("a ring");
    words
}

fuzz_target!(|data: &[u8]| {
    let (memory, script) = data.split_at(data.len().min(CAPACITY * 4));

    // The consumer over whatever the peer left.
    let words = new_ring();
    for (w, chunk) in words[ring::CONTROL_WORDS..].iter().zip(memory.chunks(4)) {
        let mut b = [0u8; 4];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u32::from_le_bytes(b), Ordering::Relaxed);
    }
    let mut c = Consumer::attach(&words).expect("a ring");
    let mut out = [0u8; CAPACITY * 4];
    for _ in 0..8 {
        match c.pop(&mut out) {
            Ok(Some(r)) => assert!(r.len <= out.len()),
            Ok(None) | Err(PopError::Corrupt) => break,
            Err(PopError::BufferTooSmall { len }) => assert!(len > out.len()),
        }
    }

    // The producer against a consumer that may scribble its position.
    let words = new_ring();
    let mut p = Producer::attach(&words).expect("a ring");
    let mut c = Consumer::attach(&words).expect("a ring");
    let mut sent: std::collections::VecDeque<(u8, Vec<u8>)> = Default::default();
    let mut scribbled = false;
    let mut rest = script;
    while let [len, kind, tail @ ..] = rest {
        rest = tail;
        if *len == 0xFF {
            let mut b = [0u8; 4];
            let n = rest.len().min(4);
            b[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            words[16].store(u32::from_le_bytes(b), Ordering::Relaxed);
            scribbled = true;
            continue;
        }
        let payload: Vec<u8> = (0..*len).map(|i| i ^ kind).collect();
        match p.push(*kind, &[&payload]) {
            Ok(()) => sent.push_back((*kind, payload)),
            Err(PushError::Full) => {
                // Read one back to make room, checking it when nobody
                // scribbled.
                if let Ok(Some(r)) = c.pop(&mut out) {
                    let (kind, want) = sent.pop_front().expect("one was pushed");
                    if !scribbled {
                        assert_eq!((r.kind, &out[..r.len]), (kind, &want[..]));
                    }
                }
            }
            Err(PushError::TooLarge) => assert!(usize::from(*len) > p.max_payload()),
            Err(PushError::ReservedKind) => assert_eq!(*kind, ring::SKIP),
            Err(PushError::Corrupt) => assert!(scribbled, "corrupt with nobody scribbling"),
        }
    }
    while let Ok(Some(r)) = c.pop(&mut out) {
        let Some((kind, want)) = sent.pop_front() else {
            break;
        };
        if !scribbled {
            assert_eq!((r.kind, &out[..r.len]), (kind, &want[..]));
        }
    }
    if !scribbled {
        assert!(sent.is_empty(), "every record pushed came out");
    }
});
