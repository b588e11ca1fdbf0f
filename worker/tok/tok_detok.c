/* tok_detok.c — token pieces (llama_token_to_piece), llama_detokenize with
 * its leading-space and clean_spaces rules, and a streaming detokenizer that
 * only ever emits whole UTF-8 sequences. */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* token text -> bytes: BPE maps each codepoint back through the GPT-2
 * alphabet; a codepoint outside it becomes "[UNK_BYTE_0x<hex>" + text + "]"
 * exactly like llama.cpp's llama_decode_text. */
static char *decode_bpe_text(const char *t, size_t tl, size_t *outl)
{
    uint32_t *cp;
    size_t n;
    if (tok_utf8_decode(t, tl, &cp, &n))
        return NULL;
    size_t cap = tl + 1, len = 0;
    char *out = malloc(cap);
    for (size_t i = 0; out && i < n; i++) {
        int b = tok_cpt_to_byte(cp[i]);
        size_t need = b >= 0 ? 1 : 12 + 8 + tl + 1;
        if (len + need + 1 > cap) {
            cap = (len + need + 1) * 2;
            char *p = realloc(out, cap);
            if (!p) {
                free(out);
                out = NULL;
                break;
            }
            out = p;
        }
        if (b >= 0) {
            out[len++] = (char)b;
        } else {
            char u[4];
            int ul = tok_utf8_encode(cp[i], u);
            len += (size_t)snprintf(out + len, cap - len, "[UNK_BYTE_0x");
            for (int k = 0; k < ul; k++)
                len += (size_t)snprintf(out + len, cap - len, "%02x", (unsigned char)u[k]);
            memcpy(out + len, t, tl);
            len += tl;
            out[len++] = ']';
        }
    }
    free(cp);
    if (out) {
        out[len] = 0;
        *outl = len;
    }
    return out;
}

static char *piece_of(const struct tok_vocab *v, int32_t id, size_t *pl)
{
    uint32_t a = v->attr[id];
    const char *t = v->text[id];
    size_t tl = v->len[id];
    char *p;
    if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER_DEFINED)) {
        p = malloc(tl + 1);
        if (p) {
            memcpy(p, t, tl + 1);
            *pl = tl;
        }
        return p;
    }
    if (a & TA_NORMAL) {
        if (v->type == TOK_TYPE_BPE)
            return decode_bpe_text(t, tl, pl);
        p = malloc(tl + 1); /* SPM: U+2581 -> ' ' */
        if (!p)
            return NULL;
        size_t n = 0;
        for (size_t i = 0; i < tl;) {
            if (i + 2 < tl && (unsigned char)t[i] == 0xE2 && (unsigned char)t[i + 1] == 0x96 &&
                (unsigned char)t[i + 2] == 0x81) {
                p[n++] = ' ';
                i += 3;
            } else {
                p[n++] = t[i++];
            }
        }
        p[n] = 0;
        *pl = n;
        return p;
    }
    p = malloc(2);
    if (!p)
        return NULL;
    *pl = 0;
    if (a & TA_BYTE) { /* "<0xXX>": strtol of the two chars after "<0x" */
        char hex[3] = {tl > 3 ? t[3] : 0, tl > 4 ? t[4] : 0, 0};
        p[0] = (char)strtol(hex, NULL, 16);
        *pl = 1;
    }
    p[*pl] = 0;
    return p;
}

int tok_build_pieces(struct tok_vocab *v)
{
    v->piece = calloc((size_t)v->n_tokens, sizeof *v->piece);
    v->piece_len = calloc((size_t)v->n_tokens, sizeof *v->piece_len);
    if (!v->piece || !v->piece_len)
        return ERR_NOMEM;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t pl = 0;
        if (!(v->piece[id] = piece_of(v, id, &pl)))
            return ERR_NOMEM;
        v->piece_len[id] = (uint32_t)pl;
    }
    return 0;
}

size_t tok_piece(const struct tok_vocab *v, int32_t id, bool special, char *buf, size_t cap)
{
    if (id < 0 || id >= v->n_tokens)
        return 0;
    if (!special && (v->attr[id] & (TA_UNKNOWN | TA_CONTROL)))
        return 0;
    size_t n = v->piece_len[id];
    if (n <= cap)
        memcpy(buf, v->piece[id], n);
    return n;
}

size_t tok_piece_max(const struct tok_vocab *v)
{
    size_t m = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->piece_len[id] > m)
            m = v->piece_len[id];
    return m;
}

char *tok_detokenize(const struct tok_vocab *v, const int32_t *ids, size_t n, bool special, size_t *len)
{
    return tok_detokenize_ex(v, ids, n, false, special, len);
}

char *tok_detokenize_ex(const struct tok_vocab *v, const int32_t *ids, size_t n, bool remove_special, bool special,
                        size_t *len)
{
    bool remove_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n > 0 && ids[0] == v->bos) {
        remove_space = false; /* the space after a dropped BOS is kept */
        ids++;
        n--;
    }
    if (remove_special && v->add_eos && n > 0 && ids[n - 1] == v->eos)
        n--;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < v->n_tokens)
            total += v->piece_len[ids[i]];
    char *t = malloc(total + 1);
    if (!t)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pl = tok_piece(v, ids[i], special, t + k, total - k);
        if (remove_space && pl > 0 && t[k] == ' ') {
            memmove(t + k, t + k + 1, pl - 1);
            pl--;
        }
        remove_space = false;
        k += pl;
    }
    if (v->clean_spaces) {
        /* 1: drop a space before ? ! . , */
        size_t t1 = k, m = k ? 1 : 0;
        for (size_t i = 1; i < t1; i++) {
            char x = t[i];
            if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') && m > 0)
                m--;
            t[m++] = x;
        }
        /* 2: " ' " -> "'" */
        size_t t2 = m;
        m = t2 ? 1 : 0;
        for (size_t i = 1; i < t2; i++) {
            char x = t[i];
            if (x == '\'' && i + 1 < t2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
                m--;
                t[++i] = 0;
            }
            t[m++] = x;
        }
        /* 3: drop the space before 's 'm 're 've */
        size_t t3 = m;
        m = t3 ? 1 : 0;
        for (size_t i = 1; i < t3; i++) {
            char x = t[i];
            if (t[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
                char x1 = t[i + 1];
                if (x1 == 's' || x1 == 'm')
                    m--;
                else if (i + 2 < t3 && ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e')))
                    m--;
            }
            t[m++] = x;
        }
        k = m;
    }
    t[k] = 0;
    *len = k;
    return t;
}

void tok_stream_init(struct tok_stream *s)
{
    memset(s, 0, sizeof *s);
    s->first = false; /* llama-server streams pieces verbatim; set true to strip like tok_detokenize */
}

/* Bytes at the end of buf[0..n) that start a UTF-8 sequence not yet complete
 * (the same check llama-server's validate_utf8 makes). */
static size_t incomplete_tail(const unsigned char *b, size_t n)
{
    for (size_t i = 1; i <= 4 && i <= n; i++) {
        unsigned char c = b[n - i];
        if ((c & 0xE0) == 0xC0) { if (i < 2) return i; break; }
        if ((c & 0xF0) == 0xE0) { if (i < 3) return i; break; }
        if ((c & 0xF8) == 0xF0) { if (i < 4) return i; break; }
        if ((c & 0xC0) != 0x80)
            break; /* ASCII or invalid lead: nothing pending */
    }
    return 0;
}

size_t tok_stream_push(const struct tok_vocab *v, struct tok_stream *s, int32_t id, bool special, char *out,
                       size_t cap)
{
    if (id < 0 || id >= v->n_tokens)
        return 0;
    const char *p = v->piece[id];
    size_t pl = (!special && (v->attr[id] & (TA_UNKNOWN | TA_CONTROL))) ? 0 : v->piece_len[id];
    if (s->first) {
        if (v->add_space_prefix && pl > 0 && p[0] == ' ') {
            p++;
            pl--;
        }
        s->first = false;
    }
    size_t total = (size_t)s->n_pending + pl;
    unsigned char *tmp = malloc(total ? total : 1);
    if (!tmp)
        return 0;
    memcpy(tmp, s->pending, (size_t)s->n_pending);
    memcpy(tmp + s->n_pending, p, pl);
    size_t hold = incomplete_tail(tmp, total);
    size_t emit = total - hold;
    if (emit > cap) /* caller's buffer too small: keep whole characters only */
        emit = cap - incomplete_tail(tmp, cap);
    memcpy(out, tmp, emit);
    size_t rest = total - emit;
    if (rest > sizeof s->pending)
        rest = sizeof s->pending; /* only when cap was too small; the excess is dropped */
    memcpy(s->pending, tmp + emit, rest);
    s->n_pending = (int)rest;
    free(tmp);
    return emit;
}

size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap)
{
    size_t n = 0;
    if (s->n_pending > 0 && cap >= 3) {
        memcpy(out, "\xEF\xBF\xBD", 3);
        n = 3;
    }
    s->n_pending = 0;
    return n;
}
