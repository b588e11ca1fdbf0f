/* quant_internal.h — block layouts, lookup tables and the kernel table shared
 * by quant_ref.c (scalar reference), quant_avx2.c / quant_avx512.c (SIMD) and
 * quant.c (run-time dispatch). Not a public interface: use quant.h.
 *
 * Layouts are those of shared spec gguf-and-quants.md §3; every struct has the
 * exact on-disk byte size (checked with static asserts) and at most 2-byte
 * alignment, except Q8_K (activation-only, f32 scale, 4-byte alignment). */
#ifndef LLM170_QUANT_INTERNAL_H
#define LLM170_QUANT_INTERNAL_H

#include <stdint.h>

#include "../../common/fp16.h"
#include "quant.h"

#define QK 32     /* elements per block of the 32-element types */
#define QK_K 256  /* elements per super-block of K-quants and IQ4_XS */

struct blk_q4_0 { uint16_t d; uint8_t qs[16]; };                       /* 18 B */
struct blk_q4_1 { uint16_t d, m; uint8_t qs[16]; };                    /* 20 B */
struct blk_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };        /* 22 B; qh = LE uint32 */
struct blk_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };     /* 24 B */
struct blk_q8_0 { uint16_t d; int8_t qs[32]; };                        /* 34 B */
struct blk_q8_1 { uint16_t d, s; int8_t qs[32]; };                     /* 36 B; s = fp16(d·Σqs) */
struct blk_iq4_nl { uint16_t d; uint8_t qs[16]; };                     /* 18 B */
struct blk_mxfp4 { uint8_t e; uint8_t qs[16]; };                       /* 17 B */
struct blk_q2_k { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };          /* 84 B */
struct blk_q3_k { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; }; /* 110 B */
struct blk_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };         /* 144 B */
struct blk_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }; /* 176 B */
struct blk_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; }; /* 210 B */
struct blk_iq4_xs { uint16_t d, scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };  /* 136 B */
struct blk_q8_k { float d; int8_t qs[256]; int16_t bsums[16]; };                     /* 292 B; bsums[g] = Σ qs[16g..16g+15] */

_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(struct blk_q8_1) == 36, "q8_1");
_Static_assert(sizeof(struct blk_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(struct blk_mxfp4) == 17, "mxfp4");
_Static_assert(sizeof(struct blk_q2_k) == 84, "q2_K");
_Static_assert(sizeof(struct blk_q3_k) == 110, "q3_K");
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_K");
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_K");
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_K");
_Static_assert(sizeof(struct blk_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(struct blk_q8_k) == 292, "q8_K");

/* Non-linear 4-bit code tables (spec §3.13, §3.15). */
static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline uint32_t rd_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* E8M0 exponent → 2^(e-128) (half the E8M0 value; spec §3.15), by bit pattern. */
static inline float e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23);
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (spec §3.10 get_scale_min_k4). */
static inline void k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q3_K: the 16 signed 6-bit scales (spec §3.9). */
static inline void q3k_scales(const uint8_t *s, int8_t out[16])
{
    for (int i = 0; i < 16; i++) {
        int low4 = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int high2 = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((low4 | high2 << 4) - 32);
    }
}

/* Dot product of one weight row with one activation row (already in the
 * weight type's vec_dot type); n elements, a multiple of the block size. */
typedef float (*qdot_fn)(int64_t n, const void *w, const void *a);
/* Several activation rows against one weight row: out[t] = dot(w, a + t*a_stride)
 * for t in [0, n_act). Lets SIMD code unpack a weight block once for several tokens. */
typedef void (*qdot_multi_fn)(int64_t n, const void *w, const void *a, size_t a_stride, int n_act,
                              float *out);
/* Several tokens against one weight row with Q8_0 activations in the
 * "prepared" layout matmul builds for them (quant_prep_q8_0): per token, the
 * n quants as unsigned bytes q+128 back to back (aq + t*aq_stride) and the
 * n/32 block scales as f32 (ad + t*ad_stride). Results are the same bits as
 * the kernel table's dot on the ordinary Q8_0 row. */
typedef void (*qdot_prep_fn)(int64_t n, const void *w, const uint8_t *aq, size_t aq_stride, const float *ad,
                             size_t ad_stride, int n_act, float *out);
/* Packed Q4_K (matmul_pack): 16 weight rows interleaved so one 512-bit
 * vpdpbusd serves 16 rows with one broadcast activation word. Per super-block
 * of the 16 rows, PQ4K_SB bytes:
 *   qs  [4 c][8 k][16 r][4 b] = row r's qs[32c + 4k + b] (both nibbles)      2048 B
 *   sc  [8 j][16 r] u8        = 6-bit scale of sub-block j                   128 B
 *   mn  [4 p][16 r][2] i16    = 6-bit mins of sub-blocks 2p, 2p+1            256 B
 *   d   [16 r] fp16, dmin [16 r] fp16                                        64 B
 * Rows past n_out are zero (d = 0). */
#define PQ4K_ROWS 16
#define PQ4K_SB 2496
#define PQ4K_OFF_SC 2048
#define PQ4K_OFF_MN 2176
#define PQ4K_OFF_D 2432
#define PQ4K_OFF_DMIN 2464
/* Packed Q5_K: the packed Q4_K super-block (low 4 bits in qs) followed by
 *   qh  [8 k][16 r][4 b] = row r's qh[4k + b]                                512 B */
#define PQ5K_SB 3008
#define PQ5K_OFF_QH 2496
/* Packed Q8_0: per 32-element block of 16 rows, PQ8_SB bytes:
 *   qs [8 k][16 r][4 b] = row r's qs[4k + b] ^ 0x80 (stored unsigned)       512 B
 *   d  [16 r] fp16                                                           32 B
 * The +128 bias is removed with the activation block sums (aux below). */
#define PQ8_SB 544
#define PQ8_OFF_D 512
/* Packed Q6_K: per super-block of 16 rows, PQ6K_SB bytes (no growth):
 *   ql [2 h][2 c][8 k][16 r][4 b] = row r's ql[64h + 32c + 4k + b]        2048 B
 *   qh [2 h][8 k][16 r][4 b]      = row r's qh[32h + 4k + b]               1024 B
 *   sc [16 g][16 r] int8          = scale of 16-element group g            256 B
 *   d  [16 r] fp16                                                           32 B */
#define PQ6K_SB 3360
#define PQ6K_OFF_QH 2048
#define PQ6K_OFF_SC 3072
#define PQ6K_OFF_D 3328
/* One packed 16-row group × n_act activation rows (any count): out[t*16 + r].
 * aux (+ t*aux_stride bytes): per-token side data; for packed Q8_0, n/32 f32
 * block scales followed by n/32 int32 corrections −128·Σ(block quants). */
#define PQ_MAXT 4
typedef void (*qpacked_fn)(int64_t n, const uint8_t *group, const void *a, size_t a_stride, const void *aux,
                           size_t aux_stride, int n_act, float *out);
/* f32 row → activation row of one vec_dot type. */
typedef void (*qact_fn)(const float *x, void *dst, int64_t n);
/* Weight row → f32. */
typedef void (*qdeq_fn)(const void *src, float *dst, int64_t n);

/* The kernels one SIMD level provides; NULL entries fall back to the scalar ones. */
struct quant_kernels {
    const char *name;
    qdot_fn dot[QT_COUNT];         /* indexed by weight type */
    qdot_multi_fn dot_multi[QT_COUNT]; /* optional, indexed by weight type */
    qdot_prep_fn dot_prep[QT_COUNT];   /* optional, weight types with Q8_0 activations */
    qpacked_fn packed[QT_COUNT];       /* optional, matmul_pack layouts (Q4_K, Q5_K, Q6_K, Q8_0) */
    /* optional multi-token entry reading f32 activation rows that hold exactly
     * the values of the vec_dot-type rows (F16 weights: f16-rounded inputs
     * widened once per matmul); same bits as dot */
    qdot_multi_fn dot_f32a[QT_COUNT];
    qact_fn act[QT_COUNT];         /* indexed by activation (vec_dot) type */
    qdeq_fn deq[QT_COUNT];         /* indexed by weight type */
};

/* Filled by quant_ref.c with every scalar kernel. */
void quant_ref_kernels(struct quant_kernels *k);
/* Overwrite entries with SIMD versions; only call after the CPU was checked.
 * `vnni` tells the AVX-512 file whether AVX512-VNNI may be used. */
void quant_avx2_kernels(struct quant_kernels *k);
void quant_avx512_kernels(struct quant_kernels *k, int vnni);

/* Scalar reference for a packed layout (Q4_K, Q5_K, Q6_K, Q8_0; else NULL):
 * unpacks each row and takes the scalar dot, so on any CPU it gives the same
 * bits as the scalar table's dot on the original rows. It is not in any
 * level's table (a level packs only when it has a fast packed kernel); tests
 * use it through matmul_pack_level to check the packing on every CPU. */
qpacked_fn quant_packed_ref(enum qtype wt);

/* The kernel table the dispatcher picked (initialised once). */
const struct quant_kernels *quant_kernels_get(void);
/* The table of one level (0 scalar, 1 AVX2, 2 AVX-512), or NULL when the CPU lacks it (tests, benches). */
const struct quant_kernels *quant_kernels_level(int level);

/* Q8_0 row (n elements) → prepared layout: aq[n] = q + 128, ad[n/32] = f32 scales. */
static inline void quant_prep_q8_0(const void *src, int64_t n, uint8_t *aq, float *ad)
{
    const struct blk_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++) {
        for (int j = 0; j < QK; j++)
            aq[i * QK + j] = (uint8_t)(b[i].qs[j] ^ 0x80);
        ad[i] = fp16_to_f32(b[i].d);
    }
}

/* Scalar activation quantizers (x86 rounding variant, spec §4). */
void quant_act_q8_0_ref(const float *x, void *dst, int64_t n);
void quant_act_q8_1_ref(const float *x, void *dst, int64_t n);
void quant_act_q8_k_ref(const float *x, void *dst, int64_t n);

#endif
