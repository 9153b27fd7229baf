#!/usr/bin/env bash
# `make wheel`: Spirula's binary wheel in dist/ (docs/development.md, "The wheel").
#   1. kp's sdist in .cache/kp/, checked (scripts/fetch_kp.sh);
#   2. the CUDA backend where nvcc exists (scripts/build_cuda.sh; SPIRULA_WHEEL_CUDA=0 leaves it out);
#   3. `pip wheel` through scikit-build-core (CMakeLists.txt: kp patched and compiled,
#      every kernel precompiled), from a build environment kept in the cache folder
#      (scikit-build-core and pybind11 installed once) and with ccache where it is
#      installed, so a build in a fresh clone (CI) recompiles nothing that did not change;
#   4. `auditwheel repair --exclude libvulkan.so.1`: the manylinux tag the symbols
#      allow, with the system's Vulkan loader the one library outside the policy.
#
#   WHEEL_PYTHON=/path/to/python3.X   the CPython to build for (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${WHEEL_PYTHON:-.venv/bin/python}
AUDITWHEEL=${AUDITWHEEL:-.venv/bin/auditwheel}
t0=$(date +%s)

bash scripts/fetch_kp.sh "$PY"
if [ "${SPIRULA_WHEEL_CUDA:-1}" != 0 ]; then
  bash scripts/build_cuda.sh
  CUDA_LIB=$ROOT/build/libspirula_cuda.so   # carried where it was built
else
  CUDA_LIB=""
fi

# the build requirements of pyproject.toml, in a venv of their own per Python version
tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
CACHE=${SPIRULA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spirula}
ENV=$CACHE/wheel-build-env-$tag
REQS=$("$PY" -c 'import sys, tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' 2>/dev/null ||
  echo "scikit-build-core>=0.10 pybind11==3.1.0")
if [ "$(cat "$ENV/.requires" 2>/dev/null)" != "$REQS" ]; then
  rm -rf "$ENV"
  "$PY" -m venv "$ENV"
  # shellcheck disable=SC2086
  "$ENV/bin/python" -m pip install -q --disable-pip-version-check -U pip $REQS  # an older pip has no -C
  echo "$REQS" > "$ENV/.requires"
fi

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# ccache (where installed): paths under the checkout hashed relative to it, so another clone hits
export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
RAW=build/wheel-raw
rm -rf "$RAW"
"$ENV/bin/python" -m pip wheel --no-build-isolation --no-deps -q --disable-pip-version-check -w "$RAW" \
  -C "cmake.define.SPIRULA_CUDA_LIB=$CUDA_LIB" .
mkdir -p dist
rm -f dist/spirula-*-"$tag"-*.whl
PATH="$(dirname "$AUDITWHEEL"):$PATH" "$AUDITWHEEL" repair --exclude libvulkan.so.1 -w dist "$RAW"/spirula-*.whl
wheel=$(ls dist/spirula-*-"$tag"-*.whl)
echo "spirula: built $wheel ($(du -k "$wheel" | cut -f1) KiB$([ -n "$CUDA_LIB" ] && [ -f "$CUDA_LIB" ] && echo ", with the CUDA backend")) in $(( $(date +%s) - t0 )) s"
