#version 450
// rasterize_bwd: back-propagate the image gradients to each (camera,
// Gaussian)'s 2D mean, conic, colour and opacity.
// One workgroup per chunk of a tile's list (tile-list splitting, docs/design.md §2.4): the
// workgroup linear_group_id() (folded) runs chunk_table's (tile t = camera * tiles + tile,
// chunk k), entries [start + k chunk, min(start + (k + 1) chunk, end)), one thread per pixel
// of the tile, back to front. A chunk at or past the last Gaussian any pixel blended returns;
// the one holding it starts from the final state (T_final, nothing behind), the others from
// the state rasterize_fwd left at their end (chunk_state). Per Gaussian, the gradients of a
// subgroup's pixels are summed with subgroup adds, then one lane adds them to the output
// (float atomics); each entry lies in one chunk.
//   binding 0  ranges       [C*T,2]   u32  read
//   binding 1  isect_ids    [M]       u32  read
//   binding 2  xyop         [C*N,4]   f32  read
//   binding 3  conics       [C*N,4]   f32  read
//   binding 4  rgb          [C*N,4]   f32  read
//   binding 5  backgrounds  [C,3]     f32  read
//   binding 6  out_alphas   [C,H,W]   f32  read   from rasterize_fwd (T_final = 1 - alpha)
//   binding 7  out_last     [C,H,W]   u32  read
//   binding 8  grad_colors  [C,H,W,3] f32  read   dL/d image colour
//   binding 9  grad_alphas  [C,H,W]   f32  read   dL/d image alpha
//   binding 10 grad_xy      [C*N,2]   f32  add    dL/d mean2d (zeroed by the caller)
//   binding 11 grad_conics  [C*N,3]   f32  add    dL/d (a, b, c)
//   binding 12 grad_rgb     [C*N,3]   f32  add    dL/d colour
//   binding 13 grad_opacity [C*N]     f32  add    dL/d opacity (as composited)
//   binding 14 grad_xy_abs  [C*N,2]   f32  add    sum over pixels of |dL/d mean2d| (when ABSGRAD)
//   binding 15 out_depths   [C,H,W]   f32  read   (DISTORTION) from rasterize_fwd: D = sum w z
//   binding 16 grad_distort [C,H,W]   f32  read   (DISTORTION) dL/d depth distortion
//   binding 17 grad_depth   [C*N]     f32  add    (DISTORTION or NORMALS) dL/d depth, through the
//                                                 distortion and the depth image
//   binding 18 normals      [C*N,4]   f32  read   (NORMALS) camera-space splat normals (projection_fwd)
//   binding 19 grad_normal_image [C,H,W,3] f32 read (NORMALS) dL/d normal image (out_normals)
//   binding 20 grad_depth_image  [C,H,W]   f32 read (NORMALS) dL/d depth image D = sum w z (out_depths)
//   binding 21 grad_normals [C*N,3]   f32  add    (NORMALS) dL/d camera-space splat normal
//   binding 22 chunk_table  [I,2]     u32  read   per workgroup id: (t, k), or ~0 (no chunk)
//                                                 (rasterize_chunks)
//   binding 23 chunk_state  [S,K,256] f32  read   rasterize_fwd's state at each chunk boundary
// DISTORTION: the depth distortion L_d = 2 sum_i w_i (z_i A_{i-1} - D_{i-1}) (A, D: sums of w,
// w z in front of i) back-propagated with sums behind k (bA, bD, and G = sum dL_d/dw_i w_i):
//   dL_d/dw_k = 2 (z_k A_{k-1} - D_{k-1}) + 2 (bD - z_k bA),   dL_d/dz_k = 2 w_k (A_{k-1} - bA)
//   dL_d/dalpha_k = T_k dL_d/dw_k - G / (1 - alpha_k)   (w_i, i > k, carry 1 - alpha_k)
// NORMALS: the normal image N = sum w n and the depth image D = sum w z (no background) go back
// as the colour does: dL/dn_k = w_k v_N, dL/dz_k += w_k v_D, dL/dalpha_k += (n_k T_k - bN / (1 -
// alpha_k)) . v_N + (z_k T_k - bZ / (1 - alpha_k)) v_D, bN and bZ the sums behind k. It is how
// --geometry's normal consistency (normal_consistency_bwd's image gradients) reaches the splats.
#extension GL_GOOGLE_include_directive : require
// Every access is in range by construction (tests/test_validation_train.py runs training under
// GPU-assisted bounds checks), and without the driver's checks this kernel ran 4-5% faster on an
// H100 (notes/performance-history.md, "Buffer robustness per kernel"): VulkanDevice(buffer_robustness="kernels")
// compiles it without them.
#pragma spirula_no_bounds_checks
#include "atomics.glsl"
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_vote : require
// SHUFFLE_SUMS=1 (VulkanDevice's shuffle_sums; on NVIDIA by default): the per-Gaussian sums as
// explicit subgroupShuffleXor butterflies of SUBGROUP_LOG2 steps (the device's one subgroup size
// is 2^SUBGROUP_LOG2) and lane 0 as the adding lane. Every lane is active where they run, which
// subgroupAdd and subgroupElect cannot assume: NVIDIA's driver tests for inactive lanes around
// each subgroupAdd at run time (notes/performance-history.md, "What NVIDIA's driver compiled"). A fixed
// step count, so that the compiler unrolls it: a loop to gl_SubgroupSize stayed a loop there
// and made rasterize_bwd 15% slower than subgroupAdd on an H100, the unrolled one 17% faster.
#ifndef SHUFFLE_SUMS
#define SHUFFLE_SUMS 0
#endif
#if SHUFFLE_SUMS
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#endif
#include "common.glsl"
#include "raster.glsl"

#if SHUFFLE_SUMS
#ifndef SUBGROUP_LOG2
#error SHUFFLE_SUMS needs SUBGROUP_LOG2, the log2 of the device's one subgroup size
#endif
#define LANE_SUM(T)                                 \
    T lane_sum(T v) {                               \
        [[unroll]]                                  \
        for (uint k = 0u; k < SUBGROUP_LOG2; ++k) { \
            v += subgroupShuffleXor(v, 1u << k);    \
        }                                           \
        return v;                                   \
    }
LANE_SUM(float)
LANE_SUM(vec2)
LANE_SUM(vec3)
#define ADDING_LANE (gl_SubgroupInvocationID == 0u)
#else
#define lane_sum subgroupAdd
#define ADDING_LANE subgroupElect()
#endif

layout(local_size_x = 16, local_size_y = 16) in;
layout(constant_id = 0) const bool ABSGRAD = false;
layout(constant_id = 1) const bool DISTORTION = false;
layout(constant_id = 2) const bool NORMALS = false;
const bool DEPTH_GRAD = DISTORTION || NORMALS;  // grad_depth is written

layout(std430, binding = 0) restrict readonly buffer RangesBuf { uvec2 ranges[]; };
layout(std430, binding = 1) restrict readonly buffer IsectIdsBuf { uint isect_ids[]; };
layout(std430, binding = 2) restrict readonly buffer XyopBuf { vec4 xyop[]; };
layout(std430, binding = 3) restrict readonly buffer ConicsBuf { vec4 conics[]; };
layout(std430, binding = 4) restrict readonly buffer RgbBuf { vec4 rgb[]; };
layout(std430, binding = 5) restrict readonly buffer BackgroundsBuf { float backgrounds[]; };
layout(std430, binding = 6) restrict readonly buffer OutAlphasBuf { float out_alphas[]; };
layout(std430, binding = 7) restrict readonly buffer OutLastBuf { uint out_last[]; };
layout(std430, binding = 8) restrict readonly buffer GradColorsBuf { float grad_colors[]; };
layout(std430, binding = 9) restrict readonly buffer GradAlphasBuf { float grad_alphas[]; };
layout(std430, binding = 10) restrict buffer GradXyBuf { GRAD_T grad_xy[]; };
layout(std430, binding = 11) restrict buffer GradConicsBuf { GRAD_T grad_conics[]; };
layout(std430, binding = 12) restrict buffer GradRgbBuf { GRAD_T grad_rgb[]; };
layout(std430, binding = 13) restrict buffer GradOpacityBuf { GRAD_T grad_opacity[]; };
layout(std430, binding = 14) restrict buffer GradXyAbsBuf { GRAD_T grad_xy_abs[]; };
layout(std430, binding = 15) restrict readonly buffer OutDepthsBuf { float out_depths[]; };
layout(std430, binding = 16) restrict readonly buffer GradDistortBuf { float grad_distort[]; };
layout(std430, binding = 17) restrict buffer GradDepthBuf { GRAD_T grad_depth[]; };
layout(std430, binding = 18) restrict readonly buffer NormalsBuf { vec4 normals[]; };
layout(std430, binding = 19) restrict readonly buffer GradNormalImageBuf { float grad_normal_image[]; };
layout(std430, binding = 20) restrict readonly buffer GradDepthImageBuf { float grad_depth_image[]; };
layout(std430, binding = 21) restrict buffer GradNormalsBuf { GRAD_T grad_normals[]; };
layout(std430, binding = 22) restrict readonly buffer ChunkTableBuf { uvec2 chunk_table[]; };
layout(std430, binding = 23) restrict readonly buffer ChunkStateBuf { float chunk_state[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint tile_width;
    uint tile_height;
    float max_alpha;
    uint chunk;           // entries of a chunk (a multiple of TILE_PIXELS)
    uint chunk_channels;  // channels of a chunk_state slot (include/raster.glsl)
    uint chunk_ids;       // entries of chunk_table (workgroups past it return)
} pc;

shared vec4 s_xyop[TILE_PIXELS];
shared vec4 s_conic[TILE_PIXELS];
shared vec4 s_rgb[TILE_PIXELS];
// NORMALS: a staged splat normal is (s_rgb.w, s_conic.w, s_nz) (the w slots are free), so
// NORMALS adds 1 KiB of shared memory, not 4 (occupancy), and one float without it
const uint NORMAL_SLOTS = NORMALS ? TILE_PIXELS : 1u;
shared float s_nz[NORMAL_SLOTS];
shared uint s_id[TILE_PIXELS];
shared uint s_max_last;

void main() {
    uint group = linear_group_id();
    if (group >= pc.chunk_ids) {
        return;  // uniform: past the table (a folded grid)
    }
    uvec2 job = chunk_table[group];
    if (job.x == CHUNK_NONE) {
        return;  // uniform: no chunk has this id
    }
    uint tiles = pc.tile_width * pc.tile_height;
    uint c = job.x / tiles;
    uint tile = job.x - c * tiles;
    uvec2 range = ranges[job.x];
    uint tid = gl_LocalInvocationIndex;
    uvec2 pix = uvec2(tile % pc.tile_width, tile / pc.tile_width) * TILE + gl_LocalInvocationID.xy;
    bool inside = pix.x < pc.width && pix.y < pc.height;
    vec2 centre = vec2(pix) + 0.5;
    uint p = (c * pc.height + min(pix.y, pc.height - 1u)) * pc.width + min(pix.x, pc.width - 1u);

    float T_final = inside ? 1.0 - out_alphas[p] : 1.0;
    uint last = inside ? out_last[p] : 0u;
    vec3 v_color = inside ? vec3(grad_colors[3u * p], grad_colors[3u * p + 1u], grad_colors[3u * p + 2u]) : vec3(0.0);
    float v_alpha_out = inside ? grad_alphas[p] : 0.0;
    vec3 bg = vec3(backgrounds[3u * c], backgrounds[3u * c + 1u], backgrounds[3u * c + 2u]);
    // gradient of the pixel through T_final, shared by every Gaussian it blends
    float v_T_final = v_alpha_out - dot(bg, v_color);
    // depth distortion: its cotangent, the totals A = 1 - T_final and D, and the sums behind
    float v_dist = DISTORTION && inside ? grad_distort[p] : 0.0;
    float A_final = 1.0 - T_final;
    float D_final = DISTORTION && inside ? out_depths[p] : 0.0;
    float bA = 0.0, bD = 0.0, bG = 0.0;
    // normal and depth images: their cotangents and the sums behind
    vec3 v_nimg = NORMALS && inside
                      ? vec3(grad_normal_image[3u * p], grad_normal_image[3u * p + 1u], grad_normal_image[3u * p + 2u])
                      : vec3(0.0);
    float v_dimg = NORMALS && inside ? grad_depth_image[p] : 0.0;
    vec3 bN = vec3(0.0);
    float bZ = 0.0;

    if (tid == 0u) {
        s_max_last = 0u;
    }
    barrier();
    atomicMax(s_max_last, last);
    barrier();
    uint end = range.x + s_max_last;
    uint chunk_start = range.x + job.y * pc.chunk;
    if (chunk_start >= end) {
        return;  // uniform: no pixel blended a Gaussian of this chunk
    }
    uint chunk_end = min(chunk_start + pc.chunk, end);

    float T = T_final;
    vec3 behind = vec3(0.0);  // colour blended behind the current Gaussian (at the chunk's end)
    if (chunk_end < end) {    // uniform: start from the forward's state at the boundary chunk_end
        uint slot = chunk_end / pc.chunk;
        uint K = pc.chunk_channels;
        T = chunk_state[chunk_word(slot, K, CHUNK_T, tid)];
        behind = vec3(chunk_state[chunk_word(slot, K, CHUNK_COLOR, tid)],
                      chunk_state[chunk_word(slot, K, CHUNK_COLOR + 1u, tid)],
                      chunk_state[chunk_word(slot, K, CHUNK_COLOR + 2u, tid)]);
        if (DISTORTION) {
            bA = T - T_final;
            bD = chunk_state[chunk_word(slot, K, CHUNK_DEPTH, tid)];
            bG = chunk_state[chunk_word(slot, K, K - 1u, tid)];
        }
        if (NORMALS) {
            bZ = chunk_state[chunk_word(slot, K, CHUNK_DEPTH, tid)];
            bN = vec3(chunk_state[chunk_word(slot, K, CHUNK_NORMAL, tid)],
                      chunk_state[chunk_word(slot, K, CHUNK_NORMAL + 1u, tid)],
                      chunk_state[chunk_word(slot, K, CHUNK_NORMAL + 2u, tid)]);
        }
    }
    // The colour behind enters dL/dalpha only through its dot with v_color, and T_final's
    // gradient only as T_final v_T_final: one scalar q = T_final v_T_final - behind . v_color
    // carries both (fewer live registers: more workgroups an SM)
    float q = T_final * v_T_final - dot(behind, v_color);
    uint last_end = range.x + last;  // one past the last entry this pixel blended
    for (uint batch_end = chunk_end; batch_end > chunk_start;) {
        uint batch_start = batch_end - min(batch_end - chunk_start, TILE_PIXELS);
        uint count = batch_end - batch_start;
        barrier();  // the previous batch is consumed
        if (tid < count) {
            uint id = isect_ids[batch_start + tid];
            s_id[tid] = id;
            s_xyop[tid] = xyop[id];
            s_conic[tid] = conics[id];
            s_rgb[tid] = rgb[id];
            if (NORMALS) {
                vec4 nv = normals[id];
                s_rgb[tid].w = nv.x;
                s_conic[tid].w = nv.y;
                s_nz[tid] = nv.z;
            }
        }
        barrier();
        for (uint kk = count; kk > 0u; --kk) {
            uint k = kk - 1u;
            bool valid = batch_start + k < last_end;
            vec4 g = s_xyop[k];
            vec3 con = s_conic[k].xyz;
            vec2 d = g.xy - centre;
            float sigma = gaussian_sigma(d, con);
            float vis = exp(-sigma);
            float raw_alpha = g.z * vis;
            float alpha = min(pc.max_alpha, raw_alpha);
            valid = valid && sigma >= 0.0 && alpha >= MIN_ALPHA;
            vec2 v_xy = vec2(0.0);
            vec3 v_con = vec3(0.0);
            vec3 v_rgb = vec3(0.0);
            float v_op = 0.0;
            float v_z = 0.0;
            vec3 v_n = vec3(0.0);
            if (valid) {
                float ra = 1.0 / (1.0 - alpha);
                T *= ra;  // T before this Gaussian
                float cdot = dot(s_rgb[k].rgb, v_color);
                float w = alpha * T;
                v_rgb = w * v_color;
                float v_alpha = T * cdot + ra * q;
                q -= w * cdot;
                if (DISTORTION) {
                    float z = g.w;
                    float A_prev = A_final - bA - w;
                    float D_prev = D_final - bD - w * z;
                    float dw = 2.0 * (z * A_prev - D_prev) + 2.0 * (bD - z * bA);
                    v_alpha += v_dist * (T * dw - bG * ra);
                    v_z = v_dist * 2.0 * w * (A_prev - bA);
                    bG += dw * w;
                    bA += w;
                    bD += w * z;
                }
                if (NORMALS) {
                    vec3 nk = vec3(s_rgb[k].w, s_conic[k].w, s_nz[k]);
                    float z = g.w;
                    v_alpha += dot(nk * T - bN * ra, v_nimg) + (z * T - bZ * ra) * v_dimg;
                    v_n = w * v_nimg;
                    v_z += w * v_dimg;
                    bN += nk * w;
                    bZ += z * w;
                }
                if (raw_alpha <= pc.max_alpha) {
                    float v_sigma = -raw_alpha * v_alpha;
                    v_op = vis * v_alpha;
                    v_con = vec3(0.5 * d.x * d.x, d.x * d.y, 0.5 * d.y * d.y) * v_sigma;
                    v_xy = v_sigma * vec2(con.x * d.x + con.y * d.y, con.y * d.x + con.z * d.y);
                }
            }
            if (subgroupAny(valid)) {
                vec2 v_abs = ABSGRAD ? lane_sum(abs(v_xy)) : vec2(0.0);
                v_xy = lane_sum(v_xy);
                v_con = lane_sum(v_con);
                v_rgb = lane_sum(v_rgb);
                v_op = lane_sum(v_op);
                if (DEPTH_GRAD) {
                    v_z = lane_sum(v_z);
                }
                if (NORMALS) {
                    v_n = lane_sum(v_n);
                }
                if (ADDING_LANE) {
                    uint id = s_id[k];
                    ATOMIC_ADD(grad_xy, 2u * id, v_xy.x);
                    ATOMIC_ADD(grad_xy, 2u * id + 1u, v_xy.y);
                    ATOMIC_ADD(grad_conics, 3u * id, v_con.x);
                    ATOMIC_ADD(grad_conics, 3u * id + 1u, v_con.y);
                    ATOMIC_ADD(grad_conics, 3u * id + 2u, v_con.z);
                    ATOMIC_ADD(grad_rgb, 3u * id, v_rgb.x);
                    ATOMIC_ADD(grad_rgb, 3u * id + 1u, v_rgb.y);
                    ATOMIC_ADD(grad_rgb, 3u * id + 2u, v_rgb.z);
                    ATOMIC_ADD(grad_opacity, id, v_op);
                    if (ABSGRAD) {
                        ATOMIC_ADD(grad_xy_abs, 2u * id, v_abs.x);
                        ATOMIC_ADD(grad_xy_abs, 2u * id + 1u, v_abs.y);
                    }
                    if (DEPTH_GRAD) {
                        ATOMIC_ADD(grad_depth, id, v_z);
                    }
                    if (NORMALS) {
                        ATOMIC_ADD(grad_normals, 3u * id, v_n.x);
                        ATOMIC_ADD(grad_normals, 3u * id + 1u, v_n.y);
                        ATOMIC_ADD(grad_normals, 3u * id + 2u, v_n.z);
                    }
                }
            }
        }
        batch_end = batch_start;
    }
}
