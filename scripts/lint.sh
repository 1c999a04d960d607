#!/usr/bin/env bash
# The checks CI runs before the tests: format, clippy, API docs without a warning, the declared
# rust-version. Run it before every commit that touches code or doc comments.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The core crate's layers keep to their doors (and the check itself fails on planted violations).
./scripts/doors.sh
./scripts/doors.sh --self-test
# The API documentation builds without a warning (broken links, undocumented public items).
# The C library and the launcher are also named `nodalloc`, so their docs go to their own
# directories.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p nodalloc
RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=target/doc-ffi cargo doc --no-deps -p nodalloc-ffi
RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=target/doc-cli cargo doc --no-deps -p nodalloc-cli
# The allocator crates build with the rust-version they declare.
./scripts/msrv.sh
