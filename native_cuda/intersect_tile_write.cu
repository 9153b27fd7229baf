// intersect_tile_write: one (tile key, id) pair per Gaussian-tile overlap,
// written front to back: key = camera * tiles_per_image + tile, id = the
// (camera, Gaussian) index i. Twin of shaders/intersect_tile_write.comp.
// One thread per intersection j < min(total, capacity) (workgroup 256,
// folded): its Gaussian by binary search in the exclusive prefix sum of the
// depth-ordered tile counts, then its tile inside that Gaussian's box.
//   binding 0  sorted_ids  [n]       u32  read
//   binding 1  offsets     [n]       u32  read   exclusive prefix sum of the counts
//   binding 2  totals      [..]      u32  read   intersection count at count_offset
//   binding 3  xyop        [n,4]     f32  read
//   binding 4  radii       [n,2]     i32  read
//   binding 5  isect_keys  [capacity] u32 write
//   binding 6  isect_ids   [capacity] u32 write
#include "common/launch.cuh"
#include "common/raster.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n;               // cameras * Gaussians
    uint32_t n_gaussians;
    uint32_t tile_width;
    uint32_t tile_height;
    uint32_t capacity;
    uint32_t count_offset;
};

__global__ void __launch_bounds__(256)
intersect_tile_write_kernel(const uint32_t* sorted_ids, const uint32_t* offsets, const uint32_t* totals,
                            const float4* xyop, const int2* radii, uint32_t* isect_keys, uint32_t* isect_ids,
                            Push pc) {
    uint32_t j = global_index();
    uint32_t m = totals[pc.count_offset] < pc.capacity ? totals[pc.count_offset] : pc.capacity;
    if (j >= m || pc.n == 0u) {
        return;
    }
    uint32_t lo = 0u, hi = pc.n - 1u;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1u) >> 1u;
        if (offsets[mid] <= j) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    uint32_t id = sorted_ids[lo];
    uint32_t k = j - offsets[lo];
    float4 g = xyop[id];
    int2 r = radii[id];
    vec2 mean2d = make2(g.x, g.y);
    vec2 radius = make2(float(r.x), float(r.y));
    vec2 tile_min, tile_max;
    tile_rect(mean2d, radius, vec2(float(pc.tile_width), float(pc.tile_height)), tile_min, tile_max);
    uint32_t tmin_x = uint32_t(tile_min.x), tmin_y = uint32_t(tile_min.y), tmax_x = uint32_t(tile_max.x);
    uint32_t box_width = tmax_x > tmin_x ? tmax_x - tmin_x : 1u;
    uint32_t ty = tmin_y + k / box_width, tx = tmin_x + k % box_width;
    isect_keys[j] = (id / pc.n_gaussians) * pc.tile_width * pc.tile_height + ty * pc.tile_width + tx;
    isect_ids[j] = id;
}

}  // namespace

SPIRULA_EXPORT int intersect_tile_write(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 7, 6, 0);
    return launch(L, dim3(256), intersect_tile_write_kernel, buffer<const uint32_t>(L, 0),
                  buffer<const uint32_t>(L, 1), buffer<const uint32_t>(L, 2), buffer<const float4>(L, 3),
                  buffer<const int2>(L, 4), buffer<uint32_t>(L, 5), buffer<uint32_t>(L, 6), push_block<Push>(L));
}
