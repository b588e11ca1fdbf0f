/* arch.c — every architecture the engine loads: one row of traits as data
 * (shared spec arch-dense.md §1–§2) naming the loader file that binds its
 * hyperparameters and tensors. An architecture that fits the dense/MoE
 * transformer template is one row here; one with other tensors or layer
 * kinds known to the backends is one loader file (arch_*.c) and its row;
 * anything new in the math is a new layer kind (model/model_forward.h). */
#include <string.h>

#include "mload.h"
#include "model.h"

static const struct arch_desc g_arches[] = {
    { .name = "llama", .rope = ROPE_NORM, .qk_norm = false, .moe = false, .out_bias = false,
      .o_bias = true, .ffn_bias = true, .rope_freqs = true, .q_is_square = false, .n_ff_exp_key = false, .load = arch_dense_load },
    { .name = "qwen2", .rope = ROPE_NEOX, .qk_norm = false, .moe = false, .out_bias = true,
      .o_bias = false, .ffn_bias = false, .rope_freqs = false, .q_is_square = true, .n_ff_exp_key = false, .load = arch_dense_load },
    { .name = "qwen3", .rope = ROPE_NEOX, .qk_norm = true, .moe = false, .out_bias = false,
      .o_bias = false, .ffn_bias = false, .rope_freqs = false, .q_is_square = false, .n_ff_exp_key = false, .load = arch_dense_load },
    { .name = "qwen3moe", .rope = ROPE_NEOX, .qk_norm = true, .moe = true, .out_bias = false,
      .o_bias = false, .ffn_bias = false, .rope_freqs = false, .q_is_square = false, .n_ff_exp_key = true, .load = arch_dense_load },
    /* hybrids (arch-qwen35.md): IMROPE is NEOX rotation with per-pair position components (text: p_e = 0) */
    { .name = "qwen35", .rope = ROPE_NEOX, .qk_norm = true, .moe = false, .n_ff_exp_key = false, .hybrid = true, .load = arch_qwen35_load },
    { .name = "qwen35moe", .rope = ROPE_NEOX, .qk_norm = true, .moe = true, .n_ff_exp_key = true, .hybrid = true, .load = arch_qwen35_load },
    /* qwen35moe + hyper-connections, QSA sparse attention and PLE n-gram embeddings (arch-qwen4exp.md) */
    { .name = "qwen4exp", .rope = ROPE_NEOX, .qk_norm = true, .moe = true, .n_ff_exp_key = true, .hybrid = true,
      .hc = true, .load = arch_qwen4exp_load },
};

const struct arch_desc *arch_find(const char *name)
{
    for (size_t i = 0; i < sizeof g_arches / sizeof g_arches[0]; i++)
        if (strcmp(g_arches[i].name, name) == 0)
            return &g_arches[i];
    return NULL;
}
