// Float atomic add on storage buffers: native (ATOMIC_FLOAT=1, where the
// device has shaderBufferFloat32AtomicAdd and the runtime enabled it) or a
// compare-and-swap loop on the bits. Buffers that receive atomic adds are
// declared with element type GRAD_T and read back with GRAD_LOAD.
// Include this first: it may declare an extension.
#ifndef SPIRULA_ATOMICS_GLSL
#define SPIRULA_ATOMICS_GLSL
#ifdef __CUDACC__
// CUDA (common/atomics.cuh): native float atomics, as ATOMIC_FLOAT=1
#define GRAD_T float
#define GRAD_LOAD(buf, i) (buf[i])
#define ATOMIC_ADD(buf, idx, val) atomicAdd(&buf[idx], (val))
#else
#ifndef ATOMIC_FLOAT
#define ATOMIC_FLOAT 0
#endif
#if ATOMIC_FLOAT
#extension GL_EXT_shader_atomic_float : require
#define GRAD_T float
#define GRAD_LOAD(buf, i) (buf[i])
#define ATOMIC_ADD(buf, idx, val) atomicAdd(buf[idx], (val))
#else
#define GRAD_T uint
#define GRAD_LOAD(buf, i) uintBitsToFloat(buf[i])
#define ATOMIC_ADD(buf, idx, val)                                                                 \
    {                                                                                             \
        uint i_ = (idx);                                                                          \
        float v_ = (val);                                                                         \
        uint seen_ = buf[i_];                                                                     \
        uint prev_;                                                                               \
        do {                                                                                      \
            prev_ = seen_;                                                                        \
            seen_ = atomicCompSwap(buf[i_], prev_, floatBitsToUint(uintBitsToFloat(prev_) + v_)); \
        } while (seen_ != prev_);                                                                 \
    }
#endif
#endif
#endif
