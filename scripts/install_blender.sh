#!/usr/bin/env bash
# Blender, for the test that `spirula mesh`'s GLB opens in it (tests/test_mesh_viewers.py):
# Blender's own Python module (bpy, the Blender Foundation's wheel: the real application,
# headless, with its glTF importer) in a venv of its own, .venv-blender/, because bpy pins
# numpy 1.26 and Spirula runs numpy 2. Idempotent: nothing happens when it is there.
# About 370 MB to download, 950 MB installed. Its X and GL client libraries come from
# scripts/install_system_deps.sh --browser-tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BPY_VERSION=4.5.4  # Blender 4.5 LTS; its wheel is built for Python 3.11, as Debian 12's
VENV=.venv-blender
STAMP=$VENV/.bpy-$BPY_VERSION
[ -f "$STAMP" ] && exit 0
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "spirula: Blender's bpy $BPY_VERSION needs Python 3.11; the Blender test will skip"
  exit 0
fi
echo "spirula: installing Blender's Python module (bpy $BPY_VERSION) into $VENV/"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "bpy==$BPY_VERSION"
"$VENV/bin/python" -c "import bpy" >/dev/null
touch "$STAMP"
