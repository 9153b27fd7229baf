// The runtime half of libspirula_cuda.so: memory, transfers, streams, events
// and device queries for spirula/backends/cuda/. Every function returns a
// cudaError_t (0 = success); spirula_cuda_error_string/name turn one into the
// driver's message. Transfers are synchronous: they are queued on `stream`
// (after the work already there) and return once the bytes have arrived.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

#include "common/launch.cuh"

extern "C" {
typedef struct {
    char name[256];
    uint64_t total_memory;  // bytes
    int32_t sm_count;
    int32_t cc_major, cc_minor;
    int32_t warp_size;
    int32_t max_threads_per_block;
    int32_t max_grid[3];
    uint64_t shared_memory_per_block;
    int32_t driver_version;  // e.g. 13000
    int32_t runtime_version;
    int32_t pci_bus_id;
    int32_t pad;
} SpirulaDeviceProperties;
}

namespace {

__global__ void __launch_bounds__(256) memset32_kernel(uint32_t* dst, uint32_t value, size_t count) {
    size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
        dst[i] = value;
    }
}

int sync_after(cudaError_t err, void* stream) {
    if (err != cudaSuccess) return static_cast<int>(err);
    return static_cast<int>(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

}  // namespace

SPIRULA_EXPORT const char* spirula_cuda_error_string(int err) {
    return cudaGetErrorString(static_cast<cudaError_t>(err));
}

SPIRULA_EXPORT const char* spirula_cuda_error_name(int err) { return cudaGetErrorName(static_cast<cudaError_t>(err)); }

// The last error of this thread, cleared (what a failed kernel left behind).
SPIRULA_EXPORT int spirula_cuda_get_last_error(void) { return static_cast<int>(cudaGetLastError()); }

SPIRULA_EXPORT int spirula_cuda_device_count(int* count) {
    *count = 0;
    return static_cast<int>(cudaGetDeviceCount(count));
}

SPIRULA_EXPORT int spirula_cuda_set_device(int index) { return static_cast<int>(cudaSetDevice(index)); }

SPIRULA_EXPORT int spirula_cuda_device_properties(int index, SpirulaDeviceProperties* out) {
    std::memset(out, 0, sizeof(*out));
    cudaDeviceProp p;
    cudaError_t err = cudaGetDeviceProperties(&p, index);
    if (err != cudaSuccess) return static_cast<int>(err);
    std::strncpy(out->name, p.name, sizeof(out->name) - 1);
    out->total_memory = p.totalGlobalMem;
    out->sm_count = p.multiProcessorCount;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->warp_size = p.warpSize;
    out->max_threads_per_block = p.maxThreadsPerBlock;
    for (int i = 0; i < 3; ++i)
        out->max_grid[i] = p.maxGridSize[i];
    out->shared_memory_per_block = p.sharedMemPerBlock;
    out->pci_bus_id = p.pciBusID;
    err = cudaDriverGetVersion(&out->driver_version);
    if (err != cudaSuccess) return static_cast<int>(err);
    return static_cast<int>(cudaRuntimeGetVersion(&out->runtime_version));
}

// Free and total device memory of the current device (cudaMemGetInfo).
SPIRULA_EXPORT int spirula_cuda_mem_get_info(size_t* free_bytes, size_t* total_bytes) {
    return static_cast<int>(cudaMemGetInfo(free_bytes, total_bytes));
}

SPIRULA_EXPORT int spirula_cuda_malloc(void** ptr, size_t nbytes) {
    *ptr = nullptr;
    return static_cast<int>(cudaMalloc(ptr, nbytes));
}

SPIRULA_EXPORT int spirula_cuda_free(void* ptr) { return static_cast<int>(cudaFree(ptr)); }

// Pinned host memory mapped into the device's address space (one pointer for
// both: unified addressing): small buffers kernels and the host both touch.
SPIRULA_EXPORT int spirula_cuda_host_alloc(void** ptr, size_t nbytes) {
    *ptr = nullptr;
    return static_cast<int>(cudaHostAlloc(ptr, nbytes, cudaHostAllocMapped | cudaHostAllocPortable));
}

SPIRULA_EXPORT int spirula_cuda_host_free(void* ptr) { return static_cast<int>(cudaFreeHost(ptr)); }

SPIRULA_EXPORT int spirula_cuda_memcpy_htod(void* dst, const void* src, size_t nbytes, void* stream) {
    return sync_after(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
                      stream);
}

SPIRULA_EXPORT int spirula_cuda_memcpy_dtoh(void* dst, const void* src, size_t nbytes, void* stream) {
    return sync_after(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
                      stream);
}

SPIRULA_EXPORT int spirula_cuda_memcpy_dtod(void* dst, const void* src, size_t nbytes, void* stream) {
    return sync_after(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
                      stream);
}

// dst[i] = value for i < count 32-bit words, queued on `stream` (not waited for).
SPIRULA_EXPORT int spirula_cuda_memset32(void* dst, uint32_t value, size_t count, void* stream) {
    if (count == 0) return cudaSuccess;
    size_t blocks = (count + 255) / 256;
    unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
    memset32_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint32_t*>(dst), value, count);
    return static_cast<int>(cudaGetLastError());
}

SPIRULA_EXPORT int spirula_cuda_stream_create(void** stream) {
    *stream = nullptr;
    return static_cast<int>(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), cudaStreamNonBlocking));
}

SPIRULA_EXPORT int spirula_cuda_stream_destroy(void* stream) {
    return static_cast<int>(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

SPIRULA_EXPORT int spirula_cuda_stream_sync(void* stream) {
    return static_cast<int>(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

SPIRULA_EXPORT int spirula_cuda_device_sync(void) { return static_cast<int>(cudaDeviceSynchronize()); }

SPIRULA_EXPORT int spirula_cuda_event_create(void** event) {
    *event = nullptr;
    return static_cast<int>(cudaEventCreate(reinterpret_cast<cudaEvent_t*>(event)));
}

SPIRULA_EXPORT int spirula_cuda_event_record(void* event, void* stream) {
    return static_cast<int>(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

SPIRULA_EXPORT int spirula_cuda_event_sync(void* event) {
    return static_cast<int>(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

// Milliseconds between two recorded, completed events (~0.5 us resolution).
SPIRULA_EXPORT int spirula_cuda_event_elapsed(float* ms, void* start, void* stop) {
    *ms = 0.0f;
    return static_cast<int>(cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
}

SPIRULA_EXPORT int spirula_cuda_event_destroy(void* event) {
    return static_cast<int>(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

// sizeof(SpirulaLaunch) and sizeof(SpirulaDeviceProperties): the Python side
// checks its ctypes mirrors against them when it loads the library.
SPIRULA_EXPORT int spirula_cuda_abi_sizes(size_t* launch, size_t* properties) {
    *launch = sizeof(SpirulaLaunch);
    *properties = sizeof(SpirulaDeviceProperties);
    return cudaSuccess;
}
