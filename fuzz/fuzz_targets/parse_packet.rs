//! Feeds arbitrary bytes to every decoder of the wire format: none may
//! panic, and whatever decodes must encode back to the bytes it came from.
#![no_main]

use btl_core::wire::{self, Header, Limits};
use libfuzzer_sys::fuzz_target;

/// A small limit, so that long announced bodies are refused rather than
/// waited for.
const LIMITS: Limits = Limits::new(4096);

fuzz_target!(|data: &[u8]| {
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
    }
});
