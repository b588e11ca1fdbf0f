/* fuzz_gguf.c — libFuzzer target for the GGUF reader and dump.
 *
 * Each input is opened with gguf_open_buffer (an exact-size buffer, so
 * ASan flags any over-read); an accepted file is walked completely — every
 * key through every getter, every array element, every tensor's data bytes —
 * and the invariants the reader promises are checked (abort on violation).
 *
 * Built with -DGGUF_FUZZ_MKSEEDS (and no -fsanitize=fuzzer) the same file is
 * a seed writer: `mkseeds DIR` writes a few valid files made with our writer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/gguf/gguf.h"
#include "../worker/gguf/gguf_dump.h"
#include "../worker/num/quant.h"

#define FUZZ_ASSERT(c)                                                              \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "fuzz_gguf: invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                                \
        }                                                                           \
    } while (0)

static void walk(const struct gguf *g, const uint8_t *buf, size_t size)
{
    struct err e;
    FUZZ_ASSERT(g->version == 2 || g->version == 3);
    FUZZ_ASSERT(g->alignment && !(g->alignment & (g->alignment - 1)));
    FUZZ_ASSERT(g->n_parts == 1 && g->parts[0].data_start <= size);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        char key[128];
        size_t kl = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, kl);
        key[kl] = '\0';
        FUZZ_ASSERT((const uint8_t *)kv->key.ptr >= buf && (const uint8_t *)kv->key.ptr + kv->key.len <= buf + size);
        if (kl == kv->key.len && !memchr(kv->key.ptr, 0, kl))
            FUZZ_ASSERT(gguf_find_kv(g, key) == kv); /* keys are unique */
        int64_t i64;
        uint32_t u32;
        float f;
        bool b;
        struct gguf_str s;
        char cbuf[16];
        (void)gguf_get_i64(g, key, &i64, &e);
        (void)gguf_get_u32(g, key, &u32, &e);
        (void)gguf_get_f32(g, key, &f, &e);
        (void)gguf_get_bool(g, key, &b, &e);
        if (gguf_get_str(g, key, &s, &e) == 0)
            FUZZ_ASSERT((const uint8_t *)s.ptr >= buf && (const uint8_t *)s.ptr + s.len <= buf + size);
        (void)gguf_get_cstr(g, key, cbuf, sizeof cbuf, &e);
        (void)gguf_get_layer_i64(g, key, 3, &i64, &e);
        if (kv->type != GGUF_ARRAY)
            continue;
        volatile uint64_t sink = 0;
        for (uint64_t k = 0; k < kv->arr_n; k++) {
            if (kv->arr_type == GGUF_STRING) {
                s = gguf_arr_str(kv, k);
                FUZZ_ASSERT((const uint8_t *)s.ptr >= buf && (const uint8_t *)s.ptr + s.len <= buf + size);
                if (s.len)
                    sink += (uint8_t)s.ptr[s.len - 1];
            } else {
                sink += (uint64_t)gguf_arr_i64(kv, k);
                float x = gguf_arr_f32(kv, k);
                sink += x == x;
            }
        }
        (void)sink;
    }
    uint64_t expect = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        FUZZ_ASSERT(strlen(t->name) < GGUF_MAX_NAME);
        FUZZ_ASSERT(gguf_find_tensor(g, t->name) == t);
        FUZZ_ASSERT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        const struct qtype_info *q = qtype_get(t->type);
        FUZZ_ASSERT(q && t->ne[0] % q->blck == 0);
        FUZZ_ASSERT(t->offset == expect);
        FUZZ_ASSERT(t->offset % g->alignment == 0);
        expect += t->nbytes + (g->alignment - t->nbytes % g->alignment) % g->alignment;
        const uint8_t *d = t->data;
        FUZZ_ASSERT(d >= buf + g->parts[0].data_start && d + t->nbytes <= buf + size);
        volatile uint8_t x = 0;
        if (t->nbytes)
            x ^= d[0] ^ d[t->nbytes - 1]; /* both ends are readable */
        (void)x;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    struct gguf *g = NULL;
    struct err e;
    int rc = gguf_open_buffer(&g, data, size, "fuzz.gguf", &e);
    if (rc) {
        FUZZ_ASSERT(g == NULL);
        FUZZ_ASSERT(rc == ERR_FORMAT || rc == ERR_NOMEM);
        FUZZ_ASSERT(strncmp(e.msg, "fuzz.gguf: ", 11) == 0);
        return 0;
    }
    walk(g, data, size);
    gguf_dump(devnull, g, false, 16);
    gguf_close(g);
    return 0;
}

#ifdef GGUF_FUZZ_MKSEEDS
#include "../worker/gguf/gguf_write.h"

/* Small valid files covering every value type, several tensor types, a
 * non-default alignment, v2 and a split part. */
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkseeds DIR\n");
        return 2;
    }
    char path[4096];
    struct err e;
    int fails = 0;
    uint8_t blob[4096];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)(i * 37 + 11);

    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u8(w, "a.u8", 1);
    gguf_w_i8(w, "a.i8", -1);
    gguf_w_u16(w, "a.u16", 2);
    gguf_w_i16(w, "a.i16", -2);
    gguf_w_u32(w, "a.u32", 3);
    gguf_w_i32(w, "a.i32", -3);
    gguf_w_u64(w, "a.u64", 4);
    gguf_w_i64(w, "a.i64", -4);
    gguf_w_f32(w, "a.f32", 0.5f);
    gguf_w_f64(w, "a.f64", 0.25);
    gguf_w_bool(w, "a.bool", true);
    const char *toks[4] = {"<s>", "</s>", "a", "\xe2\x96\x81the"};
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", 4, toks);
    float sc[4] = {0, -1, -2, -3};
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", 4, sc);
    int32_t hk[3] = {4, 4, 2};
    gguf_w_arr_i32(w, "llama.attention.head_count_kv", 3, hk);
    int64_t ne2[2] = {32, 2}, ne1[1] = {3}, ne256[2] = {256, 1}, ne4[4] = {2, 2, 2, 1};
    gguf_w_tensor(w, "f32", 1, ne1, QT_F32, blob, 12);
    gguf_w_tensor(w, "q4_0", 2, ne2, QT_Q4_0, blob, 36);
    gguf_w_tensor(w, "q8_0", 2, ne2, QT_Q8_0, blob, 68);
    gguf_w_tensor(w, "q4_K", 2, ne256, QT_Q4_K, blob, 144);
    gguf_w_tensor(w, "f16.4d", 4, ne4, QT_F16, blob, 16);
    snprintf(path, sizeof path, "%s/all.gguf", argv[1]);
    fails += gguf_w_write(w, path, &e) != 0;
    snprintf(path, sizeof path, "%s/split", argv[1]);
    fails += gguf_w_write_split(w, path, 2, &e) != 0;
    gguf_w_set_version(w, 2);
    gguf_w_u32(w, "general.alignment", 64);
    snprintf(path, sizeof path, "%s/v2-align64.gguf", argv[1]);
    fails += gguf_w_write(w, path, &e) != 0;
    gguf_w_free(w);

    w = gguf_w_new();
    snprintf(path, sizeof path, "%s/empty.gguf", argv[1]);
    fails += gguf_w_write(w, path, &e) != 0;
    gguf_w_free(w);
    if (fails)
        fprintf(stderr, "mkseeds: %s\n", e.msg);
    return fails ? 1 : 0;
}
#endif
