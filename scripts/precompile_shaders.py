#!/usr/bin/env python3
"""Compiles every kernel variant a device can ask for (spirula/backends/vulkan/variants.py)
to SPIR-V, for the wheel's ``spirula/_spirv/``: ``<stem>.spv``, ``<stem>.glsl`` (glslang's
preprocessed source, which the contract is read from) and ``manifest.json`` (the
glslang version and every stem). The wheel's build runs it (CMakeLists.txt) with
the build's Python, which has no numpy: it imports variants.py alone.

    python scripts/precompile_shaders.py OUT_DIR [--shaders shaders/] [--jobs N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _variants_module():
    path = ROOT / "spirula" / "backends" / "vulkan" / "variants.py"
    spec = importlib.util.spec_from_file_location("spirula_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(exe, variants, shaders: Path, out: Path, stem: str, name: str, defines: dict):
    src, include = shaders / (name + ".comp"), shaders / "include"
    compile_cmd, preprocess_cmd = variants.glslang_commands(
        exe, src, [include], sorted(defines.items()), out / (stem + ".spv")
    )
    for cmd, stdout in ((compile_cmd, None), (preprocess_cmd, out / (stem + ".glsl"))):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("precompile_shaders: %s failed: %s" % (stem, (r.stdout + r.stderr).strip()[-2000:]))
        if stdout is not None:
            stdout.write_text(r.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shaders", type=Path, default=ROOT / "shaders")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    exe = shutil.which("glslangValidator")
    if exe is None:
        raise SystemExit("precompile_shaders: glslangValidator not found (Debian: apt-get install glslang-tools)")
    variants = _variants_module()
    todo = variants.variants(args.shaders)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        for f in [pool.submit(_compile, exe, variants, args.shaders, args.out, s, *v) for s, v in todo.items()]:
            f.result()
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    manifest = {"glslang": version, "target_env": variants.TARGET_ENV, "variants": sorted(todo)}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(
        "precompile_shaders: %d variants of %d kernels, %.1f MB, in %s"
        % (len(todo), len({n for n, _ in todo.values()}), size / 1e6, args.out),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
