/* tok_encode.c — llama_tokenize: special-token partition (longest special
 * text first; USER_DEFINED always, CONTROL/UNKNOWN only with parse_special;
 * LSTRIP/RSTRIP trimming), then BOS, BPE or SPM per text fragment, EOS. */
#include "tok_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

struct frag {
    int32_t id;        /* token, or -1 for raw text */
    size_t off, len;   /* raw text span */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int frag_push(struct frags *f, struct frag x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *p = realloc(f->v, cap * sizeof *p);
        if (!p)
            return ERR_NOMEM;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

static bool c_isspace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Split every text fragment at the occurrences of special token `id`. */
static int partition_one(const struct tok_vocab *v, const char *text, int32_t id, struct frags *in, struct frags *out)
{
    const char *st = v->text[id];
    size_t sl = v->len[id];
    uint32_t a = v->attr[id];
    out->n = 0;
    int rc = 0;
    for (size_t k = 0; k < in->n && !rc; k++) {
        struct frag f = in->v[k];
        if (f.id >= 0 || f.len < sl) {
            rc = frag_push(out, f);
            continue;
        }
        size_t off = f.off, len = f.len;
        while (!rc) {
            const char *m = len >= sl ? memmem(text + off, len, st, sl) : NULL;
            if (!m) {
                if (len)
                    rc = frag_push(out, (struct frag){-1, off, len});
                break;
            }
            size_t mo = (size_t)(m - text);
            if (mo > off) {
                size_t ll = mo - off;
                if (a & TA_LSTRIP)
                    while (ll > 0 && c_isspace(text[off + ll - 1]))
                        ll--;
                if (ll && (rc = frag_push(out, (struct frag){-1, off, ll})))
                    break;
            }
            if ((rc = frag_push(out, (struct frag){id, 0, 0})))
                break;
            size_t ro = mo + sl, rl = off + len - ro;
            if (a & TA_RSTRIP)
                while (rl > 0 && c_isspace(text[ro])) {
                    ro++;
                    rl--;
                }
            off = ro;
            len = rl;
            if (!len)
                break;
        }
    }
    return rc;
}

int tok_encode(const struct tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
               int32_t **ids, size_t *n_ids, struct err *e)
{
    *ids = NULL;
    *n_ids = 0;
    struct frags a = {0}, b = {0};
    struct tok_out o = {0};
    char *buf = NULL;
    int rc = 0;
    if (len && (rc = frag_push(&a, (struct frag){-1, 0, len})))
        goto done;
    for (int32_t k = 0; k < v->n_special && a.n; k++) {
        int32_t id = v->special[k];
        if (!parse_special && (v->attr[id] & (TA_CONTROL | TA_UNKNOWN)))
            continue;
        if ((rc = partition_one(v, text, id, &a, &b)))
            goto done;
        struct frags t = a;
        a = b;
        b = t;
    }
    if (v->type == TOK_TYPE_SPM) {
        bool prev_special = true;
        if (add_special && v->add_bos && (rc = tok_out_push(&o, v->bos)))
            goto done;
        for (size_t k = 0; k < a.n; k++) {
            struct frag f = a.v[k];
            if (f.id >= 0) {
                if ((rc = tok_out_push(&o, f.id)))
                    goto done;
                prev_special = true;
                continue;
            }
            /* space prefix, then ' ' -> U+2581 (3 bytes) */
            bool pre = v->add_space_prefix && prev_special;
            free(buf);
            if (!(buf = malloc((f.len + 1) * 3))) {
                rc = ERR_NOMEM;
                goto done;
            }
            size_t bl = 0;
            for (size_t i = 0; i < f.len + pre; i++) {
                char c = (pre && i == 0) ? ' ' : text[f.off + i - pre];
                if (c == ' ') {
                    buf[bl++] = (char)0xE2;
                    buf[bl++] = (char)0x96;
                    buf[bl++] = (char)0x81;
                } else {
                    buf[bl++] = c;
                }
            }
            if ((rc = tok_spm_fragment(v, buf, bl, &o)))
                goto done;
            prev_special = false;
        }
    } else {
        if (add_special && v->add_bos && (rc = tok_out_push(&o, v->bos)))
            goto done;
        for (size_t k = 0; k < a.n; k++) {
            struct frag f = a.v[k];
            rc = f.id >= 0 ? tok_out_push(&o, f.id) : tok_bpe_fragment(v, text + f.off, f.len, &o);
            if (rc)
                goto done;
        }
    }
    if (add_special && v->add_eos && (rc = tok_out_push(&o, v->eos)))
        goto done;
done:
    free(a.v);
    free(b.v);
    free(buf);
    if (rc) {
        free(o.ids);
        if (rc == ERR_NOMEM)
            return err_set(e, rc, "tokenizer: out of memory tokenizing %zu bytes", len);
        if (rc == ERR_INVALID)
            return err_set(e, rc, "tokenizer: input cannot be tokenized by this vocabulary (codepoint above U+10FFFF or a byte without a byte token)");
        return err_set(e, rc, "tokenizer: tokenizing failed (%s)", err_name(rc));
    }
    if (!o.ids && !(o.ids = malloc(sizeof *o.ids)))
        return err_set(e, ERR_NOMEM, "tokenizer: out of memory");
    *ids = o.ids;
    *n_ids = o.n;
    return 0;
}
