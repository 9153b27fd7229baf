// fill: dst[offset + i] = value for i < count (the runtime's memset).
// Twin of shaders/fill.comp. Elements are 32-bit words, or uint4 when the
// VEC4 flag is set (offset and count then in uint4s). One thread per
// element, grid-stride loop; workgroup 256.
//   binding 0  dst  [>= offset + count] word  write
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t offset;
    uint32_t count;
    uint32_t value;
};

__device__ __forceinline__ void splat(uint32_t& out, uint32_t v) { out = v; }
__device__ __forceinline__ void splat(uint4& out, uint32_t v) { out = make_uint4(v, v, v, v); }

template <class Word>
__global__ void __launch_bounds__(256) fill_kernel(Word* dst, Push pc) {
    Word w;
    splat(w, pc.value);
    for (uint32_t i = spirula::global_index(); i < pc.count; i += spirula::grid_stride()) {
        dst[pc.offset + i] = w;
    }
}

}  // namespace

SPIRULA_EXPORT int fill(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 1, 3, 0);
    Push pc = spirula::push_block<Push>(L);
    if (L->flags & SPIRULA_FLAG_VEC4) {
        return spirula::launch(L, dim3(256), fill_kernel<uint4>, spirula::buffer<uint4>(L, 0), pc);
    }
    return spirula::launch(L, dim3(256), fill_kernel<uint32_t>, spirula::buffer<uint32_t>(L, 0), pc);
}
