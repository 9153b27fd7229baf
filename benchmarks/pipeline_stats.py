"""What the Vulkan driver compiled each kernel into (registers, shared memory,
spills, as the driver's VK_KHR_pipeline_executable_properties names them), beside
what ptxas compiled its CUDA twin into. Occupancy is the first suspect when the
same kernel source runs slower on one backend (docs/performance.md, "The
Vulkan/CUDA gap in rasterize_bwd").

    python benchmarks/pipeline_stats.py [KERNEL ...] [--spec NAME=VALUE ...]
        [--defines ATOMIC_FLOAT=1,INF_NAN_PRESERVE=1] [--tool PATH]

The tool is benchmarks/pipeline_stats.c, built with ``cc ... -lvulkan`` when
``--tool`` is not given (it needs libvulkan-dev's headers). The kernels get their
default specialization constants unless ``--spec`` sets one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from spirula.runtime.kernels import KernelRegistry

HERE = Path(__file__).resolve().parent


def build_tool(out: Path) -> Path:
    subprocess.run(["cc", "-O1", "-o", str(out), str(HERE / "pipeline_stats.c"), "-lvulkan"], check=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", default=["rasterize_bwd", "rasterize_fwd", "loss_fwd", "loss_bwd", "fpbo"])
    ap.add_argument("--spec", action="append", default=[], help="NAME=VALUE, a specialization constant")
    ap.add_argument("--defines", default="ATOMIC_FLOAT=1,INF_NAN_PRESERVE=1")
    ap.add_argument("--tool", type=Path, help="a built pipeline_stats (default: build one)")
    args = ap.parse_args(argv)
    defines = dict(kv.split("=", 1) for kv in args.defines.split(",") if kv)
    spec = {k: float(v) for k, v in (kv.split("=", 1) for kv in args.spec)}
    reg = KernelRegistry()
    with tempfile.TemporaryDirectory() as tmp:
        tool = args.tool or build_tool(Path(tmp) / "pipeline_stats")
        for name in args.kernels:
            k = reg.get(name, **defines)
            spv = Path(tmp) / (name + ".spv")
            spv.write_bytes(k.spirv)
            values = {c: v for c, v in spec.items() if c in k._spec_index}
            words = k.pack_spec(values).view("uint32")
            r = subprocess.run(
                [str(tool), str(spv), str(len(k.bindings)), str(4 * len(k.push))] + [str(int(w)) for w in words],
                capture_output=True,
                text=True,
            )
            print("== %s %s" % (name, " ".join("%s=%g" % kv for kv in values.items())))
            sys.stdout.write(r.stdout + r.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
