/* gen_matmul_golden.c — writes tests/golden/matmul_llamacpp.txt: llama.cpp's
 * CPU mul_mat of the quant_gen.h matrices, the oracle for test_quant's
 * matmul_vs_llamacpp case. Not part of the build. Built against the npm
 * prebuilt llama.cpp 80fb11a CPU libraries (@node-llama-cpp/linux-x64@3.21.1)
 * and the ggml headers of the same source bundle (the haswell = AVX2 variant,
 * whose Q8_0 activation rounding is the x86 one we implement), e.g.
 *   L=.../node-llama-cpp-linux-x64/package/bins/linux-x64
 *   cc -O2 -I<llama.cpp>/ggml/include tests/golden/gen_matmul_golden.c $L/libggml-cpu-haswell.so \
 *      $L/libggml-base.so -Wl,-rpath,$L -lm -o /tmp/gen && /tmp/gen > tests/golden/matmul_llamacpp.txt
 * Output: one line per type: name, then QG_N_TOK*QG_N_OUT floats (%a), token-major. */
#include <stdio.h>
#include <stdlib.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "quant_gen.h"

int main(void)
{
    static uint8_t w[QG_N_OUT * QG_N_IN * 4];
    static float x[QG_N_TOK * QG_N_IN];
    qg_acts(x);
    for (int k = 0; k < QG_NTYPES; k++) {
        struct ggml_init_params ip = {.mem_size = 64 << 20, .mem_buffer = NULL, .no_alloc = false};
        struct ggml_context *ctx = ggml_init(ip);
        struct ggml_tensor *W = ggml_new_tensor_2d(ctx, (enum ggml_type)qg_types[k].id, QG_N_IN, QG_N_OUT);
        struct ggml_tensor *X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, QG_N_IN, QG_N_TOK);
        size_t bytes = qg_weights(k, w);
        memcpy(W->data, w, bytes);
        memcpy(X->data, x, sizeof x);
        struct ggml_tensor *Y = ggml_mul_mat(ctx, W, X);
        struct ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, Y);
        ggml_graph_compute_with_ctx(ctx, gf, 1);
        printf("%s", qg_types[k].name);
        for (int i = 0; i < QG_N_TOK * QG_N_OUT; i++)
            printf(" %a", (double)((float *)Y->data)[i]);
        printf("\n");
        ggml_free(ctx);
    }
    return 0;
}
