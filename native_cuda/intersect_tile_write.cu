// intersect_tile_write: one (tile key, id) pair per Gaussian-tile overlap,
// written front to back: key = camera * tiles_per_image + tile, id = the
// (camera, Gaussian) index i. Twin of shaders/intersect_tile_write.comp.
// One thread per depth-sorted position p < n (workgroup 256, folded). Pairs
// past `capacity` are dropped (the caller sees the total and grows).
//   binding 0  sorted_ids  [n]       u32  read
//   binding 1  offsets     [n]       u32  read   exclusive prefix sum of the counts
//   binding 2  tile_counts [n]       u32  read
//   binding 3  xyop        [n,4]     f32  read
//   binding 4  radii       [n,2]     i32  read
//   binding 5  isect_keys  [capacity] u32 write
//   binding 6  isect_ids   [capacity] u32 write
#include "common/launch.cuh"
#include "common/glsl.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n;               // cameras * Gaussians
    uint32_t n_gaussians;
    uint32_t tile_width;
    uint32_t tile_height;
    uint32_t capacity;
};

__global__ void __launch_bounds__(256)
intersect_tile_write_kernel(const uint32_t* sorted_ids, const uint32_t* offsets, const uint32_t* tile_counts,
                            const float4* xyop, const int2* radii, uint32_t* isect_keys, uint32_t* isect_ids,
                            Push pc) {
    uint32_t p = global_index();
    if (p >= pc.n) {
        return;
    }
    uint32_t id = sorted_ids[p];
    if (tile_counts[id] == 0u) {
        return;
    }
    uint32_t out_i = offsets[p];
    float4 g = xyop[id];
    int2 r = radii[id];
    vec2 mean2d = make2(g.x, g.y);
    vec2 radius = make2(float(r.x), float(r.y));
    float tw = float(pc.tile_width), th = float(pc.tile_height);
    uint32_t tmin_x = uint32_t(glsl_clamp(floorf(mean2d.x / 16.0f - radius.x / 16.0f), 0.0f, tw));
    uint32_t tmin_y = uint32_t(glsl_clamp(floorf(mean2d.y / 16.0f - radius.y / 16.0f), 0.0f, th));
    uint32_t tmax_x = uint32_t(glsl_clamp(ceilf(mean2d.x / 16.0f + radius.x / 16.0f), 0.0f, tw));
    uint32_t tmax_y = uint32_t(glsl_clamp(ceilf(mean2d.y / 16.0f + radius.y / 16.0f), 0.0f, th));
    uint32_t base = (id / pc.n_gaussians) * pc.tile_width * pc.tile_height;
    for (uint32_t ty = tmin_y; ty < tmax_y; ++ty) {
        for (uint32_t tx = tmin_x; tx < tmax_x; ++tx) {
            if (out_i < pc.capacity) {
                isect_keys[out_i] = base + ty * pc.tile_width + tx;
                isect_ids[out_i] = id;
            }
            ++out_i;
        }
    }
}

}  // namespace

SPIRULA_EXPORT int intersect_tile_write(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 7, 5, 0);
    return launch(L, dim3(256), intersect_tile_write_kernel, buffer<const uint32_t>(L, 0),
                  buffer<const uint32_t>(L, 1), buffer<const uint32_t>(L, 2), buffer<const float4>(L, 3),
                  buffer<const int2>(L, 4), buffer<uint32_t>(L, 5), buffer<uint32_t>(L, 6), push_block<Push>(L));
}
