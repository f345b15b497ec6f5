//! btl's shared-memory ring between two cores with no operating system:
//! harts 0 and 1 of QEMU `virt` share RAM, as two cores of a board do.
//! Hart 0 pushes [`RECORDS`] records of every length from 0 to
//! [`LONGEST`] bytes to hart 1 through one ring; hart 1 pushes each back
//! through another; hart 0 checks that every one came back whole, in
//! order and of its kind. The rings are the ones the `sm` BTL runs
//! between processes (`btl_core::ring`), in statics here, small enough
//! (1 KiB of data) that both wrap hundreds of times.

use core::sync::atomic::{AtomicU32, Ordering};

use btl_core::ring::{self, Consumer, PopError, Producer, PushError};

use crate::clock;

/// Records sent each way.
pub const RECORDS: u32 = 20_000;
/// The longest record's payload.
pub const LONGEST: usize = 200;
/// Data words of each ring: 1 KiB.
const CAPACITY: usize = 256;
/// The kind of a record of the check.
const DATA: u8 = 1;
/// The kind of the last record, which hart 1 echoes and then stops at.
const END: u8 = 2;
/// How long hart 0 waits for hart 1 before it gives up.
const PATIENCE_US: u64 = 10_000_000;

/// Hart 0 to hart 1.
static OUT: [AtomicU32; ring::words_for(CAPACITY)] =
    [const { AtomicU32::new(0) }; ring::words_for(CAPACITY)];
/// Hart 1 to hart 0.
static BACK: [AtomicU32; ring::words_for(CAPACITY)] =
    [const { AtomicU32::new(0) }; ring::words_for(CAPACITY)];

/// 1 once hart 0 has made both rings: hart 1 attaches only then. In
/// `.data`, which hart 0 does not clear at boot (it clears `.bss`, where
/// the rings are), so that hart 1 never reads a flag being cleared.
#[unsafe(link_section = ".data")]
static READY: AtomicU32 = AtomicU32::new(0);

/// Why the check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A ring could not be made or attached.
    Ring(ring::RingError),
    /// A push failed for another reason than a full ring.
    Push(PushError),
    /// A pop failed.
    Pop(PopError),
    /// Record `n` came back other than it went.
    Garbled {
        /// Its number.
        n: u32,
    },
    /// Hart 1 answered nothing for [`PATIENCE_US`]: it is not running
    /// (QEMU was started without `-smp 2`) or it stopped.
    NoAnswer {
        /// Records back by then.
        back: u32,
    },
}

/// The payload of record `n`: its length and its bytes.
fn payload(n: u32, out: &mut [u8; LONGEST]) -> usize {
    let len = n as usize % (LONGEST + 1);
    for (i, b) in out[..len].iter_mut().enumerate() {
        *b = (n as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    len
}

/// Hart 0's side: makes the rings, lets hart 1 go, and sends and checks
/// every record; how long it took, in microseconds.
pub fn check() -> Result<u64, Failure> {
    ring::init(&OUT).map_err(Failure::Ring)?;
    ring::init(&BACK).map_err(Failure::Ring)?;
    let mut tx = Producer::attach(&OUT).map_err(Failure::Ring)?;
    let mut rx = Consumer::attach(&BACK).map_err(Failure::Ring)?;
    READY.store(1, Ordering::Release);
    let start = clock::micros();
    let (mut sent, mut back) = (0u32, 0u32);
    let mut last_news = start;
    let (mut want, mut got) = ([0u8; LONGEST], [0u8; LONGEST]);
    while back <= RECORDS {
        // Push while the ring takes them, the last one an END.
        while sent <= RECORDS {
            let len = payload(sent, &mut want);
            let kind = if sent == RECORDS { END } else { DATA };
            match tx.push(kind, &[&want[..len]]) {
                Ok(()) => sent += 1,
                Err(PushError::Full) => break,
                Err(e) => return Err(Failure::Push(e)),
            }
        }
        match rx.pop(&mut got).map_err(Failure::Pop)? {
            Some(record) => {
                let len = payload(back, &mut want);
                let kind = if back == RECORDS { END } else { DATA };
                if record.kind != kind || got.get(..record.len) != Some(&want[..len]) {
                    return Err(Failure::Garbled { n: back });
                }
                back += 1;
                last_news = clock::micros();
            }
            None => {
                if clock::micros() - last_news > PATIENCE_US {
                    return Err(Failure::NoAnswer { back });
                }
                core::hint::spin_loop();
            }
        }
    }
    Ok(clock::micros() - start)
}

/// Hart 1's side: once the rings are made, pushes back every record it
/// takes, until the END; on a fault, stops answering (hart 0 says so).
pub fn echo() {
    while READY.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let (Ok(mut rx), Ok(mut tx)) = (Consumer::attach(&OUT), Producer::attach(&BACK)) else {
        return;
    };
    let mut record = [0u8; LONGEST];
    loop {
        let taken = match rx.pop(&mut record) {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                core::hint::spin_loop();
                continue;
            }
            Err(_) => return,
        };
        loop {
            match tx.push(taken.kind, &[&record[..taken.len]]) {
                Ok(()) => break,
                Err(PushError::Full) => core::hint::spin_loop(),
                Err(_) => return,
            }
        }
        if taken.kind == END {
            return;
        }
    }
}
