//! Refusals the kernel reports for datagrams a UDP socket sent.
//!
//! An unconnected UDP socket hears nothing of the ICMP "port unreachable"
//! that a host answers to a datagram for a port where nothing listens: a
//! peer whose process died is found only when the engine's timers run out
//! (the peer timeout, 30 s by default), where a TCP peer's death is a reset
//! at once. With `IP_RECVERR` (`IPV6_RECVERR`) set, Linux queues each such
//! error on the socket's error queue with the address the datagram went
//! to, and the socket's next receive fails with `ECONNREFUSED` to say one
//! is there; [`next_refused`] reads them. What else the queue holds (no
//! route, a too-large datagram) is read and passed over: the engine's
//! timers cover those as before.
//!
//! An ICMP error can be forged by anyone who knows both addresses, as a
//! TCP reset can by one who also guesses a sequence number. The engine
//! takes it as a TCP driver takes a reset: a first connection refused is
//! lost at once, and an open peer asks again and is given up only when
//! its refusals last the refusal timeout (250 ms): a live peer answers
//! meanwhile.

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;

/// Asks the kernel to report ICMP errors for what `socket` sends; whether
/// it will. Elsewhere than Linux: never.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn report_refusals(socket: &UdpSocket, v6: bool) -> bool {
    use std::os::fd::AsRawFd;
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is open for the call, and the option value
    // is a `c_int` whose size is passed.
    let done = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    done == 0
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn report_refusals(_socket: &UdpSocket, _v6: bool) -> bool {
    false
}

/// The address of the next datagram `socket` sent that its destination
/// refused (nothing listens there), from the socket's error queue; `None`
/// once the queue holds no refusal.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn next_refused(socket: &UdpSocket) -> io::Result<Option<SocketAddr>> {
    use std::os::fd::AsRawFd;
    /// Room for the extended error, its offender's address, and headers.
    #[repr(C, align(8))]
    struct Control([u8; 128]);
    loop {
        let mut control = Control([0; 128]);
        let mut name = socket2::SockAddrStorage::zeroed();
        // The datagram's own bytes are not wanted: a byte of room for them
        // is enough (the rest is truncated, as MSG_TRUNC says).
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        // SAFETY: zeroed bytes are a valid `msghdr`; its pointers are set
        // below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_namelen = name.size_of();
        // SAFETY: `view_as` requires one of the platform's `sockaddr_*`
        // types; `sockaddr_storage` is.
        msg.msg_name = (unsafe { name.view_as::<libc::sockaddr_storage>() }
            as *mut libc::sockaddr_storage)
            .cast();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len() as _;
        // SAFETY: every pointer in `msg` is to a live local of the length
        // given beside it; the kernel writes no further.
        let n = unsafe {
            libc::recvmsg(
                socket.as_raw_fd(),
                &raw mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        // SAFETY: `msg` is as `recvmsg` left it, its control buffer alive.
        if unsafe { refused(&msg) }
            // SAFETY: the kernel wrote `msg_namelen` bytes of an address
            // into `name`, which is large enough for any.
            && let Some(to) = unsafe {
                socket2::SockAddr::new(name, msg.msg_namelen).as_socket()
            }
        {
            return Ok(Some(to));
        }
    }
}

/// Whether the error `msg` read from an error queue is an ICMP refusal
/// (port unreachable).
///
/// # Safety
///
/// `msg` is as `recvmsg` filled it: `msg_control` points to a live
/// buffer of at least `msg_controllen` bytes, aligned for a `cmsghdr`.
#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn refused(msg: &libc::msghdr) -> bool {
    // SAFETY: the control buffer is walked with the C library's own
    // macros, which stay within `msg_controllen` (the caller's promise);
    // a datum is read only where its header says it is whole.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(msg);
        while !header.is_null() {
            let h = &*header;
            let ours = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
            #[allow(clippy::unnecessary_cast)]
            if ours
                && h.cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) as usize
            {
                let error = libc::CMSG_DATA(header)
                    .cast::<libc::sock_extended_err>()
                    .read_unaligned();
                let icmp = error.ee_origin == libc::SO_EE_ORIGIN_ICMP
                    || error.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                return icmp && error.ee_errno == libc::ECONNREFUSED as u32;
            }
            header = libc::CMSG_NXTHDR(msg, header);
        }
    }
    false
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn next_refused(_socket: &UdpSocket) -> io::Result<Option<SocketAddr>> {
    Ok(None)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_datagram_to_a_closed_port_comes_back_refused_with_its_address() {
        let socket = UdpSocket::bind("127.0.0.1:0".parse().expect("an address")).expect("bound");
        assert!(report_refusals(&socket, false));
        // A port that was bound a moment ago and is closed now.
        let closed = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port");
        socket.send_to(b"anyone?", closed).expect("sent");
        let start = Instant::now();
        let got = loop {
            if let Some(to) = next_refused(&socket).expect("the error queue reads") {
                break to;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no refusal came");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, closed);
        assert_eq!(next_refused(&socket).expect("reads"), None, "one refusal");
        // The socket receives as before.
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bound");
        peer.send_to(b"here", socket.local_addr().expect("bound"))
            .expect("sent");
        let mut buf = [0u8; 16];
        let start = Instant::now();
        let n = loop {
            match socket.recv_from(&mut buf) {
                Ok((n, _)) => break n,
                // The refusal said once, then the datagram.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
            assert!(start.elapsed() < Duration::from_secs(5), "nothing came");
        };
        assert_eq!(&buf[..n], b"here");
    }
}
