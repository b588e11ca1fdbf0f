/* test_vk_engine — the `vulkan` engine's logits against the CPU engine's on the same model, through
 * engine.c's dispatch: a prompt whose logits come back in several chunks, decode steps, a batch of
 * two sequences, a sequence copy, a cut and a redo, hidden states after the output norm (the
 * embeddings endpoint's), with an f32 and an f16 cache. Models: stories260K
 * (shared data; f32 weights, a 172-wide FFN: float rows that end in a short group) and models this
 * test writes (tests/synth_model.h): qwen3 with every matrix in each of the 16 weight types the
 * shaders decode, and qwen2 with biases and a tied output. ‖Δ‖/‖ref‖ per logits row ≤ 1e-4 for f32
 * weights with an f32 cache (1e-3 with f16 cells); ≤ 0.1 for the others: the engines round activations
 * alike and a block's product the same way, but sums across blocks, exp and the norms' last bits run
 * differently, and one 8-bit activation landing on the other side of a rounding boundary moves these
 * random models' logits by 1–3e-2 from that position on (measured worst 3.2e-2). A wrong block decode is
 * off by O(1); each type's products are held to 2e-5 in test_vk_kernels. The Gated DeltaNet hybrids
 * (qwen35, qwen35moe: recurrent state, gated attention, shared experts) run their own flow: chunked
 * prefill with a snapshot, decode, sequence copies (whole and from a snapshot), a restore, a refused cut,
 * a sequence restarting at position 0 beside another. Runs on any Vulkan device (lavapipe in CI); SKIPs
 * without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../worker/engine/engine.h"
#include "check.h"
#include "vk_asan.h"
#include "engine_util.h"
#include "synth_model.h"

static char g_no_vk[600]; /* why there is no Vulkan device, or "" */
static char g_dir[64];    /* the test's temporary folder */
static double g_worst_f32, g_worst_q; /* over every model: f32 weights with an f32 cache, the rest */
static double g_run_worst;             /* over the engine pair being compared */

/* both engines decode the same batch; every logits row compared */
static void both(struct engine_ctx *cpu, struct engine_ctx *vk, const struct engine_tok *t, int n, int V, double tol,
                 const char *what, float *last)
{
    int n_out = 0;
    for (int i = 0; i < n; i++)
        n_out += t[i].logits;
    float *a = malloc(sizeof(float) * (size_t)(n_out ? n_out : 1) * V);
    float *b = malloc(sizeof(float) * (size_t)(n_out ? n_out : 1) * V);
    struct err e = { 0 };
    CHECK(engine_decode(cpu, t, n, a, &e) == 0, "cpu %s: %s", what, e.msg);
    CHECK(engine_decode(vk, t, n, b, &e) == 0, "vulkan %s: %s", what, e.msg);
    double worst = 0;
    for (int r = 0; r < n_out; r++) {
        double x = rel_l2(b + (size_t)r * V, a + (size_t)r * V, (size_t)V);
        if (!(x <= worst))
            worst = x; /* NaN too */
    }
    CHECK(worst <= tol, "%s: logits rel err %.3g > %g", what, worst, tol);
    double *w = tol < 1e-3 ? &g_worst_f32 : &g_worst_q;
    if (!(worst <= *w))
        *w = worst;
    if (!(worst <= g_run_worst))
        g_run_worst = worst;
    if (last && n_out)
        memcpy(last, a + (size_t)(n_out - 1) * V, sizeof(float) * (size_t)V);
    free(a);
    free(b);
}

/* the CPU engine and the Vulkan one on m, alike (256 positions, 80-row batches, 2 sequences); false (the
 * failure recorded, nothing left open) when either cannot be made */
static bool engine_pair(const struct model *m, bool kvf32, const char *path, struct engine_ctx **cpu,
                        struct engine_ctx **vk)
{
    struct engine_params p;
    engine_params_default(&p);
    p.n_ctx = 256;
    p.n_batch = 80;
    p.n_seq = 2;
    p.n_threads = 2;
    p.kv_f32 = kvf32;
    struct err e = { 0 };
    CHECK(engine_create(cpu, m, &p, &e) == 0, "cpu engine: %s", e.msg);
    p.backend = BACKEND_VULKAN;
    CHECK(!*cpu || engine_create(vk, m, &p, &e) == 0, "vulkan engine on %s: %s", path, e.msg);
    if (*cpu && *vk)
        return true;
    engine_free(*cpu);
    engine_free(*vk);
    *cpu = *vk = NULL;
    return false;
}

/* kv_f32_too: with an f32 cache as well as the default f16 one */
static void run_model(const char *path, double tol, bool kv_f32_too)
{
    struct model *m = load(path);
    CHECK(m != NULL, "load %s", path);
    if (!m)
        return;
    const int V = model_info(m)->n_vocab;
    struct err e = { 0 };
    for (int kvf32 = kv_f32_too; kvf32 >= 0; kvf32--) {
        struct engine_ctx *cpu = NULL, *vk = NULL;
        if (!engine_pair(m, kvf32, path, &cpu, &vk))
            break;
        const double t = kvf32 ? tol : (tol > 1e-3 ? tol : 1e-3); /* f16 cells: the rounding of q and p too */
        g_run_worst = 0;
        struct engine_tok tk[80];
        uint32_t s = 12345;
        /* 70 rows with logits: three chunks of the output (32 rows each) */
        for (int i = 0; i < 70; i++) {
            s = s * 1103515245u + 12345u;
            tk[i] = (struct engine_tok){ .token = (int)((s >> 8) % (uint32_t)V), .pos = i, .seq = 0, .logits = true };
        }
        float *last = malloc(sizeof(float) * (size_t)V);
        both(cpu, vk, tk, 70, V, t, "prefill 70, every row", last);
        for (int step = 0; step < 4; step++) {
            struct engine_tok d = { .token = argmax(last, V), .pos = 70 + step, .seq = 0, .logits = true };
            both(cpu, vk, &d, 1, V, t, "decode", last);
        }
        /* seq 1 takes 10 positions of seq 0, then a batch of both */
        CHECK(engine_seq_copy(cpu, 0, 1, 10, &e) == 0, "cpu copy: %s", e.msg);
        CHECK(engine_seq_copy(vk, 0, 1, 10, &e) == 0, "vulkan copy: %s", e.msg);
        CHECK_EQ_INT(engine_seq_len(vk, 1), 10);
        struct engine_tok mix[5];
        for (int i = 0; i < 3; i++)
            mix[i] = (struct engine_tok){ .token = (7 * i + 3) % V, .pos = 10 + i, .seq = 1, .logits = i != 1 };
        mix[3] = (struct engine_tok){ .token = 5, .pos = 74, .seq = 0, .logits = true };
        mix[4] = (struct engine_tok){ .token = 9, .pos = 75, .seq = 0, .logits = true };
        both(cpu, vk, mix, 5, V, t, "two sequences in one batch", NULL);
        /* a cut, then the cells rewritten */
        CHECK(engine_seq_truncate(cpu, 0, 4) == 0 && engine_seq_truncate(vk, 0, 4) == 0, "truncate");
        CHECK_EQ_INT(engine_seq_len(vk, 0), 4);
        CHECK_EQ_INT(engine_seq_restorable(vk, 0, 3), 3);
        for (int i = 0; i < 12; i++)
            tk[i] = (struct engine_tok){ .token = (int)((31u * (unsigned)i + 11u) % (unsigned)V), .pos = 4 + i,
                                         .seq = 0, .logits = i == 11 };
        both(cpu, vk, tk, 12, V, t, "after a cut", NULL);
        /* hidden states after the output norm (the embeddings endpoint), rows 0 and 2 of three */
        {
            const int E = model_info(m)->n_embd;
            struct engine_tok et[3];
            const bool want[3] = { true, false, true };
            for (int i = 0; i < 3; i++)
                et[i] = (struct engine_tok){ .token = (5 * i + 2) % V, .pos = 16 + i, .seq = 0, .logits = i == 2 };
            float *ea = malloc(sizeof(float) * 2 * E), *eb = malloc(sizeof(float) * 2 * E);
            float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
            CHECK(engine_decode_embd(cpu, et, 3, want, la, ea, &e) == 0, "cpu embd: %s", e.msg);
            CHECK(engine_decode_embd(vk, et, 3, want, lb, eb, &e) == 0, "vulkan embd: %s", e.msg);
            const double re = rel_l2(eb, ea, (size_t)2 * E), rl = rel_l2(lb, la, (size_t)V);
            CHECK(re <= t && rl <= t, "hidden states rel err %.3g, logits %.3g > %g", re, rl, t);
            free(ea), free(eb), free(la), free(lb);
        }
        /* a batch that breaks the contract is refused and changes nothing */
        struct engine_tok bad = { .token = 1, .pos = 40, .seq = 0, .logits = true };
        CHECK(engine_decode(vk, &bad, 1, last, &e) != 0, "a position gap was accepted");
        CHECK_EQ_INT(engine_seq_len(vk, 0), 19);
        printf("#     %s cache: worst rel err %.3g\n", kvf32 ? "f32" : "f16", g_run_worst);
        free(last);
        engine_free(vk);
        engine_free(cpu);
    }
    model_free(m);
}

static void stories260k_matches_cpu(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    char path[512];
    const char *sh = getenv("LLM170_SHARED");
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh && *sh ? sh : "../shared/data");
    if (access(path, R_OK) != 0)
        SKIP("needs ../shared/data/models/stories260K.gguf (absent)");
    run_model(path, 1e-4, true);
}

/* qwen3 with every matrix in each weight type the shaders decode */
static void every_weight_type_matches_cpu(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    static const enum qtype types[] = { QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q4_1,   QT_Q5_0,
                                        QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K,   QT_Q4_K,   QT_Q5_K,
                                        QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4 };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const struct synth_spec sp = { .arch = "qwen3", .name = "vk-test", .n_embd = 256, .n_ff = 512,
                                       .n_head = 4, .n_head_kv = 2, .n_layer = 2, .wtype = types[i], .seed = 7 + i };
        char path[128];
        snprintf(path, sizeof path, "%s/qwen3-%s.gguf", g_dir, qtype_get(types[i])->name);
        struct err e = { 0 };
        CHECK(synth_model_write(&sp, path, &e) == 0, "%s", e.msg);
        printf("#   %s\n", qtype_get(types[i])->name);
        run_model(path, types[i] == QT_F32 ? 1e-4 : 0.1, types[i] == QT_F32);
        unlink(path);
    }
    printf("#   worst rel err: f32 weights %.3g, other types %.3g\n", g_worst_f32, g_worst_q);
}

/* qwen2: q/k/v biases, an output bias, the output tied to a q8_0 token_embd */
static void biases_and_tied_output_match_cpu(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    for (int q = 0; q < 2; q++) {
        const struct synth_spec sp = { .arch = "qwen2", .name = "vk-test", .n_embd = 128, .n_ff = 256, .n_head = 4,
                                       .n_head_kv = 1, .n_layer = 2, .wtype = q ? QT_Q8_0 : QT_F32, .biases = true,
                                       .tied = true, .seed = 99 };
        char path[128];
        snprintf(path, sizeof path, "%s/qwen2.gguf", g_dir);
        struct err e = { 0 };
        CHECK(synth_model_write(&sp, path, &e) == 0, "%s", e.msg);
        run_model(path, q ? 0.1 : 1e-4, true);
        unlink(path);
    }
}

/* A hybrid: the engines side by side through what a recurrent state allows (cpu_hybrid.h's rules). */
static void run_hybrid(const char *path, double tol)
{
    struct model *m = load(path);
    CHECK(m != NULL, "load %s", path);
    if (!m)
        return;
    const int V = model_info(m)->n_vocab;
    struct err e = { 0 };
    for (int kvf32 = 1; kvf32 >= 0; kvf32--) {
        struct engine_ctx *cpu = NULL, *vk = NULL;
        if (!engine_pair(m, kvf32, path, &cpu, &vk))
            break;
        const double t = kvf32 ? tol : (tol > 1e-3 ? tol : 1e-3);
        g_run_worst = 0;
        struct engine_tok tk[80];
        uint32_t s = 777;
        int ids[80];
        for (int i = 0; i < 80; i++) {
            s = s * 1103515245u + 12345u;
            ids[i] = (int)((s >> 8) % (uint32_t)V);
        }
        ids[17] = ids[30] = ids[31] = 2; /* EOS inside: qwen4exp's PLE windows are cut there */
        /* prefill 40 (a snapshot there), then 30 more: every row */
        for (int i = 0; i < 40; i++)
            tk[i] = (struct engine_tok){ .token = ids[i], .pos = i, .seq = 0, .logits = true };
        both(cpu, vk, tk, 40, V, t, "hybrid prefill 40", NULL);
        CHECK(engine_seq_snapshot(cpu, 0, &e) == 0 && engine_seq_snapshot(vk, 0, &e) == 0, "snapshot: %s", e.msg);
        for (int i = 0; i < 30; i++)
            tk[i] = (struct engine_tok){ .token = ids[40 + i], .pos = 40 + i, .seq = 0, .logits = true };
        float *last = malloc(sizeof(float) * (size_t)V);
        both(cpu, vk, tk, 30, V, t, "hybrid prefill 30 more", last);
        for (int step = 0; step < 3; step++) {
            struct engine_tok d = { .token = argmax(last, V), .pos = 70 + step, .seq = 0, .logits = true };
            both(cpu, vk, &d, 1, V, t, "hybrid decode", last);
        }
        /* an arbitrary cut is refused and changes nothing */
        CHECK_EQ_INT(engine_seq_truncate(vk, 0, 20), ERR_UNSUPPORTED);
        CHECK_EQ_INT(engine_seq_len(vk, 0), 73);
        CHECK_EQ_INT(engine_seq_restorable(vk, 0, 60), 40);
        CHECK_EQ_INT(engine_seq_copy(vk, 0, 1, 30, &e), ERR_UNSUPPORTED);
        /* the whole sequence copied: both continue alike, in one batch */
        CHECK(engine_seq_copy(cpu, 0, 1, 73, &e) == 0 && engine_seq_copy(vk, 0, 1, 73, &e) == 0, "copy: %s", e.msg);
        struct engine_tok two[6];
        for (int i = 0; i < 3; i++) {
            two[2 * i] = (struct engine_tok){ .token = ids[i + 5], .pos = 73 + i, .seq = 1, .logits = true };
            two[2 * i + 1] = (struct engine_tok){ .token = ids[i + 9], .pos = 73 + i, .seq = 0, .logits = true };
        }
        both(cpu, vk, two, 6, V, t, "hybrid: two sequences interleaved", NULL);
        /* seq 0 back to its snapshot at 40, then on again */
        CHECK(engine_seq_restore(cpu, 0, 40, &e) == 0 && engine_seq_restore(vk, 0, 40, &e) == 0, "restore: %s",
              e.msg);
        CHECK_EQ_INT(engine_seq_len(vk, 0), 40);
        for (int i = 0; i < 12; i++)
            tk[i] = (struct engine_tok){ .token = ids[60 + i], .pos = 40 + i, .seq = 0, .logits = true };
        both(cpu, vk, tk, 12, V, t, "hybrid: after the restore", NULL);
        /* seq 1 from seq 0's snapshot, seq 0 restarting at 0, in one batch */
        CHECK(engine_seq_copy(cpu, 0, 1, 40, &e) == 0 && engine_seq_copy(vk, 0, 1, 40, &e) == 0,
              "copy from the snapshot: %s", e.msg);
        CHECK(engine_seq_truncate(cpu, 0, 0) == 0 && engine_seq_truncate(vk, 0, 0) == 0, "truncate to 0");
        for (int i = 0; i < 10; i++) {
            tk[2 * i] = (struct engine_tok){ .token = ids[i], .pos = i, .seq = 0, .logits = true };
            tk[2 * i + 1] = (struct engine_tok){ .token = ids[30 + i], .pos = 40 + i, .seq = 1, .logits = true };
        }
        both(cpu, vk, tk, 20, V, t, "hybrid: a restart beside a copy", NULL);
        /* hidden states after the output norm */
        {
            const int E = model_info(m)->n_embd;
            struct engine_tok et[2] = { { .token = 3, .pos = 10, .seq = 0, .logits = true },
                                        { .token = 4, .pos = 50, .seq = 1, .logits = false } };
            const bool want[2] = { true, true };
            float *ea = malloc(sizeof(float) * 2 * E), *eb = malloc(sizeof(float) * 2 * E);
            float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
            CHECK(engine_decode_embd(cpu, et, 2, want, la, ea, &e) == 0, "cpu embd: %s", e.msg);
            CHECK(engine_decode_embd(vk, et, 2, want, lb, eb, &e) == 0, "vulkan embd: %s", e.msg);
            const double re = rel_l2(eb, ea, (size_t)2 * E), rl = rel_l2(lb, la, (size_t)V);
            CHECK(re <= t && rl <= t, "hybrid hidden states rel err %.3g, logits %.3g > %g", re, rl, t);
            free(ea), free(eb), free(la), free(lb);
        }
        printf("#     %s cache: worst rel err %.3g\n", kvf32 ? "f32" : "f16", g_run_worst);
        free(last);
        engine_free(vk);
        engine_free(cpu);
    }
    model_free(m);
}

/* the shared synthetic hybrids, and our writers' shapes: d_state 128 with tiled V heads, a Q8_0 one, a
 * 4-stream qwen4exp */
static void hybrids_match_cpu(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    const char *sh = getenv("LLM170_SHARED");
    const char *names[] = { "qwen35-tiny", "qwen35moe-tiny", "qwen4exp-tiny" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/synthetic/%s.gguf", sh && *sh ? sh : "../shared/data", names[i]);
        if (access(path, R_OK) != 0) {
            printf("#   %s: absent (../shared/data)\n", names[i]);
            continue;
        }
        printf("#   %s\n", names[i]);
        run_hybrid(path, 1e-4);
    }
    const char *b = getenv("LLM170_BUILD");
    const struct {
        const char *name, *writer, *args;
        double tol;
    } own[] = {
        { "d128", "qwen35", "--arch qwen35 --seed 5 --vocab 300 --n-embd 128 --n-layer 3 --interval 3 --n-head 4 "
                  "--n-head-kv 2 --head-dim 32 --rope-dim 16 --sections 3,3,2,0 --d-state 128 --h-k 1 --h-v 3 "
                  "--n-ff 192 --nextn 0", 1e-4 },
        /* quantized: dense, as a MoE router's near-ties would flip picks between the engines' roundings */
        { "q8", "qwen35", "--arch qwen35 --seed 6 --vocab 300 --n-embd 128 --n-layer 4 --interval 2 --n-head 4 "
                "--n-head-kv 1 --head-dim 32 --rope-dim 16 --sections 3,3,2,0 --d-state 32 --h-k 2 --h-v 4 "
                "--n-ff 256 --nextn 0 --type q8_0", 0.1 },
        /* qwen4exp: 4 streams, QSA r = 4 past its top_k 8 within the 80 positions, PLE on layer 1 (EOS 2 in the
         * prompts cuts its windows), a dense ratio-0 layer is in qwen4exp-tiny above */
        { "hc4", "qwen4exp", "--seed 41 --vocab 300 --n-embd 64 --n-layer 8 --interval 4 --hc 4 --hc-lr 6 --n-head 4 "
                 "--n-head-kv 2 --head-dim 16 --n-rot 16 --sections 3,3,2,0 --ratios 4 --top-k 8 --idx-heads 4 "
                 "--idx-dim 16 --d-state 8 --h-k 2 --h-v 6 --n-expert 6 --n-used 3 --n-ff-exp 16 --n-ff-shexp 24 "
                 "--ple-layer 1 --ngram 3 --heads-per-ngram 4 --ple-kernel 4 --ple-vocab 11,13,17,19,23,29,31,37 "
                 "--ple-eos 2", 1e-4 },
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        char path[128], cmd[1024];
        snprintf(path, sizeof path, "%s/h-%s.gguf", g_dir, own[i].name);
        snprintf(cmd, sizeof cmd, "%s/tests/tools/mksynth_%s --out %s %s >/dev/null 2>&1", b ? b : "build",
                 own[i].writer, path, own[i].args);
        if (system(cmd) != 0) {
            CHECK(0, "the writer failed: %s", cmd);
            continue;
        }
        printf("#   %s\n", own[i].name);
        run_hybrid(path, own[i].tol);
        unlink(path);
    }
}

/* a device index past the last is refused with a message naming the choices; an explicit one wins */
static void bad_device_choice_is_refused(void)
{
    if (*g_no_vk)
        SKIP(g_no_vk);
    char path[128];
    snprintf(path, sizeof path, "%s/dev.gguf", g_dir);
    const struct synth_spec sp = { .arch = "llama", .name = "vk-test", .n_embd = 64, .n_ff = 128, .n_head = 4,
                                   .n_head_kv = 2, .n_layer = 1, .wtype = QT_F32, .seed = 1 };
    struct err e = { 0 };
    CHECK(synth_model_write(&sp, path, &e) == 0, "%s", e.msg);
    struct model *m = load(path);
    CHECK(m != NULL, "load");
    if (m) {
        struct engine_params p;
        engine_params_default(&p);
        p.backend = BACKEND_VULKAN;
        setenv("LLM170_VK_DEVICE", "99", 1);
        struct engine_ctx *c = NULL;
        int rc = engine_create(&c, m, &p, &e);
        unsetenv("LLM170_VK_DEVICE");
        CHECK(rc == ERR_INVALID, "rc %d: %s", rc, e.msg);
        CHECK(strstr(e.msg, "LLM170_VK_DEVICE=99") != NULL, "message: %s", e.msg);
        engine_free(c);
        c = NULL;
        /* the worker's --gpu N: device N, whatever the environment says */
        p.has_device = true;
        p.device = 99;
        rc = engine_create(&c, m, &p, &e);
        CHECK(rc == ERR_INVALID && strstr(e.msg, "GPU 99 asked for") != NULL, "rc %d: %s", rc, e.msg);
        engine_free(c);
        c = NULL;
        p.device = 0;
        setenv("LLM170_VK_DEVICE", "99", 1);
        rc = engine_create(&c, m, &p, &e);
        unsetenv("LLM170_VK_DEVICE");
        CHECK(rc == 0, "device 0 by index: %s", e.msg);
        engine_free(c);
        model_free(m);
    }
    unlink(path);
}

int main(void)
{
    vk_asan_pin_driver();
    snprintf(g_dir, sizeof g_dir, "/tmp/llm170-vk-XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("not ok - temp dir\n");
        return 1;
    }
    /* is there a device? The engine's own refusal says why not */
    {
        char path[128];
        snprintf(path, sizeof path, "%s/probe.gguf", g_dir);
        const struct synth_spec sp = { .arch = "llama", .name = "vk-probe", .n_embd = 64, .n_ff = 128, .n_head = 4,
                                       .n_head_kv = 2, .n_layer = 1, .wtype = QT_F32, .seed = 1 };
        struct err e = { 0 };
        struct model *m = NULL;
        if (synth_model_write(&sp, path, &e) || model_load(&m, path, &e)) {
            printf("not ok - probe model: %s\n", e.msg);
            return 1;
        }
        struct engine_params p;
        engine_params_default(&p);
        p.backend = BACKEND_VULKAN;
        struct engine_ctx *c = NULL;
        int rc = engine_create(&c, m, &p, &e);
        if (rc == ERR_UNSUPPORTED && strstr(e.msg, "unavailable"))
            snprintf(g_no_vk, sizeof g_no_vk, "%s", e.msg);
        else if (rc)
            printf("# the probe engine failed: %s\n", e.msg); /* the cases below fail with it */
        else
            printf("# device: %s\n", engine_device(c));
        engine_free(c);
        model_free(m);
        unlink(path);
    }
    RUN(stories260k_matches_cpu);
    RUN(every_weight_type_matches_cpu);
    RUN(biases_and_tied_output_match_cpu);
    RUN(hybrids_match_cpu);
    RUN(bad_device_choice_is_refused);
    rmdir(g_dir);
    CHECK_EXIT();
}
