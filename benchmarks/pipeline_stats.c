// What the Vulkan driver compiled a compute shader into: the statistics of
// VK_KHR_pipeline_executable_properties (registers, shared memory, spills...,
// as the driver names them) for one SPIR-V module. The Vulkan counterpart of
// `nvcc -Xptxas -v` for the CUDA twins; benchmarks/pipeline_stats.py drives it
// over the kernels. Build (libvulkan-dev) and run:
//     cc -O1 -o pipeline_stats benchmarks/pipeline_stats.c -lvulkan
//     pipeline_stats KERNEL.spv BINDINGS PUSH_BYTES [SPEC_WORD ...]
// BINDINGS storage buffers at set 0, bindings 0..BINDINGS-1; PUSH_BYTES of push
// constants; the specialization constants' 32-bit words by constant_id.
// Output: one "name = value" line per statistic of each executable. With
// PIPELINE_STATS_IR=1 in the environment, also each internal representation the
// driver offers (its name, description and text: what it compiled, where it says).
// PIPELINE_STATS_CACHE=FILE writes the pipeline cache data; PIPELINE_STATS_ROBUSTNESS=0
// compiles with the storage buffers' robustness disabled (VK_EXT_pipeline_robustness).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define CHECK(call)                                                       \
    do {                                                                  \
        VkResult r_ = (call);                                             \
        if (r_ != VK_SUCCESS) {                                           \
            fprintf(stderr, "pipeline_stats: %s failed (%d)\n", #call, r_); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

// Vulkan's two-call enumeration: the count, then that many structs, each with its sType set
#define ENUMERATE(get, dev, info, n, out, stype)                         \
    do {                                                                 \
        CHECK(get((dev), info, &(n), NULL));                             \
        (out) = calloc((n) ? (n) : 1, sizeof *(out));                    \
        for (uint32_t i_ = 0; i_ < (n); ++i_) (out)[i_].sType = (stype); \
        CHECK(get((dev), info, &(n), (out)));                            \
    } while (0)

static int has_extension(VkPhysicalDevice pd, const char* name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
    VkExtensionProperties* e = calloc(n, sizeof *e);
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e);
    int found = 0;
    for (uint32_t i = 0; i < n; ++i) found |= strcmp(e[i].extensionName, name) == 0;
    free(e);
    return found;
}

// The driver's internal representations of one executable (text ones printed whole)
static void print_representations(VkDevice dev, const VkPipelineExecutableInfoKHR* einfo) {
    PFN_vkGetPipelineExecutableInternalRepresentationsKHR get_ir =
        (PFN_vkGetPipelineExecutableInternalRepresentationsKHR)vkGetDeviceProcAddr(
            dev, "vkGetPipelineExecutableInternalRepresentationsKHR");
    uint32_t n = 0;
    VkPipelineExecutableInternalRepresentationKHR* ir;
    ENUMERATE(get_ir, dev, einfo, n, ir, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR);
    printf("  internal representations: %u\n", n);
    for (uint32_t i = 0; i < n; ++i) ir[i].pData = malloc(ir[i].dataSize ? ir[i].dataSize : 1);
    CHECK(get_ir(dev, einfo, &n, ir));  // the second call fills pData
    for (uint32_t i = 0; i < n; ++i) {
        printf("  -- %s: %s (%zu bytes%s)\n", ir[i].name, ir[i].description, ir[i].dataSize,
               ir[i].isText ? "" : ", binary");
        if (ir[i].isText && ir[i].dataSize) fwrite(ir[i].pData, 1, strnlen(ir[i].pData, ir[i].dataSize), stdout);
        printf("\n");
        free(ir[i].pData);
    }
    free(ir);
}

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: pipeline_stats KERNEL.spv BINDINGS PUSH_BYTES [SPEC_WORD ...]\n");
        return 2;
    }
    FILE* f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "pipeline_stats: cannot open %s\n", argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint32_t* code = malloc(size);
    if (fread(code, 1, size, f) != (size_t)size) return 1;
    fclose(f);
    uint32_t bindings = (uint32_t)atoi(argv[2]);
    uint32_t push_bytes = (uint32_t)atoi(argv[3]);
    uint32_t n_spec = (uint32_t)(argc - 4);

    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    VkInstance inst;
    CHECK(vkCreateInstance(&ici, NULL, &inst));
    uint32_t npd = 1;
    VkPhysicalDevice pd;
    VkResult r = vkEnumeratePhysicalDevices(inst, &npd, &pd);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || npd == 0) {
        fprintf(stderr, "pipeline_stats: no Vulkan device\n");
        return 1;
    }
    if (!has_extension(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
        fprintf(stderr, "pipeline_stats: the driver has no %s\n", VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        return 1;
    }
    // the features the kernels may use: float atomics (ATOMIC_FLOAT=1) and pipeline statistics;
    // PIPELINE_STATS_ROBUSTNESS=0: also VK_EXT_pipeline_robustness, to compile the kernel with
    // its storage buffers' robustness disabled (NVIDIA's driver otherwise bounds-checks every
    // storage buffer access: notes/performance-history.md, "What NVIDIA's driver compiled")
    const char* rob_env = getenv("PIPELINE_STATS_ROBUSTNESS");
    int no_robustness = rob_env && strcmp(rob_env, "0") == 0;
    if (no_robustness && !has_extension(pd, VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME)) {
        fprintf(stderr, "pipeline_stats: the driver has no %s\n", VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME);
        return 1;
    }
    const char* exts[3] = {VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME};
    uint32_t n_exts = 1;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pep = {
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    pep.pipelineExecutableInfo = VK_TRUE;
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT atomic = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT};
    atomic.shaderBufferFloat32AtomicAdd = VK_TRUE;
    if (has_extension(pd, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME)) {
        exts[n_exts++] = VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME;
        atomic.pNext = pep.pNext;
        pep.pNext = &atomic;
    }
    VkPhysicalDevicePipelineRobustnessFeaturesEXT robust = {
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT};
    robust.pipelineRobustness = VK_TRUE;
    if (no_robustness) {
        exts[n_exts++] = VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME;
        robust.pNext = pep.pNext;
        pep.pNext = &robust;
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &pep;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = n_exts;
    dci.ppEnabledExtensionNames = exts;
    VkDevice dev;
    CHECK(vkCreateDevice(pd, &dci, NULL, &dev));

    VkShaderModuleCreateInfo smci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smci.codeSize = (size_t)size;
    smci.pCode = code;
    VkShaderModule mod;
    CHECK(vkCreateShaderModule(dev, &smci, NULL, &mod));
    VkDescriptorSetLayoutBinding* b = calloc(bindings ? bindings : 1, sizeof *b);
    for (uint32_t i = 0; i < bindings; ++i) {
        b[i].binding = i;
        b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        b[i].descriptorCount = 1;
        b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo dslci = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dslci.bindingCount = bindings;
    dslci.pBindings = b;
    VkDescriptorSetLayout dsl;
    CHECK(vkCreateDescriptorSetLayout(dev, &dslci, NULL, &dsl));
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo plci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    plci.setLayoutCount = 1;
    plci.pSetLayouts = &dsl;
    plci.pushConstantRangeCount = push_bytes ? 1 : 0;
    plci.pPushConstantRanges = &pcr;
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(dev, &plci, NULL, &layout));

    uint32_t* words = calloc(n_spec ? n_spec : 1, sizeof *words);
    VkSpecializationMapEntry* map = calloc(n_spec ? n_spec : 1, sizeof *map);
    for (uint32_t i = 0; i < n_spec; ++i) {
        words[i] = (uint32_t)strtoul(argv[4 + i], NULL, 0);
        map[i].constantID = i;
        map[i].offset = 4 * i;
        map[i].size = 4;
    }
    VkSpecializationInfo spec = {n_spec, map, 4 * n_spec, words};
    VkComputePipelineCreateInfo cpci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    const char* ir_env = getenv("PIPELINE_STATS_IR");
    int want_ir = ir_env && strcmp(ir_env, "0") != 0;
    cpci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR |
                 (want_ir ? VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR : 0);
    cpci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpci.stage.module = mod;
    cpci.stage.pName = "main";
    cpci.stage.pSpecializationInfo = n_spec ? &spec : NULL;
    cpci.layout = layout;
    VkPipelineRobustnessCreateInfoEXT rci = {VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT};
    rci.storageBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED_EXT;
    rci.uniformBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED_EXT;
    rci.vertexInputs = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DEVICE_DEFAULT_EXT;
    rci.images = VK_PIPELINE_ROBUSTNESS_IMAGE_BEHAVIOR_DEVICE_DEFAULT_EXT;
    if (no_robustness) cpci.pNext = &rci;
    // PIPELINE_STATS_CACHE=FILE: compile through an empty pipeline cache and write its data
    // there: the driver's binary, the one place a driver without internal representations
    // shows what it compiled (NVIDIA's blob holds the machine code; nvdisasm -b reads it)
    const char* cache_path = getenv("PIPELINE_STATS_CACHE");
    VkPipelineCache cache = VK_NULL_HANDLE;
    if (cache_path) {
        VkPipelineCacheCreateInfo pcci = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
        CHECK(vkCreatePipelineCache(dev, &pcci, NULL, &cache));
    }
    VkPipeline pipe;
    CHECK(vkCreateComputePipelines(dev, cache, 1, &cpci, NULL, &pipe));
    if (cache_path) {
        size_t size = 0;
        CHECK(vkGetPipelineCacheData(dev, cache, &size, NULL));
        void* data = malloc(size ? size : 1);
        CHECK(vkGetPipelineCacheData(dev, cache, &size, data));
        FILE* out = fopen(cache_path, "wb");
        if (!out || fwrite(data, 1, size, out) != size) {
            fprintf(stderr, "pipeline_stats: cannot write %s\n", cache_path);
            return 1;
        }
        fclose(out);
        printf("pipeline cache: %zu bytes -> %s\n", size, cache_path);
        free(data);
        vkDestroyPipelineCache(dev, cache, NULL);
    }

    PFN_vkGetPipelineExecutablePropertiesKHR get_props =
        (PFN_vkGetPipelineExecutablePropertiesKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR");
    PFN_vkGetPipelineExecutableStatisticsKHR get_stats =
        (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR");
    VkPipelineInfoKHR pinfo = {VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
    pinfo.pipeline = pipe;
    uint32_t n_exec = 0;
    VkPipelineExecutablePropertiesKHR* props;
    ENUMERATE(get_props, dev, &pinfo, n_exec, props, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR);
    for (uint32_t e = 0; e < n_exec; ++e) {
        printf("executable %u: %s (subgroup size %u)\n", e, props[e].name, props[e].subgroupSize);
        VkPipelineExecutableInfoKHR einfo = {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
        einfo.pipeline = pipe;
        einfo.executableIndex = e;
        uint32_t n_stat = 0;
        VkPipelineExecutableStatisticKHR* st;
        ENUMERATE(get_stats, dev, &einfo, n_stat, st, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR);
        for (uint32_t i = 0; i < n_stat; ++i) {
            printf("  %s = ", st[i].name);
            switch (st[i].format) {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: printf("%u\n", st[i].value.b32); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: printf("%lld\n", (long long)st[i].value.i64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                    printf("%llu\n", (unsigned long long)st[i].value.u64);
                    break;
                default: printf("%g\n", st[i].value.f64);
            }
        }
        free(st);
        if (want_ir) print_representations(dev, &einfo);
    }
    vkDestroyPipeline(dev, pipe, NULL);
    vkDestroyPipelineLayout(dev, layout, NULL);
    vkDestroyDescriptorSetLayout(dev, dsl, NULL);
    vkDestroyShaderModule(dev, mod, NULL);
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(inst, NULL);
    return 0;
}
