//! Large objects (above the biggest size class): page spans of a node region, with in-place
//! resizing and, in secure mode, a guard page after the usable bytes.

use super::*;
use crate::arena::pagemap::Tag;
use crate::arena::region::{canary_of, check_canary};

/// The smallest node region whose large objects threads keep for reuse (`thread/large.rs`): a
/// region sized down to an address-space limit has no room for memory other threads hold.
pub const KEEP_LARGE_MIN_REGION: usize = 1 << 30;

/// See [`NodeHeaps::pressure_epoch`]. One for the process (its arena is one; the tests' arenas
/// share it, and a flush it asks for is always safe).
static PRESSURE: AtomicU64 = AtomicU64::new(0);
/// When a wait for the threads' caches last ended without a span (monotonic ns; 0: never).
static PRESSURE_FAILED_AT: AtomicU64 = AtomicU64::new(0);
/// Pauses a refused large block waits for the threads' caches, and each pause.
const PRESSURE_WAITS: usize = 20;
const PRESSURE_PAUSE_NS: u64 = 500_000;
/// After a wait that found nothing, no wait for this long (ten times the longest wait).
const PRESSURE_QUIET_NS: u64 = 100_000_000;

impl NodeHeaps {
    /// A large object (a span of whole units) for `node`, spilling to the nearest node when
    /// its region is exhausted. Null when no region can serve.
    pub fn alloc_large(&self, node: NodeId, size: usize, align: usize) -> *mut u8 {
        // Heuristic overcommit refuses one request larger than RAM plus swap; so do we, or a
        // program probing with a huge malloc would get memory it can never touch.
        let topology = &self.arena.topology;
        if topology.overcommit_mode() == crate::os::topology::OvercommitMode::Heuristic
            && topology.memory_total() > 0
            && size as u64 > topology.memory_total()
        {
            return null_mut();
        }
        let secure = self.arena.is_secure();
        let Some((usable, units)) = self.large_layout(size) else {
            return null_mut();
        };
        let align_units = (align >> UNIT_SHIFT).max(1);
        if units > self.arena.largest_span() >> UNIT_SHIFT || align_units > units.max(1) << 20 {
            return null_mut();
        }
        let span = || {
            self.arena
                .alloc_span(node.index(), units, align_units, SpanUse::Large)
        };
        // Refused: the classes' spares go back first (they never make a large block fail);
        // then every object the rings and inboxes keep goes back to its bags, with the spares
        // that makes. In a small region (under `RLIMIT_AS`) the big classes' cached objects,
        // each a span of its own, are what stands between a large block and a hole: 11 MiB of
        // a 128 MiB region in one failure.
        match span()
            .or_else(|| self.give_back_spares().then(span).flatten())
            .or_else(|| self.span_after_flush(&span))
            .or_else(|| self.span_after_pressure(&span))
        {
            Some((address, from)) => {
                if secure {
                    // SAFETY: the span was just handed to us, whole and without a guard. A
                    // refused guard (the kernel's mapping limit) leaves the span unguarded.
                    unsafe { self.arena.guard_large(address, usable, units) };
                }
                let node_heap = self.node(NodeId(from));
                node_heap.large_allocs.fetch_add(1, Ordering::Relaxed);
                node_heap
                    .large_bytes
                    .fetch_add(units << UNIT_SHIFT, Ordering::Relaxed);
                if !secure
                    && self
                        .arena
                        .interleave_large(from, address, units << UNIT_SHIFT)
                {
                    let map = self.arena.map();
                    // SAFETY: the span was just handed to us; its descriptor is ours.
                    unsafe { (*map.meta(map.unit_of(address))).role.large.interleaved = true };
                    node_heap
                        .interleaved_bytes
                        .fetch_add(units << UNIT_SHIFT, Ordering::Relaxed);
                }
                address as *mut u8
            }
            None => null_mut(),
        }
    }

    /// `span` tried again once every ring and inbox has gone back to its bags, with the spares
    /// that makes.
    fn span_after_flush(
        &self,
        span: &impl Fn() -> Option<(usize, usize)>,
    ) -> Option<(usize, usize)> {
        self.flush_all();
        self.give_back_spares();
        span()
    }

    /// The last try of a large block the region refuses while other thread heaps are attached:
    /// asks every thread to give its caches back at its next refill ([`Self::pressure_epoch`]),
    /// then tries again, emptying the rings each time, for up to [`PRESSURE_WAITS`] pauses of
    /// [`PRESSURE_PAUSE_NS`]. The big classes' objects in other threads' lists each hold a span
    /// (13 MiB of a 128 MiB region at a failure under `RLIMIT_AS=256M`). A wait that found
    /// nothing keeps the next one from waiting for [`PRESSURE_QUIET_NS`], so a program that
    /// runs into its limit again and again is not slowed by more than a tenth.
    fn span_after_pressure(
        &self,
        span: &impl Fn() -> Option<(usize, usize)>,
    ) -> Option<(usize, usize)> {
        let attached = self.nodes().fold(0u64, |sum, node| {
            let ops = &self.node(node).ops;
            let (attached, retired) = (
                ops.heaps_attached.load(Ordering::Relaxed),
                ops.heaps_retired.load(Ordering::Relaxed),
            );
            sum + attached.saturating_sub(retired)
        });
        let failed_at = PRESSURE_FAILED_AT.load(Ordering::Relaxed);
        if attached < 2
            || (failed_at != 0 && crate::os::monotonic_ns() < failed_at + PRESSURE_QUIET_NS)
        {
            return None;
        }
        self.ask_for_caches();
        for _ in 0..PRESSURE_WAITS {
            crate::os::sleep_ns(PRESSURE_PAUSE_NS);
            if let Some(found) = self.span_after_flush(span) {
                return Some(found);
            }
        }
        PRESSURE_FAILED_AT.store(crate::os::monotonic_ns(), Ordering::Relaxed);
        None
    }

    /// The pressure epoch: it moves when a large block was about to be refused for want of a
    /// hole; a thread heap that sees it move gives its caches back (`ThreadHeap::refill_duties`).
    pub(crate) fn pressure_epoch(&self) -> u64 {
        PRESSURE.load(Ordering::Relaxed)
    }

    /// Moves the pressure epoch: every thread heap gives its caches back at its next refill.
    pub(crate) fn ask_for_caches(&self) {
        PRESSURE.fetch_add(1, Ordering::Relaxed);
    }

    /// The span of a large object of `size` bytes: its usable bytes (0: the whole span; secure
    /// mode's guard follows them) and its units. Zero bytes at a large alignment still need a
    /// unique address: one unit. Secure mode adds at least a page of guard after the usable
    /// bytes. `None` on overflow.
    pub(super) fn large_layout(&self, size: usize) -> Option<(usize, usize)> {
        if self.arena.is_secure() {
            guarded_layout(size)
        } else {
            size.max(1)
                .checked_add(UNIT - 1)
                .map(|s| (0, s >> UNIT_SHIFT))
        }
    }

    /// True when the live large object at `address` (checked by the caller) has its pages
    /// interleaved with the far nodes.
    fn is_interleaved(&self, address: usize) -> bool {
        if !self.arena.interleaves() {
            return false;
        }
        let map = self.arena.map();
        // SAFETY: the caller found a live large span at `address`, which it owns; its
        // descriptor's large role is set.
        unsafe { (*map.meta(map.unit_of(address))).role.large.interleaved }
    }

    /// True when the large object at `address`, just allocated, is known to read as zero.
    ///
    /// # Safety
    /// `address` must be a large object the caller has just received from `alloc_large`.
    pub unsafe fn large_is_zeroed(&self, address: usize) -> bool {
        let map = self.arena.map();
        // SAFETY: the caller owns the live span, whose descriptor nobody else writes.
        unsafe { (*map.meta(map.unit_of(address))).role.large.zeroed }
    }

    /// Bytes usable in the large object at `address`, or the misuse if it is not one.
    pub fn large_units(&self, address: usize) -> Result<usize, Misuse> {
        let map = self.arena.map();
        if address & (UNIT - 1) != 0 {
            return Err(Misuse::InvalidPointer);
        }
        let Some(tag) = self.arena.tag_checked(address) else {
            return Err(Misuse::InvalidPointer);
        };
        match tag.kind() {
            // Freed, and kept by a thread for its next large allocation.
            Kind::Large if tag.0 & Tag::KEPT != 0 => Err(Misuse::DoubleFree),
            // SAFETY: a Large tag means the unit heads a live large span whose descriptor holds
            // its length; the caller owns the object, so nobody frees it concurrently.
            Kind::Large => Ok(unsafe { (*map.meta(map.unit_of(address))).units }),
            Kind::Free | Kind::FreeTail | Kind::Unused => Err(Misuse::DoubleFree),
            _ => Err(Misuse::InvalidPointer),
        }
    }

    /// Bytes the program may use in the large object at `address` (its span, less the guard in
    /// secure mode), or the misuse if it is not one.
    pub fn large_usable(&self, address: usize) -> Result<usize, Misuse> {
        let units = self.large_units(address)?;
        // SAFETY: `address` heads a live large span of `units` units (checked above) that the
        // caller owns.
        Ok(unsafe { self.arena.large_usable(address, units) })
    }

    /// Frees a large object, or reports misuse.
    pub fn free_large(&self, address: usize) {
        match self.large_units(address) {
            Ok(units) if self.is_owned(address) => self.owned_free_large(address, units),
            Ok(units) => {
                if self.arena.is_secure() {
                    // SAFETY: a live large span of `units` units that the caller gives up.
                    unsafe { self.arena.unguard_large(address, units) };
                }
                let Some(node) = self.origin_of(address) else {
                    // `large_units` found a large span there, which only the arena holds.
                    report(address as *mut u8, Misuse::InvalidPointer)
                };
                self.forget_sample(address);
                let node_heap = self.node(node);
                node_heap.large_frees.fetch_add(1, Ordering::Relaxed);
                node_heap
                    .large_bytes
                    .fetch_sub(units << UNIT_SHIFT, Ordering::Relaxed);
                if self.is_interleaved(address) {
                    self.arena
                        .restore_region_policy(address, units << UNIT_SHIFT);
                    node_heap
                        .interleaved_bytes
                        .fetch_sub(units << UNIT_SHIFT, Ordering::Relaxed);
                }
                // SAFETY: `address` heads a live large span of `units` units that the caller
                // gives up.
                unsafe { self.arena.free_span(address, units) };
            }
            Err(misuse) => report(address as *mut u8, misuse),
        }
    }

    /// The free of the large object at `address` by a thread homed on `node` that may keep it
    /// for its next large allocation (`thread/large.rs`): when its units are `wanted` (about the
    /// size of the thread's last large allocation), the object is `node`'s, of the
    /// shared pools, neither guarded nor interleaved, no hard limit is set, the region is not a
    /// small one ([`KEEP_LARGE_MIN_REGION`]: under `RLIMIT_AS`), and the region's
    /// hold would not take it (`Region::hold_takes`: its guard comes first), it is marked
    /// kept ([`Tag::KEPT`]: a second free of it is refused) and its units are returned; the
    /// caller counts it as freed ([`Self::count_kept_large`]). `None` when the caller must free
    /// it as usual ([`Self::free_large`]). Aborts naming the object when it is no live large
    /// object.
    pub fn keep_large(
        &self,
        address: usize,
        node: NodeId,
        wanted: core::ops::RangeInclusive<usize>,
    ) -> Option<usize> {
        let units = match self.large_units(address) {
            Ok(units) => units,
            Err(misuse) => report(address as *mut u8, misuse),
        };
        if !wanted.contains(&units)
            || self.arena.is_secure()
            || self.is_limited()
            || self.arena.shared_bytes() < KEEP_LARGE_MIN_REGION
            || self.is_owned(address)
            || self.is_interleaved(address)
            || self.origin_of(address) != Some(node)
            || self.arena.pool_of(address).hold_takes(units)
        {
            return None;
        }
        let map = self.arena.map();
        // SAFETY: `address` heads a live large span (checked above), so its unit's tag is in the
        // page map.
        let head = unsafe { &*map.tags().add(map.unit_of(address)) };
        if head.fetch_or(Tag::KEPT, Ordering::AcqRel) & Tag::KEPT != 0 {
            // Another free of the same object got there first.
            report(address as *mut u8, Misuse::DoubleFree);
        }
        self.forget_sample(address);
        // SAFETY: the span is the caller's now (kept); its descriptor is nobody else's.
        unsafe { (*map.meta(map.unit_of(address))).role.large.zeroed = false };
        // SAFETY: the span's memory is the caller's now, committed and open (no guard in the
        // default mode this runs in).
        unsafe { write_kept_canaries(address, address + (units << UNIT_SHIFT)) };
        Some(units)
    }

    /// Hands out again the large object of `units` units at `address` that the calling thread
    /// kept ([`Self::keep_large`]), after checking that nothing wrote into its ends since; the
    /// caller counts it as allocated.
    ///
    /// # Safety
    /// The caller kept the object and gives it up to the program.
    pub unsafe fn reuse_large(&self, address: usize, units: usize) {
        check_kept_ends(address, units);
        let map = self.arena.map();
        // SAFETY: a kept large span heads its unit (contract above).
        let head = unsafe { &*map.tags().add(map.unit_of(address)) };
        // Only the thread that kept the object writes its tag until it hands it out.
        head.store(head.load(Ordering::Relaxed) & !Tag::KEPT, Ordering::Release);
    }

    /// Counts on `node` the large objects a thread kept (`frees`, of `freed` bytes) and handed
    /// out again (`allocs`, of `reused` bytes) since it last counted them.
    pub fn count_kept_large(
        &self,
        node: NodeId,
        frees: u64,
        allocs: u64,
        freed: usize,
        reused: usize,
    ) {
        let node_heap = self.node(node);
        node_heap.large_frees.fetch_add(frees, Ordering::Relaxed);
        node_heap.large_allocs.fetch_add(allocs, Ordering::Relaxed);
        node_heap.large_bytes.fetch_add(reused, Ordering::Relaxed);
        node_heap.large_bytes.fetch_sub(freed, Ordering::Relaxed);
    }

    /// Gives the large object of `units` units at `address` that a thread kept
    /// ([`Self::keep_large`]) back to its region.
    ///
    /// # Safety
    /// The caller kept the object and forgets it.
    pub unsafe fn release_kept_large(&self, address: usize, units: usize) {
        check_kept_ends(address, units);
        // SAFETY: a live large span of `units` units (it was kept, never freed), given up; the
        // region rewrites its tags, the kept marks with them.
        unsafe { self.arena.free_span(address, units) };
    }

    /// Marks the large block at `address`, just allocated, as the heap profile's sample of
    /// site `site` standing for `objects` objects and `bytes` bytes.
    pub(crate) fn mark_sampled(&self, address: usize, site: usize, objects: u64, bytes: u64) {
        let map = self.arena.map();
        // SAFETY: a large block the caller has just received and not handed out: its
        // descriptor is the caller's alone.
        unsafe {
            let large = &mut (*map.meta(map.unit_of(address))).role.large;
            large.sample_site = site as u32 + 1;
            large.sample_objects = objects;
            large.sample_bytes = bytes;
        }
    }

    /// Records the object at `address` (of `class`, just allocated) as the heap profile's
    /// sample of site `site` for `asked` bytes, kept in its unit's slot
    /// (`profile/in_bag.rs`); false when the unit holds a sample already.
    pub(crate) fn claim_sample(
        &self,
        address: usize,
        class: crate::size_class::SizeClass,
        site: usize,
        asked: usize,
    ) -> bool {
        crate::profile::in_bag::claim(self.arena.map(), address, class, site, asked)
    }

    /// Takes a sampled large block's share off its site's live counts as it is freed or
    /// resized (a resize is a new allocation to the profile), and unmarks it.
    pub(crate) fn forget_sample(&self, address: usize) {
        let map = self.arena.map();
        // SAFETY: a live large block the caller gives up or resizes: its descriptor is the
        // caller's.
        let large = unsafe { &mut (*map.meta(map.unit_of(address))).role.large };
        if large.sample_site != 0 {
            crate::profile::sites::forget(
                large.sample_site as usize - 1,
                large.sample_objects,
                large.sample_bytes,
            );
            large.sample_site = 0;
        }
    }

    /// Resizes a large object in place (growing into free space after it, or shrinking).
    /// Returns false, changing nothing, if it cannot.
    pub fn resize_large_in_place(&self, address: usize, new_size: usize) -> bool {
        let Ok(units) = self.large_units(address) else {
            return false;
        };
        if self.is_interleaved(address) || self.arena.is_owned(address) {
            // Interleaved: its policy covers its span as it is. A heap's: its limit counts
            // its span. A copy keeps either right.
            return false;
        }
        if self.arena.is_secure() {
            return self.resize_guarded_in_place(address, units, new_size);
        }
        let Some(new_units) = new_size
            .max(1)
            .checked_add(UNIT - 1)
            .map(|s| s >> UNIT_SHIFT)
        else {
            return false;
        };
        self.resize_span(address, units, new_units)
    }

    /// Resizes the live large span at `address` from `units` to `new_units` in place (shrink,
    /// or grow into free units after it), keeping the node's large-byte count. False when it
    /// cannot grow there.
    fn resize_span(&self, address: usize, units: usize, new_units: usize) -> bool {
        let Some(node) = self.origin_of(address) else {
            // `large_units` found a large span there, which only the arena holds.
            report(address as *mut u8, Misuse::InvalidPointer)
        };
        let region = self.arena.pool_of(address);
        let node_heap = self.node(node);
        if new_units < units {
            region.shrink(
                self.arena.map(),
                address,
                units,
                new_units,
                self.arena.decommit,
                self.arena.releases_deferred(),
            );
            node_heap
                .large_bytes
                .fetch_sub((units - new_units) << UNIT_SHIFT, Ordering::Relaxed);
            true
        } else if new_units > units {
            let grown = new_units <= self.arena.largest_span() >> UNIT_SHIFT
                && region.grow(self.arena.map(), address, units, new_units);
            if grown {
                node_heap
                    .large_bytes
                    .fetch_add((new_units - units) << UNIT_SHIFT, Ordering::Relaxed);
            }
            grown
        } else {
            true
        }
    }

    /// [`Self::resize_large_in_place`] in secure mode: the guard comes off, the span is resized
    /// as usual, and a new guard goes on after the new usable end (or the old one back on when
    /// the span cannot grow).
    fn resize_guarded_in_place(&self, address: usize, units: usize, new_size: usize) -> bool {
        let Some((new_usable, new_units)) = guarded_layout(new_size) else {
            return false;
        };
        // SAFETY: `address` heads a live large span of `units` units (checked by the caller)
        // that the caller owns.
        let old_usable = unsafe { self.arena.large_usable(address, units) };
        if new_units == units && new_usable == old_usable {
            return true;
        }
        // SAFETY: as above.
        unsafe { self.arena.unguard_large(address, units) };
        let resized = self.resize_span(address, units, new_units);
        let (usable, units) = if resized {
            (new_usable, new_units)
        } else {
            (old_usable, units)
        };
        if usable < units << UNIT_SHIFT {
            // SAFETY: the span is ours, live, of `units` units, and has no guard now.
            unsafe { self.arena.guard_large(address, usable, units) };
        }
        resized
    }

    /// Bytes usable at `address` (the class size or the span length), for any live object.
    #[cfg(test)]
    pub fn usable_size(&self, address: usize) -> Result<usize, Misuse> {
        match self.small_class_at(address)? {
            Some(class) => Ok(class.size()),
            None => self.large_usable(address),
        }
    }
}

/// Writes a kept object's canaries into its first and last words (the region's values, so a
/// write there reads as one into a freed span).
///
/// # Safety
/// `start..end` is the kept object's memory, committed, open and the caller's.
unsafe fn write_kept_canaries(start: usize, end: usize) {
    let last = end - 8;
    // SAFETY: two words of the object (contract above; a large object is pages long).
    unsafe {
        (start as *mut usize).write(canary_of(start));
        (last as *mut usize).write(canary_of(last));
    }
}

/// Checks both canaries of the kept object of `units` units at `start` (written by
/// [`write_kept_canaries`]), aborting with a report that names it if a write changed one.
fn check_kept_ends(start: usize, units: usize) {
    check_canary(start, start);
    check_canary(start, start + (units << UNIT_SHIFT) - 8);
}
