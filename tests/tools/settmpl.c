/* settmpl — a copy of a GGUF model with another chat template
 * (tokenizer.chat_template), for tests that need a template the shared
 * models lack (tests/toolcall_e2e.sh: a tool-calling template on a model
 * small enough to run anywhere).
 *
 *     settmpl IN.gguf OUT.gguf TEMPLATE.jinja
 *
 * Every other key and every tensor is copied as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/err.h"
#include "../../worker/gguf/gguf.h"
#include "../../worker/gguf/gguf_write.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: settmpl IN.gguf OUT.gguf TEMPLATE.jinja\n");
        return 2;
    }
    FILE *f = fopen(argv[3], "rb");
    if (!f) {
        fprintf(stderr, "settmpl: cannot open '%s'\n", argv[3]);
        return 1;
    }
    static char tmpl[1 << 20];
    size_t tl = fread(tmpl, 1, sizeof tmpl - 1, f);
    fclose(f);
    struct err e;
    err_clear(&e);
    struct gguf *g = NULL;
    if (gguf_open(&g, argv[1], &e) != 0) {
        fprintf(stderr, "settmpl: %s\n", e.msg);
        return 1;
    }
    struct gguf_w *w = gguf_w_new();
    int rc = w ? 0 : ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_kv && rc == 0; i++)
        rc = gguf_w_kv_copy(w, &g->kv[i]);
    if (rc == 0)
        rc = gguf_w_strn(w, "tokenizer.chat_template", tmpl, tl);
    for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        rc = gguf_w_tensor_ref(w, t->name, t->n_dims, t->ne, t->type, t->data, t->nbytes);
    }
    if (rc == 0)
        rc = gguf_w_write(w, argv[2], &e);
    else
        err_set(&e, rc, "cannot copy '%s'", argv[1]);
    if (rc)
        fprintf(stderr, "settmpl: %s\n", e.msg);
    gguf_w_free(w);
    gguf_close(g);
    return rc ? 1 : 0;
}
