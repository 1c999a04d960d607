//! The call site of an allocation, for call-site partitions (`NODALLOC_CALLSITE`).
//!
//! Each allocating entry point is entered through a stub of three instructions that reads the
//! return address at `[rsp]` — the caller's address, since the exported functions reach their
//! stubs by a tail jump and `malloc` keeps no stack frame — and the caller's frame pointer
//! (`rbp`, untouched so far), and passes both to the real function as extra arguments. A test
//! of the C ABI suite (`callsite.c`) pins that every entry still names its caller.
//!
//! With `NODALLOC_CALLSITE_DEPTH` = d > 1 the site is found d − 1 frames further up through
//! the frame-pointer chain: frame `f` holds the next frame's address at `[f]` and the return
//! address at `[f + 8]`. A program built without frame pointers keeps anything in `rbp`, so
//! every frame is checked before it is read: 8-aligned, above the current stack pointer,
//! below the top of the thread's stack (the end of the mapping that holds the stack pointer,
//! read once per thread from `/proc/self/maps`), and above the frame before it. The walk stops
//! at the first frame that fails, and the site is the last one it could read: a wrapper
//! without a frame pointer costs precision (its callers may share a partition), never a fault.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Declares `$stub`, which calls `$target` with the arguments it was given plus the return
/// address and the frame pointer in the next two argument registers (`$site`, `$frame`; on
/// other architectures a plain function passing 0 for both). `extern "C-unwind"` defines the
/// fallback with that ABI (C++ entry points, whose failure path throws); on x86_64 the stub is
/// declared `extern "C"` whatever `$abi`: callers only reach it by a tail jump, so no frame of
/// theirs is left when its target throws, and a call the compiler takes for one that cannot
/// unwind is one it keeps a tail jump (with panics aborting, a call that may unwind gets an
/// abort-on-unwind landing pad, and the frame that holds it). The C++ exception then passes
/// through the target's frame, whose personality lets it by (`os/message.rs` in the core).
macro_rules! entry_stub {
    (
        fn $stub:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            => $target:path, site: $site:literal, frame: $frame:literal
    ) => {
        entry_stub!(extern "C" fn $stub($($arg: $ty),*) -> $ret
            => $target, site: $site, frame: $frame);
    };
    (
        extern $abi:literal fn $stub:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            => $target:path, site: $site:literal, frame: $frame:literal
    ) => {
        #[cfg(target_arch = "x86_64")]
        core::arch::global_asm!(
            // A section of its own, as the compiler gives each function, so that the link can
            // place the stub with the code it runs with (`hot-code.ld`).
            concat!(".pushsection .text.", stringify!($stub), ",\"ax\",@progbits"),
            concat!(".globl ", stringify!($stub)),
            concat!(".hidden ", stringify!($stub)),
            concat!(".type ", stringify!($stub), ",@function"),
            concat!(stringify!($stub), ":"),
            concat!("mov ", $site, ", [rsp]"),
            concat!("mov ", $frame, ", rbp"),
            "jmp {target}",
            concat!(".size ", stringify!($stub), ", .-", stringify!($stub)),
            ".popsection",
            target = sym $target,
        );
        #[cfg(target_arch = "x86_64")]
        extern "C" {
            fn $stub($($arg: $ty),*) -> $ret;
        }
        #[cfg(not(target_arch = "x86_64"))]
        unsafe extern $abi fn $stub($($arg: $ty),*) -> $ret {
            // SAFETY: forwarded contract.
            unsafe { $target($($arg),*, 0, 0) }
        }
    };
}
pub(crate) use entry_stub;

/// `NODALLOC_CALLSITE_DEPTH`, once the allocator started (0: not read yet).
static DEPTH: AtomicUsize = AtomicUsize::new(0);

/// True when the call site is the return address itself (depth 1, once the allocator
/// started): the partition hit may use it as it is, with no walk that could call out.
#[inline(always)]
pub(crate) fn is_direct() -> bool {
    DEPTH.load(Ordering::Relaxed) == 1
}

/// The call site of an allocation entered with return address `site` and frame pointer `frame`.
#[inline]
pub(crate) fn resolve(site: usize, frame: usize) -> usize {
    let mut depth = DEPTH.load(Ordering::Relaxed);
    if depth == 0 {
        depth = nodalloc_core::raw::callsite_depth();
        DEPTH.store(depth, Ordering::Relaxed);
    }
    if depth <= 1 {
        return site;
    }
    walk(site, frame, depth)
}

#[cold]
#[inline(never)]
fn walk(mut site: usize, mut frame: usize, depth: usize) -> usize {
    let here = 0u8;
    let stack_pointer = &here as *const u8 as usize;
    let Some(top) = stack_top(stack_pointer) else {
        return site;
    };
    let mut floor = stack_pointer;
    for _ in 1..depth {
        if frame % 8 != 0 || frame <= floor || frame.saturating_add(16) > top {
            break;
        }
        // SAFETY: `frame` and `frame + 8` lie between the stack pointer and the top of the
        // mapping that holds the stack, all of it mapped and readable.
        let (next, return_address) = unsafe {
            (
                (frame as *const usize).read(),
                ((frame + 8) as *const usize).read(),
            )
        };
        site = return_address;
        floor = frame;
        frame = next;
    }
    site
}

crate::tls::thread_cell! {
    /// The thread's stack mapping `(start, end)` as last read, and how many times it was read.
    fn stack_seen() -> (usize, usize, u32) = "nodalloc_thread_stack", 24
}

/// Reads of `/proc/self/maps` a thread may make before it stops walking (a program that moves
/// its threads between stacks, e.g. coroutines, would otherwise read it on every call).
const MAX_MAP_READS: u32 = 16;

/// The end of the mapping that holds `stack_pointer`, or `None` when it cannot be told.
fn stack_top(stack_pointer: usize) -> Option<usize> {
    // SAFETY: the calling thread's own cell, which only it reads or writes.
    let (start, end, reads) = unsafe { *stack_seen() };
    if (start..end).contains(&stack_pointer) {
        return Some(end);
    }
    if reads >= MAX_MAP_READS {
        return None;
    }
    let found = nodalloc_core::raw::mapping_of(stack_pointer);
    let (start, end) = found.unwrap_or((0, 0));
    // SAFETY: as above.
    unsafe { *stack_seen() = (start, end, reads + 1) };
    found.map(|(_, end)| end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of frames built by hand: the walk follows it as deep as asked, and stops at a
    /// frame that points down the stack or out of it, keeping the last site it read.
    #[test]
    fn the_walk_follows_valid_frames_and_stops_at_bad_ones() {
        // Frames in an array on this stack, linked upwards: [next, return address].
        let mut frames = [0usize; 8];
        let base = frames.as_mut_ptr() as usize;
        frames[0] = base + 16; // frame 0 → frame 1
        frames[1] = 0x1111; // return address read from frame 0
        frames[2] = base + 32; // frame 1 → frame 2
        frames[3] = 0x2222;
        frames[4] = base; // frame 2 points back down: invalid as a next frame
        frames[5] = 0x3333;
        assert_eq!(walk(0xaaaa, base, 1), 0xaaaa);
        assert_eq!(walk(0xaaaa, base, 2), 0x1111);
        assert_eq!(walk(0xaaaa, base, 3), 0x2222);
        assert_eq!(walk(0xaaaa, base, 4), 0x3333);
        assert_eq!(
            walk(0xaaaa, base, 8),
            0x3333,
            "frame 3 is below frame 2: the walk stops"
        );
        assert_eq!(walk(0xaaaa, base + 1, 4), 0xaaaa, "misaligned");
        assert_eq!(walk(0xaaaa, 8, 4), 0xaaaa, "below the stack pointer");
        assert_eq!(
            walk(0xaaaa, usize::MAX - 7, 4),
            0xaaaa,
            "past the top of the stack"
        );
        core::hint::black_box(&mut frames);
    }
}
