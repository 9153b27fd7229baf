#!/usr/bin/env bash
# Puts Kompute's `kp` 0.9.0 sdist in .cache/kp/ (once; pip downloads it from the
# package index) and checks it against third_party/kompute/kp-0.9.0.tar.gz.sha256,
# so the source is pinned. Used by scripts/build_kp.sh (make install) and by
# `make wheel` (CMakeLists.txt checks the same sum). $1: a python with pip.
set -euo pipefail
PY=${1:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=$ROOT/.cache/kp
SDIST=$CACHE/kp-0.9.0.tar.gz
SUM=$ROOT/third_party/kompute/kp-0.9.0.tar.gz.sha256
mkdir -p "$CACHE"
check() { (cd "$CACHE" && sha256sum -c --quiet "$SUM") >/dev/null 2>&1; }
check && exit 0
rm -f "$SDIST"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation kp==0.9.0 -d "$CACHE"
check || { echo "kp-0.9.0.tar.gz: checksum mismatch (expected $(cut -c1-16 "$SUM")...)" >&2; exit 1; }
