//! COOKIE (type 13), since minor version 3: over datagrams, a server's
//! answer to a stranger's first HELLO, and the stranger's echo of it.
//!
//! ```text
//!  0  [u8;16]  cookie   a MAC of the stranger's address and the time
//! ```
//!
//! A datagram's source address can be forged: a server that answered a
//! HELLO with its own HELLO and HELLO_ACK (and went on repeating them, and
//! then served a GET) would send to whoever the forger named many times
//! the bytes it received. So a server answers a HELLO from an address it
//! has no link with by a COOKIE alone, which is smaller than the HELLO and
//! keeps no state, and opens a link only for an address that echoes a
//! COOKIE it made (it receives what is sent to it), as DTLS's
//! HelloVerifyRequest and QUIC's Retry do. The client answers a COOKIE by
//! sending it back, then its HELLO again. Neither carries a sequence
//! number; both may be lost and are repeated with the HELLO.
//!
//! ```text
//!  cookie = HMAC-SHA256(server secret, "btl-cookie-v1" || address
//!                       || time window (u64 BE))[..16]
//! ```
//!
//! The secret is the server's own (drawn at random when it starts); the
//! address is the source as the server's driver names it (IP address and
//! port); a cookie is good in the window it was made in and the next.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::field::{Fields, FieldsMut};

/// Bytes of a cookie.
pub const COOKIE_LEN: usize = 16;

/// Domain-separation prefix of the cookie's input: no HMAC the secret
/// makes for any other purpose is a valid cookie.
pub const COOKIE_CONTEXT: &[u8; 13] = b"btl-cookie-v1";

const COOKIE: usize = 0;

/// A COOKIE body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct CookieRepr {
    /// The MAC of the stranger's address and the time window.
    pub cookie: [u8; COOKIE_LEN],
}

impl CookieRepr {
    /// Body length.
    pub const LEN: usize = COOKIE_LEN;

    /// Bytes [`emit`](Self::emit) writes: always [`LEN`](Self::LEN).
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes a COOKIE body; every value is valid here (the server checks
    /// it against the address it came from).
    pub fn parse(body: &[u8; Self::LEN]) -> Self {
        Self {
            cookie: Fields(body).bytes::<COOKIE, COOKIE_LEN>(),
        }
    }

    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8; Self::LEN]) {
        FieldsMut(buf).set_bytes::<COOKIE, COOKIE_LEN>(self.cookie);
    }

    /// The cookie a server with `secret` makes for `address` in time
    /// window `window`.
    pub fn make(secret: &[u8], address: &[u8], window: u64) -> Self {
        let mut cookie = [0u8; COOKIE_LEN];
        if let Some(mac) = mac(secret, address, window) {
            let full: [u8; 32] = mac.finalize().into_bytes().into();
            cookie.copy_from_slice(&full[..COOKIE_LEN]);
        }
        Self { cookie }
    }

    /// Whether this cookie is the one a server with `secret` made for
    /// `address` in window `window` or the one before, compared in constant
    /// time.
    pub fn verify(&self, secret: &[u8], address: &[u8], window: u64) -> bool {
        [Some(window), window.checked_sub(1)]
            .into_iter()
            .flatten()
            .any(|w| {
                mac(secret, address, w)
                    .is_some_and(|mac| mac.verify_truncated_left(&self.cookie).is_ok())
            })
    }
}

fn mac(secret: &[u8], address: &[u8], window: u64) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(COOKIE_CONTEXT);
    mac.update(address);
    mac.update(&window.to_be_bytes());
    Some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a server's secret";
    const ADDR: &[u8] = &[127, 0, 0, 1, 0x1f, 0x90];

    #[test]
    fn a_cookie_is_good_for_its_address_in_its_window_and_the_next() {
        let c = CookieRepr::make(SECRET, ADDR, 7);
        assert!(c.verify(SECRET, ADDR, 7));
        assert!(c.verify(SECRET, ADDR, 8), "the next window");
        assert!(!c.verify(SECRET, ADDR, 9), "too old");
        assert!(!c.verify(SECRET, ADDR, 6), "not yet made");
        assert!(!c.verify(SECRET, &[127, 0, 0, 2, 0x1f, 0x90], 7));
        assert!(!c.verify(SECRET, &[127, 0, 0, 1, 0x1f, 0x91], 7), "port");
        assert!(!c.verify(b"another secret", ADDR, 7));
        let forged = CookieRepr { cookie: [0; 16] };
        assert!(!forged.verify(SECRET, ADDR, 7));
        assert!(CookieRepr::make(SECRET, ADDR, 0).verify(SECRET, ADDR, 0));
    }

    #[test]
    fn the_body_round_trips() {
        let c = CookieRepr::make(SECRET, ADDR, 1);
        let mut buf = [0u8; CookieRepr::LEN];
        c.emit(&mut buf);
        assert_eq!(CookieRepr::parse(&buf), c);
        assert_eq!(buf, c.cookie);
    }
}
