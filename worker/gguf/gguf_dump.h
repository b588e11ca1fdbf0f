/* gguf_dump.h — human-readable listing of an open GGUF (`llm170 gguf-dump`).
 *
 * Output, one item per line:
 *   GGUF version 3, n_kv 19, n_tensors 48, alignment 32, parts 1, data_start 14176
 *   general.architecture: string = "llama"
 *   llama.block_count: uint32 = 5
 *   tokenizer.ggml.scores: array[float32] = [0, -1, -2, ... (512 total)]
 *   token_embd.weight  f32  [64, 512]  offset 0
 * Keys come in file order, then tensors in file order (with "  part N",
 * 1-based, appended when the model is split). Strings are quoted with C
 * escapes for '"', '\\' and control bytes; floats use the shortest
 * representation that reads back to the same value. */
#ifndef LLM170_GGUF_DUMP_H
#define LLM170_GGUF_DUMP_H

#include <stdbool.h>
#include <stdio.h>

#include "gguf.h"

/* Print g to out. meta_only: skip the tensor list. limit: array elements
 * shown before "... (N total)"; negative for all. Returns 0, or ERR_IO when
 * writing to out failed. */
int gguf_dump(FILE *out, const struct gguf *g, bool meta_only, int limit);

/* One value of type t at p (as stored in the file) in dump syntax. */
void gguf_dump_scalar(FILE *out, enum gguf_vtype t, const void *p);
/* A byte string, quoted and escaped. */
void gguf_dump_str(FILE *out, struct gguf_str s);

#endif
