// intersect_tile_count: each Gaussian's tile count, in depth order, so that
// an exclusive prefix sum of it (prefix_sum) gives where each Gaussian's
// intersections start, front to back. Twin of shaders/intersect_tile_count.comp.
// One thread per sorted position p < n (workgroup 256, folded).
//   binding 0  sorted_ids  [n] u32  read   (camera, Gaussian) index i in depth order
//   binding 1  tile_counts [n] u32  read   per i, from projection_fwd
//   binding 2  offsets     [n] u32  write  tile_counts[sorted_ids[p]]
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t n;
};

__global__ void __launch_bounds__(256)
intersect_tile_count_kernel(const uint32_t* sorted_ids, const uint32_t* tile_counts, uint32_t* offsets, Push pc) {
    uint32_t p = spirula::global_index();
    if (p < pc.n) {
        offsets[p] = tile_counts[sorted_ids[p]];
    }
}

}  // namespace

SPIRULA_EXPORT int intersect_tile_count(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 3, 1, 0);
    return spirula::launch(L, dim3(256), intersect_tile_count_kernel, spirula::buffer<const uint32_t>(L, 0),
                           spirula::buffer<const uint32_t>(L, 1), spirula::buffer<uint32_t>(L, 2),
                           spirula::push_block<Push>(L));
}
