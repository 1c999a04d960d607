#!/usr/bin/env bash
# Writes crates/nodalloc-ffi/hot-code.ld: the functions of libnodalloc.so that ordinary programs
# run, which the library's link places together at the start of its code (DESIGN, "The library's
# code layout"). The kernel maps a shared library's code into a process by the 64 KiB around each
# page it faults in, so code run anywhere in a window costs the process the whole window: spread
# over the library, the 120 KB a small program runs made all 340 KB resident.
#
# The list comes from callgrind, which names every function a program executes: a few programs
# run under LD_PRELOAD with this tree's library (a small one with a second thread and the
# maintenance thread's passes, threads that come and go and free each other's blocks, aligned
# allocations, C++, and python3, bash and perl). A function run by more of them comes earlier.
# Names are written as patterns, the hash of each name and LLVM's suffixes left open, so the list
# holds as long as the functions keep their names; a function added or renamed since lands in
# the rest of the code, which costs resident memory, not correctness. Run it again after such
# changes (tests/c_abi/sparse.rs bounds the library's resident code).
#
# Usage: scripts/hot-code.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
cargo build --release --quiet -p nodalloc-ffi --manifest-path "$root/Cargo.toml"
library="$root/target/release/libnodalloc.so"
tests="$root/crates/nodalloc-ffi/tests/c"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for program in footprint churn aligned; do
    cc -O2 -pthread -DNODALLOC_PRELOADED -I "$root/crates/nodalloc-ffi/include" \
        -o "$work/$program" "$tests/$program.c" -ldl
done
cat >"$work/cxx.cpp" <<'EOF'
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>
int main() {
    std::map<int, std::string> words;
    for (int i = 0; i < 10000; i++)
        words[i] = std::to_string(i) + " and some more text";
    std::vector<std::unique_ptr<long[]>> arrays;
    for (int i = 1; i < 200; i++)
        arrays.emplace_back(new long[i * 37]);
    try {
        std::vector<char> huge(size_t(1) << 62);
        return 1;
    } catch (const std::bad_alloc &) {
    }
    return words.size() == 10000 ? 0 : 1;
}
EOF
c++ -O2 -o "$work/cxx" "$work/cxx.cpp"

names=()
# One program under callgrind, its profiles (one per process) named after it.
profile() {
    local name="$1"
    shift
    names+=("$name")
    valgrind --tool=callgrind --demangle=no --dump-instr=no --trace-children=yes \
        --callgrind-out-file="$work/profile.$name.%p" \
        env LD_PRELOAD="$library" "$@" >/dev/null 2>"$work/valgrind.$name.log" ||
        { echo "$0: $name failed under callgrind:" >&2; tail -5 "$work/valgrind.$name.log" >&2; exit 1; }
}
profile footprint "$work/footprint"
profile churn "$work/churn" 2 8
profile aligned "$work/aligned"
profile cxx "$work/cxx"
profile python3 python3 -c 'import json, decimal; json.dumps([str(decimal.Decimal(i) / 7) for i in range(3000)])'
profile bash bash -c 'for i in 3 1 2; do echo $i; done | sort -n | tail -1'
profile perl perl -e 'my %h; $h{$_} = "x" x $_ for 1 .. 3000; print scalar(keys %h), "\n"'

# Each program's functions in the library: `fn=` lines under an `ob=` naming it (names are
# compressed: `fn=(12) name` the first time, `fn=(12)` after, and `cfn=`/`cob=` lines define
# names too). A function counts once per program, however many processes ran it.
for name in "${names[@]}"; do
    for profile in "$work"/profile."$name".*; do
        awk '
            function name_of(spec, table,    id) {
                if (match(spec, /^\([0-9]+\)/)) {
                    id = substr(spec, 1, RLENGTH)
                    if (length(spec) > RLENGTH) table[id] = substr(spec, RLENGTH + 2)
                    return table[id]
                }
                return spec
            }
            /^ob=/ { object = name_of(substr($0, 4), objects); next }
            /^cob=/ { name_of(substr($0, 5), objects); next }
            /^cfn=/ { name_of(substr($0, 5), functions); next }
            /^fn=/ {
                function_name = name_of(substr($0, 4), functions)
                if (object ~ /libnodalloc\.so$/ && function_name !~ /^0x/) print function_name
            }
        ' "$profile"
    done | sort -u
done | sort | uniq -c | sort -k1,1nr -k2,2 >"$work/functions"

# Patterns: the legacy mangling's hash (17h + 16 hex digits + E), LLVM's `.llvm.N` suffix and the
# v0 mangling's crate disambiguators left open; characters a linker script would read as syntax
# turned into `?`. The section may carry a prefix (`.text.unlikely.` for code LLVM thinks cold).
#
# The script restates the default scripts' `.text` (GNU ld's and lld's take the same input
# sections, the listed ones first) and inserts it after `.init`, so the code stays in the one
# section named `.text` that tools such as valgrind read a library's symbols from. `.plt` and
# `.fini` come before it: the PLT is called at start (glibc's `pthread_atfork` and `atexit`
# stubs, linked from libc_nonshared.a, are listed too), `.fini` at exit, and lld would place
# both after the code, a window of cold code each.
out="$root/crates/nodalloc-ffi/hot-code.ld"
{
    echo "/* Written by scripts/hot-code.sh: the functions of libnodalloc.so that ordinary programs run,"
    echo " * placed together at the start of its code. Passed to the linker by build.rs. */"
    echo "SECTIONS"
    echo "{"
    echo "  .plt : { *(.plt) *(.iplt) }"
    echo "  .fini : { KEEP (*(SORT_NONE(.fini))) }"
    echo "  .text :"
    echo "  {"
    echo "    *crtbeginS.o(.text .text.*)"
    echo "    *libc_nonshared.a:*(.text .text.*)"
    awk '{
        name = $2
        gsub(/17h[0-9a-f]+E/, "17h*", name)
        gsub(/\.llvm\.[0-9]+/, "*", name)
        gsub(/Cs[0-9A-Za-z]+_/, "Cs*_", name)
        gsub(/[^A-Za-z0-9_.*]/, "?", name)
        if (!(name in seen)) { seen[name] = 1; printf "    *(.text.*%s)\n", name }
    }' "$work/functions"
    echo "    *(.text.unlikely .text.*_unlikely .text.unlikely.*)"
    echo "    *(.text.exit .text.exit.*)"
    echo "    *(.text.startup .text.startup.*)"
    echo "    *(.text.hot .text.hot.*)"
    echo "    *(SORT(.text.sorted.*))"
    echo "    *(.text .stub .text.* .gnu.linkonce.t.*)"
    echo "  }"
    echo "}"
    echo "INSERT AFTER .init;"
} >"$out"
echo "$(grep -c '^    \*(\.text\.\*' "$out") functions in $out"
