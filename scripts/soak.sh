#!/usr/bin/env bash
# Soak: scripts/soak.sh [SECONDS] [THREADS] (default 600 s, 8 threads).
#
# Builds the release libnodalloc.so and crates/nodalloc-ffi/tests/c/soak.c, runs the soak under
# LD_PRELOAD for SECONDS, printing RSS and live bytes every second, and fails (exit 1) if, after
# the warm-up, any sample has RSS > 1.5 x the most bytes live within the last second + the RSS
# measured at start (see soak.c).
# The last line is the summary recorded in docs/RELIABILITY.md. The 15-second version runs in
# `cargo test --release -p nodalloc-ffi --test c_abi` (a_fifteen_second_soak_…).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
THREADS=${2:-8}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet -p nodalloc-ffi
LIBRARY=$(realpath "$TARGET_DIR/release/libnodalloc.so")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -g -Wall -Werror -pthread -I crates/nodalloc-ffi/include -DNODALLOC_PRELOADED \
    -o "$OUT/soak" crates/nodalloc-ffi/tests/c/soak.c

echo "== soak: $SECONDS_TO_RUN s, $THREADS threads, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs"
start=$(date +%s)
status=0
env -u NODALLOC_LIMIT LD_PRELOAD="$LIBRARY" "$OUT/soak" "$SECONDS_TO_RUN" "$THREADS" || status=$?
echo "== soak finished in $(( $(date +%s) - start )) s, exit status $status"
exit "$status"
