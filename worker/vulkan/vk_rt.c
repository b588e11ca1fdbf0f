/* vk_rt.c — the Vulkan runtime (vk_rt.h): the loader through dlopen, one device and compute queue,
 * buffers, pipelines from the embedded SPIR-V, and the step's command buffer. */
#define VK_NO_PROTOTYPES
#include "vk_rt.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

/* the functions used, loaded from the instance or the device */
#define VK_INST_FNS(X)                                                                                               \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                              \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties) X(vkCreateDevice)             \
    X(vkGetDeviceProcAddr)
#define VK_DEV_FNS(X)                                                                                                \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)     \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory)                        \
    X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout)  \
    X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)            \
    X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkResetDescriptorPool) X(vkAllocateDescriptorSets)        \
    X(vkUpdateDescriptorSets) X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers)             \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCmdBindPipeline)                       \
    X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer)     \
    X(vkCmdFillBuffer) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)       \
    X(vkDeviceWaitIdle)

#define VK_DECL(f) PFN_##f f;

#define VK_SETS 4096   /* descriptor sets a recording holds before it is flushed (submitted and restarted) */
#define VK_STAGE (16u << 20) /* staging buffer for uploads and downloads of device-local buffers */

struct vk_pipe {
    VkPipeline p;
    int n_bind;
};

struct vk_rt {
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
    VK_INST_FNS(VK_DECL)
    VK_DEV_FNS(VK_DECL)
    VkInstance inst;
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memp;
    VkDevice dev;
    VkQueue q;
    uint32_t qf;
    VkCommandPool cpool;
    VkCommandBuffer cb;
    VkFence fence;
    VkDescriptorPool dpool;
    VkDescriptorSetLayout dsl[VK_MAX_BIND + 1];    /* by binding count */
    VkPipelineLayout pl[VK_MAX_BIND + 1];
    struct vk_pipe *pipes;                          /* [vk_n_spvs], built at first use */
    bool dev_fns;                                   /* every device function found (else close only destroys dev) */
    bool recording;
    int sets;                                       /* descriptor sets taken since the pool's reset */
    struct vk_buf stage;                            /* host-visible staging */
    char desc[320];
};

static const char *vk_res(VkResult r)
{
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver (no Vulkan 1.1 device)";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "out of pool memory";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    default: return "error";
    }
}

#define CKV(call, what)                                                                                              \
    do {                                                                                                             \
        VkResult r_ = (call);                                                                                        \
        if (r_ != VK_SUCCESS)                                                                                        \
            return err_set(e, r_ == VK_ERROR_OUT_OF_DEVICE_MEMORY ? ERR_NOMEM : ERR_IO, "vulkan: %s: %s (%d)", what, \
                           vk_res(r_), (int)r_);                                                                     \
    } while (0)

static int load_loader(struct vk_rt *rt, struct err *e)
{
    const char *names[] = { "libvulkan.so.1", "libvulkan.so" };
    for (size_t i = 0; i < 2 && !rt->lib; i++)
        rt->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!rt->lib)
        return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: no Vulkan loader (libvulkan.so.1: %s)",
                       dlerror());
    rt->gipa = (PFN_vkGetInstanceProcAddr)dlsym(rt->lib, "vkGetInstanceProcAddr");
    if (!rt->gipa)
        return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: the loader lacks vkGetInstanceProcAddr");
    return 0;
}

/* the device's type in words, for the description */
static const char *dev_type(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static int compute_family(struct vk_rt *rt, VkPhysicalDevice pd)
{
    uint32_t n = 0;
    rt->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties f[32];
    if (n > 32)
        n = 32;
    rt->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, f);
    for (uint32_t i = 0; i < n; i++)
        if (f[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            return (int)i;
    return -1;
}

/* `device` when >= 0 (the worker's --gpu N), else LLM170_VK_DEVICE=i, else the first discrete GPU, then
 * integrated / virtual GPU, then anything with compute */
static int pick_device(struct vk_rt *rt, int device, struct err *e)
{
    uint32_t n = 0;
    CKV(rt->vkEnumeratePhysicalDevices(rt->inst, &n, NULL), "enumerate devices");
    if (!n)
        return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: no Vulkan device");
    VkPhysicalDevice pds[16];
    if (n > 16)
        n = 16;
    CKV(rt->vkEnumeratePhysicalDevices(rt->inst, &n, pds), "enumerate devices");
    long pick = device; /* an explicit index, else the environment's, else the search below */
    const char *want = device < 0 ? getenv("LLM170_VK_DEVICE") : NULL;
    if (want && *want) {
        char *end;
        pick = strtol(want, &end, 10);
        if (*end || pick < 0 || pick >= (long)n)
            return err_set(e, ERR_INVALID, "vulkan: LLM170_VK_DEVICE=%s: there are %u devices (0..%u)", want, n,
                           n - 1);
    }
    if (pick >= 0) {
        if (pick >= (long)n)
            return err_set(e, ERR_INVALID, "vulkan: GPU %ld asked for, but there are %u devices (0..%u)", pick, n,
                           n - 1);
        if (compute_family(rt, pds[pick]) < 0)
            return err_set(e, ERR_UNSUPPORTED, "vulkan: device %ld has no compute queue", pick);
        rt->pd = pds[pick];
        return 0;
    }
    static const VkPhysicalDeviceType order[] = { VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
                                                  VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                                                  VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, VK_PHYSICAL_DEVICE_TYPE_CPU,
                                                  VK_PHYSICAL_DEVICE_TYPE_OTHER };
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++)
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            rt->vkGetPhysicalDeviceProperties(pds[i], &p);
            if (p.deviceType == order[o] && compute_family(rt, pds[i]) >= 0) {
                rt->pd = pds[i];
                return 0;
            }
        }
    return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: no device with a compute queue");
}

static int make_layouts(struct vk_rt *rt, struct err *e)
{
    for (int nb = 0; nb <= VK_MAX_BIND; nb++) {
        VkDescriptorSetLayoutBinding b[VK_MAX_BIND];
        for (int i = 0; i < nb; i++)
            b[i] = (VkDescriptorSetLayoutBinding){ .binding = (uint32_t)i,
                                                   .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                   .descriptorCount = 1,
                                                   .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT };
        VkDescriptorSetLayoutCreateInfo li = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                               .bindingCount = (uint32_t)nb, .pBindings = b };
        CKV(rt->vkCreateDescriptorSetLayout(rt->dev, &li, NULL, &rt->dsl[nb]), "descriptor set layout");
        VkPushConstantRange pr = { .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VK_PUSH_MAX };
        VkPipelineLayoutCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                          .setLayoutCount = 1, .pSetLayouts = &rt->dsl[nb],
                                          .pushConstantRangeCount = 1, .pPushConstantRanges = &pr };
        CKV(rt->vkCreatePipelineLayout(rt->dev, &pi, NULL, &rt->pl[nb]), "pipeline layout");
    }
    VkDescriptorPoolSize ps = { .type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = VK_SETS * VK_MAX_BIND };
    VkDescriptorPoolCreateInfo dp = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = VK_SETS,
                                      .poolSizeCount = 1, .pPoolSizes = &ps };
    CKV(rt->vkCreateDescriptorPool(rt->dev, &dp, NULL, &rt->dpool), "descriptor pool");
    return 0;
}

int vk_rt_open(struct vk_rt **out, int device, struct err *e)
{
    *out = NULL;
    struct vk_rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    int rc = load_loader(rt, e);
    if (rc) {
        vk_rt_close(rt);
        return rc;
    }
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)rt->gipa(NULL, "vkCreateInstance");
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "llm170",
                              .pEngineName = "llm170", .apiVersion = VK_API_VERSION_1_1 };
    VkInstanceCreateInfo ii = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    VkResult r = create ? create(&ii, NULL, &rt->inst) : VK_ERROR_INITIALIZATION_FAILED;
    if (r != VK_SUCCESS) {
        vk_rt_close(rt);
        return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: no Vulkan instance (%s, %d)", vk_res(r),
                       (int)r);
    }
#define VK_LOAD_I(f)                                                                                                 \
    if (!(rt->f = (PFN_##f)rt->gipa(rt->inst, #f)))                                                                  \
        rc = err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: the loader lacks %s", #f);
    VK_INST_FNS(VK_LOAD_I)
    if (!rc)
        rc = pick_device(rt, device, e);
    if (rc) {
        vk_rt_close(rt);
        return rc;
    }
    rt->vkGetPhysicalDeviceProperties(rt->pd, &rt->props);
    rt->vkGetPhysicalDeviceMemoryProperties(rt->pd, &rt->memp);
    rt->qf = (uint32_t)compute_family(rt, rt->pd);
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = rt->qf,
                                   .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo di = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qi };
    r = rt->vkCreateDevice(rt->pd, &di, NULL, &rt->dev);
    if (r != VK_SUCCESS) {
        vk_rt_close(rt);
        return err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: device creation failed (%s, %d)", vk_res(r),
                       (int)r);
    }
#define VK_LOAD_D(f)                                                                                                 \
    if (!(rt->f = (PFN_##f)rt->vkGetDeviceProcAddr(rt->dev, #f)))                                                    \
        rc = err_set(e, ERR_UNSUPPORTED, "vulkan backend unavailable: the device lacks %s", #f);
    VK_DEV_FNS(VK_LOAD_D)
    rt->dev_fns = !rc;
    if (rc) {
        vk_rt_close(rt);
        return rc;
    }
    rt->vkGetDeviceQueue(rt->dev, rt->qf, 0, &rt->q);
    const uint32_t v = rt->props.apiVersion;
    snprintf(rt->desc, sizeof rt->desc, "%s (Vulkan %u.%u, %s)", rt->props.deviceName, VK_API_VERSION_MAJOR(v),
             VK_API_VERSION_MINOR(v), dev_type(rt->props.deviceType));
    VkCommandPoolCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = rt->qf };
    VkFenceCreateInfo fi = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    rt->pipes = calloc((size_t)(vk_n_spvs > 0 ? vk_n_spvs : 1), sizeof *rt->pipes);
    if (!rt->pipes)
        rc = err_set(e, ERR_NOMEM, "vulkan: out of memory");
    if (!rc && (r = rt->vkCreateCommandPool(rt->dev, &ci, NULL, &rt->cpool)) == VK_SUCCESS) {
        VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                           .commandPool = rt->cpool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                           .commandBufferCount = 1 };
        r = rt->vkAllocateCommandBuffers(rt->dev, &ai, &rt->cb);
        if (r == VK_SUCCESS)
            r = rt->vkCreateFence(rt->dev, &fi, NULL, &rt->fence);
        if (r != VK_SUCCESS)
            rc = err_set(e, ERR_IO, "vulkan: command buffer: %s (%d)", vk_res(r), (int)r);
    } else if (!rc) {
        rc = err_set(e, ERR_IO, "vulkan: command pool: %s (%d)", vk_res(r), (int)r);
    }
    if (!rc)
        rc = make_layouts(rt, e);
    if (!rc)
        rc = vk_rt_buf(rt, &rt->stage, VK_STAGE, true, e);
    if (rc) {
        vk_rt_close(rt);
        return rc;
    }
    *out = rt;
    return 0;
}

void vk_rt_close(struct vk_rt *rt)
{
    if (!rt)
        return;
    if (rt->dev && !rt->dev_fns) {
        if (rt->vkDestroyDevice)
            rt->vkDestroyDevice(rt->dev, NULL);
    } else if (rt->dev) {
        rt->vkDeviceWaitIdle(rt->dev);
        vk_rt_buf_free(rt, &rt->stage);
        for (int i = 0; rt->pipes && i < vk_n_spvs; i++)
            if (rt->pipes[i].p)
                rt->vkDestroyPipeline(rt->dev, rt->pipes[i].p, NULL);
        for (int nb = 0; nb <= VK_MAX_BIND; nb++) {
            if (rt->pl[nb])
                rt->vkDestroyPipelineLayout(rt->dev, rt->pl[nb], NULL);
            if (rt->dsl[nb])
                rt->vkDestroyDescriptorSetLayout(rt->dev, rt->dsl[nb], NULL);
        }
        if (rt->dpool)
            rt->vkDestroyDescriptorPool(rt->dev, rt->dpool, NULL);
        if (rt->fence)
            rt->vkDestroyFence(rt->dev, rt->fence, NULL);
        if (rt->cpool)
            rt->vkDestroyCommandPool(rt->dev, rt->cpool, NULL);
        rt->vkDestroyDevice(rt->dev, NULL);
    }
    if (rt->inst && rt->vkDestroyInstance)
        rt->vkDestroyInstance(rt->inst, NULL);
    free(rt->pipes);
    if (rt->lib)
        dlclose(rt->lib);
    free(rt);
}

const char *vk_rt_describe(const struct vk_rt *rt) { return rt->desc; }
uint64_t vk_rt_max_range(const struct vk_rt *rt) { return rt->props.limits.maxStorageBufferRange; }

uint64_t vk_rt_device_bytes(const struct vk_rt *rt)
{
    uint64_t best = 0;
    for (uint32_t i = 0; i < rt->memp.memoryHeapCount; i++)
        if ((rt->memp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && rt->memp.memoryHeaps[i].size > best)
            best = rt->memp.memoryHeaps[i].size;
    return best;
}

/* a memory type of `bits` with all of `want` (and, when it exists, also `nice`) */
static int mem_type(const struct vk_rt *rt, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice)
{
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < rt->memp.memoryTypeCount; i++) {
            const VkMemoryPropertyFlags f = rt->memp.memoryTypes[i].propertyFlags;
            const VkMemoryPropertyFlags need = pass ? want : want | nice;
            if ((bits & (1u << i)) && (f & need) == need)
                return (int)i;
        }
    return -1;
}

/* run what rec records as a one-off command buffer and wait (not while a step is recorded) */
static int oneshot_begin(struct vk_rt *rt, struct err *e)
{
    if (rt->recording)
        return err_set(e, ERR_INTERNAL, "vulkan: a transfer while a step is being recorded");
    CKV(rt->vkResetCommandBuffer(rt->cb, 0), "reset command buffer");
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
    CKV(rt->vkBeginCommandBuffer(rt->cb, &bi), "begin command buffer");
    return 0;
}

static int run_and_wait(struct vk_rt *rt, struct err *e)
{
    CKV(rt->vkEndCommandBuffer(rt->cb), "end command buffer");
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &rt->cb };
    CKV(rt->vkResetFences(rt->dev, 1, &rt->fence), "reset fence");
    CKV(rt->vkQueueSubmit(rt->q, 1, &si, rt->fence), "submit");
    CKV(rt->vkWaitForFences(rt->dev, 1, &rt->fence, VK_TRUE, UINT64_MAX), "wait for the device");
    return 0;
}

int vk_rt_buf(struct vk_rt *rt, struct vk_buf *b, size_t size, bool host, struct err *e)
{
    memset(b, 0, sizeof *b);
    VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
    VkBuffer buf;
    CKV(rt->vkCreateBuffer(rt->dev, &bi, NULL, &buf), "create buffer");
    VkMemoryRequirements mr;
    rt->vkGetBufferMemoryRequirements(rt->dev, buf, &mr);
    const int t = host ? mem_type(rt, mr.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                             VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                  VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                       : mem_type(rt, mr.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (t < 0) {
        rt->vkDestroyBuffer(rt->dev, buf, NULL);
        return err_set(e, ERR_UNSUPPORTED, "vulkan: no %s memory type for a buffer", host ? "host-visible" : "device");
    }
    VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = mr.size,
                                .memoryTypeIndex = (uint32_t)t };
    VkDeviceMemory mem;
    VkResult r = rt->vkAllocateMemory(rt->dev, &ai, NULL, &mem);
    if (r != VK_SUCCESS) {
        rt->vkDestroyBuffer(rt->dev, buf, NULL);
        return err_set(e, ERR_NOMEM, "vulkan: %s memory for %.1f MiB: %s", host ? "host-visible" : "device",
                       (double)size / (1 << 20), vk_res(r));
    }
    b->buf = (uint64_t)(uintptr_t)buf, b->mem = (uint64_t)(uintptr_t)mem, b->size = size;
    if ((r = rt->vkBindBufferMemory(rt->dev, buf, mem, 0)) == VK_SUCCESS && host)
        r = rt->vkMapMemory(rt->dev, mem, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r != VK_SUCCESS) {
        vk_rt_buf_free(rt, b);
        return err_set(e, ERR_IO, "vulkan: bind or map a buffer: %s (%d)", vk_res(r), (int)r);
    }
    if (host) {
        memset(b->map, 0, size);
        return 0;
    }
    int rc = oneshot_begin(rt, e);
    if (!rc) {
        rt->vkCmdFillBuffer(rt->cb, buf, 0, VK_WHOLE_SIZE, 0);
        rc = run_and_wait(rt, e);
    }
    if (rc)
        vk_rt_buf_free(rt, b);
    return rc;
}

void vk_rt_buf_free(struct vk_rt *rt, struct vk_buf *b)
{
    if (!b->buf)
        return;
    if (b->map)
        rt->vkUnmapMemory(rt->dev, (VkDeviceMemory)(uintptr_t)b->mem);
    rt->vkDestroyBuffer(rt->dev, (VkBuffer)(uintptr_t)b->buf, NULL);
    rt->vkFreeMemory(rt->dev, (VkDeviceMemory)(uintptr_t)b->mem, NULL);
    memset(b, 0, sizeof *b);
}

static int xfer(struct vk_rt *rt, const struct vk_buf *b, size_t off, void *host, size_t n, bool up, struct err *e)
{
    if (off > b->size || n > b->size - off)
        return err_set(e, ERR_INTERNAL, "vulkan: a transfer of %zu bytes at %zu past a buffer of %zu", n, off,
                       b->size);
    if (b->map) {
        if (up)
            memcpy((char *)b->map + off, host, n);
        else
            memcpy(host, (const char *)b->map + off, n);
        return 0;
    }
    for (size_t done = 0; done < n;) {
        const size_t c = n - done < VK_STAGE ? n - done : VK_STAGE;
        if (up)
            memcpy(rt->stage.map, (const char *)host + done, c);
        int rc = oneshot_begin(rt, e);
        if (rc)
            return rc;
        VkBufferCopy cp = { .srcOffset = up ? 0 : off + done, .dstOffset = up ? off + done : 0, .size = c };
        rt->vkCmdCopyBuffer(rt->cb, (VkBuffer)(uintptr_t)(up ? rt->stage.buf : b->buf),
                            (VkBuffer)(uintptr_t)(up ? b->buf : rt->stage.buf), 1, &cp);
        if ((rc = run_and_wait(rt, e)))
            return rc;
        if (!up)
            memcpy((char *)host + done, rt->stage.map, c);
        done += c;
    }
    return 0;
}

int vk_rt_upload(struct vk_rt *rt, struct vk_buf *b, size_t off, const void *src, size_t n, struct err *e)
{
    return xfer(rt, b, off, (void *)src, n, true, e);
}

int vk_rt_download(struct vk_rt *rt, const struct vk_buf *b, size_t off, void *dst, size_t n, struct err *e)
{
    return xfer(rt, b, off, dst, n, false, e);
}

int vk_rt_pipe(struct vk_rt *rt, const char *name, struct err *e)
{
    for (int i = 0; i < vk_n_spvs; i++) {
        if (strcmp(vk_spvs[i].name, name))
            continue;
        if (rt->pipes[i].p)
            return i;
        const struct vk_spv *s = &vk_spvs[i];
        if (s->n_bind < 0 || s->n_bind > VK_MAX_BIND) {
            err_set(e, ERR_INTERNAL, "vulkan: shader %s binds %d buffers", name, s->n_bind);
            return -1;
        }
        VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = s->size,
                                        .pCode = s->code };
        VkShaderModule mod;
        VkResult r = rt->vkCreateShaderModule(rt->dev, &mi, NULL, &mod);
        if (r == VK_SUCCESS) {
            VkComputePipelineCreateInfo pi = {
                .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                           .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main" },
                .layout = rt->pl[s->n_bind],
            };
            r = rt->vkCreateComputePipelines(rt->dev, VK_NULL_HANDLE, 1, &pi, NULL, &rt->pipes[i].p);
            rt->vkDestroyShaderModule(rt->dev, mod, NULL);
        }
        if (r != VK_SUCCESS) {
            err_set(e, ERR_IO, "vulkan: pipeline of shader %s: %s (%d)", name, vk_res(r), (int)r);
            return -1;
        }
        rt->pipes[i].n_bind = s->n_bind;
        return i;
    }
    err_set(e, ERR_INTERNAL, "vulkan: no embedded shader %s", name);
    return -1;
}

int vk_rt_begin(struct vk_rt *rt, struct err *e)
{
    int rc = oneshot_begin(rt, e);
    if (rc)
        return rc;
    CKV(rt->vkResetDescriptorPool(rt->dev, rt->dpool, 0), "reset descriptor pool");
    rt->sets = 0;
    rt->recording = true;
    return 0;
}

/* compute (and transfer) writes before everything after */
static void barrier(struct vk_rt *rt)
{
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT };
    rt->vkCmdPipelineBarrier(rt->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                             NULL, 0, NULL);
}

int vk_rt_dispatch(struct vk_rt *rt, int pipe, const struct vk_buf *const *bufs, const void *pc, size_t pcn,
                   uint32_t gx, uint32_t gy, uint32_t gz, struct err *e)
{
    if (!rt->recording || pipe < 0 || pipe >= vk_n_spvs || !rt->pipes[pipe].p || pcn > VK_PUSH_MAX)
        return err_set(e, ERR_INTERNAL, "vulkan: a dispatch outside a step, of no pipeline, or of %zu push bytes",
                       pcn);
    if (!gx || !gy || !gz)
        return 0;
    const uint32_t *lim = rt->props.limits.maxComputeWorkGroupCount;
    if (gx > lim[0] || gy > lim[1] || gz > lim[2])
        return err_set(e, ERR_RANGE, "vulkan: a grid of %u x %u x %u workgroups is past the device's %u x %u x %u",
                       gx, gy, gz, lim[0], lim[1], lim[2]);
    const int nb = rt->pipes[pipe].n_bind;
    if (rt->sets == VK_SETS) { /* the pool is spent: run what is recorded, then go on in a new recording */
        rt->recording = false;
        int rc = run_and_wait(rt, e);
        if (!rc)
            rc = vk_rt_begin(rt, e);
        if (rc)
            return rc;
    }
    VkDescriptorSetAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = rt->dpool, .descriptorSetCount = 1,
                                       .pSetLayouts = &rt->dsl[nb] };
    VkDescriptorSet set;
    CKV(rt->vkAllocateDescriptorSets(rt->dev, &ai, &set), "descriptor set");
    rt->sets++;
    VkDescriptorBufferInfo bi[VK_MAX_BIND];
    VkWriteDescriptorSet w[VK_MAX_BIND];
    for (int i = 0; i < nb; i++) {
        if (!bufs[i] || !bufs[i]->buf)
            return err_set(e, ERR_INTERNAL, "vulkan: binding %d of shader %s has no buffer", i, vk_spvs[pipe].name);
        bi[i] = (VkDescriptorBufferInfo){ .buffer = (VkBuffer)(uintptr_t)bufs[i]->buf, .offset = 0,
                                          .range = VK_WHOLE_SIZE };
        w[i] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                       .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i] };
    }
    rt->vkUpdateDescriptorSets(rt->dev, (uint32_t)nb, w, 0, NULL);
    rt->vkCmdBindPipeline(rt->cb, VK_PIPELINE_BIND_POINT_COMPUTE, rt->pipes[pipe].p);
    rt->vkCmdBindDescriptorSets(rt->cb, VK_PIPELINE_BIND_POINT_COMPUTE, rt->pl[nb], 0, 1, &set, 0, NULL);
    if (pcn) {
        uint8_t pad[VK_PUSH_MAX] = { 0 };
        memcpy(pad, pc, pcn);
        rt->vkCmdPushConstants(rt->cb, rt->pl[nb], VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH_MAX, pad);
    }
    rt->vkCmdDispatch(rt->cb, gx, gy, gz);
    barrier(rt);
    return 0;
}

void vk_rt_copy(struct vk_rt *rt, const struct vk_buf *src, size_t soff, const struct vk_buf *dst, size_t doff,
                size_t n)
{
    if (!n)
        return;
    VkBufferCopy cp = { .srcOffset = soff, .dstOffset = doff, .size = n };
    rt->vkCmdCopyBuffer(rt->cb, (VkBuffer)(uintptr_t)src->buf, (VkBuffer)(uintptr_t)dst->buf, 1, &cp);
    barrier(rt);
}

int vk_rt_submit(struct vk_rt *rt, struct err *e)
{
    if (!rt->recording)
        return err_set(e, ERR_INTERNAL, "vulkan: submit without a recording");
    rt->recording = false;
    /* the step's writes visible to the host's reads (host-visible buffers: the logits) after the fence */
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    rt->vkCmdPipelineBarrier(rt->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    return run_and_wait(rt, e);
}

void vk_rt_abandon(struct vk_rt *rt)
{
    if (!rt->recording)
        return;
    rt->recording = false;
    rt->vkEndCommandBuffer(rt->cb);
    rt->vkResetCommandBuffer(rt->cb, 0);
}
