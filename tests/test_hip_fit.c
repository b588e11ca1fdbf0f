/* test_hip_fit — the `hip` engine's device-memory requirement and its
 * refusal message (worker/hip/hip_fit.c), on the CPU: a model with the shapes of
 * qwen3-30b-a3b (q4_K layers, q6_K output) is described by hand, no file and
 * no GPU, and the expected byte counts are written out from those shapes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/hip/hip_fit.h"
#include "../worker/hip/hip_knobs.h"
#include "check.h"

#define NL 48
static const unsigned char dummy[1]; /* tensors only need to be present */
static struct layer layers[NL];

static struct wt wt(int64_t ne0, int64_t ne1, int64_t ne2, size_t row_bytes)
{
    return (struct wt){ .data = dummy, .ne = { ne0, ne1, ne2 }, .row_bytes = row_bytes, .name = "t" };
}
static struct vec vec(int64_t n) { return (struct vec){ .data = (const float *)(const void *)dummy, .n = n }; }

/* qwen3-30b-a3b: n_embd 2048, 32 query / 4 KV heads of 128, 128 experts (8 used) of width 768,
 * vocabulary 151936. q4_K rows of 2048 are 8 · 144 bytes, of 4096 16 · 144, of 768 3 · 144;
 * the q6_K output row of 2048 is 8 · 210. */
static void moe_model(struct model *m)
{
    memset(m, 0, sizeof *m);
    struct hparams *hp = &m->hp;
    hp->n_vocab = 151936, hp->n_ctx_train = 40960, hp->n_embd = 2048, hp->n_layer = NL, hp->head_dim = 128;
    hp->n_rot = 128, hp->n_head_max = 32, hp->n_head_kv_max = 4, hp->n_ff_max = 0, hp->rms_eps = 1e-6f;
    hp->n_expert = 128, hp->n_expert_used = 8, hp->n_ff_exp = 768;
    m->tok_embd = wt(2048, 151936, 1, 8 * 144);
    m->output = wt(2048, 151936, 1, 8 * 210);
    m->output_norm = vec(2048);
    for (int il = 0; il < NL; il++) {
        struct layer *ly = &layers[il];
        memset(ly, 0, sizeof *ly);
        ly->kind = LAYER_ATTN, ly->ffn = FFN_MOE, ly->n_head = 32, ly->n_head_kv = 4, ly->kv_index = il;
        ly->attn_norm = vec(2048), ly->ffn_norm = vec(2048), ly->q_norm = vec(128), ly->k_norm = vec(128);
        ly->wq = wt(2048, 4096, 1, 8 * 144);
        ly->wk = wt(2048, 512, 1, 8 * 144);
        ly->wv = wt(2048, 512, 1, 8 * 144);
        ly->wo = wt(4096, 2048, 1, 16 * 144);
        ly->gate_inp = wt(2048, 128, 1, 2048 * 4);
        ly->gate_exps = wt(2048, 768, 128, 8 * 144);
        ly->up_exps = wt(2048, 768, 128, 8 * 144);
        ly->down_exps = wt(768, 2048, 128, 3 * 144);
    }
    m->layers = layers;
    m->n_kv_layers = NL;
}

static const uint64_t per_layer = 4096ull * 1152 + 2 * 512ull * 1152 + 2048ull * 2304 + 128ull * 8192 +
                                  2 * 768ull * 128 * 1152 + 2048ull * 128 * 432 + (2048 + 2048 + 128 + 128) * 4ull;
static const uint64_t outer = 151936ull * 1152 + 151936ull * 1680 + 2048 * 4ull;

static void requirement_of_a_moe_model(void)
{
    struct model m;
    moe_model(&m);
    struct engine_params p = { .backend = BACKEND_HIP, .n_ctx = 4096, .n_seq = 1, .n_batch = 512 };
    struct hip_fit f;
    hip_fit_need(&m, &p, &f);
    CHECK(f.weights == NL * per_layer + outer, "weights %llu, expected %llu", (unsigned long long)f.weights,
          (unsigned long long)(NL * per_layer + outer));
    /* 48 layers · K and V · 4096 positions · 4 heads · 128 · 2 bytes (f16) */
    CHECK(f.kv == 48ull * 2 * 4096 * 4 * 128 * 2, "kv %llu", (unsigned long long)f.kv);
    /* the activations hold at least the logits of a full batch and the expert outputs of every slot */
    CHECK(f.act >= 512ull * 151936 * 4 + 512ull * 8 * 2048 * 4, "act %llu", (unsigned long long)f.act);
    CHECK(f.act < 2ull << 30, "act %llu", (unsigned long long)f.act);
    CHECK(f.reserve == HIP_FIT_RESERVE, "reserve");
    CHECK(f.state == 0, "a dense MoE model has no recurrent state: %llu", (unsigned long long)f.state);
    CHECK(hip_fit_total(&f) == f.weights + f.kv + f.act + f.state + f.reserve, "total");

    /* f32 cache doubles the KV part; four sequences of 8192 are eight times that again */
    p.kv_f32 = true;
    struct hip_fit g;
    hip_fit_need(&m, &p, &g);
    CHECK(g.kv == 2 * f.kv && g.weights == f.weights, "f32 kv %llu", (unsigned long long)g.kv);
    p.kv_f32 = false, p.n_seq = 4, p.n_ctx = 8192;
    hip_fit_need(&m, &p, &g);
    CHECK(g.kv == 8 * f.kv, "4 x 8192 kv %llu", (unsigned long long)g.kv);
    /* a smaller batch needs fewer activations, the same weights */
    p.n_batch = 8;
    struct hip_fit h;
    hip_fit_need(&m, &p, &h);
    CHECK(h.act < g.act && h.weights == f.weights, "act %llu vs %llu", (unsigned long long)h.act,
          (unsigned long long)g.act);
}

static void refusal_names_the_numbers(void)
{
    struct model m;
    moe_model(&m);
    struct engine_params p = { .backend = BACKEND_HIP, .n_ctx = 4096, .n_seq = 1, .n_batch = 512 };
    struct hip_fit f;
    hip_fit_need(&m, &p, &f);
    const uint64_t need = hip_fit_total(&f);
    struct err e = { 0 };
    CHECK(hip_fit_check(&f, need, "GPU X", &p, &e) == 0, "exactly enough is refused: %s", e.msg);
    CHECK(hip_fit_check(&f, need + (1ull << 30), "GPU X", &p, &e) == 0, "plenty is refused: %s", e.msg);
    /* 8 GiB free: the weights alone (~16.6 GiB) do not fit */
    int rc = hip_fit_check(&f, 8ull << 30, "GPU X", &p, &e);
    CHECK(rc == ERR_NOMEM, "rc %d", rc);
    printf("# %s\n", e.msg);
    char want[128];
    snprintf(want, sizeof want, "weights %.0f ", (double)(NL * per_layer + outer) / 1048576.0);
    CHECK(strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    CHECK(strstr(e.msg, "KV cache 384 for 1 x 4096 positions") != NULL, "kv part: %s", e.msg);
    CHECK(strstr(e.msg, "but 8192 MiB are free") != NULL, "free part: %s", e.msg);
    CHECK(strstr(e.msg, "on GPU X") != NULL, "device: %s", e.msg);
    snprintf(want, sizeof want, "needs %.0f MiB", (double)need / 1048576.0);
    CHECK(strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    /* one byte short is refused too */
    CHECK(hip_fit_check(&f, need - 1, "GPU X", &p, &e) == ERR_NOMEM, "one byte short passed");
}

/* A hybrid counts its recurrent state: per sequence and GDN layer, the conv window
 * ((d_conv − 1) · (2·H_k·d + H_v·d) floats) and the delta-rule state (H_v · d · d floats). */
static void hybrid_counts_its_state(void)
{
    const char *dir = getenv("LLM170_SHARED") ? getenv("LLM170_SHARED") : "../shared/data";
    char path[512];
    snprintf(path, sizeof path, "%s/models/synthetic/qwen35-tiny.gguf", dir);
    struct model *m = NULL;
    struct err e = { 0 };
    if (model_load(&m, path, &e) != 0)
        SKIP("no ../shared/data/models/synthetic/qwen35-tiny.gguf (set LLM170_SHARED)");
    const struct hparams *hp = &m->hp;
    const uint64_t d = (uint64_t)hp->d_state;
    const uint64_t per_seq = (uint64_t)m->n_gdn_layers *
                             ((uint64_t)(hp->d_conv - 1) * (2 * (uint64_t)hp->n_k_heads * d + (uint64_t)hp->n_v_heads * d) +
                              (uint64_t)hp->n_v_heads * d * d) * 4;
    CHECK(m->n_gdn_layers > 0 && per_seq > 0, "qwen35-tiny has GDN layers");
    struct engine_params p = { .backend = BACKEND_HIP, .n_ctx = 256, .n_seq = 8, .n_batch = 64 };
    struct hip_fit f, g;
    hip_fit_need(m, &p, &f);
    p.n_seq = 16;
    hip_fit_need(m, &p, &g);
    /* the state grows by exactly 8 sequences' worth; the step scratch depends on n_batch only */
    CHECK(g.state - f.state == 8 * per_seq, "state %llu -> %llu, per sequence %llu", (unsigned long long)f.state,
          (unsigned long long)g.state, (unsigned long long)per_seq);
    CHECK(f.state >= 8 * per_seq, "state %llu < 8 x %llu", (unsigned long long)f.state, (unsigned long long)per_seq);
    CHECK(hip_fit_total(&f) == f.weights + f.kv + f.act + f.state + f.reserve, "total");
    int rc = hip_fit_check(&g, g.weights, "GPU X", &p, &e);
    CHECK(rc == ERR_NOMEM && strstr(e.msg, "recurrent state") != NULL, "message names the state: %s", e.msg);
    model_free(m);
}

/* The tuning knobs (hip_knobs.h): the engine's defaults with no LLM170_HIP_* set, and each variable
 * parsed with its validity rule (an invalid value keeps the default). */
static void knobs_from_env(void)
{
    static const char *const names[] = {
        "LLM170_HIP_PINNED", "LLM170_HIP_GRAPH", "LLM170_HIP_Q8", "LLM170_HIP_MMA", "LLM170_HIP_DEFER_NORM",
        "LLM170_HIP_FUSE_ROUTE", "LLM170_HIP_QKV", "LLM170_HIP_FUSE_ATTN", "LLM170_HIP_ARGMAX_SPLIT",
        "LLM170_HIP_GEMV_R", "LLM170_HIP_GEMV_WARPS", "LLM170_HIP_GEMVB", "LLM170_HIP_GEMVBM_MIN",
        "LLM170_HIP_MMA_T", "LLM170_HIP_SPLIT_BUCKETS", "LLM170_HIP_MMA_WAVES", "LLM170_HIP_FA", "LLM170_HIP_GQA",
        "LLM170_HIP_PDL_PREFETCH", "LLM170_HIP_GDN_CHUNK",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
    struct hip_knobs k;
    memset(&k, 0xa5, sizeof k);
    hip_knobs_from_env(&k);
    CHECK(k.pinned && k.graphs && k.q8 && k.use_mma && k.defer_norm && k.join_qkv && k.amax_split &&
          k.split_buckets && k.use_fa && k.pdl_prefetch, "a default-on knob is off");
    CHECK(!k.fuse_route && !k.fuse_attn && !k.gqa, "a default-off knob is on");
    CHECK(k.gemv_r == 0 && k.gemv_warps == 0 && k.gemvb_t == 8 && k.gemvbm_min == 5 && k.mma_t == 0 &&
          k.mma_waves == 85 && k.gdn_chunk == 16, "numeric defaults: r %d warps %d gemvb %d bm %d mma_t %d waves %d "
          "chunk %d", k.gemv_r, k.gemv_warps, k.gemvb_t, k.gemvbm_min, k.mma_t, k.mma_waves, k.gdn_chunk);
    /* booleans turn only on their one value: "0" off, "1" on */
    setenv("LLM170_HIP_GRAPH", "0", 1);
    setenv("LLM170_HIP_Q8", "no", 1);
    setenv("LLM170_HIP_GQA", "1", 1);
    setenv("LLM170_HIP_FUSE_ATTN", "yes", 1);
    /* numbers: valid values taken, others keep the default */
    setenv("LLM170_HIP_GEMV_R", "4", 1);
    setenv("LLM170_HIP_GEMV_WARPS", "9", 1);
    setenv("LLM170_HIP_GEMVB", "12", 1);
    setenv("LLM170_HIP_GEMVBM_MIN", "17", 1);
    setenv("LLM170_HIP_MMA_WAVES", "101", 1);
    setenv("LLM170_HIP_MMA_T", "128", 1);
    setenv("LLM170_HIP_GDN_CHUNK", "-1", 1);
    hip_knobs_from_env(&k);
    CHECK(!k.graphs && k.q8 && k.gqa && !k.fuse_attn, "booleans: graphs %d q8 %d gqa %d fuse_attn %d", k.graphs,
          k.q8, k.gqa, k.fuse_attn);
    CHECK(k.gemv_r == 4 && k.gemv_warps == 0 && k.gemvb_t == 8 && k.gemvbm_min == 17 && k.mma_waves == 85 &&
          k.mma_t == 128 && k.gdn_chunk == -1, "numbers: r %d warps %d gemvb %d bm %d waves %d mma_t %d chunk %d",
          k.gemv_r, k.gemv_warps, k.gemvb_t, k.gemvbm_min, k.mma_waves, k.mma_t, k.gdn_chunk);
    setenv("LLM170_HIP_GEMVB", "0", 1);
    setenv("LLM170_HIP_GEMV_WARPS", "2", 1);
    setenv("LLM170_HIP_MMA_WAVES", "0", 1);
    hip_knobs_from_env(&k);
    CHECK(k.gemvb_t == 0 && k.gemv_warps == 2 && k.mma_waves == 0, "gemvb %d warps %d waves %d", k.gemvb_t,
          k.gemv_warps, k.mma_waves);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

int main(void)
{
    RUN(requirement_of_a_moe_model);
    RUN(refusal_names_the_numbers);
    RUN(hybrid_counts_its_state);
    RUN(knobs_from_env);
    CHECK_EXIT();
}
