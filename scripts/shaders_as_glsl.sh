#!/usr/bin/env bash
# Lays the shaders out as .glsl beside native_cuda/, so that a duplicate-code
# finder that reads files by their extension (and skips .comp, as the
# `duplicates` command does) compares each kernel with its CUDA twin:
#
#   OUT/shaders/<kernel>.glsl         a copy of shaders/<kernel>.comp
#   OUT/shaders/include/*.glsl        the shared maths, as they are
#   OUT/native_cuda/**                 the CUDA twins and native_cuda/common/*.cuh
#
# Copies, not links (such a finder skips links). OUT defaults to a new
# temporary folder; its shaders/ and native_cuda/ are replaced. Prints OUT,
# so that
#
#   duplicates --repo "$(bash scripts/shaders_as_glsl.sh)" --most 40
#
# lists what a kernel and its twin (or two kernels) still write twice. Pick
# OUT outside any git checkout: a git-aware finder reads only the files git
# tracks or would track there, so in an ignored folder (build/) it reads none.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/spirula_twins.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if git -C "$OUT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "shaders_as_glsl: note: $OUT is inside a git checkout; a git-aware finder may read nothing there" >&2
fi
rm -rf "$OUT/shaders" "$OUT/native_cuda"
mkdir -p "$OUT/shaders/include"
for src in "$ROOT"/shaders/*.comp; do
  cp "$src" "$OUT/shaders/$(basename "$src" .comp).glsl"
done
cp "$ROOT"/shaders/include/*.glsl "$OUT/shaders/include/"
cp -r "$ROOT/native_cuda" "$OUT/native_cuda"
echo "$OUT"
