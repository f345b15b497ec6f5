//! One TCP connection of a module: its socket, where it stands (connecting
//! or carrying an engine link), and the bytes read but not yet taken by the
//! engine.

use std::io::{self, IoSlice};

use btl_core::engine::{ConnectRequest, LinkId};
use btl_core::time::Instant;

use btl_core::engine::Stream;

use super::capture::ConnCapture;
use crate::capture::Tap;
use crate::driver::heap::{Buffer, HeapEngine};
use crate::driver::net::StreamSocket;

/// Bytes read ahead of the engine per connection, at most: one large
/// frame's worth of slack, so a busy socket is drained in few reads.
pub const RX_BYTES: usize = 256 << 10;
/// Bytes read ahead at first: room for a handshake. A connection whose
/// reads fill its buffer has more waiting, and the buffer grows (fourfold,
/// up to [`RX_BYTES`]); a stranger that sends little holds little.
pub const RX_FIRST: usize = 4 << 10;

/// Payload bytes left to come, at least, for a read straight into their
/// target: below it, one read into the read buffer that also takes the
/// frames behind costs less than a system call of its own.
pub const DIRECT_MIN: usize = 16 << 10;
/// Bytes a read at a frame boundary takes while payloads are large: enough
/// for the next frame's header and fixed fields (and for small frames
/// behind it), little of a large payload, which is read in place.
pub const RX_PEEK: usize = 4 << 10;
/// Bytes a connection may bring per pass: once its reads have brought
/// this many, the connection waits for the next pass, after every other
/// ready connection has had its turn
/// ([`ReadQueue`](crate::driver::read_queue::ReadQueue)), so that a peer
/// that keeps its socket full cannot hold the module on its connection.
/// One full read buffer, or one read in place of a large payload: what a
/// flooding peer makes the others wait is the copy of that much (tens of
/// microseconds), and a pass between two turns (a zero-time poll, the
/// engine's turn) costs a microsecond or two. `btl pingpong` and `btl bw`
/// from 256 KiB to 4 MiB showed no loss with it (nor with 1 MiB, which
/// makes the others wait four times as long).
pub const READ_BUDGET: usize = RX_BYTES;
/// Bytes one write hands the kernel, at most (in whole pieces of frames,
/// so a write may end up to one piece past it): a large message goes out
/// as several writes of about this much, not one. Within one long
/// `sendmsg` Linux takes the peer's acknowledgements in only every 16
/// buffers (a megabyte on loopback), so the window stalls, and what the
/// call leaves queued goes out later from the peer's CPU as its
/// acknowledgements come, interleaved with this side's next writes: on
/// loopback, segments then arrive out of order, and a retransmission of
/// the last ones costs hundreds of microseconds. Between writes of this
/// size the kernel takes the acknowledgements and sends from this side
/// only. Measured on loopback (ping-pong, interleaved, five runs): 1 MiB
/// in 130 µs instead of 253, 4 MiB in 0.70 ms instead of 0.99, windowed
/// bandwidth up by 8-19 % from 256 KiB; 256 KiB writes were slower at
/// 4 MiB than one write, 768 KiB and 1 MiB no better than 512 KiB.
pub const WRITE_MAX: usize = 512 << 10;

/// Where a connection stands.
#[derive(Debug, Clone, Copy)]
pub enum ConnState {
    /// Our connect is in progress since `since` (the network's clock); the
    /// engine learns of it once it is up.
    Connecting { req: ConnectRequest, since: Instant },
    /// Carrying an engine link.
    Open(LinkId),
}

/// What reading a connection came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Everything the socket had was read and handed on.
    Drained,
    /// The pass's budget was spent before the socket was drained: bytes
    /// may wait there, which the poller will not report again, and the
    /// connection is to be read on the next pass.
    Budgeted,
    /// The engine took less than it was given (no receive fragment free):
    /// the rest waits here, and reading resumes once it is taken.
    Held,
    /// The peer closed or the connection broke.
    Closed,
}

/// Bytes read from the socket, waiting for the engine.
#[derive(Debug)]
pub struct RxBuffer {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The last read filled the whole buffer: more was waiting.
    filled: bool,
}

impl RxBuffer {
    fn new() -> Self {
        RxBuffer {
            buf: vec![0; RX_FIRST].into_boxed_slice(),
            start: 0,
            end: 0,
            filled: false,
        }
    }

    /// Makes the buffer empty for the next read; larger, if the last read
    /// filled it (more was waiting), up to [`RX_BYTES`].
    fn reset(&mut self) {
        if self.filled && self.buf.len() < RX_BYTES {
            self.buf = vec![0; (self.buf.len() * 4).min(RX_BYTES)].into_boxed_slice();
        }
        self.filled = false;
        self.start = 0;
        self.end = 0;
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// One connection over a stream socket `S`.
#[derive(Debug)]
pub struct Conn<S> {
    /// Its socket.
    pub stream: S,
    /// Connecting or open.
    pub state: ConnState,
    rx: RxBuffer,
    /// The poller watches for writability (something waits to be sent).
    pub write_interest: bool,
    /// Bytes read from the socket so far.
    pub received: u64,
    /// Of them, bytes read in place, straight into their payload's target.
    pub in_place: u64,
    /// Large payloads come on this connection (a read or a payload of
    /// [`DIRECT_MIN`] or more): a read at a frame boundary takes
    /// [`RX_PEEK`] bytes only, the next header, so that the payload behind
    /// it is read in place too.
    bulk: bool,
    /// The last read was such a short one at a frame boundary: if what it
    /// brought ends there, the frames have become small.
    peeked: bool,
    /// The poller saw the peer's end of the stream, or an error: reads go
    /// on until they find it (a short read is not taken for drained),
    /// over as many passes as the budget makes them.
    end_seen: bool,
    /// What the module's capture needs of it, once it carries a link, if
    /// the module captures.
    pub capture: Option<Box<ConnCapture>>,
}

impl<S: StreamSocket> Conn<S> {
    /// A connection over `stream`.
    pub fn new(stream: S, state: ConnState) -> Self {
        Conn {
            stream,
            state,
            rx: RxBuffer::new(),
            write_interest: false,
            received: 0,
            in_place: 0,
            bulk: false,
            peeked: false,
            end_seen: false,
            capture: None,
        }
    }

    /// The engine link, once open.
    pub fn link(&self) -> Option<LinkId> {
        match self.state {
            ConnState::Open(link) => Some(link),
            ConnState::Connecting { .. } => None,
        }
    }

    /// Whether bytes wait here for the engine.
    pub fn holds_input(&self) -> bool {
        !self.rx.is_empty()
    }

    /// The poller saw the peer's end of the stream or an error: from now
    /// on reads go on until they find it.
    pub fn end_seen(&mut self) {
        self.end_seen = true;
    }

    /// Hands held bytes to the engine, then reads the socket until it would
    /// block, handing each read on, unless the engine stops taking or the
    /// reads have brought `budget` bytes. Once the poller saw the peer's
    /// end of the stream ([`end_seen`](Self::end_seen)) it reads until it
    /// finds that end; otherwise a short read counts as drained.
    ///
    /// The rest of a large payload is read straight into its target
    /// ([`HeapEngine::payload_buffer`]), not through the read buffer. While
    /// payloads are large, a read at a frame boundary is a short one
    /// ([`RX_PEEK`]), for the next frame's header, so that its payload too
    /// is read in place; once the frames behind are small, reads take all
    /// there is again.
    ///
    /// Every read, to either place, goes to the capture `tap`, if the
    /// module captures.
    pub fn read<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        link: LinkId,
        now: Instant,
        budget: usize,
        mut tap: Option<&mut Tap>,
    ) -> ReadOutcome {
        let closing = self.end_seen;
        let budget_ends = self.received.saturating_add(budget as u64);
        loop {
            if !self.rx.is_empty() {
                let data = &self.rx.buf[self.rx.start..self.rx.end];
                match engine.handle_stream(link, data, now) {
                    Ok(n) => self.rx.start += n.min(data.len()),
                    Err(_) => return ReadOutcome::Closed,
                }
                if !self.rx.is_empty() {
                    return ReadOutcome::Held;
                }
            }
            if self.received >= budget_ends {
                return ReadOutcome::Budgeted;
            }
            self.rx.reset();
            let target = engine.payload_buffer(link);
            if std::mem::take(&mut self.peeked) && target.is_none() {
                // The frames behind the last large payload were small and
                // came whole: reads take all there is again.
                self.bulk = false;
            }
            let at_boundary = match target {
                Some(target) if target.len() >= DIRECT_MIN => {
                    let want = target.len();
                    let got = self.stream.read(target);
                    if let (Ok(n), Some(tap), Some(capture)) =
                        (&got, tap.as_deref_mut(), self.capture.as_deref_mut())
                    {
                        capture.read(tap, &target[..*n]);
                    }
                    let n = match got {
                        Ok(0) => return ReadOutcome::Closed,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            return ReadOutcome::Drained;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => return ReadOutcome::Closed,
                    };
                    self.received += n as u64;
                    self.in_place += n as u64;
                    self.bulk = true;
                    if engine.handle_payload_read(link, n, now).is_err() {
                        return ReadOutcome::Closed;
                    }
                    if n < want && !closing {
                        return ReadOutcome::Drained;
                    }
                    continue;
                }
                other => other.is_none(),
            };
            let limit = if self.bulk {
                RX_PEEK.min(self.rx.buf.len())
            } else {
                self.rx.buf.len()
            };
            self.peeked = self.bulk && at_boundary;
            let got = self.stream.read(&mut self.rx.buf[..limit]);
            if let (Ok(n), Some(tap), Some(capture)) =
                (&got, tap.as_deref_mut(), self.capture.as_deref_mut())
            {
                capture.read(tap, &self.rx.buf[..*n]);
            }
            match got {
                Ok(0) => return ReadOutcome::Closed,
                // A short read drained the socket: the next bytes bring a
                // new readiness event, so no read to learn it would block.
                Ok(n) if n < limit && !closing => {
                    self.received += n as u64;
                    self.rx.end = n;
                    self.bulk |= n >= DIRECT_MIN;
                    return match engine.handle_stream(link, &self.rx.buf[..n], now) {
                        Ok(taken) => {
                            self.rx.start = taken.min(n);
                            if self.rx.is_empty() {
                                ReadOutcome::Drained
                            } else {
                                ReadOutcome::Held
                            }
                        }
                        Err(_) => ReadOutcome::Closed,
                    };
                }
                Ok(n) => {
                    self.received += n as u64;
                    self.rx.end = n;
                    self.rx.filled = n == self.rx.buf.len();
                    self.bulk |= n >= DIRECT_MIN;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadOutcome::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return ReadOutcome::Closed,
            }
        }
    }

    /// Writes what the engine has for `link` until it has nothing more or
    /// the socket would block; returns whether bytes still wait, or an
    /// error when the connection broke. What each write took goes to the
    /// capture `tap`, if the module captures.
    pub fn write<M: Buffer>(
        &mut self,
        engine: &mut HeapEngine<Stream, M>,
        link: LinkId,
        mut tap: Option<&mut Tap>,
    ) -> io::Result<bool> {
        loop {
            let (n, total) = {
                let Some(t) = engine.poll_transmit(link) else {
                    return Ok(false);
                };
                let (slices, total) = one_write(&t.segments, WRITE_MAX);
                match self.stream.write_vectored(&slices) {
                    Ok(n) => {
                        if let (Some(tap), Some(capture)) =
                            (tap.as_deref_mut(), self.capture.as_deref_mut())
                        {
                            capture.written(tap, &slices, n);
                        }
                        (n, total)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => (0, total),
                    Err(e) => return Err(e),
                }
            };
            if n > 0 {
                engine.handle_written(link, n);
            }
            if n < total {
                // A partial write: the socket's buffer is full for now.
                return Ok(true);
            }
        }
    }
}

/// The pieces one write takes: whole pieces from the front while fewer
/// than `max` bytes are taken (at least one), and their length.
fn one_write<'a>(segments: &[&'a [u8]], max: usize) -> (Slices<'a>, usize) {
    let mut slices = Slices::new();
    let mut total = 0;
    for segment in segments {
        if total >= max || slices.push(IoSlice::new(segment)).is_err() {
            break;
        }
        total += segment.len();
    }
    (slices, total)
}

/// The pieces of one vectored write.
type Slices<'a> = heapless::Vec<IoSlice<'a>, { btl_core::engine::MAX_SEGMENTS }>;

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(slices: &Slices<'_>) -> Vec<usize> {
        slices.iter().map(|s| s.len()).collect()
    }

    #[test]
    fn a_write_takes_whole_pieces_until_it_holds_the_most_one_write_may() {
        let (header, payload) = (vec![0u8; 40], vec![0u8; 256 << 10]);
        let frame = [header.as_slice(), payload.as_slice()];
        let four = frame.repeat(4);
        let (slices, total) = one_write(&four, WRITE_MAX);
        // Two frames, the second's payload whole though it ends past the
        // bound.
        assert_eq!(lens(&slices), [40, 256 << 10, 40, 256 << 10]);
        assert_eq!(total, 2 * (40 + (256 << 10)));
        assert!(total > WRITE_MAX);
        // What is left goes in the next write.
        let (rest, left) = one_write(&four[slices.len()..], WRITE_MAX);
        assert_eq!(rest.len(), 4);
        assert_eq!(total + left, 4 * (40 + (256 << 10)));
    }

    #[test]
    fn small_frames_go_in_one_write_and_a_piece_larger_than_the_bound_alone() {
        let small = vec![0u8; 100];
        let n = btl_core::engine::MAX_SEGMENTS;
        let many = vec![small.as_slice(); n];
        let (slices, total) = one_write(&many, WRITE_MAX);
        assert_eq!((slices.len(), total), (n, n * 100));
        let huge = vec![0u8; 2 * WRITE_MAX];
        let (slices, total) = one_write(&[huge.as_slice(), small.as_slice()], WRITE_MAX);
        assert_eq!((lens(&slices), total), (vec![2 * WRITE_MAX], 2 * WRITE_MAX));
        assert_eq!(one_write(&[], WRITE_MAX).1, 0);
    }
}
