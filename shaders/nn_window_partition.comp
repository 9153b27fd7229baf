#version 450
// nn_window_partition: Hiera's (SAM 2's) window_partition and window_unpartition, one kernel
// for both directions. Partition: x [batch, H, W, C] padded with zeros to multiples of the
// window w, cut into windows [batch * nh * nw, w, w, C] (nh = ceil(H / w), window (b, a, c)
// at index (b nh + a) nw + c, the order of Hiera's view-permute-view). Unpartition
// (unpartition = 1): the windows back to [batch, H, W, C], the padding cropped. A copy:
// every output element is one input element or 0 (reference spirula/reference/nn.py
// window_partition; the kernel is exact). One thread per output element (workgroup 256,
// folded).
//   binding 0  x  [batch, H, W, C] or [batch * nh * nw, w, w, C]  f32  read
//   binding 1  y  the other                                         f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint batch;
    uint height;
    uint width;
    uint channels;
    uint window;
    uint unpartition;  // 0: grid -> windows, 1: windows -> grid
} pc;

FN void nn_window_partition_body(uint i) {
    uint w = pc.window, C = pc.channels;
    uint nh = (pc.height + w - 1u) / w, nw = (pc.width + w - 1u) / w;
    uint count = pc.unpartition != 0u ? pc.batch * pc.height * pc.width * C : pc.batch * nh * nw * w * w * C;
    if (i >= count) {
        return;
    }
    uint ch = i % C, r = i / C;
    uint b, row, col;  // the element's batch, row and column in the (padded) grid
    if (pc.unpartition != 0u) {
        col = r % pc.width;
        row = (r / pc.width) % pc.height;
        b = r / (pc.width * pc.height);
    } else {
        uint wx = r % w, wy = (r / w) % w, win = r / (w * w);
        col = (win % nw) * w + wx;
        row = ((win / nw) % nh) * w + wy;
        b = win / (nw * nh);
    }
    uint grid = ((b * pc.height + row) * pc.width + col) * C + ch;
    uint windowed = ((((b * nh + row / w) * nw + col / w) * w + row % w) * w + col % w) * C + ch;
    if (pc.unpartition != 0u) {
        y[i] = x[windowed];
    } else {
        y[i] = row < pc.height && col < pc.width ? x[grid] : 0.0f;
    }
}

void main() { nn_window_partition_body(global_index()); }
