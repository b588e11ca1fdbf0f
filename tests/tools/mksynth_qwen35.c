/* mksynth_qwen35.c — write a random-weight qwen35 / qwen35moe GGUF with the
 * project's GGUF writer (worker/gguf/gguf_write.h), following the stored
 * conventions of shared spec arch-qwen35.md §2, §5, §10 (norm weights
 * already 1 + w, ssm_a = −exp(A_log), tiled V heads — random weights need
 * no reordering).
 *
 *   mksynth_qwen35 --out F.gguf [--arch qwen35|qwen35moe] [--preset NAME] [options]
 *
 * Presets: tiny (the default shape), 27b (Qwen3.5-27B shapes), 35b-a3b
 * (Qwen3.5-35B-A3B shapes). The real-shape presets default to q4_K weights
 * and --share (every layer of a kind reuses one set of random tensors, so
 * the writer needs one layer's memory while the file has the full size;
 * it also draws only the first 2048 rows of each tensor and repeats them).
 * Options override a preset; --help lists them.
 * Same arguments + seed → byte-identical file. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/err.h"
#include "../../worker/gguf/gguf_write.h"
#include "../../worker/num/quant.h"
#include "synth_vocab.h"

struct cfg {
    const char *arch, *out, *name;
    uint64_t seed;
    int n_vocab, n_embd, n_layer, interval, n_head, n_head_kv, head_dim, n_rot, sections[4];
    const char *recurrent; /* "1101…" over trunk layers, or NULL for the interval rule */
    int d_state, h_k, h_v, d_conv, n_ff, n_expert, n_used, n_ff_exp, n_ff_shexp, nextn, n_ctx_train;
    float rope_base, rms_eps, std, embd_std, norm_std, conv_std, router_std;
    enum qtype type, embd_type;
    int tie, fused_gate_up, share;
};

static void defaults(struct cfg *c)
{
    *c = (struct cfg){ .arch = "qwen35", .seed = 1, .n_vocab = 1024, .n_embd = 64, .n_layer = 4, .interval = 2,
                       .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_rot = 16, .sections = { 3, 3, 2, 0 },
                       .d_state = 16, .h_k = 2, .h_v = 4, .d_conv = 4, .n_ff = 128, .n_expert = 8, .n_used = 2,
                       .n_ff_exp = 32, .n_ff_shexp = 64, .n_ctx_train = 4096, .rope_base = 10000.0f,
                       .rms_eps = 1e-6f, .std = 0.1f, .embd_std = 0.1f, .norm_std = 0.1f, .conv_std = 0.3f,
                       .router_std = 0.3f, .type = QT_F32, .embd_type = QT_COUNT };
}

static int preset(struct cfg *c, const char *p)
{
    if (!strcmp(p, "tiny"))
        return 0;
    if (!strcmp(p, "27b")) {
        c->arch = "qwen35";
        c->n_vocab = 248320, c->n_embd = 5120, c->n_layer = 64, c->interval = 4, c->n_head = 24, c->n_head_kv = 4;
        c->n_ff = 17408;
        c->h_v = 48;
    } else if (!strcmp(p, "35b-a3b")) {
        c->arch = "qwen35moe";
        c->n_vocab = 248320, c->n_embd = 2048, c->n_layer = 40, c->interval = 4, c->n_head = 16, c->n_head_kv = 2;
        c->n_ff = 512, c->n_expert = 256, c->n_used = 8, c->n_ff_exp = 512, c->n_ff_shexp = 512;
        c->h_v = 32;
    } else {
        return -1;
    }
    c->head_dim = 256, c->n_rot = 64;
    c->sections[0] = 11, c->sections[1] = 11, c->sections[2] = 10, c->sections[3] = 0;
    c->rope_base = 1e7f, c->d_state = 128, c->h_k = 16, c->d_conv = 4, c->nextn = 1, c->n_ctx_train = 262144;
    c->type = QT_Q4_K, c->share = 1, c->std = 0.02f, c->embd_std = 0.02f;
    return 0;
}

/* ---- random numbers: splitmix64 + Box–Muller, reproducible everywhere ---- */
static uint64_t g_rng;
static uint64_t next_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(void) { return ((double)(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float gauss(float mean, float sd)
{
    double u = uniform(), v = uniform();
    return mean + sd * (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

/* ---- tensors ---- */

struct ctx {
    struct gguf_w *w;
    const struct cfg *c;
    /* shared buffers (--share): one per role, kept until the write */
    struct shared {
        char role[48];
        void *data;
        size_t nbytes;
        uint32_t type;
    } sh[64];
    int n_sh;
    void **own; /* buffers borrowed by the writer */
    int n_own, cap_own;
};

static void keep(struct ctx *x, void *p)
{
    if (x->n_own == x->cap_own) {
        x->cap_own = x->cap_own ? 2 * x->cap_own : 64;
        x->own = realloc(x->own, sizeof(void *) * (size_t)x->cap_own);
        if (!x->own) {
            fprintf(stderr, "mksynth_qwen35: out of memory\n");
            exit(1);
        }
    }
    x->own[x->n_own++] = p;
}

/* Random gaussian tensor [ne0, ne1, ne2] in type t (f32 when t cannot hold rows of ne0). With
 * `tile`, only the first TILE_ROWS rows are drawn and the rest repeat them (speed-run files). */
#define TILE_ROWS 2048
static void *make_data(enum qtype t, int64_t ne0, int64_t rows, float mean, float sd, bool tile, size_t *nbytes)
{
    const struct qtype_info *qi = qtype_get(t);
    const size_t rb = qtype_row_size(t, ne0);
    *nbytes = rb * (size_t)rows;
    char *buf = malloc(*nbytes ? *nbytes : 1);
    float *row = malloc(sizeof(float) * (size_t)ne0);
    if (!buf || !row || !qi) {
        fprintf(stderr, "mksynth_qwen35: out of memory for a %lld x %lld tensor\n", (long long)ne0, (long long)rows);
        exit(1);
    }
    for (int64_t r = 0; r < rows; r++) {
        if (tile && r >= TILE_ROWS) {
            memcpy(buf + (size_t)r * rb, buf + (size_t)(r % TILE_ROWS) * rb, rb);
            continue;
        }
        for (int64_t i = 0; i < ne0; i++)
            row[i] = gauss(mean, sd);
        if (t == QT_F32)
            memcpy(buf + (size_t)r * rb, row, rb);
        else if (!quant_weights_row(t, row, buf + (size_t)r * rb, ne0)) {
            fprintf(stderr, "mksynth_qwen35: no quantizer for type %s\n", qi->name);
            exit(1);
        }
    }
    free(row);
    return buf;
}

static enum qtype fit(enum qtype t, int64_t ne0)
{
    const struct qtype_info *qi = qtype_get(t);
    return qi && ne0 % qi->blck == 0 ? t : QT_F32;
}

/* A weight; `role` names what --share may reuse across layers (NULL = never shared). */
static void mat(struct ctx *x, const char *name, const char *role, int64_t ne0, int64_t ne1, int64_t ne2, enum qtype t,
                float mean, float sd)
{
    t = fit(t, ne0);
    const int64_t ne[3] = { ne0, ne1, ne2 };
    const uint32_t nd = ne2 > 1 ? 3 : (ne1 > 1 ? 2 : 1);
    if (x->c->share && role) {
        for (int i = 0; i < x->n_sh; i++)
            if (!strcmp(x->sh[i].role, role)) {
                gguf_w_tensor_ref(x->w, name, nd, ne, x->sh[i].type, x->sh[i].data, x->sh[i].nbytes);
                return;
            }
    }
    size_t nb;
    void *d = make_data(t, ne0, ne1 * ne2, mean, sd, x->c->share, &nb);
    gguf_w_tensor_ref(x->w, name, nd, ne, t, d, nb);
    keep(x, d);
    if (x->c->share && role && x->n_sh < 64) {
        struct shared *s = &x->sh[x->n_sh++];
        snprintf(s->role, sizeof s->role, "%s", role);
        s->data = d, s->nbytes = nb, s->type = t;
    }
}

static void vec(struct ctx *x, const char *name, int64_t n, float mean, float sd)
{
    mat(x, name, NULL, n, 1, 1, QT_F32, mean, sd);
}

/* ssm_a = −exp(N(−0.5, 0.5)) */
static void vec_ssm_a(struct ctx *x, const char *name, int64_t n)
{
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = -expf(gauss(-0.5f, 0.5f));
    gguf_w_tensor_ref(x->w, name, 1, &n, QT_F32, d, sizeof(float) * (size_t)n);
    keep(x, d);
}

static enum qtype parse_type(const char *s)
{
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const struct qtype_info *qi = qtype_get(t);
        if (qi && qi->known && !strcasecmp(qi->name, s))
            return (enum qtype)t;
    }
    fprintf(stderr, "mksynth_qwen35: unknown type '%s'\n", s);
    exit(2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mksynth_qwen35 --out F.gguf [--arch qwen35|qwen35moe] [--preset tiny|27b|35b-a3b] [--seed N]\n"
            "  shape: --vocab N --n-embd N --n-layer N (trunk) --interval N --recurrent 1101.. --n-head N\n"
            "         --n-head-kv N --head-dim N --rope-dim N --sections t,h,w,e --rope-base F --rms-eps F\n"
            "         --d-state N --h-k N --h-v N --d-conv N --n-ff N --nextn 0|1 --tie\n"
            "  moe:   --n-expert N --n-used N --n-ff-exp N --n-ff-shexp N (0 = none) --fused-gate-up\n"
            "  data:  --type f32|f16|q8_0|q4_K|… --embd-type T --std F --embd-std F --norm-std F --share\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct cfg c;
    defaults(&c);
    for (int i = 1; i < argc; i++) /* the preset first, so options override it */
        if (!strcmp(argv[i], "--preset") && i + 1 < argc && preset(&c, argv[i + 1])) {
            fprintf(stderr, "mksynth_qwen35: unknown preset '%s'\n", argv[i + 1]);
            return 2;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s) (!strcmp(a, s) && v && ++i)
        if (OPT("--preset"))
            ;
        else if (OPT("--out"))
            c.out = v;
        else if (OPT("--arch"))
            c.arch = v;
        else if (OPT("--name"))
            c.name = v;
        else if (OPT("--seed"))
            c.seed = strtoull(v, NULL, 10);
        else if (OPT("--vocab"))
            c.n_vocab = atoi(v);
        else if (OPT("--n-embd"))
            c.n_embd = atoi(v);
        else if (OPT("--n-layer"))
            c.n_layer = atoi(v);
        else if (OPT("--interval"))
            c.interval = atoi(v);
        else if (OPT("--recurrent"))
            c.recurrent = v;
        else if (OPT("--n-head"))
            c.n_head = atoi(v);
        else if (OPT("--n-head-kv"))
            c.n_head_kv = atoi(v);
        else if (OPT("--head-dim"))
            c.head_dim = atoi(v);
        else if (OPT("--rope-dim"))
            c.n_rot = atoi(v);
        else if (OPT("--sections"))
            sscanf(v, "%d,%d,%d,%d", &c.sections[0], &c.sections[1], &c.sections[2], &c.sections[3]);
        else if (OPT("--rope-base"))
            c.rope_base = strtof(v, NULL);
        else if (OPT("--rms-eps"))
            c.rms_eps = strtof(v, NULL);
        else if (OPT("--d-state"))
            c.d_state = atoi(v);
        else if (OPT("--h-k"))
            c.h_k = atoi(v);
        else if (OPT("--h-v"))
            c.h_v = atoi(v);
        else if (OPT("--d-conv"))
            c.d_conv = atoi(v);
        else if (OPT("--n-ff"))
            c.n_ff = atoi(v);
        else if (OPT("--nextn"))
            c.nextn = atoi(v);
        else if (OPT("--n-expert"))
            c.n_expert = atoi(v);
        else if (OPT("--n-used"))
            c.n_used = atoi(v);
        else if (OPT("--n-ff-exp"))
            c.n_ff_exp = atoi(v);
        else if (OPT("--n-ff-shexp"))
            c.n_ff_shexp = atoi(v);
        else if (OPT("--type"))
            c.type = parse_type(v);
        else if (OPT("--embd-type"))
            c.embd_type = parse_type(v);
        else if (OPT("--std"))
            c.std = strtof(v, NULL);
        else if (OPT("--embd-std"))
            c.embd_std = strtof(v, NULL);
        else if (OPT("--norm-std"))
            c.norm_std = strtof(v, NULL);
        else if (!strcmp(a, "--tie"))
            c.tie = 1;
        else if (!strcmp(a, "--fused-gate-up"))
            c.fused_gate_up = 1;
        else if (!strcmp(a, "--share"))
            c.share = 1;
        else if (!strcmp(a, "--no-share"))
            c.share = 0;
        else
            usage();
#undef OPT
    }
    const bool moe = !strcmp(c.arch, "qwen35moe");
    if (!c.out || (!moe && strcmp(c.arch, "qwen35")) || c.n_vocab < 300 || c.n_layer < 1 || c.h_v % c.h_k ||
        c.n_head % c.n_head_kv || c.n_rot > c.head_dim || c.n_rot % 2 || c.interval < 1 || c.nextn < 0 ||
        c.nextn > 1 || (c.recurrent && (int)strlen(c.recurrent) != c.n_layer))
        usage();
    if (c.embd_type == QT_COUNT)
        c.embd_type = c.type;
    g_rng = c.seed * 0x2545F4914F6CDD1Dull + 1;

    const char *A = c.arch;
    const int NB = c.n_layer + c.nextn;
    const int64_t E = c.n_embd, D = c.head_dim, key_dim = (int64_t)c.h_k * c.d_state,
                  value_dim = (int64_t)c.h_v * c.d_state, conv_dim = 2 * key_dim + value_dim;
    struct ctx x = { .w = gguf_w_new(), .c = &c };
    struct gguf_w *w = x.w;
    char k[160], nm[96];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", A, s), k)
    gguf_w_str(w, "general.architecture", A);
    snprintf(nm, sizeof nm, "synthetic-%s", A);
    gguf_w_str(w, "general.name", c.name ? c.name : nm);
    gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c.n_vocab);
    gguf_w_u32(w, KEY("context_length"), (uint32_t)c.n_ctx_train);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)E);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)NB);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)c.n_ff);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)c.n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)c.n_head_kv);
    gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)D);
    gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)D);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), c.rms_eps);
    gguf_w_f32(w, KEY("rope.freq_base"), c.rope_base);
    gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)c.n_rot);
    gguf_w_arr_i32(w, KEY("rope.dimension_sections"), 4, c.sections);
    gguf_w_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c.d_conv);
    gguf_w_u32(w, KEY("ssm.state_size"), (uint32_t)c.d_state);
    gguf_w_u32(w, KEY("ssm.group_count"), (uint32_t)c.h_k);
    gguf_w_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c.h_v);
    gguf_w_u32(w, KEY("ssm.inner_size"), (uint32_t)value_dim);
    gguf_w_u32(w, KEY("full_attention_interval"), (uint32_t)c.interval);
    bool rec[1024];
    for (int i = 0; i < NB && i < 1024; i++)
        rec[i] = i < c.n_layer && (c.recurrent ? c.recurrent[i] == '1' : (i + 1) % c.interval != 0);
    if (c.recurrent)
        gguf_w_arr_bool(w, KEY("attention.recurrent_layers"), (uint64_t)NB, rec);
    if (c.nextn)
        gguf_w_u32(w, KEY("nextn_predict_layers"), (uint32_t)c.nextn);
    if (moe) {
        gguf_w_u32(w, KEY("expert_count"), (uint32_t)c.n_expert);
        gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)c.n_used);
        gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c.n_ff_exp);
        gguf_w_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c.n_ff_shexp);
    }
    if (synth_spm_vocab(w, c.n_vocab)) {
        fprintf(stderr, "mksynth_qwen35: out of memory for the vocabulary\n");
        return 1;
    }

    mat(&x, "token_embd.weight", NULL, E, c.n_vocab, 1, c.embd_type, 0, c.embd_std);
    vec(&x, "output_norm.weight", E, 1.0f, c.norm_std);
    if (!c.tie)
        mat(&x, "output.weight", NULL, E, c.n_vocab, 1, c.embd_type, 0, c.embd_std);
    for (int il = 0; il < NB; il++) {
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d.%s", il, s), nm)
        vec(&x, NM("attn_norm.weight"), E, 1.0f, c.norm_std);
        vec(&x, NM("post_attention_norm.weight"), E, 1.0f, c.norm_std);
        if (rec[il]) {
            mat(&x, NM("attn_qkv.weight"), "qkv", E, conv_dim, 1, c.type, 0, c.std);
            mat(&x, NM("attn_gate.weight"), "gate", E, value_dim, 1, c.type, 0, c.std);
            mat(&x, NM("ssm_conv1d.weight"), "conv", c.d_conv, conv_dim, 1, QT_F32, 0, c.conv_std);
            vec(&x, NM("ssm_dt.bias"), c.h_v, 0, 0.5f);
            vec_ssm_a(&x, NM("ssm_a"), c.h_v);
            mat(&x, NM("ssm_beta.weight"), "beta", E, c.h_v, 1, c.type, 0, c.std);
            mat(&x, NM("ssm_alpha.weight"), "alpha", E, c.h_v, 1, c.type, 0, c.std);
            vec(&x, NM("ssm_norm.weight"), c.d_state, 1.0f, c.norm_std);
            mat(&x, NM("ssm_out.weight"), "ssm_out", value_dim, E, 1, c.type, 0, c.std);
        } else {
            mat(&x, NM("attn_q.weight"), "q", E, 2 * c.n_head * D, 1, c.type, 0, c.std);
            mat(&x, NM("attn_k.weight"), "k", E, c.n_head_kv * D, 1, c.type, 0, c.std);
            mat(&x, NM("attn_v.weight"), "v", E, c.n_head_kv * D, 1, c.type, 0, c.std);
            mat(&x, NM("attn_output.weight"), "o", c.n_head * D, E, 1, c.type, 0, c.std);
            vec(&x, NM("attn_q_norm.weight"), D, 1.0f, c.norm_std);
            vec(&x, NM("attn_k_norm.weight"), D, 1.0f, c.norm_std);
        }
        if (!moe) {
            mat(&x, NM("ffn_gate.weight"), "ffn_gate", E, c.n_ff, 1, c.type, 0, c.std);
            mat(&x, NM("ffn_up.weight"), "ffn_up", E, c.n_ff, 1, c.type, 0, c.std);
            mat(&x, NM("ffn_down.weight"), "ffn_down", c.n_ff, E, 1, c.type, 0, c.std);
        } else {
            const int64_t X = c.n_expert, F = c.n_ff_exp, FS = c.n_ff_shexp;
            mat(&x, NM("ffn_gate_inp.weight"), NULL, E, X, 1, QT_F32, 0, c.router_std);
            if (c.fused_gate_up) {
                mat(&x, NM("ffn_gate_up_exps.weight"), "gu_exps", E, 2 * F, X, c.type, 0, c.std);
            } else {
                mat(&x, NM("ffn_gate_exps.weight"), "g_exps", E, F, X, c.type, 0, c.std);
                mat(&x, NM("ffn_up_exps.weight"), "u_exps", E, F, X, c.type, 0, c.std);
            }
            mat(&x, NM("ffn_down_exps.weight"), "d_exps", F, E, X, c.type, 0, c.std);
            if (FS > 0) {
                vec(&x, NM("ffn_gate_inp_shexp.weight"), E, 0, c.std);
                mat(&x, NM("ffn_gate_shexp.weight"), "g_sh", E, FS, 1, c.type, 0, c.std);
                mat(&x, NM("ffn_up_shexp.weight"), "u_sh", E, FS, 1, c.type, 0, c.std);
                mat(&x, NM("ffn_down_shexp.weight"), "d_sh", FS, E, 1, c.type, 0, c.std);
            }
        }
        if (il >= c.n_layer) { /* MTP block extras */
            mat(&x, NM("nextn.eh_proj.weight"), NULL, 2 * E, E, 1, c.type, 0, c.std);
            vec(&x, NM("nextn.enorm.weight"), E, 1.0f, c.norm_std);
            vec(&x, NM("nextn.hnorm.weight"), E, 1.0f, c.norm_std);
            vec(&x, NM("nextn.shared_head_norm.weight"), E, 1.0f, c.norm_std);
        }
#undef NM
    }
#undef KEY
    struct err e = { 0 };
    int rc = gguf_w_write(w, c.out, &e);
    if (rc)
        fprintf(stderr, "mksynth_qwen35: %s\n", e.msg);
    else
        fprintf(stderr, "wrote %s: %s, %d trunk layers + %d MTP, n_embd %d, vocab %d\n", c.out, A, c.n_layer, c.nextn,
                c.n_embd, c.n_vocab);
    gguf_w_free(w);
    for (int i = 0; i < x.n_own; i++)
        free(x.own[i]);
    free(x.own);
    return rc ? 1 : 0;
}
