#version 450
// nn_conv2d: torch's F.conv2d(x, w, bias, stride, padding, groups) (dilation 1, zero padding):
// y[n, o, i, j] = bias[o] + sum over the group's input channels c and the kernel's (u, v) of
// x[n, c, i sy + u - py, j sx + v - px] w[o, c, u, v], terms outside x skipped (zeros). SAM's
// patch embedding (7x7, stride 4), its memory encoder's depthwise 7x7 (groups = channels)
// and 1x1 convolutions. Weights in fp16 as nn_linear's ([out_c, (in_c / groups) kh kw], two
// per word, each row padded to whole words), decoded exactly; the sum in f32 in the order
// c, u, v (reference spirula/reference/nn.py conv2d, the bound there). One thread per output
// element (workgroup 256, folded).
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

FN void nn_conv2d_body(uint t) {
    uint per = pc.out_h * pc.out_w;
    if (t >= pc.batch * pc.out_c * per) {
        return;
    }
    uint n = t / (pc.out_c * per);
    uint o = (t / per) % pc.out_c;
    uint oy = (t % per) / pc.out_w, ox = t % pc.out_w;
    uint cin = pc.in_c / pc.groups;
    uint c0 = (o / (pc.out_c / pc.groups)) * cin;
    uint wa = o * ((cin * pc.kh * pc.kw + 1u) / 2u);
    float acc = 0.0f;
    for (uint c = 0u; c < cin; ++c) {
        uint xb = (n * pc.in_c + c0 + c) * pc.in_h * pc.in_w;
        for (uint u = 0u; u < pc.kh; ++u) {
            int iy = int(oy * pc.stride_y + u) - int(pc.pad_y);
            if (iy < 0 || iy >= int(pc.in_h)) {
                continue;
            }
            for (uint v = 0u; v < pc.kw; ++v) {
                int ix = int(ox * pc.stride_x + v) - int(pc.pad_x);
                if (ix < 0 || ix >= int(pc.in_w)) {
                    continue;
                }
                uint k = (c * pc.kh + u) * pc.kw + v;
                uint h = w[wa + k / 2u];
                acc += x[xb + uint(iy) * pc.in_w + uint(ix)] * half_to_float((k & 1u) == 0u ? h & 65535u : h >> 16u);
            }
        }
    }
    y[t] = pc.has_bias != 0u ? acc + bias[o] : acc;
}

void main() { nn_conv2d_body(global_index()); }
