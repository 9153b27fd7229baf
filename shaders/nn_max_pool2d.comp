#version 450
// nn_max_pool2d: torch's nn.MaxPool2d(kernel_size=s, stride=s, ceil_mode=False) over the
// spatial axes of a channels-last grid (Hiera's q pooling, SAM 2's do_pool): y[b, i, j, c] =
// the largest x[b, s i + di, s j + dj, c], di, dj < s, rows and columns past the last whole
// window dropped. x is read at ((b H + row) W + col) in_stride + in_offset + c, so a slice of
// wider rows (q of a fused qkv) pools in place. Exact (reference spirula/reference/nn.py
// max_pool2d). One thread per output element (workgroup 256, folded).
//   binding 0  x  [batch, H, W, in_stride]       f32  read
//   binding 1  y  [batch, H / s, W / s, channels]  f32  write
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
    uint stride;     // s: the window's side and its step
    uint in_stride;  // floats from one input pixel to the next (>= channels)
    uint in_offset;  // the first channel's float within an input pixel
} pc;

FN void nn_max_pool2d_body(uint i) {
    uint s = pc.stride, C = pc.channels;
    uint oh = pc.height / s, ow = pc.width / s;
    if (i >= pc.batch * oh * ow * C) {
        return;
    }
    uint ch = i % C, r = i / C;
    uint col = r % ow, row = (r / ow) % oh, b = r / (ow * oh);
    float best = -3.402823466e+38f;
    for (uint dy = 0u; dy < s; ++dy) {
        for (uint dx = 0u; dx < s; ++dx) {
            uint pixel = (b * pc.height + row * s + dy) * pc.width + col * s + dx;
            best = max(best, x[pixel * pc.in_stride + pc.in_offset + ch]);
        }
    }
    y[i] = best;
}

void main() { nn_max_pool2d_body(global_index()); }
