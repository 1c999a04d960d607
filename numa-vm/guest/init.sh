#!/bin/sh
# /init of the numa-vm guest (busybox sh; copied into the initramfs by numa-vm/run). Runs every
# test under every allocator, one process each, prints the RESULT lines on the console and
# powers the guest off. The host script decides pass/fail from those lines; this script only
# makes sure that a test which dies without a RESULT line still leaves one behind.
# shellcheck disable=SC3040 # busybox ash has pipefail
set -euo pipefail
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp

# Kernel command line: numatest.filter=NAME keeps the tests whose name contains NAME;
# numatest.env=NODALLOC_X=V (any number) adds NODALLOC_X=V to every nodalloc run;
# numatest.tiered=1 (numa-vm/run --kernel 6.12) tells every test that the kernel has memory
# tiers and weighted interleave (NUMATEST_TIERED=1: the tests that probe them judge);
# numatest.weights=NODE:WEIGHT,... (--far-node) are the weighted-interleave weights to set.
filter=""
nodalloc_env=""
tiered=0
weights=""
# shellcheck disable=SC2013 # the command line is one line of words
for word in $(cat /proc/cmdline); do
    case "$word" in
        numatest.filter=*) filter="${word#numatest.filter=}" ;;
        numatest.env=*) nodalloc_env="$nodalloc_env ${word#numatest.env=}" ;;
        numatest.tiered=*) tiered="${word#numatest.tiered=}" ;;
        numatest.weights=*) weights="${word#numatest.weights=}" ;;
    esac
done

# The weights, where the kernel has them (Linux 6.9 and later), before any test runs; then
# every node's weight as the kernel reads it back, set or not.
weight_dir=/sys/kernel/mm/mempolicy/weighted_interleave
if [ -d "$weight_dir" ]; then
    for pair in $(echo "$weights" | tr , ' '); do
        echo "${pair#*:}" >"$weight_dir/node${pair%%:*}" ||
            echo "NUMATEST-WEIGHTS cannot set node${pair%%:*} to ${pair#*:}"
    done
    line=""
    for file in "$weight_dir"/node*; do
        [ -e "$file" ] || continue
        line="$line ${file##*/}=$(cat "$file")"
    done
    echo "NUMATEST-WEIGHTS$line"
else
    echo "NUMATEST-WEIGHTS none (no $weight_dir)"
fi

# The tests come from numatest's table (guest/tests.c), in run order, those whose name contains
# the filter and that this machine can run (the ones that need a node with memory and no CPU
# only with numa-vm/run --memory-only-node). One line each: "NAME PEERS [VAR=VALUE]...", PEERS
# "all" or "nodalloc" (the nodalloc-only tests measure nodalloc's own machinery), then what
# every run of the test adds to its environment.
tests=/tmp/tests
/bin/numatest list "$filter" >"$tests"
# The words after NAME on the line of test NAME.
listed() {
    while read -r name rest; do
        [ "$name" != "$1" ] || { echo "$rest"; return 0; }
    done <"$tests"
}
# mimalloc before nodalloc: hoard_stress judges nodalloc against mimalloc's figure.
allocators="glibc jemalloc mimalloc nodalloc"
lib=/usr/lib/x86_64-linux-gnu

plan=""
while read -r test _; do
    plan="$plan $test"
done <"$tests"
echo "NUMATEST-PLAN$plan"
[ -z "$nodalloc_env" ] || echo "nodalloc runs with:$nodalloc_env"
/bin/numatest sysinfo

results=/tmp/results
: >"$results"
# The settings overcommit_never and thp_modes change; they restore them themselves, and this
# puts them back after every test in case a test died first.
overcommit=$(cat /proc/sys/vm/overcommit_memory)
thp_file=/sys/kernel/mm/transparent_hugepage/enabled
thp=""
[ -r "$thp_file" ] && thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp_file")
restore_settings() {
    [ "$(cat /proc/sys/vm/overcommit_memory)" = "$overcommit" ] ||
        echo "$overcommit" >/proc/sys/vm/overcommit_memory
    [ -z "$thp" ] || grep -q "\[$thp\]" "$thp_file" || echo "$thp" >"$thp_file"
}
for test in $plan; do
    # shellcheck disable=SC2046 # the line's words
    set -- $(listed "$test")
    peers=$1
    shift
    environment="$*"
    for allocator in $allocators; do
        [ "$peers" = all ] || [ "$allocator" = nodalloc ] || continue
        preload=""
        options=""
        case "$allocator" in
            nodalloc) preload=/lib/nodalloc/libnodalloc.so; options="$nodalloc_env" ;;
            jemalloc) preload=$lib/libjemalloc.so.2 ;;
            mimalloc) preload=$lib/libmimalloc.so.2 ;;
        esac
        extra="$environment NUMATEST_TIERED=$tiered"
        if [ "$test" = hoard_stress ]; then
            reference=$(sed -n 's/^RESULT hoard_stress mimalloc .* remote_pages=\([0-9]*\/[0-9]*\).*/\1/p' "$results")
            extra="$extra NUMATEST_REFERENCE=${reference:-none}"
        fi
        out=/tmp/out
        status=0
        began=$(date +%s)
        # shellcheck disable=SC2086 # $options and $extra are VAR=value words or empty
        timeout 150 env ${preload:+LD_PRELOAD=$preload} $options $extra \
            /bin/numatest "$test" "$allocator" >"$out" 2>&1 || status=$?
        restore_settings
        cat "$out"
        cat "$out" >>"$results"
        echo "NUMATEST-TIME $test $allocator $(($(date +%s) - began)) s"
        if ! grep -q "^RESULT $test $allocator " "$out"; then
            verdict=info
            [ "$allocator" = nodalloc ] && verdict=fail
            echo "RESULT $test $allocator $verdict error=no-result exit=$status"
        fi
    done
done
echo "NUMATEST-END"
poweroff -f
