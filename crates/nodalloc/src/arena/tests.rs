//! Unit tests of the arena: regions, spans, the page map, commit-on-demand, the budget and
//! huge-page advice, on small test arenas (`test_arena`, shared with the upper layers' tests).

use super::*;
use crate::os::cpuset::CpuSet;
use pagemap::Kind;

/// One step of a xorshift generator, for the tests' random operation sequences.
pub fn xorshift(state: &mut u64) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
}

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

/// A test arena whose nodes keep up to `spare_bytes` of empty bags as spares (the others keep
/// none, so their bags go back to the region as they fall empty).
pub fn test_arena_spares(nodes: usize, spare_bytes: usize) -> &'static Arena {
    let decommit = DecommitPolicy {
        delay_ns: 0,
        retain_bytes: 0,
        spare_bytes,
    };
    test_arena_policy(nodes, 64 << 20, decommit, false, false, ThpChoice::Auto)
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
    let decommit = DecommitPolicy {
        delay_ns: 0,
        retain_bytes,
        spare_bytes: 0,
    };
    test_arena_policy(nodes, region_bytes, decommit, commit_on_demand, secure, thp)
}

pub(super) fn test_arena_policy(
    nodes: usize,
    region_bytes: u64,
    decommit: DecommitPolicy,
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
        decommit,
        commit_on_demand,
        secure,
        interleave: crate::os::options::InterleaveChoice::Off,
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
    // The kernel's mode decides whether the test can run, not the flag it checks: a regression
    // of nodalloc's advice must fail it, not skip it.
    if nodalloc_testkit::skipped_without_thp() {
        return;
    }
    let arena = test_arena_config(1, 64 << 20, 0, false, false, ThpChoice::On);
    let body = arena.pool(0, Pool::Sparse).start() + SMALL_PAGE_HEAD;
    assert!(
        vm_flags(body).iter().any(|flag| flag == "hg"),
        "THP is on (`thp: on`), yet the sparse pool's body was not advised MADV_HUGEPAGE"
    );
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
    unsafe { free_unheld(arena, a, CHUNK_UNITS / 2) };
    let flags = vm_flags(body);
    assert!(flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
    assert!(vm_flags(body + 2 * CHUNK_UNITS * UNIT)
        .iter()
        .any(|flag| flag == "hg"));
    // The whole chunk free and decommitted: back on huge pages.
    // SAFETY: as above.
    unsafe { free_unheld(arena, b, CHUNK_UNITS / 2) };
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
        false,
    );
    let flags = vm_flags(t);
    assert!(flags.iter().any(|flag| flag == "nh"), "flags {flags:?}");
    for whole in [t + chunk, t + 2 * chunk] {
        let flags = vm_flags(whole);
        assert!(flags.iter().any(|flag| flag == "hg"), "flags {flags:?}");
    }

    // The small-page head never goes on huge pages.
    // SAFETY: as above.
    unsafe { free_unheld(arena, head[1], CHUNK_UNITS) };
    assert!(vm_flags(head[1]).iter().any(|flag| flag == "nh"));
}

#[test]
fn small_object_bags_go_to_the_dense_pool_and_the_rest_to_the_sparse_pool_on_base_pages() {
    let arena = test_arena_config(2, 64 << 20, 0, false, false, ThpChoice::Auto);
    let small = crate::size_class::class_of(crate::os::PAGE_SIZE, 8).unwrap();
    let spanning = crate::size_class::class_of(DENSE_OBJECT_MAX + 1, 8).unwrap();
    for node in 0..2 {
        let dense = arena.pool(node, Pool::Dense);
        let sparse = arena.pool(node, Pool::Sparse);
        assert_eq!(dense.start(), arena.region_start(node));
        let owned = arena.pool(node, Pool::Owned);
        assert_eq!(sparse.start(), dense.end());
        assert_eq!(owned.start(), sparse.end());
        assert_eq!(
            sparse.end(),
            arena.region_start(node) + arena.shared_bytes()
        );
        assert_eq!(owned.end(), arena.region_start(node) + arena.region_bytes());
        // Shared requests never land in the owned pool, which serves owned requests alone.
        let address = arena
            .alloc_owned_span(node, 1, 1, SpanUse::Bag(small))
            .unwrap();
        assert!(core::ptr::eq(arena.pool_of(address), owned));
        assert!(arena.is_owned(address) && !arena.is_owned(dense.start()));
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
    dense.free(map, b + 5 * UNIT, 1, arena.decommit, false);
    for unit in (0..CHUNK_UNITS).step_by(2) {
        dense.free(map, a + unit * UNIT, 1, arena.decommit, false);
    }
    assert_eq!(dense.alloc(map, 1, 1, usage), Some(b + 5 * UNIT));
    // B is full now: the next bag goes to A, the fullest chunk left with room.
    let next = dense.alloc(map, 1, 1, usage).unwrap();
    assert!((a..a + chunk).contains(&next), "{next:#x}");
    // A chunk that empties entirely is taken last: free all of A but one unit, then a
    // third chunk's worth of bags fills A's holes before the frontier moves.
    for unit in (1..CHUNK_UNITS).step_by(2) {
        dense.free(map, a + unit * UNIT, 1, arena.decommit, false);
    }
    let frontier = dense.frontier_word().load(Ordering::Relaxed);
    for _ in 0..CHUNK_UNITS - 1 {
        let bag = dense.alloc(map, 1, 1, usage).unwrap();
        assert!((a..a + chunk).contains(&bag), "{bag:#x} outside chunk A");
    }
    assert_eq!(dense.frontier_word().load(Ordering::Relaxed), frontier);
}

/// A large block that came into a dense pool (its sparse pool full) does not make its chunk
/// look full to the filler: new small bags go to the chunks of small bags, not into the gap
/// beside the block, where they would stay behind as islands once it is freed and cut the
/// freed chunk in pieces.
#[test]
fn new_bags_go_beside_bags_not_beside_a_large_block_in_a_dense_pool() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    let map = arena.map();
    let dense = arena.pool(0, Pool::Dense);
    let usage = SpanUse::Bag(crate::size_class::class_of(64, 8).unwrap());
    let chunk = CHUNK_UNITS * UNIT;
    // Chunk A: bags. Chunk B: a block of all but three units (the frontier's step leaves
    // those free after it).
    let bags: Vec<usize> = (0..CHUNK_UNITS)
        .map(|_| dense.alloc(map, 1, 1, usage).unwrap())
        .collect();
    let a = bags[0];
    let block = dense
        .alloc(map, CHUNK_UNITS - 3, 1, SpanUse::Large)
        .unwrap();
    assert_eq!(block, a + chunk, "the block opens chunk B");
    // Four holes in A: A keeps 60 units of bags, B 61 of the block.
    for unit in [1, 3, 5, 7] {
        dense.free(map, bags[unit], 1, arena.decommit, false);
    }
    for _ in 0..4 {
        let bag = dense.alloc(map, 1, 1, usage).unwrap();
        assert!(
            (a..a + chunk).contains(&bag),
            "a bag at {bag:#x}, beside the block"
        );
    }
    // Chunk B holds the block alone, so once it is freed nothing stays behind there.
    for unit in CHUNK_UNITS - 3..CHUNK_UNITS {
        let kind = map.tag(block + unit * UNIT).kind();
        assert!(
            !matches!(kind, Kind::Bag | Kind::BagBody),
            "unit {unit}: {kind:?}"
        );
    }
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
        dense.free(map, unit, 1, arena.decommit, false);
    }
    dense.free(map, pair, 2, arena.decommit, false);
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
    let pool_units = arena.pool_bytes(Pool::Sparse) / UNIT;
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
fn a_region_shrunk_to_fit_the_address_space_merges_its_dense_and_sparse_pools() {
    let mut topology = Box::new(Topology::single(CpuSet::new()));
    topology.detect_into(1);
    topology.pretend_address_space_limit(256 << 20);
    let mut config = test_config(crate::os::options::InterleaveChoice::Off);
    config.region_bytes = 1 << 40;
    let arena = Arena::create(&topology, &config).expect("test arena");
    let region = arena.region_bytes();
    assert_eq!(region, 128 << 20, "half of RLIMIT_AS");
    assert!(arena.is_merged());
    assert_eq!(arena.pool_bytes(Pool::Dense), region / 8 * 7);
    assert_eq!(arena.pool_bytes(Pool::Sparse), 0);
    assert_eq!(arena.pool_bytes(Pool::Owned), region / 8);
    let dense = arena.pool(0, Pool::Dense);
    // Small bags, bigger classes' bags and large blocks share the pool.
    let small = SpanUse::Bag(crate::size_class::class_of(64, 8).unwrap());
    let spanning = SpanUse::Bag(crate::size_class::class_of(64 << 10, 16).unwrap());
    let (bag, _) = arena.alloc_span(0, 1, 1, small).unwrap();
    let (large, _) = arena.alloc_span(0, 128, 1, SpanUse::Large).unwrap();
    let (big_bag, _) = arena.alloc_span(0, 8, 1, spanning).unwrap();
    let (next_bag, _) = arena.alloc_span(0, 1, 1, small).unwrap();
    for address in [bag, large, big_bag, next_bag] {
        assert!(core::ptr::eq(arena.pool_of(address), dense));
        assert_eq!(arena.pool_kind_of(address), Pool::Dense);
    }
    // The next small bag goes beside that one (the filler: the fullest chunk with room).
    let (last_bag, _) = arena.alloc_span(0, 1, 1, small).unwrap();
    let chunk = CHUNK_UNITS * UNIT;
    assert_eq!(
        last_bag / chunk,
        next_bag / chunk,
        "the filler keeps small bags together"
    );
    // A block of six eighths of the region: more than either pool of a split region holds.
    let six_eighths = region / 8 * 6 / UNIT;
    assert!(arena.largest_span() >= six_eighths * UNIT);
    let (huge_block, _) = arena.alloc_span(0, six_eighths, 1, SpanUse::Large).unwrap();
    assert!(core::ptr::eq(arena.pool_of(huge_block), dense));
    // The merged pool holds what a sparse pool would: base pages, as there.
    if topology.thp_mode() == ThpMode::Madvise {
        let flags = vm_flags(huge_block);
        assert!(!flags.iter().any(|flag| flag == "hg"), "{flags:?}");
    }
    // A region of its configured size, or under no limit, keeps the split.
    assert!(!test_arena(1, 128 << 20, usize::MAX).is_merged());
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
    assert_eq!(arena.budget().charged(), (3 + 10) * UNIT);
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

/// Frees a span and releases it from the hold at once, for the tests of the free lists' own
/// mechanics (coalescing, decommit, huge pages), which the hold would otherwise delay by one
/// free.
///
/// # Safety
/// As for [`Arena::free_span`].
pub(super) unsafe fn free_unheld(arena: &Arena, address: usize, units: usize) {
    // SAFETY: forwarded contract.
    unsafe { arena.free_span(address, units) };
    arena.pool_of(address).release_held_now(arena.map());
}

/// Whether the byte at `address` can be read, asked of the kernel (a `write` of it into a pipe
/// fails with `EFAULT` where it cannot) rather than by touching it.
fn readable(address: usize) -> bool {
    let mut pipe = [0; 2];
    // SAFETY: a fresh pipe; `write` reads one byte at `address` or reports EFAULT, and both
    // ends are closed before returning.
    unsafe {
        assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
        let written = libc::write(pipe[1], address as *const libc::c_void, 1);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
        written == 1
    }
}

#[test]
fn the_reservation_past_each_frontier_is_inaccessible() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    let sparse = arena.pool(0, Pool::Sparse);
    let (a, _) = arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
    assert_eq!(a, sparse.start());
    // SAFETY: the span was handed out and is ours.
    unsafe { (a as *mut u8).write_bytes(0x11, 3 * UNIT) };
    // The frontier moved by a fence step (eight units) past the span, no further; what lies
    // before the pool (the dense pool's untouched tail) is closed too.
    let fence = a + region::FENCE_STEP
        .max(3 * UNIT)
        .next_multiple_of(region::FENCE_STEP);
    assert!(readable(a) && readable(fence - 1));
    assert!(!readable(fence), "one byte past the frontier");
    assert!(!readable(a + (1 << 20)), "a megabyte past the block");
    assert!(!readable(a - 1), "the byte before the pool");
    // Growth in place opens what it takes.
    assert!(sparse.grow(arena.map(), a, 3, 100));
    // SAFETY: the grown span is ours.
    unsafe { (a as *mut u8).add(99 * UNIT).write_bytes(0x22, UNIT) };
    let grown_fence = a + (100 * UNIT).next_multiple_of(region::FENCE_STEP);
    assert!(readable(grown_fence - 1) && !readable(grown_fence));
    // Past the pool's first bytes the frontier moves by whole chunks (each can be a huge page).
    let past = region::FINE_FRONTIER / UNIT;
    let (b, _) = arena.alloc_span(0, past, 1, SpanUse::Large).unwrap();
    let end = b + past * UNIT;
    let chunk_end = end.next_multiple_of(CHUNK_UNITS * UNIT);
    assert!(end < chunk_end && readable(chunk_end - 1));
    assert!(!readable(chunk_end));
}

/// The span of 256 KiB to 2 MiB freed last is held out of the free lists, inaccessible, so the
/// next request gets other memory and a dangling pointer into it faults; the next such free
/// releases it (open again) for reuse. The guard's rate is bounded; bigger spans are not held.
#[test]
fn the_span_freed_last_is_held_inaccessible_and_handed_out_only_after_the_next() {
    let started = std::time::Instant::now();
    let arena = test_arena(1, 64 << 20, usize::MAX);
    let sparse = arena.pool(0, Pool::Sparse);
    let units = region::HOLD_MIN_UNITS;
    let alloc = || {
        let (span, _) = arena.alloc_span(0, units, 1, SpanUse::Large).unwrap();
        // SAFETY: a span we were just handed, the size we asked for.
        unsafe { (span as *mut u8).write_bytes(0x5a, units * UNIT) };
        span
    };
    let a = alloc();
    // SAFETY: handed out above, holding nothing live.
    unsafe { arena.free_span(a, units) };
    assert_eq!(sparse.held(), (a, true));
    assert!(!readable(a) && !readable(a + units * UNIT - 1));
    assert_eq!(
        arena.tag_checked(a).map(|tag| tag.kind()),
        Some(Kind::Unused)
    );
    let b = alloc();
    assert_ne!(b, a, "the span freed last is not handed out next");
    // SAFETY: as above.
    unsafe { arena.free_span(b, units) };
    assert_eq!(sparse.held(), (b, true));
    assert!(readable(a), "released by the next free, open again");
    assert_eq!(alloc(), a, "and reused");
    // A span past the hold's sizes goes to the free lists at once.
    let big = region::HOLD_MAX_UNITS + 1;
    let (c, _) = arena.alloc_span(0, big, 1, SpanUse::Large).unwrap();
    // SAFETY: as above.
    unsafe { arena.free_span(c, big) };
    assert_eq!(sparse.held().0, b);
    assert_eq!(arena.alloc_span(0, big, 1, SpanUse::Large).unwrap().0, c);
    // Frees in a loop: held (and guarded) at the hold's rate (a burst, then one a refill;
    // `a` and `b` took two); past it a span goes to the free lists open, as without the hold,
    // and the span held last stays held.
    let mut guarded = 2;
    for _ in 0..4 * region::GUARD_BURST {
        let span = alloc();
        // SAFETY: as above.
        unsafe { arena.free_span(span, units) };
        let (held, is_guarded) = sparse.held();
        assert!(held != 0 && is_guarded);
        assert_eq!(readable(span), held != span);
        guarded += u64::from(held == span);
    }
    // The pool's clock is the coarse one (ticks of up to 4 ms): allow two ticks more.
    let earned = (started.elapsed().as_nanos() as u64 + 8_000_000) / region::GUARD_REFILL_NS + 1;
    assert!(guarded <= region::GUARD_BURST + earned, "{guarded} guarded");
    assert!(guarded >= region::GUARD_BURST, "{guarded} guarded");
}

#[test]
fn the_commit_limit_is_never_exceeded_and_frees_make_room() {
    let arena = test_arena(2, 64 << 20, 0);
    arena.budget().set_limit(10 * UNIT);
    let a = arena.alloc_span(0, 6, 1, SpanUse::Large).unwrap().0;
    assert!(
        arena.alloc_span(1, 5, 1, SpanUse::Large).is_none(),
        "would exceed the limit"
    );
    let b = arena.alloc_span(1, 4, 1, SpanUse::Large).unwrap().0;
    assert_eq!(arena.budget().charged(), 10 * UNIT);
    assert!(
        !arena.pool(0, Pool::Sparse).grow(arena.map(), a, 6, 7),
        "growth is charged too"
    );
    // SAFETY: both spans were handed out above and hold nothing.
    unsafe { arena.free_span(b, 4) };
    // Retain budget 0 and delay 0: the freed span is decommitted and uncharged at once.
    assert_eq!(arena.budget().charged(), 6 * UNIT);
    assert!(arena.pool(0, Pool::Sparse).grow(arena.map(), a, 6, 10));
    assert!(arena.budget().peak() <= 10 * UNIT);
}

/// An arena configuration for tests: 64 MiB regions, frees decommitted at once, `interleave`.
pub fn test_config(interleave: crate::os::options::InterleaveChoice) -> ArenaConfig {
    ArenaConfig {
        region_bytes: 64 << 20,
        strict_binding: false,
        thp: ThpChoice::Auto,
        decommit: DecommitPolicy {
            delay_ns: 0,
            retain_bytes: 0,
            spare_bytes: 0,
        },
        commit_on_demand: false,
        secure: false,
        interleave,
    }
}

/// A test arena on three simulated nodes of which node 2 is far memory, decommitting at once.
pub fn tiered_test_arena() -> &'static Arena {
    let mut topology = Box::new(Topology::single(CpuSet::new()));
    topology.detect_into(3);
    topology.choose_far_nodes(Some(1 << 2));
    let config = test_config(crate::os::options::InterleaveChoice::Off);
    Arena::create(&topology, &config).expect("test arena")
}

#[test]
fn a_full_tier_spills_to_the_other_or_fails_and_its_limit_is_never_exceeded() {
    let arena = tiered_test_arena();
    assert!(!arena.topology.is_far(0) && !arena.topology.is_far(1) && arena.topology.is_far(2));
    let (near, far) = (arena.tier_budget(false), arena.tier_budget(true));
    near.set_limit(10 * UNIT);
    let span = |node| arena.alloc_span(node, 1, 1, SpanUse::Large);
    let a = arena.alloc_span(0, 6, 1, SpanUse::Large).unwrap();
    let b = arena.alloc_span(1, 4, 1, SpanUse::Large).unwrap();
    assert_eq!(
        (a.1, b.1),
        (0, 1),
        "within the near limit, on their own nodes"
    );
    // Both near nodes charge the one near budget: the next near span spills to the far node.
    let spilled = arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
    assert_eq!(spilled.1, 2, "past the near limit, spilled far");
    assert_eq!((near.charged(), far.charged()), (10 * UNIT, 3 * UNIT));
    assert_eq!(
        arena.budget().charged(),
        13 * UNIT,
        "the arena's budget counts both tiers"
    );
    assert!(
        !arena.pool(0, Pool::Sparse).grow(arena.map(), a.0, 6, 7),
        "growth in place is charged to the tier too"
    );
    // Bound to their tier, near requests fail and far ones are still served.
    arena.set_tier_bound(true);
    assert!(
        span(0).is_none() && span(1).is_none(),
        "bound: no spill past the near limit"
    );
    assert_eq!(span(2).map(|(_, from)| from), Some(2));
    // The far limit, reached: far requests fail while bound, come near when the near tier
    // has room and spills are allowed.
    far.set_limit(far.charged());
    assert!(span(2).is_none());
    // SAFETY: `b` was handed out above and holds nothing.
    unsafe { arena.free_span(b.0, 4) };
    assert_eq!(near.charged(), 6 * UNIT, "a free makes room in its tier");
    assert!(span(2).is_none(), "bound: a far request stays far");
    arena.set_tier_bound(false);
    let from = span(2).map(|(_, from)| from);
    assert!(matches!(from, Some(0 | 1)), "spilled near: {from:?}");
    assert_eq!(span(1).map(|(_, from)| from), Some(1));
    // The arena's own limit still holds over both tiers.
    arena.budget().set_limit(arena.budget().charged());
    near.set_limit(0);
    far.set_limit(0);
    assert!(span(0).is_none() && span(2).is_none());
    assert!(near.peak() <= 10 * UNIT, "the near limit was never passed");
    arena.budget().set_limit(0);
}

/// The canary flags of the free span that starts at `address`, after checking that the words
/// they vouch for hold their canaries.
fn canaries_of(arena: &Arena, address: usize) -> (bool, bool) {
    let map = arena.map();
    assert!(matches!(map.tag(address).kind(), Kind::Free));
    // SAFETY: reading a free span's descriptor and its committed words; no other thread uses
    // this arena.
    unsafe {
        let meta = map.meta(map.unit_of(address));
        let free = (*meta).role.free;
        let last = address + ((*meta).units << UNIT_SHIFT) - 8;
        if free.canary {
            assert_eq!(*(address as *const usize), region::canary_of(address));
        }
        if free.tail_canary {
            assert_eq!(*(last as *const usize), region::canary_of(last));
        }
        (free.canary, free.tail_canary)
    }
}

#[test]
fn freed_spans_keep_canaries_at_both_ends_through_merges_and_splits() {
    let arena = test_arena(1, 64 << 20, usize::MAX);
    let map = arena.map();
    let mut spans: Vec<usize> = (0..6)
        .map(|_| arena.alloc_span(0, 3, 1, SpanUse::Large).unwrap().0)
        .collect();
    spans.sort();
    // SAFETY: each span was handed out above and holds nothing.
    unsafe {
        arena.free_span(spans[1], 3);
        assert_eq!(canaries_of(arena, spans[1]), (true, true));
        // Merged into the span before it: that span's head, this span's tail.
        arena.free_span(spans[2], 3);
        assert_eq!(canaries_of(arena, spans[1]), (true, true));
        // Merged with the span after it (its head checked and gone inside).
        arena.free_span(spans[4], 3);
        arena.free_span(spans[3], 3);
        assert_eq!(canaries_of(arena, spans[1]), (true, true));
        assert_eq!((*map.meta(map.unit_of(spans[1]))).units, 12);
    }
    // A request from the head: the rest keeps the tail's canary, and has none at its head.
    let (again, _) = arena.alloc_span(0, 4, 1, SpanUse::Large).unwrap();
    assert_eq!(again, spans[1]);
    assert_eq!(canaries_of(arena, spans[1] + 4 * UNIT), (false, true));
    // Secure mode has guards instead: no canaries.
    let secure = test_arena_secure(1, false);
    let (span, _) = secure.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
    let (_barrier, _) = secure.alloc_span(0, 3, 1, SpanUse::Large).unwrap();
    // SAFETY: handed out above, holds nothing.
    unsafe { secure.free_span(span, 3) };
    assert_eq!(canaries_of(secure, span), (false, false));
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
    region.shrink(map, a, 100, 10, arena.decommit, false);
    assert_eq!(map.tag(a + 10 * UNIT).kind(), Kind::Free);
    assert!(region.grow(map, a, 10, 50), "grows into its own freed tail");
    assert!(!region.grow(map, a, 50, 101), "b is in the way");
}
