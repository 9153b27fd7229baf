// Shared constants of the radix sort kernels: the twin of
// shaders/include/radix.glsl (spirula/render/sort.py).
#ifndef SPIRULA_RADIX_CUH
#define SPIRULA_RADIX_CUH

#include <cstdint>

namespace spirula {

constexpr uint32_t RADIX_BITS = 8u;                     // widest digit
constexpr uint32_t RADIX = 256u;                        // digits of the widest pass
constexpr uint32_t RADIX_SLOTS = RADIX + 1u;            // and the slot of dropped keys (0xffffffff)
constexpr uint32_t DROPPED_KEY = 0xffffffffu;           // the largest key: the first pass can set it aside
constexpr uint32_t SORT_WG = 128u;                      // threads per workgroup
constexpr uint32_t SORT_CHUNKS = 16u;                   // keys per thread
constexpr uint32_t SORT_BLOCK = SORT_WG * SORT_CHUNKS;  // keys per workgroup (2048)

}  // namespace spirula

#endif
