//! Address validation over datagrams: a stranger shows that it receives
//! at the address it sends from before a server keeps anything for it or
//! sends it more than it sent.
//!
//! A datagram from an address the server has no link with is a stranger's.
//! Its HELLO is answered with a COOKIE ([`CookieRepr`]), smaller than the
//! HELLO, made from the address, the time and the server's secret, and
//! nothing is kept; an echo of a cookie the server made for that address
//! (in the current time window or the one before) admits the address: the
//! driver opens a link for it, and its HELLO, which follows, opens the
//! handshake. Anything else from a stranger is dropped. A forged source
//! gets at most half the bytes the forger sent, and no state.
//!
//! A driver that validates addresses itself, or a transport that does
//! (TCP's handshake), does not need this: it is what btl-std's UDP
//! transport calls before [`Engine::handle_accepted`].

use super::journal::{self, journal_call, journal_out};
use super::metrics::Refused;
use crate::time::Instant;
use crate::wire::{self, COOKIE_LEN, CookieRepr, HEADER_LEN, Limits, PacketRepr, WireError};

use super::Engine;
use super::framing::Datagram;
use super::packet::ControlFrame;
use super::storage::Storage;

/// Bytes of a COOKIE frame, the longest answer to a stranger.
pub const COOKIE_FRAME_LEN: usize = HEADER_LEN + COOKIE_LEN;

/// What a datagram driver does with a datagram from an address it has no
/// link with ([`Engine::handle_stranger`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stranger {
    /// The address echoed a cookie made for it: open a link for it
    /// ([`Engine::handle_accepted`]) and hand it the datagrams that
    /// follow. The echo itself is spent.
    Admit,
    /// Send the address the first `n` bytes of the answer buffer (a
    /// COOKIE), and keep nothing.
    Answer(usize),
    /// Drop the datagram, for this reason (to log).
    Refuse(Refusal),
}

/// Why a stranger's datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a frame at all.
    Garbage(WireError),
    /// A frame, but neither a HELLO nor a COOKIE: a stranger has nothing
    /// else to say (a peer whose link this side dropped, or a forger).
    NotAHandshake,
    /// A COOKIE this side did not make for that address, or made too long
    /// ago.
    BadCookie,
}

impl Refusal {
    /// A short description for logs.
    pub const fn description(self) -> &'static str {
        match self {
            Refusal::Garbage(_) => "not a frame",
            Refusal::NotAHandshake => "not a handshake",
            Refusal::BadCookie => "a cookie not made for its address",
        }
    }
}

impl<S: Storage, const W: usize> Engine<S, Datagram, W> {
    /// One datagram from `address` (its source as the driver names it,
    /// port included: the bytes a cookie is made for), with which no link
    /// exists: whether to admit the address, answer it with the COOKIE
    /// written into `answer`, or drop it. Keeps nothing either way.
    pub fn handle_stranger(
        &mut self,
        address: &[u8],
        datagram: &[u8],
        now: Instant,
        answer: &mut [u8; COOKIE_FRAME_LEN],
    ) -> Stranger {
        let result = self.answer_stranger(address, datagram, now, answer);
        if let Stranger::Refuse(refusal) = &result {
            self.refusals.count(Refused::of_stranger(refusal));
        }
        journal_call!(
            self,
            journal::Call::Stranger {
                address,
                data: datagram,
                now,
            }
        );
        journal_out!(self, {
            let mut d = journal::Digest::default();
            d.debug(&result);
            if let Stranger::Answer(n) = result {
                d.bytes(&answer[..n]);
            }
            d.get()
        });
        result
    }

    fn answer_stranger(
        &self,
        address: &[u8],
        datagram: &[u8],
        now: Instant,
        answer: &mut [u8; COOKIE_FRAME_LEN],
    ) -> Stranger {
        let config = &self.shared.config;
        let window = now.as_nanos() / config.handshake_timeout.as_nanos().max(1);
        let limits = Limits::new(config.max_body);
        match wire::parse_datagram(datagram, &limits) {
            Err(e) => Stranger::Refuse(Refusal::Garbage(e)),
            Ok((_, PacketRepr::Hello(_))) => {
                let cookie = CookieRepr::make(&config.cookie_secret, address, window);
                let frame = ControlFrame::cookie(cookie);
                let bytes = frame.as_bytes();
                answer[..bytes.len()].copy_from_slice(bytes);
                Stranger::Answer(bytes.len())
            }
            Ok((_, PacketRepr::Cookie(echo))) => {
                if echo.verify(&config.cookie_secret, address, window) {
                    Stranger::Admit
                } else {
                    Stranger::Refuse(Refusal::BadCookie)
                }
            }
            Ok(_) => Stranger::Refuse(Refusal::NotAHandshake),
        }
    }
}
