/* hip_scratch.h — the `hip` engine's step shapes and the device buffers
 * ("scratch") a step runs in: the batch sizes that pick the decode paths,
 * and the bytes of every activation and step buffer for a model and its
 * resolved parameters. One table sizes both the allocation
 * (hip_engine_create) and the fit check before it (hip_fit.c), so the two
 * cannot drift apart; it needs no GPU. */
#ifndef LLM170_HIP_SCRATCH_H
#define LLM170_HIP_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../model/model.h"

#define HIP_GEMV_MAX 16 /* batches up to this many rows use GEMV (decode-shaped steps: q8 copies, fused epilogues,
                           split attention, graph replay) */
#define HIP_TOKEN_GEMV_MAX 8 /* ... through the per-token GEMV when the multi-token GEMV (kernels/gemvb.cu) does not
                                take the product (f32, f16 and iq4_xs weights); larger batches then take the GEMM */
#define HIP_DEC_SPLIT 32 /* attention splits of a GEMV-sized batch (few blocks otherwise) */
/* ... and of the tensor-core decode attention (kernels/fattn.cu fattn_dec_128) on caches over
 * HIP_DEC_TC_LONG positions: it reads a KV head once for its query-head group, so its blocks are
 * n_head / n_head_kv times fewer and more splits keep the device's loads in flight: as many as make one
 * token's blocks one wave of HIP_DEC_TC_BLOCKS a multiprocessor (a block is one warp with 39 KB of
 * shared stages: five fit), at most HIP_DEC_SPLIT_TC */
#define HIP_DEC_SPLIT_TC 128
#define HIP_DEC_TC_LONG 2048
#define HIP_DEC_TC_BLOCKS 5
/* the most splits a decode step of a model with head size hd takes (the partials' stride) */
#define HIP_DEC_SPLIT_MAX(hd) ((hd) == 128 ? HIP_DEC_SPLIT_TC : HIP_DEC_SPLIT)
/* Batches up to this many tokens split attention. Splitting batched decode up to 64 tokens too was
 * measured on the H200 (qwen3-8b q4_k, 128 + 128): B = 16 1474.7 vs 1446.8 t/s, B = 64 3379.7 vs
 * 3631.5 — a loss where it matters more, so GEMV-sized batches only. On fattn_dec_128 (H100, against
 * the same attn-based build in each call): one split B = 64 1.264×, B = 32 1.196×; split as far as the
 * partials held 1.254× and 1.147× — one split still. */
#define HIP_SPLIT_TOKENS HIP_GEMV_MAX
#define HIP_AMAX_SLICES 128 /* blocks a row of the greedy argmax takes (argmax_split) */
/* ints of moe_group's tile table (the grouped GEMM's gmap) for P (token, slot) pairs over X experts: the
 * count, then (expert, start, pairs) per tile of at least 32 pairs, one partial tile per expert at most */
#define HIP_GRP_MAP(P, X) (1 + 3 * (((P) + 31) / 32 + (X)))
/* bytes of topk_cut's arrays (the engine's topk buffer) for a batch of B rows over V tokens: k, count,
 * ids and values of the candidates, whether a row is masked, and each row's mask ((V + 31) / 32 words) */
#define HIP_TOPK_BYTES(B, V) ((B) * (3 + 2 * (size_t)ENGINE_CAND_CAP + ((size_t)(V) + 31) / 32) * 4)

/* The step buffers, in allocation order (io first); their shapes are the engine's fields of the same
 * name (hip_engine.c, hip_ops.h). */
enum hip_scratch_buf {
    HIP_SCR_IO, HIP_SCR_X, HIP_SCR_H, HIP_SCR_QKV, HIP_SCR_O, HIP_SCR_FG, HIP_SCR_FU, HIP_SCR_LOGITS, HIP_SCR_PART,
    HIP_SCR_RL, HIP_SCR_SEL, HIP_SCR_SW, HIP_SCR_EY, HIP_SCR_AMAX, HIP_SCR_AMX, HIP_SCR_XQ, HIP_SCR_XQD, HIP_SCR_FQ,
    HIP_SCR_FQD, HIP_SCR_FCNT, HIP_SCR_HQ, HIP_SCR_HQD, HIP_SCR_HSP, HIP_SCR_NCNT, HIP_SCR_ACNT, HIP_SCR_TOPK,
    HIP_SCR_GRP, HIP_SCR_XSC, HIP_SCR_XH, HIP_SCR_XF, HIP_SCR_XFD, HIP_SCR_COUNT
};

/* The shapes the buffers follow from, and each buffer's bytes. */
struct hip_scratch {
    int nq_max, nkv_max;   /* widest Q and K/V rows over the layers (n_head · head_dim, n_head_kv · head_dim) */
    int W;                 /* width of a qkv row: nq_max + 2·nkv_max */
    int F;                 /* widest FFN: max(n_ff_max, n_ff_exp) */
    int Kq;                /* rows of fq per token: n_expert_used for MoE (one per slot), else 1 */
    size_t bytes[HIP_SCR_COUNT];
};

/* The plan for model m with resolved params p (n_ctx, n_batch, n_seq > 0). */
void hip_scratch_plan(const struct model *m, const struct engine_params *p, struct hip_scratch *s);
/* The sum of the plan's bytes: device bytes of the activations and step buffers (the fit check). */
uint64_t hip_scratch_bytes(const struct model *m, const struct engine_params *p);

#endif
