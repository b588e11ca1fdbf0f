/* gram.h — a small context-free grammar over bytes, its pushdown parser and
 * the per-step token mask that constrains sampling (structured output).
 *
 * Model: a grammar is a list of rules; a rule is a list of alternatives; an
 * alternative is a sequence of elements, each a byte set (256-bit class) or
 * a reference to a rule. Repetition is not an element: gram_rule_repeat
 * rewrites item{min,max} into rules (right recursion for an open bound), so
 * the parser only knows sets and references. Text is matched byte by byte;
 * UTF-8 characters are sequences of byte sets (the JSON-schema compiler,
 * jsg_schema.h, writes them).
 *
 * Parser: a set of stacks (all the ways the bytes so far can be read), each
 * stack a hash-consed list of positions in the flattened grammar, so equal
 * stacks are equal ids and sets deduplicate by sorting. A set holds only
 * stacks whose top is a byte set, plus the empty stack when the text so far
 * is a complete sentence. A rule reference that ends its alternative pushes
 * nothing (tail call), so a right-recursive repetition keeps the stack flat.
 *
 * Token mask: gram_vocab is a byte trie of the vocabulary's pieces, built
 * once per model, its nodes in depth-first order; gram_mask walks it from
 * the current set in one pass over the nodes, advancing the set one byte per
 * trie edge (a memoized step: a table lookup) and jumping past a subtree as
 * soon as the set dies, so tokens sharing a prefix share its work.
 *
 * Limits: a stack deeper than GRAM_MAX_DEPTH positions is dropped (a left-
 * recursive or runaway grammar cannot loop forever); a grammar is refused
 * past GRAM_MAX_ELEMS elements. A gram is read-only once built and may be
 * shared; a gram_state is one sequence's and not thread-safe. */
#ifndef LLM170_GRAM_H
#define LLM170_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define GRAM_MAX_ELEMS (1 << 20) /* elements of one grammar (sets + refs + ends) */
#define GRAM_MAX_DEPTH 2048      /* positions on one parser stack */

struct gram;

/* A byte class: bit b of w[b >> 5] set = byte b allowed. */
struct gram_set {
    uint32_t w[8];
};
void gram_set_clear(struct gram_set *s);
void gram_set_add(struct gram_set *s, unsigned lo, unsigned hi); /* bytes lo..hi inclusive */
bool gram_set_has(const struct gram_set *s, unsigned b);

/* A sequence under construction (one alternative). Elements are encoded as
 * ints: ≥ 0 a byte-set id, < -1 a rule reference. */
struct gram_seq {
    int32_t *e;
    size_t n, cap;
    bool oom;
};
void gram_seq_init(struct gram_seq *q);
void gram_seq_free(struct gram_seq *q);
void gram_seq_clear(struct gram_seq *q);

struct gram *gram_new(void);
void gram_free(struct gram *g);
/* Whether an allocation failed or a limit was passed while building (the
 * builder functions then keep going as no-ops; check before use). */
int gram_error(const struct gram *g, struct err *e);
/* A new rule without alternatives (it matches nothing until one is added). */
int32_t gram_rule_new(struct gram *g);
/* Append to q: one byte set; one byte range; the bytes of a literal; a rule. */
void gram_seq_set(struct gram *g, struct gram_seq *q, const struct gram_set *s);
void gram_seq_range(struct gram *g, struct gram_seq *q, unsigned lo, unsigned hi);
void gram_seq_lit(struct gram *g, struct gram_seq *q, const char *s, size_t n);
void gram_seq_ref(struct gram_seq *q, int32_t rule);
void gram_seq_append(struct gram_seq *q, const struct gram_seq *tail);
/* Add q as an alternative of rule (copied; q may be reused). */
void gram_alt(struct gram *g, int32_t rule, const struct gram_seq *q);
/* A rule matching q (one alternative). */
int32_t gram_rule_of(struct gram *g, const struct gram_seq *q);
/* A rule matching `rule` repeated min..max times (max < 0: no bound). */
int32_t gram_rule_repeat(struct gram *g, int32_t rule, int32_t min, int32_t max);
/* gram_error, then left recursion (a rule that reaches itself before
 * matching a byte): ERR_INVALID. A grammar from outside (a schema) must pass
 * before it is parsed with. */
int gram_check(const struct gram *g, struct err *e);
/* The start rule (default: rule 0). */
void gram_set_root(struct gram *g, int32_t rule);
size_t gram_n_elems(const struct gram *g);

/* ---- parsing */
struct gram_state;
struct gram_state *gram_state_new(const struct gram *g, struct err *e);
void gram_state_free(struct gram_state *st);
/* Back to the start (nothing consumed). */
int gram_state_reset(struct gram_state *st, struct err *e);
/* Whether byte b can come next. */
bool gram_accepts_byte(const struct gram_state *st, unsigned b);
/* Consume bytes; ERR_INVALID (state unchanged) when they leave the grammar. */
int gram_advance(struct gram_state *st, const void *bytes, size_t n, struct err *e);
/* Drop the stacks and memoized steps earlier steps and masks left behind
 * (gram_advance does it by itself once they pass a bound). */
int gram_state_compact(struct gram_state *st, struct err *e);
/* The bytes so far form a complete sentence. */
bool gram_complete(const struct gram_state *st);
/* Nothing more can follow (no stack wants a byte). */
bool gram_finished(const struct gram_state *st);
/* A 64-bit digest of the grammar's rules, sets and root: equal grammars (one schema compiled twice)
 * have equal digests, so states of different requests can share work (gram_cache.h). */
uint64_t gram_fingerprint(const struct gram *g);
/* The live set as n int32 words that depend only on the grammar (its fingerprint) and what the text so
 * far allows next — not on node ids or the order stacks were met: two states, of one request or of two
 * with equal grammars, have equal keys exactly when their sets of stacks are equal, and then equal masks.
 * Memory of the state, valid until its next call; NULL when out of memory. */
const int32_t *gram_state_key(struct gram_state *st, size_t *n, struct err *e);
/* Whole text in the grammar (a fresh state, for tests and checks). */
bool gram_match(const struct gram *g, const char *s, size_t n);

/* ---- token mask */
struct gram_vocab;
/* The trie of n tokens' pieces (piece(user, id, buf, cap) → length, like
 * tok_piece). Tokens whose piece is empty are never in a mask. */
struct gram_vocab *gram_vocab_new(int32_t n, size_t (*piece)(void *user, int32_t id, char *buf, size_t cap),
                                  void *user, struct err *e);
void gram_vocab_free(struct gram_vocab *v);
int32_t gram_vocab_size(const struct gram_vocab *v);
/* The piece of a token, as the trie holds it. */
const char *gram_vocab_piece(const struct gram_vocab *v, int32_t id, size_t *len);
/* Set bit t of allow[(n+31)/32] for every token whose whole piece the state
 * accepts next (others cleared); returns how many, or a negative ERR_*.
 * The caller adds end-of-generation tokens when gram_complete. May use
 * memory of the state (freed by the next gram_advance). */
int32_t gram_mask(struct gram_state *st, const struct gram_vocab *v, uint32_t *allow, struct err *e);

#endif
