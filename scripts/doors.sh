#!/usr/bin/env bash
# The core crate's layer rule (docs/DESIGN.md, "Layers"), checked: a module calls only the
# layers below it, and only the node layer reaches the arena. Fails, naming each line, when
# code reaches past a door. Test files (`*tests.rs`, `tests/`) and comment lines are not
# checked: tests are white-box.
# Usage: scripts/doors.sh [source root]
#        scripts/doors.sh --self-test   (plants one violation per rule in a copy: each must fail)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --self-test ]; then
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    # file | line planted after the first line
    plants=(
        "arena/mod.rs|use crate::node::NodeId;"
        "node/bags.rs|use crate::thread::ThreadHeap;"
        "thread/upkeep.rs|use crate::{ds::spinlock::SpinLock, arena::Arena};"
        "thread/mod.rs|fn planted(h: \&crate::node::NodeHeaps) { h.arena.purge(false) }"
        "instance/background.rs|fn planted(h: \&crate::node::NodeHeaps) { h.arena.purge(false) }"
        "os/mod.rs|use crate::instance::Instance;"
        "ds/ring.rs|use crate::node::NodeId;"
        "raw.rs|pub use crate::arena::Arena;"
    )
    for plant in "${plants[@]}"; do
        file=${plant%%|*} line=${plant#*|}
        rm -rf "$scratch/src" && cp -r crates/nodalloc/src "$scratch/src"
        sed -i "1a $line" "$scratch/src/$file"
        if "$0" "$scratch/src" 2>/dev/null; then
            echo "doors self-test: a planted violation in $file passed: $line" >&2
            exit 1
        fi
    done
    echo "doors self-test: all ${#plants[@]} planted violations fail"
    exit 0
fi

src=${1:-crates/nodalloc/src}

failed=0
# check <description> <directory or file under $src> <extended regex of what it must not use>
check() {
    local what=$1 where=$2 pattern=$3
    local hits
    hits=$(grep -rnE --include='*.rs' "$pattern" "$src/$where" 2>/dev/null \
        | grep -vE '^[^:]*(tests\.rs|/tests/[^:]*):' \
        | grep -vE '^[^:]*:[0-9]+:\s*//' || true)
    if [ -n "$hits" ]; then
        echo "doors: $what" >&2
        echo "$hits" | sed 's/^/  /' >&2
        failed=1
    fi
}

# A path that names one of the modules (`crate::arena`, or `arena::` at the start of a path,
# as in a grouped `use crate::{…, arena::X}`), or, with `field`, the node heaps' arena field.
uses() {
    local modules=$1 field=${2:-}
    local pattern="crate::($modules)\b|(^|[^:_A-Za-z0-9])($modules)::"
    [ -n "$field" ] && pattern="$pattern|\.arena\b"
    echo "$pattern"
}

check "the arena (back layer) calls only os, ds and size classes" arena \
    "$(uses 'node|thread|instance|raw')"
check "the node layer calls arena, not the layers above it" node "$(uses 'thread|instance|raw')"
check "the thread layer calls node only, never the arena or the layers above" thread \
    "$(uses 'arena|instance|raw' field)"
check "instance reaches the arena only through node" instance "$(uses 'arena' field)"
check "os (platform) calls nothing above it" os "$(uses 'arena|node|thread|instance|raw')"
check "ds (data structures) call nothing above them" ds "$(uses 'arena|node|thread|instance|raw')"
for face in lib.rs raw.rs stats.rs bind.rs; do
    check "$face reaches the arena only through node" "$face" "$(uses 'arena' field)"
done

if [ "$failed" -ne 0 ]; then
    echo "doors: a layer reaches past its door (see docs/DESIGN.md, Layers)" >&2
    exit 1
fi
echo "doors: every layer keeps to its door"
