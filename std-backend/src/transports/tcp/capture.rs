//! What a TCP connection keeps for the module's capture: a frame cutter
//! each way, since a write or a read starts and ends anywhere in a frame,
//! and the key of its link's interface. Only a capturing module's
//! connections have one.

use std::io::IoSlice;

use crate::capture::{Direction, FrameCutter, Tap};

/// The capture state of one connection.
#[derive(Debug)]
pub struct ConnCapture {
    key: u32,
    sent: FrameCutter,
    received: FrameCutter,
}

impl ConnCapture {
    /// A connection at the start of its stream, captured on `tap`'s
    /// interface `key`.
    pub fn new(key: u32, tap: &Tap) -> Self {
        ConnCapture {
            key,
            sent: FrameCutter::new(tap.snaplen()),
            received: FrameCutter::new(tap.snaplen()),
        }
    }

    /// The first `n` bytes of `pieces` went out: each frame they complete
    /// goes to `tap`.
    pub fn written(&mut self, tap: &mut Tap, pieces: &[IoSlice<'_>], n: usize) {
        if !tap.is_on() {
            return;
        }
        let key = self.key;
        let mut left = n;
        for piece in pieces {
            if left == 0 {
                break;
            }
            let take = left.min(piece.len());
            self.sent.feed(&piece[..take], |head, len| {
                tap.frame_prefix(key, Direction::Out, &[head], len);
            });
            left -= take;
        }
    }

    /// `bytes` came in, next in the stream: each frame they complete goes
    /// to `tap`.
    pub fn read(&mut self, tap: &mut Tap, bytes: &[u8]) {
        if !tap.is_on() {
            return;
        }
        let key = self.key;
        self.received.feed(bytes, |head, len| {
            tap.frame_prefix(key, Direction::In, &[head], len);
        });
    }
}
