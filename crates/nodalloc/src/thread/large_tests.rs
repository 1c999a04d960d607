//! Unit tests of the thread's kept large objects (`large.rs`): handed out again to an
//! allocation of about their size, bounded, refused a second free, given back at the upkeep
//! and the flush, and never kept where they may not be.

use super::large::{KEPT_LARGE, KEPT_LARGE_BYTES};
use super::tests::attached;
use super::*;
use crate::arena::pagemap::Kind;
use crate::arena::tests::test_arena;
use crate::node::tests::dies_with;
use crate::node::KEEP_LARGE_MIN_REGION;
use crate::size_class::{UNIT, UNIT_SHIFT};
use core::sync::atomic::Ordering;

const MIB: usize = 1 << 20;
/// Above the hold's largest span (2 MiB): kept whatever the hold's rate.
const BIG: usize = 3 * MIB;

/// The page-map kind of the unit at `p`: `Large` while the object is live or kept, `Free`
/// (or `Unused`) once its span is back in the region.
/// Node heaps of `nodes` nodes whose regions are big enough for threads to keep large objects.
fn big_heaps(nodes: usize) -> &'static NodeHeaps {
    let region = (KEEP_LARGE_MIN_REGION as u64) * 2;
    NodeHeaps::create(test_arena(nodes, region, 0)).unwrap()
}

/// Node heaps, a thread heap on node 0, and an object of `BIG` bytes it keeps.
fn one_kept() -> (&'static NodeHeaps, Box<ThreadHeap>, *mut u8) {
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let p = large(&mut heap, heaps, BIG);
    assert!(heap.keep_large(p));
    (heaps, heap, p)
}

fn kind_at(heaps: &NodeHeaps, p: *mut u8) -> Kind {
    heaps.arena().map().tag(p as usize).kind()
}

/// A large object of `bytes` for the thread of `heap`, as `Instance::alloc_large` serves it:
/// one it keeps if one fits (which also makes `bytes` the size it keeps), else the region's.
fn large(heap: &mut ThreadHeap, heaps: &NodeHeaps, bytes: usize) -> *mut u8 {
    let mut p = heap.take_kept_large(NodeId(0), bytes.div_ceil(UNIT), 1);
    if p.is_null() {
        heap.release_kept_large();
        p = heaps.alloc_large(NodeId(0), bytes, 16);
    }
    assert!(!p.is_null());
    p
}

#[test]
fn a_kept_object_serves_the_next_allocation_of_about_its_size_and_goes_back_at_the_flush() {
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let p = large(&mut heap, heaps, BIG);
    // SAFETY: a live object of BIG bytes.
    unsafe { p.write_bytes(0x5a, BIG) };
    assert!(heap.keep_large(p));
    assert_eq!(heap.kept_large(), (1, BIG));
    // Kept: still the region's "large" span, but no live object to a free or a size lookup.
    assert_eq!(kind_at(heaps, p), Kind::Large);
    assert!(heaps.large_units(p as usize).is_err());
    // Too big, too small (more than an eighth smaller), or misaligned: not this one.
    let units = BIG >> UNIT_SHIFT;
    assert!(heap.take_kept_large(NodeId(0), units + 1, 1).is_null());
    assert!(heap.take_kept_large(NodeId(0), units / 2, 1).is_null());
    let stricter = (p as usize & (p as usize).wrapping_neg()) * 2 / UNIT;
    assert!(heap.take_kept_large(NodeId(0), units, stricter).is_null());
    // About its size: the same object, live again, not known to be zero.
    let q = heap.take_kept_large(NodeId(0), units - units / 16, 1);
    assert_eq!(q, p);
    assert_eq!(heaps.large_units(q as usize), Ok(units));
    // SAFETY: `q` was just handed out by `take_kept_large`.
    assert!(!unsafe { heaps.large_is_zeroed(q as usize) });
    assert_eq!(heap.kept_large(), (0, 0));
    // Kept again, then flushed: the span is the region's.
    assert!(heap.keep_large(q));
    heap.flush();
    assert_eq!(heap.kept_large(), (0, 0));
    assert_ne!(kind_at(heaps, p), Kind::Large);
    // The node counted two frees and one allocation besides `large`'s, and no live bytes.
    let node = heaps.node(NodeId(0));
    assert_eq!(node.large_allocs.load(Ordering::Relaxed), 2);
    assert_eq!(node.large_frees.load(Ordering::Relaxed), 2);
    assert_eq!(node.large_bytes.load(Ordering::Relaxed), 0);
}

#[test]
fn a_thread_keeps_a_few_objects_and_a_few_mib_and_gives_back_the_oldest() {
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    // Bytes: three objects of 3 MiB do not fit in the budget together.
    let big: Vec<*mut u8> = (0..3).map(|_| large(&mut heap, heaps, BIG)).collect();
    for &p in &big {
        assert!(heap.keep_large(p));
    }
    assert_eq!(heap.kept_large(), (2, 2 * BIG));
    assert!(heap.kept_large().1 <= KEPT_LARGE_BYTES);
    assert_ne!(kind_at(heaps, big[0]), Kind::Large, "the oldest went back");
    // One above the budget is freed as usual.
    heap.flush();
    let huge = large(&mut heap, heaps, KEPT_LARGE_BYTES + UNIT);
    assert!(!heap.keep_large(huge));
    assert_eq!(heap.kept_large(), (0, 0));
    heaps.free_large(huge as usize);
    assert_ne!(kind_at(heaps, huge), Kind::Large);
    // Objects the hold could take (1 MiB) are kept once its rate is spent: a burst of frees
    // through the region spends it; the hold earns a token a millisecond, so a pass that a
    // token interrupts (a keep refused) is tried again.
    for attempt in 0.. {
        assert!(attempt < 100, "the hold never stayed spent for a few keeps");
        heap.flush();
        for _ in 0..80 {
            heaps.free_large(large(&mut heap, heaps, MIB) as usize);
        }
        let objects: Vec<*mut u8> = (0..KEPT_LARGE + 1)
            .map(|_| large(&mut heap, heaps, MIB))
            .collect();
        let kept = objects.iter().filter(|&&p| heap.keep_large(p)).count();
        if kept < objects.len() {
            for &p in &objects {
                if kind_at(heaps, p) == Kind::Large && heaps.large_units(p as usize).is_ok() {
                    heaps.free_large(p as usize);
                }
            }
            continue;
        }
        assert_eq!(heap.kept_large(), (KEPT_LARGE, KEPT_LARGE * MIB));
        assert_ne!(
            kind_at(heaps, objects[0]),
            Kind::Large,
            "the oldest went back"
        );
        for &p in &objects[1..] {
            assert_eq!(kind_at(heaps, p), Kind::Large);
        }
        break;
    }
}

#[test]
fn kept_objects_unused_for_an_upkeep_period_go_back() {
    let (heaps, mut heap, p) = one_kept();
    // Used since the last pass: kept.
    heap.kept_large_upkeep();
    assert_eq!(heap.kept_large(), (1, BIG));
    // Not used since: back to the region.
    heap.kept_large_upkeep();
    assert_eq!(heap.kept_large(), (0, 0));
    assert_ne!(kind_at(heaps, p), Kind::Large);
}

#[test]
fn a_second_free_of_a_kept_object_aborts_naming_it() {
    let (heaps, mut heap, p) = one_kept();
    let text = dies_with(|| {
        heap.keep_large(p);
    });
    assert!(
        text.contains(&format!("{:#x}", p as usize)) && text.contains("double free"),
        "{text}"
    );
    let text = dies_with(|| heaps.free_large(p as usize));
    assert!(text.contains(&format!("{:#x}", p as usize)), "{text}");
}

#[test]
fn nothing_is_kept_in_secure_mode_under_a_limit_in_a_small_region_from_another_node_or_before_the_hold(
) {
    // The hold's size while it has tokens: the hold takes it (made inaccessible, in no list).
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let p = large(&mut heap, heaps, MIB);
    assert!(!heap.keep_large(p));
    heaps.free_large(p as usize);
    assert_eq!(kind_at(heaps, p), Kind::Unused);
    // Another node's object is freed as usual.
    let two = big_heaps(2);
    let mut heap = attached(two, NodeId(0));
    // The thread allocates objects of this size (so the size is not what refuses it).
    assert!(heap.take_kept_large(NodeId(0), BIG / UNIT, 1).is_null());
    let remote = two.alloc_large(NodeId(1), BIG, 16);
    assert!(!remote.is_null());
    assert!(!heap.keep_large(remote));
    assert_eq!(heap.kept_large(), (0, 0));
    two.free_large(remote as usize);
    // Under a hard limit, in secure mode (guard pages), and in a small region (an
    // address-space limit, which keeps its memory for allocations).
    let limited = big_heaps(1);
    limited.set_limit(64 << 20);
    let secure = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
    let small = super::tests::heaps(1);
    for heaps in [limited, secure, small] {
        let mut heap = attached(heaps, NodeId(0));
        let p = large(&mut heap, heaps, BIG);
        assert!(!heap.keep_large(p));
        heaps.free_large(p as usize);
    }
    // An object of another size than the thread's last large allocation: one it outgrew, or
    // one another thread allocated.
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let smaller = large(&mut heap, heaps, BIG);
    let bigger = large(&mut heap, heaps, 2 * BIG);
    assert!(!heap.keep_large(smaller));
    heaps.free_large(smaller as usize);
    assert!(heap.keep_large(bigger));
    assert_eq!(heap.kept_large(), (1, 2 * BIG));
    // A retired heap keeps nothing either.
    let heaps = big_heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    heap.retire();
    let p = large(&mut heap, heaps, BIG);
    assert!(!heap.keep_large(p));
    heaps.free_large(p as usize);
}

/// Writes into a kept object's ends show: at its reuse (a write after free), and when the
/// object before or after it is kept (an overflow or an underflow from a neighbour), each
/// aborting with a report naming the kept object, as the region's canaries do.
#[test]
fn writes_into_a_kept_objects_ends_abort_naming_it() {
    // A write after free, found at the reuse.
    let (_, mut heap, p) = one_kept();
    // SAFETY: the kept object's memory is still mapped (the test writes after free on purpose).
    unsafe { p.write(0x41) };
    let text = dies_with(|| {
        heap.take_kept_large(NodeId(0), BIG >> UNIT_SHIFT, 1);
    });
    let expected = format!(
        "the freed block at {:#x} was written to at its start",
        p as usize
    );
    assert!(text.contains(&expected), "{text}");

    // Two adjacent objects: an overflow from the first into the kept second, found when the
    // first is kept; an underflow from the second into the kept first's last word, found when
    // the second is kept.
    for overflow in [true, false] {
        let heaps = big_heaps(1);
        let mut heap = attached(heaps, NodeId(0));
        let first = large(&mut heap, heaps, BIG);
        let second = large(&mut heap, heaps, BIG);
        assert_eq!(second as usize, first as usize + BIG, "adjacent spans");
        let (kept, written, then, what) = if overflow {
            (second, second, first, "start")
        } else {
            (first, second.wrapping_sub(1), second, "last word")
        };
        assert!(heap.keep_large(kept));
        // SAFETY: the first byte of `second` or the last of `first`, kept: mapped memory the
        // test writes into on purpose.
        unsafe { written.write(0x41) };
        let text = dies_with(|| {
            heap.keep_large(then);
        });
        let expected = format!(
            "the freed block at {:#x} was written to at its {what}",
            kept as usize
        );
        assert!(text.contains(&expected), "{text}");
    }
    // Untouched ends: kept, reused and flushed without a word (on heaps of their own: the
    // ones above hold the damaged objects).
    let (heaps, mut heap, p) = one_kept();
    assert_eq!(heap.take_kept_large(NodeId(0), BIG >> UNIT_SHIFT, 1), p);
    assert!(heap.keep_large(p));
    heap.flush();
    assert_ne!(kind_at(heaps, p), Kind::Large);
}
