// copy: dst[dst_offset + i] = src[src_offset + i] for i < count.
// Twin of shaders/copy.comp. Elements are 32-bit words, or uint4 when the
// VEC4 flag is set (offsets and count then in uint4s). One thread per
// element, grid-stride loop.
// Contract: build/contracts/copy.h, generated from shaders/copy.comp.
#include "common/launch.cuh"
#include "copy.h"

namespace {

using namespace contract;

template <class Word>
__global__ void __launch_bounds__(LOCAL_THREADS) copy_kernel(const Word* src, Word* dst, Push pc) {
    for (uint32_t i = spirula::global_index(); i < pc.count; i += spirula::grid_stride()) {
        dst[pc.dst_offset + i] = src[pc.src_offset + i];
    }
}

template <class Word, class A>
int launch_words(const SpirulaLaunch* L) {
    A a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, copy_kernel<Word>, a.src, a.dst, pc);
}

}  // namespace

SPIRULA_EXPORT int copy(const SpirulaLaunch* L) {
    if (L != nullptr && (L->flags & VEC4::FLAG)) {
        return launch_words<uint4, VEC4::Args>(L);
    }
    return launch_words<uint32_t, Args>(L);
}
