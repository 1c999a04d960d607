#!/usr/bin/env bash
# The project's test command (README, CI): every unit, property, integration and model test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace (debug: assertions on)"
cargo test --workspace

echo "== release-mode allocator tests (the optimised fast paths, 100 000 threads, secure mode)"
cargo test --release -p nodalloc --test global_allocator --test rss --test hostile --test secure

echo "== release-mode C ABI tests (includes the 15-second soak with its RSS bound)"
cargo test --release -p nodalloc-ffi --test c_abi

echo "== loom models of the lock-free structures and of the lock"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p nodalloc --test loom --release
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p nodalloc --lib --release ds::

echo "== real NUMA: QEMU guests with 2 and 4 (+1 CPU-less) emulated nodes"
numa-vm/run --nodes 2
numa-vm/run --nodes 4 --memory-only-node

echo "== all tests passed"
