// prefix_sum: exclusive prefix sum of n uint32 (float32 with the FLOAT flag)
// in place, as a multi-level scan (spirula/render/scan.py records the
// levels). Twin of shaders/prefix_sum.comp.
//   PHASE 0: each workgroup scans one block of BLOCK = 256*4 values of `data`
//            and writes the block's total to sums[sums_offset + block].
//   PHASE 1: adds the (already scanned) block offsets back:
//            data[i] += sums[sums_offset + block(i)].
// Workgroup 256, 4 values per thread, one workgroup per block (folded).
//   binding 0  data  [data_offset + n] u32 (f32)  read/write
//   binding 1  sums  [sums_offset + ceil(n/BLOCK)] u32 (f32)  read/write
//                    (may be the same buffer as data, at another offset)
//   constant_id 0  PHASE
#include "common/launch.cuh"
#include "common/scan.cuh"

namespace {

constexpr uint32_t ITEMS = 4u;
constexpr uint32_t BLOCK = 256u * ITEMS;

struct Push {
    uint32_t n;
    uint32_t data_offset;
    uint32_t sums_offset;
};

template <class T>
__global__ void __launch_bounds__(256) prefix_sum_add(T* data, const T* sums, Push pc) {
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
__global__ void __launch_bounds__(256) prefix_sum_scan(T* data, T* sums, Push pc) {
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

template <class T>
int launch_phase(const SpirulaLaunch* L) {
    Push pc = spirula::push_block<Push>(L);
    T* data = spirula::buffer<T>(L, 0);
    T* sums = spirula::buffer<T>(L, 1);
    if (L->spec[0] == 1u) {
        return spirula::launch(L, dim3(256), prefix_sum_add<T>, data, static_cast<const T*>(sums), pc);
    }
    return spirula::launch(L, dim3(256), prefix_sum_scan<T>, data, sums, pc);
}

}  // namespace

SPIRULA_EXPORT int prefix_sum(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 2, 3, 1);
    if (L->flags & SPIRULA_FLAG_FLOAT) {
        return launch_phase<float>(L);
    }
    return launch_phase<uint32_t>(L);
}
