# The peers' libraries for LD_PRELOAD, as Debian installs them (scripts/setup.sh), one
# `name:path` each. Sourced by the scripts that run a program under every allocator; a script
# skips a peer whose library is missing.
PEER_LIBRARIES=(
    mimalloc:/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
    tcmalloc:/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
    jemalloc:/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
)
