"""What the Vulkan driver compiled each kernel into (registers, shared memory,
spills, as the driver's VK_KHR_pipeline_executable_properties names them), beside
what ptxas compiled its CUDA twin into. Occupancy is the first suspect when the
same kernel source runs slower on one backend (notes/performance-history.md,
"The Vulkan/CUDA gap in rasterize_bwd").

    python benchmarks/pipeline_stats.py [KERNEL ...] [--spec NAME=VALUE ...]
        [--defines ATOMIC_FLOAT=1,INF_NAN_PRESERVE=1,...] [--tool PATH] [--ir]
        [--cache-dir DIR] [--no-robustness]

The tool is benchmarks/pipeline_stats.c, built with ``cc ... -lvulkan`` when
``--tool`` is not given (it needs libvulkan-dev's headers; the GPU machine has
none, so benchmarks/device_kit.sh builds it into .device/local/bin/, which
gpu_setup.sh puts on the PATH). ``--ir`` also prints each internal
representation the driver offers (VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR;
NVIDIA's offers none); ``--cache-dir`` writes each kernel's pipeline cache data
and statistics, from which benchmarks/nvidia_sass.py disassembles NVIDIA's machine
code; ``--no-robustness`` compiles with the storage buffers' robustness disabled
(VK_EXT_pipeline_robustness). The kernels get their default specialization
constants unless ``--spec`` sets one, and the defines Spirula's Vulkan device
compiles with on this machine's default device (``VulkanDevice.defines``: on
NVIDIA ATOMIC_FLOAT=1,INF_NAN_PRESERVE=1,SHUFFLE_SUMS=1,SUBGROUP_LOG2=5) unless
``--defines`` names them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spirula.backends.vulkan.kernels import KernelRegistry

HERE = Path(__file__).resolve().parent


def build_tool(out: Path) -> Path:
    """The pipeline_stats on the PATH, else one built from pipeline_stats.c into ``out``."""
    found = shutil.which("pipeline_stats")
    if found:
        return Path(found)
    r = subprocess.run(
        ["cc", "-O1", "-o", str(out), str(HERE / "pipeline_stats.c"), "-lvulkan"], capture_output=True, text=True
    )
    if r.returncode:
        first = (r.stderr.strip().splitlines() or ["cc failed"])[0]
        sys.exit("pipeline_stats: cannot build %s (%s); pass --tool" % (HERE / "pipeline_stats.c", first))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", default=["rasterize_bwd", "rasterize_fwd", "loss_fwd", "loss_bwd", "fpbo"])
    ap.add_argument("--spec", action="append", default=[], help="NAME=VALUE, a specialization constant")
    ap.add_argument("--defines", help="NAME=VALUE,... (default: those of Spirula's Vulkan device here)")
    ap.add_argument("--tool", type=Path, help="a built pipeline_stats (default: the one on the PATH, else build one)")
    ap.add_argument("--ir", action="store_true", help="also print the driver's internal representations")
    ap.add_argument(
        "--cache-dir", type=Path, help="write each kernel's pipeline cache data (KERNEL.bin) and statistics here"
    )
    ap.add_argument(
        "--no-robustness",
        action="store_true",
        help="compile with the storage buffers' robustness disabled (VK_EXT_pipeline_robustness)",
    )
    args = ap.parse_args(argv)
    if args.defines is None:
        from spirula.backends import open_device

        device = open_device("vulkan")
        defines = {k: str(v) for k, v in device.defines.items()}
        device.close()
        print("defines: %s" % ",".join("%s=%s" % kv for kv in defines.items()))
    else:
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
            env = dict(os.environ, PIPELINE_STATS_IR="1" if args.ir else "0")
            env["PIPELINE_STATS_ROBUSTNESS"] = "0" if args.no_robustness else "1"
            if args.cache_dir:
                args.cache_dir.mkdir(parents=True, exist_ok=True)
                env["PIPELINE_STATS_CACHE"] = str(args.cache_dir / (name + ".bin"))
            r = subprocess.run(
                [str(tool), str(spv), str(len(k.bindings)), str(4 * len(k.push))] + [str(int(w)) for w in words],
                capture_output=True,
                text=True,
                env=env,
            )
            print("== %s %s" % (name, " ".join("%s=%g" % kv for kv in values.items())))
            sys.stdout.write(r.stdout + r.stderr)
            if args.cache_dir:
                (args.cache_dir / (name + ".stats")).write_text(r.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
