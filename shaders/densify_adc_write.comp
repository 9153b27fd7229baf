#version 450
// densify_adc_write: write the splats that density control leaves into new
// buffers, at the offsets of the scanned counts. GROUP 0 writes the
// parameters: kept and cloned splats are copied; a split splat becomes two
// children at mean + R (s * z), z ~ N(0, I), with scales s / 1.6. GROUP 1
// and 2 write an Adam moment (first, second): copied for kept splats and a
// clone's original, 0 for a clone's copy and for split children.
// One thread per old splat i < n (workgroup 256, folded).
//   binding 0-4  src: means [N,3], quats [N,4], scales [N,3], opacities [N], sh [N,K,3]  read
//   binding 5-9  dst: the same, [N',...]                                              write
//   binding 10   actions   [N]  u32  read
//   binding 11   offsets   [N]  u32  read   where splat i's outputs start
//   binding 12   out_counts[N]  u32  read   outputs of splat i (0: pruned)
// COMPACT_ROWS (spec): src_sh and dst_sh hold the rows of include/storage.glsl, and in
// GROUP 1, 2 so do the means', quats' and scales' (bf16 rows of 2 words); a copy
// moves whole 32-bit words, so the bindings keep their f32 type.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "projection.glsl"
#include "random.glsl"
#include "storage.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint GROUP = 0;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool COMPACT_ROWS = false;

layout(std430, binding = 0) readonly buffer SrcMeansBuf { float src_means[]; };
layout(std430, binding = 1) readonly buffer SrcQuatsBuf { vec4 src_quats[]; };
layout(std430, binding = 2) readonly buffer SrcScalesBuf { float src_scales[]; };
layout(std430, binding = 3) readonly buffer SrcOpacitiesBuf { float src_opacities[]; };
layout(std430, binding = 4) readonly buffer SrcShBuf { float src_sh[]; };
layout(std430, binding = 5) writeonly buffer DstMeansBuf { float dst_means[]; };
layout(std430, binding = 6) writeonly buffer DstQuatsBuf { vec4 dst_quats[]; };
layout(std430, binding = 7) writeonly buffer DstScalesBuf { float dst_scales[]; };
layout(std430, binding = 8) writeonly buffer DstOpacitiesBuf { float dst_opacities[]; };
layout(std430, binding = 9) writeonly buffer DstShBuf { float dst_sh[]; };
layout(std430, binding = 10) readonly buffer ActionsBuf { uint actions[]; };
layout(std430, binding = 11) readonly buffer OffsetsBuf { uint offsets[]; };
layout(std430, binding = 12) readonly buffer OutCountsBuf { uint out_counts[]; };

layout(push_constant) uniform Push {
    uint n;
    uint seed;
} pc;

const float LOG_SPLIT_SHRINK = 0.47000362924573558f;  // log(1.6)

FN void write_row(uint dst, uint src, bool zero, vec3 mean_offset, float scale_offset) {
    if (GROUP != 0u && COMPACT_ROWS) {
        // bf16 moment rows of 2 words (means, scales; quats: half of vec4 i / 2), copied as words
        for (uint k = 0u; k < 2u; ++k) {
            dst_means[2u * dst + k] = zero ? 0.0f : src_means[2u * src + k];
            dst_scales[2u * dst + k] = zero ? 0.0f : src_scales[2u * src + k];
            dst_quats[dst >> 1u][2u * (dst & 1u) + k] = zero ? 0.0f : src_quats[src >> 1u][2u * (src & 1u) + k];
        }
    } else {
        for (uint k = 0u; k < 3u; ++k) {
            dst_means[3u * dst + k] = zero ? 0.0f : src_means[3u * src + k] + mean_offset[k];
            dst_scales[3u * dst + k] = zero ? 0.0f : src_scales[3u * src + k] + scale_offset;
        }
        dst_quats[dst] = zero ? vec4(0.0f) : src_quats[src];
    }
    dst_opacities[dst] = zero ? 0.0f : src_opacities[src];
    // GROUP 0: the parameters' rows; 1, 2: the moments'
    uint sh_words = GROUP == 0u ? sh_row_words(COMPACT_ROWS, SH_COEFFS) : moment_row_words(COMPACT_ROWS, SH_COEFFS);
    for (uint k = 0u; k < sh_words; ++k) {
        dst_sh[sh_words * dst + k] = zero ? 0.0f : src_sh[sh_words * src + k];
    }
}

FN void densify_adc_write_body(uint i) {
    if (i >= pc.n || out_counts[i] == 0u) {
        return;
    }
    uint action = actions[i];
    uint o = offsets[i];
    if (GROUP != 0u) {  // Adam moments
        write_row(o, i, action == 2u, vec3(0.0f), 0.0f);
        if (action != 0u) {
            write_row(o + 1u, i, true, vec3(0.0f), 0.0f);
        }
        return;
    }
    if (action != 2u) {
        write_row(o, i, false, vec3(0.0f), 0.0f);
        if (action == 1u) {
            write_row(o + 1u, i, false, vec3(0.0f), 0.0f);
        }
        return;
    }
    vec4 q = src_quats[i];
    mat3 R = quat_to_rotmat(q * inversesqrt(dot(q, q)));
    vec3 s = exp(vec3(src_scales[3u * i], src_scales[3u * i + 1u], src_scales[3u * i + 2u]));
    for (uint c = 0u; c < 2u; ++c) {
        vec2 z01 = random_normal2(pc.seed, i, 4u * c);
        vec2 z23 = random_normal2(pc.seed, i, 4u * c + 2u);
        write_row(o + c, i, false, R * (s * vec3(z01.x, z01.y, z23.x)), -LOG_SPLIT_SHRINK);
    }
}

void main() { densify_adc_write_body(global_index()); }
