/* quantize.c — simple weight quantizers for every compute type, used to build
 * quantized test models. They produce valid blocks that dequantize close to
 * the input (plain min/max or abs-max scaling, round to nearest); they do not
 * try to reproduce ggml's error-minimising search, so the bytes can differ
 * from llama-quantize's while staying within the format's usual error. */
#include <math.h>
#include <string.h>

#include "../../common/fp16.h"
#include "quant_internal.h"

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static int rnd(float x) { return (int)lroundf(x); }

/* The element of largest magnitude (with its sign). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    return max;
}

static void minmax(const float *x, int n, float *mn, float *mx)
{
    *mn = *mx = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < *mn)
            *mn = x[i];
        if (x[i] > *mx)
            *mx = x[i];
    }
}

/* Nearest entry of a 16-value code table to v (table values scaled by d). */
static int nearest_code(const int8_t *tab, float d, float v)
{
    int best = 0;
    float be = INFINITY;
    for (int c = 0; c < 16; c++) {
        float e = fabsf(d * (float)tab[c] - v);
        if (e < be) {
            be = e;
            best = c;
        }
    }
    return best;
}

static void qz_q4_0(const float *x, struct blk_q4_0 *b)
{
    float max = signed_absmax(x, 32);
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = fp16_from_f32(d);
    for (int j = 0; j < 16; j++) {
        int lo = clampi(rnd(x[j] * id) + 8, 0, 15), hi = clampi(rnd(x[j + 16] * id) + 8, 0, 15);
        b->qs[j] = (uint8_t)(lo | hi << 4);
    }
}

static void qz_q4_1(const float *x, struct blk_q4_1 *b)
{
    float mn, mx;
    minmax(x, 32, &mn, &mx);
    float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = fp16_from_f32(d);
    b->m = fp16_from_f32(mn);
    for (int j = 0; j < 16; j++) {
        int lo = clampi(rnd((x[j] - mn) * id), 0, 15), hi = clampi(rnd((x[j + 16] - mn) * id), 0, 15);
        b->qs[j] = (uint8_t)(lo | hi << 4);
    }
}

static void qz_q5_0(const float *x, struct blk_q5_0 *b)
{
    float max = signed_absmax(x, 32);
    float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = fp16_from_f32(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(rnd(x[j] * id) + 16, 0, 31), q1 = clampi(rnd(x[j + 16] * id) + 16, 0, 31);
        b->qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        b->qh[k] = (uint8_t)(qh >> (8 * k));
}

static void qz_q5_1(const float *x, struct blk_q5_1 *b)
{
    float mn, mx;
    minmax(x, 32, &mn, &mx);
    float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = fp16_from_f32(d);
    b->m = fp16_from_f32(mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(rnd((x[j] - mn) * id), 0, 31), q1 = clampi(rnd((x[j + 16] - mn) * id), 0, 31);
        b->qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        b->qh[k] = (uint8_t)(qh >> (8 * k));
}

static void qz_q8_0(const float *x, struct blk_q8_0 *b)
{
    float amax = fabsf(signed_absmax(x, 32));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = fp16_from_f32(d);
    for (int j = 0; j < 32; j++)
        b->qs[j] = (int8_t)clampi(rnd(x[j] * id), -127, 127);
}

static void qz_iq4_nl(const float *x, struct blk_iq4_nl *b)
{
    float max = signed_absmax(x, 32);
    float d = max / -127.0f;
    b->d = fp16_from_f32(d);
    float dq = fp16_to_f32(b->d);
    for (int j = 0; j < 16; j++)
        b->qs[j] = (uint8_t)(nearest_code(kvalues_iq4nl, dq, x[j]) | nearest_code(kvalues_iq4nl, dq, x[j + 16]) << 4);
}

static void qz_mxfp4(const float *x, struct blk_mxfp4 *b)
{
    float amax = fabsf(signed_absmax(x, 32));
    /* smallest power of two d = 2^(e-128) with 12·d ≥ amax */
    int e = 0;
    if (amax > 0.0f) {
        e = 128 + (int)ceilf(log2f(amax / 12.0f));
        e = clampi(e, 0, 254);
        while (e < 254 && 12.0f * e8m0_half((uint8_t)e) < amax)
            e++;
    }
    b->e = (uint8_t)e;
    float d = e8m0_half((uint8_t)e);
    for (int j = 0; j < 16; j++)
        b->qs[j] = (uint8_t)(nearest_code(kvalues_mxfp4, d, x[j]) | nearest_code(kvalues_mxfp4, d, x[j + 16]) << 4);
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each; nmax = 15 or 31. */
static void qz_k4(const float *x, int nmax, uint16_t *pd, uint16_t *pdmin, uint8_t *scales, uint8_t q[256])
{
    float sc[8], mn[8], maxsc = 0.0f, maxmn = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo, hi;
        minmax(x + 32 * j, 32, &lo, &hi);
        if (lo > 0.0f)
            lo = 0.0f;
        sc[j] = (hi - lo) / (float)nmax;
        mn[j] = -lo;
        if (sc[j] > maxsc)
            maxsc = sc[j];
        if (mn[j] > maxmn)
            maxmn = mn[j];
    }
    *pd = fp16_from_f32(maxsc / 63.0f);
    *pdmin = fp16_from_f32(maxmn / 63.0f);
    float d = fp16_to_f32(*pd), dmin = fp16_to_f32(*pdmin);
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)(d > 0.0f ? clampi(rnd(sc[j] / d), 0, 63) : 0);
        lm[j] = (uint8_t)(dmin > 0.0f ? clampi(rnd(mn[j] / dmin), 0, 63) : 0);
    }
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)ls[j], ml = dmin * (float)lm[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = (uint8_t)(dl > 0.0f ? clampi(rnd((x[32 * j + l] + ml) / dl), 0, nmax) : 0);
    }
}

static void pack_k4_qs(const uint8_t q[256], uint8_t qs[128])
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xF) | (q[64 * c + 32 + l] & 0xF) << 4);
}

static void qz_q4_k(const float *x, struct blk_q4_k *b)
{
    uint8_t q[256];
    qz_k4(x, 15, &b->d, &b->dmin, b->scales, q);
    pack_k4_qs(q, b->qs);
}

static void qz_q5_k(const float *x, struct blk_q5_k *b)
{
    uint8_t q[256];
    qz_k4(x, 31, &b->d, &b->dmin, b->scales, q);
    pack_k4_qs(q, b->qs);
    memset(b->qh, 0, 32);
    for (int e = 0; e < 256; e++)
        b->qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
}

static void qz_q6_k(const float *x, struct blk_q6_k *b)
{
    float sc[16], maxsc = 0.0f;
    for (int g = 0; g < 16; g++) {
        sc[g] = signed_absmax(x + 16 * g, 16) / -32.0f;
        if (fabsf(sc[g]) > maxsc)
            maxsc = fabsf(sc[g]);
    }
    b->d = fp16_from_f32(maxsc / 127.0f);
    float d = fp16_to_f32(b->d);
    int8_t q[256];
    for (int g = 0; g < 16; g++) {
        int ls = d > 0.0f ? clampi(rnd(sc[g] / d), -128, 127) : 0;
        b->scales[g] = (int8_t)ls;
        float dl = d * (float)ls;
        for (int k = 0; k < 16; k++)
            q[16 * g + k] = (int8_t)(dl != 0.0f ? clampi(rnd(x[16 * g + k] / dl), -32, 31) : 0);
    }
    memset(b->qh, 0, 64);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int8_t *o = q + 128 * h;
            int q0 = o[l] + 32, q1 = o[l + 32] + 32, q2 = o[l + 64] + 32, q3 = o[l + 96] + 32;
            b->ql[64 * h + l] = (uint8_t)((q0 & 0xF) | (q2 & 0xF) << 4);
            b->ql[64 * h + l + 32] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
            b->qh[32 * h + l] = (uint8_t)((q0 >> 4) | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
        }
}

/* Q2_K / Q3_K share the 2-bit packing of qs: byte 32·half + l, bits 2·(r/32). */
static void pack_2bit(const uint8_t q[256], uint8_t qs[64])
{
    memset(qs, 0, 64);
    for (int e = 0; e < 256; e++) {
        int half = e / 128, r = e % 128;
        qs[32 * half + r % 32] |= (uint8_t)((q[e] & 3) << (2 * (r / 32)));
    }
}

static void qz_q2_k(const float *x, struct blk_q2_k *b)
{
    float sc[16], mn[16], maxsc = 0.0f, maxmn = 0.0f;
    for (int g = 0; g < 16; g++) {
        float lo, hi;
        minmax(x + 16 * g, 16, &lo, &hi);
        if (lo > 0.0f)
            lo = 0.0f;
        sc[g] = (hi - lo) / 3.0f;
        mn[g] = -lo;
        if (sc[g] > maxsc)
            maxsc = sc[g];
        if (mn[g] > maxmn)
            maxmn = mn[g];
    }
    b->d = fp16_from_f32(maxsc / 15.0f);
    b->dmin = fp16_from_f32(maxmn / 15.0f);
    float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
    uint8_t q[256];
    for (int g = 0; g < 16; g++) {
        int ls = d > 0.0f ? clampi(rnd(sc[g] / d), 0, 15) : 0;
        int lm = dmin > 0.0f ? clampi(rnd(mn[g] / dmin), 0, 15) : 0;
        b->scales[g] = (uint8_t)(ls | lm << 4);
        float dl = d * (float)ls, ml = dmin * (float)lm;
        for (int k = 0; k < 16; k++)
            q[16 * g + k] = (uint8_t)(dl > 0.0f ? clampi(rnd((x[16 * g + k] + ml) / dl), 0, 3) : 0);
    }
    pack_2bit(q, b->qs);
}

static void qz_q3_k(const float *x, struct blk_q3_k *b)
{
    float sc[16], maxsc = 0.0f;
    for (int g = 0; g < 16; g++) {
        sc[g] = signed_absmax(x + 16 * g, 16) / -4.0f;
        if (fabsf(sc[g]) > maxsc)
            maxsc = fabsf(sc[g]);
    }
    b->d = fp16_from_f32(maxsc / 31.0f);
    float d = fp16_to_f32(b->d);
    uint8_t u[256]; /* q + 4, 0..7 */
    int ls[16];
    for (int g = 0; g < 16; g++) {
        ls[g] = d > 0.0f ? clampi(rnd(sc[g] / d), -32, 31) : 0;
        float dl = d * (float)ls[g];
        for (int k = 0; k < 16; k++)
            u[16 * g + k] = (uint8_t)(dl != 0.0f ? clampi(rnd(x[16 * g + k] / dl), -4, 3) + 4 : 4);
    }
    memset(b->scales, 0, 12);
    for (int i = 0; i < 16; i++) {
        int v = ls[i] + 32;
        if (i < 8)
            b->scales[i] |= (uint8_t)(v & 0xF);
        else
            b->scales[i - 8] |= (uint8_t)((v & 0xF) << 4);
        b->scales[8 + i % 4] |= (uint8_t)((v >> 4) << (2 * (i / 4)));
    }
    pack_2bit(u, b->qs);
    memset(b->hmask, 0, 32);
    for (int e = 0; e < 256; e++)
        b->hmask[e % 32] |= (uint8_t)((u[e] >> 2) << (e / 32));
}

static void qz_iq4_xs(const float *x, struct blk_iq4_xs *b)
{
    float sc[8], maxsc = 0.0f;
    for (int ib = 0; ib < 8; ib++) {
        sc[ib] = signed_absmax(x + 32 * ib, 32) / -127.0f;
        if (fabsf(sc[ib]) > maxsc)
            maxsc = fabsf(sc[ib]);
    }
    b->d = fp16_from_f32(maxsc / 31.0f);
    float d = fp16_to_f32(b->d);
    b->scales_h = 0;
    memset(b->scales_l, 0, 4);
    for (int ib = 0; ib < 8; ib++) {
        int l = d > 0.0f ? clampi(rnd(sc[ib] / d), -32, 31) : 0;
        int ls = l + 32;
        b->scales_l[ib / 2] |= (uint8_t)((ls & 0xF) << (4 * (ib % 2)));
        b->scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
        float dl = d * (float)l;
        for (int j = 0; j < 16; j++)
            b->qs[16 * ib + j] = (uint8_t)(nearest_code(kvalues_iq4nl, dl, x[32 * ib + j]) |
                                           nearest_code(kvalues_iq4nl, dl, x[32 * ib + j + 16]) << 4);
    }
}

bool quant_weights_row(enum qtype t, const float *x, void *dst, int64_t n)
{
    const struct qtype_info *q = qtype_get((uint32_t)t);
    if (!q || n < 0 || n % q->blck)
        return false;
    int64_t nb = n / q->blck;
    switch (t) {
    case QT_F32: memcpy(dst, x, (size_t)n * 4); return true;
    case QT_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp16_from_f32(x[i]); return true;
    case QT_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = bf16_from_f32(x[i]); return true;
#define BLOCKS(T, fn) for (int64_t i = 0; i < nb; i++) fn(x + i * q->blck, (struct T *)dst + i); return true
    case QT_Q4_0: BLOCKS(blk_q4_0, qz_q4_0);
    case QT_Q4_1: BLOCKS(blk_q4_1, qz_q4_1);
    case QT_Q5_0: BLOCKS(blk_q5_0, qz_q5_0);
    case QT_Q5_1: BLOCKS(blk_q5_1, qz_q5_1);
    case QT_Q8_0: BLOCKS(blk_q8_0, qz_q8_0);
    case QT_IQ4_NL: BLOCKS(blk_iq4_nl, qz_iq4_nl);
    case QT_MXFP4: BLOCKS(blk_mxfp4, qz_mxfp4);
    case QT_Q2_K: BLOCKS(blk_q2_k, qz_q2_k);
    case QT_Q3_K: BLOCKS(blk_q3_k, qz_q3_k);
    case QT_Q4_K: BLOCKS(blk_q4_k, qz_q4_k);
    case QT_Q5_K: BLOCKS(blk_q5_k, qz_q5_k);
    case QT_Q6_K: BLOCKS(blk_q6_k, qz_q6_k);
    case QT_IQ4_XS: BLOCKS(blk_iq4_xs, qz_iq4_xs);
#undef BLOCKS
    case QT_Q8_1: quant_act_q8_1_ref(x, dst, n); return true;
    case QT_Q8_K: quant_act_q8_k_ref(x, dst, n); return true;
    default: return false;
    }
}
