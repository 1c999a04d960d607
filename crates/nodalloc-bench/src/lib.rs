//! Side-by-side allocator benchmarks for nodalloc: everything behind the
//! showdown binary (`src/main.rs`), the `http` binary, the criterion benches
//! (`benches/`) and the tests (`tests/`).
//!
//! Every workload is generic over an allocator *instance* (`&'static A` with
//! `A: GlobalAlloc + Sync`) instead of going through `#[global_allocator]`, so
//! that nodalloc, the system allocator, mimalloc, jemalloc, snmalloc and
//! NUMAlloc can all be measured inside one process, interleaved, under the
//! same conditions. The harness's own bookkeeping (pointer vectors, channels,
//! threads) goes through the process's global allocator, which is the system
//! allocator for every target of this crate, so it costs every contender the
//! same.
//!
//! Every workload checks its own results: each object is filled with a pattern
//! derived from its address and index ([`check`]) and verified before it is
//! freed, and allocation/free counts must balance ([`workloads::Ledger`]). Any
//! failure panics with a message that names the allocator type.

pub mod allocators;
pub mod check;
pub mod cli;
pub mod machine;
pub mod plot;
pub mod preload;
pub mod prng;
pub mod report;
pub mod rss;
pub mod suites;
pub mod workloads;

pub use allocators::Allocator;
