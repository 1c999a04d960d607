//! Size classes: 8-byte steps up to 128 B, then eight classes per power of two up to 256 KiB,
//! so a request above 64 B wastes at most 12.5 % of its class (1/9 of the class at worst).
//!
//! Two classes break the pattern, for the caches' sake. The 4 KiB class is [`PAGE_LINE`]
//! (4 160) bytes: objects a page apart all fall into the same few cache sets (their addresses
//! differ only above bit 11), so a program walking the heads of a thousand 4 KiB blocks missed
//! the L2 cache where glibc's 16-byte headers spread its blocks (docs/JOURNAL.md, "The 4 KiB
//! class's stride"); a line more per object spreads them over every set. And since 4 160 is no
//! multiple of a page, the last class, [`PAGE_CLASS`], is 4 096 bytes for requests aligned
//! to more than 64 bytes that fit a page (`memalign(4096, 4096)`): no size lookup returns it.
//!
//! Every table here is computed at compile time. Classes that are multiples of 16 keep every
//! object 16-byte aligned (bags start 32 KiB aligned), so a 16-aligned request rounds its size up
//! to a multiple of 16 first ([`class_of`] with `align` 16) and lands on one of them.
//!
//! Per class the tables also give the **bag** size (the smallest multiple of 32 KiB whose tail
//! waste is at most 1/8; at least four objects for classes above 16 KiB), the **batch** size
//! moved between thread and node heaps, and the **cache limit** of a thread's free list.

/// Largest size served from bags; larger requests are page spans.
pub const MAX_SMALL: usize = 256 << 10;
/// Classes in all: the general classes, then [`PAGE_CLASS`].
pub const NUM_CLASSES: usize = 105;
/// Classes a size lookup can return, in increasing size; the last serves [`MAX_SMALL`].
pub const NUM_GENERAL_CLASSES: usize = NUM_CLASSES - 1;
/// The 4 KiB class's object size: a page and a cache line (see the module's head).
pub const PAGE_LINE: usize = 4096 + 64;
/// Index of the page class: 4 KiB objects at 4 KiB alignment, for aligned requests alone.
const PAGE_CLASS_INDEX: usize = NUM_CLASSES - 1;
/// The page class (see the module's head).
pub const PAGE_CLASS: SizeClass = SizeClass(PAGE_CLASS_INDEX as u8);
/// Size of the allocation unit: bags and spans are whole units, aligned to a unit.
pub const UNIT_SHIFT: u32 = 15;
pub const UNIT: usize = 1 << UNIT_SHIFT;
/// A bag is at most one 2 MiB chunk.
pub const MAX_BAG_UNITS: usize = 64;
/// Largest alignment a bag object can honour (a power of two dividing its class size).
pub const MAX_SMALL_ALIGN: usize = 4096;
/// Largest class a thread heap caches. A cached object above it would pin more memory than a
/// lock-free ring operation per call costs time: such objects go straight to the node heap's
/// ring (shared by the node's threads) when freed.
pub const MAX_CACHED: usize = 64 << 10;
/// Sizes up to this are classified by a table lookup.
const LOOKUP_MAX: usize = 1024;

/// A size class index. Invariant: always `< NUM_CLASSES` (only this crate constructs one, from
/// the tables or from a bag's tag), so per-class arrays may be indexed without a bounds check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(transparent)]
pub struct SizeClass(pub(crate) u8);

impl SizeClass {
    /// The class's index in per-class tables.
    #[inline(always)]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// Bytes per object.
    #[inline(always)]
    pub fn size(self) -> usize {
        CLASS_SIZES[self.index()] as usize
    }

    /// Bytes of an object the program may use: its size, but a page for the 4 KiB class,
    /// whose last line only spaces its objects apart (see the module's head).
    #[inline(always)]
    pub fn usable(self) -> usize {
        // SAFETY: a SizeClass is always below NUM_CLASSES, the table's length.
        unsafe { CLASS_SPANS.get_unchecked(self.index()) }.usable as usize
    }

    /// The offset of `offset` (from the bag start, below 2^32) in the object holding it:
    /// `offset % size`, by two multiplies with the class's magic instead of a division
    /// (Lemire, Kaser and Kurz's direct remainder: `((offset * m mod 2^64) * size) >> 64`).
    #[inline(always)]
    pub fn offset_in_object(self, offset: usize) -> usize {
        // SAFETY: a SizeClass is always below NUM_CLASSES, the table's length.
        let span = unsafe { CLASS_SPANS.get_unchecked(self.index()) };
        let fraction = (offset as u64).wrapping_mul(span.magic);
        ((fraction as u128 * span.size as u128) >> 64) as usize
    }

    /// 32 KiB units per bag.
    pub fn bag_units(self) -> usize {
        BAG_UNITS[self.index()] as usize
    }

    /// Bytes per bag.
    pub fn bag_bytes(self) -> usize {
        self.bag_units() << UNIT_SHIFT
    }

    /// Objects per bag.
    pub fn capacity(self) -> usize {
        self.bag_bytes() / self.size()
    }

    /// Objects moved at once between a thread heap and its node heap.
    pub fn batch(self) -> usize {
        BATCHES[self.index()] as usize
    }

    /// True when `offset` (from the bag start, below 2^32) is a multiple of the class size: the
    /// start of an object rather than a pointer into one. One multiply and one compare instead
    /// of a division (Lemire, Kaser and Kurz's divisibility test): with
    /// `m = floor((2^64 - 1) / size) + 1`, `offset` is a multiple iff `offset * m mod 2^64 < m`.
    #[inline(always)]
    pub fn is_object_start(self, offset: usize) -> bool {
        // SAFETY: a SizeClass is always below NUM_CLASSES, the table's length.
        is_multiple(offset, unsafe { *START_MAGIC.get_unchecked(self.index()) })
    }

    /// The class's `m` of [`SizeClass::is_object_start`], for fast paths that keep a copy
    /// beside other per-class data (see [`is_multiple`]).
    pub fn start_magic(self) -> u64 {
        START_MAGIC[self.index()]
    }

    /// Objects a thread keeps cached before draining one batch (two batches), or 0 for the
    /// classes above [`MAX_CACHED`], which threads do not cache.
    pub fn cache_limit(self) -> usize {
        if self.size() > MAX_CACHED {
            0
        } else {
            2 * self.batch()
        }
    }

    /// The class as a [`ClassSlot`].
    #[inline(always)]
    pub fn slot(self) -> ClassSlot {
        ClassSlot((self.index() * SLOT_BYTES) as u16)
    }
}

/// Bytes per class in a per-class array of cache lines, such as a thread heap's lists.
pub const SLOT_BYTES: usize = 64;

/// A size class as the byte offset of its entry in an array of `SLOT_BYTES` bytes per class
/// (its index times 64): what the fast paths' lookups return, so reaching the class's list in
/// a thread heap costs no shift. Invariant: the index it encodes is below `NUM_CLASSES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct ClassSlot(u16);

const _: () = assert!(NUM_CLASSES * SLOT_BYTES <= u16::MAX as usize);

impl ClassSlot {
    /// The entry's byte offset: below `NUM_CLASSES * SLOT_BYTES`, a multiple of `SLOT_BYTES`.
    #[inline(always)]
    pub fn offset(self) -> usize {
        self.0 as usize
    }

    /// The class.
    #[inline(always)]
    pub fn class(self) -> SizeClass {
        SizeClass((self.offset() / SLOT_BYTES) as u8)
    }
}

impl From<SizeClass> for ClassSlot {
    #[inline(always)]
    fn from(class: SizeClass) -> Self {
        class.slot()
    }
}

const fn class_size_of(index: usize) -> usize {
    if index == PAGE_CLASS_INDEX {
        4096
    } else if index < 16 {
        8 * (index + 1)
    } else {
        let k = 7 + (index - 16) / 8;
        let j = (index - 16) % 8 + 1;
        let size = (1 << k) + j * (1 << (k - 3));
        if size == 4096 {
            PAGE_LINE
        } else {
            size
        }
    }
}

const fn compute_class(size: usize) -> usize {
    if size <= 128 {
        if size == 0 {
            0
        } else {
            size.div_ceil(8) - 1
        }
    } else {
        let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize; // 2^k < size <= 2^(k+1)
        let step_shift = k - 3;
        let j = (size - (1 << k) + (1 << step_shift) - 1) >> step_shift;
        16 + (k - 7) * 8 + (j - 1)
    }
}

pub static CLASS_SIZES: [u32; NUM_CLASSES] = {
    let mut sizes = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        sizes[i] = class_size_of(i) as u32;
        i += 1;
    }
    sizes
};

const BAG_UNITS_TABLE: [u8; NUM_CLASSES] = {
    let mut units = [0u8; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let size = class_size_of(i);
        // Mid-size classes (above 8 KiB) get at least four objects per bag so a bag is not
        // carved per refill, nor a run (`NodeHeaps::take_untouched`) taken per two objects: a
        // thousand 16 KiB blocks allocated in a row cost 273 ns a pair with bags of two, 171
        // with bags of four (docs/JOURNAL.md, issue 32's eleventh round); eight a bag from
        // 4 KiB up raised the peak RSS of programs that hand such blocks between threads.
        // Classes threads do not cache take what the waste rule allows.
        let min_objects = if size > (8 << 10) && size <= MAX_CACHED {
            4
        } else {
            1
        };
        // The waste rule would give the page-and-a-line class one unit of seven objects, 14 %
        // more memory per 4 KiB block than bags of the page class; eight units hold 63, less
        // than a line short of 63 pages (10 000 blocks of 4 KiB written whole: the same RSS
        // as with 4 KiB objects; four units of 31 took 5 % more).
        let min_objects = if size == PAGE_LINE { 63 } else { min_objects };
        let mut u = 1;
        while u < MAX_BAG_UNITS {
            let bytes = u * UNIT;
            if bytes / size >= min_objects && (bytes % size) * 8 <= bytes {
                break;
            }
            u += 1;
        }
        units[i] = u as u8;
        i += 1;
    }
    units
};

/// The table in memory once, for the run-time lookups (a `const` would be copied into each use).
static BAG_UNITS: [u8; NUM_CLASSES] = BAG_UNITS_TABLE;

/// The most objects any bag holds.
pub const MAX_CAPACITY: usize = {
    let mut most = 0;
    let mut i = 0;
    while i < NUM_CLASSES {
        let objects = (BAG_UNITS_TABLE[i] as usize * UNIT) / class_size_of(i);
        if objects > most {
            most = objects;
        }
        i += 1;
    }
    most
};

/// [`SizeClass::start_magic`] of every class.
/// A class's magic, size and usable bytes side by side, for the lookups that need all three
/// (`node/copies.rs`, on every `memcpy` into the heap): one table, one line per four classes.
struct ClassSpan {
    magic: u64,
    size: u32,
    usable: u32,
}

static CLASS_SPANS: [ClassSpan; NUM_CLASSES] = {
    let mut table = [const {
        ClassSpan {
            magic: 0,
            size: 0,
            usable: 0,
        }
    }; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let size = class_size_of(i);
        table[i] = ClassSpan {
            magic: u64::MAX / size as u64 + 1,
            size: size as u32,
            usable: if size == PAGE_LINE { 4096 } else { size as u32 },
        };
        i += 1;
    }
    table
};

static START_MAGIC: [u64; NUM_CLASSES] = {
    let mut table = [0u64; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        table[i] = u64::MAX / class_size_of(i) as u64 + 1;
        i += 1;
    }
    table
};

/// True when `offset` (below 2^32) is a multiple of the size whose
/// [`SizeClass::start_magic`] is `magic`.
#[inline(always)]
pub fn is_multiple(offset: usize, magic: u64) -> bool {
    (offset as u64).wrapping_mul(magic) < magic
}

/// Bytes a batch aims at: 32 KiB keeps batch moves rare for small objects while bounding the
/// memory a drain parks in the transfer ring; at most 64 objects so a drain stays short.
const BATCH_BYTES: usize = 32 << 10;
const MAX_BATCH: usize = 64;

static BATCHES: [u8; NUM_CLASSES] = {
    let mut batches = [0u8; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        // The page-and-a-line class moves eight objects, as the 4 KiB class did: seven would
        // leave a transfer ring's 128 batches short of a thousand-block burst.
        let size = class_size_of(i);
        let mut b = BATCH_BYTES / if size == PAGE_LINE { 4096 } else { size };
        if b > MAX_BATCH {
            b = MAX_BATCH;
        }
        if b < 1 {
            b = 1;
        }
        batches[i] = b as u8;
        i += 1;
    }
    batches
};

/// The class serving `size` bytes at `align` (≤ [`MAX_SMALL_ALIGN`]), or `None` when the request
/// is a large object. Alignments of 16 and more pick a class whose size is a multiple of `align`.
#[inline(always)]
pub fn class_of(size: usize, align: usize) -> Option<SizeClass> {
    if let Some(slot) = slot_of_small(size, align) {
        return Some(slot.class());
    }
    if align <= 16 {
        // Above 1 KiB every class is a multiple of 16, so the arithmetic lookup serves both.
        return class_of_medium(size);
    }
    class_of_general(size, align)
}

/// [`class_of`] for sizes up to 1 KiB at alignments up to 16 (one table load), as a slot;
/// `None` for the rest: a face keeps this part inline and [`class_of`] out of line.
#[inline(always)]
pub fn slot_of_small(size: usize, align: usize) -> Option<ClassSlot> {
    SLOTS.slot_of_small(size, align)
}

/// Sizes above the lookup table: a leading-zero count and two shifts.
#[inline]
fn class_of_medium(size: usize) -> Option<SizeClass> {
    if size <= MAX_SMALL {
        Some(SizeClass(compute_class(size) as u8))
    } else {
        None
    }
}

#[cold]
#[inline(never)]
fn class_of_general(size: usize, align: usize) -> Option<SizeClass> {
    if size > MAX_SMALL || align > MAX_SMALL_ALIGN {
        return None;
    }
    let rounded = (size.max(align) + align - 1) & !(align - 1);
    let mut index = compute_class(rounded);
    while index < NUM_GENERAL_CLASSES {
        let class_size = class_size_of(index);
        if class_size % align == 0 {
            // A request that fits a page takes the page class before a class above it.
            if class_size > PAGE_LINE && rounded <= 4096 {
                return Some(PAGE_CLASS);
            }
            return Some(SizeClass(index as u8));
        }
        index += 1;
    }
    None
}

/// The class for C's `malloc`, whose results must be 16-byte aligned.
#[inline(always)]
pub fn class_of_malloc(size: usize) -> Option<SizeClass> {
    slot_of_small_malloc(size)
        .map(ClassSlot::class)
        .or_else(|| class_of_medium(size))
}

/// [`class_of_malloc`] for sizes up to 1 KiB (one shift and one load), as a slot; `None`
/// above: a face keeps this part inline and the rest out of line.
#[inline(always)]
pub fn slot_of_small_malloc(size: usize) -> Option<ClassSlot> {
    SLOTS.slot_of_small_malloc(size)
}

/// The tables of the one-load class lookups, up to 1 KiB. Every thread heap keeps a copy
/// (mimalloc's per-heap table of pages by size, done for classes): a face's fast path reads its
/// thread's heap anyway, so the lookup is one load at the heap's address, with no load of a
/// table's address first.
///
/// The Rust face's table is indexed by the size itself (2 KiB): a table by `(size + 7) / 8`
/// costs an add and a shift per lookup, four instructions per Rust pair (which looks the class
/// up twice). `malloc`'s stays by `(size + 15) / 16` (130 bytes): by size, it saved two
/// instructions per call but was 3–4 % slower on mixed sizes (`alloc-test`), its lines spread
/// over 2 KiB of the L1 cache (docs/JOURNAL.md "Lookups by the size itself").
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SlotTables {
    /// The slots of the classes by size, for alignments up to 8 (the Rust face).
    by_size: [ClassSlot; LOOKUP_MAX + 1],
    /// The slots of the 16-aligned classes by `(size + 15) / 16` (`malloc`, and alignment 16;
    /// a zero-byte request gets the 16-byte class).
    aligned_16: [ClassSlot; LOOKUP_MAX / 16 + 1],
}

impl SlotTables {
    /// The tables.
    pub const TABLES: SlotTables = {
        let mut by_size = [ClassSlot(0); LOOKUP_MAX + 1];
        let mut size = 0;
        while size <= LOOKUP_MAX {
            by_size[size] = ClassSlot((compute_class(size) * SLOT_BYTES) as u16);
            size += 1;
        }
        let mut aligned_16 = [ClassSlot(0); LOOKUP_MAX / 16 + 1];
        let mut i = 0;
        while i <= LOOKUP_MAX / 16 {
            let size = if i == 0 { 16 } else { i * 16 };
            aligned_16[i] = ClassSlot((compute_class(size) * SLOT_BYTES) as u16);
            i += 1;
        }
        SlotTables {
            by_size,
            aligned_16,
        }
    };

    /// [`slot_of_small`] from these tables.
    #[inline(always)]
    pub fn slot_of_small(&self, size: usize, align: usize) -> Option<ClassSlot> {
        if size > LOOKUP_MAX {
            return None;
        }
        if align <= 8 {
            Some(self.by_size[size])
        } else if align == 16 {
            Some(self.aligned_16[(size + 15) >> 4])
        } else if align <= LOOKUP_MAX {
            // A power of two above 16: the size (one byte for none) rounded up to it. Up to
            // 1 KiB the classes step by at most 64 and every one from 512 up is a multiple of
            // 64, so the smallest class of a multiple of 16 at or above that multiple of
            // `align` is a multiple of `align` too: the class `class_of_general` finds.
            debug_assert!(align.is_power_of_two());
            let rounded = (size.max(1) + align - 1) & !(align - 1);
            self.aligned_16.get(rounded >> 4).copied()
        } else {
            None
        }
    }

    /// [`slot_of_small_malloc`] from these tables.
    #[inline(always)]
    pub fn slot_of_small_malloc(&self, size: usize) -> Option<ClassSlot> {
        if size <= LOOKUP_MAX {
            // SAFETY: (size + 15) >> 4 <= LOOKUP_MAX / 16, the table's last index.
            Some(unsafe { *self.aligned_16.get_unchecked((size + 15) >> 4) })
        } else {
            None
        }
    }
}

/// The tables for lookups made without a thread heap at hand.
static SLOTS: SlotTables = SlotTables::TABLES;

#[cfg(test)]
mod tests;
