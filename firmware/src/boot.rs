//! Boot code for QEMU `virt` with `-bios none`: the entry point, the trap
//! handler, the panic handler and the way out of QEMU.
//!
//! QEMU starts every hart in machine mode at `_start` with `a0` = hart id. Hart
//! 0 sets up a stack (with a guard page below it), clears `.bss`, enables the
//! FPU and calls [`crate::main`]. Hart 1 (with `-smp 2`) takes a stack of its
//! own, enables the FPU and calls [`crate::second_hart`], the other end of
//! the ring check ([`crate::harts`]); any other hart parks in `wfi`.

use core::arch::global_asm;
use core::panic::PanicInfo;

global_asm!(
    r#"
    .section .text.entry, "ax"
    .global _start
_start:
    csrr    t0, mhartid
    li      t1, 1
    beq     t0, t1, 5f
    bnez    t0, 3f

    la      sp, __stack_top

    // Any trap (exception) goes to _trap, which reports it and exits.
    la      t0, _trap
    csrw    mtvec, t0

    // Guard page under the stack: a locked PMP region with no permission,
    // so that a stack overflow faults instead of overwriting .bss.
    // NAPOT encoding of 4 KiB at __stack_guard: (base >> 2) | 0x1ff.
    la      t0, __stack_guard
    srli    t0, t0, 2
    ori     t0, t0, 0x1ff
    csrw    pmpaddr0, t0
    // pmp0cfg = L (0x80) | A=NAPOT (0x18), R = W = X = 0.
    li      t0, 0x98
    csrw    pmpcfg0, t0

    // The target uses the hard-float ABI: set mstatus.FS = Initial so that
    // floating-point instructions do not trap.
    li      t0, 0x2000
    csrs    mstatus, t0

    // Clear .bss (8-byte aligned by the linker script).
    la      t0, __bss_start
    la      t1, __bss_end
1:
    bgeu    t0, t1, 2f
    sd      zero, 0(t0)
    addi    t0, t0, 8
    j       1b
2:
    call    {main}
3:
    wfi
    j       3b

5:
    // Hart 1: its own stack (no guard page), the trap vector and the FPU;
    // it touches nothing in .bss before hart 0 says so.
    la      sp, __stack1_top
    la      t0, _trap
    csrw    mtvec, t0
    li      t0, 0x2000
    csrs    mstatus, t0
    call    {second}
    j       3b

    .section .text, "ax"
    .align 2
    .global _trap
_trap:
    // Nothing is resumed after a trap: take a fresh stack and report.
    la      sp, __stack_top
    call    {trap}
4:
    j       4b
"#,
    main = sym crate::main,
    second = sym crate::second_hart,
    trap = sym trap,
);

/// Rust side of the trap vector: every trap is fatal (the firmware runs with
/// interrupts off), so it reports the cause and fails.
extern "C" fn trap() -> ! {
    let (mcause, mepc, mtval): (usize, usize, usize);
    // SAFETY: reading machine-mode CSRs has no side effect; the firmware
    // runs in machine mode, where they are accessible.
    unsafe {
        core::arch::asm!(
            "csrr {0}, mcause",
            "csrr {1}, mepc",
            "csrr {2}, mtval",
            out(reg) mcause,
            out(reg) mepc,
            out(reg) mtval,
        );
    }
    panic!("trap: mcause={mcause:#x} mepc={mepc:#x} mtval={mtval:#x}");
}

/// Address of QEMU `virt`'s SiFive test device, which ends the emulation.
const TEST_DEVICE: usize = 0x10_0000;

/// Ends QEMU: status 0 makes it exit with 0, any other status makes it exit
/// with that status (its low 16 bits).
pub fn exit(status: u16) -> ! {
    let value: u32 = if status == 0 {
        0x5555
    } else {
        (u32::from(status) << 16) | 0x3333
    };
    // SAFETY: TEST_DEVICE is the MMIO register of the test device on QEMU
    // `virt`; nothing else in the program refers to it, and a 32-bit
    // volatile write is the access it expects.
    unsafe { core::ptr::write_volatile(TEST_DEVICE as *mut u32, value) };
    // Not reached on QEMU; elsewhere, stop here.
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    crate::println!("\npanic: {info}");
    exit(1)
}
