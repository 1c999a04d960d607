#!/usr/bin/env bash
# How close each block a thread gets lies to the one it got before (scripts/probes/locality.c),
# for nodalloc and the installed peers, on one program: a count, not a time, so it compares
# allocators on a loaded machine. Issue 32's threaded programs where nodalloc trails
# (mimalloc's test-stress, mimalloc-bench's xmalloc-testN) are those where mimalloc hands a
# thread the next block of its own page and nodalloc does not (docs/JOURNAL.md, "Seventh round").
#
# Usage: scripts/locality.sh PROGRAM [ARGS...]
#   e.g. scripts/locality.sh target/mimalloc-bench/build/xmalloc-test -w 2 -t 2 -s 64
# NODALLOC_LIBRARY: another build of the library (default: this tree's, built now).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 1; }
probe="$root/target/probes/liblocality.so"
mkdir -p "$(dirname "$probe")"
cc -O2 -shared -fPIC -o "$probe" "$root/scripts/probes/locality.c" -ldl
library="${NODALLOC_LIBRARY:-$root/target/release/libnodalloc.so}"
[ -n "${NODALLOC_LIBRARY:-}" ] || cargo build --release --quiet -p nodalloc-ffi --manifest-path "$root/Cargo.toml"

source "$root/scripts/peers.sh"
for pair in "nodalloc:$library" "${PEER_LIBRARIES[@]}" glibc:; do
    name="${pair%%:*}" lib="${pair#*:}"
    [ -z "$lib" ] || [ -f "$lib" ] || continue
    line="$(env LD_PRELOAD="$probe${lib:+:$lib}" "$@" 2>&1 >/dev/null | grep '^locality:' | tail -1)"
    printf '%-9s %s\n' "$name" "${line#locality: }"
done
