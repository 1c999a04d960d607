//! Samples that stay in their bags (lean mode): a sampled allocation of a size class is an
//! object like any other of its class, and what the profile needs at its free is kept beside
//! the page map, one word per 32 KiB unit of the arena.
//!
//! - **The slot** of a unit holds the sample of one object inside it (its offset in the unit,
//!   its site, its class and the bytes asked for; the weights follow from those and the rate,
//!   as they did when it was recorded). A unit holds at most one sample at a time: a sample
//!   whose unit's slot is taken is served as a large block of its own instead (`thread/
//!   profile.rs`), as every sample was before. The slots are one `MAP_NORESERVE` mapping of 8
//!   bytes per unit, touched only where a sample lands (a page of slots covers 16 MiB of heap).
//! - **The tag bit** [`Tag::SAMPLED`] on the unit says that its slot is in use, so that a free
//!   reads a slot only for objects of units that hold a sample. The frees of a profiled process
//!   all take slow paths (lean mode's home view is empty), and each of them either refuses a
//!   unit with the bit (lean mode's push, `HomeView::bag_object_unsampled`) or calls
//!   [`forget`] before anything else (the faces' general free paths).
//!
//! Order: a sample claims the slot (compare-and-swap from empty), then sets the bit, both before
//! the allocation returns, so every free of it sees them. Its free checks the slot names it,
//! clears the bit, then empties the slot: a sample of another object of the unit taken
//! meanwhile finds the slot still taken and goes to a large block, or claims it once emptied
//! and sets the bit again after this clear. Nothing here allocates or waits.

use crate::arena::pagemap::{PageMap, Tag};
use crate::size_class::{SizeClass, UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The slots, mapped by the first sample that stays in its bag; null before (or when the
/// mapping failed: every sample is then a large block).
static SLOTS: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
/// The page map's tags, base and unit count, written before `SLOTS` is published.
static TAGS: AtomicPtr<AtomicU32> = AtomicPtr::new(core::ptr::null_mut());
static BASE: AtomicUsize = AtomicUsize::new(0);
static UNITS: AtomicUsize = AtomicUsize::new(0);

/// A slot in use: its top bit.
const USED: u64 = 1 << 63;

/// A sample's slot word: used, offset in the unit (15 bits), site index (14 bits), class
/// (8 bits) and bytes asked for (19 bits: up to 256 KiB, the largest class).
fn pack(offset: usize, site: usize, class: SizeClass, asked: usize) -> u64 {
    USED | (offset as u64) << 41 | (site as u64) << 27 | u64::from(class.0) << 19 | asked as u64
}

fn unpack(word: u64) -> (usize, usize, SizeClass, usize) {
    (
        (word >> 41) as usize & (UNIT - 1),
        (word >> 27) as usize & ((1 << 14) - 1),
        SizeClass((word >> 19) as u8),
        word as usize & ((1 << 19) - 1),
    )
}

const _: () = assert!(super::sites::CAPACITY <= 1 << 14);
const _: () = assert!(crate::size_class::MAX_SMALL < 1 << 19);
const _: () = assert!(UNIT_SHIFT == 15);

/// The slots, mapping them for `map` on first use; `None` when they cannot be mapped.
fn slots(map: &PageMap) -> Option<*const AtomicU64> {
    let slots = SLOTS.load(Ordering::Acquire);
    if !slots.is_null() {
        return Some(slots);
    }
    let bytes = map.units() * core::mem::size_of::<AtomicU64>();
    let mapped = crate::os::reserve(bytes)? as *mut AtomicU64;
    // One arena per process: whoever wins writes the same values.
    TAGS.store(map.tags() as *mut AtomicU32, Ordering::Relaxed);
    BASE.store(map.base(), Ordering::Relaxed);
    UNITS.store(map.units(), Ordering::Relaxed);
    match SLOTS.compare_exchange(
        core::ptr::null_mut(),
        mapped,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Some(mapped),
        Err(theirs) => {
            // SAFETY: our own mapping, never published.
            unsafe { libc::munmap(mapped as *mut libc::c_void, bytes) };
            Some(theirs)
        }
    }
}

/// Records the object at `address` (of `class`, just allocated, not yet handed out) as the
/// sample of site `site` for a request of `asked` bytes; false, changing nothing, when its
/// unit holds a sample already or the slots cannot be mapped.
pub(crate) fn claim(
    map: &PageMap,
    address: usize,
    class: SizeClass,
    site: usize,
    asked: usize,
) -> bool {
    let Some(slots) = slots(map) else {
        return false;
    };
    let unit = map.unit_of(address);
    // SAFETY: `address` is inside the arena (an object just allocated there), so its unit is
    // below the unit count the slots were mapped for.
    let slot = unsafe { &*slots.add(unit) };
    let word = pack(address & (UNIT - 1), site, class, asked.min(class.size()));
    if slot
        .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // SAFETY: the unit is inside the arena (as above), so its tag is in the tag array.
    unsafe { &*map.tags().add(unit) }.fetch_or(Tag::SAMPLED, Ordering::Release);
    true
}

/// A free of `address` (any pointer a program passes to `free`): if it is an object whose
/// sample stayed in its bag, takes the sample's share off its site's live counts and empties
/// its slot. Touches nothing but the unit's tag for anything else.
#[inline]
pub(crate) fn forget(address: usize) {
    let slots = SLOTS.load(Ordering::Acquire);
    if slots.is_null() {
        return;
    }
    let unit = address.wrapping_sub(BASE.load(Ordering::Relaxed)) >> UNIT_SHIFT;
    if unit >= UNITS.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: a unit of the arena: the tag array and the slots hold an entry for it (both
    // written before `SLOTS` was published, which the Acquire above read).
    let tag = unsafe { &*TAGS.load(Ordering::Relaxed).add(unit) };
    if tag.load(Ordering::Acquire) & Tag::SAMPLED == 0 {
        return;
    }
    // SAFETY: as above, the slot of a unit of the arena.
    let slot = unsafe { &*slots.add(unit) };
    forget_in(tag, slot, Some(address));
}

/// The bag of `units` units at `start` goes back whole (a first-class heap dropped or reset):
/// the sample any of its units holds leaves the profile's live counts.
pub(crate) fn forget_units(start: usize, units: usize) {
    let slots = SLOTS.load(Ordering::Acquire);
    if slots.is_null() {
        return;
    }
    let first = start.wrapping_sub(BASE.load(Ordering::Relaxed)) >> UNIT_SHIFT;
    for unit in first..(first + units).min(UNITS.load(Ordering::Relaxed)) {
        // SAFETY: a unit of the arena (bounded above): its tag and slot exist, as in `forget`.
        let (tag, slot) = unsafe { (&*TAGS.load(Ordering::Relaxed).add(unit), &*slots.add(unit)) };
        if tag.load(Ordering::Acquire) & Tag::SAMPLED != 0 {
            forget_in(tag, slot, None);
        }
    }
}

/// Empties the slot of a unit whose tag has [`Tag::SAMPLED`] if it names the object at
/// `address` (any object of the unit for `None`), and takes the sample off its site.
#[cold]
#[inline(never)]
fn forget_in(tag: &AtomicU32, slot: &AtomicU64, address: Option<usize>) {
    let word = slot.load(Ordering::Acquire);
    let (offset, site, class, asked) = unpack(word);
    if word & USED == 0 || address.is_some_and(|address| offset != address & (UNIT - 1)) {
        // Another object of the unit is the sample.
        return;
    }
    tag.fetch_and(!Tag::SAMPLED, Ordering::Release);
    if slot
        .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        let (objects, bytes) = super::weights(class.size(), asked, super::rate());
        super::sites::forget(site, objects, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_word_keeps_every_field() {
        let cases = [
            (0, 0, SizeClass(0), 0),
            (
                UNIT - 16,
                (1 << 14) - 1,
                SizeClass(103),
                crate::size_class::MAX_SMALL,
            ),
            (4096, 77, SizeClass(12), 1000),
        ];
        for (offset, site, class, asked) in cases {
            let word = pack(offset, site, class, asked);
            assert_ne!(word & USED, 0);
            assert_eq!(unpack(word), (offset, site, class, asked));
        }
    }
}
