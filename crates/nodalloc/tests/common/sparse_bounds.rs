// Included by nodalloc's `tests/rss.rs` (the crate) and nodalloc-ffi's `tests/c_abi/sparse.rs`
// (`libnodalloc.so`), so both faces are held to one set of bounds.

/// RSS growth bounds of the sparse patterns, in KiB: 1.2× the best of glibc, jemalloc, mimalloc
/// and tcmalloc on the same pattern (docs/JOURNAL.md), with a floor of 4 MiB where they are
/// near zero.
const SPARSE_BOUNDS_KIB: [(&str, u64); 5] = [
    ("buffer", 4096),
    ("heads", 20 * 1024),
    ("aligned", 4096),
    ("table", 9728),
    ("calloc", 21 * 1024),
];

/// The `holes` pattern (blocks of 1-64 KiB written whole, 90 % freed at random, then an idle
/// second): what may stay resident for `live_kib` of survivors. Peers keep the whole heap,
/// ten times the survivors (docs/JOURNAL.md).
fn holes_bound_kib(live_kib: u64) -> u64 {
    live_kib * 3 / 2 + 4096
}
