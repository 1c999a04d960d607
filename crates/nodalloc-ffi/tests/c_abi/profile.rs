//! Heap profiles (`NODALLOC_PROFILE`) through the C library, read by Google's `pprof` (the
//! reader of record; `scripts/setup.sh` installs it with `go install`).

use super::*;
use nodalloc_testkit::{pprof, pprof_total, skip, Need};

/// The bytes `pprof -top` gives each function of `profile` for `sample` (cumulative: a
/// site's bytes whichever frame of it is the leaf).
fn top(pprof: &Path, profile: &Path, sample: &str) -> HashMap<String, u64> {
    let out = Command::new(pprof)
        .args(["-top", "-cum", "-unit=B", "-nodecount=1000"])
        .arg(format!("-sample_index={sample}"))
        .arg(profile)
        .output()
        .expect("running pprof");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pprof -top {} failed: {}{}",
        profile.display(),
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut bytes = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // flat flat% sum% cum cum% name
        if fields.len() >= 6 && fields[1].ends_with('%') && fields[4].ends_with('%') {
            if let Some(cum) = fields[3].strip_suffix('B').and_then(|n| n.parse().ok()) {
                bytes.insert(fields[5..].join(" "), cum);
            }
        }
    }
    bytes
}

/// Runs `program` (`profile` or a build of it) with profiling on, sampled every [`RATE`] on
/// average, its profile written on demand to a scratch directory named after `case`; returns
/// the profile's path and the true bytes of each site and of the array holding the kept blocks.
fn profiled_run(
    case: &str,
    program: &str,
    mode: Mode,
    env: &[(&str, &str)],
) -> (PathBuf, HashMap<String, u64>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("profile-{case}-{mode:?}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("dump.pb");
    let mut command = command(program, mode);
    command
        .arg(&profile)
        .env("NODALLOC_PROFILE", "1")
        .env("NODALLOC_PROFILE_RATE", RATE)
        .envs(env.iter().copied());
    let finished = run_passing(program, mode, &mut command);
    let truths = finished
        .stdout
        .lines()
        .filter_map(|line| {
            let (name, bytes) = line.split_once(' ')?;
            Some((name.to_string(), bytes.trim().parse().ok()?))
        })
        .collect();
    (profile, truths)
}

/// The mean bytes between samples in these tests: 2 KiB. A site's estimate strays from its
/// true bytes by the sampling's spread alone, which shrinks with the number of samples. At 8 KiB
/// the spread of `keep_medium` (8 MiB of 700-byte blocks, about 1 000 samples) was 3.0 % in 300
/// runs, so a ±10 % bound was 3.3 standard deviations and failed about once in a thousand
/// checks (one CI run found 10.0 %). At 2 KiB it was 1.4 % in 100 runs (at most 3.4 %), and
/// ±10 % is seven standard deviations.
const RATE: &str = "2K";

/// Within ±10 % of `truth`.
fn assert_near(what: &str, found: Option<&u64>, truth: u64, listing: &HashMap<String, u64>) {
    let found = *found.unwrap_or_else(|| panic!("{what}: not in the profile: {listing:?}"));
    let error = (found as f64 - truth as f64).abs() / truth as f64;
    assert!(
        error <= 0.10,
        "{what}: {found} bytes in the profile, {truth} true ({:.1} % off): {listing:?}",
        error * 100.0
    );
}

/// Three call sites with known totals (`tests/c/profile.c`), sampled every [`RATE`] on average
/// (4 000 to 8 000 samples for each kept site): pprof names the two kept sites with their live
/// bytes within ±10 %, not the freed one, which it names with its allocated bytes. The same
/// for the profile written on demand while another thread allocates and for the one written
/// at exit (`%p` in its name); a dump to a missing directory is refused with ENOENT and the
/// program goes on (checked by the program). A child forked after the allocations frees
/// keep_small's blocks: its own profile has them allocated and not live. Against a debug build
/// of the library, which cannot see the sites (see below), the sums instead.
#[test]
fn pprof_names_the_kept_call_sites_with_their_live_bytes() {
    let Some(pprof) = pprof() else {
        return skip(
            Need::OnCi,
            "needs Google's pprof (scripts/setup.sh installs it with go install)",
        );
    };
    for mode in MODES {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("profile-{mode:?}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let on_demand = dir.join("dump.pb");
        let child = dir.join("child.pb");
        let mut program = command("profile", mode);
        program
            .arg(&on_demand)
            .arg(&child)
            .env("NODALLOC_PROFILE", "1")
            .env("NODALLOC_PROFILE_RATE", RATE)
            .env("NODALLOC_PROFILE_OUT", dir.join("exit.%p.pb"));
        let finished = run_passing("profile", mode, &mut program);
        let truth = |site: &str| -> u64 {
            finished
                .stdout
                .lines()
                .find_map(|line| line.strip_prefix(site)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no truth for {site}: {}", finished.describe()))
        };
        let at_exit: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().contains("exit."))
            .collect();
        assert_eq!(at_exit.len(), 1, "one profile at exit: {at_exit:?}");
        assert!(
            !at_exit[0].to_string_lossy().contains("%p"),
            "%p was not replaced: {at_exit:?}"
        );
        for profile in [&on_demand, &at_exit[0]] {
            let live = top(&pprof, profile, "inuse_space");
            if cfg!(debug_assertions) {
                // A debug build of the library keeps no frame pointer in `malloc`, which then
                // has a frame of its own: the return address into the caller is lost, and the
                // stacks start a frame higher. What the main thread holds still adds up.
                let root = "__libc_start_call_main";
                let kept = truth("keep_small") + truth("keep_medium") + truth("array");
                assert_near(root, live.get(root), kept, &live);
                let allocated = top(&pprof, profile, "alloc_space");
                assert_near(root, allocated.get(root), kept + truth("churn"), &allocated);
                continue;
            }
            assert_near(
                "keep_small",
                live.get("keep_small"),
                truth("keep_small"),
                &live,
            );
            assert_near(
                "keep_medium",
                live.get("keep_medium"),
                truth("keep_medium"),
                &live,
            );
            assert!(
                live.get("churn").copied().unwrap_or(0) == 0,
                "the freed site holds live bytes: {live:?}"
            );
            let allocated = top(&pprof, profile, "alloc_space");
            assert_near("churn", allocated.get("churn"), truth("churn"), &allocated);
        }
        if !cfg!(debug_assertions) {
            // The child freed its copies of keep_small's blocks: its profile has them
            // allocated, not live; the parent's blocks are still its own.
            let live = top(&pprof, &child, "inuse_space");
            assert!(
                live.get("keep_small").copied().unwrap_or(0) == 0,
                "the child's freed blocks are live in its profile: {live:?}"
            );
            assert_near(
                "keep_medium",
                live.get("keep_medium"),
                truth("keep_medium"),
                &live,
            );
            let allocated = top(&pprof, &child, "alloc_space");
            let small = truth("keep_small");
            assert_near("keep_small", allocated.get("keep_small"), small, &allocated);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// An exit profile whose file cannot be written costs one warning line; the program's own
/// exit status stands.
#[test]
fn an_unwritable_profile_path_warns_once_and_the_program_exits_as_it_would() {
    for mode in MODES {
        let mut program = command("profile", mode);
        program
            .env("NODALLOC_PROFILE", "1")
            .env("NODALLOC_PROFILE_OUT", "/nonexistent-directory/exit.pb");
        let finished = run_passing("profile", mode, &mut program);
        let warnings: Vec<&str> = finished
            .stderr
            .lines()
            .filter(|line| line.contains("cannot write the heap profile"))
            .collect();
        assert_eq!(warnings.len(), 1, "{}", finished.describe());
        assert!(warnings[0].contains("/nonexistent-directory/exit.pb"));
    }
}

/// Runs `program` with `env` in each mode (see [`profiled_run`]): each kept site's live bytes
/// within ±10 %, and with `shallow` (a program without frame pointers) `main` holding only the
/// array it allocated itself, no site's bytes (no frame read from a register that is no frame
/// pointer). Against a debug build of the library, which cannot see the sites, the live total.
fn check_kept_sites(case: &str, program: &str, env: &[(&str, &str)], shallow: bool) {
    let Some(pprof) = pprof() else {
        return skip(
            Need::OnCi,
            "needs Google's pprof (scripts/setup.sh installs it)",
        );
    };
    for mode in MODES {
        let (profile, truth) = profiled_run(case, program, mode, env);
        let live = top(&pprof, &profile, "inuse_space");
        if cfg!(debug_assertions) {
            let kept = truth["keep_small"] + truth["keep_medium"] + truth["array"];
            let found = pprof_total(&pprof, &profile, "inuse_space");
            assert_near("the live total", Some(&found), kept, &live);
        } else {
            for site in ["keep_small", "keep_medium"] {
                assert_near(site, live.get(site), truth[site], &live);
            }
            if shallow {
                assert_near("main", live.get("main"), truth["array"], &live);
            }
        }
        std::fs::remove_dir_all(profile.parent().unwrap()).unwrap();
    }
}

/// The sites' allocations shared among four threads: each site's live bytes still add up.
#[test]
fn the_samples_of_four_threads_add_up_to_each_sites_bytes() {
    check_kept_sites("threads", "profile", &[("PROFILE_THREADS", "4")], false);
}

/// With call-site partitions on, the heap counts through the partition lists instead of the
/// class lists' budgets (DESIGN, "Heap profiles"): each site's live bytes still add up.
#[test]
fn with_call_site_partitions_the_sites_bytes_still_add_up() {
    check_kept_sites("callsite", "profile", &[("NODALLOC_CALLSITE", "64")], false);
}

/// `keep_medium`'s blocks from a first-class heap (`nodalloc_heap_malloc`): sampled as
/// `malloc`'s are, each site's live bytes still add up.
#[test]
fn a_first_class_heaps_blocks_are_sampled_at_their_site() {
    check_kept_sites("heap", "profile", &[("PROFILE_HEAP", "1")], false);
}

/// The same program built without frame pointers (`profile_nofp.c`): every stack is one
/// frame, the allocation's caller, which names each site with its bytes.
#[test]
fn a_program_without_frame_pointers_gets_shallow_stacks_that_name_its_sites() {
    check_kept_sites("nofp", "profile_nofp", &[], true);
}

/// `NODALLOC_PROFILE_LEAKS=1`: at exit, one line says what is still live (the kept sites and
/// their array, ±10 %, sampled every [`RATE`]), then the sites holding most of it, largest first,
/// each frame as `file+offset`: `addr2line` turns the first site's first frame into
/// `keep_small` (16 of the 27 MiB), the second's into `keep_medium`.
#[test]
fn a_leak_report_at_exit_names_what_is_still_live() {
    if cfg!(debug_assertions) {
        // The debug library's stacks start above the allocating function (see above).
        return;
    }
    for mode in MODES {
        let mut command = command("profile", mode);
        command
            .env("NODALLOC_PROFILE", "1")
            .env("NODALLOC_PROFILE_RATE", RATE)
            .env("NODALLOC_PROFILE_LEAKS", "1");
        let finished = run_passing("profile", mode, &mut command);
        let truth = |site: &str| -> u64 {
            finished
                .stdout
                .lines()
                .find_map(|line| line.strip_prefix(site)?.trim().parse().ok())
                .unwrap()
        };
        let report: Vec<&str> = finished
            .stderr
            .lines()
            .skip_while(|line| !line.starts_with("nodalloc: heap profile at exit: ~"))
            .collect();
        assert!(
            !report.is_empty(),
            "no leak report: {}",
            finished.describe()
        );
        let mib: f64 = report[0]
            .strip_prefix("nodalloc: heap profile at exit: ~")
            .and_then(|rest| rest.split_once(" MiB"))
            .and_then(|(number, _)| number.parse().ok())
            .unwrap_or_else(|| panic!("the summary line: {}", report[0]));
        let kept = truth("keep_small") + truth("keep_medium") + truth("array");
        let found = (mib * (1 << 20) as f64) as u64;
        assert_near(
            "the live bytes at exit",
            Some(&found),
            kept,
            &HashMap::new(),
        );
        let binary = program("profile", mode);
        let name = binary.file_name().unwrap().to_string_lossy().into_owned();
        for (line, function) in report[1..3].iter().zip(["keep_small", "keep_medium"]) {
            let frame = line
                .split_whitespace()
                .find(|word| word.starts_with(&format!("{name}+0x")))
                .unwrap_or_else(|| panic!("no frame of {name}: {line}"));
            let offset = &frame[name.len() + 1..];
            let out = Command::new("addr2line")
                .args(["-f", "-e"])
                .arg(&binary)
                .arg(offset)
                .output()
                .expect("addr2line");
            let resolved = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                resolved.lines().next(),
                Some(function),
                "{line}: {resolved}"
            );
        }
    }
}

/// Off means off: with `NODALLOC_PROFILE` unset, `free` and `malloc` in their steady state (64 B
/// pairs after a warm-up, `pairs.c`, counted by callgrind) run no instruction of the profile's
/// code (`profile/`, `thread/profile.rs`); with it set, they do (lean mode's free), so the check
/// can tell. Instruction counts, not time: deterministic.
#[test]
fn off_means_off_the_fast_paths_run_none_of_the_profiles_code() {
    let has_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_valgrind {
        return skip(Need::OnCi, "needs valgrind (scripts/setup.sh installs it)");
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("off-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pairs = 20_000u64;
    let count = |profile: &str| {
        let out = dir.join(format!("callgrind.{profile}"));
        let program = command("pairs", Mode::Linked);
        let mut valgrind = Command::new("valgrind");
        valgrind
            .args(["--tool=callgrind", "--collect-atstart=no"])
            .arg("--toggle-collect=run_pairs")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(program.get_program())
            .arg(pairs.to_string())
            .env("NODALLOC_PROFILE", profile);
        let finished = run_passing("pairs", Mode::Linked, &mut valgrind);
        let annotated = Command::new("callgrind_annotate")
            .args(["--inclusive=no", "--threshold=100"])
            .arg(&out)
            .output()
            .expect("running callgrind_annotate");
        assert!(annotated.status.success(), "{}", finished.describe());
        String::from_utf8_lossy(&annotated.stdout).into_owned()
    };
    let profile_lines = |annotated: &str| {
        annotated
            .lines()
            .filter(|line| line.contains("/profile/") || line.contains("/profile.rs:"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let off = count("0");
    assert!(
        off.contains("run_pairs"),
        "callgrind counted nothing in run_pairs:\n{off}"
    );
    assert_eq!(
        profile_lines(&off),
        Vec::<String>::new(),
        "with profiling off the fast paths ran the profile's code:\n{off}"
    );
    let on = count("1");
    assert!(
        !profile_lines(&on).is_empty(),
        "with profiling on no profile code was counted (the check cannot tell):\n{on}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
