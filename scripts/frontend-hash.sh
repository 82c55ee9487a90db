#!/usr/bin/env bash
# Prints one SHA-256 over the playground's sources (what Trunk builds the bundle
# from, dependency versions aside): frontend/ without its bundle, style/, Trunk.toml
# and the API types in backend/api/. Stored beside the committed bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
find frontend style backend/api Trunk.toml -type f \
     -not -path 'frontend/bundle/*' -not -path '*/target/*' -not -name '*~' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
