#version 450
// nn_pos_sine: SAM 2's PositionEmbeddingSine (normalize = True) of an H x W grid, channels-
// first [2 half, H, W]: channel c < half encodes the row, c >= half the column; with k = c %
// half and t = (index + 1) / (n + 1e-6) scale (n = H or W, scale 2 pi), the value v = t /
// temperature^(2 floor(k / 2) / half), sin(v) for even k, cos(v) for odd. 1 / temperature^e
// is exp2(-e log2(temperature)), log2 given by the host. Reference spirula/reference/nn.py
// pos_sine, the bound there. One thread per output element (workgroup 256, folded).
//   binding 0  y  [2 half, H, W]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint height;
    uint width;
    uint half_channels;      // num_pos_feats / 2
    float log2_temperature;  // log2(temperature), rounded to f32 on the host
    float scale;             // 2 pi
} pc;

FN void nn_pos_sine_body(uint i) {
    uint hw = pc.height * pc.width;
    if (i >= 2u * pc.half_channels * hw) {
        return;
    }
    uint c = i / hw, r = i % hw;
    bool row = c < pc.half_channels;
    uint k = row ? c : c - pc.half_channels;
    float index = float(row ? r / pc.width : r % pc.width) + 1.0f;
    float n = float(row ? pc.height : pc.width);
    float t = index / (n + 1e-6f) * pc.scale;
    float v = t * exp2(-(float(2u * (k / 2u)) / float(pc.half_channels)) * pc.log2_temperature);
    // into [-pi, pi], where Vulkan bounds sin and cos (v is in (0, 2 pi])
    v = v > 3.14159265f ? v - 6.28318531f : v;
    y[i] = (k & 1u) == 0u ? sin(v) : cos(v);
}

void main() { nn_pos_sine_body(global_index()); }
