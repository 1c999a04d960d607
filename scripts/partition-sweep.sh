#!/usr/bin/env bash
# The call-site partition sweep (NODALLOC_CALLSITE=P): the classic server-model workload (four
# call sites: parse buffers, request objects, responses, a long-lived cache) and two real
# programs under LD_PRELOAD, for each P, run side by side in one invocation.
#
# Usage: scripts/partition-sweep.sh [REPEATS] [OUT]   (default 3 and target/partition-sweep;
# medians are printed)
# Columns: P, policy (default, or eager: NODALLOC_DECOMMIT_DELAY=0 NODALLOC_RETAIN=0, which
# gives freed spans back at once and so shows what the bags hold), elapsed ms, RSS once only the
# caches are live (KiB), the same after an idle second; then python3 and sqlite3: wall seconds
# and peak RSS (KiB); then the showdown's rss-time workload (churn, then free everything and
# wait a second): elapsed ms and RSS at the end (KiB). OUT gets the table as sweep.csv and its plots, each figure as a ratio to
# the mode off: partition_rss.png and partition_time.png.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
out=${2:-target/partition-sweep}
mkdir -p "$out"
cargo build --release -q -p nodalloc-ffi
cargo build --release -q -p nodalloc-bench --bin partition-plot
lib=$PWD/target/release/libnodalloc.so
classic=$(mktemp -d)/classic
cc -O2 -pthread -o "$classic" crates/nodalloc-bench/c/classic/*.c
work=$(mktemp -d)
trap 'rm -rf "$work" "$(dirname "$classic")"' EXIT

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

python_program='
d = {}
for i in range(300000):
    d[str(i)] = [i] * (i % 7)
    if i % 3 == 0:
        d.pop(str(i // 2), None)
s = sorted(d.items(), key=lambda kv: len(kv[1]))
print(len(s))
'
sqlite_program="create table t(a integer, b text);
with recursive c(x) as (select 1 union all select x + 1 from c where x < 200000)
insert into t select x, hex(randomblob(40)) from c;
create index i on t(b);
select count(*), sum(length(b)) from t where a % 7 = 0;"

printf '%-5s %-8s %9s %10s %10s %8s %9s %8s %9s %8s %10s\n' P policy ms rss_after rss_idle \
    py_s py_kib sql_s sql_kib rt_ms rt_kib
echo "P,policy,ms,rss_after_kib,rss_idle_kib,python_s,python_kib,sqlite_s,sqlite_kib,rss_time_ms,rss_time_final_kib" > "$out/sweep.csv"
for partitions in 0 16 64 256 1024 4096; do
    for policy in default eager; do
        env_policy=()
        [ "$policy" = eager ] && env_policy=(NODALLOC_DECOMMIT_DELAY=0 NODALLOC_RETAIN=0)
        : > "$work/server" ; : > "$work/python" ; : > "$work/sqlite" ; : > "$work/rss_time"
        for _ in $(seq "$repeats"); do
            env "${env_policy[@]}" NODALLOC_CALLSITE=$partitions LD_PRELOAD="$lib" \
                "$classic" server-model 2 1 | tail -n 1 >> "$work/server"
            if [ "$policy" = default ]; then
                env NODALLOC_CALLSITE=$partitions LD_PRELOAD="$lib" /usr/bin/time -f '%e %M' \
                    -o "$work/t" python3 -c "$python_program" > /dev/null
                cat "$work/t" >> "$work/python"
                rm -f "$work/db"
                env NODALLOC_CALLSITE=$partitions LD_PRELOAD="$lib" /usr/bin/time -f '%e %M' \
                    -o "$work/t" sqlite3 "$work/db" "$sqlite_program" > /dev/null
                cat "$work/t" >> "$work/sqlite"
                env NODALLOC_CALLSITE=$partitions LD_PRELOAD="$lib" \
                    "$classic" rss-time 2 1 | tail -n 1 >> "$work/rss_time"
            fi
        done
        ms=$(field elapsed_ns < "$work/server" | awk '{print $1 / 1e6}' | median)
        after=$(field rss_after_kib < "$work/server" | median)
        idle=$(field rss_idle_kib < "$work/server" | median)
        if [ "$policy" = default ]; then
            py_s=$(cut -d' ' -f1 "$work/python" | median); py_k=$(cut -d' ' -f2 "$work/python" | median)
            sql_s=$(cut -d' ' -f1 "$work/sqlite" | median); sql_k=$(cut -d' ' -f2 "$work/sqlite" | median)
            rt_ms=$(field elapsed_ns < "$work/rss_time" | awk '{print $1 / 1e6}' | median)
            rt_k=$(field final_rss_kib < "$work/rss_time" | median)
        else
            py_s=-; py_k=-; sql_s=-; sql_k=-; rt_ms=-; rt_k=-
        fi
        printf '%-5s %-8s %9.1f %10s %10s %8s %9s %8s %9s %8s %10s\n' "$partitions" "$policy" \
            "$ms" "$after" "$idle" "$py_s" "$py_k" "$sql_s" "$sql_k" "$rt_ms" "$rt_k"
        echo "$partitions,$policy,$ms,$after,$idle,$py_s,$py_k,$sql_s,$sql_k,$rt_ms,$rt_k" \
            >> "$out/sweep.csv"
    done
done
target/release/partition-plot "$out/sweep.csv" "$out"
