/* quant.h — ggml tensor types: traits, dequantization, activation
 * quantization and dot products, exactly as llama.cpp's CPU backend does
 * them (see shared spec gguf-and-quants.md §2–§4).
 *
 * A weight row of type T is dotted with an activation row that was first
 * converted to T's "vec_dot type" (Q8_0, Q8_1, Q8_K, F16, BF16 or F32).
 * SIMD variants (AVX2, AVX-512) are chosen at run time; the scalar code is the
 * reference they are tested against. */
#ifndef LLM170_QUANT_H
#define LLM170_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qtype {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12,
    QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ2_XXS = 16, QT_IQ2_XS = 17,
    QT_IQ3_XXS = 18, QT_IQ1_S = 19, QT_IQ4_NL = 20, QT_IQ3_S = 21, QT_IQ2_S = 22,
    QT_IQ4_XS = 23, QT_I8 = 24, QT_I16 = 25, QT_I32 = 26, QT_I64 = 27, QT_F64 = 28,
    QT_IQ1_M = 29, QT_BF16 = 30, QT_TQ1_0 = 34, QT_TQ2_0 = 35, QT_MXFP4 = 39,
    QT_COUNT = 40,
};

struct qtype_info {
    const char *name;   /* "q4_K", "f16", … as ggml prints them */
    int blck;           /* elements per block */
    int size;           /* bytes per block */
    bool known;         /* a valid, non-removed ggml id (block sizes known) */
    bool compute;       /* we can dequantize it and use it as a weight */
    enum qtype vec_dot; /* activation type for dot products (weights only) */
};

/* NULL for ids that are out of range or removed (4, 5, 31–33, 36–38). */
const struct qtype_info *qtype_get(uint32_t type);
/* Bytes of a row of n elements (n must be a multiple of the block size). */
size_t qtype_row_size(enum qtype t, int64_t n);

/* Dequantize n elements (a multiple of the block size). Bit-exact with ggml. */
void dequant_row(enum qtype t, const void *src, float *dst, int64_t n);

/* Quantize one f32 row into the vec_dot type of weight type `wt` (x86 variant
 * of ggml: Q8_0 with 127/amax and RNE, Q8_K reference, F16/BF16 RNE). dst must
 * hold qtype_row_size(qtype_get(wt)->vec_dot, n) bytes. */
void quant_act_row(enum qtype wt, const float *x, void *dst, int64_t n);

/* Dot product of one weight row (type wt) with one activation row already in
 * wt's vec_dot type; n elements. */
float vec_dot(enum qtype wt, int64_t n, const void *w, const void *act);

/* Reference (scalar) versions, for tests of the SIMD paths. */
float vec_dot_ref(enum qtype wt, int64_t n, const void *w, const void *act);

/* Which SIMD level the dispatcher picked: "avx512vnni", "avx512", "avx2" or
 * "scalar" (LLM170_SIMD=scalar|avx2|avx512 in the environment caps it). */
const char *quant_simd_name(void);

/* Quantize f32 weights into type t (ggml's reference quantizers) — used by
 * the project's GGUF writer for test models. Returns false when t has no
 * quantizer. */
bool quant_weights_row(enum qtype t, const float *x, void *dst, int64_t n);

#endif
