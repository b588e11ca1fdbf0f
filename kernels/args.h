/* args.h — kernel argument blocks, shared by the kernels (compiled at run
 * time) and the host (worker/hip/hip_engine.c). Each kernel takes one struct by
 * value; device pointers are 64-bit on both sides (DP), so the layout is the
 * same for the host C compiler and NVRTC/hipRTC. Keep fields 8-byte ones
 * first, then 4-byte ones, and an even count of 4-byte fields. */
#ifndef LLM170_KERNEL_ARGS_H
#define LLM170_KERNEL_ARGS_H

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
#define DP(T) T *
typedef long long a_i64;
typedef int a_i32;
#else
#include <stdint.h>
#define DP(T) uint64_t
typedef int64_t a_i64;
typedef int32_t a_i32;
#endif

/* Weight types, numbered as ggml numbers them. */
#define KT_F32 0
#define KT_F16 1
#define KT_Q8_0 8
#define KT_Q4_K 12
#define KT_Q5_K 13
#define KT_Q6_K 14
#define KT_IQ4_XS 23

/* y[z][r] (op) W[r] · x[z / x_div] for r < n_rows, z < nz.
 * mode 0: y = dot + bias; 1: y += dot + bias; 2: y = silu(W·x + bias) * (W2·x + bias2);
 * 3: y = W·x + bias and y2 = W2·x + bias2 (two projections of one input, e.g. K and V);
 * 4: y[z] += Σ_s sw[z·nslot + s] · (W_sel[z·nslot + s] · x[z·nslot + s]), s < nslot (MoE down
 *    projection of every selected expert with the weighted combine: one output row per token). */
/* dynamic shared memory of the tensor-core prompt attention (fattn.cu fattn_64 / _128 / _256) for head size hd:
 * two stages of a 64-position K and V tile, rows padded by 8 halves; head size 256 also its 64 Q rows */
#define FATTN_SMEM(hd) (2 * 2 * 64 * ((hd) + 8) * 2 + ((hd) > 128 ? 64 * ((hd) + 8) * 2 : 0))
/* the short-cache decode attention (fattn.cu fattn_dec4_128): DEC4_W warps a block, each with a ring of DEC4_ST
 * stages of 16 positions' K and V rows (pitch hd + 8 halves), after the group's 16 f16 query rows */
#define DEC4_W 4
#define DEC4_ST 3
#define FATTN_DEC4_SMEM(hd) ((DEC4_W * DEC4_ST * 2 * 16 + 16) * ((hd) + 8) * 2)
/* dynamic shared memory of the tensor-core GEMM's tile of mt tokens (mma.cu), rows padded to 72 halves:
 * 64 tokens, two f16 tiles of 128 weight rows × 64 k, then MMA_STAGES stages of its cp.async pipeline (two
 * 16-byte weight chunks a thread, 64 activation rows; two blocks still fit a multiprocessor); 128 tokens,
 * two stages of 128 weight rows and 128 tokens (registers carry the loads: the cp.async pipeline measured
 * slower there); the 32-token tile none (static). Types without chunks use two weight and two activation
 * tiles of the 64-token size. */
#define MMA_STAGES 4
#define MMA_SMEM(mt)                                                                                                   \
    ((mt) == 32 ? 0 : (mt) == 64 ? 2 * 128 * 72 * 2 + MMA_STAGES * (2 * 256 * 16 + 64 * 72 * 2) : 2 * (128 + 128) * 72 * 2)
/* dynamic shared memory of the warpgroup-MMA GEMM's tile of mt (64, 128) tokens (wgmma.cu, sm_90a): two f16
 * tiles of 128 weight rows × 64 k, then WG_STAGES activation tiles of mt tokens × 64 k */
#define WG_STAGES 3
#define WG_SMEM(mt) (2 * 128 * 64 * 2 + WG_STAGES * (mt) * 64 * 2)
/* ring stages a warp of the streamed GEMV (gemvs.cu) holds, each one row of each matrix: its dynamic shared
 * memory is warps · GEMVS_STAGES · row bytes (twice that in the dual modes) */
#define GEMVS_STAGES 4
/* the streamed multi-token GEMV (gemvb.cu gemvbp_*, 8 warps a block): each warp's ring holds GEMVBP_STAGES stages
 * of 16 rows' 256-element chunk windows of each matrix, GEMVBP_WIN bytes apart (q4_K 144, q5_K 176, q8_0 272: the
 * chunk; q6_K 240: a 224-byte window around its 2-aligned 210-byte chunk, padded so 8 rows hit distinct banks) */
#define GEMVBP_WIN(t) ((t) == KT_Q4_K ? 144 : (t) == KT_Q5_K ? 176 : (t) == KT_Q8_0 ? 272 : 240)
#define GEMVBP_STAGES(t, dual) ((dual) || (t) == KT_Q8_0 || (t) == KT_Q6_K ? 2 : 3)
#define GEMVBP_SMEM(t, dual) (8 * GEMVBP_STAGES(t, dual) * ((dual) ? 2 : 1) * 16 * GEMVBP_WIN(t))

struct gemv_args {
    DP(const unsigned char) w;   /* [n_rows][row_bytes] (expert 0 when sel is set) */
    DP(const unsigned char) w2;  /* second matrix of mode 2, same shape, or 0 */
    DP(const float) x;           /* [..][x_stride] activation rows */
    DP(float) y;                 /* [nz][y_stride] */
    DP(float) y2;                /* mode 3: [nz][y_stride] */
    DP(const float) bias;        /* [n_rows] or 0 */
    DP(const float) bias2;       /* [n_rows] or 0 (mode 2) */
    DP(const int) sel;           /* [nz] expert id per z (its slice = w + sel·expert_bytes), or 0 */
    DP(const float) xd;          /* q8 GEMV only: [..][x_stride / 32][2] (d, d·Σq) per 32 activations;
                                    x then points to the int8 quants [..][x_stride] */
    DP(signed char) yq;          /* mode 2 GEMV: also a q8 copy of y, [nz][n_rows] (n_rows % 32 == 0), or 0 */
    DP(float) yqd;               /* [nz][n_rows / 32][2] (d, d·Σq) */
    DP(int) cnt;                 /* [nz][n_rows / 32] counters, zero between launches: blocks done per 32 rows */
    DP(const float) sw;          /* mode 4: [nz][nslot] expert weights of the token's slots */
    DP(const float) nw;          /* modes 1 and 4 (n_rows = the residual width): the next sublayer's RMSNorm
                                    weight [n_rows], or 0. Its norm is deferred to the GEMVs reading it
                                    (rsp below): the block completing each 32-row group of y[z] writes */
    DP(float) ny;                /*   y[z]·nw (unnormed) [nz][n_rows] for the GEMVs on f32 activations */
    DP(signed char) nq;          /*   its q8 copy [nz][n_rows] (n_rows % 32 == 0) */
    DP(float) nqd;               /*   [nz][n_rows / 32][2] */
    DP(float) nsp;               /*   Σ y² of the group [nz][n_rows / 32] */
    DP(int) ncnt;                /*   counters, zero between launches: blocks done per group [nz][n_rows / 32]
                                    (the routing tail uses [0] for its blocks) */
    DP(const float) rsp;         /* GEMV on a deferred norm's input (ny or nq): Σ x² per 32-group of each input
                                    row [..][k / 32] (nsp of the GEMV that wrote x); every output of z is scaled
                                    by 1/sqrt(Σ rsp[z / x_div][..] / k + eps) before the bias, or 0 */
    DP(int) rsel;                /* mode 0 router GEMV: when set, the grid's last block routes each token from
                                    the logits y[z] (route.h): expert ids [nz][nslot], or 0 */
    DP(float) rw;                /*   their weights [nz][nslot] */
    DP(const int) gmap;          /* grouped tensor-core GEMM (mmag*, MoE prompts): [0] the tile count, then per
                                    tile (expert, first index into gperm, pairs ≤ the tile's tokens) */
    DP(const int) gperm;         /*   the pairs z < nz expert by expert (moe_group, kernels/misc.cu) */
    DP(const unsigned short) xh; /* tensor-core GEMM: the f16 copy of the activation rows it reads instead of x,
                                    k apart, row i scaled by xsc[i] (mma_xprep) */
    DP(const float) xsc;         /*   a power of two ≤ 1 per row that brings its largest |x| into f16's range;
                                    each output is divided by its row's */
    a_i64 row_bytes;
    a_i64 expert_bytes;
    a_i32 n_rows, k;             /* output rows, elements per row */
    a_i32 x_stride, y_stride;    /* elements between rows of x / y */
    a_i32 x_div, nz;
    a_i32 mode, nslot;           /* nslot: mode 4's experts per token */
    float eps;                   /* the deferred RMSNorm's epsilon (with rsp) */
    float rscale;                /* the routing tail's expert weight scale (0 or 1: none) */
    a_i32 pf;                    /* 1: prefetch the block's weight rows into L2 before the PDL wait */
    a_i32 sk;                    /* dense warpgroup-MMA GEMM: 1 = the grid's blocks share all tiles' k steps
                                    evenly (stream-K, wgmma.cu), 0 = a tile (and K slice) a block */
};

/* Per-head q/k RMSNorm + RoPE, store of K and V into the cache. Grid: (n, n_head + n_head_kv). */
struct rope_args {
    DP(float) q;                 /* [n][q_stride] rotated in place */
    DP(const float) k;           /* [n][kv_stride] */
    DP(const float) v;           /* [n][kv_stride] */
    DP(const float) q_norm;      /* [hd] or 0 */
    DP(const float) k_norm;      /* [hd] or 0 */
    DP(const float) cs;          /* [n][n_rot] cos/sin pairs (ops_rope_cache) */
    DP(unsigned char) kc;        /* layer K cache [n_seq][n_ctx][kv_dim] */
    DP(unsigned char) vc;
    DP(const int) pos;           /* [n] */
    DP(const int) seq;           /* [n] */
    a_i64 seq_stride;            /* elements between sequences in the cache */
    a_i32 q_stride, kv_stride;
    a_i32 hd, n_rot;
    a_i32 n_head, n_head_kv;
    a_i32 neox, kv_f16;
    float eps;
    a_i32 pad;
};

/* Attention of n query tokens over their sequences' caches (causal by position). */
struct attn_args {
    DP(const float) q;           /* [n][q_stride], head h at h·hd */
    DP(float) o;                 /* [n][o_stride] */
    DP(const unsigned char) k;   /* layer cache [n_seq][n_ctx][kv_dim], f16 or f32 */
    DP(const unsigned char) v;
    DP(const int) pos;           /* [n] query position; it sees cells 0..pos of its sequence */
    DP(const int) seq;           /* [n] */
    DP(float) part;              /* [n][n_head][nsplit][hd + 2] partial (o, m, l) when nsplit > 1 */
    DP(signed char) oq;          /* attn_combine: also a q8 copy of o, [n][o_stride] (hd % 32 == 0), or 0 */
    DP(float) oqd;               /* [n][o_stride / 32][2] */
    DP(int) cnt;                 /* split counters, zero between launches ([n][n_head] for attn, [n][n_head_kv]
                                    for attn_gqa): the last split block of a head merges the partials itself,
                                    or 0: attn_combine merges them */
    a_i64 seq_stride;            /* elements between sequences = n_ctx·kv_dim */
    a_i32 kv_dim, hd;
    a_i32 n_head, n_head_kv;
    a_i32 q_stride, o_stride;
    a_i32 nsplit, kv_f16;
    float scale;
    a_i32 rope;                  /* fattn_dec_128: 1 = it does rope_store's work for its tokens (r below; every
                                    token of the step of another sequence), 0 = rope_store ran before */
    struct rope_args r;
};

#endif
