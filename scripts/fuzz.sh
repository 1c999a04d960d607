#!/usr/bin/env bash
# Long differential fuzzing of libnodalloc.so's entry points (crates/nodalloc-ffi/tests/c/fuzz.c):
# random seeds for DURATION seconds (default 600), 4 threads, OPS operations per thread each.
# A failing seed is printed and the script exits 1; add it to FUZZ_REGRESSION_SEEDS in
# crates/nodalloc-ffi/tests/c_abi/main.rs so every test run replays it.
#   scripts/fuzz.sh [DURATION] [OPS]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
ops=${2:-200000}
cargo build --release -p nodalloc-ffi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O1 -g -Wall -Werror -pthread -I crates/nodalloc-ffi/include -o "$out/fuzz" \
  crates/nodalloc-ffi/tests/c/fuzz.c -L target/release -lnodalloc -Wl,-rpath,"$PWD/target/release"
end=$((SECONDS + duration))
runs=0
while [ "$SECONDS" -lt "$end" ]; do
  seed=$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ))
  if ! "$out/fuzz" "$seed" "$ops" 4 > "$out/log" 2>&1; then
    cat "$out/log"
    echo "FAILED: seed $seed (reproduce: fuzz $seed $ops 4)"
    exit 1
  fi
  runs=$((runs + 1))
done
echo "fuzz: $runs runs x 4 threads x $ops operations, no disagreement (${duration} s)"
