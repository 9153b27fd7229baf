"""SPIR-V edits glslang offers no option for.

:func:`preserve_inf_nan` adds the ``SignedZeroInfNanPreserve`` execution mode
for 32-bit floats (SPV_KHR_float_controls) to a compiled kernel, so that the
driver's compiler may not assume that no value is NaN or Inf (Vulkan allows
that assumption without it). Spirula applies it where the device offers
``shaderSignedZeroInfNanPreserveFloat32`` (VulkanDevice), to the kernels that
decide something from whether a value is finite: their shader says so with
``#define SPIRULA_PRESERVE_INF_NAN`` (KernelRegistry). Not to every kernel:
on the H200 it made fpbo's noise path 6% slower (3.57 vs 3.36 ms), and the
finiteness tests do not depend on it (they read bits, finite.glsl). glslang
has the same through GL_EXT_spirv_intrinsics, but spelled in each shader's
source; this keeps it one line per kernel.
"""

from __future__ import annotations

import numpy as np

MAGIC = 0x07230203
OP_EXTENSION = 10
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_CAPABILITY = 17
CAPABILITY_SIGNED_ZERO_INF_NAN_PRESERVE = 4466
EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE = 4461
FLOAT_CONTROLS = "SPV_KHR_float_controls"


def _instructions(words: np.ndarray):
    """(offset, opcode, word count) of each instruction after the header."""
    i = 5
    while i < len(words):
        count, op = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if count == 0 or i + count > len(words):
            raise ValueError("malformed SPIR-V at word %d" % i)
        yield i, op, count
        i += count


def _string_words(s: str) -> list:
    b = s.encode() + b"\0"
    b += b"\0" * (-len(b) % 4)
    return np.frombuffer(b, "<u4").tolist()


def preserve_inf_nan(spirv: bytes) -> bytes:
    """``spirv`` with SignedZeroInfNanPreserve 32 on every entry point (and
    its capability and extension); unchanged if it already has it."""
    words = np.frombuffer(spirv, "<u4")
    if len(words) < 5 or words[0] != MAGIC:
        raise ValueError("not a SPIR-V module")
    caps_end = modes_at = None
    entries = []
    for i, op, count in _instructions(words):
        if op == OP_CAPABILITY:
            if words[i + 1] == CAPABILITY_SIGNED_ZERO_INF_NAN_PRESERVE:
                return spirv
            caps_end = i + count
        elif op == OP_ENTRY_POINT:
            entries.append(int(words[i + 2]))
            modes_at = i + count
        elif op == OP_EXECUTION_MODE:
            modes_at = i + count
    if caps_end is None or not entries:
        raise ValueError("SPIR-V module without capabilities or entry points")
    name = _string_words(FLOAT_CONTROLS)
    insert = {
        caps_end: [(2 << 16) | OP_CAPABILITY, CAPABILITY_SIGNED_ZERO_INF_NAN_PRESERVE]
        + [((1 + len(name)) << 16) | OP_EXTENSION]
        + name,
        modes_at: [
            w
            for e in entries
            for w in ((4 << 16) | OP_EXECUTION_MODE, e, EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE, 32)
        ],
    }
    out, last = [], 0
    for at in sorted(insert):
        out += words[last:at].tolist() + insert[at]
        last = at
    out += words[last:].tolist()
    return np.array(out, "<u4").tobytes()
