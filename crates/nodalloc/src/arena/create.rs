//! Creating an arena: sizing the reservation to the address space the process may use
//! (`RLIMIT_AS`, the kernel's refusals), laying out the regions, their pools, the page map and
//! the metadata, and binding each region to its node.

use super::*;

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
        let wanted = shift;
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
            let merged = shift < wanted && 1usize << shift < MERGE_BELOW;
            if let Some(arena) = Self::try_create(topology, config, shift, merged) {
                return Some(arena);
            }
            if shift == MIN_REGION_SHIFT {
                return None;
            }
            shift -= 1;
        }
    }

    /// [`Self::create`] at `1 << shift` bytes a region, its dense and sparse pools one when
    /// `merged` (see [`Arena::is_merged`]).
    pub(super) fn try_create(
        topology: &Topology,
        config: &ArenaConfig,
        shift: u32,
        merged: bool,
    ) -> Option<&'static Arena> {
        let nodes = topology.node_count();
        let region = 1usize << shift;
        let total = region.checked_mul(nodes)?;
        let units = total >> UNIT_SHIFT;
        let header = round_up(core::mem::size_of::<Arena>(), os::PAGE_SIZE);
        // The pools, then each pool's chunk bitmap (sized for the largest pool), then each
        // dense pool's filler records.
        let eighth = region / 8;
        let pool_bytes = |pool: Pool| pool.eighths(merged).1 * eighth;
        let dense_bytes = pool_bytes(Pool::Dense);
        let pools = POOLS_PER_NODE * nodes;
        let chunk_words = Region::chunk_words(dense_bytes);
        let filler_bytes = Region::chunk_count(dense_bytes) * core::mem::size_of::<ChunkNode>();
        let regions_bytes = round_up(
            pools * (core::mem::size_of::<Region>() + chunk_words * 8) + nodes * filler_bytes,
            os::PAGE_SIZE,
        );
        let metadata_bytes = header + regions_bytes + PageMap::bytes_for(units, config.secure);
        let on_demand = config.commit_on_demand;
        let metadata = if on_demand {
            let metadata = os::reserve_inaccessible(metadata_bytes)?;
            // The tags become readable (zero) everywhere: a thread's `free` then reads the tag
            // of any unit of its region without first checking that the unit was ever used.
            let (tags_offset, tags_bytes) = PageMap::tags_in_storage(units);
            // SAFETY: the tag array lies inside `metadata` (PageMap's layout).
            let tags = unsafe { metadata.add(header + regions_bytes + tags_offset) };
            if !os::commit(metadata, header + regions_bytes) || !os::make_readable(tags, tags_bytes)
            {
                // SAFETY: we just mapped `metadata` and nothing refers to it.
                unsafe { os::unmap(metadata, metadata_bytes) };
                return None;
            }
            metadata
        } else {
            os::reserve(metadata_bytes)?
        };
        // Inaccessible until each pool's frontier opens it (see `Region::frontier_for`).
        let Some(base) = os::reserve_aligned_with(total, CHUNK_UNITS * UNIT, true) else {
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
        let advise_pool = |start: usize, bytes: usize, body: Option<libc::c_int>| {
            let head = SMALL_PAGE_HEAD.min(bytes);
            os::advise(start as *mut u8, head, libc::MADV_NOHUGEPAGE);
            if let (Some(advice), true) = (body, bytes > head) {
                os::advise((start + head) as *mut u8, bytes - head, advice);
            }
        };
        let sparse_advice = if sparse_huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        for node in 0..nodes {
            let region_start = base as usize + node * region;
            for pool in [Pool::Dense, Pool::Sparse, Pool::Owned] {
                // A merged pool holds what a sparse one would: base pages, as there.
                let advice = if pool == Pool::Dense && !merged {
                    huge
                } else {
                    Some(sparse_advice)
                };
                let start = region_start + pool.eighths(merged).0 * eighth;
                advise_pool(start, pool_bytes(pool), advice);
            }
        }
        let arena = metadata as *mut Arena;
        // SAFETY: `metadata` is a fresh zeroed mapping large enough for the header, the regions
        // and the page map, laid out in that order; nothing else can see it yet.
        unsafe {
            let regions = metadata.add(header) as *mut Region;
            let map = PageMap::new(
                base as usize,
                units,
                metadata.add(header + regions_bytes),
                config.secure,
            );
            core::ptr::addr_of_mut!((*arena).base).write(base as usize);
            core::ptr::addr_of_mut!((*arena).end).write(base as usize + total);
            core::ptr::addr_of_mut!((*arena).region_shift).write(shift);
            core::ptr::addr_of_mut!((*arena).merged).write(merged);
            core::ptr::addr_of_mut!((*arena).node_count).write(nodes);
            core::ptr::addr_of_mut!((*arena).map).write(map);
            core::ptr::addr_of_mut!((*arena).pools).write(regions);
            core::ptr::addr_of_mut!((*arena).decommit).write(config.decommit);
            core::ptr::addr_of_mut!((*arena).strict)
                .write(config.strict_binding && nodes > 1 && !topology.is_simulated());
            (*arena)
                .interleave
                .store(Arena::interleave_mode(config, topology), Ordering::Relaxed);
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
                let node = index / POOLS_PER_NODE;
                let pool = [Pool::Dense, Pool::Sparse, Pool::Owned][index % POOLS_PER_NODE];
                let start = base as usize + node * region + pool.eighths(merged).0 * eighth;
                let budget = core::ptr::addr_of!((*arena).budget);
                let tier_budget =
                    core::ptr::addr_of!((*arena).tier_budgets[topology.is_far(node) as usize]);
                let dense = pool == Pool::Dense;
                let huge = if dense && !merged {
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
                    start + pool_bytes(pool),
                    on_demand,
                    !config.secure,
                    budget,
                    tier_budget,
                    huge_from,
                    chunk_bits.add(index * chunk_words),
                    if dense {
                        filler.add(node * Region::chunk_count(dense_bytes))
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
    pub(super) fn bind_regions(&self, strict: bool) {
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
}
