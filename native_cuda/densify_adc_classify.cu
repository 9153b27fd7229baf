// densify_adc_classify: adaptive density control (Kerbl et al. 2023, as
// gsplat's DefaultStrategy), step 1: what becomes of each splat and how many
// splats it leaves. A splat whose mean screen-space gradient exceeds
// grow_grad2d is cloned when small (largest scale <= grow_scale3d) and split
// in two when large; then every resulting splat with opacity < min_opacity,
// or (prune_big) larger than prune_scale3d, is pruned.
// Twin of shaders/densify_adc_classify.comp. One thread per splat i < n
// (workgroup 256, folded).
//   binding 0  scales      [N,3]  f32  read   log
//   binding 1  opacities   [N]    f32  read   logit
//   binding 2  grad2d_sum  [N]    f32  read   from fpbo
//   binding 3  vis_count   [N]    u32  read
//   binding 4  actions     [N]    u32  write  0 keep, 1 clone, 2 split
//   binding 5  out_counts  [N]    u32  write  0, 1 or 2 (scanned into output offsets)
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t n;
    float grow_grad2d;
    float grow_scale3d;     // already times the scene extent
    float prune_scale3d;    // already times the scene extent
    float min_opacity;
    uint32_t prune_big;
    uint32_t grow;
};

constexpr float SPLIT_SHRINK = 1.6f;

__global__ void __launch_bounds__(256)
densify_adc_classify_kernel(const float* scales, const float* opacities, const float* grad2d_sum,
                            const uint32_t* vis_count, uint32_t* actions, uint32_t* out_counts, Push pc) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n) {
        return;
    }
    float largest = expf(fmaxf(scales[3u * i], fmaxf(scales[3u * i + 1u], scales[3u * i + 2u])));
    float o = 1.0f / (1.0f + expf(-opacities[i]));
    float grad = grad2d_sum[i] / float(max(vis_count[i], 1u));
    bool high = pc.grow != 0u && grad > pc.grow_grad2d;
    bool small = largest <= pc.grow_scale3d;
    uint32_t action = high ? (small ? 1u : 2u) : 0u;
    float child = action == 2u ? largest / SPLIT_SHRINK : largest;
    bool prune = o < pc.min_opacity || (pc.prune_big != 0u && child > pc.prune_scale3d);
    actions[i] = action;
    out_counts[i] = prune ? 0u : (action == 0u ? 1u : 2u);
}

}  // namespace

SPIRULA_EXPORT int densify_adc_classify(const SpirulaLaunch* L) {
    using spirula::buffer;
    SPIRULA_CONTRACT(L, 6, 7, 0);
    return spirula::launch(L, dim3(256), densify_adc_classify_kernel, buffer<const float>(L, 0),
                           buffer<const float>(L, 1), buffer<const float>(L, 2), buffer<const uint32_t>(L, 3),
                           buffer<uint32_t>(L, 4), buffer<uint32_t>(L, 5), spirula::push_block<Push>(L));
}
