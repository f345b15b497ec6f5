//! The engine over a byte stream (feature `embedded-io`): btl between two
//! boards, or a board and a host, on a UART, a USB serial port or a pipe.
//!
//! [`SerialDriver`] carries one link of an engine in stream framing over
//! any [`embedded_io`] stream that says when it can be read and written
//! without blocking (`Read + ReadReady + Write + WriteReady`). A byte
//! stream joins exactly two processes, so the driver is told the one
//! process at the other end: when the engine asks to connect to it, the
//! stream becomes the link; when bytes arrive first, they are a link the
//! engine learns the peer of from its HELLO, as an accepted connection
//! is.
//!
//! Bytes read and not yet taken by the engine (it waits for a receive
//! fragment) stay in the driver's buffer of `RX` bytes, and the stream is
//! not read further until they are: flow control, as a socket's window is.
//! A stream has no connection to lose: an I/O error ends the link, and the
//! engine connects again (on the same stream) when it next has something
//! to send.

use embedded_io::{Read, ReadReady, Write, WriteReady};

use crate::endpoint::ProcName;
use crate::engine::driver::{Io, Nonces};
use crate::engine::storage::Storage;
use crate::engine::{ConnectFailure, ConnectRequest, Engine, LinkId, Source, Stream};
use crate::time::Instant;

/// An engine's link over one byte stream `T`, to the process at its other
/// end, with `RX` bytes of receive buffer.
pub struct SerialDriver<T, N, const RX: usize> {
    port: T,
    peer: ProcName,
    nonces: N,
    link: Option<LinkId>,
    rx: [u8; RX],
    rx_len: usize,
    error: Option<SerialError>,
}

/// Why a [`SerialDriver`]'s stream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerialError {
    /// Reading failed; what the stream said.
    Read(embedded_io::ErrorKind),
    /// Writing failed; what the stream said.
    Write(embedded_io::ErrorKind),
}

impl core::fmt::Display for SerialError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SerialError::Read(kind) => write!(f, "reading the stream failed: {kind:?}"),
            SerialError::Write(kind) => write!(f, "writing the stream failed: {kind:?}"),
        }
    }
}

impl<T, N, const RX: usize> SerialDriver<T, N, RX>
where
    T: Read + ReadReady + Write + WriteReady,
    N: Nonces,
{
    /// A driver of `port`, whose other end is process `peer`.
    pub fn new(port: T, peer: ProcName, nonces: N) -> Self {
        SerialDriver {
            port,
            peer,
            nonces,
            link: None,
            rx: [0; RX],
            rx_len: 0,
            error: None,
        }
    }

    /// The link the stream carries, if any.
    pub fn link(&self) -> Option<LinkId> {
        self.link
    }

    /// The stream.
    pub fn port_mut(&mut self) -> &mut T {
        &mut self.port
    }

    /// One turn at `now`: what the stream has into the engine, then the
    /// engine's timers, connects and writes into the stream, as far as it
    /// goes without blocking. An I/O error ends the link (the engine is
    /// told) and is returned.
    pub fn poll<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) -> Result<(), SerialError> {
        self.read(engine, now);
        engine.serve(&mut SerialIo { driver: self }, now, true);
        match self.error.take() {
            Some(e) => {
                if let Some(link) = self.link.take() {
                    engine.handle_closed(link, now);
                }
                self.rx_len = 0;
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Reads what the stream has (as far as the buffer holds) and hands
    /// it to the link.
    fn read<S: Storage, const W: usize>(
        &mut self,
        engine: &mut Engine<S, Stream, W>,
        now: Instant,
    ) {
        if self.rx_len < RX {
            match self.port.read_ready() {
                Ok(true) => match self.port.read(&mut self.rx[self.rx_len..]) {
                    Ok(n) => self.rx_len += n,
                    Err(e) => self.error = Some(SerialError::Read(embedded_io::Error::kind(&e))),
                },
                Ok(false) => {}
                Err(e) => self.error = Some(SerialError::Read(embedded_io::Error::kind(&e))),
            }
        }
        if self.rx_len == 0 {
            return;
        }
        let link = match self.link {
            Some(link) => link,
            // Bytes before any link: the other end connected.
            None => match engine.handle_accepted(Source(0), self.nonces.nonce(), now) {
                Ok(link) => {
                    self.link = Some(link);
                    link
                }
                Err(_) => return,
            },
        };
        match engine.handle_stream(link, &self.rx[..self.rx_len], now) {
            Ok(taken) => {
                self.rx.copy_within(taken..self.rx_len, 0);
                self.rx_len -= taken;
            }
            // The engine ended the link: what was read for it goes too.
            Err(_) => {
                self.link = None;
                self.rx_len = 0;
            }
        }
    }
}

/// What the engine asks of a [`SerialDriver`] during one turn.
struct SerialIo<'d, T, N, const RX: usize> {
    driver: &'d mut SerialDriver<T, N, RX>,
}

impl<S, const W: usize, T, N, const RX: usize> Io<Engine<S, Stream, W>> for SerialIo<'_, T, N, RX>
where
    S: Storage,
    T: Read + ReadReady + Write + WriteReady,
    N: Nonces,
{
    fn connect(&mut self, engine: &mut Engine<S, Stream, W>, req: ConnectRequest, now: Instant) {
        let driver = &mut *self.driver;
        if req.proc != driver.peer || req.link_index != 0 || driver.error.is_some() {
            engine.handle_connect_failed(req, ConnectFailure::Unreachable, now);
            return;
        }
        if driver.link.is_some() {
            // The other end's bytes made the link already; it carries the
            // peer.
            return;
        }
        match engine.handle_connected(req, driver.nonces.nonce(), now) {
            Ok(link) => driver.link = Some(link),
            Err(_) => engine.handle_connect_failed(req, ConnectFailure::Unreachable, now),
        }
    }

    fn write(&mut self, engine: &mut Engine<S, Stream, W>, _now: Instant) {
        let driver = &mut *self.driver;
        let Some(link) = driver.link else {
            return;
        };
        loop {
            match driver.port.write_ready() {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    driver.error = Some(SerialError::Write(embedded_io::Error::kind(&e)));
                    return;
                }
            }
            let Some(transmit) = engine.poll_transmit(link) else {
                return;
            };
            let mut written = 0;
            let mut short = false;
            for segment in transmit.segments.iter() {
                match driver.port.write(segment) {
                    Ok(n) => {
                        written += n;
                        if n < segment.len() {
                            short = true;
                            break;
                        }
                    }
                    Err(e) => {
                        driver.error = Some(SerialError::Write(embedded_io::Error::kind(&e)));
                        short = true;
                        break;
                    }
                }
            }
            drop(transmit);
            engine.handle_written(link, written);
            if short {
                return;
            }
        }
    }

    fn close(&mut self, engine: &mut Engine<S, Stream, W>, link: LinkId, now: Instant) {
        if self.driver.link == Some(link) {
            self.driver.link = None;
        }
        engine.handle_closed(link, now);
    }
}
