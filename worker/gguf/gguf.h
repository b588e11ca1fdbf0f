/* gguf.h — read-only access to GGUF v2/v3 model files (and split sets).
 *
 * The file is mmap'ed; keys, strings and tensor data point into the mapping,
 * so a `struct gguf` must outlive every pointer taken from it. Every header
 * field is validated at open time (bounds, overflow, alignment, duplicates,
 * unknown types, contiguous tensor layout) and a failure names the file and
 * the byte offset. Split models (`name-00001-of-00003.gguf`) are opened from
 * their first part; tensors of all parts appear as one list. */
#ifndef LLM170_GGUF_H
#define LLM170_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

enum gguf_vtype {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12, GGUF_VTYPE_COUNT = 13,
};

/* A length-delimited string inside the mapping (not NUL-terminated). */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;     /* value type; GGUF_ARRAY for arrays */
    enum gguf_vtype arr_type; /* element type when type == GGUF_ARRAY */
    uint64_t arr_n;           /* element count when type == GGUF_ARRAY */
    const uint8_t *val;       /* payload in the mapping (scalar, string's u64 length, or first array element) */
    uint64_t file_off;        /* offset of the key in its file, for messages */
    const struct gguf_str *arr_strs; /* [arr_n] elements when arr_type == GGUF_STRING, else NULL */
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64

struct gguf_tensor {
    char name[GGUF_MAX_NAME]; /* NUL-terminated, < 64 bytes as llama.cpp requires */
    uint32_t n_dims;          /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS];/* elements per dim, ne[0] innermost; unused dims = 1 */
    uint32_t type;            /* ggml type id (see quant.h) */
    uint64_t offset;          /* relative to its file's data start */
    uint64_t nbytes;          /* bytes of data */
    const void *data;         /* pointer into the mapping */
    int part;                 /* which split part holds it (0-based) */
};

struct gguf_part {
    char *path;               /* file path as opened (the name given to gguf_open_buffer) */
    int fd;                   /* -1 for gguf_open_buffer images (not owned, never unmapped) */
    void *map;                /* whole-file mapping */
    uint64_t size;            /* file size */
    uint64_t data_start;      /* absolute offset of the tensor data blob */
};

struct gguf {
    uint32_t version;         /* 2 or 3 */
    uint32_t alignment;       /* general.alignment or 32 */
    uint64_t n_kv;            /* KV pairs of the first part */
    struct gguf_kv *kv;       /* [n_kv] */
    uint64_t n_tensors;       /* over all parts */
    struct gguf_tensor *tensors; /* [n_tensors], file order, part by part */
    int n_parts;
    struct gguf_part *parts;  /* [n_parts] */
};

/* Open and validate. On failure *out is NULL and e names the file and offset. */
int gguf_open(struct gguf **out, const char *path, struct err *e);
/* Validate an in-memory image (used by the fuzzer and tests); `buf` must
 * outlive the result. Split keys are not followed: it is always one part. */
int gguf_open_buffer(struct gguf **out, const void *buf, size_t size, const char *name, struct err *e);
void gguf_close(struct gguf *g);

/* Lookups: NULL / -1 when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Typed getters. Integer getters accept any integer width (and BOOL) that
 * fits; float getters accept FLOAT32/FLOAT64 and integers. Return ERR_NOTFOUND
 * when the key is absent (out untouched), ERR_FORMAT on a type mismatch. */
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out, struct err *e);
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct err *e);
int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct err *e);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct err *e);
/* String value; *out points into the mapping (not NUL-terminated). */
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct err *e);
/* Copy a string value into buf (NUL-terminated, truncated to cap-1). */
int gguf_get_cstr(const struct gguf *g, const char *key, char *buf, size_t cap, struct err *e);

/* Array access. Element i of an integer/float array as i64/f32 (any numeric
 * element type); of a string array as gguf_str. Caller checks i < kv->arr_n. */
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);
float gguf_arr_f32(const struct gguf_kv *kv, uint64_t i);
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);

/* Array-valued key, checked: want = GGUF_STRING (a string array), an integer
 * type (any integer or bool elements), or GGUF_FLOAT32 / GGUF_FLOAT64 (any
 * numeric elements). ERR_NOTFOUND when absent, ERR_FORMAT when the key is
 * not such an array. */
int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_vtype want, const struct gguf_kv **out,
                 struct err *e);

/* Per-layer hyperparameter: scalar, or array of length n (value i). */
int gguf_get_layer_i64(const struct gguf *g, const char *key, uint32_t layer, int64_t *out, struct err *e);

const char *gguf_vtype_name(enum gguf_vtype t);
/* Size in bytes of one scalar of type t (0 for STRING/ARRAY). */
size_t gguf_vtype_size(enum gguf_vtype t);

#endif
