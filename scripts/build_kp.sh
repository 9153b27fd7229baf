#!/usr/bin/env bash
# Builds Kompute's Python module `kp` 0.9.0 from its PyPI sdist, with Spirula's
# small patch (third_party/kompute/, explained in docs/kompute.md), into the
# virtualenv whose python is $1, against pybind11 $PYBIND11_VERSION from PyPI
# (installed into the same virtualenv; 2.12 and later speak numpy 2's C API,
# Debian 12's 2.10 does not). Offline once the sdist and pybind11 are there;
# skipped when the same sdist + patch + pybind11 are already installed.
set -euo pipefail
PY=${1:?usage: build_kp.sh VENV_PYTHON}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATCH=$ROOT/third_party/kompute/kp-0.9.0-spirula.patch
# The one used by the GPU machine's kit too (shared/device/README.md), so kp
# resolves its overloads the same way on both machines.
PYBIND11_VERSION=3.1.0
CACHE=$ROOT/.cache/kp
# Keyed on the patch and the pybind11 version, so changing either rebuilds kp.
STAMP=$CACHE/installed-$( (cat "$PATCH"; echo "pybind11==$PYBIND11_VERSION") | sha256sum | cut -c1-16)
mkdir -p "$CACHE"
if [ -f "$STAMP" ] && "$PY" -c 'import kp; kp.OpBarrier' 2>/dev/null; then
  exit 0
fi
"$PY" -m pip install -q --disable-pip-version-check "pybind11==$PYBIND11_VERSION"
SDIST=$CACHE/kp-0.9.0.tar.gz
bash "$ROOT/scripts/fetch_kp.sh" "$PY"   # downloaded once, checked against its sha256
SRC=$CACHE/src
rm -rf "$SRC" && mkdir -p "$SRC"
tar xzf "$SDIST" -C "$SRC" --strip-components=1
patch -s -p1 -d "$SRC" < "$PATCH"
# Debian's Vulkan headers and fmt, and the venv's pybind11 (found through
# pybind11_DIR), instead of kp's network fetches; the venv's python first on
# PATH, since kp's CMake looks python up there.
export KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
       KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
       KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON
pybind11_DIR=$("$PY" -m pybind11 --cmakedir)
export pybind11_DIR
echo "spirula: building kp 0.9.0 (patched, pybind11 $PYBIND11_VERSION) -- about 2 minutes on 2 cores"
PATH="$(dirname "$PY"):$PATH" "$PY" -m pip install -q --no-build-isolation --no-deps --no-cache-dir "$SRC" \
  > "$CACHE/build.log" 2>&1 || { tail -40 "$CACHE/build.log" >&2; echo "kp build failed: $CACHE/build.log" >&2; exit 1; }
rm -f "$CACHE"/installed-*
touch "$STAMP"
