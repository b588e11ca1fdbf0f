/* gguf_write.c — in-memory GGUF builder and atomic file writer
 * (shared spec gguf-and-quants.md §1). Each KV is kept serialized (its value
 * payload exactly as it goes to disk), so writing is concatenation. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../num/quant.h"

#define W_DEFAULT_ALIGN 32u

struct w_kv {
    char *key;            /* NUL-terminated */
    size_t key_len;
    enum gguf_vtype type;
    uint8_t *payload;     /* [payload_len] value bytes as written after the type id */
    size_t payload_len;
};

struct w_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims = 1 */
    uint32_t type;
    size_t nbytes;
    const void *data;     /* [nbytes] or NULL for zeros */
    void *owned;          /* the copy when gguf_w_tensor copied it */
};

struct gguf_w {
    uint32_t version;
    struct w_kv *kv;      /* [n_kv] in insertion order */
    size_t n_kv, cap_kv;
    struct w_tensor *t;   /* [n_t] in insertion order = data order */
    size_t n_t, cap_t;
    struct err err;       /* first failure of any adder */
};

struct gguf_w *gguf_w_new(void)
{
    struct gguf_w *w = calloc(1, sizeof *w);
    if (w)
        w->version = 3;
    return w;
}

static void kv_free(struct w_kv *kv)
{
    free(kv->key);
    free(kv->payload);
}

void gguf_w_free(struct gguf_w *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++)
        kv_free(&w->kv[i]);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].owned);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Latch the first error; later ones are returned but not recorded. */
static int w_fail(struct gguf_w *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int w_fail(struct gguf_w *w, int code, const char *fmt, ...)
{
    if (!w || w->err.code)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
    va_end(ap);
    w->err.code = code;
    return code;
}

int gguf_w_set_version(struct gguf_w *w, uint32_t version)
{
    if (!w)
        return ERR_INVALID;
    if (version != 2 && version != 3)
        return w_fail(w, ERR_INVALID, "gguf writer: version %u (only 2 and 3 can be written)", version);
    w->version = version;
    return 0;
}

static struct w_kv *find_kv(const struct gguf_w *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key))
            return &w->kv[i];
    return NULL;
}

void gguf_w_del(struct gguf_w *w, const char *key)
{
    if (!w || !key)
        return;
    struct w_kv *kv = find_kv(w, key);
    if (!kv)
        return;
    size_t i = (size_t)(kv - w->kv);
    kv_free(kv);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *kv);
    w->n_kv--;
}

/* Store key = (type, payload); takes ownership of payload. */
static int put_kv(struct gguf_w *w, const char *key, enum gguf_vtype type, uint8_t *payload, size_t len)
{
    if (!w) {
        free(payload);
        return ERR_INVALID;
    }
    if (!payload)
        return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for key '%s'", key ? key : "");
    if (!key) {
        free(payload);
        return w_fail(w, ERR_INVALID, "gguf writer: NULL key");
    }
    struct w_kv *kv = find_kv(w, key);
    if (kv) { /* replace in place */
        free(kv->payload);
        kv->type = type;
        kv->payload = payload;
        kv->payload_len = len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 16;
        struct w_kv *n = realloc(w->kv, nc * sizeof *n);
        if (!n) {
            free(payload);
            return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
        }
        w->kv = n;
        w->cap_kv = nc;
    }
    char *k = strdup(key);
    if (!k) {
        free(payload);
        return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    w->kv[w->n_kv++] = (struct w_kv){k, strlen(k), type, payload, len};
    return 0;
}

static int put_scalar(struct gguf_w *w, const char *key, enum gguf_vtype t, const void *v)
{
    size_t n = gguf_vtype_size(t);
    uint8_t *p = malloc(n);
    if (p)
        memcpy(p, v, n); /* host is little-endian (x86-64, aarch64) */
    return put_kv(w, key, t, p, n);
}

int gguf_w_u8(struct gguf_w *w, const char *key, uint8_t v) { return put_scalar(w, key, GGUF_UINT8, &v); }
int gguf_w_i8(struct gguf_w *w, const char *key, int8_t v) { return put_scalar(w, key, GGUF_INT8, &v); }
int gguf_w_u16(struct gguf_w *w, const char *key, uint16_t v) { return put_scalar(w, key, GGUF_UINT16, &v); }
int gguf_w_i16(struct gguf_w *w, const char *key, int16_t v) { return put_scalar(w, key, GGUF_INT16, &v); }
int gguf_w_u32(struct gguf_w *w, const char *key, uint32_t v) { return put_scalar(w, key, GGUF_UINT32, &v); }
int gguf_w_i32(struct gguf_w *w, const char *key, int32_t v) { return put_scalar(w, key, GGUF_INT32, &v); }
int gguf_w_u64(struct gguf_w *w, const char *key, uint64_t v) { return put_scalar(w, key, GGUF_UINT64, &v); }
int gguf_w_i64(struct gguf_w *w, const char *key, int64_t v) { return put_scalar(w, key, GGUF_INT64, &v); }
int gguf_w_f32(struct gguf_w *w, const char *key, float v) { return put_scalar(w, key, GGUF_FLOAT32, &v); }
int gguf_w_f64(struct gguf_w *w, const char *key, double v) { return put_scalar(w, key, GGUF_FLOAT64, &v); }

int gguf_w_bool(struct gguf_w *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, GGUF_BOOL, &b);
}

int gguf_w_strn(struct gguf_w *w, const char *key, const char *s, size_t len)
{
    if (!s && len)
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': NULL string", key ? key : "");
    uint8_t *p = malloc(8 + len);
    if (p) {
        uint64_t l = len;
        memcpy(p, &l, 8);
        if (len)
            memcpy(p + 8, s, len);
    }
    return put_kv(w, key, GGUF_STRING, p, 8 + len);
}

int gguf_w_str(struct gguf_w *w, const char *key, const char *s)
{
    return gguf_w_strn(w, key, s, s ? strlen(s) : 0);
}

int gguf_w_arr(struct gguf_w *w, const char *key, enum gguf_vtype elem, uint64_t n, const void *vals)
{
    size_t es = gguf_vtype_size(elem);
    if (es == 0)
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': array element type %s is not numeric", key ? key : "",
                      gguf_vtype_name(elem));
    if (n > (1ull << 30) || (n && !vals))
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': bad array (%llu elements)", key ? key : "",
                      (unsigned long long)n);
    size_t len = 12 + (size_t)n * es;
    uint8_t *p = malloc(len);
    if (p) {
        uint32_t t = elem;
        memcpy(p, &t, 4);
        memcpy(p + 4, &n, 8);
        if (n)
            memcpy(p + 12, vals, (size_t)n * es);
    }
    return put_kv(w, key, GGUF_ARRAY, p, len);
}

int gguf_w_arr_u8(struct gguf_w *w, const char *key, uint64_t n, const uint8_t *v) { return gguf_w_arr(w, key, GGUF_UINT8, n, v); }
int gguf_w_arr_i32(struct gguf_w *w, const char *key, uint64_t n, const int32_t *v) { return gguf_w_arr(w, key, GGUF_INT32, n, v); }
int gguf_w_arr_u32(struct gguf_w *w, const char *key, uint64_t n, const uint32_t *v) { return gguf_w_arr(w, key, GGUF_UINT32, n, v); }
int gguf_w_arr_i64(struct gguf_w *w, const char *key, uint64_t n, const int64_t *v) { return gguf_w_arr(w, key, GGUF_INT64, n, v); }
int gguf_w_arr_f32(struct gguf_w *w, const char *key, uint64_t n, const float *v) { return gguf_w_arr(w, key, GGUF_FLOAT32, n, v); }
int gguf_w_arr_f64(struct gguf_w *w, const char *key, uint64_t n, const double *v) { return gguf_w_arr(w, key, GGUF_FLOAT64, n, v); }

int gguf_w_arr_bool(struct gguf_w *w, const char *key, uint64_t n, const bool *v)
{
    if (n > (1ull << 30) || (n && !v))
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': bad array", key ? key : "");
    uint8_t *b = malloc(n ? (size_t)n : 1);
    if (!b)
        return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for key '%s'", key ? key : "");
    for (uint64_t i = 0; i < n; i++)
        b[i] = v[i] ? 1 : 0;
    int rc = gguf_w_arr(w, key, GGUF_BOOL, n, b);
    free(b);
    return rc;
}

int gguf_w_arr_strn(struct gguf_w *w, const char *key, uint64_t n, const struct gguf_str *strs)
{
    if (n > (1ull << 30) || (n && !strs))
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': bad string array", key ? key : "");
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i].ptr && strs[i].len)
            return w_fail(w, ERR_INVALID, "gguf writer: key '%s': string %llu is NULL", key ? key : "",
                          (unsigned long long)i);
        len += 8 + (size_t)strs[i].len;
    }
    uint8_t *p = malloc(len);
    if (p) {
        uint32_t t = GGUF_STRING;
        memcpy(p, &t, 4);
        memcpy(p + 4, &n, 8);
        size_t o = 12;
        for (uint64_t i = 0; i < n; i++) {
            memcpy(p + o, &strs[i].len, 8);
            if (strs[i].len)
                memcpy(p + o + 8, strs[i].ptr, (size_t)strs[i].len);
            o += 8 + (size_t)strs[i].len;
        }
    }
    return put_kv(w, key, GGUF_ARRAY, p, len);
}

int gguf_w_arr_str(struct gguf_w *w, const char *key, uint64_t n, const char *const *strs)
{
    if (n > (1ull << 30) || (n && !strs))
        return w_fail(w, ERR_INVALID, "gguf writer: key '%s': bad string array", key ? key : "");
    struct gguf_str *s = malloc((n ? (size_t)n : 1) * sizeof *s);
    if (!s)
        return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for key '%s'", key ? key : "");
    for (uint64_t i = 0; i < n; i++) {
        s[i].ptr = strs[i];
        s[i].len = strs[i] ? strlen(strs[i]) : 0;
    }
    int rc = gguf_w_arr_strn(w, key, n, s);
    free(s);
    return rc;
}

/* ---------------------------------------------------------------- tensors */

bool gguf_w_tensor_nbytes(uint32_t n_dims, const int64_t *ne, uint32_t type, size_t *nbytes)
{
    *nbytes = 0;
    const struct qtype_info *q = qtype_get(type);
    if (!q || n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return false;
    for (uint32_t j = 0; j < n_dims; j++)
        if (ne[j] < 0)
            return false;
    if (ne[0] % q->blck)
        return false;
    uint64_t nb = (uint64_t)(ne[0] / q->blck);
    if (__builtin_mul_overflow(nb, (uint64_t)q->size, &nb))
        return false;
    int64_t n_el = ne[0];
    for (uint32_t j = 1; j < n_dims; j++) {
        if (__builtin_mul_overflow(nb, (uint64_t)ne[j], &nb))
            return false;
        if (__builtin_mul_overflow(n_el, ne[j], &n_el))
            return false;
    }
    if (nb > SIZE_MAX)
        return false;
    *nbytes = (size_t)nb;
    return true;
}

static int add_tensor(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                      const void *data, size_t nbytes, bool copy)
{
    if (!w)
        return ERR_INVALID;
    if (!name)
        return w_fail(w, ERR_INVALID, "gguf writer: NULL tensor name");
    size_t nl = strlen(name);
    if (nl >= GGUF_MAX_NAME)
        return w_fail(w, ERR_INVALID, "gguf writer: tensor name '%s' is %zu bytes (limit %d)", name, nl,
                      GGUF_MAX_NAME - 1);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return w_fail(w, ERR_INVALID, "gguf writer: duplicate tensor name '%s'", name);
    const struct qtype_info *q = qtype_get(type);
    if (!q)
        return w_fail(w, ERR_INVALID, "gguf writer: tensor '%s': unknown ggml type %u", name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return w_fail(w, ERR_INVALID, "gguf writer: tensor '%s': n_dims %u not in 1..4", name, n_dims);
    size_t want;
    if (!gguf_w_tensor_nbytes(n_dims, ne, type, &want))
        return w_fail(w, ERR_INVALID,
                      "gguf writer: tensor '%s': bad shape for %s (negative, ne[0] not a multiple of %d, or overflow)",
                      name, q->name, q->blck);
    if (nbytes != want)
        return w_fail(w, ERR_INVALID, "gguf writer: tensor '%s': %zu data bytes, the %s shape needs %zu", name,
                      nbytes, q->name, want);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 16;
        struct w_tensor *n = realloc(w->t, nc * sizeof *n);
        if (!n)
            return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
        w->t = n;
        w->cap_t = nc;
    }
    struct w_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, nl + 1);
    t->n_dims = n_dims;
    for (int j = 0; j < GGUF_MAX_DIMS; j++)
        t->ne[j] = (uint32_t)j < n_dims ? ne[j] : 1;
    t->type = type;
    t->nbytes = nbytes;
    t->data = data;
    if (copy && data && nbytes) {
        t->owned = malloc(nbytes);
        if (!t->owned)
            return w_fail(w, ERR_NOMEM, "gguf writer: out of memory copying tensor '%s' (%zu bytes)", name, nbytes);
        memcpy(t->owned, data, nbytes);
        t->data = t->owned;
    }
    w->n_t++;
    return 0;
}

int gguf_w_tensor(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  const void *data, size_t nbytes)
{
    return add_tensor(w, name, n_dims, ne, type, data, nbytes, true);
}

int gguf_w_tensor_ref(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                      const void *data, size_t nbytes)
{
    return add_tensor(w, name, n_dims, ne, type, data, nbytes, false);
}

int gguf_w_tensor_f32(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, const float *data)
{
    size_t nb;
    if (!gguf_w_tensor_nbytes(n_dims, ne, QT_F32, &nb))
        return w_fail(w, ERR_INVALID, "gguf writer: tensor '%s': bad f32 shape", name ? name : "");
    return add_tensor(w, name, n_dims, ne, QT_F32, data, nb, true);
}

/* ---------------------------------------------------------------- output */

/* Where bytes go: a file descriptor or a growing memory buffer. */
struct sink {
    int fd;            /* >= 0: write here */
    uint8_t *buf;      /* [len] (cap allocated) when fd < 0 */
    size_t len, cap;
    uint64_t pos;      /* bytes emitted so far */
    int err_no;        /* first write errno (ENOMEM for the buffer) */
};

static void emit(struct sink *s, const void *p, size_t n)
{
    if (s->err_no || n == 0)
        return;
    if (s->fd >= 0) {
        const uint8_t *b = p;
        size_t left = n;
        while (left) {
            ssize_t k = write(s->fd, b, left);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                s->err_no = errno;
                return;
            }
            if (k == 0) {
                s->err_no = ENOSPC;
                return;
            }
            b += k;
            left -= (size_t)k;
        }
    } else {
        if (s->len + n > s->cap) {
            size_t nc = s->cap ? s->cap : 4096;
            while (nc < s->len + n)
                nc *= 2;
            uint8_t *nb = realloc(s->buf, nc);
            if (!nb) {
                s->err_no = ENOMEM;
                return;
            }
            s->buf = nb;
            s->cap = nc;
        }
        if (p)
            memcpy(s->buf + s->len, p, n);
        else
            memset(s->buf + s->len, 0, n);
        s->len += n;
    }
    s->pos += n;
}

static void emit_zeros(struct sink *s, uint64_t n)
{
    static const uint8_t zeros[4096];
    while (n && !s->err_no) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        emit(s, zeros, k);
        n -= k;
    }
}

static void emit_u32(struct sink *s, uint32_t v) { emit(s, &v, 4); }
static void emit_u64(struct sink *s, uint64_t v) { emit(s, &v, 8); }

static uint64_t pad_to(uint64_t x, uint32_t a) { return (a - x % a) % a; }

/* The alignment this writer will use, or an error for a bad general.alignment. */
static int w_alignment(const struct gguf_w *w, uint32_t *align, struct err *e)
{
    *align = W_DEFAULT_ALIGN;
    const struct w_kv *kv = find_kv(w, "general.alignment");
    if (!kv)
        return 0;
    uint32_t a = 0;
    if (kv->type == GGUF_UINT32)
        memcpy(&a, kv->payload, 4);
    if (kv->type != GGUF_UINT32 || a == 0 || (a & (a - 1)))
        return err_set(e, ERR_INVALID, "gguf writer: general.alignment must be a uint32 power of two");
    *align = a;
    return 0;
}

/* A view of what goes into one file: every KV of w (or only general.alignment),
 * extra KVs appended, tensors [t0, t1). */
struct w_view {
    const struct gguf_w *w;
    bool all_kv;
    const struct w_kv *extra; /* [n_extra] */
    size_t n_extra;
    size_t t0, t1;
};

/* Keys the view supplies itself (split.*) replace the builder's own. */
static bool is_extra(const struct w_view *v, const char *key)
{
    for (size_t i = 0; i < v->n_extra; i++)
        if (!strcmp(v->extra[i].key, key))
            return true;
    return false;
}

static void emit_kv(struct sink *s, const struct w_kv *kv)
{
    emit_u64(s, kv->key_len);
    emit(s, kv->key, kv->key_len);
    emit_u32(s, kv->type);
    emit(s, kv->payload, kv->payload_len);
}

static int emit_view(struct sink *s, const struct w_view *v, struct err *e)
{
    uint32_t align;
    int rc = w_alignment(v->w, &align, e);
    if (rc)
        return rc;
    const struct w_kv *al = find_kv(v->w, "general.alignment");
    uint64_t n_kv = v->n_extra;
    if (v->all_kv) {
        for (size_t i = 0; i < v->w->n_kv; i++)
            n_kv += !is_extra(v, v->w->kv[i].key);
    } else if (al) {
        n_kv++;
    }
    emit(s, "GGUF", 4);
    emit_u32(s, v->w->version);
    emit_u64(s, v->t1 - v->t0);
    emit_u64(s, n_kv);
    if (v->all_kv) {
        for (size_t i = 0; i < v->w->n_kv; i++)
            if (!is_extra(v, v->w->kv[i].key))
                emit_kv(s, &v->w->kv[i]);
    }
    else if (al)
        emit_kv(s, al);
    for (size_t i = 0; i < v->n_extra; i++)
        emit_kv(s, &v->extra[i]);
    uint64_t off = 0;
    for (size_t i = v->t0; i < v->t1; i++) {
        const struct w_tensor *t = &v->w->t[i];
        size_t nl = strlen(t->name);
        emit_u64(s, nl);
        emit(s, t->name, nl);
        emit_u32(s, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims; j++)
            emit_u64(s, (uint64_t)t->ne[j]);
        emit_u32(s, t->type);
        emit_u64(s, off);
        off += t->nbytes + pad_to(t->nbytes, align);
    }
    if (v->t1 > v->t0)
        emit_zeros(s, pad_to(s->pos, align));
    for (size_t i = v->t0; i < v->t1; i++) {
        const struct w_tensor *t = &v->w->t[i];
        if (t->data)
            emit(s, t->data, t->nbytes);
        else
            emit_zeros(s, t->nbytes);
        emit_zeros(s, pad_to(t->nbytes, align));
    }
    return 0;
}

static int write_view(const struct w_view *v, const char *path, struct err *e)
{
    if (v->w->err.code)
        return err_set(e, v->w->err.code, "%s: %s", path, v->w->err.msg);
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = err_set(e, ERR_IO, "%s: cannot create '%s': %s", path, tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    struct sink s = {.fd = fd};
    int rc = emit_view(&s, v, e);
    if (rc == 0 && s.err_no == 0 && fsync(fd) != 0)
        s.err_no = errno;
    if (close(fd) != 0 && s.err_no == 0 && rc == 0)
        s.err_no = errno;
    if (rc == 0 && s.err_no)
        rc = err_set(e, ERR_IO, "%s: write failed after %llu bytes: %s", path, (unsigned long long)s.pos,
                     strerror(s.err_no));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = err_set(e, ERR_IO, "%s: cannot rename '%s' into place: %s", path, tmp, strerror(errno));
    if (rc) {
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    /* make the rename itself durable */
    char *d = strdup(path);
    if (d) {
        int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(d);
    }
    return 0;
}

int gguf_w_write(const struct gguf_w *w, const char *path, struct err *e)
{
    if (!w || !path)
        return err_set(e, ERR_INVALID, "gguf writer: NULL %s", w ? "path" : "writer (out of memory?)");
    struct w_view v = {.w = w, .all_kv = true, .t0 = 0, .t1 = w->n_t};
    return write_view(&v, path, e);
}

int gguf_w_to_buffer(const struct gguf_w *w, uint8_t **buf, size_t *size, struct err *e)
{
    *buf = NULL;
    *size = 0;
    if (!w)
        return err_set(e, ERR_INVALID, "gguf writer: NULL writer (out of memory?)");
    if (w->err.code)
        return err_set(e, w->err.code, "%s", w->err.msg);
    struct w_view v = {.w = w, .all_kv = true, .t0 = 0, .t1 = w->n_t};
    struct sink s = {.fd = -1};
    int rc = emit_view(&s, &v, e);
    if (rc == 0 && s.err_no)
        rc = err_set(e, ERR_NOMEM, "gguf writer: out of memory building a %llu-byte image",
                     (unsigned long long)s.pos);
    if (rc) {
        free(s.buf);
        return rc;
    }
    *buf = s.buf;
    *size = s.len;
    return 0;
}

int gguf_w_write_split(const struct gguf_w *w, const char *prefix, int n_parts, struct err *e)
{
    if (!w || !prefix)
        return err_set(e, ERR_INVALID, "gguf writer: NULL argument");
    if (n_parts < 1 || n_parts > 65535)
        return err_set(e, ERR_INVALID, "gguf writer: %d split parts (1..65535)", n_parts);
    size_t cap = strlen(prefix) + 32;
    char *path = malloc(cap);
    if (!path)
        return err_set(e, ERR_NOMEM, "gguf writer: out of memory");
    uint16_t cnt = (uint16_t)n_parts;
    int32_t tcount = (int32_t)w->n_t;
    uint16_t no = 0;
    uint8_t p_no[2], p_cnt[2], p_tc[4];
    struct w_kv extra[3] = {
        {(char *)"split.no", 8, GGUF_UINT16, p_no, 2},
        {(char *)"split.count", 11, GGUF_UINT16, p_cnt, 2},
        {(char *)"split.tensors.count", 19, GGUF_INT32, p_tc, 4},
    };
    memcpy(p_cnt, &cnt, 2);
    memcpy(p_tc, &tcount, 4);
    int rc = 0, done = 0;
    for (int i = 0; i < n_parts; i++) {
        no = (uint16_t)i;
        memcpy(p_no, &no, 2);
        /* tensors [t0, t1): an even split in order */
        size_t t0 = w->n_t * (size_t)i / (size_t)n_parts, t1 = w->n_t * (size_t)(i + 1) / (size_t)n_parts;
        struct w_view v = {.w = w, .all_kv = i == 0, .extra = extra, .n_extra = 3, .t0 = t0, .t1 = t1};
        snprintf(path, cap, "%s-%05d-of-%05d.gguf", prefix, i + 1, n_parts);
        if ((rc = write_view(&v, path, e)))
            break;
        done = i + 1;
    }
    if (rc)
        for (int i = 0; i < done; i++) {
            snprintf(path, cap, "%s-%05d-of-%05d.gguf", prefix, i + 1, n_parts);
            unlink(path);
        }
    free(path);
    return rc;
}

int gguf_w_kv_copy(struct gguf_w *w, const struct gguf_kv *kv)
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
            return ERR_UNSUPPORTED; /* nested arrays: none in the models llm170 reads */
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
