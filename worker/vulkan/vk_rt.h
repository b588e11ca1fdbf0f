/* vk_rt.h — the Vulkan runtime of the `vulkan` backend.
 *
 * Loads the Vulkan loader (libvulkan.so.1) with dlopen, so the binary runs on
 * a machine without it and then only reports the backend unavailable. Opens
 * one compute queue of one device (the worker's --gpu N, or LLM170_VK_DEVICE=i, picks the i-th; else
 * the first discrete GPU, then any GPU, then a CPU device such as lavapipe),
 * makes the compute pipelines from the SPIR-V embedded at build time
 * (every .comp of shaders/, compiled into vk_shaders_gen.c), and records a step's dispatches into
 * one command buffer that is submitted and waited for at the end of the step.
 *
 * Every pipeline binds whole storage buffers at bindings 0..nb-1 and takes up
 * to VK_PUSH_MAX bytes of push constants; offsets inside a buffer travel in
 * the push constants, so no descriptor offset alignment applies. A barrier
 * (compute writes → compute and transfer reads) follows every dispatch and
 * copy: a step is a chain in which each op may read what the ones before wrote. */
#ifndef LLM170_VK_RT_H
#define LLM170_VK_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define VK_MAX_BIND 8  /* storage buffers a pipeline binds at most */
#define VK_PUSH_MAX 128 /* bytes of push constants a dispatch passes at most (Vulkan's guaranteed minimum) */

/* One embedded SPIR-V module (shaders/NAME.comp compiled with one set of -D defines). */
struct vk_spv {
    const char *name;     /* "mm_q4_K", "rms_norm" */
    const uint32_t *code; /* SPIR-V words */
    size_t size;          /* bytes */
    int n_bind;           /* storage buffers it binds (0..n_bind-1) */
};
extern const struct vk_spv vk_spvs[];
extern const int vk_n_spvs;

struct vk_rt;

/* A buffer: device-local, or host-visible and mapped (host = true; what the host writes each step and
 * the logits it reads back). */
struct vk_buf {
    uint64_t buf;  /* VkBuffer */
    uint64_t mem;  /* VkDeviceMemory */
    size_t size;   /* bytes */
    void *map;     /* the host mapping (host buffers), else NULL */
};

/* Open device `device` (>= 0: the worker's --gpu N; -1: LLM170_VK_DEVICE, else the first discrete GPU …).
 * ERR_UNSUPPORTED "vulkan backend unavailable: …" without a loader or a device with a compute queue;
 * ERR_INVALID for a device index past the last. */
int vk_rt_open(struct vk_rt **out, int device, struct err *e);
void vk_rt_close(struct vk_rt *rt);
/* "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan 1.3, cpu)" */
const char *vk_rt_describe(const struct vk_rt *rt);
/* bytes of device-local memory (the largest device-local heap) */
uint64_t vk_rt_device_bytes(const struct vk_rt *rt);
/* the largest storage buffer a shader may bind (maxStorageBufferRange) */
uint64_t vk_rt_max_range(const struct vk_rt *rt);

/* size bytes (> 0), zero-filled. ERR_NOMEM naming the size when the device has no room. */
int vk_rt_buf(struct vk_rt *rt, struct vk_buf *b, size_t size, bool host, struct err *e);
/* frees b (a zeroed one is left alone) and zeroes it */
void vk_rt_buf_free(struct vk_rt *rt, struct vk_buf *b);
/* host → buffer and buffer → host, synchronous, through a staging buffer when b is not mapped; not while
 * a step is being recorded */
int vk_rt_upload(struct vk_rt *rt, struct vk_buf *b, size_t off, const void *src, size_t n, struct err *e);
int vk_rt_download(struct vk_rt *rt, const struct vk_buf *b, size_t off, void *dst, size_t n, struct err *e);

/* The pipeline of embedded module `name`, or -1 (no such module, or it failed to build: *e says). */
int vk_rt_pipe(struct vk_rt *rt, const char *name, struct err *e);

/* Recording a step: begin, dispatches and copies in order, then submit (waits for the device). */
int vk_rt_begin(struct vk_rt *rt, struct err *e);
/* pipe with bufs[0..n_bind) at its bindings, push constants pc[0..pcn), a grid of gx·gy·gz workgroups */
int vk_rt_dispatch(struct vk_rt *rt, int pipe, const struct vk_buf *const *bufs, const void *pc, size_t pcn,
                   uint32_t gx, uint32_t gy, uint32_t gz, struct err *e);
void vk_rt_copy(struct vk_rt *rt, const struct vk_buf *src, size_t soff, const struct vk_buf *dst, size_t doff,
                size_t n);
int vk_rt_submit(struct vk_rt *rt, struct err *e);
/* drop the recording in progress (a step that failed part way), so that the next begin or transfer starts clean */
void vk_rt_abandon(struct vk_rt *rt);

#endif
