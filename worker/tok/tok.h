/* tok.h — llama.cpp-exact tokenization from a GGUF vocabulary:
 * byte-level BPE ("gpt2", with the pre-tokenizer named by tokenizer.ggml.pre)
 * and SentencePiece ("llama"), special-token partition, BOS/EOS rules, token
 * pieces and streaming detokenization (shared spec tokenizers.md).
 *
 * A tok_vocab is read-only once built: every function below that takes a
 * const vocab may run concurrently from several threads. */
#ifndef LLM170_TOKENIZER_H
#define LLM170_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../gguf/gguf.h"

struct tok_vocab;

enum tok_attr { /* = tokenizer.ggml.token_type */
    TOK_UNDEFINED = 0, TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6,
};

/* Build the vocabulary from a GGUF's tokenizer.* keys. The result copies what
 * it needs: it does not keep pointers into g. */
int tok_load(struct tok_vocab **out, const struct gguf *g, struct err *e);
void tok_free(struct tok_vocab *v);

int32_t tok_n_vocab(const struct tok_vocab *v);
int32_t tok_bos(const struct tok_vocab *v); /* -1 when none */
int32_t tok_eos(const struct tok_vocab *v); /* -1 when none */
bool tok_add_bos(const struct tok_vocab *v);
bool tok_is_eog(const struct tok_vocab *v, int32_t id);
enum tok_attr tok_attr_of(const struct tok_vocab *v, int32_t id);
/* Token text as stored in the vocab (e.g. "Ġthe", "▁the", "<0x0A>"); NUL-terminated. */
const char *tok_text(const struct tok_vocab *v, int32_t id);
/* tokenizer.ggml.suppress_tokens (ids the sampler must never pick; out-of-range
 * ids dropped). NULL with *n = 0 when the key is absent. */
const int32_t *tok_suppress_tokens(const struct tok_vocab *v, size_t *n);
/* Id of an exact token text, -1 when absent. */
int32_t tok_lookup(const struct tok_vocab *v, const char *text, size_t len);

/* llama_tokenize(text, add_special, parse_special). *ids is malloc'ed (free it). */
int tok_encode(const struct tok_vocab *v, const char *text, size_t len, bool add_special,
               bool parse_special, int32_t **ids, size_t *n_ids, struct err *e);

/* A floor under tok_encode's count, from the text's bytes alone (tok_bound.c):
 * tok_span_max (O(n_vocab + merges): call it once) is the most input bytes
 * one token stands for, 0 when the vocabulary allows no such bound;
 * tok_count_min(text) ≤ the tokens tok_encode(text) gives with any switches
 * (0 when span_max is 0). For refusing a prompt too long for the context
 * before tokenizing it. */
size_t tok_span_max(const struct tok_vocab *v);
size_t tok_count_min(const struct tok_vocab *v, const char *text, size_t len, size_t span_max);

/* llama_token_to_piece(id, lstrip = 0, special): the bytes of one token.
 * Writes up to cap bytes; returns the piece length (may exceed cap: then call
 * again with more room). Control tokens give "" unless `special`. */
size_t tok_piece(const struct tok_vocab *v, int32_t id, bool special, char *buf, size_t cap);

/* Longest piece of any token (a safe `cap` for tok_piece / tok_stream_push
 * is this plus 8). */
size_t tok_piece_max(const struct tok_vocab *v);

/* llama_detokenize(ids, remove_special = false, unparse_special): malloc'ed,
 * NUL-terminated text; *len gets its length. NULL on allocation failure. */
char *tok_detokenize(const struct tok_vocab *v, const int32_t *ids, size_t n, bool special, size_t *len);
/* The same with llama_detokenize's remove_special: drop a leading BOS (when
 * the vocab adds one; the first piece then keeps its space) and a trailing
 * EOS (when the vocab adds one). */
char *tok_detokenize_ex(const struct tok_vocab *v, const int32_t *ids, size_t n, bool remove_special, bool special,
                        size_t *len);

/* Streaming detokenizer: feed tokens one at a time, get only complete UTF-8
 * (bytes of a character split across tokens are held back until whole). */
struct tok_stream {
    char pending[8]; /* an incomplete UTF-8 sequence carried to the next token */
    int n_pending;
    bool first;      /* strip the leading space of the next piece when the vocab has
                      * add_space_prefix, as tok_detokenize does for its first token.
                      * tok_stream_init leaves it false: llama-server streams generated
                      * pieces verbatim; set it to decode a sequence from its start. */
};
void tok_stream_init(struct tok_stream *s);
/* Append the text of `id` to out (cap bytes); returns bytes written. */
size_t tok_stream_push(const struct tok_vocab *v, struct tok_stream *s, int32_t id, bool special,
                       char *out, size_t cap);
/* Whatever is still held back (invalid/incomplete tail) as U+FFFD replacement. */
size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap);

#endif
