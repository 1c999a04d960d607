//! C++'s `operator new` and `operator delete`, every replaceable form, so that a C++ program's
//! allocations have their own call sites (the `new` expression's caller, not one place inside
//! libstdc++'s `operator new`): call-site partitions separate them as they do C's `malloc`
//! calls, and `delete` goes straight to `free`.
//!
//! Each `new` enters through a call-site stub (`callsite.rs`) and allocates as `malloc` or the
//! aligned entry points do. When that fails, C++ wants the new-handler loop and, for the
//! throwing forms, `std::bad_alloc`: the same operator of the next library (libstdc++'s, found
//! once with `dlsym(RTLD_NEXT, …)`) is called, which retries through our `malloc`, runs the
//! handlers and throws. Hence the `C-unwind` ABI: the exception unwinds through these
//! functions to the `new` expression. Without a next operator (a program with no C++ runtime
//! could not call these), the process aborts with a message.

use crate::callsite::entry_stub;
use crate::secure::{self, Kind};
use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};
use nodalloc_core::raw::{class_of_malloc, ClassSlot, ThreadHeap};

/// The next library's definition of one operator, looked up on first use.
struct Next {
    name: &'static CStr,
    address: AtomicUsize,
}

impl Next {
    const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            address: AtomicUsize::new(0),
        }
    }

    /// The next definition, or an abort naming the operator (only failing allocations come
    /// here, so the lookup, which may allocate, runs outside the allocator's own work).
    fn address(&self) -> usize {
        let mut address = self.address.load(Ordering::Acquire);
        if address == 0 {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other precondition.
            address = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
            if address == 0 {
                nodalloc_core::raw::fatal_out_of_memory(self.name);
            }
            self.address.store(address, Ordering::Release);
        }
        address
    }
}

static NEW: Next = Next::new(c"_Znwm");
static NEW_ARRAY: Next = Next::new(c"_Znam");
static NEW_NOTHROW: Next = Next::new(c"_ZnwmRKSt9nothrow_t");
static NEW_ARRAY_NOTHROW: Next = Next::new(c"_ZnamRKSt9nothrow_t");
static NEW_ALIGNED: Next = Next::new(c"_ZnwmSt11align_val_t");
static NEW_ARRAY_ALIGNED: Next = Next::new(c"_ZnamSt11align_val_t");
static NEW_ALIGNED_NOTHROW: Next = Next::new(c"_ZnwmSt11align_val_tRKSt9nothrow_t");
static NEW_ARRAY_ALIGNED_NOTHROW: Next = Next::new(c"_ZnamSt11align_val_tRKSt9nothrow_t");

type New = unsafe extern "C-unwind" fn(usize) -> *mut c_void;
type NewNothrow = unsafe extern "C-unwind" fn(usize, *const c_void) -> *mut c_void;
type NewAligned = unsafe extern "C-unwind" fn(usize, usize) -> *mut c_void;
type NewAlignedNothrow = unsafe extern "C-unwind" fn(usize, usize, *const c_void) -> *mut c_void;

/// `p`, or when it is null (no memory), the answer of the next library's operator, which
/// `call` calls with the operator's own arguments.
fn or_next(p: *mut c_void, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    if p.is_null() {
        call()
    } else {
        p
    }
}

/// An aligned block from `site`, or null; `align` is a power of two (C++ guarantees it for
/// `align_val_t`), checked here all the same: anything else gets null, and so goes to the next
/// operator.
/// `new` of `size` bytes at `align` (a power of two, else null) as `kind` (`new` or `new[]`,
/// which secure mode records to check the matching `delete`).
fn new_at(size: usize, align: usize, kind: Kind, site: usize, frame: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        return core::ptr::null_mut();
    }
    if secure::on() {
        return secure::alloc(size, align, kind, site, frame);
    }
    crate::allocate_aligned(align, size, site, frame)
}

/// Defines the stubs' targets: each allocates with `$alloc` (given the operator's arguments
/// and `$site`, `$frame`) and, on failure, calls the next library's operator `$next`.
macro_rules! new_targets {
    ($(
        $target:ident($($arg:ident: $ty:ty),*; $site:ident, $frame:ident) = $alloc:expr,
            next $next:ident: $signature:ty;
    )*) => {$(
        pub(crate) extern "C-unwind" fn $target($($arg: $ty,)* $site: usize, $frame: usize) -> *mut c_void {
            or_next($alloc, || {
                // SAFETY: the next library's definition of this operator, whose signature
                // `$signature` is.
                unsafe { core::mem::transmute::<usize, $signature>($next.address())($($arg),*) }
            })
        }
    )*};
}

const PLAIN: usize = crate::plain::MALLOC_ALIGN;

new_targets! {
    new_target(size: usize; site, frame) = new_at(size, PLAIN, Kind::New, site, frame),
        next NEW: New;
    new_array_target(size: usize; site, frame) = new_at(size, PLAIN, Kind::NewArray, site, frame),
        next NEW_ARRAY: New;
    new_nothrow_target(size: usize, nothrow: *const c_void; site, frame)
        = new_at(size, PLAIN, Kind::New, site, frame), next NEW_NOTHROW: NewNothrow;
    new_array_nothrow_target(size: usize, nothrow: *const c_void; site, frame)
        = new_at(size, PLAIN, Kind::NewArray, site, frame), next NEW_ARRAY_NOTHROW: NewNothrow;
    new_aligned_target(size: usize, align: usize; site, frame)
        = new_at(size, align, Kind::New, site, frame), next NEW_ALIGNED: NewAligned;
    new_array_aligned_target(size: usize, align: usize; site, frame)
        = new_at(size, align, Kind::NewArray, site, frame), next NEW_ARRAY_ALIGNED: NewAligned;
    new_aligned_nothrow_target(size: usize, align: usize, nothrow: *const c_void; site, frame)
        = new_at(size, align, Kind::New, site, frame), next NEW_ALIGNED_NOTHROW: NewAlignedNothrow;
    new_array_aligned_nothrow_target(size: usize, align: usize, nothrow: *const c_void;
        site, frame) = new_at(size, align, Kind::NewArray, site, frame),
        next NEW_ARRAY_ALIGNED_NOTHROW: NewAlignedNothrow;
}

entry_stub!(extern "C-unwind" fn nodalloc_new_entry(size: usize) -> *mut c_void
    => new_target, site: "rsi", frame: "rdx");
entry_stub!(extern "C-unwind" fn nodalloc_new_array_entry(size: usize) -> *mut c_void
    => new_array_target, site: "rsi", frame: "rdx");
entry_stub!(extern "C-unwind" fn nodalloc_new_nothrow_entry(size: usize, nothrow: *const c_void)
    -> *mut c_void => new_nothrow_target, site: "rdx", frame: "rcx");
entry_stub!(extern "C-unwind" fn nodalloc_new_array_nothrow_entry(size: usize,
    nothrow: *const c_void) -> *mut c_void => new_array_nothrow_target, site: "rdx", frame: "rcx");
entry_stub!(extern "C-unwind" fn nodalloc_new_aligned_entry(size: usize, align: usize)
    -> *mut c_void => new_aligned_target, site: "rdx", frame: "rcx");
entry_stub!(extern "C-unwind" fn nodalloc_new_array_aligned_entry(size: usize, align: usize)
    -> *mut c_void => new_array_aligned_target, site: "rdx", frame: "rcx");
entry_stub!(extern "C-unwind" fn nodalloc_new_aligned_nothrow_entry(size: usize, align: usize,
    nothrow: *const c_void) -> *mut c_void
    => new_aligned_nothrow_target, site: "rcx", frame: "r8");
entry_stub!(extern "C-unwind" fn nodalloc_new_array_aligned_nothrow_entry(size: usize,
    align: usize, nothrow: *const c_void) -> *mut c_void
    => new_array_aligned_nothrow_target, site: "rcx", frame: "r8");

/// Defines exported `new` operators at the default alignment: `malloc`'s fast path (the
/// thread's cache, the double-free mark cleared), and on a miss a tail jump to their call-site
/// stubs, which see our caller's return address. Secure mode and call-site partitions keep the
/// cache empty, so every call of theirs takes the stub (the block's kind recorded, the
/// partition's list).
macro_rules! plain_new_operators {
    ($($(#[$doc:meta])* $name:ident(size: usize $(, $arg:ident: $ty:ty)*) => $stub:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// C++'s contract for this operator.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(size: usize $(, $arg: $ty)*) -> *mut c_void {
            let p = crate::pop_small(size);
            if !p.is_null() {
                return p as *mut c_void;
            }
            // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
            unsafe { $stub(size $(, $arg)*) }
        }
    )*};
}

plain_new_operators! {
    /// `operator new(size_t)`.
    _Znwm(size: usize) => nodalloc_new_entry;
    /// `operator new[](size_t)`.
    _Znam(size: usize) => nodalloc_new_array_entry;
    /// `operator new(size_t, const std::nothrow_t&)`.
    _ZnwmRKSt9nothrow_t(size: usize, nothrow: *const c_void) => nodalloc_new_nothrow_entry;
    /// `operator new[](size_t, const std::nothrow_t&)`.
    _ZnamRKSt9nothrow_t(size: usize, nothrow: *const c_void) => nodalloc_new_array_nothrow_entry;
}

/// Defines exported aligned `new` operators: the thread's cache at the alignment
/// (`pop_aligned`, as the aligned C entry points), and on a miss (or an alignment that is no
/// power of two) a tail jump to their call-site stubs.
macro_rules! aligned_new_operators {
    ($($(#[$doc:meta])* $name:ident(size: usize, align: usize $(, $arg:ident: $ty:ty)*)
        => $stub:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// C++'s contract for this operator.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(size: usize, align: usize $(, $arg: $ty)*)
            -> *mut c_void {
            if align.is_power_of_two() {
                let p = crate::pop_aligned(align, size);
                if !p.is_null() {
                    return p as *mut c_void;
                }
            }
            // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
            unsafe { $stub(size, align $(, $arg)*) }
        }
    )*};
}

aligned_new_operators! {
    /// `operator new(size_t, std::align_val_t)`.
    _ZnwmSt11align_val_t(size: usize, align: usize) => nodalloc_new_aligned_entry;
    /// `operator new[](size_t, std::align_val_t)`.
    _ZnamSt11align_val_t(size: usize, align: usize) => nodalloc_new_array_aligned_entry;
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&)`.
    _ZnwmSt11align_val_tRKSt9nothrow_t(size: usize, align: usize, nothrow: *const c_void)
        => nodalloc_new_aligned_nothrow_entry;
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&)`.
    _ZnamSt11align_val_tRKSt9nothrow_t(size: usize, align: usize, nothrow: *const c_void)
        => nodalloc_new_array_aligned_nothrow_entry;
}

/// The hit of a `delete` operator or of C23's `free_sized`: `free`'s hit, and for a sized one
/// (`check`) a block whose class does not hold the size aborts naming it (`kind`: the
/// operator's family, for the message). False, touching nothing, for everything the hit
/// refuses (null, other nodes, large blocks), in secure mode and before the process decides
/// it (no heap's home view matches then), for the caller's miss.
///
/// # Safety
/// The caller's contract: `ptr` is null or a live block (of `check` bytes) it gives up.
#[inline(always)]
pub(crate) unsafe fn sized_free_hit(ptr: *mut c_void, check: Option<usize>, kind: Kind) -> bool {
    let heap = crate::tls::get();
    let Some(size) = check else {
        // SAFETY: the slot holds this thread's heap or the detached one; the caller gives the
        // block up.
        return unsafe { ThreadHeap::free_hit(heap, ptr as *mut u8, crate::screen::SCREEN) };
    };
    let check_size = |slot: ClassSlot| {
        // SAFETY: the hit matched, so `heap` is the thread's own (the detached heap matches
        // nothing), and only its lookup table is read.
        let fits = match unsafe { &*heap }.slots().slot_of_small_malloc(size) {
            // The heap's own table for sizes up to 1 KiB, as `malloc`'s hit reads it.
            Some(found) => found == slot,
            None => class_of_malloc(size) == Some(slot.class()),
        };
        if !fits {
            wrong_size(ptr, kind);
        }
    };
    // SAFETY: as above.
    unsafe { ThreadHeap::free_hit_checked(heap, ptr as *mut u8, crate::screen::SCREEN, check_size) }
}

/// What [`sized_free_hit`] refused: secure mode checks the block (`kind`, and `sized`, the
/// size it checks), deciding secure mode first if the process has not; otherwise `free`'s
/// slow path, which checks no size. `extern "C"` (never called from C: its arguments need no C
/// layout) so that it unwinds into no caller and the operators reach it by a tail jump, with
/// no frame of their own.
///
/// # Safety
/// As for [`sized_free_hit`].
#[allow(improper_ctypes_definitions)]
#[inline(never)]
pub(crate) unsafe extern "C" fn sized_free_miss(
    ptr: *mut c_void,
    kind: Kind,
    sized: Option<usize>,
) {
    if secure::on() {
        // SAFETY: forwarded contract.
        return unsafe { secure::free(ptr, kind, sized) };
    }
    // SAFETY: forwarded contract.
    unsafe { crate::free_slow(ptr as *mut u8) }
}

#[cold]
#[inline(never)]
fn wrong_size(ptr: *mut c_void, kind: Kind) -> ! {
    nodalloc_core::raw::report_corruption(secure::wrong_size_message(kind), ptr as *const u8)
}

/// The size a `delete` operator checks outside secure mode, if it checks one.
macro_rules! checked_size {
    () => {
        None::<usize>
    };
    ($size:expr) => {
        Some($size)
    };
}

/// Defines exported `delete` operators: each frees its pointer; in secure mode it also checks
/// that the block came from the matching `new` (`kind`) and, for a sized `delete`, that the size
/// is the one `new` was asked for (`sized`). Outside secure mode, a plain sized `delete` of a
/// block of the thread's node checks that the size is of the block's class (`check`); the
/// alignment is not checked.
macro_rules! delete_operators {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) => $kind:expr, $sized:expr
        $(, check $check:expr)?;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// C++'s contract for this operator: `ptr` is null or a live block from `new`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(ptr: *mut c_void, $($arg: $ty),*) {
            // SAFETY: forwarded contract.
            if unsafe { sized_free_hit(ptr, checked_size!($($check)?), $kind) } {
                return;
            }
            // SAFETY: forwarded contract (a tail call).
            unsafe { sized_free_miss(ptr, $kind, $sized) }
        }
    )*};
}

delete_operators! {
    /// `operator delete(void*)`.
    _ZdlPv() => Kind::New, None;
    /// `operator delete[](void*)`.
    _ZdaPv() => Kind::NewArray, None;
    /// `operator delete(void*, size_t)`.
    _ZdlPvm(size: usize) => Kind::New, Some(size), check size;
    /// `operator delete[](void*, size_t)`.
    _ZdaPvm(size: usize) => Kind::NewArray, Some(size), check size;
    /// `operator delete(void*, std::align_val_t)`.
    _ZdlPvSt11align_val_t(_align: usize) => Kind::New, None;
    /// `operator delete[](void*, std::align_val_t)`.
    _ZdaPvSt11align_val_t(_align: usize) => Kind::NewArray, None;
    /// `operator delete(void*, size_t, std::align_val_t)`.
    _ZdlPvmSt11align_val_t(size: usize, _align: usize) => Kind::New, Some(size);
    /// `operator delete[](void*, size_t, std::align_val_t)`.
    _ZdaPvmSt11align_val_t(size: usize, _align: usize) => Kind::NewArray, Some(size);
    /// `operator delete(void*, const std::nothrow_t&)`.
    _ZdlPvRKSt9nothrow_t(_nothrow: *const c_void) => Kind::New, None;
    /// `operator delete[](void*, const std::nothrow_t&)`.
    _ZdaPvRKSt9nothrow_t(_nothrow: *const c_void) => Kind::NewArray, None;
    /// `operator delete(void*, std::align_val_t, const std::nothrow_t&)`.
    _ZdlPvSt11align_val_tRKSt9nothrow_t(_align: usize, _nothrow: *const c_void) => Kind::New, None;
    /// `operator delete[](void*, std::align_val_t, const std::nothrow_t&)`.
    _ZdaPvSt11align_val_tRKSt9nothrow_t(_align: usize, _nothrow: *const c_void)
        => Kind::NewArray, None;
}
