/* gdn_args.h — argument blocks of the hybrid-layer kernels (kernels/gdn.cu),
 * shared with the host (worker/hip/hip_hybrid.c) like args.h: 8-byte
 * fields first, then an even count of 4-byte ones. */
#ifndef LLM170_KERNEL_GDN_ARGS_H
#define LLM170_KERNEL_GDN_ARGS_H

#include "args.h"

/* The batch rows grouped by sequence (one group = one sequence's rows in batch order), written by
 * the host before each step: n_grp, then rows[B], grp_seq[B], grp_start[B], grp_len[B],
 * grp_fresh[B] (1 when the group starts at position 0: its incoming state counts as zero), and for
 * the token-parallel prefill kernels row_grp[B], row_step[B] (each batch row's group and step in
 * it) and the chunk list ck_grp[B], ck_c0[B] (group and first step of each GDN_CHUNK-step chunk). */
struct gdn_groups {
    DP(const int) n_grp;         /* [1] */
    DP(const int) rows;          /* [B] batch row of each step, grouped */
    DP(const int) seq;           /* [B] sequence of group g */
    DP(const int) start;         /* [B] first index of group g in rows */
    DP(const int) len;           /* [B] steps of group g */
    DP(const int) fresh;         /* [B] */
    DP(const int) row_grp;       /* [B] group of batch row r */
    DP(const int) row_step;      /* [B] step of batch row r inside its group */
    DP(const int) ck_grp;        /* [B] group of chunk c (chunks of all groups, in group order) */
    DP(const int) ck_c0;         /* [B] first step of chunk c inside its group */
};

#define GDN_GRP_INTS(B) (1 + 9 * (B)) /* ints of the host's group table for a batch of B rows */
#define GDN_CK 64                     /* steps per chunk of the chunked delta rule (gdn.h GDN_CHUNK) */

/* Causal depthwise conv + SiLU over each group's rows, carrying the last d_conv − 1 inputs.
 * gdn_conv: grid (n, ceil(conv_dim / blockDim)), one thread per channel walking its group's steps
 * (decode); a block past n_grp returns. Prefill: gdn_conv_tok, grid (n, ⌈conv_dim / blockDim⌉), one
 * thread per (row, channel) reading the d_conv − 1 inputs before it (from the state before the
 * group's first step), then gdn_conv_state, grid (n, ⌈conv_dim / blockDim⌉), rolls each group's
 * state forward (a block past n_grp returns). */
struct gdn_conv_args {
    struct gdn_groups g;
    DP(const float) in;          /* [n][conv_dim] projection q | k | v */
    DP(float) out;               /* [n][conv_dim] */
    DP(const float) w;           /* [conv_dim][d_conv] taps, oldest first */
    DP(float) state;             /* sequence s's layer state at state + s·seq_stride: [d_conv−1][conv_dim] */
    a_i64 seq_stride;            /* floats between sequences */
    a_i32 conv_dim, d_conv;
};

/* Gated DeltaNet of one value head over a group's steps (spec arch-qwen35.md §6.4): gates from
 * the raw projections (β = σ(b), g = softplus(a + dt)·A), q/k L2-normed (x / max(‖x‖, eps)),
 * then per step S ← e^g S; δ = β (v − Sᵀk); S ← S + k δᵀ; o = scale · Sᵀq.
 * Grid: (n, H_v, ceil(d_v / 32)), 32 threads: thread j owns value column 32·z + j and keeps its
 * d_k state entries in registers. */
/* Chunked form for prefill (spec §6.4, docs/hybrid-models.md): gdn_chunk_prep, grid (chunks, H_v),
 * 256 threads, makes each chunk's W, U, P and scales in parallel; gdn_chunk_scan, grid (n_grp, H_v,
 * ⌈d_v / 32⌉), 256 threads, walks a group's chunks carrying 32 value columns of the state:
 * δ = U − W·S, o = scale·(e^G ⊙ q̂·S + P·δ), S ← e^{G_L} S + Σ_m e^{G_L − G_m} k̂_m δ_mᵀ. */
struct gdn_rec_args {
    struct gdn_groups g;
    DP(const float) qkv;         /* [n][conv_dim] conv output: q (H_k·d_k) | k (H_k·d_k) | v (H_v·d_v) */
    DP(const float) b;           /* [n][H_v] raw β projection */
    DP(const float) a;           /* [n][H_v] raw α projection */
    DP(const float) dt;          /* [H_v] */
    DP(const float) A;           /* [H_v] (negative) */
    DP(float) o;                 /* [n][H_v·d_v] */
    DP(float) state;             /* sequence s's layer state at state + s·seq_stride: [H_v][d_k][d_v] */
    /* chunked form only (gdn_chunk_prep writes, gdn_chunk_scan reads), per batch row r and value head */
    DP(float) wu;                /* [n][H_v][d_k + d_v]: W = T·diag(β e^G)·k̂ then U = T·diag(β)·v, T = (I + M)⁻¹ */
    DP(float) p;                 /* [n][H_v][GDN_CK]: (q̂_i·k̂_m) e^{G_i − G_m} for m ≤ i of the chunk, else 0 */
    DP(float) sc;                /* [n][H_v][4]: ‖q‖⁻¹e^{G_i}, ‖k‖⁻¹e^{G_L − G_i}, e^{G_L} (L: chunk's last step), 0 */
    a_i64 seq_stride;
    a_i32 conv_dim, n_k_heads;
    a_i32 n_v_heads, d_v;
    float scale, eps;
};

#endif
