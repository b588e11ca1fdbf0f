/* test_hip_compile — every embedded GPU kernel source compiles through the
 * run-time compiler for sm_90 (NVRTC; no GPU needed), and the embedded
 * copies match kernels/ (scripts/embed_kernels.sh was run). SKIPs when
 * NVRTC cannot be loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/hip_rt.h"
#include "check.h"

static void embedded_sources_current(void)
{
    int checked = 0;
    for (int i = 0; i < hip_kernel_n_srcs; i++) {
        char path[256];
        snprintf(path, sizeof path, "kernels/%s", hip_kernel_srcs[i].name);
        char *disk = check_read_file(path, NULL);
        if (!disk)
            continue;
        CHECK(!strcmp(disk, hip_kernel_srcs[i].text), "%s differs from its embedded copy: run scripts/embed_kernels.sh",
              path);
        free(disk);
        checked++;
    }
    if (!checked)
        SKIP("kernels/ not found from the working directory");
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
        printf("# GPU present: %s\n", hip_rt_describe(rt));
        hip_rt_close(rt);
        return;
    }
    CHECK(e.msg[0] != 0, "no message for rc %d", rc);
    printf("# %s\n", e.msg);
}

int main(void)
{
    RUN(embedded_sources_current);
    RUN(every_kernel_compiles_sm90);
    RUN(backend_reports_unavailable_cleanly);
    CHECK_EXIT();
}
