#!/usr/bin/env bash
# Checks that the allocator crates (nodalloc, nodalloc-ffi) build with the rust-version they
# declare. The workspace's other members and the crates' dev-dependencies (clap, loom, proptest,
# criterion) need newer toolchains, so the check copies the two crates into a scratch workspace
# without dev-dependencies and lets cargo pick dependency versions that declare support for that
# version (MSRV-aware resolution, cargo 1.84+).
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "Cargo.toml declares no workspace rust-version" >&2; exit 1; }
rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1 || true

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/crates"
cp -r crates/nodalloc crates/nodalloc-ffi "$scratch/crates/"
for manifest in "$scratch"/crates/*/Cargo.toml; do
    # Drop the dev-dependencies and the loom model's dependencies (each table up to the next).
    awk '/^\[dev-dependencies\]/ || /^\[target.*loom.*dependencies\]/{skip=1; next} /^\[/{skip=0} !skip' \
        "$manifest" > "$manifest.new"
    mv "$manifest.new" "$manifest"
done
# The root manifest's shared tables (package fields, lints, profiles) as they are, under a
# workspace of the two crates.
cat > "$scratch/Cargo.toml" <<TOML
[workspace]
resolver = "2"
members = ["crates/nodalloc", "crates/nodalloc-ffi"]

$(sed -n '/^\[workspace.package\]/,$p' Cargo.toml)
TOML
cd "$scratch"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo generate-lockfile -q
cargo "+$msrv" check -q -p nodalloc -p nodalloc-ffi --lib
# The library alone, as it ships: the core crate without std, its panic handler.
cargo "+$msrv" check -q -p nodalloc-ffi --lib
echo "nodalloc and nodalloc-ffi build with Rust $msrv"
