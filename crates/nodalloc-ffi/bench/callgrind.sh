#!/usr/bin/env bash
# Instructions per malloc+free pair of a C program, per malloc library (callgrind, deterministic):
# libnodalloc.so against Debian's libmimalloc, libjemalloc and libtcmalloc_minimal, and glibc.
#   crates/nodalloc-ffi/bench/callgrind.sh        (N=200000 pairs, sizes 16 64 256 by default)
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${N:-200000}
SIZES=${SIZES:-"16 64 256"}
cargo build --release -p nodalloc-ffi >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/pairs" crates/nodalloc-ffi/bench/pairs.c
lib=/usr/lib/x86_64-linux-gnu
declare -A preload=(
  [nodalloc]="$PWD/target/release/libnodalloc.so"
  [mimalloc]="$lib/libmimalloc.so.2"
  [jemalloc]="$lib/libjemalloc.so.2"
  [tcmalloc]="$lib/libtcmalloc_minimal.so.4"
  [glibc]=""
)
ir() { # allocator size n
  local so=${preload[$1]}
  if [ -n "$so" ] && [ ! -e "$so" ]; then echo "-"; return; fi
  LD_PRELOAD=$so valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$tmp/pairs" "$2" "$3" \
    2>&1 >/dev/null | awk '/Collected :/ { print $NF }'
}
printf "| allocator |"; for s in $SIZES; do printf " %s B |" "$s"; done; echo
printf "| --- |"; for s in $SIZES; do printf " ---: |"; done; echo
for a in nodalloc mimalloc jemalloc tcmalloc glibc; do
  printf "| %s |" "$a"
  for s in $SIZES; do
    zero=$(ir "$a" "$s" 0); full=$(ir "$a" "$s" "$N")
    if [ "$zero" = "-" ] || [ -z "$zero" ] || [ -z "$full" ]; then printf " n/a |"; continue; fi
    awk -v z="$zero" -v f="$full" -v n="$N" 'BEGIN { printf " %.1f |", (f - z) / n }'
  done
  echo
done
echo
echo "instructions per malloc+free pair (valgrind --tool=callgrind, N=$N, includes the loop: ~6)"
