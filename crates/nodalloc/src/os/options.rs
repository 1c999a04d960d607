//! Every `NODALLOC_*` option in one table: its name, default and meaning. The table is the
//! documentation (`nodalloc::options()` lists it; the README's table is checked against it by a
//! test), and [`Options::from_env`] is the only reader of the environment.
//!
//! Options are read once, when the global arena starts, with `getenv` (no allocation). A value
//! that does not parse prints one warning line and the default is used.

use super::cpuset::{parse_decimal, trim};
use super::{env, read_file, warn};
use core::ffi::CStr;

/// One documented option.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The environment variable.
    pub name: &'static str,
    /// Its default, as written in the documentation.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// The options, in the order the documentation lists them.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "NODALLOC_BIND",
        default: "interleave",
        meaning: "thread binding policy: interleave (thread i to node i mod N), saturate (fill a \
                  node's CPUs first), none (follow the scheduler), or map:FILE (FILE lists a node \
                  per thread, cycled). Only acts with more than one node; never widens an \
                  affinity set by taskset, numactl or a cpuset",
    },
    OptionSpec {
        name: "NODALLOC_POLICY",
        default: "preferred",
        meaning: "memory policy of each node region: preferred (a full node spills to others) or \
                  bind (strict; the kernel fails allocations instead)",
    },
    OptionSpec {
        name: "NODALLOC_SIMULATE_NODES",
        default: "0",
        meaning: "simulate N nodes on this machine (1-32): CPUs are split into N fake nodes, no \
                  mbind is issued; for testing multi-node paths on a one-node machine",
    },
    OptionSpec {
        name: "NODALLOC_REGION_SIZE",
        default: "1T",
        meaning: "address space reserved per node (rounded down to a power of two, at least \
                  64M); shrunk automatically to fit RLIMIT_AS",
    },
    OptionSpec {
        name: "NODALLOC_COMMIT",
        default: "auto",
        meaning: "how the heap is charged to the kernel's commit limit: auto (on demand when \
                  vm.overcommit_memory is 2, else upfront), demand (reserve PROT_NONE, commit \
                  2 MiB chunks as they are first used), upfront (one MAP_NORESERVE reservation)",
    },
    OptionSpec {
        name: "NODALLOC_THP",
        default: "auto",
        meaning: "transparent huge pages: auto (bags of objects up to 4 KiB may share huge \
                  pages: MADV_HUGEPAGE when the kernel's mode is madvise; large, aligned and \
                  bigger objects stay on base pages, MADV_NOHUGEPAGE), on (huge pages for the \
                  whole heap), off (MADV_NOHUGEPAGE everywhere)",
    },
    OptionSpec {
        name: "NODALLOC_DECOMMIT_DELAY",
        default: "100",
        meaning: "milliseconds a free span stays committed before its pages may be returned to \
                  the OS",
    },
    OptionSpec {
        name: "NODALLOC_RETAIN",
        default: "8M",
        meaning: "committed free bytes each node keeps for reuse; only free memory beyond this \
                  budget is returned to the OS",
    },
    OptionSpec {
        name: "NODALLOC_LIMIT",
        default: "0",
        meaning: "hard limit on committed heap bytes (e.g. 512M); past it allocation fails \
                  cleanly (NULL + ENOMEM, or null in Rust) and succeeds again after frees; \
                  0 means no limit",
    },
    OptionSpec {
        name: "NODALLOC_STATS",
        default: "0",
        meaning: "1: print the statistics to stderr when the process exits",
    },
    OptionSpec {
        name: "NODALLOC_SECURE",
        default: "0",
        meaning: "1: secure mode: free-list links encoded with a random key and checked, a \
                  double-free check on every free, an inaccessible guard page right after each \
                  large object, a random allocation order in new bags; through the C library \
                  also a checked trailer and canary after every block (overflows, underflows, \
                  new/delete mismatches), freed blocks zeroed, checked and held in a \
                  quarantine, malloc(0) inaccessible; slower. The default is 1 when built with \
                  the cargo feature secure (NODALLOC_SECURE=0 still turns it off)",
    },
    OptionSpec {
        name: "NODALLOC_BACKGROUND",
        default: "release",
        meaning: "the maintenance thread, started by the C library when the program creates its \
                  first thread (from Rust: nodalloc::start_background()), never in a program \
                  that does neither. release: it runs every node's upkeep each upkeep period \
                  (rings nobody touched, the sweep, decommits that fell due), so memory freed \
                  before the threads went quiet goes back to the OS within the decommit delay; \
                  1: it also makes the releases frees leave to it and populates chunks and \
                  carves bags of big objects ahead of a growing heap; 0: none",
    },
    OptionSpec {
        name: "NODALLOC_RING_SHARDS",
        default: "0",
        meaning: "transfer rings per size class of each node, chosen by the CPU a thread runs                   on, so the cores of a big node do not all meet at one ring: 0 is automatic                   (one per 16 CPUs of the largest node: 1 up to 16 CPUs, where nothing                   changes), 1-8 sets the count",
    },
    OptionSpec {
        name: "NODALLOC_CALLSITE",
        default: "0",
        meaning: "call-site partitions: P > 0 gives every (node, partition, size class) its own \
                  bags; the C library puts a block in partition hash(return address of its \
                  malloc call) mod P, the Rust face in the partition of the thread's \
                  nodalloc::partition scope. 0 (or 1, one partition) is off, the fast paths \
                  untouched; at most 4096",
    },
    OptionSpec {
        name: "NODALLOC_CALLSITE_DEPTH",
        default: "1",
        meaning: "the C library's call site: 1 is malloc's caller; 2-8 walk that many frames up \
                  through frame pointers, for programs that allocate through a wrapper \
                  (xmalloc, g_malloc); where a frame has no frame pointer, the walk stops at the \
                  deepest frame it could verify",
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindPolicy {
    Interleave,
    Saturate,
    None,
    Map,
}

/// `NODALLOC_THP`: where the heap may use transparent huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThpChoice {
    /// The dense pools (bags of objects up to a page), as the kernel's mode allows; the sparse
    /// pools never.
    Auto,
    /// The whole heap, dense and sparse pools alike.
    On,
    /// Nowhere.
    Off,
}

/// Longest thread-to-node map a map file may give; longer files are cut here.
pub const MAX_BIND_MAP: usize = 256;

#[derive(Clone, Copy)]
pub struct Options {
    pub bind: BindPolicy,
    pub bind_map: [u16; MAX_BIND_MAP],
    pub bind_map_length: usize,
    pub strict_binding: bool,
    pub simulate_nodes: usize,
    pub region_bytes: u64,
    pub thp: ThpChoice,
    /// `Some(true)`: commit on demand; `Some(false)`: upfront; `None`: by overcommit mode.
    pub commit_on_demand: Option<bool>,
    pub decommit_delay_ns: u64,
    pub retain_bytes: u64,
    pub limit_bytes: u64,
    pub stats_at_exit: bool,
    /// Secure mode (see `arena::secure`).
    pub secure: bool,
    /// The maintenance thread (`instance/background.rs`).
    pub background: Background,
    /// Ring shards per class and node (0: automatic).
    pub ring_shards: usize,
    /// Call-site partitions, P (0: off).
    pub callsite_partitions: usize,
    /// Frames from `malloc` to the call site (1: its caller).
    pub callsite_depth: usize,
}

/// What the maintenance thread does (`NODALLOC_BACKGROUND`; see `instance/background.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Background {
    /// No maintenance thread.
    Off,
    /// Upkeep passes only: a program that went quiet gives its freed memory back within the
    /// decommit delay. Frees still make their own releases. The default: it costs a wake-up per
    /// upkeep period and no memory.
    Release,
    /// Also the releases frees leave to it, and chunks and bags prepared ahead of a growing
    /// heap (`1`).
    Full,
}

pub const DEFAULT_REGION_BYTES: u64 = 1 << 40;
pub const MIN_REGION_BYTES: u64 = 64 << 20;
const MAX_SIMULATED_NODES: usize = 32;
/// The most call-site partitions (the node layer's `MAX_PARTITIONS`).
pub const MAX_CALLSITE_PARTITIONS: usize = 4096;

/// The most transfer rings per size class and node (`NODALLOC_RING_SHARDS`).
pub const MAX_RING_SHARDS: usize = 8;

/// The deepest call site the C library walks to.
pub const MAX_CALLSITE_DEPTH: usize = 8;

impl Default for Options {
    fn default() -> Self {
        Options {
            bind: BindPolicy::Interleave,
            bind_map: [0; MAX_BIND_MAP],
            bind_map_length: 0,
            strict_binding: false,
            simulate_nodes: 0,
            region_bytes: DEFAULT_REGION_BYTES,
            thp: ThpChoice::Auto,
            commit_on_demand: None,
            decommit_delay_ns: 100_000_000,
            retain_bytes: 8 << 20,
            limit_bytes: 0,
            stats_at_exit: false,
            secure: cfg!(feature = "secure"),
            background: Background::Release,
            ring_shards: 0,
            callsite_partitions: 0,
            callsite_depth: 1,
        }
    }
}

/// Whether the environment asks for secure mode, as [`Options::from_env`] reads it (silently:
/// that one warns about a bad value), for a face that must know before the allocator starts.
pub fn secure_from_env() -> bool {
    match env(c"NODALLOC_SECURE").map(trim) {
        Some(b"1" | b"yes" | b"true") => true,
        Some(b"0" | b"no" | b"false") => false,
        _ => cfg!(feature = "secure"),
    }
}

impl Options {
    /// Reads every option from the environment, warning about (and ignoring) bad values.
    pub fn from_env() -> Options {
        let mut options = Options::default();
        if let Some(value) = env(c"NODALLOC_BIND") {
            options.set_bind(value);
        }
        if let Some(value) = env(c"NODALLOC_POLICY") {
            match trim(value) {
                b"preferred" => options.strict_binding = false,
                b"bind" => options.strict_binding = true,
                _ => bad_value("NODALLOC_POLICY", value, "preferred or bind", "preferred"),
            }
        }
        if let Some(value) = env(c"NODALLOC_SIMULATE_NODES") {
            match parse_decimal(value) {
                Some(n) if n <= MAX_SIMULATED_NODES => options.simulate_nodes = n,
                _ => bad_value(
                    "NODALLOC_SIMULATE_NODES",
                    value,
                    "a node count from 0 to 32",
                    "0",
                ),
            }
        }
        if let Some(value) = env(c"NODALLOC_REGION_SIZE") {
            match parse_size(value) {
                Some(bytes) if bytes >= MIN_REGION_BYTES => {
                    options.region_bytes = 1 << (63 - bytes.leading_zeros())
                }
                _ => bad_value(
                    "NODALLOC_REGION_SIZE",
                    value,
                    "a size of at least 64M",
                    "1T",
                ),
            }
        }
        if let Some(value) = env(c"NODALLOC_THP") {
            match trim(value) {
                b"auto" => options.thp = ThpChoice::Auto,
                b"on" | b"1" | b"always" => options.thp = ThpChoice::On,
                b"off" | b"0" | b"never" => options.thp = ThpChoice::Off,
                _ => bad_value("NODALLOC_THP", value, "auto, on or off", "auto"),
            }
        }
        if let Some(value) = env(c"NODALLOC_COMMIT") {
            match trim(value) {
                b"auto" => options.commit_on_demand = None,
                b"demand" => options.commit_on_demand = Some(true),
                b"upfront" => options.commit_on_demand = Some(false),
                _ => bad_value("NODALLOC_COMMIT", value, "auto, demand or upfront", "auto"),
            }
        }
        if let Some(value) = env(c"NODALLOC_DECOMMIT_DELAY") {
            match parse_decimal(value) {
                Some(ms) if ms <= 3_600_000 => options.decommit_delay_ns = ms as u64 * 1_000_000,
                _ => bad_value(
                    "NODALLOC_DECOMMIT_DELAY",
                    value,
                    "milliseconds (0-3600000)",
                    "100",
                ),
            }
        }
        if let Some(value) = env(c"NODALLOC_RETAIN") {
            match parse_size(value) {
                Some(bytes) => options.retain_bytes = bytes,
                None => bad_value("NODALLOC_RETAIN", value, "a size such as 8M", "8M"),
            }
        }
        if let Some(value) = env(c"NODALLOC_LIMIT") {
            match parse_size(value) {
                Some(bytes) => options.limit_bytes = bytes,
                None => bad_value(
                    "NODALLOC_LIMIT",
                    value,
                    "a size such as 512M",
                    "0 (no limit)",
                ),
            }
        }
        if let Some(value) = env(c"NODALLOC_STATS") {
            options.stats_at_exit = parse_switch("NODALLOC_STATS", value);
        }
        if let Some(value) = env(c"NODALLOC_SECURE") {
            match trim(value) {
                b"1" | b"yes" | b"true" => options.secure = true,
                b"0" | b"no" | b"false" => options.secure = false,
                b"" => {}
                _ => bad_value(
                    "NODALLOC_SECURE",
                    value,
                    "0 or 1",
                    if cfg!(feature = "secure") { "1" } else { "0" },
                ),
            }
        }
        if let Some(value) = env(c"NODALLOC_BACKGROUND") {
            options.background = parse_background(value).unwrap_or_else(|| {
                bad_value("NODALLOC_BACKGROUND", value, "release, 1 or 0", "release");
                Background::Release
            });
        }
        if let Some(value) = env(c"NODALLOC_RING_SHARDS") {
            match parse_decimal(value) {
                Some(count) if count <= MAX_RING_SHARDS => options.ring_shards = count,
                _ => bad_value("NODALLOC_RING_SHARDS", value, "0-8", "0 (automatic)"),
            }
        }
        if let Some(value) = env(c"NODALLOC_CALLSITE") {
            match parse_decimal(value) {
                Some(count) if count <= MAX_CALLSITE_PARTITIONS => {
                    options.callsite_partitions = count
                }
                _ => bad_value("NODALLOC_CALLSITE", value, "0-4096", "0"),
            }
        }
        if let Some(value) = env(c"NODALLOC_CALLSITE_DEPTH") {
            match parse_decimal(value) {
                Some(depth) if (1..=MAX_CALLSITE_DEPTH).contains(&depth) => {
                    options.callsite_depth = depth
                }
                _ => bad_value("NODALLOC_CALLSITE_DEPTH", value, "1-8", "1"),
            }
        }
        options
    }

    fn set_bind(&mut self, value: &[u8]) {
        match trim(value) {
            b"interleave" => self.bind = BindPolicy::Interleave,
            b"saturate" => self.bind = BindPolicy::Saturate,
            b"none" => self.bind = BindPolicy::None,
            text if text.starts_with(b"map:") => {
                if self.load_bind_map(&text[4..]) {
                    self.bind = BindPolicy::Map;
                }
            }
            _ => bad_value(
                "NODALLOC_BIND",
                value,
                "interleave, saturate, none or map:FILE",
                "interleave",
            ),
        }
    }

    /// Loads a map file: node numbers separated by spaces, commas or newlines, `#` comments.
    fn load_bind_map(&mut self, path: &[u8]) -> bool {
        let mut path_buffer = [0u8; 256];
        if path.is_empty() || path.len() >= path_buffer.len() {
            bad_value(
                "NODALLOC_BIND",
                path,
                "map:FILE with a readable file",
                "interleave",
            );
            return false;
        }
        path_buffer[..path.len()].copy_from_slice(path);
        let Ok(path_cstr) = CStr::from_bytes_until_nul(&path_buffer) else {
            return false;
        };
        let mut contents = [0u8; 4096];
        let Some(text) = read_file(path_cstr, &mut contents) else {
            bad_value(
                "NODALLOC_BIND",
                path,
                "map:FILE with a readable file",
                "interleave",
            );
            return false;
        };
        match parse_bind_map(text, &mut self.bind_map) {
            Some(length) if length > 0 => {
                self.bind_map_length = length;
                true
            }
            _ => {
                bad_value(
                    "NODALLOC_BIND",
                    path,
                    "a map file of node numbers",
                    "interleave",
                );
                false
            }
        }
    }
}

/// Parses node numbers (spaces, commas, newlines; `#` to end of line is a comment).
pub fn parse_bind_map(text: &[u8], map: &mut [u16; MAX_BIND_MAP]) -> Option<usize> {
    let mut length = 0;
    for line in text.split(|&b| b == b'\n') {
        let line = match line.iter().position(|&b| b == b'#') {
            Some(hash) => &line[..hash],
            None => line,
        };
        for word in line.split(|&b| b == b' ' || b == b',' || b == b'\t' || b == b'\r') {
            if trim(word).is_empty() {
                continue;
            }
            let node = parse_decimal(word)?;
            if node >= u16::MAX as usize {
                return None;
            }
            if length < MAX_BIND_MAP {
                map[length] = node as u16;
                length += 1;
            }
        }
    }
    Some(length)
}

/// Parses `4096`, `64K`, `8M`, `1G`, `2T` (binary units; a trailing `B`/`iB` is accepted).
pub fn parse_size(text: &[u8]) -> Option<u64> {
    let mut text = trim(text);
    for suffix in [&b"iB"[..], b"ib", b"B", b"b"] {
        if text.len() > suffix.len() && text.ends_with(suffix) {
            text = &text[..text.len() - suffix.len()];
            break;
        }
    }
    let (digits, shift) = match text.last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        b't' | b'T' => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let value = parse_decimal(digits)? as u64;
    value.checked_mul(1u64 << shift)
}

/// An on/off option that is off by default: `1`, `yes`, `true` or `0`, `no`, `false`, empty;
/// anything else warns and is off.
/// `NODALLOC_BACKGROUND`'s value; `None` for one it does not take.
fn parse_background(value: &[u8]) -> Option<Background> {
    match trim(value) {
        b"release" => Some(Background::Release),
        word => switch_word(word).map(|on| {
            if on {
                Background::Full
            } else {
                Background::Off
            }
        }),
    }
}

fn parse_switch(name: &str, value: &[u8]) -> bool {
    let word = trim(value);
    if word.is_empty() {
        return false;
    }
    switch_word(word).unwrap_or_else(|| {
        bad_value(name, value, "0 or 1", "0");
        false
    })
}

/// The on/off words every switch takes (`word` already trimmed).
fn switch_word(word: &[u8]) -> Option<bool> {
    match word {
        b"1" | b"yes" | b"true" => Some(true),
        b"0" | b"no" | b"false" => Some(false),
        _ => None,
    }
}

fn bad_value(name: &str, value: &[u8], expected: &str, default: &str) {
    warn(|w| {
        w.str(name)
            .str("=")
            .bytes(&value[..value.len().min(64)])
            .str(" is not valid (expected ")
            .str(expected)
            .str("); using ")
            .str(default);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"64K"), Some(64 << 10));
        assert_eq!(parse_size(b"8M"), Some(8 << 20));
        assert_eq!(parse_size(b"8MiB"), Some(8 << 20));
        assert_eq!(parse_size(b"1g"), Some(1 << 30));
        assert_eq!(parse_size(b"2T"), Some(2 << 40));
        assert_eq!(parse_size(b"12x"), None);
        assert_eq!(parse_size(b""), None);
        assert_eq!(parse_size(b"99999999999T"), None);
    }

    #[test]
    fn the_maintenance_thread_option_takes_release_full_or_off() {
        assert_eq!(Options::default().background, Background::Release);
        assert_eq!(parse_background(b"release"), Some(Background::Release));
        assert_eq!(parse_background(b" release\n"), Some(Background::Release));
        for full in [&b"1"[..], b"yes", b"true"] {
            assert_eq!(parse_background(full), Some(Background::Full));
        }
        for off in [&b"0"[..], b"no", b"false"] {
            assert_eq!(parse_background(off), Some(Background::Off));
        }
        for bad in [&b""[..], b"2", b"Release", b"full"] {
            assert_eq!(parse_background(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bind_maps_parse_with_comments() {
        let mut map = [0u16; MAX_BIND_MAP];
        let n = parse_bind_map(b"# threads to nodes\n0 1, 1\n3 # last\n", &mut map).unwrap();
        assert_eq!(&map[..n], &[0, 1, 1, 3]);
        assert!(parse_bind_map(b"0 x 1", &mut map).is_none());
    }

    #[test]
    fn every_option_is_documented_with_a_default() {
        for option in OPTIONS {
            assert!(option.name.starts_with("NODALLOC_"));
            assert!(!option.default.is_empty() && option.meaning.len() > 20);
        }
    }
}
