//! The engine over a real pseudo-terminal pair: two engines, each with a
//! `SerialDriver` on one end of a Linux pty (raw mode, non-blocking), run
//! the interop conversation (`btl-exchange`) both ways round, in real
//! time: messages, a put with a notice and a get, checked byte for byte.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl};
use btl_core::serial::SerialDriver;
use btl_exchange::{Exchange, Role};
use btl_tests::harness::add_peer;
use btl_tests::harness::serial::NAMES;
use btl_tests::harness::smoltcp::SeededNonces;
use btl_tests::world::Side;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::{Mode, OFlags, open};
use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use rustix::termios::{OptionalActions, tcgetattr, tcsetattr};

/// Bytes each side puts and gets.
const BULK: u64 = 256 << 10;
/// How long both conversations may take.
const LIMIT: Duration = Duration::from_secs(60);

/// One end of a pty, raw and non-blocking, as `embedded_io` sees it.
struct PtyEnd(File);

impl PtyEnd {
    fn new(fd: OwnedFd) -> Self {
        let mut termios = tcgetattr(&fd).expect("a terminal");
        termios.make_raw();
        tcsetattr(&fd, OptionalActions::Now, &termios).expect("raw mode");
        let flags = rustix::fs::fcntl_getfl(&fd).expect("flags");
        rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK).expect("non-blocking");
        PtyEnd(File::from(fd))
    }

    fn ready(&self, flags: PollFlags) -> std::io::Result<bool> {
        let mut fds = [PollFd::new(&self.0, flags)];
        // A zero timeout: whether it is ready now.
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&now))?;
        Ok(fds[0].revents().intersects(flags))
    }
}

impl embedded_io::ErrorType for PtyEnd {
    type Error = std::io::Error;
}

impl embedded_io::Read for PtyEnd {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }
}

impl embedded_io::ReadReady for PtyEnd {
    fn read_ready(&mut self) -> std::io::Result<bool> {
        self.ready(PollFlags::IN)
    }
}

impl embedded_io::Write for PtyEnd {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl embedded_io::WriteReady for PtyEnd {
    fn write_ready(&mut self) -> std::io::Result<bool> {
        self.ready(PollFlags::OUT)
    }
}

/// The two ends of a new pty: the controlling side and the terminal.
fn pty() -> [PtyEnd; 2] {
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pty");
    grantpt(&controller).expect("grantpt");
    unlockpt(&controller).expect("unlockpt");
    let name = ptsname(&controller, Vec::new()).expect("its name");
    let terminal = open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY,
        Mode::empty(),
    )
    .expect("the terminal end");
    [PtyEnd::new(controller), PtyEnd::new(terminal)]
}

#[test]
fn the_conversation_runs_over_a_real_pseudo_terminal() {
    let [a, b] = pty();
    let mut sides = [(Side::A, a), (Side::B, b)].map(|(side, end)| {
        let mut engine = btl_tests::harness::serial::engine_of(NAMES[side.index()]);
        let peer = add_peer(&mut *engine, NAMES[side.other().index()]);
        let region = engine
            .register_mem(
                vec![0; 2 * BULK as usize],
                Access::REMOTE_READ | Access::REMOTE_WRITE,
            )
            .unwrap_or_else(|_| panic!("{side:?} registers"));
        let driver: SerialDriver<PtyEnd, SeededNonces, 4096> = SerialDriver::new(
            end,
            NAMES[side.other().index()],
            SeededNonces::new(side.index() as u64 + 1),
        );
        (engine, driver, peer, region)
    });
    let clock = Instant::now();
    let now = || btl_core::time::Instant::from_nanos(clock.elapsed().as_nanos() as u64);
    for lead in Side::BOTH {
        let mut exchanges = Side::BOTH.map(|side| {
            let (engine, _, peer, region) = &mut sides[side.index()];
            let role = if side == lead {
                Role::Lead
            } else {
                Role::Follow
            };
            Exchange::new(&mut **engine, role, *peer, *region, BULK).expect("a region")
        });
        while !exchanges.iter().all(Exchange::is_done) {
            assert!(
                clock.elapsed() < LIMIT,
                "{lead:?} leading: no end within {LIMIT:?}"
            );
            for side in Side::BOTH {
                let (engine, driver, ..) = &mut sides[side.index()];
                driver.poll(&mut **engine, now()).expect("the pty works");
                if !exchanges[side.index()].is_done() {
                    exchanges[side.index()]
                        .poll(&mut **engine)
                        .unwrap_or_else(|e| panic!("{side:?}, {lead:?} leading: {e:?}"));
                }
            }
        }
    }
}
