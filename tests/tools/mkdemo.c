/* mkdemo.c — write a small demo model (llama arch, SentencePiece byte vocab,
 * random weights) with the project's own GGUF writer (tests/synth_model.h).
 * `make run` uses it when no real model is at hand; its output is noise, but
 * every layer of the stack (loader, tokenizer, forward pass, daemon, HTTP)
 * runs for real on it.
 *
 *   mkdemo OUT.gguf [seed] */
#include <stdio.h>
#include <stdlib.h>

#include "../synth_model.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: mkdemo OUT.gguf [seed]\n");
        return 2;
    }
    const struct synth_spec sp = { .arch = "llama", .name = "llm170-demo (random weights)", .n_embd = 64,
                                   .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_layer = 2, .wtype = QT_F32,
                                   .seed = argc == 3 ? strtoull(argv[2], NULL, 10) : 170 };
    struct err e;
    err_clear(&e);
    int rc = synth_model_write(&sp, argv[1], &e);
    if (rc != 0)
        fprintf(stderr, "mkdemo: %s\n", e.msg);
    return rc ? 1 : 0;
}
