//! First-class heaps in C (`nodalloc_heap_*` of `include/nodalloc.h`): a handle encodes the
//! heap's slot and generation, so a handle used after `nodalloc_heap_destroy` is refused with
//! an abort naming the heap, however the slot was reused since. Blocks are freed with plain
//! `free` (or `realloc`, which keeps a block in its heap).

use crate::callsite::entry_stub;
use crate::plain::{handed_out, heap_or_create, set_errno, MALLOC_ALIGN};
use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;
use nodalloc_core::raw::{self, Caller, OwnedId, OwnedRefusal, Pointer, NAME_BYTES};

/// `nodalloc_heap_options_t`.
#[repr(C)]
pub struct HeapOptions {
    /// The node (index into nodalloc's usable nodes); -1 for the calling thread's, -2 for its
    /// far node.
    node: c_int,
    /// The most bytes the heap may hold (0: no limit).
    limit: usize,
    /// A name for the statistics (NUL-terminated, first 40 bytes kept), or NULL.
    name: *const c_char,
}

/// `nodalloc_heap_stats_t`.
#[repr(C)]
pub struct HeapStats {
    node: c_int,
    limit: usize,
    committed: usize,
    peak: usize,
    live: usize,
    blocks: usize,
    bags: usize,
    large_blocks: usize,
    large_bytes: usize,
    allocs: u64,
    frees: u64,
    name: [c_char; NAME_BYTES + 1],
}

/// The C handle of heap `id`: odd, never null, never a real address.
fn handle_of(id: OwnedId) -> *mut c_void {
    (((id.generation() as usize) << 16 | id.index()) << 1 | 1) as *mut c_void
}

/// The heap a handle names (checked against the heap's generation when used).
fn id_of(handle: *mut c_void) -> OwnedId {
    let bits = handle as usize;
    if bits & 1 == 0 {
        raw::report_misuse(handle as *const u8, raw::PointerMisuse::InvalidPointer);
    }
    let bits = bits >> 1;
    OwnedId::from_parts((bits & 0xffff) as u16, (bits >> 16) as u32)
}

/// The calling thread's home node: its heap's, which is created (binding the thread) on the
/// thread's first call; node 0 once the thread's heap has retired at its exit.
fn thread_node() -> usize {
    heap_or_create().map_or(0, |heap| heap.node().index())
}

/// Creates a heap; `options` may be NULL for the defaults. NULL with errno EINVAL for a node
/// that does not exist or a limit below 32 KiB, EAGAIN when 1024 heaps are alive, ENOMEM when
/// memory runs out.
///
/// # Safety
/// `options` is NULL or points to a valid options struct whose `name` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nodalloc_heap_new(options: *const HeapOptions) -> *mut c_void {
    let (node, limit, name) = if options.is_null() {
        (-1, 0, null_mut::<c_char>() as *const c_char)
    } else {
        // SAFETY: forwarded contract.
        let options = unsafe { &*options };
        (options.node, options.limit, options.name)
    };
    let mut name_bytes = [0u8; NAME_BYTES];
    let mut len = 0;
    if !name.is_null() {
        // SAFETY: a NUL-terminated string (contract): read up to its NUL or NAME_BYTES bytes.
        while len < NAME_BYTES && unsafe { *name.add(len) } != 0 {
            // SAFETY: as above, before the NUL.
            name_bytes[len] = unsafe { *name.add(len) } as u8;
            len += 1;
        }
    }
    let node = match node {
        -1 => thread_node(),
        // NODALLOC_HEAP_NODE_FAR: the far node of the calling thread's node (near without far
        // memory).
        -2 => raw::far_node(heap_or_create().as_deref()).unwrap_or_else(thread_node),
        n if n < 0 || n as usize >= raw::node_count() => {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        n => n as usize,
    };
    match raw::heap_new(node, limit, &name_bytes[..len]) {
        Ok(id) => handle_of(id),
        Err(refusal) => {
            set_errno(match refusal {
                OwnedRefusal::NoSuchNode | OwnedRefusal::LimitTooSmall => libc::EINVAL,
                OwnedRefusal::TooMany => libc::EAGAIN,
                OwnedRefusal::NoMemory => libc::ENOMEM,
            });
            null_mut()
        }
    }
}

/// [`raw::heap_alloc`], counted on the calling thread's heap-profile sampler (one flag test
/// with profiling off).
/// `caller`: the return address and frame pointer an entry stub read (zero where none did:
/// a sample's stack is then empty, never another call's).
fn heap_alloc(id: OwnedId, size: usize, align: usize, zero: bool, caller: Caller) -> *mut u8 {
    let block = raw::heap_alloc(id, size, align, zero);
    if !raw::profile_on() {
        return block;
    }
    match crate::plain::heap() {
        Some(heap) => {
            heap.enter_caller(caller);
            heap.sample_owned(block, size, align, zero, id)
        }
        None => block,
    }
}

/// The caller an entry stub passed on.
fn caller(site: usize, frame: usize, size: usize) -> Caller {
    Caller {
        ret: site,
        frame,
        size,
    }
}

/// Destroys `heap` and every block it still holds.
#[no_mangle]
pub extern "C" fn nodalloc_heap_destroy(heap: *mut c_void) {
    raw::heap_destroy(id_of(heap));
}

/// `size` bytes from `heap`; NULL with ENOMEM past its limit or out of memory.
#[no_mangle]
pub extern "C" fn nodalloc_heap_malloc(heap: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_heap_malloc_entry(heap, size) }
}

entry_stub!(fn nodalloc_heap_malloc_entry(heap: *mut c_void, size: usize) -> *mut c_void
    => heap_malloc_at, site: "rdx", frame: "rcx");

extern "C" fn heap_malloc_at(
    heap: *mut c_void,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    let caller = caller(site, frame, size);
    handed_out(heap_alloc(id_of(heap), size, MALLOC_ALIGN, false, caller))
}

/// `count × size` zeroed bytes from `heap`; NULL with ENOMEM on overflow, past its limit or out
/// of memory.
#[no_mangle]
pub extern "C" fn nodalloc_heap_calloc(
    heap: *mut c_void,
    count: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_heap_calloc_entry(heap, count, size) }
}

entry_stub!(fn nodalloc_heap_calloc_entry(heap: *mut c_void, count: usize, size: usize)
    -> *mut c_void => heap_calloc_at, site: "rcx", frame: "r8");

extern "C" fn heap_calloc_at(
    heap: *mut c_void,
    count: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    let id = id_of(heap);
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    handed_out(heap_alloc(
        id,
        total,
        MALLOC_ALIGN,
        true,
        caller(site, frame, total),
    ))
}

/// `size` bytes at `alignment` (a power of two) from `heap`; NULL with EINVAL for another
/// alignment, ENOMEM past its limit or out of memory.
#[no_mangle]
pub extern "C" fn nodalloc_heap_aligned_alloc(
    heap: *mut c_void,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_heap_aligned_alloc_entry(heap, alignment, size) }
}

entry_stub!(fn nodalloc_heap_aligned_alloc_entry(heap: *mut c_void, alignment: usize,
    size: usize) -> *mut c_void => heap_aligned_alloc_at, site: "rcx", frame: "r8");

extern "C" fn heap_aligned_alloc_at(
    heap: *mut c_void,
    alignment: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    let id = id_of(heap);
    if !alignment.is_power_of_two() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let caller = caller(site, frame, size);
    handed_out(heap_alloc(
        id,
        size,
        alignment.max(MALLOC_ALIGN),
        false,
        caller,
    ))
}

/// Resizes `ptr` (NULL: allocates from `heap`) to `size` bytes in `heap`: the block moves to
/// `heap` if it was elsewhere. `size` 0 frees it and returns NULL (as glibc's realloc).
///
/// # Safety
/// `ptr` is NULL or a live block nodalloc handed out, which the caller gives up on success.
#[no_mangle]
pub unsafe extern "C" fn nodalloc_heap_realloc(
    heap: *mut c_void,
    ptr: *mut c_void,
    size: usize,
) -> *mut c_void {
    let id = id_of(heap);
    if ptr.is_null() {
        return handed_out(heap_alloc(id, size, MALLOC_ALIGN, false, Caller::default()));
    }
    if size == 0 {
        // SAFETY: forwarded contract.
        unsafe { crate::free(ptr) };
        return null_mut();
    }
    // SAFETY: forwarded contract.
    unsafe { realloc_into(id, ptr as *mut u8, size) }
}

/// `realloc` of a heap's block: it stays in its heap.
pub(crate) fn realloc_owned(ptr: *mut u8, size: usize) -> *mut c_void {
    match raw::heap_of(ptr) {
        // SAFETY: a live block of a heap, which realloc's caller gives up on success.
        Some(id) => unsafe { realloc_into(id, ptr, size) },
        None => raw::report_misuse(ptr, raw::PointerMisuse::InvalidPointer),
    }
}

/// # Safety
/// `old` is a live block nodalloc handed out; `size` is not 0.
unsafe fn realloc_into(id: OwnedId, old: *mut u8, size: usize) -> *mut c_void {
    let (old_bytes, in_place) = match raw::classify(old) {
        Ok(Pointer::Owned { bytes, large }) => {
            let same_heap = raw::heap_of(old) == Some(id);
            // A small block whose class still fits and is at most twice the size: kept.
            (
                bytes,
                same_heap && !large && size <= bytes && size > bytes / 2,
            )
        }
        Ok(Pointer::Small { class, .. }) => (class.usable(), false),
        Ok(Pointer::Large { bytes }) => (bytes, false),
        Ok(Pointer::Foreign) => raw::report_misuse(old, raw::PointerMisuse::InvalidPointer),
        Err(misuse) => raw::report_misuse(old, misuse),
    };
    if in_place {
        return old as *mut c_void;
    }
    let new = handed_out(heap_alloc(id, size, MALLOC_ALIGN, false, Caller::default()));
    if new.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks are live and distinct; the old one holds `old_bytes` bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(old, new as *mut u8, old_bytes.min(size));
        crate::free(old as *mut c_void);
    }
    new
}

/// Fills `out` with what `heap` holds. 0, or -1 with EINVAL for a NULL `out`.
///
/// # Safety
/// `out` is NULL or points to writable memory for a stats struct.
#[no_mangle]
pub unsafe extern "C" fn nodalloc_heap_stats(heap: *mut c_void, out: *mut HeapStats) -> c_int {
    let id = id_of(heap);
    if out.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let stats = raw::heap_stats(id);
    let mut name = [0 as c_char; NAME_BYTES + 1];
    let (bytes, len) = raw::heap_name(id);
    for (slot, &b) in name.iter_mut().zip(&bytes[..len]) {
        *slot = b as c_char;
    }
    // SAFETY: writable (contract).
    unsafe {
        out.write(HeapStats {
            node: stats.node as c_int,
            limit: stats.limit,
            committed: stats.committed,
            peak: stats.peak,
            live: stats.live,
            blocks: stats.blocks,
            bags: stats.bags,
            large_blocks: stats.large_blocks,
            large_bytes: stats.large_bytes,
            allocs: stats.allocs,
            frees: stats.frees,
            name,
        })
    };
    0
}

/// The heap holding the live block `ptr`, or NULL for a block of no heap (malloc's).
#[no_mangle]
pub extern "C" fn nodalloc_heap_of(ptr: *const c_void) -> *mut c_void {
    match raw::heap_of(ptr as *const u8) {
        Some(id) => handle_of(id),
        None => null_mut(),
    }
}
