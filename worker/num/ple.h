/* ple.h — the n-gram hash input of qwen4exp's PLE block (shared spec arch-qwen4exp.md §3.6 steps 1–2):
 * which rows of the PLE table a token reads, gathered. Host-side math both engines share (the table stays
 * in the mapped file: 26.8 GiB on the real model). */
#ifndef LLM170_PLE_H
#define LLM170_PLE_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

struct ple_hash {
    int ngram;            /* n (2..8) */
    int heads_per_ngram;
    int eos;              /* cuts the window */
    const uint64_t *mult; /* [ngram] multipliers */
    const uint64_t *off;  /* [(ngram − 1)·heads_per_ngram] row offset of each head */
    const uint64_t *vocab;/* [(ngram − 1)·heads_per_ngram] rows (modulus) of each head */
    int d_ple;            /* one row's width */
    enum qtype type;      /* the table's */
    const void *table;    /* [n_rows][d_ple] */
    size_t row_bytes;
};

/* out[(ngram − 1)·heads_per_ngram·d_ple] = the rows token `token` at position pos reads, head 0 first.
 * hist[q] is the token at position q < pos of its sequence. Its context is itself, then its predecessors;
 * a missing predecessor (q < 0) or an EOS makes it and every older slot EOS. Hashes are wrapping 64-bit
 * products XORed, taken modulo each head's size. */
void ple_gather(const struct ple_hash *h, const int *hist, int pos, int token, float *out);

#endif
