"""NVIDIA's machine code for a Vulkan kernel, from the pipeline cache data that
``pipeline_stats.py --cache-dir DIR`` wrote, disassembled with nvdisasm: the
counterpart of ``cuobjdump -sass`` for the CUDA twins, where the driver offers
no internal representation (notes/performance-history.md, "What NVIDIA's driver compiled").

    python benchmarks/nvidia_sass.py DIR/rasterize_bwd.bin [...] [--arch SM90] [--nvdisasm PATH]

Writes KERNEL.sass next to each KERNEL.bin and prints each kernel's instruction
counts by opcode. The blob's layout is the driver's own and undocumented: as
NVIDIA's 580 driver writes it, a zstd frame holds a header and then the code,
which ends with EXIT, a branch to itself and NOP padding; the code's length is
the "Binary Size" statistic (KERNEL.stats). Needs ``zstd`` and ``nvdisasm``
(the CUDA toolkit's, or ``pip install nvidia-cuda-nvdisasm``).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# the low 64 bits of three SM90 instructions: EXIT, BRA to itself, NOP
EXIT = bytes.fromhex("4d79000000000000")
BRA_SELF = bytes.fromhex("4779fc00fcffffff")
NOP = bytes.fromhex("1879000000000000")


def decompress(blob: bytes) -> bytes:
    """The zstd frame of a pipeline cache blob, decompressed."""
    start = blob.find(ZSTD_MAGIC)
    if start < 0:
        raise ValueError("no zstd frame (not NVIDIA's pipeline cache layout)")
    if shutil.which("zstd") is None:
        raise ValueError("zstd is not installed")
    r = subprocess.run(["zstd", "-d", "-c"], input=blob[start:], capture_output=True)
    if r.returncode:
        raise ValueError("zstd: %s" % r.stderr.decode().strip())
    return r.stdout


def code_range(raw: bytes, size: int) -> tuple[int, int]:
    """(start, end) of the ``size`` bytes of code: the end of the NOPs after EXIT; BRA self."""
    for m in re.finditer(re.escape(EXIT), raw):
        e = m.start()
        if raw[e + 16 : e + 24] != BRA_SELF:
            continue
        end = e + 32
        while raw[end : end + 8] == NOP:
            end += 16
        if end - size >= 0:
            return end - size, end
    raise ValueError("no EXIT followed by a branch to itself")


def binary_size(stats: Path) -> int:
    m = re.search(r"Binary Size = (\d+)", stats.read_text()) if stats.is_file() else None
    if m is None:
        raise ValueError("no Binary Size in %s" % stats)
    return int(m.group(1))


def opcode_counts(sass: str) -> collections.Counter:
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_]+)", sass, re.M)
    return collections.Counter(ops)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("blobs", nargs="+", type=Path)
    ap.add_argument("--arch", default="SM90")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "/usr/local/cuda/bin/nvdisasm")
    args = ap.parse_args(argv)
    failed = 0
    for blob in args.blobs:
        try:
            raw = decompress(blob.read_bytes())
            start, end = code_range(raw, binary_size(blob.with_suffix(".stats")))
        except (OSError, ValueError) as e:
            print("nvidia_sass: %s: %s" % (blob, e), file=sys.stderr)
            failed = 1
            continue
        code = blob.with_suffix(".code")
        code.write_bytes(raw[start:end])
        r = subprocess.run([args.nvdisasm, "-b", args.arch, str(code)], capture_output=True, text=True)
        if r.returncode:
            print("nvidia_sass: %s: nvdisasm: %s" % (blob, r.stderr.strip().splitlines()[0]), file=sys.stderr)
            failed = 1
            continue
        blob.with_suffix(".sass").write_text(r.stdout)
        counts = opcode_counts(r.stdout)
        top = ", ".join("%s %d" % kv for kv in counts.most_common(12))
        print("%s: %d instructions (%s)" % (blob.stem, sum(counts.values()), top))
    return failed


if __name__ == "__main__":
    sys.exit(main())
