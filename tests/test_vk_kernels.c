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
 *   the Gated DeltaNet hybrids' ops (gdn.c, cpu_hybrid.c): the gates, the L2 norm, the output gate (silu and
 *     sigmoid), the strided head copy and the shared expert's gated add; the conv and the delta rule over 3
 *     sequences whose rows interleave in the batch, from nonzero states, with the states they leave
 *   qwen4exp's ops (cpu_hc.c, cpu_hybrid.c), hc = 3 and 4 streams of widths not a multiple of 64: add2 bit for
 *     bit; silu_scale, hc_mean, hc_combine and the PLE gate (σ = 0 and |σ| under its floor among the
 *     streams) within 1e-6 relative; the PLE conv (taps 3 and 4, dilation 2 and 3) over 4 interleaved groups
 *     from nonzero histories, one group shorter and one longer than the history, within 1e-6 and the
 *     histories it leaves exact; attn_sel over f32 and f16 cells, dense and listed tokens, GQA, against
 *     attn_task's gathered rows (|Δ| ≤ 5e-6; 2e-4 with f16 cells) and bit for bit against attn over a cache
 *     holding the listed cells in order
 * Runs on any Vulkan device (lavapipe in CI); SKIPs without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fp16.h"
#include "../worker/num/gdn.h"
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

/* worst |got − ref| / max(|ref|, floor) over n values (a NaN counts as infinitely far) */
static double worst_rel(const float *got, const float *ref, size_t n, double floor)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)ref[i]) / fmax(fabs((double)ref[i]), floor);
        w = isnan(d) ? INFINITY : fmax(w, d);
    }
    return w;
}

/* values that differ in their bits */
static int n_diff(const float *got, const float *ref, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += memcmp(got + i, ref + i, sizeof(float)) != 0;
    return k;
}

/* The hybrids' sequence groups as the engine lays them out in one int32 buffer: the row list at rows_off,
 * then per group {seq, start, len, 0} at grp_off; seq_of[t] is batch row t's sequence. Returns the groups. */
static int gdn_groups(const int *seq_of, int n, int32_t *buf, int rows_off, int grp_off)
{
    int ng = 0, filled = 0;
    for (int t = 0; t < n; t++) {
        bool seen = false;
        for (int u = 0; u < t; u++)
            seen |= seq_of[u] == seq_of[t];
        if (seen)
            continue;
        int32_t *g = buf + grp_off + 4 * ng++;
        g[0] = seq_of[t], g[1] = filled, g[3] = 0;
        for (int u = t; u < n; u++)
            if (seq_of[u] == seq_of[t])
                buf[rows_off + filled++] = u;
        g[2] = filled - g[1];
    }
    return ng;
}

/* gdn_gates, gate (silu and sigmoid), copy_heads and shexp_add against cpu_hybrid.c's loops */
static void gdn_elementwise(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    /* gates: β at columns 1…H and g at 7…7+H of rows of 13 (one buffer), dt and a after 3 floats of vec */
    enum { N = 7, H = 5, RS = 13, B0 = 1, G0 = 7 };
    float bg[N * RS], vec[3 + 2 * H], got[N * RS], ref[N * RS];
    for (int i = 0; i < N * RS; i++)
        bg[i] = frand() * 25; /* softplus's argument from −26 to 26: both sides of 20, ln(1 + tiny) */
    for (int i = 0; i < 3; i++)
        vec[i] = 0;
    for (int h = 0; h < H; h++)
        vec[3 + h] = frand(), vec[3 + H + h] = -expf(frand());
    bg[G0] = 19.99f - vec[3], bg[RS + G0] = -10.0f - vec[3], bg[2 * RS + G0] = -vec[3]; /* near 20, −10 and 0 */
    memcpy(ref, bg, sizeof bg);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++) {
            float *b = ref + t * RS + B0 + h, *g = ref + t * RS + G0 + h;
            *b = gdn_sigmoid(*b);
            *g = gdn_softplus(*g + vec[3 + h]) * vec[3 + H + h];
        }
    struct vk_buf bb = dev(bg, sizeof bg), bv = dev(vec, sizeof vec);
    const struct vk_view vb = { &bb, B0, RS }, vg = { &bb, G0, RS };
    if (begin())
        submit(vk_op_gdn_gates(&g_ops, vb, vg, &bv, 3, 3 + H, H, N, &e), &e);
    get(&bb, got, sizeof got);
    const double rg = worst_rel(got, ref, N * RS, 1e-30);
    CHECK(rg < 1e-6, "gdn_gates: worst rel %.3g", rg);
    printf("#   gdn_gates: worst rel %.2e, %d of %d values differ in their bits\n", rg, n_diff(got, ref, N * RS),
           N * RS);
    vk_rt_buf_free(g_rt, &bb), vk_rt_buf_free(g_rt, &bv);

    /* gate: gated attention's o ⊙ sigmoid(gate), the gate interleaved with the query heads in another buffer
     * ([q | gate] heads of 2·D); then the DeltaNet's o ⊙ silu(z) with z in o's own buffer, after it */
    enum { NG = 5, HG = 3, D = 40, OW = HG * D + 3 };
    float o[NG * OW], mix[NG * 2 * HG * D], og[NG * OW], oref[NG * OW];
    for (int i = 0; i < NG * OW; i++)
        o[i] = frand() * 4;
    for (int i = 0; i < NG * 2 * HG * D; i++)
        mix[i] = frand() * 30;
    for (int sig = 1; sig >= 0; sig--) {
        float buf[NG * OW * 2];
        memcpy(buf, o, sizeof o);
        for (int i = 0; i < NG * OW; i++)
            buf[NG * OW + i] = mix[i] / 3; /* z for the silu form: rows of OW after the o rows */
        memcpy(oref, o, sizeof o);
        for (int t = 0; t < NG; t++)
            for (int h = 0; h < HG; h++)
                for (int i = 0; i < D; i++) {
                    float *r = oref + t * OW + h * D + i;
                    *r = sig ? *r * gdn_sigmoid(mix[t * 2 * HG * D + h * 2 * D + D + i])
                             : *r * ops_silu(buf[NG * OW + t * OW + h * D + i]);
                }
        struct vk_buf bo = dev(buf, sizeof buf), bm = dev(mix, sizeof mix);
        if (begin()) {
            const struct vk_view y = { &bo, 0, OW };
            const struct vk_view z = sig ? (struct vk_view){ &bm, D, 2 * HG * D }
                                         : (struct vk_view){ &bo, NG * OW, OW };
            submit(vk_op_gate(&g_ops, y, D, z, sig ? 2 * D : D, D, HG, NG, sig, &e), &e);
        }
        get(&bo, og, sizeof og);
        const double r = worst_rel(og, oref, NG * OW, 1e-30);
        CHECK(r < 1e-6, "gate (%s): worst rel %.3g", sig ? "sigmoid" : "silu", r);
        printf("#   gate %-7s: worst rel %.2e, %d of %d values differ in their bits\n", sig ? "sigmoid" : "silu", r,
               n_diff(og, oref, NG * OW), NG * OW);
        /* copy_heads: the query heads out of the interleaved [q | gate] rows, into rows of OW at offset 2 */
        if (sig) {
            float cg[NG * OW + 2], cref[NG * OW + 2] = { 0 };
            for (int t = 0; t < NG; t++)
                for (int h = 0; h < HG; h++)
                    memcpy(cref + 2 + t * OW + h * D, mix + t * 2 * HG * D + h * 2 * D, sizeof(float) * D);
            struct vk_buf bq = dev(NULL, sizeof cg);
            if (begin())
                submit(vk_op_copy_heads(&g_ops, (struct vk_view){ &bm, 0, 2 * HG * D }, 2 * D,
                                        (struct vk_view){ &bq, 2, OW }, D, D, HG, NG, &e),
                       &e);
            get(&bq, cg, sizeof cg);
            const int bad = n_diff(cg, cref, NG * OW + 2); /* the heads copied, the gaps between rows still zero */
            CHECK(bad == 0, "copy_heads: %d values differ", bad);
            vk_rt_buf_free(g_rt, &bq);
        }
        vk_rt_buf_free(g_rt, &bo), vk_rt_buf_free(g_rt, &bm);
    }

    /* shexp_add: a[t] += s[t] · sigmoid(w · h[t]) over rows of 200 (past three passes of 64), a and s at
     * offsets in rows wider than the width */
    enum { NS = 6, WS = 200, AS = 203 };
    float a[NS * AS], hh[NS * WS], sx[NS * AS], wv[5 + WS], ag[NS * AS], aref[NS * AS];
    for (int i = 0; i < NS * AS; i++)
        a[i] = frand(), sx[i] = frand() * 2;
    for (int i = 0; i < NS * WS; i++)
        hh[i] = frand() * (i / WS == 2 ? 10.0f : 1.0f);
    for (int i = 0; i < 5 + WS; i++)
        wv[i] = frand() * 0.3f;
    memcpy(aref, a, sizeof a);
    for (int t = 0; t < NS; t++) {
        double d = 0.0;
        for (int i = 0; i < WS; i++)
            d += (double)(wv[5 + i] * hh[t * WS + i]);
        const float gam = gdn_sigmoid((float)d);
        for (int i = 0; i < WS; i++)
            aref[t * AS + 1 + i] = aref[t * AS + 1 + i] + sx[t * AS + 2 + i] * gam;
    }
    struct vk_buf ba = dev(a, sizeof a), bh = dev(hh, sizeof hh), bs = dev(sx, sizeof sx), bw = dev(wv, sizeof wv);
    if (begin())
        submit(vk_op_shexp_add(&g_ops, (struct vk_view){ &ba, 1, AS }, (struct vk_view){ &bh, 0, WS },
                               (struct vk_view){ &bs, 2, AS }, &bw, 5, WS, NS, &e),
               &e);
    get(&ba, ag, sizeof ag);
    const double rs = worst_rel(ag, aref, NS * AS, 1e-30);
    CHECK(rs < 1e-6, "shexp_add: worst rel %.3g", rs);
    printf("#   shexp_add: worst rel %.2e, %d of %d values differ in their bits\n", rs, n_diff(ag, aref, NS * AS),
           NS * AS);
    vk_rt_buf_free(g_rt, &ba), vk_rt_buf_free(g_rt, &bh), vk_rt_buf_free(g_rt, &bs), vk_rt_buf_free(g_rt, &bw);
}

/* l2 over heads of 32 and 128 (past two passes of 64), 3 a token, rows wider than the heads; one head all
 * zero and one whose norm is below eps (x / eps) */
static void gdn_l2(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    for (int w = 32; w <= 128; w *= 4) {
        enum { N = 4, HPT = 3 };
        const int stride = HPT * w + 5, total = 2 + N * stride;
        float *x = malloc(sizeof(float) * (size_t)total), *got = malloc(sizeof(float) * (size_t)total);
        float *ref = malloc(sizeof(float) * (size_t)total);
        for (int i = 0; i < total; i++)
            x[i] = frand() * 3;
        for (int i = 0; i < w; i++) {
            x[2 + stride + w + i] = 0;             /* token 1, head 1: zero */
            x[2 + 2 * stride + 2 * w + i] *= 1e-8f; /* token 2, head 2: ‖x‖ < eps */
        }
        memcpy(ref, x, sizeof(float) * (size_t)total);
        for (int t = 0; t < N; t++)
            for (int h = 0; h < HPT; h++)
                gdn_l2_norm(ref + 2 + t * stride + h * w, w, 1e-6f);
        struct vk_buf bx = dev(x, sizeof(float) * (size_t)total);
        if (begin())
            submit(vk_op_l2(&g_ops, (struct vk_view){ &bx, 2, (uint32_t)stride }, w, HPT, N, 1e-6f, &e), &e);
        get(&bx, got, sizeof(float) * (size_t)total);
        const double r = worst_rel(got, ref, (size_t)total, 1e-30);
        CHECK(r < 1e-6, "l2 width %d: worst rel %.3g", w, r);
        printf("#   l2 width %-3d: worst rel %.2e, %d of %d values differ in their bits\n", w, r,
               n_diff(got, ref, (size_t)total), total);
        vk_rt_buf_free(g_rt, &bx);
        free(x), free(got), free(ref);
    }
}

/* sequences 2, 0 and 3 (of 4 state slots) interleaved over 11 batch rows */
static const int k_gdn_seq[] = { 2, 0, 3, 0, 0, 2, 3, 3, 2, 0, 2 };
#define GDN_N ((int)(sizeof k_gdn_seq / sizeof k_gdn_seq[0]))
#define GDN_NSEQ 4

/* gdn_conv (d_conv 4, 2 and 1) over the interleaved groups from random states, against gdn_conv per group */
static void gdn_conv_groups(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    enum { CD = 100, IS = CD + 3, OS = CD + 2, ROWS_OFF = 2, GRP_OFF = ROWS_OFF + 11 + 1 };
    int32_t grp[GRP_OFF + 4 * 11];
    memset(grp, 0xff, sizeof grp);
    const int ng = gdn_groups(k_gdn_seq, GDN_N, grp, ROWS_OFF, GRP_OFF);
    CHECK(ng == 3, "%d groups", ng);
    for (int dc = 4; dc >= 1; dc = dc == 4 ? 2 : dc - 1) {
        const int ns = dc - 1, sst = CD * ns + 5, s0 = 7, w0 = 3;
        const size_t n_in = 2 + (size_t)GDN_N * IS, n_out = 1 + (size_t)GDN_N * OS;
        const size_t n_st = (size_t)s0 + (size_t)GDN_NSEQ * sst + 1;
        float *in = malloc(sizeof(float) * n_in), *w = malloc(sizeof(float) * (w0 + CD * dc));
        float *st = malloc(sizeof(float) * n_st), *stref = malloc(sizeof(float) * n_st);
        float *out = calloc(n_out, sizeof(float)), *oref = calloc(n_out, sizeof(float));
        for (size_t i = 0; i < n_in; i++)
            in[i] = frand() * 3;
        for (int i = 0; i < w0 + CD * dc; i++)
            w[i] = frand();
        for (size_t i = 0; i < n_st; i++)
            st[i] = frand() * 2;
        memcpy(stref, st, sizeof(float) * n_st);
        for (int g = 0; g < ng; g++) {
            const int32_t *gi = grp + GRP_OFF + 4 * g;
            gdn_conv(in + 2, IS, oref + 1, OS, grp + ROWS_OFF + gi[1], gi[2], w + w0, stref + s0 + gi[0] * sst, dc, 0,
                     CD);
        }
        struct vk_buf bi = dev(in, sizeof(float) * n_in), bw = dev(w, sizeof(float) * (w0 + CD * dc));
        struct vk_buf bs = dev(st, sizeof(float) * n_st), bo = dev(NULL, sizeof(float) * n_out);
        struct vk_buf bg = dev(grp, sizeof grp);
        if (begin())
            submit(vk_op_gdn_conv(&g_ops, (struct vk_view){ &bi, 2, IS }, (struct vk_view){ &bo, 1, OS }, &bw, w0, &bs,
                                  s0, sst, &bg, ROWS_OFF, GRP_OFF, ng, CD, dc, &e),
                   &e);
        get(&bo, out, sizeof(float) * n_out);
        get(&bs, st, sizeof(float) * n_st);
        const double r = worst_rel(out, oref, n_out, 1e-30);
        const int bad_st = n_diff(st, stref, n_st);
        CHECK(r < 1e-6, "gdn_conv d_conv %d: worst rel %.3g", dc, r);
        CHECK(bad_st == 0, "gdn_conv d_conv %d: %d state values differ", dc, bad_st);
        printf("#   gdn_conv d_conv %d: out worst rel %.2e (%d of %zu differ in their bits), states exact\n", dc, r,
               n_diff(out, oref, n_out), n_out);
        vk_rt_buf_free(g_rt, &bi), vk_rt_buf_free(g_rt, &bw), vk_rt_buf_free(g_rt, &bs), vk_rt_buf_free(g_rt, &bo);
        vk_rt_buf_free(g_rt, &bg);
        free(in), free(w), free(st), free(stref), free(out), free(oref);
    }
}

/* gdn_rec for d = 16, 32, 128 with H_k = 2 key heads tiled over H_v = 6 value heads, over the interleaved
 * groups from random states, against gdn_recurrent_ref per (group, value head); β and g in one buffer */
static void gdn_delta_rule(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    enum { HK = 2, HV = 6, ROWS_OFF = 0, GRP_OFF = 11, BS = 2 * HV + 1 };
    int32_t grp[GRP_OFF + 4 * 11];
    const int ng = gdn_groups(k_gdn_seq, GDN_N, grp, ROWS_OFF, GRP_OFF);
    for (int d = 16; d <= 128; d = d == 32 ? 128 : 2 * d) {
        const int ys = (2 * HK + HV) * d + 5, y0 = 3, os = HV * d + 4, o0 = 2;
        const int sst = HV * d * d + 9, s0 = 11;
        const size_t n_y = (size_t)y0 + (size_t)GDN_N * ys, n_o = (size_t)o0 + (size_t)GDN_N * os;
        const size_t n_st = (size_t)s0 + (size_t)GDN_NSEQ * sst;
        float *y = malloc(sizeof(float) * n_y), bg[GDN_N * BS];
        float *st = malloc(sizeof(float) * n_st), *stref = malloc(sizeof(float) * n_st);
        float *out = calloc(n_o, sizeof(float)), *oref = calloc(n_o, sizeof(float));
        for (size_t i = 0; i < n_y; i++)
            y[i] = frand();
        for (int t = 0; t < GDN_N; t++) /* q and k L2-normed as the layer feeds them */
            for (int h = 0; h < 2 * HK; h++)
                gdn_l2_norm(y + y0 + t * ys + h * d, d, 1e-6f);
        for (int i = 0; i < GDN_N * BS; i++) /* β in (0, 1) at columns 0…HV, log decay in [−3, 0) after */
            bg[i] = i % BS < HV ? gdn_sigmoid(frand() * 4) : -3.0f * (0.5f + 0.5f * frand()) - 1e-3f;
        for (size_t i = 0; i < n_st; i++)
            st[i] = frand() * 0.5f;
        memcpy(stref, st, sizeof(float) * n_st);
        const float scale = 1.0f / sqrtf((float)d);
        for (int g = 0; g < ng; g++) {
            const int32_t *gi = grp + GRP_OFF + 4 * g;
            for (int vh = 0; vh < HV; vh++) {
                const int kh = vh % HK;
                const float *yr = y + y0;
                const struct gdn_head hd = { .Q = yr + kh * d, .K = yr + (HK + kh) * d, .V = yr + (2 * HK + vh) * d,
                                             .qk_stride = (size_t)ys, .v_stride = (size_t)ys, .beta = bg + vh,
                                             .gdecay = bg + HV + 1 + vh, .gate_stride = BS, .O = oref + o0 + vh * d,
                                             .o_stride = (size_t)os, .d_k = d, .d_v = d, .scale = scale };
                gdn_recurrent_ref(&hd, grp + ROWS_OFF + gi[1], gi[2], stref + s0 + (size_t)gi[0] * sst +
                                                                         (size_t)vh * d * d);
            }
        }
        struct vk_buf by = dev(y, sizeof(float) * n_y), bb = dev(bg, sizeof bg), bs = dev(st, sizeof(float) * n_st);
        struct vk_buf bo = dev(NULL, sizeof(float) * n_o), bgr = dev(grp, sizeof grp);
        if (begin())
            submit(vk_op_gdn_rec(&g_ops, (struct vk_view){ &by, y0, ys }, (struct vk_view){ &bb, 0, BS },
                                 (struct vk_view){ &bb, HV + 1, BS }, (struct vk_view){ &bo, o0, os }, &bs, s0, sst,
                                 &bgr, ROWS_OFF, GRP_OFF, ng, HK, HV, d, &e),
                   &e);
        get(&bo, out, sizeof(float) * n_o);
        get(&bs, st, sizeof(float) * n_st);
        const double ro = worst_rel(out, oref, n_o, 1e-30), rs = worst_rel(st, stref, n_st, 1e-30);
        double mo = 0, ms = 0, dmo = 0, dms = 0; /* largest magnitudes and differences */
        for (size_t i = 0; i < n_o; i++)
            mo = fmax(mo, fabs(oref[i])), dmo = fmax(dmo, fabs((double)out[i] - oref[i]));
        for (size_t i = 0; i < n_st; i++)
            ms = fmax(ms, fabs(stref[i])), dms = fmax(dms, fabs((double)st[i] - stref[i]));
        CHECK(dmo <= 1e-6 * mo && dms <= 1e-6 * ms, "gdn_rec d %d: out |Δ| %.3g of %.3g, state |Δ| %.3g of %.3g", d,
              dmo, mo, dms, ms);
        printf("#   gdn_rec d %-3d: out worst rel %.2e, |Δ| / max|out| %.2e (%d of %zu differ in their bits); "
               "state worst rel %.2e, |Δ| / max|S| %.2e (%d differ)\n",
               d, ro, dmo / mo, n_diff(out, oref, n_o), n_o, rs, dms / ms, n_diff(st, stref, n_st));
        vk_rt_buf_free(g_rt, &by), vk_rt_buf_free(g_rt, &bb), vk_rt_buf_free(g_rt, &bs), vk_rt_buf_free(g_rt, &bo);
        vk_rt_buf_free(g_rt, &bgr);
        free(y), free(st), free(stref), free(out), free(oref);
    }
}

/* ---- qwen4exp (cpu_hc.c, cpu_hybrid.c) ---- */

/* silu_scale, hc_mean, hc_combine and add2 against cpu_hc.c's and ple_add_task's loops, for hc = 3 and 4
 * streams of 100 (past one pass of 64, not a multiple of it), every view at an offset in rows wider than
 * it reads */
static void hc_elementwise(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    enum { N = 5, E = 100, LR = 70 };
    for (int hc = 3; hc <= 4; hc++) {
        const int wide = hc * E, xs = wide + 3, gs = wide, hs = E + 1, as = E + 2, js = hc + 1, ls = LR + 3;
        const float inv = 1.0f / (float)hc;
        const size_t n_x = 1 + (size_t)N * xs, n_g = (size_t)N * gs, n_h = 2 + (size_t)N * hs;
        const size_t n_a = 1 + (size_t)N * as, n_j = 2 + (size_t)N * js, n_l = 2 + (size_t)N * ls;
        float *x = malloc(sizeof(float) * n_x), *g = malloc(sizeof(float) * n_g);
        float *a = malloc(sizeof(float) * n_a), *j = malloc(sizeof(float) * n_j), *lo = malloc(sizeof(float) * n_l);
        float *ref = malloc(sizeof(float) * n_x), *got = malloc(sizeof(float) * n_x);
        for (size_t i = 0; i < n_x; i++)
            x[i] = frand() * 3;
        for (size_t i = 0; i < n_g; i++)
            g[i] = frand() * 12; /* sigmoid's argument from −12 to 12 */
        for (size_t i = 0; i < n_a; i++)
            a[i] = frand() * 2;
        for (size_t i = 0; i < n_j; i++)
            j[i] = frand() * 9;
        for (size_t i = 0; i < n_l; i++)
            lo[i] = frand() * 40; /* silu's argument from −40/hc to 40/hc */
        struct vk_buf bx = dev(x, sizeof(float) * n_x), bg = dev(g, sizeof(float) * n_g);
        struct vk_buf bh = dev(NULL, sizeof(float) * n_h), ba = dev(a, sizeof(float) * n_a);
        struct vk_buf bj = dev(j, sizeof(float) * n_j), bl = dev(lo, sizeof(float) * n_l);
        struct vk_buf bx2 = dev(x, sizeof(float) * n_x);
        const struct vk_view vx = { &bx, 1, (uint32_t)xs }, vg = { &bg, 0, (uint32_t)gs };
        const struct vk_view vh = { &bh, 2, (uint32_t)hs }, va = { &ba, 1, (uint32_t)as };
        if (begin()) {
            int rc = vk_op_silu_scale(&g_ops, (struct vk_view){ &bl, 2, (uint32_t)ls }, LR, N, inv, &e);
            if (!rc) /* the mean of the streams of x (as xn) gated by g */
                rc = vk_op_hc_mean(&g_ops, vx, vg, vh, E, hc, N, &e);
            if (!rc) /* x += a · 2·sigmoid(j / hc) into every stream */
                rc = vk_op_hc_combine(&g_ops, vx, va, (struct vk_view){ &bj, 2, (uint32_t)js }, E, hc, N, &e);
            if (!rc) /* the PLE add over the hc·E-wide rows of a copy of x, with g and (as c) the written-back x */
                rc = vk_op_add2(&g_ops, (struct vk_view){ &bx2, 1, (uint32_t)xs }, vg, vx, wide, N, &e);
            submit(rc, &e);
        }
        /* silu_scale: cpu_hc_mix's loop */
        float *lref = malloc(sizeof(float) * n_l), *lgot = malloc(sizeof(float) * n_l);
        memcpy(lref, lo, sizeof(float) * n_l);
        for (int t = 0; t < N; t++)
            for (int i = 0; i < LR; i++)
                lref[2 + t * ls + i] = ops_silu(lref[2 + t * ls + i] * inv);
        get(&bl, lgot, sizeof(float) * n_l);
        const double rl = worst_rel(lgot, lref, n_l, 1e-30);
        CHECK(rl < 1e-6, "silu_scale hc %d: worst rel %.3g", hc, rl);
        printf("#   silu_scale 1/%d: worst rel %.2e, %d of %zu values differ in their bits\n", hc, rl,
               n_diff(lgot, lref, n_l), n_l);
        /* hc_mean: mean_task */
        float *href = calloc(n_h, sizeof(float)), *hgot = malloc(sizeof(float) * n_h);
        for (int t = 0; t < N; t++) {
            const float *xn = x + 1 + t * xs, *gt = g + t * gs;
            for (int i = 0; i < E; i++) {
                float acc = xn[i] * gdn_sigmoid(gt[i]);
                for (int s = 1; s < hc; s++)
                    acc = acc + xn[s * E + i] * gdn_sigmoid(gt[s * E + i]);
                href[2 + t * hs + i] = acc * inv;
            }
        }
        get(&bh, hgot, sizeof(float) * n_h);
        const double rh = worst_rel(hgot, href, n_h, 1e-30);
        CHECK(rh < 1e-6, "hc_mean hc %d: worst rel %.3g", hc, rh);
        printf("#   hc_mean hc %d: worst rel %.2e, %d of %zu values differ in their bits\n", hc, rh,
               n_diff(hgot, href, n_h), n_h);
        /* hc_combine: combine_task */
        memcpy(ref, x, sizeof(float) * n_x);
        for (int t = 0; t < N; t++)
            for (int s = 0; s < hc; s++) {
                const float w = 2.0f * gdn_sigmoid(j[2 + t * js + s] * inv);
                float *xr = ref + 1 + t * xs + s * E;
                for (int i = 0; i < E; i++)
                    xr[i] = xr[i] + a[1 + t * as + i] * w;
            }
        get(&bx, got, sizeof(float) * n_x);
        const double rc = worst_rel(got, ref, n_x, 1e-30);
        CHECK(rc < 1e-6, "hc_combine hc %d: worst rel %.3g", hc, rc);
        printf("#   hc_combine hc %d: worst rel %.2e, %d of %zu values differ in their bits\n", hc, rc,
               n_diff(got, ref, n_x), n_x);
        /* add2: ple_add_task, with c the combined x the shader read (a device value, so compared exactly) */
        float *cdev = malloc(sizeof(float) * n_x);
        memcpy(cdev, got, sizeof(float) * n_x);
        memcpy(ref, x, sizeof(float) * n_x);
        for (int t = 0; t < N; t++)
            for (int i = 0; i < wide; i++)
                ref[1 + t * xs + i] = ref[1 + t * xs + i] + (g[t * gs + i] + cdev[1 + t * xs + i]);
        get(&bx2, got, sizeof(float) * n_x);
        const int bad = n_diff(got, ref, n_x);
        CHECK(bad == 0, "add2 hc %d: %d of %zu values differ", hc, bad, n_x);
        printf("#   add2 %d·%d wide: %d of %zu values differ in their bits\n", hc, E, bad, n_x);
        struct vk_buf *all[] = { &bx, &bg, &bh, &ba, &bj, &bl, &bx2 };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            vk_rt_buf_free(g_rt, all[i]);
        free(x), free(g), free(a), free(j), free(lo), free(ref), free(got), free(lref), free(lgot);
        free(href), free(hgot), free(cdev);
    }
}

/* ple_gate against ple_gate_task's loop after the norms, for hc = 3 and 4 streams of 100 and 200: a stream
 * whose key is zero (σ = 0: gate ½) and one whose σ is below 1e-6 in magnitude (the floor) among them */
static void ple_gate_streams(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    enum { N = 6 };
    for (int hc = 3; hc <= 4; hc++)
        for (int E = 100; E <= 200; E += 100) {
            const int wide = hc * E, ks = wide + 1, qs = wide + 2, vs = E + 3, gs = wide + 4;
            const size_t n_k = 3 + (size_t)N * ks, n_q = (size_t)N * qs, n_v = 1 + (size_t)N * vs;
            const size_t n_g = 2 + (size_t)N * gs;
            float *k = malloc(sizeof(float) * n_k), *q = malloc(sizeof(float) * n_q), *v = malloc(sizeof(float) * n_v);
            float *ref = calloc(n_g, sizeof(float)), *got = malloc(sizeof(float) * n_g);
            for (size_t i = 0; i < n_k; i++)
                k[i] = frand() * 2;
            for (size_t i = 0; i < n_q; i++)
                q[i] = frand() * 2;
            for (size_t i = 0; i < n_v; i++)
                v[i] = frand() * 3;
            for (int i = 0; i < E; i++) {
                k[3 + 1 * ks + 1 * E + i] = 0;      /* token 1, stream 1: σ = 0 */
                k[3 + 2 * ks + 2 * E + i] *= 1e-9f; /* token 2, stream 2: |σ| < 1e-6 */
            }
            const float inv = 1.0f / sqrtf((float)E);
            float sg[4 * N];
            for (int t = 0; t < N; t++)
                for (int s = 0; s < hc; s++) {
                    const float *kr = k + 3 + t * ks + s * E, *qr = q + t * qs + s * E;
                    double dot = 0.0;
                    for (int i = 0; i < E; i++)
                        dot += (double)(kr[i] * qr[i]);
                    const float sig = (float)dot * inv;
                    const float mag = sqrtf(fabsf(sig) > 1e-6f ? fabsf(sig) : 1e-6f);
                    const float gate = gdn_sigmoid(sig > 0.0f ? mag : sig < 0.0f ? -mag : 0.0f);
                    sg[t * hc + s] = sig;
                    for (int i = 0; i < E; i++)
                        ref[2 + t * gs + s * E + i] = v[1 + t * vs + i] * gate;
                }
            CHECK(sg[hc + 1] == 0.0f && sg[2 * hc + 2] != 0.0f && fabsf(sg[2 * hc + 2]) < 1e-6f, "σ %g, %g",
                  sg[hc + 1], sg[2 * hc + 2]);
            struct vk_buf bk = dev(k, sizeof(float) * n_k), bq = dev(q, sizeof(float) * n_q);
            struct vk_buf bv = dev(v, sizeof(float) * n_v), bg = dev(NULL, sizeof(float) * n_g);
            const struct vk_view vk = { &bk, 3, (uint32_t)ks }, vq = { &bq, 0, (uint32_t)qs };
            const struct vk_view vv = { &bv, 1, (uint32_t)vs }, vg = { &bg, 2, (uint32_t)gs };
            if (begin())
                submit(vk_op_ple_gate(&g_ops, vk, vq, vv, vg, E, hc, N, &e), &e);
            get(&bg, got, sizeof(float) * n_g);
            const double r = worst_rel(got, ref, n_g, 1e-30);
            CHECK(r < 1e-6, "ple_gate hc %d width %d: worst rel %.3g", hc, E, r);
            printf("#   ple_gate hc %d width %d: worst rel %.2e, %d of %zu values differ in their bits\n", hc, E, r,
                   n_diff(got, ref, n_g), n_g);
            vk_rt_buf_free(g_rt, &bk), vk_rt_buf_free(g_rt, &bq), vk_rt_buf_free(g_rt, &bv), vk_rt_buf_free(g_rt, &bg);
            free(k), free(q), free(v), free(ref), free(got);
        }
}

/* ple_conv_task for one group and all channels: the conv over [history | rows], then the history moved on */
static void ple_conv_ref(const float *in, int in_stride, float *out, int out_stride, const int32_t *rows, int T,
                         const float *w, float *hist, int C, int K, int dil)
{
    const int H = (K - 1) * dil;
    for (int tt = 0; tt < T; tt++)
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const int q = tt - (K - 1 - k) * dil;
                const float x = q < 0 ? hist[(size_t)(H + q) * C + c] : in[(size_t)rows[q] * in_stride + c];
                const float term = w[(size_t)c * K + k] * x;
                acc = k ? acc + term : term;
            }
            out[(size_t)rows[tt] * out_stride + c] = ops_silu(acc);
        }
    for (int m = 0; m < H; m++)
        for (int c = 0; c < C; c++) {
            const int q = T + m;
            hist[(size_t)m * C + c] = q < H ? hist[(size_t)q * C + c] : in[(size_t)rows[q - H] * in_stride + c];
        }
}

/* ple_conv with taps 3 and 4, dilation 2 and 3 (histories of 4 to 9 rows) over 4 sequence groups interleaved
 * in 16 batch rows: sequence 0 with 10 rows (longer than any history), 2 with 3, 3 with 2, 1 with 1
 * (shorter), from random histories; 150 channels (3 workgroups, the last partial) */
static void ple_conv_groups(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    struct err e = { 0 };
    static const int seq_of[] = { 2, 0, 3, 0, 0, 2, 0, 3, 1, 0, 0, 2, 0, 0, 0, 0 };
    enum { NR = sizeof seq_of / sizeof seq_of[0], NSEQ = 4, C = 150, IS = C + 3, OS = C + 2, ROWS_OFF = 1,
           GRP_OFF = ROWS_OFF + NR + 2 };
    int32_t grp[GRP_OFF + 4 * NR];
    memset(grp, 0xff, sizeof grp);
    const int ng = gdn_groups(seq_of, NR, grp, ROWS_OFF, GRP_OFF);
    CHECK(ng == 4, "%d groups", ng);
    for (int taps = 3; taps <= 4; taps++)
        for (int dil = 2; dil <= 3; dil++) {
            const int H = (taps - 1) * dil, sst = H * C + 5, s0 = 7, w0 = 3;
            const size_t n_in = 2 + (size_t)NR * IS, n_out = 1 + (size_t)NR * OS;
            const size_t n_st = (size_t)s0 + (size_t)NSEQ * sst + 1, n_w = (size_t)w0 + (size_t)C * taps;
            float *in = malloc(sizeof(float) * n_in), *w = malloc(sizeof(float) * n_w);
            float *st = malloc(sizeof(float) * n_st), *stref = malloc(sizeof(float) * n_st);
            float *out = calloc(n_out, sizeof(float)), *oref = calloc(n_out, sizeof(float));
            for (size_t i = 0; i < n_in; i++)
                in[i] = frand() * 3;
            for (size_t i = 0; i < n_w; i++)
                w[i] = frand();
            for (size_t i = 0; i < n_st; i++)
                st[i] = frand() * 2;
            memcpy(stref, st, sizeof(float) * n_st);
            for (int g = 0; g < ng; g++) {
                const int32_t *gi = grp + GRP_OFF + 4 * g;
                ple_conv_ref(in + 2, IS, oref + 1, OS, grp + ROWS_OFF + gi[1], gi[2], w + w0, stref + s0 + gi[0] * sst,
                             C, taps, dil);
            }
            struct vk_buf bi = dev(in, sizeof(float) * n_in), bw = dev(w, sizeof(float) * n_w);
            struct vk_buf bs = dev(st, sizeof(float) * n_st), bo = dev(NULL, sizeof(float) * n_out);
            struct vk_buf bg = dev(grp, sizeof grp);
            if (begin())
                submit(vk_op_ple_conv(&g_ops, (struct vk_view){ &bi, 2, IS }, (struct vk_view){ &bo, 1, OS }, &bw, w0,
                                      &bs, s0, sst, &bg, ROWS_OFF, GRP_OFF, ng, C, taps, dil, &e),
                       &e);
            get(&bo, out, sizeof(float) * n_out);
            get(&bs, st, sizeof(float) * n_st);
            const double r = worst_rel(out, oref, n_out, 1e-30);
            const int bad_st = n_diff(st, stref, n_st);
            CHECK(r < 1e-6, "ple_conv taps %d dil %d: worst rel %.3g", taps, dil, r);
            CHECK(bad_st == 0, "ple_conv taps %d dil %d: %d history values differ", taps, dil, bad_st);
            printf("#   ple_conv taps %d dil %d (history %d): out worst rel %.2e (%d of %zu differ in their bits), "
                   "histories exact\n", taps, dil, H, r, n_diff(out, oref, n_out), n_out);
            vk_rt_buf_free(g_rt, &bi), vk_rt_buf_free(g_rt, &bw), vk_rt_buf_free(g_rt, &bs);
            vk_rt_buf_free(g_rt, &bo), vk_rt_buf_free(g_rt, &bg);
            free(in), free(w), free(st), free(stref), free(out), free(oref);
        }
}

/* the cells token t of attn_sel_lists attends: its list, or (nsel −1) its first pos + 1 cells */
static bool sel_cell(int rule, int pos, int c)
{
    switch (rule) {
    case 1: return c % 3 != 1;                    /* every third cell skipped */
    case 2: return c < 4 || (c >= 64 && c % 5 == 0) || c == pos; /* a gap across a pass of 64 */
    case 3: return true;                          /* the whole prefix, as a list */
    case 4: return c == pos;                      /* one cell */
    case 5: return (c * 7) % 11 < 6;              /* 66 of 121: just past one pass */
    default: return false;
    }
}

/* attn_sel over f32 and f16 cells: 8 tokens of two sequences, dense (nsel −1) and listed ones (lists that skip
 * cells, cross passes of 64, name one cell or the whole prefix), GQA with 4 query heads a KV head, head 72
 * (two of the shader's 64-wide output slots). Against cpu_hybrid.c attn_task (the listed rows gathered in
 * cell order, then ops_attn), and bit for bit against vk_op_attn over a cache holding the gathered cells. */
static void attn_sel_lists(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    enum { HD = 72, NH = 8, NKV = 2, KVD = NKV * HD, NCTX = 200, NSEQ = 2, N = 8, QS = NH * HD + 5,
           OS = NH * HD + 2, SELW = 200, NSEL_OFF = 2, SEL_OFF = NSEL_OFF + N + 3 };
    static const int seq[N] = { 0, 1, 1, 0, 0, 1, 0, 1 }, pos[N] = { 180, 40, 150, 5, 99, 199, 7, 120 };
    static const int rule[N] = { 1, 0, 2, 0, 3, 0, 4, 5 }; /* 0: dense */
    const float scale = 0.118f;
    int32_t sel[SEL_OFF + N * SELW];
    for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++)
        sel[i] = -1; /* what the shader must not read: a dense token's list, a list's tail */
    int n_listed = 0, slot[N];
    for (int t = 0; t < N; t++) {
        int ns = -1;
        if (rule[t]) {
            ns = 0;
            for (int c = 0; c <= pos[t]; c++)
                if (sel_cell(rule[t], pos[t], c))
                    sel[SEL_OFF + t * SELW + ns++] = c;
            slot[t] = NSEQ + n_listed++;
        }
        sel[NSEL_OFF + t] = ns;
    }
    CHECK(sel[NSEL_OFF + 0] > 64 && sel[NSEL_OFF + 7] > 64 && sel[NSEL_OFF + 6] == 1, "lists of %d, %d, %d",
          sel[NSEL_OFF + 0], sel[NSEL_OFF + 7], sel[NSEL_OFF + 6]);
    const int n_slot = NSEQ + n_listed;
    float *q = malloc(sizeof(float) * (3 + N * QS)), *kv = malloc(sizeof(float) * 2 * NSEQ * NCTX * KVD);
    for (int i = 0; i < 3 + N * QS; i++)
        q[i] = frand() * 2;
    for (int i = 0; i < 2 * NSEQ * NCTX * KVD; i++)
        kv[i] = frand() * 2;
    int32_t tok[4 * N], tok_g[4 * N]; /* the tokens, and the same over the gathered cells (slot, nsel − 1) */
    for (int t = 0; t < N; t++) {
        tok[4 * t] = 0, tok[4 * t + 1] = pos[t], tok[4 * t + 2] = seq[t], tok[4 * t + 3] = 0;
        memcpy(tok_g + 4 * t, tok + 4 * t, sizeof(int32_t) * 4);
        if (rule[t])
            tok_g[4 * t + 1] = sel[NSEL_OFF + t] - 1, tok_g[4 * t + 2] = slot[t];
    }
    float *f16tab = malloc(sizeof(float) * 65536);
    ops_f16_table_init(f16tab);
    for (int f16 = 0; f16 < 2; f16++) {
        struct err e = { 0 };
        const size_t elt = f16 ? 2 : 4, cell = (size_t)KVD * elt, csz = (size_t)n_slot * NCTX * cell;
        char *K = calloc(1, csz), *V = calloc(1, csz);
        for (int c = 0; c < NSEQ * NCTX * KVD; c++) {
            const float kf = kv[c], vf = kv[NSEQ * NCTX * KVD + c];
            if (f16)
                ((uint16_t *)K)[c] = fp16_from_f32(kf), ((uint16_t *)V)[c] = fp16_from_f32(vf);
            else
                ((float *)K)[c] = kf, ((float *)V)[c] = vf;
        }
        for (int t = 0; t < N; t++) /* each list's cells, in order, in a slot of their own */
            for (int i = 0; rule[t] && i < sel[NSEL_OFF + t]; i++) {
                const size_t src = ((size_t)seq[t] * NCTX + (size_t)sel[SEL_OFF + t * SELW + i]) * cell;
                const size_t dst = ((size_t)slot[t] * NCTX + (size_t)i) * cell;
                memcpy(K + dst, K + src, cell), memcpy(V + dst, V + src, cell);
            }
        struct vk_buf bq = dev(q, sizeof(float) * (3 + N * QS)), bk = dev(K, csz), bv = dev(V, csz);
        struct vk_buf bt = dev(tok, sizeof tok), btg = dev(tok_g, sizeof tok_g), bsel = dev(sel, sizeof sel);
        struct vk_buf bo = dev(NULL, sizeof(float) * (1 + N * OS)), bog = dev(NULL, sizeof(float) * (1 + N * OS));
        const struct vk_view vq = { &bq, 3, QS };
        if (begin()) {
            int rc = vk_op_attn_sel(&g_ops, vq, (struct vk_view){ &bo, 1, OS }, &bk, &bv, &bt, &bsel, SEL_OFF, SELW,
                                    NSEL_OFF, NH, NKV, HD, NCTX, f16, scale, N, &e);
            if (!rc)
                rc = vk_op_attn(&g_ops, vq, (struct vk_view){ &bog, 1, OS }, &bk, &bv, &btg, NH, NKV, HD, NCTX, f16,
                                scale, N, &e);
            submit(rc, &e);
        }
        float *out = malloc(sizeof(float) * (1 + N * OS)), *outg = malloc(sizeof(float) * (1 + N * OS));
        get(&bo, out, sizeof(float) * (1 + N * OS));
        get(&bog, outg, sizeof(float) * (1 + N * OS));
        const int bad_g = n_diff(out, outg, 1 + N * OS);
        CHECK(bad_g == 0, "attn_sel %s: %d values differ from attn over the gathered cells", f16 ? "f16" : "f32",
              bad_g);
        /* attn_task: per token and KV head, its 4 query heads over the (gathered) rows */
        char *Kg = malloc((size_t)NCTX * HD * elt), *Vg = malloc((size_t)NCTX * HD * elt);
        float *scratch = malloc(sizeof(float) * 8 * NCTX), ref[4 * HD];
        double worst = 0, mo = 0;
        for (int t = 0; t < N; t++)
            for (int g = 0; g < NKV; g++) {
                const size_t off = ((size_t)seq[t] * NCTX * KVD + (size_t)g * HD) * elt;
                const char *Kt = K + off, *Vt = V + off;
                size_t stride = KVD;
                int n_kv = pos[t] + 1;
                if (rule[t]) {
                    n_kv = sel[NSEL_OFF + t];
                    for (int c = 0; c < n_kv; c++) {
                        const size_t at = (size_t)sel[SEL_OFF + t * SELW + c] * cell;
                        memcpy(Kg + (size_t)c * HD * elt, Kt + at, HD * elt);
                        memcpy(Vg + (size_t)c * HD * elt, Vt + at, HD * elt);
                    }
                    Kt = Kg, Vt = Vg, stride = HD;
                }
                ops_attn(q + 3 + t * QS + g * 4 * HD, 4, HD, Kt, Vt, stride, n_kv, scale, f16 ? f16tab : NULL, ref,
                         scratch);
                for (int i = 0; i < 4 * HD; i++) {
                    const float o = out[1 + t * OS + g * 4 * HD + i];
                    worst = fmax(worst, isnan(o) ? INFINITY : fabs((double)o - ref[i]));
                    mo = fmax(mo, fabs(ref[i]));
                }
            }
        /* the shader's sums are f32 where the CPU's are double (as attn's); with f16 cells a probability one
         * f32 ulp off the CPU's may round to the neighbouring f16 (2^-11 of it) */
        const double tol = f16 ? 2e-4 : 5e-6;
        CHECK(worst < tol, "attn_sel %s: worst |Δ| %.3g > %g", f16 ? "f16" : "f32", worst, tol);
        printf("#   attn_sel %s cells: worst |Δ| %.3g (max |out| %.3g); equal to attn over the gathered cells\n",
               f16 ? "f16" : "f32", worst, mo);
        struct vk_buf *all[] = { &bq, &bk, &bv, &bt, &btg, &bsel, &bo, &bog };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            vk_rt_buf_free(g_rt, all[i]);
        free(K), free(V), free(out), free(outg), free(Kg), free(Vg), free(scratch);
    }
    free(f16tab), free(q), free(kv);
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
    RUN(gdn_elementwise);
    RUN(gdn_l2);
    RUN(gdn_conv_groups);
    RUN(gdn_delta_rule);
    RUN(hc_elementwise);
    RUN(ple_gate_streams);
    RUN(ple_conv_groups);
    RUN(attn_sel_lists);
    if (g_rt) {
        vk_ops_free(&g_ops);
        vk_rt_close(g_rt);
    }
    CHECK_EXIT();
}
