//! Call-site partitions through the Rust face (`NODALLOC_CALLSITE`): scopes
//! (`nodalloc::partition`) and `alloc_in`. Each scenario runs in a child process of this binary
//! (options are read once, at the first allocation), with nodalloc as its global allocator.

use nodalloc::NodAlloc;
use std::alloc::Layout;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::expect_child;

const REQUESTS: usize = 1;
const CACHE: usize = 2;

fn partition_of<T>(value: &T) -> Option<usize> {
    nodalloc::partition_of(value as *const T as *const u8)
}

/// A server's loop: requests whose objects all die at the end of the request, and a cache whose
/// entries are made during requests and live on. Returns the cache.
#[allow(clippy::vec_box)] // each entry is an allocation of its own, as a cache's would be
fn serve(requests: usize) -> Vec<Box<[u64; 8]>> {
    let mut cache = Vec::new();
    for request in 0..requests {
        let _scope = nodalloc::partition(REQUESTS);
        let objects: Vec<Box<[u64; 8]>> = (0..64).map(|i| Box::new([i as u64; 8])).collect();
        if request % 4 == 0 {
            let _cache_scope = nodalloc::partition(CACHE);
            cache.push(Box::new([request as u64; 8]));
        }
        assert!(objects.iter().enumerate().all(|(i, o)| o[7] == i as u64));
    }
    cache
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var("NODALLOC_TEST_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "scopes" => {
            let outside = Box::new(1u64);
            let first = {
                let _scope = nodalloc::partition(REQUESTS);
                let first = Box::new(2u64);
                {
                    let _inner = nodalloc::partition(CACHE);
                    let inner = Box::new(3u64);
                    assert_eq!(partition_of(&*inner), Some(CACHE));
                }
                let after_inner = Box::new(4u64);
                assert_eq!(
                    partition_of(&*after_inner),
                    Some(REQUESTS),
                    "scope restored"
                );
                first
            };
            assert_eq!(partition_of(&*first), Some(REQUESTS));
            assert_eq!(partition_of(&*outside), Some(0));
            assert_eq!(partition_of(&*Box::new(5u64)), Some(0), "scope ended");
            let layout = Layout::new::<[u64; 4]>();
            let p = nodalloc::alloc_in(64 + 5, layout);
            assert_eq!(nodalloc::partition_of(p), Some(5), "ids are taken modulo P");
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(p, layout) };
            // Scopes are per thread: another thread's allocations keep its own partition.
            let _scope = nodalloc::partition(REQUESTS);
            std::thread::spawn(|| {
                assert_eq!(partition_of(&*Box::new(6u64)), Some(0));
                let _scope = nodalloc::partition(CACHE);
                assert_eq!(partition_of(&*Box::new(7u64)), Some(CACHE));
            })
            .join()
            .unwrap();
            assert_eq!(partition_of(&*Box::new(8u64)), Some(REQUESTS));
            eprintln!("scopes ok");
        }
        "off" => {
            let _scope = nodalloc::partition(REQUESTS);
            assert_eq!(partition_of(&*Box::new(1u64)), None);
            let p = nodalloc::alloc_in(CACHE, Layout::new::<u64>());
            assert!(!p.is_null());
            eprintln!("off ok");
        }
        "server" => {
            let cache = serve(4000);
            nodalloc::purge();
            let stats = nodalloc::stats();
            let requests = stats
                .top_partitions()
                .iter()
                .find(|p| p.partition == REQUESTS)
                .expect("the requests' partition");
            let cache_figures = stats
                .top_partitions()
                .iter()
                .find(|p| p.partition == CACHE)
                .expect("the cache's partition");
            assert_eq!(requests.bags, 0, "the requests' bags all went back");
            assert!(requests.reclaimed > 0);
            // The entries, and the vector's buffer, which grew inside the cache's scope.
            let entries = cache.len() * 64;
            let buffer = cache.capacity() * 8;
            assert!(
                (entries..=entries + 2 * buffer).contains(&cache_figures.live),
                "cache partition live {} for {entries} of entries and {buffer} of buffer",
                cache_figures.live
            );
            eprintln!(
                "server ok: requests reclaimed whole {} picked apart {}",
                requests.reclaimed, requests.picked
            );
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn scopes_set_the_partition_of_the_threads_allocations_and_restore_it() {
    expect_child("scopes", &[("NODALLOC_CALLSITE", "64")], "scopes ok");
}

#[test]
fn scopes_change_nothing_with_the_mode_off() {
    expect_child("off", &[], "off ok");
}

#[test]
fn a_request_scope_gives_its_bags_back_whole() {
    expect_child("server", &[("NODALLOC_CALLSITE", "16")], "server ok");
}
