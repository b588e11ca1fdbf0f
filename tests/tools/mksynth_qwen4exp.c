/* mksynth_qwen4exp.c — write a random-weight qwen4exp GGUF with the project's GGUF writer
 * (worker/gguf/gguf_write.h), following shared spec arch-qwen4exp.md §1–§2 and, for what it
 * inherits, arch-qwen35.md §2, §5:
 *
 *   - hyper-connections: hc streams, per-layer hc_{attn,ffn}_{norm,down,up,inject} and the
 *     output mixer output_hc_{norm,down,up}; no output_norm;
 *   - GDN layers as qwen35 (ssm_conv1d always F32: llama.cpp's CPU ssm_conv asserts on F16);
 *   - gated full-attention layers with the QSA indexer tensors (required on every attention
 *     layer, also where the compress ratio is 0) and attention.compress_ratios (block_count
 *     entries, INT32 as the converter writes them);
 *   - MoE with the gated shared expert on every layer;
 *   - optionally PLE on one GDN layer (ple.* keys; the three hash arrays UINT64, the only
 *     64-bit array type the loader accepts), per_layer_token_embd and blk.N.ple_*.
 * Norm weights are stored already "+1" (1 ± norm_std), ssm_norm plain, ssm_a = −exp(·).
 * Matrices are N(0, gain·g/sqrt(fan_in)) so that activations stay O(1) at any width.
 *
 *   mksynth_qwen4exp --out F.gguf [options]      (--help lists them)
 *
 * Same arguments + seed → byte-identical file. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../common/err.h"
#include "../../worker/gguf/gguf_write.h"
#include "../../worker/num/quant.h"
#include "synth_vocab.h"

#define MAX_LAYERS 256
#define MAX_PLE_HEADS 64 /* LLAMA_MAX_PLE_HEADS */
#define MAX_NGRAM 8      /* LLAMA_MAX_PLE_NGRAM */

struct cfg {
    const char *out, *name, *ratios, *recurrent, *ple_vocab;
    uint64_t seed;
    int n_vocab, n_embd, n_layer, interval, hc, hc_lr, n_head, n_head_kv, head_dim, n_rot, sections[4];
    int idx_heads, idx_dim, top_k;
    int d_state, h_k, h_v, d_conv, n_expert, n_used, n_ff_exp, n_ff_shexp, n_ctx_train;
    int ple, ple_layer, ngram, heads_per_ngram, ple_kernel, ple_pad, ple_eos, ple_image;
    float rope_base, rms_eps, gain, embd_std, norm_std, conv_std;
    enum qtype type, embd_type, hc_type, ple_type;
    int tie, fused_gate_up, u32_arrays, nextn_key;
};

/* The shared tiny model of the spec (qwen4exp-tiny) has this shape, with a 512-token vocab here. */
static void defaults(struct cfg *c)
{
    *c = (struct cfg){ .seed = 1, .n_vocab = 512, .n_embd = 64, .n_layer = 6, .interval = 2, .hc = 3, .hc_lr = 8,
                       .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_rot = 8, .sections = { 1, 1, 0, 1 },
                       .idx_heads = 2, .idx_dim = 16, .top_k = 4, .d_state = 8, .h_k = 2, .h_v = 4, .d_conv = 4,
                       .n_expert = 4, .n_used = 2, .n_ff_exp = 16, .n_ff_shexp = 24, .n_ctx_train = 4096,
                       .ple = 1, .ple_layer = -1, .ngram = 3, .heads_per_ngram = 2, .ple_kernel = 3, .ple_pad = 5,
                       .ple_eos = 2, .ple_image = -1, .rope_base = 10000.0f, .rms_eps = 1e-6f, .gain = 1.0f,
                       .embd_std = 1.0f, .norm_std = 0.1f, .conv_std = 0.5f, .type = QT_F32,
                       .embd_type = QT_COUNT, .hc_type = QT_COUNT, .ple_type = QT_COUNT };
}

static void die(const char *msg, const char *arg)
{
    fprintf(stderr, "mksynth_qwen4exp: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    exit(2);
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

/* A type that cannot hold whole rows of ne0 (ne0 not a multiple of its block) falls back to F32, so one
 * --type can be given for every matrix of a small model. */
static enum qtype fit(enum qtype t, int64_t ne0)
{
    const struct qtype_info *qi = qtype_get(t);
    return qi && ne0 % qi->blck == 0 ? t : QT_F32;
}

/* A gaussian tensor {ne0, ne1, ne2} with nd dimensions, drawn row by row in f32 and then stored as t. */
static void tensor(struct gguf_w *w, const char *name, uint32_t nd, int64_t ne0, int64_t ne1, int64_t ne2,
                   enum qtype t, float mean, float sd)
{
    t = fit(t, ne0);
    const int64_t ne[3] = { ne0, ne1, ne2 }, rows = ne1 * ne2;
    const size_t rb = qtype_row_size(t, ne0);
    char *buf = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)ne0);
    if (!buf || !row)
        die("out of memory for", name);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne0; i++)
            row[i] = gauss(mean, sd);
        if (t == QT_F32)
            memcpy(buf + (size_t)r * rb, row, rb);
        else if (!quant_weights_row(t, row, buf + (size_t)r * rb, ne0))
            die("the project's quantizer cannot write type", qtype_get(t)->name);
    }
    gguf_w_tensor(w, name, nd, ne, t, buf, rb * (size_t)rows); /* a failure is latched and reported by the write */
    free(row);
    free(buf);
}

/* A weight {n_in, n_out[, n_mat]}: sd = g / sqrt(n_in), like a fan-in initialisation. */
static void mat(struct gguf_w *w, const struct cfg *c, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat,
                enum qtype t, float g)
{
    tensor(w, name, n_mat > 1 ? 3 : 2, n_in, n_out, n_mat, t, 0.0f, c->gain * g / sqrtf((float)n_in));
}

static void vec(struct gguf_w *w, const char *name, int64_t n, float mean, float sd)
{
    tensor(w, name, 1, n, 1, 1, QT_F32, mean, sd);
}

/* ssm_a is stored as −exp(A_log) (arch-qwen35.md §5.4): negative, so the GDN decay g ≤ 0. */
static void vec_ssm_a(struct gguf_w *w, const char *name, int64_t n)
{
    float *d = malloc(sizeof(float) * (size_t)n);
    if (!d)
        die("out of memory for", name);
    for (int64_t i = 0; i < n; i++)
        d[i] = -expf(gauss(0.0f, 0.5f));
    gguf_w_tensor_f32(w, name, 1, &n, d);
    free(d);
}

static enum qtype parse_type(const char *s)
{
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const struct qtype_info *qi = qtype_get(t);
        if (qi && qi->known && !strcasecmp(qi->name, s))
            return (enum qtype)t;
    }
    die("unknown type", s);
    return QT_F32;
}

/* "a,b,c" → up to max integers; returns the count (exits on anything that is not a list of integers). */
static int parse_list(const char *s, int64_t *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || n == max)
            die("bad or too long integer list", s);
        out[n++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            die("bad integer list", s);
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mksynth_qwen4exp --out F.gguf [--seed N] [--name S]\n"
            "  shape: --vocab N --n-embd N --n-layer N --interval N --recurrent 1101.. --n-head N --n-head-kv N\n"
            "         --head-dim N --n-rot N --sections t,h,w,e --rope-base F --rms-eps F\n"
            "         --d-state N --h-k N --h-v N --d-conv N --tie --nextn-key\n"
            "  hc:    --hc N (streams, > 1) --hc-lr N (low rank)\n"
            "  qsa:   --ratios R | r0,r1,.. (one value: every attention layer, 0 on GDN layers, default 2; or n-layer\n"
            "         values)\n"
            "         --top-k N --idx-heads N --idx-dim N --u32-arrays (compress_ratios, ple.layers as UINT32)\n"
            "  moe:   --n-expert N --n-used N --n-ff-exp N --n-ff-shexp N --fused-gate-up\n"
            "  ple:   --no-ple | --ple-layer N (a GDN layer; default the first GDN layer after 0) --ngram N\n"
            "         --heads-per-ngram N --ple-kernel N --ple-vocab v0,v1,.. (one per PLE head) --ple-pad N\n"
            "         --ple-eos ID --ple-image ID\n"
            "  data:  --type f32|f16|q8_0|q4_K|.. (matrices) --embd-type T (token_embd, output) --hc-type T\n"
            "         --ple-type T (per_layer_token_embd) --gain F --embd-std F --norm-std F --conv-std F\n");
    exit(2);
}

static bool is_prime(int64_t v)
{
    for (int64_t d = 2; d * d <= v; d++)
        if (v % d == 0)
            return false;
    return v > 1;
}

int main(int argc, char **argv)
{
    struct cfg c;
    defaults(&c);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s) (!strcmp(a, s) && v && ++i)
        if (OPT("--out"))
            c.out = v;
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
        else if (OPT("--hc"))
            c.hc = atoi(v);
        else if (OPT("--hc-lr"))
            c.hc_lr = atoi(v);
        else if (OPT("--n-head"))
            c.n_head = atoi(v);
        else if (OPT("--n-head-kv"))
            c.n_head_kv = atoi(v);
        else if (OPT("--head-dim"))
            c.head_dim = atoi(v);
        else if (OPT("--n-rot") || OPT("--rope-dim"))
            c.n_rot = atoi(v);
        else if (OPT("--sections")) {
            int64_t s[4];
            if (parse_list(v, s, 4) != 4)
                die("--sections needs 4 values:", v);
            for (int j = 0; j < 4; j++)
                c.sections[j] = (int)s[j];
        } else if (OPT("--rope-base"))
            c.rope_base = strtof(v, NULL);
        else if (OPT("--rms-eps"))
            c.rms_eps = strtof(v, NULL);
        else if (OPT("--ratios"))
            c.ratios = v;
        else if (OPT("--top-k"))
            c.top_k = atoi(v);
        else if (OPT("--idx-heads"))
            c.idx_heads = atoi(v);
        else if (OPT("--idx-dim"))
            c.idx_dim = atoi(v);
        else if (OPT("--d-state"))
            c.d_state = atoi(v);
        else if (OPT("--h-k"))
            c.h_k = atoi(v);
        else if (OPT("--h-v"))
            c.h_v = atoi(v);
        else if (OPT("--d-conv"))
            c.d_conv = atoi(v);
        else if (OPT("--n-expert"))
            c.n_expert = atoi(v);
        else if (OPT("--n-used"))
            c.n_used = atoi(v);
        else if (OPT("--n-ff-exp"))
            c.n_ff_exp = atoi(v);
        else if (OPT("--n-ff-shexp"))
            c.n_ff_shexp = atoi(v);
        else if (OPT("--ple-layer"))
            c.ple_layer = atoi(v), c.ple = 1;
        else if (OPT("--ngram"))
            c.ngram = atoi(v);
        else if (OPT("--heads-per-ngram"))
            c.heads_per_ngram = atoi(v);
        else if (OPT("--ple-kernel"))
            c.ple_kernel = atoi(v);
        else if (OPT("--ple-vocab"))
            c.ple_vocab = v;
        else if (OPT("--ple-pad"))
            c.ple_pad = atoi(v);
        else if (OPT("--ple-eos"))
            c.ple_eos = atoi(v);
        else if (OPT("--ple-image"))
            c.ple_image = atoi(v);
        else if (OPT("--type"))
            c.type = parse_type(v);
        else if (OPT("--embd-type"))
            c.embd_type = parse_type(v);
        else if (OPT("--hc-type"))
            c.hc_type = parse_type(v);
        else if (OPT("--ple-type"))
            c.ple_type = parse_type(v);
        else if (OPT("--gain"))
            c.gain = strtof(v, NULL);
        else if (OPT("--embd-std"))
            c.embd_std = strtof(v, NULL);
        else if (OPT("--norm-std"))
            c.norm_std = strtof(v, NULL);
        else if (OPT("--conv-std"))
            c.conv_std = strtof(v, NULL);
        else if (!strcmp(a, "--no-ple"))
            c.ple = 0;
        else if (!strcmp(a, "--tie"))
            c.tie = 1;
        else if (!strcmp(a, "--fused-gate-up"))
            c.fused_gate_up = 1;
        else if (!strcmp(a, "--u32-arrays"))
            c.u32_arrays = 1;
        else if (!strcmp(a, "--nextn-key"))
            c.nextn_key = 1;
        else
            usage();
#undef OPT
    }
    if (c.embd_type == QT_COUNT)
        c.embd_type = c.type;
    if (c.hc_type == QT_COUNT)
        c.hc_type = c.type;
    if (c.ple_type == QT_COUNT)
        c.ple_type = c.embd_type;

    /* ---- validate what llama.cpp 80fb11a's loader and graph need, so a file that is written also loads ---- */
    if (!c.out)
        usage();
    if (c.n_vocab < 300 || c.n_embd < 1 || c.n_layer < 2 || c.n_layer > MAX_LAYERS - 1 || c.interval < 1)
        die("bad --vocab (>= 300), --n-embd, --n-layer (2..255) or --interval", NULL);
    if (c.hc < 2 || c.hc_lr < 1)
        die("--hc must be > 1 and --hc-lr > 0", NULL);
    if (c.n_head < 1 || c.n_head_kv < 1 || c.n_head % c.n_head_kv || c.n_rot < 2 || c.n_rot % 2 ||
        c.n_rot > c.head_dim || c.n_rot > c.idx_dim)
        die("bad heads, or --n-rot not even and <= --head-dim and <= --idx-dim (IMROPE rotates indexer heads)", NULL);
    if (c.idx_heads < 1 || c.idx_dim < 1 || c.top_k < 1)
        die("--idx-heads, --idx-dim and --top-k must be > 0", NULL);
    if (c.d_state < 1 || c.h_k < 1 || c.h_v < 1 || c.h_v % c.h_k || c.d_conv < 1)
        die("bad GDN dims (--h-v must be a multiple of --h-k)", NULL);
    if (c.n_expert < 1 || c.n_used < 1 || c.n_used > c.n_expert || c.n_ff_exp < 1 || c.n_ff_shexp < 1)
        die("bad MoE dims (the shared expert is required: --n-ff-shexp > 0)", NULL);
    if (c.recurrent && (int)strlen(c.recurrent) != c.n_layer)
        die("--recurrent needs one 0/1 per layer:", c.recurrent);

    const int L = c.n_layer, NB = L + c.nextn_key;
    bool rec[MAX_LAYERS] = { 0 };
    int n_rec = 0;
    for (int i = 0; i < L; i++) {
        rec[i] = c.recurrent ? c.recurrent[i] == '1' : (i + 1) % c.interval != 0;
        n_rec += rec[i];
    }
    /* llama.cpp aborts at the first decode when either cache (KV or recurrent) would be empty */
    if (n_rec == 0 || n_rec == L)
        die("the trunk needs at least one GDN and one attention layer (llama.cpp aborts otherwise)", NULL);

    int32_t ratio[MAX_LAYERS] = { 0 };
    {
        int64_t r[MAX_LAYERS];
        const int n = c.ratios ? parse_list(c.ratios, r, MAX_LAYERS) : 0;
        if (c.ratios && n != 1 && n != L)
            die("--ratios needs one value or --n-layer values:", c.ratios);
        for (int i = 0; i < L; i++) {
            const int64_t v = !c.ratios ? (rec[i] ? 0 : 2) : n == 1 ? (rec[i] ? 0 : r[0]) : r[i];
            if (v < 0 || v > 64) /* llama.cpp asserts r <= 64 */
                die("compress ratios must be 0..64:", c.ratios);
            ratio[i] = (int32_t)v;
        }
    }

    int n_ple_heads = 0, d_ple = 0;
    uint64_t ple_vs[MAX_PLE_HEADS], ple_off[MAX_PLE_HEADS], ple_mult[MAX_NGRAM];
    int64_t ple_rows = 0;
    if (c.ple) {
        if (c.ple_layer < 0) /* the real model's choice: the first GDN layer after layer 0 */
            for (int i = L - 1; i >= 1; i--)
                if (rec[i])
                    c.ple_layer = i;
        if (c.ple_layer < 0 || c.ple_layer >= L || !rec[c.ple_layer])
            die("the PLE layer must be a GDN layer (llama.cpp rejects it otherwise)", NULL);
        if (c.ngram < 2 || c.ngram > MAX_NGRAM || c.heads_per_ngram < 1 || c.ple_kernel < 1 || c.ple_pad < 0)
            die("bad --ngram (2..8), --heads-per-ngram, --ple-kernel or --ple-pad", NULL);
        n_ple_heads = (c.ngram - 1) * c.heads_per_ngram;
        if (n_ple_heads > MAX_PLE_HEADS || c.n_embd % n_ple_heads)
            die("(ngram-1)*heads_per_ngram must be <= 64 and divide --n-embd (heads*d_ple = n_embd)", NULL);
        d_ple = c.n_embd / n_ple_heads;
        if (c.ple_eos < 0 || c.ple_eos >= c.n_vocab || c.ple_image >= c.n_vocab)
            die("--ple-eos / --ple-image must be token ids", NULL);
        if (c.ple_vocab) {
            int64_t vs[MAX_PLE_HEADS];
            if (parse_list(c.ple_vocab, vs, MAX_PLE_HEADS) != n_ple_heads)
                die("--ple-vocab needs one size per PLE head ((ngram-1)*heads_per_ngram):", c.ple_vocab);
            for (int h = 0; h < n_ple_heads; h++) {
                if (vs[h] < 1 || vs[h] > INT32_MAX)
                    die("PLE head vocab sizes must be 1..INT32_MAX:", c.ple_vocab);
                ple_vs[h] = (uint64_t)vs[h];
            }
        } else { /* distinct primes from 11 up, so different heads of one order land on different rows */
            int64_t p = 10;
            for (int h = 0; h < n_ple_heads; h++) {
                while (!is_prime(++p))
                    ;
                ple_vs[h] = (uint64_t)p;
            }
        }
        for (int h = 0; h < n_ple_heads; h++) { /* heads back to back in one table, as the converter lays them */
            ple_off[h] = (uint64_t)ple_rows;
            ple_rows += (int64_t)ple_vs[h];
        }
        ple_rows += c.ple_pad; /* the converter pads the table; rows past the last head are never read */
        if (ple_rows > INT32_MAX)
            die("the PLE table is too large", NULL);
    }

    g_rng = c.seed * 0x2545F4914F6CDD1Dull + 1;
    /* ~45-bit odd multipliers like the real model's: the hash products wrap in 64 bits */
    for (int i = 0; i < c.ngram && c.ple; i++)
        ple_mult[i] = (1ull << 44) | (next_u64() >> 20) | 1ull;

    const char *A = "qwen4exp";
    const int64_t E = c.n_embd, D = c.head_dim, HC = (int64_t)c.hc * E, LR = c.hc_lr;
    const int64_t key_dim = (int64_t)c.h_k * c.d_state, value_dim = (int64_t)c.h_v * c.d_state;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    struct gguf_w *w = gguf_w_new();
    if (!w)
        die("out of memory", NULL);
    char k[160], nm[96];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", A, s), k)
    gguf_w_str(w, "general.architecture", A);
    gguf_w_str(w, "general.name", c.name ? c.name : "synthetic-qwen4exp");
    gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c.n_vocab);
    gguf_w_u32(w, KEY("context_length"), (uint32_t)c.n_ctx_train);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)E);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)NB);
    if (c.nextn_key) /* loads in 80fb11a (no MTP graph for this arch); the trunk is layers 0..n_layer-1 */
        gguf_w_u32(w, KEY("nextn_predict_layers"), 1);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)(2 * c.n_ff_exp));
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
    if (c.recurrent)
        gguf_w_arr_bool(w, KEY("attention.recurrent_layers"), (uint64_t)NB, rec);
    gguf_w_u32(w, KEY("expert_count"), (uint32_t)c.n_expert);
    gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)c.n_used);
    gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c.n_ff_exp);
    gguf_w_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c.n_ff_shexp);
    gguf_w_u32(w, KEY("hyper_connection.count"), (uint32_t)c.hc);
    gguf_w_u32(w, KEY("hyper_connection.low_rank"), (uint32_t)c.hc_lr);
    gguf_w_u32(w, KEY("attention.indexer.head_count"), (uint32_t)c.idx_heads);
    gguf_w_u32(w, KEY("attention.indexer.key_length"), (uint32_t)c.idx_dim);
    gguf_w_u32(w, KEY("attention.indexer.top_k"), (uint32_t)c.top_k);
    /* exactly block_count entries (a shorter array is rejected); INT32 as gguf-py infers for the converter */
    const enum gguf_vtype arr_t = c.u32_arrays ? GGUF_UINT32 : GGUF_INT32;
    gguf_w_arr(w, KEY("attention.compress_ratios"), arr_t, (uint64_t)NB, ratio);
    if (c.ple) {
        const int32_t layer = c.ple_layer;
        gguf_w_arr(w, KEY("ple.layers"), arr_t, 1, &layer);
        gguf_w_u32(w, KEY("ple.ngram_size"), (uint32_t)c.ngram);
        gguf_w_u32(w, KEY("ple.heads_per_ngram"), (uint32_t)c.heads_per_ngram);
        gguf_w_u32(w, KEY("ple.conv_kernel"), (uint32_t)c.ple_kernel);
        gguf_w_u32(w, KEY("ple.eos_token_id"), (uint32_t)c.ple_eos);
        if (c.ple_image >= 0)
            gguf_w_u32(w, KEY("ple.image_token_id"), (uint32_t)c.ple_image);
        gguf_w_u32(w, KEY("embedding_length_per_layer_input"), (uint32_t)d_ple);
        /* the loader reads these three as u64 and accepts only UINT64 arrays (INT64 is rejected) */
        gguf_w_arr(w, KEY("ple.layer_multipliers"), GGUF_UINT64, (uint64_t)c.ngram, ple_mult);
        gguf_w_arr(w, KEY("ple.head_offsets"), GGUF_UINT64, (uint64_t)n_ple_heads, ple_off);
        gguf_w_arr(w, KEY("ple.head_vocab_sizes"), GGUF_UINT64, (uint64_t)n_ple_heads, ple_vs);
    }
#undef KEY
    if (synth_spm_vocab(w, c.n_vocab))
        die("out of memory for the vocabulary", NULL);

    const float ns = c.norm_std;
    tensor(w, "token_embd.weight", 2, E, c.n_vocab, 1, c.embd_type, 0.0f, c.embd_std);
    vec(w, "output_hc_norm.weight", HC, 1.0f, ns);
    /* gain 2 on the HC mixers keeps the sigmoid gates away from a flat 0.5 */
    mat(w, &c, "output_hc_down.weight", HC, LR, 1, c.hc_type, 2.0f);
    mat(w, &c, "output_hc_up.weight", LR, HC, 1, c.hc_type, 2.0f);
    if (!c.tie) /* gain 3: logits with an O(1) spread, so greedy picks are not near-ties */
        mat(w, &c, "output.weight", E, c.n_vocab, 1, c.embd_type, 3.0f);
    if (c.ple) /* rows are the PLE embeddings themselves: unit scale like token_embd */
        tensor(w, "per_layer_token_embd.weight", 2, d_ple, ple_rows, 1, c.ple_type, 0.0f, c.embd_std);

    for (int il = 0; il < L; il++) {
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d.%s", il, s), nm)
        static const char *const kind[2] = { "attn", "ffn" };
        for (int j = 0; j < 2; j++) {
            char s[48];
            snprintf(s, sizeof s, "hc_%s_norm.weight", kind[j]);
            vec(w, NM(s), HC, 1.0f, ns);
            snprintf(s, sizeof s, "hc_%s_down.weight", kind[j]);
            mat(w, &c, NM(s), HC, LR, 1, c.hc_type, 2.0f);
            snprintf(s, sizeof s, "hc_%s_up.weight", kind[j]);
            mat(w, &c, NM(s), LR, HC, 1, c.hc_type, 2.0f);
            snprintf(s, sizeof s, "hc_%s_inject.weight", kind[j]);
            mat(w, &c, NM(s), HC, c.hc, 1, c.hc_type, 2.0f);
        }
        if (rec[il]) {
            mat(w, &c, NM("attn_qkv.weight"), E, conv_dim, 1, c.type, 1.0f);
            mat(w, &c, NM("attn_gate.weight"), E, value_dim, 1, c.type, 1.0f);
            tensor(w, NM("ssm_conv1d.weight"), 2, c.d_conv, conv_dim, 1, QT_F32, 0.0f, c.conv_std);
            vec(w, NM("ssm_dt.bias"), c.h_v, 0.0f, 0.5f);
            vec_ssm_a(w, NM("ssm_a"), c.h_v);
            mat(w, &c, NM("ssm_beta.weight"), E, c.h_v, 1, c.type, 1.0f);
            mat(w, &c, NM("ssm_alpha.weight"), E, c.h_v, 1, c.type, 1.0f);
            vec(w, NM("ssm_norm.weight"), c.d_state, 1.0f, ns);
            mat(w, &c, NM("ssm_out.weight"), value_dim, E, 1, c.type, 1.0f);
        } else {
            mat(w, &c, NM("attn_q.weight"), E, 2 * c.n_head * D, 1, c.type, 1.0f);
            mat(w, &c, NM("attn_k.weight"), E, c.n_head_kv * D, 1, c.type, 1.0f);
            mat(w, &c, NM("attn_v.weight"), E, c.n_head_kv * D, 1, c.type, 1.0f);
            mat(w, &c, NM("attn_output.weight"), c.n_head * D, E, 1, c.type, 1.0f);
            vec(w, NM("attn_q_norm.weight"), D, 1.0f, ns);
            vec(w, NM("attn_k_norm.weight"), D, 1.0f, ns);
            /* required on every attention layer, also where the compress ratio is 0 */
            mat(w, &c, NM("indexer.q_proj.weight"), E, (int64_t)c.idx_heads * c.idx_dim, 1, c.type, 1.0f);
            mat(w, &c, NM("indexer.k_proj.weight"), E, c.idx_dim, 1, c.type, 1.0f);
            vec(w, NM("indexer.q_norm.weight"), c.idx_dim, 1.0f, ns);
            vec(w, NM("indexer.k_norm.weight"), c.idx_dim, 1.0f, ns);
        }
        if (c.ple && il == c.ple_layer) {
            mat(w, &c, NM("ple_key.weight"), E, HC, 1, c.type, 1.0f);
            mat(w, &c, NM("ple_value.weight"), E, E, 1, c.type, 1.0f);
            vec(w, NM("ple_norm_key.weight"), HC, 1.0f, ns);
            vec(w, NM("ple_norm_query.weight"), HC, 1.0f, ns);
            vec(w, NM("ple_norm_conv.weight"), HC, 1.0f, ns);
            /* llama.cpp casts it to F32 whatever its type; F32 keeps the golden exact */
            tensor(w, NM("ple_conv1d.weight"), 2, c.ple_kernel, HC, 1, QT_F32, 0.0f, c.conv_std);
        }
        const int64_t X = c.n_expert, F = c.n_ff_exp, FS = c.n_ff_shexp;
        /* the router stays F32 as in published files; gain 2 so that the top-k choice is not a near-tie */
        tensor(w, NM("ffn_gate_inp.weight"), 2, E, X, 1, QT_F32, 0.0f, c.gain * 2.0f / sqrtf((float)E));
        if (c.fused_gate_up) {
            mat(w, &c, NM("ffn_gate_up_exps.weight"), E, 2 * F, X, c.type, 1.0f);
        } else {
            mat(w, &c, NM("ffn_gate_exps.weight"), E, F, X, c.type, 1.0f);
            mat(w, &c, NM("ffn_up_exps.weight"), E, F, X, c.type, 1.0f);
        }
        mat(w, &c, NM("ffn_down_exps.weight"), F, E, X, c.type, 1.0f);
        vec(w, NM("ffn_gate_inp_shexp.weight"), E, 0.0f, c.gain / sqrtf((float)E));
        mat(w, &c, NM("ffn_gate_shexp.weight"), E, FS, 1, c.type, 1.0f);
        mat(w, &c, NM("ffn_up_shexp.weight"), E, FS, 1, c.type, 1.0f);
        mat(w, &c, NM("ffn_down_shexp.weight"), FS, E, 1, c.type, 1.0f);
#undef NM
    }

    struct err e = { 0 };
    int rc = gguf_w_write(w, c.out, &e);
    if (rc) {
        fprintf(stderr, "mksynth_qwen4exp: %s\n", e.msg);
    } else {
        fprintf(stderr, "wrote %s: qwen4exp, %d layers (%d GDN), n_embd %d, hc %d, vocab %d, ", c.out, L, n_rec,
                c.n_embd, c.hc, c.n_vocab);
        if (c.ple)
            fprintf(stderr, "PLE on layer %d (%d heads x %d, %lld rows)\n", c.ple_layer, n_ple_heads, d_ple,
                    (long long)ple_rows);
        else
            fprintf(stderr, "no PLE\n");
    }
    gguf_w_free(w);
    return rc ? 1 : 0;
}
