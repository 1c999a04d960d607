#!/usr/bin/env bash
# The heap-misuse suite's score: every case of crates/nodalloc-ffi/tests/c/misuse_suite.cpp
# (category × size 8, 4096, 262144; the categories are the rows of tests/c/misuse_cases.def, as
# `misuse_suite list` prints them) under glibc, nodalloc, nodalloc in secure mode and the peers
# that are installed (mimalloc, tcmalloc, jemalloc), as a table of caught (x) / not caught (.).
# glibc-warm is glibc past its start (see below).
#
# Caught: the process was killed by a signal, exited non-zero, or ended without printing its
# `unnoticed` line (a 5 s timeout counts as caught and is listed).
#
# Usage: scripts/misuse-score.sh [--tsv FILE] [--jobs N] [--no-build]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

tsv=""
jobs="$(nproc 2>/dev/null || echo 2)"
build=1
while [ $# -gt 0 ]; do
    case "$1" in
        --tsv) tsv="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

out="$root/target/misuse-suite"
mkdir -p "$out"
program="$out/misuse_suite"
library="$root/target/release/libnodalloc.so"

if [ "$build" = 1 ]; then
    cargo build --release --quiet -p nodalloc-ffi
    c++ -O1 -g -pthread -fno-omit-frame-pointer -rdynamic -Wall -Werror \
        -I crates/nodalloc-ffi/include -o "$program" crates/nodalloc-ffi/tests/c/misuse_suite.cpp
fi
[ -x "$program" ] || { echo "no $program (run without --no-build)" >&2; exit 1; }
[ -f "$library" ] || { echo "no $library (run without --no-build)" >&2; exit 1; }

# name, LD_PRELOAD (empty: none), extra environment
# glibc-warm: glibc with the mmap threshold a program reaches once it frees its first block
# above 128 KiB (glibc raises it to that block's size): its blocks of 256 KiB then come from its
# heap, as in most programs after their start.
names=(glibc glibc-warm nodalloc nodalloc-secure)
preloads=("" "" "$library" "$library")
envs=("" "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4194304" "" "NODALLOC_SECURE=1")
for peer in mimalloc:/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 \
    tcmalloc:/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
    jemalloc:/usr/lib/x86_64-linux-gnu/libjemalloc.so.2; do
    name="${peer%%:*}"
    path="${peer#*:}"
    if [ -f "$path" ]; then
        names+=("$name")
        preloads+=("$path")
        envs+=("")
    else
        echo "note: $name skipped ($path is missing)" >&2
    fi
done

sizes=(8 4096 262144)
# The program's categories come from the table it includes (misuse_cases.def).
mapfile -t categories < <("$program" list)

results="$out/results"
rm -rf "$results"
mkdir -p "$results"

# One run: NAME PRELOAD EXTRA CATEGORY SIZE (PRELOAD and EXTRA are "-" for none). Prints
# nothing; leaves "RESULT<TAB>DETAIL" in $results/NAME/CATEGORY-SIZE.
run_case() {
    local name="$1" preload="$2" extra="$3" category="$4" size="$5"
    local file="$results/$name/$category-$size"
    local -a environment=(env -u LD_PRELOAD -u NODALLOC_SECURE -u GLIBC_TUNABLES)
    [ "$preload" != - ] && environment+=("LD_PRELOAD=$preload")
    [ "$extra" != - ] && environment+=("$extra")
    # In a subshell whose stderr is dropped: bash would report each signal death there.
    local status
    status="$(
        {
            "${environment[@]}" timeout -s KILL 5 "$program" "$category" "$size" \
                >"$file.out" 2>"$file.err" </dev/null
            echo $?
        } 2>/dev/null
    )"
    local result detail
    if [ "$status" = 137 ]; then
        result=x detail="timeout or SIGKILL"
    elif [ "$status" -gt 128 ]; then
        result=x detail="signal $((status - 128))"
    elif [ "$status" != 0 ]; then
        result=x detail="exit $status"
    elif grep -qx "unnoticed $category $size" "$file.out"; then
        result=. detail="unnoticed"
    else
        result=x detail="$(grep -m1 '^outcome avoided' "$file.out" || echo 'no unnoticed line')"
    fi
    printf '%s\t%s\n' "$result" "$detail" >"$file"
}
export -f run_case
export program results

# Each case runs in its own process, 5 s at most, $jobs at a time.
tasks="$out/tasks"
: >"$tasks"
for index in "${!names[@]}"; do
    name="${names[$index]}"
    mkdir -p "$results/$name"
    for category in "${categories[@]}"; do
        for size in "${sizes[@]}"; do
            printf '%s %s %s %s %s\n' "$name" "${preloads[$index]:--}" "${envs[$index]:--}" \
                "$category" "$size" >>"$tasks"
        done
    done
done
started=$(date +%s)
xargs -P "$jobs" -L 1 bash -c 'run_case "$@"' _ <"$tasks"
elapsed=$(($(date +%s) - started))

# The table.
{
    printf '%-36s' "case"
    for name in "${names[@]}"; do printf ' %16s' "$name"; done
    printf '\n'
    declare -A totals
    for category in "${categories[@]}"; do
        for size in "${sizes[@]}"; do
            printf '%-36s' "$category $size"
            for name in "${names[@]}"; do
                mark="$(cut -f1 "$results/$name/$category-$size")"
                [ "$mark" = x ] && totals[$name]=$((${totals[$name]:-0} + 1))
                printf ' %16s' "$mark"
            done
            printf '\n'
        done
    done
    total=$((${#categories[@]} * ${#sizes[@]}))
    printf '%-36s' "caught (of $total)"
    for name in "${names[@]}"; do printf ' %16s' "${totals[$name]:-0}"; done
    printf '\n'
}
echo "($((${#names[@]} * ${#categories[@]} * ${#sizes[@]})) runs in ${elapsed} s; details in $results)"

timeouts="$(grep -l 'timeout' -r "$results" --include='*[0-9]' 2>/dev/null || true)"
if [ -n "$timeouts" ]; then
    echo "timed out (counted as caught):"
    sed "s|^$results/||" <<<"$timeouts"
fi

if [ -n "$tsv" ]; then
    {
        printf 'category\tsize'
        for name in "${names[@]}"; do printf '\t%s' "$name"; done
        printf '\n'
        for category in "${categories[@]}"; do
            for size in "${sizes[@]}"; do
                printf '%s\t%s' "$category" "$size"
                for name in "${names[@]}"; do
                    printf '\t%s' "$(cut -f1,2 "$results/$name/$category-$size" | tr '\t' ' ')"
                done
                printf '\n'
            done
        done
    } >"$tsv"
    echo "wrote $tsv"
fi
