/* tok_unicode.c — codepoint categories and UTF-8 helpers for the tokenizer.
 *
 * Categories come from utf8proc (Debian 12: utf8proc 2.8.0 = Unicode 15.0).
 * llama.cpp 80fb11a generates its table from Unicode 15.1, which assigned
 * 627 new codepoints; k_uni151 below adds them. We know of no 15.1 change to
 * the general category of an existing codepoint; the result is checked
 * against llama.cpp's own output on 16 vocabularies
 * (tests/golden/tok_llamacpp_*.txt).
 * Debian 12's pcre2 10.42 carries Unicode 14.0, so it is not used here.
 * Unassigned codepoints are TOK_CF_OTHER: in llama.cpp's splitters they act
 * like punctuation, exactly as "other" does. */
#include "tok_internal.h"

#include <stdlib.h>
#include <utf8proc.h>

/* Unicode 15.1 additions, absent from utf8proc 2.8.0. */
static const struct { uint32_t lo, hi; unsigned flags; } k_uni151[] = {
    {0x2FFC, 0x2FFF, TOK_CF_S},   /* ideographic description characters (So) */
    {0x31EF, 0x31EF, TOK_CF_S},   /* CJK stroke HXG (So) */
    {0x2EBF0, 0x2EE5D, TOK_CF_L}, /* CJK Unified Ideographs Extension I (Lo) */
};

static bool is_llama_ws(uint32_t cp)
{
    /* Unicode White_Space, as llama.cpp's unicode_set_whitespace */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

unsigned tok_cpt_flags(uint32_t cp)
{
    unsigned f = is_llama_ws(cp) ? TOK_CF_WS : 0;
    if (cp > 0x10FFFF)
        return f | TOK_CF_OTHER;
    for (size_t i = 0; i < sizeof k_uni151 / sizeof k_uni151[0]; i++)
        if (cp >= k_uni151[i].lo && cp <= k_uni151[i].hi)
            return f | k_uni151[i].flags;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return f | TOK_CF_L;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return f | TOK_CF_M;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return f | TOK_CF_N;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return f | TOK_CF_P;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        return f | TOK_CF_S;
    default:
        return f | TOK_CF_OTHER;
    }
}

/* One codepoint at s[*off]; -1 when the bytes there are not a well-formed
 * sequence by llama.cpp's rules (which accept overlong forms and surrogates). */
static int32_t decode_one(const unsigned char *s, size_t n, size_t *off)
{
    size_t i = *off;
    unsigned c = s[i];
    if (!(c & 0x80)) {
        *off = i + 1;
        return (int32_t)c;
    }
    if (!(c & 0x40))
        return -1;
    int extra;
    uint32_t cp;
    if (!(c & 0x20)) { extra = 1; cp = c & 0x1F; }
    else if (!(c & 0x10)) { extra = 2; cp = c & 0x0F; }
    else if (!(c & 0x08)) { extra = 3; cp = c & 0x07; }
    else return -1;
    if (i + (size_t)extra >= n)
        return -1;
    for (int k = 1; k <= extra; k++) {
        if ((s[i + k] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    *off = i + 1 + (size_t)extra;
    return (int32_t)cp;
}

int tok_utf8_decode(const char *str, size_t n, uint32_t **out, size_t *n_out)
{
    const unsigned char *s = (const unsigned char *)str;
    uint32_t *cp = malloc((n ? n : 1) * sizeof *cp);
    if (!cp)
        return ERR_NOMEM;
    size_t k = 0, off = 0;
    while (off < n) {
        int32_t c = decode_one(s, n, &off);
        if (c < 0) {
            off++;
            c = 0xFFFD;
        }
        cp[k++] = (uint32_t)c;
    }
    *out = cp;
    *n_out = k;
    return 0;
}

int tok_utf8_encode(uint32_t cp, char *buf)
{
    unsigned char *b = (unsigned char *)buf;
    if (cp <= 0x7F) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp <= 0x7FF) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | ((cp >> 18) & 0x07));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to 256.. in increasing byte order. */
static bool byte_is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_byte_to_cpt(uint8_t b)
{
    if (byte_is_self(b))
        return b;
    if (b <= 0x20)
        return 256u + b;            /* 0x00..0x20 -> 256..288 */
    if (b >= 0x7F && b <= 0xA0)
        return 289u + (b - 0x7Fu);  /* 0x7F..0xA0 -> 289..322 */
    return 323;                     /* 0xAD */
}

int tok_cpt_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_self(cp) ? (int)cp : -1;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(0x7F + cp - 289);
    if (cp == 323)
        return 0xAD;
    return -1;
}
