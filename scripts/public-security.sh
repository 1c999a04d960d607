#!/usr/bin/env bash
# mimalloc-bench's security suite (bench/security), built from a checkout of mimalloc-bench and
# run under LD_PRELOAD beside the peers, classified as its bench.sh classifies: a binary is
# caught ([+]) when its output holds no NOT_CAUGHT line and it ended within 1 s; everything else
# ([-], [late crash], [timeout], [late timeout]) is a miss. The project's own model of the suite
# is scripts/misuse-score.sh (tests/c/public_cases.def); where the two disagree, this one is
# right.
#
# Usage: scripts/public-security.sh MIMALLOC_BENCH_CHECKOUT [ROUNDS]
#   e.g. after `fetch github:daanx/mimalloc-bench` (a bare snapshot):
#   git -C /work/.mirror/daanx+mimalloc-bench/repo worktree add /tmp/mimalloc-bench HEAD
#   scripts/public-security.sh /tmp/mimalloc-bench 3
# Writes target/public-security/ALLOCATOR.txt (one line per binary: mark, then name) and prints
# each allocator's count of caught binaries per round.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
source_dir="${1:?usage: $0 MIMALLOC_BENCH_CHECKOUT [ROUNDS]}/bench/security"
rounds="${2:-1}"
[ -d "$source_dir" ] || { echo "no $source_dir" >&2; exit 1; }
out="$root/target/public-security"
bin="$out/bin"
mkdir -p "$bin"

# NODALLOC_LIBRARY: another build of the library to measure (default: this tree's, built now).
library="${NODALLOC_LIBRARY:-$root/target/release/libnodalloc.so}"
[ -n "${NODALLOC_LIBRARY:-}" ] || cargo build --release --quiet -p nodalloc-ffi --manifest-path "$root/Cargo.toml"

# The suite's CMakeLists, by hand (its build type is Release): every C program at 8 B, 4 KiB and 256 KiB, every C++ one at
# 4 KiB, with its flags.
flags=(-Wno-free-nonheap-object -fno-inline -fno-builtin-inline -fno-inline-small-functions
    -fno-ipa-pure-const)
for file in "$source_dir"/*.c; do
    name="$(basename "$file" .c)"
    for pair in small:8 medium:4096 large:262144; do
        target="$bin/${name}_${pair%%:*}"
        [ "$target" -nt "$file" ] && continue
        cc -O3 -DNDEBUG "${flags[@]}" -DALLOCATION_SIZE="${pair#*:}" -o "$target" "$file" 2>/dev/null
    done
done
for file in "$source_dir"/*.cc; do
    name="$(basename "$file" .cc)"
    target="$bin/$name"
    [ "$target" -nt "$file" ] && continue
    c++ -O3 -DNDEBUG -std=c++17 -fsized-deallocation -DALLOCATION_SIZE=4096 -o "$target" "$file" 2>/dev/null
done

names=(glibc nodalloc nodalloc-secure)
settings=("" "LD_PRELOAD=$library" "LD_PRELOAD=$library NODALLOC_SECURE=1")
source "$root/scripts/peers.sh"
for peer in "${PEER_LIBRARIES[@]}"; do
    if [ -f "${peer#*:}" ]; then
        names+=("${peer%%:*}")
        settings+=("LD_PRELOAD=${peer#*:}")
    fi
done

cd "$bin"
for round in $(seq "$rounds"); do
    line="round $round:"
    for index in "${!names[@]}"; do
        report="$out/${names[$index]}.txt"
        : >"$report"
        caught=0
        total=0
        for binary in *; do
            [ -x "$binary" ] && [ -f "$binary" ] || continue
            # As bench.sh runs it: env SETTINGS ./binary, 1 s, CRASHED/TIMEOUT appended.
            # shellcheck disable=SC2086
            output="$( ( (timeout 1s bash -c "/usr/bin/env ${settings[$index]} ./$binary || echo CRASHED") \
                || echo TIMEOUT) 2>/dev/null | tr -d '\0')"
            total=$((total + 1))
            if ! grep -aq NOT_CAUGHT <<<"$output" && ! grep -aq TIMEOUT <<<"$output"; then
                caught=$((caught + 1))
                echo "+ $binary" >>"$report"
            else
                echo "- $binary" >>"$report"
            fi
        done
        line+=" ${names[$index]} $caught/$total"
    done
    echo "$line"
done
