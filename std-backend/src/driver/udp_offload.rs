//! The operating system's UDP socket with Linux's segmentation offloads:
//! one `sendmsg` carries up to [`MAX_SEGMENTS`] datagrams of one size
//! (`UDP_SEGMENT`, generic segmentation offload), and one `recvmsg`
//! returns the datagrams of one sender that the kernel has coalesced
//! (`UDP_GRO`, generic receive offload). The datagrams on the wire are the
//! same as without; what changes is the count of system calls, which is
//! what bounds a datagram transport's bandwidth (a 1 MiB message is 700
//! datagrams of 1,472 bytes).
//!
//! Where a kernel lacks either offload (before Linux 4.18 and 5.0, or a
//! device that refuses segmentation), the socket says so once and sends
//! and receives one datagram per call, as any other platform does.

use std::cell::Cell;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use socket2::{MsgHdr, MsgHdrMut, SockAddr, SockRef};

use super::net::{DatagramSocket, Segments};

/// Most datagrams one send carries: the kernel's limit (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;

/// Most bytes one send carries: the largest UDP payload over IPv4 (65,535
/// less the IPv4 and UDP headers; IPv6 allows a little more).
pub const MAX_BATCH: usize = u16::MAX as usize - 28;

/// `setsockopt`/`cmsg` level and names of the offloads (Linux's
/// `<linux/udp.h>`; the `libc` crate has them only for some C libraries).
#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys {
    pub const SOL_UDP: libc::c_int = libc::IPPROTO_UDP;
    pub const UDP_SEGMENT: libc::c_int = 103;
    pub const UDP_GRO: libc::c_int = 104;
}

/// Room for one control message of one `c_int`, aligned for its header.
#[repr(C, align(8))]
struct Control([MaybeUninit<u8>; 32]);

/// A non-blocking UDP socket that sends and receives datagrams in batches
/// where the kernel can.
#[derive(Debug)]
pub struct OffloadedUdp {
    socket: UdpSocket,
    /// Whether sends may still ask for segmentation: cleared for good by
    /// the first send the kernel refuses it for.
    segmenting: Cell<bool>,
}

#[cfg(unix)]
impl std::os::fd::AsFd for OffloadedUdp {
    /// The socket's descriptor, for a reactor that watches it (an async
    /// driver's).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl OffloadedUdp {
    /// Wraps `socket` and asks the kernel to coalesce what it receives,
    /// and to report the datagrams it sent that were refused.
    pub fn new(socket: UdpSocket) -> Self {
        let segmenting = enable_receive_offload(&socket);
        let v6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
        if !super::icmp::report_refusals(&socket, v6) {
            tracing::debug!(
                "this platform does not report refused datagrams: a dead UDP peer is found by the engine's timers"
            );
        }
        OffloadedUdp {
            socket,
            segmenting: Cell::new(segmenting),
        }
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends `buf` as datagrams of `segment` bytes in one call.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn send_segmented(&self, buf: &[u8], segment: u16, to: SocketAddr) -> io::Result<usize> {
        let mut control = Control([MaybeUninit::new(0); 32]);
        // SAFETY: `CMSG_SPACE` and `CMSG_LEN` are arithmetic on a length.
        let (space, len) = unsafe {
            (
                libc::CMSG_SPACE(size_of::<u16>() as u32) as usize,
                libc::CMSG_LEN(size_of::<u16>() as u32),
            )
        };
        const { assert!(size_of::<libc::cmsghdr>() + 8 <= size_of::<Control>()) };
        let header = control.0.as_mut_ptr().cast::<libc::cmsghdr>();
        // SAFETY: `control` is aligned for a `cmsghdr` and holds a header
        // and its 2-byte datum (`space` bytes, checked above); the datum
        // is written unaligned-tolerant where `CMSG_DATA` says it goes.
        unsafe {
            (*header).cmsg_len = len as _;
            (*header).cmsg_level = sys::SOL_UDP;
            (*header).cmsg_type = sys::UDP_SEGMENT;
            libc::CMSG_DATA(header)
                .cast::<u16>()
                .write_unaligned(segment);
        }
        // SAFETY: the first `space` bytes were all written (zeroed, then
        // the header and datum).
        let control: &[u8] =
            unsafe { std::slice::from_raw_parts(control.0.as_ptr().cast(), space) };
        let addr = SockAddr::from(to);
        let bufs = [IoSlice::new(buf)];
        let msg = MsgHdr::new()
            .with_addr(&addr)
            .with_buffers(&bufs)
            .with_control(control);
        SockRef::from(&self.socket).sendmsg(&msg, 0)
    }

    /// Receives into `buf`, with the segment size the kernel reports for
    /// a coalesced read.
    fn recv_coalesced(&self, buf: &mut [u8]) -> io::Result<Segments> {
        let mut control = Control([MaybeUninit::new(0); 32]);
        // Room for either family's address: the kernel writes the sender's.
        let mut addr = SockAddr::from(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)));
        let mut bufs = [socket2::MaybeUninitSlice::new(
            // SAFETY: initialized bytes are valid `MaybeUninit` bytes, and
            // the socket only writes bytes into them.
            unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) },
        )];
        let mut msg = MsgHdrMut::new()
            .with_addr(&mut addr)
            .with_buffers(&mut bufs)
            .with_control(&mut control.0);
        let len = SockRef::from(&self.socket).recvmsg(&mut msg, 0)?;
        let control_len = msg.control_len();
        let from = addr
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP sender"))?;
        let segment = coalesced_segment(&control, control_len).unwrap_or(len);
        Ok(Segments {
            len,
            segment: segment.clamp(1, len.max(1)),
            from,
        })
    }
}

/// The segment size in a received control message, if the kernel
/// coalesced the read.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn coalesced_segment(control: &Control, len: usize) -> Option<usize> {
    let header_len = size_of::<libc::cmsghdr>();
    if len < header_len {
        return None;
    }
    let header = control.0.as_ptr().cast::<libc::cmsghdr>();
    // SAFETY: the kernel wrote `len` bytes of control messages, at least a
    // header's worth (checked); `Control` is aligned for a header. Only the
    // first message is read: the socket asks for no other.
    // `cmsg_len` is a `size_t` with glibc and a `socklen_t` with musl.
    #[allow(clippy::unnecessary_cast)]
    unsafe {
        let h = &*header;
        if h.cmsg_level != sys::SOL_UDP || h.cmsg_type != sys::UDP_GRO {
            return None;
        }
        if (h.cmsg_len as usize) < libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize
            || (h.cmsg_len as usize) > len
        {
            return None;
        }
        let value = libc::CMSG_DATA(header)
            .cast::<libc::c_int>()
            .read_unaligned();
        usize::try_from(value).ok().filter(|&s| s > 0)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn coalesced_segment(_control: &Control, _len: usize) -> Option<usize> {
    None
}

/// Asks the kernel to coalesce received datagrams; whether it offers
/// offloads at all (then segmentation is tried on send too).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn enable_receive_offload(socket: &UdpSocket) -> bool {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is open for the call, and the option value
    // is a `c_int` whose size is passed.
    let done = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            sys::SOL_UDP,
            sys::UDP_GRO,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    done == 0
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn enable_receive_offload(_socket: &UdpSocket) -> bool {
    false
}

impl DatagramSocket for OffloadedUdp {
    fn send_to_vectored(&self, bufs: &[IoSlice<'_>], to: SocketAddr) -> io::Result<usize> {
        SockRef::from(&self.socket).send_to_vectored(bufs, &SockAddr::from(to))
    }

    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.socket.recv_from(buf)
    }

    fn send_segments(&self, buf: &[u8], segment: usize, to: SocketAddr) -> io::Result<usize> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if buf.len() > segment
            && self.segmenting.get()
            && let Ok(size) = u16::try_from(segment)
        {
            match self.send_segmented(buf, size, to) {
                Ok(n) => return Ok(n),
                // The device or kernel cannot segment (no checksum
                // offload, too old): one datagram per call from now on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                    ) =>
                {
                    self.segmenting.set(false);
                }
                Err(e) => return Err(e),
            }
        }
        super::net::send_one_by_one(self, buf, segment, to)
    }

    fn recv_segments(&self, buf: &mut [u8]) -> io::Result<Segments> {
        self.recv_coalesced(buf)
    }

    fn next_refused(&self) -> io::Result<Option<SocketAddr>> {
        super::icmp::next_refused(&self.socket)
    }
}

impl mio::event::Source for OffloadedUdp {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.socket.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.socket.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.socket.deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn pair() -> (OffloadedUdp, OffloadedUdp) {
        let bind = || {
            let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
            OffloadedUdp::new(socket)
        };
        (bind(), bind())
    }

    /// Reads until `want` bytes came or a second passed: the bytes and
    /// the reads it took, with the datagrams split as each read says.
    fn read_all(socket: &OffloadedUdp, want: usize) -> (Vec<Vec<u8>>, usize) {
        let mut buf = vec![0; 1 << 16];
        let (mut datagrams, mut reads, mut got) = (Vec::new(), 0, 0);
        let start = Instant::now();
        while got < want && start.elapsed() < Duration::from_secs(1) {
            match socket.recv_segments(&mut buf) {
                Ok(Segments { len, segment, .. }) => {
                    reads += 1;
                    got += len;
                    datagrams.extend(buf[..len].chunks(segment).map(<[u8]>::to_vec));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("receive: {e}"),
            }
        }
        (datagrams, reads)
    }

    #[test]
    fn a_batch_arrives_as_its_datagrams_with_their_boundaries() {
        let (a, b) = pair();
        let to = b.local_addr().expect("address");
        let sizes = [1000; 20].into_iter().chain([300]);
        let sent: Vec<Vec<u8>> = sizes
            .enumerate()
            .map(|(i, n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        let joined = sent.concat();
        assert_eq!(
            a.send_segments(&joined, 1000, to).expect("send"),
            joined.len()
        );
        let (received, reads) = read_all(&b, joined.len());
        assert_eq!(received, sent, "every datagram, whole and in order");
        if a.segmenting.get() {
            assert!(reads < sent.len(), "the kernel joined them: {reads} reads");
        }
    }

    #[test]
    fn without_segmentation_each_datagram_goes_alone() {
        let (a, b) = pair();
        a.segmenting.set(false);
        let to = b.local_addr().expect("address");
        let joined: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        assert_eq!(a.send_segments(&joined, 1000, to).expect("send"), 2500);
        let (received, _) = read_all(&b, joined.len());
        let lens: Vec<usize> = received.iter().map(Vec::len).collect();
        assert_eq!(lens, [1000, 1000, 500]);
        assert_eq!(received.concat(), joined);
    }

    #[test]
    fn a_single_datagram_reads_as_one_segment() {
        let (a, b) = pair();
        let to = b.local_addr().expect("address");
        let from = a.local_addr().expect("address");
        assert_eq!(a.send_segments(b"hello", 1000, to).expect("send"), 5);
        let mut buf = [0; 64];
        let start = Instant::now();
        let got = loop {
            match b.recv_segments(&mut buf) {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(start.elapsed() < Duration::from_secs(1), "nothing came");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("receive: {e}"),
            }
        };
        assert_eq!(
            got,
            Segments {
                len: 5,
                segment: 5,
                from
            }
        );
        assert_eq!(&buf[..5], b"hello");
    }
}
