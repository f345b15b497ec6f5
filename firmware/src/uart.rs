//! Console on the 16550 UART of QEMU `virt`, and the
//! [`print!`](crate::print) and [`println!`](crate::println) macros and a
//! [`log`] logger over it.

use core::fmt;

/// Base address of the 16550 UART on QEMU `virt`.
const BASE: usize = 0x1000_0000;
/// Transmit holding register (write).
const THR: usize = 0;
/// Interrupt enable register.
const IER: usize = 1;
/// FIFO control register (write).
const FCR: usize = 2;
/// Line control register.
const LCR: usize = 3;
/// Line status register.
const LSR: usize = 5;
/// LSR bit: the transmit holding register is empty.
const LSR_THRE: u8 = 1 << 5;

/// The UART console. It holds no state, so any number of them can exist;
/// with one hart and no interrupts, writes never interleave.
#[derive(Clone, Copy, Debug, Default)]
pub struct Uart;

impl Uart {
    fn write_reg(offset: usize, value: u8) {
        // SAFETY: BASE + offset (offset < 8) is a register of the 16550 on
        // QEMU `virt`, which is always mapped (no MMU); byte-wide volatile
        // access is what the device expects.
        unsafe { core::ptr::write_volatile((BASE + offset) as *mut u8, value) }
    }

    fn read_reg(offset: usize) -> u8 {
        // SAFETY: as in `write_reg`; reading LSR has no side effect.
        unsafe { core::ptr::read_volatile((BASE + offset) as *const u8) }
    }

    /// Sets the line to 8N1 with FIFOs on and interrupts off.
    pub fn init() {
        Self::write_reg(IER, 0x00);
        Self::write_reg(LCR, 0x03);
        Self::write_reg(FCR, 0x07);
    }

    /// Sends one byte, waiting for room in the transmitter.
    pub fn put(byte: u8) {
        while Self::read_reg(LSR) & LSR_THRE == 0 {
            core::hint::spin_loop();
        }
        Self::write_reg(THR, byte);
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                Self::put(b'\r');
            }
            Self::put(b);
        }
        Ok(())
    }
}

/// Prints to the UART console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = write!($crate::uart::Uart, $($arg)*);
    }};
}

/// Prints a line to the UART console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = writeln!($crate::uart::Uart, $($arg)*);
    }};
}

/// A [`log`] logger that prints records to the UART.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            crate::println!("[{} {}] {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Routes the [`log`] records of the crates (virtio-drivers) to the UART, up
/// to `level`.
pub fn init_logger(level: log::LevelFilter) {
    // An error means a logger is already set, which is fine.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
