/* tok_bound.c — how few tokens a text can become, from its bytes alone:
 * a prompt far too long for the context is refused before tokenizing it
 * (tokenizing 4 MB takes ~1 s and tens of MB) with the same answer the
 * token count would have given.
 *
 * Why B / (longest token text) is a lower bound: every token tok_encode
 * emits stands for at most as many input bytes as its vocab text has.
 * A special token matched in the text is its text; a byte-level BPE token's
 * text spells each input byte as one or two bytes (an invalid byte as the
 * six of U+FFFD); an SPM token spells a space as U+2581 (three bytes) and a
 * byte-fallback token "<0xNN>" one byte. Two things can make input vanish,
 * and are left out of the count: whitespace next to a special token with
 * LSTRIP / RSTRIP, and in BPE a byte whose one-symbol spelling is not a
 * token (several real vocabularies lack a few control bytes): the fallback
 * drops it. That the fallback drops nothing else needs every merge of the
 * vocab to yield a token; where one does not, there is no bound (0). */
#include "tok_internal.h"

#include <string.h>

size_t tok_span_max(const struct tok_vocab *v)
{
    if (v->type == TOK_TYPE_BPE) {
        if (v->n_str_merges > 0)
            return 0;
        for (uint32_t i = 0; i < v->merges.cap; i++) {
            if (!v->merges.key[i])
                continue;
            uint64_t k = v->merges.key[i] - 1;
            int32_t l = (int32_t)(k >> 32), r = (int32_t)(uint32_t)k;
            char buf[512];
            if (v->len[l] + v->len[r] > sizeof buf)
                return 0;
            memcpy(buf, v->text[l], v->len[l]);
            memcpy(buf + v->len[l], v->text[r], v->len[r]);
            if (tok_map_find(v, buf, v->len[l] + v->len[r]) < 0)
                return 0;
        }
    }
    size_t m = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->len[id] > m)
            m = v->len[id];
    return m;
}

size_t tok_count_min(const struct tok_vocab *v, const char *text, size_t len, size_t span_max)
{
    if (!span_max)
        return 0;
    /* which bytes surely stand in some token's text */
    bool counts[256], all = true;
    for (int b = 0; b < 256; b++) {
        counts[b] = true;
        if (v->type == TOK_TYPE_BPE) {
            char s[4];
            int n = tok_utf8_encode(tok_byte_to_cpt((uint8_t)b), s);
            counts[b] = tok_map_find(v, s, (size_t)n) >= 0;
        }
        all &= counts[b];
    }
    bool strip = false;
    for (int32_t k = 0; k < v->n_special && !strip; k++)
        strip = (v->attr[v->special[k]] & (TA_LSTRIP | TA_RSTRIP)) != 0;
    if (strip) { /* tok_encode's c_isspace: what a strip may remove */
        counts[' '] = counts['\t'] = counts['\n'] = counts['\v'] = counts['\f'] = counts['\r'] = false;
        all = false;
    }
    size_t n = len;
    if (!all) {
        n = 0;
        for (size_t i = 0; i < len; i++)
            n += counts[(unsigned char)text[i]];
    }
    return (n + span_max - 1) / span_max;
}
