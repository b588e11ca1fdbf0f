/* jinja_builtins.c — values, filters, tests, string/dict/list methods and
 * global functions of the Jinja subset, with Python's semantics where chat
 * templates observe them (str() of values, json.dumps for `tojson` the way
 * Hugging Face's chat renderer configures it: ensure_ascii=False, ", "/": "
 * separators, keys in document order). */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"
#include "jinja_internal.h"

/* ---------------------------------------------------------------- values */

const char *jinja_value_type(const json_t *v)
{
    if (!v) return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE: case JSON_FALSE: return "bool";
    default: return "none";
    }
}

bool jinja_value_truthy(const json_t *v)
{
    if (!v) return false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > (json_object_get(v, NS_MARK) ? 1 : 0);
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

bool jinja_value_equal(const json_t *a, const json_t *b)
{
    if (!a || !b)
        return a == b;
    if ((json_is_integer(a) || json_is_real(a)) && (json_is_integer(b) || json_is_real(b))) {
        double x = json_is_integer(a) ? (double)json_integer_value(a) : json_real_value(a);
        double y = json_is_integer(b) ? (double)json_integer_value(b) : json_real_value(b);
        return x == y;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

size_t jinja_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* Byte offsets of each code point start, plus n at the end: [cps + 1]. */
static size_t *utf8_index(const char *s, size_t n, size_t *cps)
{
    size_t k = jinja_utf8_len(s, n), j = 0;
    size_t *ix = malloc((k + 1) * sizeof *ix);
    if (!ix)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            ix[j++] = i;
    ix[j] = n;
    *cps = k;
    return ix;
}

/* Python repr() of a float: the shortest digits that read back exactly. */
static void float_repr(double x, char *out, size_t cap)
{
    if (isnan(x)) { snprintf(out, cap, "nan"); return; }
    if (isinf(x)) { snprintf(out, cap, x < 0 ? "-inf" : "inf"); return; }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e = [-]d[.ddd]e±XX */
    bool neg = e[0] == '-';
    char digits[24];
    int nd = 0;
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q))
            digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (exp >= -5 + 1 && exp < 16) {
        if (exp < 0) {
            PUT("0.");
            for (int i = 0; i < -exp - 1; i++) PUT("0");
            PUT("%.*s", nd, digits);
        } else {
            for (int i = 0; i <= exp; i++) PUT("%c", i < nd ? digits[i] : '0');
            PUT(".");
            if (nd > exp + 1) PUT("%.*s", nd - exp - 1, digits + exp + 1);
            else PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%.*s", nd - 1, digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
#undef PUT
}

static int put_json_string(struct jbuf *b, const char *s, size_t n, bool ascii)
{
    int rc = jinja_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        switch (ch) {
        case '"': rc = jinja_buf_put(b, "\\\"", 2); break;
        case '\\': rc = jinja_buf_put(b, "\\\\", 2); break;
        case '\n': rc = jinja_buf_put(b, "\\n", 2); break;
        case '\r': rc = jinja_buf_put(b, "\\r", 2); break;
        case '\t': rc = jinja_buf_put(b, "\\t", 2); break;
        case '\b': rc = jinja_buf_put(b, "\\b", 2); break;
        case '\f': rc = jinja_buf_put(b, "\\f", 2); break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                rc = jinja_buf_puts(b, esc);
            } else if (ch >= 0x80 && ascii) {
                /* decode one UTF-8 sequence (input is valid UTF-8: jansson checked it) */
                int len = ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : 2;
                unsigned cp = ch & (0x3f >> (len - 1));
                for (int k = 1; k < len && i + 1 < n; k++)
                    cp = cp << 6 | ((unsigned char)s[++i] & 0x3f);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                rc = jinja_buf_puts(b, esc);
            } else {
                rc = jinja_buf_put(b, s + i, 1);
            }
        }
    }
    return rc ? rc : jinja_buf_put(b, "\"", 1);
}

struct json_style {
    int indent;          /* < 0: one line */
    const char *item_sep, *key_sep;
    bool ascii, sort;
};

static int cmp_keys(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int dump_json(struct jctx *c, const json_t *v, struct jbuf *b, const struct json_style *st, int level)
{
    char num[64];
    if (!v)
        return jinja_buf_puts(b, "null");
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_NULL: return jinja_buf_puts(b, "null");
    case JSON_TRUE: return jinja_buf_puts(b, "true");
    case JSON_FALSE: return jinja_buf_puts(b, "false");
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return jinja_buf_puts(b, num);
    case JSON_REAL:
        float_repr(json_real_value(v), num, sizeof num);
        return jinja_buf_puts(b, num);
    case JSON_STRING:
        return put_json_string(b, json_string_value(v), json_string_length(v), st->ascii);
    case JSON_ARRAY:
    case JSON_OBJECT: {
        bool arr = json_is_array(v);
        size_t n = arr ? json_array_size(v) : json_object_size(v);
        const char **keys = NULL;
        if (!arr) {
            keys = malloc((n ? n : 1) * sizeof *keys);
            if (!keys)
                return ERR_NOMEM;
            size_t k = 0;
            const char *key;
            json_t *x;
            json_object_foreach((json_t *)v, key, x) if (strcmp(key, NS_MARK)) keys[k++] = key;
            n = k;
            if (st->sort)
                qsort(keys, n, sizeof *keys, cmp_keys);
        }
        rc = jinja_buf_puts(b, arr ? "[" : "{");
        for (size_t i = 0; i < n && !rc; i++) {
            if (i)
                rc = jinja_buf_puts(b, st->item_sep);
            if (st->indent >= 0) {
                rc = rc ? rc : jinja_buf_puts(b, "\n");
                for (int s = 0; s < st->indent * (level + 1) && !rc; s++)
                    rc = jinja_buf_puts(b, " ");
            }
            if (rc)
                break;
            if (arr) {
                rc = dump_json(c, json_array_get(v, i), b, st, level + 1);
            } else {
                rc = put_json_string(b, keys[i], strlen(keys[i]), st->ascii);
                rc = rc ? rc : jinja_buf_puts(b, st->key_sep);
                rc = rc ? rc : dump_json(c, json_object_get(v, keys[i]), b, st, level + 1);
            }
        }
        if (!rc && n && st->indent >= 0) {
            rc = jinja_buf_puts(b, "\n");
            for (int s = 0; s < st->indent * level && !rc; s++)
                rc = jinja_buf_puts(b, " ");
        }
        free(keys);
        return rc ? rc : jinja_buf_puts(b, arr ? "]" : "}");
    }
    }
    return 0;
}

int jinja_value_json(struct jctx *c, const json_t *v, struct jbuf *b, int indent, int level)
{
    struct json_style st = {indent, indent >= 0 ? "," : ", ", ": ", false, false};
    return dump_json(c, v, b, &st, level);
}

/* Python repr(): strings in single quotes unless they hold one and no double. */
static int repr_str(struct jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = jinja_buf_put(b, &q, 1);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == (unsigned char)q || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            rc = jinja_buf_put(b, esc, 2);
        } else if (ch == '\n') rc = jinja_buf_puts(b, "\\n");
        else if (ch == '\r') rc = jinja_buf_puts(b, "\\r");
        else if (ch == '\t') rc = jinja_buf_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            rc = jinja_buf_puts(b, esc);
        } else rc = jinja_buf_put(b, s + i, 1);
    }
    return rc ? rc : jinja_buf_put(b, &q, 1);
}

int jinja_value_repr(struct jctx *c, const json_t *v, struct jbuf *b)
{
    if (json_is_string(v))
        return repr_str(b, json_string_value(v), json_string_length(v));
    if (json_is_array(v)) {
        int rc = jinja_buf_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v) && !rc; i++) {
            if (i)
                rc = jinja_buf_puts(b, ", ");
            rc = rc ? rc : jinja_value_repr(c, json_array_get(v, i), b);
        }
        return rc ? rc : jinja_buf_puts(b, "]");
    }
    if (json_is_object(v)) {
        int rc = jinja_buf_puts(b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if (!strcmp(k, NS_MARK))
                continue;
            if (!first)
                rc = rc ? rc : jinja_buf_puts(b, ", ");
            first = false;
            rc = rc ? rc : repr_str(b, k, strlen(k));
            rc = rc ? rc : jinja_buf_puts(b, ": ");
            rc = rc ? rc : jinja_value_repr(c, x, b);
        }
        return rc ? rc : jinja_buf_puts(b, "}");
    }
    return jinja_value_str(c, v, b);
}

int jinja_value_str(struct jctx *c, const json_t *v, struct jbuf *b)
{
    char num[64];
    int rc = 0;
    if (!v)
        return 0; /* undefined prints as nothing */
    switch (json_typeof(v)) {
    case JSON_STRING: rc = jinja_buf_put(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        rc = jinja_buf_puts(b, num);
        break;
    case JSON_REAL:
        float_repr(json_real_value(v), num, sizeof num);
        rc = jinja_buf_puts(b, num);
        break;
    case JSON_TRUE: rc = jinja_buf_puts(b, "True"); break;
    case JSON_FALSE: rc = jinja_buf_puts(b, "False"); break;
    case JSON_NULL: rc = jinja_buf_puts(b, "None"); break;
    default: rc = jinja_value_repr(c, v, b);
    }
    if (rc)
        jinja_err(c, ERR_NOMEM, "out of memory");
    return rc;
}

static json_t *to_string(struct jctx *c, const json_t *v)
{
    struct jbuf b = {0};
    if (jinja_value_str(c, v, &b))
        return free(b.p), NULL;
    json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

/* ---------------------------------------------------------------- slicing */

static long long clampi(long long x, long long lo, long long hi) { return x < lo ? lo : x > hi ? hi : x; }

json_t *jinja_builtin_slice(struct jctx *c, json_t *v, json_t *start, json_t *stop, json_t *step)
{
    for (json_t *p[3] = {start, stop, step}, **q = p; q < p + 3; q++)
        if (*q && !json_is_integer(*q) && !json_is_null(*q))
            return jinja_err(c, ERR_INVALID, "slice indices must be integers, not %s", jinja_value_type(*q));
    long long st = step && json_is_integer(step) ? json_integer_value(step) : 1;
    if (st == 0)
        return jinja_err(c, ERR_INVALID, "slice step cannot be zero");
    size_t *ix = NULL, len;
    if (json_is_string(v)) {
        if (!(ix = utf8_index(json_string_value(v), json_string_length(v), &len)))
            return jinja_err(c, ERR_NOMEM, "out of memory");
    } else if (json_is_array(v)) {
        len = json_array_size(v);
    } else {
        return jinja_err(c, ERR_INVALID, "cannot slice %s", jinja_value_type(v));
    }
    long long n = (long long)len, lo, hi;
    /* Python's slice.indices() */
    if (st > 0) {
        lo = start && json_is_integer(start) ? json_integer_value(start) : 0;
        hi = stop && json_is_integer(stop) ? json_integer_value(stop) : n;
        if (lo < 0) lo += n;
        if (hi < 0) hi += n;
        lo = clampi(lo, 0, n);
        hi = clampi(hi, 0, n);
    } else {
        lo = start && json_is_integer(start) ? json_integer_value(start) : n - 1;
        hi = stop && json_is_integer(stop) ? json_integer_value(stop) : -n - 1;
        if (lo < 0) lo += n;
        if (hi < 0) hi += n;
        lo = clampi(lo, -1, n - 1);
        hi = clampi(hi, -1, n - 1);
    }
    json_t *r;
    if (ix) {
        struct jbuf b = {0};
        const char *s = json_string_value(v);
        for (long long i = lo; st > 0 ? i < hi : i > hi; i += st)
            if (jinja_buf_put(&b, s + ix[i], ix[i + 1] - ix[i]))
                break;
        r = json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
        free(ix);
    } else {
        r = json_array();
        for (long long i = lo; r && (st > 0 ? i < hi : i > hi); i += st)
            json_array_append(r, json_array_get(v, (size_t)i));
    }
    return r ? r : jinja_err(c, ERR_NOMEM, "out of memory");
}

/* ---------------------------------------------------------------- helpers */

static json_t *arg(json_t **args, char **kw, int n, int pos, const char *name)
{
    int p = 0;
    for (int i = 0; i < n; i++) {
        if (kw && kw[i]) {
            if (name && !strcmp(kw[i], name))
                return args[i];
        } else if (p++ == pos) {
            return args[i];
        }
    }
    return NULL;
}

static bool is_ws_char(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

/* Python str.strip/lstrip/rstrip: chars = NULL strips whitespace. */
static json_t *strip(struct jctx *c, json_t *s, json_t *chars, bool left, bool right)
{
    if (chars && !json_is_null(chars) && !json_is_string(chars))
        return jinja_err(c, ERR_INVALID, "strip characters must be a string");
    const char *p = json_string_value(s);
    size_t a = 0, b = json_string_length(s);
    const char *set = chars && json_is_string(chars) ? json_string_value(chars) : NULL;
    size_t setn = set ? json_string_length(chars) : 0;
    /* byte-wise: chat templates strip ASCII (newlines, spaces) */
#define STRIPPABLE(ch) (set ? memchr(set, (ch), setn) != NULL : is_ws_char(ch))
    if (left)
        while (a < b && STRIPPABLE(p[a])) a++;
    if (right)
        while (b > a && STRIPPABLE(p[b - 1])) b--;
#undef STRIPPABLE
    return json_stringn_nocheck(p + a, b - a);
}

static bool str_starts(json_t *s, json_t *pre)
{
    size_t n = json_string_length(pre);
    return json_string_length(s) >= n && !memcmp(json_string_value(s), json_string_value(pre), n);
}
static bool str_ends(json_t *s, json_t *suf)
{
    size_t n = json_string_length(suf), l = json_string_length(s);
    return l >= n && !memcmp(json_string_value(s) + l - n, json_string_value(suf), n);
}

static json_t *affix_test(struct jctx *c, json_t *s, json_t *a, bool start)
{
    if (json_is_string(a))
        return json_boolean(start ? str_starts(s, a) : str_ends(s, a));
    if (json_is_array(a)) { /* a tuple of alternatives */
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) if (json_is_string(x) && (start ? str_starts(s, x) : str_ends(s, x))) return json_true();
        return json_false();
    }
    return jinja_err(c, ERR_INVALID, "%s() takes a string or a tuple of strings", start ? "startswith" : "endswith");
}

static json_t *split(struct jctx *c, json_t *s, json_t *sep, json_t *maxsplit)
{
    long long max = maxsplit && json_is_integer(maxsplit) ? json_integer_value(maxsplit) : -1;
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    json_t *r = json_array();
    if (!r)
        return jinja_err(c, ERR_NOMEM, "out of memory");
    if (!sep || json_is_null(sep)) { /* runs of whitespace, no empty parts */
        size_t i = 0;
        while (i < n) {
            while (i < n && is_ws_char(p[i])) i++;
            if (i >= n)
                break;
            size_t j = i;
            if (max >= 0 && (long long)json_array_size(r) == max) {
                j = n;
                while (j > i && is_ws_char(p[j - 1])) j--;
            } else {
                while (j < n && !is_ws_char(p[j])) j++;
            }
            json_array_append_new(r, json_stringn_nocheck(p + i, j - i));
            i = j;
        }
        return r;
    }
    if (!json_is_string(sep))
        return json_decref(r), jinja_err(c, ERR_INVALID, "split() separator must be a string");
    size_t sl = json_string_length(sep);
    if (!sl)
        return json_decref(r), jinja_err(c, ERR_INVALID, "empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = max >= 0 && (long long)json_array_size(r) >= max ? NULL
                        : memmem(p + i, n - i, json_string_value(sep), sl);
        if (!hit) {
            json_array_append_new(r, json_stringn_nocheck(p + i, n - i));
            break;
        }
        json_array_append_new(r, json_stringn_nocheck(p + i, (size_t)(hit - (p + i))));
        i = (size_t)(hit - p) + sl;
    }
    return r;
}

static json_t *replace(struct jctx *c, json_t *s, json_t *from, json_t *to, json_t *count)
{
    if (!json_is_string(from) || !json_is_string(to))
        return jinja_err(c, ERR_INVALID, "replace() takes two strings");
    long long max = count && json_is_integer(count) ? json_integer_value(count) : -1;
    const char *p = json_string_value(s);
    size_t n = json_string_length(s), fl = json_string_length(from), i = 0;
    struct jbuf b = {0};
    long long done = 0;
    if (!fl) { /* Python inserts `to` between every character */
        return jinja_err(c, ERR_UNSUPPORTED, "replace() with an empty pattern is not supported");
    }
    while (i <= n) {
        const char *hit = max >= 0 && done >= max ? NULL : memmem(p + i, n - i, json_string_value(from), fl);
        if (!hit) {
            jinja_buf_put(&b, p + i, n - i);
            break;
        }
        jinja_buf_put(&b, p + i, (size_t)(hit - (p + i)));
        jinja_buf_put(&b, json_string_value(to), json_string_length(to));
        i = (size_t)(hit - p) + fl;
        done++;
    }
    json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

static json_t *change_case(json_t *s, int mode /* 'u' 'l' 't' 'c' */)
{
    size_t n = json_string_length(s);
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, json_string_value(s), n);
    bool word_start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x80) { word_start = false; continue; }
        if (mode == 'u') p[i] = (char)toupper(ch);
        else if (mode == 'l') p[i] = (char)tolower(ch);
        else if (mode == 't') { p[i] = (char)(word_start ? toupper(ch) : tolower(ch)); word_start = !isalpha(ch); }
        else if (mode == 'c') p[i] = (char)(i == 0 ? toupper(ch) : tolower(ch));
    }
    json_t *r = json_stringn_nocheck(p, n);
    free(p);
    return r;
}

static json_t *items_of(json_t *o)
{
    json_t *r = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!strcmp(k, NS_MARK))
            continue;
        json_array_append_new(r, json_pack("[sO]", k, v));
    }
    return r;
}

/* attribute path "a.b" of an item, for map/selectattr/sort/groupby */
static json_t *get_attr_path(json_t *x, const char *path)
{
    char part[128];
    while (x && *path) {
        const char *dot = strchr(path, '.');
        size_t l = dot ? (size_t)(dot - path) : strlen(path);
        if (l >= sizeof part)
            return NULL;
        memcpy(part, path, l);
        part[l] = 0;
        if (json_is_object(x))
            x = json_object_get(x, part);
        else if (json_is_array(x) && isdigit((unsigned char)part[0]))
            x = json_array_get(x, strtoul(part, NULL, 10));
        else
            x = NULL;
        path += l + (dot ? 1 : 0);
    }
    return x;
}

static json_t *as_list(struct jctx *c, json_t *v)
{
    if (json_is_array(v))
        return json_incref(v);
    if (json_is_object(v)) {
        json_t *r = json_array();
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) if (strcmp(k, NS_MARK)) json_array_append_new(r, json_string(k));
        return r;
    }
    if (json_is_string(v)) {
        json_t *one = json_integer(1), *r = json_array();
        size_t len = jinja_utf8_len(json_string_value(v), json_string_length(v));
        for (size_t i = 0; i < len; i++) {
            json_t *a = json_integer((json_int_t)i), *b = json_integer((json_int_t)i + 1);
            json_array_append_new(r, jinja_builtin_slice(c, v, a, b, one));
            json_decref(a);
            json_decref(b);
        }
        json_decref(one);
        return r;
    }
    if (!v)
        return json_array();
    return jinja_err(c, ERR_INVALID, "%s is not iterable", jinja_value_type(v));
}

static int sort_cmp_c(const json_t *a, const json_t *b)
{
    if ((json_is_integer(a) || json_is_real(a)) && (json_is_integer(b) || json_is_real(b))) {
        double x = json_is_integer(a) ? (double)json_integer_value(a) : json_real_value(a);
        double y = json_is_integer(b) ? (double)json_integer_value(b) : json_real_value(b);
        return x < y ? -1 : x > y;
    }
    if (json_is_string(a) && json_is_string(b))
        return strcmp(json_string_value(a), json_string_value(b));
    return (int)json_typeof(a) - (int)json_typeof(b);
}

struct sort_item {
    json_t *key, *val;
    size_t idx;
    bool rev;
};
static int sort_item_cmp(const void *pa, const void *pb)
{
    const struct sort_item *a = pa, *b = pb;
    int r = sort_cmp_c(a->key, b->key);
    if (a->rev)
        r = -r;
    return r ? r : (a->idx < b->idx ? -1 : 1); /* stable */
}

/* printf-style formatting as Python's str % (s, d, i, f, r, x, %) */
json_t *jinja_builtin_percent_format(struct jctx *c, json_t *fmt, json_t *args)
{
    const char *f = json_string_value(fmt);
    size_t n = json_string_length(fmt), ai = 0;
    struct jbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (f[i] != '%') {
            jinja_buf_put(&b, f + i, 1);
            continue;
        }
        if (++i >= n) {
            free(b.p);
            return jinja_err(c, ERR_INVALID, "incomplete format");
        }
        /* flags/width/precision: kept for numbers, e.g. %.2f, %05d */
        char spec[32] = "%";
        size_t sl = 1;
        while (i < n && strchr("-+ #0123456789.", f[i]) && sl < sizeof spec - 4)
            spec[sl++] = f[i++];
        if (i >= n) {
            free(b.p);
            return jinja_err(c, ERR_INVALID, "incomplete format");
        }
        char conv = f[i];
        if (conv == '%') {
            jinja_buf_put(&b, "%", 1);
            continue;
        }
        json_t *a = json_is_array(args) ? json_array_get(args, ai) : ai == 0 ? args : NULL;
        ai++;
        if (!a) {
            free(b.p);
            return jinja_err(c, ERR_INVALID, "not enough arguments for format string");
        }
        char num[128];
        if (conv == 's') {
            if (jinja_value_str(c, a, &b))
                break;
        } else if (conv == 'r') {
            if (jinja_value_repr(c, a, &b))
                break;
        } else if (strchr("dixXf", conv) && (json_is_integer(a) || json_is_real(a))) {
            double d = json_is_integer(a) ? (double)json_integer_value(a) : json_real_value(a);
            if (conv == 'f') {
                spec[sl++] = 'f';
                spec[sl] = 0;
                snprintf(num, sizeof num, spec, d);
            } else {
                spec[sl++] = 'l';
                spec[sl++] = 'l';
                spec[sl++] = conv == 'i' ? 'd' : conv;
                spec[sl] = 0;
                snprintf(num, sizeof num, spec, (long long)d);
            }
            jinja_buf_puts(&b, num);
        } else {
            free(b.p);
            return jinja_err(c, ERR_UNSUPPORTED, "unsupported format '%%%c' for %s", conv, jinja_value_type(a));
        }
    }
    if (jinja_failed(c)) {
        free(b.p);
        return NULL;
    }
    json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

/* ---------------------------------------------------------------- tests */

json_t *jinja_builtin_test(struct jctx *c, const char *name, json_t *v, json_t **args, int n)
{
    json_t *a0 = n > 0 ? args[0] : NULL;
    bool r;
    if (!strcmp(name, "defined")) r = v != NULL;
    else if (!strcmp(name, "undefined")) r = v == NULL;
    else if (!strcmp(name, "none")) r = v && json_is_null(v);
    else if (!strcmp(name, "string")) r = json_is_string(v);
    else if (!strcmp(name, "number")) r = json_is_integer(v) || json_is_real(v);
    else if (!strcmp(name, "integer")) r = json_is_integer(v);
    else if (!strcmp(name, "float")) r = json_is_real(v);
    else if (!strcmp(name, "boolean")) r = json_is_boolean(v);
    else if (!strcmp(name, "true")) r = json_is_true(v);
    else if (!strcmp(name, "false")) r = json_is_false(v);
    else if (!strcmp(name, "mapping")) r = json_is_object(v);
    else if (!strcmp(name, "sequence") || !strcmp(name, "iterable")) r = json_is_array(v) || json_is_string(v) || json_is_object(v);
    else if (!strcmp(name, "callable")) r = false;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (!json_is_string(v)) return jinja_err(c, ERR_INVALID, "'%s' test needs a string", name);
        json_t *t = change_case(v, name[0] == 'l' ? 'l' : 'u');
        r = t && json_equal(t, v);
        json_decref(t);
    } else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (!json_is_integer(v)) return jinja_err(c, ERR_INVALID, "'%s' test needs an integer", name);
        r = (json_integer_value(v) % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (!json_is_integer(v) || !json_is_integer(a0) || !json_integer_value(a0))
            return jinja_err(c, ERR_INVALID, "'divisibleby' needs nonzero integers");
        r = json_integer_value(v) % json_integer_value(a0) == 0;
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") || !strcmp(name, "sameas")) r = jinja_value_equal(v, a0);
    else if (!strcmp(name, "ne") || !strcmp(name, "!=")) r = !jinja_value_equal(v, a0);
    else if (!strcmp(name, "in")) {
        if (json_is_string(a0) && json_is_string(v))
            r = memmem(json_string_value(a0), json_string_length(a0), json_string_value(v), json_string_length(v)) != NULL;
        else if (json_is_array(a0)) {
            size_t i;
            json_t *x;
            r = false;
            json_array_foreach(a0, i, x) if (jinja_value_equal(x, v)) r = true;
        } else if (json_is_object(a0)) r = json_is_string(v) && json_object_get(a0, json_string_value(v));
        else return jinja_err(c, ERR_INVALID, "'in' test needs a container");
    } else if (!strcmp(name, "lt") || !strcmp(name, "gt") || !strcmp(name, "le") || !strcmp(name, "ge")) {
        if (!v || !a0) return jinja_err(c, ERR_INVALID, "'%s' test on undefined", name);
        int k = sort_cmp_c(v, a0);
        r = name[0] == 'l' ? (name[1] == 't' ? k < 0 : k <= 0) : (name[1] == 't' ? k > 0 : k >= 0);
    } else
        return jinja_err(c, ERR_UNSUPPORTED, "unsupported test '%s'", name);
    return json_boolean(r);
}

/* ---------------------------------------------------------------- filters */

static json_t *select_items(struct jctx *c, json_t *v, json_t **args, int n, bool by_attr, bool keep)
{
    json_t *list = as_list(c, v);
    if (!list)
        return NULL;
    int a = 0;
    const char *attr = NULL;
    if (by_attr) {
        if (n < 1 || !json_is_string(args[0]))
            return json_decref(list), jinja_err(c, ERR_INVALID, "%sattr needs an attribute name", keep ? "select" : "reject");
        attr = json_string_value(args[0]);
        a = 1;
    }
    const char *test = n > a && json_is_string(args[a]) ? json_string_value(args[a]) : NULL;
    json_t *r = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x) {
        json_t *val = attr ? get_attr_path(x, attr) : x;
        bool t;
        if (test) {
            json_t *tr = jinja_builtin_test(c, test, val, args + a + 1, n - a - 1);
            if (!tr)
                break;
            t = json_is_true(tr);
            json_decref(tr);
        } else {
            t = jinja_value_truthy(val);
        }
        if (t == keep)
            json_array_append(r, x);
    }
    json_decref(list);
    if (jinja_failed(c))
        return json_decref(r), NULL;
    return r;
}

json_t *jinja_builtin_filter(struct jctx *c, const char *name, json_t *v, json_t **args, char **kw, int n)
{
    json_t *a0 = arg(args, kw, n, 0, NULL);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        json_t *dv = arg(args, kw, n, 0, "default_value");
        json_t *boolean = arg(args, kw, n, 1, "boolean");
        bool use = !v || (jinja_value_truthy(boolean) && !jinja_value_truthy(v));
        return use ? (dv ? json_incref(dv) : json_string("")) : json_incref(v);
    }
    if (!v && strcmp(name, "tojson") && strcmp(name, "string") && strcmp(name, "length") && strcmp(name, "list"))
        return jinja_err(c, ERR_INVALID, "filter '%s' applied to an undefined value", name);
    if (!strcmp(name, "tojson")) {
        json_t *ind = arg(args, kw, n, 0, "indent");
        json_t *seps = arg(args, kw, n, -1, "separators");
        json_t *ascii = arg(args, kw, n, -1, "ensure_ascii");
        json_t *sort = arg(args, kw, n, -1, "sort_keys");
        struct json_style st = {-1, ", ", ": ", jinja_value_truthy(ascii), jinja_value_truthy(sort)};
        if (ind && json_is_integer(ind)) {
            st.indent = (int)clampi(json_integer_value(ind), 0, 64);
            st.item_sep = ",";
        }
        if (json_is_array(seps) && json_array_size(seps) == 2 && json_is_string(json_array_get(seps, 0)) &&
            json_is_string(json_array_get(seps, 1))) {
            st.item_sep = json_string_value(json_array_get(seps, 0));
            st.key_sep = json_string_value(json_array_get(seps, 1));
        }
        struct jbuf b = {0};
        if (dump_json(c, v, &b, &st, 0))
            return free(b.p), jinja_err(c, ERR_NOMEM, "out of memory");
        json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(name, "string"))
        return to_string(c, v);
    if (!strcmp(name, "format")) {
        if (!json_is_string(v))
            return jinja_err(c, ERR_INVALID, "'format' needs a format string");
        json_t *list = json_array();
        for (int i = 0; i < n; i++)
            if (!kw || !kw[i])
                json_array_append(list, args[i] ? args[i] : json_null());
        json_t *r = jinja_builtin_percent_format(c, v, list);
        json_decref(list);
        return r;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (json_is_string(v)) return json_integer((json_int_t)jinja_utf8_len(json_string_value(v), json_string_length(v)));
        if (json_is_array(v)) return json_integer((json_int_t)json_array_size(v));
        if (json_is_object(v)) return json_integer((json_int_t)json_object_size(v) - (json_object_get(v, NS_MARK) ? 1 : 0));
        if (!v) return json_integer(0);
        return jinja_err(c, ERR_INVALID, "%s has no length", jinja_value_type(v));
    }
    if (!strcmp(name, "list"))
        return as_list(c, v);
    if (!strcmp(name, "trim") || !strcmp(name, "strip")) {
        if (!json_is_string(v)) return jinja_err(c, ERR_INVALID, "'%s' needs a string, not %s", name, jinja_value_type(v));
        return strip(c, v, a0, true, true);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        json_t *s = json_is_string(v) ? json_incref(v) : to_string(c, v);
        json_t *r = s ? change_case(s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c') : NULL;
        json_decref(s);
        return r;
    }
    if (!strcmp(name, "replace")) {
        if (!json_is_string(v)) return jinja_err(c, ERR_INVALID, "'replace' needs a string");
        return replace(c, v, a0, arg(args, kw, n, 1, NULL), arg(args, kw, n, 2, "count"));
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        size_t len = json_array_size(l);
        json_t *r = len ? json_incref(json_array_get(l, name[0] == 'f' ? 0 : len - 1)) : NULL;
        json_decref(l);
        return r;
    }
    if (!strcmp(name, "reverse")) {
        json_t *m1 = json_integer(-1);
        json_t *r = json_is_string(v) || json_is_array(v) ? jinja_builtin_slice(c, v, NULL, NULL, m1) : NULL;
        json_decref(m1);
        if (!r && !jinja_failed(c)) {
            json_t *l = as_list(c, v);
            m1 = json_integer(-1);
            r = l ? jinja_builtin_slice(c, l, NULL, NULL, m1) : NULL;
            json_decref(m1);
            json_decref(l);
        }
        return r;
    }
    if (!strcmp(name, "join")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        json_t *sep = arg(args, kw, n, 0, "d");
        json_t *attr = arg(args, kw, n, 1, "attribute");
        struct jbuf b = {0};
        size_t i;
        json_t *x;
        json_array_foreach(l, i, x) {
            if (i && json_is_string(sep)) jinja_buf_put(&b, json_string_value(sep), json_string_length(sep));
            if (jinja_value_str(c, json_is_string(attr) ? get_attr_path(x, json_string_value(attr)) : x, &b)) break;
        }
        json_decref(l);
        json_t *r = jinja_failed(c) ? NULL : json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(name, "items")) {
        if (!json_is_object(v)) return jinja_err(c, ERR_INVALID, "'items' needs a dict");
        return items_of(v);
    }
    if (!strcmp(name, "dictsort")) {
        if (!json_is_object(v)) return jinja_err(c, ERR_INVALID, "'dictsort' needs a dict");
        json_t *it = items_of(v);
        size_t len = json_array_size(it);
        struct sort_item *s = calloc(len ? len : 1, sizeof *s);
        for (size_t i = 0; s && i < len; i++)
            s[i] = (struct sort_item){json_array_get(json_array_get(it, i), 0), json_array_get(it, i), i, false};
        if (s) qsort(s, len, sizeof *s, sort_item_cmp);
        json_t *r = json_array();
        for (size_t i = 0; s && i < len; i++) json_array_append(r, s[i].val);
        free(s);
        json_decref(it);
        return r;
    }
    if (!strcmp(name, "sort")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        json_t *rev = arg(args, kw, n, 0, "reverse");
        json_t *attr = arg(args, kw, n, 2, "attribute");
        size_t len = json_array_size(l);
        struct sort_item *s = calloc(len ? len : 1, sizeof *s);
        for (size_t i = 0; s && i < len; i++) {
            json_t *x = json_array_get(l, i);
            s[i] = (struct sort_item){json_is_string(attr) ? get_attr_path(x, json_string_value(attr)) : x, x, i, jinja_value_truthy(rev)};
        }
        if (s) qsort(s, len, sizeof *s, sort_item_cmp);
        json_t *r = json_array();
        for (size_t i = 0; s && i < len; i++) json_array_append(r, s[i].val);
        free(s);
        json_decref(l);
        return r;
    }
    if (!strcmp(name, "unique")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        json_t *r = json_array();
        size_t i, j;
        json_t *x, *y;
        json_array_foreach(l, i, x) {
            bool seen = false;
            json_array_foreach(r, j, y) if (jinja_value_equal(x, y)) seen = true;
            if (!seen) json_array_append(r, x);
        }
        json_decref(l);
        return r;
    }
    if (!strcmp(name, "map")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        json_t *attr = arg(args, kw, n, -1, "attribute");
        json_t *dflt = arg(args, kw, n, -1, "default");
        json_t *r = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(l, i, x) {
            json_t *y;
            if (json_is_string(attr)) {
                y = json_incref(get_attr_path(x, json_string_value(attr)));
                if (!y && dflt) y = json_incref(dflt);
            } else if (json_is_string(a0)) {
                /* map('filter', args…): positional args after the filter name */
                int rest = 0;
                json_t **fa = NULL;
                char **fk = NULL;
                for (int k = 0; k < n; k++) if (!kw || !kw[k]) rest++;
                rest--;
                if (rest > 0) {
                    fa = calloc((size_t)rest, sizeof *fa);
                    for (int k = 0, p = 0; fa && k < n; k++)
                        if (!kw || !kw[k]) { if (p > 0) fa[p - 1] = args[k]; p++; }
                }
                y = jinja_builtin_filter(c, json_string_value(a0), x, fa, fk, rest > 0 ? rest : 0);
                free(fa);
            } else {
                json_decref(r);
                json_decref(l);
                return jinja_err(c, ERR_INVALID, "'map' needs a filter name or attribute=");
            }
            if (jinja_failed(c)) break;
            json_array_append_new(r, y ? y : json_null());
        }
        json_decref(l);
        return jinja_failed(c) ? (json_decref(r), NULL) : r;
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(c, v, args, n, false, name[0] == 's');
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(c, v, args, n, true, name[0] == 's');
    if (!strcmp(name, "int")) {
        if (json_is_integer(v)) return json_incref(v);
        if (json_is_real(v)) return json_integer((json_int_t)json_real_value(v));
        if (json_is_boolean(v)) return json_integer(json_is_true(v));
        if (json_is_string(v)) {
            char *end;
            long long x = strtoll(json_string_value(v), &end, 10);
            return json_integer(*end ? (a0 && json_is_integer(a0) ? json_integer_value(a0) : 0) : x);
        }
        return json_integer(0);
    }
    if (!strcmp(name, "float")) {
        if (json_is_integer(v) || json_is_real(v)) return json_real(json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v));
        if (json_is_string(v)) return json_real(strtod(json_string_value(v), NULL));
        return json_real(0);
    }
    if (!strcmp(name, "abs")) {
        if (json_is_integer(v)) return json_integer(llabs(json_integer_value(v)));
        if (json_is_real(v)) return json_real(fabs(json_real_value(v)));
        return jinja_err(c, ERR_INVALID, "'abs' needs a number");
    }
    if (!strcmp(name, "round")) {
        double x = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
        if (isnan(x)) return jinja_err(c, ERR_INVALID, "'round' needs a number");
        long long prec = a0 && json_is_integer(a0) ? json_integer_value(a0) : 0;
        double m = pow(10, (double)prec);
        return json_real(round(x * m) / m);
    }
    if (!strcmp(name, "indent")) {
        if (!json_is_string(v)) return jinja_err(c, ERR_INVALID, "'indent' needs a string");
        json_t *w = arg(args, kw, n, 0, "width");
        json_t *first = arg(args, kw, n, 1, "first");
        json_t *blank = arg(args, kw, n, 2, "blank");
        struct jbuf pad = {0}, b = {0};
        if (json_is_string(w)) jinja_buf_put(&pad, json_string_value(w), json_string_length(w));
        else for (long long i = 0; i < (json_is_integer(w) ? json_integer_value(w) : 4) && i < 256; i++) jinja_buf_put(&pad, " ", 1);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v), i = 0;
        bool first_line = true;
        while (i <= len) {
            const char *nl = memchr(s + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - s) : len;
            bool empty = e == i;
            if ((!first_line || jinja_value_truthy(first)) && (!empty || jinja_value_truthy(blank)) && pad.p)
                jinja_buf_put(&b, pad.p, pad.n);
            jinja_buf_put(&b, s + i, e - i);
            if (!nl) break;
            jinja_buf_put(&b, "\n", 1);
            i = e + 1;
            first_line = false;
        }
        json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
        free(pad.p);
        return r;
    }
    if (!strcmp(name, "safe") || !strcmp(name, "e") || !strcmp(name, "escape")) {
        if (name[0] == 's') return json_incref(v);
        json_t *s = json_is_string(v) ? json_incref(v) : to_string(c, v);
        if (!s) return NULL;
        struct jbuf b = {0};
        for (size_t i = 0; i < json_string_length(s); i++) {
            char ch = json_string_value(s)[i];
            const char *rep = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
            if (rep) jinja_buf_puts(&b, rep);
            else jinja_buf_put(&b, &ch, 1);
        }
        json_decref(s);
        json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(name, "sum")) {
        json_t *l = as_list(c, v);
        if (!l) return NULL;
        double tot = 0;
        bool real = false;
        size_t i;
        json_t *x;
        json_array_foreach(l, i, x) {
            if (json_is_real(x)) real = true;
            else if (!json_is_integer(x)) { json_decref(l); return jinja_err(c, ERR_INVALID, "'sum' needs numbers"); }
            tot += json_is_real(x) ? json_real_value(x) : (double)json_integer_value(x);
        }
        json_decref(l);
        return real ? json_real(tot) : json_integer((json_int_t)tot);
    }
    if (!strcmp(name, "wordcount")) {
        if (!json_is_string(v)) return jinja_err(c, ERR_INVALID, "'wordcount' needs a string");
        json_t *parts = split(c, v, NULL, NULL);
        json_t *r = parts ? json_integer((json_int_t)json_array_size(parts)) : NULL;
        json_decref(parts);
        return r;
    }
    return jinja_err(c, ERR_UNSUPPORTED, "unsupported filter '%s'", name);
}

/* ---------------------------------------------------------------- methods */

json_t *jinja_builtin_method(struct jctx *c, json_t *obj, const char *name, json_t **args, char **kw, int n)
{
    json_t *a0 = arg(args, kw, n, 0, NULL), *a1 = arg(args, kw, n, 1, NULL);
    if (json_is_string(obj)) {
        if (!strcmp(name, "strip")) return strip(c, obj, a0, true, true);
        if (!strcmp(name, "lstrip")) return strip(c, obj, a0, true, false);
        if (!strcmp(name, "rstrip")) return strip(c, obj, a0, false, true);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (!a0) return jinja_err(c, ERR_INVALID, "%s() needs an argument", name);
            return affix_test(c, obj, a0, name[0] == 's');
        }
        if (!strcmp(name, "split")) return split(c, obj, arg(args, kw, n, 0, "sep"), arg(args, kw, n, 1, "maxsplit"));
        if (!strcmp(name, "upper")) return change_case(obj, 'u');
        if (!strcmp(name, "lower")) return change_case(obj, 'l');
        if (!strcmp(name, "title")) return change_case(obj, 't');
        if (!strcmp(name, "capitalize")) return change_case(obj, 'c');
        if (!strcmp(name, "replace")) return replace(c, obj, a0, a1, arg(args, kw, n, 2, "count"));
        if (!strcmp(name, "find") || !strcmp(name, "index") || !strcmp(name, "count")) {
            if (!json_is_string(a0)) return jinja_err(c, ERR_INVALID, "%s() needs a string", name);
            const char *s = json_string_value(obj), *p = json_string_value(a0);
            size_t sl = json_string_length(obj), pl = json_string_length(a0);
            if (name[0] == 'c') {
                long long cnt = 0;
                for (size_t i = 0; pl && i + pl <= sl;) {
                    const char *h = memmem(s + i, sl - i, p, pl);
                    if (!h) break;
                    cnt++;
                    i = (size_t)(h - s) + pl;
                }
                return json_integer(pl ? cnt : (json_int_t)jinja_utf8_len(s, sl) + 1);
            }
            const char *h = memmem(s, sl, p, pl);
            if (!h && name[0] == 'i') return jinja_err(c, ERR_INVALID, "substring not found");
            return json_integer(h ? (json_int_t)jinja_utf8_len(s, (size_t)(h - s)) : -1);
        }
        if (!strcmp(name, "join")) {
            json_t *l = as_list(c, a0);
            if (!l) return NULL;
            struct jbuf b = {0};
            size_t i;
            json_t *x;
            json_array_foreach(l, i, x) {
                if (!json_is_string(x)) { json_decref(l); free(b.p); return jinja_err(c, ERR_INVALID, "join() needs strings"); }
                if (i) jinja_buf_put(&b, json_string_value(obj), json_string_length(obj));
                jinja_buf_put(&b, json_string_value(x), json_string_length(x));
            }
            json_decref(l);
            json_t *r = json_stringn_nocheck(b.p ? b.p : "", b.n);
            free(b.p);
            return r;
        }
        if (!strcmp(name, "isdigit") || !strcmp(name, "isalpha") || !strcmp(name, "isspace")) {
            const char *s = json_string_value(obj);
            size_t l = json_string_length(obj);
            bool ok = l > 0;
            for (size_t i = 0; i < l; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (!(name[2] == 'd' ? isdigit(ch) : name[2] == 'a' ? isalpha(ch) : is_ws_char((char)ch))) ok = false;
            }
            return json_boolean(ok);
        }
        if (!strcmp(name, "format"))
            return jinja_err(c, ERR_UNSUPPORTED, "str.format() is not supported");
    } else if (json_is_object(obj)) {
        if (!strcmp(name, "items")) return items_of(obj);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            json_t *r = json_array();
            const char *k;
            json_t *v;
            json_object_foreach(obj, k, v) {
                if (!strcmp(k, NS_MARK)) continue;
                json_array_append_new(r, name[0] == 'k' ? json_string(k) : json_incref(v));
            }
            return r;
        }
        if (!strcmp(name, "get")) {
            json_t *v = json_is_string(a0) ? json_object_get(obj, json_string_value(a0)) : NULL;
            return json_incref(v ? v : a1 ? a1 : json_null());
        }
        if (!strcmp(name, "cycle") && json_is_integer(json_object_get(obj, "index0")) && json_object_get(obj, "revindex")) {
            if (n < 1) /* loop.cycle(a, b, …): the loop object is the only dict with these keys */
                return jinja_err(c, ERR_INVALID, "loop.cycle() needs arguments");
            return json_incref(args[json_integer_value(json_object_get(obj, "index0")) % n]);
        }
    } else if (json_is_array(obj)) {
        if (!strcmp(name, "append")) {
            json_array_append(obj, a0 ? a0 : json_null());
            return json_null();
        }
        if (!strcmp(name, "pop")) {
            size_t len = json_array_size(obj);
            long long i = a0 && json_is_integer(a0) ? json_integer_value(a0) : (long long)len - 1;
            if (i < 0) i += (long long)len;
            if (i < 0 || i >= (long long)len) return jinja_err(c, ERR_INVALID, "pop index out of range");
            json_t *r = json_incref(json_array_get(obj, (size_t)i));
            json_array_remove(obj, (size_t)i);
            return r;
        }
        if (!strcmp(name, "index")) {
            size_t i;
            json_t *x;
            json_array_foreach(obj, i, x) if (jinja_value_equal(x, a0)) return json_integer((json_int_t)i);
            return jinja_err(c, ERR_INVALID, "value not in list");
        }
        if (!strcmp(name, "count")) {
            size_t i, k = 0;
            json_t *x;
            json_array_foreach(obj, i, x) k += jinja_value_equal(x, a0);
            return json_integer((json_int_t)k);
        }
    }
    return jinja_err(c, ERR_UNSUPPORTED, "unsupported method %s.%s()", jinja_value_type(obj), name);
}

/* ---------------------------------------------------------------- globals */

json_t *jinja_builtin_global(struct jctx *c, const char *name, json_t **args, char **kw, int n, bool *found)
{
    *found = true;
    if (!strcmp(name, "raise_exception")) {
        json_t *m = arg(args, kw, n, 0, NULL);
        if (!c->e->code)
            err_set(c->e, ERR_INVALID, "chat template error: %s", json_is_string(m) ? json_string_value(m) : "raise_exception()");
        return NULL;
    }
    if (!strcmp(name, "range")) {
        long long lo = 0, hi, st = 1;
        int pos = 0;
        for (int i = 0; i < n; i++)
            if (!kw || !kw[i]) {
                if (!json_is_integer(args[i])) return jinja_err(c, ERR_INVALID, "range() needs integers");
                pos++;
            }
        if (pos == 1) hi = json_integer_value(args[0]);
        else if (pos >= 2) {
            lo = json_integer_value(args[0]);
            hi = json_integer_value(args[1]);
            if (pos >= 3) st = json_integer_value(args[2]);
        } else return jinja_err(c, ERR_INVALID, "range() needs arguments");
        if (st == 0) return jinja_err(c, ERR_INVALID, "range() step must not be zero");
        if ((hi - lo) / st > 1000000) return jinja_err(c, ERR_RANGE, "range() too long");
        json_t *r = json_array();
        for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) json_array_append_new(r, json_integer(i));
        return r;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *o = json_object();
        if (name[0] == 'n')
            json_object_set_new(o, NS_MARK, json_true());
        for (int i = 0; i < n; i++) {
            if (kw && kw[i]) json_object_set(o, kw[i], args[i] ? args[i] : json_null());
            else if (json_is_object(args[i])) json_object_update(o, args[i]);
            else { json_decref(o); return jinja_err(c, ERR_INVALID, "%s() takes keyword arguments", name); }
        }
        return o;
    }
    if (!strcmp(name, "strftime_now")) {
        json_t *f = arg(args, kw, n, 0, NULL);
        if (!json_is_string(f)) return jinja_err(c, ERR_INVALID, "strftime_now() needs a format string");
        struct tm tm;
        time_t now = c->now;
        localtime_r(&now, &tm);
        char out[256];
        size_t l = strftime(out, sizeof out, json_string_value(f), &tm);
        return json_stringn(out, l);
    }
    *found = false;
    return NULL;
}
