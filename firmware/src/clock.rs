//! Monotonic clock from the `time` CSR, as smoltcp and btl count time.

use smoltcp::time::Instant;

/// Frequency of the `time` CSR on QEMU `virt` (its device tree's
/// `timebase-frequency`).
pub const TIMEBASE_HZ: u64 = 10_000_000;

/// Ticks of the `time` CSR since reset.
pub fn ticks() -> u64 {
    let t: u64;
    // SAFETY: `rdtime` only reads the time counter; QEMU `virt` implements it
    // in machine mode (backed by the ACLINT timer).
    unsafe { core::arch::asm!("rdtime {0}", out(reg) t, options(nomem, nostack)) };
    t
}

/// Microseconds since reset.
pub fn micros() -> u64 {
    ticks() / (TIMEBASE_HZ / 1_000_000)
}

/// Nanoseconds per tick of the `time` CSR.
const NANOS_PER_TICK: u64 = 1_000_000_000 / TIMEBASE_HZ;

/// The current time for btl's engine and drivers: nanoseconds since reset
/// (the same origin as [`now`]; a u64 of nanoseconds lasts 584 years).
pub fn btl_now() -> btl_core::time::Instant {
    btl_core::time::Instant::from_nanos(ticks().saturating_mul(NANOS_PER_TICK))
}

/// The current time for smoltcp.
pub fn now() -> Instant {
    // i64 microseconds last 292,000 years: the conversion cannot overflow.
    Instant::from_micros(micros() as i64)
}
