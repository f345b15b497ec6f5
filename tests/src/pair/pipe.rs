//! One direction of an in-memory stream, and how an engine's link writes
//! into it and reads from it: what a socket and its driver would do.

use btl_core::engine::{Engine, Framing, LinkError, LinkId, Storage, Stream};
use btl_core::time::Instant;

/// Transmits one [`write_link`] takes at most (an engine hands out far
/// fewer before its link is drained): the bound of a loop that must end.
const MAX_TRANSMITS: usize = 1 << 12;

/// A fixed-capacity byte ring: one direction of an in-memory stream.
///
/// [`write`](Self::write) takes what fits and says how much, the way a
/// non-blocking socket write does; the reader looks at
/// [`readable`](Self::readable) bytes (at most two slices, oldest first)
/// and [`consume`](Self::consume)s what it used.
#[derive(Clone)]
pub struct Pipe<const N: usize> {
    buf: [u8; N],
    head: usize,
    len: usize,
}

impl<const N: usize> Pipe<N> {
    /// An empty pipe.
    pub const fn new() -> Self {
        Pipe {
            buf: [0; N],
            head: 0,
            len: 0,
        }
    }

    /// Bytes the pipe holds at most (`N`).
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Bytes waiting to be read.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits to be read.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a write would take nothing.
    pub const fn is_full(&self) -> bool {
        self.len == N
    }

    /// Bytes a write takes at most now.
    pub const fn room(&self) -> usize {
        N - self.len
    }

    /// Appends as much of `bytes` as fits; returns how much that was.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room());
        if n == 0 {
            return 0;
        }
        // n > 0 means N > 0, so the modulo is defined.
        let tail = (self.head + self.len) % N;
        let first = n.min(N - tail);
        self.buf[tail..tail + first].copy_from_slice(&bytes[..first]);
        self.buf[..n - first].copy_from_slice(&bytes[first..n]);
        self.len += n;
        n
    }

    /// The bytes waiting, oldest first: the second slice is non-empty only
    /// when they wrap around the end of the ring.
    pub fn readable(&self) -> (&[u8], &[u8]) {
        let first = self.len.min(N - self.head);
        (
            &self.buf[self.head..self.head + first],
            &self.buf[..self.len - first],
        )
    }

    /// Drops the `n` oldest bytes (all of them if fewer wait); returns how
    /// many were dropped.
    pub fn consume(&mut self, n: usize) -> usize {
        let n = n.min(self.len);
        if n == 0 {
            return 0;
        }
        self.head = (self.head + n) % N;
        self.len -= n;
        n
    }

    /// Copies the oldest bytes into `out` and consumes them; returns how
    /// many.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let (first, second) = self.readable();
        let a = first.len().min(out.len());
        out[..a].copy_from_slice(&first[..a]);
        let b = second.len().min(out.len() - a);
        out[a..a + b].copy_from_slice(&second[..b]);
        self.consume(a + b)
    }

    /// Moves the waiting bytes to the front of the ring (in place) and
    /// returns them as one slice, for a reader that parses whole frames.
    pub fn make_contiguous(&mut self) -> &[u8] {
        if self.head + self.len > N {
            self.buf.rotate_left(self.head);
            self.head = 0;
        }
        &self.buf[self.head..self.head + self.len]
    }

    /// Drops every waiting byte.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

impl<const N: usize> Default for Pipe<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Debug for Pipe<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pipe")
            .field("len", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

/// What [`write_link`] moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Bytes the engine handed over and counted as written (into the pipe,
    /// or dropped when there was none).
    pub bytes: usize,
    /// Whether the last transmit was written whole, so that the stream ends
    /// between two frames. Meaningful when `bytes > 0`.
    pub whole: bool,
}

/// Writes what `engine` has for `link` into `pipe` until the engine has
/// nothing more or the pipe is full (a partial write, which the engine
/// resumes later). With no pipe the bytes are dropped, as on a connection
/// whose other end has gone.
pub fn write_link<St: Storage, F: Framing, const W: usize, const N: usize>(
    engine: &mut Engine<St, F, W>,
    link: LinkId,
    mut pipe: Option<&mut Pipe<N>>,
) -> Written {
    let mut out = Written {
        bytes: 0,
        whole: true,
    };
    for _ in 0..MAX_TRANSMITS {
        let (n, total) = {
            let Some(t) = engine.poll_transmit(link) else {
                break;
            };
            let (mut n, mut total, mut full) = (0, 0, false);
            for segment in &t.segments {
                total += segment.len();
                // Stream order: nothing after a segment that did not fit.
                if full {
                    continue;
                }
                let w = match pipe.as_deref_mut() {
                    Some(p) => p.write(segment),
                    None => segment.len(),
                };
                n += w;
                full = w < segment.len();
            }
            (n, total)
        };
        if n > 0 {
            engine.handle_written(link, n);
        }
        out.bytes += n;
        if n < total {
            out.whole = false;
            break;
        }
    }
    out
}

/// Hands `engine` what `pipe` holds for `link` and consumes what it takes
/// (less than all while it waits for receive fragments); returns how many
/// bytes that was. An engine that no longer knows the link gets nothing
/// more: the pipe is emptied and the error returned.
pub fn read_link<St: Storage, const W: usize, const N: usize>(
    engine: &mut Engine<St, Stream, W>,
    link: LinkId,
    pipe: &mut Pipe<N>,
    now: Instant,
) -> Result<usize, LinkError> {
    let mut taken = 0;
    // At most two slices (the second is the part that wrapped around),
    // each maybe cut where a payload read in place ends.
    for _ in 0..4 {
        let (first, _) = pipe.readable();
        if first.is_empty() {
            break;
        }
        let len = first.len();
        // The rest of a payload goes straight to its target, as a socket
        // driver reads it; the other bytes through `handle_stream`.
        if let Some(target) = engine.payload_buffer(link) {
            let n = len.min(target.len());
            target[..n].copy_from_slice(&first[..n]);
            pipe.consume(n);
            taken += n;
            if let Err(e) = engine.handle_payload_read(link, n, now) {
                pipe.clear();
                return Err(e);
            }
            continue;
        }
        match engine.handle_stream(link, first, now) {
            Ok(n) => {
                let n = pipe.consume(n.min(len));
                taken += n;
                if n < len {
                    break;
                }
            }
            Err(e) => {
                pipe.clear();
                return Err(e);
            }
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::Pipe;

    #[test]
    fn a_pipe_takes_what_fits_and_wraps_around() {
        let mut p = Pipe::<8>::new();
        assert_eq!(p.write(b"abcdef"), 6);
        assert_eq!(p.write(b"ghijk"), 2, "only the room left");
        assert!(p.is_full());
        assert_eq!(p.consume(5), 5);
        assert_eq!(p.readable(), (&b"fgh"[..], &b""[..]));
        assert_eq!(p.write(b"1234"), 4);
        assert_eq!(p.readable(), (&b"fgh"[..], &b"1234"[..]));
        let mut out = [0; 5];
        assert_eq!(p.read(&mut out), 5);
        assert_eq!(&out, b"fgh12");
        assert_eq!(p.write(b"xyz"), 3);
        assert_eq!(p.make_contiguous(), b"34xyz");
        assert_eq!(p.consume(100), 5);
        assert!(p.is_empty());
        let mut zero = Pipe::<0>::new();
        assert_eq!((zero.write(b"a"), zero.consume(1)), (0, 0));
        assert_eq!(zero.readable(), (&b""[..], &b""[..]));
    }
}
