/* quant_avx512.c — AVX-512 kernels. Compiled with AVX-512 F/BW/VL/DQ; the
 * VNNI instructions (vpdpbusd/vpdpwssd) are enabled by a target pragma and
 * installed only when the CPU reports avx512vnni. Only reached through
 * quant.c after the CPU was checked.
 *
 * With VNNI: the shared 256-bit kernels of quant_x86.h in their VNNI form;
 * 512-bit kernels for Q4_K, Q5_K, Q6_K and the Q8_0-activation family (Q8_0,
 * Q4_0, Q5_0, IQ4_NL, MXFP4, incl. matmul's prepared-activation entry); and
 * the row-interleaved kernels behind matmul_pack (Q4_K, Q6_K, Q8_0). Without
 * VNNI the AVX2 table already in place is kept. */
#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#endif

#define QX(name) name##_vnni256
#define QX_VNNI
#include "quant_x86.h"

/* pshufb patterns: 128-bit lanes 0,1 ← int16 lane 2c; lanes 2,3 ← int16 lane 2c+1 */
static const uint8_t z_k4_pat[4][64] __attribute__((aligned(64))) = {
#define Z2(b) b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1
#define ZP(c) {Z2(4 * c), Z2(4 * c), Z2(4 * c + 2), Z2(4 * c + 2)}
    ZP(0), ZP(1), ZP(2), ZP(3)
#undef ZP
#undef Z2
};

QX_INLINE float z_hsum(__m512 v)
{
    return qx_hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

QX_INLINE __m512i z_load(const void *p) { return _mm512_loadu_si512(p); }

/* Q4_K / Q5_K tail: wv[c] = 64 unsigned codes of sub-blocks 2c, 2c+1 (element order). */
QX_INLINE void z_k4_tokens(const __m512i wv[4], const uint8_t *S, float dw, float dmw, const void *a, size_t as,
                           int64_t i, const int NT, __m512 *acc, __m256 *accm)
{
    __m128i sc16, mn16;
    qx_k4_scales(S, &sc16, &mn16);
    const __m512i scb = _mm512_broadcast_i32x4(sc16);
    __m512i scv[4];
    QX_UNROLL
    for (int c = 0; c < 4; c++)
        scv[c] = _mm512_shuffle_epi8(scb, _mm512_load_si512(z_k4_pat[c]));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn16, mn16), _mm_unpacklo_epi16(mn16, mn16));
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        const struct blk_q8_k *y = QX_ACT_K(t, i);
        __m512i is = _mm512_setzero_si512();
        QX_UNROLL
        for (int c = 0; c < 4; c++)
            is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv[c], z_load(y->qs + 64 * c)), scv[c]);
        __m256i ms = _mm256_madd_epi16(qx_load(y->bsums), mins);
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y->d * dw), _mm512_cvtepi32_ps(is), acc[t]);
        accm[t] = _mm256_fnmadd_ps(_mm256_set1_ps(y->d * dmw), _mm256_cvtepi32_ps(ms), accm[t]);
    }
}

QX_INLINE void z_q4_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q4_k *x = w;
    __m512 acc[QX_MAXT];
    __m256 accm[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm256_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i wv[4];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            wv[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
        }
        z_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc, accm);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]) + qx_hsum(accm[t]);
}

QX_INLINE void z_q5_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q5_k *x = w;
    __m512 acc[QX_MAXT];
    __m256 accm[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm256_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512i hz = _mm512_broadcast_i64x4(qx_load(x[i].qh));
        __m512i wv[4];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            /* 5th bit: bit 2c of qh[l] for the low half, bit 2c+1 for the high half, moved to bit 4 */
            const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
            __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(hz, sh), 4), b4);
            wv[c] = _mm512_or_si512(
                _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4), h);
        }
        z_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc, accm);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]) + qx_hsum(accm[t]);
}

QX_INLINE void z_q6_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q6_k *x = w;
    __m512 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* wv[p]: elements 64p..64p+63; p = 2h: low nibbles of ql[64h..], p = 2h+1: high nibbles */
        __m512i wv[4], scv[4];
        QX_UNROLL
        for (int h = 0; h < 2; h++) {
            __m512i L = z_load(x[i].ql + 64 * h);
            __m512i H = _mm512_broadcast_i64x4(qx_load(x[i].qh + 32 * h));
            wv[2 * h] = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(_mm512_sllv_epi16(H, shl), m30));
            wv[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                            _mm512_and_si512(_mm512_srlv_epi16(H, shr), m30));
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i scz = _mm512_castsi256_si512(sc16);
        QX_UNROLL
        for (int p = 0; p < 4; p++) {
            /* 128-bit lane L of pair p uses scale S[4p + L] */
            const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * p)),
                                                 _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3));
            scv[p] = _mm512_permutexvar_epi16(idx, scz);
        }
        float dw = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m512i is = _mm512_setzero_si512();
            QX_UNROLL
            for (int p = 0; p < 4; p++)
                is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv[p], z_load(y->qs + 64 * p)), scv[p]);
            __m256i off = _mm256_madd_epi16(qx_load(y->bsums), sc16);
            /* fold the −32·Σ S·bsums offset into the low half (8 lanes) */
            is = _mm512_sub_epi32(is, _mm512_castsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y->d * dw), _mm512_cvtepi32_ps(is), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = z_hsum(acc[t]);
}

/* Signed weight blocks × Q8_0 activations, two blocks per 512-bit step (an
 * odd last block uses 256 bits). The activations enter vpdpbusd as unsigned
 * a + 128; the excess 128·Σw is cancelled by starting the accumulator at
 * −128·Σw, computed once per weight pair. The same body serves the ordinary
 * Q8_0 rows (dot, multi) and matmul's prepared layout (prep), with identical
 * float operations, so both give the same bits.
 * UNPACK(i, w, d): 32 signed weights of block i (__m256i) and its f32 scale.
 * LOADA2/LOADD2(t, i): token t's a+128 bytes / scales of blocks i, i+1;
 * LOADA1/LOADD1: the same for one block. */
#define ZQ8_BODY(UNPACK, LOADA2, LOADD2, LOADA1, LOADD1)                                          \
    __m512 acc[QX_MAXT];                                                                          \
    __m256 acc2[QX_MAXT];                                                                         \
    QX_UNROLL                                                                                     \
    for (int t = 0; t < NT; t++) {                                                                \
        acc[t] = _mm512_setzero_ps();                                                             \
        acc2[t] = _mm256_setzero_ps();                                                            \
    }                                                                                             \
    const int64_t nb = n / QK;                                                                    \
    int64_t i = 0;                                                                                \
    for (; i + 2 <= nb; i += 2) {                                                                 \
        __m256i w0, w1;                                                                           \
        float d0, d1;                                                                             \
        UNPACK(i, w0, d0);                                                                        \
        UNPACK(i + 1, w1, d1);                                                                    \
        const __m512i wz = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);                 \
        const __m512i negc = _mm512_sub_epi32(_mm512_setzero_si512(),                             \
                                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), wz)); \
        const __m512 dw = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);          \
        QX_UNROLL                                                                                 \
        for (int t = 0; t < NT; t++) {                                                            \
            __m512i p = _mm512_dpbusd_epi32(negc, LOADA2(t, i), wz);                              \
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, LOADD2(t, i)), _mm512_cvtepi32_ps(p), acc[t]); \
        }                                                                                         \
    }                                                                                             \
    if (i < nb) {                                                                                 \
        __m256i w0;                                                                               \
        float d0;                                                                                 \
        UNPACK(i, w0, d0);                                                                        \
        const __m256i negc = _mm256_sub_epi32(_mm256_setzero_si256(),                             \
                                              _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), w0)); \
        QX_UNROLL                                                                                 \
        for (int t = 0; t < NT; t++) {                                                            \
            __m256i p = _mm256_dpbusd_epi32(negc, LOADA1(t, i), w0);                              \
            acc2[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d0), LOADD1(t, i)), _mm256_cvtepi32_ps(p), acc2[t]); \
        }                                                                                         \
    }                                                                                             \
    QX_UNROLL                                                                                     \
    for (int t = 0; t < NT; t++)                                                                  \
        out[t] = z_hsum(acc[t]) + qx_hsum(acc2[t]);

/* ordinary Q8_0 rows: a at a + t*as */
#define ZA2(t, i)                                                                                        \
    _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qx_load(QX_ACT_0(t, i)->qs)),           \
                                        qx_load(QX_ACT_0(t, (i) + 1)->qs), 1), _mm512_set1_epi8((char)0x80))
#define ZD2(t, i) _mm512_insertf32x8(_mm512_set1_ps(QX_H2F(QX_ACT_0(t, i)->d)), _mm256_set1_ps(QX_H2F(QX_ACT_0(t, (i) + 1)->d)), 1)
#define ZA1(t, i) _mm256_xor_si256(qx_load(QX_ACT_0(t, i)->qs), _mm256_set1_epi8((char)0x80))
#define ZD1(t, i) _mm256_set1_ps(QX_H2F(QX_ACT_0(t, i)->d))
/* prepared rows */
#define PA2(t, i) _mm512_loadu_si512(aq + (size_t)(t) * aqs + (size_t)(i) * QK)
#define PD2(t, i) _mm512_insertf32x8(_mm512_set1_ps(ad[(size_t)(t) * ads + (size_t)(i)]), _mm256_set1_ps(ad[(size_t)(t) * ads + (size_t)(i) + 1]), 1)
#define PA1(t, i) qx_load(aq + (size_t)(t) * aqs + (size_t)(i) * QK)
#define PD1(t, i) _mm256_set1_ps(ad[(size_t)(t) * ads + (size_t)(i)])

/* Defines z_<name> (ordinary rows) and zp_<name> (prepared rows) from an UNPACK. */
#define ZQ8_KERNELS(name, T, SETUP, UNPACK)                                                                \
    QX_INLINE void z_##name(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out) \
    {                                                                                                      \
        const T *x = w;                                                                                    \
        SETUP                                                                                              \
        ZQ8_BODY(UNPACK, ZA2, ZD2, ZA1, ZD1)                                                               \
    }                                                                                                      \
    QX_INLINE void zp_##name(int64_t n, const void *w, const uint8_t *aq, size_t aqs, const float *ad,    \
                             size_t ads, const int NT, float *out)                                         \
    {                                                                                                      \
        const T *x = w;                                                                                    \
        SETUP                                                                                              \
        ZQ8_BODY(UNPACK, PA2, PD2, PA1, PD1)                                                               \
    }

#define U_Q8_0(i, wv, dw) (wv = qx_load(x[i].qs), dw = QX_H2F(x[i].d))
#define U_Q4_0(i, wv, dw) (wv = _mm256_sub_epi8(qx_nibbles16(x[i].qs), _mm256_set1_epi8(8)), dw = QX_H2F(x[i].d))
#define U_Q5_0(i, wv, dw)                                                                                  \
    (wv = _mm256_sub_epi8(_mm256_or_si256(qx_nibbles16(x[i].qs),                                           \
                                          _mm256_and_si256(qx_bits32(rd_u32le(x[i].qh)), _mm256_set1_epi8(0x10))), \
                          _mm256_set1_epi8(16)),                                                           \
     dw = QX_H2F(x[i].d))
#define U_TBL(i, wv, dw) (wv = _mm256_shuffle_epi8(tbl, qx_nibbles16(x[i].qs)), dw = QX_H2F(x[i].d))
#define U_MX(i, wv, dw) (wv = _mm256_shuffle_epi8(tbl, qx_nibbles16(x[i].qs)), dw = e8m0_half(x[i].e))
#define S_NONE
#define S_IQ4 const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
#define S_MX const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_mxfp4));

ZQ8_KERNELS(q8_0, struct blk_q8_0, S_NONE, U_Q8_0)
ZQ8_KERNELS(q4_0, struct blk_q4_0, S_NONE, U_Q4_0)
ZQ8_KERNELS(q5_0, struct blk_q5_0, S_NONE, U_Q5_0)
ZQ8_KERNELS(iq4_nl, struct blk_iq4_nl, S_IQ4, U_TBL)
ZQ8_KERNELS(mxfp4, struct blk_mxfp4, S_MX, U_MX)

/* One token, 256-bit: the same float operations lane for lane as ZQ8_BODY
 * with NT = 1 (even/odd blocks in two accumulators standing for the two
 * halves of the 512-bit one, integer sums by the abs/sign trick), so the
 * result has the same bits, at the cost of a plain ymm loop. */
#define ZQ8_SINGLE(name, T, SETUP, UNPACK)                                                                 \
    static float zs_##name(int64_t n, const void *w, const void *a)                                        \
    {                                                                                                      \
        const T *x = w;                                                                                    \
        const struct blk_q8_0 *y = a;                                                                      \
        SETUP                                                                                              \
        __m256 ae = _mm256_setzero_ps(), ao = ae, a2 = ae;                                                 \
        const int64_t nb = n / QK;                                                                         \
        int64_t i = 0;                                                                                     \
        for (; i + 2 <= nb; i += 2) {                                                                      \
            __m256i w0, w1;                                                                                \
            float d0, d1;                                                                                  \
            UNPACK(i, w0, d0);                                                                             \
            UNPACK(i + 1, w1, d1);                                                                         \
            __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(qx_load(y[i].qs), w0)); \
            __m256i p1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w1), _mm256_sign_epi8(qx_load(y[i + 1].qs), w1)); \
            ae = _mm256_fmadd_ps(_mm256_set1_ps(d0 * QX_H2F(y[i].d)), _mm256_cvtepi32_ps(p0), ae);         \
            ao = _mm256_fmadd_ps(_mm256_set1_ps(d1 * QX_H2F(y[i + 1].d)), _mm256_cvtepi32_ps(p1), ao);     \
        }                                                                                                  \
        if (i < nb) {                                                                                      \
            __m256i w0;                                                                                    \
            float d0;                                                                                      \
            UNPACK(i, w0, d0);                                                                             \
            __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(qx_load(y[i].qs), w0)); \
            a2 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * QX_H2F(y[i].d)), _mm256_cvtepi32_ps(p0), a2);         \
        }                                                                                                  \
        return qx_hsum(_mm256_add_ps(ae, ao)) + qx_hsum(a2);                                              \
    }
ZQ8_SINGLE(q8_0, struct blk_q8_0, S_NONE, U_Q8_0)
ZQ8_SINGLE(q4_0, struct blk_q4_0, S_NONE, U_Q4_0)
ZQ8_SINGLE(q5_0, struct blk_q5_0, S_NONE, U_Q5_0)
ZQ8_SINGLE(iq4_nl, struct blk_iq4_nl, S_IQ4, U_TBL)
ZQ8_SINGLE(mxfp4, struct blk_mxfp4, S_MX, U_MX)

/* prepared-layout entry: any number of tokens, in groups of QX_MAXT */
#define ZP_ENTRY(name)                                                                                     \
    static void zp_##name##_prep(int64_t n, const void *w, const uint8_t *aq, size_t aqs, const float *ad, \
                                 size_t ads, int nt, float *out)                                           \
    {                                                                                                      \
        while (nt > 0) {                                                                                   \
            int k = nt < QX_MAXT ? nt : QX_MAXT;                                                           \
            switch (k) {                                                                                   \
            case 1: zp_##name(n, w, aq, aqs, ad, ads, 1, out); break;                                      \
            case 2: zp_##name(n, w, aq, aqs, ad, ads, 2, out); break;                                      \
            case 3: zp_##name(n, w, aq, aqs, ad, ads, 3, out); break;                                      \
            case 4: zp_##name(n, w, aq, aqs, ad, ads, 4, out); break;                                      \
            case 5: zp_##name(n, w, aq, aqs, ad, ads, 5, out); break;                                      \
            case 6: zp_##name(n, w, aq, aqs, ad, ads, 6, out); break;                                      \
            case 7: zp_##name(n, w, aq, aqs, ad, ads, 7, out); break;                                      \
            default: zp_##name(n, w, aq, aqs, ad, ads, 8, out); break;                                     \
            }                                                                                              \
            nt -= k;                                                                                       \
            out += k;                                                                                      \
            aq += (size_t)k * aqs;                                                                         \
            ad += (size_t)k * ads;                                                                         \
        }                                                                                                  \
    }
ZP_ENTRY(q8_0)
ZP_ENTRY(q4_0)
ZP_ENTRY(q5_0)
ZP_ENTRY(iq4_nl)
ZP_ENTRY(mxfp4)

/* QX_ENTRIES(name) calls qx_<name>; these aliases let it wrap the z_ kernels */
#define qx_z_q4_k z_q4_k
#define qx_z_q5_k z_q5_k
#define qx_z_q6_k z_q6_k
#define qx_z_q8_0 z_q8_0
#define qx_z_q4_0 z_q4_0
#define qx_z_q5_0 z_q5_0
#define qx_z_iq4_nl z_iq4_nl
#define qx_z_mxfp4 z_mxfp4
QX_ENTRIES(z_q4_k)
QX_ENTRIES(z_q5_k)
QX_ENTRIES(z_q6_k)
QX_ENTRIES(z_q8_0)
QX_ENTRIES(z_q4_0)
QX_ENTRIES(z_q5_0)
QX_ENTRIES(z_iq4_nl)
QX_ENTRIES(z_mxfp4)

/* Packed Q4_K / Q5_K (layouts in quant_internal.h): 16 rows per 512-bit register.
 * Per 8 elements of a row group: one load, the nibble split, and per token two
 * vpdpbusd with a broadcast activation word; the sub-block scales are applied
 * to the int32 sums (vpmulld) once per 32 elements. */
QX_INLINE void pk_k4(int64_t n, const uint8_t *g, const void *a, size_t as, const int NT, float *out, const int Q5)
{
    const size_t sb = Q5 ? PQ5K_SB : PQ4K_SB;
    const __m512i one = _mm512_set1_epi8(1);
    __m512 acc[PQ_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / QK_K; i++, g += sb) {
        __m512i isum[PQ_MAXT];
        QX_UNROLL
        for (int t = 0; t < NT; t++)
            isum[t] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m512i slo[PQ_MAXT], shi[PQ_MAXT];
            QX_UNROLL
            for (int t = 0; t < NT; t++)
                slo[t] = shi[t] = _mm512_setzero_si512();
            QX_UNROLL
            for (int k = 0; k < 8; k++) {
                const __m512i W = _mm512_loadu_si512(g + (c * 8 + k) * 64);
                __m512i lo = _mm512_and_si512(W, m4), hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
                if (Q5) { /* 5th bits: bit 2c (low nibbles) and 2c+1 (high nibbles) of qh[4k + b] */
                    const __m512i QH = _mm512_loadu_si512(g + PQ5K_OFF_QH + k * 64);
                    lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(QH, 2 * c), one), 4));
                    hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(QH, 2 * c + 1), one), 4));
                }
                QX_UNROLL
                for (int t = 0; t < NT; t++) {
                    const int8_t *q = QX_ACT_K(t, i)->qs + 64 * c + 4 * k;
                    int32_t w0, w1;
                    memcpy(&w0, q, 4);
                    memcpy(&w1, q + 32, 4);
                    slo[t] = _mm512_dpbusd_epi32(slo[t], lo, _mm512_set1_epi32(w0));
                    shi[t] = _mm512_dpbusd_epi32(shi[t], hi, _mm512_set1_epi32(w1));
                }
            }
            const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + PQ4K_OFF_SC + 32 * c)));
            const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + PQ4K_OFF_SC + 32 * c + 16)));
            QX_UNROLL
            for (int t = 0; t < NT; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(slo[t], sc_lo),
                                                                     _mm512_mullo_epi32(shi[t], sc_hi)));
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + PQ4K_OFF_D)));
        const __m512 dmv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + PQ4K_OFF_DMIN)));
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            /* B_j = bsums[2j] + bsums[2j+1] as int16 pairs (B_2p, B_2p+1) for the mins */
            const __m256i bj = _mm256_madd_epi16(qx_load(y->bsums), _mm256_set1_epi16(1));
            int32_t bw[4];
            _mm_storeu_si128((__m128i *)bw, _mm_packs_epi32(_mm256_castsi256_si128(bj), _mm256_extracti128_si256(bj, 1)));
            __m512i ms = _mm512_setzero_si512();
            QX_UNROLL
            for (int p = 0; p < 4; p++)
                ms = _mm512_dpwssd_epi32(ms, _mm512_loadu_si512(g + PQ4K_OFF_MN + 64 * p), _mm512_set1_epi32(bw[p]));
            const __m512 da = _mm512_set1_ps(y->d);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, da), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmv, da), _mm512_cvtepi32_ps(ms), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(out + 16 * t, acc[t]);
}

static void pk_q4_k_entry(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,
                          int nt, float *out)
{
    (void)aux;
    (void)auxs;
    while (nt > 0) {
        int k = nt < PQ_MAXT ? nt : PQ_MAXT;
        switch (k) {
        case 1: pk_k4(n, g, a, as, 1, out, 0); break;
        case 2: pk_k4(n, g, a, as, 2, out, 0); break;
        case 3: pk_k4(n, g, a, as, 3, out, 0); break;
        default: pk_k4(n, g, a, as, 4, out, 0); break;
        }
        nt -= k;
        out += 16 * k;
        a = (const uint8_t *)a + (size_t)k * as;
    }
}

static void pk_q5_k_entry(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,
                          int nt, float *out)
{
    (void)aux;
    (void)auxs;
    while (nt > 0) {
        int k = nt < PQ_MAXT ? nt : PQ_MAXT;
        switch (k) {
        case 1: pk_k4(n, g, a, as, 1, out, 1); break;
        case 2: pk_k4(n, g, a, as, 2, out, 1); break;
        case 3: pk_k4(n, g, a, as, 3, out, 1); break;
        default: pk_k4(n, g, a, as, 4, out, 1); break;
        }
        nt -= k;
        out += 16 * k;
        a = (const uint8_t *)a + (size_t)k * as;
    }
}

/* Packed Q8_0 (layout in quant_internal.h): unsigned w+128 × signed a with
 * the accumulator started at −128·Σa of the block (aux), then one float step
 * per block: acc += (d_w·d_a) · isum, block after block. */
#ifndef PQ8_PF
#define PQ8_PF 4096
#endif
QX_INLINE void pk_q8_0(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,
                       const int NT, float *out)
{
    const int64_t nb = n / QK;
    __m512 acc[PQ_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, g += PQ8_SB) {
        /* two accumulators per token: eight dependent dot-product steps per
         * block were a 40-cycle chain that kept the core from running ahead
         * and putting more loads in flight; integer sums stay exact */
        __m512i is[PQ_MAXT], is2[PQ_MAXT];
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const int32_t *corr = (const int32_t *)((const uint8_t *)aux + (size_t)t * auxs) + nb;
            is[t] = _mm512_set1_epi32(corr[i]);
            is2[t] = _mm512_setzero_si512();
        }
        QX_UNROLL
        for (int k = 0; k < 9; k++) /* one core's DRAM speed is latency-bound: ask ~4 KiB ahead */
            _mm_prefetch((const char *)g + PQ8_PF + 64 * k, _MM_HINT_T0);
        QX_UNROLL
        for (int k = 0; k < 8; k++) {
            const __m512i W = _mm512_loadu_si512(g + 64 * k);
            QX_UNROLL
            for (int t = 0; t < NT; t++) {
                int32_t w4;
                memcpy(&w4, QX_ACT_0(t, i)->qs + 4 * k, 4);
                if (k & 1)
                    is2[t] = _mm512_dpbusd_epi32(is2[t], W, _mm512_set1_epi32(w4));
                else
                    is[t] = _mm512_dpbusd_epi32(is[t], W, _mm512_set1_epi32(w4));
            }
        }
        QX_UNROLL
        for (int t = 0; t < NT; t++)
            is[t] = _mm512_add_epi32(is[t], is2[t]);
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + PQ8_OFF_D)));
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const float *ad = (const float *)((const uint8_t *)aux + (size_t)t * auxs);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(ad[i])), _mm512_cvtepi32_ps(is[t]), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(out + 16 * t, acc[t]);
}

static void pk_q8_0_entry(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,
                          int nt, float *out)
{
    while (nt > 0) {
        int k = nt < PQ_MAXT ? nt : PQ_MAXT;
        switch (k) {
        case 1: pk_q8_0(n, g, a, as, aux, auxs, 1, out); break;
        case 2: pk_q8_0(n, g, a, as, aux, auxs, 2, out); break;
        case 3: pk_q8_0(n, g, a, as, aux, auxs, 3, out); break;
        default: pk_q8_0(n, g, a, as, aux, auxs, 4, out); break;
        }
        nt -= k;
        out += 16 * k;
        a = (const uint8_t *)a + (size_t)k * as;
        aux = (const uint8_t *)aux + (size_t)k * auxs;
    }
}

/* Packed Q6_K: the 6-bit codes (0..63) rebuilt from the interleaved ql/qh,
 * dotted unsigned; the −32 offset is folded in per 16-element group as
 * (Σq·a − 32·bsum) before the group scale multiplies. */
QX_INLINE void pk_q6_k(int64_t n, const uint8_t *g, const void *a, size_t as, const int NT, float *out)
{
    __m512 acc[PQ_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t i = 0; i < n / QK_K; i++, g += PQ6K_SB) {
        __m512i isum[PQ_MAXT];
        QX_UNROLL
        for (int t = 0; t < NT; t++)
            isum[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            for (int kh = 0; kh < 2; kh++) {
                __m512i S[PQ_MAXT][4];
                QX_UNROLL
                for (int t = 0; t < NT; t++)
                    S[t][0] = S[t][1] = S[t][2] = S[t][3] = _mm512_setzero_si512();
                QX_UNROLL
                for (int kk = 0; kk < 4; kk++) {
                    const int k = 4 * kh + kk;
                    const __m512i L0 = _mm512_loadu_si512(g + ((h * 2 + 0) * 8 + k) * 64);
                    const __m512i L1 = _mm512_loadu_si512(g + ((h * 2 + 1) * 8 + k) * 64);
                    const __m512i H = _mm512_loadu_si512(g + PQ6K_OFF_QH + (h * 8 + k) * 64);
                    __m512i v[4];
                    v[0] = _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
                    v[1] = _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
                    v[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_and_si512(H, m30));
                    v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4),
                                           _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
                    QX_UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int8_t *q = QX_ACT_K(t, i)->qs + 128 * h + 4 * k;
                        QX_UNROLL
                        for (int gr = 0; gr < 4; gr++) {
                            int32_t w4;
                            memcpy(&w4, q + 32 * gr, 4);
                            S[t][gr] = _mm512_dpbusd_epi32(S[t][gr], v[gr], _mm512_set1_epi32(w4));
                        }
                    }
                }
                QX_UNROLL
                for (int gr = 0; gr < 4; gr++) {
                    const int gi = 8 * h + 2 * gr + kh;
                    const __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(g + PQ6K_OFF_SC + 16 * gi)));
                    QX_UNROLL
                    for (int t = 0; t < NT; t++) {
                        const __m512i off = _mm512_set1_epi32(32 * QX_ACT_K(t, i)->bsums[gi]);
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_sub_epi32(S[t][gr], off), scv));
                    }
                }
            }
        }
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + PQ6K_OFF_D)));
        QX_UNROLL
        for (int t = 0; t < NT; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(QX_ACT_K(t, i)->d)), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(out + 16 * t, acc[t]);
}

static void pk_q6_k_entry(int64_t n, const uint8_t *g, const void *a, size_t as, const void *aux, size_t auxs,
                          int nt, float *out)
{
    (void)aux;
    (void)auxs;
    while (nt > 0) {
        int k = nt < PQ_MAXT ? nt : PQ_MAXT;
        switch (k) {
        case 1: pk_q6_k(n, g, a, as, 1, out); break;
        case 2: pk_q6_k(n, g, a, as, 2, out); break;
        case 3: pk_q6_k(n, g, a, as, 3, out); break;
        default: pk_q6_k(n, g, a, as, 4, out); break;
        }
        nt -= k;
        out += 16 * k;
        a = (const uint8_t *)a + (size_t)k * as;
    }
}

static void install_vnni(struct quant_kernels *k)
{
    install_vnni256(k);
    QX_SET(k, QT_Q4_K, z_q4_k);
    QX_SET(k, QT_Q5_K, z_q5_k);
    QX_SET(k, QT_Q6_K, z_q6_k);
    QX_SET(k, QT_Q8_0, z_q8_0);
    QX_SET(k, QT_Q4_0, z_q4_0);
    QX_SET(k, QT_Q5_0, z_q5_0);
    QX_SET(k, QT_IQ4_NL, z_iq4_nl);
    QX_SET(k, QT_MXFP4, z_mxfp4);
    k->dot[QT_Q8_0] = zs_q8_0;
    k->dot[QT_Q4_0] = zs_q4_0;
    k->dot[QT_Q5_0] = zs_q5_0;
    k->dot[QT_IQ4_NL] = zs_iq4_nl;
    k->dot[QT_MXFP4] = zs_mxfp4;
    k->packed[QT_Q4_K] = pk_q4_k_entry;
    k->packed[QT_Q8_0] = pk_q8_0_entry;
    k->packed[QT_Q6_K] = pk_q6_k_entry;
    k->packed[QT_Q5_K] = pk_q5_k_entry;
    k->dot_prep[QT_Q8_0] = zp_q8_0_prep;
    k->dot_prep[QT_Q4_0] = zp_q4_0_prep;
    k->dot_prep[QT_Q5_0] = zp_q5_0_prep;
    k->dot_prep[QT_IQ4_NL] = zp_iq4_nl_prep;
    k->dot_prep[QT_MXFP4] = zp_mxfp4_prep;
}

#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* ------------------------------------------------ F16 weights (AVX-512F) */

/* outside the VNNI region: its helpers cannot be inlined here */
static inline __attribute__((always_inline)) float zf_hsum(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* F16 weights × NT (≤ 4) activation rows. Four accumulators per token over
 * 64-element steps, 16-lane steps into the first, then a scalar tail. The
 * activation loader LD gives 16 f32 of token t at element i: from f16 rows
 * (dot) or from f32 rows holding the same values (matmul's widened copy), so
 * both give the same bits. */
#define ZF16_BODY(LD, SCALAR_A)                                                               \
    const uint16_t *x = w;                                                                    \
    __m512 sa[4][4];                                                                          \
    QX_UNROLL                                                                                 \
    for (int t = 0; t < NT; t++)                                                              \
        sa[t][0] = sa[t][1] = sa[t][2] = sa[t][3] = _mm512_setzero_ps();                      \
    int64_t i = 0;                                                                            \
    for (; i + 64 <= n; i += 64) {                                                            \
        __m512 wv[4];                                                                         \
        QX_UNROLL                                                                             \
        for (int c = 0; c < 4; c++)                                                           \
            wv[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16 * c)));    \
        QX_UNROLL                                                                             \
        for (int t = 0; t < NT; t++) {                                                        \
            QX_UNROLL                                                                         \
            for (int c = 0; c < 4; c++)                                                       \
                sa[t][c] = _mm512_fmadd_ps(wv[c], LD(t, i + 16 * c), sa[t][c]);               \
        }                                                                                     \
    }                                                                                         \
    for (; i + 16 <= n; i += 16) {                                                            \
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));      \
        QX_UNROLL                                                                             \
        for (int t = 0; t < NT; t++)                                                          \
            sa[t][0] = _mm512_fmadd_ps(w0, LD(t, i), sa[t][0]);                               \
    }                                                                                         \
    QX_UNROLL                                                                                 \
    for (int t = 0; t < NT; t++) {                                                            \
        float r = zf_hsum(_mm512_add_ps(_mm512_add_ps(sa[t][0], sa[t][1]), _mm512_add_ps(sa[t][2], sa[t][3]))); \
        for (int64_t e = i; e < n; e++)                                                       \
            r += _cvtsh_ss(x[e]) * SCALAR_A(t, e);                                            \
        out[t] = r;                                                                           \
    }

#define ZF16_LDH(t, i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)((const uint8_t *)a + (size_t)(t) * as) + (i))))
#define ZF16_SH(t, e) _cvtsh_ss(((const uint16_t *)((const uint8_t *)a + (size_t)(t) * as))[e])
#define ZF16_LDF(t, i) _mm512_loadu_ps((const float *)((const uint8_t *)a + (size_t)(t) * as) + (i))
#define ZF16_SF(t, e) (((const float *)((const uint8_t *)a + (size_t)(t) * as))[e])

QX_INLINE void qx_zf16(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    ZF16_BODY(ZF16_LDH, ZF16_SH)
}
QX_INLINE void qx_zf16a(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    ZF16_BODY(ZF16_LDF, ZF16_SF)
}
static float zf16_dot(int64_t n, const void *w, const void *a)
{
    float o;
    qx_zf16(n, w, a, 0, 1, &o);
    return o;
}
#define ZF16_MULTI(name, body)                                                              \
    static void name(int64_t n, const void *w, const void *a, size_t as, int nt, float *out) \
    {                                                                                       \
        while (nt > 0) {                                                                    \
            int k = nt < 4 ? nt : 4;                                                        \
            switch (k) {                                                                    \
            case 1: body(n, w, a, as, 1, out); break;                                       \
            case 2: body(n, w, a, as, 2, out); break;                                       \
            case 3: body(n, w, a, as, 3, out); break;                                       \
            default: body(n, w, a, as, 4, out); break;                                      \
            }                                                                               \
            nt -= k;                                                                        \
            out += k;                                                                       \
            a = (const uint8_t *)a + (size_t)k * as;                                        \
        }                                                                                   \
    }
ZF16_MULTI(zf16_multi, qx_zf16)
ZF16_MULTI(zf16a_multi, qx_zf16a)

void quant_avx512_kernels(struct quant_kernels *k, int vnni)
{
    k->name = vnni ? "avx512vnni" : "avx512";
    k->dot[QT_F16] = zf16_dot;
    k->dot_multi[QT_F16] = zf16_multi;
    k->dot_f32a[QT_F16] = zf16a_multi;
    if (vnni)
        install_vnni(k);
}
