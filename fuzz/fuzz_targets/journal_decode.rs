//! Feeds arbitrary bytes to the journal's decoder, entry after entry as a
//! replay reads a journal, until one does not decode or the bytes end:
//! nothing may panic; every entry that decodes encodes back to exactly the
//! bytes it was read from (the call's, then its result's digest), and
//! reads again as the same entry; and every shorter piece of those bytes
//! is a truncated entry, not another one.
#![no_main]

use btl_core::engine::journal::{Entry, JournalError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while !rest.is_empty() {
        let Ok((entry, len)) = Entry::decode(rest) else {
            return;
        };
        assert!(
            len > 8 && len <= rest.len(),
            "{len} bytes of {}",
            rest.len()
        );
        let bytes = &rest[..len];
        assert_eq!(entry.to_vec(), bytes, "{entry:?}");
        assert_eq!(entry.call.to_vec(), bytes[..len - 8], "{entry:?}");
        let mut short = bytes.to_vec();
        short.pop();
        assert_eq!(entry.encode_into(&mut short), Err(len), "{entry:?}");
        assert_eq!(bytes[len - 8..], entry.out.to_le_bytes());
        assert_eq!(Entry::decode(bytes), Ok((entry.clone(), len)));
        for cut in 0..len {
            assert_eq!(
                Entry::decode(&bytes[..cut]),
                Err(JournalError::Truncated),
                "{entry:?} cut at {cut}"
            );
        }
        rest = &rest[len..];
    }
});
