//! The baseline the `btl` command compares against: the same measurements
//! over a plain socket, as the best simple program without a BTL does
//! them: a TCP connection for the network BTLs, a Unix stream socket for
//! shared memory. The sender writes each message with one `write`; the
//! receiver of a window reads whole buffers (up to [`READ_CHUNK`] at a
//! time), not one `read` per message. Busy-polling reads spin on a
//! non-blocking socket; blocking reads block.
//!
//! Before each size the lead sends a 17-byte header (test, size, window,
//! rounds); a size of `u64::MAX` ends the run.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::bench::{Plan, Row, Test, Waiting, row};

const DONE: u64 = u64::MAX;
/// Bytes of the header before each size.
const HEAD: usize = 17;
/// Largest message the answering side takes: the command's sizes are far
/// below it.
const MAX_SIZE: usize = 1 << 30;
/// The most a window's receiver reads at once: what a C loop's buffer
/// holds.
pub const READ_CHUNK: usize = 4 << 20;

fn test_code(t: Test) -> u8 {
    match t {
        Test::PingPong => 0,
        Test::Bandwidth => 1,
        Test::Rate => 2,
    }
}

/// A socket the baseline runs over.
pub trait Stream: Read + Write {
    /// Makes it ready for `waiting`: non-blocking to busy-poll, and for
    /// TCP without Nagle's delay.
    fn prepare(&self, waiting: Waiting) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn prepare(&self, waiting: Waiting) -> io::Result<()> {
        self.set_nodelay(true)?;
        self.set_nonblocking(waiting == Waiting::Poll)
    }
}

impl Stream for UnixStream {
    fn prepare(&self, waiting: Waiting) -> io::Result<()> {
        self.set_nonblocking(waiting == Waiting::Poll)
    }
}

/// Reads what has come, at least one byte and at most `buf.len()`,
/// spinning on a non-blocking socket: how many.
fn read_some(s: &mut impl Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match s.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => return Ok(n),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads exactly `buf.len()` bytes.
fn read_all(s: &mut impl Stream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        got += read_some(s, &mut buf[got..])?;
    }
    Ok(())
}

/// Writes all of `buf`, spinning on a non-blocking socket.
fn write_all(s: &mut impl Stream, buf: &[u8]) -> io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs `plan` over `stream` against [`answer`] at the other end.
pub fn lead(
    mut stream: impl Stream,
    plan: &Plan,
    waiting: Waiting,
    mut on_row: impl FnMut(&Row),
) -> io::Result<Vec<Row>> {
    stream.prepare(waiting)?;
    let max = plan.sizes.iter().copied().max().unwrap_or(1).max(1);
    let mut buf = vec![0x5au8; max];
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        let (iters, warmup) = plan.iterations(size);
        let mut head = [0u8; HEAD];
        head[0] = test_code(plan.test);
        head[1..9].copy_from_slice(&(size as u64).to_be_bytes());
        head[9..13].copy_from_slice(&plan.window.to_be_bytes());
        head[13..17].copy_from_slice(&(warmup + iters).to_be_bytes());
        write_all(&mut stream, &head)?;
        let mut samples: Vec<Duration> = Vec::with_capacity(iters as usize);
        let mut timed_from = Instant::now();
        for i in 0..warmup + iters {
            let t = Instant::now();
            match plan.test {
                Test::PingPong => {
                    write_all(&mut stream, &buf[..size])?;
                    read_all(&mut stream, &mut buf[..size])?;
                }
                Test::Bandwidth | Test::Rate => {
                    for _ in 0..plan.window {
                        write_all(&mut stream, &buf[..size])?;
                    }
                    read_all(&mut stream, &mut buf[..1])?;
                }
            }
            if i >= warmup {
                samples.push(t.elapsed());
            }
            if i + 1 == warmup {
                timed_from = Instant::now();
            }
        }
        rows.push(row(
            plan.test,
            plan.window,
            size,
            &mut samples,
            timed_from.elapsed(),
        ));
        on_row(rows.last().expect("just pushed"));
    }
    let mut end = [0u8; HEAD];
    end[1..9].copy_from_slice(&DONE.to_be_bytes());
    write_all(&mut stream, &end)?;
    Ok(rows)
}

/// Answers [`lead`] until it is done: echoes ping-pongs, acknowledges each
/// window with one byte once its bytes came, read whole buffers at a time.
pub fn answer(mut stream: impl Stream, waiting: Waiting) -> io::Result<()> {
    stream.prepare(waiting)?;
    let mut buf = vec![0u8; 1];
    loop {
        let mut head = [0u8; HEAD];
        read_all(&mut stream, &mut head)?;
        let field = |r: std::ops::Range<usize>| {
            head[r].iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b))
        };
        let size = field(1..9);
        if size == DONE {
            return Ok(());
        }
        // The lead's figure, checked before it sizes a buffer.
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= MAX_SIZE)
            .ok_or_else(|| io::Error::other(format!("message size {size} above {MAX_SIZE}")))?;
        let window = field(9..13).max(1);
        let rounds = field(13..17);
        let pingpong = head[0] == 0;
        let need = if pingpong { size } else { READ_CHUNK };
        if buf.len() < need.max(1) {
            buf.resize(need.max(1), 0);
        }
        for _ in 0..rounds {
            if pingpong {
                read_all(&mut stream, &mut buf[..size])?;
                write_all(&mut stream, &buf[..size])?;
            } else {
                let mut left = window.saturating_mul(size as u64);
                while left > 0 {
                    let chunk = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    left -= read_some(&mut stream, &mut buf[..chunk])? as u64;
                }
                write_all(&mut stream, &[1])?;
            }
        }
    }
}

/// One-thread `memcpy` of each size of `plan` into a second buffer, as
/// many times as a ping-pong of that size has iterations: the bandwidth
/// the copy alone reaches (hot in cache up to the cache's size), which a
/// shared-memory transport's copies are measured against.
pub fn memcpy(plan: &Plan) -> Vec<Row> {
    let max = plan.sizes.iter().copied().max().unwrap_or(1).max(1);
    let (from, mut to) = (vec![0x5au8; max], vec![0u8; max]);
    plan.sizes
        .iter()
        .map(|&size| {
            let (iters, warmup) = plan.iterations(size);
            let mut samples = Vec::with_capacity(iters as usize);
            let mut timed_from = Instant::now();
            for i in 0..warmup + iters {
                let t = Instant::now();
                to[..size].copy_from_slice(std::hint::black_box(&from[..size]));
                std::hint::black_box(&mut to);
                if i >= warmup {
                    samples.push(t.elapsed());
                }
                if i + 1 == warmup {
                    timed_from = Instant::now();
                }
            }
            row(Test::Bandwidth, 1, size, &mut samples, timed_from.elapsed())
        })
        .collect()
}
