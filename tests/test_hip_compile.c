/* test_hip_compile — every embedded GPU kernel source compiles through the
 * run-time compiler for sm_90a (NVRTC; no GPU needed: what an H100 / H200
 * compiles for, the warpgroup-MMA tiles of kernels/wgmma.cu included), and the embedded
 * copies match kernels/ (scripts/embed_kernels.sh was run). SKIPs when
 * NVRTC cannot be loaded. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../worker/hip/hip_rt.h"
#include "check.h"

static void embedded_sources_current(void)
{
    int checked = 0, missing = 0;
    for (int i = 0; i < hip_kernel_n_srcs; i++) {
        char path[256];
        snprintf(path, sizeof path, "kernels/%s", hip_kernel_srcs[i].name);
        char *disk = check_read_file(path, NULL);
        if (!disk) {
            printf("# %s: embedded, but not in kernels/\n", path);
            missing++;
            continue;
        }
        CHECK(!strcmp(disk, hip_kernel_srcs[i].text), "%s differs from its embedded copy: run scripts/embed_kernels.sh",
              path);
        free(disk);
        checked++;
    }
    if (!checked)
        SKIP("kernels/ not found from the working directory");
    CHECK(missing == 0, "%d embedded sources have no file in kernels/: run scripts/embed_kernels.sh", missing);
    CHECK(hip_kernel_n_srcs >= 4, "only %d embedded sources", hip_kernel_n_srcs);
}

/* every_kernel_compiles_sm90's device code, module by module in source order, for serial compiles of a few
 * to match (compiling everything twice, once per thread count, took 4 of the suite's minutes on 2 cores) */
static void *par_code[HIP_MAX_MODS];
static size_t par_size[HIP_MAX_MODS];
static int n_par;
static char mod_names[HIP_MAX_MODS][48];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* every module compiles, as hip_rt_open compiles them (a module in parts, kernels/part.h, part by part),
 * on the host's threads (two at least, so the threaded path is the one run) */
static void every_kernel_compiles_sm90(void)
{
    struct hip_rtc *c = NULL;
    struct err e = { 0 };
    if (hip_rtc_open(&c, false, &e) != 0) {
        static char why[600];
        snprintf(why, sizeof why, "%s", e.msg);
        SKIP(why);
    }
    printf("# %s\n", hip_rtc_version(c));
    const int nn = hip_rtc_module_names(mod_names, HIP_MAX_MODS);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = cores > 2 ? (int)cores : 2;
    const double t0 = now_s();
    const int used = hip_rtc_compile_all(c, "sm_90a", threads, par_code, par_size, HIP_MAX_MODS, &n_par, &e);
    CHECK(used >= 1 && n_par == nn, "%d threads: rc %d, %d modules of %d: %s", threads, used, n_par, nn, e.msg);
    for (int i = 0; i < n_par; i++)
        CHECK(par_size[i] > 64, "%s: %zu bytes of cubin", mod_names[i], par_size[i]);
    printf("# %d modules: %.1f s on %d threads (%ld cores here)\n", n_par, now_s() - t0, used, cores);
    /* the warpgroup-MMA tiles are compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL): the q4_K part
     * must hold them, or a Hopper device would silently keep the mma.sync tiles */
    bool wg = false;
    for (int i = 0; i < n_par; i++)
        if (!strcmp(mod_names[i], "wgmma.cu#2"))
            wg = par_code[i] && memmem(par_code[i], par_size[i], "wgmma128_q4_K", 13) != NULL;
    CHECK(wg, "wgmma.cu's q4_K part for sm_90a has no wgmma128_q4_K");
    CHECK(n_par >= 4, "compiled %d modules", n_par);
    hip_rtc_close(c);
}

/* hip_rt_open's threaded compile gives a module the same device code as a compile on this thread alone:
 * the first module and the three smallest with kernels in them (over 4 KiB: a part of no weight type is
 * an empty module), compiled again one after another */
static void parallel_compile_matches_serial(void)
{
    struct hip_rtc *c = NULL;
    struct err e = { 0 };
    if (hip_rtc_open(&c, false, &e) != 0) {
        static char why[600];
        snprintf(why, sizeof why, "%s", e.msg);
        SKIP(why);
    }
    if (n_par < 4) {
        hip_rtc_close(c);
        SKIP("every_kernel_compiles_sm90 kept no compile to compare with");
    }
    int pick[4] = { 0, -1, -1, -1 };
    for (int k = 1; k < 4; k++)
        for (int i = 1; i < n_par; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken = taken || pick[j] == i;
            if (!taken && par_size[i] > 4096 && (pick[k] < 0 || par_size[i] < par_size[pick[k]]))
                pick[k] = i;
        }
    for (int k = 0; k < 4 && pick[k] >= 0; k++) {
        const int i = pick[k];
        void *code = NULL;
        size_t size = 0;
        char *log = NULL;
        const double t0 = now_s();
        const int rc = hip_rtc_compile(c, mod_names[i], "sm_90a", &code, &size, &log, &e);
        CHECK(rc == 0, "%s: %s", mod_names[i], e.msg);
        CHECK(rc == 0 && size == par_size[i] && !memcmp(code, par_code[i], size), "%s: %zu bytes alone vs %zu threaded",
              mod_names[i], size, par_size[i]);
        printf("# %s alone: %.1f s, %zu bytes, the same as threaded\n", mod_names[i], now_s() - t0, size);
        if (log && strstr(log, "warning"))
            printf("# %s warnings:\n%s\n", mod_names[i], log);
        free(code);
        free(log);
    }
    for (int i = 0; i < HIP_MAX_MODS; i++) {
        free(par_code[i]);
        par_code[i] = NULL;
    }
    /* NVRTC's -split-compile (LLM170_HIP_SPLIT_COMPILE) compiles a module too (not byte for byte the same
     * code; the GPU tests run it) */
    hip_rtc_set_split_compile(c, 0);
    void *sc = NULL;
    size_t ss = 0;
    int rs = hip_rtc_compile(c, "attn.cu", "sm_90a", &sc, &ss, NULL, &e);
    CHECK(rs == 0 && ss > 64, "attn.cu with -split-compile=0: rc %d, %zu bytes: %s", rs, ss, e.msg);
    free(sc);
    hip_rtc_set_split_compile(c, -1);
    /* a bad architecture fails with a message and hands back nothing */
    int n = -1;
    void *none[16] = { 0 };
    size_t szn[16];
    int rc = hip_rtc_compile_all(c, "sm_1", 3, none, szn, 16, &n, &e);
    CHECK(rc < 0 && n == 0 && none[0] == NULL && e.msg[0], "sm_1: rc %d, n %d, '%s'", rc, n, e.msg);
    hip_rtc_close(c);
}

static void backend_reports_unavailable_cleanly(void)
{
    /* on a machine without a GPU driver this must be an error with a message, never a crash */
    struct hip_rt *rt = NULL;
    struct err e = { 0 };
    int rc = hip_rt_open(&rt, &e);
    if (rc == 0) {
        /* with a GPU: the backend opened names its device, and a device it cannot use (an
         * ordinal past the last one) is the same kind of clean refusal, with no handle left */
        const char *d = hip_rt_describe(rt);
        CHECK(d && d[0], "an opened backend describes its device");
        printf("# GPU present: %s\n", d ? d : "(null)");
        hip_rt_close(rt);
        const char *old = getenv("LLM170_HIP_DEVICE");
        char *keep = old ? strdup(old) : NULL;
        setenv("LLM170_HIP_DEVICE", "4096", 1);
        struct err e2 = { 0 };
        rt = NULL;
        rc = hip_rt_open(&rt, &e2);
        CHECK(rc != 0 && rt == NULL && strstr(e2.msg, "LLM170_HIP_DEVICE"),
              "device 4096 refused with a message: rc %d, '%s'", rc, e2.msg);
        printf("# %s\n", e2.msg);
        if (!rc)
            hip_rt_close(rt);
        if (keep)
            setenv("LLM170_HIP_DEVICE", keep, 1);
        else
            unsetenv("LLM170_HIP_DEVICE");
        free(keep);
        return;
    }
    CHECK(rt == NULL && e.msg[0] != 0, "no message for rc %d", rc);
    printf("# %s\n", e.msg);
}

int main(void)
{
    RUN(embedded_sources_current);
    RUN(every_kernel_compiles_sm90);
    RUN(parallel_compile_matches_serial);
    RUN(backend_reports_unavailable_cleanly);
    CHECK_EXIT();
}
