/* tok_internal.h — what the tok_*.c files share: the vocabulary layout,
 * the llama.cpp attribute bits, the pre-tokenizer kinds, and the helpers
 * each file exports to the others. Not a public interface (tok.h is). */
#ifndef LLM170_TOK_INTERNAL_H
#define LLM170_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok.h"

/* llama.cpp keeps token attributes as bit flags (llama_token_attr), and the
 * loader ORs CONTROL into some tokens, so one token can be e.g.
 * USER_DEFINED|CONTROL. We keep the same bits to reproduce its checks. */
enum {
    TA_UNDEFINED = 0,
    TA_UNKNOWN = 1 << 0,
    TA_UNUSED = 1 << 1,
    TA_NORMAL = 1 << 2,
    TA_CONTROL = 1 << 3,
    TA_USER_DEFINED = 1 << 4,
    TA_BYTE = 1 << 5,
    TA_LSTRIP = 1 << 7,
    TA_RSTRIP = 1 << 8,
};

enum tok_type { TOK_TYPE_SPM = 1, TOK_TYPE_BPE = 2 };

/* Pre-tokenizer kinds (llama.cpp LLAMA_VOCAB_PRE_TYPE_*) that we implement. */
enum tok_pre {
    TOK_PRE_DEFAULT = 0,
    TOK_PRE_LLAMA3,
    TOK_PRE_QWEN2,
    TOK_PRE_QWEN35,
    TOK_PRE_GPT2,
    TOK_PRE_FALCON,
    TOK_PRE_STARCODER, /* also refact, command-r, smollm, codeshell, exaone, minerva, mellum2 */
    TOK_PRE_DEEPSEEK_LLM,
    TOK_PRE_DEEPSEEK_CODER,
    TOK_PRE_CHATGLM4,  /* llama3 regex, bos cleared */
};

#define TOK_NULL (-1)

/* Open-addressing hash from a byte string to an int32 value. */
struct tok_strmap {
    uint32_t cap;      /* power of two */
    int32_t *slot;     /* [cap] token id, -1 = empty; key text lives in the vocab */
};

/* BPE merge table: (left id, right id) -> rank, open addressing. */
struct tok_pairmap {
    uint32_t cap;      /* power of two */
    uint64_t *key;     /* [cap] (left << 32 | right) + 1, 0 = empty */
    int32_t *rank;     /* [cap] */
};

struct tok_vocab {
    enum tok_type type;
    enum tok_pre pre;
    int32_t n_tokens;
    char **text;       /* [n_tokens] NUL-terminated token texts (one arena) */
    uint32_t *len;     /* [n_tokens] byte length of each text */
    float *score;      /* [n_tokens] SPM scores (0 for BPE files without scores) */
    uint32_t *attr;    /* [n_tokens] TA_* bits */
    char *arena;       /* backing store of all texts */
    struct tok_strmap map;        /* text -> id */
    struct tok_pretok *pretok;    /* BPE only */

    /* BPE merges: rank by (left id, right id); merges whose halves are not
     * vocab tokens (never seen in real files) go to the string fallback. */
    struct tok_pairmap merges;
    int32_t n_str_merges;
    char **str_merge_l, **str_merge_r; /* [n_str_merges] */
    int32_t *str_merge_rank;           /* [n_str_merges] */

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    bool add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    bool has_bos_key; /* for messages only */

    int32_t *special;  /* [n_special] CONTROL|USER_DEFINED|UNKNOWN ids, longest text first */
    int32_t n_special;
    int32_t *eog;      /* [n_eog] sorted ids */
    int32_t n_eog;
    int32_t *suppress; /* [n_suppress] tokenizer.ggml.suppress_tokens, in-range ids only */
    int32_t n_suppress;

    char **piece;      /* [n_tokens] token_to_piece(special = true), NUL-terminated */
    uint32_t *piece_len; /* [n_tokens] */
};

/* Raw description used to build a vocabulary (from a GGUF or from test data). */
struct tok_desc {
    const char *model;          /* "gpt2" or "llama" */
    const char *pre;            /* NULL = key absent */
    const char *name;           /* general.name, may be NULL */
    const char *arch;           /* general.architecture, may be NULL */
    int32_t n_tokens;
    const char *const *tokens;  /* [n_tokens] */
    const uint32_t *token_len;  /* [n_tokens] (NULL: strlen) */
    const float *scores;        /* [n_tokens] or NULL */
    const int32_t *types;       /* [n_tokens] or NULL */
    int32_t n_merges;
    const char *const *merges;  /* [n_merges] */
    const uint32_t *merge_len;  /* [n_merges] (NULL: strlen) */
    /* special ids: -2 = key absent (use the model default); ids >= n_tokens are ignored */
    int64_t bos, eos, eot, eom, unk, sep, pad, mask;
    int add_bos, add_eos, add_space_prefix; /* -1 = key absent */
    const int32_t *suppress;    /* [n_suppress] or NULL */
    int32_t n_suppress;
};
void tok_desc_init(struct tok_desc *d);
int tok_build(struct tok_vocab **out, const struct tok_desc *d, struct err *e);

/* ---- tok_unicode.c ---- */
enum {
    TOK_CF_WS = 1 << 0,     /* llama.cpp whitespace set */
    TOK_CF_L = 1 << 1,      /* letter */
    TOK_CF_N = 1 << 2,      /* number */
    TOK_CF_M = 1 << 3,      /* mark */
    TOK_CF_P = 1 << 4,      /* punctuation */
    TOK_CF_S = 1 << 5,      /* symbol */
    TOK_CF_OTHER = 1 << 6,  /* separator/control/format/private/unassigned */
};
unsigned tok_cpt_flags(uint32_t cp);
/* Decode like llama.cpp's unicode_cpts_from_utf8 (bad byte -> U+FFFD, resume
 * at the next byte). *out is malloc'ed; returns 0 or ERR_NOMEM. */
int tok_utf8_decode(const char *s, size_t n, uint32_t **out, size_t *n_out);
/* Encode one codepoint (any value up to 0x1FFFFF) into buf[4]; returns bytes. */
int tok_utf8_encode(uint32_t cp, char *buf);
/* Length of a UTF-8 sequence from its lead byte's high nibble (llama.cpp unicode_len_utf8). */
static inline size_t tok_utf8_len(unsigned char c)
{
    static const unsigned char lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}
/* GPT-2 byte-level alphabet: byte -> codepoint, codepoint -> byte (-1 if none). */
uint32_t tok_byte_to_cpt(uint8_t b);
int tok_cpt_to_byte(uint32_t cp);

/* ---- tok_pretok.c ---- */
struct tok_pretok; /* the compiled splitter of one pre-tokenizer (read-only once built) */
int tok_pretok_new(struct tok_pretok **out, enum tok_pre pre);
void tok_pretok_free(struct tok_pretok *p);
/* Split codepoints cp[0..n) into pieces; *lens gets malloc'ed piece lengths
 * (in codepoints, none zero). */
int tok_pretok_split(const struct tok_pretok *pt, const uint32_t *cp, size_t n, size_t **lens, size_t *n_lens);

/* ---- tok_regex.c ---- */
struct tok_regex;
/* Compile an ECMAScript-style pattern (subset: classes, ?, *, +, {m,n}, (?:),
 * (...), (?!...), |, $). `collapsed`: \p{X} means llama.cpp's collapsed class. */
int tok_regex_compile(struct tok_regex **out, const char *pattern, bool collapsed);
void tok_regex_free(struct tok_regex *re);
/* All non-overlapping leftmost-first matches in s[0..n) (std::regex_iterator
 * order); *spans gets malloc'ed (start, end) pairs. */
int tok_regex_find_all(struct tok_regex *re, const uint32_t *s, size_t n, size_t **spans, size_t *n_spans);

/* ---- tok_vocab.c ---- */
int32_t tok_map_find(const struct tok_vocab *v, const char *s, size_t len);
int32_t tok_merge_rank(const struct tok_vocab *v, int32_t lid, int32_t rid, const char *l, size_t ll,
                       const char *r, size_t rl);

/* ---- tok_bpe.c / tok_spm.c ---- */
/* Append the ids of one raw-text fragment. The buffer grows as needed. */
struct tok_out {
    int32_t *ids;
    size_t n, cap;
};
int tok_out_push(struct tok_out *o, int32_t id);
int tok_bpe_fragment(const struct tok_vocab *v, const char *text, size_t len, struct tok_out *o);
int tok_spm_fragment(const struct tok_vocab *v, const char *text, size_t len, struct tok_out *o);

/* ---- tok_detok.c ---- */
/* Build v->piece (token_to_piece with special = true). */
int tok_build_pieces(struct tok_vocab *v);

/* Candidate merge of symbols left+right (tok_heap.c): BPE key = -rank (exact
 * for ranks < 2^24), SPM key = the merged token's score. */
struct tok_bigram {
    float key;
    int32_t left, right;
    uint32_t size; /* bytes of the pair when queued: stale entries are skipped */
};

struct tok_heap {
    struct tok_bigram *v; /* [cap] */
    size_t n, cap;
};

int tok_heap_push(struct tok_heap *h, struct tok_bigram b);
struct tok_bigram tok_heap_pop(struct tok_heap *h);

#endif
