//! The rest of glibc's malloc interface, so that no call a program makes reaches glibc's own
//! allocator behind nodalloc's back: the `__libc_*` names (some libraries and tools call them
//! directly, and a block glibc handed out would be a foreign pointer at our `free`),
//! `malloc_trim`, `mallinfo`/`mallinfo2`, `mallopt`, `malloc_stats`, `malloc_info`, and C23's
//! `free_sized`/`free_aligned_sized`.
//!
//! The statistics functions report nodalloc's own figures in glibc's fields (see
//! [`mallinfo2`]); `mallopt` accepts glibc's parameters and changes nothing (nodalloc's tuning
//! is its `NODALLOC_*` variables).

use crate::callsite::entry_stub;
use crate::plain::set_errno;
use crate::secure::{self, Kind};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

/// # Safety
/// As for `malloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::malloc(size) }
}

/// # Safety
/// As for `calloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::calloc(count, size) }
}

/// # Safety
/// As for `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::realloc(ptr, size) }
}

/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(ptr: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { crate::free(ptr) }
}

/// # Safety
/// As for `memalign`.
#[no_mangle]
pub unsafe extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::aligned::memalign(align, size) }
}

/// # Safety
/// As for `valloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::aligned::valloc(size) }
}

/// # Safety
/// As for `pvalloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { crate::aligned::pvalloc(size) }
}

/// glibc's `malloc_trim`: flushes the calling thread's cache and gives every free page back to
/// the OS now (`nodalloc::purge`). 1 when the committed bytes fell, 0 otherwise; `pad` is
/// ignored (nothing is kept at a heap top).
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    let before = nodalloc_core::stats().committed;
    nodalloc_core::raw::purge(crate::plain::heap());
    c_int::from(nodalloc_core::stats().committed < before)
}

/// glibc's `struct mallinfo2`, with nodalloc's figures: `arena` the committed bytes,
/// `uordblks` the bytes of live blocks, `fordblks` the rest of the committed bytes (free but
/// still resident), `usmblks` the most ever committed at once; large blocks live in the same
/// heap, so `hblks` and `hblkhd` (glibc's separate mappings) are 0, as are the fields of
/// glibc's bins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Mallinfo2 {
    pub arena: usize,
    pub ordblks: usize,
    pub smblks: usize,
    pub hblks: usize,
    pub hblkhd: usize,
    pub usmblks: usize,
    pub fsmblks: usize,
    pub uordblks: usize,
    pub fordblks: usize,
    pub keepcost: usize,
}

/// glibc's older `struct mallinfo`: [`Mallinfo2`]'s fields as `int` (they wrap past 2 GiB,
/// as glibc's do).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

/// glibc's `mallinfo2` (see [`Mallinfo2`]).
#[no_mangle]
pub extern "C" fn mallinfo2() -> Mallinfo2 {
    let stats = nodalloc_core::stats();
    Mallinfo2 {
        arena: stats.committed,
        usmblks: stats.peak_committed,
        uordblks: stats.allocated,
        fordblks: stats.committed.saturating_sub(stats.allocated),
        ..Mallinfo2::default()
    }
}

/// glibc's `mallinfo` (see [`Mallinfo`]).
#[no_mangle]
pub extern "C" fn mallinfo() -> Mallinfo {
    let info = mallinfo2();
    // Truncated to `int`, as glibc's are.
    let int = |value: usize| value as c_int;
    Mallinfo {
        arena: int(info.arena),
        usmblks: int(info.usmblks),
        uordblks: int(info.uordblks),
        fordblks: int(info.fordblks),
        ..Mallinfo::default()
    }
}

/// glibc's `mallopt`: 1 (accepted) for the parameters glibc knows (`M_MXFAST` … `M_KEEP`,
/// `M_TRIM_THRESHOLD` … `M_ARENA_MAX`), which change nothing here; 0 for any other, as glibc
/// answers an unknown parameter.
#[no_mangle]
pub extern "C" fn mallopt(param: c_int, _value: c_int) -> c_int {
    c_int::from(matches!(param, 1..=4 | -8..=-1))
}

/// glibc's `malloc_stats`: nodalloc's statistics on stderr (as `NODALLOC_STATS=1` prints them
/// at exit).
#[no_mangle]
pub extern "C" fn malloc_stats() {
    nodalloc_core::stats().write_to(libc::STDERR_FILENO);
}

/// glibc's `malloc_info`: an XML description of the heap on `stream`, in glibc's elements
/// (one `heap` per NUMA node; `rest` is the free committed bytes, `system` the committed ones,
/// `aspace` the address space the node's region has used), then, on a machine with far memory
/// or under a tier's limit, one `tier` element each for near and far memory (nodalloc's own:
/// `allocated`, `committed`, `limit` (0: none), and the far tier's `interleaved` bytes). 0, or
/// -1 with `EINVAL` for `options` other than 0 or a null stream.
///
/// # Safety
/// `stream` is null or an open `FILE` the caller may write.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, stream: *mut libc::FILE) -> c_int {
    if options != 0 || stream.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let stats = nodalloc_core::stats();
    // SAFETY: `stream` is an open FILE (contract); `%d` gets an int.
    unsafe {
        libc::fprintf(stream, c"<malloc version=\"1\">\n".as_ptr());
        for (index, node) in stats.nodes().iter().enumerate() {
            let heap = c"<heap nr=\"%d\">\n<sizes>\n</sizes>\n";
            libc::fprintf(stream, heap.as_ptr(), index as c_int);
            let (allocated, committed, mapped) = (node.allocated, node.committed, node.mapped);
            write_totals(stream, allocated, committed, committed, mapped, false);
            libc::fprintf(stream, c"</heap>\n".as_ptr());
        }
        let (allocated, committed) = (stats.allocated, stats.committed);
        write_totals(
            stream,
            allocated,
            committed,
            stats.peak_committed,
            stats.mapped,
            true,
        );
        if stats.nodes().iter().any(|node| node.far)
            || stats.near_limit != 0
            || stats.far_limit != 0
        {
            let near = c"<tier name=\"near\" allocated=\"%zu\" committed=\"%zu\" limit=\"%zu\"/>\n";
            libc::fprintf(
                stream,
                near.as_ptr(),
                stats.allocated.saturating_sub(stats.far_allocated),
                stats.committed.saturating_sub(stats.far_committed),
                stats.near_limit,
            );
            let far = c"<tier name=\"far\" allocated=\"%zu\" committed=\"%zu\" limit=\"%zu\" interleaved=\"%zu\"/>\n";
            libc::fprintf(
                stream,
                far.as_ptr(),
                stats.far_allocated,
                stats.far_committed,
                stats.far_limit,
                stats.interleaved,
            );
        }
        libc::fprintf(stream, c"</malloc>\n".as_ptr());
    }
    0
}

/// The totals elements `malloc_info` writes for a heap and, with `mmap` (glibc's count of
/// mapped chunks, none here), for the whole process: `rest` the free committed bytes (one
/// free "chunk" when there are any), `system` the committed bytes now and at most, `aspace` the
/// address space used.
///
/// # Safety
/// `stream` is an open `FILE` the caller may write.
unsafe fn write_totals(
    stream: *mut libc::FILE,
    allocated: usize,
    committed: usize,
    max: usize,
    mapped: usize,
    mmap: bool,
) {
    let free = committed.saturating_sub(allocated);
    // SAFETY: `stream` is an open FILE (contract); every `%zu` gets a `usize`.
    unsafe {
        libc::fprintf(
            stream,
            c"<total type=\"fast\" count=\"0\" size=\"0\"/>\n<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n".as_ptr(),
            usize::from(free != 0),
            free,
        );
        if mmap {
            libc::fprintf(
                stream,
                c"<total type=\"mmap\" count=\"0\" size=\"0\"/>\n".as_ptr(),
            );
        }
        libc::fprintf(
            stream,
            c"<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n".as_ptr(),
            committed,
            max,
            mapped,
            mapped,
        );
    }
}

/// C23's `free_sized`: `free` for a block from `malloc`, `calloc` or `realloc` of `size`
/// bytes. A small block of the thread's node whose class does not hold `size` aborts naming
/// the block (the check of a sized `delete`); secure mode checks the exact size of every block.
///
/// # Safety
/// `ptr` is null or a live block of `size` bytes the caller gives up.
#[no_mangle]
pub unsafe extern "C" fn free_sized(ptr: *mut c_void, size: usize) {
    // SAFETY: forwarded contract.
    if unsafe { crate::cxx::sized_free_hit(ptr, Some(size), Kind::Malloc) } {
        return;
    }
    // SAFETY: forwarded contract (a tail call).
    unsafe { crate::cxx::sized_free_miss(ptr, Kind::Malloc, Some(size)) }
}

/// C23's `free_aligned_sized`: `free` for a block from `aligned_alloc(align, size)`. Secure
/// mode checks the size; otherwise the block is freed as `free` would.
///
/// # Safety
/// `ptr` is null or a live block from `aligned_alloc(align, size)` the caller gives up.
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(ptr: *mut c_void, _align: usize, size: usize) {
    if secure::on() {
        // SAFETY: forwarded contract.
        return unsafe { secure::free(ptr, Kind::Malloc, Some(size)) };
    }
    // SAFETY: forwarded contract.
    unsafe { crate::free(ptr) }
}

/// # Safety
/// glibc's `reallocarray`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_reallocarray_entry(ptr, count, size) }
}

entry_stub!(fn nodalloc_reallocarray_entry(ptr: *mut c_void, count: usize, size: usize)
    -> *mut c_void => reallocarray_at, site: "rcx", frame: "r8");

/// # Safety
/// glibc's `reallocarray`, called from `site`.
pub(crate) unsafe extern "C" fn reallocarray_at(
    ptr: *mut c_void,
    count: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { crate::realloc_at(ptr, total, site, frame) },
        None => {
            set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}
