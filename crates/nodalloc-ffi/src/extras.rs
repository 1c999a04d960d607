//! The `nodalloc_*` extras of `include/nodalloc.h`: statistics, the node of a block, allocation
//! on a given node, the memory limit and call-site partitions (memory tiers: `tiers.rs`).

use crate::plain::{handed_out, set_errno, MALLOC_ALIGN};
use crate::secure;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use nodalloc_core::raw;

/// Writes the statistics to `fd` without allocating.
#[no_mangle]
pub extern "C" fn nodalloc_stats_print(fd: c_int) {
    nodalloc_core::stats().write_to(fd);
}

/// Writes the heap profile (pprof's `profile.proto`) to the file at `path`: 0, or an errno
/// value (EINVAL for a null path, ENODATA with profiling off). Allocates nothing.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nodalloc_profile_dump(path: *const core::ffi::c_char) -> c_int {
    if path.is_null() {
        return libc::EINVAL;
    }
    if !raw::profile_on() {
        return libc::ENODATA;
    }
    // SAFETY: a NUL-terminated string (contract above).
    let path = unsafe { core::ffi::CStr::from_ptr(path) };
    match raw::profile_dump(path) {
        Ok(()) => 0,
        Err(error) => error,
    }
}

/// The node holding `ptr`, or -1 when nodalloc did not hand it out.
#[no_mangle]
pub extern "C" fn nodalloc_node_of(ptr: *const c_void) -> c_int {
    match nodalloc_core::node_of(ptr as *const u8) {
        Some(node) => node as c_int,
        None => -1,
    }
}

/// Allocates on `node`; NULL + EINVAL for a node that does not exist, NULL + ENOMEM when full.
#[no_mangle]
pub extern "C" fn nodalloc_malloc_on_node(size: usize, node: c_int) -> *mut c_void {
    if node < 0 || node as usize >= raw::node_count() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    malloc_on(size, MALLOC_ALIGN, node as usize, secure::Kind::Malloc)
}

/// `size` bytes at `align` on usable node `node`, through secure mode's layer when it is on
/// (which records `kind`).
pub(crate) fn malloc_on(size: usize, align: usize, node: usize, kind: secure::Kind) -> *mut c_void {
    if secure::on() {
        let Some(total) = size.max(1).checked_add(secure::OVERHEAD) else {
            set_errno(libc::ENOMEM);
            return null_mut();
        };
        let p = handed_out(raw::alloc_on_node(total, align, node));
        // SAFETY: null, or a block of at least `total` bytes just handed out.
        return unsafe { secure::finish(p, size, kind) };
    }
    handed_out(raw::alloc_on_node(size, align, node))
}

/// Sets the hard limit on committed bytes (0: none). 0 on success, -1 + ENOMEM if the heap
/// cannot start.
#[no_mangle]
pub extern "C" fn nodalloc_set_limit(bytes: usize) -> c_int {
    if nodalloc_core::set_limit(bytes) {
        0
    } else {
        set_errno(libc::ENOMEM);
        -1
    }
}

/// The call-site partition of the small block at `ptr`: -1 with partitions off
/// (`NODALLOC_CALLSITE` unset or 0) or for anything but a small block of this allocator.
#[no_mangle]
pub extern "C" fn nodalloc_partition_of(ptr: *const c_void) -> c_int {
    raw::partition_of(ptr as *const u8).map_or(-1, |partition| partition as c_int)
}

/// The first call site (a return address) recorded for `partition`, or NULL.
#[no_mangle]
pub extern "C" fn nodalloc_partition_site(partition: c_int) -> *mut c_void {
    match usize::try_from(partition) {
        Ok(partition) => raw::partition_site(partition) as *mut c_void,
        Err(_) => null_mut(),
    }
}
