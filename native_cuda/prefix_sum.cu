// Hand-written for speed: warp-shuffle scans and __shared__ warp totals, the shader's subgroup scans on CUDA.
// prefix_sum: exclusive prefix sum of n uint32 (float32 with the FLOAT flag)
// in place, as a multi-level scan (spirula/render/scan.py records the
// levels). Twin of shaders/prefix_sum.comp. 4 values per thread, one workgroup
// per block of BLOCK values (folded).
// Contract: build/contracts/prefix_sum.h, generated from shaders/prefix_sum.comp.
#include "common/launch.cuh"
#include "common/scan.cuh"
#include "prefix_sum.h"

namespace {

using namespace contract;

constexpr uint32_t ITEMS = 4u;
constexpr uint32_t BLOCK = LOCAL_SIZE_X * ITEMS;

template <class T>
__global__ void __launch_bounds__(LOCAL_THREADS) prefix_sum_add(T* data, const T* sums, Push pc) {
    uint32_t block = spirula::linear_group_id();
    uint32_t first = block * BLOCK + threadIdx.x * ITEMS;
    if (block * BLOCK >= pc.n) {
        return;
    }
    T add = sums[pc.sums_offset + block];
#pragma unroll
    for (uint32_t k = 0u; k < ITEMS; ++k) {
        if (first + k < pc.n) {
            data[pc.data_offset + first + k] += add;
        }
    }
}

template <class T>
__global__ void __launch_bounds__(LOCAL_THREADS) prefix_sum_scan(T* data, T* sums, Push pc) {
    __shared__ spirula::ScanShared<T> s;
    uint32_t block = spirula::linear_group_id();
    uint32_t first = block * BLOCK + threadIdx.x * ITEMS;
    T v[ITEMS];
    T local_sum = T(0);
#pragma unroll
    for (uint32_t k = 0u; k < ITEMS; ++k) {
        v[k] = first + k < pc.n ? data[pc.data_offset + first + k] : T(0);
        local_sum += v[k];
    }
    T total;
    T running = spirula::block_exclusive_scan(s, local_sum, total);
#pragma unroll
    for (uint32_t k = 0u; k < ITEMS; ++k) {
        if (first + k < pc.n) {
            data[pc.data_offset + first + k] = running;
        }
        running += v[k];
    }
    if (threadIdx.x == 0u && block * BLOCK < max(pc.n, 1u)) {
        sums[pc.sums_offset + block] = total;
    }
}

template <class T, class A>
int launch_phase(const SpirulaLaunch* L) {
    A a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    if (sp.PHASE == 1u) {
        return spirula::launch(L, LOCAL_SIZE, prefix_sum_add<T>, a.data, static_cast<const T*>(a.sums), pc);
    }
    return spirula::launch(L, LOCAL_SIZE, prefix_sum_scan<T>, a.data, a.sums, pc);
}

}  // namespace

SPIRULA_EXPORT int prefix_sum(const SpirulaLaunch* L) {
    if (L != nullptr && (L->flags & FLOAT::FLAG)) {
        return launch_phase<float, FLOAT::Args>(L);
    }
    return launch_phase<uint32_t, Args>(L);
}
