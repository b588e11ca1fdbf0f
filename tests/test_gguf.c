/* test_gguf.c — GGUF reader, writer and dump.
 *
 * Expected values come from the format spec (shared gguf-and-quants.md §1:
 * byte layout, validation rules), from the values the test itself puts into
 * files, and for the real model from ../shared/data/models/PROVENANCE.md.
 * Malformed files are built byte by byte (struct bb) so each one breaks
 * exactly one rule; every buffer handed to the reader is an exact-size heap
 * copy, so an over-read shows up under `make asan`. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../worker/gguf/gguf.h"
#include "../worker/gguf/gguf_dump.h"
#include "../worker/gguf/gguf_write.h"
#include "../worker/num/quant.h"
#include "check.h"

static char g_dir[256]; /* per-run temp dir */

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* ------------------------------------------------------------ byte builder */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n)
            nc *= 2;
        b->p = realloc(b->p, nc);
        b->cap = nc;
    }
    if (d)
        memcpy(b->p + b->n, d, n);
    else
        memset(b->p + b->n, 0, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_hdr(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_UINT32);
    bb_u32(b, v);
}
static void bb_kv_str(struct bb *b, const char *key, const char *v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_STRING);
    bb_str(b, v);
}
static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t j = 0; j < n_dims; j++)
        bb_u64(b, (uint64_t)ne[j]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_align(struct bb *b, size_t a)
{
    while (b->n % a)
        bb_u8(b, 0);
}
static void bb_free(struct bb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Open an exact-size heap copy of the image (ASan sees any over-read). */
static int open_img(const uint8_t *p, size_t n, struct gguf **out, struct err *e)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, p, n);
    struct gguf *g = NULL;
    err_clear(e);
    int rc = gguf_open_buffer(&g, n ? copy : NULL, n, "t.gguf", e);
    if (rc == 0 && g) {
        /* walk everything, as a user would */
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kv[i].type == GGUF_ARRAY && g->kv[i].arr_type == GGUF_STRING)
                for (uint64_t k = 0; k < g->kv[i].arr_n; k++)
                    (void)gguf_arr_str(&g->kv[i], k);
        FILE *devnull = fopen("/dev/null", "w");
        gguf_dump(devnull, g, false, 8);
        fclose(devnull);
    }
    if (out && rc == 0)
        *out = g; /* caller closes; copy leaks deliberately small */
    else {
        gguf_close(g);
        free(copy);
    }
    return rc;
}

/* The image must fail with ERR_FORMAT; the message names t.gguf, an offset and `want`. */
#define EXPECT_FAIL(b, want, at)                                                                    \
    do {                                                                                            \
        struct err e_;                                                                              \
        int rc_ = open_img((b)->p, (b)->n, NULL, &e_);                                              \
        CHECK_EQ_INT(rc_, ERR_FORMAT);                                                              \
        char pre_[64];                                                                              \
        snprintf(pre_, sizeof pre_, "t.gguf: offset %llu: ", (unsigned long long)(at));             \
        CHECK(strncmp(e_.msg, pre_, strlen(pre_)) == 0, "message '%s' does not start '%s'", e_.msg, pre_); \
        CHECK(strstr(e_.msg, (want)) != NULL, "message '%s' lacks '%s'", e_.msg, (want));           \
    } while (0)

/* A small valid image: 2 KV, 2 F32 tensors [8] and [4,2] (32 bytes each, so
 * no trailing padding — every proper prefix is invalid). */
static void bb_small_valid(struct bb *b)
{
    bb_hdr(b, 3, 2, 2);
    bb_kv_str(b, "general.architecture", "llama");
    bb_kv_u32(b, "llama.block_count", 1);
    int64_t ne1[1] = {8}, ne2[2] = {4, 2};
    bb_tinfo(b, "a", 1, ne1, QT_F32, 0);
    bb_tinfo(b, "b", 2, ne2, QT_F32, 32);
    bb_align(b, 32);
    for (int i = 0; i < 16; i++) {
        float f = (float)i;
        bb_put(b, &f, 4);
    }
}

/* ------------------------------------------------------------ writer + reader */

static const char *const k_strs[] = {"", "a", "h\xc3\xa9llo", "tab\there", "quote\"back\\slash"};

static struct gguf_w *build_all_types(float *f32data, uint8_t *q4data)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u8(w, "t.u8", 200);
    gguf_w_i8(w, "t.i8", -100);
    gguf_w_u16(w, "t.u16", 60000);
    gguf_w_i16(w, "t.i16", -30000);
    gguf_w_u32(w, "t.u32", 4000000000u);
    gguf_w_i32(w, "t.i32", -2000000000);
    gguf_w_u64(w, "t.u64", 18000000000000000000ull);
    gguf_w_i64(w, "t.i64", -9000000000000000000ll);
    gguf_w_u64(w, "t.u64small", 7);
    gguf_w_f32(w, "t.f32", 0.1f);
    gguf_w_f64(w, "t.f64", 2.5e-300);
    gguf_w_bool(w, "t.true", true);
    gguf_w_bool(w, "t.false", false);
    gguf_w_strn(w, "t.nul", "a\0b", 3);
    gguf_w_str(w, "t.empty", "");
    uint8_t au8[3] = {1, 2, 255};
    int32_t ai32[4] = {-1, 0, 1, 2147483647};
    uint32_t au32[2] = {5, 4294967295u};
    int64_t ai64[2] = {-5, 1ll << 40};
    float af32[3] = {1.5f, -2.0f, 1e-5f};
    double af64[2] = {0.25, -1e100};
    bool abool[3] = {true, false, true};
    gguf_w_arr_u8(w, "a.u8", 3, au8);
    gguf_w_arr_i32(w, "a.i32", 4, ai32);
    gguf_w_arr_u32(w, "a.u32", 2, au32);
    gguf_w_arr_i64(w, "a.i64", 2, ai64);
    gguf_w_arr_f32(w, "a.f32", 3, af32);
    gguf_w_arr_f64(w, "a.f64", 2, af64);
    gguf_w_arr_bool(w, "a.bool", 3, abool);
    gguf_w_arr_str(w, "a.str", 5, k_strs);
    gguf_w_arr_i32(w, "a.empty", 0, NULL);
    gguf_w_arr_str(w, "a.emptystr", 0, NULL);
    int16_t ai16[2] = {-3, 3};
    gguf_w_arr(w, "a.i16", GGUF_INT16, 2, ai16);
    gguf_w_u32(w, "layer.scalar", 8);
    int32_t per_layer[3] = {4, 8, 2};
    gguf_w_arr_i32(w, "layer.arr", 3, per_layer);

    for (int i = 0; i < 24; i++)
        f32data[i] = (float)i * 0.5f;
    for (int i = 0; i < 36; i++)
        q4data[i] = (uint8_t)(i * 7);
    int64_t ne_a[2] = {3, 8};      /* 96 bytes: padded to 96 */
    int64_t ne_b[1] = {5};         /* 20 bytes: padded to 32 */
    int64_t ne_q[2] = {32, 2};     /* q4_0: 2 blocks of 18 bytes */
    int64_t ne_z[2] = {0, 4};      /* empty */
    int64_t ne_4[4] = {2, 1, 3, 1};
    gguf_w_tensor(w, "f32.2d", 2, ne_a, QT_F32, f32data, 96);
    gguf_w_tensor_f32(w, "f32.1d", 1, ne_b, f32data);
    gguf_w_tensor_ref(w, "q4_0", 2, ne_q, QT_Q4_0, q4data, 36);
    gguf_w_tensor(w, "empty", 2, ne_z, QT_F16, NULL, 0);
    gguf_w_tensor(w, "f16.4d", 4, ne_4, QT_F16, NULL, 12);
    return w;
}

static void writer_roundtrip_every_accessor(void)
{
    float f32data[24];
    uint8_t q4data[36];
    struct gguf_w *w = build_all_types(f32data, q4data);
    struct err e;
    const char *path = tpath("all.gguf");
    int rc = gguf_w_write(w, path, &e);
    CHECK(rc == 0, "write: %s", e.msg);
    CHECK(!file_exists(tpath("all.gguf.tmp")), "temp file left behind");
    gguf_w_free(w);

    struct gguf *g;
    rc = gguf_open(&g, path, &e);
    CHECK(rc == 0, "open: %s", e.msg);
    if (rc)
        return;
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->alignment, 32);
    CHECK_EQ_INT(g->n_kv, 29);
    CHECK_EQ_INT(g->n_tensors, 5);
    CHECK_EQ_INT(g->n_parts, 1);
    CHECK(!strcmp(g->parts[0].path, path), "path %s", g->parts[0].path);
    CHECK_EQ_INT(g->parts[0].data_start % 32, 0);
    /* key order is file order */
    CHECK(g->kv[0].key.len == 20 && !memcmp(g->kv[0].key.ptr, "general.architecture", 20), "first key");
    CHECK_EQ_INT(g->kv[0].file_off, 24);

    int64_t i64 = 0;
    uint32_t u32 = 0;
    float f = 0;
    bool bv = false;
    struct { const char *k; int64_t v; } ints[] = {
        {"t.u8", 200}, {"t.i8", -100}, {"t.u16", 60000}, {"t.i16", -30000}, {"t.u32", 4000000000ll},
        {"t.i32", -2000000000}, {"t.i64", -9000000000000000000ll}, {"t.u64small", 7}, {"t.true", 1}, {"t.false", 0},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        rc = gguf_get_i64(g, ints[i].k, &i64, &e);
        CHECK(rc == 0 && i64 == ints[i].v, "%s: rc %d v %lld (%s)", ints[i].k, rc, (long long)i64, e.msg);
    }
    /* uint64 beyond int64 */
    CHECK_EQ_INT(gguf_get_i64(g, "t.u64", &i64, &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "t.u64") && strstr(e.msg, "offset "), "msg %s", e.msg);
    /* u32 range */
    CHECK(gguf_get_u32(g, "t.u32", &u32, &e) == 0 && u32 == 4000000000u, "u32 %u", u32);
    CHECK(gguf_get_u32(g, "t.u8", &u32, &e) == 0 && u32 == 200, "u8 as u32");
    CHECK(gguf_get_u32(g, "t.u64small", &u32, &e) == 0 && u32 == 7, "u64 as u32");
    u32 = 123;
    CHECK_EQ_INT(gguf_get_u32(g, "t.i8", &u32, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_u32(g, "t.u64", &u32, &e), ERR_FORMAT);
    CHECK_EQ_INT(u32, 123);
    /* floats */
    CHECK(gguf_get_f32(g, "t.f32", &f, &e) == 0 && f == 0.1f, "f32 %g", f);
    CHECK(gguf_get_f32(g, "t.f64", &f, &e) == 0 && f == (float)2.5e-300, "f64 %g", f);
    CHECK(gguf_get_f32(g, "t.i16", &f, &e) == 0 && f == -30000.0f, "int as f32 %g", f);
    CHECK_EQ_INT(gguf_get_f32(g, "general.architecture", &f, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_i64(g, "t.f32", &i64, &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "float32") != NULL, "msg %s", e.msg);
    /* bool */
    CHECK(gguf_get_bool(g, "t.true", &bv, &e) == 0 && bv, "true");
    CHECK(gguf_get_bool(g, "t.false", &bv, &e) == 0 && !bv, "false");
    CHECK_EQ_INT(gguf_get_bool(g, "t.empty", &bv, &e), ERR_FORMAT);
    /* strings */
    struct gguf_str s;
    CHECK(gguf_get_str(g, "general.architecture", &s, &e) == 0 && s.len == 5 && !memcmp(s.ptr, "llama", 5), "arch");
    CHECK(gguf_get_str(g, "t.nul", &s, &e) == 0 && s.len == 3 && !memcmp(s.ptr, "a\0b", 3), "nul string");
    CHECK(gguf_get_str(g, "t.empty", &s, &e) == 0 && s.len == 0, "empty string");
    CHECK_EQ_INT(gguf_get_str(g, "t.u32", &s, &e), ERR_FORMAT);
    char buf[4];
    CHECK(gguf_get_cstr(g, "general.architecture", buf, sizeof buf, &e) == 0 && !strcmp(buf, "lla"), "cstr '%s'", buf);
    /* absent */
    i64 = 77;
    CHECK_EQ_INT(gguf_get_i64(g, "nope", &i64, &e), ERR_NOTFOUND);
    CHECK_EQ_INT(i64, 77);
    CHECK(strstr(e.msg, "nope") != NULL, "msg %s", e.msg);
    CHECK_EQ_INT(gguf_get_str(g, "nope", &s, &e), ERR_NOTFOUND);
    CHECK(gguf_find_kv(g, "nope") == NULL, "find nope");
    CHECK(gguf_find_kv(g, "t.u") == NULL, "prefix is not a match");
    CHECK(gguf_find_kv(g, "t.u8x") == NULL, "longer is not a match");
    /* arrays */
    const struct gguf_kv *kv = gguf_find_kv(g, "a.i32");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_INT32 && kv->arr_n == 4, "a.i32");
    if (kv) {
        CHECK_EQ_INT(gguf_arr_i64(kv, 0), -1);
        CHECK_EQ_INT(gguf_arr_i64(kv, 3), 2147483647);
        CHECK(gguf_arr_f32(kv, 0) == -1.0f, "i32 as f32");
    }
    kv = gguf_find_kv(g, "a.u8");
    CHECK(kv && kv->arr_n == 3 && gguf_arr_i64(kv, 2) == 255, "a.u8");
    kv = gguf_find_kv(g, "a.u32");
    CHECK(kv && gguf_arr_i64(kv, 1) == 4294967295ll, "a.u32");
    kv = gguf_find_kv(g, "a.i64");
    CHECK(kv && gguf_arr_i64(kv, 1) == (1ll << 40) && gguf_arr_i64(kv, 0) == -5, "a.i64");
    kv = gguf_find_kv(g, "a.i16");
    CHECK(kv && kv->arr_type == GGUF_INT16 && gguf_arr_i64(kv, 0) == -3, "a.i16");
    kv = gguf_find_kv(g, "a.f32");
    CHECK(kv && gguf_arr_f32(kv, 0) == 1.5f && gguf_arr_f32(kv, 2) == 1e-5f, "a.f32");
    kv = gguf_find_kv(g, "a.f64");
    CHECK(kv && gguf_arr_f32(kv, 0) == 0.25f && gguf_arr_f32(kv, 1) == (float)-1e100, "a.f64");
    kv = gguf_find_kv(g, "a.bool");
    CHECK(kv && kv->arr_type == GGUF_BOOL && gguf_arr_i64(kv, 0) == 1 && gguf_arr_i64(kv, 1) == 0, "a.bool");
    kv = gguf_find_kv(g, "a.str");
    CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 5, "a.str");
    if (kv)
        for (uint64_t i = 0; i < 5; i++) {
            s = gguf_arr_str(kv, i);
            CHECK(s.len == strlen(k_strs[i]) && !memcmp(s.ptr, k_strs[i], s.len), "str %llu", (unsigned long long)i);
        }
    kv = gguf_find_kv(g, "a.empty");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_n == 0, "empty array");
    kv = gguf_find_kv(g, "a.emptystr");
    CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 0, "empty string array");
    /* checked array access */
    const struct gguf_kv *ak = NULL;
    CHECK(gguf_get_arr(g, "a.str", GGUF_STRING, &ak, &e) == 0 && ak && ak->arr_n == 5, "arr str");
    CHECK(gguf_get_arr(g, "a.i64", GGUF_INT32, &ak, &e) == 0 && ak->arr_type == GGUF_INT64, "arr int");
    CHECK(gguf_get_arr(g, "a.bool", GGUF_UINT32, &ak, &e) == 0, "bool array as integers");
    CHECK(gguf_get_arr(g, "a.u8", GGUF_FLOAT32, &ak, &e) == 0, "int array as numbers");
    CHECK_EQ_INT(gguf_get_arr(g, "a.f32", GGUF_INT32, &ak, &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "key 'a.f32' has type array[float32], expected an array of integers"), "msg %s", e.msg);
    CHECK_EQ_INT(gguf_get_arr(g, "a.str", GGUF_FLOAT32, &ak, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_arr(g, "a.i32", GGUF_STRING, &ak, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_arr(g, "t.u32", GGUF_UINT32, &ak, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_arr(g, "nope", GGUF_UINT32, &ak, &e), ERR_NOTFOUND);
    /* per-layer */
    CHECK(gguf_get_layer_i64(g, "layer.scalar", 2, &i64, &e) == 0 && i64 == 8, "layer scalar");
    CHECK(gguf_get_layer_i64(g, "layer.arr", 1, &i64, &e) == 0 && i64 == 8, "layer arr 1");
    CHECK(gguf_get_layer_i64(g, "layer.arr", 2, &i64, &e) == 0 && i64 == 2, "layer arr 2");
    CHECK_EQ_INT(gguf_get_layer_i64(g, "layer.arr", 3, &i64, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_layer_i64(g, "a.f32", 0, &i64, &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_get_layer_i64(g, "nope", 0, &i64, &e), ERR_NOTFOUND);

    /* tensors: infos, offsets (running align_up(nbytes, 32)), data */
    struct { const char *name; uint32_t nd, type; int64_t ne[4]; uint64_t nbytes, off; } want[] = {
        {"f32.2d", 2, QT_F32, {3, 8, 1, 1}, 96, 0},
        {"f32.1d", 1, QT_F32, {5, 1, 1, 1}, 20, 96},
        {"q4_0", 2, QT_Q4_0, {32, 2, 1, 1}, 36, 128},
        {"empty", 2, QT_F16, {0, 4, 1, 1}, 0, 192},
        {"f16.4d", 4, QT_F16, {2, 1, 3, 1}, 12, 192},
    };
    for (int i = 0; i < 5; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(g, want[i].name);
        CHECK(t == &g->tensors[i], "tensor %s at index %d", want[i].name, i);
        if (!t)
            continue;
        CHECK_EQ_INT(t->n_dims, want[i].nd);
        CHECK_EQ_INT(t->type, want[i].type);
        for (int j = 0; j < 4; j++)
            CHECK_EQ_INT(t->ne[j], want[i].ne[j]);
        CHECK_EQ_INT(t->nbytes, want[i].nbytes);
        CHECK_EQ_INT(t->offset, want[i].off);
        CHECK_EQ_INT(t->part, 0);
        CHECK((const uint8_t *)t->data == (const uint8_t *)g->parts[0].map + g->parts[0].data_start + t->offset,
              "data pointer of %s", t->name);
        CHECK_EQ_INT(((uintptr_t)t->data) % 32, 0);
    }
    CHECK(!memcmp(g->tensors[0].data, f32data, 96), "f32.2d data");
    CHECK(!memcmp(g->tensors[1].data, f32data, 20), "f32.1d data");
    CHECK(!memcmp(g->tensors[2].data, q4data, 36), "q4_0 data");
    static const uint8_t zeros[12];
    CHECK(!memcmp(g->tensors[4].data, zeros, 12), "NULL data writes zeros");
    CHECK(gguf_find_tensor(g, "nope") == NULL, "missing tensor");
    CHECK(gguf_find_tensor(g, "f32") == NULL, "prefix tensor");
    /* file size = data_start + sum of padded sizes (the last tensor padded too) */
    CHECK_EQ_INT(g->parts[0].size, g->parts[0].data_start + 192 + 32);
    gguf_close(g);
}

/* The writer's bytes equal a file laid out by hand from the spec §1.1. */
/* A's metadata pair equals b's: key, type, and value (strings and string arrays element by element). */
static bool kv_equal(const struct gguf_kv *a, const struct gguf_kv *b)
{
    if (a->key.len != b->key.len || memcmp(a->key.ptr, b->key.ptr, a->key.len) || a->type != b->type)
        return false;
    if (a->type == GGUF_STRING) {
        uint64_t la, lb;
        memcpy(&la, a->val, 8);
        memcpy(&lb, b->val, 8);
        return la == lb && !memcmp(a->val + 8, b->val + 8, la);
    }
    if (a->type != GGUF_ARRAY)
        return !memcmp(a->val, b->val, gguf_vtype_size(a->type));
    if (a->arr_type != b->arr_type || a->arr_n != b->arr_n)
        return false;
    if (a->arr_type != GGUF_STRING)
        return !memcmp(a->val, b->val, a->arr_n * gguf_vtype_size(a->arr_type));
    for (uint64_t i = 0; i < a->arr_n; i++) {
        struct gguf_str x = gguf_arr_str(a, i), y = gguf_arr_str(b, i);
        if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len))
            return false;
    }
    return true;
}

/* gguf_w_kv_copy: every pair of a file of every value type, copied into a new writer, reads back equal
 * and in the same order (the model-rewriting tools, requant and settmpl, rest on it). */
static void writer_copies_every_kv(void)
{
    float f32data[24];
    uint8_t q4data[36];
    struct gguf_w *w = build_all_types(f32data, q4data);
    struct err e;
    CHECK(gguf_w_write(w, tpath("src.gguf"), &e) == 0, "write: %s", e.msg);
    gguf_w_free(w);
    struct gguf *g = NULL, *h = NULL;
    CHECK(gguf_open(&g, tpath("src.gguf"), &e) == 0, "open: %s", e.msg);
    if (!g)
        return;
    w = gguf_w_new();
    int bad = 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        bad += gguf_w_kv_copy(w, &g->kv[i]) != 0;
    CHECK_EQ_INT(bad, 0);
    CHECK(gguf_w_write(w, tpath("copy.gguf"), &e) == 0, "write the copy: %s", e.msg);
    gguf_w_free(w);
    CHECK(gguf_open(&h, tpath("copy.gguf"), &e) == 0, "open the copy: %s", e.msg);
    if (h) {
        CHECK_EQ_INT(h->n_kv, g->n_kv);
        int diff = 0;
        for (uint64_t i = 0; i < g->n_kv && i < h->n_kv; i++)
            diff += !kv_equal(&g->kv[i], &h->kv[i]);
        CHECK_EQ_INT(diff, 0);
        gguf_close(h);
    }
    gguf_close(g);
}

static void writer_bytes_match_spec_layout(void)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "x.n", 7);
    float d[3] = {1, 2, 3};
    int64_t ne[1] = {3};
    gguf_w_tensor_f32(w, "w", 1, ne, d);
    uint8_t *buf;
    size_t n;
    struct err e;
    int rc = gguf_w_to_buffer(w, &buf, &n, &e);
    CHECK(rc == 0, "%s", e.msg);

    struct bb b = {0};
    bb_hdr(&b, 3, 1, 2);
    bb_kv_str(&b, "general.architecture", "llama");
    bb_kv_u32(&b, "x.n", 7);
    bb_tinfo(&b, "w", 1, ne, 0, 0);
    bb_align(&b, 32);
    bb_put(&b, d, 12);
    bb_align(&b, 32);
    CHECK(rc == 0 && n == b.n && !memcmp(buf, b.p, n), "writer image (%zu bytes) differs from spec layout (%zu)", n,
          b.n);
    /* and the file on disk is the same bytes */
    rc = gguf_w_write(w, tpath("layout.gguf"), &e);
    CHECK(rc == 0, "%s", e.msg);
    FILE *f = fopen(tpath("layout.gguf"), "rb");
    uint8_t fb[512];
    size_t fn = f ? fread(fb, 1, sizeof fb, f) : 0;
    if (f)
        fclose(f);
    CHECK(fn == b.n && !memcmp(fb, b.p, fn), "file differs from buffer");
    free(buf);
    bb_free(&b);
    gguf_w_free(w);
}

static void writer_replace_delete_version(void)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_u32(w, "a", 1);
    gguf_w_str(w, "b", "x");
    gguf_w_u32(w, "c", 3);
    gguf_w_f32(w, "a", 2.0f); /* replaces in place, type changes */
    gguf_w_del(w, "b");
    gguf_w_del(w, "nope");
    gguf_w_set_version(w, 2);
    uint8_t *buf;
    size_t n;
    struct err e;
    CHECK(gguf_w_to_buffer(w, &buf, &n, &e) == 0, "%s", e.msg);
    struct gguf *g;
    int rc = gguf_open_buffer(&g, buf, n, "v2.gguf", &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc == 0) {
        CHECK_EQ_INT(g->version, 2);
        CHECK_EQ_INT(g->n_kv, 2);
        CHECK(g->kv[0].key.len == 1 && g->kv[0].key.ptr[0] == 'a' && g->kv[0].type == GGUF_FLOAT32, "a replaced");
        float f = 0;
        CHECK(gguf_get_f32(g, "a", &f, &e) == 0 && f == 2.0f, "a = %g", f);
        CHECK(gguf_find_kv(g, "b") == NULL, "b deleted");
        CHECK_EQ_INT(g->n_tensors, 0);
        CHECK_EQ_INT(g->parts[0].data_start, n); /* no padding without tensors */
        gguf_close(g);
    }
    free(buf);
    CHECK_EQ_INT(gguf_w_set_version(w, 1), ERR_INVALID);
    gguf_w_free(w);
}

static void writer_rejects_bad_input(void)
{
    struct err e;
    float d[64] = {0};
    int64_t ne[2] = {4, 1};
#define BAD_WRITER(stmt, want)                                                                                \
    do {                                                                                                      \
        struct gguf_w *w = gguf_w_new();                                                                      \
        gguf_w_tensor_f32(w, "ok", 2, ne, d);                                                                 \
        int r1 = (stmt);                                                                                      \
        gguf_w_u32(w, "after", 1); /* later calls don't clear the latched error */                           \
        int r2 = gguf_w_write(w, tpath("bad.gguf"), &e);                                                      \
        CHECK(r1 == ERR_INVALID && r2 == ERR_INVALID, "%s: rc %d %d", #stmt, r1, r2);                         \
        CHECK(strstr(e.msg, want) != NULL && strstr(e.msg, "bad.gguf") != NULL, "%s: msg '%s'", #stmt, e.msg); \
        CHECK(!file_exists(tpath("bad.gguf")) && !file_exists(tpath("bad.gguf.tmp")), "file written");         \
        gguf_w_free(w);                                                                                       \
    } while (0)
    int64_t ne33[1] = {33}, ne5[5] = {1, 1, 1, 1, 1}, neg[1] = {-4};
    BAD_WRITER(gguf_w_tensor_f32(w, "ok", 2, ne, d), "duplicate tensor name 'ok'");
    BAD_WRITER(gguf_w_tensor_f32(w, "0123456789012345678901234567890123456789012345678901234567890123", 2, ne, d),
               "limit 63");
    BAD_WRITER(gguf_w_tensor(w, "q", 1, ne33, QT_Q4_0, d, 18), "not a multiple of 32");
    BAD_WRITER(gguf_w_tensor(w, "q", 5, ne5, QT_F32, d, 4), "n_dims 5");
    BAD_WRITER(gguf_w_tensor(w, "q", 1, neg, QT_F32, d, 0), "bad shape");
    BAD_WRITER(gguf_w_tensor(w, "q", 2, ne, QT_F32, d, 12), "16");
    BAD_WRITER(gguf_w_tensor(w, "q", 2, ne, 4, d, 16), "unknown ggml type 4");
    BAD_WRITER(gguf_w_arr(w, "k", GGUF_STRING, 1, d), "not numeric");
    BAD_WRITER(gguf_w_arr(w, "k", GGUF_ARRAY, 1, d), "not numeric");
    BAD_WRITER(gguf_w_set_version(w, 4), "version 4");
#undef BAD_WRITER
    /* a bad general.alignment is caught at write time */
    struct gguf_w *w = gguf_w_new();
    gguf_w_u64(w, "general.alignment", 32);
    CHECK_EQ_INT(gguf_w_write(w, tpath("bad.gguf"), &e), ERR_INVALID);
    gguf_w_u32(w, "general.alignment", 24);
    CHECK_EQ_INT(gguf_w_write(w, tpath("bad.gguf"), &e), ERR_INVALID);
    CHECK(!file_exists(tpath("bad.gguf")) && !file_exists(tpath("bad.gguf.tmp")), "file written");
    gguf_w_free(w);
    CHECK_EQ_INT(gguf_w_write(NULL, tpath("bad.gguf"), &e), ERR_INVALID);
    size_t nb;
    CHECK(gguf_w_tensor_nbytes(2, (int64_t[]){256, 3}, QT_Q4_K, &nb) && nb == 3 * 144, "q4_K nbytes %zu", nb);
    CHECK(!gguf_w_tensor_nbytes(1, (int64_t[]){1ll << 62}, QT_F64, &nb), "overflow");
}

static void writer_alignment_64(void)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_u32(w, "general.alignment", 64);
    float d[5] = {1, 2, 3, 4, 5};
    int64_t ne[1] = {5};
    gguf_w_tensor_f32(w, "a", 1, ne, d);
    gguf_w_tensor_f32(w, "b", 1, ne, d);
    struct err e;
    int rc = gguf_w_write(w, tpath("a64.gguf"), &e);
    CHECK(rc == 0, "%s", e.msg);
    gguf_w_free(w);
    struct gguf *g;
    rc = gguf_open(&g, tpath("a64.gguf"), &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc)
        return;
    CHECK_EQ_INT(g->alignment, 64);
    CHECK_EQ_INT(g->parts[0].data_start % 64, 0);
    CHECK_EQ_INT(g->tensors[1].offset, 64);
    CHECK(!memcmp(g->tensors[1].data, d, 20), "data b");
    gguf_close(g);
}

/* A write that hits the file size limit (as a full disk would) returns
 * ERR_IO naming the path and leaves neither the file nor the temp file. */
static void writer_io_errors_leave_no_file(void)
{
    struct err e;
    struct gguf_w *w = gguf_w_new();
    gguf_w_u32(w, "x", 1);
    int rc = gguf_w_write(w, "/nonexistent-dir/x.gguf", &e);
    CHECK_EQ_INT(rc, ERR_IO);
    CHECK(strstr(e.msg, "/nonexistent-dir/x.gguf") != NULL, "msg %s", e.msg);
    gguf_w_free(w);

    const char *path = tpath("full.gguf");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {20000, 20000};
        setrlimit(RLIMIT_FSIZE, &rl);
        struct gguf_w *wc = gguf_w_new();
        int64_t ne[1] = {65536};
        gguf_w_tensor(wc, "big", 1, ne, QT_F32, NULL, 65536 * 4);
        struct err ec;
        int r = gguf_w_write(wc, path, &ec);
        gguf_w_free(wc);
        int ok = r == ERR_IO && strstr(ec.msg, path) != NULL;
        if (!ok)
            printf("#   child: rc %d msg '%s'\n", r, ec.msg);
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(!file_exists(path), "partial file left");
    CHECK(!file_exists(tpath("full.gguf.tmp")), "temp file left");
}

/* ------------------------------------------------------------ malformed files */

static void truncated_at_every_offset(void)
{
    struct bb b = {0};
    bb_small_valid(&b);
    struct err e;
    CHECK(open_img(b.p, b.n, NULL, &e) == 0, "full image must open: %s", e.msg);
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        int rc = open_img(b.p, n, NULL, &e);
        if (rc != ERR_FORMAT || strncmp(e.msg, "t.gguf: offset ", 15) != 0) {
            if (bad++ < 5)
                printf("#   prefix %zu: rc %d msg '%s'\n", n, rc, e.msg);
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* and through the file path (mmap), a few lengths including 0 */
    FILE *f = fopen(tpath("trunc.gguf"), "wb");
    fwrite(b.p, 1, 30, f);
    fclose(f);
    struct gguf *g;
    CHECK_EQ_INT(gguf_open(&g, tpath("trunc.gguf"), &e), ERR_FORMAT);
    CHECK(strstr(e.msg, tpath("trunc.gguf")) && strstr(e.msg, "offset 16: n_kv 2 is more than the file can hold (size 30)"), "msg %s", e.msg);
    f = fopen(tpath("empty.gguf"), "wb");
    fclose(f);
    CHECK_EQ_INT(gguf_open(&g, tpath("empty.gguf"), &e), ERR_FORMAT);
    CHECK_EQ_INT(gguf_open(&g, tpath("does-not-exist.gguf"), &e), ERR_IO);
    CHECK(strstr(e.msg, "does-not-exist.gguf") && strstr(e.msg, "No such file"), "msg %s", e.msg);
    CHECK(g == NULL, "out is NULL on failure");
    CHECK_EQ_INT(gguf_open(&g, g_dir, &e), ERR_IO);
    bb_free(&b);
}

static void header_magic_and_version(void)
{
    struct bb b = {0};
    bb_hdr(&b, 3, 0, 0);
    struct err e;
    struct gguf *g = NULL;
    CHECK(open_img(b.p, b.n, &g, &e) == 0, "empty v3 file: %s", e.msg);
    if (g) {
        CHECK_EQ_INT(g->n_kv, 0);
        CHECK_EQ_INT(g->n_tensors, 0);
        CHECK(gguf_find_tensor(g, "x") == NULL && gguf_find_kv(g, "x") == NULL, "empty lookups");
        free((void *)g->parts[0].map);
        gguf_close(g);
    }
    b.p[0] = 'g';
    EXPECT_FAIL(&b, "bad magic", 0);
    b.p[0] = 'G';
    uint32_t versions[] = {0, 1, 4, 0x03000000u, 0x00030000u, 0xFFFFFFFFu};
    const char *want[] = {"version 0", "no longer supported", "version 4", "byte-swapped", "byte-swapped",
                          "newer than supported"};
    for (int i = 0; i < 6; i++) {
        memcpy(b.p + 4, &versions[i], 4);
        EXPECT_FAIL(&b, want[i], 4);
    }
    uint32_t v2 = 2;
    memcpy(b.p + 4, &v2, 4);
    CHECK(open_img(b.p, b.n, NULL, &e) == 0, "v2: %s", e.msg);
    bb_free(&b);
}

static void huge_counts(void)
{
    struct bb b = {0};
    bb_hdr(&b, 3, 0, 1ull << 60);
    bb_kv_u32(&b, "a", 1);
    EXPECT_FAIL(&b, "n_kv 1152921504606846976", 16);
    bb_free(&b);
    bb_hdr(&b, 3, 1ull << 60, 0);
    EXPECT_FAIL(&b, "n_tensors 1152921504606846976", 8);
    bb_free(&b);
    bb_hdr(&b, 3, UINT64_MAX, UINT64_MAX);
    EXPECT_FAIL(&b, "more than the file can hold", 16);
    bb_free(&b);
    /* n_kv one more than present */
    bb_hdr(&b, 3, 0, 2);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 1);
    b.p[16] = 3;
    for (int i = 0; i < 10; i++)
        bb_u8(&b, 0); /* passes the count check, too short for a third kv */
    struct err e;
    CHECK_EQ_INT(open_img(b.p, b.n, NULL, &e), ERR_FORMAT);
    bb_free(&b);
}

static void lying_lengths(void)
{
    struct bb b = {0};
    /* key string length 2^32 in a 1000-byte file: the message the brief quotes */
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 32);
    while (b.n < 1000)
        bb_u8(&b, 'a');
    struct err e;
    CHECK_EQ_INT(open_img(b.p, b.n, NULL, &e), ERR_FORMAT);
    CHECK(!strcmp(e.msg, "t.gguf: offset 24: key string length 4294967296 runs past end of file (size 1000)"),
          "msg '%s'", e.msg);
    bb_free(&b);
    /* key length exactly 1 too long */
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, 13);
    bb_put(&b, "general.archi", 12);
    EXPECT_FAIL(&b, "key string length 13 runs past end of file", 24);
    bb_free(&b);
    /* string value length lies */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, UINT64_MAX);
    bb_put(&b, "abc", 3);
    EXPECT_FAIL(&b, "string value length 18446744073709551615 runs past end of file", 24 + 9 + 4);
    bb_free(&b);
    /* array count lies: numbers */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_UINT32);
    bb_u64(&b, 1ull << 40);
    bb_u32(&b, 1);
    EXPECT_FAIL(&b, "array of 1099511627776 uint32 runs past end of file", 24 + 9 + 4 + 4);
    bb_free(&b);
    /* array count lies: strings (count fits bytes/8, strings do not) */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, 3);
    bb_str(&b, "x");
    bb_u64(&b, 100);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "array string length 100 runs past end of file", 24 + 9 + 4 + 4 + 8 + 9);
    bb_free(&b);
    /* tensor name length lies */
    bb_hdr(&b, 3, 1, 0);
    bb_u64(&b, 1ull << 31);
    for (int i = 0; i < 40; i++)
        bb_u8(&b, 'n');
    EXPECT_FAIL(&b, "tensor name length 2147483648 runs past end of file", 24);
    bb_free(&b);
}

/* The 2^30 caps need a file bigger than 2^30 bytes: a sparse file costs no disk. */
static void string_and_array_caps_2_30(void)
{
    const char *path = tpath("sparse.gguf");
    struct err e;
    struct gguf *g;
    for (int arr = 0; arr < 2; arr++) {
        struct bb b = {0};
        bb_hdr(&b, 3, 0, 1);
        if (!arr) {
            bb_u64(&b, (1ull << 30) + 1); /* key length */
        } else {
            bb_str(&b, "k");
            bb_u32(&b, GGUF_ARRAY);
            bb_u32(&b, GGUF_UINT8);
            bb_u64(&b, (1ull << 30) + 1);
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        bool ok = fd >= 0 && write(fd, b.p, b.n) == (ssize_t)b.n && ftruncate(fd, (1ll << 30) + 4096) == 0;
        if (fd >= 0)
            close(fd);
        if (!ok) {
            bb_free(&b);
            unlink(path);
            SKIP("cannot create a sparse 1 GiB file");
        }
        CHECK_EQ_INT(gguf_open(&g, path, &e), ERR_FORMAT);
        CHECK(strstr(e.msg, arr ? "offset 41: key 'k': array length 1073741825 exceeds the 2^30 element limit"
                                : "offset 24: key string length 1073741825 exceeds the 2^30 byte limit"),
              "msg '%s'", e.msg);
        bb_free(&b);
    }
    unlink(path);
}

static void bad_kv_types(void)
{
    struct bb b = {0};
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    EXPECT_FAIL(&b, "invalid value type 13", 33);
    bb_free(&b);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_UINT8);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "nested arrays", 37);
    bb_free(&b);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, 99);
    bb_u64(&b, 0);
    EXPECT_FAIL(&b, "invalid array element type 99", 37);
    bb_free(&b);
    /* duplicate keys: the second occurrence is named */
    bb_hdr(&b, 3, 0, 3);
    bb_kv_u32(&b, "a.b", 1);
    bb_kv_u32(&b, "x", 1);
    size_t second = b.n;
    bb_kv_u32(&b, "a.b", 2);
    EXPECT_FAIL(&b, "duplicate key 'a.b'", second);
    bb_free(&b);
}

static void bad_alignment(void)
{
    struct bb b = {0};
    uint32_t vals[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        bb_hdr(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", vals[i]);
        EXPECT_FAIL(&b, "is not a power of two", 24);
        bb_free(&b);
    }
    enum gguf_vtype types[] = {GGUF_UINT64, GGUF_INT32, GGUF_UINT16};
    for (int i = 0; i < 3; i++) {
        bb_hdr(&b, 3, 0, 1);
        bb_str(&b, "general.alignment");
        bb_u32(&b, types[i]);
        bb_u64(&b, 32);
        EXPECT_FAIL(&b, "must be uint32", 24);
        bb_free(&b);
    }
    /* a valid non-default alignment moves data_start */
    bb_hdr(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 256);
    int64_t ne[1] = {4};
    bb_tinfo(&b, "t", 1, ne, QT_F32, 0);
    bb_align(&b, 256);
    size_t ds = b.n;
    bb_put(&b, NULL, 16);
    struct gguf *g = NULL;
    struct err e;
    CHECK(open_img(b.p, b.n, &g, &e) == 0, "%s", e.msg);
    if (g) {
        CHECK_EQ_INT(g->alignment, 256);
        CHECK_EQ_INT(g->parts[0].data_start, ds);
        free((void *)g->parts[0].map);
        gguf_close(g);
    }
    /* the same data at the 32-byte position is wrong for alignment 256 */
    bb_free(&b);
    bb_hdr(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 256);
    bb_tinfo(&b, "t", 1, ne, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 16);
    CHECK(b.n < 256, "test setup");
    EXPECT_FAIL(&b, "runs past end of file", 256);
    bb_free(&b);
}

/* One tensor info with a bad field; `at` = offset the error must name. */
static void bad_tensor_infos(void)
{
    struct bb b = {0};
    int64_t ne1[1] = {32};
    /* types: removed 4, 31, unknown 40 */
    uint32_t types[] = {4, 5, 31, 36, 40, 1000};
    for (int i = 0; i < 6; i++) {
        bb_hdr(&b, 3, 1, 0);
        bb_tinfo(&b, "t", 1, ne1, types[i], 0);
        bb_align(&b, 32);
        bb_put(&b, NULL, 256);
        char want[64];
        snprintf(want, sizeof want, "type %u is not a known ggml type", types[i]);
        EXPECT_FAIL(&b, want, 24 + 9 + 4 + 8);
        bb_free(&b);
    }
    /* n_dims 5 and 0 */
    int64_t ne5[5] = {1, 1, 1, 1, 1};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 5, ne5, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "n_dims 5 is not in 1..4", 24 + 9);
    bb_free(&b);
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 0, ne5, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "n_dims 0", 24 + 9);
    bb_free(&b);
    /* ne[0] not a multiple of the block size */
    int64_t ne33[2] = {33, 1};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "q", 2, ne33, QT_Q4_0, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 64);
    EXPECT_FAIL(&b, "ne[0] = 33 is not a multiple of the q4_0 block size 32", 24 + 9 + 4 + 16);
    bb_free(&b);
    int64_t ne100[1] = {100};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "k", 1, ne100, QT_Q4_K, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 256);
    EXPECT_FAIL(&b, "block size 256", 24 + 9 + 4 + 8);
    bb_free(&b);
    /* negative ne */
    int64_t neg[2] = {4, -1};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 2, neg, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "ne[1] = -1 is negative", 24 + 9 + 4 + 8);
    bb_free(&b);
    /* element count overflows int64 */
    int64_t big[3] = {1ll << 31, 1ll << 31, 4};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 3, big, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "overflows int64", 24 + 9 + 4 + 16);
    bb_free(&b);
    /* element count fits, byte size does not */
    int64_t bigb[2] = {1ll << 40, 1ll << 21};
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 2, bigb, QT_F64, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "byte size overflows", 24 + 9 + 4 + 16);
    bb_free(&b);
    /* name of 64 bytes (63 is fine) */
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, name, 1, ne1, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 128);
    EXPECT_FAIL(&b, "is 64 bytes, the limit is 63", 24);
    bb_free(&b);
    name[63] = 0;
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, name, 1, ne1, QT_F32, 0);
    bb_align(&b, 32);
    bb_put(&b, NULL, 128);
    struct err e;
    struct gguf *g = NULL;
    CHECK(open_img(b.p, b.n, &g, &e) == 0, "63-byte name: %s", e.msg);
    if (g) {
        CHECK(gguf_find_tensor(g, name) != NULL, "find 63-byte name");
        free((void *)g->parts[0].map);
        gguf_close(g);
    }
    bb_free(&b);
    /* duplicate tensor names: the second info is named */
    bb_hdr(&b, 3, 2, 0);
    bb_tinfo(&b, "dup", 1, ne1, QT_F32, 0);
    size_t second = b.n;
    bb_tinfo(&b, "dup", 1, ne1, QT_F32, 128);
    bb_align(&b, 32);
    bb_put(&b, NULL, 256);
    EXPECT_FAIL(&b, "duplicate tensor name 'dup'", second);
    bb_free(&b);
}

/* Tensor data offsets: exactly the running align_up(nbytes, alignment). */
static void bad_tensor_offsets(void)
{
    int64_t ne5[1] = {5}; /* 20 bytes -> next offset 32 */
    struct { uint64_t off0, off1; const char *want; int bad_idx; } cases[] = {
        {0, 32, NULL, -1},
        {32, 64, "data offset 32, expected 0", 0},  /* gap before the first */
        {0, 64, "data offset 64, expected 32", 1},  /* non-contiguous */
        {0, 20, "data offset 20, expected 32", 1},  /* misaligned / unpadded */
        {0, 0, "data offset 0, expected 32", 1},    /* overlapping */
        {32, 0, "data offset 32, expected 0", 0},   /* swapped order */
        {0, 31, "data offset 31, expected 32", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bb b = {0};
        bb_hdr(&b, 3, 2, 0);
        bb_tinfo(&b, "a", 1, ne5, QT_F32, cases[i].off0);
        size_t off_field0 = b.n - 8;
        bb_tinfo(&b, "b", 1, ne5, QT_F32, cases[i].off1);
        size_t off_field1 = b.n - 8;
        bb_align(&b, 32);
        bb_put(&b, NULL, 96);
        if (!cases[i].want) {
            struct err e;
            CHECK(open_img(b.p, b.n, NULL, &e) == 0, "valid layout: %s", e.msg);
        } else {
            EXPECT_FAIL(&b, cases[i].want, cases[i].bad_idx ? off_field1 : off_field0);
        }
        bb_free(&b);
    }
    /* data past end of file: the last tensor needs 20 bytes at data_start + 32 */
    struct bb b = {0};
    bb_hdr(&b, 3, 2, 0);
    bb_tinfo(&b, "a", 1, ne5, QT_F32, 0);
    bb_tinfo(&b, "b", 1, ne5, QT_F32, 32);
    bb_align(&b, 32);
    size_t ds = b.n;
    bb_put(&b, NULL, 32 + 19);
    EXPECT_FAIL(&b, "tensor 'b' data (20 bytes) runs past end of file", ds + 32);
    bb_put(&b, NULL, 1); /* exactly enough: the last tensor's padding may be missing */
    struct err e;
    CHECK(open_img(b.p, b.n, NULL, &e) == 0, "unpadded tail: %s", e.msg);
    bb_free(&b);
    /* huge offset */
    bb_hdr(&b, 3, 1, 0);
    bb_tinfo(&b, "a", 1, ne5, QT_F32, UINT64_MAX - 8);
    bb_align(&b, 32);
    bb_put(&b, NULL, 32);
    EXPECT_FAIL(&b, "expected 0", 24 + 9 + 4 + 8 + 4);
    bb_free(&b);
}

/* ------------------------------------------------------------ split sets */

static struct gguf_w *split_model(float *d)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "llama.block_count", 3);
    for (int i = 0; i < 64; i++)
        d[i] = (float)i;
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        int64_t ne[1] = {8 + i};
        gguf_w_tensor_f32(w, name, 1, ne, d + i);
    }
    return w;
}

static void split_sets(void)
{
    float d[64];
    struct gguf_w *w = split_model(d);
    struct err e;
    int rc = gguf_w_write_split(w, tpath("m"), 3, &e);
    CHECK(rc == 0, "%s", e.msg);
    struct gguf *g;
    rc = gguf_open(&g, tpath("m-00001-of-00003.gguf"), &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc == 0) {
        CHECK_EQ_INT(g->n_parts, 3);
        CHECK_EQ_INT(g->n_tensors, 5);
        CHECK_EQ_INT(g->n_kv, 5); /* 2 keys + split.no/count/tensors.count */
        int64_t v;
        CHECK(gguf_get_i64(g, "split.count", &v, &e) == 0 && v == 3, "split.count");
        CHECK(gguf_get_i64(g, "llama.block_count", &v, &e) == 0 && v == 3, "keys of part 1");
        /* parts hold tensors [0,1) [1,3) [3,5) */
        int want_part[5] = {0, 1, 1, 2, 2};
        for (int i = 0; i < 5; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d", i);
            const struct gguf_tensor *t = gguf_find_tensor(g, name);
            CHECK(t == &g->tensors[i], "tensor %s in order", name);
            if (!t)
                continue;
            CHECK_EQ_INT(t->part, want_part[i]);
            CHECK_EQ_INT(t->ne[0], 8 + i);
            CHECK(!memcmp(t->data, d + i, (size_t)(8 + i) * 4), "data of %s", name);
            const struct gguf_part *p = &g->parts[t->part];
            CHECK((const uint8_t *)t->data == (const uint8_t *)p->map + p->data_start + t->offset, "pointer");
        }
        CHECK_EQ_INT(g->tensors[2].offset, 64); /* second in its part: align_up(36, 32) */
        CHECK(strstr(g->parts[2].path, "m-00003-of-00003.gguf") != NULL, "part path %s", g->parts[2].path);
        FILE *out = fopen("/dev/null", "w");
        CHECK_EQ_INT(gguf_dump(out, g, false, 4), 0);
        fclose(out);
        gguf_close(g);
    }
    /* opening a later part directly */
    CHECK_EQ_INT(gguf_open(&g, tpath("m-00002-of-00003.gguf"), &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "split part 2 of 3") && strstr(e.msg, "open part 1"), "msg %s", e.msg);
    /* a copy under a name that is not a split name */
    rename(tpath("m-00001-of-00003.gguf"), tpath("renamed.gguf"));
    CHECK_EQ_INT(gguf_open(&g, tpath("renamed.gguf"), &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "-00001-of-00003.gguf"), "msg %s", e.msg);
    rename(tpath("renamed.gguf"), tpath("m-00001-of-00003.gguf"));
    /* missing part */
    unlink(tpath("m-00003-of-00003.gguf"));
    CHECK_EQ_INT(gguf_open(&g, tpath("m-00001-of-00003.gguf"), &e), ERR_IO);
    CHECK(strstr(e.msg, "m-00003-of-00003.gguf") && strstr(e.msg, "split part 3 of 3"), "msg %s", e.msg);
    /* a part from another set in the place of part 3 (its split.no is 1) */
    CHECK(gguf_w_write_split(w, tpath("m"), 3, &e) == 0, "%s", e.msg);
    CHECK(gguf_w_write_split(w, tpath("n"), 3, &e) == 0, "%s", e.msg);
    rename(tpath("n-00002-of-00003.gguf"), tpath("m-00003-of-00003.gguf"));
    CHECK_EQ_INT(gguf_open(&g, tpath("m-00001-of-00003.gguf"), &e), ERR_FORMAT);
    CHECK(strstr(e.msg, "m-00003-of-00003.gguf: offset ") && strstr(e.msg, "split.no is 1, expected 2"), "msg %s",
          e.msg);
    gguf_w_free(w);

    /* split.tensors.count disagreeing with the parts, and a name in two parts */
    for (int k = 0; k < 2; k++) {
        struct gguf_w *a = gguf_w_new(), *b = gguf_w_new();
        int64_t ne[1] = {4};
        gguf_w_u16(a, "split.no", 0);
        gguf_w_u16(a, "split.count", 2);
        gguf_w_i32(a, "split.tensors.count", k == 0 ? 3 : 2);
        gguf_w_tensor_f32(a, "x", 1, ne, d);
        gguf_w_u16(b, "split.no", 1);
        gguf_w_u16(b, "split.count", 2);
        gguf_w_tensor_f32(b, k == 0 ? "y" : "x", 1, ne, d);
        CHECK(gguf_w_write(a, tpath("s-00001-of-00002.gguf"), &e) == 0, "%s", e.msg);
        CHECK(gguf_w_write(b, tpath("s-00002-of-00002.gguf"), &e) == 0, "%s", e.msg);
        CHECK_EQ_INT(gguf_open(&g, tpath("s-00001-of-00002.gguf"), &e), ERR_FORMAT);
        CHECK(strstr(e.msg, k == 0 ? "split.tensors.count is 3 but the parts hold 2" : "duplicate tensor name 'x'"),
              "msg %s", e.msg);
        if (k == 1)
            CHECK(strstr(e.msg, "s-00002-of-00002.gguf: offset "), "msg %s", e.msg);
        gguf_w_free(a);
        gguf_w_free(b);
    }
}

/* ------------------------------------------------------------ dump */

static void dump_format(void)
{
    struct gguf_w *w = gguf_w_new();
    gguf_w_str(w, "general.name", "a \"q\"\n\\ \x01");
    int32_t a[5] = {1, 2, 3, 4, 5};
    gguf_w_arr_i32(w, "x.arr", 5, a);
    const char *strs[2] = {"<s>", "it's"};
    gguf_w_arr_str(w, "x.strs", 2, strs);
    gguf_w_f32(w, "x.eps", 1e-5f);
    gguf_w_f64(w, "x.d", 0.1);
    gguf_w_bool(w, "x.b", true);
    gguf_w_i8(w, "x.i8", -3);
    gguf_w_arr_f32(w, "x.empty", 0, NULL);
    int64_t ne[2] = {32, 3};
    gguf_w_tensor(w, "blk.0.w", 2, ne, QT_Q8_0, NULL, 3 * 34);
    int64_t ne1[1] = {7};
    gguf_w_tensor(w, "norm", 1, ne1, QT_F32, NULL, 28);
    uint8_t *buf;
    size_t n;
    struct err e;
    CHECK(gguf_w_to_buffer(w, &buf, &n, &e) == 0, "%s", e.msg);
    gguf_w_free(w);
    struct gguf *g;
    int rc = gguf_open_buffer(&g, buf, n, "d.gguf", &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc) {
        free(buf);
        return;
    }
    char *text = NULL;
    size_t tl = 0;
    FILE *out = open_memstream(&text, &tl);
    CHECK_EQ_INT(gguf_dump(out, g, false, 3), 0);
    fclose(out);
    char head[200];
    snprintf(head, sizeof head,
             "GGUF version 3, n_kv 8, n_tensors 2, alignment 32, parts 1, data_start %llu\n",
             (unsigned long long)g->parts[0].data_start);
    char want[2048];
    snprintf(want, sizeof want,
             "%s"
             "general.name: string = \"a \\\"q\\\"\\n\\\\ \\x01\"\n"
             "x.arr: array[int32] = [1, 2, 3, ... (5 total)]\n"
             "x.strs: array[string] = [\"<s>\", \"it's\"]\n"
             "x.eps: float32 = 1e-05\n"
             "x.d: float64 = 0.1\n"
             "x.b: bool = true\n"
             "x.i8: int8 = -3\n"
             "x.empty: array[float32] = []\n"
             "blk.0.w  q8_0  [32, 3]  offset 0\n"
             "norm  f32  [7]  offset 128\n",
             head);
    CHECK(text && !strcmp(text, want), "dump:\n%s\nwant:\n%s", text, want);
    free(text);
    /* meta only, limit 0, unlimited */
    out = open_memstream(&text, &tl);
    gguf_dump(out, g, true, 0);
    fclose(out);
    CHECK(strstr(text, "x.arr: array[int32] = [... (5 total)]\n") && !strstr(text, "norm  f32"), "meta-only:\n%s",
          text);
    free(text);
    out = open_memstream(&text, &tl);
    gguf_dump(out, g, true, -1);
    fclose(out);
    CHECK(strstr(text, "x.arr: array[int32] = [1, 2, 3, 4, 5]\n"), "unlimited:\n%s", text);
    free(text);
    gguf_close(g);
    free(buf);
}

/* ------------------------------------------------------------ the real model */

static void stories260k_facts(void)
{
    const char *dir = check_shared_dir();
    if (!dir)
        SKIP("../shared/data not present");
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir);
    if (!file_exists(path))
        SKIP("stories260K.gguf not present");
    struct gguf *g;
    struct err e;
    int rc = gguf_open(&g, path, &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc)
        return;
    /* PROVENANCE.md: GGUF v3, 19 KV, 48 tensors, all F32, alignment 32, data at 14176 */
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->n_kv, 19);
    CHECK_EQ_INT(g->n_tensors, 48);
    CHECK_EQ_INT(g->alignment, 32);
    CHECK_EQ_INT(g->parts[0].data_start, 14176);
    CHECK_EQ_INT(g->parts[0].size, 1185376);
    struct { const char *k; int64_t v; } ints[] = {
        {"llama.context_length", 2048}, {"llama.embedding_length", 64}, {"llama.feed_forward_length", 172},
        {"llama.block_count", 5}, {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", 4},
        {"llama.rope.dimension_count", 8}, {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2},
        {"tokenizer.ggml.unknown_token_id", 0}, {"tokenizer.ggml.seperator_token_id", 0xFFFFFFFFll},
        {"tokenizer.ggml.padding_token_id", 0xFFFFFFFFll},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = -1;
        CHECK(gguf_get_i64(g, ints[i].k, &v, &e) == 0 && v == ints[i].v, "%s = %lld", ints[i].k, (long long)v);
    }
    float eps = 0;
    CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, &e) == 0 && eps == 1e-5f, "eps %g", eps);
    CHECK(gguf_find_kv(g, "llama.rope.freq_base") == NULL, "no rope.freq_base");
    CHECK(gguf_find_kv(g, "tokenizer.ggml.pre") == NULL, "no tokenizer.ggml.pre");
    char s[32];
    CHECK(gguf_get_cstr(g, "general.architecture", s, sizeof s, &e) == 0 && !strcmp(s, "llama"), "arch");
    CHECK(gguf_get_cstr(g, "general.name", s, sizeof s, &e) == 0 && !strcmp(s, "llama"), "name");
    CHECK(gguf_get_cstr(g, "tokenizer.ggml.model", s, sizeof s, &e) == 0 && !strcmp(s, "llama"), "tok model");
    const struct gguf_kv *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
    const struct gguf_kv *sc = gguf_find_kv(g, "tokenizer.ggml.scores");
    CHECK(tok && tok->arr_type == GGUF_STRING && tok->arr_n == 512, "tokens");
    CHECK(sc && sc->arr_type == GGUF_FLOAT32 && sc->arr_n == 512, "scores");
    if (tok && sc && tok->arr_n == 512 && sc->arr_n == 512) {
        const char *first[4] = {"<unk>", "<s>", "</s>", "<0x00>"};
        for (int i = 0; i < 4; i++) {
            struct gguf_str t = gguf_arr_str(tok, (uint64_t)i);
            CHECK(t.len == strlen(first[i]) && !memcmp(t.ptr, first[i], t.len), "token %d", i);
        }
        struct gguf_str t = gguf_arr_str(tok, 258);
        CHECK(t.len == 6 && !memcmp(t.ptr, "<0xFF>", 6), "token 258");
        int bad = 0;
        for (int i = 259; i < 512; i++)
            bad += gguf_arr_f32(sc, (uint64_t)i) != (float)(259 - i);
        CHECK_EQ_INT(bad, 0);
    }
    /* tensor shapes from PROVENANCE.md */
    struct { const char *n; int64_t ne0, ne1; } ts[] = {
        {"token_embd.weight", 64, 512}, {"output.weight", 64, 512}, {"output_norm.weight", 64, 1},
        {"attn_norm.weight", 64, 1}, {"attn_q.weight", 64, 64}, {"attn_k.weight", 64, 32},
        {"attn_v.weight", 64, 32}, {"attn_output.weight", 64, 64}, {"ffn_norm.weight", 64, 1},
        {"ffn_gate.weight", 64, 172}, {"ffn_down.weight", 172, 64}, {"ffn_up.weight", 64, 172},
    };
    int found = 0;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        for (int l = i < 3 ? -1 : 0; l < (i < 3 ? 0 : 5); l++) {
            char name[64];
            if (l < 0)
                snprintf(name, sizeof name, "%s", ts[i].n);
            else
                snprintf(name, sizeof name, "blk.%d.%s", l, ts[i].n);
            const struct gguf_tensor *t = gguf_find_tensor(g, name);
            CHECK(t != NULL, "tensor %s", name);
            if (!t)
                continue;
            found++;
            CHECK(t->type == QT_F32 && t->ne[0] == ts[i].ne0 && t->ne[1] == ts[i].ne1 &&
                      t->n_dims == (ts[i].ne1 == 1 ? 1u : 2u) && t->nbytes == (uint64_t)(ts[i].ne0 * ts[i].ne1 * 4),
                  "%s: type %u [%lld, %lld]", name, t->type, (long long)t->ne[0], (long long)t->ne[1]);
        }
    }
    CHECK_EQ_INT(found, 48);
    /* dump lines */
    char *text = NULL;
    size_t tl = 0;
    FILE *out = open_memstream(&text, &tl);
    gguf_dump(out, g, false, 3);
    fclose(out);
    CHECK(strstr(text, "GGUF version 3, n_kv 19, n_tensors 48, alignment 32, parts 1, data_start 14176\n") == text,
          "header: %.100s", text);
    CHECK(strstr(text, "\nllama.block_count: uint32 = 5\n"), "block_count line");
    CHECK(strstr(text, "\ntokenizer.ggml.tokens: array[string] = [\"<unk>\", \"<s>\", \"</s>\", ... (512 total)]\n"),
          "tokens line");
    CHECK(strstr(text, "\nllama.attention.layer_norm_rms_epsilon: float32 = 1e-05\n"), "eps line");
    CHECK(strstr(text, "\ntoken_embd.weight  f32  [64, 512]  offset 0\n"), "tensor line");
    free(text);

    /* tensor bytes: stories260K.bin is the same model as a llama2.c checkpoint
     * (PROVENANCE.md: tensor bytes identical): a 28-byte header, then the
     * token embedding [512 x 64] f32, then the 5 attention norms [5 x 64]. */
    snprintf(path, sizeof path, "%s/models/stories260K.bin", dir);
    FILE *bf = fopen(path, "rb");
    if (bf) {
        static float bin[28 / 4 + 512 * 64 + 5 * 64];
        size_t got = fread(bin, 4, sizeof bin / 4, bf);
        fclose(bf);
        CHECK_EQ_INT(got, sizeof bin / 4);
        const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
        CHECK(emb && !memcmp(emb->data, bin + 7, 512 * 64 * 4), "token_embd bytes equal the llama2.c checkpoint");
        for (int l = 0; l < 5; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
            const struct gguf_tensor *t = gguf_find_tensor(g, name);
            CHECK(t && !memcmp(t->data, bin + 7 + 512 * 64 + l * 64, 64 * 4), "%s bytes", name);
        }
    }

    /* truncated copies of the real file fail cleanly at every header offset */
    const uint8_t *img = g->parts[0].map;
    int bad = 0;
    for (size_t n = 0; n < 14176 + 64; n += (n < 14176 ? 7 : 1)) {
        rc = open_img(img, n, NULL, &e);
        bad += rc != ERR_FORMAT;
    }
    CHECK_EQ_INT(bad, 0);
    gguf_close(g);
}

/* Every GGUF under ../shared/data (llama.cpp's vocab files, the models)
 * opens: they were written by llama.cpp's own tools. */
static void shared_gguf_files_open(void)
{
    const char *dir = check_shared_dir();
    if (!dir)
        SKIP("../shared/data not present");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "ls '%s'/models/*.gguf '%s'/tokenizer/*.gguf 2>/dev/null", dir, dir);
    FILE *ls = popen(cmd, "r");
    if (!ls)
        SKIP("cannot list ../shared/data");
    char path[4200];
    int n = 0;
    while (fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = '\0';
        struct gguf *g;
        struct err e;
        int rc = gguf_open(&g, path, &e);
        CHECK(rc == 0, "%s", e.msg);
        if (rc)
            continue;
        n++;
        const struct gguf_kv *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
        CHECK(tok && tok->arr_type == GGUF_STRING && tok->arr_n > 0, "%s: tokens", path);
        FILE *out = fopen("/dev/null", "w");
        CHECK_EQ_INT(gguf_dump(out, g, false, -1), 0);
        fclose(out);
        gguf_close(g);
    }
    pclose(ls);
    if (n == 0)
        SKIP("no .gguf files under ../shared/data");
}

/* Models from the independent Python writer ../shared/tools/gguf_synth.py
 * (its layout is checked to load in llama.cpp, spec changelog) open, with the
 * tensor count and types the tool reports. */
static void synth_models_open(void)
{
    const char *dir = check_shared_dir();
    if (!dir)
        SKIP("../shared/data not present");
    char tool[4200];
    snprintf(tool, sizeof tool, "%s/../tools/gguf_synth.py", dir);
    if (!file_exists(tool))
        SKIP("../shared/tools/gguf_synth.py not present");
    if (system("python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' >/dev/null 2>&1") != 0)
        SKIP("python3 not installed");
    struct { const char *args; const char *arch; uint32_t type; } cases[] = {
        {"--arch llama --type f32", "llama", QT_F32},
        {"--arch llama --type f16", "llama", QT_F16},
        {"--arch llama --type q8_0", "llama", QT_Q8_0},
        {"--arch llama --type q4_k --n-embd 256 --n-ff 256 --n-head 2 --n-head-kv 1", "llama", QT_Q4_K},
        {"--arch qwen3 --type f16", "qwen3", QT_F16},
        {"--arch qwen35 --type q8_0", "qwen35", QT_Q8_0},
        {"--arch qwen35moe --type f16", "qwen35moe", QT_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *out = tpath("synth.gguf");
        char cmd[9000], line[1024] = "";
        snprintf(cmd, sizeof cmd, "python3 '%s' %s --out '%s' 2>&1", tool, cases[i].args, out);
        FILE *p = popen(cmd, "r");
        int n_t = -1;
        while (p && fgets(line, sizeof line, p)) {
            const char *k = strstr(line, " tensors=");
            if (k)
                n_t = atoi(k + 9);
        }
        int st = p ? pclose(p) : -1;
        CHECK(st == 0 && n_t > 0, "%s: exit %d, tensors=%d (%s)", cases[i].args, st, n_t, line);
        if (st != 0)
            continue;
        struct gguf *g;
        struct err e;
        int rc = gguf_open(&g, out, &e);
        CHECK(rc == 0, "%s: %s", cases[i].args, e.msg);
        if (rc)
            continue;
        CHECK_EQ_INT(g->n_tensors, n_t);
        char arch[32] = "";
        CHECK(gguf_get_cstr(g, "general.architecture", arch, sizeof arch, &e) == 0 && !strcmp(arch, cases[i].arch),
              "%s: arch '%s'", cases[i].args, arch);
        int n_type = 0;
        for (uint64_t k = 0; k < g->n_tensors; k++)
            n_type += g->tensors[k].type == cases[i].type;
        CHECK(n_type > 0, "%s: no tensor of type %u", cases[i].args, cases[i].type);
        const struct gguf_kv *tok = NULL;
        CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, &tok, &e) == 0, "%s: %s", cases[i].args, e.msg);
        gguf_close(g);
    }
}

/* ------------------------------------------------------------ main */

static void rm_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/llm170-gguf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        printf("not ok - test_gguf: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    RUN(writer_roundtrip_every_accessor);
    RUN(writer_copies_every_kv);
    RUN(writer_bytes_match_spec_layout);
    RUN(writer_replace_delete_version);
    RUN(writer_rejects_bad_input);
    RUN(writer_alignment_64);
    RUN(writer_io_errors_leave_no_file);
    RUN(truncated_at_every_offset);
    RUN(header_magic_and_version);
    RUN(huge_counts);
    RUN(lying_lengths);
    RUN(string_and_array_caps_2_30);
    RUN(bad_kv_types);
    RUN(bad_alignment);
    RUN(bad_tensor_infos);
    RUN(bad_tensor_offsets);
    RUN(split_sets);
    RUN(dump_format);
    RUN(stories260k_facts);
    RUN(shared_gguf_files_open);
    RUN(synth_models_open);
    rm_dir(g_dir);
    CHECK_EXIT();
}
