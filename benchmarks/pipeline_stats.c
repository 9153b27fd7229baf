// What the Vulkan driver compiled a compute shader into: the statistics of
// VK_KHR_pipeline_executable_properties (registers, shared memory, spills...,
// as the driver names them) for one SPIR-V module. The Vulkan counterpart of
// `nvcc -Xptxas -v` for the CUDA twins; benchmarks/pipeline_stats.py drives it
// over the kernels. Build (libvulkan-dev) and run:
//     cc -O1 -o pipeline_stats benchmarks/pipeline_stats.c -lvulkan
//     pipeline_stats KERNEL.spv BINDINGS PUSH_BYTES [SPEC_WORD ...]
// BINDINGS storage buffers at set 0, bindings 0..BINDINGS-1; PUSH_BYTES of push
// constants; the specialization constants' 32-bit words by constant_id.
// Output: one "name = value" line per statistic of each executable.
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
    // the features the kernels may use: float atomics (ATOMIC_FLOAT=1) and pipeline statistics
    const char* exts[2] = {VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME};
    uint32_t n_exts = has_extension(pd, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME) ? 2 : 1;
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT atomic = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT};
    atomic.shaderBufferFloat32AtomicAdd = VK_TRUE;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pep = {
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    pep.pipelineExecutableInfo = VK_TRUE;
    pep.pNext = n_exts == 2 ? &atomic : NULL;
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
    cpci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    cpci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpci.stage.module = mod;
    cpci.stage.pName = "main";
    cpci.stage.pSpecializationInfo = n_spec ? &spec : NULL;
    cpci.layout = layout;
    VkPipeline pipe;
    CHECK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe));

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
    }
    vkDestroyPipeline(dev, pipe, NULL);
    vkDestroyPipelineLayout(dev, layout, NULL);
    vkDestroyDescriptorSetLayout(dev, dsl, NULL);
    vkDestroyShaderModule(dev, mod, NULL);
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(inst, NULL);
    return 0;
}
