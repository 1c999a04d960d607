//! Secure mode's zero-size blocks: `malloc(0)` returns a distinct address in a reserved
//! inaccessible area, so any read or write through it faults.

use crate::plain;
use core::ffi::c_void;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of the zero-size area, and the step between two of its addresses.
const ZERO_AREA: usize = 64 << 20;
pub(super) const ZERO_STEP: usize = 16;

static ZERO_BASE: AtomicUsize = AtomicUsize::new(0);
static ZERO_NEXT: AtomicUsize = AtomicUsize::new(0);

/// An address of the inaccessible zero-size area, distinct from the last 4 Mi such addresses
/// handed out (the area's size over the step; then they come round again); null if the area
/// cannot be reserved.
pub(super) fn zero_block() -> *mut c_void {
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
            plain::set_errno(libc::ENOMEM);
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
pub(super) fn is_zero_block(p: *const u8) -> bool {
    let base = ZERO_BASE.load(Ordering::Acquire);
    base != 0 && (p as usize).wrapping_sub(base) < ZERO_AREA
}
