//! Tests of a heap's lists configured at their class's first use (`cache.rs`, "unconfigured"),
//! and of a heap written in place up to its lists (`ThreadHeap::init`).

use super::tests::{allocate, attached, heaps};
use super::*;
use crate::arena::tests::test_arena_secure;
use crate::size_class::class_of;

/// The classes whose lists are configured.
fn configured(heap: &ThreadHeap) -> Vec<usize> {
    (0..NUM_CLASSES)
        .filter(|&index| heap.lists[index].is_configured())
        .collect()
}

/// An attach configures no list; an allocation configures its class's list, fresh (its first
/// refill takes a page's worth of objects, not a batch), and no other.
#[test]
fn an_attach_configures_no_list_and_an_allocation_only_its_class_s() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    assert!(heap.lists.iter().all(FreeList::is_empty_list));
    let class = class_of(64, 8).unwrap();
    let object = allocate(&mut heap, class);
    assert!(!object.is_null());
    assert_eq!(configured(&heap), vec![class.index()]);
    let list = &heap.lists[class.index()];
    assert_eq!(list.start_magic, class.start_magic());
    assert_eq!(list.limit(), class.cache_limit());
    // A page's worth of objects, one handed out.
    let page = (crate::os::PAGE_SIZE / class.size())
        .max(4)
        .min(class.batch());
    assert_eq!(list.len(), page - 1);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(object, class) };
    assert_eq!(heap.lists[class.index()].len(), page);
}

/// A thread that only frees a class (a consumer of another thread's objects) configures its
/// list at the first free, which then goes behind a batch of the thread's own, as a fresh
/// list's does (`first_free`); an uncached class's list, configured the same way, parks.
#[test]
fn a_free_into_an_unconfigured_list_configures_it_and_goes_behind_a_batch() {
    let heaps = heaps(1);
    let mut producer = attached(heaps, NodeId(0));
    let mut consumer = attached(heaps, NodeId(0));
    let class = class_of(128, 8).unwrap();
    let objects: Vec<*mut u8> = (0..3).map(|_| allocate(&mut producer, class)).collect();
    // SAFETY: allocated by the producer, freed once, by the consumer.
    unsafe { consumer.free(objects[0], class) };
    assert_eq!(configured(&consumer), vec![class.index()]);
    let list = &consumer.lists[class.index()];
    assert!(
        list.len() > 1,
        "the first free took no batch of the thread's own"
    );
    assert_eq!(
        list.tail(),
        objects[0],
        "the freed object is not behind the batch"
    );
    // SAFETY: as above.
    unsafe {
        consumer.free(objects[1], class);
        consumer.free(objects[2], class);
    }
    assert_eq!(consumer.lists[class.index()].head, objects[2]);
    // A class threads do not cache: configured at its first free, which parks the object.
    let big = (0..NUM_CLASSES)
        .map(|index| SizeClass(index as u8))
        .find(|class| class.cache_limit() == 0)
        .unwrap();
    let block = allocate(&mut producer, big);
    assert!(!block.is_null());
    // SAFETY: allocated by the producer, freed once.
    unsafe { consumer.free(block, big) };
    let list = &consumer.lists[big.index()];
    assert!(list.is_configured() && list.is_uncached());
    assert_eq!((list.len(), consumer.parked), (1, block));
}

/// Secure mode: a free into an unconfigured list configures it without arming its marker (a
/// secure list is never fresh), and the heap allocates and frees on as before.
#[test]
fn a_secure_heap_configures_its_lists_at_first_use_too() {
    let heaps = NodeHeaps::create(test_arena_secure(1, false)).unwrap();
    let mut producer = attached(heaps, NodeId(0));
    let mut consumer = attached(heaps, NodeId(0));
    assert!(consumer.lists.iter().all(FreeList::is_empty_list));
    let class = class_of(48, 8).unwrap();
    let objects: Vec<*mut u8> = (0..40).map(|_| allocate(&mut producer, class)).collect();
    for &object in &objects {
        // SAFETY: allocated by the producer, freed once, by the consumer.
        unsafe { consumer.free(object, class) };
    }
    assert_eq!(configured(&consumer), vec![class.index()]);
    assert!(!consumer.lists[class.index()].is_fresh());
    let again: Vec<*mut u8> = (0..80).map(|_| allocate(&mut consumer, class)).collect();
    assert!(again.iter().all(|object| !object.is_null()));
    for &object in &again {
        // SAFETY: allocated above, freed once.
        unsafe { consumer.free(object, class) };
    }
}

/// A flush (thread exit, re-homing) leaves unconfigured lists untouched, and a re-attach sets up
/// again only the lists that were in use.
#[test]
fn a_flush_and_a_re_attach_leave_unused_lists_unconfigured() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(256, 8).unwrap();
    let object = allocate(&mut heap, class);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(object, class) };
    heap.flush();
    assert_eq!(configured(&heap), vec![class.index()]);
    heap.attach(heaps, NodeId(0));
    assert_eq!(configured(&heap), vec![class.index()]);
    assert!(heap.lists[class.index()].is_fresh());
    let unused = (0..NUM_CLASSES).filter(|&index| index != class.index());
    assert!(unused
        .map(|index| &heap.lists[index])
        .all(FreeList::is_empty_list));
}

/// `ThreadHeap::init` on memory that reads as zero bits makes the heap `with_attach_hook`
/// makes, field for field where it matters to the paths: compared through a heap that
/// attaches and serves on both.
#[test]
fn a_heap_written_in_place_works_as_one_built_whole() {
    let layout = std::alloc::Layout::new::<ThreadHeap>();
    // SAFETY: a zeroed allocation of a heap's layout, written by `init` before use, freed at the
    // end (a heap has nothing to drop).
    unsafe {
        let memory = std::alloc::alloc_zeroed(layout) as *mut ThreadHeap;
        assert!(!memory.is_null());
        ThreadHeap::init(memory, None);
        let heap = &mut *memory;
        let whole = ThreadHeap::with_attach_hook(None);
        assert!(heap.state == whole.state && heap.state == HeapState::Fresh);
        assert_eq!(heap.link_key, whole.link_key);
        assert_eq!(heap.holds_left, whole.holds_left);
        assert!(heap.lists.iter().all(FreeList::is_empty_list));
        assert!(heap
            .runs
            .iter()
            .all(|run| run.next.is_null() && run.left == 0));
        assert!(heap.stash.iter().all(|stash| stash.count == 0));
        let heaps = heaps(1);
        heap.attach(heaps, NodeId(0));
        let class = class_of(32, 8).unwrap();
        let object = allocate(heap, class);
        assert!(!object.is_null());
        heap.free(object, class);
        heap.retire();
        std::alloc::dealloc(memory as *mut u8, layout);
    }
}

/// Pages of `[start, start + bytes)` written to: present and mapped by this process alone
/// (`/proc/self/pagemap` bits 63 and 56). A page only read maps the shared zero page, which is
/// present but not exclusive (and which `mincore` would count as resident).
fn written_pages(start: *mut u8, bytes: usize) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let page = crate::os::PAGE_SIZE;
    let mut file = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
    file.seek(SeekFrom::Start((start as usize / page * 8) as u64))
        .unwrap();
    let mut entries = vec![0u8; bytes / page * 8];
    file.read_exact(&mut entries).unwrap();
    entries
        .chunks(8)
        .map(|entry| u64::from_le_bytes(entry.try_into().unwrap()))
        .filter(|entry| entry >> 63 & 1 == 1 && entry >> 56 & 1 == 1)
        .count()
}

/// A heap's thread that used one small class, and exited, wrote only the pages up to that
/// class's list (its flush leaves the empty runs and stashes, on pages of their own, alone);
/// the heap written over in place for the next thread (`ThreadHeap::reset`: the pool
/// recycling a heap whose caches are not kept) writes no other page, and is a new heap again:
/// attached anew, it serves classes on every page of its lists.
#[test]
fn a_used_heap_and_its_reset_write_only_the_pages_its_classes_need() {
    let page = crate::os::PAGE_SIZE;
    let bytes = core::mem::size_of::<ThreadHeap>().next_multiple_of(page);
    let memory = crate::os::reserve(bytes).expect("mapping") as *mut ThreadHeap;
    let heaps = heaps(1);
    let class = class_of(32, 8).unwrap();
    // SAFETY: a fresh mapping (zero bits) of a heap's size, page-aligned; the heap is used by
    // this test alone and unmapped at its end.
    unsafe {
        let list_end = core::ptr::addr_of!((*memory).lists[class.index() + 1]) as usize;
        let needed = (list_end - memory as usize).div_ceil(page);
        assert!(
            needed < bytes / page,
            "the class's list on the heap's last page"
        );
        ThreadHeap::init(memory, None);
        let heap = &mut *memory;
        heap.attach(heaps, NodeId(0));
        let object = allocate(heap, class);
        heap.free(object, class);
        heap.retire();
        assert_eq!(written_pages(memory as *mut u8, bytes), needed);
        ThreadHeap::reset(memory, None);
        assert_eq!(written_pages(memory as *mut u8, bytes), needed);
        let heap = &mut *memory;
        assert_eq!(heap.state, HeapState::Fresh);
        assert!(heap.lists.iter().all(FreeList::is_empty_list));
        heap.attach(heaps, NodeId(0));
        let biggest = (0..NUM_CLASSES)
            .rev()
            .map(|index| SizeClass(index as u8))
            .find(|class| class.cache_limit() != 0)
            .unwrap();
        for class in [class, biggest] {
            let object = allocate(heap, class);
            assert!(!object.is_null());
            heap.free(object, class);
        }
        heap.retire();
        crate::os::unmap(memory as *mut u8, bytes);
    }
}
