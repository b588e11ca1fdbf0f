/* test_hip_kernels — every GPU kernel against its CPU reference (worker/num/ops.h,
 * worker/num/quant.h), on fresh random inputs (never zeros), with outputs
 * poisoned first so an unwritten element fails. SKIPs without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/args.h"
#include "../kernels/gdn_args.h"
#include "../worker/hip/hip_rt.h"
#include "../worker/num/ops.h"
#include "../worker/num/gdn.h"
#include "../worker/num/quant.h"
#include "check.h"

static struct hip_rt *g_rt;
static char g_why[600];
static uint64_t g_seed = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in ±[0.05, 1] */
{
    g_seed ^= g_seed << 13, g_seed ^= g_seed >> 7, g_seed ^= g_seed << 17;
    float u = (float)((g_seed >> 40) & 0xFFFFFF) / 16777216.0f;
    float v = 0.05f + 0.95f * u;
    return (g_seed >> 20) & 1 ? v : -v;
}
static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* The kernels take device addresses as plain integers in their argument blocks (kernels/args.h), so this
 * test, which fills those blocks directly, keeps them as uint64_t and wraps them for hip_rt's typed calls
 * here. */
static struct hip_dptr dptr(uint64_t a) { return (struct hip_dptr){ a }; }
static uint64_t dup(const void *h, size_t n)
{
    struct err e = { 0 };
    struct hip_dptr d = HIP_DNULL;
    if (hip_rt_malloc(g_rt, n, &d, &e) || (h && hip_rt_h2d(g_rt, d, h, n, &e)) || hip_rt_sync(g_rt, &e)) {
        printf("# %s\n", e.msg);
        exit(1);
    }
    return d.a;
}
static int dmemset(uint64_t d, uint32_t v, size_t count, struct err *e) { return hip_rt_memset32(g_rt, dptr(d), v, count, e); }
static void dfree(uint64_t d) { hip_rt_free(g_rt, dptr(d)); }
static uint64_t poisoned(size_t n_floats)
{
    struct err e = { 0 };
    uint64_t d = dup(NULL, n_floats * 4);
    if (dmemset(d, 0x7fc00001u, n_floats, &e)) /* NaN */
        exit(1);
    return d;
}
static void get(void *h, uint64_t d, size_t n)
{
    struct err e = { 0 };
    if (hip_rt_d2h(g_rt, h, dptr(d), n, &e) || hip_rt_sync(g_rt, &e)) {
        printf("# %s\n", e.msg);
        exit(1);
    }
}
static hip_fn fn(const char *name)
{
    struct err e = { 0 };
    hip_fn f = NULL;
    if (hip_rt_fn(g_rt, name, &f, &e)) {
        printf("# %s\n", e.msg);
        exit(1);
    }
    return f;
}

/* a plain launch of gx × gy × gz blocks of bx threads, waited for */
static int launch3(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **p)
{
    struct err e = { 0 };
    int rc = hip_rt_launch(g_rt, fn(name), gx, gy, gz, bx, p, &e);
    if (!rc)
        rc = hip_rt_sync(g_rt, &e);
    if (rc)
        printf("# %s: %s\n", name, e.msg);
    return rc;
}

static int launch(const char *name, unsigned gx, unsigned gy, unsigned bx, void **p)
{
    return launch3(name, gx, gy, 1, bx, p);
}

/* A tensor-core GEMM launch (kernels/mma.cu, wgmma.cu) of mt tokens a block: the 64- and 128-token tiles
 * with their dynamic shared memory (MMA_SMEM, WG_SMEM for the warpgroup tiles), the kernel's limit raised to
 * it first */
static int launch_mma(const char *name, int mt, unsigned gx, unsigned gy, unsigned gz, void **p, struct err *e)
{
    hip_fn f = fn(name);
    const unsigned sm = (unsigned)(!strncmp(name, "wgmma", 5) ? WG_SMEM(mt) : MMA_SMEM(mt));
    if (sm && hip_rt_fn_smem(g_rt, f, (int)sm, e))
        return -1;
    return hip_rt_launch_smem(g_rt, f, gx, gy, gz, 256, sm, p, e);
}

/* A GEMV launch; the streamed ones with their dynamic shared memory: kernels/gemvs.cu's ("gemvs*") bt / 32
 * warps, GEMVS_STAGES stages of one row of each matrix; gemvb.cu's "gemvbp*" GEMVBP_SMEM of the weight type
 * (the name's suffix) and the mode. */
static int launch_gemv(const char *name, hip_fn f, unsigned grid, unsigned bt, struct gemv_args *a, struct err *e)
{
    void *p[] = { a };
    unsigned sm = 0;
    if (!strncmp(name, "gemvbp", 6)) {
        const int t = strstr(name, "q4_K") ? KT_Q4_K : strstr(name, "q5_K") ? KT_Q5_K : strstr(name, "q6_K") ? KT_Q6_K
                                                                                                          : KT_Q8_0;
        sm = (unsigned)GEMVBP_SMEM(t, a->mode == 2 || a->mode == 3);
        if (hip_rt_fn_smem(g_rt, f, (int)sm, e))
            return -1;
    } else if (!strncmp(name, "gemvs", 5)) {
        sm = bt / 32 * GEMVS_STAGES * (unsigned)a->row_bytes * (a->mode == 2 || a->mode == 3 ? 2u : 1u);
        if (hip_rt_fn_smem(g_rt, f, hip_rt_smem_optin(g_rt), e))
            return -1;
    }
    return hip_rt_launch_smem(g_rt, f, grid, 1, 1, bt, sm, p, e);
}

/* ‖a − b‖ / ‖b‖ in double; NaN fails */
static double rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define NEED_GPU()            \
    do {                      \
        if (!g_rt)            \
            SKIP(g_why);      \
    } while (0)

/* ---- GEMV / GEMM ---- */

static const struct { enum qtype t; const char *name; } kTypes[] = {
    { QT_F32, "f32" }, { QT_F16, "f16" }, { QT_Q8_0, "q8_0" }, { QT_Q4_K, "q4_K" },
    { QT_Q5_K, "q5_K" }, { QT_Q6_K, "q6_K" }, { QT_IQ4_XS, "iq4_xs" },
};

/* y[z][r] for weights of type t (rows quantized from random f32), against dequantized weights dotted in double;
 * kz > 1: the FMA GEMM's grid split over K (gemm.cu: the slices add with atomics into y, which the host
 * zeroes first in mode 0, as the test does here) */
static void check_mm_kz(enum qtype t, const char *tn, int N, int K, int nz, int mode, bool gemm, int kz)
{
    const size_t rb = qtype_row_size(t, K);
    float *wf = malloc(sizeof(float) * (size_t)N * K), *wd = malloc(sizeof(float) * (size_t)N * K);
    float *wf2 = malloc(sizeof(float) * (size_t)N * K), *wd2 = malloc(sizeof(float) * (size_t)N * K);
    unsigned char *wq = malloc(rb * (size_t)N), *wq2 = malloc(rb * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)nz * K), *bias = malloc(sizeof(float) * (size_t)N);
    float *y0 = malloc(sizeof(float) * (size_t)nz * N), *y = malloc(sizeof(float) * (size_t)nz * N);
    float *ref = malloc(sizeof(float) * (size_t)nz * N), *ref2 = malloc(sizeof(float) * (size_t)nz * N);
    fill(wf, (size_t)N * K, 0.5f);
    fill(wf2, (size_t)N * K, 0.5f);
    fill(x, (size_t)nz * K, 1.0f);
    fill(bias, (size_t)N, 0.3f);
    fill(y0, (size_t)nz * N, 1.0f);
    for (int r = 0; r < N; r++) {
        quant_weights_row(t, wf + (size_t)r * K, wq + (size_t)r * rb, K);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * K, K);
        quant_weights_row(t, wf2 + (size_t)r * K, wq2 + (size_t)r * rb, K);
        dequant_row(t, wq2 + (size_t)r * rb, wd2 + (size_t)r * K, K);
    }
    for (int z = 0; z < nz; z++)
        for (int r = 0; r < N; r++) {
            double s = 0, s2 = 0;
            for (int k = 0; k < K; k++) {
                s += (double)wd[(size_t)r * K + k] * x[(size_t)z * K + k];
                s2 += (double)wd2[(size_t)r * K + k] * x[(size_t)z * K + k];
            }
            float v = (float)s + bias[r];
            size_t i = (size_t)z * N + r;
            ref[i] = mode == 0 || mode == 3 ? v : mode == 1 ? y0[i] + v : ops_silu(v) * ((float)s2 + bias[r]);
            ref2[i] = (float)s2 + bias[r];
        }
    uint64_t dw = dup(wq, rb * (size_t)N), dw2 = dup(wq2, rb * (size_t)N), dx = dup(x, sizeof(float) * (size_t)nz * K);
    uint64_t db = dup(bias, sizeof(float) * (size_t)N);
    float *zeros = calloc((size_t)nz * N, sizeof(float));
    uint64_t dy = mode == 1 ? dup(y0, sizeof(float) * (size_t)nz * N)
                : kz > 1    ? dup(zeros, sizeof(float) * (size_t)nz * N)
                            : poisoned((size_t)nz * N);
    free(zeros);
    uint64_t dy2 = poisoned((size_t)nz * N);
    struct gemv_args a = { .w = dw, .w2 = mode >= 2 ? dw2 : 0, .x = dx, .y = dy, .y2 = dy2, .bias = db, .bias2 = mode >= 2 ? db : 0,
                           .row_bytes = (int64_t)rb, .n_rows = N, .k = K, .x_stride = K, .y_stride = N, .x_div = 1,
                           .nz = nz, .mode = mode };
    void *p[] = { &a };
    char name[64];
    snprintf(name, sizeof name, "%s_%s", gemm ? "gemm" : "gemv", tn);
    int rc = gemm ? launch3(name, (unsigned)((N + 63) / 64), (unsigned)((nz + 63) / 64), (unsigned)kz, 256, p)
                  : launch(name, (unsigned)(nz * ((N + 1) / 2)), 1, 128, p);
    CHECK(rc == 0, "%s launch", name);
    get(y, dy, sizeof(float) * (size_t)nz * N);
    double r = rel(y, ref, (size_t)nz * N);
    if (mode == 3) {
        get(y, dy2, sizeof(float) * (size_t)nz * N);
        double r2 = rel(y, ref2, (size_t)nz * N);
        if (r2 > r)
            r = r2;
    }
    CHECK(r < 2e-5, "%s N=%d K=%d nz=%d mode %d K slices %d: rel err %.3g", name, N, K, nz, mode, kz, r);
    printf("#   %-12s N=%-4d K=%-5d nz=%-3d mode %d  K slices %d  rel %.2e\n", name, N, K, nz, mode, kz, r);
    dfree(dw), dfree(dw2), dfree(dx), dfree(db), dfree(dy);
    dfree(dy2);
    free(wf), free(wd), free(wf2), free(wd2), free(wq), free(wq2), free(x), free(bias), free(y0), free(y), free(ref);
    free(ref2);
}

static void check_mm(enum qtype t, const char *tn, int N, int K, int nz, int mode, bool gemm)
{
    check_mm_kz(t, tn, N, K, nz, mode, gemm, 1);
}

static void gemv_all_types(void)
{
    NEED_GPU();
    for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; i++) {
        const int K = kTypes[i].t == QT_F32 || kTypes[i].t == QT_F16 ? 1028 : 1536;
        check_mm(kTypes[i].t, kTypes[i].name, 67, K, 1, 0, false);
        check_mm(kTypes[i].t, kTypes[i].name, 130, K, 3, 1, false);
        check_mm(kTypes[i].t, kTypes[i].name, 45, K, 2, 2, false);
        check_mm(kTypes[i].t, kTypes[i].name, 33, K, 1, 3, false);
    }
}

static void gemm_all_types(void)
{
    NEED_GPU();
    for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; i++) {
        const int K = kTypes[i].t == QT_F32 || kTypes[i].t == QT_F16 ? 172 : 512;
        check_mm(kTypes[i].t, kTypes[i].name, 100, K, 70, 0, true);
        check_mm(kTypes[i].t, kTypes[i].name, 64, K, 9, 1, true);
    }
    /* K split (a MoE router's shape, smaller): slices of whole 32-wide steps, the last one short (K = 700) */
    for (int kz = 2; kz <= 5; kz += 3) {
        check_mm_kz(QT_F32, "f32", 100, 700, 70, 0, true, kz);
        check_mm_kz(QT_F32, "f32", 64, 700, 9, 1, true, kz);
    }
}


/* The tensor-core GEMM's input: mma_xprep writes the f16 rows of x (rows × k, x_stride apart) and their
 * range scales into new device buffers, and points a at them (lim 0: unscaled); zero: it also zeroes a's
 * destination (a split-K mode-0 product: its slices add into y). Free both with dfree. */
static void mma_prep(struct gemv_args *a, uint64_t x, int rows, int k, int x_stride, float lim, bool zero)
{
    uint64_t sc = poisoned((size_t)rows), xh = poisoned(((size_t)rows * (size_t)k + 1) / 2);
    uint64_t y = zero ? a->y : 0;
    int ys = a->y_stride, nr = a->n_rows;
    void *p[] = { &x, &k, &x_stride, &lim, &sc, &xh, &y, &ys, &nr };
    CHECK(launch("mma_xprep", (unsigned)rows, 1, 256, p) == 0, "mma_xprep launch");
    a->xsc = sc;
    a->xh = xh;
}

/* one value rounded to f16 (nearest even), as a float */
static float f16_round(float v)
{
    uint16_t h;
    float o;
    quant_weights_row(QT_F16, &v, &h, 1);
    dequant_row(QT_F16, &h, &o, 1);
    return o;
}

/* A weight row as the tensor-core GEMM dequantizes it, the reference's operand: q4_K in f16x2 arithmetic
 * (kernels/mma.cu) is f16(q·f16(d·sc) − f16(dmin·m)) with one rounding after the product; every other type
 * is its exact value (rounded to f16 by the caller). */
static void mma_dequant(enum qtype t, const unsigned char *row, float *out, int K)
{
    if (t != QT_Q4_K) {
        dequant_row(t, row, out, K);
        return;
    }
    for (int sb = 0; sb < K / 256; sb++) {
        const unsigned char *b = row + 144 * sb, *sc = b + 4, *qs = b + 16;
        float dd[2];
        dequant_row(QT_F16, b, dd, 2); /* d, dmin */
        for (int j = 0; j < 8; j++) {
            const int s = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
            const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            const double D = f16_round(dd[0] * (float)s), M = f16_round(dd[1] * (float)m);
            for (int l = 0; l < 32; l++) {
                const int q = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 0xF;
                out[256 * sb + 32 * j + l] = f16_round((float)(q * D - M));
            }
        }
    }
}

/* tokens a block of the GEMM kernel prefix kn takes: mma32 32, mma128 / wgmma128 128, mma / wgmma 64 */
static int kn_tokens(const char *kn) { return strstr(kn, "128") ? 128 : strstr(kn, "32") ? 32 : 64; }

/* tensor-core GEMM (kernels/mma.cu, wgmma.cu): reference on f16-rounded weights and activations (its operand
 * precision), in double. kn: the kernel's prefix (mma 64 tokens a block, mma32 32, mma128 128); ks > 1 splits K over blockIdx.z (atomic adds; mode 0: mma_xprep zeroes y first,
 * which the poisoned output checks too); ks < 0 (warpgroup tiles) is stream-K over −ks blocks sharing all
 * tiles' k steps (gemv_args.sk), tiles cut between blocks adding with atomics. */
static void check_mma(enum qtype t, const char *tn, int N, int K, int nz, int mode, int ks, const char *kn)
{
    const int mt = kn_tokens(kn);
    const size_t rb = qtype_row_size(t, K);
    float *wf = malloc(sizeof(float) * (size_t)N * K), *wd = malloc(sizeof(float) * (size_t)N * K);
    unsigned char *wq = malloc(rb * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)nz * K), *xh = malloc(sizeof(float) * (size_t)nz * K);
    uint16_t *h16 = malloc(2 * (size_t)(N > nz ? N : nz) * K);
    float *bias = malloc(sizeof(float) * (size_t)N), *y0 = malloc(sizeof(float) * (size_t)nz * N);
    float *y = malloc(sizeof(float) * (size_t)nz * N), *ref = malloc(sizeof(float) * (size_t)nz * N);
    fill(wf, (size_t)N * K, 0.5f);
    fill(x, (size_t)nz * K, 1.0f);
    fill(bias, (size_t)N, 0.3f);
    fill(y0, (size_t)nz * N, 1.0f);
    for (int r = 0; r < N; r++) {
        quant_weights_row(t, wf + (size_t)r * K, wq + (size_t)r * rb, K);
        mma_dequant(t, wq + (size_t)r * rb, wd + (size_t)r * K, K);
    }
    quant_weights_row(QT_F16, wd, h16, (int64_t)N * K);
    dequant_row(QT_F16, h16, wd, (int64_t)N * K);
    quant_weights_row(QT_F16, x, h16, (int64_t)nz * K);
    dequant_row(QT_F16, h16, xh, (int64_t)nz * K);
    for (int z = 0; z < nz; z++)
        for (int r = 0; r < N; r++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)wd[(size_t)r * K + k] * xh[(size_t)z * K + k];
            size_t i = (size_t)z * N + r;
            ref[i] = (mode == 1 ? y0[i] : 0.0f) + ((float)s + bias[r]);
        }
    uint64_t dw = dup(wq, rb * (size_t)N), dx = dup(x, sizeof(float) * (size_t)nz * K), db = dup(bias, sizeof(float) * (size_t)N);
    uint64_t dy = mode == 1 ? dup(y0, sizeof(float) * (size_t)nz * N) : poisoned((size_t)nz * N);
    struct gemv_args a = { .w = dw, .x = dx, .y = dy, .bias = db, .row_bytes = (int64_t)rb, .n_rows = N, .k = K,
                           .x_stride = K, .y_stride = N, .x_div = 1, .nz = nz, .mode = mode, .sk = ks < 0 };
    mma_prep(&a, dx, nz, K, K, 32768.0f, (ks > 1 || ks < 0) && mode == 0);
    void *p[] = { &a };
    char name[64];
    snprintf(name, sizeof name, "%s_%s", kn, tn);
    struct err e = { 0 };
    int rc = ks < 0 ? launch_mma(name, mt, (unsigned)-ks, 1, 1, p, &e)
                    : launch_mma(name, mt, (unsigned)((N + 127) / 128), (unsigned)((nz + mt - 1) / mt), (unsigned)ks, p, &e);
    if (!rc)
        rc = hip_rt_sync(g_rt, &e);
    CHECK(rc == 0, "%s launch: %s", name, e.msg);
    get(y, dy, sizeof(float) * (size_t)nz * N);
    double r = rel(y, ref, (size_t)nz * N);
    CHECK(r < 1e-5, "%s N=%d K=%d nz=%d mode %d split %d: rel err %.3g", name, N, K, nz, mode, ks, r);
    printf("#   %-16s N=%-4d K=%-5d nz=%-3d mode %d split %d  rel %.2e\n", name, N, K, nz, mode, ks, r);
    dfree(dw), dfree(dx), dfree(db), dfree(dy), dfree(a.xh), dfree(a.xsc);
    free(wf), free(wd), free(wq), free(x), free(xh), free(h16), free(bias), free(y0), free(y), free(ref);
}

/* The tensor-core GEMM on activation rows past f16's range (65504): rows grown to 1e6 and 3e9 (a badly
 * conditioned model's FFN down input) next to ordinary ones. With mma_xprep's row scales every output is
 * finite and each row is within 2e-3 of the exact product in double (operands rounded to f16 once,
 * ~5e-4 each); unscaled (lim 0) the same product gives inf / NaN (the check can fail). */
static void check_mma_range(enum qtype t, const char *tn, const char *kn, int N, int K, int nz, int ks)
{
    const int mt = kn_tokens(kn);
    const size_t rb = qtype_row_size(t, K);
    float *wf = malloc(sizeof(float) * (size_t)N * K), *wd = malloc(sizeof(float) * (size_t)N * K);
    unsigned char *wq = malloc(rb * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)nz * K), *y = malloc(sizeof(float) * (size_t)nz * N);
    double *ref = malloc(sizeof(double) * (size_t)nz * N);
    fill(wf, (size_t)N * K, 0.5f);
    fill(x, (size_t)nz * K, 1.0f);
    for (int z = 0; z < nz; z++) {
        const float big = z == 1 ? 3e9f : z % 3 == 0 ? 1e6f : 1.0f;
        for (int k = 0; k < K; k++)
            x[(size_t)z * K + k] *= big;
    }
    for (int r = 0; r < N; r++) {
        quant_weights_row(t, wf + (size_t)r * K, wq + (size_t)r * rb, K);
        mma_dequant(t, wq + (size_t)r * rb, wd + (size_t)r * K, K);
    }
    for (int z = 0; z < nz; z++)
        for (int r = 0; r < N; r++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)wd[(size_t)r * K + k] * x[(size_t)z * K + k];
            ref[(size_t)z * N + r] = acc;
        }
    uint64_t dw = dup(wq, rb * (size_t)N), dx = dup(x, sizeof(float) * (size_t)nz * K);
    char name[64];
    snprintf(name, sizeof name, "%s_%s", kn, tn);
    for (int scaled = 1; scaled >= 0; scaled--) {
        uint64_t dy = poisoned((size_t)nz * N);
        struct gemv_args a = { .w = dw, .x = dx, .y = dy, .row_bytes = (int64_t)rb, .n_rows = N, .k = K,
                               .x_stride = K, .y_stride = N, .x_div = 1, .nz = nz, .mode = 0 };
        mma_prep(&a, dx, nz, K, K, scaled ? 32768.0f : 0.0f, ks > 1);
        void *p[] = { &a };
        struct err e = { 0 };
        int rc = launch_mma(name, mt, (unsigned)((N + 127) / 128), (unsigned)((nz + mt - 1) / mt), (unsigned)ks, p, &e);
        if (!rc)
            rc = hip_rt_sync(g_rt, &e);
        CHECK(rc == 0, "%s launch: %s", name, e.msg);
        get(y, dy, sizeof(float) * (size_t)nz * N);
        size_t bad = 0;
        double worst = 0;
        for (int z = 0; z < nz; z++) {
            double num = 0, den = 0;
            for (int r = 0; r < N; r++) {
                const size_t i = (size_t)z * N + r;
                if (!isfinite(y[i]))
                    bad++;
                num += (y[i] - ref[i]) * (y[i] - ref[i]);
                den += ref[i] * ref[i];
            }
            const double rr = sqrt(num / (den > 0 ? den : 1));
            worst = rr > worst || !isfinite(rr) ? rr : worst;
        }
        if (scaled) {
            CHECK(bad == 0 && worst < 2e-3, "%s N=%d K=%d nz=%d split %d, rows past f16: %zu not finite, "
                  "worst row rel err %.3g", name, N, K, nz, ks, bad, worst);
            printf("#   %-16s N=%-4d K=%-5d nz=%-3d split %d  rows past f16, scaled: worst row rel %.2e\n", name, N,
                   K, nz, ks, worst);
        } else {
            CHECK(bad > 0, "%s: rows past f16 without their scales gave no inf / NaN: the check above proves "
                  "nothing", name);
        }
        dfree(dy), dfree(a.xh), dfree(a.xsc);
    }
    dfree(dw), dfree(dx);
    free(wf), free(wd), free(wq), free(x), free(y), free(ref);
}

static void gemm_tensor_cores_wide_range(void)
{
    NEED_GPU();
    check_mma_range(QT_Q4_K, "q4_K", "mma", 200, 512, 70, 1);
    check_mma_range(QT_Q4_K, "q4_K", "mma32", 130, 1280, 20, 3);
    check_mma_range(QT_F16, "f16", "mma128", 200, 512, 150, 2);
    check_mma_range(QT_Q6_K, "q6_K", "mma", 100, 768, 37, 1);
}

/* the weight types of the tensor-core GEMMs */
static const struct {
    enum qtype t;
    const char *name;
} tc_types[] = {
    { QT_F16, "f16" }, { QT_Q8_0, "q8_0" }, { QT_Q4_K, "q4_K" }, { QT_Q5_K, "q5_K" }, { QT_Q6_K, "q6_K" },
    { QT_IQ4_XS, "iq4_xs" },
};

/* The cases every 64- and 128-token tile (prefixes k64, k128) runs: partial row and token tiles, every
 * 64-element step of a super-block, tokens past 32 (the second warp column), split K with and without a
 * zeroed destination, and slices shorter than a pipeline (MMA_STAGES, WG_STAGES): 1 and 2 steps each */
static void mma_tile_cases(enum qtype t, const char *tn, const char *k64, const char *k128)
{
    check_mma(t, tn, 200, 512, 70, 0, 1, k64);
    check_mma(t, tn, 130, 768, 9, 1, 3, k64);
    check_mma(t, tn, 100, 1024, 37, 0, 4, k64);
    check_mma(t, tn, 200, 512, 150, 0, 1, k128);
    check_mma(t, tn, 130, 768, 100, 1, 2, k128);
    check_mma(t, tn, 100, 256, 70, 0, 4, k64);
    check_mma(t, tn, 130, 256, 150, 1, 2, k128);
}

static void gemm_tensor_cores(void)
{
    NEED_GPU();
    for (size_t i = 0; i < sizeof tc_types / sizeof tc_types[0]; i++) {
        const enum qtype t = tc_types[i].t;
        const char *tn = tc_types[i].name;
        mma_tile_cases(t, tn, "mma", "mma128");
        /* two steps in flight: odd and even step counts per slice (20 steps over 3 slices: 7, 7, 6) */
        check_mma(t, tn, 200, 512, 20, 0, 1, "mma32");
        check_mma(t, tn, 130, 1280, 9, 1, 3, "mma32");
        check_mma(t, tn, 100, 1280, 37, 0, 3, "mma32");
    }
}

/* MoE: gate/up over expert slices chosen per z (x row z / K), then down */
static void gemv_grouped_experts(void)
{
    NEED_GPU();
    const enum qtype t = QT_Q4_K;
    const int X = 5, N = 40, Kd = 512, nt = 3, Ku = 2;
    const size_t rb = qtype_row_size(t, Kd), eb = rb * N;
    unsigned char *wq = malloc(eb * X);
    float *wd = malloc(sizeof(float) * (size_t)X * N * Kd), *tmp = malloc(sizeof(float) * Kd);
    for (int r = 0; r < X * N; r++) {
        fill(tmp, Kd, 0.5f);
        quant_weights_row(t, tmp, wq + (size_t)r * rb, Kd);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * Kd, Kd);
    }
    float x[3 * 512];
    fill(x, (size_t)nt * Kd, 1.0f);
    int sel[6] = { 4, 1, 0, 4, 2, 3 };
    float ref[6 * 40], y[6 * 40];
    for (int z = 0; z < nt * Ku; z++)
        for (int r = 0; r < N; r++) {
            double s = 0;
            for (int k = 0; k < Kd; k++)
                s += (double)wd[((size_t)sel[z] * N + r) * Kd + k] * x[(z / Ku) * Kd + k];
            ref[z * N + r] = (float)s;
        }
    uint64_t dw = dup(wq, eb * X), dx = dup(x, sizeof x), ds = dup(sel, sizeof sel), dy = poisoned(6 * 40);
    struct gemv_args a = { .w = dw, .x = dx, .y = dy, .sel = ds, .row_bytes = (int64_t)rb, .expert_bytes = (int64_t)eb,
                           .n_rows = N, .k = Kd, .x_stride = Kd, .y_stride = N, .x_div = Ku, .nz = nt * Ku };
    void *p[] = { &a };
    CHECK(launch("gemv_q4_K", (unsigned)(nt * Ku * ((N + 1) / 2)), 1, 128, p) == 0, "launch");
    get(y, dy, sizeof y);
    double r = rel(y, ref, 6 * 40);
    CHECK(r < 2e-5, "grouped experts rel %.3g", r);
    dfree(dw), dfree(dx), dfree(ds), dfree(dy);
    free(wq), free(wd), free(tmp);
}


/* MoE prompts: moe_group sorts P (token, slot) pairs by expert into tiles of at most MT, and the grouped
 * tensor-core GEMM (mmag*) computes y[z] = W_sel[z] · x[z / K] through them. Expert sizes cover empty
 * experts, one pair, exact tiles and several tiles; the output starts poisoned, so a pair no tile wrote
 * fails; the reference is the product of the f16-rounded operands in double (the kernel's precision). */
static void check_mmag(enum qtype t, const char *tn, const char *kn, int mt, int X, int N, int Kd, int n, int Ku)
{
    const int P = n * Ku;
    const size_t rb = qtype_row_size(t, Kd), eb = rb * (size_t)N;
    unsigned char *wq = malloc(eb * (size_t)X);
    float *wd = malloc(sizeof(float) * (size_t)X * N * Kd), *tmp = malloc(sizeof(float) * (size_t)Kd);
    uint16_t *h16 = malloc(2 * (size_t)Kd * (size_t)(n > X * N ? n : X * N));
    for (int r = 0; r < X * N; r++) {
        fill(tmp, (size_t)Kd, 0.5f);
        quant_weights_row(t, tmp, wq + (size_t)r * rb, Kd);
        mma_dequant(t, wq + (size_t)r * rb, wd + (size_t)r * Kd, Kd);
    }
    quant_weights_row(QT_F16, wd, h16, (int64_t)X * N * Kd);
    dequant_row(QT_F16, h16, wd, (int64_t)X * N * Kd);
    float *x = malloc(sizeof(float) * (size_t)n * Kd), *xh = malloc(sizeof(float) * (size_t)n * Kd);
    fill(x, (size_t)n * Kd, 1.0f);
    quant_weights_row(QT_F16, x, h16, (int64_t)n * Kd);
    dequant_row(QT_F16, h16, xh, (int64_t)n * Kd);
    /* skewed routing: expert 0 takes every third pair (several tiles), the last expert none, the rest
     * spread by a hash (the kernels treat pairs alike whether or not a token's experts are distinct) */
    int *sel = malloc(sizeof(int) * (size_t)P);
    for (int z = 0; z < P; z++)
        sel[z] = z % 3 == 0 ? 0 : 1 + (int)((((unsigned)z * 2654435761u) >> 7) % (unsigned)(X - 2));
    float *ref = malloc(sizeof(float) * (size_t)P * N), *y = malloc(sizeof(float) * (size_t)P * N);
    for (int z = 0; z < P; z++)
        for (int r = 0; r < N; r++) {
            double acc = 0;
            for (int k = 0; k < Kd; k++)
                acc += (double)wd[((size_t)sel[z] * N + r) * Kd + k] * xh[(size_t)(z / Ku) * Kd + k];
            ref[(size_t)z * N + r] = (float)acc;
        }
    const int map = 1 + 3 * ((P + 31) / 32 + X);
    uint64_t dw = dup(wq, eb * (size_t)X), dx = dup(x, sizeof(float) * (size_t)n * Kd), ds = dup(sel, sizeof(int) * (size_t)P);
    uint64_t dg = poisoned((size_t)(map + P)), dy = poisoned((size_t)P * N), gp = dg + 4 * (uint64_t)map;
    int pp = P, xx = X, mm = mt;
    void *gq[] = { &ds, &pp, &xx, &mm, &gp, &dg };
    CHECK(launch("moe_group", 1, 1, 1024, gq) == 0, "moe_group launch");
    /* the tiles: each pair once, in a tile of its expert, no tile over mt */
    int *gm = malloc(sizeof(int) * (size_t)(map + P)), *seen = calloc((size_t)P, sizeof(int));
    get(gm, dg, sizeof(int) * (size_t)(map + P));
    const int nt = gm[0];
    CHECK(nt > 0 && nt <= (P + mt - 1) / mt + X, "%d tiles", nt);
    int bad = 0;
    for (int ti = 0; ti < nt; ti++) {
        const int e = gm[1 + 3 * ti], st = gm[2 + 3 * ti], c = gm[3 + 3 * ti];
        if (c < 1 || c > mt || st < 0 || st + c > P || e < 0 || e >= X) {
            bad++;
            continue;
        }
        for (int i = 0; i < c; i++) {
            const int z = gm[map + st + i];
            if (z < 0 || z >= P || sel[z] != e || seen[z]++)
                bad++;
        }
    }
    for (int z = 0; z < P; z++)
        bad += !seen[z];
    CHECK(bad == 0, "moe_group: %d pairs misplaced or missing", bad);
    struct gemv_args a = { .w = dw, .x = dx, .y = dy, .gmap = dg, .gperm = gp, .row_bytes = (int64_t)rb,
                           .expert_bytes = (int64_t)eb, .n_rows = N, .k = Kd, .x_stride = Kd, .y_stride = N,
                           .x_div = Ku, .nz = P };
    mma_prep(&a, dx, n, Kd, Kd, 32768.0f, false);
    void *p[] = { &a };
    char name[64];
    snprintf(name, sizeof name, "%s_%s", kn, tn);
    struct err le = { 0 };
    int lrc = launch_mma(name, mt, (unsigned)((N + 127) / 128), (unsigned)((P + mt - 1) / mt + X), 1, p, &le);
    if (!lrc)
        lrc = hip_rt_sync(g_rt, &le);
    CHECK(lrc == 0, "%s launch: %s", name, le.msg);
    get(y, dy, sizeof(float) * (size_t)P * N);
    double r = rel(y, ref, (size_t)P * N);
    CHECK(r < 1e-5, "%s X=%d N=%d K=%d pairs=%d: rel err %.3g", name, X, N, Kd, P, r);
    printf("#   %-18s X=%-3d N=%-4d K=%-5d pairs=%-4d tiles %-3d rel %.2e\n", name, X, N, Kd, P, nt, r);
    dfree(dw), dfree(dx), dfree(ds), dfree(dg), dfree(dy), dfree(a.xh), dfree(a.xsc);
    free(wq), free(wd), free(tmp), free(h16), free(x), free(xh), free(sel), free(ref), free(y), free(gm), free(seen);
}

static void gemm_grouped_experts(void)
{
    NEED_GPU();
    for (size_t i = 0; i < sizeof tc_types / sizeof tc_types[0]; i++) {
        /* 150 tokens × 4 slots over 9 experts: expert 0 has 200 pairs (7 tiles of 32, 2 of 128) */
        check_mmag(tc_types[i].t, tc_types[i].name, "mmag32", 32, 9, 200, 512, 150, 4);
        check_mmag(tc_types[i].t, tc_types[i].name, "mmag", 64, 9, 130, 768, 150, 4);
        check_mmag(tc_types[i].t, tc_types[i].name, "mmag128", 128, 9, 100, 256, 150, 4);
    }
}

/* The warpgroup-MMA tiles (kernels/wgmma.cu, sm_90a) on the mma.sync tiles' cases: partial row and token
 * tiles, split K with and without a zeroed destination, slices of one and two steps (shorter than the
 * activation ring: mma_tile_cases), a 260 × 4096 × 300 product, and the grouped tiles over skewed routing. On an sm_90a device they must exist (fn
 * fails the run otherwise); elsewhere the module is empty and the test skips. */
static void gemm_warpgroup_mma(void)
{
    NEED_GPU();
    if (strcmp(hip_rt_arch(g_rt), "sm_90a"))
        SKIP("warpgroup MMA needs an sm_90a device");
    for (size_t i = 0; i < sizeof tc_types / sizeof tc_types[0]; i++) {
        const enum qtype t = tc_types[i].t;
        const char *tn = tc_types[i].name;
        mma_tile_cases(t, tn, "wgmma", "wgmma128");
        check_mma(t, tn, 260, 4096, 300, 0, 1, "wgmma128");
        /* stream-K: 3 × 3 tiles × 64 steps over 7 blocks (tiles cut mid-way), 3 × 2 × 16 over 5 in mode 1,
         * 16 steps of one tile over 13 blocks (runs of one and two steps) */
        check_mma(t, tn, 260, 4096, 300, 0, -7, "wgmma128");
        check_mma(t, tn, 300, 1024, 100, 1, -5, "wgmma");
        check_mma(t, tn, 100, 1024, 50, 0, -13, "wgmma128");
        check_mmag(t, tn, "wgmmag", 64, 9, 130, 768, 150, 4);
        check_mmag(t, tn, "wgmmag128", 128, 9, 100, 256, 150, 4);
    }
    check_mma_range(QT_Q4_K, "q4_K", "wgmma128", 200, 512, 150, 2);
}

/* llama.cpp CUDA's activation quantization, emulated: per 32, d = amax/127, q = roundf(x/d) */
static void q8_emulate(const float *x, int n, int8_t *q, float *qd)
{
    for (int b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = amax / 127.0f;
        int s = 0;
        for (int j = 0; j < 32; j++) {
            q[32 * b + j] = (int8_t)(amax == 0.0f ? 0 : (int)roundf(x[32 * b + j] / d));
            s += q[32 * b + j];
        }
        qd[2 * b] = d;
        qd[2 * b + 1] = d * (float)s;
    }
}

/* the dp4a GEMV: weights of type t against q8 activations; reference in double on the dequantized
 * weights and the dequantized q8 activations (the same function, exactly). Kernel name, grid and block
 * threads: gemv.cu's per-token GEMV (check_mmq) or gemvb.cu's multi-token one. */
static void check_mmq_kernel(enum qtype t, int N, int K, int nz, int mode, const char *name, unsigned grid, int bt)
{
    const size_t rb = qtype_row_size(t, K);
    float *wf = malloc(sizeof(float) * (size_t)N * K), *wd = malloc(sizeof(float) * (size_t)N * K);
    float *wf2 = malloc(sizeof(float) * (size_t)N * K), *wd2 = malloc(sizeof(float) * (size_t)N * K);
    unsigned char *wq = malloc(rb * (size_t)N), *wq2 = malloc(rb * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)nz * K), *xdq = malloc(sizeof(float) * (size_t)nz * K);
    int8_t *xq = malloc((size_t)nz * K);
    float *xqd = malloc(sizeof(float) * (size_t)nz * (K / 32) * 2);
    float *y0 = malloc(sizeof(float) * (size_t)nz * N), *y = malloc(sizeof(float) * (size_t)nz * N);
    float *ref = malloc(sizeof(float) * (size_t)nz * N), *ref2 = malloc(sizeof(float) * (size_t)nz * N);
    fill(wf, (size_t)N * K, 0.5f);
    fill(wf2, (size_t)N * K, 0.5f);
    fill(x, (size_t)nz * K, 1.0f);
    fill(y0, (size_t)nz * N, 1.0f);
    for (int r = 0; r < N; r++) {
        quant_weights_row(t, wf + (size_t)r * K, wq + (size_t)r * rb, K);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * K, K);
        quant_weights_row(t, wf2 + (size_t)r * K, wq2 + (size_t)r * rb, K);
        dequant_row(t, wq2 + (size_t)r * rb, wd2 + (size_t)r * K, K);
    }
    for (int z = 0; z < nz; z++) {
        q8_emulate(x + (size_t)z * K, K, xq + (size_t)z * K, xqd + (size_t)z * (K / 32) * 2);
        for (int k = 0; k < K; k++)
            xdq[(size_t)z * K + k] = (float)xq[(size_t)z * K + k] * xqd[(size_t)z * (K / 32) * 2 + 2 * (k / 32)];
    }
    for (int z = 0; z < nz; z++)
        for (int r = 0; r < N; r++) {
            double s = 0, s2 = 0;
            for (int k = 0; k < K; k++) {
                s += (double)wd[(size_t)r * K + k] * xdq[(size_t)z * K + k];
                s2 += (double)wd2[(size_t)r * K + k] * xdq[(size_t)z * K + k];
            }
            size_t i = (size_t)z * N + r;
            ref[i] = mode == 0 || mode == 3 ? (float)s : mode == 1 ? y0[i] + (float)s : ops_silu((float)s) * (float)s2;
            ref2[i] = (float)s2;
        }
    /* the quantize kernel itself */
    uint64_t dx = dup(x, sizeof(float) * (size_t)nz * K), dxq = dup(NULL, (size_t)nz * K);
    uint64_t dxqd = poisoned((size_t)nz * (K / 32) * 2);
    int kk = K;
    void *pq[] = { &dx, &kk, &kk, &dxq, &dxqd };
    CHECK(launch("quantize_q8", (unsigned)((K + 255) / 256), (unsigned)nz, 256, pq) == 0, "quantize launch");
    int8_t *gq = malloc((size_t)nz * K);
    float *gqd = malloc(sizeof(float) * (size_t)nz * (K / 32) * 2);
    get(gq, dxq, (size_t)nz * K);
    get(gqd, dxqd, sizeof(float) * (size_t)nz * (K / 32) * 2);
    CHECK(!memcmp(gq, xq, (size_t)nz * K), "quantize_q8: quants differ from the emulation");
    CHECK(rel(gqd, xqd, (size_t)nz * (K / 32) * 2) < 1e-6, "quantize_q8: scales rel %.3g",
          rel(gqd, xqd, (size_t)nz * (K / 32) * 2));
    uint64_t dw = dup(wq, rb * (size_t)N), dw2 = dup(wq2, rb * (size_t)N);
    uint64_t dy = mode == 1 ? dup(y0, sizeof(float) * (size_t)nz * N) : poisoned((size_t)nz * N);
    uint64_t dy2 = poisoned((size_t)nz * N);
    struct gemv_args a = { .w = dw, .w2 = mode >= 2 ? dw2 : 0, .x = dxq, .xd = dxqd, .y = dy, .y2 = dy2, .row_bytes = (int64_t)rb,
                           .n_rows = N, .k = K, .x_stride = K, .y_stride = N, .x_div = 1, .nz = nz, .mode = mode };
    /* mode 2 with N a multiple of 32: the epilogue's q8 copy of the SwiGLU output, twice (the group
     * counters must be back at zero after a launch) */
    const bool fq = mode == 2 && N % 32 == 0;
    uint64_t dyq = 0, dyqd = 0, dcnt = 0;
    if (fq) {
        int32_t *zero = calloc((size_t)nz * (N / 32), sizeof(int32_t));
        dcnt = dup(zero, sizeof(int32_t) * (size_t)nz * (N / 32));
        free(zero);
        a.cnt = dcnt;
    }
    for (int rep = 0; rep < (fq ? 2 : 1); rep++) {
        if (fq) {
            if (dyq)
                dfree(dyq), dfree(dyqd);
            dyq = dup(NULL, (size_t)nz * N), dyqd = poisoned((size_t)nz * (N / 32) * 2);
            a.yq = dyq, a.yqd = dyqd;
        }
        struct err e = { 0 };
        uint64_t dxf = 0, dxfd = 0;
        const size_t nl = strlen(name);
        if (nl > 2 && !strcmp(name + nl - 2, "_f")) { /* gemvbp*_f: the activations in fragment order first */
            dxf = poisoned((size_t)4 * K), dxfd = poisoned((size_t)K);
            void *pf[] = { &a, &dxf, &dxfd };
            CHECK(launch("q8_frag", (unsigned)(K / 64), 2, 32, pf) == 0, "q8_frag launch");
            a.x = dxf, a.xd = dxfd;
        }
        int rc = launch_gemv(name, fn(name), grid, (unsigned)bt, &a, &e);
        if (!rc)
            rc = hip_rt_sync(g_rt, &e);
        CHECK(rc == 0, "%s launch: %s", name, e.msg);
        if (dxf)
            dfree(dxf), dfree(dxfd), a.x = dxq, a.xd = dxqd;
    }
    get(y, dy, sizeof(float) * (size_t)nz * N);
    double r = rel(y, ref, (size_t)nz * N);
    if (fq) {
        int8_t *yq = malloc((size_t)nz * N), *yqref = malloc((size_t)nz * N);
        float *yqd = malloc(sizeof(float) * (size_t)nz * (N / 32) * 2), *yqdref = malloc(sizeof(float) * (size_t)nz * (N / 32) * 2);
        get(yq, dyq, (size_t)nz * N);
        get(yqd, dyqd, sizeof(float) * (size_t)nz * (N / 32) * 2);
        q8_emulate(y, nz * N, yqref, yqdref);
        CHECK(!memcmp(yq, yqref, (size_t)nz * N), "%s N=%d nz=%d: SwiGLU q8 copy differs from quantizing y", name, N, nz);
        CHECK(rel(yqd, yqdref, (size_t)nz * (N / 32) * 2) < 1e-6, "%s: SwiGLU q8 scales", name);
        printf("#   %-12s N=%-4d K=%-5d nz=%-3d mode 2 q8 copy of the output (2 launches, %d threads): exact\n", name, N,
               K, nz, bt);
        dfree(dyq), dfree(dyqd), dfree(dcnt);
        free(yq), free(yqref), free(yqd), free(yqdref);
    }
    if (mode == 3) {
        get(y, dy2, sizeof(float) * (size_t)nz * N);
        double r2 = rel(y, ref2, (size_t)nz * N);
        if (r2 > r)
            r = r2;
    }
    CHECK(r < 2e-5, "%s N=%d K=%d nz=%d mode %d %d threads: rel err %.3g", name, N, K, nz, mode, bt, r);
    printf("#   %-12s N=%-4d K=%-5d nz=%-3d mode %d %3d threads  rel %.2e\n", name, N, K, nz, mode, bt, r);
    dfree(dw), dfree(dw2), dfree(dx), dfree(dxq);
    dfree(dxqd), dfree(dy), dfree(dy2);
    free(ref2);
    free(wf), free(wd), free(wf2), free(wd2), free(wq), free(wq2), free(x), free(xdq), free(xq), free(xqd);
    free(y0), free(y), free(ref), free(gq), free(gqd);
}

static void check_mmq(enum qtype t, const char *tn, int N, int K, int nz, int mode, int R, int bt)
{
    char name[64];
    if (R == 2)
        snprintf(name, sizeof name, "gemvq_%s", tn);
    else
        snprintf(name, sizeof name, "gemvq%d_%s", R, tn);
    check_mmq_kernel(t, N, K, nz, mode, name, (unsigned)(nz * ((N + R - 1) / R)), bt);
}

/* The multi-token GEMV of batched decode (kernels/gemvb.cu), dp4a and tensor-core kernels, for every type,
 * kernel and epilogue and 1..16 tokens (a block takes 8 or 16 of them; fewer leave the rest unused, more
 * go to a second chunk), fresh
 * inputs each time; rows not a multiple of the block's, one pass or two over the row's units, and blocks
 * with threads past the units (128 threads for 64 units). Mode 2 also checks the q8 copy of its output. */
static void gemv_multi_token(void)
{
    NEED_GPU();
    static const struct { enum qtype t; const char *name; } qt[] = {
        { QT_Q8_0, "q8_0" }, { QT_Q4_K, "q4_K" }, { QT_Q5_K, "q5_K" }, { QT_Q6_K, "q6_K" },
    };
    /* tokens and rows a block; the tensor-core kernels (gemvbm*) take 16 rows, all tokens, 8 warps; the
     * fragment-order twins (gemvbp*_f) are q4_K's */
    static const struct { const char *pre; int nt, rows, dual, mma; } kn[] = {
        { "gemvb", 8, 4, 0, 0 }, { "gemvb16", 16, 2, 0, 0 }, { "gemvbd", 8, 2, 1, 0 }, { "gemvbd16", 16, 1, 1, 0 },
        { "gemvbm", 16, 16, 0, 1 }, { "gemvbmd", 16, 16, 1, 1 },
        { "gemvbp", 16, 16, 0, 1 }, { "gemvbpd", 16, 16, 1, 1 }, { "gemvbp_f", 16, 16, 0, 1 },
        { "gemvbpd_f", 16, 16, 1, 1 },
    };
    for (size_t i = 0; i < sizeof qt / sizeof qt[0]; i++)
        for (size_t k = 0; k < sizeof kn / sizeof kn[0]; k++)
            for (int nz = 1; nz <= 16 && (!strstr(kn[k].pre, "_f") || qt[i].t == QT_Q4_K); nz++)
                for (int m = 0; m < 2; m++) {
                    /* K = 4352: 17 chunks of 256 over 8 warps, 136 units over 32..128 threads */
                    const int mode = 2 * kn[k].dual + m, N = mode == 2 ? 96 : 67, K = nz % 2 ? 2048 : 4352;
                    const int bt = kn[k].mma ? 256 : nz % 3 == 0 ? 128 : nz % 3 == 1 ? 32 : 64;
                    char name[64];
                    const size_t pl = strcspn(kn[k].pre, "_"); /* "gemvbp_f": gemvbp_<type>_f */
                    snprintf(name, sizeof name, "%.*s_%s%s", (int)pl, kn[k].pre, qt[i].name, kn[k].pre + pl);
                    const int blocks = (N + kn[k].rows - 1) / kn[k].rows * ((nz + kn[k].nt - 1) / kn[k].nt);
                    check_mmq_kernel(qt[i].t, N, K, nz, mode, name, (unsigned)blocks, bt);
                }
}

static void gemv_q8_activations(void)
{
    NEED_GPU();
    static const struct { enum qtype t; const char *name; } qt[] = {
        { QT_Q8_0, "q8_0" }, { QT_Q4_K, "q4_K" }, { QT_Q5_K, "q5_K" }, { QT_Q6_K, "q6_K" },
    };
    for (size_t i = 0; i < sizeof qt / sizeof qt[0]; i++) {
        check_mmq(qt[i].t, qt[i].name, 67, 1536, 1, 0, 2, 128);
        check_mmq(qt[i].t, qt[i].name, 130, 2048, 3, 1, 2, 128);
        check_mmq(qt[i].t, qt[i].name, 45, 1536, 2, 2, 2, 128);
        check_mmq(qt[i].t, qt[i].name, 96, 1536, 3, 2, 2, 128);
        check_mmq(qt[i].t, qt[i].name, 33, 4096, 1, 3, 2, 128);
        /* 4 and 8 rows a block, blocks narrower than the row's units (the host sizes them to the row:
         * 64 threads for 2048, 32 for a MoE expert's 768), row counts not a multiple of R */
        check_mmq(qt[i].t, qt[i].name, 67, 1536, 1, 0, 4, 128);
        check_mmq(qt[i].t, qt[i].name, 131, 2048, 3, 1, 8, 64);
        check_mmq(qt[i].t, qt[i].name, 45, 768, 2, 3, 8, 32);
        check_mmq(qt[i].t, qt[i].name, 96, 768, 5, 2, 8, 32);
        check_mmq(qt[i].t, qt[i].name, 64, 2048, 3, 2, 4, 64);
        /* the engine's shapes for rows of 5120 (160 units: 5 warps, one pass) and 17408 (544 units:
         * 8 warps, 2 rows a block) — hip_engine.c's gemv_threads */
        check_mmq(qt[i].t, qt[i].name, 70, 5120, 1, 1, 4, 160);
        check_mmq(qt[i].t, qt[i].name, 38, 17408, 2, 1, 2, 256);
        /* the streamed single-token GEMV (kernels/gemvs.cu; grid = blocks, bt / 32 warps): x in registers
         * (K ≤ 4096: lanes past the units in 1536) or reloaded (12288); rows per warp from 0 (more warps than
         * rows) to several turns of the 4-stage ring; every mode, the SwiGLU q8 copy (N % 32 == 0) */
        if (hip_rt_smem_optin(g_rt)) {
            static const struct { int N, K, mode, blocks, bt; } sh[] = {
                { 67, 1536, 0, 2, 128 }, { 130, 4096, 1, 3, 256 }, { 96, 4096, 2, 2, 128 }, { 33, 4096, 3, 2, 192 },
                { 70, 12288, 1, 1, 128 }, { 256, 1536, 2, 1, 256 }, { 45, 2048, 0, 5, 512 },
            };
            for (size_t j = 0; j < sizeof sh / sizeof sh[0]; j++) {
                if (qtype_row_size(qt[i].t, sh[j].K) % 16) /* cp.async's 16-byte pieces (the host keeps gemv.cu) */
                    continue;
                char name[64];
                snprintf(name, sizeof name, "gemvs_%s%s", qt[i].name, sh[j].K <= 4096 ? "_x4" : "");
                check_mmq_kernel(qt[i].t, sh[j].N, sh[j].K, 1, sh[j].mode, name, (unsigned)sh[j].blocks, sh[j].bt);
            }
        }
    }
}

/* Mode 4: for each token, Σ over its slots of weight · (expert sel's rows · the slot's activation row),
 * added into y — the MoE down projection with the combine fused. f32 activations (gemv_q4_K) and q8
 * (gemvq*), against dequantized weights (and dequantized q8 activations) in double. */
static void check_experts_combined(const char *name, bool q8, int R, int bt)
{
    const enum qtype t = QT_Q4_K;
    const int X = 6, N = 70, Kd = 768, nt = 3, S = 4;
    const size_t rb = qtype_row_size(t, Kd), eb = rb * N;
    unsigned char *wq = malloc(eb * X);
    float *wd = malloc(sizeof(float) * (size_t)X * N * Kd), *tmp = malloc(sizeof(float) * Kd);
    for (int r = 0; r < X * N; r++) {
        fill(tmp, Kd, 0.5f);
        quant_weights_row(t, tmp, wq + (size_t)r * rb, Kd);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * Kd, Kd);
    }
    static float x[3 * 4 * 768], xdq[3 * 4 * 768], xqd[3 * 4 * 24 * 2];
    static int8_t xq[3 * 4 * 768];
    fill(x, (size_t)nt * S * Kd, 1.0f);
    for (int z = 0; z < nt * S; z++) {
        q8_emulate(x + (size_t)z * Kd, Kd, xq + (size_t)z * Kd, xqd + (size_t)z * (Kd / 32) * 2);
        for (int k = 0; k < Kd; k++)
            xdq[z * Kd + k] = q8 ? (float)xq[z * Kd + k] * xqd[z * (Kd / 32) * 2 + 2 * (k / 32)] : x[z * Kd + k];
    }
    int sel[12] = { 5, 1, 0, 3, 2, 4, 1, 0, 3, 5, 2, 4 };
    float sw[12], y0[3 * 70], ref[3 * 70], y[3 * 70];
    for (int i = 0; i < 12; i++)
        sw[i] = 0.5f + 0.4f * frand();
    fill(y0, (size_t)nt * N, 1.0f);
    for (int tk = 0; tk < nt; tk++)
        for (int r = 0; r < N; r++) {
            double acc = y0[tk * N + r];
            for (int s = 0; s < S; s++) {
                const int z = tk * S + s;
                double d = 0;
                for (int k = 0; k < Kd; k++)
                    d += (double)wd[((size_t)sel[z] * N + r) * Kd + k] * xdq[z * Kd + k];
                acc += (double)sw[z] * d;
            }
            ref[tk * N + r] = (float)acc;
        }
    uint64_t dw = dup(wq, eb * X), ds = dup(sel, sizeof sel), dsw = dup(sw, sizeof sw), dy = dup(y0, sizeof y0);
    uint64_t dx = q8 ? dup(xq, sizeof xq) : dup(x, sizeof x), dxd = dup(xqd, sizeof xqd);
    struct gemv_args a = { .w = dw, .x = dx, .xd = q8 ? dxd : 0, .y = dy, .sel = ds, .sw = dsw, .row_bytes = (int64_t)rb,
                           .expert_bytes = (int64_t)eb, .n_rows = N, .k = Kd, .x_stride = Kd, .y_stride = N,
                           .x_div = 1, .nz = nt, .mode = 4, .nslot = S };
    void *p[] = { &a };
    CHECK(launch(name, (unsigned)(nt * ((N + R - 1) / R)), 1, (unsigned)bt, p) == 0, "%s launch", name);
    get(y, dy, sizeof y);
    double r = rel(y, ref, sizeof y / 4);
    CHECK(r < 2e-5, "%s mode 4 (%d threads): rel %.3g", name, bt, r);
    printf("#   %-12s N=%-4d K=%-5d %d tokens x %d slots mode 4 %3d threads  rel %.2e\n", name, N, Kd, nt, S, bt, r);
    dfree(dw), dfree(ds), dfree(dsw), dfree(dy), dfree(dx);
    dfree(dxd);
    free(wq), free(wd), free(tmp);
}

/* dequantized weight rows of type t from random f32 ones: wd [n][k] */
static unsigned char *rand_weights(enum qtype t, int n, int k, float scale, float *wd)
{
    const size_t rb = qtype_row_size(t, k);
    unsigned char *wq = malloc(rb * (size_t)n);
    float *wf = malloc(sizeof(float) * (size_t)k);
    for (int r = 0; r < n; r++) {
        fill(wf, (size_t)k, scale);
        quant_weights_row(t, wf, wq + (size_t)r * rb, k);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * k, k);
    }
    free(wf);
    return wq;
}

/* The RMSNorm deferred from a residual GEMV to the GEMVs reading its output (kernels/gemv.cu
 * norm_group_tail, gemv_args.nw / rss). Producer pk (R1 rows a block, bt1 threads, weights t1 [N][K1]):
 * y[z] += W1·o[z] (q8 o when q1), and y[z]·w, its q8 copy and Σ y² per 32-group. Consumer ck
 * (a *_dn kernel: R2, bt2, t2 [M][N], mode2 0 / 2 / 3 with biases, x_div xd; on the q8 copy when q2,
 * else on y·w):
 * W2·rmsnorm(y[z / xd])·w. The pair is launched back to back through PDL-marked handles, twice (the
 * counters return to zero), on the same residual. Against the CPU: y in double; y·w and its q8 copy
 * bit for bit against the kernel's y times w and q8_emulate of that; the groups' Σ y² of the kernel's y; the
 * consumer against its own input (the copy, dequantized, times the reference norm scale) in double —
 * these tight — and the whole chain against the unfused CPU steps (ops_rms_norm, q8_emulate of the
 * normed row when q2, W2 in double), where a q8 value on a rounding edge may fall the other way (one
 * such flip moves the outputs of its row by ~1e-3; a missing or another token's norm scale is off by
 * far more than the 1e-2 allowed). */
static void check_deferred_norm(const char *pk, enum qtype t1, int R1, int bt1, bool q1, const char *ck, enum qtype t2,
                                int R2, int bt2, bool q2, int mode2, int N, int K1, int M, int nz, int xd)
{
    const int G = N / 32, nz2 = nz * xd;
    const float eps = 1e-6f;
    float *w1d = malloc(sizeof(float) * (size_t)N * K1), *w2d = malloc(sizeof(float) * (size_t)M * N);
    float *w3d = malloc(sizeof(float) * (size_t)M * N);
    unsigned char *w1 = rand_weights(t1, N, K1, 0.5f, w1d), *w2 = rand_weights(t2, M, N, 0.5f, w2d);
    unsigned char *w3 = rand_weights(t2, M, N, 0.5f, w3d);
    float *o = malloc(sizeof(float) * (size_t)nz * K1), *odq = malloc(sizeof(float) * (size_t)nz * K1);
    int8_t *oq = malloc((size_t)nz * K1);
    float *oqd = malloc(sizeof(float) * (size_t)nz * (K1 / 32) * 2);
    float *y0 = malloc(sizeof(float) * (size_t)nz * N), *xref = malloc(sizeof(float) * (size_t)nz * N);
    float *y = malloc(sizeof(float) * (size_t)nz * N), *nw = malloc(sizeof(float) * (size_t)N);
    float *b2 = malloc(sizeof(float) * (size_t)M), *b3 = malloc(sizeof(float) * (size_t)M);
    float *h = malloc(sizeof(float) * (size_t)N), *hdq = malloc(sizeof(float) * (size_t)N);
    float *yw = malloc(sizeof(float) * (size_t)nz * N), *hqdref = malloc(sizeof(float) * (size_t)nz * G * 2);
    int8_t *hq = malloc((size_t)nz * N), *hqref = malloc((size_t)nz * N), *q = malloc((size_t)N);
    float *hqd = malloc(sizeof(float) * (size_t)nz * G * 2), *qd = malloc(sizeof(float) * (size_t)G * 2);
    float *ny = malloc(sizeof(float) * (size_t)nz * N);
    float *ss = malloc(sizeof(float) * (size_t)nz * G), *rn = malloc(sizeof(float) * (size_t)nz);
    float *out = malloc(sizeof(float) * (size_t)nz2 * M), *out2 = malloc(sizeof(float) * (size_t)nz2 * M);
    float *chain = malloc(sizeof(float) * (size_t)nz2 * M * 2), *tight = malloc(sizeof(float) * (size_t)nz2 * M * 2);
    fill(o, (size_t)nz * K1, 1.0f);
    fill(y0, (size_t)nz * N, 1.0f);
    fill(nw, (size_t)N, 1.0f);
    fill(b2, (size_t)M, 0.3f);
    fill(b3, (size_t)M, 0.3f);
    for (int z = 0; z < nz; z++) {
        q8_emulate(o + (size_t)z * K1, K1, oq + (size_t)z * K1, oqd + (size_t)z * (K1 / 32) * 2);
        for (int k = 0; k < K1; k++)
            odq[(size_t)z * K1 + k] = q1 ? (float)oq[(size_t)z * K1 + k] * oqd[(size_t)z * (K1 / 32) * 2 + 2 * (k / 32)]
                                         : o[(size_t)z * K1 + k];
    }
    memcpy(xref, y0, sizeof(float) * (size_t)nz * N);
    struct err e = { 0 };
    hip_fn fp = NULL, fc = NULL;
    CHECK(hip_rt_fn_pdl(g_rt, pk, &fp, &e) == 0 && hip_rt_fn_pdl(g_rt, ck, &fc, &e) == 0, "%s", e.msg);
    uint64_t dw1 = dup(w1, qtype_row_size(t1, K1) * (size_t)N), dw2 = dup(w2, qtype_row_size(t2, N) * (size_t)M);
    uint64_t dw3 = dup(w3, qtype_row_size(t2, N) * (size_t)M);
    uint64_t dox = q1 ? dup(oq, (size_t)nz * K1) : dup(o, sizeof(float) * (size_t)nz * K1);
    uint64_t doxd = dup(oqd, sizeof(float) * (size_t)nz * (K1 / 32) * 2), dnw = dup(nw, sizeof(float) * (size_t)N);
    uint64_t dy = dup(y0, sizeof(float) * (size_t)nz * N), db2 = dup(b2, sizeof(float) * (size_t)M);
    uint64_t db3 = dup(b3, sizeof(float) * (size_t)M);
    int32_t *zero = calloc((size_t)nz * G, sizeof(int32_t));
    uint64_t dcnt = dup(zero, sizeof(int32_t) * (size_t)nz * G);
    double wy = 0, wss = 0, wt = 0, wc = 0;
    for (int rep = 0; rep < 2; rep++) {
        for (int z = 0; z < nz; z++)
            for (int r = 0; r < N; r++) {
                double sd = 0;
                for (int k = 0; k < K1; k++)
                    sd += (double)w1d[(size_t)r * K1 + k] * odq[(size_t)z * K1 + k];
                xref[(size_t)z * N + r] += (float)sd;
            }
        uint64_t dhq = dup(NULL, (size_t)nz * N), dhqd = poisoned((size_t)nz * G * 2), dsp = poisoned((size_t)nz * G);
        uint64_t do1 = poisoned((size_t)nz2 * M), do2 = poisoned((size_t)nz2 * M);
        uint64_t dny = poisoned((size_t)nz * N);
        struct gemv_args a1 = { .w = dw1, .x = dox, .xd = q1 ? doxd : 0, .y = dy, .row_bytes = (int64_t)qtype_row_size(t1, K1),
                                .n_rows = N, .k = K1, .x_stride = K1, .y_stride = N, .x_div = 1, .nz = nz, .mode = 1,
                                .nw = dnw, .ny = dny, .nq = dhq, .nqd = dhqd, .nsp = dsp, .ncnt = dcnt, .pf = 1 };
        struct gemv_args a2 = { .w = dw2, .w2 = mode2 ? dw3 : 0, .x = q2 ? dhq : dny, .xd = q2 ? dhqd : 0, .y = do1,
                                .y2 = mode2 == 3 ? do2 : 0,
                                .bias = db2, .bias2 = mode2 ? db3 : 0, .rsp = dsp, .row_bytes = (int64_t)qtype_row_size(t2, N),
                                .n_rows = M, .k = N, .x_stride = N, .y_stride = M, .x_div = xd, .nz = nz2, .mode = mode2,
                                .eps = eps, .pf = 1 };
        int rc = launch_gemv(pk, fp, (unsigned)(nz * (N / R1)), (unsigned)bt1, &a1, &e);
        if (!rc)
            rc = launch_gemv(ck, fc, (unsigned)(nz2 * ((M + R2 - 1) / R2)), (unsigned)bt2, &a2, &e);
        if (!rc)
            rc = hip_rt_sync(g_rt, &e);
        CHECK(rc == 0, "%s + %s: %s", pk, ck, e.msg);
        get(y, dy, sizeof(float) * (size_t)nz * N);
        get(hq, dhq, (size_t)nz * N);
        get(hqd, dhqd, sizeof(float) * (size_t)nz * G * 2);
        get(ny, dny, sizeof(float) * (size_t)nz * N);
        get(ss, dsp, sizeof(float) * (size_t)nz * G);
        get(out, do1, sizeof(float) * (size_t)nz2 * M);
        if (mode2 == 3)
            get(out2, do2, sizeof(float) * (size_t)nz2 * M);
        double r = rel(y, xref, (size_t)nz * N);
        wy = r > wy ? r : wy;
        for (size_t i = 0; i < (size_t)nz * N; i++)
            yw[i] = y[i] * nw[i % (size_t)N];
        q8_emulate(yw, nz * N, hqref, hqdref);
        CHECK(!memcmp(ny, yw, sizeof(float) * (size_t)nz * N), "%s launch %d: y·w differs", pk, rep + 1);
        CHECK(!memcmp(hq, hqref, (size_t)nz * N), "%s launch %d: q8 of y·w differs from quantizing it", pk, rep + 1);
        CHECK(rel(hqd, hqdref, (size_t)nz * G * 2) < 1e-7, "%s launch %d: q8 scales of y·w", pk, rep + 1);
        for (int z = 0; z < nz; z++) {
            double sx = 0;
            for (int g = 0; g < G; g++) {
                double sy = 0;
                for (int i = 32 * g; i < 32 * g + 32; i++) {
                    sy += (double)y[(size_t)z * N + i] * y[(size_t)z * N + i];
                    sx += (double)xref[(size_t)z * N + i] * xref[(size_t)z * N + i];
                }
                const double d = fabs(ss[(size_t)z * G + g] - sy) / sy;
                wss = d > wss ? d : wss;
            }
            rn[z] = (float)(1.0 / sqrt(sx / N + eps));
        }
        /* tight: the consumer on its own input; chain: the unfused steps from the reference residual */
        for (int z2 = 0; z2 < nz2; z2++) {
            const int z = z2 / xd;
            ops_rms_norm(h, xref + (size_t)z * N, nw, N, eps);
            q8_emulate(h, N, q, qd);
            for (int k = 0; k < N; k++)
                hdq[k] = q2 ? (float)q[k] * qd[2 * (k / 32)] : h[k];
            for (int r2 = 0; r2 < M; r2++) {
                double c1 = 0, c2 = 0, t1v = 0, t2v = 0;
                for (int k = 0; k < N; k++) {
                    const double hk = q2 ? (double)hq[(size_t)z * N + k] * hqd[(size_t)z * G * 2 + 2 * (k / 32)]
                                         : (double)ny[(size_t)z * N + k];
                    c1 += (double)w2d[(size_t)r2 * N + k] * hdq[k];
                    c2 += (double)w3d[(size_t)r2 * N + k] * hdq[k];
                    t1v += (double)w2d[(size_t)r2 * N + k] * hk;
                    t2v += (double)w3d[(size_t)r2 * N + k] * hk;
                }
                const float cv = (float)c1 + b2[r2], cv2 = (float)c2 + b3[r2];
                const float tv = (float)(t1v * rn[z]) + b2[r2], tv2 = (float)(t2v * rn[z]) + b3[r2];
                const size_t i = (size_t)z2 * M + r2, i2 = (size_t)(nz2 + z2) * M + r2;
                chain[i] = mode2 == 2 ? ops_silu(cv) * cv2 : cv, chain[i2] = mode2 == 3 ? cv2 : 0.0f;
                tight[i] = mode2 == 2 ? ops_silu(tv) * tv2 : tv, tight[i2] = mode2 == 3 ? tv2 : 0.0f;
            }
        }
        if (mode2 != 3)
            memset(out2, 0, sizeof(float) * (size_t)nz2 * M);
        float *both = malloc(sizeof(float) * (size_t)nz2 * M * 2);
        memcpy(both, out, sizeof(float) * (size_t)nz2 * M);
        memcpy(both + (size_t)nz2 * M, out2, sizeof(float) * (size_t)nz2 * M);
        const double rt = rel(both, tight, (size_t)nz2 * M * 2), rc2 = rel(both, chain, (size_t)nz2 * M * 2);
        wt = rt > wt ? rt : wt;
        wc = rc2 > wc ? rc2 : wc;
        free(both);
        dfree(dhq), dfree(dhqd), dfree(dsp);
        dfree(do1), dfree(do2), dfree(dny);
    }
    CHECK(wy < 2e-5, "%s deferred norm: residual rel %.3g", pk, wy);
    CHECK(wss < 1e-6, "%s deferred norm: groups' sums of squares rel %.3g", pk, wss);
    CHECK(wt < 2e-5, "%s after %s: rel %.3g against its own q8 input", ck, pk, wt);
    CHECK(wc < 1e-2, "%s after %s: rel %.3g against rms_norm + q8 + W2 on the CPU", ck, pk, wc);
    printf("#   %-12s N=%-4d K=%-5d nz=%d mode 1 + deferred norm, then %-12s M=%-3d mode %d x_div %d (2 launches): "
           "y %.2e, q8 exact, ss %.2e, consumer %.2e, chain %.2e\n",
           pk, N, K1, nz, ck, M, mode2, xd, wy, wss, wt, wc);
    uint64_t fr[] = { dw1, dw2, dw3, dox, doxd, dnw, dy, db2, db3, dcnt };
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        dfree(fr[i]);
    free(w1d), free(w2d), free(w3d), free(w1), free(w2), free(w3), free(o), free(odq), free(oq), free(oqd), free(y0);
    free(xref), free(y), free(nw), free(b2), free(b3), free(h), free(hdq), free(yw), free(hqdref), free(hq);
    free(hqref), free(q), free(hqd), free(qd), free(ss), free(rn), free(out), free(out2), free(chain), free(tight);
    free(zero), free(ny);
}

static void gemv_deferred_rms_norm(void)
{
    NEED_GPU();
    /* producer R = 4, 2, 8 and the f32-activation GEMV; consumer modes 0, 2 (x_div 2), 3, on q8 and on
     * f32 activations; groups per row 64, 48, 32 (the row's sum takes one or two per lane) */
    check_deferred_norm("gemvq4_q4_K", QT_Q4_K, 4, 128, true, "gemvq4_q4_K_dn", QT_Q4_K, 4, 64, true, 0, 2048, 4096, 96, 1,
                        1);
    check_deferred_norm("gemvq_q6_K", QT_Q6_K, 2, 64, true, "gemvq_q6_K_dn", QT_Q6_K, 2, 64, true, 2, 1536, 2048, 70, 2, 2);
    check_deferred_norm("gemvq8_q8_0", QT_Q8_0, 8, 32, true, "gemvq8_q8_0_dn", QT_Q8_0, 8, 32, true, 3, 1024, 768, 64, 3,
                        1);
    check_deferred_norm("gemv_f32", QT_F32, 2, 128, false, "gemvq4_q5_K_dn", QT_Q5_K, 4, 32, true, 0, 1024, 516, 40, 1, 1);
    check_deferred_norm("gemvq4_q4_K", QT_Q4_K, 4, 64, true, "gemv_f32_dn", QT_F32, 2, 128, false, 0, 2048, 2048, 8, 1, 1);
    if (hip_rt_smem_optin(g_rt)) /* streamed (gemvs: N / R blocks of bt / 32 warps) into streamed, dual */
        check_deferred_norm("gemvs_q4_K", QT_Q4_K, 512, 256, true, "gemvs_q4_K_x4_dn", QT_Q4_K, 96, 128, true, 2, 2048,
                            12288, 96, 1, 1);
}

/* The routing fused into the router GEMV (mode 0, rsel set): logits against double, then the grid's
 * last block's picks against ops_softmax + ops_topk of those logits (exact) and their renormalised
 * weights. Two launches (the counter returns to zero). */
static void check_route_tail(const char *name, enum qtype t, int X, int Kin, int nz, int K, int R, int bt, bool q8)
{
    const size_t rb = qtype_row_size(t, Kin);
    float *wf = malloc(sizeof(float) * (size_t)X * Kin), *wd = malloc(sizeof(float) * (size_t)X * Kin);
    unsigned char *wq = malloc(rb * (size_t)X);
    float *x = malloc(sizeof(float) * (size_t)nz * Kin), *xdq = malloc(sizeof(float) * (size_t)nz * Kin);
    int8_t *xq = malloc((size_t)nz * Kin);
    float *xqd = malloc(sizeof(float) * (size_t)nz * (Kin / 32) * 2);
    float *y = malloc(sizeof(float) * (size_t)nz * X), *ref = malloc(sizeof(float) * (size_t)nz * X);
    float *pr = malloc(sizeof(float) * (size_t)X), *w = malloc(sizeof(float) * (size_t)nz * K);
    float *wref = malloc(sizeof(float) * (size_t)nz * K);
    int *sel = malloc(sizeof(int) * (size_t)nz * K), *selref = malloc(sizeof(int) * (size_t)nz * K);
    fill(wf, (size_t)X * Kin, 0.5f);
    fill(x, (size_t)nz * Kin, 1.0f);
    for (int r = 0; r < X; r++) {
        quant_weights_row(t, wf + (size_t)r * Kin, wq + (size_t)r * rb, Kin);
        dequant_row(t, wq + (size_t)r * rb, wd + (size_t)r * Kin, Kin);
    }
    for (int z = 0; z < nz; z++) {
        q8_emulate(x + (size_t)z * Kin, Kin, xq + (size_t)z * Kin, xqd + (size_t)z * (Kin / 32) * 2);
        for (int k = 0; k < Kin; k++)
            xdq[(size_t)z * Kin + k] = q8 ? (float)xq[(size_t)z * Kin + k] * xqd[(size_t)z * (Kin / 32) * 2 + 2 * (k / 32)]
                                          : x[(size_t)z * Kin + k];
        for (int r = 0; r < X; r++) {
            double sd = 0;
            for (int k = 0; k < Kin; k++)
                sd += (double)wd[(size_t)r * Kin + k] * xdq[(size_t)z * Kin + k];
            ref[(size_t)z * X + r] = (float)sd;
        }
    }
    uint64_t dw = dup(wq, rb * (size_t)X), dx = q8 ? dup(xq, (size_t)nz * Kin) : dup(x, sizeof(float) * (size_t)nz * Kin);
    uint64_t dxd = dup(xqd, sizeof(float) * (size_t)nz * (Kin / 32) * 2);
    int32_t zero[2] = { 0, 0 };
    uint64_t dcnt = dup(zero, sizeof zero);
    for (int rep = 0; rep < 2; rep++) {
        uint64_t dy = poisoned((size_t)nz * X), dsel = dup(NULL, sizeof(int) * (size_t)nz * K), dsw = poisoned((size_t)nz * K);
        struct gemv_args a = { .w = dw, .x = dx, .xd = q8 ? dxd : 0, .y = dy, .row_bytes = (int64_t)rb, .n_rows = X,
                               .k = Kin, .x_stride = Kin, .y_stride = X, .x_div = 1, .nz = nz, .mode = 0, .nslot = K,
                               .ncnt = dcnt, .rsel = dsel, .rw = dsw, .rscale = 0.0f };
        void *p[] = { &a };
        CHECK(launch(name, (unsigned)(nz * ((X + R - 1) / R)), 1, (unsigned)bt, p) == 0, "%s launch", name);
        get(y, dy, sizeof(float) * (size_t)nz * X);
        get(sel, dsel, sizeof(int) * (size_t)nz * K);
        get(w, dsw, sizeof(float) * (size_t)nz * K);
        CHECK(rel(y, ref, (size_t)nz * X) < 2e-5, "%s router logits rel %.3g", name, rel(y, ref, (size_t)nz * X));
        for (int z = 0; z < nz; z++) {
            memcpy(pr, y + (size_t)z * X, sizeof(float) * (size_t)X);
            ops_softmax(pr, X);
            ops_topk(pr, X, K, selref + z * K);
            double sum = 0;
            for (int k = 0; k < K; k++)
                sum += pr[selref[z * K + k]];
            for (int k = 0; k < K; k++)
                wref[z * K + k] = pr[selref[z * K + k]] / (float)sum;
        }
        int bad = 0;
        for (int i = 0; i < nz * K; i++)
            bad += sel[i] != selref[i];
        CHECK(bad == 0, "%s launch %d: %d of %d routed slots differ", name, rep + 1, bad, nz * K);
        CHECK(rel(w, wref, (size_t)nz * K) < 1e-5, "%s: route weights rel %.3g", name, rel(w, wref, (size_t)nz * K));
        dfree(dy), dfree(dsel), dfree(dsw);
    }
    printf("#   %-12s X=%-3d K=%-4d nz=%d top-%d routed in the GEMV's last block (2 launches): picks equal\n", name, X,
           Kin, nz, K);
    dfree(dw), dfree(dx), dfree(dxd), dfree(dcnt);
    free(wf), free(wd), free(wq), free(x), free(xdq), free(xq), free(xqd), free(y), free(ref), free(pr), free(w);
    free(wref), free(sel), free(selref);
}

static void gemv_fused_routing(void)
{
    NEED_GPU();
    check_route_tail("gemv_f32", QT_F32, 128, 512, 3, 8, 2, 128, false);
    check_route_tail("gemvq4_q8_0", QT_Q8_0, 256, 1024, 2, 8, 4, 128, true);
    check_route_tail("gemv_f32", QT_F32, 37, 96, 4, 3, 2, 32, false);
}

/* Programmatic dependent launch: L layers of rms_norm (with its q8 copy) then the q8 GEMV adding into
 * the residual, launched back to back with no sync between them through handles marked for PDL (so,
 * when hip_rt_pdl, each may start while the one before still runs), against the same steps on the CPU.
 * A kernel that read the residual or the q8 copy before the kernel before it finished would use the
 * previous layer's values (the weights differ per layer): far outside the tolerance. */
static void pdl_chain(void)
{
    NEED_GPU();
    enum { L = 6, N = 2048 };
    const size_t rb = qtype_row_size(QT_Q4_K, N);
    float *wf = malloc(sizeof(float) * (size_t)N * N), *wd = malloc(sizeof(float) * (size_t)L * N * N);
    unsigned char *wq = malloc(rb * (size_t)N * L);
    static float x[N], x0[N], nw[L][N], h[N], hdq[N], qd[N / 16];
    static int8_t q[N];
    fill(x0, N, 1.0f);
    for (int l = 0; l < L; l++) {
        fill(nw[l], N, 1.0f);
        fill(wf, (size_t)N * N, 0.02f); /* keeps the residual's scale over the layers */
        for (int r = 0; r < N; r++) {
            unsigned char *row = wq + ((size_t)l * N + (size_t)r) * rb;
            quant_weights_row(QT_Q4_K, wf + (size_t)r * N, row, N);
            dequant_row(QT_Q4_K, row, wd + ((size_t)l * N + (size_t)r) * N, N);
        }
    }
    memcpy(x, x0, sizeof x);
    for (int l = 0; l < L; l++) {
        ops_rms_norm(h, x, nw[l], N, 1e-5f);
        q8_emulate(h, N, q, qd);
        for (int k = 0; k < N; k++)
            hdq[k] = (float)q[k] * qd[2 * (k / 32)];
        for (int r = 0; r < N; r++) {
            double sd = 0;
            for (int k = 0; k < N; k++)
                sd += (double)wd[((size_t)l * N + (size_t)r) * N + k] * hdq[k];
            x[r] += (float)sd;
        }
    }
    struct err e = { 0 };
    hip_fn frms = NULL, fmv = NULL;
    CHECK(hip_rt_fn_pdl(g_rt, "rms_norm", &frms, &e) == 0 && hip_rt_fn_pdl(g_rt, "gemvq4_q4_K", &fmv, &e) == 0, "%s",
          e.msg);
    uint64_t dw = dup(wq, rb * (size_t)N * L), dnw = dup(nw, sizeof nw), dx = dup(x0, sizeof x0);
    uint64_t dh = poisoned(N), dq = dup(NULL, N), dqd = poisoned(N / 16);
    int rc = 0;
    for (int l = 0; l < L && !rc; l++) {
        uint64_t wl = dnw + (uint64_t)l * N * 4, rows = 0;
        int n = N, xs = N, ys = N;
        float eps = 1e-5f;
        uint64_t nh = 0;
        float lim = 0.0f;
        void *pr[] = { &dh, &dx, &wl, &rows, &n, &eps, &xs, &ys, &dq, &dqd, &nh, &nh, &lim };
        rc = hip_rt_launch(g_rt, frms, 1, 1, 1, N / 4, pr, &e);
        struct gemv_args a = { .w = dw + (uint64_t)l * N * rb, .x = dq, .xd = dqd, .y = dx, .row_bytes = (int64_t)rb,
                               .n_rows = N, .k = N, .x_stride = N, .y_stride = N, .x_div = 1, .nz = 1, .mode = 1,
                               .pf = 1 };
        void *pg[] = { &a };
        if (!rc)
            rc = hip_rt_launch(g_rt, fmv, N / 4, 1, 1, N / 32, pg, &e);
    }
    if (!rc)
        rc = hip_rt_sync(g_rt, &e);
    CHECK(rc == 0, "chain: %s", e.msg);
    static float y[N];
    get(y, dx, sizeof y);
    const double r = rel(y, x, N);
    /* a q8 value at a rounding edge may round the other way on the GPU (its block sum adds in another
     * order than ops_rms_norm): ~2e-4 each; a kernel reading another layer's values is off by ~0.5 */
    CHECK(r < 2e-3, "PDL chain of %d layers: residual rel %.3g", L, r);
    printf("#   %d x (rms_norm + gemvq4_q4_K %dx%d) back to back, PDL %s: rel %.2e\n", L, N, N,
           hip_rt_pdl(g_rt) ? "on" : "off", r);
    dfree(dw), dfree(dnw), dfree(dx), dfree(dh);
    dfree(dq), dfree(dqd);
    free(wf), free(wd), free(wq);
}

static void gemv_experts_combined(void)
{
    NEED_GPU();
    check_experts_combined("gemv_q4_K", false, 2, 128);
    check_experts_combined("gemvq_q4_K", true, 2, 128);
    check_experts_combined("gemvq4_q4_K", true, 4, 96);
    check_experts_combined("gemvq8_q4_K", true, 8, 32);
    check_experts_combined("gemvq8_q4_K", true, 8, 128);
}

/* The f16 copy of rows the tensor-core GEMM reads, written by the kernel that made them (rms_norm,
 * swiglu_rows), against mma_xprep run on those rows: the same halves and scales, bit for bit. */
static void check_f16_copy(const char *who, uint64_t dy, int rows, int n, uint64_t dxh, uint64_t dsc, float lim)
{
    uint64_t rh = poisoned(((size_t)rows * n + 1) / 2), rs = poisoned((size_t)rows), none = 0;
    int zero = 0;
    void *p[] = { &dy, &n, &n, &lim, &rs, &rh, &none, &zero, &zero };
    CHECK(launch("mma_xprep", (unsigned)rows, 1, 256, p) == 0, "mma_xprep launch");
    uint16_t *a = malloc(2 * (size_t)rows * n), *b = malloc(2 * (size_t)rows * n);
    float *sa = malloc(sizeof(float) * rows), *sb = malloc(sizeof(float) * rows);
    get(a, dxh, 2 * (size_t)rows * n), get(b, rh, 2 * (size_t)rows * n);
    get(sa, dsc, sizeof(float) * rows), get(sb, rs, sizeof(float) * rows);
    CHECK(!memcmp(a, b, 2 * (size_t)rows * n) && !memcmp(sa, sb, sizeof(float) * rows),
          "%s n=%d: f16 copy or its row scales differ from mma_xprep's", who, n);
    int scaled = 0;
    for (int r = 0; r < rows; r++)
        scaled += sb[r] != 1.0f;
    printf("#   %-12s n=%-5d f16 copy as mma_xprep's (%d of %d rows scaled)\n", who, n, scaled, rows);
    dfree(rh), dfree(rs);
    free(a), free(b), free(sa), free(sb);
}

/* rms_norm's q8 copy of its output equals quantizing that output, and the output matches ops_rms_norm:
 * rows held in registers (up to 8 per thread, 256 and 1024 threads) and the strided path (4096 on 128);
 * in registers also its f16 copy for the tensor-core GEMM (a weight of 1e5 takes the row past 2^15, so
 * it is scaled) */
static void rms_norm_q8_copy(void)
{
    NEED_GPU();
    static const struct { int n, threads; float wscale; } cases[] = {
        { 1024, 256, 1.0f }, { 4096, 1024, 1e5f }, { 4096, 128, 1.0f }, { 96, 32, 1.0f }
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n;
        const bool regs = n <= 8 * cases[c].threads;
        static float x[4096], w[4096], y[4096], ref[4096], qd[256], qdref[256];
        static int8_t q[4096], qref[4096];
        fill(x, n, 2.0f);
        fill(w, n, cases[c].wscale);
        ops_rms_norm(ref, x, w, n, 1e-6f);
        uint64_t dx = dup(x, sizeof(float) * n), dw = dup(w, sizeof(float) * n), dy = poisoned(n),
                 dq = dup(NULL, n), dqd = poisoned(n / 16);
        uint64_t rows = 0, dxh = regs ? poisoned(((size_t)n + 1) / 2) : 0, dsc = regs ? poisoned(1) : 0;
        float eps = 1e-6f, lim = 32768.0f;
        int nn = n;
        void *p[] = { &dy, &dx, &dw, &rows, &nn, &eps, &nn, &nn, &dq, &dqd, &dxh, &dsc, &lim };
        CHECK(launch("rms_norm", 1, 1, (unsigned)cases[c].threads, p) == 0, "launch");
        get(y, dy, sizeof(float) * n);
        get(q, dq, n);
        get(qd, dqd, sizeof(float) * (n / 16));
        q8_emulate(y, n, qref, qdref);
        CHECK(rel(y, ref, n) < 1e-6, "rms_norm n=%d on %d: rel %.3g", n, cases[c].threads, rel(y, ref, n));
        CHECK(!memcmp(q, qref, n), "rms_norm n=%d on %d: q8 quants differ", n, cases[c].threads);
        CHECK(rel(qd, qdref, n / 16) < 1e-6, "rms_norm n=%d: q8 scales rel %.3g", n, rel(qd, qdref, n / 16));
        if (regs)
            check_f16_copy("rms_norm", dy, 1, n, dxh, dsc, lim);
        dfree(dx), dfree(dw), dfree(dy), dfree(dq), dfree(dqd);
        if (regs)
            dfree(dxh), dfree(dsc);
    }
}

/* swiglu_rows: g = silu(g)·u by rows against ops_swiglu, and its f16 copy against mma_xprep's (rows of
 * qwen3-8b's 12288 and of 100; one row's values past 2^15, so scaled) */
static void swiglu_rows_f16_copy(void)
{
    NEED_GPU();
    static const int ns[] = { 12288, 100 };
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const int n = ns[c], rows = 3;
        float *g = malloc(sizeof(float) * rows * n), *u = malloc(sizeof(float) * rows * n);
        float *ref = malloc(sizeof(float) * rows * n), *y = malloc(sizeof(float) * rows * n);
        fill(g, (size_t)rows * n, 4.0f);
        fill(u, (size_t)rows * n, 1.0f);
        for (int i = 0; i < n; i++)
            u[n + i] *= 3e4f; /* row 1 past f16's range after the product */
        memcpy(ref, g, sizeof(float) * rows * n);
        ops_swiglu(ref, u, rows * n);
        uint64_t dg = dup(g, sizeof(float) * rows * n), du = dup(u, sizeof(float) * rows * n);
        uint64_t dxh = poisoned(((size_t)rows * n + 1) / 2), dsc = poisoned(rows);
        float lim = 32768.0f;
        int nn = n;
        void *p[] = { &dg, &du, &nn, &dxh, &dsc, &lim };
        CHECK(launch("swiglu_rows", (unsigned)rows, 1, 1024, p) == 0, "launch");
        get(y, dg, sizeof(float) * rows * n);
        CHECK(rel(y, ref, (size_t)rows * n) < 1e-6, "swiglu_rows n=%d: rel %.3g", n, rel(y, ref, (size_t)rows * n));
        check_f16_copy("swiglu_rows", dg, rows, n, dxh, dsc, lim);
        dfree(dg), dfree(du), dfree(dxh), dfree(dsc);
        free(g), free(u), free(ref), free(y);
    }
}

/* ---- small kernels ---- */

static void embed_rows_dequant(void)
{
    NEED_GPU();
    for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; i++) {
        const enum qtype t = kTypes[i].t;
        const int E = 512, V = 37;
        const size_t rb = qtype_row_size(t, E);
        unsigned char *tab = malloc(rb * V);
        float row[512];
        for (int v = 0; v < V; v++) {
            fill(row, E, 1.0f);
            quant_weights_row(t, row, tab + (size_t)v * rb, E);
        }
        int tok[4] = { 36, 0, 17, 36 };
        float ref[4 * 512], y[4 * 512];
        for (int j = 0; j < 4; j++)
            dequant_row(t, tab + (size_t)tok[j] * rb, ref + j * E, E);
        uint64_t dt = dup(tab, rb * V), dk = dup(tok, sizeof tok);
        int64_t rbb = (int64_t)rb;
        int type = (int)t, ne = E;
        /* one block a row, and the row in 3 slices (uneven: 171 elements a slice, the engine's grid) */
        for (unsigned gy = 1; gy <= 3; gy += 2) {
            uint64_t dy = poisoned(4 * 512);
            void *p[] = { &dt, &rbb, &type, &dk, &dy, &ne };
            CHECK(launch("embed_rows", 4, gy, 64, p) == 0, "launch");
            get(y, dy, sizeof y);
            double r = rel(y, ref, 4 * 512);
            CHECK(r < 1e-6, "embed %s (%u slices) rel %.3g", kTypes[i].name, gy, r);
            dfree(dy);
        }
        dfree(dt), dfree(dk);
        free(tab);
    }
}

static void rms_norm_rows(void)
{
    NEED_GPU();
    const int n = 1000, rows = 3;
    float x[3000], w[1000], y[3000], ref[3000];
    fill(x, 3000, 2.0f);
    fill(w, 1000, 1.0f);
    int sel[3] = { 2, 0, 2 };
    for (int r = 0; r < rows; r++)
        ops_rms_norm(ref + r * n, x + sel[r] * n, w, n, 1e-6f);
    uint64_t dx = dup(x, sizeof x), dw = dup(w, sizeof w), ds = dup(sel, sizeof sel), dy = poisoned(3000);
    float eps = 1e-6f;
    int nn = n, st = n;
    uint64_t nq = 0;
    float lim = 0.0f;
    void *p[] = { &dy, &dx, &dw, &ds, &nn, &eps, &st, &st, &nq, &nq, &nq, &nq, &lim };
    CHECK(launch("rms_norm", 3, 1, 256, p) == 0, "launch");
    get(y, dy, sizeof y);
    double r = rel(y, ref, 3000);
    CHECK(r < 1e-6, "rms_norm rel %.3g", r);
    dfree(dx), dfree(dw), dfree(ds), dfree(dy);
}

/* q/k norm + RoPE (NORM, NEOX; YaRN cos/sin from ops_rope_cache) + K/V cache store */
static void rope_and_store(void)
{
    NEED_GPU();
    for (int variant = 0; variant < 3; variant++) {
        const int n = 3, hd = 128, nh = 4, nkv = 2, n_rot = variant == 2 ? 64 : 128, nctx = 16, nseq = 2;
        const bool neox = variant != 1, yarn = variant == 2;
        const int W = (nh + 2 * nkv) * hd, kvd = nkv * hd;
        float *qkv = malloc(sizeof(float) * (size_t)n * W), *ref = malloc(sizeof(float) * (size_t)n * W);
        float qn[128], kn[128], cs[3 * 128];
        fill(qkv, (size_t)n * W, 1.0f);
        fill(qn, hd, 1.0f);
        fill(kn, hd, 1.0f);
        memcpy(ref, qkv, sizeof(float) * (size_t)n * W);
        int pos[3] = { 5, 0, 9 }, seq[3] = { 1, 0, 1 };
        float dims[2];
        ops_rope_corr_dims(n_rot, 4096, 10000.0f, 32.0f, 1.0f, dims);
        float *kref = calloc((size_t)nseq * nctx * kvd, sizeof(float)), *vref = calloc((size_t)nseq * nctx * kvd, sizeof(float));
        for (int t = 0; t < n; t++) {
            ops_rope_cache(cs + t * n_rot, pos[t], n_rot, 10000.0f, NULL, yarn ? 0.25f : 1.0f, yarn ? 1.0f : 0.0f,
                           yarn ? 1.1f : 1.0f, dims);
            float *r = ref + (size_t)t * W;
            for (int h = 0; h < nh + nkv; h++) {
                ops_rms_norm(r + h * hd, r + h * hd, h < nh ? qn : kn, hd, 1e-6f);
                ops_rope_apply(r + h * hd, n_rot, neox ? ROPE_NEOX : ROPE_NORM, cs + t * n_rot);
            }
            memcpy(kref + ((size_t)seq[t] * nctx + pos[t]) * kvd, r + nh * hd, sizeof(float) * kvd);
            memcpy(vref + ((size_t)seq[t] * nctx + pos[t]) * kvd, r + (nh + nkv) * hd, sizeof(float) * kvd);
        }
        uint64_t dq = dup(qkv, sizeof(float) * (size_t)n * W), dqn = dup(qn, sizeof qn), dkn = dup(kn, sizeof kn);
        uint64_t dcs = dup(cs, sizeof cs), dp = dup(pos, sizeof pos), dsq = dup(seq, sizeof seq);
        uint64_t dkc = dup(kref, sizeof(float) * (size_t)nseq * nctx * kvd), dvc = dup(vref, sizeof(float) * (size_t)nseq * nctx * kvd);
        /* cache cells the batch writes start poisoned */
        struct err e = { 0 };
        for (int t = 0; t < n; t++) {
            dmemset(dkc + 4 * ((size_t)seq[t] * nctx + pos[t]) * kvd, 0x7fc00001u, kvd, &e);
            dmemset(dvc + 4 * ((size_t)seq[t] * nctx + pos[t]) * kvd, 0x7fc00001u, kvd, &e);
        }
        struct rope_args a = { .q = dq, .k = dq + 4 * (uint64_t)nh * hd, .v = dq + 4 * (uint64_t)(nh + nkv) * hd,
                               .q_norm = dqn, .k_norm = dkn, .cs = dcs, .kc = dkc, .vc = dvc, .pos = dp, .seq = dsq,
                               .seq_stride = (int64_t)nctx * kvd, .q_stride = W, .kv_stride = W, .hd = hd,
                               .n_rot = n_rot, .n_head = nh, .n_head_kv = nkv, .neox = neox, .kv_f16 = 0, .eps = 1e-6f };
        void *p[] = { &a };
        CHECK(launch("rope_store", n, nh + nkv, 128, p) == 0, "launch");
        float *y = malloc(sizeof(float) * (size_t)n * W), *kc = malloc(sizeof(float) * (size_t)nseq * nctx * kvd),
              *vc = malloc(sizeof(float) * (size_t)nseq * nctx * kvd);
        get(y, dq, sizeof(float) * (size_t)n * W);
        get(kc, dkc, sizeof(float) * (size_t)nseq * nctx * kvd);
        get(vc, dvc, sizeof(float) * (size_t)nseq * nctx * kvd);
        double rq = 0;
        for (int t = 0; t < n; t++) {
            double r1 = rel(y + (size_t)t * W, ref + (size_t)t * W, (size_t)nh * hd);
            if (r1 > rq)
                rq = r1;
        }
        double rk = rel(kc, kref, (size_t)nseq * nctx * kvd), rv = rel(vc, vref, (size_t)nseq * nctx * kvd);
        CHECK(rq < 1e-5 && rk < 1e-5 && rv < 1e-7, "rope variant %d: q %.3g k %.3g v %.3g", variant, rq, rk, rv);
        printf("#   rope %s%s: q %.2e k %.2e v %.2e\n", neox ? "neox" : "norm", yarn ? "+yarn (partial rot)" : "", rq, rk, rv);
        uint64_t ds[] = { dq, dqn, dkn, dcs, dp, dsq, dkc, dvc };
        for (size_t i = 0; i < 8; i++)
            dfree(ds[i]);
        free(qkv), free(ref), free(kref), free(vref), free(y), free(kc), free(vc);
    }
}

/* fattn_dec4_128: a block of DEC4_W warps per (token, KV head), its dynamic shared memory raised first */
static int launch_dec4(unsigned blocks, void **p)
{
    struct err e = { 0 };
    hip_fn f = fn("fattn_dec4_128");
    if (hip_rt_fn_smem(g_rt, f, FATTN_DEC4_SMEM(128), &e) ||
        hip_rt_launch_smem(g_rt, f, blocks, 1, 1, 32 * DEC4_W, FATTN_DEC4_SMEM(128), p, &e)) {
        fprintf(stderr, "fattn_dec4_128: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* attention (per query head, and per KV-head group: attn_gqa) for tokens of two sequences at different
 * positions (1, 3 and 5 of 8 splits in use), f32 and f16 caches, 1 and 8 splits, with the q8 copy of o;
 * fattn_dec4_128 on one split (its warps' splits: 1 position in warp 0 alone, 131 and 300 over all four, the
 * ring turning over) */
static void attention_vs_reference(void)
{
    NEED_GPU();
    const int hd = 128, nh = 8, nkv = 2, nctx = 300, nseq = 2, n = 3, kvd = nkv * hd;
    int pos[3] = { 299, 0, 130 }, seq[3] = { 0, 1, 1 };
    float *K = malloc(sizeof(float) * (size_t)nseq * nctx * kvd), *V = malloc(sizeof(float) * (size_t)nseq * nctx * kvd);
    fill(K, (size_t)nseq * nctx * kvd, 1.0f);
    fill(V, (size_t)nseq * nctx * kvd, 1.0f);
    uint16_t *K16 = malloc(2 * (size_t)nseq * nctx * kvd), *V16 = malloc(2 * (size_t)nseq * nctx * kvd);
    quant_weights_row(QT_F16, K, K16, (int64_t)nseq * nctx * kvd);
    quant_weights_row(QT_F16, V, V16, (int64_t)nseq * nctx * kvd);
    float *tab = malloc(sizeof(float) * 65536);
    ops_f16_table_init(tab);
    float q[3 * 8 * 128], ref[3 * 8 * 128], y[3 * 8 * 128], scratch[8 * 300]; /* n_q·n_kv */
    fill(q, sizeof q / 4, 1.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    uint64_t dq = dup(q, sizeof q), dp = dup(pos, sizeof pos), ds = dup(seq, sizeof seq);
    uint64_t dpart = poisoned((size_t)n * nh * 8 * (hd + 2));
    static const char *const kname[4] = { "", "_gqa", " (fattn_dec_128)", " (fattn_dec4_128)" };
    for (int f16 = 0; f16 < 2; f16++) {
        const void *Kc = f16 ? (const void *)K16 : (const void *)K, *Vc = f16 ? (const void *)V16 : (const void *)V;
        const size_t elt = f16 ? 2 : 4;
        for (int t = 0; t < n; t++)
            for (int g = 0; g < nkv; g++) {
                const size_t off = ((size_t)seq[t] * nctx) * kvd + (size_t)g * hd;
                ops_attn_ref(q + (size_t)t * nh * hd + (size_t)g * (nh / nkv) * hd, nh / nkv, hd,
                             (const char *)Kc + off * elt, (const char *)Vc + off * elt, kvd, pos[t] + 1, scale,
                             f16 ? tab : NULL, ref + (size_t)t * nh * hd + (size_t)g * (nh / nkv) * hd, scratch);
            }
        uint64_t dk = dup(Kc, elt * nseq * nctx * kvd), dv = dup(Vc, elt * nseq * nctx * kvd);
        /* fm: the splits merged by each head's last split block (a.cnt) instead of attn_combine, launched
         * twice (its counters must be back at zero for the second) */
        /* gqa 0: attn (a block per query head), 1: attn_gqa (per KV head), 2: fattn_dec_128 (per KV head, on
         * tensor cores; f16 cache, merged by attn_combine only) */
        for (int gqa = 0; gqa < 4; gqa++)
        for (int split = 1; split <= 8; split *= 8)
        for (int fm = 0; fm < (split > 1 && gqa < 2 ? 3 : 1); fm++) {
            if ((gqa >= 2 && !f16) || (gqa == 3 && split > 1))
                continue;
            uint64_t dy = poisoned(sizeof y / 4);
            struct attn_args a = { .q = dq, .o = dy, .k = dk, .v = dv, .pos = dp, .seq = ds, .part = dpart,
                                   .seq_stride = (int64_t)nctx * kvd, .kv_dim = kvd, .hd = hd, .n_head = nh,
                                   .n_head_kv = nkv, .q_stride = nh * hd, .o_stride = nh * hd, .nsplit = split,
                                   .kv_f16 = f16, .scale = scale };
            static uint64_t dcnt;
            if (fm == 1) {
                int32_t zero[3 * 8] = { 0 }; /* [n][n_head] */
                dcnt = dup(zero, sizeof zero);
            }
            a.cnt = fm ? dcnt : 0;
            /* the q8 copy of o comes from attn (tokens of one split) or attn_combine */
            uint64_t dq8 = dup(NULL, sizeof y / 4), dq8d = poisoned(sizeof y / 4 / 16);
            a.oq = dq8, a.oqd = dq8d;
            void *p[] = { &a };
            if (gqa == 3)
                CHECK(launch_dec4(n * nkv, p) == 0, "launch");
            else if (gqa == 2)
                CHECK(launch("fattn_dec_128", n * nkv, (unsigned)split, 32, p) == 0, "launch");
            else if (gqa) /* one block per KV head for its nh / nkv query heads */
                CHECK(launch("attn_gqa", n * nkv, (unsigned)split, 256, p) == 0, "launch");
            else
                CHECK(launch("attn", n * nh, (unsigned)split, 128, p) == 0, "launch");
            if (split > 1 && !fm)
                /* after fattn_dec_128, four threads per element (the engine's block on many splits) */
                CHECK(launch("attn_combine", n * nh, 1, gqa == 2 ? 4 * hd : 128, p) == 0, "launch");
            get(y, dy, sizeof y);
            if (fm == 2)
                dfree(dcnt);
            double r = rel(y, ref, sizeof y / 4);
            {
                static int8_t q8[3 * 8 * 128], q8ref[3 * 8 * 128];
                static float q8d[3 * 8 * 128 / 16], q8dref[3 * 8 * 128 / 16];
                get(q8, dq8, sizeof q8);
                get(q8d, dq8d, sizeof q8d);
                q8_emulate(y, (int)(sizeof y / 4), q8ref, q8dref);
                CHECK(!memcmp(q8, q8ref, sizeof q8), "attn%s f16=%d split %d merge %d: q8 copy differs", kname[gqa],
                      f16, split, fm);
                CHECK(rel(q8d, q8dref, sizeof q8d / 4) < 1e-6, "attn q8 scales");
                dfree(dq8), dfree(dq8d);
            }
            /* f16: the reference also rounds probabilities to f16 before V·p */
            CHECK(r < (f16 ? 2e-3 : 1e-5), "attn%s f16=%d split %d merge %d rel %.3g", kname[gqa], f16, split,
                  fm, r);
            printf("#   attn%s %s cache, %d split(s)%s: rel %.2e\n", kname[gqa], f16 ? "f16" : "f32", split,
                   fm ? (fm == 1 ? ", merged in attn" : ", merged in attn (2nd launch)") : "", r);
            dfree(dy);
        }
        dfree(dk), dfree(dv);
    }
    dfree(dq), dfree(dp), dfree(ds), dfree(dpart);
    free(K), free(V), free(K16), free(V16), free(tab);
}

/* fattn_dec_128 doing rope_store's work itself (attn_args.rope: q/k RMSNorm, RoPE, the K/V store of each
 * token's cell) against rope_store followed by fattn_dec_128: three tokens of three sequences at positions
 * 299, 0 and 130 (the stored cell in the last of 1 and of 8 splits), neox with norms, neox rotating half
 * the head, the pairwise rotation without norms; o, its q8 copy and both caches' cells. d4: the same with
 * fattn_dec4_128 (its warps norm and rotate every fourth query head; the cell stored by the warp holding it) */
static void attention_does_rope(void)
{
    NEED_GPU();
    const int hd = 128, nh = 8, nkv = 2, nctx = 300, nseq = 3, n = 3, kvd = nkv * hd, W = (nh + 2 * nkv) * hd;
    const size_t ncache = (size_t)nseq * nctx * kvd;
    int pos[3] = { 299, 0, 130 }, seq[3] = { 2, 0, 1 };
    float *K = malloc(sizeof(float) * ncache), *V = malloc(sizeof(float) * ncache), *qkv = malloc(sizeof(float) * n * W);
    uint16_t *K16 = malloc(2 * ncache), *V16 = malloc(2 * ncache), *ka = malloc(2 * ncache), *kb = malloc(2 * ncache);
    float qn[128], kn[128], cs[3 * 128], ya[3 * 8 * 128], yb[3 * 8 * 128];
    float *tab = malloc(sizeof(float) * 65536);
    ops_f16_table_init(tab);
    fill(K, ncache, 1.0f);
    fill(V, ncache, 1.0f);
    quant_weights_row(QT_F16, K, K16, (int64_t)ncache);
    quant_weights_row(QT_F16, V, V16, (int64_t)ncache);
    uint64_t dp = dup(pos, sizeof pos), ds = dup(seq, sizeof seq), dpart = poisoned((size_t)n * nh * 8 * (hd + 2));
    for (int variant = 0; variant < 3; variant++) {
        const int n_rot = variant == 1 ? 64 : 128;
        const bool neox = variant != 2, norms = variant != 2;
        fill(qkv, (size_t)n * W, 2.0f);
        fill(qn, hd, 1.0f);
        fill(kn, hd, 1.0f);
        float dims[2];
        ops_rope_corr_dims(n_rot, 4096, 10000.0f, 32.0f, 1.0f, dims);
        for (int t = 0; t < n; t++)
            ops_rope_cache(cs + t * n_rot, pos[t], n_rot, 10000.0f, NULL, 1.0f, 0.0f, 1.0f, dims);
        uint64_t dqn = dup(qn, sizeof qn), dkn = dup(kn, sizeof kn), dcs = dup(cs, sizeof cs);
        for (int split = 1; split <= 8; split *= 8)
            for (int d4 = 0; d4 < (split == 1 ? 2 : 1); d4++)
            for (int fused = 0; fused < 2; fused++) {
                uint64_t dq = dup(qkv, sizeof(float) * (size_t)n * W), dk = dup(K16, 2 * ncache), dv = dup(V16, 2 * ncache);
                uint64_t dy = poisoned(sizeof ya / 4), dq8 = dup(NULL, sizeof ya / 4), dq8d = poisoned(sizeof ya / 4 / 16);
                struct rope_args r = { .q = dq, .k = dq + 4 * (uint64_t)nh * hd, .v = dq + 4 * (uint64_t)(nh + nkv) * hd,
                                       .q_norm = norms ? dqn : 0, .k_norm = norms ? dkn : 0, .cs = dcs, .kc = dk, .vc = dv,
                                       .pos = dp, .seq = ds, .seq_stride = (int64_t)nctx * kvd, .q_stride = W,
                                       .kv_stride = W, .hd = hd, .n_rot = n_rot, .n_head = nh, .n_head_kv = nkv,
                                       .neox = neox, .kv_f16 = 1, .eps = 1e-6f };
                struct attn_args a = { .q = dq, .o = dy, .k = dk, .v = dv, .pos = dp, .seq = ds, .part = dpart, .oq = dq8,
                                       .oqd = dq8d, .seq_stride = (int64_t)nctx * kvd, .kv_dim = kvd, .hd = hd,
                                       .n_head = nh, .n_head_kv = nkv, .q_stride = W, .o_stride = nh * hd,
                                       .nsplit = split, .kv_f16 = 1, .scale = 1.0f / sqrtf((float)hd), .rope = fused,
                                       .r = r };
                void *pr[] = { &r }, *pa[] = { &a };
                if (!fused)
                    CHECK(launch("rope_store", n, nh + nkv, 128, pr) == 0, "launch");
                if (d4)
                    CHECK(launch_dec4(n * nkv, pa) == 0, "launch");
                else
                    CHECK(launch("fattn_dec_128", n * nkv, (unsigned)split, 32, pa) == 0, "launch");
                if (split > 1 && !d4)
                    CHECK(launch("attn_combine", n * nh, 1, 4 * hd, pa) == 0, "launch");
                get(fused ? yb : ya, dy, sizeof ya);
                get(fused ? kb : ka, dk, 2 * ncache);
                if (fused) {
                    double r_o = rel(yb, ya, sizeof ya / 4), r_k = 0;
                    for (int t = 0; t < n; t++) { /* the stored K cells, as floats */
                        float ca[256], cb[256];
                        const size_t off = ((size_t)seq[t] * nctx + pos[t]) * kvd;
                        for (int i = 0; i < kvd; i++)
                            ca[i] = tab[ka[off + i]], cb[i] = tab[kb[off + i]];
                        const double rk = rel(cb, ca, (size_t)kvd);
                        r_k = rk > r_k ? rk : r_k;
                    }
                    CHECK(r_o < 1e-4 && r_k < 1e-3, "rope in attention, variant %d split %d: o rel %.3g, K cells rel %.3g",
                          variant, split, r_o, r_k);
                    printf("#   %s with rope_store's work, %s n_rot %d%s, %d split(s): o rel %.2e, K cells "
                           "rel %.2e\n", d4 ? "fattn_dec4_128" : "fattn_dec_128", neox ? "neox" : "pairs", n_rot,
                           norms ? " + q/k norms" : "", split, r_o, r_k);
                }
                dfree(dq), dfree(dk), dfree(dv), dfree(dy), dfree(dq8), dfree(dq8d);
            }
        dfree(dqn), dfree(dkn), dfree(dcs);
    }
    dfree(dp), dfree(ds), dfree(dpart);
    free(K), free(V), free(qkv), free(K16), free(V16), free(ka), free(kb), free(tab);
}

/* tensor-core prompt attention (kernels/fattn.cu): 100 tokens of sequence 1 at positions 30..129 over
 * an f16 cache (cells 0..29 cached before), two 64-token tiles (the second partial), head sizes 64, 128
 * and 256 (Q read from shared memory; where the device's blocks may take FATTN_SMEM(256)), 4 query heads
 * per KV head; against ops_attn_ref, which rounds q and the probabilities to f16 */
static void flash_attention_prompt(void)
{
    NEED_GPU();
    const int nh = 8, nkv = 2, nctx = 160, nseq = 2, n = 100, p0 = 30;
    for (int hd = 64; hd <= 256; hd *= 2) {
        if (hd == 256 && hip_rt_smem_optin(g_rt) < FATTN_SMEM(256)) {
            printf("#   fattn_256: the device's blocks take %d bytes of shared memory, the kernel %d: skipped\n",
                   hip_rt_smem_optin(g_rt), FATTN_SMEM(256));
            continue;
        }
        const int kvd = nkv * hd;
        const size_t ncache = (size_t)nseq * nctx * kvd, nq = (size_t)n * nh * hd;
        float *K = malloc(sizeof(float) * ncache), *V = malloc(sizeof(float) * ncache);
        uint16_t *K16 = malloc(2 * ncache), *V16 = malloc(2 * ncache);
        float *q = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq), *y = malloc(sizeof(float) * nq);
        float *tab = malloc(sizeof(float) * 65536), *scratch = malloc(sizeof(float) * 4 * nctx);
        fill(K, ncache, 1.0f);
        fill(V, ncache, 1.0f);
        fill(q, nq, 1.0f);
        quant_weights_row(QT_F16, K, K16, (int64_t)ncache);
        quant_weights_row(QT_F16, V, V16, (int64_t)ncache);
        ops_f16_table_init(tab);
        int pos[100], seq[100];
        for (int t = 0; t < n; t++)
            pos[t] = p0 + t, seq[t] = 1;
        const float scale = 1.0f / sqrtf((float)hd);
        for (int t = 0; t < n; t++)
            for (int g = 0; g < nkv; g++) {
                const size_t off = (size_t)nctx * kvd + (size_t)g * hd, qo = (size_t)t * nh * hd + (size_t)g * (nh / nkv) * hd;
                ops_attn_ref(q + qo, nh / nkv, hd, (const char *)K16 + 2 * off, (const char *)V16 + 2 * off, kvd, pos[t] + 1,
                             scale, tab, ref + qo, scratch);
            }
        uint64_t dq = dup(q, sizeof(float) * nq), dp = dup(pos, sizeof pos), ds = dup(seq, sizeof seq);
        uint64_t dk = dup(K16, 2 * ncache), dv = dup(V16, 2 * ncache), dy = poisoned(nq);
        struct attn_args a = { .q = dq, .o = dy, .k = dk, .v = dv, .pos = dp, .seq = ds, .seq_stride = (int64_t)nctx * kvd,
                               .kv_dim = kvd, .hd = hd, .n_head = nh, .n_head_kv = nkv, .q_stride = nh * hd,
                               .o_stride = nh * hd, .nsplit = 1, .kv_f16 = 1, .scale = scale };
        int nn = n;
        void *p[] = { &a, &nn };
        char name[32];
        snprintf(name, sizeof name, "fattn_%d", hd);
        struct err e = { 0 };
        int rc = hip_rt_fn_smem(g_rt, fn(name), FATTN_SMEM(hd), &e);
        if (!rc)
            rc = hip_rt_launch_smem(g_rt, fn(name), (unsigned)((n + 63) / 64), (unsigned)nh, 1, 128, FATTN_SMEM(hd), p, &e);
        if (!rc)
            rc = hip_rt_sync(g_rt, &e);
        CHECK(rc == 0, "%s: %s", name, e.msg);
        get(y, dy, sizeof(float) * nq);
        double r = rel(y, ref, nq);
        CHECK(r < 2e-3, "%s rel %.3g", name, r);
        printf("#   %s 100 tokens at 30..129, f16 cache: rel %.2e\n", name, r);
        dfree(dq), dfree(dp), dfree(ds), dfree(dk), dfree(dv);
        dfree(dy);
        free(K), free(V), free(K16), free(V16), free(q), free(ref), free(y), free(tab), free(scratch);
    }
}

static void elementwise_softmax_argmax(void)
{
    NEED_GPU();
    const int n = 3000;
    float a[3000], b[3000], y[3000], ref[3000];
    fill(a, n, 3.0f);
    fill(b, n, 1.0f);
    /* add */
    for (int i = 0; i < n; i++)
        ref[i] = a[i] + b[i];
    uint64_t da = dup(a, sizeof a), db = dup(b, sizeof b);
    int nn = n;
    void *p[] = { &da, &db, &nn };
    CHECK(launch("add_f32", (n + 255) / 256, 1, 256, p) == 0, "launch");
    get(y, da, sizeof y);
    CHECK(rel(y, ref, n) < 1e-7, "add rel %.3g", rel(y, ref, n));
    /* swiglu */
    dfree(da);
    da = dup(a, sizeof a);
    memcpy(ref, a, sizeof a);
    ops_swiglu(ref, b, n);
    CHECK(launch("swiglu_f32", (n + 255) / 256, 1, 256, p) == 0, "launch");
    get(y, da, sizeof y);
    CHECK(rel(y, ref, n) < 1e-6, "swiglu rel %.3g", rel(y, ref, n));
    /* softmax of 3 rows of 1000 */
    dfree(da);
    da = dup(a, sizeof a);
    memcpy(ref, a, sizeof a);
    for (int r = 0; r < 3; r++)
        ops_softmax(ref + r * 1000, 1000);
    int len = 1000;
    void *ps[] = { &da, &len, &len };
    CHECK(launch("softmax_rows", 3, 1, 256, ps) == 0, "launch");
    get(y, da, sizeof y);
    CHECK(rel(y, ref, n) < 1e-6, "softmax rel %.3g", rel(y, ref, n));
    /* argmax of 3 rows of 1000 */
    int am[3], amref[3];
    a[1000 + 777] = 50.0f;
    a[2000 + 3] = 50.0f, a[2000 + 900] = 50.0f; /* tie: lower index wins */
    for (int r = 0; r < 3; r++) {
        amref[r] = 0;
        for (int i = 1; i < 1000; i++)
            if (a[r * 1000 + i] > a[r * 1000 + amref[r]])
                amref[r] = i;
    }
    dfree(da);
    da = dup(a, sizeof a);
    uint64_t dam = dup(NULL, sizeof am);
    void *pa[] = { &da, &len, &len, &dam };
    CHECK(launch("argmax_rows", 3, 1, 1024, pa) == 0, "launch");
    get(am, dam, sizeof am);
    for (int r = 0; r < 3; r++)
        CHECK(am[r] == amref[r], "argmax row %d: %d vs %d", r, am[r], amref[r]);
    dfree(da), dfree(db), dfree(dam);
}

/* argmax_split: rows of a vocabulary's width over many blocks, against a scan on the CPU; the maxima
 * planted where slices meet, ties across slices (the lower index wins), at the last element; 7 and
 * 128 slices; each launched twice (the row counters must be back at zero). */
static void argmax_over_slices(void)
{
    NEED_GPU();
    enum { R = 4, N = 151936 };
    float *a = malloc(sizeof(float) * (size_t)R * N);
    fill(a, (size_t)R * N, 1.0f);
    a[0 * N + 1187 * 64] = 9.0f;                            /* the first element of a slice (128 slices) */
    a[1 * N + 5] = 9.0f, a[1 * N + N - 3] = 9.0f;           /* tie across slices: 5 */
    a[2 * N + N - 1] = 9.0f;                                /* the last element */
    a[3 * N + 21705] = 9.0f, a[3 * N + 21706] = 9.0f;       /* tie at a 7-slice boundary (21706 = ⌈N/7⌉) */
    int ref[R];
    for (int r = 0; r < R; r++) {
        ref[r] = 0;
        for (int i = 1; i < N; i++)
            if (a[(size_t)r * N + i] > a[(size_t)r * N + ref[r]])
                ref[r] = i;
    }
    uint64_t da = dup(a, sizeof(float) * (size_t)R * N), dout = dup(NULL, sizeof ref);
    uint64_t dpv = poisoned(R * 128), dpi = dup(NULL, R * 128 * 4);
    int32_t zero[R] = { 0 };
    uint64_t dcnt = dup(zero, sizeof zero);
    int n = N, stride = N;
    void *p[] = { &da, &n, &stride, &dout, &dpv, &dpi, &dcnt };
    const unsigned slices[] = { 7, 128 };
    for (int k = 0; k < 2; k++)
        for (int rep = 0; rep < 2; rep++) {
            struct err e = { 0 };
            int out[R];
            CHECK(dmemset(dout, 0xffffffffu, R, &e) == 0, "memset");
            CHECK(launch("argmax_split", slices[k], R, 256, p) == 0, "launch");
            get(out, dout, sizeof out);
            for (int r = 0; r < R; r++)
                CHECK(out[r] == ref[r], "argmax_split %u slices, launch %d, row %d: %d vs %d", slices[k], rep + 1, r,
                      out[r], ref[r]);
        }
    dfree(da), dfree(dout), dfree(dpv), dfree(dpi);
    dfree(dcnt);
    free(a);
}

/* topk_cut's reference: the same bins (TOPK_BINS over the finite [min, max], the same float steps),
 * the bin holding the k-th largest, and what lies in it and above; −1 where the kernel must give up
 * (k ≤ 0, ±inf or NaN anywhere, fewer than k finite values, one value only, more than cap kept). With a
 * mask (am: bit i = element i allowed) the same over the allowed elements only, and all of them when at
 * most cap are allowed. keep[i] marks the kept. */
#define TOPK_BINS_REF 2048
static bool ref_allowed(const uint32_t *am, int i) { return !am || (am[i >> 5] >> (i & 31)) & 1u; }
static int topk_cut_ref(const float *r, int n, int k, int cap, const uint32_t *am, unsigned char *keep)
{
    memset(keep, 0, (size_t)n);
    if (k <= 0)
        return -1;
    float mx = -INFINITY, mn = INFINITY;
    int nf = 0, na = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(r[i]))
            continue;
        nf++;
        if (ref_allowed(am, i)) {
            mx = fmaxf(mx, r[i]);
            mn = fminf(mn, r[i]);
            na++;
        }
    }
    if (nf < n) /* +inf, NaN or −inf anywhere: the whole row */
        return -1;
    if (am && na >= 1 && na <= cap) {
        for (int i = 0; i < n; i++)
            keep[i] = ref_allowed(am, i);
        return na;
    }
    if (!(mx > mn) || na < k)
        return -1;
    const float scale = (float)TOPK_BINS_REF / (mx - mn);
    static int hist[TOPK_BINS_REF];
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < n; i++)
        if (r[i] >= mn && ref_allowed(am, i)) {
            int b = (int)((r[i] - mn) * scale);
            hist[b < TOPK_BINS_REF - 1 ? b : TOPK_BINS_REF - 1]++;
        }
    int b = TOPK_BINS_REF - 1, kept = hist[b];
    while (kept < k && b > 0)
        kept += hist[--b];
    if (kept > cap)
        return -1;
    for (int i = 0; i < n; i++)
        if (r[i] >= mn && ref_allowed(am, i)) {
            int bi = (int)((r[i] - mn) * scale);
            keep[i] = (bi < TOPK_BINS_REF - 1 ? bi : TOPK_BINS_REF - 1) >= b;
        }
    return kept;
}

/* topk_cut (the rows' top-k candidates for the host's sampler) against its reference: the same count
 * and the same set of ids with their exact values, on rows of 151936 and 512 floats: normal-ish,
 * NaN and −inf sprinkled, seven values (ties: more than cap kept), one outlier over a flat field, +inf,
 * too few finite values, a ramp; k 40, 1, 100, 0 and one past the finite count; and masked rows (a
 * grammar's): a third of the tokens allowed (the selection among them; at 512 all 171 of them fit),
 * five allowed (fewer than k: all five), +inf at a disallowed token (still the whole row). Every allowed
 * finite value left out must lie below every one kept, nothing disallowed be kept, and the kept be at
 * least k unless fewer are allowed. */
static void topk_cut_rows(void)
{
    NEED_GPU();
    enum { R = 12, CAP = 256 };
    const int ns[] = { 151936, 512 };
    uint32_t s = 7;
    for (int ni = 0; ni < 2; ni++) {
        const int N = ns[ni];
        float *a = malloc(sizeof(float) * (size_t)R * N);
        unsigned char *keep = malloc((size_t)N);
        int kk[R] = { 40, 40, 40, 40, 40, 1, 100, 0, 40, 40, 40, 40 };
        int masked[R] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1 };
        const size_t W = ((size_t)N + 31) / 32;
        uint32_t *am = calloc((size_t)R * W, sizeof *am);
        for (int i = 0; i < N; i++) {
            if (i % 3 == 0)
                am[9 * W + (size_t)i / 32] |= 1u << (i % 32);
            if (i % 97 == 5 && i < 5 * 97)
                am[10 * W + (size_t)i / 32] |= 1u << (i % 32);
            if (i % 2 == 0)
                am[11 * W + (size_t)i / 32] |= 1u << (i % 32);
        }
        for (int r = 0; r < R; r++)
            for (int i = 0; i < N; i++) {
                s = s * 1664525u + 1013904223u;
                float u = (float)(s >> 8) / 16777216.0f, v = (u - 0.5f) * 24.0f;
                float *x = &a[(size_t)r * N + i];
                switch (r) {
                case 1: *x = (s >> 4) % 53 == 0 ? NAN : (s >> 4) % 47 == 0 ? -INFINITY : v; break;
                case 2: *x = (float)((s >> 8) % 7); break;              /* ties */
                case 3: *x = i == N / 3 ? 1000.0f : u * 1e-3f; break;   /* outlier over a flat field */
                case 4: *x = i == 17 ? INFINITY : v; break;             /* +inf */
                case 8: *x = i < 30 ? v : -INFINITY; break;             /* 30 finite, k 40 */
                case 6: *x = (float)i * 0.25f; break;                   /* ramp */
                case 11: *x = i == 17 ? INFINITY : v; break;            /* +inf where the mask forbids */
                default: *x = v; break;
                }
            }
        uint64_t da = dup(a, sizeof(float) * (size_t)R * N), dk = dup(kk, sizeof kk);
        uint64_t dcnt = dup(NULL, R * 4), dids = dup(NULL, (size_t)R * CAP * 4), dvals = dup(NULL, (size_t)R * CAP * 4);
        uint64_t dmk = dup(masked, sizeof masked), dam = dup(am, (size_t)R * W * 4);
        int n = N, stride = N, cap = CAP;
        void *p[] = { &da, &n, &stride, &dk, &cap, &dmk, &dam, &dcnt, &dids, &dvals };
        CHECK(launch("topk_cut", R, 1, 1024, p) == 0, "launch");
        int cnt[R], *ids = malloc((size_t)R * CAP * 4);
        float *vals = malloc((size_t)R * CAP * 4);
        get(cnt, dcnt, sizeof cnt);
        get(ids, dids, (size_t)R * CAP * 4);
        get(vals, dvals, (size_t)R * CAP * 4);
        for (int r = 0; r < R; r++) {
            const float *row = a + (size_t)r * N;
            const uint32_t *m = masked[r] ? am + (size_t)r * W : NULL;
            int ref = topk_cut_ref(row, N, kk[r], CAP, m, keep);
            CHECK(cnt[r] == ref, "n %d row %d: count %d, reference %d", N, r, cnt[r], ref);
            if (cnt[r] != ref || ref < 0)
                continue;
            int bad = 0, seen = 0;
            float lo = INFINITY, hi_out = -INFINITY;
            for (int j = 0; j < ref; j++) {
                int id = ids[(size_t)r * CAP + j];
                if (id < 0 || id >= N || !keep[id] || vals[(size_t)r * CAP + j] != row[id]) {
                    bad++;
                    continue;
                }
                keep[id] = 2; /* seen once */
                seen++;
                lo = fminf(lo, row[id]);
            }
            int n_allowed = 0;
            for (int i = 0; i < N; i++) {
                n_allowed += ref_allowed(m, i);
                if (keep[i] != 2 && ref_allowed(m, i) && row[i] > -INFINITY && row[i] > hi_out)
                    hi_out = row[i];
            }
            CHECK(bad == 0 && seen == ref, "n %d row %d: %d wrong candidates, %d of %d distinct", N, r, bad, seen, ref);
            CHECK((ref >= kk[r] || ref == n_allowed) && hi_out < lo, "n %d row %d: %d kept for k %d, left out up to %g, kept from %g", N, r,
                  ref, kk[r], (double)hi_out, (double)lo);
        }
        CHECK(cnt[0] > 0 && cnt[5] > 0 && cnt[6] >= 100, "n %d: the ordinary rows are served", N);
        CHECK(cnt[1] == -1 && cnt[4] == -1 && cnt[7] == -1 && cnt[8] == -1 && cnt[11] == -1,
              "n %d: NaN / -inf, +inf (allowed or not), k 0 and too few finite values give the whole row back", N);
        CHECK(cnt[9] >= 40 && cnt[10] == 5, "n %d: the masked rows are served (%d, %d)", N, cnt[9], cnt[10]);
        dfree(da), dfree(dk), dfree(dcnt), dfree(dids);
        dfree(dvals), dfree(dmk), dfree(dam);
        free(a), free(keep), free(ids), free(vals), free(am);
    }
}

/* routing of n tokens over X experts, K picked, against ops_softmax + ops_topk + renormalisation */
static void check_route(int n, int X, int K, float lscale)
{
    float *lg = malloc(sizeof(float) * (size_t)n * X), *pr = malloc(sizeof(float) * (size_t)X);
    int *selref = malloc(sizeof(int) * (size_t)n * K), *sel = malloc(sizeof(int) * (size_t)n * K);
    float *wref = malloc(sizeof(float) * (size_t)n * K), *w = malloc(sizeof(float) * (size_t)n * K);
    fill(lg, (size_t)n * X, lscale);
    for (int t = 0; t < n; t++) {
        memcpy(pr, lg + (size_t)t * X, sizeof(float) * (size_t)X);
        ops_softmax(pr, X);
        ops_topk(pr, X, K, selref + t * K);
        double s = 0;
        for (int k = 0; k < K; k++)
            s += pr[selref[t * K + k]];
        for (int k = 0; k < K; k++)
            wref[t * K + k] = pr[selref[t * K + k]] / (float)s;
    }
    uint64_t dl = dup(lg, sizeof(float) * (size_t)n * X), dsel = dup(NULL, sizeof(int) * (size_t)n * K);
    uint64_t dw = poisoned((size_t)n * K);
    int xx = X, kk = K;
    float scale = 0.0f;
    void *p[] = { &dl, &xx, &kk, &dsel, &dw, &scale };
    CHECK(launch("moe_route", (unsigned)n, 1, 32, p) == 0, "launch");
    get(sel, dsel, sizeof(int) * (size_t)n * K);
    get(w, dw, sizeof(float) * (size_t)n * K);
    int bad = 0;
    for (int i = 0; i < n * K; i++)
        bad += sel[i] != selref[i];
    CHECK(bad == 0, "route X=%d K=%d: %d of %d slots pick another expert (first: %d vs %d)", X, K, bad, n * K, sel[0],
          selref[0]);
    CHECK(rel(w, wref, (size_t)n * K) < 1e-5, "route X=%d K=%d weights rel %.3g", X, K, rel(w, wref, (size_t)n * K));
    printf("#   moe_route n=%d X=%-3d K=%d: picks equal, weights rel %.2e\n", n, X, K, rel(w, wref, (size_t)n * K));
    dfree(dl), dfree(dsel), dfree(dw);
    free(lg), free(pr), free(selref), free(sel), free(wref), free(w);
}

static void moe_route_and_combine(void)
{
    NEED_GPU();
    check_route(5, 128, 8, 3.0f); /* qwen3moe */
    check_route(3, 256, 8, 3.0f); /* the most the kernel takes */
    check_route(4, 37, 3, 4.0f);  /* not a multiple of the warp */
    const int n = 4, X = 64, K = 6, E = 300;
    float lg[4 * 64];
    fill(lg, sizeof lg / 4, 4.0f);
    int selref[4 * 6];
    float wref[4 * 6];
    for (int t = 0; t < n; t++) {
        float pr[64];
        memcpy(pr, lg + t * X, sizeof pr);
        ops_softmax(pr, X);
        ops_topk(pr, X, K, selref + t * K);
        double s = 0;
        for (int k = 0; k < K; k++)
            s += pr[selref[t * K + k]];
        for (int k = 0; k < K; k++)
            wref[t * K + k] = pr[selref[t * K + k]] / (float)s;
    }
    uint64_t dl = dup(lg, sizeof lg), dsel = dup(NULL, sizeof selref), dw = poisoned(sizeof wref / 4);
    int xx = X, kk = K;
    float scale = 0.0f;
    void *p[] = { &dl, &xx, &kk, &dsel, &dw, &scale };
    CHECK(launch("moe_route", n, 1, 32, p) == 0, "launch");
    int sel[24];
    float w[24];
    get(sel, dsel, sizeof sel);
    get(w, dw, sizeof w);
    for (int i = 0; i < n * K; i++)
        CHECK(sel[i] == selref[i], "route slot %d: expert %d vs %d", i, sel[i], selref[i]);
    CHECK(rel(w, wref, 24) < 1e-5, "route weights rel %.3g", rel(w, wref, 24));
    /* combine: x += Σ w·ey */
    float *ey = malloc(sizeof(float) * (size_t)n * K * E), x[4 * 300], ref[4 * 300];
    fill(ey, (size_t)n * K * E, 1.0f);
    fill(x, sizeof x / 4, 1.0f);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) {
            float s = wref[t * K] * ey[(size_t)t * K * E + i];
            for (int k = 1; k < K; k++)
                s = s + wref[t * K + k] * ey[((size_t)t * K + k) * E + i];
            ref[t * E + i] = x[t * E + i] + s;
        }
    uint64_t dx = dup(x, sizeof x), dey = dup(ey, sizeof(float) * (size_t)n * K * E), dwr = dup(wref, sizeof wref);
    int ee = E;
    void *pc[] = { &dx, &dey, &dwr, &ee, &kk };
    CHECK(launch("moe_combine", n, 1, 256, pc) == 0, "launch");
    get(x, dx, sizeof x);
    CHECK(rel(x, ref, sizeof x / 4) < 1e-6, "combine rel %.3g", rel(x, ref, sizeof x / 4));
    dfree(dl), dfree(dsel), dfree(dw), dfree(dx);
    dfree(dey), dfree(dwr);
    free(ey);
}

/* ---- hybrid (qwen35) kernels ---- */

/* Rows of 3 sequences interleaved in one batch, grouped as the engine groups them; sequence 2
 * starts at position 0 (its incoming state is ignored), 0 and 1 carry random state. */
#define HB_N 13
static const int hb_seq[HB_N] = { 0, 1, 0, 2, 0, 1, 0, 0, 2, 1, 0, 0, 2 };
static int hb_groups(int B, int32_t *h)
{
    int32_t *rows = h + 1, *gs = rows + B, *gst = gs + B, *gl = gst + B, *gf = gl + B;
    int ng = 0, filled = 0;
    for (int t = 0; t < HB_N; t++) {
        int g = 0;
        while (g < ng && gs[g] != hb_seq[t])
            g++;
        if (g < ng)
            continue;
        gs[g] = hb_seq[t], gst[g] = filled, gf[g] = hb_seq[t] == 2;
        int cnt = 0;
        for (int u = t; u < HB_N; u++)
            if (hb_seq[u] == hb_seq[t])
                rows[filled + cnt++] = u;
        gl[g] = cnt, filled += cnt, ng++;
    }
    h[0] = ng;
    return ng;
}
static struct gdn_groups hb_dev_groups(uint64_t d, int B)
{
    const uint64_t b = (uint64_t)B;
    return (struct gdn_groups){ .n_grp = d, .rows = d + 4, .seq = d + 4 + 4 * b, .start = d + 4 + 8 * b,
                                .len = d + 4 + 12 * b, .fresh = d + 4 + 16 * b };
}

/* conv + SiLU with its state, then the delta rule (gates and q/k L2 norm fused) against gdn.c's
 * gdn_conv, gdn_l2_norm and gdn_recurrent_ref; the carried states too */
static void gdn_conv_and_delta_rule(void)
{
    NEED_GPU();
    for (int D = 16; D <= 128; D *= 2) {
        const int HK = 2, HV = 4, DC = 4, NS = DC - 1, B = HB_N, NSEQ = 3;
        const int kd = HK * D, vd = HV * D, cd = 2 * kd + vd;
        const size_t conv_per = (size_t)cd * NS, ssm_per = (size_t)HV * D * D;
        float *in = malloc(sizeof(float) * B * cd), *w = malloc(sizeof(float) * cd * DC);
        float *cst = malloc(sizeof(float) * NSEQ * conv_per), *sst = malloc(sizeof(float) * NSEQ * ssm_per);
        float *yref = malloc(sizeof(float) * B * cd), *oref = malloc(sizeof(float) * B * vd);
        float *y = malloc(sizeof(float) * B * cd), *o = malloc(sizeof(float) * B * vd);
        float *gcst = malloc(sizeof(float) * NSEQ * conv_per), *gsst = malloc(sizeof(float) * NSEQ * ssm_per);
        float braw[HB_N * 4], araw[HB_N * 4], beta[HB_N * 4], gd[HB_N * 4], dt[4], A[4];
        fill(in, (size_t)B * cd, 1.0f);
        fill(w, (size_t)cd * DC, 0.5f);
        fill(cst, NSEQ * conv_per, 1.0f);
        fill(sst, NSEQ * ssm_per, 0.2f);
        fill(braw, sizeof braw / 4, 2.0f);
        fill(araw, sizeof araw / 4, 2.0f);
        fill(dt, 4, 1.0f);
        for (int h = 0; h < HV; h++)
            A[h] = -expf(frand() * 0.5f - 0.5f);
        /* device layouts: conv state [k][cd], delta state [H_v][d_k][d_v]; sequence 2 holds garbage */
        for (int s = 0; s < NSEQ; s++) {
            for (int c = 0; c < cd; c++)
                for (int k = 0; k < NS; k++)
                    gcst[s * conv_per + (size_t)k * cd + c] = cst[s * conv_per + (size_t)c * NS + k];
            for (int h = 0; h < HV; h++)
                for (int b = 0; b < D; b++)
                    for (int a = 0; a < D; a++)
                        gsst[s * ssm_per + ((size_t)h * D + a) * D + b] = sst[s * ssm_per + ((size_t)h * D + b) * D + a];
        }
        memset(cst + 2 * conv_per, 0, sizeof(float) * conv_per);
        memset(sst + 2 * ssm_per, 0, sizeof(float) * ssm_per);
        /* reference */
        int32_t grp[1 + 5 * HB_N];
        const int ng = hb_groups(B, grp);
        const int32_t *rows = grp + 1, *gs = rows + B, *gst = gs + B, *gl = gst + B;
        for (int i = 0; i < B * HV; i++) {
            beta[i] = gdn_sigmoid(braw[i]);
            gd[i] = gdn_softplus(araw[i] + dt[i % HV]) * A[i % HV];
        }
        for (int g = 0; g < ng; g++)
            gdn_conv(in, (size_t)cd, yref, (size_t)cd, rows + gst[g], gl[g], w, cst + gs[g] * conv_per, DC, 0, cd);
        float *yn = malloc(sizeof(float) * B * cd);
        memcpy(yn, yref, sizeof(float) * B * cd);
        for (int t = 0; t < B; t++)
            for (int h = 0; h < 2 * HK; h++)
                gdn_l2_norm(yn + (size_t)t * cd + (size_t)h * D, D, 1e-6f);
        for (int g = 0; g < ng; g++)
            for (int vh = 0; vh < HV; vh++) {
                const int kh = vh % HK;
                const struct gdn_head hd = { .Q = yn + kh * D, .K = yn + kd + kh * D, .V = yn + 2 * kd + vh * D,
                                             .qk_stride = (size_t)cd, .v_stride = (size_t)cd, .beta = beta + vh,
                                             .gdecay = gd + vh, .gate_stride = HV, .O = oref + vh * D,
                                             .o_stride = (size_t)vd, .d_k = D, .d_v = D,
                                             .scale = 1.0f / sqrtf((float)D) };
                gdn_recurrent_ref(&hd, rows + gst[g], gl[g], sst + gs[g] * ssm_per + (size_t)vh * D * D);
            }
        /* device */
        uint64_t dg = dup(grp, sizeof grp), din = dup(in, sizeof(float) * B * cd), dw = dup(w, sizeof(float) * cd * DC);
        uint64_t dcs = dup(gcst, sizeof(float) * NSEQ * conv_per), dss = dup(gsst, sizeof(float) * NSEQ * ssm_per);
        uint64_t dy = poisoned((size_t)B * cd), d_o = poisoned((size_t)B * vd);
        uint64_t db = dup(braw, sizeof braw), da = dup(araw, sizeof araw), ddt = dup(dt, sizeof dt), dA = dup(A, sizeof A);
        struct gdn_conv_args ca = { .g = hb_dev_groups(dg, B), .in = din, .out = dy, .w = dw, .state = dcs,
                                    .seq_stride = (int64_t)conv_per, .conv_dim = cd, .d_conv = DC };
        void *pc[] = { &ca };
        CHECK(launch("gdn_conv", (unsigned)B, (unsigned)((cd + 127) / 128), 128, pc) == 0, "launch");
        struct gdn_rec_args ra = { .g = hb_dev_groups(dg, B), .qkv = dy, .b = db, .a = da, .dt = ddt, .A = dA,
                                   .o = d_o, .state = dss, .seq_stride = (int64_t)ssm_per, .conv_dim = cd,
                                   .n_k_heads = HK, .n_v_heads = HV, .d_v = D, .scale = 1.0f / sqrtf((float)D),
                                   .eps = 1e-6f };
        void *pr[] = { &ra };
        char nm[32];
        snprintf(nm, sizeof nm, "gdn_rec_%d", D);
        struct err e = { 0 };
        const unsigned nwarp = D / 32 > 1 ? (unsigned)D / 32 : 1; /* warps per block, as the engine launches it */
        CHECK(hip_rt_launch(g_rt, fn(nm), (unsigned)B, HV, (unsigned)((D + 31) / 32), 32 * nwarp, pr, &e) == 0 &&
              hip_rt_sync(g_rt, &e) == 0, "%s: %s", nm, e.msg);
        get(y, dy, sizeof(float) * B * cd);
        get(o, d_o, sizeof(float) * B * vd);
        get(gcst, dcs, sizeof(float) * NSEQ * conv_per);
        get(gsst, dss, sizeof(float) * NSEQ * ssm_per);
        double ry = rel(y, yref, (size_t)B * cd), ro = rel(o, oref, (size_t)B * vd);
        double rc = 0, rs = 0;
        for (int s = 0; s < NSEQ; s++) {
            float *ct = malloc(sizeof(float) * conv_per);
            for (int c = 0; c < cd; c++)
                for (int k = 0; k < NS; k++)
                    ct[c * NS + k] = gcst[s * conv_per + (size_t)k * cd + c];
            double r1 = rel(ct, cst + s * conv_per, conv_per);
            free(ct);
            rc = r1 > rc ? r1 : rc;
            float *tr = malloc(sizeof(float) * ssm_per);
            for (int h = 0; h < HV; h++)
                for (int b = 0; b < D; b++)
                    for (int a = 0; a < D; a++)
                        tr[((size_t)h * D + b) * D + a] = gsst[s * ssm_per + ((size_t)h * D + a) * D + b];
            double r2 = rel(tr, sst + s * ssm_per, ssm_per);
            rs = r2 > rs ? r2 : rs;
            free(tr);
        }
        CHECK(ry < 1e-6 && rc < 1e-7, "gdn_conv d=%d: out rel %.3g, state rel %.3g", D, ry, rc);
        CHECK(ro < 1e-5 && rs < 1e-5, "gdn_rec_%d: out rel %.3g, state rel %.3g", D, ro, rs);
        printf("#   d_state %d: conv out %.2e state %.2e; delta rule out %.2e state %.2e\n", D, ry, rc, ro, rs);

        /* gated output norm: RMSNorm(o_h) · w ⊙ silu(z_h) per value head */
        float *z = malloc(sizeof(float) * B * vd), nw[128], *gref = malloc(sizeof(float) * B * vd);
        fill(z, (size_t)B * vd, 2.0f);
        fill(nw, (size_t)D, 1.0f);
        for (int t = 0; t < B; t++)
            for (int h = 0; h < HV; h++) {
                float *r = gref + (size_t)t * vd + h * D;
                ops_rms_norm(r, oref + (size_t)t * vd + h * D, nw, D, 1e-6f);
                for (int i = 0; i < D; i++)
                    r[i] *= ops_silu(z[(size_t)t * vd + h * D + i]);
            }
        uint64_t dz = dup(z, sizeof(float) * B * vd), dnw = dup(nw, sizeof(float) * D);
        /* with its q8 copy (the out projection's GEMV input) */
        uint64_t dq8 = dup(NULL, (size_t)B * vd), dq8d = poisoned((size_t)B * vd / 16);
        uint64_t q8a = D % 32 == 0 ? dq8 : 0, q8b = D % 32 == 0 ? dq8d : 0; /* heads of whole warps only */
        int vdd = vd, dd = D;
        float eps = 1e-6f;
        void *pg[] = { &d_o, &dz, &dnw, &vdd, &dd, &eps, &q8a, &q8b };
        CHECK(launch("gdn_gnorm", (unsigned)B, (unsigned)HV, (unsigned)((D + 31) / 32 * 32), pg) == 0, "launch");
        get(o, d_o, sizeof(float) * B * vd);
        double rg = rel(o, gref, (size_t)B * vd);
        CHECK(rg < 1e-5, "gdn_gnorm d=%d rel %.3g", D, rg);
        if (q8a) {
            int8_t *q8 = malloc((size_t)B * vd), *q8ref = malloc((size_t)B * vd);
            float *q8d = malloc(sizeof(float) * B * vd / 16), *q8dref = malloc(sizeof(float) * B * vd / 16);
            get(q8, dq8, (size_t)B * vd);
            get(q8d, dq8d, sizeof(float) * B * vd / 16);
            q8_emulate(o, B * vd, q8ref, q8dref);
            CHECK(!memcmp(q8, q8ref, (size_t)B * vd) && rel(q8d, q8dref, (size_t)B * vd / 16) < 1e-6,
                  "gdn_gnorm d=%d: q8 copy differs", D);
            free(q8), free(q8ref), free(q8d), free(q8dref);
        }
        printf("#   gated norm %.2e\n", rg);
        uint64_t fr[] = { dg, din, dw, dcs, dss, dy, d_o, db, da, ddt, dA, dz, dnw, dq8, dq8d };
        for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
            dfree(fr[i]);
        free(in), free(w), free(cst), free(sst), free(yref), free(oref), free(y), free(o), free(gcst), free(gsst);
        free(yn), free(z), free(gref);
    }
}

/* The prefill kernels: token-parallel conv (gdn_conv_tok, gdn_conv_state) and the chunked delta rule
 * (gdn_chunk_prep, gdn_chunk_scan) on 4 sequences interleaved in one batch: 150 rows (chunk
 * boundaries at 64 and 128 inside it) and 64 rows (exactly one chunk) continuing random states, 70
 * rows starting fresh over a garbage state, 5 rows continuing. Against gdn.c's gdn_conv,
 * gdn_l2_norm and gdn_chunked_ref (the chunk algebra in double); then a second batch continues
 * every sequence from the states the first one left (a chunk boundary across calls). */
#define PF_NSEQ 4
static const int pf_len[PF_NSEQ] = { 150, 70, 5, 64 };
static int pf_table(int B, const int *seq_of, const int *fresh_of, int32_t *h, int *n_chunk)
{
    int32_t *rows = h + 1, *gs = rows + B, *gst = gs + B, *gl = gst + B, *gf = gl + B, *rg = gf + B, *rs = rg + B,
            *ckg = rs + B, *ckc = ckg + B;
    int ng = 0, filled = 0, nc = 0;
    for (int t = 0; t < B; t++) {
        int g = 0;
        while (g < ng && gs[g] != seq_of[t])
            g++;
        if (g < ng)
            continue;
        gs[g] = seq_of[t], gst[g] = filled, gf[g] = fresh_of[seq_of[t]];
        int cnt = 0;
        for (int u = t; u < B; u++)
            if (seq_of[u] == seq_of[t])
                rg[u] = g, rs[u] = cnt, rows[filled + cnt++] = u;
        for (int c0 = 0; c0 < cnt; c0 += GDN_CK)
            ckg[nc] = g, ckc[nc] = c0, nc++;
        gl[g] = cnt, filled += cnt, ng++;
    }
    h[0] = ng;
    *n_chunk = nc;
    return ng;
}
static struct gdn_groups pf_dev_groups(uint64_t d, int B)
{
    const uint64_t b = (uint64_t)B;
    return (struct gdn_groups){ .n_grp = d, .rows = d + 4, .seq = d + 4 + 4 * b, .start = d + 4 + 8 * b,
                                .len = d + 4 + 12 * b, .fresh = d + 4 + 16 * b, .row_grp = d + 4 + 20 * b,
                                .row_step = d + 4 + 24 * b, .ck_grp = d + 4 + 28 * b, .ck_c0 = d + 4 + 32 * b };
}

static void gdn_prefill_chunked(void)
{
    NEED_GPU();
    int B = 0;
    for (int s = 0; s < PF_NSEQ; s++)
        B += pf_len[s];
    int *seq_of = malloc(sizeof(int) * (size_t)B), left[PF_NSEQ];
    for (int s = 0; s < PF_NSEQ; s++)
        left[s] = pf_len[s];
    for (int t = 0, k = 0; t < B; k++) /* interleave: sequence k % 4 while it has rows */
        if (left[k % PF_NSEQ] > 0)
            left[k % PF_NSEQ]--, seq_of[t++] = k % PF_NSEQ;
    for (int D = 16; D <= 128; D *= 2) {
        const int HK = 2, HV = 4, DC = 4, NS = DC - 1, NSEQ = PF_NSEQ;
        const int kd = HK * D, vd = HV * D, cd = 2 * kd + vd;
        const size_t conv_per = (size_t)cd * NS, ssm_per = (size_t)HV * D * D;
        float *in = malloc(sizeof(float) * B * cd), *w = malloc(sizeof(float) * cd * DC);
        float *cst = malloc(sizeof(float) * NSEQ * conv_per), *sst = malloc(sizeof(float) * NSEQ * ssm_per);
        float *yref = malloc(sizeof(float) * B * cd), *yn = malloc(sizeof(float) * B * cd);
        float *oref = malloc(sizeof(float) * B * vd), *y = malloc(sizeof(float) * B * cd);
        float *o = malloc(sizeof(float) * B * vd);
        float *gcst = malloc(sizeof(float) * NSEQ * conv_per), *gsst = malloc(sizeof(float) * NSEQ * ssm_per);
        float *braw = malloc(sizeof(float) * B * HV), *araw = malloc(sizeof(float) * B * HV);
        float *beta = malloc(sizeof(float) * B * HV), *gd = malloc(sizeof(float) * B * HV), dt[4], A[4];
        double *work = malloc(sizeof(double) * gdn_chunk_work(D, D));
        int32_t *grp = malloc(sizeof(int32_t) * GDN_GRP_INTS(B));
        fill(w, (size_t)cd * DC, 0.5f);
        fill(cst, NSEQ * conv_per, 1.0f);
        fill(sst, NSEQ * ssm_per, 0.2f);
        fill(dt, 4, 1.0f);
        for (int h = 0; h < HV; h++)
            A[h] = -expf(frand() * 0.5f - 0.5f);
        for (int s = 0; s < NSEQ; s++) {
            for (int c = 0; c < cd; c++)
                for (int k = 0; k < NS; k++)
                    gcst[s * conv_per + (size_t)k * cd + c] = cst[s * conv_per + (size_t)c * NS + k];
            for (int h = 0; h < HV; h++)
                for (int b = 0; b < D; b++)
                    for (int a = 0; a < D; a++)
                        gsst[s * ssm_per + ((size_t)h * D + a) * D + b] = sst[s * ssm_per + ((size_t)h * D + b) * D + a];
        }
        memset(cst + 1 * conv_per, 0, sizeof(float) * conv_per); /* sequence 1 starts fresh: garbage ignored */
        memset(sst + 1 * ssm_per, 0, sizeof(float) * ssm_per);
        uint64_t dw = dup(w, sizeof(float) * cd * DC), ddt = dup(dt, sizeof dt), dA = dup(A, sizeof A);
        uint64_t dcs = dup(gcst, sizeof(float) * NSEQ * conv_per), dss = dup(gsst, sizeof(float) * NSEQ * ssm_per);
        uint64_t dwu = poisoned((size_t)B * HV * 2 * D), dp = poisoned((size_t)B * HV * GDN_CK);
        uint64_t dsc = poisoned((size_t)B * HV * 4);
        for (int call = 0; call < 2; call++) {
            const int fresh_of[PF_NSEQ] = { 0, call == 0, 0, 0 };
            fill(in, (size_t)B * cd, 1.0f);
            fill(braw, (size_t)B * HV, 2.0f);
            fill(araw, (size_t)B * HV, 2.0f);
            int n_chunk = 0;
            const int ng = pf_table(B, seq_of, fresh_of, grp, &n_chunk);
            const int32_t *rows = grp + 1, *gs = rows + B, *gst = gs + B, *gl = gst + B;
            for (int i = 0; i < B * HV; i++) {
                beta[i] = gdn_sigmoid(braw[i]);
                gd[i] = gdn_softplus(araw[i] + dt[i % HV]) * A[i % HV];
            }
            for (int g = 0; g < ng; g++)
                gdn_conv(in, (size_t)cd, yref, (size_t)cd, rows + gst[g], gl[g], w, cst + gs[g] * conv_per, DC, 0, cd);
            memcpy(yn, yref, sizeof(float) * B * cd);
            for (int t = 0; t < B; t++)
                for (int h = 0; h < 2 * HK; h++)
                    gdn_l2_norm(yn + (size_t)t * cd + (size_t)h * D, D, 1e-6f);
            for (int g = 0; g < ng; g++)
                for (int vh = 0; vh < HV; vh++) {
                    const int kh = vh % HK;
                    const struct gdn_head hd = { .Q = yn + kh * D, .K = yn + kd + kh * D, .V = yn + 2 * kd + vh * D,
                                                 .qk_stride = (size_t)cd, .v_stride = (size_t)cd, .beta = beta + vh,
                                                 .gdecay = gd + vh, .gate_stride = HV, .O = oref + vh * D,
                                                 .o_stride = (size_t)vd, .d_k = D, .d_v = D,
                                                 .scale = 1.0f / sqrtf((float)D) };
                    gdn_chunked_ref(&hd, rows + gst[g], gl[g], sst + gs[g] * ssm_per + (size_t)vh * D * D, work);
                }
            uint64_t dg = dup(grp, sizeof(int32_t) * GDN_GRP_INTS(B)), din = dup(in, sizeof(float) * B * cd);
            uint64_t db = dup(braw, sizeof(float) * B * HV), da = dup(araw, sizeof(float) * B * HV);
            uint64_t dy = poisoned((size_t)B * cd), d_o = poisoned((size_t)B * vd);
            struct gdn_conv_args ca = { .g = pf_dev_groups(dg, B), .in = din, .out = dy, .w = dw, .state = dcs,
                                        .seq_stride = (int64_t)conv_per, .conv_dim = cd, .d_conv = DC };
            void *pc[] = { &ca };
            CHECK(launch("gdn_conv_tok", (unsigned)B, (unsigned)((cd + 127) / 128), 128, pc) == 0, "launch");
            CHECK(launch("gdn_conv_state", (unsigned)ng, (unsigned)((cd + 127) / 128), 128, pc) == 0, "launch");
            struct gdn_rec_args ra = { .g = pf_dev_groups(dg, B), .qkv = dy, .b = db, .a = da, .dt = ddt, .A = dA,
                                       .o = d_o, .state = dss, .seq_stride = (int64_t)ssm_per, .conv_dim = cd,
                                       .n_k_heads = HK, .n_v_heads = HV, .d_v = D, .scale = 1.0f / sqrtf((float)D),
                                       .eps = 1e-6f, .wu = dwu, .p = dp, .sc = dsc };
            void *pr[] = { &ra };
            char np[40], ns[40];
            snprintf(np, sizeof np, "gdn_chunk_prep_%d", D);
            snprintf(ns, sizeof ns, "gdn_chunk_scan_%d", D);
            struct err e = { 0 };
            CHECK(launch(np, (unsigned)n_chunk, HV, 256, pr) == 0, "launch");
            CHECK(hip_rt_launch(g_rt, fn(ns), (unsigned)ng, HV, (unsigned)((D + 31) / 32), 256, pr, &e) == 0 &&
                  hip_rt_sync(g_rt, &e) == 0, "%s: %s", ns, e.msg);
            get(y, dy, sizeof(float) * B * cd);
            get(o, d_o, sizeof(float) * B * vd);
            get(gcst, dcs, sizeof(float) * NSEQ * conv_per);
            get(gsst, dss, sizeof(float) * NSEQ * ssm_per);
            const double ry = rel(y, yref, (size_t)B * cd), ro = rel(o, oref, (size_t)B * vd);
            double rc = 0, rs = 0;
            float *ct = malloc(sizeof(float) * conv_per), *tr = malloc(sizeof(float) * ssm_per);
            for (int s = 0; s < NSEQ; s++) {
                for (int c = 0; c < cd; c++)
                    for (int k = 0; k < NS; k++)
                        ct[c * NS + k] = gcst[s * conv_per + (size_t)k * cd + c];
                const double r1 = rel(ct, cst + s * conv_per, conv_per);
                rc = r1 > rc ? r1 : rc;
                for (int h = 0; h < HV; h++)
                    for (int b = 0; b < D; b++)
                        for (int a = 0; a < D; a++)
                            tr[((size_t)h * D + b) * D + a] = gsst[s * ssm_per + ((size_t)h * D + a) * D + b];
                const double r2 = rel(tr, sst + s * ssm_per, ssm_per);
                rs = r2 > rs ? r2 : rs;
            }
            free(ct), free(tr);
            CHECK(ry < 1e-6 && rc < 1e-7, "gdn_conv_tok/state d=%d call %d: out rel %.3g, state rel %.3g", D, call,
                  ry, rc);
            CHECK(ro < 1e-4 && rs < 1e-4, "gdn_chunk_%d call %d: out rel %.3g, state rel %.3g", D, call, ro, rs);
            printf("#   d_state %d call %d (%d chunks): conv out %.2e state %.2e; chunked delta rule out %.2e "
                   "state %.2e\n", D, call, n_chunk, ry, rc, ro, rs);
            uint64_t fr[] = { dg, din, db, da, dy, d_o };
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
                dfree(fr[i]);
        }
        uint64_t fr[] = { dw, ddt, dA, dcs, dss, dwu, dp, dsc };
        for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
            dfree(fr[i]);
        free(in), free(w), free(cst), free(sst), free(yref), free(yn), free(oref), free(y), free(o), free(gcst);
        free(gsst), free(braw), free(araw), free(beta), free(gd), free(work), free(grp);
    }
    free(seq_of);
}

/* gated attention's query/gate split and sigmoid gate; the shared expert's gated add */
static void gated_attention_and_shared_expert(void)
{
    NEED_GPU();
    const int n = 3, nh = 4, hd = 32, nq = nh * hd, qs = nq + 40, E = 300;
    float mix[3 * 2 * 128], q[3 * 168], gate[3 * 128], o[3 * 128], oref[3 * 128];
    fill(mix, sizeof mix / 4, 2.0f);
    fill(o, sizeof o / 4, 1.0f);
    uint64_t dm = dup(mix, sizeof mix), dq = poisoned(sizeof q / 4), dg = poisoned(sizeof gate / 4);
    int qq = qs, nhh = nh, hdd = hd;
    void *p[] = { &dm, &dq, &qq, &dg, &nhh, &hdd };
    CHECK(launch("gattn_split", n, 2, 64, p) == 0, "launch"); /* 2 blocks of 64 per row: nq = 128 */
    get(q, dq, sizeof q);
    get(gate, dg, sizeof gate);
    int bad = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++) {
                bad += q[t * qs + h * hd + i] != mix[t * 2 * nq + h * 2 * hd + i];
                bad += gate[t * nq + h * hd + i] != mix[t * 2 * nq + h * 2 * hd + hd + i];
            }
    CHECK(bad == 0, "gattn_split: %d elements differ", bad);
    for (int i = 0; i < n * nq; i++)
        oref[i] = o[i] * gdn_sigmoid(gate[i]);
    uint64_t d_o = dup(o, sizeof o), dq8 = dup(NULL, sizeof o / 4), dq8d = poisoned(sizeof o / 4 / 16);
    int cnt = n * nq, nqq = nq;
    void *pg[] = { &d_o, &dg, &cnt, &nqq, &dq8, &dq8d };
    CHECK(launch("gattn_gate", (unsigned)((cnt + 255) / 256), 1, 256, pg) == 0, "launch");
    get(o, d_o, sizeof o);
    CHECK(rel(o, oref, (size_t)cnt) < 1e-6, "gattn_gate rel %.3g", rel(o, oref, (size_t)cnt));
    {
        static int8_t q8[3 * 128], q8ref[3 * 128];
        static float q8d[3 * 128 / 16], q8dref[3 * 128 / 16];
        get(q8, dq8, sizeof q8);
        get(q8d, dq8d, sizeof q8d);
        q8_emulate(o, cnt, q8ref, q8dref);
        CHECK(!memcmp(q8, q8ref, sizeof q8) && rel(q8d, q8dref, sizeof q8d / 4) < 1e-6, "gattn_gate: q8 copy differs");
        dfree(dq8), dfree(dq8d);
    }
    /* shared expert: x += σ(wg·h) y */
    float x[3 * 300], y[3 * 300], h[3 * 300], wg[300], xref[3 * 300];
    fill(x, sizeof x / 4, 1.0f), fill(y, sizeof y / 4, 1.0f), fill(h, sizeof h / 4, 1.0f), fill(wg, E, 0.1f);
    for (int t = 0; t < n; t++) {
        double d = 0;
        for (int i = 0; i < E; i++)
            d += (double)(wg[i] * h[t * E + i]);
        const float gam = gdn_sigmoid((float)d);
        for (int i = 0; i < E; i++)
            xref[t * E + i] = x[t * E + i] + y[t * E + i] * gam;
    }
    uint64_t dx = dup(x, sizeof x), dy = dup(y, sizeof y), dh = dup(h, sizeof h), dwg = dup(wg, sizeof wg);
    int ee = E;
    void *ps[] = { &dx, &dy, &dh, &dwg, &ee };
    CHECK(launch("shexp_add", n, (E + 127) / 128, 128, ps) == 0, "launch");
    get(x, dx, sizeof x);
    CHECK(rel(x, xref, sizeof x / 4) < 1e-6, "shexp_add rel %.3g", rel(x, xref, sizeof x / 4));
    uint64_t fr[] = { dm, dq, dg, d_o, dx, dy, dh, dwg };
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        dfree(fr[i]);
}

int main(void)
{
    struct err e = { 0 };
    if (hip_rt_open(&g_rt, &e) != 0) {
        snprintf(g_why, sizeof g_why, "%s", e.msg);
        g_rt = NULL;
    } else {
        printf("# device: %s\n", hip_rt_describe(g_rt));
    }
    RUN(gemv_all_types);
    RUN(gemm_all_types);
    RUN(gemm_tensor_cores);
    RUN(gemm_tensor_cores_wide_range);
    RUN(gemv_grouped_experts);
    RUN(gemm_grouped_experts);
    RUN(gemm_warpgroup_mma);
    RUN(gemv_q8_activations);
    RUN(gemv_multi_token);
    RUN(gemv_experts_combined);
    RUN(gemv_deferred_rms_norm);
    RUN(gemv_fused_routing);
    RUN(pdl_chain);
    RUN(rms_norm_q8_copy);
    RUN(swiglu_rows_f16_copy);
    RUN(embed_rows_dequant);
    RUN(rms_norm_rows);
    RUN(rope_and_store);
    RUN(attention_vs_reference);
    RUN(attention_does_rope);
    RUN(flash_attention_prompt);
    RUN(elementwise_softmax_argmax);
    RUN(argmax_over_slices);
    RUN(topk_cut_rows);
    RUN(moe_route_and_combine);
    RUN(gdn_conv_and_delta_rule);
    RUN(gdn_prefill_chunked);
    RUN(gated_attention_and_shared_expert);
    hip_rt_close(g_rt);
    CHECK_EXIT();
}
