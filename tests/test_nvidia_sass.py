"""benchmarks/nvidia_sass.py: finding NVIDIA's machine code in a decompressed
pipeline cache blob (the code ends with EXIT, a branch to itself and NOP
padding; its length is the driver's "Binary Size" statistic)."""

import pytest
from conftest import load_benchmark


def _tool():
    return load_benchmark("nvidia_sass")


def _insn(low: bytes) -> bytes:
    return low + bytes(8)  # 128-bit instructions: the opcode word, then control bits


def test_code_range_ends_after_the_padding_and_spans_the_binary_size():
    t = _tool()
    header = bytes(range(40))
    body = [_insn(bytes.fromhex("0279000000000000"))] * 5  # any instructions
    # an EXIT not followed by a branch to itself is not the end
    body.insert(2, _insn(t.EXIT))
    tail = [_insn(t.EXIT), _insn(t.BRA_SELF)] + [_insn(t.NOP)] * 3
    code = b"".join(body + tail)
    raw = header + code + bytes.fromhex("ffffffff1c000000") * 4
    assert t.code_range(raw, len(code)) == (len(header), len(header) + len(code))


def test_code_range_refuses_a_blob_without_the_ending():
    t = _tool()
    with pytest.raises(ValueError, match="branch to itself"):
        t.code_range(bytes(256), 64)


def test_blob_without_zstd_frame_is_refused():
    with pytest.raises(ValueError, match="zstd frame"):
        _tool().decompress(b"not a pipeline cache")


def test_opcode_counts_read_nvdisasm_lines():
    sass = (
        "        /*0000*/                   S2R R0, SR_CTAID.X ;\n"
        "        /*0010*/               @P0 EXIT ;\n"
        "        /*0020*/              @!P1 BRA 0x40 ;\n"
        "        /*0030*/                   SHFL.BFLY PT, R1, R2, 0x1, 0x1f ;\n"
        "        /*0040*/                   SHFL.BFLY PT, R3, R1, 0x2, 0x1f ;\n"
    )
    assert _tool().opcode_counts(sass) == {"S2R": 1, "EXIT": 1, "BRA": 1, "SHFL": 2}
