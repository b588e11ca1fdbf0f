/* ops_ref.c — the CPU reference ops (ops.h), written for llama.cpp CPU
 * parity: the comments name the narrowing choices that matter. The SIMD
 * kernels (ops_avx2.c) fall back to these; ops.c picks between them. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/fp16.h"


void ops_rms_norm(float *y, const float *x, const float *w, int n, float eps)
{
    double sum = 0.0; /* squares in f32, accumulated in double, like ggml */
    for (int i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int i = 0; i < n; i++) {
            float t = x[i] * scale; /* the norm op's output, rounded to f32 */
            y[i] = t * w[i];        /* then the weight multiply */
        }
    } else {
        for (int i = 0; i < n; i++)
            y[i] = x[i] * scale;
    }
}

static float corr_dim(int n_rot, int n_ctx_orig, float n_rotations, float base)
{
    return (float)n_rot * logf((float)n_ctx_orig / (n_rotations * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void ops_rope_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                        float dims[2])
{
    float start = floorf(corr_dim(n_rot, n_ctx_orig, beta_fast, freq_base));
    float end = ceilf(corr_dim(n_rot, n_ctx_orig, beta_slow, freq_base));
    dims[0] = start > 0.0f ? start : 0.0f;
    dims[1] = end < (float)(n_rot - 1) ? end : (float)(n_rot - 1);
}

static float yarn_ramp(float low, float high, int i0)
{
    float d = high - low;
    float y = ((float)(i0 / 2) - low) / (d > 0.001f ? d : 0.001f);
    if (y < 0.0f)
        y = 0.0f;
    if (y > 1.0f)
        y = 1.0f;
    return 1.0f - y;
}

void ops_rope_cache(float *cs, int32_t pos, int n_rot, float freq_base, const float *freq_factors,
                    float freq_scale, float ext_factor, float attn_factor, const float corr_dims[2])
{
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos; /* running product, as ggml's rope cache (not pos·scale^i) */
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        const float theta_interp = freq_scale * theta_extrap;
        float th = theta_interp;
        float mscale = attn_factor;
        if (ext_factor != 0.0f) {
            float mix = yarn_ramp(corr_dims[0], corr_dims[1], i0) * ext_factor;
            th = theta_interp * (1.0f - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        cs[i0] = cosf(th) * mscale;
        cs[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void ops_rope_apply(float *x, int n_rot, enum rope_mode mode, const float *cs)
{
    if (mode == ROPE_NEOX) {
        const int half = n_rot / 2;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c - x1 * s;
            x[i + half] = x0 * s + x1 * c;
        }
    } else {
        for (int i0 = 0; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const float x0 = x[i0], x1 = x[i0 + 1];
            x[i0] = x0 * c - x1 * s;
            x[i0 + 1] = x0 * s + x1 * c;
        }
    }
}

void ops_softmax_ref(float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > max)
            max = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float v = expf(x[i] - max);
        sum += (double)v;
        x[i] = v;
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void ops_swiglu_ref(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++)
        g[i] = ops_silu(g[i]) * u[i];
}

void ops_add(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += x[i];
}

void ops_topk(const float *p, int n, int k, int *idx)
{
    /* selection by repeated insertion: k is small (≤ 8–16 experts used) */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && !(p[i] > p[idx[k - 1]]))
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && p[i] > p[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

void ops_f16_table_init(float *tab)
{
    for (uint32_t i = 0; i < 65536; i++)
        tab[i] = fp16_to_f32((uint16_t)i);
}

/* Dot products as ggml's scalar vec_dot_f32 / vec_dot_f16 (the reference's model is llama.cpp's plain
 * x86-64 build): each product rounded to f32, summed in double, the sum rounded to f32. */
static float dot_f32(const float *a, const float *b, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)(a[i] * b[i]);
    return (float)s;
}

static float dot_f16(const float *a, const uint16_t *b, int n, const float *tab)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)(a[i] * tab[b[i]]);
    return (float)s;
}

#define ATTN_MAX_HD 1024

void ops_attn_ref(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                  float scale, const float *f16tab, float *out, float *scratch)
{
    float qr[ATTN_MAX_HD]; /* q rounded to f16 (f16 cache) */
    for (int h = 0; h < n_q; h++) {
        const float *qh = q + (size_t)h * hd;
        float *oh = out + (size_t)h * hd;
        float *s = scratch;
        if (f16tab) {
            for (int d = 0; d < hd; d++)
                qr[d] = f16tab[fp16_from_f32(qh[d])];
            const uint16_t *k = K;
            for (int p = 0; p < n_kv; p++)
                s[p] = dot_f16(qr, k + (size_t)p * stride, hd, f16tab) * scale;
        } else {
            const float *k = K;
            for (int p = 0; p < n_kv; p++)
                s[p] = dot_f32(qh, k + (size_t)p * stride, hd) * scale;
        }
        ops_softmax_ref(s, n_kv);
        /* V·p as the dots above: f32 products summed in double per output (ggml's V·KQ mul_mat) */
        double acc[ATTN_MAX_HD];
        for (int d = 0; d < hd; d++)
            acc[d] = 0.0;
        if (f16tab) {
            const uint16_t *v = V;
            for (int p = 0; p < n_kv; p++) {
                const float w = f16tab[fp16_from_f32(s[p])]; /* probabilities go to f16 for V·p */
                const uint16_t *vr = v + (size_t)p * stride;
                for (int d = 0; d < hd; d++)
                    acc[d] += (double)(w * f16tab[vr[d]]);
            }
        } else {
            const float *v = V;
            for (int p = 0; p < n_kv; p++) {
                const float w = s[p];
                const float *vr = v + (size_t)p * stride;
                for (int d = 0; d < hd; d++)
                    acc[d] += (double)(w * vr[d]);
            }
        }
        for (int d = 0; d < hd; d++)
            oh[d] = (float)acc[d];
    }
}

void ops_attn_multi_ref(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd,
                        const void *K, const void *V, size_t stride, float scale, const float *f16tab,
                        float *scratch)
{
    for (int j = 0; j < m; j++)
        ops_attn_ref(qs[j], 1, hd, K, V, stride, n_kv[j], scale, f16tab, outs[j], scratch);
}
