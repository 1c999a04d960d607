#!/usr/bin/env bash
# Where one program's instructions go under nodalloc and each installed peer: callgrind counts
# every instruction the program executes (all threads, serialised by valgrind) and this splits
# them by the object that holds the code: the program itself, the allocator library, libc
# (memset and memcpy among them: a `calloc` that clears a block runs libc's memset), and the
# rest. A count, not a time: the same on a loaded machine and from run to run within a few
# tenths of a percent, so it says whether a change made the allocator do less work even where
# this machine's spread hides a time (docs/JOURNAL.md, issue 32, "Eighth round").
#
# Usage: scripts/instructions.sh PROGRAM [ARGS...]
#   e.g. scripts/instructions.sh target/mimalloc-bench/build/test-stress 32 50 10
# NODALLOC_LIBRARY: another build of the library (default: this tree's, built now).
# NODALLOC_BASE_LIBRARY: a second build, reported as nodalloc-base beside it.
# ALLOCATORS: the libraries to run, by name (default: nodalloc nodalloc-base mimalloc tcmalloc
# jemalloc glibc; the ones not installed are left out).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
library="${NODALLOC_LIBRARY:-$root/target/release/libnodalloc.so}"
[ -n "${NODALLOC_LIBRARY:-}" ] || cargo build --release --quiet -p nodalloc-ffi --manifest-path "$root/Cargo.toml"
program="$(command -v "$1")"
shift
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The exclusive instruction count of each object in a callgrind profile: every cost line adds
# to the object of its function, but the line after a `calls=` line, which is the call's
# inclusive cost, is skipped. Names are compressed (`ob=(3) /path` first, `ob=(3)` after), and
# `cob=` lines define names too.
split_by_object() {
    awk '
        function name_of(spec,    id) {
            if (match(spec, /^\([0-9]+\)/)) {
                id = substr(spec, 1, RLENGTH)
                if (length(spec) > RLENGTH) names[id] = substr(spec, RLENGTH + 2)
                return names[id]
            }
            return spec
        }
        /^ob=/ { current = name_of(substr($0, 4)); next }
        /^cob=/ { name_of(substr($0, 5)); next }
        /^calls=/ { skip = 1; next }
        /^[0-9+*-]/ {
            if (skip) { skip = 0; next }
            cost[current] += $2
            next
        }
        END { for (object in cost) printf "%.0f\t%s\n", cost[object], object }
    ' "$1"
}

printf '%-14s %14s %14s %14s %14s %14s\n' allocator total program allocator libc other
source "$root/scripts/peers.sh"
for pair in "nodalloc:$library" "nodalloc-base:${NODALLOC_BASE_LIBRARY:-}" "${PEER_LIBRARIES[@]}" \
    glibc:/usr/lib/x86_64-linux-gnu/libc.so.6; do
    name="${pair%%:*}" lib="${pair#*:}"
    if [ -n "${ALLOCATORS:-}" ] && [[ " $ALLOCATORS " != *" $name "* ]]; then
        continue
    fi
    [ -n "$lib" ] && [ -f "$lib" ] || continue
    preload="$lib"
    [ "$name" != glibc ] || preload=""
    valgrind --tool=callgrind --trace-children=yes \
        --callgrind-out-file="$work/$name.%p.out" \
        env ${preload:+LD_PRELOAD="$preload"} "$program" "$@" >/dev/null 2>"$work/$name.log"
    # `env` execs the program in its own process, whose profile is the program's; a program
    # that starts others writes one more profile each, and the program's is taken as the largest.
    out="$(ls -S "$work/$name".*.out | head -1)"
    split_by_object "$out" >"$work/$name.objects"
    awk -F '\t' -v program="$(realpath "$program")" -v lib="$(realpath "$lib")" -v name="$name" '
        { total += $1 }
        $2 == program { mine += $1; next }
        $2 ~ /\/libc\.so\.6$/ { libc += $1; next }
        $2 == lib { alloc += $1; next }
        { other += $1; if ($1 > most) { most = $1; most_name = $2 } }
        END {
            printf "%-14s %14.0f %14.0f %14.0f %14.0f %14.0f", name, total, mine, alloc, libc, other
            if (most > 0.01 * total) printf "  (other: mostly %s)", most_name
            printf "\n"
        }
    ' "$work/$name.objects"
done
echo "(glibc's allocator is inside libc: its row counts it under libc)"
