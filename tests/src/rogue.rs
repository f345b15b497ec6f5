//! What a rogue process sends the harnesses' targets: HELLO frames as a
//! third process would send them, altered, and garbage.

use btl_core::endpoint::ProcName;
use btl_core::wire::{
    self, Capabilities, HEADER_LEN, HeaderRepr, HelloRepr, NONCE_LEN, PacketRepr, VERSION_MAJOR,
    VERSION_MINOR,
};

use crate::data::pattern;

/// Garbage bytes a rogue sends.
pub const GARBAGE_LEN: usize = 256;

/// A well-formed HELLO frame from process `from` on its link 0,
/// announcing `capabilities`.
pub fn hello(from: ProcName, nonce: [u8; NONCE_LEN], capabilities: Capabilities) -> Vec<u8> {
    let hello = HelloRepr {
        version_minor: VERSION_MINOR,
        link_index: 0,
        job: from.job,
        rank: from.rank,
        capabilities,
        nonce,
        max_body: 1 << 20,
        initial_credits: 16,
        epoch: 1,
    };
    let packet = PacketRepr::Hello(hello);
    let mut frame = vec![0; HEADER_LEN + HelloRepr::LEN];
    let len = wire::emit(&HeaderRepr::new(&packet), &packet, &mut frame).expect("a HELLO frame");
    frame.truncate(len);
    frame
}

/// [`hello`] with the next major protocol version: well formed, but
/// another protocol.
pub fn hello_of_another_version(from: ProcName, nonce: [u8; NONCE_LEN]) -> Vec<u8> {
    let mut frame = hello(from, nonce, Capabilities::JOB_KEY);
    let major = HEADER_LEN + 4;
    assert_eq!(
        frame[major], VERSION_MAJOR,
        "the HELLO's major version byte"
    );
    frame[major] = VERSION_MAJOR + 1;
    frame
}

/// Bytes that are no protocol: a pseudo-random pattern that does not start
/// with a packet type.
pub fn garbage(seed: u64) -> Vec<u8> {
    let mut bytes = pattern(seed, GARBAGE_LEN);
    bytes[0] |= 0x80;
    bytes
}
