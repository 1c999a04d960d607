//! Tests of the size classes (`size_class.rs`): their sizes and waste, the lookups by size and
//! by alignment, object starts and offsets by the class's magic, and the bags' layout.

use super::*;

#[test]
fn classes_increase_and_end_at_256k() {
    for i in 1..NUM_GENERAL_CLASSES {
        assert!(CLASS_SIZES[i] > CLASS_SIZES[i - 1]);
    }
    assert_eq!(CLASS_SIZES[NUM_GENERAL_CLASSES - 1] as usize, MAX_SMALL);
    assert_eq!(compute_class(MAX_SMALL), NUM_GENERAL_CLASSES - 1);
    assert_eq!(PAGE_CLASS.size(), 4096);
    assert_eq!(class_of(4096, 1).unwrap().size(), PAGE_LINE);
}

/// Objects of the 4 KiB class start a line further into the page each, so a thousand of
/// them reach every cache set; the page class serves page-aligned requests up to a page,
/// and nothing else.
#[test]
fn the_4k_class_spreads_over_cache_sets_and_the_page_class_serves_alignment() {
    let class = class_of(4000, 16).unwrap();
    let sets: std::collections::HashSet<usize> = (0..class.capacity())
        .map(|i| (i * class.size()) % 4096 / 64)
        .collect();
    assert_eq!(
        sets.len(),
        class.capacity(),
        "every object's head in its own line"
    );
    assert!(
        class.bag_bytes() % class.size() <= 64,
        "a bag wastes at most a line"
    );
    for size in [1, 100, 4000, 4096] {
        assert_eq!(class_of(size, 4096), Some(PAGE_CLASS), "size {size}");
    }
    assert_eq!(class_of(3000, 2048), Some(PAGE_CLASS));
    assert_eq!(class_of(4096, 64).unwrap().size(), PAGE_LINE);
    assert_eq!(class_of(4097, 4096).unwrap().size(), 8192);
    for size in 0..=MAX_SMALL + 1 {
        assert_ne!(class_of(size, 16), Some(PAGE_CLASS));
        assert_ne!(class_of_malloc(size), Some(PAGE_CLASS));
    }
}

#[test]
fn every_size_round_trips_to_the_smallest_fitting_class() {
    for size in 1..=MAX_SMALL {
        let class = class_of(size, 1).unwrap();
        assert!(class.size() >= size, "size {size}");
        // Requests of 4 097-4 160 bytes skip the page-and-a-line class: its extra line
        // spreads 4 KiB blocks over the cache, and the lookup stays a formula.
        if class.index() > 0 && !(4097..=PAGE_LINE).contains(&size) {
            assert!(
                SizeClass(class.0 - 1).size() < size,
                "size {size} skipped a class"
            );
        }
        if class.size() != PAGE_LINE {
            assert_eq!(class_of(class.size(), 1), Some(class));
        }
    }
    assert_eq!(class_of(MAX_SMALL + 1, 1), None);
}

#[test]
fn waste_above_64_bytes_is_at_most_an_eighth() {
    for size in 65..=MAX_SMALL {
        let class = class_of(size, 8).unwrap();
        let waste = class.size() - size;
        assert!(
            waste * 8 <= size,
            "size {size} wastes {waste} in class {}",
            class.size()
        );
    }
}

/// The tables by size agree with a search of the classes: the smallest that holds the
/// size (at least one byte) at a multiple of the alignment, for every size they cover.
#[test]
fn table_lookups_find_the_smallest_fitting_class_for_every_size() {
    for align in [1, 2, 4, 8, 16] {
        for size in 0..=LOOKUP_MAX + 8 {
            let found = slot_of_small(size, align).map(ClassSlot::class);
            if size > LOOKUP_MAX {
                assert_eq!(found, None, "size {size}");
                continue;
            }
            let expected = (0..NUM_CLASSES)
                .map(|i| SizeClass(i as u8))
                .find(|c| c.size() >= size.max(1) && c.size() % align == 0);
            assert_eq!(found, expected, "size {size} align {align}");
            if align == 16 {
                assert_eq!(slot_of_small_malloc(size).map(ClassSlot::class), expected);
            }
        }
    }
}

#[test]
fn aligned_requests_get_aligned_classes() {
    for align in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096] {
        for size in (1..20_000).step_by(7) {
            let class = class_of(size, align).unwrap();
            assert_eq!(class.size() % align, 0, "size {size} align {align}");
            assert!(class.size() >= size);
        }
    }
    assert_eq!(class_of(100, 8192), None);
    assert_eq!(class_of_malloc(72).unwrap().size(), 80);
    for size in 0..=8192 {
        assert_eq!(class_of_malloc(size), class_of(size, 16), "size {size}");
    }
    assert_eq!(class_of_malloc(0).unwrap().size(), 16);
    assert_eq!(class_of(0, 1).unwrap().size(), 8);
}

/// The one-load lookup at alignments above 16 names the class the general search finds, for
/// every size whose rounded request the table covers, and declines the rest.
#[test]
fn aligned_lookups_above_16_agree_with_the_general_search() {
    for align in [32, 64, 128, 256, 512, 1024] {
        for size in 0..=LOOKUP_MAX + 64 {
            let rounded = (size.max(1) + align - 1) & !(align - 1);
            let general = class_of_general(size, align).unwrap();
            match slot_of_small(size, align) {
                Some(slot) => {
                    assert_eq!(slot.class(), general, "size {size} align {align}");
                    assert_eq!(general.size() % align, 0, "size {size} align {align}");
                }
                None => assert!(rounded > LOOKUP_MAX, "size {size} align {align} declined"),
            }
        }
    }
    assert_eq!(slot_of_small(0, 2048), None);
}

#[test]
fn object_starts_are_exactly_the_multiples_of_the_class_size() {
    for i in 0..NUM_CLASSES {
        let class = SizeClass(i as u8);
        for offset in 0..class.bag_bytes() + class.size() {
            assert_eq!(
                class.is_object_start(offset),
                offset % class.size() == 0,
                "class {} offset {offset}",
                class.size()
            );
        }
        // The test holds for every offset below 2^32: multiples and their neighbours far
        // past any bag, and offsets spread over the whole range.
        let size = class.size();
        for k in [1usize, 3, 1000, (u32::MAX as usize) / size] {
            let multiple = k * size;
            assert!(
                class.is_object_start(multiple),
                "class {size} offset {multiple}"
            );
            assert!(!class.is_object_start(multiple - 1));
            if size > 8 && multiple + 8 <= u32::MAX as usize {
                assert!(!class.is_object_start(multiple + 8));
            }
        }
        for offset in random_offsets(0x9E37_79B9) {
            assert_eq!(class.is_object_start(offset), offset % size == 0);
        }
    }
}

/// 20 000 offsets spread over the whole range below 2^32 (xorshift from `seed`).
fn random_offsets(seed: u32) -> impl Iterator<Item = usize> {
    let mut x = seed;
    (0..20_000).map(move |_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as usize
    })
}

#[test]
fn offsets_in_objects_are_the_remainders_by_the_class_size() {
    for i in 0..NUM_CLASSES {
        let class = SizeClass(i as u8);
        let size = class.size();
        for offset in 0..class.bag_bytes() + size {
            assert_eq!(
                class.offset_in_object(offset),
                offset % size,
                "class {size} offset {offset}"
            );
        }
        for offset in random_offsets(0x2545_F491) {
            assert_eq!(
                class.offset_in_object(offset),
                offset % size,
                "class {size}"
            );
        }
    }
}

#[test]
fn every_class_but_the_4_kib_one_may_use_its_whole_size() {
    for i in 0..NUM_CLASSES {
        let class = SizeClass(i as u8);
        if class.size() == PAGE_LINE {
            // The spacing line is no request's: a request of more than a page goes on.
            assert_eq!(class.usable(), 4096);
            assert_eq!(class_of_malloc(4096), Some(class));
            assert!(class_of_malloc(4097).unwrap().size() > PAGE_LINE);
        } else {
            assert_eq!(class.usable(), class.size(), "class {}", class.size());
        }
    }
}

#[test]
fn bags_follow_the_design() {
    for i in 0..NUM_CLASSES {
        let class = SizeClass(i as u8);
        let bytes = class.bag_bytes();
        assert!(class.capacity() >= 1);
        assert!(
            (bytes % class.size()) * 8 <= bytes,
            "class {} wastes more than 1/8",
            class.size()
        );
        assert!(class.bag_units() <= MAX_BAG_UNITS);
        if class.size() <= 8 << 10 && class.size() != PAGE_LINE && (UNIT % class.size()) * 8 <= UNIT
        {
            assert_eq!(
                bytes,
                UNIT,
                "class {} should use a 32 KiB bag",
                class.size()
            );
        }
        if class.size() > 8 << 10 && class.size() <= MAX_CACHED {
            assert!(class.capacity() >= 4, "class {}", class.size());
        }
        assert!(class.batch() >= 1 && class.batch() <= MAX_BATCH);
    }
}
