//! Running programs that call `malloc` directly once per allocator, with the
//! allocator's shared library in `LD_PRELOAD`: finding the libraries,
//! building this workspace's artifacts and compiling C helpers at run time,
//! running a child with a time limit and parsing what it prints.
//!
//! Used by the `c`, `program` and `callgrind` suites, by the `http` suite
//! (which preloads nothing but runs its server the same way) and the tests.
//!
//! The contenders are glibc (nothing preloaded), `libnodalloc.so` (built from
//! this workspace on demand) and the peers' Debian libraries (mimalloc,
//! jemalloc, tcmalloc); a library that is not installed is skipped and said
//! so. Every child also preloads a tiny probe library (`hwm.c`) whose
//! destructor appends the process's `VmHWM` to a file: the peak RSS of the
//! program alone, which `getrusage` cannot give for a child spawned by a
//! large parent (Linux folds the parent's high-water mark into it when the
//! child is created with `vfork` semantics, as `posix_spawn` does).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The peak-RSS probe's source (see [`compile_c`]).
pub const HWM_C: &[(&str, &str)] = &[("hwm.c", include_str!("../c/hwm.c"))];

/// One contender of the C-level suites.
#[derive(Clone, Debug)]
pub struct PreloadAlloc {
    pub name: String,
    /// Library to preload; `None` for glibc.
    pub lib: Option<PathBuf>,
    /// Extra environment (e.g. `NODALLOC_SECURE=1`).
    pub env: Vec<(String, String)>,
}

/// Where the Debian packages put the peers' libraries.
const LIB_DIRS: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

/// (allocator, library file, Debian package).
pub const PEERS: [(&str, &str, &str); 3] = [
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    (
        "tcmalloc",
        "libtcmalloc_minimal.so.4",
        "libtcmalloc-minimal4",
    ),
];

pub fn find_lib(file: &str) -> Option<PathBuf> {
    LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(file))
        .find(|p| p.exists())
}

/// The workspace root, from this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/nodalloc-bench is two levels below the workspace")
        .to_path_buf()
}

/// `target/<profile>/` of the running binary (also from a test executable in
/// `target/<profile>/deps/`).
pub fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut dir = exe.parent().ok_or("no exe dir")?.to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

/// Builds `file` (a library or binary of this workspace) with cargo into the
/// running binary's target directory and profile, unless it is already there
/// and `rebuild` is false, and returns its path.
pub fn build_artifact(cargo_args: &[&str], file: &str, rebuild: bool) -> Result<PathBuf, String> {
    let profile_dir = profile_dir()?;
    let artifact = profile_dir.join(file);
    if artifact.exists() && !rebuild {
        return Ok(artifact);
    }
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("exe dir has no name")?
        .to_string();
    let target_dir = profile_dir.parent().ok_or("no target dir")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet"])
        .args(cargo_args)
        .arg("--target-dir")
        .arg(target_dir);
    // Another artifact of this crate gets the running binary's features: the
    // same code is measured, and the shared target directory does not
    // flip-flop between feature sets.
    if cargo_args.contains(&"nodalloc-bench") {
        if !cfg!(feature = "numalloc") {
            cmd.arg("--no-default-features");
        }
        if cfg!(feature = "snmalloc-valgrind") {
            cmd.args(["--features", "snmalloc-valgrind"]);
        }
    }
    if profile == "release" {
        cmd.arg("--release");
    }
    let what = format!("cargo build {}", cargo_args.join(" "));
    let out = cmd
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{what} failed: {}",
            err.lines().last().unwrap_or("")
        ));
    }
    if artifact.exists() {
        Ok(artifact)
    } else {
        Err(format!("{} missing after {what}", artifact.display()))
    }
}

/// `libnodalloc.so`: `NODALLOC_BENCH_LIB` if set, else built (always, so it
/// matches the sources) into the running binary's target directory.
pub fn nodalloc_lib() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NODALLOC_BENCH_LIB") {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok(p)
        } else {
            Err(format!("NODALLOC_BENCH_LIB={} does not exist", p.display()))
        };
    }
    build_artifact(&["-p", "nodalloc-ffi"], "libnodalloc.so", true)
}

/// The contenders that exist on this machine, plus what was skipped and why.
pub fn contenders(nodalloc: Result<PathBuf, String>) -> (Vec<PreloadAlloc>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    match nodalloc {
        Ok(lib) => out.push(PreloadAlloc {
            name: "nodalloc".into(),
            lib: Some(lib),
            env: Vec::new(),
        }),
        Err(e) => skipped.push(format!("C suites: nodalloc: {e}")),
    }
    out.push(PreloadAlloc {
        name: "glibc".into(),
        lib: None,
        env: Vec::new(),
    });
    for (name, file, package) in PEERS {
        match find_lib(file) {
            Some(lib) => out.push(PreloadAlloc {
                name: name.into(),
                lib: Some(lib),
                env: Vec::new(),
            }),
            None => skipped.push(format!(
                "C suites: {name}: {file} not found (install the Debian package {package})"
            )),
        }
    }
    (out, skipped)
}

/// Compiles a C program (or, with `shared`, a shared object) named `name`
/// from `sources` (file name, text; headers included) with `cc` into `dir`,
/// unless the same sources were already built there.
pub fn compile_c(
    sources: &[(&str, &str)],
    name: &str,
    dir: &Path,
    shared: bool,
) -> Result<PathBuf, String> {
    let src_dir = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&src_dir).map_err(|e| format!("{}: {e}", src_dir.display()))?;
    let out = dir.join(if shared {
        format!("{name}.so")
    } else {
        name.to_string()
    });
    let fresh = sources
        .iter()
        .all(|(file, text)| std::fs::read_to_string(src_dir.join(file)).is_ok_and(|s| s == *text));
    if fresh && out.exists() {
        return Ok(out);
    }
    for (file, text) in sources {
        let path = src_dir.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-pthread", "-o"]).arg(&out);
    for (file, _) in sources.iter().filter(|(f, _)| f.ends_with(".c")) {
        cmd.arg(src_dir.join(file));
    }
    if shared {
        cmd.args(["-shared", "-fPIC"]);
    }
    let res = cmd
        .output()
        .map_err(|e| format!("{cc} not runnable ({e}); install a C compiler"))?;
    if !res.status.success() {
        let _ = std::fs::remove_file(&out);
        return Err(format!(
            "{cc} {name} failed: {}",
            String::from_utf8_lossy(&res.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ));
    }
    Ok(out)
}

/// Whether this nodalloc knows `NODALLOC_SECURE` (then the suites that
/// preload it also run it in secure mode).
pub fn secure_mode_available() -> bool {
    nodalloc::options()
        .iter()
        .any(|o| o.name == "NODALLOC_SECURE")
}

/// What one child run produced.
#[derive(Clone, Debug)]
pub struct ChildRun {
    pub wall: Duration,
    pub stdout: String,
    /// Largest `VmHWM` any process of the run reported, in KiB.
    pub hwm_kib: Option<u64>,
}

/// Runs `cmd` with `alloc` preloaded (and the probe), bounded by `limit`.
pub fn run_preloaded(
    mut cmd: Command,
    alloc: &PreloadAlloc,
    probe: Option<&Path>,
    scratch: &Path,
    limit: Duration,
) -> Result<ChildRun, String> {
    let mut preload: Vec<String> = Vec::new();
    if let Some(lib) = &alloc.lib {
        preload.push(lib.display().to_string());
    }
    // Unique per run: runs of one process may overlap (tests run in parallel).
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let hwm_file = scratch.join(format!(
        "hwm-{}-{}-{}",
        alloc.name,
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&hwm_file);
    if let Some(p) = probe {
        preload.push(p.display().to_string());
        cmd.env("NODALLOC_BENCH_HWM_FILE", &hwm_file);
    }
    if preload.is_empty() {
        cmd.env_remove("LD_PRELOAD");
    } else {
        cmd.env("LD_PRELOAD", preload.join(" "));
    }
    for (k, v) in &alloc.env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        match child.try_wait().map_err(|e| format!("wait: {e}"))? {
            Some(s) => break s,
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {limit:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let wall = start.elapsed();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!("{status}: {}", last.unwrap_or("no message")));
    }
    let hwm_kib = std::fs::read_to_string(&hwm_file).ok().and_then(|s| {
        s.lines()
            .filter_map(|l| l.strip_prefix("hwm_kib=")?.trim().parse::<u64>().ok())
            .max()
    });
    let _ = std::fs::remove_file(&hwm_file);
    Ok(ChildRun {
        wall,
        stdout,
        hwm_kib,
    })
}

/// The `key=value` fields of the `result` line of a classic workload.
pub fn result_fields(stdout: &str) -> Result<HashMap<String, String>, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("result "))
        .ok_or_else(|| "no result line".to_string())?;
    Ok(line
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect())
}

pub fn field<T: std::str::FromStr>(f: &HashMap<String, String>, key: &str) -> Result<T, String> {
    f.get(key)
        .ok_or_else(|| format!("result line has no {key}"))?
        .parse()
        .map_err(|_| format!("result field {key} does not parse"))
}

/// Lines `PREFIX a b ...` parsed as numbers (the first `n` fields).
pub fn numeric_lines(stdout: &str, prefix: &str, n: usize) -> Vec<Vec<f64>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .filter_map(|rest| {
            let v: Vec<f64> = rest
                .split_whitespace()
                .take(n)
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == n).then_some(v)
        })
        .collect()
}
