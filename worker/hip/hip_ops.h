/* hip_ops.h — the `hip` backend's launch layer: the device weight record,
 * uploads, and the launch helpers every layer builds on (weight products
 * through GEMV / multi-token GEMV / tensor-core or tiled GEMM, RMSNorm, q8
 * quantization, elementwise kernels), over one core struct that holds the
 * runtime, the tuning knobs, the kernel handles, the per-layer device
 * weights and the step buffers the layers share. hip_hybrid.c builds on this
 * alone; hip_engine.c owns a struct hip_ops and builds on both. Internal to
 * the hip backend. */
#ifndef LLM170_HIP_OPS_H
#define LLM170_HIP_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../kernels/args.h"
#include "../backend/backend.h"
#include "../model/model.h"
#include "hip_knobs.h"
#include "hip_rt.h"
#include "hip_scratch.h"

struct dw {                /* a weight on the device */
    struct hip_dptr d;     /* none when absent */
    int type;              /* ggml type id */
    int64_t ne0, ne1, ne2; /* elements per row, rows, experts */
    size_t row_bytes;
};

/* The weights' way up: page-locked buffers of cap bytes the host copies chunks into, the device reads them
 * with async copies. Two alternate (hip_knobs.upload_pipe) so the memcpy of chunk i+1 runs while chunk i
 * crosses the bus; a buffer is written again only after the event recorded behind its last copy. One
 * (buf[1] NULL): each chunk is waited for, as before the pipeline. */
struct stager {
    void *buf[2];          /* pinned; buf[1] NULL: one buffer */
    hip_event ev[2];       /* recorded after the last copy out of buf[i]; NULL: the stream is synchronized */
    bool busy[2];          /* a copy out of buf[i] may still run */
    int cur;               /* the buffer the next chunk goes into */
    size_t cap;            /* bytes of each buffer */
};

/* A layer's device weights (the attention and FFN tensors; the hybrids' own live in hip_hybrid.c) and
 * its KV cache. */
struct hip_ops_layer {
    struct dw wq, wk, wv, wqkv, wo, gate, up, down, gate_inp, gate_exps, up_exps, down_exps;
    struct hip_dptr attn_norm, ffn_norm, q_norm, k_norm;            /* f32 vectors or none */
    struct hip_dptr bq, bk, bv, bqkv, bo, b_gate, b_up, b_down;     /* f32 biases or none */
    struct hip_dptr kc, vc; /* [n_seq][n_ctx][kv_dim] cache, none without a KV slab */
};

/* The launch core: what the helpers below read, and what every layer shares. B = n_batch, E = n_embd. */
struct hip_ops {
    const struct model *m;
    struct engine_params p;   /* resolved (n_ctx, n_batch, n_seq > 0) */
    struct hip_knobs k;       /* the settings the engine was created with (hip_knobs.h) */
    struct hip_rt *rt;
    int warp;
    int sms;                  /* multiprocessors, for the GEMV rows-per-block choice */
    /* kernels of the products */
    hip_fn gemv[QT_COUNT], gemm[QT_COUNT], gemvq[QT_COUNT];
    hip_fn gemvq_r[4][QT_COUNT]; /* q8 GEMV with 2 << i rows per block (i = 0, 1, 2; kernels/gemv.cu) */
    hip_fn gemv_dn[QT_COUNT], gemvq_dn[4][QT_COUNT]; /* the same on an input whose RMSNorm is deferred (*_dn) */
    /* single-token q8 GEMV streamed through shared memory (kernels/gemvs.cu), [x kept in registers][on a deferred
     * norm's input] by type, or NULL; its dynamic shared memory limit raised to smem_optin */
    hip_fn gemvs[2][2][QT_COUNT];
    bool use_gemvs;        /* hip_knobs.gemvs */
    int smem_optin;        /* most dynamic shared memory a block may take (hip_rt_smem_optin) */
    hip_fn gemvb[2][QT_COUNT];   /* multi-token q8 GEMV, modes 0/1 (kernels/gemvb.cu): [0] 8 tokens, [1] 16 a block */
    hip_fn gemvbd[2][QT_COUNT];  /* the same for the dual modes 2/3 */
    int gemvb_t;           /* tokens a multi-token GEMV block takes over 8 (8: two passes, 16: one), 0: off
                              (hip_knobs.gemvb_t) */
    hip_fn gemvbm[2][QT_COUNT]; /* the same on int8 tensor cores, [0] modes 0/1, [1] modes 2/3 (NVIDIA) */
    int gemvbm_min;        /* batches from this many tokens on take gemvbm (hip_knobs.gemvbm_min) */
    hip_fn gemvbp[2][QT_COUNT]; /* gemvbm with the weights streamed through shared memory, its limit raised to
                                   GEMVBP_SMEM; NULL where absent or switched off */
    bool use_gemvbp;       /* hip_knobs.gemvbp */
    hip_fn gemvbf[2][QT_COUNT]; /* gemvbp on activations in fragment order (gemvbp*_f; hip_knobs.xfrag), else NULL */
    hip_fn k_q8_frag;      /* writes that order into xf / xfd before a gemvbf launch */
    bool use_xfrag;        /* hip_knobs.xfrag */
    struct hip_dptr xf, xfd; /* [2 tiles][k / 64][512 bytes], [2][k / 32][8] (d, d·Σq) pairs */
    int gemv_r;            /* rows per block of the q8 GEMV: 0 = chosen per product (hip_knobs.gemv_r) */
    int gemv_warps;        /* most warps a GEMV block takes: 0 = by the row (hip_knobs.gemv_warps) */
    hip_fn mma[QT_COUNT], mma32[QT_COUNT], mma128[QT_COUNT]; /* tensor-core GEMM, 64 / 32 / 128 tokens a block */
    int mma_t;             /* tokens per tensor-core GEMM block: 32, 64, 128, or 0 (by batch size) */
    int mma_fill;          /* split K of small grids by modelled time: -1 the 64-token tile, 1 every tile, 0 none
                              (hip_knobs.mma_fill) */
    int mma_waves;         /* split-K threshold of a tensor-core GEMM's last wave, percent (0 = never) */
    hip_fn k_mma_xprep;    /* a tensor-core product's activations as scaled f16 rows (mma_xprep) */
    hip_fn k_swiglu_rows;  /* SwiGLU by rows writing that f16 copy too (kernels/misc.cu swiglu_rows) */
    bool use_mma;          /* tensor-core GEMM for quantized and f16 weights in batches over GEMV_MAX */
    hip_fn wg[2][QT_COUNT]; /* the same on warpgroup MMA (kernels/wgmma.cu, sm_90a): 64 / 128 tokens, or NULL */
    int use_wg;            /* wg in place of the mma tiles where present: 1 the 128-token tile, 2 the 64 too, 0 none
                              (hip_knobs.use_wg) */
    bool streamk;          /* the dense wg tiles as one wave of blocks sharing all tiles' k steps (hip_knobs.streamk) */
    hip_fn k_fattn[3];     /* prompt attention on tensor cores (kernels/fattn.cu fattn_64 / _128 / _256), by head size
                              (hip_ops_fattn); NULL where absent or its shared memory does not fit */
    hip_fn k_quant, k_rms;
    bool q8;               /* GEMV of quantized weights on q8 activations (dp4a), as llama.cpp's MMVQ */
    bool pf;               /* PDL on and hip_knobs.pdl_prefetch: GEMV blocks pull their weight rows into L2
                              before the wait (gemv_args.pf) */
    /* weights */
    struct hip_ops_layer *L; /* [n_layer] */
    struct hip_dptr *allocs; /* every device allocation, freed by hip_ops_release */
    int n_allocs, cap_allocs;
    size_t kv_elt;         /* bytes of a KV cache element (2: f16, 4: f32) */
    int W;                 /* width of a qkv row: nq_max + 2·nkv_max */
    /* the step buffers the layers share (device) */
    struct hip_dptr x;     /* [B][E] residual stream */
    struct hip_dptr h;     /* [B][E] normed input (x∘w, unnormed, while h_def) */
    struct hip_dptr qkv;   /* [B][W] Q | K | V */
    struct hip_dptr o;     /* [B][nq_max] attention output */
    struct hip_dptr part;  /* [SPLIT_TOKENS][n_head][DEC_SPLIT_MAX(hd)][hd + 2] attention partials */
    struct hip_dptr io;    /* ints [4][B]: tok, pos, seq, out_rows; then f32 cs [B][n_rot] */
    struct hip_dptr xq, xqd; /* q8 copy of the current GEMV input: int8 [rows][K], (d, d·Σq) [rows][K/32] */
    struct hip_dptr fq, fqd; /* q8 copy of the SwiGLU output made by the gate/up GEMV: [GEMV_MAX·Kq][F],
                                [..][F/32][2] */
    struct hip_dptr hq, hqd; /* the deferred RMSNorm's input rows x∘w (in h) as q8, written by the residual GEMV
                              before (norm_group_tail): int8 [GEMV_MAX][E], (d, d·Σq) [GEMV_MAX][E/32][2]. Not xq:
                              Wo, which writes it, reads o's q8 copy from there */
    struct hip_dptr hsp;   /* Σ x² of those rows per 32-group [GEMV_MAX][E/32] */
    struct hip_dptr xsc;   /* f32 [rows] the row scales of a tensor-core product's activations (mma_xprep) */
    struct hip_dptr xh;    /* f16 [rows][k] those activations, scaled */
    size_t xh_cap, xsc_cap; /* elements of xh and xsc (hip_scratch's plan) */
    struct hip_dptr ncnt;  /* int counters of that tail [GEMV_MAX][E/32] (and [0] the routing tail's), zero between
                              launches */
    /* the step being enqueued */
    struct hip_dptr next_norm; /* the next sublayer's RMSNorm weight the coming residual GEMV defers, or none */
    bool h_def;            /* h / hq / hsp hold the coming sublayer's input with its norm deferred (not xq) */
    bool x_ready;          /* the coming product's input rows are in xh / xsc as f16 already (hip_ops_rms or
                              hip_ops_swiglu_f16 wrote them): a tensor-core GEMM skips mma_xprep; asked of that
                              launch only */
};

/* The f16 copy of `rows` activation rows x (k elements, x_stride apart) into xh with their range scales in
 * xsc, for the tensor-core product a on them (sets a->xh, a->xsc): mma_xprep. zero_y: it also zeroes a's
 * destination rows (one per x row: a split-K mode-0 product adds its slices into them). */
int hip_ops_xprep(struct hip_ops *c, uint64_t x, int rows, int k, int x_stride, struct gemv_args *a, bool zero_y,
                  struct err *e);

/* Frees every tracked device allocation and the list (the runtime stays open). */
void hip_ops_release(struct hip_ops *c);
/* Device memory of n bytes, tracked for hip_ops_release. */
int hip_ops_dalloc(struct hip_ops *c, size_t n, struct hip_dptr *out, struct err *e);
/* A stager of buffers of cap bytes: two when c->k.upload_pipe and the second buffer and the events can be
 * had, else one (the first buffer failing is the error). */
int hip_ops_stager_open(struct hip_ops *c, struct stager *s, size_t cap, struct err *e);
/* Waits for the copies still running, then frees the buffers and events: 0 or the wait's error. */
int hip_ops_stager_close(struct hip_ops *c, struct stager *s, struct err *e);
/* n bytes from src to the device at dst through the stager. With two buffers it returns while the last
 * chunks may still be crossing (src may be reused at once: the bytes are in the stager); they are done
 * after hip_ops_stager_close or any synchronization of the stream. With one, each chunk is waited for. */
int hip_ops_upload(struct hip_ops *c, struct stager *s, struct hip_dptr dst, const void *src, size_t n, struct err *e);
/* Whether the kernels cover weight type t. */
bool hip_ops_type_ok(int t);
/* d = w on the device (zeroed when w is absent); ERR_UNSUPPORTED for a type the kernels lack. */
int hip_ops_up_wt(struct hip_ops *c, struct stager *s, const struct wt *w, struct dw *d, struct err *e);
int hip_ops_up_vec(struct hip_ops *c, struct stager *s, const struct vec *v, struct hip_dptr *d, struct err *e);

/* The tensor-core prompt attention (kernels/fattn.cu) for head size hd: its kernel where present, NVIDIA
 * warps and hip_knobs.use_fa on, else NULL (the caller keeps attn); the caller checks the batch is one
 * sequence's prompt on an f16 cache. hip_ops_fattn_load looks the kernels up once (the engine's create);
 * hip_ops_fattn_launch runs one for n tokens over n_head heads (64 tokens of one head a block). */
void hip_ops_fattn_load(struct hip_ops *c);
hip_fn hip_ops_fattn(const struct hip_ops *c, int hd);
int hip_ops_fattn_launch(struct hip_ops *c, int hd, int n, int n_head, const struct attn_args *a, struct err *e);

/* whether GEMVs over k inputs run on a q8 copy */
bool hip_ops_want_q8(const struct hip_ops *c, int k);
/* Launch a product: GEMV (small batches, expert slices, the dual modes) or the tiled GEMM. q: 1 when
 * c->xq/xqd, 2 when c->fq/fqd hold the input quantized to q8 (rows of w->ne0), so GEMV may use the dp4a
 * kernels; 0 when no q8 copy exists; 3 when the input (c->h, as q8 c->hq/hqd) is x∘w with its RMSNorm
 * deferred (c->hsp), which only the per-token GEMV takes. Consumes c->next_norm. */
int hip_ops_launch_mm(struct hip_ops *c, struct gemv_args *a, const struct dw *w, const struct dw *w2, int q,
                      struct err *e);
/* A weight product y[z] (op)= W · x[z / x_div] (+ bias), z < nz (hip_ops_mm, hip_ops_mm_dual). */
struct hip_mm {
    const struct dw *w, *w2;      /* the weight; the second one of modes 2 and 3 (else NULL) */
    struct hip_dptr x;            /* f32 input rows, x_stride floats apart */
    int x_stride;
    int x_div;                    /* output row z reads input row z / x_div (1: one input row per output row) */
    int nz;                       /* output rows */
    struct hip_dptr y, y2;        /* f32 outputs [nz][y_stride] (y2: hip_ops_mm_dual's second) */
    int y_stride;
    struct hip_dptr bias, bias2;  /* f32 [rows of w] / [rows of w2] added, or none */
    struct hip_dptr sel;          /* int [nz] expert of each output row (expert slices), or none */
    int mode;                     /* as gemv_args: 0 store, 1 add, 2 SwiGLU of W and W2 */
    int q;                        /* where the input's q8 copy is, as hip_ops_launch_mm */
};
/* y (op)= W·x (+ bias) by a->mode, expert slices by a->sel when set. */
int hip_ops_mm(struct hip_ops *c, const struct hip_mm *a, struct err *e);
/* y = W·x + bias and y2 = W2·x + bias2 in one pass over x (same shape and type, GEMV-sized batches; x_div 1,
 * a->mode ignored: gemv_args mode 3) */
int hip_ops_mm_dual(struct hip_ops *c, const struct hip_mm *a, struct err *e);
/* q8 copy of x [rows][k] into xq/xqd, for the GEMV that follows */
int hip_ops_quant(struct hip_ops *c, struct hip_dptr x, int rows, int k, int x_stride, struct err *e);
/* y[r] = rmsnorm(x[rows ? rows[r] : r]) · w for nr rows of n; also its q8 copy into xq/xqd when q, and when
 * f16 the f16 copy a tensor-core GEMM reads (xh / xsc, as mma_xprep writes it: set x_ready for the products
 * on y; only where hip_ops_rms_f16_ok(c, nr, n)) */
int hip_ops_rms(struct hip_ops *c, struct hip_dptr y, struct hip_dptr x, struct hip_dptr w, struct hip_dptr rows,
                int nr, int n, int xs, int ys, bool q, bool f16, struct err *e);
/* the longest row rms_norm holds in registers (RMS_EPT 8 elements × 1024 threads, kernels/misc.cu): the
 * longest it writes an f16 copy of */
#define HIP_RMS_F16_MAX 8192
/* Whether xh / xsc can take the f16 copy of rows × k activations (the tensor-core GEMM's input); ..._rms_: and
 * rms_norm can write it for rows of n (at most HIP_RMS_F16_MAX, which its register path holds). */
bool hip_ops_f16_ok(const struct hip_ops *c, int rows, int k);
bool hip_ops_rms_f16_ok(const struct hip_ops *c, int rows, int n);
/* g = silu(g) · u over rows of n (contiguous) and g's f16 copy into xh / xsc (x_ready for the product on g). */
int hip_ops_swiglu_f16(struct hip_ops *c, struct hip_dptr g, struct hip_dptr u, int rows, int n, struct err *e);
/* an elementwise kernel f(a, b, n) over n elements */
int hip_ops_ew(struct hip_ops *c, hip_fn f, struct hip_dptr a, struct hip_dptr b, int n, struct err *e);

#endif
