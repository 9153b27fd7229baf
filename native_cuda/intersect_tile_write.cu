// intersect_tile_write: one (tile key, id) pair per Gaussian-tile overlap,
// written front to back: key = camera * tiles_per_image + tile, id = the
// (camera, Gaussian) index i. Twin of shaders/intersect_tile_write.comp.
// One thread per intersection j < min(total, capacity) (folded): its
// Gaussian by binary search in the exclusive prefix sum of the depth-ordered
// tile counts, then the k-th tile that tile culling keeps in that Gaussian's
// box (cull_nth, shaders/include/raster.glsl).
// Contract: build/contracts/intersect_tile_write.h, generated from shaders/intersect_tile_write.comp.
#include "common/launch.cuh"
#include "common/raster.cuh"
#include "intersect_tile_write.h"

namespace {

using namespace spirula;
using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    intersect_tile_write_kernel(const uint32_t* sorted_ids, const uint32_t* offsets, const uint32_t* totals,
                                const float4* xyop, const int2* radii, uint32_t* isect_keys, uint32_t* isect_ids,
                                const float4* conics, Push pc) {
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
    float4 q = conics[id];
    vec2 tile = cull_nth(mean2d, cull_ellipse(make3(q.x, q.y, q.z), g.z), tile_min, tile_max, float(k));
    uint32_t tx = uint32_t(tile.x), ty = uint32_t(tile.y);
    isect_keys[j] = (id / pc.n_gaussians) * pc.tile_width * pc.tile_height + ty * pc.tile_width + tx;
    isect_ids[j] = id;
}

}  // namespace

SPIRULA_EXPORT int intersect_tile_write(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, intersect_tile_write_kernel, a.sorted_ids, a.offsets, a.totals, a.xyop,
                           a.radii, a.isect_keys, a.isect_ids, a.conics, pc);
}
