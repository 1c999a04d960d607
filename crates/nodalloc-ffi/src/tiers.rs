//! Memory tiers from C and C++: `nodalloc_malloc_cold` and `nodalloc_malloc_tier` of
//! `nodalloc.h`, and the hot/cold `operator new` family that tcmalloc defines and LLVM's
//! MemProf (`-optimize-hot-cold-new`) emits: `operator new(size_t, __hot_cold_t)` and its
//! nothrow, aligned and array forms, where `__hot_cold_t` is a `uint8_t` hint, 0 the coldest
//! and 255 the hottest. A hint below [`COLD_BELOW`] is cold: the block comes from the far node
//! of the calling thread's node (its own bags and spans there, so `nodalloc_node_of` names the
//! far node, and `free`/`delete` send it back there). Everything else, and every request on a
//! machine without far memory or when the far node has no memory left, is served as the plain
//! form would serve it, through this library's own operator (a tail call, so its call-site
//! stub still sees the caller).

use crate::extras::malloc_on;
use crate::plain::{heap, set_errno, MALLOC_ALIGN};
use crate::secure::Kind;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use nodalloc_core::raw;

/// `NODALLOC_TIER_NEAR` of `nodalloc.h`.
const TIER_NEAR: c_int = 0;
/// `NODALLOC_TIER_FAR` of `nodalloc.h`.
const TIER_FAR: c_int = 1;

/// Hints below this are cold (tcmalloc's rule: the top half of the range is hot).
pub const COLD_BELOW: u8 = 128;

/// A block of far memory for `size` bytes at `align`, recorded as `kind`; null without far
/// memory or when the far node (and the nodes it spills to) has none left.
pub(crate) fn far(size: usize, align: usize, kind: Kind) -> *mut c_void {
    if align == 0 {
        return null_mut();
    }
    match raw::far_node(heap().as_deref()) {
        Some(node) => malloc_on(size, align, node, kind),
        None => null_mut(),
    }
}

/// Allocates in memory tier `tier` (near: as `malloc`; far: on the far node of the calling
/// thread's node, near without far memory); NULL + EINVAL for an unknown tier, NULL + ENOMEM
/// when memory runs out.
#[no_mangle]
pub extern "C" fn nodalloc_malloc_tier(size: usize, tier: c_int) -> *mut c_void {
    match tier {
        // SAFETY: `malloc`'s contract is `size` alone.
        TIER_NEAR => unsafe { crate::malloc(size) },
        TIER_FAR => nodalloc_malloc_cold(size),
        _ => {
            set_errno(libc::EINVAL);
            null_mut()
        }
    }
}

/// Allocates `size` bytes of far memory: on the far node of the calling thread's node, or as
/// `malloc` on a machine without far memory or when the far tier is full (its limit reached or
/// its memory used up; with `NODALLOC_TIER_FULL=fail` that is NULL + ENOMEM instead). NULL +
/// ENOMEM when memory runs out.
#[no_mangle]
pub extern "C" fn nodalloc_malloc_cold(size: usize) -> *mut c_void {
    let p = far(size, MALLOC_ALIGN, Kind::Malloc);
    if !p.is_null() {
        return p;
    }
    if raw::tier_bound() && raw::far_node(heap().as_deref()).is_some() {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    // SAFETY: `malloc`'s contract is `size` alone.
    unsafe { crate::malloc(size) }
}

/// Sets a hard limit on the bytes committed in tier `tier` (0 removes it), as
/// `NODALLOC_NEAR_LIMIT` and `NODALLOC_FAR_LIMIT` do. 0 on success; -1 + EINVAL for an unknown
/// tier, -1 + ENOMEM if the heap cannot start.
#[no_mangle]
pub extern "C" fn nodalloc_set_tier_limit(tier: c_int, bytes: usize) -> c_int {
    let tier = match tier {
        TIER_NEAR => nodalloc_core::Tier::Near,
        TIER_FAR => nodalloc_core::Tier::Far,
        _ => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    if nodalloc_core::set_tier_limit(tier, bytes) {
        0
    } else {
        set_errno(libc::ENOMEM);
        -1
    }
}

/// Defines the hot/cold operators: a cold hint tries far memory at `$align` as `$kind`, and
/// everything else (a hot hint, no far memory, a full far node) is `$plain`, this library's
/// operator of the same form without the hint. `token` adds Clang's allocation token as the
/// last argument (`tokens.rs`), passed on to `$plain`.
macro_rules! hot_cold_operators {
    ($(
        $(#[$doc:meta])*
        $name:ident($($arg:ident: $ty:ty),*) $(, $token:ident)? align $align:expr, $kind:expr
            => $plain:path;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// C++'s contract for this operator.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            size: usize,
            $($arg: $ty,)*
            hint: u8
            $(, $token: usize)?
        ) -> *mut c_void {
            if hint < $crate::tiers::COLD_BELOW {
                let p = $crate::tiers::far(size, $align, $kind);
                if !p.is_null() {
                    return p;
                }
            }
            // SAFETY: forwarded contract (the same operator without the hint).
            unsafe { $plain(size $(, $arg)* $(, $token)?) }
        }
    )*};
}
pub(crate) use hot_cold_operators;

hot_cold_operators! {
    /// `operator new(size_t, __hot_cold_t)`.
    _Znwm12__hot_cold_t() align MALLOC_ALIGN, Kind::New => crate::cxx::_Znwm;
    /// `operator new[](size_t, __hot_cold_t)`.
    _Znam12__hot_cold_t() align MALLOC_ALIGN, Kind::NewArray => crate::cxx::_Znam;
    /// `operator new(size_t, const std::nothrow_t&, __hot_cold_t)`.
    _ZnwmRKSt9nothrow_t12__hot_cold_t(nothrow: *const c_void) align MALLOC_ALIGN, Kind::New
        => crate::cxx::_ZnwmRKSt9nothrow_t;
    /// `operator new[](size_t, const std::nothrow_t&, __hot_cold_t)`.
    _ZnamRKSt9nothrow_t12__hot_cold_t(nothrow: *const c_void) align MALLOC_ALIGN,
        Kind::NewArray => crate::cxx::_ZnamRKSt9nothrow_t;
    /// `operator new(size_t, std::align_val_t, __hot_cold_t)`.
    _ZnwmSt11align_val_t12__hot_cold_t(align: usize) align aligned(align), Kind::New
        => crate::cxx::_ZnwmSt11align_val_t;
    /// `operator new[](size_t, std::align_val_t, __hot_cold_t)`.
    _ZnamSt11align_val_t12__hot_cold_t(align: usize) align aligned(align), Kind::NewArray
        => crate::cxx::_ZnamSt11align_val_t;
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&, __hot_cold_t)`.
    _ZnwmSt11align_val_tRKSt9nothrow_t12__hot_cold_t(align: usize, nothrow: *const c_void)
        align aligned(align), Kind::New => crate::cxx::_ZnwmSt11align_val_tRKSt9nothrow_t;
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&, __hot_cold_t)`.
    _ZnamSt11align_val_tRKSt9nothrow_t12__hot_cold_t(align: usize, nothrow: *const c_void)
        align aligned(align), Kind::NewArray => crate::cxx::_ZnamSt11align_val_tRKSt9nothrow_t;
}

/// The alignment a far block of an aligned `new` takes: `align` when it is a power of two,
/// else 0 (no far block: the plain operator then refuses the alignment as C++ requires).
pub(crate) fn aligned(align: usize) -> usize {
    if align.is_power_of_two() {
        align.max(MALLOC_ALIGN)
    } else {
        0
    }
}
