//! Tests of a thread list alone (`free_list.rs`), on words of the test's own as objects.

use super::free_list::FreeList;
use crate::ds::{next_of, set_next};
use crate::node::Batch;
use crate::size_class::{class_of, SizeClass};
use core::ptr::null_mut;

/// A configured list of 64-byte objects, and `times` its limit of words to serve as objects.
fn list_of_words(times: usize) -> (SizeClass, FreeList, Vec<usize>) {
    let class = class_of(64, 8).unwrap();
    let mut list = FreeList::EMPTY;
    list.configure(class);
    let words = vec![0usize; times * list.limit()];
    (class, list, words)
}

/// The words as objects of a list (each one word: enough for its link).
fn objects_of(words: &mut [usize]) -> Vec<*mut u8> {
    words
        .iter_mut()
        .map(|w| w as *mut usize as *mut u8)
        .collect()
}

/// Links `objects` in order into a batch.
fn chain(objects: &[*mut u8]) -> Batch {
    for (i, &object) in objects.iter().enumerate() {
        let next = objects.get(i + 1).copied().unwrap_or(null_mut());
        // SAFETY: the objects are the caller's own words.
        unsafe { set_next(object, next) };
    }
    Batch {
        head: objects[0],
        tail: objects[objects.len() - 1],
        count: objects.len(),
    }
}

/// A list emptied by pops takes the object of its next push as its tail, and the counts it
/// publishes say what the pops and pushes did (the allocations derived from the count).
#[test]
fn a_list_emptied_by_pops_takes_its_next_push_as_its_tail_and_counts_its_pops() {
    let (class, mut list, mut words) = list_of_words(2);
    let limit = list.limit();
    let objects = objects_of(&mut words);
    list.install(chain(&objects[..3]), false);
    assert_eq!(list.take_counts(), (0, 0), "an install is neither");
    for _ in 0..3 {
        // SAFETY: popping our own words.
        list.head = unsafe { next_of(list.head) };
        list.popped();
    }
    assert_eq!(list.len(), 0);
    let pushed = &objects[3..3 + limit];
    // SAFETY: as above.
    unsafe { set_next(pushed[0], list.head) };
    assert!(!list.push(pushed[0]), "a push onto an empty list is fast");
    assert_eq!(list.tail(), pushed[0]);
    let mut cut = None;
    for &object in &pushed[1..] {
        // SAFETY: as above.
        unsafe { set_next(object, list.head) };
        if list.push(object) {
            cut = list.arm_or_cut(
                false,
                // SAFETY: as above.
                |o| unsafe { next_of(o) },
                // SAFETY: as above.
                |o, n| unsafe { set_next(o, n) },
            );
        }
    }
    let cut = cut.expect("the pushes reached the limit");
    assert_eq!(cut.tail, pushed[0], "the cut ends at the oldest push");
    assert_eq!(cut.count, limit - class.batch());
    assert_eq!(list.len(), class.batch());
    assert_eq!(list.take_counts(), (3, limit as u32));
    assert_eq!(list.take_counts(), (0, 0));
}

/// A list handed a refill larger than its drain (another thread's grown list cut it) cannot
/// arm its marker: at the limit it keeps its newest object and hands back the rest.
#[test]
fn a_list_past_its_arming_point_keeps_its_head_at_the_limit() {
    let (_, mut list, mut words) = list_of_words(4);
    let limit = list.limit();
    let objects = objects_of(&mut words);
    // A chain of limit - 1 objects, installed whole.
    let given = limit - 1;
    list.install(chain(&objects[..given]), false);
    // One push brings it to the limit.
    let pushed = objects[given];
    // SAFETY: as above.
    unsafe { set_next(pushed, list.head) };
    assert!(list.push(pushed));
    let cut = list
        .arm_or_cut(
            false,
            // SAFETY: the list's objects are our own words.
            |o| unsafe { next_of(o) },
            // SAFETY: as above.
            |o, n| unsafe { set_next(o, n) },
        )
        .expect("a list at its limit must be cut");
    assert_eq!(cut.count, limit - 1);
    assert_eq!(cut.head, objects[0]);
    assert_eq!(cut.tail, objects[given - 1]);
    assert_eq!(list.len(), 1);
    assert_eq!(list.head, pushed);
    assert_eq!(list.tail(), pushed);
    // SAFETY: as above.
    assert!(unsafe { next_of(pushed) }.is_null());
}
