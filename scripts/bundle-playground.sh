#!/usr/bin/env bash
# Rebuilds the committed playground bundle: Trunk builds dist/, each file is stored
# gzip'd (-9, no name or time, so the same build gives the same bytes) in
# frontend/bundle/ beside the hash of the sources it was built from. The server
# embeds the folder (backend/server/build.rs); commit it with the sources.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
scripts/setup.sh bundle
scripts/build-frontend.sh
rm -f frontend/bundle/*.gz
for f in dist/*; do
  [ -f "$f" ] && gzip -9 -n -c "$f" > "frontend/bundle/$(basename "$f").gz"
done
scripts/frontend-hash.sh > frontend/bundle/SOURCES.sha256
echo "frontend/bundle: $(ls frontend/bundle/*.gz | wc -l) files, $(du -ch frontend/bundle/*.gz | tail -1 | cut -f1); commit it" >&2
