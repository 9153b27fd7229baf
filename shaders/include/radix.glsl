// Shared constants of the radix sort kernels (render/sort.py).
#ifndef SPIRULA_RADIX_GLSL
#define SPIRULA_RADIX_GLSL
const uint RADIX_BITS = 8u;
const uint RADIX = 256u;                        // digits per pass
const uint SORT_WG = 128u;                      // threads per workgroup
const uint SORT_CHUNKS = 16u;                   // keys per thread
const uint SORT_BLOCK = SORT_WG * SORT_CHUNKS;  // keys per workgroup (2048)
#endif
