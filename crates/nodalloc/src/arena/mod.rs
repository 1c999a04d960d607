//! The arena: one address-space reservation split into a power-of-two **region** per usable node,
//! so the origin node of any heap pointer is `(p - base) >> region_shift`: a subtraction and a
//! shift, no lookup. Each region is bound to its node with `mbind` (except on one node, or on a
//! simulated topology) and hands out whole 32 KiB units as bags and large spans (see
//! [`region`]); the [`pagemap`] describes every unit.
//!
//! Each region is two span **pools** of equal, power-of-two size (so the pool of a pointer is
//! `(p - base) >> (region_shift - 1)`): the **dense** pool holds bags of objects no larger than
//! a page, which the allocator itself fills densely, and may be backed by transparent huge pages
//! shared by all threads of the node; the **sparse** pool holds large objects, aligned blocks
//! and bags of classes whose objects span pages, and stays on base pages, so a program that
//! touches such memory sparsely pays for the pages it touches, not for 2 MiB per touch. See
//! [`Pool`].
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

pub mod pagemap;
pub mod region;
pub mod secure;

use crate::os::{
    self, options::ThpChoice, topology::ThpMode, topology::Topology, topology::MAX_NODES,
};
use crate::size_class::{UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use pagemap::PageMap;
use region::{ChunkNode, CommitBudget, DecommitPolicy, Region, SpanUse, CHUNK_UNITS};

/// Objects of at most this many bytes are packed in the dense pool: every page of one of their
/// bags holds the start of an object, so a bag in use is resident whole whatever the program
/// touches, and huge pages cost nothing extra. Larger objects span pages a program may never
/// touch (the tail of a 100 KB buffer of which it writes a header).
pub const DENSE_OBJECT_MAX: usize = os::PAGE_SIZE;

/// The two span pools of a node region (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// Bags of classes up to [`DENSE_OBJECT_MAX`]: may sit on transparent huge pages.
    Dense = 0,
    /// Large spans, aligned blocks, bags of larger classes: base pages.
    Sparse = 1,
}

impl Pool {
    /// The pool that serves spans of `usage`.
    pub fn for_use(usage: SpanUse) -> Pool {
        match usage {
            SpanUse::Bag(class) if class.size() <= DENSE_OBJECT_MAX => Pool::Dense,
            _ => Pool::Sparse,
        }
    }

    fn other(self) -> Pool {
        match self {
            Pool::Dense => Pool::Sparse,
            Pool::Sparse => Pool::Dense,
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
}

pub struct Arena {
    /// The optional hard limit on committed bytes (`NODALLOC_LIMIT`, `set_limit`).
    pub budget: CommitBudget,
    base: usize,
    end: usize,
    region_shift: u32,
    node_count: usize,
    map: PageMap,
    /// Two pools per node: node `n`'s dense pool at index `2n`, its sparse pool at `2n + 1`,
    /// in address order.
    pools: *const Region,
    /// Spans a node took from another node's region because its own was exhausted.
    steals: [AtomicUsize; MAX_NODES],
    bind_failed: AtomicBool,
    pub decommit: DecommitPolicy,
    /// Secure mode, fixed at creation.
    secure: bool,
    /// Secure mode: the key mixed into every free-list link (random per process).
    key: usize,
    /// Secure mode: state of the generator of bag carving seeds.
    seeds: core::sync::atomic::AtomicU64,
    pub topology: Topology,
}

// SAFETY: regions are Sync (span locks), the page map is Sync, and the rest is immutable after
// `create` or atomic.
unsafe impl Sync for Arena {}
// SAFETY: as for Sync: the arena is process-wide memory, not tied to a thread.
unsafe impl Send for Arena {}

/// Bytes at the start of each region never advised to use huge pages (four chunks).
const SMALL_PAGE_HEAD: usize = 4 * CHUNK_UNITS * UNIT;

/// Smallest region: 32 chunks, enough for any bag and a few large objects.
pub const MIN_REGION_SHIFT: u32 = 26;

impl Arena {
    /// Reserves the heap for `topology` and builds its metadata. `None` only if even the smallest
    /// reservation fails.
    pub fn create(topology: &Topology, config: &ArenaConfig) -> Option<&'static Arena> {
        let nodes = topology.node_count();
        let mut shift = 63
            - config
                .region_bytes
                .max(1 << MIN_REGION_SHIFT)
                .leading_zeros();
        if let Some(limit) = topology.address_space_limit() {
            // Leave half the address-space limit to the program (stacks, code, other mappings).
            // Metadata takes 1/256 of the heap's size, plus 1/64 for secure mode's bitmap; it
            // comes on top of the heap's half, or every power-of-two limit would get a quarter of
            // it as heap (`ulimit -v 262144`: 64 MiB instead of 128 MiB).
            let budget = limit / 2 / nodes as u64;
            let metadata = |heap: u64| heap / 256 + if config.secure { heap / 64 } else { 0 };
            while shift > MIN_REGION_SHIFT
                && (1u64 << shift) + metadata(1u64 << shift) > budget + metadata(budget)
            {
                shift -= 1;
            }
        }
        loop {
            if let Some(arena) = Self::try_create(topology, config, shift) {
                return Some(arena);
            }
            if shift == MIN_REGION_SHIFT {
                return None;
            }
            shift -= 1;
        }
    }

    fn try_create(topology: &Topology, config: &ArenaConfig, shift: u32) -> Option<&'static Arena> {
        let nodes = topology.node_count();
        let region = 1usize << shift;
        let total = region.checked_mul(nodes)?;
        let units = total >> UNIT_SHIFT;
        let header = round_up(core::mem::size_of::<Arena>(), os::PAGE_SIZE);
        // The pools, then each pool's chunk bitmap, then each dense pool's filler records.
        let pool_bytes = region / 2;
        let pools = 2 * nodes;
        let chunk_words = Region::chunk_words(pool_bytes);
        let filler_bytes = Region::chunk_count(pool_bytes) * core::mem::size_of::<ChunkNode>();
        let regions_bytes = round_up(
            pools * (core::mem::size_of::<Region>() + chunk_words * 8) + nodes * filler_bytes,
            os::PAGE_SIZE,
        );
        let metadata_bytes = header + regions_bytes + PageMap::bytes_for(units, config.secure);
        let on_demand = config.commit_on_demand;
        let metadata = if on_demand {
            let metadata = os::reserve_inaccessible(metadata_bytes)?;
            if !os::commit(metadata, header + regions_bytes) {
                // SAFETY: we just mapped `metadata` and nothing refers to it.
                unsafe { os::unmap(metadata, metadata_bytes) };
                return None;
            }
            metadata
        } else {
            os::reserve(metadata_bytes)?
        };
        let Some(base) = os::reserve_aligned_with(total, CHUNK_UNITS * UNIT, on_demand) else {
            // SAFETY: we just mapped `metadata` and nothing refers to it.
            unsafe { os::unmap(metadata, metadata_bytes) };
            return None;
        };
        // Metadata is read piecemeal and sparsely: huge pages would only inflate RSS.
        os::advise(metadata, metadata_bytes, libc::MADV_NOHUGEPAGE);
        // Huge-page advice for the dense pools (and, with `NODALLOC_THP=on`, the sparse ones).
        let huge = match config.thp {
            ThpChoice::On => Some(libc::MADV_HUGEPAGE),
            ThpChoice::Off => Some(libc::MADV_NOHUGEPAGE),
            ThpChoice::Auto if topology.thp_mode() == ThpMode::Madvise => Some(libc::MADV_HUGEPAGE),
            ThpChoice::Auto => None,
        };
        // Where huge pages may back a dense pool: advised, or left to a kernel that may use
        // them everywhere. Pools then keep partly decommitted chunks off huge pages (see
        // `purge`).
        let huge_pages_possible = match huge {
            Some(advice) => advice == libc::MADV_HUGEPAGE,
            None => topology.thp_mode() != ThpMode::Never,
        };
        // Sparse pools stay on base pages (also under THP `always`), unless the user asked for
        // huge pages everywhere.
        let sparse_huge = config.thp == ThpChoice::On;
        // The first chunks of each pool stay on small pages: a program whose heap stays small
        // (most processes) then pays for the pages it touches, not for a whole huge page per
        // node, and never waits for the kernel to compact memory into one.
        let advise_pool = |start: usize, body: Option<libc::c_int>| {
            os::advise(start as *mut u8, SMALL_PAGE_HEAD, libc::MADV_NOHUGEPAGE);
            if let Some(advice) = body {
                let body_start = start + SMALL_PAGE_HEAD;
                os::advise(body_start as *mut u8, pool_bytes - SMALL_PAGE_HEAD, advice);
            }
        };
        let sparse_advice = if sparse_huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        for node in 0..nodes {
            let dense = base as usize + node * region;
            advise_pool(dense, huge);
            advise_pool(dense + pool_bytes, Some(sparse_advice));
        }
        let arena = metadata as *mut Arena;
        // SAFETY: `metadata` is a fresh zeroed mapping large enough for the header, the regions
        // and the page map, laid out in that order; nothing else can see it yet.
        unsafe {
            let regions = metadata.add(header) as *mut Region;
            let pool_shift = shift - 1;
            let map = PageMap::new(
                base as usize,
                units,
                metadata.add(header + regions_bytes),
                config.secure,
            );
            core::ptr::addr_of_mut!((*arena).base).write(base as usize);
            core::ptr::addr_of_mut!((*arena).end).write(base as usize + total);
            core::ptr::addr_of_mut!((*arena).region_shift).write(shift);
            core::ptr::addr_of_mut!((*arena).node_count).write(nodes);
            core::ptr::addr_of_mut!((*arena).map).write(map);
            core::ptr::addr_of_mut!((*arena).pools).write(regions);
            core::ptr::addr_of_mut!((*arena).decommit).write(config.decommit);
            if config.secure {
                let seed = os::random_seed();
                core::ptr::addr_of_mut!((*arena).secure).write(true);
                core::ptr::addr_of_mut!((*arena).key).write(secure::mix(seed) as usize);
                (*arena)
                    .seeds
                    .store(secure::mix(seed ^ 0x5bd1_e995), Ordering::Relaxed);
            }
            // A copy without a 30 KiB temporary on the stack.
            core::ptr::copy_nonoverlapping(topology, core::ptr::addr_of_mut!((*arena).topology), 1);
            let chunk_bits = regions.add(pools) as *mut u64;
            let filler = chunk_bits.add(pools * chunk_words) as *mut ChunkNode;
            for index in 0..pools {
                let start = base as usize + (index << pool_shift);
                let budget = core::ptr::addr_of!((*arena).budget);
                let dense = index % 2 == Pool::Dense as usize;
                let huge = if dense {
                    huge_pages_possible
                } else {
                    sparse_huge
                };
                let huge_from = if huge {
                    start + SMALL_PAGE_HEAD
                } else {
                    usize::MAX
                };
                Region::init(
                    regions.add(index),
                    start,
                    start + pool_bytes,
                    on_demand,
                    budget,
                    huge_from,
                    chunk_bits.add(index * chunk_words),
                    if dense {
                        filler.add(index / 2 * Region::chunk_count(pool_bytes))
                    } else {
                        core::ptr::null_mut()
                    },
                );
            }
        }
        // SAFETY: fully initialised above; it lives until process exit.
        let arena: &'static Arena = unsafe { &*arena };
        arena.bind_regions(config.strict_binding);
        Some(arena)
    }

    /// Binds each region to its node. Skipped on one node and on simulated topologies; a failure
    /// (EPERM in a container, EINVAL for a node we may not use) warns once and leaves the region
    /// unbound: memory still works, only placement is left to the kernel.
    fn bind_regions(&self, strict: bool) {
        if self.node_count < 2 || self.topology.is_simulated() {
            return;
        }
        let mode = if strict {
            os::MPOL_BIND
        } else {
            os::MPOL_PREFERRED
        };
        for node in 0..self.node_count {
            let os_node = self.topology.node(node).os_id;
            if let Err(errno) = os::bind_memory(
                self.region_start(node) as *mut u8,
                self.region_bytes(),
                mode,
                os_node,
            ) {
                if !self.bind_failed.swap(true, Ordering::Relaxed) {
                    os::warn(|w| {
                        w.str("mbind of node ")
                            .decimal(os_node as u64)
                            .str("'s region failed (errno ")
                            .decimal(errno as u64)
                            .str("); memory placement is left to the kernel");
                    });
                }
            }
        }
    }

    #[inline(always)]
    pub fn base(&self) -> usize {
        self.base
    }

    #[inline(always)]
    pub fn region_shift(&self) -> u32 {
        self.region_shift
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

    /// Bytes of each pool: half a region. The largest span the arena can hand out.
    pub fn pool_bytes(&self) -> usize {
        1 << (self.region_shift - 1)
    }

    #[inline(always)]
    pub fn node_count(&self) -> usize {
        self.node_count
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

    #[inline(always)]
    pub fn map(&self) -> &PageMap {
        &self.map
    }

    /// `node`'s pool of kind `pool`.
    pub fn pool(&self, node: usize, pool: Pool) -> &Region {
        assert!(node < self.node_count);
        // SAFETY: `pools` holds two initialised pools per node (see `try_create`).
        unsafe { &*self.pools.add(2 * node + pool as usize) }
    }

    /// The pool whose range holds `address`, which must be inside the arena.
    #[inline]
    pub fn pool_of(&self, address: usize) -> &Region {
        assert!(self.contains(address));
        let index = (address - self.base) >> (self.region_shift - 1);
        // SAFETY: inside the arena, so `index` is below `2 * node_count` (see `try_create`).
        unsafe { &*self.pools.add(index) }
    }

    /// Hands out a span for `node` from the pool `usage` calls for, else (that pool exhausted)
    /// from the node's other pool, else from the nearest other node's pools. Returns the
    /// address and the node that supplied it.
    pub fn alloc_span(
        &self,
        node: usize,
        units: usize,
        align_units: usize,
        usage: SpanUse,
    ) -> Option<(usize, usize)> {
        if let Some(address) = self.alloc_span_on(node, units, align_units, usage) {
            return Some((address, node));
        }
        let mut order = [0u8; MAX_NODES];
        let count = self.topology.nearest_nodes(node, &mut order);
        for &other in &order[..count] {
            let other = other as usize;
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
        let first = Pool::for_use(usage);
        self.pool(node, first)
            .alloc(&self.map, units, align_units, usage)
            .or_else(|| {
                self.pool(node, first.other())
                    .alloc(&self.map, units, align_units, usage)
            })
    }

    /// Returns a span to the region it came from.
    ///
    /// # Safety
    /// `address` must head a span of `units` units handed out by `alloc_span` and not freed since,
    /// with no live object left in it.
    pub unsafe fn free_span(&self, address: usize, units: usize) {
        self.pool_of(address)
            .free(&self.map, address, units, self.decommit);
    }

    /// Gives whole free pages inside a span still in use back to the OS.
    ///
    /// # Safety
    /// As for [`Region::release_in_use`].
    pub unsafe fn release_in_use(&self, address: usize, bytes: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.pool_of(address).release_in_use(address, bytes) };
    }

    /// What `node`'s pools hold, summed over both.
    pub fn usage(&self, node: usize) -> PoolUsage {
        let mut usage = PoolUsage::default();
        for pool in [Pool::Dense, Pool::Sparse] {
            let region = self.pool(node, pool);
            usage.active += region.active.load(Ordering::Relaxed);
            usage.committed += region.committed.load(Ordering::Relaxed);
            usage.mapped += region.mapped.load(Ordering::Relaxed);
            usage.decommitted += region.decommitted.load(Ordering::Relaxed);
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
        for pool in [Pool::Dense, Pool::Sparse] {
            self.pool(node, pool).purge(&self.map, self.decommit, force);
        }
    }

    /// Takes every span lock (fork `prepare`). Pair with [`Arena::unlock_all`].
    pub fn lock_all(&self) {
        for index in 0..2 * self.node_count {
            // SAFETY: `pools` holds two initialised pools per node.
            unsafe { &*self.pools.add(index) }.lock_for_fork();
        }
    }

    pub fn unlock_all(&self) {
        for index in 0..2 * self.node_count {
            // SAFETY: as in `lock_all`.
            unsafe { &*self.pools.add(index) }.unlock_after_fork();
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
}

/// `value` rounded up to a multiple of `to`.
pub(crate) fn round_up(value: usize, to: usize) -> usize {
    value.next_multiple_of(to)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::os::cpuset::CpuSet;
    use pagemap::Kind;

    /// A test arena on `nodes` simulated nodes with small regions.
    pub fn test_arena(nodes: usize, region_bytes: u64, retain_bytes: usize) -> &'static Arena {
        test_arena_with(nodes, region_bytes, retain_bytes, false)
    }

    pub fn test_arena_with(
        nodes: usize,
        region_bytes: u64,
        retain_bytes: usize,
        commit_on_demand: bool,
    ) -> &'static Arena {
        test_arena_config(
            nodes,
            region_bytes,
            retain_bytes,
            commit_on_demand,
            false,
            ThpChoice::Auto,
        )
    }

    /// A test arena in secure mode.
    pub fn test_arena_secure(nodes: usize, commit_on_demand: bool) -> &'static Arena {
        test_arena_config(
            nodes,
            64 << 20,
            usize::MAX,
            commit_on_demand,
            true,
            ThpChoice::Auto,
        )
    }

    fn test_arena_config(
        nodes: usize,
        region_bytes: u64,
        retain_bytes: usize,
        commit_on_demand: bool,
        secure: bool,
        thp: ThpChoice,
    ) -> &'static Arena {
        let mut topology = Box::new(Topology::single(CpuSet::new()));
        topology.detect_into(nodes);
        let config = ArenaConfig {
            region_bytes,
            strict_binding: false,
            thp,
            decommit: DecommitPolicy {
                delay_ns: 0,
                retain_bytes,
            },
            commit_on_demand,
            secure,
        };
        Arena::create(&topology, &config).expect("test arena")
    }

    #[test]
    fn origin_is_the_region_index() {
        for nodes in [1, 2, 4, 8] {
            let arena = test_arena(nodes, 64 << 20, 0);
            assert_eq!(arena.node_count(), nodes);
            for node in 0..nodes {
                let (address, from) = arena.alloc_span(node, 1, 1, SpanUse::Large).unwrap();
                assert_eq!(from, node);
                assert_eq!(arena.origin_of(address), Some(node));
                assert_eq!(arena.origin_of(address + UNIT - 1), Some(node));
            }
            assert_eq!(arena.origin_of(arena.base() - 1), None);
            assert_eq!(arena.origin_of(arena.base() + (nodes << 26)), None);
        }
    }

    #[test]
    fn spans_are_tagged_and_coalesce_when_freed() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        let map = arena.map();
        let spans: Vec<usize> = (0..6)
            .map(|_| arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap().0)
            .collect();
        for pair in spans.windows(2) {
            assert_ne!(pair[0], pair[1]);
        }
        assert_eq!(map.tag(spans[0]).kind(), Kind::Large);
        assert_eq!(map.tag(spans[0] + UNIT).kind(), Kind::LargeBody);
        // Free 1, 3 and then 2: three adjacent spans must merge into one of nine units.
        let mut sorted = spans.clone();
        sorted.sort();
        // SAFETY: each span was handed out above and holds nothing.
        unsafe {
            arena.free_span(sorted[1], 3);
            arena.free_span(sorted[3], 3);
            arena.free_span(sorted[2], 3);
        }
        assert_eq!(map.tag(sorted[1]).kind(), Kind::Free);
        // SAFETY: reading a free span's descriptor; no other thread uses this arena.
        let units = unsafe { (*map.meta(map.unit_of(sorted[1]))).units };
        assert_eq!(units, 9);
        assert_eq!(map.tag(sorted[1] + 8 * UNIT).kind(), Kind::FreeTail);
        assert_eq!(map.tag(sorted[2]).kind(), Kind::Unused);
        // A 9-unit request reuses exactly that hole.
        let (again, _) = arena.alloc_span(0, 9, 1, SpanUse::Large).unwrap();
        assert_eq!(again, sorted[1]);
    }

    /// The `VmFlags` of the mapping that holds `address`, from /proc/self/smaps.
    fn vm_flags(address: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((low, high)) = first.split_once('-') {
                if let (Ok(low), Ok(high)) = (
                    usize::from_str_radix(low, 16),
                    usize::from_str_radix(high, 16),
                ) {
                    inside = (low..high).contains(&address);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.split_whitespace().map(str::to_owned).collect();
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[test]
    fn a_partly_decommitted_chunk_leaves_huge_pages_until_it_is_wholly_free() {
        let arena = test_arena_config(1, 64 << 20, 0, false, false, ThpChoice::On);
        let body = arena.pool(0, Pool::Sparse).start() + SMALL_PAGE_HEAD;
        if !vm_flags(body).iter().any(|flag| flag == "hg") {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        // The small-page head first, then two half chunks in the first huge-page chunk.
        let head: Vec<usize> = (0..SMALL_PAGE_HEAD / (CHUNK_UNITS * UNIT))
            .map(|_| {
                arena
                    .alloc_span(0, CHUNK_UNITS, 1, SpanUse::Large)
                    .unwrap()
                    .0
            })
            .collect();
        let (a, _) = arena
            .alloc_span(0, CHUNK_UNITS / 2, 1, SpanUse::Large)
            .unwrap();
        let (b, _) = arena
            .alloc_span(0, CHUNK_UNITS / 2, 1, SpanUse::Large)
            .unwrap();
        assert_eq!([a.min(b), a.max(b)], [body, body + CHUNK_UNITS / 2 * UNIT]);
        // SAFETY: both spans were handed out above and are ours.
        unsafe { (a as *mut u8).write_bytes(1, CHUNK_UNITS / 2 * UNIT) };
        // SAFETY: as above.
        unsafe { (b as *mut u8).write_bytes(1, CHUNK_UNITS / 2 * UNIT) };
        // Retain budget 0 and delay 0: a free is decommitted at once. Half a chunk free: the
        // chunk leaves huge pages so khugepaged cannot fill the hole back in.
        // SAFETY: handed out above, holds nothing we need.
        unsafe { arena.free_span(a, CHUNK_UNITS / 2) };
        let flags = vm_flags(body);
        assert!(flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
        assert!(vm_flags(body + 2 * CHUNK_UNITS * UNIT)
            .iter()
            .any(|flag| flag == "hg"));
        // The whole chunk free and decommitted: back on huge pages.
        // SAFETY: as above.
        unsafe { arena.free_span(b, CHUNK_UNITS / 2) };
        let flags = vm_flags(body);
        assert!(flags.iter().any(|flag| flag == "hg"), "flags {flags:?}");
        assert!(!flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
        // A decommit that covers whole chunks and a part of another: only that one leaves
        // huge pages. A chunk-aligned three-chunk span shrinks to its first half chunk.
        let chunk = CHUNK_UNITS * UNIT;
        let (t, _) = arena
            .alloc_span(0, 3 * CHUNK_UNITS, CHUNK_UNITS, SpanUse::Large)
            .unwrap();
        assert!(t >= body && t % chunk == 0);
        // SAFETY: handed out above and ours.
        unsafe { (t as *mut u8).write_bytes(1, 3 * chunk) };
        let decommit = arena.decommit;
        arena.pool(0, Pool::Sparse).shrink(
            arena.map(),
            t,
            3 * CHUNK_UNITS,
            CHUNK_UNITS / 2,
            decommit,
        );
        let flags = vm_flags(t);
        assert!(flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
        for whole in [t + chunk, t + 2 * chunk] {
            let flags = vm_flags(whole);
            assert!(flags.iter().any(|flag| flag == "hg"), "flags {flags:?}");
        }

        // The small-page head never goes on huge pages.
        // SAFETY: as above.
        unsafe { arena.free_span(head[1], CHUNK_UNITS) };
        assert!(vm_flags(head[1]).iter().any(|flag| flag == "nh"));
    }

    #[test]
    fn small_object_bags_go_to_the_dense_pool_and_the_rest_to_the_sparse_pool_on_base_pages() {
        let arena = test_arena_config(2, 64 << 20, 0, false, false, ThpChoice::Auto);
        let small = crate::size_class::class_of(DENSE_OBJECT_MAX, 8).unwrap();
        let spanning = crate::size_class::class_of(DENSE_OBJECT_MAX + 1, 8).unwrap();
        for node in 0..2 {
            let dense = arena.pool(node, Pool::Dense);
            let sparse = arena.pool(node, Pool::Sparse);
            assert_eq!(dense.start(), arena.region_start(node));
            assert_eq!(sparse.start(), dense.end());
            assert_eq!(
                sparse.end(),
                arena.region_start(node) + arena.region_bytes()
            );
            let cases = [
                (SpanUse::Bag(small), 1, dense),
                (SpanUse::Bag(spanning), 1, sparse),
                (SpanUse::Large, 1, sparse),
                (SpanUse::Large, CHUNK_UNITS, sparse),
            ];
            for (usage, align_units, pool) in cases {
                let (address, from) = arena.alloc_span(node, 1, align_units, usage).unwrap();
                assert_eq!(from, node);
                assert!(
                    (pool.start()..pool.end()).contains(&address),
                    "{usage:?} at {address:#x}"
                );
                assert!(core::ptr::eq(arena.pool_of(address), pool));
                assert_eq!(arena.origin_of(address), Some(node));
            }
        }
        // The sparse pools never go on huge pages, whatever the system's THP mode.
        let sparse = arena.pool(0, Pool::Sparse).start() + SMALL_PAGE_HEAD;
        let flags = vm_flags(sparse);
        assert!(flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
        // Under THP `madvise`, the dense pools past their small-page head are advised.
        if arena.topology.thp_mode() == ThpMode::Madvise {
            let dense = arena.pool(0, Pool::Dense).start() + SMALL_PAGE_HEAD;
            let flags = vm_flags(dense);
            assert!(flags.iter().any(|flag| flag == "hg"), "flags {flags:?}");
        }
    }

    #[test]
    fn new_bags_go_to_the_fullest_chunk_with_room() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        let map = arena.map();
        let dense = arena.pool(0, Pool::Dense);
        let class = crate::size_class::class_of(64, 8).unwrap();
        let usage = SpanUse::Bag(class);
        let bags: Vec<usize> = (0..2 * CHUNK_UNITS)
            .map(|_| dense.alloc(map, 1, 1, usage).unwrap())
            .collect();
        let chunk = CHUNK_UNITS * UNIT;
        let (a, b) = (bags[0], bags[CHUNK_UNITS]);
        assert_eq!(b, a + chunk, "two chunks, filled in order");
        // Chunk B keeps all but one unit; chunk A half. A's holes are freed last, so a
        // most-recently-freed (LIFO) choice would take one of them.
        dense.free(map, b + 5 * UNIT, 1, arena.decommit);
        for unit in (0..CHUNK_UNITS).step_by(2) {
            dense.free(map, a + unit * UNIT, 1, arena.decommit);
        }
        assert_eq!(dense.alloc(map, 1, 1, usage), Some(b + 5 * UNIT));
        // B is full now: the next bag goes to A, the fullest chunk left with room.
        let next = dense.alloc(map, 1, 1, usage).unwrap();
        assert!((a..a + chunk).contains(&next), "{next:#x}");
        // A chunk that empties entirely is taken last: free all of A but one unit, then a
        // third chunk's worth of bags fills A's holes before the frontier moves.
        for unit in (1..CHUNK_UNITS).step_by(2) {
            dense.free(map, a + unit * UNIT, 1, arena.decommit);
        }
        let frontier = dense.frontier_word().load(Ordering::Relaxed);
        for _ in 0..CHUNK_UNITS - 1 {
            let bag = dense.alloc(map, 1, 1, usage).unwrap();
            assert!((a..a + chunk).contains(&bag), "{bag:#x} outside chunk A");
        }
        assert_eq!(dense.frontier_word().load(Ordering::Relaxed), frontier);
    }

    #[test]
    fn the_filler_never_takes_a_tag_left_inside_a_merged_span_for_a_head() {
        // Retain 0, delay 0: every free is decommitted at once and merges with clean
        // neighbours, the case that once left a head tag inside the merged span.
        let arena = test_arena(1, 64 << 20, 0);
        let map = arena.map();
        let dense = arena.pool(0, Pool::Dense);
        let usage = SpanUse::Bag(crate::size_class::class_of(64, 8).unwrap());
        // Chunk 0: 64 one-unit spans. Chunk 1: a two-unit span, then 62 one-unit spans.
        let mut ones: Vec<usize> = (0..CHUNK_UNITS)
            .map(|_| dense.alloc(map, 1, 1, usage).unwrap())
            .collect();
        let pair = dense.alloc(map, 2, 1, usage).unwrap();
        assert_eq!(pair, ones[0] + CHUNK_UNITS * UNIT);
        ones.extend((0..CHUNK_UNITS - 2).map(|_| dense.alloc(map, 1, 1, usage).unwrap()));
        // Half of chunk 0 and its last two units go; then the pair, which merges into one
        // clean span with those two, headed in chunk 0 and running into chunk 1, where the
        // pair's own head is now inside it. Chunk 1 is the fuller, so the filler looks there
        // first.
        let mut freed: Vec<usize> = ones[..CHUNK_UNITS / 2].to_vec();
        freed.extend([ones[CHUNK_UNITS - 2], ones[CHUNK_UNITS - 1]]);
        for &unit in &freed {
            dense.free(map, unit, 1, arena.decommit);
        }
        dense.free(map, pair, 2, arena.decommit);
        freed.extend([pair, pair + UNIT]);
        assert_eq!(dense.dirty_bytes(), 0);
        // Every free unit comes back exactly once, and nothing else.
        let frontier = dense.frontier_word().load(Ordering::Relaxed);
        let mut again: Vec<usize> = (0..freed.len())
            .map(|_| dense.alloc(map, 1, 1, usage).unwrap())
            .collect();
        again.sort();
        freed.sort();
        assert_eq!(again, freed);
        assert_eq!(dense.frontier_word().load(Ordering::Relaxed), frontier);
        assert_eq!(dense.dirty_bytes(), 0);
    }

    #[test]
    fn a_full_pool_borrows_from_the_other_pool_of_its_node() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        let sparse = arena.pool(0, Pool::Sparse);
        let pool_units = arena.pool_bytes() / UNIT;
        let (first, _) = arena.alloc_span(0, pool_units, 1, SpanUse::Large).unwrap();
        assert_eq!(first, sparse.start());
        let (second, from) = arena.alloc_span(0, 4, 1, SpanUse::Large).unwrap();
        assert_eq!(from, 0);
        assert!(core::ptr::eq(
            arena.pool_of(second),
            arena.pool(0, Pool::Dense)
        ));
        assert_eq!(arena.steals(0), 0);
    }

    #[test]
    fn aligned_spans_are_aligned_in_absolute_terms_past_the_chunk_size() {
        // A 4 GiB region: pools of 2 GiB, room for a 1 GiB alignment.
        let arena = test_arena(1, 4 << 30, usize::MAX);
        // Move the frontier off its chunk-aligned start first.
        arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
        for shift in 21..=30 {
            let align_units = (1usize << shift) / UNIT;
            let (address, _) = arena.alloc_span(0, 1, align_units, SpanUse::Large).unwrap();
            assert_eq!(
                address % (1 << shift),
                0,
                "alignment 2^{shift}: {address:#x}"
            );
        }
        // The slack in front of each block went back to the pool untouched: only the blocks'
        // own units are committed.
        assert_eq!(
            arena.budget.charged.load(Ordering::Relaxed),
            (3 + 10) * UNIT
        );
    }

    #[test]
    fn commit_on_demand_arenas_commit_only_what_the_frontier_passed() {
        let arena = test_arena_with(2, 64 << 20, usize::MAX, true);
        let (a, _) = arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
        // SAFETY: the span was handed out, so it is committed and ours.
        unsafe { (a as *mut u8).write_bytes(0x11, 3 * UNIT) };
        assert_eq!(arena.tag_checked(a).map(|t| t.kind()), Some(Kind::Large));
        // Past the first chunk nothing is readable yet, and the checked lookup says so.
        let beyond = arena.pool(0, Pool::Sparse).start() + CHUNK_UNITS * UNIT;
        assert_eq!(arena.tag_checked(beyond), None);
        assert_eq!(arena.tag_checked(arena.region_start(1)), None);
        // Growing past the chunk commits the next one.
        assert!(arena.pool(0, Pool::Sparse).grow(arena.map(), a, 3, 100));
        // SAFETY: the grown span is ours and committed.
        unsafe { (a as *mut u8).add(99 * UNIT).write_bytes(0x22, UNIT) };
        assert!(arena.tag_checked(beyond).is_some());
    }

    #[test]
    fn the_commit_limit_is_never_exceeded_and_frees_make_room() {
        let arena = test_arena(2, 64 << 20, 0);
        arena.budget.limit.store(10 * UNIT, Ordering::Relaxed);
        let a = arena.alloc_span(0, 6, 1, SpanUse::Large).unwrap().0;
        assert!(
            arena.alloc_span(1, 5, 1, SpanUse::Large).is_none(),
            "would exceed the limit"
        );
        let b = arena.alloc_span(1, 4, 1, SpanUse::Large).unwrap().0;
        assert_eq!(arena.budget.charged.load(Ordering::Relaxed), 10 * UNIT);
        assert!(
            !arena.pool(0, Pool::Sparse).grow(arena.map(), a, 6, 7),
            "growth is charged too"
        );
        // SAFETY: both spans were handed out above and hold nothing.
        unsafe { arena.free_span(b, 4) };
        // Retain budget 0 and delay 0: the freed span is decommitted and uncharged at once.
        assert_eq!(arena.budget.charged.load(Ordering::Relaxed), 6 * UNIT);
        assert!(arena.pool(0, Pool::Sparse).grow(arena.map(), a, 6, 10));
        assert!(arena.budget.peak.load(Ordering::Relaxed) <= 10 * UNIT);
    }

    #[test]
    fn an_exhausted_region_merges_dirty_and_clean_free_spans_before_failing() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        // Fill the whole region (64 MiB = 2048 units) with 64-unit spans.
        let spans: Vec<usize> = (0..32)
            .map(|_| arena.alloc_span(0, 64, 1, SpanUse::Large).unwrap().0)
            .collect();
        assert!(
            arena.alloc_span(0, 1, 1, SpanUse::Large).is_none(),
            "region should be full"
        );
        let mut sorted = spans.clone();
        sorted.sort();
        // Two neighbours freed in different states: one decommitted (clean), one dirty. They
        // do not coalesce, so neither piece alone holds 128 units.
        // SAFETY: the spans were handed out above and hold nothing.
        unsafe { arena.free_span(sorted[10], 64) };
        arena.purge(true);
        // SAFETY: as above.
        unsafe { arena.free_span(sorted[11], 64) };
        let (address, _) = arena
            .alloc_span(0, 128, 1, SpanUse::Large)
            .expect("the two free neighbours together must serve 128 units");
        assert_eq!(address, sorted[10]);
    }

    #[test]
    fn aligned_spans_are_aligned() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        for align_units in [1, 2, 4, 32] {
            let (address, _) = arena.alloc_span(0, 1, align_units, SpanUse::Large).unwrap();
            assert_eq!(address % (align_units * UNIT), 0);
        }
    }

    #[test]
    fn a_full_region_spills_to_the_nearest_node() {
        let arena = test_arena(4, 64 << 20, usize::MAX);
        // Fill node 1 (64 MiB = 2048 units) with 2 MiB spans.
        for _ in 0..32 {
            assert_eq!(arena.alloc_span(1, 64, 1, SpanUse::Large).unwrap().1, 1);
        }
        let (_, from) = arena.alloc_span(1, 64, 1, SpanUse::Large).unwrap();
        assert!(
            from == 0 || from == 2,
            "spilled to node {from}, not a nearest one"
        );
        assert_eq!(arena.steals(1), 1);
    }

    #[test]
    fn free_memory_past_the_budget_is_decommitted() {
        let arena = test_arena(1, 64 << 20, 1 << 20);
        let region = arena.pool(0, Pool::Sparse);
        let spans: Vec<usize> = (0..8)
            .map(|_| arena.alloc_span(0, 32, 1, SpanUse::Large).unwrap().0)
            .collect();
        for &span in &spans {
            // SAFETY: touching memory we were handed.
            unsafe { (span as *mut u8).write_bytes(1, 32 * UNIT) };
        }
        let before = region.committed.load(Ordering::Relaxed);
        assert_eq!(before, 8 * 32 * UNIT);
        for &span in &spans {
            // SAFETY: each span was handed out above and holds nothing live.
            unsafe { arena.free_span(span, 32) };
        }
        // Delay 0: everything beyond the 1 MiB budget goes back at once.
        assert!(region.dirty_bytes() <= 1 << 20);
        assert!(region.committed.load(Ordering::Relaxed) <= 1 << 20);
        assert!(region.decommitted.load(Ordering::Relaxed) >= before - (1 << 20));
        arena.purge(true);
        assert_eq!(region.committed.load(Ordering::Relaxed), 0);
        assert_eq!(region.active.load(Ordering::Relaxed), 0);
        // Decommitted memory reads as zero when handed out again.
        let (again, _) = arena.alloc_span(0, 32, 1, SpanUse::Large).unwrap();
        // SAFETY: reading memory we were handed.
        assert_eq!(unsafe { *(again as *const u8) }, 0);
    }

    #[test]
    fn large_spans_grow_and_shrink_in_place() {
        let arena = test_arena(1, 64 << 20, usize::MAX);
        let map = arena.map();
        let region = arena.pool(0, Pool::Sparse);
        let (a, _) = arena.alloc_span(0, 4, 1, SpanUse::Large).unwrap();
        // At the frontier: growth always succeeds, past the current chunk too.
        assert!(region.grow(map, a, 4, 100));
        assert_eq!(map.tag(a + 99 * UNIT).kind(), Kind::LargeBody);
        let (b, _) = arena.alloc_span(0, 4, 1, SpanUse::Large).unwrap();
        assert_eq!(b, a + 100 * UNIT, "the next span follows the grown one");
        region.shrink(map, a, 100, 10, arena.decommit);
        assert_eq!(map.tag(a + 10 * UNIT).kind(), Kind::Free);
        assert!(region.grow(map, a, 10, 50), "grows into its own freed tail");
        assert!(!region.grow(map, a, 50, 101), "b is in the way");
    }
}
