/* test_vk_kernels — each shader of the `vulkan` backend (through vk_ops) against its CPU reference:
 *   mm, every weight type: quant_act_row + vec_dot per row and token (the CPU rounds activations to its
 *     vec_dot type; the shader rounds them alike, so what differs is the order of float sums: held to
 *     2e-5 of Σ|w·x|), with a bias, the residual add, a short last group of float rows (k = 172), and a
 *     token whose activations are tiny (Q8 scales in f16's subnormal range: the Q8_1 block sums matter)
 *   embed, every type: dequant_row, bit for bit
 *   rms_norm (whole rows and per head): ops_rms_norm bit for bit
 *   rope (neox and adjacent pairs, n_rot < head size), swiglu: within 1e-5
 *   kv_store: f32 cells exact, f16 cells equal to fp16_from_f32 (round to nearest even) bit for bit
 *   attn: ops_attn_multi over f32 and f16 caches, GQA, two sequences, contexts past one workgroup
 *     (|Δ| ≤ 2e-5; 2e-4 with f16 cells, whose probabilities are rounded to f16 as the CPU rounds them)
 *   gather and moe_combine: the CPU engine's MoE row gather and weighted sum, bit for bit
 * Runs on any Vulkan device (lavapipe in CI); SKIPs without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fp16.h"
#include "../worker/num/ops.h"
#include "../worker/num/quant.h"
#include "../worker/vulkan/vk_ops.h"
#include "check.h"
#include "vk_asan.h"

static struct vk_rt *g_rt;
static struct vk_ops g_ops;
static char g_no_vk[600];

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) /* uniform in [-1, 1) */
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* a device buffer holding n floats of src (or zeros) */
static struct vk_buf dev(const void *src, size_t bytes)
{
    struct vk_buf b = { 0 };
    struct err e = { 0 };
    CHECK(vk_rt_buf(g_rt, &b, bytes ? bytes : 4, false, &e) == 0, "buffer: %s", e.msg);
    if (src && b.buf)
        CHECK(vk_rt_upload(g_rt, &b, 0, src, bytes, &e) == 0, "upload: %s", e.msg);
    return b;
}

static void get(const struct vk_buf *b, void *dst, size_t bytes)
{
    struct err e = { 0 };
    CHECK(vk_rt_download(g_rt, b, 0, dst, bytes, &e) == 0, "download: %s", e.msg);
}

static bool begin(void)
{
    struct err e = { 0 };
    int rc = vk_rt_begin(g_rt, &e);
    CHECK(rc == 0, "begin: %s", e.msg);
    return rc == 0;
}

static void submit(int rc, const struct err *e)
{
    struct err e2 = { 0 };
    CHECK(rc == 0, "dispatch: %s", e->msg);
    if (rc) {
        vk_rt_abandon(g_rt);
        return;
    }
    CHECK(vk_rt_submit(g_rt, &e2) == 0, "submit: %s", e2.msg);
}

static const enum qtype k_types[] = { QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q4_1,   QT_Q5_0,
                                      QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K,   QT_Q4_K,   QT_Q5_K,
                                      QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4 };
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* rows × k weights of type t (random, quantized by the reference quantizers) */
static void *make_weights(enum qtype t, int rows, int k, float *f)
{
    const size_t rb = qtype_row_size(t, k);
    char *w = malloc(rb * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < k; i++)
            f[(size_t)r * k + i] = frand() * 0.5f;
        if (t == QT_F32)
            memcpy(w + (size_t)r * rb, f + (size_t)r * k, rb);
        else
            CHECK(quant_weights_row(t, f + (size_t)r * k, w + (size_t)r * rb, k), "quantize %s", qtype_get(t)->name);
    }
    return w;
}

static void mm_one(enum qtype t, int k)
{
    const int rows = 70, n = 11;
    const size_t rb = qtype_row_size(t, k);
    float *wf = malloc(sizeof(float) * (size_t)rows * k);
    void *w = make_weights(t, rows, k, wf);
    float *x = malloc(sizeof(float) * (size_t)n * k), *bias = malloc(sizeof(float) * rows);
    for (int i = 0; i < n * k; i++)
        x[i] = frand() * (i / k == 3 ? 1e-4f : 1.0f); /* token 3: Q8 scales below f16's normal range */
    for (int r = 0; r < rows; r++)
        bias[r] = frand();
    struct wt wt = { .data = w, .type = t, .ne = { k, rows, 1 }, .row_bytes = rb, .name = "w" };
    struct vk_mat m;
    struct err e = { 0 };
    int rc = vk_mat_upload(&g_ops, &m, &wt, false, NULL, &e);
    CHECK(rc == 0, "upload %s: %s", qtype_get(t)->name, e.msg);
    float *y0 = malloc(sizeof(float) * (size_t)n * rows), *y = malloc(sizeof(float) * (size_t)n * rows);
    for (int i = 0; i < n * rows; i++)
        y0[i] = frand();
    struct vk_buf bx = dev(x, sizeof(float) * (size_t)n * k), bb = dev(bias, sizeof(float) * rows);
    struct vk_buf by = dev(y0, sizeof(float) * (size_t)n * rows), bz = dev(NULL, sizeof(float) * (size_t)n * rows);
    /* y = W·x (no bias) into bz; by += W·x + bias */
    if (!rc && begin()) {
        rc = vk_op_mm(&g_ops, &m, (struct vk_view){ &bx, 0, (uint32_t)k }, (struct vk_view){ &bz, 0, (uint32_t)rows },
                      n, NULL, VK_NO_VEC, false, &e);
        if (!rc)
            rc = vk_op_mm(&g_ops, &m, (struct vk_view){ &bx, 0, (uint32_t)k },
                          (struct vk_view){ &by, 0, (uint32_t)rows }, n, &bb, 0, true, &e);
        submit(rc, &e);
    }
    get(&bz, y, sizeof(float) * (size_t)n * rows);
    float *ya = malloc(sizeof(float) * (size_t)n * rows);
    get(&by, ya, sizeof(float) * (size_t)n * rows);
    void *act = malloc(qtype_row_size(qtype_get(t)->vec_dot, k) + 64);
    double worst = 0;
    int bad = 0;
    for (int tk = 0; tk < n; tk++) {
        quant_act_row(t, x + (size_t)tk * k, act, k);
        for (int r = 0; r < rows; r++) {
            const float ref = vec_dot(t, k, (const char *)w + (size_t)r * rb, act);
            double mag = 0;
            for (int i = 0; i < k; i++)
                mag += fabs((double)wf[(size_t)r * k + i] * x[(size_t)tk * k + i]);
            const double tol = 2e-5 * mag + 1e-30;
            const double d = fabs((double)y[tk * rows + r] - ref) / tol;
            const float refa = (y0[tk * rows + r] + (ref + bias[r]));
            const double da = fabs((double)ya[tk * rows + r] - refa) / (tol + 1e-6 * fabs(refa));
            if (!(d <= 1) || !(da <= 1)) {
                if (bad++ < 3)
                    printf("#   %s k %d token %d row %d: %.9g vs %.9g (add: %.9g vs %.9g)\n", qtype_get(t)->name, k,
                           tk, r, y[tk * rows + r], ref, ya[tk * rows + r], refa);
            }
            if (d > worst)
                worst = d;
        }
    }
    CHECK(bad == 0, "mm %s k %d: %d of %d values off", qtype_get(t)->name, k, bad, n * rows);
    printf("#   mm %-7s k %-3d worst |Δ| / (2e-5·Σ|w·x|) %.3f\n", qtype_get(t)->name, k, worst);
    vk_mat_free(&g_ops, &m);
    vk_rt_buf_free(g_rt, &bx), vk_rt_buf_free(g_rt, &bb), vk_rt_buf_free(g_rt, &by), vk_rt_buf_free(g_rt, &bz);
    free(wf), free(w), free(x), free(bias), free(y0), free(y), free(ya), free(act);
}

static void mm_every_type(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    for (size_t i = 0; i < N_TYPES; i++) {
        mm_one(k_types[i], 512);
        if (qtype_get(k_types[i])->blck == 1)
            mm_one(k_types[i], 172); /* a short last group */
    }
}

static void embed_every_type(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    const int rows = 40, k = 256, n = 5;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum qtype t = k_types[ti];
        const size_t rb = qtype_row_size(t, k);
        float *wf = malloc(sizeof(float) * rows * k);
        void *w = make_weights(t, rows, k, wf);
        struct wt wt = { .data = w, .type = t, .ne = { k, rows, 1 }, .row_bytes = rb, .name = "embd" };
        struct vk_mat m;
        struct err e = { 0 };
        int rc = vk_mat_upload(&g_ops, &m, &wt, true, NULL, &e);
        CHECK(rc == 0, "upload: %s", e.msg);
        int32_t tok[4 * 5] = { 7, 0, 0, 0, 0, 1, 0, 0, 39, 2, 0, 0, 7, 3, 0, 0, 21, 4, 0, 0 };
        struct vk_buf bt = dev(tok, sizeof tok), bx = dev(NULL, sizeof(float) * n * k);
        if (!rc && begin())
            submit(vk_op_embed(&g_ops, &m, &bt, &bx, n, &e), &e);
        float got[5 * 256], ref[256];
        get(&bx, got, sizeof got);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            dequant_row(t, (const char *)w + (size_t)tok[4 * i] * rb, ref, k);
            bad += memcmp(ref, got + i * k, sizeof ref) != 0;
        }
        CHECK(bad == 0, "embed %s: %d rows differ from dequant_row", qtype_get(t)->name, bad);
        vk_mat_free(&g_ops, &m);
        vk_rt_buf_free(g_rt, &bt), vk_rt_buf_free(g_rt, &bx);
        free(wf), free(w);
    }
}

static void norm_rope_swiglu(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    /* rms_norm of 3 tokens: whole rows of 96 with a weight, and 4 heads of 24 per token with another */
    enum { N = 3, W = 96, HD = 24, NH = 4 };
    float x[N * W], w[W + HD], got[N * W], ref[W];
    for (int i = 0; i < N * W; i++)
        x[i] = frand() * 3;
    for (int i = 0; i < W + HD; i++)
        w[i] = frand();
    struct vk_buf bx = dev(x, sizeof x), bw = dev(w, sizeof w), by = dev(NULL, sizeof x), bh = dev(x, sizeof x);
    if (begin()) {
        int rc = vk_op_norm(&g_ops, (struct vk_view){ &bx, 0, W }, (struct vk_view){ &by, 0, W }, W, 1, N, &bw, 0,
                            1e-5f, &e);
        if (!rc) /* per head, in place, the weight after the first W floats */
            rc = vk_op_norm(&g_ops, (struct vk_view){ &bh, 0, W }, (struct vk_view){ &bh, 0, W }, HD, NH, N, &bw, W,
                            1e-6f, &e);
        submit(rc, &e);
    }
    /* bit for bit: the shader rounds scale as the CPU does (a last-bit difference decides Q8 rounding ties
     * downstream) */
    get(&by, got, sizeof got);
    int bad = 0;
    for (int t = 0; t < N; t++) {
        ops_rms_norm(ref, x + t * W, w, W, 1e-5f);
        bad += memcmp(ref, got + t * W, sizeof(float) * W) != 0;
    }
    get(&bh, got, sizeof got);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++) {
            ops_rms_norm(ref, x + t * W + h * HD, w + W, HD, 1e-6f);
            bad += memcmp(ref, got + t * W + h * HD, sizeof(float) * HD) != 0;
        }
    CHECK(bad == 0, "rms_norm: %d of %d rows differ from ops_rms_norm", bad, N + N * NH);

    /* rope: 3 tokens × 4 heads of 24, n_rot 16, both pairings, positions 0, 5 and 1000 */
    for (int neox = 0; neox < 2; neox++) {
        const int n_rot = 16, pos[N] = { 0, 5, 1000 };
        float cs[N * 16];
        const float corr[2] = { 0, 0 };
        for (int t = 0; t < N; t++)
            ops_rope_cache(cs + t * n_rot, pos[t], n_rot, 10000.0f, NULL, 1.0f, 0.0f, 1.0f, corr);
        struct vk_buf bc = dev(cs, sizeof cs), bq = dev(x, sizeof x);
        if (begin())
            submit(vk_op_rope(&g_ops, (struct vk_view){ &bq, 0, W }, HD, n_rot, neox, NH, N, &bc, &e), &e);
        get(&bq, got, sizeof got);
        float r[W];
        double wr = 0;
        for (int t = 0; t < N; t++) {
            memcpy(r, x + t * W, sizeof r);
            for (int h = 0; h < NH; h++)
                ops_rope_apply(r + h * HD, n_rot, neox ? ROPE_NEOX : ROPE_NORM, cs + t * n_rot);
            for (int i = 0; i < W; i++)
                wr = fmax(wr, fabs(got[t * W + i] - r[i]));
        }
        CHECK(wr < 1e-5, "rope (%s): worst |Δ| %.3g", neox ? "neox" : "adjacent", wr);
        vk_rt_buf_free(g_rt, &bc), vk_rt_buf_free(g_rt, &bq);
    }

    /* swiglu over 1000 elements */
    float g[1000], u[1000], gr[1000];
    for (int i = 0; i < 1000; i++)
        g[i] = frand() * 8, u[i] = frand();
    memcpy(gr, g, sizeof g);
    ops_swiglu(gr, u, 1000);
    struct vk_buf bg = dev(g, sizeof g), bu = dev(u, sizeof u);
    if (begin())
        submit(vk_op_swiglu(&g_ops, &bg, &bu, 1000, &e), &e);
    get(&bg, g, sizeof g);
    double ws = 0;
    for (int i = 0; i < 1000; i++)
        ws = fmax(ws, fabs(g[i] - gr[i]) / (fabs(gr[i]) + 1e-6));
    CHECK(ws < 1e-5, "swiglu: worst rel %.3g", ws);
    vk_rt_buf_free(g_rt, &bx), vk_rt_buf_free(g_rt, &bw), vk_rt_buf_free(g_rt, &by), vk_rt_buf_free(g_rt, &bh);
    vk_rt_buf_free(g_rt, &bg), vk_rt_buf_free(g_rt, &bu);
}

/* a MoE layer's gather (rows by an index list) and weighted sum of the picks, against the CPU engine's
 * loops (ffn_moe: w0·y0, then + w_k·y_k in selection order, then added to x) */
static void moe_gather_and_combine(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    enum { N = 5, K = 3, W = 100 };
    float src[N * W], x[N * W], ey[N * K * W], w[N * K], got[N * K * W];
    int32_t idx[N * K], slot[N * K];
    for (int i = 0; i < N * W; i++)
        src[i] = frand(), x[i] = frand();
    for (int i = 0; i < N * K * W; i++)
        ey[i] = frand() * 3;
    for (int i = 0; i < N * K; i++) {
        idx[i] = (7 * i + 2) % N;             /* row i of the gathered rows = token idx[i] */
        slot[i] = (N * K - 1 - i + 4) % (N * K); /* a permutation: pick i's output row */
        w[i] = frand();
    }
    struct err e = { 0 };
    struct vk_buf bs = dev(src, sizeof src), bi = dev(idx, sizeof idx), bg = dev(NULL, sizeof got);
    struct vk_buf by = dev(ey, sizeof ey), bsl = dev(slot, sizeof slot), bw = dev(w, sizeof w), bx = dev(x, sizeof x);
    if (begin()) {
        int rc = vk_op_gather(&g_ops, (struct vk_view){ &bs, 0, W }, (struct vk_view){ &bg, 0, W }, &bi, 0, W, N * K, &e);
        if (!rc)
            rc = vk_op_moe_combine(&g_ops, &by, &bsl, &bw, &bx, W, K, N, &e);
        submit(rc, &e);
    }
    get(&bg, got, sizeof got);
    int bad = 0;
    for (int i = 0; i < N * K; i++)
        bad += memcmp(got + i * W, src + idx[i] * W, sizeof(float) * W) != 0;
    CHECK(bad == 0, "gather: %d rows differ", bad);
    float xo[N * W];
    get(&bx, xo, sizeof xo);
    int bad_x = 0;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < W; i++) {
            float a = w[t * K] * ey[slot[t * K] * W + i];
            for (int k = 1; k < K; k++) {
                float p = w[t * K + k] * ey[slot[t * K + k] * W + i];
                a = a + p;
            }
            bad_x += xo[t * W + i] != x[t * W + i] + a;
        }
    CHECK(bad_x == 0, "moe_combine: %d of %d values differ from the CPU's sum", bad_x, N * W);
    struct vk_buf *all[] = { &bs, &bi, &bg, &by, &bsl, &bw, &bx };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vk_rt_buf_free(g_rt, all[i]);
}

/* the cache written by kv_store, then attention over it, against the CPU's */
static void kv_store_and_attention(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    enum { HD = 64, NH = 8, NKV = 2, KVD = NKV * HD, NCTX = 160, NSEQ = 2, QW = NH * HD, SW = QW + 2 * KVD };
    /* seq 0: positions 0..149 (past two 64-wide passes of the shader), seq 1: 0..9; one row each */
    const int len[NSEQ] = { 150, 10 };
    const int n = len[0] + len[1];
    float *src = malloc(sizeof(float) * (size_t)n * SW);
    int32_t *tok = malloc(sizeof(int32_t) * 4 * (size_t)n);
    for (int i = 0; i < n * SW; i++)
        src[i] = frand() * 2;
    for (int t = 0; t < n; t++) {
        const int seq = t < len[0] ? 0 : 1, pos = seq ? t - len[0] : t;
        tok[4 * t] = 0, tok[4 * t + 1] = pos, tok[4 * t + 2] = seq, tok[4 * t + 3] = 0;
    }
    float *f16tab = malloc(sizeof(float) * 65536);
    ops_f16_table_init(f16tab);
    for (int f16 = 0; f16 < 2; f16++) {
        struct err e = { 0 };
        const size_t elt = f16 ? 2 : 4, cell = (size_t)KVD * elt;
        struct vk_buf bs = dev(src, sizeof(float) * (size_t)n * SW), bt = dev(tok, sizeof(int32_t) * 4 * (size_t)n);
        struct vk_buf kc = dev(NULL, NSEQ * NCTX * cell), vc = dev(NULL, NSEQ * NCTX * cell);
        struct vk_buf bo = dev(NULL, sizeof(float) * (size_t)n * QW);
        if (begin()) {
            int rc = vk_op_kv_store(&g_ops, &bs, QW, QW + KVD, SW, &kc, &vc, &bt, KVD, NCTX, f16, n, &e);
            if (!rc)
                rc = vk_op_attn(&g_ops, (struct vk_view){ &bs, 0, SW }, (struct vk_view){ &bo, 0, QW }, &kc, &vc, &bt,
                                NH, NKV, HD, NCTX, f16, 0.125f, n, &e);
            submit(rc, &e);
        }
        char *K = malloc(NSEQ * NCTX * cell), *V = malloc(NSEQ * NCTX * cell);
        float *out = malloc(sizeof(float) * (size_t)n * QW);
        get(&kc, K, NSEQ * NCTX * cell);
        get(&vc, V, NSEQ * NCTX * cell);
        get(&bo, out, sizeof(float) * (size_t)n * QW);
        /* the cells: every stored row equal to the source (f16: RNE bits) */
        int bad_cells = 0;
        for (int t = 0; t < n; t++) {
            const size_t at = ((size_t)tok[4 * t + 2] * NCTX + (size_t)tok[4 * t + 1]) * KVD;
            for (int i = 0; i < KVD; i++) {
                const float k = src[(size_t)t * SW + QW + i], v = src[(size_t)t * SW + QW + KVD + i];
                if (f16)
                    bad_cells += ((uint16_t *)K)[at + i] != fp16_from_f32(k) || ((uint16_t *)V)[at + i] != fp16_from_f32(v);
                else
                    bad_cells += ((float *)K)[at + i] != k || ((float *)V)[at + i] != v;
            }
        }
        CHECK(bad_cells == 0, "kv_store %s: %d cells differ", f16 ? "f16" : "f32", bad_cells);
        /* attention: each token's heads over its sequence's first pos + 1 cells */
        double worst = 0;
        float *scratch = malloc(sizeof(float) * 8 * NCTX), ref[HD];
        for (int t = 0; t < n; t++)
            for (int h = 0; h < NH; h++) {
                const int seq = tok[4 * t + 2], kvh = h / (NH / NKV), nk = tok[4 * t + 1] + 1;
                const size_t base = ((size_t)seq * NCTX * KVD + (size_t)kvh * HD) * elt;
                const float *q = src + (size_t)t * SW + h * HD;
                float *o = ref;
                ops_attn_multi(1, &q, &o, &nk, HD, K + base, V + base, KVD, 0.125f, f16 ? f16tab : NULL, scratch);
                for (int d = 0; d < HD; d++)
                    worst = fmax(worst, fabs(out[(size_t)t * QW + h * HD + d] - ref[d]));
            }
        /* f16: a probability one f32 ulp off the CPU's may round to the neighbouring f16 (2^-11 of it) */
        const double tol = f16 ? 2e-4 : 2e-5;
        CHECK(worst < tol, "attn %s: worst |Δ| %.3g > %g", f16 ? "f16" : "f32", worst, tol);
        printf("#   attn %s cache: worst |Δ| %.3g\n", f16 ? "f16" : "f32", worst);
        free(scratch), free(K), free(V), free(out);
        vk_rt_buf_free(g_rt, &bs), vk_rt_buf_free(g_rt, &bt), vk_rt_buf_free(g_rt, &kc), vk_rt_buf_free(g_rt, &vc);
        vk_rt_buf_free(g_rt, &bo);
    }
    free(f16tab), free(src), free(tok);
}

int main(void)
{
    vk_asan_pin_driver();
    struct err e = { 0 };
    if (vk_rt_open(&g_rt, -1, &e)) {
        snprintf(g_no_vk, sizeof g_no_vk, "%s", e.msg);
    } else if (vk_ops_init(&g_ops, g_rt, 16, 1024, &e)) {
        printf("not ok - vk_ops_init: %s\n", e.msg);
        vk_rt_close(g_rt);
        return 1;
    } else {
        printf("# device: %s\n", vk_rt_describe(g_rt));
    }
    RUN(mm_every_type);
    RUN(embed_every_type);
    RUN(norm_rope_swiglu);
    RUN(kv_store_and_attention);
    RUN(moe_gather_and_combine);
    if (g_rt) {
        vk_ops_free(&g_ops);
        vk_rt_close(g_rt);
    }
    CHECK_EXIT();
}
