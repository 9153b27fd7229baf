// tile_ranges: the [start, end) range of each tile in the tile-sorted
// intersection list. Tiles with no intersection keep the (0, 0) the caller
// filled. Twin of shaders/tile_ranges.comp. One thread per intersection
// j < m (workgroup 256, folded).
//   binding 0  isect_keys  [>= m]     u32  read   sorted tile keys
//   binding 1  num_isects  [off + 1]  u32  read   m = min(num_isects[count_offset], m_max)
//   binding 2  ranges      [C*T, 2]   u32  write
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t m_max;
    uint32_t count_offset;
};

__global__ void __launch_bounds__(256)
tile_ranges_kernel(const uint32_t* isect_keys, const uint32_t* num_isects, uint32_t* ranges, Push pc) {
    uint32_t j = spirula::global_index();
    uint32_t m = min(num_isects[pc.count_offset], pc.m_max);
    if (j >= m) {
        return;
    }
    uint32_t key = isect_keys[j];
    if (j == 0u || isect_keys[j - 1u] != key) {
        ranges[2 * size_t(key)] = j;          // ranges[key].x
    }
    if (j == m - 1u || isect_keys[j + 1u] != key) {
        ranges[2 * size_t(key) + 1] = j + 1u;  // ranges[key].y
    }
}

}  // namespace

SPIRULA_EXPORT int tile_ranges(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 3, 2, 0);
    return spirula::launch(L, dim3(256), tile_ranges_kernel, spirula::buffer<const uint32_t>(L, 0),
                           spirula::buffer<const uint32_t>(L, 1), spirula::buffer<uint32_t>(L, 2),
                           spirula::push_block<Push>(L));
}
