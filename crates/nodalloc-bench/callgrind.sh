#!/usr/bin/env bash
# Instructions per malloc+free pair on the fast path, per allocator, face and size, counted by
# callgrind: (Ir(N) - Ir(0)) / N, so start-up and warm-up cancel. Both faces: Rust
# (GlobalAlloc, the `fastpath` binary) and C (`pairs` under LD_PRELOAD, each malloc library),
# plus an `overhead` row (the Rust loop alone).
#
# This is the showdown's callgrind suite (src/suites/callgrind.rs) over several sizes:
#   cargo run --release -- --only callgrind --callgrind-sizes 16,64,256 --callgrind-pairs N
# built with the `snmalloc-valgrind` feature into target/callgrind: snmalloc's default pagemap
# reservation fails under valgrind ("Failed to initialise snmalloc"), its QEMU workaround (a
# coarser pagemap) runs. Other allocators are unaffected by the feature.
#
# Usage: crates/nodalloc-bench/callgrind.sh
# Environment: N (pairs, default 1000000), SIZES (default "16 64 256"),
#              ALLOCS (allocators, as for --allocators; default: all).
# Prints the table; the whole report is in target/callgrind/nodalloc-bench/.
set -euo pipefail

cd "$(dirname "$0")/../.."
N=${N:-1000000}
SIZES=${SIZES:-"16 64 256"}
OUT=target/callgrind/nodalloc-bench

command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 1; }
args=(--only callgrind --callgrind-sizes "$(echo $SIZES | tr ' ' ',')" --callgrind-pairs "$N"
      --out "$OUT")
# `overhead` was an allocator of the older script; it is now always in the table.
allocs=$(echo ${ALLOCS:-} | tr ' ' '\n' | grep -vx overhead | paste -sd, -) || true
if [[ -n "$allocs" ]]; then
    args+=(--allocators "$allocs")
fi
cargo run --release -p nodalloc-bench --bin nodalloc-bench --features snmalloc-valgrind \
    --target-dir target/callgrind -- "${args[@]}" >/dev/null
sed -n '/^## Fast path/,$p' "$OUT/report.md"
