#!/usr/bin/env bash
# Builds and installs libnodalloc.so / libnodalloc.a, nodalloc.h, nodalloc.pc and the nodalloc
# launcher under PREFIX (default /usr/local).
#   ./scripts/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
cargo build --release -p nodalloc-ffi
install -d "$prefix/lib" "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/bin"
install -m 755 target/release/libnodalloc.so "$prefix/lib/"
install -m 644 target/release/libnodalloc.a "$prefix/lib/"
install -m 644 crates/nodalloc-ffi/include/nodalloc.h "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" crates/nodalloc-ffi/nodalloc.pc.in \
  > "$prefix/lib/pkgconfig/nodalloc.pc"
if cargo build --release -p nodalloc-cli 2>/dev/null; then
  install -m 755 target/release/nodalloc "$prefix/bin/"
fi
echo "installed nodalloc $version under $prefix"
