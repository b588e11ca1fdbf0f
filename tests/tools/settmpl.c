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

/* Copy one metadata pair into the writer (as tests/tools/requant.c). */
static int copy_kv(struct gguf_w *w, const struct gguf_kv *kv)
{
    char key[512];
    if (kv->key.len >= sizeof key)
        return ERR_FORMAT;
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    const uint8_t *v = kv->val;
    switch (kv->type) {
    case GGUF_STRING: {
        uint64_t len;
        memcpy(&len, v, 8);
        return gguf_w_strn(w, key, (const char *)v + 8, len);
    }
    case GGUF_ARRAY:
        if (kv->arr_type == GGUF_STRING) {
            struct gguf_str *s = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *s);
            if (!s)
                return ERR_NOMEM;
            for (uint64_t i = 0; i < kv->arr_n; i++)
                s[i] = gguf_arr_str(kv, i);
            int rc = gguf_w_arr_strn(w, key, kv->arr_n, s);
            free(s);
            return rc;
        }
        if (kv->arr_type == GGUF_ARRAY)
            return ERR_UNSUPPORTED; /* nested arrays: none in the models this tool handles */
        return gguf_w_arr(w, key, kv->arr_type, kv->arr_n, v);
    default: {
        /* scalars are stored little-endian in the mapping; the typed adders take host values
         * (x86-64 is little-endian, as everywhere llm170 runs) */
        switch (kv->type) {
        case GGUF_UINT8: return gguf_w_u8(w, key, *v);
        case GGUF_INT8: return gguf_w_i8(w, key, (int8_t)*v);
        case GGUF_BOOL: return gguf_w_bool(w, key, *v != 0);
        case GGUF_UINT16: { uint16_t x; memcpy(&x, v, 2); return gguf_w_u16(w, key, x); }
        case GGUF_INT16: { int16_t x; memcpy(&x, v, 2); return gguf_w_i16(w, key, x); }
        case GGUF_UINT32: { uint32_t x; memcpy(&x, v, 4); return gguf_w_u32(w, key, x); }
        case GGUF_INT32: { int32_t x; memcpy(&x, v, 4); return gguf_w_i32(w, key, x); }
        case GGUF_FLOAT32: { float x; memcpy(&x, v, 4); return gguf_w_f32(w, key, x); }
        case GGUF_UINT64: { uint64_t x; memcpy(&x, v, 8); return gguf_w_u64(w, key, x); }
        case GGUF_INT64: { int64_t x; memcpy(&x, v, 8); return gguf_w_i64(w, key, x); }
        case GGUF_FLOAT64: { double x; memcpy(&x, v, 8); return gguf_w_f64(w, key, x); }
        default: return ERR_FORMAT;
        }
    }
    }
}

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
        rc = copy_kv(w, &g->kv[i]);
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
