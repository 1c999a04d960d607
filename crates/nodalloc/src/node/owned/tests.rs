//! The owned table's drops, limits and sharing, at the node layer.

use super::*;
use crate::arena::tests::test_arena;

fn free(heaps: &NodeHeaps, object: *mut u8) {
    let address = object as usize;
    let origin = heaps.origin_of(address).unwrap();
    match heaps.small_class_at(address).unwrap() {
        // SAFETY: a live block of a heap, given up here.
        Some(class) => unsafe { heaps.owned_free_small(origin, class, object) },
        None => heaps.free_large(address),
    }
}

/// A drop gives back every span the heap held: partial bags, full bags (every object out)
/// and large blocks; the slot is reused by the next heap under a new generation.
#[test]
fn a_drop_gives_back_every_span_of_the_heap() {
    let heaps = NodeHeaps::create(test_arena(2, 1 << 30, 0)).unwrap();
    let before = heaps.arena.usage(1).active;
    let id = heaps.owned_create(NodeId(1), 0, b"test").unwrap();
    let mut blocks = Vec::new();
    for i in 0..20_000 {
        let size = 16 + (i % 7) * 100;
        let p = heaps.owned_alloc(id, size, 8, false);
        assert!(!p.is_null());
        assert!(heaps.is_owned(p as usize));
        assert_eq!(heaps.origin_of(p as usize), Some(NodeId(1)));
        assert_eq!(heaps.owned_of(p as usize), Some(id));
        blocks.push(p);
    }
    let large = heaps.owned_alloc(id, 3 << 20, 4096, true);
    assert!(!large.is_null() && heaps.owned_of(large as usize) == Some(id));
    // Some blocks back, so the heap has partial bags as well as full ones.
    for &p in blocks.iter().step_by(3) {
        free(heaps, p);
    }
    let stats = heaps.owned_stats(id);
    assert_eq!(stats.blocks, 20_000 - 20_000usize.div_ceil(3) + 1);
    assert_eq!(stats.large_blocks, 1);
    assert!(heaps.arena.usage(1).active >= before + stats.committed);
    heaps.owned_drop(id);
    assert_eq!(
        heaps.arena.usage(1).active,
        before,
        "spans left after the drop"
    );
    let again = heaps.owned_create(NodeId(0), 0, b"").unwrap();
    assert_eq!(again.index, id.index);
    assert_ne!(again.generation, id.generation);
    assert_eq!(heaps.owned_of(blocks[1] as usize), None);
    heaps.owned_drop(again);
}

/// Shared spans spill into the owned pool once the shared pools are full (a small region):
/// their blocks are no heap's (told by the owner, not the pool), go back as any block does,
/// and a heap's block beside them is still its heap's.
#[test]
fn shared_spans_spilled_into_the_owned_pool_are_no_heaps() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let id = heaps.owned_create(NodeId(0), 0, b"beside").unwrap();
    let heap_block = heaps.owned_alloc(id, 100, 8, false);
    assert!(heaps.is_owned(heap_block as usize));
    let mut larges = Vec::new();
    let spilled = loop {
        let p = heaps.alloc_large(NodeId(0), 2 << 20, 8);
        assert!(!p.is_null(), "the region filled before a span spilled");
        larges.push(p);
        if heaps.arena.is_owned(p as usize) {
            break p;
        }
    };
    assert!(!heaps.is_owned(spilled as usize));
    assert_eq!(heaps.owned_of(spilled as usize), None);
    assert_eq!(heaps.owned_of(heap_block as usize), Some(id));
    for p in larges {
        heaps.free_large(p as usize);
    }
    free(heaps, heap_block);
    assert_eq!(heaps.owned_stats(id).blocks, 0);
    heaps.owned_drop(id);
}

/// A heap's limit is exact, counts large and small blocks, refuses past it, and is whole
/// again once the blocks come back (its front lists flushed when the limit refuses).
#[test]
fn a_limit_is_exact_and_recovers() {
    let heaps = NodeHeaps::create(test_arena(1, 1 << 30, 0)).unwrap();
    const LIMIT: usize = 2 << 20;
    let id = heaps.owned_create(NodeId(0), LIMIT, b"bounded").unwrap();
    let mut blocks = Vec::new();
    let mut refused = 0;
    for i in 0..100_000 {
        let size = if i % 50 == 0 {
            300 << 10
        } else {
            24 + i % 3000
        };
        let p = heaps.owned_alloc(id, size, 8, false);
        if p.is_null() {
            refused += 1;
            if refused > 100 {
                break;
            }
            continue;
        }
        blocks.push(p);
    }
    let stats = heaps.owned_stats(id);
    assert!(refused > 100);
    assert!(
        stats.peak <= LIMIT && stats.committed > LIMIT / 2,
        "{stats:?}"
    );
    for p in blocks {
        free(heaps, p);
    }
    let whole = heaps.owned_alloc(id, LIMIT - UNIT, UNIT, false);
    assert!(!whole.is_null(), "{:?}", heaps.owned_stats(id));
    assert!(heaps.owned_stats(id).peak <= LIMIT);
    heaps.owned_drop(id);
    assert_eq!(
        heaps.owned_create(NodeId(0), UNIT - 1, b""),
        Err(OwnedRefusal::LimitTooSmall)
    );
    assert_eq!(
        heaps.owned_create(NodeId(5), 0, b""),
        Err(OwnedRefusal::NoSuchNode)
    );
}

/// Threads allocate from and free into one heap with a limit, every block checked by the
/// thread that frees it (another thread than the allocating one half of the time).
#[test]
fn threads_share_a_heap_within_its_limit() {
    let heaps = NodeHeaps::create(test_arena(1, 1 << 30, 0)).unwrap();
    const LIMIT: usize = 8 << 20;
    let id = heaps.owned_create(NodeId(0), LIMIT, b"shared").unwrap();
    let (sender, receiver) = std::sync::mpsc::channel::<(usize, usize, u8)>();
    let receiver = std::sync::Arc::new(std::sync::Mutex::new(receiver));
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let sender = sender.clone();
            let receiver = std::sync::Arc::clone(&receiver);
            std::thread::spawn(move || {
                let mut state = 0x9E37_79B9u64 + t;
                let mut mine = Vec::new();
                for round in 0..20_000u32 {
                    crate::arena::tests::xorshift(&mut state);
                    let size = 8 + (state % 2000) as usize;
                    let p = heaps.owned_alloc(id, size, 8, false);
                    if !p.is_null() {
                        let fill = (round % 251) as u8;
                        // SAFETY: `size` writable bytes.
                        unsafe { p.write_bytes(fill, size) };
                        if state % 2 == 0 {
                            mine.push((p as usize, size, fill));
                        } else {
                            sender.send((p as usize, size, fill)).unwrap();
                        }
                    }
                    let theirs = receiver.lock().unwrap().try_recv().ok();
                    for (p, size, fill) in theirs
                        .into_iter()
                        .chain((mine.len() > 64).then(|| mine.swap_remove(0)))
                    {
                        // SAFETY: a live block of `size` bytes.
                        let bytes = unsafe { core::slice::from_raw_parts(p as *const u8, size) };
                        assert!(bytes.iter().all(|&b| b == fill), "a block was overwritten");
                        free(heaps, p as *mut u8);
                    }
                }
                mine
            })
        })
        .collect();
    drop(sender);
    for worker in workers {
        for (p, _, _) in worker.join().unwrap() {
            free(heaps, p as *mut u8);
        }
    }
    while let Ok((p, _, _)) = receiver.lock().unwrap().try_recv() {
        free(heaps, p as *mut u8);
    }
    let stats = heaps.owned_stats(id);
    assert_eq!(stats.blocks, 0, "{stats:?}");
    assert!(stats.peak <= LIMIT, "{stats:?}");
    assert_eq!(stats.allocs, stats.frees);
    heaps.owned_drop(id);
}
