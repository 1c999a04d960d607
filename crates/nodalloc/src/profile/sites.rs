//! The profile's table of sites: one entry per distinct (stack, node, tier, partition) that a
//! sample came from, with what its samples stand for (objects and bytes, allocated in all and
//! still live). A fixed open-addressed table in its own `MAP_NORESERVE` mapping, touched only
//! where entries are written.
//!
//! No lock: a new entry is claimed by a compare-and-swap of its `hash` word from 0 to
//! [`WRITING`], filled, then published by storing its hash (Release). A reader skips entries
//! still being written, so an insert that finds one in its way probes on: the same key may
//! then get two entries (both are summed by whoever reads the profile), never a wait. A
//! `fork` that catches an entry half written leaves it unpublished in the child, which only
//! costs the child that slot. Counters are atomic adds; entries are never removed, so a dump
//! reads the table while threads go on sampling.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Frames a sample keeps.
pub const MAX_DEPTH: usize = 64;

/// Entries in the table. Past that, samples count in entry 0 (no stack: "(other sites)").
pub const CAPACITY: usize = 1 << 14;

/// The `hash` of an entry being written.
const WRITING: u64 = 1;

/// What identifies a site.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub frames: [usize; MAX_DEPTH],
    pub depth: u8,
    /// Whether the block is in far memory (a memory tier's far node).
    pub far: bool,
    pub node: u16,
    pub partition: u16,
}

impl Key {
    pub const EMPTY: Key = Key {
        frames: [0; MAX_DEPTH],
        depth: 0,
        far: false,
        node: 0,
        partition: 0,
    };

    /// The key's frames.
    pub fn stack(&self) -> &[usize] {
        &self.frames[..usize::from(self.depth)]
    }

    /// A hash of the key, never 0 or [`WRITING`].
    fn hash(&self) -> u64 {
        let mut h = 0x243F_6A88_85A3_08D3u64
            ^ (u64::from(self.node) << 32 | u64::from(self.partition) << 8 | u64::from(self.far));
        for &frame in self.stack() {
            h = crate::os::mix(h ^ frame as u64);
        }
        h.max(WRITING + 1)
    }
}

/// One site.
#[repr(C)]
pub struct Site {
    hash: AtomicU64,
    key: Key,
    /// Samples' estimates, in objects (in 1/2^16ths: `super::OBJECT_SHIFT`) and bytes, of all
    /// allocations and of the live ones.
    pub alloc_objects: AtomicU64,
    pub alloc_bytes: AtomicU64,
    pub inuse_objects: AtomicU64,
    pub inuse_bytes: AtomicU64,
}

impl Site {
    /// Its key, once published.
    pub fn key(&self) -> &Key {
        &self.key
    }
}

/// The table, mapped by its first user.
static TABLE: AtomicPtr<Site> = AtomicPtr::new(core::ptr::null_mut());

/// The table, mapping it on first use; `None` when the mapping fails.
fn table() -> Option<&'static [Site]> {
    let mut table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        let bytes = CAPACITY * core::mem::size_of::<Site>();
        let mapped = crate::os::reserve(bytes)? as *mut Site;
        match TABLE.compare_exchange(
            core::ptr::null_mut(),
            mapped,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => table = mapped,
            Err(theirs) => {
                // SAFETY: our own mapping, never published.
                unsafe { libc::munmap(mapped as *mut libc::c_void, bytes) };
                table = theirs;
            }
        }
    }
    // SAFETY: a zero-filled mapping of CAPACITY sites (all-zero is an unused site), never
    // unmapped once published.
    Some(unsafe { core::slice::from_raw_parts(table, CAPACITY) })
}

/// The entry of `key`, made if need be; entry 0 (no stack) when the table is full or cannot be
/// mapped at all (`None` then).
pub fn site_of(key: &Key) -> Option<&'static Site> {
    let table = table()?;
    let hash = key.hash();
    let mut index = (hash as usize) % (CAPACITY - 1) + 1;
    for _ in 0..CAPACITY / 4 {
        let site = &table[index];
        let seen = site.hash.load(Ordering::Acquire);
        if seen == hash && site.key == *key {
            return Some(site);
        }
        if seen == 0
            && site
                .hash
                .compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: the claim above makes this thread the entry's only writer until the
            // hash is published; readers skip it until then.
            unsafe { core::ptr::addr_of!(site.key).cast_mut().write(*key) };
            site.hash.store(hash, Ordering::Release);
            return Some(site);
        }
        index = if index + 1 == CAPACITY { 1 } else { index + 1 };
    }
    let other = &table[0];
    other.hash.store(WRITING + 1, Ordering::Release);
    Some(other)
}

/// The entry at `index`, for a block that names it.
pub fn site_at(index: usize) -> Option<&'static Site> {
    table()?.get(index)
}

/// The index of `site` in the table.
pub fn index_of(site: &Site) -> usize {
    let base = TABLE.load(Ordering::Relaxed) as usize;
    (site as *const Site as usize - base) / core::mem::size_of::<Site>()
}

/// Calls `visit` with every published entry.
pub fn for_each(mut visit: impl FnMut(&Site)) {
    let table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        return;
    }
    // SAFETY: as in `table`.
    let table = unsafe { core::slice::from_raw_parts(table, CAPACITY) };
    for site in table {
        if site.hash.load(Ordering::Acquire) > WRITING {
            visit(site);
        }
    }
}

/// Adds a sample that stands for `objects` objects and `bytes` bytes to `site`'s counts.
pub fn add(site: &Site, objects: u64, bytes: u64) {
    site.alloc_objects.fetch_add(objects, Ordering::Relaxed);
    site.alloc_bytes.fetch_add(bytes, Ordering::Relaxed);
    site.inuse_objects.fetch_add(objects, Ordering::Relaxed);
    site.inuse_bytes.fetch_add(bytes, Ordering::Relaxed);
}

/// Takes a freed sample's share off the live counts of the site at `index`.
pub fn forget(index: usize, objects: u64, bytes: u64) {
    if let Some(site) = site_at(index) {
        site.inuse_objects.fetch_sub(objects, Ordering::Relaxed);
        site.inuse_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}
