//! The arena: one address-space reservation split into a power-of-two **region** per usable node,
//! so the origin node of any heap pointer is `(p - base) >> region_shift`: a subtraction and a
//! shift, no lookup. Each region is bound to its node with `mbind` (except on one node, or on a
//! simulated topology) and hands out whole 32 KiB units as bags and large spans (see
//! [`region`]); the [`pagemap`] describes every unit.
//!
//! Each region is three span **pools**, laid out in eighths of the region (so the pool of a
//! pointer is its eighth, `(p - base) >> (region_shift - 3)`, through a table): the **dense**
//! pool (the first half) holds bags of objects no larger than a page, which the allocator
//! itself fills densely, and may be backed by transparent huge pages shared by all threads of
//! the node; the **sparse** pool (the next three eighths) holds large objects, aligned blocks
//! and bags of classes whose objects span pages, and stays on base pages, so a program that
//! touches such memory sparsely pays for the pages it touches, not for 2 MiB per touch; the
//! **owned** pool (the last eighth) holds the bags and large blocks of first-class heaps
//! (`node/owned/`) and nothing else, so the thread caches' fast paths, which look at the
//! first two pools alone ([`Arena::shared_bytes`]), never take a heap's block for their own.
//! See [`Pool`].
//!
//! The reservation is `MAP_NORESERVE` and large (1 TiB per node by default) so no workload meets
//! a wall; it shrinks to fit `RLIMIT_AS` and halves until the kernel accepts it. When a node's
//! region is exhausted, spans come from the other regions, nearest node first.
//!
//! In secure mode the arena also holds what hardening needs at this layer (see [`secure`]): the
//! process's random key for free-list links, the allocation bitmap (in the page map), bag carving
//! seeds and the guard pages of large objects.
//!
//! An arena is created once for the process (the global allocator's) or once per test, lives in
//! its own metadata mapping and is never moved. Layer: calls only `os`; used by `node`.

mod create;
pub mod free_bits;
mod interleave;
pub mod pagemap;
pub mod region;
pub mod secure;

use crate::os::{
    self, options::InterleaveChoice, options::ThpChoice, topology::ThpMode, topology::Topology,
    topology::MAX_NODES,
};
use crate::size_class::{SizeClass, UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use pagemap::PageMap;
use region::{ChunkNode, CommitBudget, DecommitPolicy, Region, SpanUse, CHUNK_UNITS};

/// What [`Arena::move_bag`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BagMove {
    /// Every resident page is on the node asked for (or nothing is bound here).
    Done,
    /// The kernel moved some pages and left others where they were: worth another try later.
    Partly,
    /// The kernel refused the move (`mbind` failed): nothing more is tried.
    Refused,
}

/// Where a bag is, as [`Arena::bag_at`] finds it from an address inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BagAt {
    /// The bag's first unit (its descriptor is `map().meta(first)`).
    pub first: usize,
    /// The bag's first byte.
    pub start: usize,
    /// The bag's class.
    pub class: SizeClass,
}

impl BagAt {
    /// The object of the bag just before the one at `address` (an object start of the bag);
    /// `None` for the bag's first object.
    pub fn object_before(self, address: usize) -> Option<usize> {
        let size = self.class.size();
        (address >= self.start + size).then(|| address - size)
    }
}

/// Objects of at most this many bytes (a page, or the 4 KiB class's page and a line) are
/// packed in the dense pool: a page of one of their bags holds parts of at most two objects, so
/// a bag in use is resident nearly whole whatever the program touches, and huge pages cost
/// nothing extra. Larger objects span pages a program may never touch (the tail of a 100 KB
/// buffer of which it writes a header).
pub const DENSE_OBJECT_MAX: usize = crate::size_class::PAGE_LINE;

/// The span pools of a node region (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// Bags of classes up to [`DENSE_OBJECT_MAX`]: may sit on transparent huge pages.
    Dense = 0,
    /// Large spans, aligned blocks, bags of larger classes: base pages.
    Sparse = 1,
    /// Spans of first-class heaps (bags and large blocks): base pages.
    Owned = 2,
}

/// Pools per node region.
pub const POOLS_PER_NODE: usize = 3;

/// The pool of each eighth of a region: split (the default), then merged (see
/// [`Arena::is_merged`]); derived from [`Pool::eighths`].
const POOL_OF_EIGHTH: [[Pool; 8]; 2] = [pools_of_eighths(false), pools_of_eighths(true)];

/// The pool of each eighth of a region laid out by [`Pool::eighths`].
const fn pools_of_eighths(merged: bool) -> [Pool; 8] {
    let mut table = [Pool::Owned; 8];
    let pools = [Pool::Dense, Pool::Sparse, Pool::Owned];
    let mut i = 0;
    while i < pools.len() {
        let (first, count) = pools[i].eighths(merged);
        let mut eighth = first;
        while eighth < first + count {
            table[eighth] = pools[i];
            eighth += 1;
        }
        i += 1;
    }
    table
}

/// A region shrunk below this many bytes to fit the address space (`RLIMIT_AS`, the kernel's
/// refusals) merges its dense and sparse pools (see [`Arena::is_merged`]).
pub const MERGE_BELOW: usize = 4 << 30;

impl Pool {
    /// The shared pool that serves spans of `usage`.
    pub fn for_use(usage: SpanUse) -> Pool {
        match usage {
            SpanUse::Bag(class) if class.size() <= DENSE_OBJECT_MAX => Pool::Dense,
            _ => Pool::Sparse,
        }
    }

    /// The other shared pool (the owned pool has none).
    fn other(self) -> Pool {
        match self {
            Pool::Dense => Pool::Sparse,
            Pool::Sparse | Pool::Owned => Pool::Dense,
        }
    }

    /// Where the pool starts in its region, in eighths, and how many eighths it spans; in a
    /// merged region the dense pool spans the first seven and the sparse pool none.
    pub const fn eighths(self, merged: bool) -> (usize, usize) {
        match (self, merged) {
            (Pool::Dense, false) => (0, 4),
            (Pool::Sparse, false) => (4, 3),
            (Pool::Dense, true) => (0, 7),
            (Pool::Sparse, true) => (7, 0),
            (Pool::Owned, _) => (7, 1),
        }
    }
}

/// Everything the arena needs to know besides the topology.
#[derive(Clone, Copy, Debug)]
pub struct ArenaConfig {
    /// Bytes reserved per node (a power of two, at least 64 MiB).
    pub region_bytes: u64,
    /// `MPOL_BIND` instead of `MPOL_PREFERRED` for the regions.
    pub strict_binding: bool,
    pub thp: ThpChoice,
    pub decommit: DecommitPolicy,
    /// Reserve `PROT_NONE` and commit as the regions grow (for `vm.overcommit_memory=2`).
    pub commit_on_demand: bool,
    /// Secure mode: encoded free lists, the allocation bitmap, guard pages, random carving.
    pub secure: bool,
    /// `NODALLOC_INTERLEAVE`: large blocks spread over the node and its far nodes.
    pub interleave: InterleaveChoice,
}

pub struct Arena {
    /// The optional hard limit on committed bytes (`NODALLOC_LIMIT`, `set_limit`); read and set
    /// through [`Arena::budget`].
    budget: CommitBudget,
    /// The optional limits of each memory tier, near then far (`NODALLOC_NEAR_LIMIT`,
    /// `NODALLOC_FAR_LIMIT`): each region charges its tier's and the arena's; read and set
    /// through [`Arena::tier_budget`].
    tier_budgets: [CommitBudget; 2],
    /// `NODALLOC_TIER_FULL=fail`: a span never comes from a node of another tier than the one
    /// it is for (see [`Arena::may_spill`]); set once the arena is shared, read by spills.
    tier_bound: AtomicBool,
    base: usize,
    end: usize,
    region_shift: u32,
    /// The region's dense and sparse pools are one (see [`Arena::is_merged`]).
    merged: bool,
    node_count: usize,
    map: PageMap,
    /// Three pools per node: node `n`'s dense pool at index `3n`, its sparse pool at `3n + 1`,
    /// its owned pool at `3n + 2`, in address order.
    pools: *const Region,
    /// Spans a node took from another node's region because its own was exhausted.
    steals: [AtomicUsize; MAX_NODES],
    bind_failed: AtomicBool,
    pub decommit: DecommitPolicy,
    /// Set while a maintenance thread runs: a free leaves the decommits it makes due to the
    /// thread's next step instead of making them itself (see [`Arena::defer_releases`]).
    deferred: AtomicBool,
    /// Secure mode, fixed at creation.
    secure: bool,
    /// Secure mode: the key mixed into every free-list link (random per process).
    key: usize,
    /// Secure mode: state of the generator of bag carving seeds.
    seeds: core::sync::atomic::AtomicU64,
    /// `NODALLOC_POLICY=bind` on several real nodes: regions are bound strictly, so a node
    /// whose memory runs out would end in the kernel's OOM killer at the program's next page
    /// fault; spans are refused (the allocation fails cleanly) while the node has too little
    /// left ([`Arena::node_has_room`]).
    strict: bool,
    /// The `mbind` mode of interleaved large blocks (`MPOL_WEIGHTED_INTERLEAVE`, or
    /// `MPOL_INTERLEAVE` on a kernel without it), 0 when large blocks are not interleaved
    /// (see `interleave.rs`).
    interleave: core::sync::atomic::AtomicI32,
    rooms: [NodeRoom; MAX_NODES],
    pub topology: Topology,
}

/// What a strictly bound node can still give: its available bytes when last read, when that
/// was (monotonic ns), and the bytes of the spans handed out on it since (not yet in the
/// kernel's figure until the program touches them). All-zero: never read.
struct NodeRoom {
    available: AtomicU64,
    read_at: AtomicU64,
    taken: AtomicU64,
}

/// How long a node's available memory is trusted before it is read again.
const ROOM_READ_NS: u64 = 2_000_000;

// SAFETY: regions are Sync (span locks), the page map is Sync, and the rest is immutable after
// `create` or atomic.
unsafe impl Sync for Arena {}
// SAFETY: as for Sync: the arena is process-wide memory, not tied to a thread.
unsafe impl Send for Arena {}

/// Bytes at the start of each pool never advised to use huge pages (four chunks): also where
/// the frontier opens the reservation in fine steps (`region::FINE_FRONTIER`).
const SMALL_PAGE_HEAD: usize = region::FINE_FRONTIER;

/// Smallest region: 32 chunks, enough for any bag and a few large objects.
pub const MIN_REGION_SHIFT: u32 = 26;

const _: () = assert!(MIN_REGION_SHIFT >= 3 + 22);

impl Arena {
    #[cfg(test)]
    pub fn base(&self) -> usize {
        self.base
    }

    /// The hard limit on committed bytes and what is charged against it.
    pub fn budget(&self) -> &CommitBudget {
        &self.budget
    }

    /// The limit of memory tier `far` (false: near) and what its regions charge against it.
    pub fn tier_budget(&self, far: bool) -> &CommitBudget {
        &self.tier_budgets[far as usize]
    }

    /// True when a memory tier has a limit.
    pub fn tier_limited(&self) -> bool {
        self.tier_budgets.iter().any(|budget| budget.limit() != 0)
    }

    /// Sets whether spans stay in their tier (`NODALLOC_TIER_FULL=fail`).
    pub fn set_tier_bound(&self, bound: bool) {
        self.tier_bound.store(bound, Ordering::Relaxed);
    }

    /// True when spans stay in their tier (`NODALLOC_TIER_FULL=fail`).
    pub fn tier_bound(&self) -> bool {
        self.tier_bound.load(Ordering::Relaxed)
    }

    /// True unless spans stay in their tier and `other` is in another tier than `node`: a
    /// request of `node` may then be served from `other`'s region or caches.
    #[inline]
    pub fn may_spill(&self, node: usize, other: usize) -> bool {
        !self.tier_bound.load(Ordering::Relaxed)
            || self.topology.is_far(node) == self.topology.is_far(other)
    }

    /// The arena's range, as `(first address, bytes)`: every node's region.
    pub fn range(&self) -> (usize, usize) {
        (self.base, self.end - self.base)
    }

    pub fn region_bytes(&self) -> usize {
        1 << self.region_shift
    }

    /// The first address of `node`'s region (its dense pool).
    #[inline(always)]
    pub fn region_start(&self, node: usize) -> usize {
        debug_assert!(node < self.node_count);
        self.base + (node << self.region_shift)
    }

    /// Bytes of `pool` in each region.
    pub fn pool_bytes(&self, pool: Pool) -> usize {
        pool.eighths(self.merged).1 << (self.region_shift - 3)
    }

    /// True when each region's dense pool also serves what the sparse pool would, which then
    /// has no room: a region shrunk below [`MERGE_BELOW`] to fit the address space. There a
    /// fixed split fails a program whose memory is mostly of one kind (under `RLIMIT_AS=256M`,
    /// a workload of large blocks filled its 48 MiB sparse pool while the 64 MiB dense pool
    /// stood nearly empty, and its free spans, spread among small bags, held no 4 MiB hole).
    /// Merged, small bags still go beside small bags (the dense pool's filler) and everything
    /// else takes the best fit, over seven eighths of the region; the pool stays on base pages
    /// unless `NODALLOC_THP=on`, as a sparse pool does.
    pub fn is_merged(&self) -> bool {
        self.merged
    }

    /// The largest span the shared pools can hand out (the larger pool's size).
    pub fn largest_span(&self) -> usize {
        self.pool_bytes(Pool::Sparse)
            .max(self.pool_bytes(Pool::Dense))
    }

    /// Bytes at the start of each region that its shared pools cover (the dense and sparse
    /// pools): the thread caches' view of a region stops there, so the owned pool's blocks
    /// always take the slow paths.
    pub fn shared_bytes(&self) -> usize {
        7 << (self.region_shift - 3)
    }

    #[inline(always)]
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// Whether an object of `class` is a span of its own that the region holds at its free
    /// (default mode; see `region::hold`): threads then cache none of it.
    pub fn held_at_free(&self, class: SizeClass) -> bool {
        !self.secure && class.capacity() == 1 && region::holds_units(class.bag_units())
    }

    #[inline(always)]
    pub fn contains(&self, address: usize) -> bool {
        address.wrapping_sub(self.base) < self.end - self.base
    }

    /// The node whose region holds `address`, or `None` outside the arena.
    #[inline(always)]
    pub fn origin_of(&self, address: usize) -> Option<usize> {
        if self.contains(address) {
            Some((address - self.base) >> self.region_shift)
        } else {
            None
        }
    }

    /// The tag of the unit holding `address`, or `None` when the address is outside the arena or
    /// past its region's frontier (never handed out; with commit-on-demand not even readable).
    #[inline]
    pub fn tag_checked(&self, address: usize) -> Option<pagemap::Tag> {
        if self.contains(address) && self.pool_of(address).is_below_frontier(address) {
            Some(self.map.tag(address))
        } else {
            None
        }
    }

    /// The bag holding `address`, from its unit's tag: `None` when the address is outside the
    /// arena, past its region's frontier ([`Self::tag_checked`]) or in no bag. The one place
    /// that walks a tag back to its bag's first unit (the free fast path keeps its own copy,
    /// `HomeView::bag_object`).
    pub fn bag_at(&self, address: usize) -> Option<BagAt> {
        self.bag_with_tag(address, self.tag_checked(address)?)
    }

    /// [`Self::bag_at`] for a caller that read the unit's tag already.
    pub fn bag_with_tag(&self, address: usize, tag: pagemap::Tag) -> Option<BagAt> {
        if !tag.is_bag() {
            return None;
        }
        let first = self.map.unit_of(address) - tag.offset_units();
        Some(BagAt {
            first,
            start: self.map.address_of(first),
            class: tag.class(),
        })
    }

    #[inline(always)]
    pub fn map(&self) -> &PageMap {
        &self.map
    }

    /// `node`'s pool of kind `pool`.
    pub fn pool(&self, node: usize, pool: Pool) -> &Region {
        os::invariant(
            node < self.node_count,
            "a pool of a node that does not exist",
        );
        // SAFETY: `pools` holds three initialised pools per node (see `try_create`).
        unsafe { &*self.pools.add(POOLS_PER_NODE * node + pool as usize) }
    }

    /// Every pool of every node, in address order.
    fn all_pools(&self) -> impl Iterator<Item = &Region> {
        // SAFETY: `pools` holds three initialised pools per node (see `try_create`).
        (0..POOLS_PER_NODE * self.node_count).map(|index| unsafe { &*self.pools.add(index) })
    }

    /// The kind of pool whose range holds `address`, which must be inside the arena.
    #[inline]
    pub fn pool_kind_of(&self, address: usize) -> Pool {
        os::invariant(self.contains(address), "a pool looked up outside the arena");
        POOL_OF_EIGHTH[self.merged as usize][((address - self.base) >> (self.region_shift - 3)) & 7]
    }

    /// True when `address` lies in a node's owned pool (a first-class heap's span).
    #[inline]
    pub fn is_owned(&self, address: usize) -> bool {
        self.contains(address) && self.pool_kind_of(address) == Pool::Owned
    }

    /// The pool whose range holds `address`, which must be inside the arena.
    #[inline]
    pub fn pool_of(&self, address: usize) -> &Region {
        let node = (address.wrapping_sub(self.base)) >> self.region_shift;
        self.pool(node, self.pool_kind_of(address))
    }

    /// Hands out a span for `node` from the pool `usage` calls for, else (that pool exhausted)
    /// from the node's other pool, else from the nearest other node's pools (not when the node
    /// is strictly bound and short of memory: see [`Self::node_has_room`]). Returns the address
    /// and the node that supplied it.
    pub fn alloc_span(
        &self,
        node: usize,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<(usize, usize)> {
        // A strictly bound node out of memory: no spill (the policy asks for this node's
        // memory); a full region still spills below.
        if !self.room_for(node, units) {
            return None;
        }
        if let Some(address) = self.alloc_from_pools(node, units, align_units, usage) {
            return Some((address, node));
        }
        let mut order = [0u8; MAX_NODES];
        let count = self.topology.nearest_nodes(node, &mut order);
        for &other in &order[..count] {
            let other = other as usize;
            if !self.may_spill(node, other) {
                continue;
            }
            if let Some(address) = self.alloc_span_on(other, units, align_units, usage) {
                self.steals[node].fetch_add(1, Ordering::Relaxed);
                return Some((address, other));
            }
        }
        None
    }

    /// A span from `node`'s own pools: the one `usage` calls for, else the other one (a small
    /// region under `RLIMIT_AS` may fill one pool long before the other).
    pub fn alloc_span_on(
        &self,
        node: usize,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<usize> {
        if !self.room_for(node, units) {
            return None;
        }
        self.alloc_from_pools(node, units, align_units, usage)
    }

    /// [`Self::alloc_span_on`] without the strict binding's check of the node's memory.
    fn alloc_from_pools(
        &self,
        node: usize,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<usize> {
        let first = Pool::for_use(usage);
        // Both shared pools exhausted (a small region under `RLIMIT_AS`): the owned pool,
        // whose blocks the caches never take for a heap's (a heap's block is told by its
        // owner, not its pool), but which the thread caches' views do not cover: its blocks
        // take the slow paths.
        let pools = [first, first.other(), Pool::Owned];
        self.alloc_in_pools(node, &pools, units, align_units, usage)
    }

    /// A span from `node`'s `pools`, the first that has one; when a limit refused them all,
    /// the free spans of every pool are decommitted (a pool decommits its own before it
    /// refuses, but the others' still count against the limit: a heap's dropped spans for a
    /// `malloc`, or the other way round) and the pools are tried once more.
    fn alloc_in_pools(
        &self,
        node: usize,
        pools: &[Pool],
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<usize> {
        let attempt = || {
            pools.iter().find_map(|&pool| {
                self.pool(node, pool)
                    .alloc(&self.map, units, align_units, usage)
            })
        };
        attempt().or_else(|| {
            if self.budget.limit() == 0 && !self.tier_limited() {
                return None;
            }
            self.purge(true);
            attempt()
        })
    }

    /// False when `node` is strictly bound and short of memory for `units` more units (see
    /// [`Self::node_has_room`]); true otherwise.
    fn room_for(&self, node: usize, units: usize) -> bool {
        !self.strict || self.node_has_room(node, (units << UNIT_SHIFT) as u64)
    }

    /// A span of `node`'s owned pool (a first-class heap's bag or large block): that pool
    /// alone, never another node's (a heap's placement is its node).
    pub fn alloc_owned_span(
        &self,
        node: usize,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<usize> {
        if !self.room_for(node, units) {
            return None;
        }
        self.alloc_in_pools(node, &[Pool::Owned], units, align_units, usage)
    }

    /// Strict binding: true when `node` can give `bytes` more and keep a reserve (a 16th of
    /// its memory, at least 32 MiB: the kernel keeps watermarks of its own), by its `meminfo`
    /// (read again every 2 ms, or sooner once the spans handed out since reach half of what it
    /// had), less the spans handed out since the last reading. A refusal takes its bytes back. Spans reused from the pools count as
    /// new memory: near the limit, the answer errs on the side of a clean failure.
    fn node_has_room(&self, node: usize, bytes: u64) -> bool {
        let room = &self.rooms[node];
        let now = os::monotonic_ns();
        let mut taken = room.taken.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let mut available = room.available.load(Ordering::Relaxed);
        let stale = now.saturating_sub(room.read_at.load(Ordering::Relaxed)) > ROOM_READ_NS;
        if stale || taken * 2 > available {
            if let Some(fresh) = self.topology.node_available_bytes(node) {
                available = fresh;
                room.available.store(fresh, Ordering::Relaxed);
                room.read_at.store(now, Ordering::Relaxed);
                // What was handed out before this reading is either in it (touched) or soon
                // will be; only this request is counted on top.
                room.taken.store(bytes, Ordering::Relaxed);
                taken = bytes;
            } else {
                return true;
            }
        }
        let reserve = (self.topology.node(node).memory_bytes / 16).max(32 << 20);
        if available >= taken + reserve {
            return true;
        }
        room.taken.fetch_sub(bytes, Ordering::Relaxed);
        false
    }

    /// Returns a span to the region it came from.
    ///
    /// # Safety
    /// `address` must head a span of `units` units handed out by `alloc_span` and not freed since,
    /// with no live object left in it.
    pub unsafe fn free_span(&self, address: usize, units: usize) {
        self.pool_of(address).free(
            &self.map,
            address,
            units,
            self.decommit,
            self.releases_deferred(),
        );
    }

    /// Turns deferred releases on (a maintenance thread runs and makes every node's due
    /// decommits on its steps, so user threads make no `madvise` call on `free`) or off.
    /// Deferred or not, a free span stays charged to the limit until it is decommitted, and an
    /// allocation the limit refuses still decommits every free span first: the limit is exact
    /// with releases in flight.
    pub fn defer_releases(&self, on: bool) {
        self.deferred.store(on, Ordering::Relaxed);
    }

    /// True while releases are left to the maintenance thread.
    #[inline]
    pub fn releases_deferred(&self) -> bool {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Calls `f` with every bag of `node`'s shared pools (up to their frontiers; not the owned
    /// pool's, which first-class heaps place themselves), in address order, as its page map
    /// tags say at the time: a caller that acts on a bag takes its class lock and checks the
    /// tag again.
    pub fn for_each_bag(&self, node: usize, mut f: impl FnMut(BagAt)) {
        for pool in [Pool::Dense, Pool::Sparse] {
            let (start, end) = self.pool(node, pool).used_range();
            let mut unit = self.map.unit_of(start);
            let last = self.map.unit_of(end);
            while unit < last {
                let address = self.map.address_of(unit);
                let tag = self.map.tag(address);
                if tag.is_bag() && tag.offset_units() == 0 {
                    f(BagAt {
                        first: unit,
                        start: address,
                        class: tag.class(),
                    });
                    unit += tag.class().bag_units().max(1);
                } else {
                    unit += 1;
                }
            }
        }
    }

    /// Moves the pages of the bag of `bytes` at `address` to `to` (a node index): `mbind` with
    /// `MPOL_MF_MOVE`, then the region's own policy back (so the range merges again with its
    /// neighbours and pages faulted later follow the region), its chunks kept off huge pages (a
    /// collapse would gather the pages on one node again). Then it asks where the pages are:
    /// the kernel leaves some where they were without saying so (a page a forked child still
    /// shares, a page busy at that moment), and the caller tries those again later. On a
    /// topology where nothing is bound (one node, simulated nodes) only the caller's record
    /// changes.
    pub fn move_bag(&self, address: usize, bytes: usize, to: usize) -> BagMove {
        if self.node_count < 2 || self.topology.is_simulated() {
            return BagMove::Done;
        }
        let os_id = self.topology.node(to).os_id;
        if os::move_memory(address as *mut u8, bytes, os_id).is_err() {
            self.restore_region_policy(address, bytes);
            return BagMove::Refused;
        }
        self.restore_region_policy(address, bytes);
        self.pool_of(address)
            .keep_range_off_huge_pages(address, bytes);
        match os::pages_off_node(address as *mut u8, bytes, os_id) {
            Ok(0) | Err(_) => BagMove::Done,
            Ok(_) => BagMove::Partly,
        }
    }

    /// Gives whole free pages inside a span still in use back to the OS.
    ///
    /// # Safety
    /// As for [`Region::release_in_use`].
    pub unsafe fn release_in_use(&self, address: usize, bytes: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.pool_of(address).release_in_use(address, bytes) };
    }

    /// What `node`'s pools hold, summed over all three.
    pub fn usage(&self, node: usize) -> PoolUsage {
        let mut usage = PoolUsage::default();
        for pool in [Pool::Dense, Pool::Sparse, Pool::Owned] {
            let region = self.pool(node, pool);
            usage.active += region.active.load(Ordering::Relaxed);
            usage.committed += region.committed.load(Ordering::Relaxed);
            usage.mapped += region.mapped.load(Ordering::Relaxed);
            usage.decommitted += region.decommitted.load(Ordering::Relaxed);
            usage.span_locks += region.span_locks.load(Ordering::Relaxed);
        }
        usage.dense_active = self.pool(node, Pool::Dense).active.load(Ordering::Relaxed);
        usage
    }

    pub fn steals(&self, node: usize) -> usize {
        self.steals[node].load(Ordering::Relaxed)
    }

    /// Decommits free spans the policy says are due, in every region (all, when `force`).
    pub fn purge(&self, force: bool) {
        for node in 0..self.node_count {
            self.purge_node(node, force);
        }
    }

    /// Decommits free spans the policy says are due in `node`'s pools (all, when `force`).
    pub fn purge_node(&self, node: usize, force: bool) {
        for pool in [Pool::Dense, Pool::Sparse, Pool::Owned] {
            self.pool(node, pool).purge(&self.map, self.decommit, force);
        }
    }

    /// The maintenance thread's purge of `node`'s pools: quiet ones return what waited the
    /// policy's own delay (see [`Region::purge_quiet`]).
    pub fn purge_quiet_node(&self, node: usize) {
        for pool in [Pool::Dense, Pool::Sparse, Pool::Owned] {
            self.pool(node, pool).purge_quiet(&self.map, self.decommit);
        }
    }

    /// The maintenance thread's preparation step over every pool (see `region/prepare.rs`).
    /// True while some pool has recent demand, so the caller comes back soon.
    pub fn prepare_all(&self, now: u64) -> bool {
        let mut wanted = false;
        for pool in self.all_pools() {
            wanted |= pool.prepare(&self.map, now);
        }
        wanted
    }

    /// Bytes given back to the OS so far, all pools.
    pub fn decommitted_total(&self) -> usize {
        self.all_pools()
            .map(|pool| pool.decommitted.load(Ordering::Relaxed))
            .sum()
    }

    /// Chunks populated ahead of demand so far, all pools.
    pub fn prepared_chunks(&self) -> usize {
        self.all_pools()
            .map(|pool| pool.prepared.load(Ordering::Relaxed))
            .sum()
    }

    /// In a forked child, after [`Arena::unlock_all`]: finishes what the parent's maintenance
    /// thread left half done, and makes the child's threads do their own releases until it
    /// has a maintenance thread again.
    pub fn recover_after_fork(&self) {
        self.defer_releases(false);
        for pool in self.all_pools() {
            pool.recover_after_fork(&self.map);
        }
    }

    /// Takes every span lock (fork `prepare`). Pair with [`Arena::unlock_all`].
    pub fn lock_all(&self) {
        for pool in self.all_pools() {
            pool.lock_for_fork();
        }
    }

    pub fn unlock_all(&self) {
        for pool in self.all_pools() {
            pool.unlock_after_fork();
        }
    }
}

/// A node's pool counters, summed (see [`Arena::usage`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolUsage {
    /// Bytes of spans handed out (bags and large objects).
    pub active: usize,
    /// Bytes handed out or free but still committed.
    pub committed: usize,
    /// Bytes of address space the frontiers have passed.
    pub mapped: usize,
    /// Bytes returned to the OS so far.
    pub decommitted: usize,
    /// Bytes handed out from the dense pool alone (bags of objects up to a page).
    pub dense_active: usize,
    /// Times the pools' span locks were taken.
    pub span_locks: u64,
}

/// `value` rounded up to a multiple of `to`.
pub(crate) fn round_up(value: usize, to: usize) -> usize {
    value.next_multiple_of(to)
}

#[cfg(test)]
mod reuse_tests;
#[cfg(test)]
mod stretch_tests;
#[cfg(test)]
pub(crate) mod tests;
