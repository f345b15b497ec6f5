//! Datagrams to one address gathered for one send
//! ([`DatagramSocket::send_segments`](crate::driver::net::DatagramSocket::send_segments)):
//! every one of the same size but the last, which may be shorter, as
//! segmentation offload requires.
//!
//! The engine hands the transport one datagram at a time; the batch takes
//! each while it fits (same address, same size, room left) and is sent
//! when it is full or the flush is over. A batch the socket would not
//! take yet stays, whole or in part, and goes first at the next flush: the
//! engine counted its datagrams as sent, and a send that would block is no
//! loss.

use std::net::SocketAddr;

/// Datagrams to one address, one after the other in one buffer.
pub struct Batch {
    buf: Box<[u8]>,
    /// Bytes held.
    len: usize,
    /// Most datagrams held.
    max_datagrams: usize,
    /// Datagrams held.
    datagrams: usize,
    /// Size of every datagram but a shorter last one.
    segment: usize,
    /// A shorter datagram ended the batch.
    ended: bool,
    to: Option<SocketAddr>,
}

impl Batch {
    /// An empty batch of at most `max_bytes` bytes in `max_datagrams`
    /// datagrams.
    pub fn new(max_bytes: usize, max_datagrams: usize) -> Self {
        Batch {
            buf: vec![0; max_bytes].into_boxed_slice(),
            len: 0,
            max_datagrams: max_datagrams.max(1),
            datagrams: 0,
            segment: 0,
            ended: false,
            to: None,
        }
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the datagram made of `parts` to `to` if it may join: same
    /// address, the size of the others (or shorter, which ends the batch),
    /// and room left. An empty batch takes any datagram that fits its
    /// buffer. Whether it was taken.
    pub fn push<'a>(
        &mut self,
        to: SocketAddr,
        size: usize,
        parts: impl Iterator<Item = &'a [u8]>,
    ) -> bool {
        let joins = if self.is_empty() {
            size > 0 && size <= self.buf.len()
        } else {
            self.to == Some(to)
                && !self.ended
                && size <= self.segment
                && self.datagrams < self.max_datagrams
                && self.len + size <= self.buf.len()
        };
        if !joins {
            return false;
        }
        let mut at = self.len;
        for part in parts {
            self.buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        debug_assert_eq!(at, self.len + size, "the parts make the datagram");
        if self.is_empty() {
            self.segment = size;
            self.to = Some(to);
        } else if size < self.segment {
            self.ended = true;
        }
        self.len = at;
        self.datagrams += 1;
        true
    }

    /// What to send: the bytes, the datagram size and the address.
    pub fn pending(&self) -> Option<(&[u8], usize, SocketAddr)> {
        let to = self.to?;
        (!self.is_empty()).then(|| (&self.buf[..self.len], self.segment, to))
    }

    /// Takes off the first `sent` bytes, which went (whole datagrams).
    pub fn sent(&mut self, sent: usize) {
        let sent = sent.min(self.len);
        self.buf.copy_within(sent..self.len, 0);
        self.len -= sent;
        self.datagrams = self.len.div_ceil(self.segment.max(1));
        if self.is_empty() {
            self.clear();
        }
    }

    /// Drops what it holds.
    pub fn clear(&mut self) {
        self.len = 0;
        self.datagrams = 0;
        self.segment = 0;
        self.ended = false;
        self.to = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn push(b: &mut Batch, to: u16, bytes: &[u8]) -> bool {
        b.push(at(to), bytes.len(), [&bytes[..1], &bytes[1..]].into_iter())
    }

    #[test]
    fn datagrams_of_one_size_to_one_address_join() {
        let mut b = Batch::new(100, 8);
        assert!(b.pending().is_none());
        assert!(push(&mut b, 1, b"abcd"));
        assert!(push(&mut b, 1, b"efgh"));
        assert_eq!(b.pending(), Some((&b"abcdefgh"[..], 4, at(1))));
    }

    #[test]
    fn a_shorter_datagram_ends_the_batch_and_a_longer_one_is_refused() {
        let mut b = Batch::new(100, 8);
        assert!(push(&mut b, 1, b"abcd"));
        assert!(!push(&mut b, 1, b"abcde"), "longer than the segment");
        assert!(push(&mut b, 1, b"ef"));
        assert!(!push(&mut b, 1, b"ab"), "nothing follows a shorter one");
        assert_eq!(b.pending(), Some((&b"abcdef"[..], 4, at(1))));
    }

    #[test]
    fn another_address_or_a_full_batch_is_refused() {
        let mut b = Batch::new(10, 2);
        assert!(push(&mut b, 1, b"abcd"));
        assert!(!push(&mut b, 2, b"abcd"), "another address");
        assert!(push(&mut b, 1, b"abcd"));
        assert!(!push(&mut b, 1, b"abcd"), "two datagrams at most");
        let mut b = Batch::new(10, 8);
        assert!(push(&mut b, 1, b"abcd"));
        assert!(push(&mut b, 1, b"abcd"));
        assert!(!push(&mut b, 1, b"abcd"), "ten bytes at most");
        assert!(
            !Batch::new(3, 8).push(at(1), 4, [&b"abcd"[..]].into_iter()),
            "larger than the buffer"
        );
    }

    #[test]
    fn what_went_is_taken_off_and_the_rest_stays() {
        let mut b = Batch::new(100, 8);
        for d in [b"abcd", b"efgh", b"ijkl"] {
            assert!(push(&mut b, 1, d));
        }
        b.sent(4);
        assert_eq!(b.pending(), Some((&b"efghijkl"[..], 4, at(1))));
        assert!(push(&mut b, 1, b"mn"), "the rest takes more");
        b.sent(10);
        assert!(b.is_empty());
        assert!(b.pending().is_none());
        assert!(
            push(&mut b, 2, b"xyz"),
            "an empty batch takes any address and size"
        );
        assert_eq!(b.pending(), Some((&b"xyz"[..], 3, at(2))));
    }
}
