/* tok_pretok.c — pre-tokenizers: split a text fragment (as codepoints) into
 * the pieces that BPE encodes independently, exactly as llama.cpp 80fb11a
 * does for each tokenizer.ggml.pre.
 *
 * The GPT-2 and Llama-3-style patterns (llama3, qwen2, qwen35) are
 * hand-written splitters, as in llama.cpp (their corner cases follow its
 * hand-written code, which matches the regex semantics of spec §2.2). The
 * other patterns run through tok_regex.c on either llama.cpp's "collapsed"
 * text (one byte per codepoint: category stand-ins above ASCII; used when the
 * pattern has \p{..}) or on the codepoints themselves (std::wregex path). */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

enum step_kind { ST_GPT2, ST_LLAMA3, ST_QWEN2, ST_QWEN35, ST_COLLAPSED, ST_WIDE };

struct step_def {
    enum step_kind kind;
    const char *pattern; /* regex steps only */
};

/* llama.cpp's regex lists per pre-tokenizer (llama-vocab.cpp). */
static const struct step_def k_default[] = {
    {ST_COLLAPSED, "[\\p{P}\\$\\+<=>\\^~\\|]+"},
    {ST_GPT2, NULL},
    {ST_COLLAPSED, "\\p{N}+"},
    {ST_WIDE, "[0-9][0-9][0-9]"},
};
static const struct step_def k_falcon[] = {
    {ST_COLLAPSED, "[\\p{P}\\$\\+<=>\\^~\\|`]+"},
    {ST_GPT2, NULL},
    {ST_WIDE, "[0-9][0-9][0-9]"},
};
static const struct step_def k_starcoder[] = {
    {ST_COLLAPSED, "\\p{N}"},
    {ST_GPT2, NULL},
};
static const struct step_def k_gpt2[] = {{ST_GPT2, NULL}};
static const struct step_def k_llama3[] = {{ST_LLAMA3, NULL}};
static const struct step_def k_qwen2[] = {{ST_QWEN2, NULL}};
static const struct step_def k_qwen35[] = {{ST_QWEN35, NULL}};
static const struct step_def k_deepseek_llm[] = {
    {ST_WIDE, "[\r\n]"},
    {ST_WIDE, "\\s?[A-Za-z\\u00B5\\u00C0-\\u00D6\\u00D8-\\u00F6\\u00F8-\\u01BA\\u01BC-\\u01BF\\u01C4-\\u0293\\u0295-\\u02AF\\u0370-\\u0373\\u0376-\\u0377\\u037B-\\u037D\\u037F\\u0386\\u0388-\\u038A\\u038C\\u038E-\\u03A1\\u03A3-\\u03F5\\u03F7-\\u0481\\u048A-\\u052F\\u0531-\\u0556\\u10A0-\\u10C5\\u13A0-\\u13F5\\u13F8-\\u13FD\\u1C90-\\u1CBA\\u1CBD-\\u1CBF\\u1D00-\\u1D2B\\u1D6B-\\u1D77\\u1D79-\\u1D9A\\u1E00-\\u1F15\\u1F18-\\u1F1D\\u1F20-\\u1F45\\u1F48-\\u1F4D\\u1F50-\\u1F57\\u1F59\\u1F5B\\u1F5D\\u1F5F-\\u1F7D\\u1F80-\\u1FB4\\u1FB6-\\u1FBC\\u1FBE\\u1FC2-\\u1FC4\\u1FC6-\\u1FCC\\u1FD0-\\u1FD3\\u1FD6-\\u1FDB\\u1FE0-\\u1FEC\\u1FF2-\\u1FF4\\u1FF6-\\u1FFC\\u2102\\u2107\\u210A-\\u2113\\u2115\\u2119-\\u211D\\u2124\\u2126\\u2128\\u212A-\\u212D\\u212F-\\u2134\\u2139\\u213C-\\u213F\\u2145-\\u2149\\u214E\\u2183-\\u2184\\u2C00-\\u2C7B\\u2C7E-\\u2CE4\\u2CEB-\\u2CEE\\u2CF2-\\u2CF3\\uA640-\\uA66D\\uA680-\\uA69B\\uA722-\\uA76F\\uA771-\\uA787\\uA78B-\\uA78E\\uAB70-\\uABBF\\uFB00-\\uFB06\\uFB13-\\uFB17\\uFF21-\\uFF3A\\uFF41-\\uFF5A𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"},
    {ST_WIDE, "\\s?[!-/:-~！-／：-～‘-‟　-。]+"},
    {ST_WIDE, "\\s+$"},
    {ST_WIDE, "[一-龥ࠀ-一가-퟿]+"},
    {ST_COLLAPSED, "\\p{N}+"},
};
static const struct step_def k_deepseek_coder[] = {
    {ST_WIDE, "[\r\n]"},
    {ST_COLLAPSED, "\\s?\\p{L}+"},
    {ST_COLLAPSED, "\\s?\\p{P}+"},
    {ST_WIDE, "[一-龥ࠀ-一가-퟿]+"},
    {ST_COLLAPSED, "\\p{N}"},
};

#define MAX_STEPS 8

struct tok_pretok {
    int n_steps;
    enum step_kind kind[MAX_STEPS];
    struct tok_regex *re[MAX_STEPS];
};

void tok_pretok_free(struct tok_pretok *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_steps; i++)
        tok_regex_free(p->re[i]);
    free(p);
}

int tok_pretok_new(struct tok_pretok **out, enum tok_pre pre)
{
    const struct step_def *defs;
    size_t n;
#define USE(arr) (defs = arr, n = sizeof arr / sizeof arr[0])
    switch (pre) {
    case TOK_PRE_LLAMA3: case TOK_PRE_CHATGLM4: USE(k_llama3); break;
    case TOK_PRE_QWEN2: USE(k_qwen2); break;
    case TOK_PRE_QWEN35: USE(k_qwen35); break;
    case TOK_PRE_GPT2: USE(k_gpt2); break;
    case TOK_PRE_FALCON: USE(k_falcon); break;
    case TOK_PRE_STARCODER: USE(k_starcoder); break;
    case TOK_PRE_DEEPSEEK_LLM: USE(k_deepseek_llm); break;
    case TOK_PRE_DEEPSEEK_CODER: USE(k_deepseek_coder); break;
    default: USE(k_default); break;
    }
#undef USE
    struct tok_pretok *p = calloc(1, sizeof *p);
    if (!p)
        return ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        p->kind[i] = defs[i].kind;
        if (defs[i].pattern) {
            int rc = tok_regex_compile(&p->re[i], defs[i].pattern, defs[i].kind == ST_COLLAPSED);
            if (rc) {
                p->n_steps = (int)i;
                tok_pretok_free(p);
                return rc;
            }
        }
        p->n_steps = (int)i + 1;
    }
    *out = p;
    return 0;
}

/* Piece lengths being built. */
struct lens {
    size_t *v;
    size_t n, cap;
    bool oom;
};

static void lens_push(struct lens *l, size_t x)
{
    if (!x || l->oom)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = true;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

/* Codepoint / flags inside the current piece [ini, end); 0 flags outside
 * (llama.cpp's empty codepoint_flags), every real codepoint has some flag. */
struct piece {
    const uint32_t *cp;
    const uint8_t *fl;  /* tok_cpt_flags of each codepoint, computed once */
    size_t ini, end;
    size_t prev_end;
    struct lens *out;
};

static uint32_t get_cpt(const struct piece *p, size_t pos)
{
    return pos >= p->ini && pos < p->end ? p->cp[pos] : OUT_OF_RANGE;
}

static unsigned get_flags(const struct piece *p, size_t pos)
{
    return pos >= p->ini && pos < p->end ? p->fl[pos] : 0;
}

static size_t add_token(struct piece *p, size_t end)
{
    size_t len = end - p->prev_end;
    lens_push(p->out, len);
    p->prev_end = end;
    return len;
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(struct piece *p)
{
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t cpt = get_cpt(p, pos);
        unsigned flags = get_flags(p, pos);
        if (cpt == '\'' && pos + 1 < p->end) {
            uint32_t nx = get_cpt(p, pos + 1);
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += add_token(p, pos + 2);
                continue;
            }
            if (pos + 2 < p->end) {
                uint32_t nn = get_cpt(p, pos + 2);
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l')) {
                    pos += add_token(p, pos + 3);
                    continue;
                }
            }
        }
        unsigned f2 = cpt == ' ' ? get_flags(p, pos + 1) : flags;
        if (f2 & TOK_CF_L) {
            pos += cpt == ' ';
            while (f2 & TOK_CF_L)
                f2 = get_flags(p, ++pos);
            add_token(p, pos);
            continue;
        }
        if (f2 & TOK_CF_N) {
            pos += cpt == ' ';
            while (f2 & TOK_CF_N)
                f2 = get_flags(p, ++pos);
            add_token(p, pos);
            continue;
        }
        if (!(f2 & (TOK_CF_WS | TOK_CF_L | TOK_CF_N)) && f2) {
            pos += cpt == ' ';
            while (!(f2 & (TOK_CF_WS | TOK_CF_L | TOK_CF_N)) && f2)
                f2 = get_flags(p, ++pos);
            add_token(p, pos);
            continue;
        }
        size_t nws = 0;
        while (get_flags(p, pos + nws) & TOK_CF_WS)
            nws++;
        if (nws > 1 && get_cpt(p, pos + nws) != OUT_OF_RANGE) { /* \s+(?!\S) */
            pos += nws - 1;
            add_token(p, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            add_token(p, pos);
            continue;
        }
        add_token(p, ++pos);
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?WORD+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}OTHER]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * llama3: WORD = \p{L}, digits up to 3; qwen2: digits single; qwen35:
 * WORD = [\p{L}\p{M}] and marks are excluded from the punctuation run. */
static void split_llama3(struct piece *p, size_t max_digits, bool marks)
{
    const unsigned word = marks ? (TOK_CF_L | TOK_CF_M) : TOK_CF_L;
    const unsigned notp = TOK_CF_WS | TOK_CF_L | TOK_CF_N | (marks ? TOK_CF_M : 0);
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t cpt = get_cpt(p, pos);
        unsigned flags = get_flags(p, pos);
        if (cpt == '\'' && pos + 1 < p->end) {
            uint32_t nx = ascii_lower(get_cpt(p, pos + 1));
            if (nx == 's' || nx == 't' || nx == 'm' || nx == 'd') {
                pos += add_token(p, pos + 2);
                continue;
            }
            if (pos + 2 < p->end) {
                uint32_t nn = ascii_lower(get_cpt(p, pos + 2));
                if ((nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l')) {
                    pos += add_token(p, pos + 3);
                    continue;
                }
            }
        }
        if (!(cpt == '\r' || cpt == '\n' || (flags & TOK_CF_N))) {
            if ((flags & word) || (get_flags(p, pos + 1) & word)) {
                pos++;
                while (get_flags(p, pos) & word)
                    pos++;
                add_token(p, pos);
                continue;
            }
        }
        if (flags & TOK_CF_N) {
            size_t ini = pos;
            while (get_flags(p, pos) & TOK_CF_N) {
                if (++pos - ini >= max_digits) {
                    add_token(p, pos);
                    ini = pos;
                }
            }
            add_token(p, pos);
            continue;
        }
        unsigned f2 = cpt == ' ' ? get_flags(p, pos + 1) : flags;
        if (!(f2 & notp) && flags) {
            pos += cpt == ' ';
            while (!(f2 & notp) && f2)
                f2 = get_flags(p, ++pos);
            uint32_t c2 = get_cpt(p, pos);
            while (c2 == '\r' || c2 == '\n')
                c2 = get_cpt(p, ++pos);
            add_token(p, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (get_flags(p, pos + nws) & TOK_CF_WS) {
            uint32_t c2 = get_cpt(p, pos + nws);
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            add_token(p, pos);
            continue;
        }
        if (nws > 1 && get_cpt(p, pos + nws) != OUT_OF_RANGE) { /* \s+(?!\S) */
            pos += nws - 1;
            add_token(p, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            add_token(p, pos);
            continue;
        }
        add_token(p, ++pos);
    }
}

/* One byte per codepoint, as llama.cpp builds text_collapsed. */
static uint32_t collapse(uint32_t cp, unsigned f)
{
    if (cp < 128)
        return cp;
    if (f & TOK_CF_WS) return 0x0B;
    if (f & TOK_CF_N) return 0xD1;
    if (f & TOK_CF_L) return 0xD2;
    if (f & TOK_CF_P) return 0xD3;
    if (f & TOK_CF_M) return 0xD4;
    if (f & TOK_CF_S) return 0xD5;
    return 0xD0;
}

static int split_regex(struct tok_regex *re, const uint32_t *subj, const size_t *in, size_t n_in, struct lens *out)
{
    size_t start = 0;
    for (size_t k = 0; k < n_in; k++) {
        size_t *spans = NULL, n_spans = 0;
        int rc = tok_regex_find_all(re, subj + start, in[k], &spans, &n_spans);
        if (rc)
            return rc;
        size_t at = 0;
        for (size_t j = 0; j < n_spans; j++) {
            lens_push(out, spans[2 * j] - at);
            lens_push(out, spans[2 * j + 1] - spans[2 * j]);
            at = spans[2 * j + 1];
        }
        lens_push(out, in[k] - at);
        free(spans);
        start += in[k];
    }
    return 0;
}

int tok_pretok_split(const struct tok_pretok *pt, const uint32_t *cp, size_t n, size_t **lens_out, size_t *n_lens)
{
    struct lens cur = {0};
    lens_push(&cur, n);
    if (cur.oom)
        return ERR_NOMEM;
    uint32_t *subj = NULL;
    uint8_t *fl = malloc(n ? n : 1);
    if (!fl) {
        free(cur.v);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        fl[i] = (uint8_t)tok_cpt_flags(cp[i]);
    int rc = 0;
    for (int s = 0; s < pt->n_steps && !rc; s++) {
        struct lens next = {0};
        enum step_kind k = pt->kind[s];
        if (k == ST_COLLAPSED || k == ST_WIDE) {
            if (!subj && !(subj = malloc((n ? n : 1) * sizeof *subj))) {
                rc = ERR_NOMEM;
                break;
            }
            for (size_t i = 0; i < n; i++) {
                if (k == ST_COLLAPSED)
                    subj[i] = collapse(cp[i], fl[i]);
                else /* std::wregex: non-ASCII whitespace becomes \v so \s sees it */
                    subj[i] = cp[i] > 0x7F && (fl[i] & TOK_CF_WS) ? 0x0B : cp[i];
            }
            rc = split_regex(pt->re[s], subj, cur.v, cur.n, &next);
        } else {
            size_t start = 0;
            for (size_t i = 0; i < cur.n; i++) {
                struct piece p = {cp, fl, start, start + cur.v[i], start, &next};
                if (k == ST_GPT2)
                    split_gpt2(&p);
                else
                    split_llama3(&p, k == ST_LLAMA3 ? 3 : 1, k == ST_QWEN35);
                start += cur.v[i];
            }
        }
        if (next.oom && !rc)
            rc = ERR_NOMEM;
        free(cur.v);
        cur = next;
    }
    free(subj);
    free(fl);
    if (rc) {
        free(cur.v);
        return rc;
    }
    *lens_out = cur.v;
    *n_lens = cur.n;
    return 0;
}
