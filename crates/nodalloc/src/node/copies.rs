//! The bound on a write into the heap that the C library's `memcpy`, `memmove` and `memset`
//! check outside secure mode when asked to (`NODALLOC_CHECK_COPIES=1`, its `copy.rs`): a write that starts in an object of a size class must
//! end within the object's usable bytes. The bound comes from the page map alone (the unit's
//! tag gives the class and the unit's place in its bag), through a copy of the map's
//! coordinates kept here, so that a copy pays a range test when its destination is outside the
//! heap and about a dozen instructions when it is inside.
//!
//! Not bounded here: large blocks and free spans (their units are no bag's), writes that start
//! in a free object or in a bag's tail (the check knows where objects are, not which are held:
//! secure mode's check knows that), and sources.

use super::front::Tag;
use crate::arena::pagemap::PageMap;
use crate::size_class::{UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// The page map's coordinates, in one static (one address to find): `units` is written last
/// (release), and is 0 until the process's arena exists, so no address matches before.
struct View {
    base: AtomicUsize,
    tags: AtomicPtr<AtomicU32>,
    units: AtomicUsize,
}

static VIEW: View = View {
    base: AtomicUsize::new(0),
    tags: AtomicPtr::new(core::ptr::null_mut()),
    units: AtomicUsize::new(0),
};

/// Makes the process's arena (its page map) the one writes are bounded in.
pub(crate) fn publish(map: &PageMap) {
    VIEW.base.store(map.base(), Ordering::Relaxed);
    VIEW.tags
        .store(map.tags() as *mut AtomicU32, Ordering::Relaxed);
    VIEW.units.store(map.units(), Ordering::Release);
}

/// The start of the object a write of `n` bytes at `dst` runs out of, when `dst` lies in an
/// object of a size class and the write goes past the object's usable bytes (into its
/// neighbour, or into the line that spaces the 4 KiB class's objects); `None` otherwise.
#[inline(always)]
pub(crate) fn overrun_object(dst: usize, n: usize) -> Option<usize> {
    let units = VIEW.units.load(Ordering::Acquire);
    let from_base = dst.wrapping_sub(VIEW.base.load(Ordering::Relaxed));
    let unit = from_base >> UNIT_SHIFT;
    if unit >= units {
        return None;
    }
    // SAFETY: `unit` is a unit of the published map (`units` was read first, with acquire, and
    // the map never shrinks), whose tags are readable for every unit, written or not.
    let tag = Tag(unsafe { &*VIEW.tags.load(Ordering::Relaxed).add(unit) }.load(Ordering::Relaxed));
    if !tag.is_bag() {
        return None;
    }
    let class = tag.class();
    let in_object = class.offset_in_object((from_base & (UNIT - 1)) + tag.offset_bytes());
    if n <= class.usable().saturating_sub(in_object) {
        return None;
    }
    Some(dst - in_object)
}
