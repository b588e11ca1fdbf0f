/* gguf_write.h — build a GGUF v3 file in memory, then write it atomically.
 *
 *     struct gguf_w *w = gguf_w_new();
 *     gguf_w_str(w, "general.architecture", "llama");
 *     gguf_w_u32(w, "llama.block_count", 2);
 *     gguf_w_arr_str(w, "tokenizer.ggml.tokens", n_vocab, tokens);
 *     int64_t ne[2] = {64, 512};                      // ne[0] = row length
 *     gguf_w_tensor(w, "token_embd.weight", 2, ne, QT_F32, emb, sizeof emb);
 *     int rc = gguf_w_write(w, "model.gguf", &err);  // first error of any call above
 *     gguf_w_free(w);
 *
 * Every adder returns 0 or an ERR_* code, and the first failure is latched:
 * gguf_w_write / gguf_w_to_buffer report it, so a builder can be filled
 * without checking each call. Setting a key twice replaces its value (in
 * place, like ggml's gguf_set_*). Inputs are validated as the reader would
 * (key/tensor name uniqueness, name < 64 bytes, n_dims 1..4, known type,
 * ne[0] a multiple of the block size, nbytes matching the shape), so what
 * the writer produces always opens. Tensor data is laid out in the order
 * added, each tensor padded to the alignment (general.alignment if set as
 * a uint32 power of two, else 32), as llama.cpp requires. */
#ifndef LLM170_GGUF_WRITE_H
#define LLM170_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "gguf.h"

struct gguf_w;

/* NULL only when out of memory. */
struct gguf_w *gguf_w_new(void);
void gguf_w_free(struct gguf_w *w);

/* GGUF version written into the header (2 or 3; default 3). */
int gguf_w_set_version(struct gguf_w *w, uint32_t version);

/* Scalars. */
int gguf_w_u8(struct gguf_w *w, const char *key, uint8_t v);
int gguf_w_i8(struct gguf_w *w, const char *key, int8_t v);
int gguf_w_u16(struct gguf_w *w, const char *key, uint16_t v);
int gguf_w_i16(struct gguf_w *w, const char *key, int16_t v);
int gguf_w_u32(struct gguf_w *w, const char *key, uint32_t v);
int gguf_w_i32(struct gguf_w *w, const char *key, int32_t v);
int gguf_w_u64(struct gguf_w *w, const char *key, uint64_t v);
int gguf_w_i64(struct gguf_w *w, const char *key, int64_t v);
int gguf_w_f32(struct gguf_w *w, const char *key, float v);
int gguf_w_f64(struct gguf_w *w, const char *key, double v);
int gguf_w_bool(struct gguf_w *w, const char *key, bool v);
/* NUL-terminated string, or `len` bytes (may hold NULs). */
int gguf_w_str(struct gguf_w *w, const char *key, const char *s);
int gguf_w_strn(struct gguf_w *w, const char *key, const char *s, size_t len);

/* Arrays. gguf_w_arr takes n packed little-endian values of a numeric
 * elem type (any vtype except STRING and ARRAY); the typed helpers wrap it. */
int gguf_w_arr(struct gguf_w *w, const char *key, enum gguf_vtype elem, uint64_t n, const void *vals);
int gguf_w_arr_u8(struct gguf_w *w, const char *key, uint64_t n, const uint8_t *v);
int gguf_w_arr_i32(struct gguf_w *w, const char *key, uint64_t n, const int32_t *v);
int gguf_w_arr_u32(struct gguf_w *w, const char *key, uint64_t n, const uint32_t *v);
int gguf_w_arr_i64(struct gguf_w *w, const char *key, uint64_t n, const int64_t *v);
int gguf_w_arr_f32(struct gguf_w *w, const char *key, uint64_t n, const float *v);
int gguf_w_arr_f64(struct gguf_w *w, const char *key, uint64_t n, const double *v);
int gguf_w_arr_bool(struct gguf_w *w, const char *key, uint64_t n, const bool *v);
/* Array of n NUL-terminated strings / of n length-delimited strings. */
int gguf_w_arr_str(struct gguf_w *w, const char *key, uint64_t n, const char *const *strs);
int gguf_w_arr_strn(struct gguf_w *w, const char *key, uint64_t n, const struct gguf_str *strs);
/* The metadata pair kv of an opened file, copied as it is (its key, type and value): tools that write a
 * changed copy of a model. ERR_UNSUPPORTED for arrays of arrays, ERR_FORMAT for a key over 511 bytes. */
int gguf_w_kv_copy(struct gguf_w *w, const struct gguf_kv *kv);

/* Remove a key (no-op when absent). */
void gguf_w_del(struct gguf_w *w, const char *key);

/* Tensors: `ne[n_dims]` elements per dim (ne[0] innermost), ggml type id
 * `type` (enum qtype in quant.h), `nbytes` of data exactly as the shape and
 * type require. gguf_w_tensor copies the data; gguf_w_tensor_ref borrows it
 * (it must stay valid until the last write); data may be NULL for zeros. */
int gguf_w_tensor(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  const void *data, size_t nbytes);
int gguf_w_tensor_ref(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                      const void *data, size_t nbytes);
/* F32 tensor convenience: nbytes = 4 * product(ne). */
int gguf_w_tensor_f32(struct gguf_w *w, const char *name, uint32_t n_dims, const int64_t *ne, const float *data);

/* Byte size a tensor of this shape and type needs (0 and false when the
 * type is unknown, ne[0] is not a whole number of blocks, or it overflows). */
bool gguf_w_tensor_nbytes(uint32_t n_dims, const int64_t *ne, uint32_t type, size_t *nbytes);

/* Write to `path`: "path.tmp" first, then fsync and rename, so a full disk
 * or any write error returns ERR_IO naming the path and leaves no file. */
int gguf_w_write(const struct gguf_w *w, const char *path, struct err *e);
/* The same bytes into a malloc'ed buffer (caller frees). */
int gguf_w_to_buffer(const struct gguf_w *w, uint8_t **buf, size_t *size, struct err *e);
/* Write a split set "<prefix>-00001-of-0000N.gguf" … as llama.cpp's
 * gguf-split does: tensors spread in order over n_parts files (each part
 * gets at least one tensor when there are enough), part 1 holds every key,
 * each part holds split.no (u16), split.count (u16), split.tensors.count
 * (i32). On failure the parts already written are removed. */
int gguf_w_write_split(const struct gguf_w *w, const char *prefix, int n_parts, struct err *e);

#endif
