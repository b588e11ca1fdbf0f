/* gguf.c — GGUF reader: mmap, validate every header field, index keys and
 * tensors (shared spec gguf-and-quants.md §1–§2).
 *
 * Validation follows what llama.cpp's gguf reader and model loader accept,
 * so every file llama.cpp loads opens here and a malformed one fails with a
 * message naming the file and the byte offset of the offending field. The
 * parser never reads past the buffer: every read goes through `rd_need`. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../num/quant.h"

#define GGUF_MAGIC_STR "GGUF"
#define GGUF_STR_CAP (1ull << 30)   /* llama.cpp's cap on string bytes / array elements */
#define GGUF_DEFAULT_ALIGN 32u
#define GGUF_MIN_KV_BYTES 13u       /* key len (8) + type (4) + smallest payload (1) */
#define GGUF_MIN_TINFO_BYTES 32u    /* name len 8 + n_dims 4 + ne[0] 8 + type 4 + offset 8 */
#define GGUF_MAX_SPLITS 65535       /* split.count is a uint16 in llama.cpp */

/* What gguf_open allocates: the public struct plus the lookup indexes. */
struct gguf_impl {
    struct gguf pub;
    const struct gguf_kv **kv_sorted;         /* [n_kv] sorted by key */
    const struct gguf_tensor **t_sorted;      /* [n_tensors] sorted by name */
    uint64_t *t_info_off;                     /* [n_tensors] file offset of each tensor info */
    struct gguf_str **kv_strs;                /* [n_kv] element table of string arrays, else NULL */
};

/* ---------------------------------------------------------------- types */

static const char *const g_vtype_names[GGUF_VTYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
static const uint8_t g_vtype_sizes[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VTYPE_COUNT ? g_vtype_names[t] : "invalid";
}

size_t gguf_vtype_size(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VTYPE_COUNT ? g_vtype_sizes[t] : 0;
}

static bool vtype_is_int(enum gguf_vtype t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_UINT16: case GGUF_INT16:
    case GGUF_UINT32: case GGUF_INT32: case GGUF_UINT64: case GGUF_INT64:
    case GGUF_BOOL:
        return true;
    default:
        return false;
    }
}

static uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Integer scalar at p of integer type t. *is_u64_big is set when a UINT64
 * value does not fit int64. */
static int64_t ld_int(enum gguf_vtype t, const uint8_t *p, bool *u64_big)
{
    *u64_big = false;
    switch (t) {
    case GGUF_UINT8: return p[0];
    case GGUF_INT8: return (int8_t)p[0];
    case GGUF_BOOL: return p[0] != 0;
    case GGUF_UINT16: return ld16(p);
    case GGUF_INT16: return (int16_t)ld16(p);
    case GGUF_UINT32: return ld32(p);
    case GGUF_INT32: return (int32_t)ld32(p);
    case GGUF_INT64: return (int64_t)ld64(p);
    case GGUF_UINT64: {
        uint64_t v = ld64(p);
        if (v > INT64_MAX) {
            *u64_big = true;
            return INT64_MAX;
        }
        return (int64_t)v;
    }
    default: return 0;
    }
}

static double ld_num(enum gguf_vtype t, const uint8_t *p)
{
    if (t == GGUF_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == GGUF_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (t == GGUF_UINT64)
        return (double)ld64(p);
    bool big;
    return (double)ld_int(t, p, &big);
}

/* ---------------------------------------------------------------- reader */

struct rd {
    const uint8_t *base; /* [size] the file image */
    uint64_t size;
    uint64_t off;        /* read cursor */
    const char *name;    /* file name for messages */
    struct err *e;
};

#define U(x) ((unsigned long long)(x))

static int rd_fail(struct rd *r, uint64_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rd_fail(struct rd *r, uint64_t at, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(r->e, ERR_FORMAT, "%s: offset %llu: %s", r->name, U(at), msg);
}

/* Ensure n more bytes exist at the cursor. */
static int rd_need(struct rd *r, uint64_t n, const char *what)
{
    if (n > r->size - r->off)
        return rd_fail(r, r->off, "%s (%llu bytes) runs past end of file (size %llu)", what, U(n), U(r->size));
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    int rc = rd_need(r, 4, what);
    if (rc)
        return rc;
    *v = ld32(r->base + r->off);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
    int rc = rd_need(r, 8, what);
    if (rc)
        return rc;
    *v = ld64(r->base + r->off);
    r->off += 8;
    return 0;
}

/* A gguf_string: u64 length then bytes; at most 2^30 bytes, never past EOF. */
static int rd_str(struct rd *r, struct gguf_str *s, const char *what)
{
    uint64_t at = r->off, len;
    /* the length's label is made only when it is missing (a vocabulary has 150k strings) */
    if (8 > r->size - r->off)
        return rd_fail(r, r->off, "%s length (8 bytes) runs past end of file (size %llu)", what, U(r->size));
    len = ld64(r->base + r->off);
    r->off += 8;
    if (len > r->size - r->off)
        return rd_fail(r, at, "%s length %llu runs past end of file (size %llu)", what, U(len), U(r->size));
    if (len > GGUF_STR_CAP)
        return rd_fail(r, at, "%s length %llu exceeds the 2^30 byte limit", what, U(len));
    s->ptr = (const char *)r->base + r->off;
    s->len = len;
    r->off += len;
    return 0;
}

static bool str_eq(struct gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int str_cmp(struct gguf_str a, struct gguf_str b)
{
    uint64_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (c)
        return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int cmp_kv_ptr(const void *a, const void *b)
{
    const struct gguf_kv *x = *(const struct gguf_kv *const *)a, *y = *(const struct gguf_kv *const *)b;
    int c = str_cmp(x->key, y->key);
    if (c)
        return c;
    return x->file_off < y->file_off ? -1 : x->file_off > y->file_off; /* later one second */
}

static int cmp_t_ptr(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x < y ? -1 : x > y; /* array order: the later tensor sorts second */
}

/* Keys, tensors and layout of one file. */
struct part_parse {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    struct gguf_kv *kv;           /* [n_kv] */
    struct gguf_str **kv_strs;    /* [n_kv] string-array element tables (or NULL) */
    uint64_t n_tensors;
    struct gguf_tensor *tensors;  /* [n_tensors] */
    uint64_t *t_info_off;         /* [n_tensors] */
    uint64_t data_start;
};

static void part_parse_free(struct part_parse *p)
{
    if (p->kv_strs)
        for (uint64_t i = 0; i < p->n_kv; i++)
            free(p->kv_strs[i]);
    free(p->kv_strs);
    free(p->kv);
    free(p->tensors);
    free(p->t_info_off);
    memset(p, 0, sizeof *p);
}

static int nomem(struct rd *r)
{
    return err_set(r->e, ERR_NOMEM, "%s: out of memory while reading the header", r->name);
}

/* One KV pair at the cursor. */
static int parse_kv(struct rd *r, struct gguf_kv *kv, struct gguf_str **strs)
{
    int rc;
    kv->file_off = r->off;
    if ((rc = rd_str(r, &kv->key, "key string")))
        return rc;
    uint64_t tat = r->off;
    uint32_t t;
    if ((rc = rd_u32(r, &t, "value type")))
        return rc;
    if (t >= GGUF_VTYPE_COUNT)
        return rd_fail(r, tat, "key '%.*s': invalid value type %u", (int)(kv->key.len > 80 ? 80 : kv->key.len),
                       kv->key.ptr, t);
    kv->type = (enum gguf_vtype)t;
    kv->arr_type = 0;
    kv->arr_n = 0;
    int klen = (int)(kv->key.len > 80 ? 80 : kv->key.len);
    if (t == GGUF_STRING) {
        kv->val = r->base + r->off;
        struct gguf_str s;
        return rd_str(r, &s, "string value");
    }
    if (t != GGUF_ARRAY) {
        kv->val = r->base + r->off;
        if ((rc = rd_need(r, g_vtype_sizes[t], "value")))
            return rc;
        r->off += g_vtype_sizes[t];
        return 0;
    }
    uint64_t eat = r->off;
    uint32_t et;
    if ((rc = rd_u32(r, &et, "array element type")))
        return rc;
    if (et >= GGUF_VTYPE_COUNT)
        return rd_fail(r, eat, "key '%.*s': invalid array element type %u", klen, kv->key.ptr, et);
    if (et == GGUF_ARRAY)
        return rd_fail(r, eat, "key '%.*s': nested arrays are not supported", klen, kv->key.ptr);
    uint64_t nat = r->off, n;
    if ((rc = rd_u64(r, &n, "array length")))
        return rc;
    uint64_t esz = et == GGUF_STRING ? 8 : g_vtype_sizes[et]; /* a string element is at least its length */
    if (n > (r->size - r->off) / esz)
        return rd_fail(r, nat, "key '%.*s': array of %llu %s runs past end of file (size %llu)", klen, kv->key.ptr,
                       U(n), g_vtype_names[et], U(r->size));
    if (n > GGUF_STR_CAP)
        return rd_fail(r, nat, "key '%.*s': array length %llu exceeds the 2^30 element limit", klen, kv->key.ptr,
                       U(n));
    kv->arr_type = (enum gguf_vtype)et;
    kv->arr_n = n;
    kv->val = r->base + r->off;
    if (et != GGUF_STRING) {
        r->off += n * esz;
        return 0;
    }
    struct gguf_str *tab = malloc((n ? n : 1) * sizeof *tab);
    if (!tab)
        return nomem(r);
    *strs = tab;
    kv->arr_strs = tab;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = rd_str(r, &tab[i], "array string")))
            return rc;
    return 0;
}

static int parse_tensor_info(struct rd *r, const struct part_parse *p, uint64_t idx, struct gguf_tensor *t)
{
    int rc;
    struct gguf_str name;
    uint64_t at = r->off;
    if ((rc = rd_str(r, &name, "tensor name")))
        return rc;
    if (name.len >= GGUF_MAX_NAME)
        return rd_fail(r, at, "tensor %llu: name '%.*s...' is %llu bytes, the limit is %d", U(idx), 40, name.ptr,
                       U(name.len), GGUF_MAX_NAME - 1);
    if (memchr(name.ptr, 0, name.len))
        return rd_fail(r, at, "tensor %llu: name contains a NUL byte", U(idx));
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';
    at = r->off;
    if ((rc = rd_u32(r, &t->n_dims, "tensor n_dims")))
        return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, at, "tensor '%s': n_dims %u is not in 1..%d", t->name, t->n_dims, GGUF_MAX_DIMS);
    for (int j = 0; j < GGUF_MAX_DIMS; j++)
        t->ne[j] = 1;
    for (uint32_t j = 0; j < t->n_dims; j++) {
        at = r->off;
        uint64_t v;
        if ((rc = rd_u64(r, &v, "tensor dimension")))
            return rc;
        if (v > INT64_MAX)
            return rd_fail(r, at, "tensor '%s': ne[%u] = %lld is negative", t->name, j, (long long)(int64_t)v);
        t->ne[j] = (int64_t)v;
    }
    int64_t n_el = t->ne[0];
    for (int j = 1; j < GGUF_MAX_DIMS; j++) {
        if (t->ne[j] != 0 && n_el > INT64_MAX / t->ne[j])
            return rd_fail(r, at, "tensor '%s': element count [%lld, %lld, %lld, %lld] overflows int64", t->name,
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        n_el *= t->ne[j];
    }
    at = r->off;
    if ((rc = rd_u32(r, &t->type, "tensor type")))
        return rc;
    const struct qtype_info *q = qtype_get(t->type);
    if (!q)
        return rd_fail(r, at, "tensor '%s': type %u is not a known ggml type (unknown or removed id)", t->name,
                       t->type);
    if (t->ne[0] % q->blck)
        return rd_fail(r, at, "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %d", t->name,
                       (long long)t->ne[0], q->name, q->blck);
    uint64_t nb = (uint64_t)(t->ne[0] / q->blck), tmp;
    bool ovf = __builtin_mul_overflow(nb, (uint64_t)q->size, &nb);
    for (int j = 1; j < GGUF_MAX_DIMS && !ovf; j++) {
        ovf = __builtin_mul_overflow(nb, (uint64_t)t->ne[j], &tmp);
        nb = tmp;
    }
    if (ovf || nb > SIZE_MAX)
        return rd_fail(r, at, "tensor '%s': byte size overflows", t->name);
    t->nbytes = nb;
    if ((rc = rd_u64(r, &t->offset, "tensor data offset")))
        return rc;
    (void)p;
    return 0;
}

/* Parse and validate one whole file image. */
static int parse_part(struct rd *r, struct part_parse *p)
{
    int rc;
    memset(p, 0, sizeof *p);
    p->alignment = GGUF_DEFAULT_ALIGN;
    if (r->size < 4)
        return rd_fail(r, 0, "file too small to be GGUF (size %llu)", U(r->size));
    if (memcmp(r->base, GGUF_MAGIC_STR, 4) != 0)
        return rd_fail(r, 0, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", r->base[0], r->base[1], r->base[2],
                       r->base[3]);
    r->off = 4;
    if ((rc = rd_u32(r, &p->version, "version")))
        return rc;
    if (p->version == 0)
        return rd_fail(r, 4, "invalid GGUF version 0");
    if ((p->version & 0xFFFF) == 0)
        return rd_fail(r, 4, "GGUF version 0x%08x: byte-swapped (big-endian file?)", p->version);
    if (p->version == 1)
        return rd_fail(r, 4, "GGUF version 1 is no longer supported");
    if (p->version > 3)
        return rd_fail(r, 4, "GGUF version %u is newer than supported (3)", p->version);
    if ((rc = rd_u64(r, &p->n_tensors, "n_tensors")))
        return rc;
    if ((rc = rd_u64(r, &p->n_kv, "n_kv")))
        return rc;
    uint64_t rest = r->size - r->off;
    if (p->n_kv > rest / GGUF_MIN_KV_BYTES) {
        uint64_t n = p->n_kv;
        p->n_kv = 0;
        return rd_fail(r, 16, "n_kv %llu is more than the file can hold (size %llu)", U(n), U(r->size));
    }
    if (p->n_tensors > rest / GGUF_MIN_TINFO_BYTES) {
        uint64_t n = p->n_tensors;
        p->n_tensors = 0;
        p->n_kv = 0;
        return rd_fail(r, 8, "n_tensors %llu is more than the file can hold (size %llu)", U(n), U(r->size));
    }
    p->kv = calloc(p->n_kv ? p->n_kv : 1, sizeof *p->kv);
    p->kv_strs = calloc(p->n_kv ? p->n_kv : 1, sizeof *p->kv_strs);
    p->tensors = calloc(p->n_tensors ? p->n_tensors : 1, sizeof *p->tensors);
    p->t_info_off = calloc(p->n_tensors ? p->n_tensors : 1, sizeof *p->t_info_off);
    if (!p->kv || !p->kv_strs || !p->tensors || !p->t_info_off)
        return nomem(r);

    for (uint64_t i = 0; i < p->n_kv; i++)
        if ((rc = parse_kv(r, &p->kv[i], &p->kv_strs[i])))
            return rc;

    /* duplicate keys: sort pointers, compare neighbours */
    if (p->n_kv > 1) {
        const struct gguf_kv **s = malloc(p->n_kv * sizeof *s);
        if (!s)
            return nomem(r);
        for (uint64_t i = 0; i < p->n_kv; i++)
            s[i] = &p->kv[i];
        qsort(s, p->n_kv, sizeof *s, cmp_kv_ptr);
        for (uint64_t i = 1; i < p->n_kv; i++)
            if (!str_cmp(s[i - 1]->key, s[i]->key)) {
                const struct gguf_kv *d = s[i];
                free(s);
                return rd_fail(r, d->file_off, "duplicate key '%.*s'", (int)(d->key.len > 80 ? 80 : d->key.len),
                               d->key.ptr);
            }
        free(s);
    }

    for (uint64_t i = 0; i < p->n_kv; i++) {
        const struct gguf_kv *kv = &p->kv[i];
        if (!str_eq(kv->key, "general.alignment"))
            continue;
        if (kv->type != GGUF_UINT32)
            return rd_fail(r, kv->file_off, "general.alignment has type %s, must be uint32", g_vtype_names[kv->type]);
        uint32_t a = ld32(kv->val);
        if (a == 0 || (a & (a - 1)))
            return rd_fail(r, kv->file_off, "general.alignment %u is not a power of two", a);
        p->alignment = a;
    }

    for (uint64_t i = 0; i < p->n_tensors; i++) {
        p->t_info_off[i] = r->off;
        if ((rc = parse_tensor_info(r, p, i, &p->tensors[i])))
            return rc;
    }

    /* the data blob starts at the next multiple of the alignment */
    uint64_t pos = r->off;
    if (p->n_tensors > 0)
        pos += (p->alignment - pos % p->alignment) % p->alignment;
    p->data_start = pos;

    /* llama.cpp: tensors in info order, contiguous, each padded to the alignment */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < p->n_tensors; i++) {
        struct gguf_tensor *t = &p->tensors[i];
        uint64_t at = p->t_info_off[i] + 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4;
        if (t->offset != expect)
            return rd_fail(r, at, "tensor '%s': data offset %llu, expected %llu (tensors must be contiguous, in "
                           "order, aligned to %u)", t->name, U(t->offset), U(expect), p->alignment);
        uint64_t end;
        if (__builtin_add_overflow(p->data_start, t->offset, &end) || __builtin_add_overflow(end, t->nbytes, &end) ||
            end > r->size)
            return rd_fail(r, p->data_start + t->offset,
                           "tensor '%s' data (%llu bytes) runs past end of file (size %llu)", t->name, U(t->nbytes),
                           U(r->size));
        uint64_t padded = t->nbytes + (p->alignment - t->nbytes % p->alignment) % p->alignment;
        if (padded < t->nbytes || __builtin_add_overflow(expect, padded, &expect))
            return rd_fail(r, at, "tensor '%s': data size overflows", t->name);
        t->data = r->base + p->data_start + t->offset;
    }
    return 0;
}

/* ---------------------------------------------------------------- open */

static void impl_free(struct gguf_impl *im)
{
    if (!im)
        return;
    struct gguf *g = &im->pub;
    if (im->kv_strs)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(im->kv_strs[i]);
    free(im->kv_strs);
    free(im->kv_sorted);
    free(im->t_sorted);
    free(im->t_info_off);
    free(g->kv);
    free(g->tensors);
    for (int i = 0; i < g->n_parts; i++) {
        struct gguf_part *pt = &g->parts[i];
        if (pt->fd >= 0) {
            if (pt->map)
                munmap(pt->map, pt->size);
            close(pt->fd);
        }
        free(pt->path);
    }
    free(g->parts);
    free(im);
}

void gguf_close(struct gguf *g)
{
    impl_free((struct gguf_impl *)g);
}

/* Map a file read-only. size 0 files get map == NULL (the parser rejects them). */
static int map_file(struct gguf_part *pt, const char *path, struct err *e)
{
    pt->fd = -1;
    pt->map = NULL;
    pt->path = strdup(path);
    if (!pt->path)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(e, ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int en = errno;
        close(fd);
        return err_set(e, ERR_IO, "%s: cannot stat: %s", path, strerror(en));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, ERR_IO, "%s: not a regular file", path);
    }
    pt->fd = fd;
    pt->size = (uint64_t)st.st_size;
    if (pt->size == 0)
        return 0;
    void *m = mmap(NULL, pt->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return err_set(e, ERR_IO, "%s: cannot mmap %llu bytes: %s", path, U(pt->size), strerror(errno));
    pt->map = m;
    return 0;
}

/* Build the sorted indexes; reject duplicate tensor names over all parts. */
static int build_index(struct gguf_impl *im, struct err *e)
{
    struct gguf *g = &im->pub;
    im->kv_sorted = malloc((g->n_kv ? g->n_kv : 1) * sizeof *im->kv_sorted);
    im->t_sorted = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *im->t_sorted);
    if (!im->kv_sorted || !im->t_sorted)
        return err_set(e, ERR_NOMEM, "%s: out of memory", g->parts[0].path);
    for (uint64_t i = 0; i < g->n_kv; i++)
        im->kv_sorted[i] = &g->kv[i];
    qsort(im->kv_sorted, g->n_kv, sizeof *im->kv_sorted, cmp_kv_ptr);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        im->t_sorted[i] = &g->tensors[i];
    qsort(im->t_sorted, g->n_tensors, sizeof *im->t_sorted, cmp_t_ptr);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(im->t_sorted[i - 1]->name, im->t_sorted[i]->name)) {
            const struct gguf_tensor *t = im->t_sorted[i];
            uint64_t k = (uint64_t)(t - g->tensors);
            return err_set(e, ERR_FORMAT, "%s: offset %llu: duplicate tensor name '%s'", g->parts[t->part].path,
                           U(im->t_info_off[k]), t->name);
        }
    return 0;
}

/* Append the parsed tensors of one part to g (takes ownership of nothing). */
static int append_tensors(struct gguf_impl *im, struct part_parse *p, int part, struct err *e)
{
    struct gguf *g = &im->pub;
    uint64_t n = g->n_tensors + p->n_tensors;
    struct gguf_tensor *t = realloc(g->tensors, (n ? n : 1) * sizeof *t);
    if (t)
        g->tensors = t;
    uint64_t *o = realloc(im->t_info_off, (n ? n : 1) * sizeof *o);
    if (o)
        im->t_info_off = o;
    if (!t || !o)
        return err_set(e, ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < p->n_tensors; i++) {
        g->tensors[g->n_tensors + i] = p->tensors[i];
        g->tensors[g->n_tensors + i].part = part;
        im->t_info_off[g->n_tensors + i] = p->t_info_off[i];
    }
    g->n_tensors = n;
    return 0;
}

/* Parse part `idx` (already mapped) into p. */
static int parse_mapped(struct gguf_part *pt, struct part_parse *p, struct err *e)
{
    struct rd r = {.base = pt->map, .size = pt->size, .off = 0, .name = pt->path, .e = e};
    int rc = parse_part(&r, p);
    if (rc)
        return rc;
    pt->data_start = p->data_start;
    return 0;
}

/* Take part 0's KVs into g. */
static void adopt_kvs(struct gguf_impl *im, struct part_parse *p)
{
    struct gguf *g = &im->pub;
    g->version = p->version;
    g->alignment = p->alignment;
    g->n_kv = p->n_kv;
    g->kv = p->kv;
    im->kv_strs = p->kv_strs;
    p->kv = NULL;
    p->kv_strs = NULL;
    p->n_kv = 0;
}

int gguf_open_buffer(struct gguf **out, const void *buf, size_t size, const char *name, struct err *e)
{
    *out = NULL;
    if (!name)
        name = "<buffer>";
    struct gguf_impl *im = calloc(1, sizeof *im);
    if (!im)
        return err_set(e, ERR_NOMEM, "%s: out of memory", name);
    struct gguf *g = &im->pub;
    g->parts = calloc(1, sizeof *g->parts);
    if (!g->parts) {
        free(im);
        return err_set(e, ERR_NOMEM, "%s: out of memory", name);
    }
    g->n_parts = 1;
    struct gguf_part *pt = &g->parts[0];
    pt->fd = -1; /* not ours: never unmapped */
    pt->map = (void *)buf;
    pt->size = size;
    pt->path = strdup(name);
    struct part_parse p;
    int rc;
    if (!pt->path) {
        rc = err_set(e, ERR_NOMEM, "%s: out of memory", name);
        memset(&p, 0, sizeof p);
        goto fail;
    }
    if ((rc = parse_mapped(pt, &p, e)))
        goto fail;
    adopt_kvs(im, &p);
    if ((rc = append_tensors(im, &p, 0, e)))
        goto fail;
    part_parse_free(&p);
    if ((rc = build_index(im, e)))
        goto fail2;
    *out = g;
    return 0;
fail:
    part_parse_free(&p);
fail2:
    impl_free(im);
    return rc;
}

/* Integer value of key in a parsed part, if present and integer-typed. */
static bool part_int(const struct part_parse *p, const char *key, int64_t *v)
{
    for (uint64_t i = 0; i < p->n_kv; i++)
        if (str_eq(p->kv[i].key, key) && vtype_is_int(p->kv[i].type)) {
            bool big;
            *v = ld_int(p->kv[i].type, p->kv[i].val, &big);
            return !big;
        }
    return false;
}

static const struct gguf_kv *part_kv(const struct part_parse *p, const char *key)
{
    for (uint64_t i = 0; i < p->n_kv; i++)
        if (str_eq(p->kv[i].key, key))
            return &p->kv[i];
    return NULL;
}

/* Open the remaining parts of a split set named like "<prefix>-00001-of-00003.gguf". */
static int open_splits(struct gguf_impl *im, const char *path, int64_t count, struct err *e)
{
    struct gguf *g = &im->pub;
    char want[64];
    snprintf(want, sizeof want, "-%05d-of-%05d.gguf", 1, (int)count);
    size_t pl = strlen(path), wl = strlen(want);
    if (pl < wl || strcmp(path + pl - wl, want) != 0)
        return err_set(e, ERR_FORMAT, "%s: split.count is %lld but the file name does not end in '%s'", path,
                       (long long)count, want);
    struct gguf_part *parts = realloc(g->parts, (size_t)count * sizeof *parts);
    if (!parts)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    g->parts = parts;
    size_t cap = pl + 32;
    char *pp = malloc(cap);
    if (!pp)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    int rc = 0;
    for (int i = 1; i < count; i++) {
        snprintf(pp, cap, "%.*s-%05d-of-%05d.gguf", (int)(pl - wl), path, i + 1, (int)count);
        struct gguf_part *pt = &g->parts[i];
        memset(pt, 0, sizeof *pt);
        pt->fd = -1;
        g->n_parts = i + 1;
        if ((rc = map_file(pt, pp, e))) {
            err_prefix(e, "split part %d of %lld missing or unreadable", i + 1, (long long)count);
            break;
        }
        struct part_parse p;
        if ((rc = parse_mapped(pt, &p, e))) {
            part_parse_free(&p);
            break;
        }
        int64_t no = -1, cnt = -1;
        const struct gguf_kv *nk = part_kv(&p, "split.no");
        if (!part_int(&p, "split.no", &no) || no != i) {
            rc = err_set(e, ERR_FORMAT, "%s: offset %llu: split.no is %lld, expected %d", pp,
                         U(nk ? nk->file_off : 24), (long long)no, i);
            part_parse_free(&p);
            break;
        }
        if (part_int(&p, "split.count", &cnt) && cnt != count) {
            rc = err_set(e, ERR_FORMAT, "%s: offset %llu: split.count is %lld, part 1 says %lld", pp,
                         U(part_kv(&p, "split.count")->file_off), (long long)cnt, (long long)count);
            part_parse_free(&p);
            break;
        }
        rc = append_tensors(im, &p, i, e);
        part_parse_free(&p);
        if (rc)
            break;
    }
    free(pp);
    return rc;
}

int gguf_open(struct gguf **out, const char *path, struct err *e)
{
    *out = NULL;
    struct gguf_impl *im = calloc(1, sizeof *im);
    if (!im)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    struct gguf *g = &im->pub;
    struct part_parse p;
    memset(&p, 0, sizeof p);
    int rc;
    g->parts = calloc(1, sizeof *g->parts);
    if (!g->parts) {
        free(im);
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    }
    g->n_parts = 1;
    if ((rc = map_file(&g->parts[0], path, e)))
        goto fail;
    if ((rc = parse_mapped(&g->parts[0], &p, e)))
        goto fail;
    adopt_kvs(im, &p);
    if ((rc = append_tensors(im, &p, 0, e)))
        goto fail;
    part_parse_free(&p);

    const struct gguf_kv *ck = gguf_find_kv(g, "split.count");
    if (ck) {
        bool big = false;
        int64_t count = vtype_is_int(ck->type) ? ld_int(ck->type, ck->val, &big) : -1;
        if (count < 1 || big || count > GGUF_MAX_SPLITS) {
            rc = err_set(e, ERR_FORMAT, "%s: offset %llu: split.count must be an integer in 1..%d", path,
                         U(ck->file_off), GGUF_MAX_SPLITS);
            goto fail;
        }
        const struct gguf_kv *nk = gguf_find_kv(g, "split.no");
        int64_t no = 0;
        if (nk) {
            no = vtype_is_int(nk->type) ? ld_int(nk->type, nk->val, &big) : -1;
            if (no != 0) {
                rc = err_set(e, ERR_FORMAT, "%s: offset %llu: this is split part %lld of %lld; open part 1 instead",
                             path, U(nk->file_off), (long long)no + 1, (long long)count);
                goto fail;
            }
        }
        if (count > 1 && (rc = open_splits(im, path, count, e)))
            goto fail;
        const struct gguf_kv *tk = gguf_find_kv(g, "split.tensors.count");
        if (tk) {
            int64_t tc = vtype_is_int(tk->type) ? ld_int(tk->type, tk->val, &big) : -1;
            if (tc < 0 || (uint64_t)tc != g->n_tensors) {
                rc = err_set(e, ERR_FORMAT, "%s: offset %llu: split.tensors.count is %lld but the parts hold %llu "
                             "tensors", path, U(tk->file_off), (long long)tc, U(g->n_tensors));
                goto fail;
            }
        }
    }
    if ((rc = build_index(im, e)))
        goto fail;
    *out = g;
    return 0;
fail:
    part_parse_free(&p);
    impl_free(im);
    return rc;
}

/* ---------------------------------------------------------------- lookups */

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key)
{
    if (!g || !key)
        return NULL;
    const struct gguf_impl *im = (const struct gguf_impl *)g;
    struct gguf_str k = {key, strlen(key)};
    if (!im->kv_sorted) { /* during open, before the index exists */
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (!str_cmp(g->kv[i].key, k))
                return &g->kv[i];
        return NULL;
    }
    uint64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(im->kv_sorted[mid]->key, k);
        if (c == 0)
            return im->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    const struct gguf_impl *im = (const struct gguf_impl *)g;
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(im->t_sorted[mid]->name, name);
        if (c == 0)
            return im->t_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------- getters */

static const struct gguf_kv *need_kv(const struct gguf *g, const char *key, struct err *e, int *rc)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        *rc = err_set(e, ERR_NOTFOUND, "%s: key '%s' not found", g->n_parts ? g->parts[0].path : "gguf", key);
    return kv;
}

static int type_err(const struct gguf *g, const struct gguf_kv *kv, const char *key, const char *want, struct err *e)
{
    return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' has type %s, expected %s", g->parts[0].path,
                   U(kv->file_off), key, gguf_vtype_name(kv->type), want);
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (!vtype_is_int(kv->type))
        return type_err(g, kv, key, "an integer", e);
    bool big;
    int64_t v = ld_int(kv->type, kv->val, &big);
    if (big)
        return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' value %llu does not fit int64", g->parts[0].path,
                       U(kv->file_off), key, U(ld64(kv->val)));
    *out = v;
    return 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (!vtype_is_int(kv->type))
        return type_err(g, kv, key, "an integer", e);
    bool big;
    int64_t v = ld_int(kv->type, kv->val, &big);
    if (big || v < 0 || v > UINT32_MAX)
        return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' value %lld does not fit uint32", g->parts[0].path,
                       U(kv->file_off), key, (long long)v);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (kv->type == GGUF_BOOL || (!vtype_is_int(kv->type) && kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64))
        return type_err(g, kv, key, "a number", e);
    *out = (float)ld_num(kv->type, kv->val);
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (!vtype_is_int(kv->type))
        return type_err(g, kv, key, "bool", e);
    bool big;
    *out = ld_int(kv->type, kv->val, &big) != 0 || big;
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_STRING)
        return type_err(g, kv, key, "string", e);
    out->len = ld64(kv->val);
    out->ptr = (const char *)kv->val + 8;
    return 0;
}

int gguf_get_cstr(const struct gguf *g, const char *key, char *buf, size_t cap, struct err *e)
{
    struct gguf_str s;
    int rc = gguf_get_str(g, key, &s, e);
    if (rc)
        return rc;
    if (cap == 0)
        return 0;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = '\0';
    return 0;
}

/* ---------------------------------------------------------------- arrays */

int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n)
        return 0;
    const uint8_t *p = kv->val + i * g_vtype_sizes[kv->arr_type];
    if (vtype_is_int(kv->arr_type)) {
        bool big;
        return ld_int(kv->arr_type, p, &big);
    }
    if (kv->arr_type == GGUF_FLOAT32 || kv->arr_type == GGUF_FLOAT64) {
        double d = ld_num(kv->arr_type, p);
        if (!(d >= -9.2e18 && d <= 9.2e18))
            return 0;
        return (int64_t)d;
    }
    return 0;
}

float gguf_arr_f32(const struct gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type == GGUF_STRING)
        return 0.0f;
    return (float)ld_num(kv->arr_type, kv->val + i * g_vtype_sizes[kv->arr_type]);
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_str s = {"", 0};
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->arr_n)
        return s;
    if (kv->arr_strs)
        return kv->arr_strs[i];
    /* a kv not made by the reader: walk from the first element */
    const uint8_t *p = kv->val;
    for (uint64_t k = 0; k < i; k++)
        p += 8 + ld64(p);
    s.len = ld64(p);
    s.ptr = (const char *)p + 8;
    return s;
}

int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_vtype want, const struct gguf_kv **out,
                 struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    bool ok = kv->type == GGUF_ARRAY;
    const char *wname = "an array of strings";
    if (want == GGUF_FLOAT32 || want == GGUF_FLOAT64) {
        wname = "an array of numbers";
        ok = ok && kv->arr_type != GGUF_STRING;
    } else if (vtype_is_int(want)) {
        wname = "an array of integers";
        ok = ok && vtype_is_int(kv->arr_type);
    } else {
        ok = ok && kv->arr_type == GGUF_STRING;
    }
    if (!ok) {
        char have[40];
        if (kv->type == GGUF_ARRAY)
            snprintf(have, sizeof have, "array[%s]", gguf_vtype_name(kv->arr_type));
        else
            snprintf(have, sizeof have, "%s", gguf_vtype_name(kv->type));
        return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' has type %s, expected %s", g->parts[0].path,
                       U(kv->file_off), key, have, wname);
    }
    *out = kv;
    return 0;
}

int gguf_get_layer_i64(const struct gguf *g, const char *key, uint32_t layer, int64_t *out, struct err *e)
{
    int rc = 0;
    const struct gguf_kv *kv = need_kv(g, key, e, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_ARRAY)
        return gguf_get_i64(g, key, out, e);
    if (!vtype_is_int(kv->arr_type))
        return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' is an array of %s, expected integers",
                       g->parts[0].path, U(kv->file_off), key, gguf_vtype_name(kv->arr_type));
    if (layer >= kv->arr_n)
        return err_set(e, ERR_FORMAT, "%s: offset %llu: key '%s' has %llu values, no value for layer %u",
                       g->parts[0].path, U(kv->file_off), key, U(kv->arr_n), layer);
    *out = gguf_arr_i64(kv, layer);
    return 0;
}
