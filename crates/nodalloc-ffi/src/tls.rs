//! The thread's heap pointer in an initial-exec TLS slot.
//!
//! A shared library's thread-locals use the general-dynamic model by default: every access
//! calls `__tls_get_addr`. nodalloc is loaded at start-up (`LD_PRELOAD` or linked), where the
//! initial-exec model is valid: the slot sits at a fixed offset from the thread pointer, read
//! from the GOT once. Stable Rust cannot ask for that model, so the slot is defined in
//! assembly (`.tdata`) and read through a `@gottpoff` relocation: two instructions.
//!
//! The slot is never null: a thread without a heap (none yet, or retired at its exit) points
//! at [`DETACHED`], a heap whose caches are empty and whose home region matches no address, so
//! the fast paths need no separate check: they miss, and the slow paths tell the cases apart
//! ([`is_detached`], [`is_retired`]). The slot's initial value is `DETACHED`'s address, a
//! relocation the dynamic loader applies before it copies the TLS image into any thread.
//!
//! On other architectures a `const` Rust thread-local is used instead (null standing for
//! `DETACHED`, which [`get`] maps).

#[cfg(not(target_arch = "x86_64"))]
use core::cell::Cell;
use nodalloc_core::raw::ThreadHeap;

/// The heap of threads that have none. Nothing writes it: its lists are empty and its home
/// view matches no address, so every operation on it takes a slow path, which checks for it.
struct Detached(ThreadHeap);

// SAFETY: `DETACHED` is only ever read (see the type's documentation); its raw pointers are null.
unsafe impl Sync for Detached {}

static DETACHED: Detached = Detached(ThreadHeap::detached());

/// `DETACHED`'s address, as the slot holds it.
#[inline(always)]
pub fn detached() -> *mut ThreadHeap {
    &DETACHED.0 as *const ThreadHeap as *mut ThreadHeap
}

/// True for the heap of a thread that has none.
#[inline(always)]
pub fn is_detached(heap: *mut ThreadHeap) -> bool {
    heap == detached()
}

/// Defines `fn $name() -> *mut $type`: the calling thread's own cell of `$type`, all zero
/// bytes when the thread starts, with no destructor (so it stays valid through every other
/// thread-exit destructor). On x86_64 the cell is an initial-exec TLS symbol of `$bytes` bytes
/// in `.tbss` (as the heap slot is), so the library needs no Rust standard library for its
/// thread-locals; elsewhere a `const` Rust thread-local.
macro_rules! thread_cell {
    ($(#[$meta:meta])* $vis:vis fn $name:ident() -> $type:ty = $symbol:literal, $bytes:literal) => {
        $(#[$meta])*
        #[cfg(target_arch = "x86_64")]
        #[inline(always)]
        $vis fn $name() -> *mut $type {
            const _: () = assert!(
                core::mem::size_of::<$type>() <= $bytes && core::mem::align_of::<$type>() <= 8
            );
            let cell: *mut $type;
            // SAFETY: reads the thread pointer (`fs:0`, which points to itself on x86_64 Linux)
            // and the symbol's TLS offset from the GOT entry of its `@gottpoff` relocation;
            // nothing is written, and both are fixed for the calling thread.
            unsafe {
                core::arch::asm!(
                    "mov {0}, qword ptr fs:[0]",
                    concat!("add {0}, qword ptr [rip + ", $symbol, "@GOTTPOFF]"),
                    out(reg) cell,
                    options(pure, readonly, nostack)
                );
            }
            cell
        }

        #[cfg(target_arch = "x86_64")]
        core::arch::global_asm!(
            ".pushsection .tbss,\"awT\",@nobits",
            ".p2align 3",
            concat!(".globl ", $symbol),
            concat!(".hidden ", $symbol),
            concat!(".type ", $symbol, ", @object"),
            concat!(".size ", $symbol, ", ", $bytes),
            concat!($symbol, ":"),
            concat!(".zero ", $bytes),
            ".popsection",
        );

        $(#[$meta])*
        #[cfg(not(target_arch = "x86_64"))]
        $vis fn $name() -> *mut $type {
            thread_local! {
                // SAFETY: all zero bytes are a valid `$type` (the macro's contract).
                static CELL: core::cell::UnsafeCell<$type> =
                    const { core::cell::UnsafeCell::new(unsafe { core::mem::zeroed() }) };
            }
            CELL.with(|cell| cell.get())
        }
    };
}
pub(crate) use thread_cell;

thread_cell! {
    /// Set (non-zero) when the thread's heap was retired at its exit: later calls (other
    /// thread-exit destructors) go to the node heaps directly. Read on slow paths only.
    fn retired() -> bool = "nodalloc_thread_retired", 8
}

/// True once the thread's heap was retired.
pub fn is_retired() -> bool {
    // SAFETY: the calling thread's own cell, which only it reads or writes.
    unsafe { *retired() }
}

/// Detaches the thread's heap for good (its exit).
pub fn retire() {
    // SAFETY: as in `is_retired`.
    unsafe { *retired() = true };
    set(detached());
}

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tdata,\"awT\",@progbits",
    ".p2align 3",
    ".globl nodalloc_thread_heap",
    ".hidden nodalloc_thread_heap",
    ".type nodalloc_thread_heap, @object",
    ".size nodalloc_thread_heap, 8",
    "nodalloc_thread_heap:",
    ".quad {detached}",
    ".popsection",
    detached = sym DETACHED,
);

/// The slot's offset from the thread pointer, from the GOT (fixed once the library is loaded).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn slot_offset() -> usize {
    let offset: usize;
    // SAFETY: reads the slot's TLS offset from the GOT entry the linker made for the
    // `@gottpoff` relocation; no memory is written.
    unsafe {
        core::arch::asm!(
            "mov {0}, qword ptr [rip + nodalloc_thread_heap@GOTTPOFF]",
            out(reg) offset,
            options(pure, readonly, nostack, preserves_flags)
        );
    }
    offset
}

/// The calling thread's heap, [`detached`] when it has none: one load through `fs` at the
/// slot's offset.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn get() -> *mut ThreadHeap {
    let heap: *mut ThreadHeap;
    // SAFETY: `fs` is the thread pointer on x86_64 Linux and `slot_offset` the slot's offset from
    // it, so this reads the calling thread's own 8-aligned slot, which only it reads or writes.
    unsafe {
        core::arch::asm!(
            "mov {0}, qword ptr fs:[{1}]",
            out(reg) heap,
            in(reg) slot_offset(),
            options(readonly, nostack, preserves_flags)
        );
    }
    heap
}

/// Sets the calling thread's heap.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn set(heap: *mut ThreadHeap) {
    // SAFETY: as in `get`: the calling thread's own slot.
    unsafe {
        core::arch::asm!(
            "mov qword ptr fs:[{1}], {0}",
            in(reg) heap,
            in(reg) slot_offset(),
            options(nostack, preserves_flags)
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
thread_local! {
    static SLOT: Cell<*mut ThreadHeap> = const { Cell::new(core::ptr::null_mut()) };
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn get() -> *mut ThreadHeap {
    let heap = SLOT.with(|slot| slot.get());
    if heap.is_null() {
        detached()
    } else {
        heap
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn set(heap: *mut ThreadHeap) {
    SLOT.with(|slot| slot.set(heap))
}
