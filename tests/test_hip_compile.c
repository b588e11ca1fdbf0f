/* test_hip_compile — every embedded GPU kernel source compiles through the
 * run-time compiler for sm_90 (NVRTC; no GPU needed), and the embedded
 * copies match kernels/ (scripts/embed_kernels.sh was run). SKIPs when
 * NVRTC cannot be loaded. */
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

/* every_kernel_compiles_sm90's device code, module by module in source order, for the parallel compile
 * to match (one compile of everything is a minute or two on a small machine) */
static void *serial_code[HIP_MAX_MODS];
static size_t serial_size[HIP_MAX_MODS];
static int n_serial;
static double serial_s;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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
    int n = 0;
    const double t0 = now_s();
    /* the modules as hip_rt_open compiles them: a module in parts (kernels/part.h) part by part */
    static char names[HIP_MAX_MODS][48];
    const int nn = hip_rtc_module_names(names, HIP_MAX_MODS);
    for (int i = 0; i < nn; i++) {
        const char *nm = names[i];
        void *code = NULL;
        size_t size = 0;
        char *log = NULL;
        const double tm = now_s();
        int rc = hip_rtc_compile(c, nm, "sm_90", &code, &size, &log, &e);
        printf("# %s: %.1f s, %zu bytes\n", nm, now_s() - tm, size); /* the longest bounds a threaded compile */
        CHECK(rc == 0, "%s: %s", nm, e.msg);
        if (rc == 0) {
            CHECK(size > 64, "%s: %zu bytes of cubin", nm, size);
            n++;
            if (log && strstr(log, "warning"))
                printf("# %s warnings:\n%s\n", nm, log);
        } else if (log) {
            printf("%s\n", log);
        }
        if (rc == 0 && n_serial < HIP_MAX_MODS && n_serial == n - 1) { /* kept while every module before compiled */
            serial_code[n_serial] = code;
            serial_size[n_serial++] = size;
        } else {
            free(code);
        }
        free(log);
    }
    serial_s = now_s() - t0;
    CHECK(n >= 4, "compiled %d modules", n);
    hip_rtc_close(c);
}

/* hip_rt_open's compile step on several host threads (hip_rtc_compile_all, the code it runs on a device
 * before loading the modules) gives every module the same device code as one thread does, in source
 * order; the times are printed, not judged. */
static void parallel_compile_matches_serial(void)
{
    struct hip_rtc *c = NULL;
    struct err e = { 0 };
    if (hip_rtc_open(&c, false, &e) != 0) {
        static char why[600];
        snprintf(why, sizeof why, "%s", e.msg);
        SKIP(why);
    }
    if (n_serial < 4) {
        hip_rtc_close(c);
        SKIP("every_kernel_compiles_sm90 kept no serial compile to compare with");
    }
    void *par[HIP_MAX_MODS] = { 0 };
    size_t szp[HIP_MAX_MODS] = { 0 };
    int np = 0;
    const double t1 = now_s();
    int usedp = hip_rtc_compile_all(c, "sm_90", 4, par, szp, HIP_MAX_MODS, &np, &e);
    const double t2 = now_s();
    CHECK(usedp == 4 && np == n_serial, "4 threads: rc %d, %d modules of %d: %s", usedp, np, n_serial, e.msg);
    printf("# %d modules: %.1f s one after another, %.1f s on %d threads (%ld cores here)\n", n_serial, serial_s,
           t2 - t1, usedp, sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < n_serial && i < np; i++)
        CHECK(serial_size[i] == szp[i] && !memcmp(serial_code[i], par[i], szp[i]), "module %d: %zu vs %zu bytes", i,
              serial_size[i], szp[i]);
    for (int i = 0; i < HIP_MAX_MODS; i++) {
        free(par[i]);
        free(serial_code[i]);
        serial_code[i] = NULL;
    }
    /* NVRTC's -split-compile (LLM170_HIP_SPLIT_COMPILE) compiles a module too (not byte for byte the same
     * code; the GPU tests run it) */
    hip_rtc_set_split_compile(c, 0);
    void *sc = NULL;
    size_t ss = 0;
    int rs = hip_rtc_compile(c, "attn.cu", "sm_90", &sc, &ss, NULL, &e);
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
