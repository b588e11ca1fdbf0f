/* test_hip_compile — every embedded GPU kernel source compiles through the
 * run-time compiler for sm_90 (NVRTC; no GPU needed), and the embedded
 * copies match kernels/ (scripts/embed_kernels.sh was run). SKIPs when
 * NVRTC cannot be loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int i = 0; i < hip_kernel_n_srcs; i++) {
        const char *nm = hip_kernel_srcs[i].name;
        size_t l = strlen(nm);
        if (l < 3 || strcmp(nm + l - 3, ".cu"))
            continue;
        void *code = NULL;
        size_t size = 0;
        char *log = NULL;
        int rc = hip_rtc_compile(c, nm, "sm_90", &code, &size, &log, &e);
        CHECK(rc == 0, "%s: %s", nm, e.msg);
        if (rc == 0) {
            CHECK(size > 64, "%s: %zu bytes of cubin", nm, size);
            n++;
            if (log && strstr(log, "warning"))
                printf("# %s warnings:\n%s\n", nm, log);
        } else if (log) {
            printf("%s\n", log);
        }
        free(code);
        free(log);
    }
    CHECK(n >= 4, "compiled %d modules", n);
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
    RUN(backend_reports_unavailable_cleanly);
    CHECK_EXIT();
}
