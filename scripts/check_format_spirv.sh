#!/usr/bin/env bash
# Checks that clang-format changes no shader's meaning: compiles every kernel
# of shaders/ in each compile-time variant (ATOMIC_FLOAT=0/1 x VEC4, FLOAT,
# SH_VEC4) as it is and as .clang-format would write it, and compares the
# SPIR-V byte for byte (glslang emits no line info without -g, so layout alone
# leaves the binary as it was). Run it after changing .clang-format or the
# clang-format pin (pyproject.toml). Exit 1 on any difference.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CF=${CLANG_FORMAT:-$ROOT/.venv/bin/clang-format}
W=$(mktemp -d "${TMPDIR:-/tmp}/spirula_fmt.XXXXXX")
trap 'rm -rf "$W"' EXIT
cp -r "$ROOT/shaders" "$W/before"
cp -r "$ROOT/shaders" "$W/after"
find "$W/after" \( -name '*.comp' -o -name '*.glsl' \) -exec "$CF" -i --style=file:"$ROOT/.clang-format" {} +
bad=0 n=0 same=0
for src in "$W"/before/*.comp; do
  k=$(basename "$src" .comp)
  for atomic in 0 1; do
    for extra in NONE VEC4=1 FLOAT=1 SH_VEC4=1; do
      d=(-DATOMIC_FLOAT=$atomic); [ $extra = NONE ] || d+=(-D$extra)
      for side in before after; do
        glslangValidator -V --target-env vulkan1.1 -I"$W/$side/include" "${d[@]}" \
          -o "$W/$side.spv" "$W/$side/$k.comp" > "$W/$side.log" 2>&1 && echo ok > "$W/$side.rc" || echo fail > "$W/$side.rc"
      done
      n=$((n + 1))
      if ! cmp -s "$W/before.rc" "$W/after.rc"; then
        echo "$k ${d[*]}: compiles $(cat "$W/before.rc") before, $(cat "$W/after.rc") formatted"; bad=1
        sed 's/^/    /' "$W/after.log" | head -5
      elif [ "$(cat "$W/before.rc")" = ok ] && ! cmp -s "$W/before.spv" "$W/after.spv"; then
        echo "$k ${d[*]}: SPIR-V differs once formatted"; bad=1
      elif [ "$(cat "$W/before.rc")" = ok ]; then
        same=$((same + 1))
      fi
    done
  done
done
# A variant that fails to compile both ways (a define the kernel rejects) is no finding.
[ $bad = 0 ] && echo "spirula: clang-format leaves the SPIR-V unchanged ($same variants compiled, $((n - same)) fail either way)"
exit $bad
