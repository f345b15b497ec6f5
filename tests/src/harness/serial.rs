//! The engine over a byte stream: A and B, each an engine and a
//! `btl_core::serial::SerialDriver`, joined by an in-memory serial line
//! (two [`Pipe`]s behind `embedded_io`'s traits), small enough that writes
//! are cut anywhere. [`SerialLine`] is the line; [`SerialWorld`] the
//! harness.
//!
//! Time is simulated: each round moves the clock by [`TICK`], and when
//! nothing is on the line, on to the earliest deadline of the engines.
//!
//! Fault hooks: `pause` stops polling a side (the line fills up, and the
//! other side's writes wait), `kill` stops it for good and cuts the line:
//! the survivor finds out by its keepalives.

use std::boxed::Box;
use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::{Capacities, Stream};
use btl_core::serial::SerialDriver;
use btl_core::time::{Duration, Instant};
use btl_std::driver::heap::{Heap, HeapEngine};

use super::smoltcp::SeededNonces;
use crate::pair::pipe::Pipe;
use crate::world::{Capabilities, Memory, Side, World};

/// Bytes a direction of the line holds: less than a frame, so that every
/// large frame crosses in pieces.
pub const LINE: usize = 2048;
/// Bytes a driver reads ahead of the engine.
pub const RX: usize = 512;
/// The job of A and B.
pub const JOB: u64 = 0x5E21;
/// The process names of A and B.
pub const NAMES: [ProcName; 2] = [ProcName::new(JOB, 1), ProcName::new(JOB, 0)];
/// The job key both hold.
pub const KEY: &[u8] = b"serial job key";
/// Simulated time per round.
pub const TICK: Duration = Duration::from_millis(1);
/// Payload of an eager fragment.
pub const EAGER: usize = 1024;
/// The largest message.
pub const MAX_SEND: usize = 16 << 10;
/// Fragments of each class.
pub const FRAGMENTS: u32 = 32;
/// Progress rounds within which anything must finish.
pub const MAX_ROUNDS: u32 = 40_000;

/// What an engine of the harness holds.
pub const CAPACITIES: Capacities = Capacities {
    peers: 2,
    links: 2,
    ops: 64,
    events: 256,
    registrations: 16,
};

/// The two directions of a serial line: bytes towards A, towards B.
type Wires = Rc<RefCell<[Pipe<LINE>; 2]>>;

/// One end of an in-memory serial line, as `embedded_io` sees it.
pub struct SerialLine {
    wires: Wires,
    side: Side,
    cut: Rc<RefCell<bool>>,
}

impl SerialLine {
    /// A line's two ends: A's, then B's.
    pub fn pair() -> [SerialLine; 2] {
        let wires: Wires = Rc::new(RefCell::new([Pipe::new(), Pipe::new()]));
        let cut = Rc::new(RefCell::new(false));
        Side::BOTH.map(|side| SerialLine {
            wires: wires.clone(),
            side,
            cut: cut.clone(),
        })
    }

    /// Bytes on their way to this end.
    pub fn incoming(&self) -> usize {
        self.wires.borrow()[self.side.index()].len()
    }

    /// Cuts the line: what is on it is lost, and what is written is
    /// dropped.
    pub fn cut(&self) {
        *self.cut.borrow_mut() = true;
        for pipe in self.wires.borrow_mut().iter_mut() {
            pipe.clear();
        }
    }
}

impl embedded_io::ErrorType for SerialLine {
    type Error = Infallible;
}

impl embedded_io::Read for SerialLine {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        Ok(self.wires.borrow_mut()[self.side.index()].read(buf))
    }
}

impl embedded_io::ReadReady for SerialLine {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        Ok(!self.wires.borrow()[self.side.index()].is_empty())
    }
}

impl embedded_io::Write for SerialLine {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        if *self.cut.borrow() {
            return Ok(buf.len());
        }
        Ok(self.wires.borrow_mut()[self.side.other().index()].write(buf))
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

impl embedded_io::WriteReady for SerialLine {
    fn write_ready(&mut self) -> Result<bool, Infallible> {
        Ok(*self.cut.borrow() || !self.wires.borrow()[self.side.other().index()].is_full())
    }
}

/// A side's driver.
pub type Driver = SerialDriver<SerialLine, SeededNonces, RX>;

/// One side: an engine and its driver.
struct Board {
    engine: Box<HeapEngine<Stream>>,
    driver: Driver,
    running: bool,
    paused: bool,
}

/// A and B on one serial line.
pub struct SerialWorld {
    boards: [Board; 2],
    peers: [EndpointId; 2],
    now: Instant,
}

impl SerialWorld {
    /// Two engines on one line, each knowing the other.
    pub fn new() -> Self {
        let lines = SerialLine::pair();
        let mut boards = {
            let [a, b] = lines;
            [(Side::A, a), (Side::B, b)].map(|(side, line)| Board {
                engine: engine_of(NAMES[side.index()]),
                driver: SerialDriver::new(
                    line,
                    NAMES[side.other().index()],
                    SeededNonces::new(0x5E21 + side.index() as u64),
                ),
                running: true,
                paused: false,
            })
        };
        let peers = Side::BOTH.map(|side| {
            super::add_peer(
                &mut *boards[side.index()].engine,
                NAMES[side.other().index()],
            )
        });
        SerialWorld {
            boards,
            peers,
            now: Instant::ZERO,
        }
    }
}

impl Default for SerialWorld {
    fn default() -> Self {
        Self::new()
    }
}

/// An engine of process `me` holding the job key, with CRC32C trailers
/// (a serial line may flip bits).
pub fn engine_of(me: ProcName) -> Box<HeapEngine<Stream>> {
    let mut config = super::engine_config(me, KEY, TICK, 200);
    config.peer_timeout = Duration::from_secs(10);
    config.keepalive = Duration::from_secs(1);
    let cfg = super::pools(EAGER, MAX_SEND, FRAGMENTS);
    let mut e = Box::new(
        Heap::engine(config, Stream, CAPACITIES, cfg, Instant::ZERO).expect("engine pools"),
    );
    e.set_name("serial");
    e
}

impl World for SerialWorld {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: false,
            max_rounds: MAX_ROUNDS,
            linger_rounds: 20,
            max_rdma_len: 4 << 20,
            sendi_max: self.boards[0].engine.attributes().eager_limit,
            pause: true,
            peer_loss: true,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut *self.boards[side.index()].engine
    }

    fn peer(&self, side: Side) -> EndpointId {
        self.peers[side.index()]
    }

    fn progress(&mut self) {
        let now = self.now;
        for board in self.boards.iter_mut() {
            if board.running && !board.paused {
                board
                    .driver
                    .poll(&mut board.engine, now)
                    .expect("an in-memory line never fails");
            }
        }
        let mut next = now + TICK;
        let on_the_line = self
            .boards
            .iter_mut()
            .any(|b| b.running && b.driver.port_mut().incoming() > 0);
        if !on_the_line {
            let deadline = self
                .boards
                .iter()
                .filter(|b| b.running && !b.paused)
                .filter_map(|b| b.engine.poll_timeout())
                .min();
            if let Some(at) = deadline {
                next = next.max(at);
            }
        }
        self.now = next;
    }

    fn pause(&mut self, side: Side) {
        self.boards[side.index()].paused = true;
    }

    fn resume(&mut self, side: Side) {
        self.boards[side.index()].paused = false;
    }

    fn kill(&mut self, side: Side) {
        let board = &mut self.boards[side.index()];
        board.running = false;
        board.driver.port_mut().cut();
    }
}
