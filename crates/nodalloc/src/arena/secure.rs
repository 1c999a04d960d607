//! Secure mode at the arena layer: what hardening needs from the memory and its metadata.
//!
//! - **Encoded links.** A free object's first word (its link in a thread list, a batch, a bag's
//!   free list or a remote-free chain) holds `next ^ key ^ rotl(slot, 29)`: the process's random
//!   key and the object's own address. Decoding checks the result: null, or the start of a free
//!   object of the expected class (or, for remote-free chains, which mix classes, of the expected
//!   node), found through the page map and the allocation bitmap. Anything else aborts naming
//!   the object and the value it held, so an overwrite after free is never followed.
//! - **The allocation bitmap** (in the page map): set when an object is handed to the program,
//!   cleared when the program frees it. A free finding the bit clear is a double free; a hand-out
//!   finding it set means a free list was forged.
//! - **Random carving.** A new bag hands out its objects in a random order: the `i`-th object
//!   carved is `carve_order(i)`, a keyed bijection of `0..capacity`, so no memory is needed and
//!   untouched objects stay untouched.
//! - **Guard pages.** A large object's usable bytes are its size rounded up to a page; the rest
//!   of its span (at least one page) is `PROT_NONE`, so a linear overflow faults.
//!
//! Nothing here runs unless the arena was created secure; the callers test
//! [`Arena::is_secure`] on slow paths only.

use super::Arena;
use crate::os::{self, PAGE_SIZE};
use crate::size_class::{SizeClass, UNIT, UNIT_SHIFT};
use core::sync::atomic::Ordering;

/// Rotation of a slot's address before it is mixed into the slot's link, so the address's
/// varying bits land on the link's low bits too (an object's low bits are zero).
const SLOT_ROTATION: u32 = 29;

/// Step of the seed generator (the golden ratio in 64 bits, as in SplitMix64).
const SEED_STEP: u64 = 0x9e37_79b9_7f4a_7c15;

/// What a decoded link may point to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A free object of this class: thread lists, batches, bag free lists.
    Class(SizeClass),
    /// A free object of any class in this node's region: remote-free chains mix classes.
    Node(usize),
}

/// Why the arena refuses to take an object back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not the start of an object of the class.
    NotAnObject,
    /// An object the program does not hold: freed already, or never handed out.
    NotAllocated,
}

pub use crate::os::mix;

/// The object to carve `index`-th from a bag of `capacity` objects, in the order `seed` picks:
/// a bijection of `0..capacity`. Four rounds of add-key, multiply by a fixed odd constant and
/// xor-shift, each a bijection of `bits`-bit numbers, then cycle-walking back into `0..capacity`
/// (fewer than two rounds on average, since `capacity > 2^(bits - 1)`). The 32-bit seed is
/// spread over 64 bits first (a bijective mix) and each round adds its own 16 bits of it (bags
/// hold at most 4096 objects). The multipliers are constants, not key bits: a keyed multiplier
/// that happened to be 1 or -1 modulo `2^bits` left a round near the identity, and about one
/// bag in 120 of 128 objects was carved nearly in address order.
pub fn carve_order(index: u32, capacity: u32, seed: u32) -> u32 {
    const MULTIPLIERS: [u32; 4] = [0x7F4A_7C15, 0x27D4_EB4F, 0x9E37_79F9, 0x1656_67C5];
    let seed = mix(u64::from(seed));
    debug_assert!(index < capacity);
    if capacity <= 1 {
        return 0;
    }
    let bits = u32::BITS - (capacity - 1).leading_zeros();
    let mask = (1u32 << bits) - 1;
    let shift = bits / 2 + 1;
    let mut value = index;
    loop {
        for (round, multiplier) in MULTIPLIERS.iter().enumerate() {
            let key = (seed >> (round * 16)) as u32 & 0xffff;
            value = value.wrapping_add(key) & mask;
            value = value.wrapping_mul(*multiplier) & mask;
            value ^= value >> shift;
        }
        if value < capacity {
            return value;
        }
    }
}

/// Usable bytes and span units of a large object of `size` bytes in secure mode: the size
/// rounded up to a page, then at least one page of guard. `None` on overflow.
pub fn guarded_layout(size: usize) -> Option<(usize, usize)> {
    let usable = size.max(1).checked_next_multiple_of(PAGE_SIZE)?;
    let units = usable.checked_add(PAGE_SIZE + UNIT - 1)? >> UNIT_SHIFT;
    Some((usable, units))
}

impl Arena {
    #[inline(always)]
    pub fn is_secure(&self) -> bool {
        self.secure
    }

    /// The mask of the link stored in the free object at `slot`.
    #[inline(always)]
    fn link_mask(&self, slot: *mut u8) -> usize {
        self.key ^ (slot as usize).rotate_left(SLOT_ROTATION)
    }

    /// Writes the link of the free object at `slot`: as [`crate::ds::set_next`] does, or
    /// encoded with the process's secret in secure mode.
    ///
    /// # Safety
    /// `slot` must be a free object the caller owns (at least 8 bytes, 8-aligned).
    #[inline]
    pub unsafe fn write_link(&self, slot: *mut u8, next: *mut u8) {
        let value = if self.secure {
            next as usize ^ self.link_mask(slot)
        } else {
            crate::ds::stored_link(next)
        };
        // SAFETY: the caller owns the free object at `slot`, large and aligned enough.
        unsafe { (slot as *mut usize).write(value) };
    }

    /// Reads the link of the free object at `slot`. In secure mode the link is decoded and must
    /// be null or a free object as `expect` says; anything else aborts the process.
    ///
    /// # Safety
    /// `slot` must be a free object the caller owns (at least 8 bytes, 8-aligned).
    #[inline]
    pub unsafe fn read_link(&self, slot: *mut u8, expect: Expect) -> *mut u8 {
        // SAFETY: the caller owns the free object at `slot`, large and aligned enough.
        let stored = unsafe { (slot as *const usize).read() };
        if !self.secure {
            return crate::ds::link_of(stored);
        }
        let next = stored ^ self.link_mask(slot);
        if next != 0 && !self.is_free_object(next, expect) {
            corrupted_link(slot as usize, stored, next);
        }
        next as *mut u8
    }

    /// True when `address` starts a free object as `expect` says (secure mode): inside a bag
    /// below its region's frontier, at an object boundary, not the program's.
    pub fn is_free_object(&self, address: usize, expect: Expect) -> bool {
        let Some(at) = self.bag_at(address) else {
            return false;
        };
        let class = at.class;
        let fits = match expect {
            Expect::Class(expected) => class == expected,
            Expect::Node(node) => self.origin_of(address) == Some(node),
        };
        let offset = address - at.start;
        fits && class.is_object_start(offset)
            && offset + class.size() <= class.bag_bytes()
            && !self.map.is_allocated(address)
    }

    /// Records that the object at `address`, just taken from a free list, goes to the program
    /// (secure mode). Aborts if the program holds it already: a forged free list would otherwise
    /// hand one address to two owners.
    pub fn note_allocated(&self, address: *mut u8) {
        if !self.map.mark_allocated(address as usize) {
            os::fatal(|w| {
                w.str("corrupted free list: ")
                    .hex(address as usize)
                    .str(" was about to be handed out while still allocated");
            });
        }
    }

    /// Takes back an object the program frees (secure mode): it must start an object of `class`
    /// that the program holds. Clears its bit; on refusal nothing changes.
    pub fn note_freed(&self, address: *mut u8, class: SizeClass) -> Result<(), Refusal> {
        let address = address as usize;
        let Some(at) = self.bag_at(address).filter(|at| at.class == class) else {
            return Err(Refusal::NotAnObject);
        };
        let offset = address - at.start;
        if !class.is_object_start(offset) || offset + class.size() > class.bag_bytes() {
            return Err(Refusal::NotAnObject);
        }
        if self.map.mark_freed(address) {
            Ok(())
        } else {
            Err(Refusal::NotAllocated)
        }
    }

    /// A fresh seed for a bag's carving order (secure mode).
    pub fn bag_seed(&self) -> u32 {
        mix(self.seeds.fetch_add(SEED_STEP, Ordering::Relaxed)) as u32
    }

    /// Makes the span of the large object at `address` inaccessible past `usable` bytes and
    /// records its usable pages. When the kernel refuses (its mapping count limit), the object
    /// stays without a guard and all its span is usable; returns false then.
    ///
    /// # Safety
    /// `address` must head a live large span of `units` units that the caller owns, without a
    /// guard, and `usable` must be a page multiple below `units` units.
    pub unsafe fn guard_large(&self, address: usize, usable: usize, units: usize) -> bool {
        let end = address + (units << UNIT_SHIFT);
        debug_assert!(usable % PAGE_SIZE == 0 && address + usable < end);
        if !os::protect((address + usable) as *mut u8, end - address - usable) {
            return false;
        }
        // SAFETY: the caller owns the live span, whose descriptor nobody else writes.
        unsafe {
            (*self.map.meta(self.map.unit_of(address)))
                .role
                .large
                .guard_pages = (usable / PAGE_SIZE) as u32
        };
        true
    }

    /// Usable bytes of the live large span of `units` units at `address`.
    ///
    /// # Safety
    /// `address` must head a live large span of `units` units that nobody frees concurrently.
    pub unsafe fn large_usable(&self, address: usize, units: usize) -> usize {
        // SAFETY: as stated; the descriptor of a live span changes only under its owner.
        let pages = unsafe {
            (*self.map.meta(self.map.unit_of(address)))
                .role
                .large
                .guard_pages
        } as usize;
        if pages == 0 {
            units << UNIT_SHIFT
        } else {
            pages * PAGE_SIZE
        }
    }

    /// Makes the whole span of the large object at `address` accessible again (before it is
    /// freed or resized) and forgets its guard.
    ///
    /// # Safety
    /// As for [`Arena::large_usable`], and the caller owns the span.
    pub unsafe fn unguard_large(&self, address: usize, units: usize) {
        // SAFETY: forwarded contract.
        let usable = unsafe { self.large_usable(address, units) };
        let end = address + (units << UNIT_SHIFT);
        if address + usable == end {
            return;
        }
        // The range was accounted when first committed and keeps its accounting under
        // PROT_NONE, so this never charges anything; failing would leave inaccessible pages in
        // the free pool.
        if !os::commit((address + usable) as *mut u8, end - address - usable) {
            os::fatal(|w| {
                w.str("cannot lift the guard of the large object at ")
                    .hex(address);
            });
        }
        // SAFETY: the caller owns the span and its descriptor.
        unsafe {
            (*self.map.meta(self.map.unit_of(address)))
                .role
                .large
                .guard_pages = 0
        };
    }
}

/// Aborts: a free object's link decodes to something that is not a free object.
#[cold]
fn corrupted_link(slot: usize, stored: usize, decoded: usize) -> ! {
    os::fatal(|w| {
        w.str("corrupted free list: freed object ")
            .hex(slot)
            .str(" holds ")
            .hex(stored)
            .str(", which decodes to ")
            .hex(decoded)
            .str(", not a free object (written after free, or overflowed into?)");
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::region::SpanUse;
    use crate::arena::tests::test_arena_secure;
    use crate::arena::Pool;
    use crate::size_class::{class_of, CLASS_SIZES};

    #[test]
    fn carve_order_is_a_permutation_for_every_capacity() {
        let mut seen = vec![false; 4096];
        for capacity in (1..=4096u32).step_by(7).chain([2, 3, 4, 64, 4095, 4096]) {
            for seed in [0, 1, 0xdead_beef_u32, u32::MAX] {
                seen[..capacity as usize].fill(false);
                for index in 0..capacity {
                    let object = carve_order(index, capacity, seed) as usize;
                    assert!(object < capacity as usize);
                    assert!(!seen[object], "capacity {capacity}: {object} carved twice");
                    seen[object] = true;
                }
            }
        }
        for (index, size) in CLASS_SIZES.iter().enumerate() {
            let class = SizeClass(index as u8);
            assert!(class.capacity() <= 4096, "class {size}");
        }
    }

    #[test]
    fn carve_orders_differ_between_seeds_and_are_not_sequential() {
        let order = |seed| {
            (0..512)
                .map(|i| carve_order(i, 512, seed))
                .collect::<Vec<_>>()
        };
        let (a, b) = (order(mix(1) as u32), order(mix(2) as u32));
        assert_ne!(a, b);
        let ascending = a.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(
            ascending < 32,
            "{ascending} of 511 steps go to the next object"
        );
    }

    /// Over 4 000 seeds, no bag of 128 objects is carved with more than 15 steps between
    /// neighbours (a random shuffle of 128 shows at most ~10 in 20 000 tries; keyed
    /// multipliers showed 16 or more for about one seed in 120, up to 85).
    #[test]
    fn no_seed_carves_a_bag_nearly_in_address_order() {
        for seed in 0..4000u32 {
            let order: Vec<u32> = (0..128).map(|i| carve_order(i, 128, seed)).collect();
            let neighbours = order
                .windows(2)
                .filter(|w| w[0].abs_diff(w[1]) == 1)
                .count();
            assert!(neighbours < 16, "seed {seed}: {neighbours} neighbour steps");
        }
    }

    #[test]
    fn links_round_trip_encoded_and_are_never_stored_in_the_clear() {
        let arena = test_arena_secure(1, false);
        let class = class_of(64, 8).unwrap();
        let bag = arena
            .pool(0, Pool::Dense)
            .alloc(arena.map(), class.bag_units(), 1, SpanUse::Bag(class))
            .unwrap();
        let (slot, next) = (bag as *mut u8, (bag + 64 * 5) as *mut u8);
        // SAFETY: both objects lie in the bag we just took and own.
        unsafe {
            arena.write_link(slot, next);
            assert_ne!((slot as *const usize).read(), next as usize);
            assert_eq!(arena.read_link(slot, Expect::Class(class)), next);
            arena.write_link(slot, core::ptr::null_mut());
            assert_ne!((slot as *const usize).read(), 0);
            assert!(arena.read_link(slot, Expect::Node(0)).is_null());
        }
        // Checks a decoded link must pass: class, boundary, bag tail, not allocated.
        assert!(arena.is_free_object(bag + 64, Expect::Class(class)));
        assert!(!arena.is_free_object(bag + 64, Expect::Class(class_of(48, 8).unwrap())));
        assert!(!arena.is_free_object(bag + 65, Expect::Class(class)));
        assert!(!arena.is_free_object(bag + 64, Expect::Node(1)));
        arena.note_allocated((bag + 64) as *mut u8);
        assert!(!arena.is_free_object(bag + 64, Expect::Class(class)));
        assert_eq!(arena.note_freed((bag + 64) as *mut u8, class), Ok(()));
        assert_eq!(
            arena.note_freed((bag + 64) as *mut u8, class),
            Err(Refusal::NotAllocated)
        );
        assert_eq!(
            arena.note_freed((bag + 72) as *mut u8, class),
            Err(Refusal::NotAnObject)
        );
    }

    #[test]
    fn guarded_layouts_leave_at_least_a_page_after_the_usable_end() {
        for size in [
            1,
            4095,
            4096,
            256 << 10,
            (256 << 10) + 1,
            UNIT - PAGE_SIZE,
            UNIT,
            1 << 30,
        ] {
            let (usable, units) = guarded_layout(size).unwrap();
            assert!(usable >= size && usable % PAGE_SIZE == 0 && usable - size < PAGE_SIZE);
            assert!(usable + PAGE_SIZE <= units << UNIT_SHIFT);
            assert!(usable + PAGE_SIZE + UNIT > units << UNIT_SHIFT);
        }
        assert!(guarded_layout(usize::MAX - 10).is_none());
    }
}
