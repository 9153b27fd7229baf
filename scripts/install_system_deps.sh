#!/usr/bin/env bash
# Installs the Debian packages Spirula needs, only those missing (idempotent,
# and fast when everything is there). Needs root, or sudo.
#   Vulkan loader + Mesa's lavapipe (a CPU Vulkan driver, so Spirula runs with
#   no GPU), the Khronos validation layer (tests), glslang (shader compiler),
#   spirv-tools (spirv-val checks the SPIR-V that Spirula edits: tests/test_spirv.py),
#   and what Kompute's Python module `kp` builds against (its pybind11 comes
#   from PyPI, see scripts/build_kp.sh); patch and ccache for `make wheel`
#   (ccache keeps its compiles between clones: CI's wheel rebuilds in seconds).
#   Xvfb, xauth and Mesa's OpenGL (libgl1, libglx-mesa0, libgl1-mesa-dri) so the
#   viewer's window tests (tests/test_view_window.py) run without a screen.
# With --browser-tests (or SPIRULA_BROWSER_TESTS=1) also node and npm (tests/web:
# splat-transform, tests/test_export_web.py), chromium and
# chromium-driver (about 300 MB): only tests/test_web_viewer.py's browser test
# needs them (it skips without them); selenium drives them, nothing downloaded.
# It also adds the X and GL client libraries that Blender's Python module (bpy,
# scripts/install_blender.sh) links against, for tests/test_mesh_viewers.py.
set -euo pipefail
PKGS="libvulkan1 libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers glslang-tools
      spirv-tools libfmt-dev cmake g++ make python3-venv python3-dev patch ccache
      xvfb xauth libgl1 libglx-mesa0 libgl1-mesa-dri"
if [ "${1:-}" = "--browser-tests" ] || [ "${SPIRULA_BROWSER_TESTS:-0}" = 1 ]; then
  PKGS="$PKGS chromium chromium-driver libx11-6 libxrender1 libxfixes3 libxi6 libxkbcommon0 libsm6 libice6 libxext6"
  # node and npm from Debian, unless an npm is there already (NodeSource's nodejs
  # brings its own, and Debian's npm package would conflict with it)
  command -v npm > /dev/null || PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "spirula: installing system packages:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
