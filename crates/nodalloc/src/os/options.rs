//! Every `NODALLOC_*` option in one table: its name, default, meaning and parser. The table is
//! the documentation (`nodalloc::options()` lists it; the README's table is checked against it
//! both ways by a test) and the parser: [`Options::from_env`] walks it, and a test parses each
//! documented default and compares it with [`Options::default`]. Adding an option is a row
//! here, its field in [`Options`] and its README row; the tests fail until all three agree.
//!
//! Options are read once, when the global arena starts, with `getenv` (no allocation). A value
//! that does not parse prints one warning line and the default is used.

use super::cpuset::{parse_decimal, trim};
use super::{env, read_file, warn};
use core::ffi::CStr;

/// One option: its documentation and its parser, in one row. The allocator reads every row's
/// variable at start-up and applies its value; a test checks that each row's documented
/// default, parsed, is the value the allocator starts from.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The environment variable.
    pub name: &'static str,
    /// Its default, as written in the documentation.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
    /// Applies a value (as `getenv` gives it) to the options; a bad value leaves them as they
    /// were and gives back what the option takes, for the warning.
    apply: fn(&mut Options, &[u8]) -> Result<(), &'static str>,
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
        apply: apply_bind,
    },
    OptionSpec {
        name: "NODALLOC_POLICY",
        default: "preferred",
        meaning: "memory policy of each node region: preferred (a full node spills to others) or \
                  bind (strict; the kernel fails allocations instead)",
        apply: apply_policy,
    },
    OptionSpec {
        name: "NODALLOC_SIMULATE_NODES",
        default: "0",
        meaning: "simulate N nodes on this machine (1-32): CPUs are split into N fake nodes, no \
                  mbind is issued; for testing multi-node paths on a one-node machine",
        apply: apply_simulate_nodes,
    },
    OptionSpec {
        name: "NODALLOC_REGION_SIZE",
        default: "1T",
        meaning: "address space reserved per node (rounded down to a power of two, at least \
                  64M); shrunk automatically to fit RLIMIT_AS",
        apply: apply_region_size,
    },
    OptionSpec {
        name: "NODALLOC_COMMIT",
        default: "auto",
        meaning: "how the heap is charged to the kernel's commit limit: auto (on demand when \
                  vm.overcommit_memory is 2, else upfront), demand (reserve PROT_NONE, commit \
                  2 MiB chunks as they are first used), upfront (one MAP_NORESERVE reservation)",
        apply: apply_commit,
    },
    OptionSpec {
        name: "NODALLOC_THP",
        default: "auto",
        meaning: "transparent huge pages: auto (bags of objects up to 4 KiB may share huge \
                  pages: MADV_HUGEPAGE when the kernel's mode is madvise; large, aligned and \
                  bigger objects stay on base pages, MADV_NOHUGEPAGE), on (huge pages for the \
                  whole heap), off (MADV_NOHUGEPAGE everywhere)",
        apply: apply_thp,
    },
    OptionSpec {
        name: "NODALLOC_DECOMMIT_DELAY",
        default: "100",
        meaning: "milliseconds a free span stays committed before its pages may be returned to \
                  the OS; a pool that takes decommitted memory back soon after a pause \
                  stretches its delay over twice the pause (at most 10 s), and the maintenance \
                  thread returns a quiet pool's memory after this delay",
        apply: apply_decommit_delay,
    },
    OptionSpec {
        name: "NODALLOC_RETAIN",
        default: "8M",
        meaning: "committed free bytes each node keeps for reuse; only free memory beyond this \
                  budget is returned to the OS",
        apply: apply_retain,
    },
    OptionSpec {
        name: "NODALLOC_SPARES",
        default: "64M",
        meaning: "bytes of empty bags each node keeps for its size classes' next bags (a \
                  program whose threads free objects in bulk and allocate them again takes no \
                  new spans); given back at the next upkeep pass, when another class needs a \
                  new bag, and before a large block or a new bag would fail for want of their \
                  space; none under a commit limit; 0: every bag that falls empty goes back at \
                  once",
        apply: apply_spares,
    },
    OptionSpec {
        name: "NODALLOC_LIMIT",
        default: "0",
        meaning: "hard limit on committed heap bytes (e.g. 512M); past it allocation fails \
                  cleanly (NULL + ENOMEM, or null in Rust) and succeeds again after frees; \
                  0 means no limit",
        apply: apply_limit,
    },
    OptionSpec {
        name: "NODALLOC_STATS",
        default: "0",
        meaning: "1: print the statistics to stderr when the process exits",
        apply: apply_stats,
    },
    OptionSpec {
        name: "NODALLOC_SECURE",
        default: if cfg!(feature = "secure") { "1" } else { "0" },
        meaning: "1: secure mode: free-list links encoded with a random key and checked, a \
                  double-free check on every free, an inaccessible guard page right after each \
                  large object, a random allocation order in new bags; through the C library \
                  also a checked trailer and canary after every block (overflows, underflows, \
                  new/delete mismatches), freed blocks zeroed, checked and held in a \
                  quarantine, malloc(0) inaccessible; slower. The default is 1 when built with \
                  the cargo feature secure (NODALLOC_SECURE=0 still turns it off)",
        apply: apply_secure,
    },
    OptionSpec {
        name: "NODALLOC_CHECK_COPIES",
        default: "0",
        meaning: "1: outside secure mode, the C library's memcpy, memmove and memset abort, \
                  naming the block, when a write that starts in an object of a size class runs \
                  past the object's usable end (about 30 instructions more per call into the \
                  heap, 11 outside it; secure mode checks more: the size asked for, freed and \
                  large blocks); 0: they are the next library's own, unchecked",
        apply: apply_check_copies,
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
        apply: apply_background,
    },
    OptionSpec {
        name: "NODALLOC_RING_SHARDS",
        default: "0",
        meaning: "transfer rings per size class of each node, chosen by the CPU a thread runs \
                  on, so the cores of a big node do not all meet at one ring: 0 is automatic \
                  (one per 16 CPUs of the largest node: 1 up to 16 CPUs, where nothing \
                  changes), 1-8 sets the count",
        apply: apply_ring_shards,
    },
    OptionSpec {
        name: "NODALLOC_CALLSITE",
        default: "0",
        meaning: "call-site partitions: P > 0 gives every (node, partition, size class) its own \
                  bags; the C library puts a block in partition hash(return address of its \
                  malloc call) mod P, the Rust face in the partition of the thread's \
                  nodalloc::partition scope. 0 (or 1, one partition) is off, the fast paths \
                  untouched; at most 4096",
        apply: apply_callsite,
    },
    OptionSpec {
        name: "NODALLOC_CALLSITE_DEPTH",
        default: "1",
        meaning: "the C library's call site: 1 is malloc's caller; 2-8 walk that many frames up \
                  through frame pointers, for programs that allocate through a wrapper \
                  (xmalloc, g_malloc); where a frame has no frame pointer, the walk stops at the \
                  deepest frame it could verify",
        apply: apply_callsite_depth,
    },
    OptionSpec {
        name: "NODALLOC_TIERS",
        default: "auto",
        meaning: "which nodes are far memory: auto (the kernel's memory tiers: nodes of a slower \
                  tier than the CPUs' nodes; with one tier, the nodes without CPUs), or \
                  near:LIST;far:LIST (or far:LIST alone) with the kernel's node numbers, e.g. \
                  near:0,1;far:2. Each node's cold memory goes to its nearest far node; with no \
                  far node it stays near",
        apply: apply_tiers,
    },
    OptionSpec {
        name: "NODALLOC_INTERLEAVE",
        default: "off",
        meaning: "large blocks of 1 MiB and more spread their pages over the thread's node and \
                  its far nodes by the kernel's weighted-interleave weights \
                  (/sys/kernel/mm/mempolicy/weighted_interleave, Linux 6.9+): off (every page \
                  on the node, as for smaller blocks), auto (when weights are set and the node \
                  has far memory), or weighted (whenever it has far memory; plain interleave on \
                  older kernels, with one warning)",
        apply: apply_interleave,
    },
    OptionSpec {
        name: "NODALLOC_NEAR_LIMIT",
        default: "0",
        meaning: "hard limit on the heap bytes committed on near nodes (every node that is not \
                  far memory), e.g. 1G; within NODALLOC_LIMIT, which still holds over both \
                  tiers. Past it, near requests go far or fail (NODALLOC_TIER_FULL); 0 means no \
                  limit",
        apply: apply_near_limit,
    },
    OptionSpec {
        name: "NODALLOC_FAR_LIMIT",
        default: "0",
        meaning: "hard limit on the heap bytes committed on far nodes, e.g. 4G; past it, far \
                  requests come near or fail (NODALLOC_TIER_FULL); 0 means no limit",
        apply: apply_far_limit,
    },
    OptionSpec {
        name: "NODALLOC_TIER_FULL",
        default: "spill",
        meaning: "what a request does when its tier is full (its limit reached or its nodes' \
                  memory used up): spill (served from the other tier, as a full node spills to \
                  the nearest node) or fail (never leaves its tier: NULL + ENOMEM, or null in \
                  Rust, until memory of its tier is freed)",
        apply: apply_tier_full,
    },
    OptionSpec {
        name: "NODALLOC_TIERING",
        default: "off",
        meaning: "auto: automatic placement by call site on a machine with far memory, with \
                  call-site partitions (NODALLOC_CALLSITE) and the maintenance thread: a \
                  partition that stays quiet (few refills and returns) for the cooling period \
                  turns cold, its new bags come from the far node and its full bags are moved \
                  there; busy again, it comes back near. off: placement by hints only",
        apply: apply_tiering,
    },
    OptionSpec {
        name: "NODALLOC_COOLING",
        default: "5000",
        meaning: "automatic tiering's cooling period in ms (100 to 600000): how long a \
                  partition stays quiet before it turns cold",
        apply: apply_cooling,
    },
    OptionSpec {
        name: "NODALLOC_PROFILE",
        default: "0",
        meaning: "1: heap profiling: allocations are sampled by the bytes they ask for, each \
                  sample's call stack (frame pointers), node, tier and partition kept, and the \
                  profile written in pprof's format (NODALLOC_PROFILE_OUT, \
                  nodalloc_profile_dump). The fast paths are not touched with it off; with it \
                  on, every call takes the path call-site partitions take",
        apply: apply_profile,
    },
    OptionSpec {
        name: "NODALLOC_PROFILE_RATE",
        default: "512K",
        meaning: "mean bytes allocated between two samples (a random, exponential interval, \
                  as jemalloc's lg_prof_sample=19 and tcmalloc's sampling); at least 1",
        apply: apply_profile_rate,
    },
    OptionSpec {
        name: "NODALLOC_PROFILE_OUT",
        default: "none",
        meaning: "with profiling on, the file the profile is written to when the process exits, \
                  an absolute path (pprof's profile.proto; %p is replaced by the process id); \
                  none: no profile at exit",
        apply: apply_profile_out,
    },
    OptionSpec {
        name: "NODALLOC_PROFILE_LEAKS",
        default: "0",
        meaning: "1: with profiling on, print at exit what the samples say is still live (an \
                  estimate of the bytes and objects) and the sites holding most of it, each as \
                  its frames' files and offsets (jemalloc's prof_leak)",
        apply: apply_profile_leaks,
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

/// `NODALLOC_INTERLEAVE`: whether large blocks spread their pages over the node and its far
/// nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterleaveChoice {
    /// Weighted interleave when the kernel has weights set and the node has far memory.
    Auto,
    /// Weighted interleave wherever the node has far memory (plain interleave on kernels
    /// without weights).
    Weighted,
    /// Never.
    Off,
}

/// Large blocks of at least this many bytes are interleaved (see [`InterleaveChoice`]).
pub const INTERLEAVE_MIN_BYTES: usize = 1 << 20;

/// A file name an option gives (`NODALLOC_PROFILE_OUT`), copied: empty for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutPath {
    pub bytes: [u8; OutPath::MAX],
    pub len: u16,
}

impl OutPath {
    /// The longest path kept, its terminating NUL included.
    pub const MAX: usize = 1024;
    pub const NONE: OutPath = OutPath {
        bytes: [0; OutPath::MAX],
        len: 0,
    };

    /// The path, without a NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Longest thread-to-node map a map file may give; longer files are cut here.
pub const MAX_BIND_MAP: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    pub spare_bytes: u64,
    pub limit_bytes: u64,
    pub stats_at_exit: bool,
    /// `NODALLOC_PROFILE`, `NODALLOC_PROFILE_RATE` and `NODALLOC_PROFILE_OUT` (empty: none).
    pub profile: bool,
    pub profile_rate: u64,
    pub profile_out: OutPath,
    pub profile_leaks: bool,
    /// Secure mode (see `arena::secure`).
    pub secure: bool,
    /// The C library's bound on copies into the heap (its `copy.rs`); the library reads it
    /// when it loads ([`copy_checks_from_env`]).
    pub check_copies: bool,
    /// The maintenance thread (`instance/background.rs`).
    pub background: Background,
    /// Ring shards per class and node (0: automatic).
    pub ring_shards: usize,
    /// Call-site partitions, P (0: off).
    pub callsite_partitions: usize,
    /// Frames from `malloc` to the call site (1: its caller).
    pub callsite_depth: usize,
    /// The far nodes `NODALLOC_TIERS` names (kernel numbers, as a mask); `None`: auto.
    pub tiers_far: Option<u64>,
    pub interleave: InterleaveChoice,
    /// `NODALLOC_NEAR_LIMIT`, `NODALLOC_FAR_LIMIT` (0: none).
    pub near_limit_bytes: u64,
    pub far_limit_bytes: u64,
    /// `NODALLOC_TIER_FULL=fail`: requests never leave their tier.
    pub tier_bound: bool,
    /// `NODALLOC_TIERING=auto`, and `NODALLOC_COOLING` in ns.
    pub tiering: bool,
    pub cooling_ns: u64,
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
            spare_bytes: 64 << 20,
            limit_bytes: 0,
            stats_at_exit: false,
            profile: false,
            profile_rate: 512 << 10,
            profile_out: OutPath::NONE,
            profile_leaks: false,
            secure: cfg!(feature = "secure"),
            check_copies: false,
            background: Background::Release,
            ring_shards: 0,
            callsite_partitions: 0,
            callsite_depth: 1,
            tiers_far: None,
            interleave: InterleaveChoice::Off,
            near_limit_bytes: 0,
            far_limit_bytes: 0,
            tier_bound: false,
            tiering: false,
            cooling_ns: 5_000_000_000,
        }
    }
}

/// Whether the environment asks for secure mode, as [`Options::from_env`] reads it (silently:
/// that one warns about a bad value), for a face that must know before the allocator starts.
pub fn secure_from_env() -> bool {
    switch_in_env(c"NODALLOC_SECURE").unwrap_or(cfg!(feature = "secure"))
}

/// Whether the C library bounds copies into the heap (`NODALLOC_CHECK_COPIES`), as
/// [`Options::from_env`] reads it, silently, for the library's load, before the allocator
/// starts.
pub fn copy_checks_from_env() -> bool {
    switch_in_env(c"NODALLOC_CHECK_COPIES").unwrap_or(false)
}

/// An on/off option's value as the allocator reads it at start-up, silently: `None` when the
/// variable is unset, empty or no switch word.
pub fn switch_in_env(name: &CStr) -> Option<bool> {
    env(name).and_then(|value| switch_word(trim(value)))
}

impl Options {
    /// Reads every option of [`OPTIONS`] from the environment, warning about (and ignoring)
    /// bad values.
    pub fn from_env() -> Options {
        let mut options = Options::default();
        for spec in OPTIONS {
            let Some(value) = env_named(spec.name) else {
                continue;
            };
            if let Err(expected) = (spec.apply)(&mut options, value) {
                bad_value(spec.name, value, expected, spec.default);
            }
        }
        options
    }

    /// Loads a map file: node numbers separated by spaces, commas or newlines, `#` comments.
    fn load_bind_map(&mut self, path: &[u8]) -> Result<(), &'static str> {
        const READABLE: &str = "map:FILE with a readable file";
        let mut path_buffer = [0u8; 256];
        if path.is_empty() || path.len() >= path_buffer.len() {
            return Err(READABLE);
        }
        path_buffer[..path.len()].copy_from_slice(path);
        let path_cstr = CStr::from_bytes_until_nul(&path_buffer).map_err(|_| READABLE)?;
        let mut contents = [0u8; 4096];
        let text = read_file(path_cstr, &mut contents).ok_or(READABLE)?;
        match parse_bind_map(text, &mut self.bind_map) {
            Some(length) if length > 0 => {
                self.bind_map_length = length;
                self.bind = BindPolicy::Map;
                Ok(())
            }
            _ => Err("map:FILE naming a file of node numbers"),
        }
    }
}

/// The value of a variable named by `name` (copied with its NUL into a stack buffer).
fn env_named(name: &str) -> Option<&'static [u8]> {
    let mut buffer = [0u8; 64];
    buffer
        .get_mut(..name.len())?
        .copy_from_slice(name.as_bytes());
    let name = CStr::from_bytes_until_nul(&buffer).ok()?;
    env(name)
}

// The table's parsers: each applies one option's value, or says what it takes.

fn apply_bind(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.bind = match trim(value) {
        b"interleave" => BindPolicy::Interleave,
        b"saturate" => BindPolicy::Saturate,
        b"none" => BindPolicy::None,
        text if text.starts_with(b"map:") => return options.load_bind_map(&text[4..]),
        _ => return Err("interleave, saturate, none or map:FILE"),
    };
    Ok(())
}

fn apply_policy(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.strict_binding = match trim(value) {
        b"preferred" => false,
        b"bind" => true,
        _ => return Err("preferred or bind"),
    };
    Ok(())
}

fn apply_interleave(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.interleave = match trim(value) {
        b"auto" => InterleaveChoice::Auto,
        b"weighted" | b"on" => InterleaveChoice::Weighted,
        b"off" | b"0" => InterleaveChoice::Off,
        _ => return Err("auto, weighted or off"),
    };
    Ok(())
}

fn apply_near_limit(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.near_limit_bytes = parse_size(value).ok_or("a size such as 1G, or 0 for none")?;
    Ok(())
}

fn apply_far_limit(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.far_limit_bytes = parse_size(value).ok_or("a size such as 4G, or 0 for none")?;
    Ok(())
}

fn apply_tier_full(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.tier_bound = match trim(value) {
        b"spill" => false,
        b"fail" => true,
        _ => return Err("spill or fail"),
    };
    Ok(())
}

fn apply_tiering(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.tiering = match trim(value) {
        b"auto" => true,
        b"off" | b"0" => false,
        _ => return Err("auto or off"),
    };
    Ok(())
}

fn apply_cooling(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    let ms = decimal_in(value, 100..=600_000, "100-600000 (ms)")?;
    options.cooling_ns = ms as u64 * 1_000_000;
    Ok(())
}

fn apply_tiers(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    const TAKES: &str = "auto, or near:LIST;far:LIST with node numbers 0-63 in one list each";
    if trim(value) == b"auto" {
        options.tiers_far = None;
        return Ok(());
    }
    options.tiers_far = Some(super::topology::parse_tiers(value).ok_or(TAKES)?);
    Ok(())
}

fn apply_simulate_nodes(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.simulate_nodes =
        decimal_in(value, 0..=MAX_SIMULATED_NODES, "a node count from 0 to 32")?;
    Ok(())
}

fn apply_region_size(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    match parse_size(value) {
        Some(bytes) if bytes >= MIN_REGION_BYTES => {
            options.region_bytes = 1 << (63 - bytes.leading_zeros());
            Ok(())
        }
        _ => Err("a size of at least 64M"),
    }
}

fn apply_commit(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.commit_on_demand = match trim(value) {
        b"auto" => None,
        b"demand" => Some(true),
        b"upfront" => Some(false),
        _ => return Err("auto, demand or upfront"),
    };
    Ok(())
}

fn apply_thp(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.thp = match trim(value) {
        b"auto" => ThpChoice::Auto,
        b"on" | b"1" | b"always" => ThpChoice::On,
        b"off" | b"0" | b"never" => ThpChoice::Off,
        _ => return Err("auto, on or off"),
    };
    Ok(())
}

fn apply_decommit_delay(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    let ms = decimal_in(value, 0..=3_600_000, "milliseconds (0-3600000)")?;
    options.decommit_delay_ns = ms as u64 * 1_000_000;
    Ok(())
}

fn apply_retain(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.retain_bytes = parse_size(value).ok_or("a size such as 8M")?;
    Ok(())
}

fn apply_spares(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.spare_bytes = parse_size(value).ok_or("a size such as 64M")?;
    Ok(())
}

fn apply_limit(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.limit_bytes = parse_size(value).ok_or("a size such as 512M, or 0 for none")?;
    Ok(())
}

fn apply_stats(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.stats_at_exit = switch(value)?.unwrap_or(false);
    Ok(())
}

fn apply_profile(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.profile = switch(value)?.unwrap_or(false);
    Ok(())
}

fn apply_profile_rate(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    match parse_size(value) {
        Some(rate) if rate > 0 => options.profile_rate = rate,
        _ => return Err("a size such as 512K (at least 1)"),
    }
    Ok(())
}

fn apply_profile_leaks(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.profile_leaks = switch(value)?.unwrap_or(false);
    Ok(())
}

fn apply_profile_out(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    let value = trim(value);
    if value == b"none" {
        options.profile_out = OutPath::NONE;
        return Ok(());
    }
    if !value.starts_with(b"/") || value.len() >= OutPath::MAX {
        return Err("an absolute path shorter than 1024 bytes, or none");
    }
    options.profile_out.bytes[..value.len()].copy_from_slice(value);
    options.profile_out.len = value.len() as u16;
    Ok(())
}

fn apply_secure(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    if let Some(on) = switch(value)? {
        options.secure = on;
    }
    Ok(())
}

fn apply_check_copies(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    if let Some(on) = switch(value)? {
        options.check_copies = on;
    }
    Ok(())
}

fn apply_background(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.background = parse_background(value).ok_or("release, 1 or 0")?;
    Ok(())
}

fn apply_ring_shards(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.ring_shards = decimal_in(value, 0..=MAX_RING_SHARDS, "0 (automatic) or 1-8")?;
    Ok(())
}

fn apply_callsite(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.callsite_partitions = decimal_in(value, 0..=MAX_CALLSITE_PARTITIONS, "0-4096")?;
    Ok(())
}

fn apply_callsite_depth(options: &mut Options, value: &[u8]) -> Result<(), &'static str> {
    options.callsite_depth = decimal_in(value, 1..=MAX_CALLSITE_DEPTH, "1-8")?;
    Ok(())
}

/// A decimal number within `range`, or `expected`.
fn decimal_in(
    value: &[u8],
    range: core::ops::RangeInclusive<usize>,
    expected: &'static str,
) -> Result<usize, &'static str> {
    parse_decimal(value)
        .filter(|n| range.contains(n))
        .ok_or(expected)
}

/// An on/off value: `Some` for a switch word, `None` for an empty value (the default stays).
fn switch(value: &[u8]) -> Result<Option<bool>, &'static str> {
    let word = trim(value);
    if word.is_empty() {
        return Ok(None);
    }
    switch_word(word)
        .map(Some)
        .ok_or("0 or 1, no or yes, false or true")
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
mod tests;
