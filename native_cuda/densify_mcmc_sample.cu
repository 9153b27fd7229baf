// densify_mcmc_sample: draw `count` source splats with probability
// proportional to their weight (inverse CDF: binary search of a uniform draw
// in the exclusive prefix sum of the weights), with replacement, and count
// how often each source is drawn. Twin of shaders/densify_mcmc_sample.comp:
// the uniforms are bit-identical (random.cuh) and u = min(uniform * total,
// total * (1 - 2^-23)) takes correctly rounded products, so the draws are the same.
// One thread per draw j < count (folded).
// Contract: build/contracts/densify_mcmc_sample.h, generated from shaders/densify_mcmc_sample.comp.
#include "common/launch.cuh"
#include "common/random.cuh"
#include "densify_mcmc_sample.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_mcmc_sample_kernel(const float* cdf, const float* totals, const uint32_t* counts, uint32_t* sample_src,
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
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_mcmc_sample_kernel, a.cdf, a.totals, a.counts, a.sample_src, a.copies,
                           pc);
}
