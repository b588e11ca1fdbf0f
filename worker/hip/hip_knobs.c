/* hip_knobs.c — the `hip` backend's tuning settings from the environment
 * (hip_knobs.h). Each knob is parsed exactly as the engine did when it read
 * it at create: a boolean on by default turns off only on "0", one off by
 * default turns on only on "1". */
#include "hip_knobs.h"
#include "hip_scratch.h"

#include <stdlib.h>
#include <string.h>

static const char *env(const char *name) { return getenv(name); }

/* default on: off only for "0" */
static bool on_unless_0(const char *name)
{
    const char *v = env(name);
    return !(v && !strcmp(v, "0"));
}

/* default off: on only for "1" */
static bool off_unless_1(const char *name)
{
    const char *v = env(name);
    return v && !strcmp(v, "1");
}

void hip_knobs_from_env(struct hip_knobs *k)
{
    k->pinned = on_unless_0("LLM170_HIP_PINNED");
    k->upload_pipe = on_unless_0("LLM170_HIP_UPLOAD_PIPE");
    const char *cte = env("LLM170_HIP_COMPILE_THREADS");
    k->compile_threads = cte && atoi(cte) >= 0 ? atoi(cte) : 0;
    const char *sce = env("LLM170_HIP_SPLIT_COMPILE");
    k->split_compile = !sce || atoi(sce) < 1 ? -1 : atoi(sce) == 1 ? 0 : atoi(sce);
    k->trace = off_unless_1("LLM170_HIP_TRACE");
    k->mma_xscale = on_unless_0("LLM170_HIP_MMA_XSCALE");
    k->graphs = on_unless_0("LLM170_HIP_GRAPH") && !k->trace;
    k->q8 = on_unless_0("LLM170_HIP_Q8");
    k->use_mma = on_unless_0("LLM170_HIP_MMA");
    const char *wge = env("LLM170_HIP_WGMMA");
    k->use_wg = wge && (!strcmp(wge, "0") || !strcmp(wge, "2")) ? atoi(wge) : 1;
    k->streamk = on_unless_0("LLM170_HIP_STREAMK");
    k->defer_norm = on_unless_0("LLM170_HIP_DEFER_NORM");
    k->fuse_route = off_unless_1("LLM170_HIP_FUSE_ROUTE");
    k->join_qkv = on_unless_0("LLM170_HIP_QKV");
    k->fuse_attn = off_unless_1("LLM170_HIP_FUSE_ATTN");
    k->amax_split = on_unless_0("LLM170_HIP_ARGMAX_SPLIT");
    const char *gre = env("LLM170_HIP_GEMV_R");
    k->gemv_r = gre && (!strcmp(gre, "2") || !strcmp(gre, "4") || !strcmp(gre, "8")) ? atoi(gre) : 0;
    const char *gwe = env("LLM170_HIP_GEMV_WARPS");
    k->gemv_warps = gwe && atoi(gwe) >= 1 && atoi(gwe) <= 8 ? atoi(gwe) : 0;
    k->gemvs = on_unless_0("LLM170_HIP_GEMVS");
    k->rope_attn = on_unless_0("LLM170_HIP_ROPE_ATTN");
    k->dec4 = on_unless_0("LLM170_HIP_DEC4");
    const char *gbe = env("LLM170_HIP_GEMVB");
    k->gemvb_t = gbe && (!strcmp(gbe, "0") || !strcmp(gbe, "16")) ? atoi(gbe) : 8;
    const char *gme = env("LLM170_HIP_GEMVBM_MIN");
    k->gemvbm_min = gme && atoi(gme) >= 1 ? atoi(gme) : 5;
    k->gemvbp = on_unless_0("LLM170_HIP_GEMVBP");
    k->xfrag = on_unless_0("LLM170_HIP_XFRAG");
    const char *mte = env("LLM170_HIP_MMA_T");
    k->mma_t = mte ? atoi(mte) : 0;
    k->split_buckets = on_unless_0("LLM170_HIP_SPLIT_BUCKETS");
    const char *ste = env("LLM170_HIP_SPLIT_TOKENS");
    k->split_tokens = ste && atoi(ste) >= 1 && atoi(ste) <= HIP_SPLIT_TOKENS ? atoi(ste) : HIP_SPLIT_TOKENS;
    const char *mwe = env("LLM170_HIP_MMA_WAVES");
    k->mma_waves = mwe && atoi(mwe) >= 0 && atoi(mwe) <= 100 ? atoi(mwe) : 85;
    const char *mfe = env("LLM170_HIP_MMA_FILL");
    k->mma_fill = mfe && (!strcmp(mfe, "0") || !strcmp(mfe, "1")) ? atoi(mfe) : -1;
    k->use_fa = on_unless_0("LLM170_HIP_FA");
    k->gqa = off_unless_1("LLM170_HIP_GQA");
    k->pdl_prefetch = on_unless_0("LLM170_HIP_PDL_PREFETCH");
    const char *ce = env("LLM170_HIP_GDN_CHUNK");
    k->gdn_chunk = ce ? atoi(ce) : 16;
    k->moe_gemm = on_unless_0("LLM170_HIP_MOE_GEMM");
    k->attn_tc = on_unless_0("LLM170_HIP_ATTN_TC");
    const char *mt = env("LLM170_HIP_MOE_T");
    k->moe_t = mt && (!strcmp(mt, "32") || !strcmp(mt, "64") || !strcmp(mt, "128")) ? atoi(mt) : 0;
}
