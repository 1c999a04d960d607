#!/usr/bin/env bash
# mimalloc-bench's threaded programs (and mimalloc's test-stress), built from public checkouts and
# run under LD_PRELOAD beside the peers, rounds interleaved: the public measure of issue 32
# (threads that share, churn and outnumber the cores). Each program runs with the command line
# of mimalloc-bench's bench.sh at `nproc` threads; programs that run for a fixed time are
# compared by their own figure turned into a time (lower is better), as bench.sh does, the
# others by elapsed time. Nothing of the suites is copied into the project: they are built
# under target/mimalloc-bench from the checkouts given.
#
# Usage: scripts/mimalloc-bench.sh MIMALLOC_BENCH_CHECKOUT [ROUNDS] [PROGRAM ...]
#   e.g. after `fetch github:daanx/mimalloc-bench` (a bare snapshot):
#   git -C /work/.mirror/daanx+mimalloc-bench/repo worktree add /tmp/mimalloc-bench HEAD
#   scripts/mimalloc-bench.sh /tmp/mimalloc-bench 3
# MIMALLOC_CHECKOUT: a checkout of microsoft/mimalloc, for test/test-stress.c (left out
# without it). NODALLOC_LIBRARY: another build of the library to measure (default: this
# tree's, built now). NODALLOC_BASE_LIBRARY: a second build, measured as `nodalloc-base` when
# ALLOCATORS names it (a change against the build before it, in the same rounds).
# ALLOCATORS: which of nodalloc, nodalloc-base, mimalloc, tcmalloc, jemalloc, glibc (default:
# nodalloc, mimalloc, tcmalloc). Programs: larsonN larsonN-sized alloc-testN rptestN glibc-thread
# xmalloc-testN cache-scratchN mstressN test-stress (the default), and the single-threaded and
# other programs of the suite that build from its checkout: cfrac espresso barnes cache-thrash1
# cache-thrashN cache-scratch1 glibc-simple malloc-large mleak10 mleak100. `all` names every one
# (the suite less what bench.sh downloads: redis, lean, lua, gs, rocksdb, sh6bench, sh8bench, z3,
# and rbstress, which needs ruby).
# Writes target/mimalloc-bench/runs.tsv (round, program, allocator, figure, peak RSS in KiB) and
# prints each program's median figure, its ratio to mimalloc's and its peak RSS, then the
# geometric means.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
checkout="${1:?usage: $0 MIMALLOC_BENCH_CHECKOUT [ROUNDS] [PROGRAM ...]}"
rounds="${2:-3}"
shift $(($# < 2 ? $# : 2))
[ -f "$checkout/bench/CMakeLists.txt" ] || { echo "no $checkout/bench/CMakeLists.txt" >&2; exit 1; }
out="$root/target/mimalloc-bench"
mkdir -p "$out/build"

library="${NODALLOC_LIBRARY:-$root/target/release/libnodalloc.so}"
[ -n "${NODALLOC_LIBRARY:-}" ] || cargo build --release --quiet -p nodalloc-ffi --manifest-path "$root/Cargo.toml"

# The bench directory as published, less sh6bench and sh8bench (bench.sh downloads their
# sources; the checkout has none).
rm -rf "$out/src"
cp -r "$checkout/bench" "$out/src"
sed -i '/sh[68]bench/d' "$out/src/CMakeLists.txt"
(cd "$out/build" && cmake -DCMAKE_BUILD_TYPE=Release "$out/src" >cmake.log &&
    make -j"$(nproc)" larson larson-sized alloc-test rptest glibc-thread xmalloc-test \
        cache-scratch mstress cfrac espresso malloc-large barnes cache-thrash glibc-simple mleak \
        >make.log)
if [ -n "${MIMALLOC_CHECKOUT:-}" ]; then
    cc -O2 -DNDEBUG -DUSE_STD_MALLOC -o "$out/build/test-stress" \
        "$MIMALLOC_CHECKOUT/test/test-stress.c" -lpthread
fi

procs="$(nproc)"
command_of() {
    case $1 in
    larsonN) echo "./larson 5 8 1000 5000 100 4141 $procs" ;;
    larsonN-sized) echo "./larson-sized 5 8 1000 5000 100 4141 $procs" ;;
    alloc-testN) echo "./alloc-test $procs" ;;
    rptestN) echo "./rptest $procs 0 1 2 500 1000 100 8 16000" ;;
    glibc-thread) echo "./glibc-thread $procs" ;;
    xmalloc-testN) echo "./xmalloc-test -w $procs -t 5 -s 64" ;;
    cache-scratchN) echo "./cache-scratch $procs 1000 1 2000000 $procs" ;;
    mstressN) echo "./mstress $procs 50 25" ;;
    test-stress) echo "./test-stress" ;;
    cfrac) echo "./cfrac 17545186520507317056371138836327483792789528" ;;
    espresso) echo "./espresso $out/src/espresso/largest.espresso" ;;
    malloc-large) echo "./malloc-large" ;;
    barnes) echo "./barnes" ;;
    cache-thrash1) echo "./cache-thrash 1 1000 1 2000000 $procs" ;;
    cache-thrashN) echo "./cache-thrash $procs 1000 1 2000000 $procs" ;;
    cache-scratch1) echo "./cache-scratch 1 1000 1 2000000 $procs" ;;
    glibc-simple) echo "./glibc-simple" ;;
    mleak10) echo "./mleak 5" ;;
    mleak100) echo "./mleak 50" ;;
    *) echo "unknown program $1" >&2; exit 1 ;;
    esac
}

programs=("$@")
threaded=(larsonN larsonN-sized alloc-testN rptestN glibc-thread xmalloc-testN cache-scratchN mstressN)
if [ "${programs[*]}" = all ]; then
    programs=(cfrac espresso barnes larsonN-sized mstressN rptestN alloc-testN xmalloc-testN
        cache-scratch1 cache-scratchN glibc-simple glibc-thread larsonN malloc-large mleak10
        mleak100 cache-thrash1 cache-thrashN)
    [ -x "$out/build/test-stress" ] && programs+=(test-stress)
elif [ ${#programs[@]} -eq 0 ]; then
    programs=("${threaded[@]}")
    [ -x "$out/build/test-stress" ] && programs+=(test-stress)
fi
declare -A preload=(
    [nodalloc]="$library"
    [nodalloc-base]="${NODALLOC_BASE_LIBRARY:-}"
    [glibc]=""
)
source "$root/scripts/peers.sh"
for peer in "${PEER_LIBRARIES[@]}"; do
    preload[${peer%%:*}]="${peer#*:}"
done
read -r -a allocators <<<"${ALLOCATORS:-nodalloc mimalloc tcmalloc}"

runs="$out/runs.tsv"
: >"$runs"
cd "$out/build"
for round in $(seq "$rounds"); do
    for program in "${programs[@]}"; do
        for allocator in "${allocators[@]}"; do
            lib="${preload[$allocator]}"
            [ -z "$lib" ] || [ -f "$lib" ] || continue
            [ "$allocator" != nodalloc-base ] || [ -n "$lib" ] || continue
            # shellcheck disable=SC2046
            input=/dev/null
            [ "$program" != barnes ] || input="$out/src/barnes/input"
            output="$( { /usr/bin/time -f "TIME %e %M" env ${lib:+LD_PRELOAD=$lib} \
                $(command_of "$program") <"$input"; } 2>&1 || true)"
            read -r _ elapsed rss <<<"$(grep '^TIME' <<<"$output" | tail -1 || true)"
            case $program in
            larson*) figure="$(sed -n 's/.*Throughput = *\([0-9]*\).*/\1/p' <<<"$output" | awk '{ printf "%.4f", 1e9 / $1 }')" ;;
            rptest*) figure="$({ grep -o '[0-9]* memory ops/CPU' <<<"$output" || true; } | awk '{ printf "%.4f", 1e9 / $1 }')" ;;
            glibc-thread) figure="$(sed -n 's/^\([0-9]*\) iterations/\1/p' <<<"$output" | awk '{ printf "%.4f", 1e9 / $1 }')" ;;
            xmalloc*) figure="$(sed -n 's/rtime: *\([0-9.]*\),.*/\1/p' <<<"$output")" ;;
            *) figure="$elapsed" ;;
            esac
            printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$program" "$allocator" "${figure:-nan}" "${rss:-0}" | tee -a "$runs"
        done
    done
done

python3 - "$runs" <<'PY'
import collections, math, statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().splitlines() if line]
figures, rss = collections.defaultdict(list), collections.defaultdict(list)
programs, allocators = [], []
for _, program, allocator, figure, kib in rows:
    programs += [program] if program not in programs else []
    allocators += [allocator] if allocator not in allocators else []
    if figure != "nan":
        figures[program, allocator].append(float(figure))
        rss[program, allocator].append(float(kib))
base = "mimalloc" if "mimalloc" in allocators else allocators[0]
print(f"\nmedians over the rounds; (ratio to {base}); peak RSS")
print("program".ljust(16) + "".join(a.rjust(26) for a in allocators))
logs, rss_logs = collections.defaultdict(list), collections.defaultdict(list)
for program in programs:
    line = program.ljust(16)
    for allocator in allocators:
        if not figures[program, allocator] or not figures[program, base]:
            line += "-".rjust(26)
            continue
        m = statistics.median(figures[program, allocator])
        b = statistics.median(figures[program, base])
        r, rb = statistics.median(rss[program, allocator]), statistics.median(rss[program, base])
        logs[allocator].append(math.log(m / b))
        rss_logs[allocator].append(math.log(r / rb))
        line += f"{m:.3f} ({m / b:.2f}) {r / 1024:.0f} MiB".rjust(26)
    print(line)
for allocator in allocators:
    if logs[allocator]:
        print(f"{allocator}: time geomean {math.exp(statistics.mean(logs[allocator])):.3f}, "
              f"peak-RSS geomean {math.exp(statistics.mean(rss_logs[allocator])):.3f} x {base}")
# The machine's slow spells move whole rounds: a ratio taken within one round (the allocators
# run back to back) and its median over the rounds is the steadier figure.
by_round = {(r, p, a): float(f) for r, p, a, f, _ in rows if f != "nan"}
rounds = sorted({r for r, *_ in rows})
print(f"\nmedian over the rounds of each round's ratio to {base}")
for allocator in allocators:
    ratios = []
    for program in programs:
        within = [by_round[r, program, allocator] / by_round[r, program, base] for r in rounds
                  if (r, program, allocator) in by_round and (r, program, base) in by_round]
        if within:
            ratios.append(statistics.median(within))
    if ratios:
        print(f"{allocator}: time geomean {math.exp(statistics.mean(map(math.log, ratios))):.3f}")
PY
