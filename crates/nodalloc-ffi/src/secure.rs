//! Secure mode's layer of the C face (`NODALLOC_SECURE=1`), on top of the core's (encoded and
//! checked links, the allocation bitmap, random carving, guard pages after large blocks):
//!
//! - **Trailer and canary.** The last 8 bytes of every block's usable space hold its
//!   *trailer*: the size the program asked for and how it allocated the block (`malloc`, `new`,
//!   `new[]`, or freed), with a check field, all mixed with the block's address and a secret of
//!   the process. One to [`CANARY_BYTES`] bytes between the program's bytes and the trailer
//!   hold a canary. `free` checks both, so an overflow of even one byte is caught at the
//!   block's free; it checks the trailer of the object just before in the bag when the program
//!   holds that one (an underflow damages it); it checks the kind (`delete` of a `malloc`
//!   block, `delete[]` of a `new` block, `free` of either) and a sized `delete`'s size.
//! - **Fill and quarantine.** A freed block of a size class is zeroed and its trailer says
//!   "freed"; a freed large block (whole pages) is made inaccessible. It then waits in the thread's quarantine (at most
//!   [`QUARANTINE_SLOTS`] blocks and [`QUARANTINE_BYTES`] bytes) before the core takes it back,
//!   so its address is not handed out again at once. The zeros are checked when the block
//!   leaves the quarantine, when it is handed out again, at the thread's next call after its
//!   free, and as every 8th free checks one other block of the quarantine in turn: a write
//!   after free is caught.
//! - **Zero-size blocks.** `malloc(0)` returns a distinct address in a reserved inaccessible
//!   area: any read or write through it faults.
//!
//! The fast paths never come here: in secure mode the core keeps them empty, and every entry
//! point's slow path asks [`on`] first. Nothing here allocates: the quarantine lives in a page
//! mapped for each thread, the zero-size area in one reservation.

use crate::foreign;
use core::cell::Cell;
use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use nodalloc_core::raw::{self, Pointer, PointerMisuse};

/// Added to a large block's usable bytes (always a multiple of a page) to tell it apart:
/// [`core_usable`] and the quarantine's records carry it.
const LARGE: usize = 1;

/// The usable bytes of a block as [`core_usable`] gives them, and whether it is large.
fn split(tagged: usize) -> (usize, bool) {
    (tagged & !LARGE, tagged & LARGE != 0)
}

/// The trailer's bytes, at the end of each block's usable space.
const TRAILER: usize = 8;
/// Bytes a block takes beyond the program's: its trailer and at least one canary byte, so the
/// byte just past the program's is never the trailer's, whose keyed bytes are random (a one-byte
/// overflow that wrote the value already there, 1 in 256, went unseen); the canary's top bit is
/// set, so a one-byte overflow of text or a NUL terminator always shows.
pub(crate) const OVERHEAD: usize = TRAILER + 1;
/// Canary bytes written (and checked) after the program's bytes, at most.
const CANARY_BYTES: usize = 64;
/// Blocks the quarantine of a thread holds at most (one page holds them).
const QUARANTINE_SLOTS: usize = 253;
/// Bytes of blocks the quarantine of a thread holds at most; a block above a quarter of it goes
/// straight back.
const QUARANTINE_BYTES: usize = 4 << 20;
/// Bytes of the zero-size area, and the step between two of its addresses.
const ZERO_AREA: usize = 64 << 20;
const ZERO_STEP: usize = 16;

/// How the program allocated a block, as its trailer records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Malloc = 1,
    New = 2,
    NewArray = 3,
    /// Freed, waiting in the quarantine (or freed and taken back since).
    Freed = 15,
}

impl Kind {
    fn from_bits(bits: u64) -> Option<Kind> {
        match bits {
            1 => Some(Kind::Malloc),
            2 => Some(Kind::New),
            3 => Some(Kind::NewArray),
            15 => Some(Kind::Freed),
            _ => None,
        }
    }
}

/// 0: not decided yet; 1: off; 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// True in secure mode. Decided from the environment at the first call (before the allocator
/// starts, so every block of the process has a trailer).
#[inline]
pub(crate) fn on() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let secure = raw::secure_requested();
    STATE.store(if secure { 2 } else { 1 }, Ordering::Relaxed);
    secure
}

/// SplitMix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

static SECRET: AtomicU64 = AtomicU64::new(0);

/// The process's secret: the kernel's random bytes for the process (`AT_RANDOM`), mixed.
fn secret() -> u64 {
    let secret = SECRET.load(Ordering::Relaxed);
    if secret != 0 {
        return secret;
    }
    // SAFETY: getauxval has no preconditions; AT_RANDOM, when present, is the address of 16
    // random bytes the kernel placed on the initial stack, readable for the process's life.
    let random = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u64;
    let seed = if random.is_null() {
        &SECRET as *const AtomicU64 as u64
    } else {
        // SAFETY: as above; read unaligned (the kernel promises no alignment).
        unsafe { random.add(1).read_unaligned() }
    };
    let secret = mix(seed ^ 0x6e6f_6461_6c6c_6f63) | 1;
    // Every thread computes the same value, so a race stores it twice.
    SECRET.store(secret, Ordering::Relaxed);
    secret
}

/// The key that mixes the trailer of the block at `p`.
fn key(p: *const u8) -> u64 {
    mix(p as u64 ^ secret())
}

/// The canary byte of the block at `p` (never zero: a zeroing overflow must show).
fn canary(p: *const u8) -> u8 {
    (key(p) >> 56) as u8 | 0x80
}

const SIZE_BITS: u32 = 40;
const BODY_BITS: u32 = 48;

/// The trailer of the block at `p` holding `size` bytes of `kind`.
fn encode(p: *const u8, size: usize, kind: Kind) -> u64 {
    let key = key(p);
    let body = (size as u64 & ((1 << SIZE_BITS) - 1)) | (kind as u64) << SIZE_BITS;
    let check = mix(body ^ key) >> BODY_BITS;
    (body | check << BODY_BITS) ^ key
}

/// The size and kind a trailer holds, if it is the intact trailer of the block at `p`.
fn decode(p: *const u8, word: u64) -> Option<(usize, Kind)> {
    let key = key(p);
    let raw = word ^ key;
    let body = raw & ((1 << BODY_BITS) - 1);
    if raw >> BODY_BITS != mix(body ^ key) >> BODY_BITS {
        return None;
    }
    let kind = Kind::from_bits(body >> SIZE_BITS)?;
    Some(((body & ((1 << SIZE_BITS) - 1)) as usize, kind))
}

/// Reads the trailer of the block at `p` of `usable` bytes.
///
/// # Safety
/// `p` is a block of the heap of at least `usable` (>= 8) readable bytes.
unsafe fn trailer(p: *const u8, usable: usize) -> Option<(usize, Kind)> {
    // SAFETY: the last 8 bytes of the block (contract above).
    let word = unsafe { (p.add(usable - TRAILER) as *const u64).read_unaligned() };
    decode(p, word)
}

/// # Safety
/// As for [`trailer`], and the caller owns the block.
unsafe fn set_trailer(p: *mut u8, usable: usize, size: usize, kind: Kind) {
    // SAFETY: contract above.
    unsafe { (p.add(usable - TRAILER) as *mut u64).write_unaligned(encode(p, size, kind)) };
}

/// True when `len` bytes at `p` are all zero.
///
/// # Safety
/// `p..p + len` is readable.
unsafe fn all_zero(p: *const u8, len: usize) -> bool {
    let mut offset = 0;
    while offset + 8 <= len {
        // SAFETY: in bounds (contract above).
        if unsafe { (p.add(offset) as *const u64).read_unaligned() } != 0 {
            return false;
        }
        offset += 8;
    }
    // SAFETY: as above.
    (offset..len).all(|i| unsafe { *p.add(i) } == 0)
}

/// The usable bytes the core gave the block at `p` (with [`LARGE`] added for a large object,
/// whole pages), or `None` for a block from before nodalloc started; aborts for a pointer that
/// is no block.
fn core_usable(p: *mut u8) -> Option<usize> {
    match raw::classify(p) {
        Ok(Pointer::Small { class, .. }) => Some(class.size()),
        Ok(Pointer::Large { bytes }) => Some(bytes | LARGE),
        Ok(Pointer::Foreign) => None,
        Err(misuse) => raw::report_misuse(p, misuse),
    }
}

// ---- Zero-size blocks ----

static ZERO_BASE: AtomicUsize = AtomicUsize::new(0);
static ZERO_NEXT: AtomicUsize = AtomicUsize::new(0);

/// An address of the inaccessible zero-size area, distinct from the last 4 Mi such addresses
/// handed out (the area's size over the step; then they come round again); null if the area
/// cannot be reserved.
fn zero_block() -> *mut c_void {
    let mut base = ZERO_BASE.load(Ordering::Acquire);
    if base == 0 {
        // SAFETY: a fresh private inaccessible reservation; no memory is touched.
        let fresh = unsafe {
            libc::mmap(
                null_mut(),
                ZERO_AREA,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if fresh == libc::MAP_FAILED {
            crate::set_errno(libc::ENOMEM);
            return null_mut();
        }
        base = match ZERO_BASE.compare_exchange(
            0,
            fresh as usize,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh as usize,
            Err(existing) => {
                // SAFETY: our own reservation, which nobody else saw.
                unsafe { libc::munmap(fresh, ZERO_AREA) };
                existing
            }
        };
    }
    let offset = ZERO_NEXT.fetch_add(ZERO_STEP, Ordering::Relaxed) % ZERO_AREA;
    (base + offset) as *mut c_void
}

/// True for an address of the zero-size area.
fn is_zero_block(p: *const u8) -> bool {
    let base = ZERO_BASE.load(Ordering::Acquire);
    base != 0 && (p as usize).wrapping_sub(base) < ZERO_AREA
}

// ---- Allocation ----

/// An allocation of `size` bytes at `align` (a power of two) for `kind`, from `site`.
pub(crate) fn alloc(
    size: usize,
    align: usize,
    kind: Kind,
    site: usize,
    frame: usize,
) -> *mut c_void {
    check_recent(false);
    if size == 0 && align <= ZERO_STEP {
        return zero_block();
    }
    let Some(total) = size.checked_add(OVERHEAD) else {
        crate::set_errno(libc::ENOMEM);
        return null_mut();
    };
    let p = crate::allocate_at(total, align.max(crate::MALLOC_ALIGN), site, frame);
    // SAFETY: a block just handed out, of at least `total` bytes.
    unsafe { finish(p, size, kind) }
}

/// Makes the block the core just handed out (of at least `size + OVERHEAD` bytes, or null) a
/// block of `size` bytes for `kind`: its zeros checked if it was freed before, its canary and
/// trailer written. Returns it.
///
/// # Safety
/// `p` is null or a block of at least `size + OVERHEAD` bytes just handed out, the caller's.
pub(crate) unsafe fn finish(p: *mut c_void, size: usize, kind: Kind) -> *mut c_void {
    let p = p as *mut u8;
    if p.is_null() {
        return null_mut();
    }
    let Some((usable, large)) = core_usable(p).map(split) else {
        return p as *mut c_void;
    };
    // SAFETY: the block is ours, of `usable` bytes.
    unsafe {
        // A large span may have held large blocks of other sizes before: only blocks of a
        // class are checked (a bag's memory is zeroed when it is carved).
        if !large && matches!(trailer(p, usable), Some((_, Kind::Freed))) {
            // Freed by the program before: zero but for the core's link in the first word.
            if !all_zero(p.add(8), usable - TRAILER - 8) {
                report_write_after_free(p);
            }
        }
        let canary_end = (size + CANARY_BYTES).min(usable - TRAILER);
        p.add(size).write_bytes(canary(p), canary_end - size);
        set_trailer(p, usable, size, kind);
    }
    p as *mut c_void
}

/// `calloc`'s secure form: zeroed `count * size` bytes.
pub(crate) fn calloc(count: usize, size: usize, site: usize, frame: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        crate::set_errno(libc::ENOMEM);
        return null_mut();
    };
    let p = alloc(total, crate::MALLOC_ALIGN, Kind::Malloc, site, frame);
    if !p.is_null() && total != 0 {
        // SAFETY: a fresh block of `total` bytes.
        unsafe { (p as *mut u8).write_bytes(0, total) };
    }
    p
}

// ---- Free ----

/// The size of the live block at `p` that the program frees as `expected` (with `sized`, the
/// size a sized `delete` passed), after every check of its trailer, canary and the object
/// before it; `None` for a block from before nodalloc started. Aborts naming `p` on a misuse.
///
/// # Safety
/// `p` is not null and not a zero-size block.
unsafe fn checked(p: *mut u8, expected: Kind, sized: Option<usize>) -> Option<(usize, usize)> {
    let (usable, large) = split(core_usable(p)?);
    if large && in_quarantine(p) {
        // Inaccessible while it waits: its trailer cannot be read.
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    // SAFETY: a block of the heap of `usable` bytes.
    let Some((size, kind)) = (unsafe { trailer(p, usable) }) else {
        raw::report_corruption(
            "heap overflow: the end of the block was overwritten (its trailer is damaged):",
            p,
        );
    };
    if kind == Kind::Freed {
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    if size + TRAILER > usable {
        raw::report_corruption("heap overflow: damaged trailer of block", p);
    }
    let canary_end = (size + CANARY_BYTES).min(usable - TRAILER);
    let canary = canary(p);
    // SAFETY: bytes of the block.
    if (size..canary_end).any(|i| unsafe { *p.add(i) } != canary) {
        raw::report_corruption("heap overflow: bytes past the end of block", p);
    }
    if kind != expected {
        crate::raw::report_corruption(mismatch(kind, expected), p);
    }
    if let Some(sized) = sized {
        if sized != size {
            raw::report_corruption(wrong_size_message(expected), p);
        }
    }
    if let Some(before) = raw::object_before(p) {
        // SAFETY: an object of the same bag, of `usable` bytes. Its last word is a trailer
        // (held by the program, waiting in a quarantine, or freed: the trailer says so), or
        // zero (never carved: secure mode's bags start zeroed), unless something wrote there.
        let word = unsafe { (before.add(usable - TRAILER) as *const u64).read_unaligned() };
        if word != 0 && decode(before, word).is_none() {
            raw::report_corruption(
                "heap underflow: the object before block was overwritten at its end:",
                p,
            );
        }
    }
    Some((size, usable | if large { LARGE } else { 0 }))
}

fn mismatch(kind: Kind, expected: Kind) -> &'static str {
    match (kind, expected) {
        (Kind::Malloc, Kind::New) => "delete of a block from malloc:",
        (Kind::Malloc, Kind::NewArray) => "delete[] of a block from malloc:",
        (Kind::New, Kind::Malloc) => "free of a block from new (use delete):",
        (Kind::New, Kind::NewArray) => "delete[] of a block from new (use delete):",
        (Kind::NewArray, Kind::Malloc) => "free of a block from new[] (use delete[]):",
        (Kind::NewArray, Kind::New) => "delete of a block from new[] (use delete[]):",
        _ => "freed the wrong way: block",
    }
}

/// `free`, `delete` (`expected`: how the program frees) and sized `delete` (`sized`).
///
/// # Safety
/// C's `free`: the caller gives the block up (what is checked is reported, not trusted).
pub(crate) unsafe fn free(ptr: *mut c_void, expected: Kind, sized: Option<usize>) {
    let p = ptr as *mut u8;
    if p.is_null() {
        return;
    }
    if is_zero_block(p) {
        if (p as usize) % ZERO_STEP != 0 {
            raw::report_misuse(p, PointerMisuse::InvalidPointer);
        }
        return;
    }
    check_recent(true);
    // SAFETY: neither null nor a zero-size block.
    let Some((size, tagged)) = (unsafe { checked(p, expected, sized) }) else {
        return foreign::free(p);
    };
    let (usable, large) = split(tagged);
    if large {
        if usable > QUARANTINE_BYTES / 4 {
            // SAFETY: a live block the caller gives up.
            return unsafe { crate::free_core(p) };
        }
        // A large block (whole pages) waits inaccessible: a write after free faults.
        // SAFETY: the block is ours, of `usable` bytes, page aligned (a large object).
        let protected = unsafe {
            set_trailer(p, usable, size, Kind::Freed);
            libc::mprotect(p as *mut c_void, usable, libc::PROT_NONE) == 0
        };
        if !protected {
            // SAFETY: as above.
            return unsafe { crate::free_core(p) };
        }
    } else {
        // SAFETY: as above: zeroed but for the trailer, which says freed.
        unsafe {
            p.write_bytes(0, usable - TRAILER);
            set_trailer(p, usable, size, Kind::Freed);
        }
    }
    // SAFETY: a freed block, ours, of `usable` bytes.
    unsafe { quarantine(p, tagged) };
}

/// `malloc_usable_size`: the size the program asked for (the canary starts there).
pub(crate) fn usable(ptr: *mut c_void) -> usize {
    let p = ptr as *mut u8;
    if p.is_null() || is_zero_block(p) {
        return 0;
    }
    let Some((usable, large)) = core_usable(p).map(split) else {
        foreign::readable_bytes(p);
        return 0;
    };
    if large && in_quarantine(p) {
        raw::report_misuse(p, PointerMisuse::DoubleFree);
    }
    // SAFETY: a block of the heap of `usable` bytes.
    match unsafe { trailer(p, usable) } {
        Some((_, Kind::Freed)) => raw::report_misuse(p, PointerMisuse::DoubleFree),
        Some((size, _)) => size,
        None => raw::report_corruption("heap overflow: damaged trailer of block", p),
    }
}

/// `realloc`: always a new block (the old one goes to the quarantine, so a stale pointer to it
/// is caught as a write after free).
///
/// # Safety
/// C's `realloc`.
pub(crate) unsafe fn realloc(
    ptr: *mut c_void,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    let old = ptr as *mut u8;
    if old.is_null() {
        return alloc(size, crate::MALLOC_ALIGN, Kind::Malloc, site, frame);
    }
    if size == 0 {
        // glibc frees and returns NULL.
        // SAFETY: forwarded contract.
        unsafe { free(ptr, Kind::Malloc, None) };
        return null_mut();
    }
    let copy = if is_zero_block(old) {
        0
    } else {
        // SAFETY: neither null nor a zero-size block.
        match unsafe { checked(old, Kind::Malloc, None) } {
            Some((old_size, _)) => old_size,
            None => foreign::readable_bytes(old),
        }
    };
    let new = alloc(size, crate::MALLOC_ALIGN, Kind::Malloc, site, frame);
    if new.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks are live and distinct; the old one holds `copy` readable bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(old, new as *mut u8, copy.min(size));
        free(ptr, Kind::Malloc, None);
    }
    new
}

// ---- The quarantine ----

/// A thread's quarantine: a ring of freed blocks in one mapped page.
#[repr(C)]
struct Quarantine {
    /// Index of the oldest block, blocks held, and their bytes.
    first: usize,
    len: usize,
    bytes: usize,
    /// The next block [`check_recent`] checks besides the newest, the frees that asked for such
    /// a check, and whether the newest was checked since it came in.
    cursor: usize,
    asked: usize,
    newest_checked: bool,
    blocks: [(usize, usize); QUARANTINE_SLOTS],
}

const _: () = assert!(core::mem::size_of::<Quarantine>() <= 4096);

thread_local! {
    /// The thread's quarantine (null until its first free; mapping failed: 1).
    static QUARANTINE: Cell<*mut Quarantine> = const { Cell::new(null_mut()) };
}

const NO_QUARANTINE: *mut Quarantine = 1 as *mut Quarantine;

fn thread_quarantine() -> Option<&'static mut Quarantine> {
    let mut q = QUARANTINE.try_with(Cell::get).ok()?;
    if q.is_null() {
        // SAFETY: a fresh private page, zeroed (an empty quarantine).
        let page = unsafe {
            libc::mmap(
                null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        q = if page == libc::MAP_FAILED {
            NO_QUARANTINE
        } else {
            page as *mut Quarantine
        };
        let _ = QUARANTINE.try_with(|cell| cell.set(q));
    }
    if q == NO_QUARANTINE {
        return None;
    }
    // SAFETY: the thread's own page, used by this thread alone.
    Some(unsafe { &mut *q })
}

/// Puts a freed block in the thread's quarantine, letting the oldest go when it is full.
///
/// # Safety
/// `p` is a block of `tagged` usable bytes (see [`core_usable`]) the program freed: checked,
/// then zeroed (a block of a class) or made inaccessible (a large one).
unsafe fn quarantine(p: *mut u8, tagged: usize) {
    let usable = split(tagged).0;
    let Some(q) = thread_quarantine() else {
        // SAFETY: forwarded contract.
        return unsafe { release(p, tagged) };
    };
    while q.len == QUARANTINE_SLOTS || (q.len > 0 && q.bytes + usable > QUARANTINE_BYTES) {
        let (old, old_usable) = q.blocks[q.first];
        q.first = (q.first + 1) % QUARANTINE_SLOTS;
        q.len -= 1;
        q.bytes -= split(old_usable).0;
        // SAFETY: a block the quarantine held.
        unsafe { release(old as *mut u8, old_usable) };
    }
    let index = (q.first + q.len) % QUARANTINE_SLOTS;
    q.blocks[index] = (p as usize, tagged);
    q.len += 1;
    q.newest_checked = false;
    q.bytes += usable;
}

/// Checks that a freed block is as its free left it: trailer "freed", zeros (for blocks that
/// were zeroed). Aborts naming it otherwise.
///
/// # Safety
/// `p` is a block of `tagged` usable bytes (see [`core_usable`]) the quarantine holds.
unsafe fn verify(p: *mut u8, tagged: usize) {
    let (usable, large) = split(tagged);
    if large {
        // Inaccessible while it waits: a write would have faulted.
        return;
    }
    // SAFETY: contract above.
    let intact = unsafe {
        matches!(trailer(p, usable), Some((_, Kind::Freed))) && all_zero(p, usable - TRAILER)
    };
    if !intact {
        report_write_after_free(p);
    }
}

#[cold]
fn report_write_after_free(p: *mut u8) -> ! {
    raw::report_corruption("write after free: freed block was written to:", p)
}

/// A block leaves the quarantine: checked, then back to the core.
///
/// # Safety
/// As for [`verify`]; the block leaves the quarantine's list first.
unsafe fn release(p: *mut u8, tagged: usize) {
    let (usable, large) = split(tagged);
    // SAFETY: forwarded contract; a large block was made inaccessible by its free, and is ours
    // to make accessible again before the core takes it back.
    unsafe {
        verify(p, tagged);
        if large
            && libc::mprotect(p as *mut c_void, usable, libc::PROT_READ | libc::PROT_WRITE) != 0
        {
            raw::report_corruption("cannot make a freed large block accessible again:", p);
        }
        crate::free_core(p);
    }
}

/// The thread's quarantine if it has one (without mapping it).
fn existing_quarantine() -> Option<&'static mut Quarantine> {
    let q = QUARANTINE.try_with(Cell::get).ok()?;
    if q.is_null() || q == NO_QUARANTINE {
        return None;
    }
    // SAFETY: the thread's own page, used by this thread alone.
    Some(unsafe { &mut *q })
}

/// True when the thread's quarantine holds the block at `p`.
fn in_quarantine(p: *mut u8) -> bool {
    let Some(q) = existing_quarantine() else {
        return false;
    };
    (0..q.len).any(|i| q.blocks[(q.first + i) % QUARANTINE_SLOTS].0 == p as usize)
}

/// Checks the thread's most recent free once (a write soon after a free is caught at the
/// thread's next call) and, with `other` (every `free` asks), every 8th time one other block of
/// its quarantine (a cursor that goes round: each block waiting through 8 × 253 frees is looked
/// at besides the check when it leaves).
fn check_recent(other: bool) {
    let Some(q) = existing_quarantine() else {
        return;
    };
    if q.len == 0 {
        return;
    }
    if !q.newest_checked {
        let (p, usable) = q.blocks[(q.first + q.len - 1) % QUARANTINE_SLOTS];
        // SAFETY: a block the quarantine holds.
        unsafe { verify(p as *mut u8, usable) };
        q.newest_checked = true;
    }
    if other {
        q.asked = q.asked.wrapping_add(1);
    }
    if other && q.asked % 8 == 0 {
        q.cursor = (q.cursor + 1) % q.len;
        let (p, usable) = q.blocks[(q.first + q.cursor) % QUARANTINE_SLOTS];
        // SAFETY: as above.
        unsafe { verify(p as *mut u8, usable) };
    }
}

/// At the thread's exit (its heap still attached): every block of its quarantine goes back,
/// checked, and the page is unmapped.
pub(crate) fn flush_thread() {
    let Ok(q) = QUARANTINE.try_with(|cell| cell.replace(NO_QUARANTINE)) else {
        return;
    };
    if q.is_null() || q == NO_QUARANTINE {
        return;
    }
    // SAFETY: the thread's own page, no longer reachable through the slot.
    let quarantine = unsafe { &mut *q };
    while quarantine.len > 0 {
        let (p, usable) = quarantine.blocks[quarantine.first];
        quarantine.first = (quarantine.first + 1) % QUARANTINE_SLOTS;
        quarantine.len -= 1;
        // SAFETY: a block the quarantine held.
        unsafe { release(p as *mut u8, usable) };
    }
    // SAFETY: our page, emptied.
    unsafe { libc::munmap(q as *mut c_void, 4096) };
}

/// The message of a sized free whose size is not the allocation's: C23's `free_sized` for
/// blocks of `malloc`, a sized `delete` for those of `new`.
pub(crate) fn wrong_size_message(kind: Kind) -> &'static str {
    match kind {
        Kind::Malloc => "free_sized with a size other than malloc's for block",
        _ => "sized delete with a size other than new's for block",
    }
}
