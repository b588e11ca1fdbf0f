/* hip_rt.c — dlopen'd CUDA driver/NVRTC or HIP/hipRTC, kernel compilation
 * with an on-disk cache, memory, launches and graphs (hip_rt.h). */
#include "hip_rt.h"

#include "../../common/clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- run-time compiler ---- */

typedef int (*rtc_create_t)(void **prog, const char *src, const char *name, int nh, const char *const *hdrs,
                            const char *const *hnames);
typedef int (*rtc_compile_t)(void *prog, int nopt, const char *const *opts);
typedef int (*rtc_size_t)(void *prog, size_t *n);
typedef int (*rtc_get_t)(void *prog, char *dst);
typedef int (*rtc_destroy_t)(void **prog);
typedef int (*rtc_version_t)(int *major, int *minor);
typedef const char *(*rtc_errstr_t)(int r);

struct hip_rtc {
    void *lib;
    bool amd;
    rtc_create_t create;
    rtc_compile_t compile;
    rtc_size_t log_size, code_size;
    rtc_get_t log, code;
    rtc_destroy_t destroy;
    rtc_errstr_t errstr;
    int major, minor;
    char version[64];
    int split;          /* NVRTC -split-compile threads: -1 off (default), 0 every core (hip_rtc_set_split_compile) */
};

/* RTLD_NODELETE: the vendor libraries (and the C++ runtime they bring) stay mapped after dlclose, as
 * drivers expect; unloading them would also orphan their runtime's static allocations. */
static void *open_first(const char *const *names, char *tried, size_t tn)
{
    tried[0] = 0;
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h)
            return h;
        size_t l = strlen(tried);
        snprintf(tried + l, tn - l, "%s%s", l ? ", " : "", names[i]);
    }
    return NULL;
}

static const char *const nvrtc_names[] = {
    "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "libnvrtc.so.11.2",
    "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so",
    NULL,
};
static const char *const hiprtc_names[] = {
    "libhiprtc.so.6", "libhiprtc.so.7", "libhiprtc.so", "/opt/rocm/lib/libhiprtc.so", NULL,
};

int hip_rtc_open(struct hip_rtc **out, bool amd, struct err *e)
{
    *out = NULL;
    char tried[1024];
    const char *env = getenv("LLM170_RTC_LIB");
    void *lib = NULL;
    if (env && *env) {
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        snprintf(tried, sizeof tried, "%s", env);
    } else {
        lib = open_first(amd ? hiprtc_names : nvrtc_names, tried, sizeof tried);
    }
    if (!lib)
        return err_set(e, ERR_UNSUPPORTED, "hip: no %s run-time compiler found (tried %s)", amd ? "hipRTC" : "NVRTC",
                       tried);
    struct hip_rtc *c = calloc(1, sizeof *c);
    if (!c) {
        dlclose(lib);
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    }
    c->lib = lib;
    c->amd = amd;
    c->split = -1;
    const char *p = amd ? "hiprtc" : "nvrtc";
    char nm[64];
#define SYM(field, suffix, type)                                                          \
    do {                                                                                  \
        snprintf(nm, sizeof nm, "%s%s", p, suffix);                                       \
        c->field = (type)dlsym(lib, nm);                                                  \
        if (!c->field) {                                                                  \
            hip_rtc_close(c);                                                             \
            return err_set(e, ERR_UNSUPPORTED, "hip: %s lacks symbol %s", tried[0] ? tried : p, nm); \
        }                                                                                 \
    } while (0)
    SYM(create, "CreateProgram", rtc_create_t);
    SYM(compile, "CompileProgram", rtc_compile_t);
    SYM(log_size, "GetProgramLogSize", rtc_size_t);
    SYM(log, "GetProgramLog", rtc_get_t);
    SYM(destroy, "DestroyProgram", rtc_destroy_t);
    SYM(errstr, "GetErrorString", rtc_errstr_t);
    if (amd) {
        SYM(code_size, "GetCodeSize", rtc_size_t);
        SYM(code, "GetCode", rtc_get_t);
    } else {
        SYM(code_size, "GetCUBINSize", rtc_size_t);
        SYM(code, "GetCUBIN", rtc_get_t);
    }
    rtc_version_t ver;
    snprintf(nm, sizeof nm, "%sVersion", p);
    ver = (rtc_version_t)dlsym(lib, nm);
    if (ver)
        ver(&c->major, &c->minor);
    snprintf(c->version, sizeof c->version, "%s %d.%d", amd ? "hipRTC" : "NVRTC", c->major, c->minor);
#undef SYM
    *out = c;
    return 0;
}

void hip_rtc_close(struct hip_rtc *c)
{
    if (!c)
        return;
    if (c->lib)
        dlclose(c->lib);
    free(c);
}

const char *hip_rtc_version(const struct hip_rtc *c) { return c->version; }

void hip_rtc_set_split_compile(struct hip_rtc *c, int threads) { c->split = c->amd || threads < 0 ? -1 : threads; }

static const struct hip_src *find_src(const char *name)
{
    for (int i = 0; i < hip_kernel_n_srcs; i++)
        if (!strcmp(hip_kernel_srcs[i].name, name))
            return &hip_kernel_srcs[i];
    return NULL;
}

static int rtc_compile(struct hip_rtc *c, const char *name, const char *arch, int split, void **code, size_t *size,
                       char **log, struct err *e);

int hip_rtc_compile(struct hip_rtc *c, const char *name, const char *arch, void **code, size_t *size, char **log,
                    struct err *e)
{
    int rc = rtc_compile(c, name, arch, c->split, code, size, log, e);
    if (rc && c->split >= 0) { /* an NVRTC without -split-compile (or a real error, which says so again) */
        if (log) {
            free(*log);
            *log = NULL;
        }
        rc = rtc_compile(c, name, arch, -1, code, size, log, e);
    }
    return rc;
}

/* One compile; split >= 0 adds NVRTC's -split-compile=split (its optimizer on that many threads, 0: all) */
static int rtc_compile(struct hip_rtc *c, const char *name, const char *arch, int split, void **code, size_t *size,
                       char **log, struct err *e)
{
    *code = NULL;
    *size = 0;
    if (log)
        *log = NULL;
    /* "gemv.cu#2": part 2 of gemv.cu (kernels/part.h), compiled with -DLLM_PART=2 */
    char base[64];
    const char *hash = strchr(name, '#');
    snprintf(base, sizeof base, "%.*s", hash ? (int)(hash - name) : (int)strlen(name), name);
    const struct hip_src *s = find_src(base);
    if (!s)
        return err_set(e, ERR_NOTFOUND, "hip: no embedded kernel source %s", base);
    /* every header travels in memory */
    const char *hdrs[64], *hnames[64];
    int nh = 0;
    for (int i = 0; i < hip_kernel_n_srcs && nh < 64; i++) {
        size_t l = strlen(hip_kernel_srcs[i].name);
        if (l > 2 && !strcmp(hip_kernel_srcs[i].name + l - 2, ".h")) {
            hdrs[nh] = hip_kernel_srcs[i].text;
            hnames[nh++] = hip_kernel_srcs[i].name;
        }
    }
    void *prog = NULL;
    int r = c->create(&prog, s->text, s->name, nh, hdrs, hnames);
    if (r)
        return err_set(e, ERR_INTERNAL, "hip: %s: create program: %s", name, c->errstr(r));
    char archopt[96], partopt[32];
    const char *opts[8];
    int no = 0;
    if (c->amd) {
        snprintf(archopt, sizeof archopt, "--offload-arch=%s", arch);
        opts[no++] = archopt;
        opts[no++] = "-O3";
        opts[no++] = "-std=c++17";
    } else {
        snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
        opts[no++] = archopt;
        opts[no++] = "-std=c++17";
        opts[no++] = "-default-device";
    }
    if (hash) {
        snprintf(partopt, sizeof partopt, "-DLLM_PART=%d", atoi(hash + 1));
        opts[no++] = partopt;
    }
    char splitopt[32];
    if (split >= 0) {
        snprintf(splitopt, sizeof splitopt, "-split-compile=%d", split);
        opts[no++] = splitopt;
    }
    r = c->compile(prog, no, opts);
    size_t ls = 0;
    char *lg = NULL;
    if (!c->log_size(prog, &ls) && ls > 1 && (lg = malloc(ls + 1))) {
        c->log(prog, lg);
        lg[ls] = 0;
    }
    if (r) {
        err_set(e, ERR_FORMAT, "hip: %s for %s does not compile (%s): %.400s", name, arch, c->errstr(r),
                lg ? lg : "");
        if (log)
            *log = lg;
        else
            free(lg);
        c->destroy(&prog);
        return ERR_FORMAT;
    }
    if (log)
        *log = lg;
    else
        free(lg);
    size_t n = 0;
    if ((r = c->code_size(prog, &n)) || !n) {
        c->destroy(&prog);
        return err_set(e, ERR_INTERNAL, "hip: %s: no device code for %s (is %s a real architecture?)", name, arch,
                       arch);
    }
    void *buf = malloc(n);
    if (!buf) {
        c->destroy(&prog);
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    }
    c->code(prog, buf);
    c->destroy(&prog);
    *code = buf;
    *size = n;
    return 0;
}

/* ---- driver ---- */

typedef int (*d_init_t)(unsigned);
typedef int (*d_int_t)(int *);
typedef int (*d_devget_t)(int *, int);
typedef int (*d_attr_t)(int *, int, int);
typedef int (*d_name_t)(char *, int, int);
typedef int (*d_ctxret_t)(void **, int);
typedef int (*d_ctxset_t)(void *);
typedef int (*d_setdev_t)(int);
typedef int (*d_alloc_t)(uint64_t *, size_t);
typedef int (*d_free_t)(uint64_t);
typedef int (*d_halloc_t)(void **, size_t, unsigned);
typedef int (*d_hfree_t)(void *);
typedef int (*d_h2d_t)(uint64_t, const void *, size_t, void *);
typedef int (*d_d2h_t)(void *, uint64_t, size_t, void *);
typedef int (*d_d2d_t)(uint64_t, uint64_t, size_t, void *);
typedef int (*d_memset_t)(uint64_t, unsigned, size_t, void *);
typedef int (*d_modload_t)(void **, const void *);
typedef int (*d_modunload_t)(void *);
typedef int (*d_getfn_t)(void **, void *, const char *);
typedef int (*d_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                          void **, void **);
/* cuLaunchKernelEx's config and attribute (cuda.h's CUlaunchConfig / CUlaunchAttribute layouts) */
struct cu_launch_attr {
    int id;
    char pad[4];
    union {
        char pad[64];
        int i;
        void *p; /* the union's alignment */
    } value;
};
struct cu_launch_config {
    unsigned gx, gy, gz, bx, by, bz, smem;
    void *stream;
    struct cu_launch_attr *attrs;
    unsigned n_attrs;
};
#define CU_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef int (*d_launchex_t)(const struct cu_launch_config *, void *, void **, void **);
typedef int (*d_fnattr_t)(void *, int, int);
#define CU_FUNC_ATTR_MAX_DYNAMIC_SHARED 8
#define CU_DEV_ATTR_SHARED_OPTIN 97 /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
typedef int (*d_modglobal_t)(uint64_t *, size_t *, void *, const char *);
typedef int (*d_streamcreate_t)(void **, unsigned);
typedef int (*d_stream_t)(void *);
typedef int (*d_capbegin_t)(void *, int);
typedef int (*d_capend_t)(void *, void **);
typedef int (*d_ginst_t)(void **, void *, unsigned long long);
typedef int (*d_glaunch_t)(void *, void *);
typedef int (*d_gdestroy_t)(void *);
typedef int (*d_meminfo_t)(size_t *, size_t *);
typedef int (*d_errstr_cu_t)(int, const char **);
typedef const char *(*d_errstr_hip_t)(int);
typedef int (*d_evcreate_t)(void **, unsigned);
typedef int (*d_evrecord_t)(void *, void *);
typedef int (*d_evelapsed_t)(float *, void *, void *);
typedef int (*d_evsync_t)(void *);

#define PROF_MAX 32768
#define FN_NAMES 256

struct mod {
    char name[32];
    void *m;
};

struct hip_rt {
    void *lib;
    bool amd;
    struct hip_rtc *rtc;
    int dev;
    void *ctx;
    void *stream;
    int warp;
    int sm_count;
    int driver_version;
    char arch[32];
    char desc[320];
    struct mod mods[HIP_MAX_MODS];
    int n_mods;
    double compile_s;       /* hip_rt_open's module loop (hip_rt_compile_s) */
    int compile_threads;    /* the threads it compiled on */
    d_init_t init;
    d_int_t dev_count, drv_version;
    d_devget_t dev_get;
    d_attr_t attr;
    d_name_t dev_name;
    d_ctxret_t ctx_retain;
    d_ctxset_t ctx_set;
    d_setdev_t set_device;
    d_alloc_t alloc;
    d_free_t free;
    d_halloc_t halloc;
    d_hfree_t hfree;
    d_h2d_t h2d;
    d_d2h_t d2h;
    d_d2d_t d2d;
    d_memset_t memset32;
    d_modload_t mod_load;
    d_modunload_t mod_unload;
    d_getfn_t get_fn;
    d_launch_t launch;
    d_launchex_t launch_ex; /* cuLaunchKernelEx when the driver has it, else NULL */
    d_fnattr_t fn_attr;     /* cuFuncSetAttribute, else NULL */
    int smem_optin;         /* most dynamic shared memory a block may ask for, bytes (0: the default only) */
    bool pdl;               /* programmatic dependent launch of marked kernels (sm_90+, not LLM170_HIP_PDL=0) */
    d_modglobal_t mod_global; /* cuModuleGetGlobal_v2, or NULL */
    d_streamcreate_t stream_create;
    d_stream_t stream_sync, stream_destroy;
    d_capbegin_t cap_begin;
    d_capend_t cap_end;
    d_ginst_t g_inst;
    d_glaunch_t g_launch;
    d_gdestroy_t g_destroy, gx_destroy;
    d_meminfo_t mem_info;
    d_errstr_cu_t errstr_cu;
    d_errstr_hip_t errstr_hip;
    d_evcreate_t ev_create;
    d_evrecord_t ev_record;
    d_evelapsed_t ev_elapsed;
    d_stream_t ev_destroy;
    d_evsync_t ev_sync;     /* cuEventSynchronize / hipEventSynchronize, or NULL (hip_rt_event_wait syncs the stream) */
    /* kernel names by handle, for profiles; fn_pdl: marked by hip_rt_fn_pdl */
    void *fn_h[FN_NAMES];
    char fn_name[FN_NAMES][48];
    bool fn_pdl[FN_NAMES];
    int n_fn;
    /* profile: events[0] before the first launch, events[i + 1] after launch i */
    bool prof;
    void **ev;
    void **ev_fn;
    int n_ev;
};

static const char *rt_errstr(const struct hip_rt *rt, int r)
{
    const char *s = NULL;
    if (rt->amd && rt->errstr_hip)
        s = rt->errstr_hip(r);
    else if (!rt->amd && rt->errstr_cu)
        rt->errstr_cu(r, &s);
    return s ? s : "unknown error";
}

#define CK(call, what)                                                                                   \
    do {                                                                                                 \
        int r_ = (call);                                                                                 \
        if (r_)                                                                                          \
            return err_set(e, ERR_INTERNAL, "hip: %s failed: %s (%d)", what, rt_errstr(rt, r_), r_); \
    } while (0)

static int load_driver(struct hip_rt *rt, bool amd, struct err *e)
{
    static const char *const cu[] = { "libcuda.so.1", "libcuda.so", NULL };
    static const char *const hip[] = { "libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so",
                                       "/opt/rocm/lib/libamdhip64.so", NULL };
    char tried[512];
    rt->lib = open_first(amd ? hip : cu, tried, sizeof tried);
    if (!rt->lib)
        return err_set(e, ERR_UNSUPPORTED, "no %s driver library found (tried %s)", amd ? "HIP" : "CUDA", tried);
    rt->amd = amd;
    struct { void **dst; const char *cu, *hip; } syms[] = {
        { (void **)&rt->init, "cuInit", "hipInit" },
        { (void **)&rt->dev_count, "cuDeviceGetCount", "hipGetDeviceCount" },
        { (void **)&rt->drv_version, "cuDriverGetVersion", "hipDriverGetVersion" },
        { (void **)&rt->dev_get, "cuDeviceGet", "hipDeviceGet" },
        { (void **)&rt->attr, "cuDeviceGetAttribute", "hipDeviceGetAttribute" },
        { (void **)&rt->dev_name, "cuDeviceGetName", "hipDeviceGetName" },
        { (void **)&rt->ctx_retain, "cuDevicePrimaryCtxRetain", NULL },
        { (void **)&rt->ctx_set, "cuCtxSetCurrent", NULL },
        { (void **)&rt->set_device, NULL, "hipSetDevice" },
        { (void **)&rt->alloc, "cuMemAlloc_v2", "hipMalloc" },
        { (void **)&rt->free, "cuMemFree_v2", "hipFree" },
        { (void **)&rt->halloc, "cuMemHostAlloc", "hipHostMalloc" },
        { (void **)&rt->hfree, "cuMemFreeHost", "hipHostFree" },
        { (void **)&rt->h2d, "cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync" },
        { (void **)&rt->d2h, "cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync" },
        { (void **)&rt->d2d, "cuMemcpyDtoDAsync_v2", "hipMemcpyDtoDAsync" },
        { (void **)&rt->memset32, "cuMemsetD32Async", "hipMemsetD32Async" },
        { (void **)&rt->mod_load, "cuModuleLoadData", "hipModuleLoadData" },
        { (void **)&rt->mod_unload, "cuModuleUnload", "hipModuleUnload" },
        { (void **)&rt->get_fn, "cuModuleGetFunction", "hipModuleGetFunction" },
        { (void **)&rt->launch, "cuLaunchKernel", "hipModuleLaunchKernel" },
        { (void **)&rt->stream_create, "cuStreamCreate", "hipStreamCreateWithFlags" },
        { (void **)&rt->stream_sync, "cuStreamSynchronize", "hipStreamSynchronize" },
        { (void **)&rt->stream_destroy, "cuStreamDestroy_v2", "hipStreamDestroy" },
        { (void **)&rt->cap_begin, "cuStreamBeginCapture_v2", "hipStreamBeginCapture" },
        { (void **)&rt->cap_end, "cuStreamEndCapture", "hipStreamEndCapture" },
        { (void **)&rt->g_inst, "cuGraphInstantiateWithFlags", "hipGraphInstantiateWithFlags" },
        { (void **)&rt->g_launch, "cuGraphLaunch", "hipGraphLaunch" },
        { (void **)&rt->g_destroy, "cuGraphDestroy", "hipGraphDestroy" },
        { (void **)&rt->gx_destroy, "cuGraphExecDestroy", "hipGraphExecDestroy" },
        { (void **)&rt->mem_info, "cuMemGetInfo_v2", "hipMemGetInfo" },
        { (void **)&rt->errstr_cu, "cuGetErrorString", NULL },
        { (void **)&rt->errstr_hip, NULL, "hipGetErrorString" },
        { (void **)&rt->ev_create, "cuEventCreate", "hipEventCreateWithFlags" },
        { (void **)&rt->ev_record, "cuEventRecord", "hipEventRecord" },
        { (void **)&rt->ev_elapsed, "cuEventElapsedTime_v2", "hipEventElapsedTime" },
        { (void **)&rt->ev_destroy, "cuEventDestroy_v2", "hipEventDestroy" },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        const char *nm = amd ? syms[i].hip : syms[i].cu;
        if (!nm)
            continue;
        *syms[i].dst = dlsym(rt->lib, nm);
        if (!*syms[i].dst && !strcmp(nm, "cuEventElapsedTime_v2"))
            *syms[i].dst = dlsym(rt->lib, "cuEventElapsedTime");
        if (!*syms[i].dst)
            return err_set(e, ERR_UNSUPPORTED, "the %s driver lacks %s (too old?)", amd ? "HIP" : "CUDA", nm);
    }
    /* optional (CUDA 11.8+): without it every kernel launches plainly */
    rt->launch_ex = amd ? NULL : (d_launchex_t)dlsym(rt->lib, "cuLaunchKernelEx");
    /* optional: without it no kernel takes more than the default 48 KiB of dynamic shared memory */
    rt->fn_attr = amd ? NULL : (d_fnattr_t)dlsym(rt->lib, "cuFuncSetAttribute");
    rt->mod_global = amd ? NULL : (d_modglobal_t)dlsym(rt->lib, "cuModuleGetGlobal_v2");
    rt->ev_sync = (d_evsync_t)dlsym(rt->lib, amd ? "hipEventSynchronize" : "cuEventSynchronize");
    return 0;
}

/* FNV-1a, 64-bit */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

void hip_cache_dir(char *dir, size_t n)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *sd = getenv("CACHE_DIRECTORY"); /* systemd's CacheDirectory=: "a[:b…]", take the first */
    if (sd && *sd && *sd != ':')
        snprintf(dir, n, "%.*s/kernels", (int)strcspn(sd, ":"), sd);
    else if (x && *x)
        snprintf(dir, n, "%s/llm170/kernels", x);
    else if (home && *home)
        snprintf(dir, n, "%s/.cache/llm170/kernels", home);
    else
        snprintf(dir, n, "/tmp/llm170-kernels");
}

static void mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    void *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long sz = ftell(f);
        if (sz > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)sz))) {
            if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
                free(buf);
                buf = NULL;
            } else {
                *n = (size_t)sz;
            }
        }
    }
    fclose(f);
    return buf;
}

/* One kernel module on its way into the context: its device code from the disk cache or the compiler
 * (fetch_code, on any thread), then loaded and, when compiled afresh, written to the cache
 * (install_module, on the thread that owns the context). */
struct mod_job {
    const char *name;   /* "gemv.cu", or "gemv.cu#2" for part 2 of a module in parts (kernels/part.h) */
    char part_name[48];
    char dir[900], path[1100];
    void *code;         /* malloc'd device code */
    size_t n;
    bool from_cache;
    int rc;             /* fetch_code's result, its message in e */
    struct err e;
};

/* The cache path of job->name and its device code: read from the cache (unless LLM170_NO_KERNEL_CACHE),
 * else compiled. Touches only the job and the read-only compiler table, so several run at once (NVRTC and
 * hipRTC compile separate programs concurrently). */
struct fetch_pool;
static void fetch_code(const struct fetch_pool *fp, struct mod_job *j);

/* fetch_code over jobs[0..n) on up to `threads` threads taking the next job from a shared counter */
struct fetch_pool {
    struct hip_rtc *rtc;
    const char *arch;
    int driver_version;
    bool cache;         /* look in the disk cache first */
    struct mod_job *jobs;
    int n;
    atomic_int next;
};

static void fetch_code(const struct fetch_pool *fp, struct mod_job *j)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < hip_kernel_n_srcs; i++) {
        h = fnv(h, hip_kernel_srcs[i].name, strlen(hip_kernel_srcs[i].name) + 1);
        h = fnv(h, hip_kernel_srcs[i].text, strlen(hip_kernel_srcs[i].text) + 1);
    }
    char key[128];
    snprintf(key, sizeof key, "%s|%s|%d|%s", j->name, fp->arch, fp->driver_version, hip_rtc_version(fp->rtc));
    h = fnv(h, key, strlen(key));
    hip_cache_dir(j->dir, sizeof j->dir);
    snprintf(j->path, sizeof j->path, "%s/%s-%s-%016llx.bin", j->dir, j->name, fp->arch, (unsigned long long)h);
    j->n = 0;
    j->code = fp->cache ? read_file(j->path, &j->n) : NULL;
    j->from_cache = j->code != NULL;
    j->rc = j->code ? 0 : hip_rtc_compile(fp->rtc, j->name, fp->arch, &j->code, &j->n, NULL, &j->e);
}

/* Load a fetched module into the context (a damaged cache entry is compiled afresh) and cache fresh
 * code. Frees the job's code. */
static int install_module(struct hip_rt *rt, struct mod_job *j, struct err *e)
{
    if (j->rc) {
        err_set(e, j->rc, "%s", j->e.msg);
        return j->rc;
    }
    void *m = NULL;
    int r = rt->mod_load(&m, j->code);
    if (r && j->from_cache) { /* a stale or damaged cache entry: compile afresh */
        free(j->code);
        j->code = NULL;
        int rc = hip_rtc_compile(rt->rtc, j->name, rt->arch, &j->code, &j->n, NULL, e);
        if (rc)
            return rc;
        j->from_cache = false;
        r = rt->mod_load(&m, j->code);
    }
    if (r) {
        free(j->code);
        j->code = NULL;
        return err_set(e, ERR_INTERNAL, "hip: loading module %s for %s failed: %s", j->name, rt->arch,
                       rt_errstr(rt, r));
    }
    if (!j->from_cache) {
        mkdirs(j->dir);
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", j->path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(j->code, 1, j->n, f) == j->n;
            ok = (fclose(f) == 0) && ok;
            if (!ok || rename(tmp, j->path) != 0)
                unlink(tmp);
        }
    }
    free(j->code);
    j->code = NULL;
    snprintf(rt->mods[rt->n_mods].name, sizeof rt->mods[0].name, "%s", j->name);
    rt->mods[rt->n_mods++].m = m;
    return 0;
}

static void *fetch_main(void *arg)
{
    struct fetch_pool *fp = arg;
    for (int i; (i = atomic_fetch_add(&fp->next, 1)) < fp->n;)
        fetch_code(fp, &fp->jobs[i]);
    return NULL;
}

/* jobs[0..HIP_MAX_MODS) ← the embedded modules (.cu) in source order, a module whose source says
 * "llm170-parts: N" as its N parts (kernels/part.h: compiled at once, the slowest part bounds its time);
 * returns how many */
static int module_jobs(struct mod_job jobs[HIP_MAX_MODS])
{
    int n = 0;
    for (int i = 0; i < hip_kernel_n_srcs && n < HIP_MAX_MODS; i++) {
        const char *nm = hip_kernel_srcs[i].name;
        size_t l = strlen(nm);
        if (l <= 3 || strcmp(nm + l - 3, ".cu"))
            continue;
        const char *pm = strstr(hip_kernel_srcs[i].text, "llm170-parts: ");
        const int parts = pm ? atoi(pm + strlen("llm170-parts: ")) : 0;
        if (parts < 2) {
            memset(&jobs[n], 0, sizeof jobs[n]);
            jobs[n++].name = nm;
            continue;
        }
        for (int p = 0; p < parts && n < HIP_MAX_MODS; p++, n++) {
            memset(&jobs[n], 0, sizeof jobs[n]);
            snprintf(jobs[n].part_name, sizeof jobs[n].part_name, "%s#%d", nm, p);
            jobs[n].name = jobs[n].part_name;
        }
    }
    return n;
}

/* fetch_code for every job of fp on `threads` threads (0: one per online core; at most one a job, 32);
 * returns the threads it ran on. Each thread takes the next job until none is left. */
static int fetch_all(struct fetch_pool *fp, int threads)
{
    if (threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc > 0 ? (int)nc : 1;
    }
    if (threads > fp->n)
        threads = fp->n > 0 ? fp->n : 1;
    atomic_init(&fp->next, 0);
    pthread_t th[32];
    int started = 0;
    for (int t = 1; t < threads && started < 32; t++) /* this thread is the first worker */
        if (pthread_create(&th[started], NULL, fetch_main, fp) == 0)
            started++;
    fetch_main(fp);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    return started + 1;
}

int hip_rtc_module_names(char (*names)[48], int max)
{
    struct mod_job jobs[HIP_MAX_MODS];
    const int n = module_jobs(jobs);
    for (int i = 0; i < n && i < max; i++)
        snprintf(names[i], 48, "%s", jobs[i].name);
    return n < max ? n : max;
}

int hip_rtc_compile_all(struct hip_rtc *c, const char *arch, int threads, void **code, size_t *size, int max,
                        int *n_out, struct err *e)
{
    struct mod_job jobs[HIP_MAX_MODS];
    struct fetch_pool fp = { .rtc = c, .arch = arch, .cache = false, .jobs = jobs, .n = module_jobs(jobs) };
    const int used = fetch_all(&fp, threads);
    int rc = 0;
    *n_out = 0;
    for (int i = 0; i < fp.n; i++) {
        if (!rc && jobs[i].rc)
            rc = err_set(e, jobs[i].rc, "%s", jobs[i].e.msg);
        if (!rc && i < max) {
            code[i] = jobs[i].code;
            size[i] = jobs[i].n;
            *n_out = i + 1;
        } else {
            free(jobs[i].code);
        }
    }
    if (rc) {
        for (int i = 0; i < *n_out; i++)
            free(code[i]);
        *n_out = 0;
    }
    return rc ? rc : used;
}

/* Every embedded module (.cu) into the context. The compiles (or cache reads) run on `threads` threads
 * (0: one per online core; capped by the modules), the loads after them on this thread in source order,
 * so a failure names the first failing module as a serial run would. */
static int load_modules(struct hip_rt *rt, int threads, struct err *e)
{
    struct mod_job jobs[HIP_MAX_MODS];
    struct fetch_pool fp = { .rtc = rt->rtc, .arch = rt->arch, .driver_version = rt->driver_version,
                             .cache = !getenv("LLM170_NO_KERNEL_CACHE"), .jobs = jobs, .n = module_jobs(jobs) };
    const int n = fp.n;
    rt->compile_threads = fetch_all(&fp, threads);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!rc)
            rc = install_module(rt, &jobs[i], e);
        free(jobs[i].code); /* the rest after a failure */
    }
    return rc;
}

int hip_rt_open(struct hip_rt **out, struct err *e) { return hip_rt_open_ex(out, 0, -1, -1, e); }

int hip_rt_open_ex(struct hip_rt **out, int compile_threads, int split_compile, int device, struct err *e)
{
    *out = NULL;
    struct hip_rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    /* NVIDIA first, then AMD; LLM170_HIP_VENDOR=amd|nvidia forces one */
    const char *vendor = getenv("LLM170_HIP_VENDOR");
    bool try_cu = !vendor || strcmp(vendor, "amd") != 0, try_amd = !vendor || strcmp(vendor, "nvidia") != 0;
    struct err e1 = { 0 }, e2 = { 0 };
    int rc = ERR_UNSUPPORTED;
    if (try_cu)
        rc = load_driver(rt, false, &e1);
    if (rc && try_amd) {
        if (rt->lib)
            dlclose(rt->lib);
        rt->lib = NULL;
        rc = load_driver(rt, true, &e2);
    }
    if (rc) {
        err_set(e, ERR_UNSUPPORTED, "hip backend unavailable: %s%s%s", e1.msg, e1.msg[0] && e2.msg[0] ? "; " : "",
                e2.msg);
        hip_rt_close(rt);
        return ERR_UNSUPPORTED;
    }
    int r = rt->init(0);
    if (r) {
        err_set(e, ERR_UNSUPPORTED, "hip backend unavailable: driver init failed: %s (%d)", rt_errstr(rt, r), r);
        hip_rt_close(rt);
        return ERR_UNSUPPORTED;
    }
    int ndev = 0;
    if (rt->dev_count(&ndev) || ndev < 1) {
        err_set(e, ERR_UNSUPPORTED, "hip backend unavailable: no GPU device");
        hip_rt_close(rt);
        return ERR_UNSUPPORTED;
    }
    const char *ds = getenv("LLM170_HIP_DEVICE");
    int ord = device >= 0 ? device : ds ? atoi(ds) : 0;
    if (ord < 0 || ord >= ndev) {
        if (device >= 0)
            err_set(e, ERR_INVALID, "hip: GPU %d asked for, but this machine has %d device(s) (0..%d)", ord, ndev,
                    ndev - 1);
        else
            err_set(e, ERR_RANGE, "hip: LLM170_HIP_DEVICE=%d but %d device(s)", ord, ndev);
        hip_rt_close(rt);
        return device >= 0 ? ERR_INVALID : ERR_RANGE;
    }
#define CKO(call, what)                                                                                  \
    do {                                                                                                 \
        int r_ = (call);                                                                                 \
        if (r_) {                                                                                        \
            err_set(e, ERR_INTERNAL, "hip: %s failed: %s (%d)", what, rt_errstr(rt, r_), r_);            \
            hip_rt_close(rt);                                                                            \
            return ERR_INTERNAL;                                                                         \
        }                                                                                                \
    } while (0)
    CKO(rt->dev_get(&rt->dev, ord), "device get");
    rt->drv_version(&rt->driver_version);
    char name[128] = "?";
    rt->dev_name(name, sizeof name, rt->dev);
    if (rt->amd) {
        CKO(rt->set_device(rt->dev), "set device");
        /* the architecture name is in hipDeviceProp_t, whose layout changes between ROCm releases */
        const char *a = getenv("LLM170_HIP_ARCH");
        if (!a || !*a) {
            err_set(e, ERR_UNSUPPORTED, "hip: on AMD set LLM170_HIP_ARCH to the device's gfx name (e.g. gfx942)");
            hip_rt_close(rt);
            return ERR_UNSUPPORTED;
        }
        snprintf(rt->arch, sizeof rt->arch, "%s", a);
        rt->warp = (!strncmp(a, "gfx10", 5) || !strncmp(a, "gfx11", 5) || !strncmp(a, "gfx12", 5)) ? 32 : 64;
        rt->sm_count = 64;
    } else {
        int maj = 0, min = 0;
        CKO(rt->attr(&maj, 75, rt->dev), "compute capability");
        CKO(rt->attr(&min, 76, rt->dev), "compute capability");
        CKO(rt->attr(&rt->sm_count, 16, rt->dev), "multiprocessor count");
        if (rt->fn_attr && rt->attr(&rt->smem_optin, CU_DEV_ATTR_SHARED_OPTIN, rt->dev))
            rt->smem_optin = 0;
        /* compute capability 9.0 compiles for sm_90a: its modules may use wgmma (kernels/wgmma.cu), and the
         * code runs on that architecture only, which is the device's */
        snprintf(rt->arch, sizeof rt->arch, "sm_%d%d%s", maj, min, maj == 9 && min == 0 ? "a" : "");
        rt->warp = 32;
        /* griddepcontrol needs sm_90; LLM170_HIP_PDL=0 launches every kernel plainly */
        const char *pe = getenv("LLM170_HIP_PDL");
        rt->pdl = rt->launch_ex && maj >= 9 && !(pe && !strcmp(pe, "0"));
        CKO(rt->ctx_retain(&rt->ctx, rt->dev), "primary context");
        CKO(rt->ctx_set(rt->ctx), "set context");
    }
    CKO(rt->stream_create(&rt->stream, 1 /* non-blocking */), "stream create");
    rc = hip_rtc_open(&rt->rtc, rt->amd, e);
    if (rc) {
        err_prefix(e, "hip backend unavailable");
        hip_rt_close(rt);
        return rc;
    }
    hip_rtc_set_split_compile(rt->rtc, split_compile);
    snprintf(rt->desc, sizeof rt->desc, "%s (%s, %d %s, driver %d.%d, %s%s)", name, rt->arch, rt->sm_count,
             rt->amd ? "CUs" : "SMs", rt->driver_version / 1000, (rt->driver_version % 1000) / 10,
             hip_rtc_version(rt->rtc), rt->pdl ? ", PDL" : "");
    const uint64_t t_mods = clock_now_ns();
    rc = load_modules(rt, compile_threads, e);
    if (rc) {
        hip_rt_close(rt);
        return rc;
    }
    rt->compile_s = (double)(clock_now_ns() - t_mods) / 1e9;
    /* where a marked kernel lets the next one launch (kernels/prelude.h): after its wait, unless
     * LLM170_HIP_PDL_EARLY=1 (at entry: measured slower on qwen3-8b and qwen3-30b-a3b,
     * docs/benchmarks.md); modules without PDL kernels have no such constant */
    const char *ee = getenv("LLM170_HIP_PDL_EARLY");
    const int early = rt->pdl && ee && !strcmp(ee, "1");
    int n_early = 0;
    for (int i = 0; i < rt->n_mods && early && rt->mod_global; i++) {
        uint64_t p = 0;
        size_t sz = 0;
        if (!rt->mod_global(&p, &sz, rt->mods[i].m, "llm_pdl_early") && sz == sizeof early) {
            CKO(rt->h2d(p, &early, sizeof early, rt->stream), "PDL mode");
            n_early++;
        }
    }
    CKO(rt->stream_sync(rt->stream), "stream synchronize");
    if (early) { /* "…, PDL)" → "…, PDL early in N modules)" */
        size_t l = strlen(rt->desc);
        if (l > 0 && rt->desc[l - 1] == ')')
            snprintf(rt->desc + l - 1, sizeof rt->desc - (l - 1), " early in %d modules)", n_early);
    }
    *out = rt;
    return 0;
#undef CKO
}

void hip_rt_close(struct hip_rt *rt)
{
    if (!rt)
        return;
    if (rt->ev) {
        for (int i = 0; i < PROF_MAX + 1; i++)
            if (rt->ev[i])
                rt->ev_destroy(rt->ev[i]);
        free(rt->ev);
        free(rt->ev_fn);
    }
    for (int i = 0; i < rt->n_mods; i++)
        rt->mod_unload(rt->mods[i].m);
    if (rt->stream)
        rt->stream_destroy(rt->stream);
    hip_rtc_close(rt->rtc);
    /* the primary context stays (it is the process's, shared with other users of the driver) */
    if (rt->lib)
        dlclose(rt->lib);
    free(rt);
}

const char *hip_rt_describe(const struct hip_rt *rt) { return rt->desc; }
const char *hip_rt_arch(const struct hip_rt *rt) { return rt->arch; }
int hip_rt_sm_count(const struct hip_rt *rt) { return rt->sm_count; }
int hip_rt_smem_optin(const struct hip_rt *rt) { return rt->smem_optin; }

int hip_rt_fn_smem(struct hip_rt *rt, hip_fn f, int bytes, struct err *e)
{
    if (!rt->fn_attr || bytes > rt->smem_optin)
        return err_set(e, ERR_UNSUPPORTED, "hip: a kernel cannot take %d bytes of shared memory here", bytes);
    CK(rt->fn_attr(f, CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, bytes), "kernel shared memory limit");
    return 0;
}
int hip_rt_warp(const struct hip_rt *rt) { return rt->warp; }

/* CU_EVENT_DISABLE_TIMING = hipEventDisableTiming: an ordering marker, cheaper than a timed event */
#define EV_NO_TIMING 0x2

int hip_rt_event_create(struct hip_rt *rt, hip_event *out, struct err *e)
{
    *out = NULL;
    CK(rt->ev_create(out, EV_NO_TIMING), "event create");
    return 0;
}

int hip_rt_event_record(struct hip_rt *rt, hip_event ev, struct err *e)
{
    CK(rt->ev_record(ev, rt->stream), "event record");
    return 0;
}

int hip_rt_event_wait(struct hip_rt *rt, hip_event ev, struct err *e)
{
    if (!rt->ev_sync) /* an old driver: everything before it is done once the stream is */
        return hip_rt_sync(rt, e);
    CK(rt->ev_sync(ev), "event synchronize");
    return 0;
}

void hip_rt_event_free(struct hip_rt *rt, hip_event ev)
{
    if (ev)
        rt->ev_destroy(ev);
}

int hip_rt_mem_info(struct hip_rt *rt, size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    return rt->mem_info(free_b, total_b) ? ERR_INTERNAL : 0;
}

double hip_rt_compile_s(const struct hip_rt *rt) { return rt->compile_s; }
int hip_rt_compile_threads(const struct hip_rt *rt) { return rt->compile_threads; }

size_t hip_rt_free_mem(struct hip_rt *rt)
{
    size_t f = 0, t = 0;
    if (rt->mem_info(&f, &t))
        return 0;
    return f;
}

/* The handle's slot in the name table (added when new), or -1 when the table is full. */
static int fn_slot(struct hip_rt *rt, void *f, const char *name)
{
    for (int k = 0; k < rt->n_fn; k++)
        if (rt->fn_h[k] == f)
            return k;
    if (rt->n_fn == FN_NAMES)
        return -1;
    rt->fn_h[rt->n_fn] = f;
    rt->fn_pdl[rt->n_fn] = false;
    snprintf(rt->fn_name[rt->n_fn], sizeof rt->fn_name[0], "%s", name);
    return rt->n_fn++;
}

int hip_rt_fn(struct hip_rt *rt, const char *name, hip_fn *out, struct err *e)
{
    for (int i = 0; i < rt->n_mods; i++) {
        void *f = NULL;
        if (!rt->get_fn(&f, rt->mods[i].m, name) && f) {
            *out = f;
            fn_slot(rt, f, name);
            return 0;
        }
    }
    return err_set(e, ERR_NOTFOUND, "hip: no kernel named %s in any module", name);
}

int hip_rt_fn_pdl(struct hip_rt *rt, const char *name, hip_fn *out, struct err *e)
{
    int rc = hip_rt_fn(rt, name, out, e);
    if (rc)
        return rc;
    const int k = fn_slot(rt, *out, name);
    if (k >= 0) /* a full table only means a plain launch */
        rt->fn_pdl[k] = true;
    return 0;
}

bool hip_rt_pdl(const struct hip_rt *rt) { return rt->pdl; }

/* Whether f launches with the programmatic attribute: PDL on and f marked. */
static bool fn_is_pdl(const struct hip_rt *rt, const void *f)
{
    if (!rt->pdl)
        return false;
    for (int k = 0; k < rt->n_fn; k++)
        if (rt->fn_h[k] == f)
            return rt->fn_pdl[k];
    return false;
}

int hip_rt_malloc(struct hip_rt *rt, size_t n, struct hip_dptr *out, struct err *e)
{
    *out = HIP_DNULL;
    int r = rt->alloc(&out->a, n ? n : 4);
    if (r)
        return err_set(e, ERR_NOMEM, "hip: device allocation of %zu bytes failed: %s (free %zu)", n, rt_errstr(rt, r),
                       hip_rt_free_mem(rt));
    return 0;
}

void hip_rt_free(struct hip_rt *rt, struct hip_dptr p)
{
    if (!hip_dptr_null(p))
        rt->free(p.a);
}

int hip_rt_host_alloc(struct hip_rt *rt, size_t n, void **out, struct err *e)
{
    *out = NULL;
    int r = rt->halloc(out, n ? n : 4, 0);
    if (r)
        return err_set(e, ERR_NOMEM, "hip: pinned allocation of %zu bytes failed: %s", n, rt_errstr(rt, r));
    return 0;
}

void hip_rt_host_free(struct hip_rt *rt, void *p)
{
    if (p)
        rt->hfree(p);
}

int hip_rt_h2d(struct hip_rt *rt, struct hip_dptr dst, const void *src, size_t n, struct err *e)
{
    CK(rt->h2d(dst.a, src, n, rt->stream), "host→device copy");
    return 0;
}

int hip_rt_d2h(struct hip_rt *rt, void *dst, struct hip_dptr src, size_t n, struct err *e)
{
    CK(rt->d2h(dst, src.a, n, rt->stream), "device→host copy");
    return 0;
}

int hip_rt_d2d(struct hip_rt *rt, struct hip_dptr dst, struct hip_dptr src, size_t n, struct err *e)
{
    CK(rt->d2d(dst.a, src.a, n, rt->stream), "device→device copy");
    return 0;
}

int hip_rt_memset32(struct hip_rt *rt, struct hip_dptr dst, uint32_t v, size_t count, struct err *e)
{
    CK(rt->memset32(dst.a, v, count, rt->stream), "memset");
    return 0;
}

int hip_rt_launch(struct hip_rt *rt, hip_fn f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **params,
                  struct err *e)
{
    return hip_rt_launch_smem(rt, f, gx, gy, gz, bx, 0, params, e);
}

int hip_rt_launch_smem(struct hip_rt *rt, hip_fn f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem,
                       void **params, struct err *e)
{
    if (!gx || !gy || !gz)
        return 0;
    if (fn_is_pdl(rt, f)) {
        /* may overlap the kernel before it on the stream (a programmatic edge when captured): the
         * kernel orders itself with griddepcontrol.wait (kernels/prelude.h) */
        struct cu_launch_attr at;
        memset(&at, 0, sizeof at);
        at.id = CU_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION;
        at.value.i = 1;
        const struct cu_launch_config cf = { .gx = gx, .gy = gy, .gz = gz, .bx = bx, .by = 1, .bz = 1, .smem = smem,
                                             .stream = rt->stream, .attrs = &at, .n_attrs = 1 };
        CK(rt->launch_ex(&cf, f, params, NULL), "kernel launch (programmatic)");
    } else {
        CK(rt->launch(f, gx, gy, gz, bx, 1, 1, smem, rt->stream, params, NULL), "kernel launch");
    }
    if (rt->prof && rt->n_ev < PROF_MAX) {
        rt->ev_fn[rt->n_ev] = f;
        CK(rt->ev_record(rt->ev[++rt->n_ev], rt->stream), "event record");
    }
    return 0;
}

int hip_rt_profile(struct hip_rt *rt, bool on, struct err *e)
{
    if (on && !rt->ev) {
        rt->ev = calloc(PROF_MAX + 1, sizeof(void *));
        rt->ev_fn = calloc(PROF_MAX, sizeof(void *));
        if (!rt->ev || !rt->ev_fn)
            return err_set(e, ERR_NOMEM, "hip: out of memory");
        for (int i = 0; i < PROF_MAX + 1; i++)
            CK(rt->ev_create(&rt->ev[i], 0), "event create");
    }
    rt->prof = on;
    rt->n_ev = 0;
    if (on)
        CK(rt->ev_record(rt->ev[0], rt->stream), "event record");
    return 0;
}

int hip_rt_profile_report(struct hip_rt *rt, struct hip_prof_row *rows, int max, struct err *e)
{
    int rc = hip_rt_sync(rt, e);
    if (rc)
        return rc;
    int n = 0;
    for (int i = 0; i < rt->n_ev; i++) {
        float ms = 0;
        CK(rt->ev_elapsed(&ms, rt->ev[i], rt->ev[i + 1]), "event elapsed");
        const char *nm = "?";
        for (int k = 0; k < rt->n_fn; k++)
            if (rt->fn_h[k] == rt->ev_fn[i])
                nm = rt->fn_name[k];
        int j = 0;
        while (j < n && strcmp(rows[j].name, nm))
            j++;
        if (j == n) {
            if (n == max)
                continue;
            snprintf(rows[n].name, sizeof rows[n].name, "%s", nm);
            rows[n].calls = 0;
            rows[n].ms = 0;
            n++;
        }
        rows[j].calls++;
        rows[j].ms += ms;
    }
    rt->n_ev = 0;
    if (rt->prof)
        CK(rt->ev_record(rt->ev[0], rt->stream), "event record");
    return n;
}

int hip_rt_bind(struct hip_rt *rt, struct err *e)
{
    /* A CUDA context is current per thread: the worker's scheduler thread is
     * not the thread that opened the device, so every entry point binds it. */
    if (rt->amd)
        CK(rt->set_device(rt->dev), "set device");
    else
        CK(rt->ctx_set(rt->ctx), "set context");
    return 0;
}

int hip_rt_sync(struct hip_rt *rt, struct err *e)
{
    CK(rt->stream_sync(rt->stream), "stream synchronize (a kernel failed?)");
    return 0;
}

int hip_rt_capture_begin(struct hip_rt *rt, struct err *e)
{
    CK(rt->cap_begin(rt->stream, 2 /* relaxed */), "graph capture begin");
    return 0;
}

int hip_rt_capture_end(struct hip_rt *rt, hip_graph *out, struct err *e)
{
    void *g = NULL, *x = NULL;
    CK(rt->cap_end(rt->stream, &g), "graph capture end");
    int r = rt->g_inst(&x, g, 0);
    rt->g_destroy(g);
    if (r)
        return err_set(e, ERR_INTERNAL, "hip: graph instantiate failed: %s", rt_errstr(rt, r));
    *out = x;
    return 0;
}

int hip_rt_graph_launch(struct hip_rt *rt, hip_graph g, struct err *e)
{
    CK(rt->g_launch(g, rt->stream), "graph launch");
    return 0;
}

void hip_rt_graph_free(struct hip_rt *rt, hip_graph g)
{
    if (g)
        rt->gx_destroy(g);
}
