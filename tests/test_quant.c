/* test_quant.c — tensor type math: dequantization, activation quantization,
 * dot products (scalar and every SIMD level this CPU has), matmul and the
 * reference weight quantizers.
 *
 * Expected values come from the spec's worked examples (gguf-and-quants.md §6)
 * and from the small restatements of the spec formulas below (tdeq_*, t_q8_*),
 * which read blocks by byte offset and never call the code under test. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/num/matmul.h"
#include "../worker/num/quant.h"
#include "../worker/num/quant_internal.h"
#include "../common/tpool.h"
#include "check.h"
#include "golden/quant_gen.h"

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float rndf(void) { return (float)((double)(rnd64() >> 11) / 9007199254740992.0) * 2.0f - 1.0f; } /* [-1,1) */

/* Independent binary16 decode: sign · 2^(e-15) · (1 + m/1024), or subnormal 2^-14 · m/1024. */
static float h2f(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m / 1024.0, -14);
    else
        v = ldexp(1.0 + m / 1024.0, e - 15);
    return (float)(s ? -v : v);
}
static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t u16at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32at(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* A random finite fp16 with exponent field in [elo, ehi] and random sign. */
static uint16_t rnd_h(int elo, int ehi)
{
    int e = elo + (int)(rnd64() % (uint64_t)(ehi - elo + 1));
    return (uint16_t)((rnd64() & 1) << 15 | e << 10 | (rnd64() & 1023));
}

/* Parse hex bytes ("00 3C ...") into out; returns count. */
static int hex(const char *s, uint8_t *out)
{
    int n = 0;
    while (*s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

static const int8_t T_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t T_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
static float t_e8m0_half(int e) { return (float)ldexp(1.0, e - 128); }

/* ------------------------------------------ spec §3 restated per element */

/* Element e of one block B of type t, straight from the §3 formulas. */
static float tdeq(enum qtype t, const uint8_t *B, int e)
{
    switch (t) {
    case QT_F32: { float f; memcpy(&f, B + 4 * e, 4); return f; }
    case QT_F16: return h2f(u16at(B + 2 * e));
    case QT_BF16: return bf2f(u16at(B + 2 * e));
    case QT_Q4_0: {
        int j = e % 16, q = e < 16 ? (B[2 + j] & 15) : (B[2 + j] >> 4);
        return (float)(q - 8) * h2f(u16at(B));
    }
    case QT_Q4_1: {
        int j = e % 16, q = e < 16 ? (B[4 + j] & 15) : (B[4 + j] >> 4);
        return (float)q * h2f(u16at(B)) + h2f(u16at(B + 2));
    }
    case QT_Q5_0: {
        int j = e % 16, q = e < 16 ? (B[6 + j] & 15) : (B[6 + j] >> 4);
        int h = (u32at(B + 2) >> e) & 1;
        return (float)((q | h << 4) - 16) * h2f(u16at(B));
    }
    case QT_Q5_1: {
        int j = e % 16, q = e < 16 ? (B[8 + j] & 15) : (B[8 + j] >> 4);
        int h = (u32at(B + 4) >> e) & 1;
        return (float)(q | h << 4) * h2f(u16at(B)) + h2f(u16at(B + 2));
    }
    case QT_Q8_0: return (float)(int8_t)B[2 + e] * h2f(u16at(B));
    case QT_IQ4_NL: {
        int j = e % 16, q = e < 16 ? (B[2 + j] & 15) : (B[2 + j] >> 4);
        return h2f(u16at(B)) * (float)T_IQ4NL[q];
    }
    case QT_MXFP4: {
        int j = e % 16, q = e < 16 ? (B[1 + j] & 15) : (B[1 + j] >> 4);
        return (float)T_MXFP4[q] * t_e8m0_half(B[0]);
    }
    case QT_Q2_K: {
        const uint8_t *sc = B, *qs = B + 16;
        float d = h2f(u16at(B + 80)), dmin = h2f(u16at(B + 82));
        int s = e / 16, half = e / 128, r = e % 128, shift = 2 * (r / 32), l = r % 32;
        int q = (qs[32 * half + l] >> shift) & 3;
        return (d * (float)(sc[s] & 15)) * (float)q - dmin * (float)(sc[s] >> 4);
    }
    case QT_Q3_K: {
        const uint8_t *hm = B, *qs = B + 32, *S = B + 96;
        float d = h2f(u16at(B + 108));
        int i = e / 16;
        int low4 = i < 8 ? (S[i] & 15) : (S[i - 8] >> 4);
        int high2 = (S[8 + i % 4] >> (2 * (i / 4))) & 3;
        int sc = (low4 | high2 << 4) - 32;
        int half = e / 128, r = e % 128, shift = 2 * (r / 32), l = r % 32;
        int low2 = (qs[32 * half + l] >> shift) & 3;
        int hbit = (hm[e % 32] >> (e / 32)) & 1;
        return (d * (float)sc) * (float)(low2 - (hbit ? 0 : 4));
    }
    case QT_Q4_K:
    case QT_Q5_K: {
        const uint8_t *S = B + 4;
        float d = h2f(u16at(B)), dmin = h2f(u16at(B + 2));
        int c = e / 64, k = e % 64, j = 2 * c + (k >= 32);
        int sc, m;
        if (j < 4) {
            sc = S[j] & 63;
            m = S[j + 4] & 63;
        } else {
            sc = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4);
            m = (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
        }
        const uint8_t *qs = B + (t == QT_Q4_K ? 16 : 48);
        int byte = qs[32 * c + k % 32];
        int q = k < 32 ? (byte & 15) : (byte >> 4);
        if (t == QT_Q5_K)
            q += 16 * ((B[16 + k % 32] >> j) & 1);
        return (d * (float)sc) * (float)q - dmin * (float)m;
    }
    case QT_Q6_K: {
        const uint8_t *ql = B, *qh = B + 128;
        const int8_t *S = (const int8_t *)(B + 192);
        float d = h2f(u16at(B + 208));
        int h = e / 128, r = e % 128, l = r % 32, grp = r / 32; /* grp: row of the §3.12 table */
        const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
        int low4 = grp == 0 ? (L[l] & 15) : grp == 1 ? (L[l + 32] & 15) : grp == 2 ? (L[l] >> 4) : (L[l + 32] >> 4);
        int high2 = (H[l] >> (2 * grp)) & 3;
        int sc = S[8 * h + l / 16 + 2 * grp];
        return (d * (float)sc) * (float)((low4 | high2 << 4) - 32);
    }
    case QT_IQ4_XS: {
        float d = h2f(u16at(B));
        int sh = u16at(B + 2), ib = e / 32, j = e % 32;
        int ls = ((B[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
        const uint8_t *Q = B + 8 + 16 * ib;
        int q = j < 16 ? (Q[j] & 15) : (Q[j - 16] >> 4);
        return (d * (float)(ls - 32)) * (float)T_IQ4NL[q];
    }
    default: return NAN;
    }
}

static const enum qtype g_compute[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0,
                                       QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};
#define N_COMPUTE (int)(sizeof g_compute / sizeof g_compute[0])

/* Byte offsets of the fp16 scale fields in a block (made finite and moderate in random blocks). */
static void fix_scales(enum qtype t, uint8_t *B, int elo, int ehi)
{
    int off[2] = {-1, -1};
    switch (t) {
    case QT_Q4_0: case QT_Q5_0: case QT_Q8_0: case QT_IQ4_NL: off[0] = 0; break;
    case QT_Q4_1: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: off[0] = 0; off[1] = 2; break;
    case QT_Q2_K: off[0] = 80; off[1] = 82; break;
    case QT_Q3_K: off[0] = 108; break;
    case QT_Q6_K: off[0] = 208; break;
    case QT_IQ4_XS: off[0] = 0; break;
    case QT_MXFP4: B[0] = (uint8_t)(118 + rnd64() % 13); break;
    default: break;
    }
    for (int k = 0; k < 2; k++)
        if (off[k] >= 0) {
            uint16_t h = rnd_h(elo, ehi);
            B[off[k]] = (uint8_t)h;
            B[off[k] + 1] = (uint8_t)(h >> 8);
        }
}

/* n elements of random valid data of type t (weights); scales in [2^(elo-15), 2^(ehi-15)). */
static void rnd_row(enum qtype t, uint8_t *dst, int64_t n, int elo, int ehi)
{
    const struct qtype_info *q = qtype_get(t);
    size_t bytes = qtype_row_size(t, n);
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)rnd64();
    if (t == QT_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = rndf() * 4.0f;
            memcpy(dst + 4 * i, &f, 4);
        }
    } else if (t == QT_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = rnd_h(1, 17);
            memcpy(dst + 2 * i, &h, 2);
        }
    } else if (t == QT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)((rnd64() & 0x807f) | (uint16_t)(120 + rnd64() % 10) << 7);
            memcpy(dst + 2 * i, &h, 2);
        }
    } else {
        for (int64_t b = 0; b < n / q->blck; b++)
            fix_scales(t, dst + b * q->size, elo, ehi);
    }
}

/* ------------------------------------------------- (a) §6 worked examples */

static void blk(uint8_t *B, int size, const char *prefix, uint8_t fill)
{
    memset(B, fill, (size_t)size);
    hex(prefix, B);
}

static void spec_examples_dequant(void)
{
    uint8_t B[256];
    float y[256];
    /* F16 / BF16 */
    int n = hex("00 3C 00 C0 FF 7B 01 00 00 7C", B);
    dequant_row(QT_F16, B, y, n / 2);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 65504.0f && y[3] == 5.9604645e-08f && isinf(y[4]) && y[4] > 0,
          "f16 %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4]);
    n = hex("80 3F 49 40 80 BF", B);
    dequant_row(QT_BF16, B, y, 3);
    CHECK(y[0] == 1.0f && y[1] == 3.140625f && y[2] == -1.0f, "bf16 %g %g %g", y[0], y[1], y[2]);
    /* Q4_0 */
    hex("00 38 1F 88 88 88 88 88 88 88 88 88 88 88 88 88 88 88", B);
    dequant_row(QT_Q4_0, B, y, 32);
    int bad = 0;
    for (int i = 0; i < 32; i++)
        bad += y[i] != (i == 0 ? 3.5f : i == 16 ? -3.5f : 0.0f);
    CHECK_EQ_INT(bad, 0);
    /* Q4_1 */
    hex("00 38 00 BC 2F 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00", B);
    dequant_row(QT_Q4_1, B, y, 32);
    CHECK(y[0] == 6.5f && y[16] == 0.0f && y[1] == -1.0f && y[17] == -1.0f, "q4_1 %g %g %g %g", y[0], y[16], y[1], y[17]);
    /* Q5_0 */
    blk(B, 22, "00 3C 01 00 00 80", 0);
    dequant_row(QT_Q5_0, B, y, 32);
    bad = 0;
    for (int i = 0; i < 32; i++)
        bad += y[i] != (i == 0 || i == 31 ? 0.0f : -16.0f);
    CHECK_EQ_INT(bad, 0);
    /* Q5_1 ×2 */
    blk(B, 24, "00 34 00 3C FF FF FF FF", 0xFF);
    dequant_row(QT_Q5_1, B, y, 32);
    bad = 0;
    for (int i = 0; i < 32; i++)
        bad += y[i] != 8.75f;
    CHECK_EQ_INT(bad, 0);
    blk(B, 24, "00 38 00 3C 01 00 01 00 21", 0);
    dequant_row(QT_Q5_1, B, y, 32);
    CHECK(y[0] == 9.5f && y[16] == 10.0f && y[1] == 1.0f && y[17] == 1.0f, "q5_1 %g %g %g %g", y[0], y[16], y[1], y[17]);
    /* Q8_0 */
    blk(B, 34, "66 2E 01 FF 7F 81", 0);
    dequant_row(QT_Q8_0, B, y, 32);
    CHECK(y[0] == 0.0999755859375f && y[1] == -0.0999755859375f && y[2] == 12.6968994140625f &&
          y[3] == -12.6968994140625f && y[4] == 0.0f && y[31] == 0.0f, "q8_0 %g %g %g %g", y[0], y[1], y[2], y[3]);
    /* MXFP4 ×2 */
    blk(B, 17, "80 7F", 0);
    dequant_row(QT_MXFP4, B, y, 32);
    bad = 0;
    for (int i = 0; i < 32; i++)
        bad += y[i] != (i == 0 ? -12.0f : i == 16 ? 12.0f : 0.0f);
    CHECK_EQ_INT(bad, 0);
    blk(B, 17, "7F 5D", 0);
    dequant_row(QT_MXFP4, B, y, 32);
    CHECK(y[0] == -3.0f && y[16] == 3.0f && y[1] == 0.0f, "mxfp4 %g %g", y[0], y[16]);
    /* IQ4_NL */
    hex("00 3C 0F 88 88 88 88 88 88 88 88 88 88 88 88 88 88 88", B);
    dequant_row(QT_IQ4_NL, B, y, 32);
    CHECK(y[0] == 113.0f && y[16] == -127.0f && y[1] == 1.0f && y[17] == 1.0f, "iq4_nl %g %g %g %g", y[0], y[16], y[1], y[17]);
    /* IQ4_XS ×2 */
    blk(B, 136, "00 3C 00 00 21 00 00 00 0F", 0x88);
    dequant_row(QT_IQ4_XS, B, y, 256);
    CHECK(y[0] == -3503.0f && y[16] == 3937.0f && y[32] == -30.0f && y[48] == -30.0f && y[64] == -32.0f,
          "iq4_xs %g %g %g %g %g", y[0], y[16], y[32], y[48], y[64]);
    blk(B, 136, "00 3C 03 00 21 00 00 00 0F", 0x88);
    dequant_row(QT_IQ4_XS, B, y, 256);
    CHECK(y[0] == 1921.0f && y[32] == -30.0f, "iq4_xs(2) %g %g", y[0], y[32]);
    /* Q2_K */
    memset(B, 0, 84);
    hex("21 13 05 00 07 00 1F", B);
    B[16] = 0xE4;
    hex("00 3C 00 34", B + 80);
    dequant_row(QT_Q2_K, B, y, 256);
    CHECK(y[0] == -0.5f && y[1] == -0.5f && y[16] == -0.25f && y[32] == 5.0f && y[33] == 0.0f && y[64] == 14.0f &&
          y[96] == 44.75f, "q2_K %g %g %g %g %g %g %g", y[0], y[1], y[16], y[32], y[33], y[64], y[96]);
    /* Q3_K */
    memset(B, 0xFF, 32);
    B[0] = 0xFE;
    memset(B + 32, 0, 64);
    B[32] = 0xE4;
    hex("01 00 02 00 0C 00 0F 00 A6 AA A6 AA 00 3C", B + 96);
    dequant_row(QT_Q3_K, B, y, 256);
    CHECK(y[0] == -4.0f && y[32] == 2.0f && y[64] == -8.0f && y[96] == -3.0f && y[1] == 0.0f && y[16] == 0.0f,
          "q3_K %g %g %g %g %g %g", y[0], y[32], y[64], y[96], y[1], y[16]);
    /* Q4_K */
    memset(B, 0, 144);
    hex("00 3C 00 38 81 03 00 00 C2 04 00 00 15 00 00 00 21", B);
    dequant_row(QT_Q4_K, B, y, 256);
    CHECK(y[0] == 0.0f && y[1] == -1.0f && y[32] == 4.0f && y[33] == -2.0f && y[128] == -24.5f && y[160] == 0.0f,
          "q4_K %g %g %g %g %g %g", y[0], y[1], y[32], y[33], y[128], y[160]);
    /* Q5_K */
    memset(B, 0, 176);
    hex("00 3C 00 38 81 03 00 00 C2 04 00 00 15 00 00 00 13", B);
    B[48] = 0x21;
    dequant_row(QT_Q5_K, B, y, 256);
    CHECK(y[0] == 16.0f && y[1] == -1.0f && y[32] == 52.0f && y[128] == 567.5f && y[160] == 0.0f,
          "q5_K %g %g %g %g %g", y[0], y[1], y[32], y[128], y[160]);
    /* Q6_K */
    memset(B, 0, 210);
    B[0] = 0x21;
    B[128] = 0xE4;
    hex("02 00 FD 00 04 00 FB 00 01 01 01 01 01 01 01 01 00 38", B + 192);
    dequant_row(QT_Q6_K, B, y, 256);
    CHECK(y[0] == -31.0f && y[1] == -32.0f && y[32] == 24.0f && y[64] == 4.0f && y[96] == -40.0f && y[128] == -16.0f,
          "q6_K %g %g %g %g %g %g", y[0], y[1], y[32], y[64], y[96], y[128]);
}

/* ------------------------------ (b) random blocks vs the restated formulas */

static void dequant_random_blocks(void)
{
    enum { NB = 64 };
    static uint8_t buf[NB * 256 * 4];
    static float y[NB * 256];
    for (int ti = 0; ti < N_COMPUTE; ti++) {
        enum qtype t = g_compute[ti];
        const struct qtype_info *q = qtype_get(t);
        int64_t n = (int64_t)NB * (q->blck == 1 ? 256 : q->blck);
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) {
            rnd_row(t, buf, n, 1, 30); /* wide scale range incl. huge/tiny */
            dequant_row(t, buf, y, n);
            for (int64_t e = 0; e < n; e++) {
                const uint8_t *B = buf + (e / q->blck) * q->size;
                float want = tdeq(t, B, (int)(e % q->blck));
                if (memcmp(&want, &y[e], 4) && !(isnan(want) && isnan(y[e]))) {
                    if (bad++ < 3)
                        printf("#   %s elem %lld: got %.9g want %.9g\n", q->name, (long long)e, y[e], want);
                }
            }
        }
        CHECK(bad == 0, "%s: %d elements differ", q->name, bad);
    }
}

/* --------------------------------------------- (c) activation quantizers */

/* Restated §4.1 x86 rule for one Q8_0 block: d = amax/127, id = 127/amax, q = rne(x·id). */
static void t_q8_0(const float *x, uint16_t *d16, int8_t *q, int *sum, float *dq)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax)
            amax = fabsf(x[j]);
    float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    *dq = d;
    *d16 = 0;
    /* RNE fp16 of d via the independent decoder: pick the nearest of neighbours */
    {
        uint16_t best = 0;
        double be = INFINITY;
        for (uint32_t h = 0; h < 0x7c00; h++) {
            double e = fabs((double)h2f((uint16_t)h) - (double)d);
            if (e < be || (e == be && !(h & 1))) {
                be = e;
                best = (uint16_t)h;
            }
        }
        *d16 = best;
    }
    *sum = 0;
    for (int j = 0; j < 32; j++) {
        float v = x[j] * id;
        float f = floorf(v), r = v - f;
        int iv = (int)f + (r > 0.5f || (r == 0.5f && ((long)f & 1)));
        q[j] = (int8_t)iv;
        *sum += iv;
    }
}

static void act_q8_0_and_q8_1(void)
{
    /* §6 example: x86 variant gives q[3] = 0 (tie to even) */
    float x[64] = {1.0f, -0.25f, 0.3f, 0.003937007859349251f};
    struct blk_q8_0 b[2];
    quant_act_row(QT_Q4_0, x, b, 32);
    CHECK_EQ_INT(b[0].d, 0x2008);
    CHECK(b[0].qs[0] == 127 && b[0].qs[1] == -32 && b[0].qs[2] == 38 && b[0].qs[3] == 0 && b[0].qs[4] == 0,
          "q %d %d %d %d", b[0].qs[0], b[0].qs[1], b[0].qs[2], b[0].qs[3]);
    /* more ties: with amax = 127, id = 1 so x.5 values are exact ties */
    float t[32] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f};
    quant_act_row(QT_Q8_0, t, b, 32);
    CHECK(b[0].qs[1] == 0 && b[0].qs[2] == 2 && b[0].qs[3] == 2 && b[0].qs[4] == 0 && b[0].qs[5] == -2 &&
          b[0].qs[6] == -2 && b[0].qs[7] == 4, "ties %d %d %d %d %d %d %d", b[0].qs[1], b[0].qs[2], b[0].qs[3],
          b[0].qs[4], b[0].qs[5], b[0].qs[6], b[0].qs[7]);
    /* all-zero block */
    float z[32] = {0};
    quant_act_row(QT_Q8_0, z, b, 32);
    int nz = 0;
    for (int j = 0; j < 32; j++)
        nz += b[0].qs[j] != 0;
    CHECK(b[0].d == 0 && nz == 0, "zero block d=%u nz=%d", b[0].d, nz);
    /* random blocks vs the restated rule, Q8_0 and Q8_1 */
    int bad = 0;
    for (int rep = 0; rep < 40; rep++) {
        float xr[64];
        float scale = ldexpf(1.0f, (int)(rnd64() % 20) - 10);
        for (int j = 0; j < 64; j++)
            xr[j] = rndf() * scale;
        struct blk_q8_0 a0[2];
        struct blk_q8_1 a1[2];
        quant_act_row(QT_Q4_0, xr, a0, 64);
        quant_act_row(QT_Q4_1, xr, a1, 64);
        for (int k = 0; k < 2; k++) {
            uint16_t d16;
            int8_t q[32];
            int sum;
            float d;
            t_q8_0(xr + 32 * k, &d16, q, &sum, &d);
            bad += a0[k].d != d16 || memcmp(a0[k].qs, q, 32) || a1[k].d != d16 || memcmp(a1[k].qs, q, 32);
            /* s = fp16(d_f32 · Σq): compare through the value (exact RNE checked above for d) */
            float s = d * (float)sum, got = h2f(a1[k].s);
            bad += fabsf(got - s) > fabsf(s) * (1.0f / 2048.0f) + 1e-30f;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void act_q8_k(void)
{
    /* §6 example */
    float x[256] = {-2.0f, 1.0f, 0.5f, 0.007874015718698502f};
    x[17] = 0.75f;
    struct blk_q8_k b;
    quant_act_row(QT_Q4_K, x, &b, 256);
    CHECK(b.qs[0] == -127 && b.qs[1] == 64 && b.qs[2] == 32 && b.qs[3] == 0 && b.qs[17] == 48,
          "q %d %d %d %d %d", b.qs[0], b.qs[1], b.qs[2], b.qs[3], b.qs[17]);
    CHECK(b.bsums[0] == -31 && b.bsums[1] == 48, "bsums %d %d", b.bsums[0], b.bsums[1]);
    CHECK(b.d == 0.015748031437397003f, "d %.9g", b.d);
    /* the positive maximum maps to −127; the first of equal magnitudes decides the sign */
    float y[256] = {0};
    y[5] = 3.0f;
    y[9] = -3.0f;
    quant_act_row(QT_Q6_K, y, &b, 256);
    CHECK(b.qs[5] == -127 && b.qs[9] == 127 && b.d < 0, "sign %d %d %g", b.qs[5], b.qs[9], b.d);
    /* zero block */
    memset(y, 0, sizeof y);
    quant_act_row(QT_Q6_K, y, &b, 256);
    int nz = 0;
    for (int j = 0; j < 256; j++)
        nz += b.qs[j] != 0;
    for (int g = 0; g < 16; g++)
        nz += b.bsums[g] != 0;
    CHECK(b.d == 0.0f && nz == 0, "zero block");
    /* random vs restated rule */
    int bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        float xr[512];
        for (int j = 0; j < 512; j++)
            xr[j] = rndf() * 7.0f;
        struct blk_q8_k a[2];
        quant_act_row(QT_IQ4_XS, xr, a, 512);
        for (int k = 0; k < 2; k++) {
            const float *v = xr + 256 * k;
            float amax = 0, max = 0;
            for (int j = 0; j < 256; j++)
                if (fabsf(v[j]) > amax) {
                    amax = fabsf(v[j]);
                    max = v[j];
                }
            float is = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                float p = is * v[j];
                float f = floorf(p), r = p - f;
                int iv = (int)f + (r > 0.5f || (r == 0.5f && ((long)f & 1)));
                if (iv > 127)
                    iv = 127;
                bad += a[k].qs[j] != iv;
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += a[k].qs[16 * g + j];
                bad += a[k].bsums[g] != s;
            }
            bad += a[k].d != 1.0f / is;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void act_f16_bf16(void)
{
    float x[4] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.00390625f, -65520.0f};
    uint16_t h[4], b[4];
    quant_act_row(QT_F16, x, h, 4);
    quant_act_row(QT_BF16, x, b, 4);
    CHECK(h[0] == 0x3c00 && h[1] == 0x3c02 && h[3] == 0xfc00, "f16 %04x %04x %04x", h[0], h[1], h[3]);
    CHECK(b[2] == 0x3f80, "bf16 %04x", b[2]);
}

/* SIMD activation quantizers must produce the same bytes as the scalar ones. */
static void act_simd_equal(void)
{
    static float x[4096];
    static uint8_t r[8192], s[8192];
    const struct quant_kernels *ref = quant_kernels_level(0);
    int tested = 0;
    for (int lvl = 1; lvl <= 2; lvl++) {
        const struct quant_kernels *k = quant_kernels_level(lvl);
        if (!k)
            continue;
        const enum qtype vt[] = {QT_Q8_0, QT_Q8_1, QT_Q8_K, QT_F16, QT_BF16};
        for (int i = 0; i < 5; i++) {
            for (int rep = 0; rep < 10; rep++) {
                for (int j = 0; j < 4096; j++)
                    x[j] = rndf() * ldexpf(1.0f, rep - 5);
                if (rep == 0) /* exact ties after scaling: amax = 127 per block */
                    for (int j = 0; j < 4096; j++)
                        x[j] = (j % 32 == 0) ? 127.0f : (float)((int)(rnd64() % 200) - 100) + 0.5f;
                if (rep == 1) /* equal magnitudes of both signs: the first one decides Q8_K's sign */
                    for (int j = 0; j < 4096; j += 256) {
                        x[j + 7] = (j & 256) ? 5.0f : -5.0f;
                        x[j + 200] = -x[j + 7];
                    }
                int64_t n = 4096;
                size_t bytes = qtype_row_size(vt[i], n);
                ref->act[vt[i]](x, r, n);
                k->act[vt[i]](x, s, n);
                CHECK(!memcmp(r, s, bytes), "%s act %s differs", k->name, qtype_get(vt[i])->name);
                tested++;
            }
        }
    }
    if (!tested)
        SKIP("no SIMD level on this CPU");
}

/* ---------------------------------------------------- (d) dot products */

/* Σ dequant(w)·dequant(a) in double, and Σ|…| for the tolerance. */
static double dd_dot(enum qtype wt, int64_t n, const void *w, const void *a, double *mag)
{
    static float fw[8192], fa[8192];
    enum qtype vt = qtype_get(wt)->vec_dot;
    dequant_row(wt, w, fw, n);
    const struct quant_kernels *ref = quant_kernels_level(0);
    ref->deq[vt](a, fa, n);
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)fw[i] * fa[i];
        m += fabs((double)fw[i] * fa[i]);
    }
    *mag = m;
    return s;
}

static void dot_simd_vs_ref(void)
{
    static uint8_t w[8192 * 4], a[8192 * 4];
    static float x[8192];
    const int64_t lens32[] = {32, 64, 96, 256, 1056, 4096};
    const int64_t lens256[] = {256, 512, 768, 2048, 4096};
    const int64_t lens1[] = {1, 7, 16, 33, 100, 256, 1000, 4096};
    int levels = 0;
    for (int lvl = 1; lvl <= 2; lvl++) {
        const struct quant_kernels *k = quant_kernels_level(lvl);
        if (!k)
            continue;
        levels++;
        for (int ti = 0; ti < N_COMPUTE; ti++) {
            enum qtype t = g_compute[ti];
            const struct qtype_info *q = qtype_get(t);
            const int64_t *lens = q->blck == 1 ? lens1 : q->blck == 32 ? lens32 : lens256;
            int nl = q->blck == 1 ? 8 : q->blck == 32 ? 6 : 5;
            int bad = 0;
            for (int li = 0; li < nl; li++) {
                int64_t n = lens[li];
                for (int rep = 0; rep < 3; rep++) {
                    rnd_row(t, w, n, 8, 16);
                    for (int64_t i = 0; i < n; i++)
                        x[i] = rndf() * 3.0f;
                    quant_kernels_level(0)->act[q->vec_dot](x, a, n);
                    float r = quant_kernels_level(0)->dot[t](n, w, a);
                    float s = k->dot[t](n, w, a);
                    double mag;
                    dd_dot(t, n, w, a, &mag);
                    if (fabs((double)r - s) > 1e-5 * mag + 1e-30) {
                        if (bad++ < 3)
                            printf("#   %s %s n=%lld: simd %.9g ref %.9g (mag %g)\n", k->name, q->name, (long long)n, s, r, mag);
                    }
                    /* multi-token entry: must equal the single-token kernel bit for bit */
                    if (k->dot_multi[t]) {
                        static uint8_t am[8 * 8192 * 4];
                        size_t ar = qtype_row_size(q->vec_dot, n);
                        float out[8];
                        for (int tt = 0; tt < 8; tt++) {
                            for (int64_t i = 0; i < n; i++)
                                x[i] = rndf();
                            quant_kernels_level(0)->act[q->vec_dot](x, am + tt * ar, n);
                        }
                        for (int nt = 1; nt <= 8; nt++) {
                            k->dot_multi[t](n, w, am, ar, nt, out);
                            for (int tt = 0; tt < nt; tt++) {
                                float one = k->dot[t](n, w, am + tt * ar);
                                if (memcmp(&one, &out[tt], 4) && bad++ < 3)
                                    printf("#   %s %s multi n=%lld nt=%d t=%d: %.9g vs %.9g\n", k->name, q->name,
                                           (long long)n, nt, tt, out[tt], one);
                            }
                        }
                    }
                }
            }
            CHECK(bad == 0, "%s %s: %d mismatches", k->name, q->name, bad);
        }
    }
    if (!levels)
        SKIP("no SIMD level on this CPU");
}

/* vec_dot (the dispatched one) against dequantize-then-dot: exact up to float
 * rounding against the dequantized activations, and within the activation
 * quantization error against the original f32 activations. */
static void dot_vs_dequant(void)
{
    static uint8_t w[8192 * 4], a[8192 * 4];
    static float x[8192], fw[8192];
    for (int ti = 0; ti < N_COMPUTE; ti++) {
        enum qtype t = g_compute[ti];
        const struct qtype_info *q = qtype_get(t);
        int bad = 0;
        for (int rep = 0; rep < 6; rep++) {
            int64_t n = 1024;
            rnd_row(t, w, n, 8, 16);
            for (int64_t i = 0; i < n; i++)
                x[i] = rndf() * 2.0f;
            quant_act_row(t, x, a, n);
            float got = vec_dot(t, n, w, a);
            float ref = vec_dot_ref(t, n, w, a);
            double mag, want = dd_dot(t, n, w, a, &mag);
            /* Q4_1/Q5_1 use the fp16-rounded s = d·Σq for the min term */
            double tol = 2e-6 * mag;
            if (t == QT_Q4_1 || t == QT_Q5_1)
                tol += 1e-3 * mag;
            if (fabs(got - want) > tol || fabs(ref - want) > tol) {
                if (bad++ < 3)
                    printf("#   %s: vec_dot %.9g ref %.9g want %.9g (mag %g)\n", q->name, got, ref, want, mag);
            }
            /* vs f32 activations: relative error of the activation format */
            dequant_row(t, w, fw, n);
            double s = 0, m = 0;
            for (int64_t i = 0; i < n; i++) {
                s += (double)fw[i] * x[i];
                m += fabs((double)fw[i] * x[i]);
            }
            double rel = q->vec_dot == QT_F32 ? 1e-6 : q->vec_dot == QT_F16 ? 1e-3 : q->vec_dot == QT_BF16 ? 8e-3 : 1.6e-2;
            if (fabs(got - s) > rel * m) {
                if (bad++ < 3)
                    printf("#   %s: vec_dot %.9g vs f32 %.9g (mag %g)\n", q->name, got, s, m);
            }
        }
        CHECK(bad == 0, "%s: %d mismatches", q->name, bad);
    }
}

/* ----------------------------------------------------------- (e) matmul */

static void matmul_vs_vec_dot(void)
{
    const enum qtype types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q2_K,
                                QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};
    const int64_t outs[] = {37, 300};
    const int toks[] = {1, 3, 17};
    static uint8_t W[300 * 512 * 4], A[17 * 512 * 4];
    static float X[17 * 512], Y[17 * 300];
    struct matmul_scratch s = {0};
    for (int nth = 1; nth <= 4; nth++) {
        struct tpool *tp = tpool_create(nth);
        CHECK(tp != NULL, "tpool_create(%d)", nth);
        if (!tp)
            return;
        for (size_t ti = 0; ti < 2 * sizeof types / sizeof types[0]; ti++) {
            enum qtype t = types[ti / 2];
            const struct qtype_info *q = qtype_get(t);
            /* 512, and for 32-element blocks also an odd block count (5 blocks) */
            const int64_t n_in = ti % 2 == 0 ? 512 : 160;
            if (ti % 2 == 1 && q->blck != 32 && q->blck != 1)
                continue;
            size_t wr = qtype_row_size(t, n_in), ar = qtype_row_size(q->vec_dot, n_in);
            for (int oi = 0; oi < 2; oi++) {
                int64_t n_out = outs[oi];
                rnd_row(t, W, n_in * n_out, 8, 16);
                for (int ki = 0; ki < 3; ki++) {
                    int n_tok = toks[ki];
                    for (int64_t i = 0; i < n_tok * n_in; i++)
                        X[i] = rndf();
                    for (int tt = 0; tt < n_tok; tt++)
                        quant_act_row(t, X + tt * n_in, A + tt * ar, n_in);
                    matmul(tp, &s, t, W, n_in, n_out, X, n_tok, Y);
                    int bad = 0;
                    for (int tt = 0; tt < n_tok; tt++)
                        for (int64_t r = 0; r < n_out; r++) {
                            float want = vec_dot(t, n_in, W + r * wr, A + tt * ar);
                            bad += memcmp(&want, &Y[tt * n_out + r], 4) != 0;
                        }
                    CHECK(bad == 0, "%s threads=%d n_in=%lld n_out=%lld n_tok=%d: %d differ", q->name, nth,
                          (long long)n_in, (long long)n_out, n_tok, bad);
                }
            }
        }
        tpool_destroy(tp);
    }
    matmul_scratch_free(&s);
}

/* Packed matmul, at one SIMD level (g_level; the cases run once per level, see run_levels): the
 * level's packed kernel where it has one, else the scalar reference packed kernel, so the packing,
 * matmul_packed_run's splitting and the arena are exercised on every CPU. The reference gives the
 * same bits as the scalar vec_dot of each row; a SIMD kernel the same up to float summation order.
 * Only a level the CPU lacks is skipped. */
static int g_level;
static const char *const g_level_name[3] = {"scalar", "avx2", "avx512"};
static char g_level_skip[96];

/* false (and the case marked skipped) when this CPU lacks level g_level */
static bool level_present(void)
{
    if (quant_kernels_level(g_level))
        return true;
    snprintf(g_level_skip, sizeof g_level_skip, "SIMD level %s not on this CPU", g_level_name[g_level]);
    check_g.skip_why = g_level_skip;
    return false;
}

static void matmul_packed_one(enum qtype wt, int64_t n_in)
{
    const int64_t outs[] = {16, 37, 300};
    const int toks[] = {1, 3, 17};
    static uint8_t W[300 * 768 * 2], A[17 * 1024];
    static float X[17 * 768], Y[17 * 300];
    struct matmul_scratch s = {0};
    size_t wr = qtype_row_size(wt, n_in), ar = qtype_row_size(qtype_get(wt)->vec_dot, n_in);
    if (!level_present())
        return;
    rnd_row(wt, W, n_in * 300, 8, 16);
    struct matmul_packed *probe = matmul_pack_level(wt, W, n_in, 300, NULL, g_level);
    CHECK(probe != NULL, "%s: no packed form at level %s", qtype_get(wt)->name, g_level_name[g_level]);
    if (!probe)
        return;
    const bool simd = matmul_packed_simd(probe);
    CHECK(simd == (quant_kernels_level(g_level)->packed[wt] != NULL), "kernel choice");
    printf("#   %s at level %s: %s packed kernel\n", qtype_get(wt)->name, g_level_name[g_level],
           simd ? "SIMD" : "scalar reference");
    CHECK(matmul_packed_bytes(probe) >= 300 * wr, "packed size %zu", matmul_packed_bytes(probe));
    matmul_packed_free(probe);
    /* the engine's entry packs exactly when the dispatcher's level has a fast packed kernel */
    struct matmul_packed *eng = matmul_pack(wt, W, n_in, 300, NULL);
    CHECK((eng != NULL) == (quant_kernels_get()->packed[wt] != NULL), "matmul_pack at level %s", quant_simd_name());
    CHECK(matmul_pack_size(wt, n_in, 300) == (eng ? (matmul_packed_bytes(eng) + 63) / 64 * 64 : 0),
          "arena size %zu", matmul_pack_size(wt, n_in, 300));
    matmul_packed_free(eng);
    CHECK(matmul_pack_level(QT_Q4_K, W, 100, 4, NULL, g_level) == NULL, "n_in not a multiple of 256 must be refused");
    CHECK(matmul_pack_level(QT_Q8_K, W, 256, 4, NULL, g_level) == NULL, "type without packed form must be refused");
    CHECK(matmul_pack(QT_Q8_K, W, 256, 4, NULL) == NULL, "type without packed form must be refused");
    CHECK(matmul_pack_size(QT_Q8_K, 256, 4) == 0, "no arena bytes for a type without packed form");
    for (int nth = 1; nth <= 4; nth++) {
        struct tpool *tp = tpool_create(nth);
        for (int oi = 0; oi < 3; oi++) {
            int64_t n_out = outs[oi];
            rnd_row(wt, W, n_in * n_out, 8, 16);
            /* odd thread counts pack into an arena of exactly the matrix's size
             * (huge pages where allowed), even ones onto the heap */
            struct matmul_arena ar_ = {0};
            size_t need = 0;
            if (nth % 2) {
                struct matmul_packed *q = matmul_pack_level(wt, W, n_in, n_out, NULL, g_level);
                need = (matmul_packed_bytes(q) + 63) / 64 * 64;
                matmul_packed_free(q);
                matmul_arena_reserve(&ar_, need);
            }
            struct matmul_packed *p = matmul_pack_level(wt, W, n_in, n_out, nth % 2 ? &ar_ : NULL, g_level);
            CHECK(p != NULL, "pack failed");
            if (!p)
                continue;
            if (nth % 2)
                CHECK(ar_.base && ar_.used == need, "arena holds %zu of %zu", ar_.used, need);
            for (int ki = 0; ki < 3; ki++) {
                int n_tok = toks[ki];
                for (int64_t i = 0; i < n_tok * n_in; i++)
                    X[i] = rndf();
                for (int tt = 0; tt < n_tok; tt++)
                    quant_act_row(wt, X + tt * n_in, A + tt * ar, n_in);
                for (int64_t i = 0; i < n_tok * n_out; i++)
                    Y[i] = NAN;
                matmul_packed_run(tp, &s, p, X, n_tok, Y);
                int bad = 0;
                for (int tt = 0; tt < n_tok; tt++)
                    for (int64_t r = 0; r < n_out; r++) {
                        double mag;
                        dd_dot(wt, n_in, W + r * wr, A + tt * ar, &mag);
                        float want = vec_dot_ref(wt, n_in, W + r * wr, A + tt * ar);
                        float got = Y[tt * n_out + r];
                        bool ok = simd ? fabs((double)got - want) <= 1e-5 * mag + 1e-30
                                       : !memcmp(&got, &want, sizeof got); /* reference: same bits */
                        if (!ok && bad++ < 3)
                            printf("#   threads=%d n_out=%lld n_tok=%d t=%d r=%lld: %.9g vs %.9g\n", nth,
                                   (long long)n_out, n_tok, tt, (long long)r, got, want);
                    }
                CHECK(bad == 0, "threads=%d n_out=%lld n_tok=%d: %d differ", nth, (long long)n_out, n_tok, bad);
            }
            matmul_packed_free(p);
            matmul_arena_release(&ar_);
        }
        tpool_destroy(tp);
    }
    matmul_scratch_free(&s);
}

static void matmul_packed_q4_k(void) { matmul_packed_one(QT_Q4_K, 768); }

/* One-token group dispatch (decode's Q/K/V, gate/up): the same bits as matmul_packed_run per
 * matrix, with shared and separate inputs, row counts that are not multiples of 16, mixed types. */
static void matmul_packed_group(void)
{
    if (!level_present())
        return;
    static uint8_t W[3][300 * 768 * 2];
    static float X[2][768], Yg[3][300], Y1[3][300];
    const enum qtype types[3] = {QT_Q8_0, QT_Q8_0, QT_Q6_K};
    const int64_t outs[3] = {300, 37, 64};
    struct matmul_packed *p[3];
    for (int k = 0; k < 3; k++) {
        rnd_row(types[k], W[k], 768 * outs[k], 8, 16);
        p[k] = matmul_pack_level(types[k], W[k], 768, outs[k], NULL, g_level);
        CHECK(p[k] != NULL, "no packed form");
        if (!p[k])
            return;
    }
    for (int i = 0; i < 768; i++) {
        X[0][i] = rndf();
        X[1][i] = rndf();
    }
    struct matmul_scratch s = {0};
    for (int nth = 1; nth <= 3; nth++) {
        struct tpool *tp = tpool_create(nth);
        const float *xs[3] = {X[0], X[0], X[1]};
        float *ys[3] = {Yg[0], Yg[1], Yg[2]};
        for (int n = 1; n <= 3; n++) {
            matmul_packed_run_group(tp, &s, (const struct matmul_packed *const *)p, xs, ys, n);
            for (int k = 0; k < n; k++) {
                matmul_packed_run(tp, &s, p[k], xs[k], 1, Y1[k]);
                CHECK(!memcmp(Yg[k], Y1[k], (size_t)outs[k] * sizeof(float)), "threads=%d n=%d item %d differs", nth,
                      n, k);
            }
        }
        tpool_destroy(tp);
    }
    CHECK(matmul_packed_one_token(p[0]) && !matmul_packed_one_token(p[2]) && !matmul_packed_one_token(NULL),
          "one-token preference: Q8_0 packed, Q6_K file layout");
    for (int k = 0; k < 3; k++)
        matmul_packed_free(p[k]);
    matmul_scratch_free(&s);
}

/* matmul_weight picks the packed path when it exists and the plain one otherwise. */
static void matmul_weight_paths(void)
{
    static uint8_t W[40 * 512 * 2];
    static float X[3 * 512], Y1[3 * 40], Y2[3 * 40];
    struct matmul_scratch s = {0};
    const enum qtype types[] = {QT_Q4_K, QT_Q8_0, QT_IQ4_XS, QT_F16};
    for (int ti = 0; ti < 4; ti++) {
        enum qtype t = types[ti];
        rnd_row(t, W, 512 * 40, 8, 16);
        for (int i = 0; i < 3 * 512; i++)
            X[i] = rndf();
        struct matmul_weight a, b;
        matmul_weight_init(&a, t, W, 512, 40, true);
        matmul_weight_init(&b, t, W, 512, 40, false);
        CHECK(b.packed == NULL, "pack=false must keep the plain path");
        CHECK(a.packed == NULL || t == QT_Q4_K || t == QT_Q8_0, "%s: unexpected packed form", qtype_get(t)->name);
        matmul_weight_run(NULL, &s, &a, X, 3, Y1);
        matmul_weight_run(NULL, &s, &b, X, 3, Y2);
        int bad = 0;
        for (int i = 0; i < 3 * 40; i++)
            bad += !(fabsf(Y1[i] - Y2[i]) <= 1e-4f * (1.0f + fabsf(Y2[i])));
        CHECK(bad == 0, "%s: %d outputs differ between paths", qtype_get(t)->name, bad);
        matmul_weight_free(&a);
        matmul_weight_free(&b);
        CHECK(a.packed == NULL, "free clears packed");
    }
    matmul_scratch_free(&s);
}
static void matmul_packed_q5_k(void) { matmul_packed_one(QT_Q5_K, 768); }
static void matmul_packed_q6_k(void) { matmul_packed_one(QT_Q6_K, 512); }
static void matmul_packed_q8_0(void)
{
    matmul_packed_one(QT_Q8_0, 768);
    matmul_packed_one(QT_Q8_0, 96);
}

/* matmul (and the packed path where it exists) against llama.cpp's CPU
 * mul_mat of the same matrices (tests/golden/matmul_llamacpp.txt, written by
 * tests/golden/gen_matmul_golden.c): equal up to float summation order. */
static void matmul_vs_llamacpp(void)
{
    FILE *f = fopen("tests/golden/matmul_llamacpp.txt", "r");
    if (!f)
        SKIP("tests/golden/matmul_llamacpp.txt not found (run from the repository root)");
    static uint8_t w[QG_N_OUT * QG_N_IN * 4];
    static float x[QG_N_TOK * QG_N_IN], y[QG_N_TOK * QG_N_OUT], fw[QG_N_OUT * QG_N_IN];
    qg_acts(x);
    struct matmul_scratch s = {0};
    char name[32];
    int lines = 0;
    while (fscanf(f, "%31s", name) == 1) {
        int k = -1;
        for (int i = 0; i < QG_NTYPES; i++)
            if (!strcmp(qg_types[i].name, name))
                k = i;
        CHECK(k >= 0, "unknown type '%s' in golden", name);
        if (k < 0)
            break;
        float want[QG_N_TOK * QG_N_OUT];
        for (int i = 0; i < QG_N_TOK * QG_N_OUT; i++)
            if (fscanf(f, "%a", &want[i]) != 1)
                want[i] = NAN;
        lines++;
        enum qtype t = (enum qtype)qg_types[k].id;
        qg_weights(k, w);
        dequant_row(t, w, fw, (int64_t)QG_N_OUT * QG_N_IN);
        for (int pass = 0; pass < 2; pass++) {
            struct matmul_packed *p = NULL;
            if (pass == 1 && !(p = matmul_pack(t, w, QG_N_IN, QG_N_OUT, NULL)))
                continue;
            if (p)
                matmul_packed_run(NULL, &s, p, x, QG_N_TOK, y);
            else
                matmul(NULL, &s, t, w, QG_N_IN, QG_N_OUT, x, QG_N_TOK, y);
            matmul_packed_free(p);
            int bad = 0;
            for (int tt = 0; tt < QG_N_TOK; tt++)
                for (int r = 0; r < QG_N_OUT; r++) {
                    double mag = 0;
                    for (int i = 0; i < QG_N_IN; i++)
                        mag += fabs((double)fw[r * QG_N_IN + i] * x[tt * QG_N_IN + i]);
                    float got = y[tt * QG_N_OUT + r], exp = want[tt * QG_N_OUT + r];
                    if (!(fabs((double)got - exp) <= 2e-5 * mag) && bad++ < 2)
                        printf("#   %s%s t=%d r=%d: %.9g vs llama.cpp %.9g (mag %g)\n", name, p ? " packed" : "", tt, r,
                               got, exp, mag);
                }
            CHECK(bad == 0, "%s%s: %d outputs differ from llama.cpp", name, pass ? " packed" : "", bad);
        }
    }
    fclose(f);
    CHECK_EQ_INT(lines, QG_NTYPES);
    matmul_scratch_free(&s);
}

/* ------------------------------------------------ (f) quantizer round trip */

static void quantize_round_trip(void)
{
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    for (int ti = 0; ti < N_COMPUTE; ti++) {
        enum qtype t = g_compute[ti];
        const struct qtype_info *q = qtype_get(t);
        /* gaussian-ish weights (sum of uniforms) */
        for (int i = 0; i < N; i++)
            x[i] = (rndf() + rndf() + rndf()) * 0.05f;
        CHECK(quant_weights_row(t, x, buf, N), "%s: no quantizer", q->name);
        dequant_row(t, buf, y, N);
        double e2 = 0, x2 = 0;
        for (int i = 0; i < N; i++) {
            e2 += (double)(y[i] - x[i]) * (y[i] - x[i]);
            x2 += (double)x[i] * x[i];
        }
        double rel = sqrt(e2 / x2);
        /* a rough bound per bits/weight: ~2^-(bits-1.5), generous */
        double lim = t == QT_F32 ? 0 : t == QT_F16 ? 1e-3 : t == QT_BF16 ? 5e-3
                   : t == QT_Q8_0 ? 0.01 : t == QT_Q2_K ? 0.45 : t == QT_Q3_K ? 0.25
                   : (t == QT_Q5_0 || t == QT_Q5_1 || t == QT_Q5_K || t == QT_Q6_K) ? 0.06 : 0.13;
        CHECK(rel <= lim, "%s: relative RMS error %.4f > %.4f", q->name, rel, lim);
    }
    CHECK(!quant_weights_row(QT_IQ2_XXS, x, buf, 256), "iq2_xxs should have no quantizer");
}

/* A packed-matmul case once per SIMD level: "name[level]". */
static void run_levels(const char *name, void (*fn)(void))
{
    for (g_level = 0; g_level < 3; g_level++) {
        char full[96];
        snprintf(full, sizeof full, "%s[%s]", name, g_level_name[g_level]);
        check_run(full, fn);
    }
}
#define RUN_LEVELS(fn) run_levels(#fn, fn)

int main(void)
{
    printf("# simd: %s\n", quant_simd_name());
    RUN(spec_examples_dequant);
    RUN(dequant_random_blocks);
    RUN(act_q8_0_and_q8_1);
    RUN(act_q8_k);
    RUN(act_f16_bf16);
    RUN(act_simd_equal);
    RUN(dot_simd_vs_ref);
    RUN(dot_vs_dequant);
    RUN(matmul_vs_vec_dot);
    RUN_LEVELS(matmul_packed_q4_k);
    RUN(matmul_weight_paths);
    RUN_LEVELS(matmul_packed_q5_k);
    RUN_LEVELS(matmul_packed_q6_k);
    RUN_LEVELS(matmul_packed_group);
    RUN_LEVELS(matmul_packed_q8_0);
    RUN(matmul_vs_llamacpp);
    RUN(quantize_round_trip);
    CHECK_EXIT();
}
