//! Differential property test: random sequences of alloc / realloc / dealloc over sizes
//! 0 B – 8 MiB and alignments 1 B – 1 MiB, run against a shadow model that knows every live block
//! and the pattern written into it. Every byte is checked before a block is freed or moved, and
//! no two live blocks may overlap.

use nodalloc::NodAlloc;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize, align_shift: u32 },
    Realloc { pick: usize, size: usize },
    Dealloc { pick: usize },
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..=256,
        3 => 257usize..=16usize << 10,
        2 => (16usize << 10) + 1..=(256usize << 10) + 4096,
        1 => (256usize << 10)..=8usize << 20,
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (size_strategy(), prop_oneof![8 => 0u32..=4, 1 => 5u32..=20])
            .prop_map(|(size, align_shift)| Op::Alloc { size, align_shift }),
        2 => (any::<usize>(), size_strategy()).prop_map(|(pick, size)| Op::Realloc { pick, size }),
        3 => any::<usize>().prop_map(|pick| Op::Dealloc { pick }),
    ]
}

/// What the model knows of a live block: its layout and the seed of the pattern in it.
struct Block {
    layout: Layout,
    seed: u8,
}

fn byte(seed: u8, i: usize) -> u8 {
    seed.wrapping_add((i as u8).wrapping_mul(7))
        .wrapping_add((i >> 8) as u8)
}

/// Writes the pattern; for big blocks only the first and last 4 KiB and every 4 KiB page start,
/// so 8 MiB blocks stay cheap while every page of them is touched.
fn positions(size: usize) -> impl Iterator<Item = usize> {
    let edge = size.min(4096);
    (0..edge)
        .chain(size.saturating_sub(4096).max(edge)..size)
        .chain((4096..size).step_by(4096))
}

fn write(p: *mut u8, size: usize, seed: u8) {
    for i in positions(size) {
        // SAFETY: `p` holds `size` bytes we own.
        unsafe { *p.add(i) = byte(seed, i) };
    }
}

fn verify(p: *const u8, size: usize, seed: u8) {
    for i in positions(size) {
        // SAFETY: `p` holds `size` bytes we own.
        let got = unsafe { *p.add(i) };
        assert_eq!(
            got,
            byte(seed, i),
            "block {p:p} of {size} B corrupted at {i}"
        );
    }
}

fn run(ops: &[Op]) {
    let mut live: BTreeMap<usize, Block> = BTreeMap::new();
    let mut seed = 1u8;
    let overlap_free = |live: &BTreeMap<usize, Block>, start: usize, size: usize| {
        let end = start + size.max(1);
        if let Some((&before, block)) = live.range(..end).next_back() {
            assert!(
                before + block.layout.size().max(1) <= start,
                "block at {start:#x} overlaps {before:#x}"
            );
        }
    };
    for op in ops {
        match *op {
            Op::Alloc { size, align_shift } => {
                let layout = Layout::from_size_align(size, 1 << align_shift).unwrap();
                // SAFETY: nodalloc serves any layout, including size 0.
                let p = unsafe { GLOBAL.alloc(layout) };
                assert!(!p.is_null(), "alloc {layout:?} failed");
                assert_eq!(p as usize % layout.align(), 0, "{layout:?} misaligned");
                overlap_free(&live, p as usize, size);
                seed = seed.wrapping_add(1);
                write(p, size, seed);
                live.insert(p as usize, Block { layout, seed });
            }
            Op::Realloc { pick, size } => {
                if live.is_empty() {
                    continue;
                }
                let key = *live.keys().nth(pick % live.len()).unwrap();
                let block = live.remove(&key).unwrap();
                verify(key as *const u8, block.layout.size(), block.seed);
                // SAFETY: the block is live with this layout; the new size keeps its alignment.
                let q = unsafe { GLOBAL.realloc(key as *mut u8, block.layout, size) };
                assert!(!q.is_null());
                assert_eq!(q as usize % block.layout.align(), 0);
                let kept = block.layout.size().min(size);
                for i in positions(block.layout.size()).filter(|&i| i < kept) {
                    // SAFETY: `q` holds at least `kept` bytes.
                    let value = unsafe { *q.add(i) };
                    assert_eq!(value, byte(block.seed, i), "realloc lost byte {i}");
                }
                overlap_free(&live, q as usize, size);
                seed = seed.wrapping_add(1);
                write(q, size, seed);
                let layout = Layout::from_size_align(size, block.layout.align()).unwrap();
                live.insert(q as usize, Block { layout, seed });
            }
            Op::Dealloc { pick } => {
                if live.is_empty() {
                    continue;
                }
                let key = *live.keys().nth(pick % live.len()).unwrap();
                let block = live.remove(&key).unwrap();
                verify(key as *const u8, block.layout.size(), block.seed);
                // SAFETY: the block is live with this layout.
                unsafe { GLOBAL.dealloc(key as *mut u8, block.layout) };
            }
        }
    }
    for (&p, block) in &live {
        verify(p as *const u8, block.layout.size(), block.seed);
        // SAFETY: the block is live with this layout.
        unsafe { GLOBAL.dealloc(p as *mut u8, block.layout) };
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_match_the_shadow_model(ops in proptest::collection::vec(op_strategy(), 1..400)) {
        run(&ops);
    }
}
