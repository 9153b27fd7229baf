// Shared constants of the radix sort kernels (render/sort.py).
#ifndef SPIRULA_RADIX_GLSL
#define SPIRULA_RADIX_GLSL
const uint RADIX_BITS = 8u;                     // widest digit
const uint RADIX = 256u;                        // digits of the widest pass
const uint RADIX_SLOTS = RADIX + 1u;            // and the slot of dropped keys (0xffffffff)
const uint DROPPED_KEY = 0xffffffffu;           // the largest key: the first pass can set it aside
const uint SORT_WG = 128u;                      // threads per workgroup
const uint SORT_CHUNKS = 16u;                   // keys per thread
const uint SORT_BLOCK = SORT_WG * SORT_CHUNKS;  // keys per workgroup (2048)
#endif
