// densify_adc_write: write the splats that density control leaves into new
// buffers, at the offsets of the scanned counts. Twin of
// shaders/densify_adc_write.comp. GROUP 0 writes the parameters: kept and
// cloned splats are copied; a split splat becomes two children at
// mean + R (s * z), z ~ N(0, I), with scales s / 1.6. GROUP 1 and 2 write an
// Adam moment (first, second): copied for kept splats and a clone's original,
// 0 for a clone's copy and for split children.
// One thread per old splat i < n (folded).
// Contract: build/contracts/densify_adc_write.h, generated from shaders/densify_adc_write.comp.
#include "common/launch.cuh"
#include "common/projection.cuh"
#include "common/random.cuh"
#include "common/storage.cuh"
#include "densify_adc_write.h"

namespace {

using namespace spirula;
using namespace contract;

constexpr float LOG_SPLIT_SHRINK = 0.47000362924573558f;  // log(1.6)

__device__ void write_row(const Args& a, uint32_t sh_words, uint32_t dst, uint32_t src, bool zero, vec3 mean_offset,
                          float scale_offset, bool packed) {
    if (packed) {  // bf16 moment rows of 2 words (storage.glsl), copied as words
        const uint32_t* sq = reinterpret_cast<const uint32_t*>(a.src_quats);
        uint32_t* dq = reinterpret_cast<uint32_t*>(a.dst_quats);
        const uint32_t* sm = reinterpret_cast<const uint32_t*>(a.src_means);
        uint32_t* dm = reinterpret_cast<uint32_t*>(a.dst_means);
        const uint32_t* ss = reinterpret_cast<const uint32_t*>(a.src_scales);
        uint32_t* ds = reinterpret_cast<uint32_t*>(a.dst_scales);
        for (uint32_t k = 0u; k < 2u; ++k) {
            dm[2u * dst + k] = zero ? 0u : sm[2u * src + k];
            ds[2u * dst + k] = zero ? 0u : ss[2u * src + k];
            dq[2u * dst + k] = zero ? 0u : sq[2u * src + k];
        }
    } else {
        for (uint32_t k = 0u; k < 3u; ++k) {
            a.dst_means[3u * dst + k] = zero ? 0.0f : a.src_means[3u * src + k] + mean_offset[int(k)];
            a.dst_scales[3u * dst + k] = zero ? 0.0f : a.src_scales[3u * src + k] + scale_offset;
        }
        a.dst_quats[dst] = zero ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : a.src_quats[src];
    }
    a.dst_opacities[dst] = zero ? 0.0f : a.src_opacities[src];
    for (uint32_t k = 0u; k < sh_words; ++k) {  // whole words (COMPACT: storage.glsl's rows)
        a.dst_sh[sh_words * dst + k] = zero ? 0.0f : a.src_sh[sh_words * src + k];
    }
}

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_adc_write_kernel(Args a, Push pc, uint32_t group, uint32_t sh_coeffs, bool compact) {
    // group 0: the parameters' rows; 1, 2: the moments'
    const uint32_t sh_words = group == 0u ? sh_row_words(compact, sh_coeffs) : moment_row_words(compact, sh_coeffs);
    uint32_t i = global_index();
    if (i >= pc.n || a.out_counts[i] == 0u) {
        return;
    }
    uint32_t action = a.actions[i];
    uint32_t o = a.offsets[i];
    const vec3 zero3 = make3(0.0f, 0.0f, 0.0f);
    if (group != 0u) {  // Adam moments
        write_row(a, sh_words, o, i, action == 2u, zero3, 0.0f, compact);
        if (action != 0u) {
            write_row(a, sh_words, o + 1u, i, true, zero3, 0.0f, compact);
        }
        return;
    }
    if (action != 2u) {
        write_row(a, sh_words, o, i, false, zero3, 0.0f, false);
        if (action == 1u) {
            write_row(a, sh_words, o + 1u, i, false, zero3, 0.0f, false);
        }
        return;
    }
    vec4 q = load4(a.src_quats, i);
    mat3 R = quat_to_rotmat(q * inversesqrt(dot(q, q)));
    vec3 s = make3(expf(a.src_scales[3u * i]), expf(a.src_scales[3u * i + 1u]), expf(a.src_scales[3u * i + 2u]));
    for (uint32_t c = 0u; c < 2u; ++c) {
        vec2 z01 = random_normal2(pc.seed, i, 4u * c);
        vec2 z23 = random_normal2(pc.seed, i, 4u * c + 2u);
        write_row(a, sh_words, o + c, i, false, R * (s * make3(z01.x, z01.y, z23.x)), -LOG_SPLIT_SHRINK, false);
    }
}

}  // namespace

SPIRULA_EXPORT int densify_adc_write(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return launch(L, LOCAL_SIZE, densify_adc_write_kernel, a, pc, sp.GROUP, sp.SH_COEFFS, sp.COMPACT_ROWS);
}
