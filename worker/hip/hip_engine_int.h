/* hip_engine_int.h — what hip_engine.c lends the hybrid layers
 * (hip_hybrid.c): the device weight record, the upload staging
 * buffer, a view of the engine's scratch buffers, and its launch helpers
 * (GEMV/GEMM, RMSNorm, q8 quantization), so the hybrid forward builds on
 * them instead of carrying copies. Internal to the hip backend. */
#ifndef LLM170_HIP_ENGINE_INT_H
#define LLM170_HIP_ENGINE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "hip_knobs.h"
#include "hip_rt.h"
#include "../model/model.h"

struct hip_engine;

struct dw {                /* a weight on the device */
    uint64_t d;            /* 0 when absent */
    int type;              /* ggml type id */
    int64_t ne0, ne1, ne2; /* elements per row, rows, experts */
    size_t row_bytes;
};

struct stager {
    void *buf;             /* pinned */
    size_t cap;
};

/* The engine's buffers and settings a hybrid layer reads or writes, B = n_batch. */
struct hip_lend {
    struct hip_rt *rt;
    const struct hip_knobs *knobs; /* the engine's settings */
    int warp;
    int n_ctx, n_batch, n_seq;
    int W;                 /* width of a qkv row: nq_max + 2·nkv_max */
    int gemv_max;          /* batches up to this many rows take the GEMV kernels */
    int split_tokens;      /* batches up to this many tokens split attention (decode) */
    int dec_split;         /* attention splits of such a batch */
    size_t kv_elt;         /* bytes of a KV cache element (2: f16, 4: f32) */
    uint64_t x;            /* [B][E] residual stream */
    uint64_t h;            /* [B][E] normed input */
    uint64_t qkv;          /* [B][W] Q | K | V */
    uint64_t o;            /* [B][nq_max] attention output */
    uint64_t part;         /* [split_tokens][n_head][dec_split][hd + 2] attention partials */
    uint64_t io;           /* ints [4][B]: tok, pos, seq, out_rows; then f32 cs [B][n_rot] */
    uint64_t xq, xqd;      /* q8 copy of the next GEMV's input (hipe_mm q = 1): int8 [rows][k], [rows][k/32][2] */
};
void hipe_lend(const struct hip_engine *c, struct hip_lend *out);

/* Layer il's attention weights and cache (gated-attention layers use wq, wk, wv, wo, the norms and the cache). */
struct hipe_layer {
    const struct dw *wq, *wk, *wv, *wo;
    uint64_t attn_norm, q_norm, k_norm; /* f32 [n_embd], [head_dim], [head_dim] or 0 */
    uint64_t kc, vc;                    /* [n_seq][n_ctx][kv_dim] or 0 */
};
void hipe_layer_of(const struct hip_engine *c, int il, struct hipe_layer *out);

int hipe_dalloc(struct hip_engine *c, size_t n, uint64_t *out, struct err *e);
int hipe_up_wt(struct hip_engine *c, struct stager *s, const struct wt *w, struct dw *d, struct err *e);
int hipe_up_vec(struct hip_engine *c, struct stager *s, const struct vec *v, uint64_t *d, struct err *e);
/* y[z] (op)= W·x[z / x_div] (+ bias), hip_engine.c's mm; q as there (1: the input's q8 copy is in the
 * engine's xq buffer). mode as gemv_args (0 store, 1 add, 2 SwiGLU of W and W2, 3 two outputs). */
int hipe_mm(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int x_div,
            int nz, uint64_t y, int y_stride, uint64_t bias, uint64_t bias2, uint64_t sel, int mode, int q,
            struct err *e);
/* y = W·x and y2 = W2·x in one pass over x (same shape and type, GEMV-sized batches) */
int hipe_mm_dual(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int nz,
                 uint64_t y, uint64_t y2, int y_stride, int q, struct err *e);
/* y[r] = rmsnorm(x[r]) · w for nr rows of n; with q also its q8 copy for the next GEMV */
int hipe_rms(struct hip_engine *c, uint64_t y, uint64_t x, uint64_t w, int nr, int n, bool q, struct err *e);
/* q8 copy of x [rows][k] for the GEMV that follows */
int hipe_quant(struct hip_engine *c, uint64_t x, int rows, int k, int x_stride, struct err *e);
/* whether GEMVs over k inputs run on a q8 copy, and whether weight type t has such a kernel */
bool hipe_want_q8(const struct hip_engine *c, int k, int t);

#endif
