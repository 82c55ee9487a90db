#!/usr/bin/env bash
# Makes room in the shared cargo target folder before a long build: a full disk
# otherwise fails a link after many minutes of compiling. Usage: cache-room.sh GIB
set -euo pipefail
source "$(dirname "$0")/env.sh"
need_gib=${1:-15}
free_gib() { df --output=avail -k "$(dirname "$CARGO_TARGET_DIR")" | tail -n1 | awk '{print int($1 / 1048576)}'; }
[ "$(free_gib)" -ge "$need_gib" ] && exit 0
step "Only $(free_gib) GiB free (want $need_gib): pruning $CARGO_TARGET_DIR"
# Incremental state is a local edit loop's cache; no test run needs it.
rm -rf "$CARGO_TARGET_DIR"/debug/incremental "$CARGO_TARGET_DIR"/release/incremental
[ "$(free_gib)" -ge "$need_gib" ] && exit 0
# Every clone path builds its own copy of the workspace crates; drop the debug build
# outright (the next build is a cold one, slower but sure to fit).
rm -rf "$CARGO_TARGET_DIR"/debug
[ "$(free_gib)" -ge "$need_gib" ] && exit 0
die "only $(free_gib) GiB free on the disk holding $CARGO_TARGET_DIR after pruning it; the tests need about $need_gib GiB"
