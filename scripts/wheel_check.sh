#!/usr/bin/env bash
# `make wheel-check` (CI runs it after the tests): the wheel in dist/ as a user
# installs it. A fresh virtualenv in a temporary folder outside the checkout,
# `pip install` of the wheel alone (its dependencies from the package index, as
# a user's), then from an empty folder, with PATH holding that venv only (no
# glslang, no checkout, no dev venv) and an empty cache folder:
#   spirula --version, devices, selftest, a short `train` of the demo scene,
#   `render` and `export` of it,
#   a command of a missing extra (one line naming it), and no kernel compiled;
# then `auditwheel show`: the libraries the wheel needs from the system.
#   WHEEL_PYTHON=/path/to/python3.X   the CPython whose wheel to check (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${WHEEL_PYTHON:-.venv/bin/python}
AUDITWHEEL=${AUDITWHEEL:-.venv/bin/auditwheel}
STEPS=${SPIRULA_WHEEL_CHECK_STEPS:-200}
tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheel=$(ls "$PWD"/dist/spirula-*-"$tag"-*.whl 2>/dev/null | head -n1)
[ -n "$wheel" ] || { echo "wheel-check: no dist/spirula-*-$tag-*.whl: run make wheel" >&2; exit 1; }
t0=$(date +%s)
TMP=$(mktemp -d /tmp/spirula-wheel-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# the interpreter the dev venv was made from, not the venv: nothing of it leaks in
BASE=$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
"$BASE" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
echo "wheel-check: installed $(basename "$wheel") into a fresh venv ($(du -sm "$TMP/venv" | cut -f1) MB) in $(( $(date +%s) - t0 )) s"
mkdir -p "$TMP/work" "$TMP/cache"
cd "$TMP/work"
run() {
  env -u PYTHONPATH -u SPIRULA_SHADER_DIR -u SPIRULA_CUDA_LIB -u VIRTUAL_ENV \
    PATH="$TMP/venv/bin" SPIRULA_CACHE_DIR="$TMP/cache" "$@"
}
if run /bin/sh -c 'command -v glslangValidator' > /dev/null; then
  echo "wheel-check: glslangValidator is on PATH" >&2; exit 1
fi
run spirula --version
run python -c 'import kp, spirula, sys; assert all(m.__file__.startswith(sys.prefix) for m in (kp, spirula)), "not the venv'"'"'s"'
run spirula devices
run spirula selftest
run spirula train --iterations "$STEPS" --output "$TMP/work/demo"
test -s "$TMP/work/demo/splat.ply"
run spirula render "$TMP/work/demo" --images "$TMP/work/orbit" --frames 2 --width 64 --height 48
run spirula export "$TMP/work/demo" --format spz
# an extra the wheel alone does not bring: one line naming it, exit status 2
if run spirula sfm "$TMP/work" "$TMP/work/sfm" 2> "$TMP/sfm.err"; then
  echo "wheel-check: spirula sfm ran without pycolmap" >&2; exit 1
fi
grep -qx "spirula: error: spirula sfm needs the sfm extra: pip install 'spirula\[sfm\]'" "$TMP/sfm.err" ||
  { cat "$TMP/sfm.err" >&2; exit 1; }
# every kernel came precompiled: nothing was compiled into the cache
if ls "$TMP/cache/spirv/"*.spv > /dev/null 2>&1; then
  echo "wheel-check: kernels were compiled at run time: $(ls "$TMP/cache/spirv" | head -3)" >&2; exit 1
fi
cd - > /dev/null
"$AUDITWHEEL" show "$wheel"
# what each library of the wheel loads from the system (auditwheel show names the versions only)
mkdir -p "$TMP/unzipped"
"$TMP/venv/bin/python" -m zipfile -e "$wheel" "$TMP/unzipped"
for so in $(cd "$TMP/unzipped" && find . -name '*.so' | sort); do
  echo "wheel-check: $so needs $(readelf -d "$TMP/unzipped/$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
done
echo "wheel-check: passed in $(( $(date +%s) - t0 )) s"
