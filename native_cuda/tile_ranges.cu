// tile_ranges: the [start, end) range of each tile in the tile-sorted
// intersection list. Tiles with no intersection keep the (0, 0) the caller
// filled. Twin of shaders/tile_ranges.comp. One thread per intersection
// j < m (folded).
// Contract: build/contracts/tile_ranges.h, generated from shaders/tile_ranges.comp.
#include "common/launch.cuh"
#include "tile_ranges.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    tile_ranges_kernel(const uint32_t* isect_keys, const uint32_t* num_isects, uint2* ranges, Push pc) {
    uint32_t j = spirula::global_index();
    uint32_t m = min(num_isects[pc.count_offset], pc.m_max);
    if (j >= m) {
        return;
    }
    uint32_t key = isect_keys[j];
    if (j == 0u || isect_keys[j - 1u] != key) {
        ranges[key].x = j;
    }
    if (j == m - 1u || isect_keys[j + 1u] != key) {
        ranges[key].y = j + 1u;
    }
}

}  // namespace

SPIRULA_EXPORT int tile_ranges(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, tile_ranges_kernel, a.isect_keys, a.num_isects, a.ranges, pc);
}
