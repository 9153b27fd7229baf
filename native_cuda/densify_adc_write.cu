// densify_adc_write: write the splats that density control leaves into new
// buffers, at the offsets of the scanned counts. Twin of
// shaders/densify_adc_write.comp. GROUP 0 writes the parameters: kept and
// cloned splats are copied; a split splat becomes two children at
// mean + R (s * z), z ~ N(0, I), with scales s / 1.6. GROUP 1 and 2 write an
// Adam moment (first, second): copied for kept splats and a clone's original,
// 0 for a clone's copy and for split children.
// One thread per old splat i < n (workgroup 256, folded).
//   binding 0-4  src: means [N,3], quats [N,4], scales [N,3], opacities [N], sh [N,K,3]  read
//   binding 5-9  dst: the same, [N',...]                                              write
//   binding 10   actions   [N]  u32  read
//   binding 11   offsets   [N]  u32  read   where splat i's outputs start
//   binding 12   out_counts[N]  u32  read   outputs of splat i (0: pruned)
//   constant_id 0 GROUP, 1 SH_COEFFS
#include "common/launch.cuh"
#include "common/projection.cuh"
#include "common/random.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n;
    uint32_t seed;
};

struct Args {
    const float* src_means;
    const float4* src_quats;
    const float* src_scales;
    const float* src_opacities;
    const float* src_sh;
    float* dst_means;
    float4* dst_quats;
    float* dst_scales;
    float* dst_opacities;
    float* dst_sh;
    const uint32_t* actions;
    const uint32_t* offsets;
    const uint32_t* out_counts;
};

constexpr float LOG_SPLIT_SHRINK = 0.47000362924573558f;   // log(1.6)

__device__ void write_row(const Args& a, uint32_t sh_coeffs, uint32_t dst, uint32_t src, bool zero,
                          vec3 mean_offset, float scale_offset) {
    for (uint32_t k = 0u; k < 3u; ++k) {
        a.dst_means[3u * dst + k] = zero ? 0.0f : a.src_means[3u * src + k] + mean_offset[int(k)];
        a.dst_scales[3u * dst + k] = zero ? 0.0f : a.src_scales[3u * src + k] + scale_offset;
    }
    a.dst_quats[dst] = zero ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : a.src_quats[src];
    a.dst_opacities[dst] = zero ? 0.0f : a.src_opacities[src];
    for (uint32_t k = 0u; k < 3u * sh_coeffs; ++k) {
        a.dst_sh[3u * sh_coeffs * dst + k] = zero ? 0.0f : a.src_sh[3u * sh_coeffs * src + k];
    }
}

__global__ void __launch_bounds__(256) densify_adc_write_kernel(Args a, Push pc, uint32_t group, uint32_t sh_coeffs) {
    uint32_t i = global_index();
    if (i >= pc.n || a.out_counts[i] == 0u) {
        return;
    }
    uint32_t action = a.actions[i];
    uint32_t o = a.offsets[i];
    const vec3 zero3 = make3(0.0f, 0.0f, 0.0f);
    if (group != 0u) {                     // Adam moments
        write_row(a, sh_coeffs, o, i, action == 2u, zero3, 0.0f);
        if (action != 0u) {
            write_row(a, sh_coeffs, o + 1u, i, true, zero3, 0.0f);
        }
        return;
    }
    if (action != 2u) {
        write_row(a, sh_coeffs, o, i, false, zero3, 0.0f);
        if (action == 1u) {
            write_row(a, sh_coeffs, o + 1u, i, false, zero3, 0.0f);
        }
        return;
    }
    vec4 q = load4(a.src_quats, i);
    mat3 R = quat_to_rotmat(q * inversesqrt(dot(q, q)));
    vec3 s = make3(expf(a.src_scales[3u * i]), expf(a.src_scales[3u * i + 1u]), expf(a.src_scales[3u * i + 2u]));
    for (uint32_t c = 0u; c < 2u; ++c) {
        vec2 z01 = random_normal2(pc.seed, i, 4u * c);
        vec2 z23 = random_normal2(pc.seed, i, 4u * c + 2u);
        write_row(a, sh_coeffs, o + c, i, false, R * (s * make3(z01.x, z01.y, z23.x)), -LOG_SPLIT_SHRINK);
    }
}

}  // namespace

SPIRULA_EXPORT int densify_adc_write(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 13, 2, 2);
    Args a{buffer<const float>(L, 0), buffer<const float4>(L, 1), buffer<const float>(L, 2),
           buffer<const float>(L, 3), buffer<const float>(L, 4),  buffer<float>(L, 5),
           buffer<float4>(L, 6),      buffer<float>(L, 7),         buffer<float>(L, 8),
           buffer<float>(L, 9),       buffer<const uint32_t>(L, 10), buffer<const uint32_t>(L, 11),
           buffer<const uint32_t>(L, 12)};
    return launch(L, dim3(256), densify_adc_write_kernel, a, push_block<Push>(L), L->spec[0], L->spec[1]);
}
