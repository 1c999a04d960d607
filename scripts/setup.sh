#!/usr/bin/env bash
# Installs (with apt, on Debian or Ubuntu) what the tests and the showdown use and this machine
# lacks: build tools for the peers' crates, the programs the LD_PRELOAD tests and the showdown
# run (gcc, python3, perl, git, sqlite3, redis-server with redis-benchmark), valgrind for the
# callgrind counts, the peers' shared libraries for the C-level showdown (libmimalloc2.0,
# libjemalloc2, libtcmalloc-minimal4) and a TrueType font for the PNG plots. Prints what it
# installs; does nothing when all are present.
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

if [ ${#need_apt[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "scripts/setup.sh: no apt-get; install by hand: ${need_apt[*]}" >&2
  exit 1
fi
echo "installing: ${need_apt[*]}"
export DEBIAN_FRONTEND=noninteractive
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -q
$sudo_cmd apt-get install -y -q "${need_apt[@]}"
