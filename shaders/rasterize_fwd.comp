#version 450
// rasterize_fwd: alpha-composite each tile's Gaussians front to back.
// One workgroup per 16x16 tile (x, y) of camera z; one thread per pixel. Each
// batch of up to 256 Gaussians is staged in shared memory; the workgroup stops
// when every pixel is saturated.
//   binding 0  ranges      [C*T,2]   u32  read   per tile [start, end) in isect_ids
//   binding 1  isect_ids   [M]       u32  read   (camera, Gaussian) index, tile-sorted
//   binding 2  xyop        [C*N,4]   f32  read   mean2d, opacity, depth
//   binding 3  conics      [C*N,4]   f32  read
//   binding 4  rgb         [C*N,4]   f32  read
//   binding 5  backgrounds [C,3]     f32  read
//   binding 6  out_colors  [C,H,W,3] f32  write  colour + T * background
//   binding 7  out_alphas  [C,H,W]   f32  write  1 - T
//   binding 8  out_depths  [C,H,W]   f32  write  sum of depth * alpha * T (not divided)
//   binding 9  out_last    [C,H,W]   u32  write  entries of the tile list up to the last blended
//   binding 10 out_median  [C,H,W]   f32  write  median depth: the depth of the Gaussian whose
//                                               blend takes T from > 0.5 to <= 0.5 (0: never)
//   binding 11 out_distort [C,H,W]   f32  write  (DISTORTION) depth distortion
//                                               sum_{i,j} w_i w_j |z_i - z_j| (docs/design.md §3)
//   binding 12 normals     [C*N,4]   f32  read   (NORMALS) camera-space splat normals (projection_fwd)
//   binding 13 out_normals [C,H,W,3] f32  write  (NORMALS) normal image sum of n * alpha * T
//                                               (alpha-blended as the colour, no background)
//   binding 14 chunk_state [S,K,256] f32 write  the state at each chunk boundary of a tile list
//                                               (include/raster.glsl: slots S, K = chunk_channels
//                                               channels) for rasterize_bwd's chunks
// DISTORTION (specialization constant, --geometry): also the depth distortion, from running
// sums: blending i adds 2 w_i (z_i A - D), A = sum_{j<i} w_j = 1 - T, D = sum_{j<i} w_j z_j
// (the list is depth-sorted, so z_i >= z_j). Off, the compiler removes it: no extra work.
// NORMALS (specialization constant, --geometry's normal consistency): also the normal image;
// its shared staging is sized by the constant (one slot when off).
// Chunks (tile-list splitting): at each batch start b = start + k chunk (k >= 1) of the tile
// list, each pixel writes its T and running sums (colour, depth, normal, distortion) to slot
// b / chunk; at the end it turns them into the sums behind b (final - prefix), which is where
// rasterize_bwd's chunk ending at b starts. A pixel that is done writes its final values; a
// boundary past the workgroup's stop is never read (its chunk lies past every pixel's last).
#extension GL_GOOGLE_include_directive : require
#include "raster.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) restrict readonly buffer RangesBuf { uvec2 ranges[]; };
layout(std430, binding = 1) restrict readonly buffer IsectIdsBuf { uint isect_ids[]; };
layout(std430, binding = 2) restrict readonly buffer XyopBuf { vec4 xyop[]; };
layout(std430, binding = 3) restrict readonly buffer ConicsBuf { vec4 conics[]; };
layout(std430, binding = 4) restrict readonly buffer RgbBuf { vec4 rgb[]; };
layout(std430, binding = 5) restrict readonly buffer BackgroundsBuf { float backgrounds[]; };
layout(std430, binding = 6) restrict writeonly buffer OutColorsBuf { float out_colors[]; };
layout(std430, binding = 7) restrict writeonly buffer OutAlphasBuf { float out_alphas[]; };
layout(std430, binding = 8) restrict writeonly buffer OutDepthsBuf { float out_depths[]; };
layout(std430, binding = 9) restrict writeonly buffer OutLastBuf { uint out_last[]; };
layout(std430, binding = 10) restrict writeonly buffer OutMedianBuf { float out_median[]; };
layout(std430, binding = 11) restrict writeonly buffer OutDistortBuf { float out_distort[]; };
layout(std430, binding = 12) restrict readonly buffer NormalsBuf { vec4 normals[]; };
layout(std430, binding = 13) restrict writeonly buffer OutNormalsBuf { float out_normals[]; };
layout(std430, binding = 14) restrict buffer ChunkStateBuf { float chunk_state[]; };

layout(constant_id = 0) const bool DISTORTION = false;
layout(constant_id = 1) const bool NORMALS = false;
const uint NORMAL_SLOTS = NORMALS ? TILE_PIXELS : 1u;

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint tile_width;
    uint tile_height;
    float max_alpha;
    uint chunk;           // entries of a chunk (a multiple of TILE_PIXELS)
    uint chunk_channels;  // channels of a chunk_state slot (include/raster.glsl)
} pc;

shared vec4 s_xyop[TILE_PIXELS];
shared vec4 s_conic[TILE_PIXELS];
shared vec4 s_rgb[TILE_PIXELS];
shared vec4 s_normal[NORMAL_SLOTS];
shared uint s_alive[2];

void main() {
    uint c = gl_WorkGroupID.z;
    uint tile = gl_WorkGroupID.y * pc.tile_width + gl_WorkGroupID.x;
    uvec2 range = ranges[c * pc.tile_width * pc.tile_height + tile];
    uint tid = gl_LocalInvocationIndex;
    uvec2 pix = gl_WorkGroupID.xy * TILE + gl_LocalInvocationID.xy;
    bool inside = pix.x < pc.width && pix.y < pc.height;
    vec2 centre = vec2(pix) + 0.5;

    float T = 1.0;
    vec3 color = vec3(0.0);
    float depth = 0.0;
    float median = 0.0;
    float distort = 0.0;
    vec3 normal = vec3(0.0);
    uint last = 0u;
    bool done = !inside;
    if (tid == 0u) {
        s_alive[0] = 0u;
        s_alive[1] = 0u;
    }
    barrier();
    uint batch = 0u;
    uint boundaries = 0u;  // chunk boundaries whose state this pixel wrote
    for (uint start = range.x; start < range.y; start += TILE_PIXELS, ++batch) {
        uint parity = batch & 1u;
        if (!done) {
            atomicAdd(s_alive[parity], 1u);
        }
        barrier();  // also: every pixel is done with the previous batch
        if (s_alive[parity] == 0u) {
            break;  // uniform: every pixel is saturated
        }
        if (start > range.x && (start - range.x) % pc.chunk == 0u) {
            uint slot = start / pc.chunk;
            uint K = pc.chunk_channels;
            chunk_state[chunk_word(slot, K, CHUNK_T, tid)] = T;
            chunk_state[chunk_word(slot, K, CHUNK_COLOR, tid)] = color.r;
            chunk_state[chunk_word(slot, K, CHUNK_COLOR + 1u, tid)] = color.g;
            chunk_state[chunk_word(slot, K, CHUNK_COLOR + 2u, tid)] = color.b;
            chunk_state[chunk_word(slot, K, CHUNK_DEPTH, tid)] = depth;
            if (NORMALS) {
                chunk_state[chunk_word(slot, K, CHUNK_NORMAL, tid)] = normal.x;
                chunk_state[chunk_word(slot, K, CHUNK_NORMAL + 1u, tid)] = normal.y;
                chunk_state[chunk_word(slot, K, CHUNK_NORMAL + 2u, tid)] = normal.z;
            }
            if (DISTORTION) {
                chunk_state[chunk_word(slot, K, K - 1u, tid)] = distort;
            }
            ++boundaries;
        }
        if (tid == 0u) {
            s_alive[parity ^ 1u] = 0u;
        }
        uint j = start + tid;
        if (j < range.y) {
            uint id = isect_ids[j];
            s_xyop[tid] = xyop[id];
            s_conic[tid] = conics[id];
            s_rgb[tid] = rgb[id];
            if (NORMALS) {
                s_normal[tid] = normals[id];
            }
        }
        barrier();
        uint count = min(TILE_PIXELS, range.y - start);
        for (uint k = 0u; k < count && !done; ++k) {
            vec4 g = s_xyop[k];
            float sigma = gaussian_sigma(g.xy - centre, s_conic[k].xyz);
            float alpha = min(pc.max_alpha, g.z * exp(-sigma));
            if (sigma < 0.0 || alpha < MIN_ALPHA) {
                continue;
            }
            float next_T = T * (1.0 - alpha);
            if (next_T <= MIN_TRANSMITTANCE) {
                done = true;
                break;
            }
            float w = alpha * T;
            color += s_rgb[k].rgb * w;
            if (NORMALS) {
                normal += s_normal[k].xyz * w;
            }
            if (DISTORTION) {
                distort += 2.0 * w * (g.w * (1.0 - T) - depth);
            }
            depth += g.w * w;
            // a select, not a branch: this Gaussian takes T across 0.5 (once per pixel)
            median = (T > 0.5 && next_T <= 0.5) ? g.w : median;
            T = next_T;
            last = start - range.x + k + 1u;
        }
    }
    // the prefixes this pixel wrote become the sums behind each boundary
    for (uint k = 1u; k <= boundaries; ++k) {
        uint slot = (range.x + k * pc.chunk) / pc.chunk;
        uint K = pc.chunk_channels;
        float T_b = chunk_state[chunk_word(slot, K, CHUNK_T, tid)];
        float D_P = chunk_state[chunk_word(slot, K, CHUNK_DEPTH, tid)];
        chunk_state[chunk_word(slot, K, CHUNK_COLOR, tid)] =
            color.r - chunk_state[chunk_word(slot, K, CHUNK_COLOR, tid)];
        chunk_state[chunk_word(slot, K, CHUNK_COLOR + 1u, tid)] =
            color.g - chunk_state[chunk_word(slot, K, CHUNK_COLOR + 1u, tid)];
        chunk_state[chunk_word(slot, K, CHUNK_COLOR + 2u, tid)] =
            color.b - chunk_state[chunk_word(slot, K, CHUNK_COLOR + 2u, tid)];
        chunk_state[chunk_word(slot, K, CHUNK_DEPTH, tid)] = depth - D_P;
        if (NORMALS) {
            for (uint i = 0u; i < 3u; ++i) {
                uint wd = chunk_word(slot, K, CHUNK_NORMAL + i, tid);
                chunk_state[wd] = normal[i] - chunk_state[wd];
            }
        }
        if (DISTORTION) {
            uint wd = chunk_word(slot, K, K - 1u, tid);
            chunk_state[wd] = chunk_distortion_behind(T_b, T, D_P, depth, chunk_state[wd], distort);
        }
    }
    if (inside) {
        uint p = (c * pc.height + pix.y) * pc.width + pix.x;
        out_colors[3u * p] = color.r + T * backgrounds[3u * c];
        out_colors[3u * p + 1u] = color.g + T * backgrounds[3u * c + 1u];
        out_colors[3u * p + 2u] = color.b + T * backgrounds[3u * c + 2u];
        out_alphas[p] = 1.0 - T;
        out_depths[p] = depth;
        out_last[p] = last;
        out_median[p] = median;
        if (DISTORTION) {
            out_distort[p] = distort;
        }
        if (NORMALS) {
            out_normals[3u * p] = normal.x;
            out_normals[3u * p + 1u] = normal.y;
            out_normals[3u * p + 2u] = normal.z;
        }
    }
}
