// densify_mcmc_sample: draw `count` source splats with probability
// proportional to their weight (inverse CDF: binary search of a uniform draw
// in the exclusive prefix sum of the weights), with replacement, and count
// how often each source is drawn. Twin of shaders/densify_mcmc_sample.comp:
// the uniforms are bit-identical (random.cuh) and u = min(uniform * total,
// total * (1 - 2^-23)) takes correctly rounded products, so the draws are the same.
// One thread per draw j < count (workgroup 256, folded).
//   binding 0  cdf        [N]        f32  read   exclusive prefix sum of the weights
//   binding 1  totals     [..]       f32  read   sum of the weights at total_offset
//   binding 2  counts     [..]       u32  read   count = min(counts[count_offset], count_max)
//   binding 3  sample_src [count]    u32  write  drawn source of draw j
//   binding 4  copies     [N]        u32  add    times each splat was drawn (zeroed before)
#include "common/launch.cuh"
#include "common/random.cuh"

namespace {

struct Push {
    uint32_t n;
    uint32_t count_max;
    uint32_t count_offset;
    uint32_t total_offset;
    uint32_t seed;
    uint32_t stream;
};

__global__ void __launch_bounds__(256) densify_mcmc_sample_kernel(const float* cdf, const float* totals,
                                                                  const uint32_t* counts, uint32_t* sample_src,
                                                                  uint32_t* copies, Push pc) {
    uint32_t j = spirula::global_index();
    float total = totals[pc.total_offset];
    if (j >= min(counts[pc.count_offset], pc.count_max) || !(total > 0.0f) || pc.n == 0u) {
        return;
    }
    // strictly below the total, so zero-weight splats at the end are never drawn
    float u = fminf(spirula::random_uniform(pc.seed, j, pc.stream) * total, total * (1.0f - 1.0f / 8388608.0f));
    // the last i with cdf[i] <= u (zero-weight splats are never the answer: the
    // next one starts at the same cdf value)
    uint32_t lo = 0u, hi = pc.n - 1u;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1u) >> 1u;
        if (cdf[mid] <= u) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    sample_src[j] = lo;
    atomicAdd(&copies[lo], 1u);
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_sample(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 5, 6, 0);
    return spirula::launch(L, dim3(256), densify_mcmc_sample_kernel, spirula::buffer<const float>(L, 0),
                           spirula::buffer<const float>(L, 1), spirula::buffer<const uint32_t>(L, 2),
                           spirula::buffer<uint32_t>(L, 3), spirula::buffer<uint32_t>(L, 4),
                           spirula::push_block<Push>(L));
}
