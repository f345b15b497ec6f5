//! Feeds arbitrary bytes to every decoder of the wire format and to the
//! seal check: none may panic, whatever decodes must encode back to the
//! bytes it came from, and a decoded frame with `SEALED`, sealed again by
//! one side, checks at the other and nowhere else.
#![no_main]

use btl_core::wire::{self, Flags, Header, Limits, Seal, Start};
use libfuzzer_sys::fuzz_target;

/// A small limit, so that long announced bodies are refused rather than
/// waited for.
const LIMITS: Limits = Limits::new(4096);

const A: Start = Start {
    job: 1,
    rank: 0,
    epoch: 1,
};
const B: Start = Start {
    job: 1,
    rank: 1,
    epoch: 2,
};

fuzz_target!(|data: &[u8]| {
    let (a, b) = (Seal::derive(b"fuzz", A, B), Seal::derive(b"fuzz", B, A));
    let _ = b.check(data);
    if let Ok(header) = Header::new_checked(data) {
        let _ = header.frame_len(&LIMITS);
    }
    let _ = wire::parse_datagram(data, &LIMITS);
    if let Ok((header, packet, used)) = wire::parse(data, &LIMITS) {
        // Unknown capability bits are accepted but not kept, so compare the
        // decoded values, not the bytes.
        let mut out = [0; 4096 + 64];
        let len = wire::emit(&header, &packet, &mut out).expect("a decoded packet encodes");
        assert_eq!(len, used);
        let again = wire::parse(&out[..len], &LIMITS).expect("re-encoded packet decodes");
        assert_eq!((again.0, again.1), (header, packet));
        if header.flags.contains(Flags::SEALED) {
            a.seal_frame(&mut out[..len]);
            assert_eq!(b.check(&out[..len]), Ok(()), "the peer takes it");
            assert!(a.check(&out[..len]).is_err(), "its sender does not");
        }
    }
});
