//! The thread's heap pointer in an initial-exec TLS slot.
//!
//! A shared library's thread-locals use the general-dynamic model by default: every access
//! calls `__tls_get_addr`. nodalloc is loaded at start-up (`LD_PRELOAD` or linked), where the
//! initial-exec model is valid: the slot sits at a fixed offset from the thread pointer, read
//! from the GOT once. Stable Rust cannot ask for that model, so the slot is defined in
//! assembly (`.tbss`) and read through a `@gottpoff` relocation.
//!
//! On other architectures a `const` Rust thread-local is used instead.

use nodalloc_core::raw::ThreadHeap;

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl nodalloc_thread_heap",
    ".hidden nodalloc_thread_heap",
    ".type nodalloc_thread_heap, @object",
    ".size nodalloc_thread_heap, 8",
    "nodalloc_thread_heap:",
    ".zero 8",
    ".popsection",
);

/// The address of the calling thread's slot.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn slot() -> *mut *mut ThreadHeap {
    let address: usize;
    // SAFETY: reads the thread pointer (fs:0 holds its own address on x86_64 Linux) and adds the
    // slot's TLS offset from the GOT; no memory is written. The result is this thread's slot.
    unsafe {
        core::arch::asm!(
            "mov {0}, qword ptr fs:[0]",
            "add {0}, qword ptr [rip + nodalloc_thread_heap@GOTTPOFF]",
            out(reg) address,
            options(pure, readonly, nostack, preserves_flags)
        );
    }
    address as *mut *mut ThreadHeap
}

#[cfg(not(target_arch = "x86_64"))]
thread_local! {
    static SLOT: core::cell::Cell<*mut ThreadHeap> = const { core::cell::Cell::new(core::ptr::null_mut()) };
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn get() -> *mut ThreadHeap {
    // SAFETY: the slot is this thread's, 8-aligned, and only this thread reads or writes it.
    unsafe { *slot() }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn set(heap: *mut ThreadHeap) {
    // SAFETY: as in `get`.
    unsafe { *slot() = heap }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn get() -> *mut ThreadHeap {
    SLOT.with(|slot| slot.get())
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn set(heap: *mut ThreadHeap) {
    SLOT.with(|slot| slot.set(heap))
}
