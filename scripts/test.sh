#!/usr/bin/env bash
# The project's test command (README, CI): every unit, property, integration and model test,
# and the QEMU NUMA guests. Ends with one line, `N passed, N failed, N skipped`, over every
# cargo test binary and guest: a test that could not check what it is for (a precondition
# missing: see crates/nodalloc-testkit) counts as skipped, not passed, and under `CI=true` a skip
# of what the CI machine has (transparent huge pages, two CPUs) fails its test.
set -euo pipefail
cd "$(dirname "$0")/.."

logs=$(mktemp -d)
export NODALLOC_SKIP_LOG="$logs/skips"
: >"$NODALLOC_SKIP_LOG"

# Runs a cargo test command, its output kept for the closing line.
cargo_test() {
    "$@" 2>&1 | tee -a "$logs/cargo"
}

# Runs a NUMA guest, its summary kept for the closing line.
guest() {
    numa-vm/run "$@" 2>&1 | tee -a "$logs/guests"
}

summary() {
    local status=$?
    set +e
    local passed failed ignored skipped guest_passed guest_failed
    read -r passed failed ignored < <(awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
                if ($(i + 1) ~ /^ignored/) g += $i
            }
        } END { print p + 0, f + 0, g + 0 }' "$logs/cargo" 2>/dev/null || echo 0 0 0)
    skipped=$(wc -l <"$NODALLOC_SKIP_LOG")
    # A guest's verdicts: its closing `N passed, N failed` (a nodalloc row that only informs
    # counts as failed there).
    read -r guest_passed guest_failed < <(awk '/^[0-9]+ passed, [0-9]+ failed$/ {
            p += $1; f += $3 } END { print p + 0, f + 0 }' "$logs/guests" 2>/dev/null || echo 0 0)
    if [ -s "$NODALLOC_SKIP_LOG" ]; then
        echo "== skipped (precondition missing):"
        sed 's/^/   /' "$NODALLOC_SKIP_LOG"
    fi
    # libtest reports a skipped test as passed.
    passed=$((passed - skipped + guest_passed))
    failed=$((failed + guest_failed))
    skipped=$((skipped + ignored))
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
        # A step that failed without a test result (a build error, a crashed binary).
        failed=1
    fi
    echo "== $passed passed, $failed failed, $skipped skipped"
    rm -rf "$logs"
    exit "$status"
}
trap summary EXIT

echo "== cargo test --workspace (debug: assertions on; the soak runs in the release pass below)"
cargo_test cargo test --workspace -- --skip a_fifteen_second_soak

echo "== release-mode allocator tests (the optimised fast paths, 100 000 threads, secure mode)"
cargo_test cargo test --release -p nodalloc --test global_allocator --test rss --test hostile \
    --test secure

echo "== release-mode C ABI tests (the 15-second soak with its RSS bound; the misuse suite against"
echo "   the library as shipped, where a debug check's panic cannot stand in for nodalloc's abort)"
cargo_test cargo test --release -p nodalloc-ffi --test c_abi --test misuse_suite

echo "== release-mode profile tools (nodalloc profile top/diff/flamegraph on the sites themselves:"
echo "   a debug library's malloc keeps a frame that hides its caller)"
cargo_test cargo test --release -p nodalloc-cli --test profile

echo "== nightly Rust: core::alloc::Allocator for &Heap (the nightly feature), std's collections in a heap"
if cargo +nightly --version >/dev/null 2>&1; then
    CARGO_TARGET_DIR=target/nightly cargo_test cargo +nightly test -p nodalloc --features nightly \
        --test heaps
else
    echo "nightly: no nightly toolchain (rustup toolchain install nightly)" >>"$NODALLOC_SKIP_LOG"
fi

echo "== loom models of the lock-free structures and of the lock"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo_test cargo test -p nodalloc \
    --test loom --release
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo_test cargo test -p nodalloc --lib \
    --release ds::

echo "== real NUMA: QEMU guests with 2 and 4 (+1 CPU-less) emulated nodes (Linux 6.1), and 2 plus"
echo "   a far CXL-like node in a memory tier of its own (Linux 6.12, HMAT, weighted interleave)"
guest --nodes 2
guest --nodes 4 --memory-only-node
guest --kernel 6.12 --far-node
