/* hip_rt.h — the GPU runtime layer of the `hip` backend.
 *
 * Loads the vendor's driver API and run-time compiler with dlopen (CUDA
 * driver + NVRTC on NVIDIA, HIP runtime + hipRTC on AMD) into one function
 * table, so building needs no GPU toolchain and a machine without GPU
 * libraries only gets a clear "unavailable" error. Kernel sources are
 * embedded (hip_kernels_gen.c, from kernels/ by scripts/embed_kernels.sh),
 * compiled at first use for the device's architecture and cached on disk
 * (hip_cache_dir), keyed
 * by a hash of the sources, the architecture and the driver/compiler
 * versions. All work goes to one stream; device addresses are struct hip_dptr. */
#ifndef LLM170_HIP_RT_H
#define LLM170_HIP_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

/* Where compiled kernels are cached: $CACHE_DIRECTORY/kernels (the system
 * service's CacheDirectory=, /var/cache/llm170), else
 * $XDG_CACHE_HOME/llm170/kernels, else ~/.cache/llm170/kernels, else
 * /tmp/llm170-kernels. */
void hip_cache_dir(char *dir, size_t n);

/* One embedded kernel source file (kernels/NAME). */
struct hip_src {
    const char *name; /* "gemv.cu", "prelude.h" */
    const char *text;
};
extern const struct hip_src hip_kernel_srcs[];
extern const int hip_kernel_n_srcs;

/* ---- the run-time compiler alone (CI compiles every kernel with it, no GPU needed) ---- */
struct hip_rtc;
/* Load NVRTC (CUDA) or hipRTC (amd = true). ERR_UNSUPPORTED with a clear message when absent. */
int hip_rtc_open(struct hip_rtc **out, bool amd, struct err *e);
void hip_rtc_close(struct hip_rtc *c);
/* "NVRTC 13.0" */
const char *hip_rtc_version(const struct hip_rtc *c);
/* NVRTC's own optimizer threads for every later compile (-split-compile=threads; 0: every core; < 0: off,
 * the default; hipRTC: ignored). An NVRTC that refuses the option compiles without it. The code may
 * differ in layout from a plain compile (not byte for byte the same). */
void hip_rtc_set_split_compile(struct hip_rtc *c, int threads);
/* Compile embedded source `name` for `arch` ("sm_90", "gfx942") into device code (cubin / code
 * object; malloc'd, caller frees). On failure the compiler log is in e->msg (truncated) and,
 * when log is not NULL, in *log (malloc'd). */
int hip_rtc_compile(struct hip_rtc *c, const char *name, const char *arch, void **code, size_t *size, char **log,
                    struct err *e);

/* The most kernel modules a context loads: the .cu sources, a source in parts counted part by part */
#define HIP_MAX_MODS 48
/* The names hip_rt_open compiles, in its order: "attn.cu", and "gemv.cu#0".."gemv.cu#5" for a module in
 * parts (kernels/part.h); each is a name hip_rtc_compile takes. Returns how many (at most max). */
int hip_rtc_module_names(char (*names)[48], int max);

/* Compile every embedded module (.cu, source order) for `arch` on `threads` host threads (0: one per
 * online core), as hip_rt_open does on a device (without its disk cache): code[i] / size[i] for the
 * first `max` (malloc'd, caller frees), *n their count. Returns the threads it used (> 0), or the ERR_*
 * code (< 0) of the first failing module, its message in e (then nothing is returned to free). */
int hip_rtc_compile_all(struct hip_rtc *c, const char *arch, int threads, void **code, size_t *size, int max,
                        int *n, struct err *e);

/* ---- the device ---- */

/* A device address. Host code passes these, never bare integers, so a size or an offset cannot be
 * taken for an address; the kernels' argument blocks (kernels/args.h, the device ABI) hold the plain
 * integer inside (.a), filled at the launch site. Passed by value it travels in one register. */
struct hip_dptr {
    uint64_t a; /* 0: none */
};
#define HIP_DNULL ((struct hip_dptr){ 0 })
/* p + bytes */
static inline struct hip_dptr hip_dptr_off(struct hip_dptr p, uint64_t bytes)
{
    return (struct hip_dptr){ p.a + bytes };
}
static inline bool hip_dptr_null(struct hip_dptr p) { return p.a == 0; }

struct hip_rt;
typedef void *hip_fn;     /* a kernel */
typedef void *hip_graph;  /* an instantiated graph */
typedef void *hip_event;  /* a point in the stream's work */

/* Open device 0 (LLM170_HIP_DEVICE overrides): load the driver and compiler, make a context and a
 * stream, compile (or load from the cache) every embedded kernel module. */
int hip_rt_open(struct hip_rt **out, struct err *e);
/* The same on device `device` (>= 0; -1: LLM170_HIP_DEVICE, else 0), compiling the kernel modules on
 * `compile_threads` host threads (0: one per online core, 1: one after another; hip_knobs.compile_threads),
 * each compile with NVRTC's -split-compile=split_compile when >= 0 (hip_rtc_set_split_compile;
 * hip_knobs.split_compile); the disk cache is looked up per module either way. */
int hip_rt_open_ex(struct hip_rt **out, int compile_threads, int split_compile, int device, struct err *e);
void hip_rt_close(struct hip_rt *rt);
/* "NVIDIA H200 (sm_90, 132 SMs, driver 13.0, NVRTC 13.0)" */
const char *hip_rt_describe(const struct hip_rt *rt);
/* the architecture the kernels are compiled for ("sm_90a", "sm_80", "gfx942", …) */
const char *hip_rt_arch(const struct hip_rt *rt);
int hip_rt_sm_count(const struct hip_rt *rt);
/* The most dynamic shared memory one block may take (bytes; 0: none past the default, e.g. on AMD), and
 * raising one kernel's limit to bytes (≤ that), which its launches with hip_rt_launch_smem then ask for. */
int hip_rt_smem_optin(const struct hip_rt *rt);
int hip_rt_fn_smem(struct hip_rt *rt, hip_fn f, int bytes, struct err *e);
size_t hip_rt_free_mem(struct hip_rt *rt);
/* The device's free and total memory as the driver counts them (every process's use included); 0 when
 * the driver does not say. */
int hip_rt_mem_info(struct hip_rt *rt, size_t *free_b, size_t *total_b);
/* Seconds hip_rt_open spent compiling the kernel modules or reading them from the disk cache (the rest
 * of the open is the driver, the context and the stream). */
double hip_rt_compile_s(const struct hip_rt *rt);
/* Host threads that compile ran on. */
int hip_rt_compile_threads(const struct hip_rt *rt);

int hip_rt_fn(struct hip_rt *rt, const char *name, hip_fn *out, struct err *e);
/* The same, and marks the kernel for programmatic dependent launch: when PDL is on (hip_rt_pdl) its
 * launches may overlap the kernel before them on the stream, so the kernel MUST run PDL_WAIT() in every
 * thread path before it exits and before touching anything but weights (kernels/prelude.h). Only
 * kernels written that way may be looked up here; every other handle launches plainly. */
int hip_rt_fn_pdl(struct hip_rt *rt, const char *name, hip_fn *out, struct err *e);
/* Whether marked kernels launch programmatically: NVIDIA sm_90+ with cuLaunchKernelEx, and not
 * LLM170_HIP_PDL=0. */
bool hip_rt_pdl(const struct hip_rt *rt);
int hip_rt_malloc(struct hip_rt *rt, size_t n, struct hip_dptr *out, struct err *e);
void hip_rt_free(struct hip_rt *rt, struct hip_dptr p); /* none: a no-op */
int hip_rt_host_alloc(struct hip_rt *rt, size_t n, void **out, struct err *e); /* pinned */
void hip_rt_host_free(struct hip_rt *rt, void *p);
/* Stream-ordered copies and fills; host memory of async copies should be pinned. */
int hip_rt_h2d(struct hip_rt *rt, struct hip_dptr dst, const void *src, size_t n, struct err *e);
int hip_rt_d2h(struct hip_rt *rt, void *dst, struct hip_dptr src, size_t n, struct err *e);
int hip_rt_d2d(struct hip_rt *rt, struct hip_dptr dst, struct hip_dptr src, size_t n, struct err *e);
int hip_rt_memset32(struct hip_rt *rt, struct hip_dptr dst, uint32_t v, size_t count, struct err *e);
/* params: an array of pointers to each kernel argument, as cuLaunchKernel takes them. */
int hip_rt_launch(struct hip_rt *rt, hip_fn f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **params,
                  struct err *e);
/* the same with smem bytes of dynamic shared memory a block */
int hip_rt_launch_smem(struct hip_rt *rt, hip_fn f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem,
                       void **params, struct err *e);
int hip_rt_sync(struct hip_rt *rt, struct err *e);
/* Events: record marks the point the stream's work has reached; wait blocks the host until the work
 * before that point is done (the whole stream's work on a driver without event synchronization). */
int hip_rt_event_create(struct hip_rt *rt, hip_event *out, struct err *e);
int hip_rt_event_record(struct hip_rt *rt, hip_event ev, struct err *e);
int hip_rt_event_wait(struct hip_rt *rt, hip_event ev, struct err *e);
void hip_rt_event_free(struct hip_rt *rt, hip_event ev); /* NULL: a no-op */
/* Make the device current on the calling thread (call first in every entry
 * point that may run on another thread than hip_rt_open's). */
int hip_rt_bind(struct hip_rt *rt, struct err *e);
/* Graphs: everything launched on the stream between begin and end is recorded, not run. */
int hip_rt_capture_begin(struct hip_rt *rt, struct err *e);
int hip_rt_capture_end(struct hip_rt *rt, hip_graph *out, struct err *e);
int hip_rt_graph_launch(struct hip_rt *rt, hip_graph g, struct err *e);
void hip_rt_graph_free(struct hip_rt *rt, hip_graph g);
/* Kernel timing (decode profiles; not during graph capture): while on, every launch is followed by
 * an event; hip_rt_profile_report syncs, adds each kernel's time (between its launch's events) by
 * kernel name into the table and returns the number of names (at most max). */
struct hip_prof_row {
    char name[48];
    int calls;
    double ms;
};
int hip_rt_profile(struct hip_rt *rt, bool on, struct err *e);
int hip_rt_profile_report(struct hip_rt *rt, struct hip_prof_row *rows, int max, struct err *e);

/* Warp width of the device's kernels (32 on NVIDIA, 64 on AMD CDNA). */
int hip_rt_warp(const struct hip_rt *rt);

#endif
