// intersect_tile_count: each Gaussian's tile count, in depth order, so that
// an exclusive prefix sum of it (prefix_sum) gives where each Gaussian's
// intersections start, front to back. Twin of shaders/intersect_tile_count.comp.
// One thread per sorted position p < n (folded).
// Contract: build/contracts/intersect_tile_count.h, generated from shaders/intersect_tile_count.comp.
#include "common/launch.cuh"
#include "intersect_tile_count.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    intersect_tile_count_kernel(const uint32_t* sorted_ids, const uint32_t* tile_counts, uint32_t* offsets, Push pc) {
    uint32_t p = spirula::global_index();
    if (p < pc.n) {
        offsets[p] = tile_counts[sorted_ids[p]];
    }
}

}  // namespace

SPIRULA_EXPORT int intersect_tile_count(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, intersect_tile_count_kernel, a.sorted_ids, a.tile_counts, a.offsets, pc);
}
