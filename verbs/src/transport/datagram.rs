//! A side channel over one datagram socket: each message a datagram of
//! its own, behind the sender's name.
//!
//! ```text
//!  0  u64     job    the sender
//!  8  u32     rank
//! 12  ...     the message
//! ```
//!
//! Addresses come from the peers' cards (the module puts them in the
//! shared [`AddressBook`]) and from the datagrams that arrive: a process
//! that sends a REQ is answered where it sent it from, whether or not this
//! side looked it up. Nothing here proves who sent what; the CPC checks
//! that a message names its sender, and the engine's handshake proves the
//! job key on the queue pair itself. A lost datagram costs the CPC a
//! timeout, as a lost connection would.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use btl_core::endpoint::ProcName;
use btl_std::driver::net::DatagramSocket;

use super::SideChannel;

/// Bytes of the sender's name in front of every message.
pub const ENVELOPE: usize = 12;
/// The largest message the channel carries.
pub const MAX_MESSAGE: usize = 1024;
/// Datagrams a `recv` drops (too short to name their sender) before it
/// gives up for now: junk sent without pause must not keep it reading.
const DROPPED_PER_RECV: usize = 64;

/// Where each peer's side channel is, shared between the module that looks
/// peers up and the channel that sends to them.
#[derive(Debug, Clone, Default)]
pub struct AddressBook {
    inner: Arc<Mutex<HashMap<ProcName, SocketAddr>>>,
}

impl AddressBook {
    /// An empty book.
    pub fn new() -> Self {
        AddressBook::default()
    }

    /// `proc`'s side channel is at `at`.
    pub fn insert(&self, proc: ProcName, at: SocketAddr) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(proc, at);
    }

    /// Where `proc`'s side channel is, if known.
    pub fn get(&self, proc: ProcName) -> Option<SocketAddr> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&proc)
            .copied()
    }
}

/// The side channel of process `me` over `socket`.
#[derive(Debug)]
pub struct DatagramChannel<D> {
    socket: D,
    me: ProcName,
    book: AddressBook,
    buf: Box<[u8]>,
    /// The last `recv` stopped dropping junk with more waiting.
    left_unread: bool,
}

impl<D: DatagramSocket> DatagramChannel<D> {
    /// Process `me`'s channel over `socket`, finding peers in `book`.
    pub fn new(socket: D, me: ProcName, book: AddressBook) -> Self {
        DatagramChannel {
            socket,
            me,
            book,
            buf: vec![0; ENVELOPE + MAX_MESSAGE].into_boxed_slice(),
            left_unread: false,
        }
    }
}

impl<D: DatagramSocket> SideChannel for DatagramChannel<D> {
    fn send(&mut self, to: ProcName, message: &[u8]) {
        let Some(at) = self.book.get(to) else {
            // Not looked up and never heard from: the CPC times out.
            return;
        };
        let mut envelope = [0u8; ENVELOPE];
        envelope[..8].copy_from_slice(&self.me.job.to_be_bytes());
        envelope[8..].copy_from_slice(&self.me.rank.to_be_bytes());
        let bufs = [IoSlice::new(&envelope), IoSlice::new(message)];
        // A datagram the socket will not take now is lost, as on a wire.
        let _ = self.socket.send_to_vectored(&bufs, at);
    }

    fn recv(&mut self) -> Option<(ProcName, Vec<u8>)> {
        self.left_unread = false;
        for _ in 0..DROPPED_PER_RECV {
            let (len, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            };
            let Some((envelope, message)) = self.buf[..len].split_first_chunk::<ENVELOPE>() else {
                // Too short to say who sent it: dropped.
                continue;
            };
            let [j0, j1, j2, j3, j4, j5, j6, j7, r0, r1, r2, r3] = *envelope;
            let sender = ProcName::new(
                u64::from_be_bytes([j0, j1, j2, j3, j4, j5, j6, j7]),
                u32::from_be_bytes([r0, r1, r2, r3]),
            );
            self.book.insert(sender, from);
            return Some((sender, message.to_vec()));
        }
        self.left_unread = true;
        None
    }

    fn left_unread(&self) -> bool {
        self.left_unread
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// The OS's socket as the channel uses it.
    struct Os(UdpSocket);

    impl DatagramSocket for Os {
        fn send_to_vectored(&self, bufs: &[IoSlice<'_>], to: SocketAddr) -> io::Result<usize> {
            let bytes: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            self.0.send_to(&bytes, to)
        }

        fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            self.0.recv_from(buf)
        }
    }

    fn socket() -> (Os, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.set_nonblocking(true).expect("non-blocking");
        let at = s.local_addr().expect("address");
        (Os(s), at)
    }

    /// Polls `ch` until a message comes (the loopback is quick, not
    /// instant).
    fn next(ch: &mut DatagramChannel<Os>) -> Option<(ProcName, Vec<u8>)> {
        for _ in 0..1000 {
            if let Some(m) = ch.recv() {
                return Some(m);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        None
    }

    #[test]
    fn a_message_goes_to_a_looked_up_peer_and_the_answer_comes_back() {
        let (a, a_at) = socket();
        let (b, _) = socket();
        let (pa, pb) = (ProcName::new(3, 0), ProcName::new(3, 1));
        let book_a = AddressBook::new();
        let mut ca = DatagramChannel::new(a, pa, book_a.clone());
        // B looked nobody up: it answers where A's message came from.
        let mut cb = DatagramChannel::new(b, pb, AddressBook::new());
        ca.send(pb, b"lost: B is not in A's book");
        book_a.insert(pb, cb.socket.0.local_addr().expect("address"));
        ca.send(pb, b"REQ");
        assert_eq!(next(&mut cb), Some((pa, b"REQ".to_vec())));
        cb.send(pa, b"REP");
        assert_eq!(next(&mut ca), Some((pb, b"REP".to_vec())));
        assert_eq!(cb.book.get(pa), Some(a_at));
    }

    #[test]
    fn a_datagram_too_short_for_its_envelope_is_dropped() {
        let (a, _) = socket();
        let (b, b_at) = socket();
        let mut cb = DatagramChannel::new(b, ProcName::new(3, 1), AddressBook::new());
        a.0.send_to(b"short", b_at).expect("send");
        let (pa, mut ca) = (ProcName::new(3, 0), {
            let book = AddressBook::new();
            book.insert(ProcName::new(3, 1), b_at);
            DatagramChannel::new(a, ProcName::new(3, 0), book)
        });
        ca.send(ProcName::new(3, 1), b"after");
        assert_eq!(next(&mut cb), Some((pa, b"after".to_vec())));
    }

    #[test]
    fn a_run_of_junk_is_dropped_a_share_at_a_time_and_said_to_be_left() {
        let (a, _) = socket();
        let (b, b_at) = socket();
        let mut cb = DatagramChannel::new(b, ProcName::new(3, 1), AddressBook::new());
        for _ in 0..DROPPED_PER_RECV + 10 {
            a.0.send_to(b"short", b_at).expect("send");
        }
        let book = AddressBook::new();
        book.insert(ProcName::new(3, 1), b_at);
        let pa = ProcName::new(3, 0);
        let mut ca = DatagramChannel::new(a, pa, book);
        ca.send(ProcName::new(3, 1), b"after");
        // Loopback delivers at once, but not within the send call.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(cb.recv(), None, "a recv drops its share of junk only");
        assert!(cb.left_unread(), "and says that more waits");
        assert_eq!(cb.recv(), Some((pa, b"after".to_vec())));
        assert!(!cb.left_unread());
    }
}
