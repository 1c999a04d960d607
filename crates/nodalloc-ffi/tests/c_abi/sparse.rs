//! Resident memory follows what the program touches (`tests/c/sparse.c`).

use super::*;

include!("../../../nodalloc/tests/common/sparse_bounds.rs");

/// Runs `tests/c/sparse.c` on `pattern` and returns its report line's `key=N` figures.
fn sparse_figures(pattern: &str, mode: Mode) -> HashMap<String, u64> {
    let mut run = command("sparse", mode);
    run.arg(pattern);
    let finished = run_passing("sparse", mode, &mut run);
    report_of(&finished, pattern, &format!("{mode:?}"))
}

/// The `key=N` figures of `finished`'s report line (the one starting with `prefix`), echoed
/// after `label`.
fn report_of(finished: &Finished, prefix: &str, label: &str) -> HashMap<String, u64> {
    let line = finished
        .stdout
        .lines()
        .find(|line| line.starts_with(&format!("{prefix} ")))
        .unwrap_or_else(|| panic!("no report line: {}", finished.describe()));
    eprintln!("{label}: {line}");
    report_figures(line)
}

/// The `key=N` figures of a report line.
fn report_figures(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(key, value)| (key.to_string(), value.parse().expect("a number")))
        .collect()
}

#[test]
fn sparse_patterns_cost_the_pages_they_touch() {
    for mode in MODES {
        for (pattern, bound) in SPARSE_BOUNDS_KIB {
            let growth = sparse_figures(pattern, mode)["rss_growth_kib"];
            assert!(
                growth <= bound,
                "{pattern} ({mode:?}): RSS grew by {growth} KiB, bound {bound} KiB"
            );
        }
    }
}

/// Blocks of 16 KiB from fresh bags: `malloc` writes nothing into them (no link, no double-free
/// mark), so no page of theirs is faulted in before the program touches it.
#[test]
fn big_blocks_are_handed_out_untouched() {
    let resident = sparse_figures("untouched", Mode::Preloaded)["resident_after_malloc"];
    assert_eq!(
        resident, 0,
        "first pages resident after malloc, before any write"
    );
}

/// A process's first block of a class of 1 or 2 KiB makes a few pages of its bag resident, not
/// the whole bag: the thread's first refill of a class takes a page's worth of objects (four
/// at least) and the double-free marks run a page ahead of the carve. Whole bags would be 16
/// pages.
#[test]
fn a_first_block_of_a_class_leaves_most_of_its_bag_untouched() {
    for mode in MODES {
        let pages = sparse_figures("first", mode)["bag_pages"];
        assert!(
            pages <= 10,
            "first ({mode:?}): {pages} of 16 pages of the two bags resident"
        );
    }
}

/// Blocks of 1-64 KiB written whole, 90 % freed at random: once the program has idled, only
/// the survivors' pages stay (the sweep gives back the free pages inside bags still in use).
#[test]
fn a_heap_freed_at_random_keeps_only_the_survivors_pages() {
    for mode in MODES {
        let figures = sparse_figures("holes", mode);
        let (kept, live) = (figures["kept_kib"], figures["live_kib"]);
        assert!(
            kept <= holes_bound_kib(live),
            "holes ({mode:?}): {kept} KiB kept for {live} KiB live"
        );
    }
}

/// A fragmenting churn, then medium objects; once everything is freed and the program has
/// idled 1.5 s, at most 32 MiB of the heap stays resident.
#[test]
fn a_drained_heap_after_a_fragmenting_churn_goes_back() {
    let drained = sparse_figures("churn", Mode::Preloaded)["drained_kib"];
    assert!(
        drained <= 32 * 1024,
        "churn: {drained} KiB left after the drain"
    );
}

/// 256 MiB of 64-byte objects: at least 90 % of them on huge pages where THP is available.
#[test]
fn dense_small_objects_sit_on_huge_pages() {
    if nodalloc_testkit::skipped_without_thp() {
        return;
    }
    let figures = sparse_figures("dense", Mode::Preloaded);
    // The pointer array (32 MiB) is a large block on base pages.
    let small = figures["rss_growth_kib"].saturating_sub(32 * 1024);
    let huge = figures["huge_kib"];
    assert!(
        huge * 10 >= small * 9,
        "only {huge} of {small} KiB of small objects on huge pages"
    );
}

/// The most a small program's peak RSS may grow by loading nodalloc instead of using glibc's
/// malloc, in a release build (the least of three runs each: single runs spread by 300 KiB):
/// the library's code, its metadata and one bag per size class it uses. Measured 600-1 000 KiB
/// in single runs (least of three: 730); 950-1 450 while the library linked Rust's standard
/// library and libgcc_s (300 KiB more of resident code); 1 620-1 900 before the node heaps'
/// pass stopped writing into every class and before libm stopped being loaded (300 KiB of its
/// code, run at start).
const FOOTPRINT_EXTRA_KIB: u64 = 1280;

/// The `key=N` figures of the report line of `tests/c/NAME.c` in three runs, with nodalloc
/// preloaded or without it (glibc).
fn three_reports(name: &str, preloaded: bool) -> Vec<HashMap<String, u64>> {
    three_reports_with(name, &[], preloaded)
}

/// [`three_reports`] of `tests/c/NAME.c` run with `args`.
fn three_reports_with(name: &str, args: &[&str], preloaded: bool) -> Vec<HashMap<String, u64>> {
    (0..3)
        .map(|_| {
            let mut run = clean_command(program(name, Mode::Preloaded));
            run.args(args);
            if preloaded {
                run.env("LD_PRELOAD", library());
            }
            let finished =
                run_passing_result(name, Mode::Preloaded, run_bounded(&mut run, TIME_LIMIT));
            report_of(&finished, name, &format!("preloaded {preloaded} {args:?}"))
        })
        .collect()
}

/// The most of the library's code a small program may keep resident, in KiB, in a release
/// build. The kernel maps a library's code by the 64 KiB around each page a process runs, so
/// this is what `hot-code.ld` is for: the 150 KB of functions ordinary programs run, placed
/// together, cost 164 KiB here (one more window when the mapping's alignment falls badly);
/// spread through the library, they made all of its code resident (348 KiB).
const CODE_KIB_MAX: u64 = 256;

/// `tests/c/footprint.c`'s figures over three runs, with nodalloc preloaded or without it
/// (glibc).
struct Footprint {
    /// The least peak RSS, in KiB.
    hwm_kib: u64,
    /// The most of the library's code resident at the end, in KiB.
    code_kib: u64,
    /// Whether libm was mapped in any run.
    libm: bool,
    /// Whether libgcc_s was mapped in any run.
    libgcc: bool,
    /// The most of the thread's stack resident after its first block, in KiB.
    thread_stack_kib: u64,
}

fn footprint(preloaded: bool) -> Footprint {
    let reports = three_reports("footprint", preloaded);
    Footprint {
        hwm_kib: reports
            .iter()
            .map(|figures| figures["hwm_kib"])
            .min()
            .unwrap_or(u64::MAX),
        code_kib: reports
            .iter()
            .map(|figures| figures["code_kib"])
            .max()
            .unwrap_or(u64::MAX),
        libm: reports.iter().any(|figures| figures["libm"] != 0),
        libgcc: reports.iter().any(|figures| figures["libgcc"] != 0),
        thread_stack_kib: reports
            .iter()
            .map(|figures| figures["thread_stack_kib"])
            .max()
            .unwrap_or(u64::MAX),
    }
}

/// Stack a thread may keep resident beyond glibc's for allocating its first block, in KiB: a
/// page. Every thread of a process pays it; the first allocation's 16 KiB buffer for reading
/// the process's maps, set up on every thread's first call though only the first reads, made
/// it 16 KiB.
const THREAD_STACK_EXTRA_KIB: u64 = 4;

/// What a process pays for loading nodalloc at all: no libm, no libgcc_s (the library links no
/// Rust standard library, whose unwinder needs it), and (release builds) a peak RSS within
/// [`FOOTPRINT_EXTRA_KIB`] of the same program under glibc, after a third of a second of the
/// maintenance thread's passes over every class of the node heaps, with at most
/// [`CODE_KIB_MAX`] of the library's code resident.
#[test]
fn a_small_program_pays_little_for_loading_nodalloc() {
    let ours = footprint(true);
    let glibc = footprint(false);
    assert!(!ours.libm, "libnodalloc.so brings libm into the process");
    assert!(
        !ours.libgcc,
        "libnodalloc.so brings libgcc_s into the process: it links Rust's standard library"
    );
    assert_eq!(
        glibc.code_kib, 0,
        "footprint.c found libnodalloc's code without the preload"
    );
    assert!(
        ours.code_kib > 0,
        "footprint.c found no code of libnodalloc under the preload"
    );
    if cfg!(debug_assertions) {
        // A debug build's code is several times bigger: only the release bound means anything.
        return;
    }
    assert!(
        ours.thread_stack_kib <= glibc.thread_stack_kib + THREAD_STACK_EXTRA_KIB,
        "a thread keeps {} KiB of its stack resident after its first block against glibc's {} \
         KiB, bound {THREAD_STACK_EXTRA_KIB} KiB more",
        ours.thread_stack_kib,
        glibc.thread_stack_kib
    );
    let extra = ours.hwm_kib.saturating_sub(glibc.hwm_kib);
    assert!(
        extra <= FOOTPRINT_EXTRA_KIB,
        "peak RSS {} KiB against glibc's {} KiB: {extra} KiB more, bound {FOOTPRINT_EXTRA_KIB}",
        ours.hwm_kib,
        glibc.hwm_kib
    );
    assert!(
        ours.code_kib <= CODE_KIB_MAX,
        "{} KiB of the library's code resident, bound {CODE_KIB_MAX}: the functions the \
         program runs are not together (scripts/hot-code.sh lists them)",
        ours.code_kib
    );
}

/// Resident memory a thread may cost beyond glibc's, in KiB, idle and holding a block: its
/// heap's first page, which holds the heap's fields, its class tables and the lists of the
/// small classes, and (holding a block) the page of objects its first refill of the class
/// takes. A heap written whole at its thread's start, with every list configured, cost 17 KiB
/// more than glibc's idle thread and 19–20 more than one holding a block; one page-aligned,
/// with its lists configured at their class's first use, 6–7 and 9–11 (docs/JOURNAL.md,
/// "Thirty-fourth round"); with the new thread's start block in a static slot rather than
/// from `malloc` (a free of it configured a list and took a page of 32-byte objects), 3–4
/// and 5–7 ("Thirty-fifth round").
const THREAD_EXTRA_KIB: [(bool, u64); 2] = [(true, 7), (false, 11)];

/// The KiB a thread costs, from `tests/c/thread_footprint.c` (64 threads waiting on a barrier,
/// each holding a block or, `idle`, none): the least of three runs.
fn thread_kib(preloaded: bool, idle: bool) -> u64 {
    let args: &[&str] = if idle { &["idle"] } else { &[] };
    three_reports_with("thread_footprint", args, preloaded)
        .iter()
        .map(|figures| figures["kib_per_thread"])
        .min()
        .unwrap_or(u64::MAX)
}

/// A thread costs little more than glibc's (release builds): its heap is written up to its
/// lists, and a list only once its class is used, whether the thread allocates or not.
#[test]
fn a_thread_costs_a_page_or_two_of_heap() {
    if cfg!(debug_assertions) {
        return;
    }
    for (idle, bound) in THREAD_EXTRA_KIB {
        let ours = thread_kib(true, idle);
        let glibc = thread_kib(false, idle);
        assert!(
            ours <= glibc + bound,
            "a thread ({}) costs {ours} KiB against glibc's {glibc} KiB, bound {bound} KiB more",
            if idle { "idle" } else { "holding a block" }
        );
    }
}

/// The most bytes of thread-local storage the library may declare. glibc gives every thread a
/// copy of it (and the main thread one at start), the initial image copied in as the thread is
/// created: the crate face's thread heap (16 KiB) in there cost each thread four pages.
const TLS_BYTES_MAX: u64 = 1024;

/// The file and memory sizes of a shared object's `PT_TLS` segment (zeros when it has none).
fn tls_segment(library: &Path) -> (u64, u64) {
    let elf = std::fs::read(library).unwrap();
    let half = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let word = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(
        &elf[..5],
        b"\x7fELF\x02",
        "not a 64-bit ELF file: {library:?}"
    );
    let (table, entry_size, entries) = (word(0x20) as usize, half(0x36) as usize, half(0x38));
    const PT_TLS: u32 = 7;
    (0..usize::from(entries))
        .map(|index| table + index * entry_size)
        .find(|&header| u32::from_le_bytes(elf[header..header + 4].try_into().unwrap()) == PT_TLS)
        .map_or((0, 0), |header| (word(header + 0x20), word(header + 0x28)))
}

/// The library's thread-local storage is a few words (the thread's heap pointer, secure mode's
/// and the call-site walk's state), not a thread heap: nothing the library links refers to the
/// crate face's thread-local heap.
#[test]
fn every_thread_gets_only_a_few_words_of_the_librarys_thread_local_storage() {
    let (file_bytes, memory_bytes) = tls_segment(&library());
    assert!(
        memory_bytes <= TLS_BYTES_MAX,
        "the library's TLS segment holds {memory_bytes} bytes ({file_bytes} initialised), \
         which every thread copies; bound {TLS_BYTES_MAX}"
    );
}

/// The library exports its C and C++ interface and nothing of the Rust runtime it is built
/// from: an exported `rust_eh_personality` (the one the library defines for the precompiled
/// `core`, which lets every exception through) would take the place of the real one, under
/// `LD_PRELOAD`, in a program that links Rust's standard library as a shared object, and its
/// panics would stop unwinding. `nm -D` lists the dynamic symbols the library defines.
#[test]
fn the_library_exports_nothing_of_the_rust_runtime() {
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(library())
        .output()
        .expect("run nm (binutils)");
    assert!(output.status.success(), "nm -D failed: {output:?}");
    let symbols = String::from_utf8_lossy(&output.stdout);
    let names: Vec<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    assert!(
        names.contains(&"malloc"),
        "nm -D lists no malloc: {symbols}"
    );
    let runtime: Vec<&&str> = names
        .iter()
        .filter(|name| {
            name.starts_with("rust_")
                || name.starts_with("__rust")
                || name.starts_with("_ZN")
                || name.starts_with("_R")
        })
        .collect();
    assert!(
        runtime.is_empty(),
        "the library exports Rust runtime symbols: {runtime:?}"
    );
}

/// The most pages a fork may cost with nodalloc (child and parent together, per fork) beyond
/// what the same program costs under glibc: the fork handlers take and release only the locks
/// of the size classes in use, each on a page of its own. Measured 15 more (33 against 18 in a
/// loop of one class; the handlers locked every class before, 242 a fork).
const FORK_EXTRA_PAGES: u64 = 64;

/// `tests/c/fork_pages.c`'s minor faults per fork (children plus parent), the least of three
/// runs, with nodalloc preloaded or without it (glibc).
fn fork_pages(preloaded: bool) -> u64 {
    three_reports("fork_pages", preloaded)
        .iter()
        .map(|figures| figures["child_faults"] + figures["parent_faults"])
        .min()
        .unwrap_or(u64::MAX)
}

/// A fork copies on write only the pages the allocator's fork handlers must write: the locks
/// of the classes in use, not one page per size class of every node.
#[test]
fn a_fork_copies_few_of_the_allocators_pages() {
    let ours = fork_pages(true);
    let glibc = fork_pages(false);
    assert!(
        ours <= glibc + FORK_EXTRA_PAGES,
        "{ours} pages copied a fork against glibc's {glibc}: bound {FORK_EXTRA_PAGES} more"
    );
}
