#version 450
// nn_conv_transpose2d: torch's F.conv_transpose2d(x, w, bias, stride, padding, output_padding,
// groups) (dilation 1): y[n, o, i, j] = bias[o] + sum over the group's input channels c and the
// kernel's (u, v) with i + py - u and j + px - v multiples of the stride, of
// x[n, c, (i + py - u) / sy, (j + px - v) / sx] w[c, o, u, v]. SAM's mask decoder upscaling
// (2x2, stride 2). Weights in fp16 as nn_conv2d's, each output channel's row in the order
// (c, u, v) (spirula.nn.conv_transpose_weight rearranges torch's [in_c, out_c / groups, kh,
// kw]); the sum in f32 in that order (reference spirula/reference/nn.py conv_transpose2d, the
// bound there). One thread per output element (workgroup 256, folded).
//   binding 0  x     [batch, in_c, in_h, in_w]     f32  read
//   binding 1  w     [out_c, (K + 1) / 2]          u32  read   fp16 pairs, K = in_c / groups kh kw
//   binding 2  bias  [out_c] (one word unused)     f32  read
//   binding 3  y     [batch, out_c, out_h, out_w]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "storage.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict readonly buffer WBuf { uint w[]; };
layout(std430, binding = 2) restrict readonly buffer BiasBuf { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint batch;
    uint in_c;
    uint in_h;
    uint in_w;
    uint out_c;
    uint out_h;
    uint out_w;
    uint kh;
    uint kw;
    uint stride_y;
    uint stride_x;
    uint pad_y;
    uint pad_x;
    uint groups;
    uint has_bias;  // 0: no bias (the buffer is not read)
} pc;

FN void nn_conv_transpose2d_body(uint t) {
    uint per = pc.out_h * pc.out_w;
    if (t >= pc.batch * pc.out_c * per) {
        return;
    }
    uint n = t / (pc.out_c * per);
    uint o = (t / per) % pc.out_c;
    int oy = int((t % per) / pc.out_w), ox = int(t % pc.out_w);
    uint cin = pc.in_c / pc.groups;
    uint c0 = (o / (pc.out_c / pc.groups)) * cin;
    uint wa = o * ((cin * pc.kh * pc.kw + 1u) / 2u);
    float acc = 0.0f;
    for (uint c = 0u; c < cin; ++c) {
        uint xb = (n * pc.in_c + c0 + c) * pc.in_h * pc.in_w;
        for (uint u = 0u; u < pc.kh; ++u) {
            int ty = oy + int(pc.pad_y) - int(u);
            if (ty < 0 || ty % int(pc.stride_y) != 0 || ty / int(pc.stride_y) >= int(pc.in_h)) {
                continue;
            }
            for (uint v = 0u; v < pc.kw; ++v) {
                int tx = ox + int(pc.pad_x) - int(v);
                if (tx < 0 || tx % int(pc.stride_x) != 0 || tx / int(pc.stride_x) >= int(pc.in_w)) {
                    continue;
                }
                uint k = (c * pc.kh + u) * pc.kw + v;
                uint h = w[wa + k / 2u];
                uint xi = xb + uint(ty / int(pc.stride_y)) * pc.in_w + uint(tx / int(pc.stride_x));
                acc += x[xi] * half_to_float((k & 1u) == 0u ? h & 65535u : h >> 16u);
            }
        }
    }
    y[t] = pc.has_bias != 0u ? acc + bias[o] : acc;
}

void main() { nn_conv_transpose2d_body(global_index()); }
