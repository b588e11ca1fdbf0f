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
#include "../worker/hip/hip_scratch.h"
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
    CHECK(f.state == 0 && f.snap == 0 && f.state_per_seq == 0 && f.n_snap == 0,
          "a dense MoE model has no recurrent state: %llu, snapshots %llu", (unsigned long long)f.state,
          (unsigned long long)f.snap);
    CHECK(hip_fit_total(&f) == f.weights + f.kv + f.act + f.state + f.snap + f.reserve, "total");

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
    char want[160];
    snprintf(want, sizeof want, "weights %.2f GiB, ", (double)(NL * per_layer + outer) / 1073741824.0);
    CHECK(strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    /* 48 · 2 · 4096 · 4 · 128 · 2 bytes = 384 MiB */
    CHECK(strstr(e.msg, "KV 384.0 MiB (1 x 4096 positions)") != NULL, "kv part: %s", e.msg);
    CHECK(strstr(e.msg, "states") == NULL && strstr(e.msg, "snapshots") == NULL, "no recurrent parts: %s", e.msg);
    snprintf(want, sizeof want, "scratch %.1f MiB, reserve 256.0 MiB;", (double)f.act / 1048576.0);
    CHECK(strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    CHECK(strstr(e.msg, "; GPU X has 8.00 GiB free;") != NULL, "free part: %s", e.msg);
    snprintf(want, sizeof want, "needs %.2f GiB: ", (double)need / 1073741824.0);
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
    /* exactly a state per sequence, a snapshot per slot as large; the step scratch depends on n_batch only */
    CHECK(f.state_per_seq == per_seq && f.state == 8 * per_seq && g.state == 16 * per_seq,
          "state %llu -> %llu, per sequence %llu (expected %llu)", (unsigned long long)f.state,
          (unsigned long long)g.state, (unsigned long long)f.state_per_seq, (unsigned long long)per_seq);
    CHECK(f.n_snap == ENGINE_N_SNAP_DEFAULT && f.snap == 8ull * ENGINE_N_SNAP_DEFAULT * per_seq,
          "snapshots %d per slot, %llu", f.n_snap, (unsigned long long)f.snap);
    CHECK(g.act == f.act, "scratch %llu vs %llu", (unsigned long long)f.act, (unsigned long long)g.act);
    CHECK(hip_fit_total(&f) == f.weights + f.kv + f.act + f.state + f.snap + f.reserve, "total");
    /* the knob: 2 snapshots a slot halve that part and nothing else */
    struct hip_fit h;
    p.n_snap = 2;
    hip_fit_need(m, &p, &h);
    CHECK(h.n_snap == 2 && h.snap == 16ull * 2 * per_seq && h.state == g.state && h.act == g.act,
          "n_snap 2: %d, %llu", h.n_snap, (unsigned long long)h.snap);
    int rc = hip_fit_check(&h, h.weights, "GPU X", &p, &e);
    char want[160];
    snprintf(want, sizeof want, "snapshots %.1f MiB (2 per slot of %.1f MiB)", (double)h.snap / 1048576.0,
             (double)per_seq / 1048576.0);
    CHECK(rc == ERR_NOMEM && strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    snprintf(want, sizeof want, "states %.1f MiB,", (double)h.state / 1048576.0);
    CHECK(strstr(e.msg, want) != NULL, "no '%s' in: %s", want, e.msg);
    CHECK(strstr(e.msg, "the slots (n_seq 16), the snapshots (n_snap 2)") != NULL, "what to lower: %s", e.msg);
    model_free(m);
}

/* qwen35-27b (spec arch-qwen35.md §3, §11): n_embd 5120, 64 layers of which every 4th is gated
 * attention (16: 24 query heads + their gates, 4 KV heads of 256) and the other 48 Gated DeltaNet
 * (H_k 16, H_v 48, d_k = d_v 128, conv of 4 taps), dense FFN 17408, vocabulary 248320. Weights q4_K
 * (144 bytes per 256), the output q6_K (210 per 256). */
#define NL27 64
static struct layer layers27[NL27];
#define Q4(n) ((size_t)(n) / 256 * 144)

static void qwen35_27b(struct model *m)
{
    memset(m, 0, sizeof *m);
    struct hparams *hp = &m->hp;
    hp->n_vocab = 248320, hp->n_ctx_train = 262144, hp->n_embd = 5120, hp->n_layer = NL27, hp->head_dim = 256;
    hp->n_rot = 64, hp->n_head_max = 24, hp->n_head_kv_max = 4, hp->n_ff_max = 17408, hp->rms_eps = 1e-6f;
    hp->d_conv = 4, hp->d_state = 128, hp->n_k_heads = 16, hp->n_v_heads = 48;
    m->arch = arch_find("qwen35");
    m->tok_embd = wt(5120, 248320, 1, Q4(5120));
    m->output = wt(5120, 248320, 1, 5120 / 256 * 210);
    m->output_norm = vec(5120);
    int kv = 0, gdn = 0;
    for (int il = 0; il < NL27; il++) {
        struct layer *ly = &layers27[il];
        memset(ly, 0, sizeof *ly);
        ly->ffn = FFN_DENSE, ly->n_head = 24, ly->n_head_kv = 4;
        ly->attn_norm = vec(5120), ly->ffn_norm = vec(5120);
        ly->ffn_gate = wt(5120, 17408, 1, Q4(5120));
        ly->ffn_up = wt(5120, 17408, 1, Q4(5120));
        ly->ffn_down = wt(17408, 5120, 1, Q4(17408));
        if ((il + 1) % 4 == 0) {
            ly->kind = LAYER_GATED_ATTN, ly->kv_index = kv++;
            ly->q_norm = vec(256), ly->k_norm = vec(256);
            ly->wq = wt(5120, 2 * 24 * 256, 1, Q4(5120));
            ly->wk = wt(5120, 4 * 256, 1, Q4(5120));
            ly->wv = wt(5120, 4 * 256, 1, Q4(5120));
            ly->wo = wt(24 * 256, 5120, 1, Q4(24 * 256));
        } else {
            ly->kind = LAYER_GDN, ly->kv_index = -1, gdn++;
            ly->ssm_qkv = wt(5120, 10240, 1, Q4(5120));
            ly->ssm_z = wt(5120, 6144, 1, Q4(5120));
            ly->ssm_beta = wt(5120, 48, 1, 5120 * 4);
            ly->ssm_alpha = wt(5120, 48, 1, 5120 * 4);
            ly->ssm_out = wt(6144, 5120, 1, Q4(6144));
            ly->ssm_conv = vec(4 * 10240), ly->ssm_dt = vec(48), ly->ssm_a = vec(48), ly->ssm_norm = vec(128);
        }
    }
    m->layers = layers27;
    m->n_kv_layers = kv;
    m->n_gdn_layers = gdn;
}

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

/* 32 slots of qwen35-27b at ctx 1024 (docs/hybrid-models.md): one slot's state is 48 GDN layers of
 * (3 · 10240 + 48 · 128 · 128) floats; with the default 4 snapshots a slot the whole fits a 141 GB
 * device (H200: about 140 GiB the driver counts) with room. */
static void qwen35_27b_32_slots_fit(void)
{
    struct model m;
    qwen35_27b(&m);
    CHECK(m.arch && m.arch->hybrid && m.n_gdn_layers == 48 && m.n_kv_layers == 16, "the 27b's layer pattern");
    struct engine_params p = { .backend = BACKEND_HIP, .n_ctx = 1024, .n_seq = 32, .n_batch = 512 };
    struct hip_fit f;
    hip_fit_need(&m, &p, &f);
    const uint64_t per = 48ull * (3 * 10240 + 48 * 128 * 128) * 4;
    CHECK(per == 156893184ull, "149.6 MiB a slot: %llu", (unsigned long long)per);
    CHECK(f.state_per_seq == per && f.state == 32 * per, "states %llu, per slot %llu", (unsigned long long)f.state,
          (unsigned long long)f.state_per_seq);
    CHECK(f.n_snap == ENGINE_N_SNAP_DEFAULT && f.snap == 32ull * ENGINE_N_SNAP_DEFAULT * per, "snapshots %llu",
          (unsigned long long)f.snap);
    /* 16 attention layers · K and V · 32 · 1024 positions · 4 KV heads of 256 · 2 bytes = 2 GiB */
    CHECK(f.kv == 2ull << 30, "kv %llu", (unsigned long long)f.kv);
    const uint64_t h200 = 140ull << 30, total = hip_fit_total(&f);
    printf("# qwen35-27b, 32 x 1024, n_snap %d: weights %.2f + KV %.2f + states %.2f + snapshots %.2f + scratch "
           "%.2f + reserve %.2f = %.2f GiB\n", f.n_snap, gib(f.weights), gib(f.kv), gib(f.state), gib(f.snap),
           gib(f.act), gib(f.reserve), gib(total));
    CHECK(total < h200 / 2, "the default leaves room: %.2f GiB of 140", gib(total));
    struct err e = { 0 };
    CHECK(hip_fit_check(&f, h200, "H200", &p, &e) == 0, "fits: %s", e.msg);
    /* the largest snapshot count that still fits, for the docs */
    int most = 0;
    for (int n = 1; n <= ENGINE_N_SNAP_MAX; n++) {
        p.n_snap = n;
        struct hip_fit g;
        hip_fit_need(&m, &p, &g);
        if (hip_fit_total(&g) <= h200)
            most = n;
    }
    printf("# at most %d snapshots a slot fit 140 GiB\n", most);
    CHECK(most >= 2 * ENGINE_N_SNAP_DEFAULT, "the default is well inside: %d", most);
    /* too many is refused with the numbers */
    p.n_snap = ENGINE_N_SNAP_MAX;
    hip_fit_need(&m, &p, &f);
    int rc = hip_fit_check(&f, h200, "H200", &p, &e);
    printf("# %s\n", e.msg);
    CHECK(rc == ERR_NOMEM && strstr(e.msg, "(64 per slot of 149.6 MiB)") && strstr(e.msg, "states 4.68 GiB,") &&
              strstr(e.msg, "KV 2.00 GiB (32 x 1024 positions)") && strstr(e.msg, "H200 has 140.00 GiB free"),
          "refusal: %s", e.msg);
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
        "LLM170_HIP_PDL_PREFETCH", "LLM170_HIP_GDN_CHUNK", "LLM170_HIP_UPLOAD_PIPE", "LLM170_HIP_COMPILE_THREADS",
        "LLM170_HIP_SPLIT_COMPILE", "LLM170_HIP_TRACE", "LLM170_HIP_MMA_XSCALE", "LLM170_HIP_SPLIT_TOKENS",
        "LLM170_HIP_STREAMK", "LLM170_HIP_DEC4", "LLM170_HIP_XFRAG",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
    struct hip_knobs k;
    memset(&k, 0xa5, sizeof k);
    hip_knobs_from_env(&k);
    CHECK(k.pinned && k.graphs && k.q8 && k.use_mma && k.defer_norm && k.join_qkv && k.amax_split &&
          k.split_buckets && k.use_fa && k.pdl_prefetch && k.mma_xscale && k.streamk && k.dec4 && k.xfrag,
          "a default-on knob is off");
    setenv("LLM170_HIP_DEC4", "0", 1);
    hip_knobs_from_env(&k);
    CHECK(!k.dec4, "DEC4=0 leaves the short-cache decode attention on");
    unsetenv("LLM170_HIP_DEC4");
    setenv("LLM170_HIP_XFRAG", "0", 1);
    hip_knobs_from_env(&k);
    CHECK(!k.xfrag, "XFRAG=0 leaves the fragment-order activations on");
    unsetenv("LLM170_HIP_XFRAG");
    CHECK(!k.fuse_route && !k.fuse_attn && !k.gqa && !k.trace, "a default-off knob is on");
    /* the trace synchronises every sublayer: graphs go off with it */
    setenv("LLM170_HIP_TRACE", "1", 1);
    hip_knobs_from_env(&k);
    CHECK(k.trace && !k.graphs, "TRACE=1: trace %d, graphs %d", k.trace, k.graphs);
    unsetenv("LLM170_HIP_TRACE");
    CHECK(k.upload_pipe && k.compile_threads == 0 && k.split_compile == -1,
          "cold start: pipe %d, compile threads %d, split %d", k.upload_pipe, k.compile_threads, k.split_compile);
    CHECK(k.gemv_r == 0 && k.gemv_warps == 0 && k.gemvb_t == 8 && k.gemvbm_min == 5 && k.mma_t == 0 &&
          k.mma_waves == 85 && k.gdn_chunk == 16, "numeric defaults: r %d warps %d gemvb %d bm %d mma_t %d waves %d "
          "chunk %d", k.gemv_r, k.gemv_warps, k.gemvb_t, k.gemvbm_min, k.mma_t, k.mma_waves, k.gdn_chunk);
    /* booleans turn only on their one value: "0" off, "1" on */
    setenv("LLM170_HIP_GRAPH", "0", 1);
    setenv("LLM170_HIP_Q8", "no", 1);
    setenv("LLM170_HIP_GQA", "1", 1);
    setenv("LLM170_HIP_STREAMK", "0", 1);
    setenv("LLM170_HIP_FUSE_ATTN", "yes", 1);
    /* numbers: valid values taken, others keep the default */
    setenv("LLM170_HIP_GEMV_R", "4", 1);
    setenv("LLM170_HIP_GEMV_WARPS", "9", 1);
    setenv("LLM170_HIP_GEMVB", "12", 1);
    setenv("LLM170_HIP_GEMVBM_MIN", "17", 1);
    setenv("LLM170_HIP_MMA_WAVES", "101", 1);
    setenv("LLM170_HIP_MMA_T", "128", 1);
    setenv("LLM170_HIP_GDN_CHUNK", "-1", 1);
    setenv("LLM170_HIP_UPLOAD_PIPE", "0", 1);
    setenv("LLM170_HIP_COMPILE_THREADS", "1", 1);
    hip_knobs_from_env(&k);
    CHECK(!k.upload_pipe && k.compile_threads == 1, "cold start off: pipe %d, compile threads %d", k.upload_pipe,
          k.compile_threads);
    setenv("LLM170_HIP_COMPILE_THREADS", "-3", 1);
    setenv("LLM170_HIP_SPLIT_COMPILE", "1", 1);
    hip_knobs_from_env(&k);
    CHECK(k.compile_threads == 0, "a negative thread count keeps the default: %d", k.compile_threads);
    CHECK(k.split_compile == 0, "SPLIT_COMPILE=1: every core (0), not %d", k.split_compile);
    setenv("LLM170_HIP_SPLIT_COMPILE", "6", 1);
    hip_knobs_from_env(&k);
    CHECK(k.split_compile == 6, "SPLIT_COMPILE=6: %d", k.split_compile);
    setenv("LLM170_HIP_SPLIT_COMPILE", "0", 1);
    hip_knobs_from_env(&k);
    CHECK(k.split_compile == -1, "SPLIT_COMPILE=0: off, not %d", k.split_compile);
    CHECK(k.split_tokens == HIP_SPLIT_TOKENS, "split tokens default %d", k.split_tokens);
    setenv("LLM170_HIP_SPLIT_TOKENS", "8", 1);
    hip_knobs_from_env(&k);
    CHECK(k.split_tokens == 8, "SPLIT_TOKENS=8: %d", k.split_tokens);
    setenv("LLM170_HIP_SPLIT_TOKENS", "17", 1); /* past the partials' size: the default */
    hip_knobs_from_env(&k);
    CHECK(k.split_tokens == HIP_SPLIT_TOKENS, "SPLIT_TOKENS=17: %d", k.split_tokens);
    unsetenv("LLM170_HIP_SPLIT_TOKENS");
    CHECK(!k.graphs && k.q8 && k.gqa && !k.fuse_attn && !k.streamk, "booleans: graphs %d q8 %d gqa %d fuse_attn %d "
          "streamk %d", k.graphs, k.q8, k.gqa, k.fuse_attn, k.streamk);
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
    RUN(qwen35_27b_32_slots_fit);
    RUN(knobs_from_env);
    CHECK_EXIT();
}
