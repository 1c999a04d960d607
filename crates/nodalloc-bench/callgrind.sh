#!/usr/bin/env bash
# Instructions per alloc+free pair on the fast path, per allocator and size,
# counted by callgrind: (Ir(N) - Ir(0)) / N, so start-up and warm-up cancel.
#
# Usage: crates/nodalloc-bench/callgrind.sh
# Environment: N (pairs, default 1000000), SIZES (default "16 64 256"),
#              ALLOCS (default: all six, then "overhead", the harness loop alone).
#
# Builds into target/callgrind with the `snmalloc-valgrind` feature: snmalloc's
# default pagemap reservation fails under valgrind ("Failed to initialise
# snmalloc"), its QEMU workaround (coarser pagemap) runs. Other allocators are
# unaffected by the feature.
set -euo pipefail

cd "$(dirname "$0")/../.."
N=${N:-1000000}
SIZES=${SIZES:-"16 64 256"}
ALLOCS=${ALLOCS:-"nodalloc system mimalloc jemalloc snmalloc numalloc overhead"}

command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 1; }
cargo build --release -p nodalloc-bench --bin fastpath \
    --features snmalloc-valgrind --target-dir target/callgrind >&2
BIN=target/callgrind/release/fastpath

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Total instructions of one run, or nothing if the run failed.
ir() {
    local log="$TMP/log"
    if valgrind --tool=callgrind --callgrind-out-file="$TMP/out" "$BIN" "$@" >/dev/null 2>"$log"; then
        awk '/Collected :/ { print $NF }' "$log"
    fi
}

header="| allocator |"
rule="| --------- |"
for s in $SIZES; do
    header+=" ${s} B |"
    rule+=" ---: |"
done
echo "instructions per alloc+free pair (callgrind, N=$N)"
echo
echo "$header"
echo "$rule"
for a in $ALLOCS; do
    row="| $a |"
    for s in $SIZES; do
        base=$(ir "$a" "$s" 0)
        full=$(ir "$a" "$s" "$N")
        if [[ -n "$base" && -n "$full" ]]; then
            row+=" $(awk -v f="$full" -v b="$base" -v n="$N" 'BEGIN { printf "%.1f", (f - b) / n }') |"
        else
            row+=" failed |"
        fi
    done
    echo "$row"
done
