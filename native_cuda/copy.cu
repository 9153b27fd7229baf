// copy: dst[dst_offset + i] = src[src_offset + i] for i < count.
// Twin of shaders/copy.comp. Elements are 32-bit words, or uint4 when the
// VEC4 flag is set (offsets and count then in uint4s). One thread per
// element, grid-stride loop; workgroup 256.
//   binding 0  src  [>= src_offset + count] word  read
//   binding 1  dst  [>= dst_offset + count] word  write
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t src_offset;
    uint32_t dst_offset;
    uint32_t count;
};

template <class Word>
__global__ void __launch_bounds__(256) copy_kernel(const Word* src, Word* dst, Push pc) {
    for (uint32_t i = spirula::global_index(); i < pc.count; i += spirula::grid_stride()) {
        dst[pc.dst_offset + i] = src[pc.src_offset + i];
    }
}

}  // namespace

SPIRULA_EXPORT int copy(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 2, 3, 0);
    Push pc = spirula::push_block<Push>(L);
    if (L->flags & SPIRULA_FLAG_VEC4) {
        return spirula::launch(L, dim3(256), copy_kernel<uint4>, spirula::buffer<const uint4>(L, 0),
                               spirula::buffer<uint4>(L, 1), pc);
    }
    return spirula::launch(L, dim3(256), copy_kernel<uint32_t>, spirula::buffer<const uint32_t>(L, 0),
                           spirula::buffer<uint32_t>(L, 1), pc);
}
