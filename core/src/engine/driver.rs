//! The loop every driver runs around an engine, whatever it carries bytes
//! over (sockets, smoltcp, byte pipes, a simulated network): once it has
//! fed the engine what came in, [`Engine::serve`] serves the engine's
//! timers, opens the connections it asks for, writes what it has to send,
//! closes the links it is done with, and moves its queues. What differs
//! between drivers is behind [`Io`].

use super::framing::Framing;
use super::storage::Storage;
use super::{ConnectRequest, Engine, LinkId};
use crate::btl::Btl;
use crate::time::Instant;
use crate::wire::NONCE_LEN;

/// Where a driver finds the 16 fresh random bytes each new link's
/// handshake needs (the engine has no randomness): a hardware RNG on a
/// board, the OS elsewhere. Any `FnMut() -> [u8; 16]` is one.
pub trait Nonces {
    /// The next nonce.
    fn nonce(&mut self) -> [u8; NONCE_LEN];
}

impl<F: FnMut() -> [u8; NONCE_LEN]> Nonces for F {
    fn nonce(&mut self) -> [u8; NONCE_LEN] {
        self()
    }
}

/// What a driver does for an engine `E`.
pub trait Io<E: ?Sized> {
    /// Opens the connection `req` asks for, and tells the engine how it
    /// went (`handle_connected` or `handle_connect_failed`), now or once
    /// the transport says.
    fn connect(&mut self, engine: &mut E, req: ConnectRequest, now: Instant);

    /// Writes what the engine has to send on its links (`poll_transmit`,
    /// `handle_written`), as far as the transport takes it without
    /// waiting.
    fn write(&mut self, engine: &mut E, now: Instant);

    /// Closes `link`, which the engine is done with, and tells the engine
    /// (`handle_closed`), now or once it is closed.
    fn close(&mut self, engine: &mut E, link: LinkId, now: Instant);
}

impl<S: Storage, F: Framing, const W: usize> Engine<S, F, W> {
    /// One turn of a driver's loop at `now`, after the driver has fed the
    /// engine its input: the timers that are due (when `timers` says to
    /// look at them: a busy driver may look only now and then), the
    /// connections the engine asks for, its writes, the links it is done
    /// with, then its queues.
    ///
    /// `now` is also the engine's clock until the next call that gives
    /// one: the calls of the upper layer take no time, and what they queue
    /// is sent, and timed for retransmission, as of the driver's last turn
    /// (not as of an older input, which would make a packet sent after a
    /// quiet spell look lost at once).
    pub fn serve(&mut self, io: &mut impl Io<Self>, now: Instant, timers: bool) {
        self.shared.now = now;
        if timers && self.poll_timeout().is_some_and(|t| t <= now) {
            self.handle_timeout(now);
        }
        while let Some(req) = self.poll_connect() {
            io.connect(self, req, now);
        }
        io.write(self, now);
        while let Some(link) = self.poll_close() {
            io.close(self, link, now);
        }
        self.progress();
    }
}
