#!/usr/bin/env bash
# The heap-misuse suite's scores under glibc, nodalloc, nodalloc in secure mode and the peers that
# are installed (mimalloc, tcmalloc, jemalloc), as tables of caught (x) / not caught (.), for both
# sets of cases of the heap-misuse suite, crates/nodalloc-ffi/tests/c/misuse_suite.cpp and
# public_suite.c (tests/misuse_suite.rs holds nodalloc to them):
#
# - the project's extra cases: category × size 8, 4096, 262144 (the categories are the rows of
#   tests/c/misuse_cases.def, as `misuse_suite list` prints them). Caught: the process was killed
#   by a signal, exited non-zero, or ended without printing its `unnoticed` line (a 5 s timeout
#   counts as caught and is listed).
# - the public suite of record, mimalloc-bench's bench/security: its 116 binaries, each
#   reproduced by one program of tests/c/public_cases.def at one size (`public_suite
#   list-public` for the C programs, built as the public suite builds them, `misuse_suite
#   list-public` for the C++ ones), with its verdict: caught when the process ends without
#   printing its NOT_CAUGHT line within 1 s, as its bench.sh classifies ("public suite: N of
#   116"). They run one at a time, as bench.sh runs them; in the TSV their rows follow, as
#   PROGRAM SIZE.
#
# glibc-warm is glibc past its start (see below).
#
# Usage: scripts/misuse-score.sh [--tsv FILE] [--jobs N] [--no-build]
# The library is CARGO_TARGET_DIR's release build (default: target/), built first unless
# --no-build.
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
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

out="$root/target/misuse-suite"
mkdir -p "$out"
program="$out/misuse_suite"
public_program="$out/public_suite"
library="${CARGO_TARGET_DIR:-$root/target}/release/libnodalloc.so"

if [ "$build" = 1 ]; then
    cargo build --release --quiet -p nodalloc-ffi
    # As tests/misuse_suite.rs builds them, with the public suite's flags (PUBLIC_BUILD_FLAGS):
    # the C programs as the public suite builds them (PUBLIC_C_BUILD_FLAGS), the project's cases
    # and the C++ programs with -fsized-deallocation (PUBLIC_CXX_BUILD_FLAGS).
    public_flags=(-fno-inline -fno-builtin-inline -fno-inline-small-functions -fno-ipa-pure-const)
    c++ -O1 -g -pthread -fno-omit-frame-pointer -rdynamic "${public_flags[@]}" \
        -fsized-deallocation -Wall -Werror -DNODALLOC_PRELOADED -I crates/nodalloc-ffi/include \
        -o "$program" crates/nodalloc-ffi/tests/c/misuse_suite.cpp
    cc -O3 -DNDEBUG -Wno-free-nonheap-object "${public_flags[@]}" -Wall -Werror \
        -DNODALLOC_PRELOADED -I crates/nodalloc-ffi/include -o "$public_program" \
        crates/nodalloc-ffi/tests/c/public_suite.c
fi
for file in "$program" "$public_program"; do
    [ -x "$file" ] || { echo "no $file (run without --no-build)" >&2; exit 1; }
done
[ -f "$library" ] || { echo "no $library (run without --no-build)" >&2; exit 1; }

# name, LD_PRELOAD (empty: none), extra environment
# glibc-warm: glibc with the mmap threshold a program reaches once it frees its first block
# above 128 KiB (glibc raises it to that block's size): its blocks of 256 KiB then come from its
# heap, as in most programs after their start.
names=(glibc glibc-warm nodalloc nodalloc-secure)
preloads=("" "" "$library" "$library")
envs=("" "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4194304" "" "NODALLOC_SECURE=1")
source "$root/scripts/peers.sh"
for peer in "${PEER_LIBRARIES[@]}"; do
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
# The program's categories come from the table it includes (misuse_cases.def); the public
# suite's binaries, as NAME PROGRAM SIZE EXECUTABLE, from public_cases.def: the C programs'
# (public_suite) and the C++ programs' (misuse_suite), merged back into the table's order, which
# is that of the public program's names (its file names), then of their sizes.
mapfile -t categories < <("$program" list)
mapfile -t public < <(
    {
        "$public_program" list-public | sed "s|\$| $public_program|"
        "$program" list-public | sed "s|\$| $program|"
    } | LC_ALL=C sort -s -k2,2 -k3,3n
)

results="$out/results"
rm -rf "$results"
mkdir -p "$results"

# The `env` command line of one run, in the caller's (local) array `environment`: PRELOAD and
# EXTRA ("-" for none) and nothing else of nodalloc's or glibc's settings.
set_environment() {
    environment=(env -u LD_PRELOAD -u NODALLOC_SECURE -u GLIBC_TUNABLES)
    [ "$1" != - ] && environment+=("LD_PRELOAD=$1")
    [ "$2" != - ] && environment+=("$2")
    return 0
}

# One run: NAME PRELOAD EXTRA CATEGORY SIZE (PRELOAD and EXTRA are "-" for none). Prints
# nothing; leaves "RESULT<TAB>DETAIL" in $results/NAME/CATEGORY-SIZE.
run_case() {
    local name="$1" preload="$2" extra="$3" category="$4" size="$5"
    local file="$results/$name/$category-$size"
    local -a environment
    set_environment "$preload" "$extra"
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
# One run of a public program: NAME PRELOAD EXTRA BINARY PROGRAM SIZE EXECUTABLE (public_suite
# or misuse_suite). Its verdict as the public suite's bench.sh gives it: missed if the output
# holds the NOT_CAUGHT line (whatever came after) or the program was still running after 1 s,
# caught otherwise. Leaves "RESULT<TAB>DETAIL" in $results/NAME/public-BINARY.
run_public_case() {
    local name="$1" preload="$2" extra="$3" binary="$4" public_program="$5" size="$6"
    local executable="$7"
    local file="$results/$name/public-$binary"
    local -a environment
    set_environment "$preload" "$extra"
    local status
    status="$(
        {
            "${environment[@]}" timeout 1 "$executable" "$public_program" "$size" \
                >"$file.out" 2>"$file.err" </dev/null
            echo $?
        } 2>/dev/null
    )"
    local how
    if [ "$status" = 124 ]; then
        how="timeout"
    elif [ "$status" -gt 128 ]; then
        how="signal $((status - 128))"
    else
        how="exit $status"
    fi
    local result detail
    if grep -aq "NOT_CAUGHT $binary" "$file.out"; then
        result=. detail="NOT_CAUGHT, $how"
    elif [ "$how" = timeout ]; then
        result=. detail="timeout"
    else
        result=x detail="$how"
    fi
    printf '%s\t%s\n' "$result" "$detail" >"$file"
}
export -f set_environment run_case run_public_case
export program results

# Each case runs in its own process, 5 s at most, $jobs at a time (the public programs: below).
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
public_tasks="$out/public-tasks"
: >"$public_tasks"
for index in "${!names[@]}"; do
    for line in "${public[@]}"; do
        printf '%s %s %s %s\n' "${names[$index]}" "${preloads[$index]:--}" "${envs[$index]:--}" \
            "$line" >>"$public_tasks"
    done
done
started=$(date +%s)
xargs -P "$jobs" -L 1 bash -c 'run_case "$@"' _ <"$tasks"
# The public programs one at a time, as bench.sh runs them: their 1 s bound is part of the
# verdict (zero_on_malloc_large fills 1 GiB in about that time), so they share no CPU.
xargs -P 1 -L 1 bash -c 'run_public_case "$@"' _ <"$public_tasks"
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
    printf '\n\n'

    printf '%-40s' "public suite (bench/security)"
    for name in "${names[@]}"; do printf ' %16s' "$name"; done
    printf '\n'
    declare -A public_totals
    for line in "${public[@]}"; do
        binary="${line%% *}"
        printf '%-40s' "$binary"
        for name in "${names[@]}"; do
            mark="$(cut -f1 "$results/$name/public-$binary")"
            [ "$mark" = x ] && public_totals[$name]=$((${public_totals[$name]:-0} + 1))
            printf ' %16s' "$mark"
        done
        printf '\n'
    done
    printf '%-40s' "public suite: caught (of ${#public[@]})"
    for name in "${names[@]}"; do printf ' %16s' "${public_totals[$name]:-0}"; done
    printf '\n'
}
runs=$((${#names[@]} * (${#categories[@]} * ${#sizes[@]} + ${#public[@]})))
echo "($runs runs in ${elapsed} s; details in $results)"

timeouts="$(grep -l 'timeout' -r "$results" --include='*[0-9]' 2>/dev/null || true)"
if [ -n "$timeouts" ]; then
    echo "timed out (counted as caught):"
    sed "s|^$results/||" <<<"$timeouts"
fi
public_timeouts="$(grep -lxF $'.\ttimeout' -r "$results" --include='public-*' 2>/dev/null |
    grep -v '\.out$\|\.err$' || true)"
if [ -n "$public_timeouts" ]; then
    echo "public programs past 1 s without their line (counted as missed, as bench.sh does):"
    sed "s|^$results/||" <<<"$public_timeouts"
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
        # The public suite's binaries: the program's name and size in the first two columns.
        for line in "${public[@]}"; do
            read -r binary public_program size _ <<<"$line"
            printf '%s\t%s' "$public_program" "$size"
            for name in "${names[@]}"; do
                printf '\t%s' "$(cut -f1,2 "$results/$name/public-$binary" | tr '\t' ' ')"
            done
            printf '\n'
        done
    } >"$tsv"
    echo "wrote $tsv"
fi
