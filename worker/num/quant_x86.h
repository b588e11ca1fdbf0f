/* quant_x86.h — 256-bit integer dot-product kernels, written once and
 * compiled twice: by quant_avx2.c (plain AVX2: maddubs/madd) and by
 * quant_avx512.c under a VNNI target (vpdpbusd/vpdpwssd). Include only from
 * those files, after defining QX(name) (the symbol suffix) and, for the VNNI
 * build, QX_VNNI.
 *
 * Every kernel exists as one always-inline body with a compile-time token
 * count NT: the weight block is unpacked once, then dotted with NT activation
 * rows. The single-row entry is the NT = 1 instance, so a token's result is
 * the same bits whichever batch size it was computed in.
 *
 * Integer ranges (why maddubs never saturates here): activation int8 values
 * are in [−127, 127] (§4: Q8_0 uses 127/amax, Q8_K clamps to 127 and maps the
 * largest magnitude to −127); unsigned weight codes are ≤ 63, and signed ones
 * go through the abs/sign trick with |w| ≤ 128, so a pair sum is ≤ 2·128·127. */
#ifndef QX
#error "define QX(name) before including quant_x86.h"
#endif

#include <immintrin.h>
#include <string.h>

#include "quant_internal.h"

#define QX_INLINE static inline __attribute__((always_inline))
#define QX_UNROLL _Pragma("GCC unroll 8")
/* hardware binary16 → f32: exact, same bits as fp16_to_f32 */
#define QX_H2F(h) _cvtsh_ss(h)
#define QX_MAXT 8

#ifdef QX_VNNI
/* acc += Σ pairs p16·s16 ; acc += Σ quads u8·s8 */
#define QX_MADDW(acc, p, s) _mm256_dpwssd_epi32((acc), (p), (s))
#define QX_DOTBS(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#else
#define QX_MADDW(acc, p, s) _mm256_add_epi32((acc), _mm256_madd_epi16((p), (s)))
#define QX_DOTBS(acc, u, s) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#endif

QX_INLINE float qx_hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

QX_INLINE __m256i qx_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 16 bytes of nibbles → 32 bytes in element order: low nibbles, then high nibbles. */
QX_INLINE __m256i qx_nibbles16(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* 32 bits → 32 bytes, byte k = 0xFF when bit k is set. */
QX_INLINE __m256i qx_bits32(uint32_t bits)
{
    __m256i v = _mm256_set1_epi32((int)bits);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    v = _mm256_shuffle_epi8(v, shuf);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* ------------------------------------------------ K-quants × Q8_K */

#define QX_ACT_K(t, i) ((const struct blk_q8_k *)((const uint8_t *)a + (size_t)(t) * as) + (i))

/* Q4_K/Q5_K scales: the 8 six-bit scales and mins (spec §3.10) as int16
 * vectors. Word arithmetic on the 12 bytes S = w0|w1|w2: sc0-3 = w0 & 63,
 * sc4-7 = low nibbles of w2 | top 2 bits of w0 << 4; mins alike from w1/w2. */
QX_INLINE void qx_k4_scales(const uint8_t *S, __m128i *sc16, __m128i *mn16)
{
    uint32_t w0, w1, w2;
    memcpy(&w0, S, 4);
    memcpy(&w1, S + 4, 4);
    memcpy(&w2, S + 8, 4);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu, sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
    uint32_t mn_lo = w1 & 0x3f3f3f3fu, mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
    *sc16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo));
}

/* pshufb patterns broadcasting int16 lane j of a 128-bit lane */
static const uint8_t qx_bcast16[8][32] __attribute__((aligned(32))) = {
#define QX_B(j) {2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1, \
                 2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1,2*j,2*j+1}
    QX_B(0), QX_B(1), QX_B(2), QX_B(3), QX_B(4), QX_B(5), QX_B(6), QX_B(7)
#undef QX_B
};

/* Shared tail of Q4_K/Q5_K: wv[8] unsigned codes per 32-element sub-block. */
QX_INLINE void qx_k4_tokens(const __m256i wv[8], const uint8_t *S, float dw, float dmw,
                            const void *a, size_t as, int64_t i, const int NT, __m256 *acc)
{
    __m128i sc16, mn16;
    qx_k4_scales(S, &sc16, &mn16);
    const __m256i scb = _mm256_broadcastsi128_si256(sc16);
    __m256i scv[8];
    QX_UNROLL
    for (int j = 0; j < 8; j++)
        scv[j] = _mm256_shuffle_epi8(scb, _mm256_load_si256((const __m256i *)qx_bcast16[j]));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn16, mn16), _mm_unpacklo_epi16(mn16, mn16));
    QX_UNROLL
    for (int t = 0; t < NT; t++) {
        const struct blk_q8_k *y = QX_ACT_K(t, i);
        __m256i is = _mm256_setzero_si256();
        QX_UNROLL
        for (int j = 0; j < 8; j++)
            is = QX_MADDW(is, _mm256_maddubs_epi16(wv[j], qx_load(y->qs + 32 * j)), scv[j]);
        __m256i ms = _mm256_madd_epi16(qx_load(y->bsums), mins);
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(is), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(y->d * dmw), _mm256_cvtepi32_ps(ms), acc[t]);
    }
}

QX_INLINE void qx_q4_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q4_k *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i wv[8];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            wv[2 * c] = _mm256_and_si256(q, m4);
            wv[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        qx_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

QX_INLINE void qx_q5_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q5_k *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i hv = qx_load(x[i].qh);
        __m256i wv[8];
        QX_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i q = qx_load(x[i].qs + 32 * c);
            /* bit j of qh[l] is the 5th bit of sub-block j, element l: move it to bit 4 */
            __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * c), 4), b4);
            __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * c + 1), 4), b4);
            wv[2 * c] = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
            wv[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
        }
        qx_k4_tokens(wv, x[i].scales, QX_H2F(x[i].d), QX_H2F(x[i].dmin), a, as, i, NT, acc);
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

/* pshufb patterns: lane 0 ← int16 lane 2k, lane 1 ← int16 lane 2k+1 */
static const uint8_t qx_q6_pat[4][32] __attribute__((aligned(32))) = {
#define QX_P(k) {4*k,4*k+1,4*k,4*k+1,4*k,4*k+1,4*k,4*k+1,4*k,4*k+1,4*k,4*k+1,4*k,4*k+1,4*k,4*k+1, \
                 4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3,4*k+2,4*k+3}
    QX_P(0), QX_P(1), QX_P(2), QX_P(3)
#undef QX_P
};

QX_INLINE void qx_q6_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q6_k *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i wv[8], scv[8];
        QX_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256i L0 = qx_load(x[i].ql + 64 * h), L1 = qx_load(x[i].ql + 64 * h + 32);
            __m256i H = qx_load(x[i].qh + 32 * h);
            wv[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
            wv[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
            wv[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m30));
            wv[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                            _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
        }
        const int8_t *S = x[i].scales;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)S));
        /* scv[k]: S[2k] for the first 16 elements of chunk k, S[2k+1] for the next 16 */
        const __m256i s_lo = _mm256_permute4x64_epi64(sc16, 0x44), s_hi = _mm256_permute4x64_epi64(sc16, 0xEE);
        QX_UNROLL
        for (int k = 0; k < 8; k++)
            scv[k] = _mm256_shuffle_epi8(k < 4 ? s_lo : s_hi, _mm256_load_si256((const __m256i *)qx_q6_pat[k % 4]));
        float dw = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m256i is = _mm256_setzero_si256();
            QX_UNROLL
            for (int k = 0; k < 8; k++)
                is = QX_MADDW(is, _mm256_maddubs_epi16(wv[k], qx_load(y->qs + 32 * k)), scv[k]);
            /* codes are stored +32: subtract 32·Σ_g S[g]·bsums[g] */
            __m256i off = _mm256_madd_epi16(qx_load(y->bsums), sc16);
            is = _mm256_sub_epi32(is, _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(is), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

/* Q2_K: 2-bit codes, 4-bit scale and min per 16 elements (spec §3.8). */
QX_INLINE void qx_q2_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q2_k *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i wv[8], scv[8];
        QX_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256i q = qx_load(x[i].qs + 32 * h);
            QX_UNROLL
            for (int s = 0; s < 4; s++)
                wv[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
        }
        const __m128i sb = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        const __m256i s_lo = _mm256_permute4x64_epi64(sc16, 0x44), s_hi = _mm256_permute4x64_epi64(sc16, 0xEE);
        QX_UNROLL
        for (int k = 0; k < 8; k++)
            scv[k] = _mm256_shuffle_epi8(k < 4 ? s_lo : s_hi, _mm256_load_si256((const __m256i *)qx_q6_pat[k % 4]));
        float dw = QX_H2F(x[i].d), dmw = QX_H2F(x[i].dmin);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m256i is = _mm256_setzero_si256();
            QX_UNROLL
            for (int k = 0; k < 8; k++)
                is = QX_MADDW(is, _mm256_maddubs_epi16(wv[k], qx_load(y->qs + 32 * k)), scv[k]);
            __m256i ms = _mm256_madd_epi16(qx_load(y->bsums), mn16);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(is), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(y->d * dmw), _mm256_cvtepi32_ps(ms), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

/* The 16 signed Q3_K scales as int8 (spec §3.9), by whole words: with
 * S = w0|w1|w2, scale bytes 4g..4g+3 are a nibble of w0/w1 (low nibbles for
 * g = 0,1, high for g = 2,3) | two bits of w2 (bits 2g..2g+1 of each byte) << 4, − 32. */
QX_INLINE __m128i qx_q3k_scales(const uint8_t *S)
{
    uint32_t w0, w1, w2;
    memcpy(&w0, S, 4);
    memcpy(&w1, S + 4, 4);
    memcpy(&w2, S + 8, 4);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    uint32_t a0 = (w0 & m4) | (w2 & m2) << 4;
    uint32_t a1 = (w1 & m4) | ((w2 >> 2) & m2) << 4;
    uint32_t a2 = ((w0 >> 4) & m4) | ((w2 >> 4) & m2) << 4;
    uint32_t a3 = ((w1 >> 4) & m4) | ((w2 >> 6) & m2) << 4;
    return _mm_sub_epi8(_mm_set_epi32((int)a3, (int)a2, (int)a1, (int)a0), _mm_set1_epi8(32));
}

/* Q3_K: codes u = low2 + 4·hbit in 0..7, i.e. q + 4; the +4 is removed with bsums (spec §3.9). */
QX_INLINE void qx_q3_k(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q3_k *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i wv[8], scv[8];
        const __m256i hm = qx_load(x[i].hmask);
        QX_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256i q = qx_load(x[i].qs + 32 * h);
            QX_UNROLL
            for (int s = 0; s < 4; s++) {
                const int k = 4 * h + s;
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, k), m1), 2);
                wv[k] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3), hb);
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(qx_q3k_scales(x[i].scales));
        const __m256i s_lo = _mm256_permute4x64_epi64(sc16, 0x44), s_hi = _mm256_permute4x64_epi64(sc16, 0xEE);
        QX_UNROLL
        for (int k = 0; k < 8; k++)
            scv[k] = _mm256_shuffle_epi8(k < 4 ? s_lo : s_hi, _mm256_load_si256((const __m256i *)qx_q6_pat[k % 4]));
        float dw = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m256i is = _mm256_setzero_si256();
            QX_UNROLL
            for (int k = 0; k < 8; k++)
                is = QX_MADDW(is, _mm256_maddubs_epi16(wv[k], qx_load(y->qs + 32 * k)), scv[k]);
            __m256i off = _mm256_madd_epi16(qx_load(y->bsums), sc16);
            is = _mm256_sub_epi32(is, _mm256_slli_epi32(off, 2));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(is), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

QX_INLINE void qx_iq4_xs(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_iq4_xs *x = w;
    __m256 acc[QX_MAXT];
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i wa[8], ws[8], scv[8];
        QX_UNROLL
        for (int ib = 0; ib < 8; ib++) {
            __m256i v = _mm256_shuffle_epi8(tbl, qx_nibbles16(x[i].qs + 16 * ib));
            ws[ib] = v;
            wa[ib] = _mm256_sign_epi8(v, v);
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            scv[ib] = _mm256_set1_epi16((int16_t)(ls - 32));
        }
        float dw = QX_H2F(x[i].d);
        QX_UNROLL
        for (int t = 0; t < NT; t++) {
            const struct blk_q8_k *y = QX_ACT_K(t, i);
            __m256i is = _mm256_setzero_si256();
            QX_UNROLL
            for (int ib = 0; ib < 8; ib++) {
                __m256i s = _mm256_sign_epi8(qx_load(y->qs + 32 * ib), ws[ib]);
                is = QX_MADDW(is, _mm256_maddubs_epi16(wa[ib], s), scv[ib]);
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(is), acc[t]);
        }
    }
    QX_UNROLL
    for (int t = 0; t < NT; t++)
        out[t] = qx_hsum(acc[t]);
}

/* ------------------------------------- 32-element types × Q8_0 / Q8_1 */

#define QX_ACT_0(t, i) ((const struct blk_q8_0 *)((const uint8_t *)a + (size_t)(t) * as) + (i))
#define QX_ACT_1(t, i) ((const struct blk_q8_1 *)((const uint8_t *)a + (size_t)(t) * as) + (i))

/* Signed weights (32 int8 in element order, from UNPACK) × Q8_0, scale per block.
 * UNPACK(i, wv, dw) sets __m256i wv and float dw for block i. */
#define QX_SIGNED_Q8_0_BODY(UNPACK)                                                              \
    __m256 acc[QX_MAXT];                                                                         \
    QX_UNROLL \
    for (int t = 0; t < NT; t++)                                                                 \
        acc[t] = _mm256_setzero_ps();                                                            \
    for (int64_t i = 0; i < n / QK; i++) {                                                       \
        __m256i wv;                                                                              \
        float dw;                                                                                \
        UNPACK(i, wv, dw);                                                                       \
        __m256i wa = _mm256_sign_epi8(wv, wv);                                                   \
        QX_UNROLL \
        for (int t = 0; t < NT; t++) {                                                           \
            const struct blk_q8_0 *y = QX_ACT_0(t, i);                                           \
            __m256i s = _mm256_sign_epi8(qx_load(y->qs), wv);                                    \
            __m256i p = QX_DOTBS(_mm256_setzero_si256(), wa, s);                                 \
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * QX_H2F(y->d)), _mm256_cvtepi32_ps(p), acc[t]); \
        }                                                                                        \
    }                                                                                            \
    QX_UNROLL \
    for (int t = 0; t < NT; t++)                                                                 \
        out[t] = qx_hsum(acc[t]);

QX_INLINE void qx_q8_0(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q8_0 *x = w;
#define UNPACK(i, wv, dw) (wv = qx_load(x[i].qs), dw = QX_H2F(x[i].d))
    QX_SIGNED_Q8_0_BODY(UNPACK)
#undef UNPACK
}

QX_INLINE void qx_q4_0(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q4_0 *x = w;
    const __m256i off = _mm256_set1_epi8(8);
#define UNPACK(i, wv, dw) (wv = _mm256_sub_epi8(qx_nibbles16(x[i].qs), off), dw = QX_H2F(x[i].d))
    QX_SIGNED_Q8_0_BODY(UNPACK)
#undef UNPACK
}

QX_INLINE void qx_q5_0(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q5_0 *x = w;
    const __m256i off = _mm256_set1_epi8(16), b4 = _mm256_set1_epi8(0x10);
#define UNPACK(i, wv, dw)                                                                                   \
    (wv = _mm256_sub_epi8(_mm256_or_si256(qx_nibbles16(x[i].qs), _mm256_and_si256(qx_bits32(rd_u32le(x[i].qh)), b4)), off), \
     dw = QX_H2F(x[i].d))
    QX_SIGNED_Q8_0_BODY(UNPACK)
#undef UNPACK
}

QX_INLINE void qx_iq4_nl(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_iq4_nl *x = w;
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
#define UNPACK(i, wv, dw) (wv = _mm256_shuffle_epi8(tbl, qx_nibbles16(x[i].qs)), dw = QX_H2F(x[i].d))
    QX_SIGNED_Q8_0_BODY(UNPACK)
#undef UNPACK
}

QX_INLINE void qx_mxfp4(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_mxfp4 *x = w;
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_mxfp4));
#define UNPACK(i, wv, dw) (wv = _mm256_shuffle_epi8(tbl, qx_nibbles16(x[i].qs)), dw = e8m0_half(x[i].e))
    QX_SIGNED_Q8_0_BODY(UNPACK)
#undef UNPACK
}

/* Unsigned codes with a min × Q8_1: d_w·d_a·Σq·a + m_w·s_a. */
#define QX_UNSIGNED_Q8_1_BODY(UNPACK)                                                            \
    __m256 acc[QX_MAXT];                                                                         \
    float accm[QX_MAXT];                                                                         \
    QX_UNROLL \
    for (int t = 0; t < NT; t++) {                                                               \
        acc[t] = _mm256_setzero_ps();                                                            \
        accm[t] = 0.0f;                                                                          \
    }                                                                                            \
    for (int64_t i = 0; i < n / QK; i++) {                                                       \
        __m256i wv;                                                                              \
        float dw, mw;                                                                            \
        UNPACK(i, wv, dw, mw);                                                                   \
        QX_UNROLL \
        for (int t = 0; t < NT; t++) {                                                           \
            const struct blk_q8_1 *y = QX_ACT_1(t, i);                                           \
            __m256i p = QX_DOTBS(_mm256_setzero_si256(), wv, qx_load(y->qs));                    \
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * QX_H2F(y->d)), _mm256_cvtepi32_ps(p), acc[t]); \
            accm[t] += mw * QX_H2F(y->s);                                                   \
        }                                                                                        \
    }                                                                                            \
    QX_UNROLL \
    for (int t = 0; t < NT; t++)                                                                 \
        out[t] = qx_hsum(acc[t]) + accm[t];

QX_INLINE void qx_q4_1(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q4_1 *x = w;
#define UNPACK(i, wv, dw, mw) (wv = qx_nibbles16(x[i].qs), dw = QX_H2F(x[i].d), mw = QX_H2F(x[i].m))
    QX_UNSIGNED_Q8_1_BODY(UNPACK)
#undef UNPACK
}

QX_INLINE void qx_q5_1(int64_t n, const void *w, const void *a, size_t as, const int NT, float *out)
{
    const struct blk_q5_1 *x = w;
    const __m256i b4 = _mm256_set1_epi8(0x10);
#define UNPACK(i, wv, dw, mw)                                                                               \
    (wv = _mm256_or_si256(qx_nibbles16(x[i].qs), _mm256_and_si256(qx_bits32(rd_u32le(x[i].qh)), b4)),       \
     dw = QX_H2F(x[i].d), mw = QX_H2F(x[i].m))
    QX_UNSIGNED_Q8_1_BODY(UNPACK)
#undef UNPACK
}

/* ------------------------------------------------- entry points */

/* name##_dot: one token; name##_multi: up to any number, in groups of QX_MAXT. */
#define QX_ENTRIES(name)                                                                          \
    static float QX(name##_dot)(int64_t n, const void *w, const void *a)                          \
    {                                                                                             \
        float o;                                                                                  \
        qx_##name(n, w, a, 0, 1, &o);                                                             \
        return o;                                                                                 \
    }                                                                                             \
    static void QX(name##_multi)(int64_t n, const void *w, const void *a, size_t as, int nt, float *out) \
    {                                                                                             \
        while (nt > 0) {                                                                          \
            int k = nt < QX_MAXT ? nt : QX_MAXT;                                                  \
            switch (k) {                                                                          \
            case 1: qx_##name(n, w, a, as, 1, out); break;                                        \
            case 2: qx_##name(n, w, a, as, 2, out); break;                                        \
            case 3: qx_##name(n, w, a, as, 3, out); break;                                        \
            case 4: qx_##name(n, w, a, as, 4, out); break;                                        \
            case 5: qx_##name(n, w, a, as, 5, out); break;                                        \
            case 6: qx_##name(n, w, a, as, 6, out); break;                                        \
            case 7: qx_##name(n, w, a, as, 7, out); break;                                        \
            default: qx_##name(n, w, a, as, 8, out); break;                                       \
            }                                                                                     \
            nt -= k;                                                                              \
            out += k;                                                                             \
            a = (const uint8_t *)a + (size_t)k * as;                                              \
        }                                                                                         \
    }

QX_ENTRIES(q2_k)
QX_ENTRIES(q3_k)
QX_ENTRIES(q4_k)
QX_ENTRIES(q5_k)
QX_ENTRIES(q6_k)
QX_ENTRIES(iq4_xs)
QX_ENTRIES(q8_0)
QX_ENTRIES(q4_0)
QX_ENTRIES(q5_0)
QX_ENTRIES(iq4_nl)
QX_ENTRIES(mxfp4)
QX_ENTRIES(q4_1)
QX_ENTRIES(q5_1)

#define QX_SET(k, T, name)                    \
    do {                                      \
        (k)->dot[T] = QX(name##_dot);         \
        (k)->dot_multi[T] = QX(name##_multi); \
    } while (0)

/* Install this file's integer kernels into a table. */
static inline void QX(install)(struct quant_kernels *k)
{
    QX_SET(k, QT_Q2_K, q2_k);
    QX_SET(k, QT_Q3_K, q3_k);
    QX_SET(k, QT_Q4_K, q4_k);
    QX_SET(k, QT_Q5_K, q5_k);
    QX_SET(k, QT_Q6_K, q6_k);
    QX_SET(k, QT_IQ4_XS, iq4_xs);
    QX_SET(k, QT_Q8_0, q8_0);
    QX_SET(k, QT_Q4_0, q4_0);
    QX_SET(k, QT_Q5_0, q5_0);
    QX_SET(k, QT_IQ4_NL, iq4_nl);
    QX_SET(k, QT_MXFP4, mxfp4);
    QX_SET(k, QT_Q4_1, q4_1);
    QX_SET(k, QT_Q5_1, q5_1);
}
