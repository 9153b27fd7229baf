// rasterize_chunks: the table of rasterize_bwd's workgroups (tile-list splitting). Twin of
// shaders/rasterize_chunks.comp: chunk k of tile t (list [s, e)) gets id t + s / chunk + k;
// the caller filled the table with CHUNK_NONE. One thread per tile (folded).
// Contract: build/contracts/rasterize_chunks.h, generated from shaders/rasterize_chunks.comp.
#include "common/launch.cuh"
#include "rasterize_chunks.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS) rasterize_chunks_kernel(Args a, Push pc) {
    uint32_t t = spirula::global_index();
    if (t >= pc.tiles) {
        return;
    }
    uint2 range = a.ranges[t];
    uint32_t n = range.y - range.x;
    uint32_t first = t + range.x / pc.chunk;
    uint32_t chunks = (n + pc.chunk - 1u) / pc.chunk;
    for (uint32_t k = 0u; k < chunks && first + k < pc.chunk_ids; ++k) {
        a.chunk_table[first + k] = make_uint2(t, k);
    }
}

}  // namespace

SPIRULA_EXPORT int rasterize_chunks(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, rasterize_chunks_kernel, a, pc);
}
