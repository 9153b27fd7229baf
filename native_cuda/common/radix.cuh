// Shared constants of the radix sort kernels: the twin of
// shaders/include/radix.glsl (spirula/render/sort.py).
#ifndef SPIRULA_RADIX_CUH
#define SPIRULA_RADIX_CUH

#include <cstdint>

namespace spirula {

constexpr uint32_t RADIX_BITS = 8u;
constexpr uint32_t RADIX = 256u;                        // digits per pass
constexpr uint32_t SORT_WG = 128u;                      // threads per workgroup
constexpr uint32_t SORT_CHUNKS = 16u;                   // keys per thread
constexpr uint32_t SORT_BLOCK = SORT_WG * SORT_CHUNKS;  // keys per workgroup (2048)

}  // namespace spirula

#endif
