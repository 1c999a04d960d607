#!/usr/bin/env bash
# Installs (with apt, on Debian or Ubuntu) what the tests and the showdown use and this machine
# lacks: build tools for the peers' crates, the programs the LD_PRELOAD tests and the showdown
# run (gcc, python3, perl, git, sqlite3, redis-server with redis-benchmark), valgrind for the
# callgrind counts, the peers' shared libraries for the C-level showdown (libmimalloc2.0,
# libjemalloc2, libtcmalloc-minimal4), a TrueType font for the PNG plots, and Clang 22 where apt
# has it (the allocation-token test builds a program with -fsanitize=alloc-token). Prints what
# it installs; does nothing when all are present.
#   scripts/setup.sh
set -euo pipefail

need_apt=()
for tool in cmake:cmake g++:g++ make:make valgrind:valgrind gcc:gcc python3:python3 perl:perl \
            git:git sqlite3:sqlite3 redis-server:redis-server redis-benchmark:redis-tools \
            kill:procps pkg-config:pkg-config; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
# A shared library counts as present wherever the usual library directories hold it.
has_lib() { compgen -G "/usr/lib/*/$1" >/dev/null || compgen -G "/usr/lib/$1" >/dev/null \
  || compgen -G "/usr/lib64/$1" >/dev/null; }
for lib in libmimalloc.so.2:libmimalloc2.0 libjemalloc.so.2:libjemalloc2 \
           libtcmalloc_minimal.so.4:libtcmalloc-minimal4; do
  has_lib "${lib%%:*}" || need_apt+=("${lib##*:}")
done
compgen -G "/usr/share/fonts/truetype/*/*.ttf" >/dev/null || need_apt+=(fonts-dejavu-core)

# Clang 22 (allocation tokens), from its own apt call: a distribution without it still gets
# the rest.
need_clang=0
command -v clang-22 >/dev/null 2>&1 || need_clang=1

# Google's pprof, the reader the heap-profile test checks profiles with, built by Go (the Go
# module proxy serves it).
pprof_version=v0.0.0-20261105003125-4bf881d7fb0b
if ! command -v pprof >/dev/null 2>&1 && [ ! -x "$HOME/go/bin/pprof" ]; then
  go_tool=$(command -v go || true)
  [ -z "$go_tool" ] && [ -x /usr/local/go/bin/go ] && go_tool=/usr/local/go/bin/go
  if [ -n "$go_tool" ]; then
    echo "installing: pprof ($pprof_version) with $go_tool"
    GOBIN="$HOME/go/bin" "$go_tool" install "github.com/google/pprof@$pprof_version" \
      || echo "scripts/setup.sh: go install of pprof failed; the heap-profile test will skip" >&2
  else
    echo "scripts/setup.sh: no Go toolchain; the heap-profile test will skip" >&2
  fi
fi

if [ ${#need_apt[@]} -eq 0 ] && [ "$need_clang" -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "scripts/setup.sh: no apt-get; install by hand: ${need_apt[*]}" >&2
  exit 1
fi
echo "installing: ${need_apt[*]}$([ "$need_clang" -eq 1 ] && echo " clang-22")"
export DEBIAN_FRONTEND=noninteractive
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -q
if [ ${#need_apt[@]} -gt 0 ]; then
  $sudo_cmd apt-get install -y -q "${need_apt[@]}"
fi
if [ "$need_clang" -eq 1 ]; then
  $sudo_cmd apt-get install -y -q clang-22 \
    || echo "scripts/setup.sh: no clang-22 from apt; the allocation-token test will skip" >&2
fi
