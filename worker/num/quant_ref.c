/* quant_ref.c — scalar reference math for every compute type: dequantization
 * (bit-exact with ggml, spec gguf-and-quants.md §3), activation quantization
 * (x86 variant, §4.1–4.3) and dot products (§4.4). These are the definitions
 * the SIMD kernels are tested against, so they favour plain, obviously-right
 * loops over speed. Integer partial sums are exact; only the final float
 * combination per block follows ggml's generic order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/fp16.h"
#include "quant_internal.h"

#define F16(h) fp16_to_f32(h)

/* ---------------------------------------------------------------- dequant */

static void deq_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * 4); }

static void deq_f16(const void *src, float *y, int64_t n)
{
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        y[i] = fp16_to_f32(x[i]);
}

static void deq_bf16(const void *src, float *y, int64_t n)
{
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_to_f32(x[i]);
}

static void deq_q4_0(const void *src, float *y, int64_t n)
{
    const struct blk_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const void *src, float *y, int64_t n)
{
    const struct blk_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d), m = F16(b->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b->qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

static void deq_q5_0(const void *src, float *y, int64_t n)
{
    const struct blk_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d);
        uint32_t qh = rd_u32le(b->qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = (float)(((b->qs[j] & 0xF) | h0 << 4) - 16) * d;
            y[j + 16] = (float)(((b->qs[j] >> 4) | h1 << 4) - 16) * d;
        }
    }
}

static void deq_q5_1(const void *src, float *y, int64_t n)
{
    const struct blk_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d), m = F16(b->m);
        uint32_t qh = rd_u32le(b->qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = (float)((b->qs[j] & 0xF) | h0 << 4) * d + m;
            y[j + 16] = (float)((b->qs[j] >> 4) | h1 << 4) * d + m;
        }
    }
}

static void deq_q8_0(const void *src, float *y, int64_t n)
{
    const struct blk_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)b->qs[j] * d;
    }
}

static void deq_q8_1(const void *src, float *y, int64_t n)
{
    const struct blk_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)b->qs[j] * d;
    }
}

static void deq_iq4_nl(const void *src, float *y, int64_t n)
{
    const struct blk_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = F16(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)kvalues_iq4nl[b->qs[j] & 0xF];
            y[j + 16] = d * (float)kvalues_iq4nl[b->qs[j] >> 4];
        }
    }
}

static void deq_mxfp4(const void *src, float *y, int64_t n)
{
    const struct blk_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
        float d = e8m0_half(b->e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)kvalues_mxfp4[b->qs[j] & 0xF] * d;
            y[j + 16] = (float)kvalues_mxfp4[b->qs[j] >> 4] * d;
        }
    }
}

static void deq_q2_k(const void *src, float *y, int64_t n)
{
    const struct blk_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d), dmin = F16(b->dmin);
        for (int e = 0; e < 256; e++) {
            int s = e / 16, half = e / 128, r = e % 128, shift = 2 * (r / 32), l = r % 32;
            int q = (b->qs[32 * half + l] >> shift) & 3;
            float dl = d * (float)(b->scales[s] & 0xF), ml = dmin * (float)(b->scales[s] >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

static void deq_q3_k(const void *src, float *y, int64_t n)
{
    const struct blk_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d);
        int8_t sc[16];
        q3k_scales(b->scales, sc);
        for (int e = 0; e < 256; e++) {
            int half = e / 128, r = e % 128, shift = 2 * (r / 32), l = r % 32;
            int low2 = (b->qs[32 * half + l] >> shift) & 3;
            int hbit = (b->hmask[e % 32] >> (e / 32)) & 1;
            int q = low2 - (hbit ? 0 : 4);
            y[e] = (d * (float)sc[e / 16]) * (float)q;
        }
    }
}

static void deq_q4_k(const void *src, float *y, int64_t n)
{
    const struct blk_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d), dmin = F16(b->dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            k4_scale_min(j, b->scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = b->qs + 32 * (j / 2);
            int sh = (j & 1) * 4;
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dl * (float)((q[l] >> sh) & 0xF) - ml;
        }
    }
}

static void deq_q5_k(const void *src, float *y, int64_t n)
{
    const struct blk_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d), dmin = F16(b->dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            k4_scale_min(j, b->scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = b->qs + 32 * (j / 2);
            int sh = (j & 1) * 4;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> sh) & 0xF) + 16 * ((b->qh[l] >> j) & 1);
                y[32 * j + l] = dl * (float)v - ml;
            }
        }
    }
}

static void deq_q6_k(const void *src, float *y, int64_t n)
{
    const struct blk_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *L = b->ql + 64 * h, *H = b->qh + 32 * h;
            const int8_t *S = b->scales + 8 * h;
            float *o = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q0 = ((L[l] & 0xF) | ((H[l] >> 0) & 3) << 4) - 32;
                int q1 = ((L[l + 32] & 0xF) | ((H[l] >> 2) & 3) << 4) - 32;
                int q2 = ((L[l] >> 4) | ((H[l] >> 4) & 3) << 4) - 32;
                int q3 = ((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4) - 32;
                o[l] = (d * (float)S[is + 0]) * (float)q0;
                o[l + 32] = (d * (float)S[is + 2]) * (float)q1;
                o[l + 64] = (d * (float)S[is + 4]) * (float)q2;
                o[l + 96] = (d * (float)S[is + 6]) * (float)q3;
            }
        }
    }
}

static void deq_iq4_xs(const void *src, float *y, int64_t n)
{
    const struct blk_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K) {
        float d = F16(b->d);
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4);
            float dl = d * (float)(ls - 32);
            const uint8_t *q = b->qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * (float)kvalues_iq4nl[q[j] & 0xF];
                y[32 * ib + j + 16] = dl * (float)kvalues_iq4nl[q[j] >> 4];
            }
        }
    }
}

static void deq_q8_k(const void *src, float *y, int64_t n)
{
    const struct blk_q8_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K)
        for (int j = 0; j < 256; j++)
            y[j] = b->d * (float)b->qs[j];
}

/* ------------------------------------------------- activation quantization */

/* RNE to integer (the default FP environment is round-to-nearest-even). */
static inline int rne_int(float x) { return (int)nearbyintf(x); }

/* Q8_0, x86 SIMD variant: id = 127/amax, RNE (spec §4.1). */
void quant_act_q8_0_ref(const float *x, void *dst, int64_t n)
{
    struct blk_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b->d = fp16_from_f32(d);
        for (int j = 0; j < 32; j++)
            b->qs[j] = (int8_t)rne_int(x[j] * id);
    }
}

/* Q8_1: as Q8_0 plus s = fp16(d_f32 · Σq) (spec §4.2). */
void quant_act_q8_1_ref(const float *x, void *dst, int64_t n)
{
    struct blk_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b->d = fp16_from_f32(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            int q = rne_int(x[j] * id);
            b->qs[j] = (int8_t)q;
            sum += q;
        }
        b->s = fp16_from_f32(d * (float)sum);
    }
}

/* Q8_K (spec §4.3): the largest-magnitude element maps to −127. */
void quant_act_q8_k_ref(const float *x, void *dst, int64_t n)
{
    struct blk_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b++, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            int v = rne_int(iscale * x[j]);
            b->qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += b->qs[16 * g + j];
            b->bsums[g] = (int16_t)s;
        }
        b->d = 1.0f / iscale;
    }
}

static void act_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * 4); }

static void act_f16(const float *x, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = fp16_from_f32(x[i]);
}

static void act_bf16(const float *x, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_from_f32(x[i]);
}

/* ------------------------------------------------------------ dot products */

static float dot_f32(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(x[i] * y[i]);
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(fp16_to_f32(x[i]) * fp16_to_f32(y[i]));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(bf16_to_f32(x[i]) * bf16_to_f32(y[i]));
    return (float)s;
}

static float dot_q4_0(int64_t n, const void *w, const void *a)
{
    const struct blk_q4_0 *x = w;
    const struct blk_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        s += (float)sumi * (F16(x[i].d) * F16(y[i].d));
    }
    return s;
}

static float dot_q4_1(int64_t n, const void *w, const void *a)
{
    const struct blk_q4_1 *x = w;
    const struct blk_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        s += (F16(x[i].d) * F16(y[i].d)) * (float)sumi + F16(x[i].m) * F16(y[i].s);
    }
    return s;
}

static float dot_q5_0(int64_t n, const void *w, const void *a)
{
    const struct blk_q5_0 *x = w;
    const struct blk_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh = rd_u32le(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ((x[i].qs[j] & 0xF) | ((qh >> j) & 1) << 4) - 16;
            int q1 = ((x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        s += (float)sumi * (F16(x[i].d) * F16(y[i].d));
    }
    return s;
}

static float dot_q5_1(int64_t n, const void *w, const void *a)
{
    const struct blk_q5_1 *x = w;
    const struct blk_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh = rd_u32le(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 0xF) | ((qh >> j) & 1) << 4;
            int q1 = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        s += (F16(x[i].d) * F16(y[i].d)) * (float)sumi + F16(x[i].m) * F16(y[i].s);
    }
    return s;
}

static float dot_q8_0(int64_t n, const void *w, const void *a)
{
    const struct blk_q8_0 *x = w;
    const struct blk_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        s += (float)sumi * (F16(x[i].d) * F16(y[i].d));
    }
    return s;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *a)
{
    const struct blk_iq4_nl *x = w;
    const struct blk_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        s += (F16(x[i].d) * F16(y[i].d)) * (float)sumi;
    }
    return s;
}

static float dot_mxfp4(int64_t n, const void *w, const void *a)
{
    const struct blk_mxfp4 *x = w;
    const struct blk_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += kvalues_mxfp4[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        s += (e8m0_half(x[i].e) * F16(y[i].d)) * (float)sumi;
    }
    return s;
}

static float dot_q2_k(int64_t n, const void *w, const void *a)
{
    const struct blk_q2_k *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int g = 0; g < 16; g++) {
            int sub = 0;
            for (int k = 0; k < 16; k++) {
                int e = 16 * g + k, half = e / 128, r = e % 128;
                int q = (x[i].qs[32 * half + r % 32] >> (2 * (r / 32))) & 3;
                sub += q * y[i].qs[e];
            }
            isum += (x[i].scales[g] & 0xF) * sub;
            summ += (x[i].scales[g] >> 4) * y[i].bsums[g];
        }
        float dall = y[i].d * F16(x[i].d), dmin = y[i].d * F16(x[i].dmin);
        s += dall * (float)isum - dmin * (float)summ;
    }
    return s;
}

static float dot_q3_k(int64_t n, const void *w, const void *a)
{
    const struct blk_q3_k *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        q3k_scales(x[i].scales, sc);
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int sub = 0;
            for (int k = 0; k < 16; k++) {
                int e = 16 * g + k, half = e / 128, r = e % 128;
                int low2 = (x[i].qs[32 * half + r % 32] >> (2 * (r / 32))) & 3;
                int hbit = (x[i].hmask[e % 32] >> (e / 32)) & 1;
                sub += (low2 - (hbit ? 0 : 4)) * y[i].qs[e];
            }
            isum += sc[g] * sub;
        }
        s += (y[i].d * F16(x[i].d)) * (float)isum;
    }
    return s;
}

static float dot_q4_k(int64_t n, const void *w, const void *a)
{
    const struct blk_q4_k *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            k4_scale_min(j, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            int sh = (j & 1) * 4, sub = 0;
            for (int l = 0; l < 32; l++)
                sub += ((q[l] >> sh) & 0xF) * y[i].qs[32 * j + l];
            isum += sc * sub;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float dall = y[i].d * F16(x[i].d), dmin = y[i].d * F16(x[i].dmin);
        s += dall * (float)isum - dmin * (float)summ;
    }
    return s;
}

static float dot_q5_k(int64_t n, const void *w, const void *a)
{
    const struct blk_q5_k *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            k4_scale_min(j, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            int sh = (j & 1) * 4, sub = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> sh) & 0xF) + 16 * ((x[i].qh[l] >> j) & 1);
                sub += v * y[i].qs[32 * j + l];
            }
            isum += sc * sub;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        float dall = y[i].d * F16(x[i].d), dmin = y[i].d * F16(x[i].dmin);
        s += dall * (float)isum - dmin * (float)summ;
    }
    return s;
}

static float dot_q6_k(int64_t n, const void *w, const void *a)
{
    const struct blk_q6_k *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t q[256];
        for (int h = 0; h < 2; h++) {
            const uint8_t *L = x[i].ql + 64 * h, *H = x[i].qh + 32 * h;
            int8_t *o = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((L[l] & 0xF) | ((H[l] >> 0) & 3) << 4) - 32);
                o[l + 32] = (int8_t)(((L[l + 32] & 0xF) | ((H[l] >> 2) & 3) << 4) - 32);
                o[l + 64] = (int8_t)(((L[l] >> 4) | ((H[l] >> 4) & 3) << 4) - 32);
                o[l + 96] = (int8_t)(((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4) - 32);
            }
        }
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int sub = 0;
            for (int k = 0; k < 16; k++)
                sub += q[16 * g + k] * y[i].qs[16 * g + k];
            isum += x[i].scales[g] * sub;
        }
        s += (y[i].d * F16(x[i].d)) * (float)isum;
    }
    return s;
}

static float dot_iq4_xs(int64_t n, const void *w, const void *a)
{
    const struct blk_iq4_xs *x = w;
    const struct blk_q8_k *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const uint8_t *q = x[i].qs + 16 * ib;
            const int8_t *qa = y[i].qs + 32 * ib;
            int sub = 0;
            for (int j = 0; j < 16; j++)
                sub += kvalues_iq4nl[q[j] & 0xF] * qa[j] + kvalues_iq4nl[q[j] >> 4] * qa[j + 16];
            isum += (ls - 32) * sub;
        }
        s += (y[i].d * F16(x[i].d)) * (float)isum;
    }
    return s;
}

/* ----------------------------------------------------- packed reference */

/* Row r of one packed 16-row group (quant_internal.h layouts) back in the
 * file's block format: the exact inverse of matmul_pack.c's packing, so the
 * reference packed kernel below is the scalar dot of the original row. */
static void unpack_k4_row(const uint8_t *g, int64_t nsb, int r, int q5, uint8_t *row)
{
    const size_t sb = q5 ? PQ5K_SB : PQ4K_SB, bb = q5 ? sizeof(struct blk_q5_k) : sizeof(struct blk_q4_k);
    for (int64_t i = 0; i < nsb; i++, g += sb) {
        uint8_t *B = row + (size_t)i * bb;
        uint8_t sc[8], mn[8], *S = B + 4, *qs = B + (q5 ? 48 : 16);
        memcpy(B, g + PQ4K_OFF_D + 2 * r, 2);
        memcpy(B + 2, g + PQ4K_OFF_DMIN + 2 * r, 2);
        for (int j = 0; j < 8; j++) {
            int16_t m16;
            memcpy(&m16, g + PQ4K_OFF_MN + (((j / 2) * PQ4K_ROWS + r) * 2 + j % 2) * 2, 2);
            sc[j] = g[PQ4K_OFF_SC + j * PQ4K_ROWS + r];
            mn[j] = (uint8_t)m16;
        }
        /* the 12-byte 6-bit encoding that k4_scale_min decodes */
        for (int j = 0; j < 4; j++) {
            S[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
            S[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
            S[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
        }
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < 8; k++)
                memcpy(qs + 32 * c + 4 * k, g + ((c * 8 + k) * PQ4K_ROWS + r) * 4, 4);
        if (q5)
            for (int k = 0; k < 8; k++)
                memcpy(B + 16 + 4 * k, g + PQ5K_OFF_QH + (k * PQ4K_ROWS + r) * 4, 4);
    }
}

static void unpack_q6_k_row(const uint8_t *g, int64_t nsb, int r, uint8_t *row)
{
    struct blk_q6_k *b = (struct blk_q6_k *)row;
    for (int64_t i = 0; i < nsb; i++, g += PQ6K_SB) {
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 8; k++) {
                for (int c = 0; c < 2; c++)
                    memcpy(b[i].ql + 64 * h + 32 * c + 4 * k, g + (((h * 2 + c) * 8 + k) * PQ4K_ROWS + r) * 4, 4);
                memcpy(b[i].qh + 32 * h + 4 * k, g + PQ6K_OFF_QH + ((h * 8 + k) * PQ4K_ROWS + r) * 4, 4);
            }
        for (int gi = 0; gi < 16; gi++)
            b[i].scales[gi] = (int8_t)g[PQ6K_OFF_SC + gi * PQ4K_ROWS + r];
        memcpy(&b[i].d, g + PQ6K_OFF_D + 2 * r, 2);
    }
}

static void unpack_q8_0_row(const uint8_t *g, int64_t nb, int r, uint8_t *row)
{
    struct blk_q8_0 *b = (struct blk_q8_0 *)row;
    for (int64_t i = 0; i < nb; i++, g += PQ8_SB) {
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < 4; c++)
                b[i].qs[4 * k + c] = (int8_t)(g[(k * PQ4K_ROWS + r) * 4 + c] ^ 0x80);
        memcpy(&b[i].d, g + PQ8_OFF_D + 2 * r, 2);
    }
}

/* The packed-kernel contract on any CPU: each of the 16 rows unpacked, then
 * the scalar dot with the ordinary activation row (aux is not needed). */
static void packed_ref(enum qtype wt, int64_t n, const uint8_t *g, const void *a, size_t as, int nt, float *out)
{
    const size_t rb = qtype_row_size(wt, n);
    uint8_t *row = malloc(rb);
    for (int r = 0; r < PQ4K_ROWS; r++) {
        if (row) {
            if (wt == QT_Q4_K || wt == QT_Q5_K)
                unpack_k4_row(g, n / QK_K, r, wt == QT_Q5_K, row);
            else if (wt == QT_Q6_K)
                unpack_q6_k_row(g, n / QK_K, r, row);
            else
                unpack_q8_0_row(g, n / QK, r, row);
        }
        const qdot_fn dot = wt == QT_Q4_K ? dot_q4_k : wt == QT_Q5_K ? dot_q5_k : wt == QT_Q6_K ? dot_q6_k : dot_q8_0;
        for (int t = 0; t < nt; t++)
            out[t * PQ4K_ROWS + r] = row ? dot(n, row, (const uint8_t *)a + (size_t)t * as) : NAN;
    }
    free(row);
}

#define PACKED_REF(name, T)                                                                                  \
    static void name(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,    \
                     int nt, float *out)                                                                     \
    {                                                                                                        \
        (void)aux;                                                                                           \
        (void)auxs;                                                                                          \
        packed_ref(T, n, g, a, as, nt, out);                                                                 \
    }
PACKED_REF(packed_ref_q4_k, QT_Q4_K)
PACKED_REF(packed_ref_q5_k, QT_Q5_K)
PACKED_REF(packed_ref_q6_k, QT_Q6_K)
PACKED_REF(packed_ref_q8_0, QT_Q8_0)

qpacked_fn quant_packed_ref(enum qtype wt)
{
    return wt == QT_Q4_K   ? packed_ref_q4_k
           : wt == QT_Q5_K ? packed_ref_q5_k
           : wt == QT_Q6_K ? packed_ref_q6_k
           : wt == QT_Q8_0 ? packed_ref_q8_0
                           : NULL;
}

/* ------------------------------------------------------------------ table */

void quant_ref_kernels(struct quant_kernels *k)
{
    memset(k, 0, sizeof *k);
    k->name = "scalar";
    k->deq[QT_F32] = deq_f32;
    k->deq[QT_F16] = deq_f16;
    k->deq[QT_BF16] = deq_bf16;
    k->deq[QT_Q4_0] = deq_q4_0;
    k->deq[QT_Q4_1] = deq_q4_1;
    k->deq[QT_Q5_0] = deq_q5_0;
    k->deq[QT_Q5_1] = deq_q5_1;
    k->deq[QT_Q8_0] = deq_q8_0;
    k->deq[QT_Q8_1] = deq_q8_1;
    k->deq[QT_Q2_K] = deq_q2_k;
    k->deq[QT_Q3_K] = deq_q3_k;
    k->deq[QT_Q4_K] = deq_q4_k;
    k->deq[QT_Q5_K] = deq_q5_k;
    k->deq[QT_Q6_K] = deq_q6_k;
    k->deq[QT_Q8_K] = deq_q8_k;
    k->deq[QT_IQ4_NL] = deq_iq4_nl;
    k->deq[QT_IQ4_XS] = deq_iq4_xs;
    k->deq[QT_MXFP4] = deq_mxfp4;

    k->act[QT_F32] = act_f32;
    k->act[QT_F16] = act_f16;
    k->act[QT_BF16] = act_bf16;
    k->act[QT_Q8_0] = quant_act_q8_0_ref;
    k->act[QT_Q8_1] = quant_act_q8_1_ref;
    k->act[QT_Q8_K] = quant_act_q8_k_ref;

    k->dot[QT_F32] = dot_f32;
    k->dot[QT_F16] = dot_f16;
    k->dot[QT_BF16] = dot_bf16;
    k->dot[QT_Q4_0] = dot_q4_0;
    k->dot[QT_Q4_1] = dot_q4_1;
    k->dot[QT_Q5_0] = dot_q5_0;
    k->dot[QT_Q5_1] = dot_q5_1;
    k->dot[QT_Q8_0] = dot_q8_0;
    k->dot[QT_Q2_K] = dot_q2_k;
    k->dot[QT_Q3_K] = dot_q3_k;
    k->dot[QT_Q4_K] = dot_q4_k;
    k->dot[QT_Q5_K] = dot_q5_k;
    k->dot[QT_Q6_K] = dot_q6_k;
    k->dot[QT_IQ4_NL] = dot_iq4_nl;
    k->dot[QT_IQ4_XS] = dot_iq4_xs;
    k->dot[QT_MXFP4] = dot_mxfp4;
}
