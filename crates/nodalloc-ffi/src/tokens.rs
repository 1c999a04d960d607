//! Clang's allocation tokens (`-fsanitize=alloc-token`, Clang 22 and later): the compiler
//! rewrites each allocation call into a variant that takes one more argument, a token it
//! chose for the call (`malloc(n)` becomes `__alloc_token_malloc(n, token)`, `new T` becomes
//! `__alloc_token__Znwm(sizeof(T), token)`). By default the token is a hash of the allocated
//! type's name (its top bit set for types that hold pointers); other modes give one token per
//! call site. With call-site partitions on (`NODALLOC_CALLSITE`), a token is the partition key
//! in place of the return address: no frame read and no walk, and objects of one type live
//! together wherever in the program they are allocated.
//!
//! Token 0 is what Clang gives a call whose type it could not infer (`realloc(NULL, n)`, a
//! computed size): it says nothing, so those calls are served as the plain function would
//! serve them (a tail call, so its call-site stub reads our caller and the partition is the
//! call site's). With partitions off the token changes nothing: the thread cache serves the
//! call as it serves the plain one.
//!
//! Every function of the family that Clang instruments by default is here: `malloc`,
//! `calloc`, `realloc`, `reallocarray`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//! `posix_memalign`, C++'s eight replaceable `operator new` forms and their eight hot/cold
//! forms (see `tiers.rs`). The token always comes last.

use crate::aligned::{aligned_alloc_at, memalign_at, posix_memalign_at, pvalloc_at, valloc_at};
use crate::cxx::{
    new_aligned_nothrow_target, new_aligned_target, new_array_aligned_nothrow_target,
    new_array_aligned_target, new_array_nothrow_target, new_array_target, new_nothrow_target,
    new_target,
};
use crate::glibc::reallocarray_at;
use crate::plain::MALLOC_ALIGN;
use crate::secure::Kind;
use crate::tiers::{aligned, hot_cold_operators};
use crate::{calloc_at, calloc_hit, malloc_slow, pop_small, realloc_at, tls};
use core::ffi::{c_int, c_void};

/// The token Clang gives a call it knows no type for.
const FALLBACK: usize = 0;

/// Defines the token entry points: the fallback token goes to `$plain` (the plain function,
/// tail-called); any other is the call site passed to `$at` (the plain function's target past
/// its call-site stub, which takes the site and a frame pointer; 0 for the frame: a token is
/// never walked), after `$hit` when given (the thread cache's pop, which answers when it has a
/// block: with partitions on the cache stays empty and it never does).
macro_rules! token_entries {
    ($(
        $(#[$doc:meta])*
        $abi:literal $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            => $plain:path, $at:path $(, hit $hit:expr)?;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the plain function; `token` is any value.
        #[no_mangle]
        pub unsafe extern $abi fn $name($($arg: $ty,)* token: usize) -> $ret {
            if token == FALLBACK {
                // SAFETY: forwarded contract.
                return unsafe { $plain($($arg),*) };
            }
            $(
                if let Some(answer) = $hit {
                    return answer;
                }
            )?
            // SAFETY: forwarded contract; the token stands for the call site. (Some targets
            // are safe functions, hence the allowance.)
            #[allow(unused_unsafe)]
            unsafe { $at($($arg,)* token, 0) }
        }
    )*};
}

/// The thread cache's block for `size` at the default alignment, if it has one.
#[inline(always)]
fn cached(size: usize) -> Option<*mut c_void> {
    let p = pop_small(size);
    (!p.is_null()).then_some(p as *mut c_void)
}

/// `malloc`'s miss path with `site` as the call site.
extern "C" fn malloc_token_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    malloc_slow(size, tls::get() as *mut c_void, site, frame) as *mut c_void
}

/// `calloc`'s path with `site` as the call site, after the thread cache's block zeroed.
extern "C" fn calloc_token_at(count: usize, size: usize, site: usize, frame: usize) -> *mut c_void {
    if let Some(p) = calloc_hit(count, size) {
        return p;
    }
    calloc_at(count, size, site, frame)
}

token_entries! {
    /// `malloc` with an allocation token.
    "C" __alloc_token_malloc(size: usize) -> *mut c_void
        => crate::malloc, malloc_token_at, hit cached(size);
    /// `calloc` with an allocation token.
    "C" __alloc_token_calloc(count: usize, size: usize) -> *mut c_void
        => crate::calloc, calloc_token_at;
    /// `realloc` with an allocation token (the site of the block it may move to).
    "C" __alloc_token_realloc(ptr: *mut c_void, size: usize) -> *mut c_void
        => crate::realloc, realloc_at;
    /// `reallocarray` with an allocation token.
    "C" __alloc_token_reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void
        => crate::glibc::reallocarray, reallocarray_at;
    /// `aligned_alloc` with an allocation token.
    "C" __alloc_token_aligned_alloc(align: usize, size: usize) -> *mut c_void
        => crate::aligned::aligned_alloc, aligned_alloc_at;
    /// `memalign` with an allocation token.
    "C" __alloc_token_memalign(align: usize, size: usize) -> *mut c_void
        => crate::aligned::memalign, memalign_at;
    /// `valloc` with an allocation token.
    "C" __alloc_token_valloc(size: usize) -> *mut c_void
        => crate::aligned::valloc, valloc_at;
    /// `pvalloc` with an allocation token.
    "C" __alloc_token_pvalloc(size: usize) -> *mut c_void
        => crate::aligned::pvalloc, pvalloc_at;
    /// `posix_memalign` with an allocation token.
    "C" __alloc_token_posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int
        => crate::aligned::posix_memalign, posix_memalign_at;
    /// `operator new(size_t)` with an allocation token.
    "C-unwind" __alloc_token__Znwm(size: usize) -> *mut c_void
        => crate::cxx::_Znwm, new_target, hit cached(size);
    /// `operator new[](size_t)` with an allocation token.
    "C-unwind" __alloc_token__Znam(size: usize) -> *mut c_void
        => crate::cxx::_Znam, new_array_target, hit cached(size);
    /// `operator new(size_t, const std::nothrow_t&)` with an allocation token.
    "C-unwind" __alloc_token__ZnwmRKSt9nothrow_t(size: usize, nothrow: *const c_void)
        -> *mut c_void => crate::cxx::_ZnwmRKSt9nothrow_t, new_nothrow_target,
        hit cached(size);
    /// `operator new[](size_t, const std::nothrow_t&)` with an allocation token.
    "C-unwind" __alloc_token__ZnamRKSt9nothrow_t(size: usize, nothrow: *const c_void)
        -> *mut c_void => crate::cxx::_ZnamRKSt9nothrow_t, new_array_nothrow_target,
        hit cached(size);
    /// `operator new(size_t, std::align_val_t)` with an allocation token.
    "C-unwind" __alloc_token__ZnwmSt11align_val_t(size: usize, align: usize) -> *mut c_void
        => crate::cxx::_ZnwmSt11align_val_t, new_aligned_target;
    /// `operator new[](size_t, std::align_val_t)` with an allocation token.
    "C-unwind" __alloc_token__ZnamSt11align_val_t(size: usize, align: usize) -> *mut c_void
        => crate::cxx::_ZnamSt11align_val_t, new_array_aligned_target;
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&)` with an allocation
    /// token.
    "C-unwind" __alloc_token__ZnwmSt11align_val_tRKSt9nothrow_t(size: usize, align: usize,
        nothrow: *const c_void) -> *mut c_void
        => crate::cxx::_ZnwmSt11align_val_tRKSt9nothrow_t, new_aligned_nothrow_target;
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&)` with an allocation
    /// token.
    "C-unwind" __alloc_token__ZnamSt11align_val_tRKSt9nothrow_t(size: usize, align: usize,
        nothrow: *const c_void) -> *mut c_void
        => crate::cxx::_ZnamSt11align_val_tRKSt9nothrow_t, new_array_aligned_nothrow_target;
}

// The hot/cold operators with a token: a cold hint tries far memory as the hot/cold operator
// does, everything else is the token form without the hint.
hot_cold_operators! {
    /// `operator new(size_t, __hot_cold_t)` with an allocation token.
    __alloc_token__Znwm12__hot_cold_t(), token align MALLOC_ALIGN, Kind::New
        => __alloc_token__Znwm;
    /// `operator new[](size_t, __hot_cold_t)` with an allocation token.
    __alloc_token__Znam12__hot_cold_t(), token align MALLOC_ALIGN, Kind::NewArray
        => __alloc_token__Znam;
    /// `operator new(size_t, const std::nothrow_t&, __hot_cold_t)` with an allocation token.
    __alloc_token__ZnwmRKSt9nothrow_t12__hot_cold_t(nothrow: *const c_void), token
        align MALLOC_ALIGN, Kind::New => __alloc_token__ZnwmRKSt9nothrow_t;
    /// `operator new[](size_t, const std::nothrow_t&, __hot_cold_t)` with an allocation token.
    __alloc_token__ZnamRKSt9nothrow_t12__hot_cold_t(nothrow: *const c_void), token
        align MALLOC_ALIGN, Kind::NewArray => __alloc_token__ZnamRKSt9nothrow_t;
    /// `operator new(size_t, std::align_val_t, __hot_cold_t)` with an allocation token.
    __alloc_token__ZnwmSt11align_val_t12__hot_cold_t(align: usize), token align aligned(align),
        Kind::New => __alloc_token__ZnwmSt11align_val_t;
    /// `operator new[](size_t, std::align_val_t, __hot_cold_t)` with an allocation token.
    __alloc_token__ZnamSt11align_val_t12__hot_cold_t(align: usize), token align aligned(align),
        Kind::NewArray => __alloc_token__ZnamSt11align_val_t;
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&, __hot_cold_t)` with an
    /// allocation token.
    __alloc_token__ZnwmSt11align_val_tRKSt9nothrow_t12__hot_cold_t(align: usize,
        nothrow: *const c_void), token align aligned(align), Kind::New
        => __alloc_token__ZnwmSt11align_val_tRKSt9nothrow_t;
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&, __hot_cold_t)` with an
    /// allocation token.
    __alloc_token__ZnamSt11align_val_tRKSt9nothrow_t12__hot_cold_t(align: usize,
        nothrow: *const c_void), token align aligned(align), Kind::NewArray
        => __alloc_token__ZnamSt11align_val_tRKSt9nothrow_t;
}
