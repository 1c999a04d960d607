//! The page map: for every 32 KiB unit of the arena, a 32-bit **tag** (what the unit is) and a
//! 64-byte **unit descriptor** (meaningful on the first unit of a bag or span, and on the last
//! unit of a free span). Both arrays are reserved `MAP_NORESERVE` and touched sparsely, so a
//! terabyte of address space costs a few pages of metadata per megabyte actually used.
//!
//! `free(p)` needs only `tags[(p - base) >> 15]`: the kind, the size class and, inside a bag,
//! the distance back to the bag's first unit. No header precedes any object.
//!
//! Tags are atomics because `free` reads them without a lock; they are written only under the
//! lock that owns the unit (a region's span lock), and a unit's tag is stable while any object
//! in it is live. Descriptors are plain memory guarded by the same locks as their owners.
//!
//! In secure mode a third array, the **allocation bitmap**, has one bit per 8 heap bytes (every
//! object starts on one): set while the object at that address is the program's, clear while it
//! is free. Bits are flipped with atomic read-modify-writes by whichever thread hands the object
//! out or takes it back, so a second `free` of one object finds its bit clear.
//!
//! In every mode a fourth array, the **free bits**, as large as the allocation bitmap, holds
//! each bag's free objects: bit `i` of the words that start at the bag's first unit's share
//! (see [`FreeBits`]) is set while object `i` is back in the bag (not out, not in a released
//! granule). They are read and written only under the bag's class lock, and cleared when the
//! bag leaves use (it falls empty, is taken back unused, or its heap is dropped), so a span the
//! region hands out as a bag finds them clear without a store (the array starts zeroed): a bag
//! whose objects never come back never touches its bits' page.

pub use super::free_bits::FreeBits;
use crate::size_class::{SizeClass, UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Heap bytes per bit of the allocation bitmap: the smallest class and the object alignment.
const BYTES_PER_BIT: usize = 8;
/// Bitmap bytes per unit (512: 4096 bits for a 32 KiB unit).
const BITMAP_BYTES_PER_UNIT: usize = UNIT / BYTES_PER_BIT / 8;

/// What a unit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Not handed out: never used, or inside a free span.
    Unused,
    /// The first unit of a bag of small objects.
    Bag,
    /// A later unit of a bag.
    BagBody,
    /// The first unit of a large object.
    Large,
    /// A later unit of a large object.
    LargeBody,
    /// The first unit of a free span (its descriptor holds the span length).
    Free,
    /// The last unit of a free span of two or more units (its descriptor holds the length).
    FreeTail,
}

/// A decoded tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub u32);

impl Tag {
    pub const UNUSED: Tag = Tag(0);
    pub const LARGE: Tag = Tag(3);
    pub const LARGE_BODY: Tag = Tag(4);
    pub const FREE: Tag = Tag(5);
    pub const FREE_TAIL: Tag = Tag(6);

    /// The kind bit every bag unit has (first and later), so a free tests it alone.
    const BAG_BIT: u32 = 8;

    /// A bag unit that holds a heap-profile sample (`profile/in_bag.rs`): set and cleared on
    /// the live tag (`fetch_or`, `fetch_and`) while the bag is in use. Outside the kind's four
    /// bits and the class's, so nothing that reads a bag's tag for its kind, class or offset
    /// sees it.
    pub const SAMPLED: u32 = 16;

    /// The head unit of a large object that the program freed and a thread keeps for its next
    /// large allocation of that size (`thread/large.rs`): set and cleared on the live tag
    /// (`fetch_or`, `fetch_and`); its kind stays [`Kind::Large`] (the region still counts the
    /// span in use), but a free, a resize or a size lookup of it is a misuse.
    pub const KEPT: u32 = 32;

    /// Where a bag unit's class sits (bits 6–13): masked, the tag is then the class times 64,
    /// its `ClassSlot`, with no shift on the C face's free.
    const CLASS_SHIFT: u32 = 6;

    /// Where a bag unit's offset in units from the bag's first unit sits (bits 15–31): at the
    /// unit's shift, so masked, the tag is the offset in bytes of the unit from the bag's start
    /// (see [`Tag::offset_bytes`]), with no shift on the C face's free.
    const OFFSET_SHIFT: u32 = UNIT_SHIFT;

    pub fn bag(class: SizeClass, offset_units: usize) -> Tag {
        debug_assert!(offset_units < 1 << (32 - Tag::OFFSET_SHIFT));
        let kind = if offset_units == 0 {
            Tag::BAG_BIT | 1
        } else {
            Tag::BAG_BIT | 2
        };
        Tag(kind
            | (class.0 as u32) << Tag::CLASS_SHIFT
            | (offset_units as u32) << Tag::OFFSET_SHIFT)
    }

    #[inline(always)]
    pub fn kind(self) -> Kind {
        match self.0 & 0xf {
            9 => Kind::Bag,
            10 => Kind::BagBody,
            3 => Kind::Large,
            4 => Kind::LargeBody,
            5 => Kind::Free,
            6 => Kind::FreeTail,
            _ => Kind::Unused,
        }
    }

    /// True for both units of a bag (first and later).
    #[inline(always)]
    pub fn is_bag(self) -> bool {
        self.0 & Tag::BAG_BIT != 0
    }

    /// True for a bag unit without a heap-profile sample ([`Tag::SAMPLED`]).
    #[inline(always)]
    pub fn is_unsampled_bag(self) -> bool {
        self.0 & (Tag::BAG_BIT | Tag::SAMPLED) == Tag::BAG_BIT
    }

    #[inline(always)]
    pub fn class(self) -> SizeClass {
        SizeClass((self.0 >> Tag::CLASS_SHIFT) as u8)
    }

    /// Units back to the bag's first unit.
    #[inline(always)]
    pub fn offset_units(self) -> usize {
        (self.0 >> Tag::OFFSET_SHIFT) as usize
    }

    /// Bytes from the bag's start to the unit's: [`Tag::offset_units`] in bytes, one mask.
    #[inline(always)]
    pub fn offset_bytes(self) -> usize {
        (self.0 & !((1 << Tag::OFFSET_SHIFT) - 1)) as usize
    }
}

// The class's 8 bits end below the offset, and a bag's offset fits: a bag of any class is a
// few units, far below 2^17.
const _: () = assert!(Tag::CLASS_SHIFT + 8 <= Tag::OFFSET_SHIFT);
const _: () = assert!(Tag::BAG_BIT < 1 << Tag::CLASS_SHIFT);
const _: () = assert!(Tag::SAMPLED > 0xf && Tag::SAMPLED < 1 << Tag::CLASS_SHIFT);
const _: () = assert!(Tag::KEPT > 0xf && Tag::KEPT < 1 << Tag::CLASS_SHIFT);
const _: () = assert!(Tag::KEPT != Tag::SAMPLED);

/// Descriptor of a unit. Bag fields are owned by the node heap's class lock; span fields by the
/// region's span lock. All-zero is a valid, empty descriptor.
#[repr(C, align(64))]
pub struct UnitMeta {
    /// Length in units of the bag or span this unit starts (or, for a free tail, ends).
    pub units: usize,
    /// Links: the class's partial-bag list, or a free-span size bucket.
    pub next: *mut UnitMeta,
    pub prev: *mut UnitMeta,
    /// The fields of what the unit heads. Its tag says which: a bag ([`Kind::Bag`]), a large
    /// object ([`Kind::Large`]) or a free span ([`Kind::Free`]). The region writes the role
    /// whole each time a span changes hands, so no field is ever read in another role's sense.
    pub role: Role,
}

/// The role-specific part of a [`UnitMeta`] (all-zero is valid for every role).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Role {
    /// A bag (class lock).
    pub bag: BagState,
    /// A large object (its owner).
    pub large: LargeState,
    /// A free span (span lock).
    pub free: FreeState,
}

impl Role {
    /// A bag just handed out: nothing carved, nothing out; `zeroed` when its memory reads as zero.
    pub const fn new_bag(zeroed: bool) -> Role {
        Role {
            bag: BagState {
                carved: 0,
                live: 0,
                listed: 0,
                sweep: BagSweep {
                    released: 0,
                    returned_at: 0,
                },
                seed: 0,
                zeroed,
                moved: false,
                unsettled: false,
                partition: 0,
            },
        }
    }

    /// A large object just handed out, without a guard.
    pub const fn new_large(zeroed: bool) -> Role {
        Role {
            large: LargeState {
                guard_pages: 0,
                zeroed,
                interleaved: false,
                owner: 0,
                sample_site: 0,
                sample_objects: 0,
                sample_bytes: 0,
            },
        }
    }

    /// A free span, dirty since `freed_at` (monotonic ns), or clean when `freed_at` is 0.
    pub const fn new_free(freed_at: u64) -> Role {
        Role {
            free: FreeState {
                age: AgeLinks {
                    older: core::ptr::null_mut(),
                    newer: core::ptr::null_mut(),
                },
                freed_at,
                canary: false,
                tail_canary: false,
            },
        }
    }
}

/// A bag's own state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BagState {
    /// Objects carved from it so far (the rest is still untouched memory).
    pub carved: u16,
    /// Objects out of the bag (in use, or cached in a thread heap or transfer ring).
    pub live: u16,
    /// Objects free in the bag: its set free bits ([`FreeBits`]), `carved - live` less the
    /// objects of released granules.
    pub listed: u16,
    /// Automatic tiering's last move of it was left part done by the kernel (some pages stayed
    /// where they were): it is tried again (`node/tiering.rs`). Written under its class lock;
    /// here, before `sweep`'s alignment, the descriptor stays 64 bytes.
    pub unsettled: bool,
    /// What the sweep knows of it.
    pub sweep: BagSweep,
    /// Secure mode: the key of its random carving order.
    pub seed: u32,
    /// Its memory read as zero when it was handed out (fresh or decommitted), so an object
    /// carved from it for the first time is zero but for the link word carving wrote.
    pub zeroed: bool,
    /// Its pages were moved to its region's far node (automatic tiering, `node/tiering.rs`);
    /// written under its class lock. (Here, in the byte before `partition`, the descriptor
    /// stays 64 bytes.)
    pub moved: bool,
    /// The call-site partition whose class heap owns it (0 with partitions off); set when the
    /// bag is carved, constant while any of its objects is out.
    pub partition: u16,
}

// Counts and indexes of a bag's objects fit its 16-bit fields.
const _: () = assert!(crate::size_class::MAX_CAPACITY <= u16::MAX as usize);

/// A large object's own state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LargeState {
    /// Secure mode: its usable pages, after which its guard starts; 0 for no guard.
    pub guard_pages: u32,
    /// Its memory read as zero when it was handed out, so `calloc` need not clear it.
    pub zeroed: bool,
    /// Its pages are interleaved with the far nodes (`arena/interleave.rs`): its span gets the
    /// region's policy back when it is freed.
    pub interleaved: bool,
    /// The first-class heap that owns it (its partition, `node/owned/`); 0 for a block of
    /// the shared pools.
    pub owner: u16,
    /// A heap-profile sample (`crate::profile`): its site's index plus one (0: not sampled),
    /// and what it stands for, taken off the site's live counts when it is freed.
    pub sample_site: u32,
    /// In 1/2^16ths of an object (`profile::OBJECT_SHIFT`).
    pub sample_objects: u64,
    pub sample_bytes: u64,
}

/// A free span's own state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FreeState {
    /// Its place on the age list (dirty spans only).
    pub age: AgeLinks,
    /// When it was freed, in monotonic ns; 0 for a decommitted ("clean") span.
    pub freed_at: u64,
    /// Its first word holds its canary (a dirty span of a pool with canaries, see
    /// `Region::free`), to be checked when the span is merged into the one before it or its
    /// head is handed out again.
    pub canary: bool,
    /// Its last word holds its tail canary, to be checked when the span after it is merged
    /// into it or its tail is handed out again.
    pub tail_canary: bool,
}

/// A dirty free span's neighbours on the age list of committed free spans, oldest first.
#[derive(Clone, Copy)]
pub struct AgeLinks {
    pub older: *mut UnitMeta,
    pub newer: *mut UnitMeta,
}

/// A live bag's state for the sweep that gives wholly free pages inside it back to the OS (see
/// `node::sweep`).
#[derive(Clone, Copy)]
pub struct BagSweep {
    /// Bit `g`: granule `g` of the bag was given back to the OS and the objects that start in it
    /// are free, their free bits clear.
    pub released: u64,
    /// The node's upkeep deadline when an object last came back to the bag; 0 when the bag has
    /// had no return since its last sweep.
    pub returned_at: u64,
}

const _: () = assert!(core::mem::size_of::<UnitMeta>() == 64);
// A bag tag masked to its class bits is the class's `ClassSlot` (see `Tag::CLASS_SHIFT`).
const _: () = assert!(1 << Tag::CLASS_SHIFT == crate::size_class::SLOT_BYTES);

/// The two parallel arrays, indexed by unit number.
pub struct PageMap {
    base: usize,
    units: usize,
    tags: *const AtomicU32,
    metas: *mut UnitMeta,
    /// The allocation bitmap (secure mode), or null.
    bits: *const AtomicU64,
    /// The bags' free bits (every mode): [`BITMAP_BYTES_PER_UNIT`] bytes a unit.
    free_bits: *const AtomicU64,
}

// SAFETY: the map only hands out references to atomics (tags) and raw pointers (descriptors)
// whose users synchronise through the owning locks, as the module documentation states.
unsafe impl Sync for PageMap {}
// SAFETY: as for Sync; the arrays are process-wide mappings, not thread-bound.
unsafe impl Send for PageMap {}

impl PageMap {
    /// Bytes of metadata needed to map `units` units (with the allocation bitmap if `secure`).
    pub fn bytes_for(units: usize, secure: bool) -> usize {
        let bitmap = if secure { BITMAP_BYTES_PER_UNIT } else { 0 };
        units
            * (core::mem::size_of::<AtomicU32>()
                + core::mem::size_of::<UnitMeta>()
                + BITMAP_BYTES_PER_UNIT
                + bitmap)
    }

    /// Where the tag array lies in the storage of a map of `units` units: its byte offset and
    /// length, both page multiples when `units` is a multiple of 1024.
    pub fn tags_in_storage(units: usize) -> (usize, usize) {
        (
            units * core::mem::size_of::<UnitMeta>(),
            units * core::mem::size_of::<AtomicU32>(),
        )
    }

    /// # Safety
    /// `storage` must be zeroed, writable, 64-byte aligned, at least `bytes_for(units, secure)`
    /// long, and live (and be used by nothing else) for as long as the map.
    pub unsafe fn new(base: usize, units: usize, storage: *mut u8, secure: bool) -> PageMap {
        let metas = storage as *mut UnitMeta;
        let (tags_offset, _) = PageMap::tags_in_storage(units);
        // SAFETY: the tags follow the descriptors inside `storage` (contract above).
        let tags = unsafe { storage.add(tags_offset) } as *const AtomicU32;
        // The free bits follow the tags inside `storage`, and the allocation bitmap follows
        // them; 4-byte tags of a whole number of 64-byte descriptors keep both 8-aligned.
        let free_offset = tags_offset + units * core::mem::size_of::<AtomicU32>();
        // SAFETY: inside `storage` (contract above), as stated.
        let free_bits = unsafe { storage.add(free_offset) } as *const AtomicU64;
        let bits = if secure {
            // SAFETY: inside `storage` (contract above), as stated.
            let bits = unsafe { storage.add(free_offset + units * BITMAP_BYTES_PER_UNIT) };
            bits as *const AtomicU64
        } else {
            core::ptr::null()
        };
        PageMap {
            base,
            units,
            tags,
            metas,
            bits,
            free_bits,
        }
    }

    /// The arena's first address.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Units the map covers.
    pub fn units(&self) -> usize {
        self.units
    }

    #[inline(always)]
    pub fn unit_of(&self, address: usize) -> usize {
        (address - self.base) >> UNIT_SHIFT
    }

    #[inline(always)]
    pub fn address_of(&self, unit: usize) -> usize {
        self.base + (unit << UNIT_SHIFT)
    }

    #[inline(always)]
    pub fn contains(&self, address: usize) -> bool {
        address.wrapping_sub(self.base) >> UNIT_SHIFT < self.units
    }

    /// The tag array, for fast paths that cache it (index: `(address - base) >> UNIT_SHIFT`).
    pub fn tags(&self) -> *const AtomicU32 {
        self.tags
    }

    /// The descriptor array (unit `u`'s at index `u`), for views that index it without a call.
    pub fn metas(&self) -> *const UnitMeta {
        self.metas
    }

    /// The tag of the unit holding `address` (which must lie inside the arena).
    #[inline(always)]
    pub fn tag(&self, address: usize) -> Tag {
        debug_assert!(self.contains(address));
        // SAFETY: `address` is inside the arena, so its unit index is within the tag array.
        Tag(unsafe { &*self.tags.add(self.unit_of(address)) }.load(Ordering::Relaxed))
    }

    pub fn set_tag(&self, unit: usize, tag: Tag) {
        crate::os::invariant(unit < self.units, "a tag past the page map");
        // SAFETY: bounds checked above. Release: whoever later reads this tag for an object of
        // the unit got the object through a lock or queue that orders after this store anyway.
        unsafe { &*self.tags.add(unit) }.store(tag.0, Ordering::Release);
    }

    /// Commits the metadata of units `first..end` (commit-on-demand arenas only). The ranges are
    /// widened to whole pages; committing a page twice is harmless.
    pub fn commit_units(&self, first: usize, end: usize) -> bool {
        let page = crate::os::PAGE_SIZE;
        let span = |start: usize, stop: usize| {
            let low = start & !(page - 1);
            let high = (stop + page - 1) & !(page - 1);
            crate::os::commit(low as *mut u8, high - low)
        };
        let metas = self.metas as usize;
        let tags = self.tags as usize;
        let bits = self.bits as usize;
        let free_bits = self.free_bits as usize;
        span(
            metas + first * core::mem::size_of::<UnitMeta>(),
            metas + end * core::mem::size_of::<UnitMeta>(),
        ) && span(tags + first * 4, tags + end * 4)
            && span(
                free_bits + first * BITMAP_BYTES_PER_UNIT,
                free_bits + end * BITMAP_BYTES_PER_UNIT,
            )
            && (bits == 0
                || span(
                    bits + first * BITMAP_BYTES_PER_UNIT,
                    bits + end * BITMAP_BYTES_PER_UNIT,
                ))
    }

    /// The bitmap word and bit of the object at `address` (secure mode only; the address must lie
    /// below its region's frontier, where the bitmap is committed).
    #[inline]
    fn bit_of(&self, address: usize) -> (&AtomicU64, u64) {
        debug_assert!(!self.bits.is_null() && self.contains(address));
        let index = (address - self.base) / BYTES_PER_BIT;
        // SAFETY: the bitmap holds a bit for every 8 bytes of the arena and `address` is inside.
        let word = unsafe { &*self.bits.add(index / 64) };
        (word, 1 << (index % 64))
    }

    /// Marks the object at `address` as the program's; false if it already was (secure mode).
    #[inline]
    pub fn mark_allocated(&self, address: usize) -> bool {
        let (word, bit) = self.bit_of(address);
        // Relaxed: objects move between threads only through locks and queues that order the
        // hand-over anyway; the read-modify-write itself is what makes two marks exclusive.
        word.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// Marks the object at `address` as free; false if it was not the program's (secure mode):
    /// a double free, or a pointer never handed out.
    #[inline]
    pub fn mark_freed(&self, address: usize) -> bool {
        let (word, bit) = self.bit_of(address);
        // Relaxed: as in `mark_allocated`.
        word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// Clears the allocation bits of `bytes` from `start` (secure mode; both multiples of 512
    /// bytes, one bitmap word): a first-class heap dropped whole takes back every object of
    /// its bags at once.
    pub fn clear_allocated_range(&self, start: usize, bytes: usize) {
        let step = BYTES_PER_BIT * 64;
        debug_assert!(start % step == 0 && bytes % step == 0);
        let mut address = start;
        while address < start + bytes {
            let (word, _) = self.bit_of(address);
            word.store(0, Ordering::Relaxed);
            address += step;
        }
    }

    /// True while the object at `address` is the program's (secure mode).
    #[inline]
    pub fn is_allocated(&self, address: usize) -> bool {
        let (word, bit) = self.bit_of(address);
        word.load(Ordering::Relaxed) & bit != 0
    }

    /// The free bits of the bag whose first unit starts at `start` (an address of the arena
    /// below its region's frontier, where the bits are committed).
    #[inline(always)]
    pub fn free_bits(&self, start: usize) -> FreeBits {
        debug_assert!(self.contains(start) && start % UNIT == 0);
        // SAFETY: the free bits hold `BITMAP_BYTES_PER_UNIT` bytes for every unit, and `start`
        // is a unit of the arena.
        unsafe {
            FreeBits::at_words(
                self.free_bits
                    .add(self.unit_of(start) * (BITMAP_BYTES_PER_UNIT / 8)),
            )
        }
    }

    /// The descriptor of unit `unit`.
    #[inline(always)]
    pub fn meta(&self, unit: usize) -> *mut UnitMeta {
        debug_assert!(unit < self.units);
        // SAFETY: in bounds of the descriptor array.
        unsafe { self.metas.add(unit) }
    }

    /// The unit number of a descriptor pointer.
    #[inline(always)]
    pub fn unit_of_meta(&self, meta: *const UnitMeta) -> usize {
        (meta as usize - self.metas as usize) / core::mem::size_of::<UnitMeta>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for class in [0u8, 17, 103] {
            for offset in [0, 1, 63] {
                let tag = Tag::bag(SizeClass(class), offset);
                assert!(tag.is_bag());
                assert_eq!(tag.class(), SizeClass(class));
                assert_eq!(tag.offset_units(), offset);
                assert_eq!(
                    tag.kind(),
                    if offset == 0 {
                        Kind::Bag
                    } else {
                        Kind::BagBody
                    }
                );
            }
        }
        assert_eq!(Tag::UNUSED.kind(), Kind::Unused);
        assert_eq!(Tag::LARGE.kind(), Kind::Large);
        assert!(!Tag::LARGE.is_bag() && !Tag::FREE.is_bag());
        assert_eq!(core::mem::size_of::<UnitMeta>(), 64);
    }

    /// A map of `units` units over addresses from 2^40, on fresh storage of its own.
    fn test_map(units: usize, secure: bool) -> PageMap {
        let storage = crate::os::reserve(PageMap::bytes_for(units, secure)).unwrap();
        // SAFETY: a fresh zeroed mapping of the right size, used only by this map.
        unsafe { PageMap::new(1 << 40, units, storage, secure) }
    }

    #[test]
    fn page_map_looks_up_units() {
        let units = 1024;
        let base = 1 << 40;
        let map = test_map(units, true);
        assert!(map.contains(base) && map.contains(base + (units << UNIT_SHIFT) - 1));
        assert!(!map.contains(base - 1) && !map.contains(base + (units << UNIT_SHIFT)));
        map.set_tag(5, Tag::bag(SizeClass(3), 2));
        assert_eq!(map.tag(map.address_of(5) + 100).class(), SizeClass(3));
        assert_eq!(map.tag(map.address_of(6)), Tag::UNUSED);
        assert_eq!(map.unit_of_meta(map.meta(77)), 77);
        // The allocation bitmap: one bit per object start, exclusive marks.
        let object = map.address_of(9) + 24;
        assert!(!map.is_allocated(object));
        assert!(map.mark_allocated(object));
        assert!(!map.mark_allocated(object), "marked twice");
        assert!(!map.is_allocated(object + 8) && !map.is_allocated(object - 8));
        assert!(map.mark_freed(object));
        assert!(!map.mark_freed(object), "freed twice");
        assert!(map.mark_allocated(map.address_of(units - 1) + UNIT - 8));
    }

    #[test]
    fn free_bits_set_clear_and_count_across_words() {
        let map = test_map(64, false);
        let (bag, next) = (
            map.free_bits(map.address_of(3)),
            map.free_bits(map.address_of(4)),
        );
        assert!(bag.set(5) && !bag.set(5), "a bit set twice");
        assert!(bag.test(5) && !bag.test(4) && !bag.test(6));
        assert_eq!(bag.set_range(60, 200, true), 140);
        assert_eq!(
            bag.set_range(0, 200, true),
            200 - 141,
            "only the clear ones change"
        );
        assert!(bag.all_set(0, 200) && !bag.all_set(0, 201));
        assert_eq!(bag.set_range(63, 129, false), 66);
        assert!(bag.all_set(0, 63) && !bag.test(63) && !bag.test(128) && bag.all_set(129, 200));
        assert_eq!((bag.word(1), bag.word(2) & 1), (0, 0));
        // Each unit's share is its own: the next unit's bits are untouched.
        assert!((0..64).all(|word| next.word(word) == 0));
        bag.clear(200);
        assert!((0..4).all(|word| bag.word(word) == 0));
    }
}
