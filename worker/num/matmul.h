/* matmul.h — Y = W·X on the CPU, threaded, for any weight type.
 *
 * W: n_out rows of n_in elements of type wt (a GGUF 2-D weight, ggml order
 * [n_in, n_out]). X: n_tok rows of n_in f32 (row-major). Y: n_tok rows of
 * n_out f32. Activations are quantized once per call into wt's vec_dot type,
 * so results match llama.cpp's CPU mul_mat. */
#ifndef LLM170_MATMUL_H
#define LLM170_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h"
#include "../../common/tpool.h"

/* Reusable scratch for the quantized activations; zero-initialise, free with matmul_scratch_free. */
struct matmul_scratch {
    void *buf;
    size_t cap;
};

void matmul(struct tpool *tp, struct matmul_scratch *s, enum qtype wt, const void *W,
            int64_t n_in, int64_t n_out, const float *X, int64_t n_tok, float *Y);

void matmul_scratch_free(struct matmul_scratch *s);

/* Optional faster path: a weight matrix repacked once (e.g. at model load)
 * into a layout that lets one SIMD instruction serve several output rows.
 * matmul_pack returns NULL when this type has no packed form on this CPU (now:
 * Q4_K, Q5_K, Q6_K and Q8_0 with AVX-512 VNNI) or memory runs out — then keep using matmul().
 * matmul_packed_run computes the same Y as matmul() up to float summation
 * order (~1e-6 relative); W may be freed after packing. */
struct matmul_packed;
/* One mapping for all packed matrices of a model, backed by transparent huge
 * pages where the kernel allows (madvise): decode streams every packed byte
 * once per token, and 2 MiB pages spare it a page walk every 4 KiB. Packing
 * without an arena (or past its end) uses the heap. */
struct matmul_arena {
    uint8_t *base; /* [cap] 2 MiB-aligned anonymous mapping, NULL when none */
    size_t cap, used;
};
/* Reserve bytes of address space (pages are committed when packed into);
 * a failure leaves a->base NULL and is not an error: packing falls back. */
void matmul_arena_reserve(struct matmul_arena *a, size_t bytes);
void matmul_arena_release(struct matmul_arena *a);
/* Bytes matmul_pack would take for this matrix in an arena (0: no packed form here). */
size_t matmul_pack_size(enum qtype wt, int64_t n_in, int64_t n_out);
struct matmul_packed *matmul_pack(enum qtype wt, const void *W, int64_t n_in, int64_t n_out, struct matmul_arena *a);
void matmul_packed_run(struct tpool *tp, struct matmul_scratch *s, const struct matmul_packed *p, const float *X,
                       int64_t n_tok, float *Y);
void matmul_packed_free(struct matmul_packed *p);
/* Tests: the packed form with the kernel of SIMD level `level` (0 scalar, 1 AVX2, 2 AVX-512, as
 * quant_kernels_level), or the scalar reference packed kernel (the same bits as the scalar vec_dot of
 * each row) where that level has none, so the packing is exercised on every CPU. NULL when the CPU
 * lacks the level or the type/shape has no packed form. The engine uses matmul_pack. */
struct matmul_packed *matmul_pack_level(enum qtype wt, const void *W, int64_t n_in, int64_t n_out,
                                        struct matmul_arena *a, int level);
/* Whether p runs a SIMD packed kernel (false: the scalar reference). */
bool matmul_packed_simd(const struct matmul_packed *p);
/* Bytes the packed matrix holds (for memory accounting). */
size_t matmul_packed_bytes(const struct matmul_packed *p);

/* Whether the packed form is also the faster one for a single token (else use matmul on the GGUF
 * bytes for one token; both give the same results up to float order). */
bool matmul_packed_one_token(const struct matmul_packed *p);
/* One token (X[k]: n_in f32, Y[k]: n_out f32) through n ≤ MATMUL_GROUP_MAX packed matrices in a
 * single pool dispatch (decode's Q/K/V or gate/up); the same Y as matmul_packed_run per matrix. */
#define MATMUL_GROUP_MAX 4
void matmul_packed_run_group(struct tpool *tp, struct matmul_scratch *s, const struct matmul_packed *const *p,
                             const float *const *X, float *const *Y, int n);

/* A weight matrix with the best path chosen once: packed when available, else
 * the GGUF bytes (which must then stay mapped). Zero-initialise or use
 * matmul_weight_init; matmul_weight_free releases the packed copy only. */
struct matmul_weight {
    enum qtype wt;
    const void *W;                 /* GGUF bytes, [n_out][row bytes]; used when packed is NULL */
    int64_t n_in, n_out;
    struct matmul_packed *packed;  /* owned; NULL = plain path */
};
/* pack: try matmul_pack (false: keep the plain path, e.g. for comparisons). */
void matmul_weight_init(struct matmul_weight *mw, enum qtype wt, const void *W, int64_t n_in, int64_t n_out, bool pack);
void matmul_weight_run(struct tpool *tp, struct matmul_scratch *s, const struct matmul_weight *mw, const float *X,
                       int64_t n_tok, float *Y);
void matmul_weight_free(struct matmul_weight *mw);

#endif
