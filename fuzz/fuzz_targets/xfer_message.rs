//! Feeds arbitrary bytes to the decoder of the messages transfer machines
//! exchange on their tags (a peer controls every byte): it must not panic,
//! and whatever it accepts must be exactly the bytes the encoders write for
//! the decoded values, so that no two encodings mean the same message.
#![no_main]

use btl_core::xfer::wire::{self, MSG_HEADER_LEN, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match wire::parse(data) {
        None => {}
        Some(Message::Msg {
            sender,
            cookie,
            payload,
        }) => {
            let (header, rest) = data
                .split_at_checked(MSG_HEADER_LEN)
                .expect("a MSG holds its header");
            assert_eq!(header, wire::msg_header(sender, cookie));
            assert_eq!(rest, payload, "the payload is everything after the header");
        }
        Some(Message::Done { ok, cookie, len }) => {
            assert_eq!(data, wire::done(ok, cookie, len));
        }
    }
});
