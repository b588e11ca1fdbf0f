/* requant — rewrite an F32 GGUF model with its weight matrices quantized to one ggml type,
 * so that the quantized-weight goldens (tests/golden/quant/) can be rebuilt without llama.cpp.
 *
 *     requant IN.gguf OUT.gguf TYPE     TYPE: q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k
 *                                             iq4_nl iq4_xs mxfp4 f16 bf16 f32
 *
 * Which tensors are quantized follows llama.cpp's llama_model_quantize with `pure` set, so the
 * result holds the same tensors of the same types as `oracle quantize IN OUT TYPE`: every F32
 * tensor of 2 or 3 dimensions (3-D = MoE expert stacks) whose name ends in "weight", except the
 * norms ("_norm.weight") and the MoE router ("ffn_gate_inp.weight"). Rows are quantized one by one
 * with quant_weights_row (ggml's reference quantizers, no importance matrix). A row length that is
 * not a whole number of blocks is an error (llama.cpp would fall back to another type; the goldens
 * choose shapes where no fallback happens). All metadata is copied; general.file_type is set to
 * the matching llama_ftype. Tensors keep their order.
 *
 * TYPE f32 on a quantized model writes its quantized matrices dequantized instead: exact f32
 * copies of the weights the quantized model holds, so an engine running the quantized file on
 * f32 activations can be held to the CPU engine running the f32 file (test_hip_engine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../common/err.h"
#include "../../worker/gguf/gguf.h"
#include "../../worker/gguf/gguf_write.h"
#include "../../worker/num/quant.h"

static const struct {
    const char *name;
    enum qtype type;
    uint32_t ftype; /* llama_ftype written to general.file_type (the pure variant's base type) */
} TYPES[] = {
    {"f32", QT_F32, 0},     {"f16", QT_F16, 1},       {"q4_0", QT_Q4_0, 2},     {"q4_1", QT_Q4_1, 3},
    {"q8_0", QT_Q8_0, 7},   {"q5_0", QT_Q5_0, 8},     {"q5_1", QT_Q5_1, 9},     {"q2_k", QT_Q2_K, 10},
    {"q3_k", QT_Q3_K, 12},  {"q4_k", QT_Q4_K, 15},    {"q5_k", QT_Q5_K, 17},    {"q6_k", QT_Q6_K, 18},
    {"iq4_nl", QT_IQ4_NL, 25}, {"iq4_xs", QT_IQ4_XS, 30}, {"bf16", QT_BF16, 32}, {"mxfp4", QT_MXFP4, 38},
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* llama_model_quantize's choice of tensors (pure mode), for the tensors our dense/MoE models have. */
static bool wants_quant(const struct gguf_tensor *t)
{
    return t->type == QT_F32 && t->n_dims >= 2 && t->n_dims <= 3 && ends_with(t->name, "weight") &&
           !strstr(t->name, "_norm.weight") && !strstr(t->name, "ffn_gate_inp.weight");
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: requant IN.gguf OUT.gguf TYPE\n");
        return 2;
    }
    int ti = -1;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcasecmp(argv[3], TYPES[i].name))
            ti = (int)i;
    if (ti < 0) {
        fprintf(stderr, "requant: unknown type '%s'\n", argv[3]);
        return 2;
    }
    enum qtype qt = TYPES[ti].type;
    const struct qtype_info *qi = qtype_get((uint32_t)qt);

    struct err e;
    err_clear(&e);
    struct gguf *g = NULL;
    if (gguf_open(&g, argv[1], &e) != 0) {
        fprintf(stderr, "requant: %s\n", e.msg);
        return 1;
    }
    struct gguf_w *w = gguf_w_new();
    void **bufs = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *bufs);
    int rc = w && bufs ? 0 : ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_kv && rc == 0; i++) {
        rc = gguf_w_kv_copy(w, &g->kv[i]);
        if (rc)
            fprintf(stderr, "requant: cannot copy key '%.*s'\n", (int)g->kv[i].key.len, g->kv[i].key.ptr);
    }
    if (rc == 0)
        rc = gguf_w_u32(w, "general.file_type", TYPES[ti].ftype);
    for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        if (qt == QT_F32 && t->type != QT_F32 && t->type != QT_F16 && t->n_dims >= 2) {
            int64_t n = 1;
            for (uint32_t d = 0; d < t->n_dims; d++)
                n *= t->ne[d];
            float *dst = malloc(sizeof(float) * (size_t)n);
            if (!dst) {
                rc = ERR_NOMEM;
                break;
            }
            bufs[i] = dst;
            const int64_t n0 = t->ne[0];
            const size_t rb = qtype_row_size((enum qtype)t->type, n0);
            for (int64_t r = 0; r < n / n0; r++)
                dequant_row((enum qtype)t->type, (const uint8_t *)t->data + (size_t)r * rb, dst + r * n0, n0);
            rc = gguf_w_tensor_ref(w, t->name, t->n_dims, t->ne, QT_F32, dst, sizeof(float) * (size_t)n);
            continue;
        }
        if (!wants_quant(t) || qt == QT_F32) {
            rc = gguf_w_tensor_ref(w, t->name, t->n_dims, t->ne, t->type, t->data, t->nbytes);
            continue;
        }
        int64_t n0 = t->ne[0], rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++)
            rows *= t->ne[d];
        if (n0 % qi->blck) {
            fprintf(stderr, "requant: %s: row length %lld is not a multiple of %s's block of %d\n", t->name,
                    (long long)n0, qi->name, qi->blck);
            rc = ERR_UNSUPPORTED;
            break;
        }
        size_t row_bytes = qtype_row_size(qt, n0);
        uint8_t *dst = malloc(row_bytes * (size_t)rows);
        if (!dst) {
            rc = ERR_NOMEM;
            break;
        }
        bufs[i] = dst;
        const float *src = t->data;
        for (int64_t r = 0; r < rows; r++) {
            if (!quant_weights_row(qt, src + r * n0, dst + (size_t)r * row_bytes, n0)) {
                fprintf(stderr, "requant: no quantizer for %s\n", qi->name);
                rc = ERR_UNSUPPORTED;
                break;
            }
        }
        if (rc == 0)
            rc = gguf_w_tensor_ref(w, t->name, t->n_dims, t->ne, (uint32_t)qt, dst, row_bytes * (size_t)rows);
    }
    if (rc == 0) {
        rc = gguf_w_write(w, argv[2], &e);
        if (rc)
            fprintf(stderr, "requant: %s\n", e.msg);
    } else if (!e.msg[0]) {
        fprintf(stderr, "requant: failed (%d)\n", rc);
    }
    for (uint64_t i = 0; bufs && i < g->n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    gguf_w_free(w);
    gguf_close(g);
    return rc ? 1 : 0;
}
