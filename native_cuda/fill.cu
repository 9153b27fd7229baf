// fill: dst[offset + i] = value for i < count (the runtime's memset).
// Twin of shaders/fill.comp. Elements are 32-bit words, or uint4 when the
// VEC4 flag is set (offset and count then in uint4s). One thread per
// element, grid-stride loop.
// Contract: build/contracts/fill.h, generated from shaders/fill.comp.
#include "common/launch.cuh"
#include "fill.h"

namespace {

using namespace contract;

__device__ __forceinline__ void splat(uint32_t& out, uint32_t v) { out = v; }
__device__ __forceinline__ void splat(uint4& out, uint32_t v) { out = make_uint4(v, v, v, v); }

template <class Word>
__global__ void __launch_bounds__(LOCAL_THREADS) fill_kernel(Word* dst, Push pc) {
    Word w;
    splat(w, pc.value);
    for (uint32_t i = spirula::global_index(); i < pc.count; i += spirula::grid_stride()) {
        dst[pc.offset + i] = w;
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
    return spirula::launch(L, LOCAL_SIZE, fill_kernel<Word>, a.dst, pc);
}

}  // namespace

SPIRULA_EXPORT int fill(const SpirulaLaunch* L) {
    if (L != nullptr && (L->flags & VEC4::FLAG)) {
        return launch_words<uint4, VEC4::Args>(L);
    }
    return launch_words<uint32_t, Args>(L);
}
