/* hip_knobs.h — the `hip` backend's tuning settings, read from the
 * environment once (hip_knobs_from_env) and handed to hip_engine_create, so
 * an engine's behaviour is fixed by one struct the caller can see and set
 * (benchmarks, A/B runs) instead of by getenv calls spread over the files.
 * Every knob defaults to the measured-fastest choice; the environment names
 * are LLM170_HIP_<NAME>. The runtime's own settings (device and vendor
 * choice, kernel cache, PDL itself) stay with hip_rt.c, which reads them
 * when it opens the device. */
#ifndef LLM170_HIP_KNOBS_H
#define LLM170_HIP_KNOBS_H

#include <stdbool.h>

struct hip_knobs {
    /* host_alloc page-locks (default on). PINNED=0: plain malloc, for A/B runs of the copy path */
    bool pinned;
    /* cold start: weights go up through two alternating pinned buffers, the memcpy of one chunk overlapping
     * the copy of the one before (default on). UPLOAD_PIPE=0: one buffer, each chunk waited for */
    bool upload_pipe;
    /* cold start: host threads that compile the kernel modules (or read them from the disk cache) at open:
     * 0 (default) = one per online core, at most one a module; COMPILE_THREADS=1 one after another.
     * COMPILE_THREADS=n (n >= 0, else the default) */
    int compile_threads;
    /* cold start: NVRTC's -split-compile (its optimizer on several threads inside one module; gemv.cu alone
     * is most of a cold compile): -1 (default) off, 0 every core, n threads. SPLIT_COMPILE=1 every core,
     * =n (n >= 2) n threads, other values off. Off by default: the code is not byte-identical to a plain
     * compile and its speed is not measured yet */
    int split_compile;
    /* decode steps (batches of up to 16 rows) replayed as captured graphs (default on). GRAPH=0 launches
     * every kernel each step: for profiling or for ruling graphs out when chasing a bug */
    bool graphs;
    /* GEMV of quantized weights on activations quantized to q8 per 32 (dp4a; llama.cpp CUDA's MMVQ scheme,
     * ~1e-3 from the CPU's q8_K) instead of f32 activations (default on). Q8=0: f32 activations, closer to
     * the CPU, slower */
    bool q8;
    /* tensor-core GEMM (kernels/mma.cu, f16 operands) for batches over the GEMV size (default on). MMA=0
     * keeps the FMA GEMM (a device without tensor cores takes it anyway) */
    bool use_mma;
    /* the tensor-core GEMM's tiles on Hopper's warpgroup MMA (kernels/wgmma.cu, sm_90a, where the device has
     * them): 1 (default) the 128-token tile and the MoE grouped 64- and 128-pair tiles, 2 the dense 64-token
     * tile too (measured slower: batched decode B = 64 4898 → 4311 t/s on the H100), 0 the mma.sync tiles */
    int use_wg;
    /* the dense warpgroup-MMA tiles as stream-K (kernels/wgmma.cu): one wave of blocks sharing every tile's
     * k steps evenly, tiles cut between blocks adding with atomics, instead of a tile a block with K split
     * by the wave rules (default on: qwen3-8b pp512 +20 % on the H100). STREAMK=0 for the tile grid */
    bool streamk;
    /* single-token steps defer each sublayer's RMSNorm to its GEMVs (kernels/gemv.cu norm_group_tail)
     * instead of an rms_norm launch (default on). DEFER_NORM=0 keeps rms_norm */
    bool defer_norm;
    /* MoE routing in the router GEMV's last block instead of the moe_route kernel (default off: measured
     * no faster). FUSE_ROUTE=1 turns it on */
    bool fuse_route;
    /* Q, K and V of dense models uploaded as one [Q | K | V] matrix where they can be, one GEMV fewer a
     * layer (default on; +3.3 % tg128 on qwen3-8b). QKV=0 keeps three */
    bool join_qkv;
    /* the last split block of an attention head merges the splits instead of an attn_combine launch
     * (default off: no faster measured with PDL on). FUSE_ATTN=1 turns it on */
    bool fuse_attn;
    /* greedy argmax over 128 blocks a row (argmax_split; default on) instead of one block a row.
     * ARGMAX_SPLIT=0 for the one-block kernel */
    bool amax_split;
    /* rows per block of the q8 GEMV: 0 (default) = chosen per product (4 when that leaves two blocks per
     * multiprocessor, else 2); GEMV_R=2|4|8 fixes it (other values: the default), for tuning a new device */
    int gemv_r;
    /* most warps a GEMV block takes: 0 (default) = by the row's length (gemv_threads); GEMV_WARPS=1..8
     * caps every block (other values: the default), for tuning a new device */
    int gemv_warps;
    /* decode steps whose tokens are each of another sequence, on caches over 256 positions, do rope_store's
     * q/k norm, RoPE and K/V store inside the tensor-core decode attention, one launch fewer a layer
     * (default on). ROPE_ATTN=0 */
    bool rope_attn;
    /* single-token q8 products through the streamed GEMV (kernels/gemvs.cu: a block a multiprocessor, each
     * warp its rows through a cp.async ring) where it fits (default on; NVIDIA sm_80+). GEMVS=0 for gemv.cu */
    bool gemvs;
    /* tokens a multi-token GEMV block takes (kernels/gemvb.cu): 8 (default: batches over 8 in two passes),
     * 16 (one pass), 0 (off: per-token GEMV or GEMM). GEMVB=0|16 (other values: 8) */
    int gemvb_t;
    /* batches from this many tokens on take the int8 tensor-core multi-token GEMV (default 5: measured on
     * the H200, qwen3-8b q4_K, B = 4 813.7 t/s on dp4a vs 803.0, B = 8 1428.0 vs 1304.2). GEMVBM_MIN=n
     * (n >= 1, else the default; 17: never) */
    int gemvbm_min;
    /* the tensor-core multi-token GEMV with its weights streamed through a cp.async ring (gemvbp, default on
     * where the device has it) instead of loaded into registers chunk by chunk (gemvbm). GEMVBP=0 for gemvbm */
    bool gemvbp;
    /* the streamed multi-token GEMV (gemvbp) reads its activations from a copy in the mma B fragments' order
     * made by a q8_frag launch before it (gemvbp*_f; default on where the device has them). XFRAG=0 reads the
     * q8 rows themselves */
    bool xfrag;
    /* tokens per tensor-core GEMM block: 0 (default) = by batch size (32 up to 32 tokens, 128 from 256,
     * else 64); MMA_T=32|64|128 fixes it (any other number takes the 64-token tile), for tuning */
    int mma_t;
    /* split K of a tensor-core GEMM whose last wave of blocks would leave the device idle: percent of wave
     * use under which to split (default 85; 0 = never). MMA_WAVES=0..100 (other values: the default) */
    int mma_waves;
    /* split K of a GEMM grid under ¾ of the resident slots into the slices of least modelled time (waves ×
     * steps a slice) instead of as many as fill the slots once: -1 (default) for the 64-token tile,
     * MMA_FILL=1 every tile, MMA_FILL=0 none */
    int mma_fill;
    /* decode attention splits bucketed by the step's longest cache (1 / 4 / 32, and on caches over 2048
     * positions one wave of fattn_dec_128's blocks where it runs; default on) instead of always 32.
     * SPLIT_BUCKETS=0 turns it off */
    bool split_buckets;
    /* decode steps of up to this many tokens split their attention over the cache (the buckets above);
     * larger ones take one split, a block per (token, KV head). Default HIP_SPLIT_TOKENS (the GEMV size,
     * for which the partials are sized); SPLIT_TOKENS=N (1..HIP_SPLIT_TOKENS) lowers it */
    int split_tokens;
    /* decode steps whose caches take at most 4 splits (up to 256 positions, SPLIT_TOKENS tokens at most) run their
     * attention as one block of DEC4_W warps a (token, KV head) that split the cache and merge in shared memory
     * (fattn_dec4_128; default on where it loads), with rope_store's work inside: no attn_combine and no
     * rope_store launch. DEC4=0 keeps fattn_dec_128's split grid */
    bool dec4;
    /* prompt attention on tensor cores (kernels/fattn.cu) for batches over the GEMV size of one sequence
     * on an f16 cache (default on). FA=0 keeps the generic kernel */
    bool use_fa;
    /* decode attention reading each K/V row once for its query-head group (attn_gqa) where the group fits
     * (default off: measured slower at depth than the per-head kernel, equal at short context). GQA=1 */
    bool gqa;
    /* GEMV blocks pull their weight rows into L2 before the PDL wait (gemv_args.pf) when the runtime
     * launches with PDL (default on). PDL_PREFETCH=0 turns the prefetch off */
    bool pdl_prefetch;
    /* hybrids: a step whose longest sequence run has at least this many rows takes the chunked Gated
     * DeltaNet form (default 16; only engines with batches over 16 rows; negative or 0 = never).
     * GDN_CHUNK=n */
    int gdn_chunk;
    /* MoE prompts (batches over the GEMV size): the (token, slot) pairs grouped by expert on the device
     * (moe_group) and the experts' products as grouped tensor-core GEMMs, one launch for all experts
     * (default on), instead of a GEMV per pair. MOE_GEMM=0 keeps the GEMVs */
    bool moe_gemm;
    /* pairs a tile of the grouped GEMM takes: 0 (default) = by the mean pairs an expert gets (32 under 8,
     * 64 up to 96, else 128: qwen3-30b-a3b pp512, 32 a mean expert, 10894 / 11874 / 11488 t/s with tiles of
     * 32 / 64 / 128 on the H200; qwen35-35b-a3b pp512, 16 a mean expert, 9340 / 10187 / 9810 on the H100 —
     * the 64- and 128-pair tiles are warpgroup MMA, the 32-pair one mma.sync); MOE_T=32|64|128 fixes it */
    int moe_t;
    /* decode attention of head size 128 on an f16 cache through the tensor-core kernel (fattn_dec_128: a
     * block per KV head and split, the query-head group as the rows of one mma operand; up to
     * HIP_DEC_SPLIT_TC splits on long caches) instead of attn (default on: qwen3-8b tg64 @ d16384 154.1 →
     * 215.0 t/s, tg128 @ d4096 263.6 → 303.3 on the H200, docs/benchmarks.md). ATTN_TC=0 keeps attn */
    bool attn_tc;
    /* after every sublayer of every step, the residual stream's largest |x| and its count of NaN / inf on
     * stderr ("hip trace: …"), to find the first operation that goes wrong on a model or a kernel (default
     * off). TRACE=1 turns it on, graphs off and each step synchronous with it: slow, for diagnosis only */
    bool trace;
    /* tensor-core GEMMs scale activation rows grown past f16's range by a power of two first (mma_xscale;
     * default on: without it such rows give inf / NaN). MMA_XSCALE=0 turns it off, for A/B runs */
    bool mma_xscale;
};

/* *k = today's defaults, overridden by the LLM170_HIP_* variables as each field above says. */
void hip_knobs_from_env(struct hip_knobs *k);

#endif
