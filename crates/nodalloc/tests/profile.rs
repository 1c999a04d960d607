//! Heap profiles through the Rust face (`nodalloc::profile`): off by default (no bytes, an
//! error from `dump`); on, in a child process of this binary (`NODALLOC_TEST_CHILD`), the bytes
//! `pprof()` returns and the file `dump` writes are profiles Google's `pprof` reads, whose live
//! and allocated totals are the program's within ±10 %.

use nodalloc::NodAlloc;
use nodalloc_testkit::{pprof, pprof_total, skip, Need};
use std::path::PathBuf;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::expect_child;

const KEPT: usize = 16 << 20;
const CHURNED: usize = 16 << 20;
const SIZE: usize = 1000;
/// A vector grown a byte at a time to this many bytes (capacity doubling: its large blocks are
/// mostly resized in place, each resize an allocation to the profile).
const GROWN: usize = 8 << 20;

#[test]
fn child_entry() {
    match std::env::var("NODALLOC_TEST_CHILD").as_deref() {
        Ok("profile") => allocate_and_write_profiles(),
        Ok(other) => panic!("unknown scenario {other}"),
        Err(_) => {}
    }
}

#[inline(never)]
fn keep() -> Vec<Vec<u8>> {
    (0..KEPT / SIZE).map(|i| vec![i as u8; SIZE]).collect()
}

#[inline(never)]
fn grow() -> Vec<u8> {
    let mut grown = Vec::new();
    for i in 0..GROWN {
        grown.push(i as u8);
    }
    assert_eq!(grown.capacity(), GROWN);
    grown
}

#[inline(never)]
fn churn() {
    for i in 0..CHURNED / SIZE {
        std::hint::black_box(vec![i as u8; SIZE]);
    }
}

fn allocate_and_write_profiles() {
    assert!(nodalloc::profile::is_on());
    let kept = keep();
    let grown = grow();
    churn();
    let dir = PathBuf::from(std::env::var("PROFILE_DIR").unwrap());
    let bytes = nodalloc::profile::pprof().expect("profiling is on");
    std::fs::write(dir.join("bytes.pb"), bytes).unwrap();
    nodalloc::profile::dump(dir.join("dump.pb")).unwrap();
    let missing = nodalloc::profile::dump("/nonexistent-directory/profile.pb").unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    std::hint::black_box((&kept, &grown));
    eprintln!("profiles written");
}

#[test]
fn with_profiling_off_there_is_no_profile() {
    if std::env::var_os("NODALLOC_PROFILE").is_some() {
        return;
    }
    assert!(!nodalloc::profile::is_on());
    assert!(nodalloc::profile::pprof().is_none());
    let refused = nodalloc::profile::dump(std::env::temp_dir().join("never.pb")).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::Unsupported);
}

/// A child allocates 16 MiB it keeps and 16 MiB it frees, in 1 000-byte vectors, and grows one
/// vector to 8 MiB a byte at a time, sampled every 8 KiB on average, and writes its profile both
/// ways: pprof reads both, with 24 MiB live and 48 MiB allocated (each capacity the vector had
/// counts, whether its block was resized in place or moved), ±10 %. (A binary without frame pointers gives shallow stacks: the totals
/// are what this checks, not the functions.)
#[test]
fn the_rust_face_writes_profiles_pprof_reads_with_the_programs_totals() {
    let Some(pprof) = pprof() else {
        return skip(
            Need::OnCi,
            "needs Google's pprof (scripts/setup.sh installs it)",
        );
    };
    let dir = std::env::temp_dir().join(format!("nodalloc-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    expect_child(
        "profile",
        &[
            ("NODALLOC_PROFILE", "1"),
            ("NODALLOC_PROFILE_RATE", "8K"),
            ("PROFILE_DIR", dir.to_str().unwrap()),
        ],
        "profiles written",
    );
    let near = |what: &str, found: u64, truth: usize| {
        let error = (found as f64 - truth as f64).abs() / truth as f64;
        assert!(
            error <= 0.10,
            "{what}: {found} in the profile, {truth} true"
        );
    };
    // What the child kept: the vectors and their array (and a little of the test harness).
    let kept = KEPT + KEPT / SIZE * std::mem::size_of::<Vec<u8>>() + GROWN;
    for file in ["bytes.pb", "dump.pb"] {
        let profile = dir.join(file);
        near(file, pprof_total(&pprof, &profile, "inuse_space"), kept);
        near(
            file,
            pprof_total(&pprof, &profile, "alloc_space"),
            // The grown vector's capacities: 8, 16, … GROWN bytes, about twice GROWN.
            kept + CHURNED + GROWN,
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
