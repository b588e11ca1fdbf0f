/* jinja_eval.c — evaluates a parsed template (jinja.c) over json_t values.
 *
 * An expression evaluates to a new json_t reference, or NULL for Jinja's
 * "undefined" (a missing variable or key); a failure is recorded in the
 * context's err and also yields NULL, so callers check jinja_failed(). Scopes are
 * a stack of objects: [0] the caller's variables (never written), [1] the
 * template's own top level, then one per loop iteration / macro call. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "jinja_internal.h"

#define MAX_MACRO_DEPTH 64

/* ---- scopes ---- */

static json_t *lookup(struct jctx *c, const char *name)
{
    for (int i = c->n_scopes - 1; i >= 0; i--) {
        json_t *v = json_object_get(c->scopes[i], name);
        if (v)
            return json_incref(v);
    }
    return NULL;
}

static int push_scope(struct jctx *c)
{
    if (c->n_scopes == c->cap_scopes) {
        int cap = c->cap_scopes ? c->cap_scopes * 2 : 16;
        json_t **ns = realloc(c->scopes, (size_t)cap * sizeof *ns);
        if (!ns)
            return ERR_NOMEM;
        c->scopes = ns;
        c->cap_scopes = cap;
    }
    json_t *o = json_object();
    if (!o)
        return ERR_NOMEM;
    c->scopes[c->n_scopes++] = o;
    return 0;
}

static void pop_scope(struct jctx *c) { json_decref(c->scopes[--c->n_scopes]); }

static int set_var(struct jctx *c, const char *name, json_t *v /* stolen */)
{
    if (!v) /* assigning undefined: the name becomes undefined */
        return json_object_del(c->scopes[c->n_scopes - 1], name), 0;
    if (json_object_set_new(c->scopes[c->n_scopes - 1], name, v))
        return jinja_err(c, ERR_NOMEM, "out of memory"), ERR_NOMEM;
    return 0;
}

/* ---- arithmetic ---- */

static bool is_num(const json_t *v) { return json_is_integer(v) || json_is_real(v); }
static double num(const json_t *v) { return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v); }

static const char *node_desc(const struct jnode *n)
{
    return n && n->kind == JN_NAME ? n->name : n && n->kind == JN_ATTR ? n->name : "value";
}

static json_t *arith(struct jctx *c, int op, json_t *a, json_t *b, const struct jnode *na, const struct jnode *nb)
{
    if (!a || !b)
        return jinja_err(c, ERR_INVALID, "'%s' is undefined", node_desc(a ? nb : na));
    if (op == OP_ADD && json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        char *s = malloc(la + lb + 1);
        if (!s)
            return jinja_err(c, ERR_NOMEM, "out of memory");
        memcpy(s, json_string_value(a), la);
        memcpy(s + la, json_string_value(b), lb);
        json_t *r = json_stringn_nocheck(s, la + lb);
        free(s);
        return r;
    }
    if (op == OP_ADD && json_is_array(a) && json_is_array(b)) {
        json_t *r = json_copy(a);
        if (!r || json_array_extend(r, b))
            return json_decref(r), jinja_err(c, ERR_NOMEM, "out of memory");
        return r;
    }
    if (op == OP_MUL && ((json_is_string(a) && json_is_integer(b)) || (json_is_integer(a) && json_is_string(b)))) {
        json_t *s = json_is_string(a) ? a : b;
        long long k = json_integer_value(json_is_integer(a) ? a : b);
        size_t l = json_string_length(s);
        if (k < 0)
            k = 0;
        if (l && (size_t)k > c->max_output / l)
            return jinja_err(c, ERR_RANGE, "string repetition too large");
        struct jbuf o = {0};
        for (long long i = 0; i < k; i++)
            if (jinja_buf_put(&o, json_string_value(s), l))
                return free(o.p), jinja_err(c, ERR_NOMEM, "out of memory");
        json_t *r = json_stringn_nocheck(o.p ? o.p : "", o.n);
        free(o.p);
        return r;
    }
    if (op == OP_MOD && json_is_string(a))
        return jinja_builtin_percent_format(c, a, b);
    if (!is_num(a) || !is_num(b) || json_is_boolean(a) || json_is_boolean(b)) {
        static const char *const ops[] = {"", "+", "-", "*", "/", "//", "%", "**"};
        return jinja_err(c, ERR_INVALID, "unsupported operand types for %s: %s and %s", ops[op], jinja_value_type(a), jinja_value_type(b));
    }
    bool ints = json_is_integer(a) && json_is_integer(b);
    if (ints && op != OP_DIV && op != OP_POW) {
        long long x = json_integer_value(a), y = json_integer_value(b);
        if ((op == OP_FLOORDIV || op == OP_MOD) && y == 0)
            return jinja_err(c, ERR_INVALID, "integer division or modulo by zero");
        switch (op) {
        case OP_ADD: return json_integer(x + y);
        case OP_SUB: return json_integer(x - y);
        case OP_MUL: return json_integer(x * y);
        case OP_FLOORDIV: { long long q = x / y; if ((x % y != 0) && ((x < 0) != (y < 0))) q--; return json_integer(q); }
        case OP_MOD: { long long m = x % y; if (m != 0 && ((m < 0) != (y < 0))) m += y; return json_integer(m); }
        }
    }
    double x = num(a), y = num(b);
    switch (op) {
    case OP_ADD: return json_real(x + y);
    case OP_SUB: return json_real(x - y);
    case OP_MUL: return json_real(x * y);
    case OP_DIV:
        if (y == 0)
            return jinja_err(c, ERR_INVALID, "division by zero");
        return json_real(x / y);
    case OP_FLOORDIV:
        if (y == 0)
            return jinja_err(c, ERR_INVALID, "division by zero");
        return json_real(floor(x / y));
    case OP_MOD:
        if (y == 0)
            return jinja_err(c, ERR_INVALID, "modulo by zero");
        return json_real(x - y * floor(x / y));
    case OP_POW:
        if (ints && json_integer_value(b) >= 0) {
            long long r = 1, base = json_integer_value(a);
            for (long long i = 0; i < json_integer_value(b) && i < 64; i++)
                r *= base;
            return json_integer(r);
        }
        return json_real(pow(x, y));
    }
    return jinja_err(c, ERR_INTERNAL, "bad operator");
}

static int compare(struct jctx *c, json_t *a, json_t *b, int *out)
{
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        *out = x < y ? -1 : x > y ? 1 : 0;
        return 0;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int r = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        *out = r ? r : la < lb ? -1 : la > lb ? 1 : 0;
        return 0;
    }
    jinja_err(c, ERR_INVALID, "cannot compare %s with %s", jinja_value_type(a), jinja_value_type(b));
    return ERR_INVALID;
}

/* `a in b` */
static int contains(struct jctx *c, json_t *b, json_t *a, bool *out)
{
    if (json_is_string(b)) {
        if (!json_is_string(a))
            return jinja_err(c, ERR_INVALID, "'in <string>' requires a string on the left, not %s", jinja_value_type(a)), ERR_INVALID;
        *out = memmem(json_string_value(b), json_string_length(b), json_string_value(a), json_string_length(a)) != NULL;
        return 0;
    }
    if (json_is_array(b)) {
        size_t i;
        json_t *x;
        *out = false;
        json_array_foreach(b, i, x) if (jinja_value_equal(x, a)) *out = true;
        return 0;
    }
    if (json_is_object(b)) {
        *out = json_is_string(a) && json_object_get(b, json_string_value(a));
        return 0;
    }
    if (!b) {
        *out = false;
        return 0;
    }
    jinja_err(c, ERR_INVALID, "argument of type %s is not iterable", jinja_value_type(b));
    return ERR_INVALID;
}

static json_t *eval(struct jctx *c, const struct jnode *n);

/* Evaluate the argument list of a call/filter/test into args[] (owned). */
static int eval_args(struct jctx *c, const struct jnode *n, json_t ***args)
{
    *args = NULL;
    if (!n->n_kids)
        return 0;
    json_t **a = calloc((size_t)n->n_kids, sizeof *a);
    if (!a)
        return jinja_err(c, ERR_NOMEM, "out of memory"), ERR_NOMEM;
    for (int i = 0; i < n->n_kids; i++) {
        a[i] = n->kids[i] ? eval(c, n->kids[i]) : NULL;
        if (jinja_failed(c)) {
            for (int j = 0; j <= i; j++)
                json_decref(a[j]);
            free(a);
            return c->e->code;
        }
    }
    *args = a;
    return 0;
}

static void free_args(json_t **a, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(a[i]);
    free(a);
}

static int exec(struct jctx *c, const struct jnode *n);

static const struct jnode *find_macro(struct jctx *c, const char *name)
{
    for (int i = c->n_macros - 1; i >= 0; i--)
        if (!strcmp(c->macros[i].name, name))
            return c->macros[i].node;
    return NULL;
}

static json_t *call_macro(struct jctx *c, const struct jnode *m, json_t **args, char **kw, int n)
{
    if (c->depth >= MAX_MACRO_DEPTH)
        return jinja_err(c, ERR_RANGE, "macro calls nested deeper than %d", MAX_MACRO_DEPTH);
    if (++c->steps > c->max_steps)
        return jinja_err(c, ERR_RANGE, "the template runs too long (more than %lld loop steps)", c->max_steps);
    if (push_scope(c))
        return jinja_err(c, ERR_NOMEM, "out of memory");
    int pos = 0;
    for (int i = 0; i < n; i++) {
        int slot = -1;
        if (kw && kw[i]) {
            for (int k = 0; k < m->n_names; k++)
                if (!strcmp(m->names[k], kw[i]))
                    slot = k;
            if (slot < 0) {
                pop_scope(c);
                return jinja_err(c, ERR_INVALID, "macro '%s' has no parameter '%s'", m->name, kw[i]);
            }
        } else {
            slot = pos++;
            if (slot >= m->n_names) {
                pop_scope(c);
                return jinja_err(c, ERR_INVALID, "macro '%s' takes %d arguments", m->name, m->n_names);
            }
        }
        if (args[i])
            set_var(c, m->names[slot], json_incref(args[i]));
    }
    for (int k = 0; k < m->n_names; k++)
        if (!json_object_get(c->scopes[c->n_scopes - 1], m->names[k]) && m->kids[k]) {
            json_t *d = eval(c, m->kids[k]);
            if (jinja_failed(c))
                break;
            set_var(c, m->names[k], d);
        }
    /* the macro's output is its return value, rendered into its own buffer */
    struct jbuf saved = c->out;
    memset(&c->out, 0, sizeof c->out);
    c->depth++;
    if (!jinja_failed(c))
        exec(c, m->b);
    c->depth--;
    struct jbuf mine = c->out;
    c->out = saved;
    pop_scope(c);
    json_t *r = jinja_failed(c) ? NULL : json_stringn_nocheck(mine.p ? mine.p : "", mine.n);
    free(mine.p);
    return r;
}

static json_t *eval_call(struct jctx *c, const struct jnode *n)
{
    json_t **args;
    if (eval_args(c, n, &args))
        return NULL;
    json_t *r = NULL;
    const struct jnode *f = n->a;
    if (f->kind == JN_NAME) {
        const struct jnode *m = find_macro(c, f->name);
        bool found = false;
        if (m) {
            r = call_macro(c, m, args, n->kw, n->n_kids);
        } else {
            r = jinja_builtin_global(c, f->name, args, n->kw, n->n_kids, &found);
            if (!found && !jinja_failed(c)) {
                json_t *v = lookup(c, f->name);
                jinja_err(c, v ? ERR_INVALID : ERR_UNSUPPORTED, v ? "'%s' is not callable" : "unknown function '%s'", f->name);
                json_decref(v);
            }
        }
    } else if (f->kind == JN_ATTR) {
        json_t *obj = eval(c, f->a);
        if (!jinja_failed(c)) {
            if (!obj)
                jinja_err(c, ERR_INVALID, "'%s' is undefined (calling its %s method)", node_desc(f->a), f->name);
            else
                r = jinja_builtin_method(c, obj, f->name, args, n->kw, n->n_kids);
        }
        json_decref(obj);
    } else {
        jinja_err(c, ERR_UNSUPPORTED, "calling this kind of expression is not supported");
    }
    free_args(args, n->n_kids);
    return jinja_failed(c) ? (json_decref(r), NULL) : r;
}

static json_t *eval(struct jctx *c, const struct jnode *n)
{
    if (jinja_failed(c))
        return NULL;
    c->line = n->line;
    switch (n->kind) {
    case JN_LIT:
        return json_incref(n->lit);
    case JN_NAME:
        return lookup(c, n->name);
    case JN_LIST: {
        json_t *r = json_array();
        for (int i = 0; r && i < n->n_kids; i++) {
            json_t *v = eval(c, n->kids[i]);
            if (jinja_failed(c))
                return json_decref(r), NULL;
            json_array_append_new(r, v ? v : json_null());
        }
        return r ? r : jinja_err(c, ERR_NOMEM, "out of memory");
    }
    case JN_DICT: {
        json_t *r = json_object();
        for (int i = 0; r && i + 1 < n->n_kids; i += 2) {
            json_t *k = eval(c, n->kids[i]);
            json_t *v = jinja_failed(c) ? NULL : eval(c, n->kids[i + 1]);
            if (!jinja_failed(c) && !json_is_string(k))
                jinja_err(c, ERR_UNSUPPORTED, "dict keys must be strings, not %s", jinja_value_type(k));
            if (jinja_failed(c)) {
                json_decref(k);
                json_decref(v);
                return json_decref(r), NULL;
            }
            json_object_setn_new_nocheck(r, json_string_value(k), json_string_length(k), v ? v : json_null());
            json_decref(k);
        }
        return r ? r : jinja_err(c, ERR_NOMEM, "out of memory");
    }
    case JN_ATTR: {
        json_t *o = eval(c, n->a);
        if (jinja_failed(c))
            return NULL;
        if (!o)
            return jinja_err(c, ERR_INVALID, "'%s' is undefined (reading its attribute '%s')", node_desc(n->a), n->name);
        json_t *r = json_is_object(o) ? json_incref(json_object_get(o, n->name)) : NULL;
        json_decref(o);
        return r;
    }
    case JN_INDEX: {
        json_t *o = eval(c, n->a);
        json_t *k = jinja_failed(c) ? NULL : eval(c, n->b);
        json_t *r = NULL;
        if (jinja_failed(c)) {
        } else if (!o) {
            jinja_err(c, ERR_INVALID, "'%s' is undefined (indexing it)", node_desc(n->a));
        } else if (json_is_object(o) && json_is_string(k)) {
            r = json_incref(json_object_get(o, json_string_value(k)));
        } else if ((json_is_array(o) || json_is_string(o)) && json_is_integer(k)) {
            long long i = json_integer_value(k);
            json_t *one = json_integer(1), *stop = json_integer(i + 1 == 0 ? LLONG_MAX : i + 1);
            if (json_is_array(o)) {
                long long len = (long long)json_array_size(o);
                if (i < 0)
                    i += len;
                r = i >= 0 && i < len ? json_incref(json_array_get(o, (size_t)i)) : NULL;
            } else {
                r = jinja_builtin_slice(c, o, k, stop, one);
                if (r && json_string_length(r) == 0) { /* out of range → undefined */
                    json_decref(r);
                    r = NULL;
                }
            }
            json_decref(one);
            json_decref(stop);
        } else if (json_is_object(o) || json_is_array(o)) {
            r = NULL; /* wrong key type: undefined, as Jinja's getitem fallback */
        } else {
            jinja_err(c, ERR_INVALID, "%s is not subscriptable", jinja_value_type(o));
        }
        json_decref(o);
        json_decref(k);
        return r;
    }
    case JN_SLICE: {
        json_t *o = eval(c, n->a), *p[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3 && !jinja_failed(c); i++)
            p[i] = n->kids[i] ? eval(c, n->kids[i]) : NULL;
        json_t *r = NULL;
        if (!jinja_failed(c)) {
            if (!o)
                jinja_err(c, ERR_INVALID, "'%s' is undefined (slicing it)", node_desc(n->a));
            else
                r = jinja_builtin_slice(c, o, p[0], p[1], p[2]);
        }
        json_decref(o);
        for (int i = 0; i < 3; i++)
            json_decref(p[i]);
        return r;
    }
    case JN_CALL:
        return eval_call(c, n);
    case JN_FILTER: {
        json_t *v = eval(c, n->a), **args;
        if (jinja_failed(c) || eval_args(c, n, &args))
            return json_decref(v), NULL;
        json_t *r = jinja_builtin_filter(c, n->name, v, args, n->kw, n->n_kids);
        json_decref(v);
        free_args(args, n->n_kids);
        return jinja_failed(c) ? (json_decref(r), NULL) : r;
    }
    case JN_TEST: {
        json_t *v = eval(c, n->a), **args;
        if (jinja_failed(c) || eval_args(c, n, &args))
            return json_decref(v), NULL;
        json_t *r = jinja_builtin_test(c, n->name, v, args, n->n_kids);
        json_decref(v);
        free_args(args, n->n_kids);
        if (!r)
            return NULL;
        bool t = json_is_true(r);
        json_decref(r);
        return json_boolean(n->op ? !t : t);
    }
    case JN_UNARY: {
        json_t *v = eval(c, n->a);
        if (jinja_failed(c))
            return NULL;
        json_t *r = NULL;
        if (n->op == 'n')
            r = json_boolean(!jinja_value_truthy(v));
        else if (json_is_integer(v))
            r = json_integer(n->op == '-' ? -json_integer_value(v) : json_integer_value(v));
        else if (json_is_real(v))
            r = json_real(n->op == '-' ? -json_real_value(v) : json_real_value(v));
        else
            jinja_err(c, ERR_INVALID, "bad operand type for unary %c: %s", n->op, jinja_value_type(v));
        json_decref(v);
        return r;
    }
    case JN_BINARY: {
        json_t *a = eval(c, n->a);
        if (jinja_failed(c))
            return NULL;
        if (n->op == OP_AND || n->op == OP_OR) {
            bool t = jinja_value_truthy(a);
            if ((n->op == OP_AND) != t)
                return a; /* short circuit: Python returns the deciding operand */
            json_decref(a);
            return eval(c, n->b);
        }
        json_t *b = eval(c, n->b);
        json_t *r = NULL;
        if (jinja_failed(c)) {
        } else if (n->op == OP_CONCAT) {
            struct jbuf s = {0};
            if (!jinja_value_str(c, a, &s) && !jinja_value_str(c, b, &s))
                r = json_stringn_nocheck(s.p ? s.p : "", s.n);
            free(s.p);
        } else if (n->op >= OP_ADD && n->op <= OP_POW) {
            r = arith(c, n->op, a, b, n->a, n->b);
        } else if (n->op == OP_EQ || n->op == OP_NE) {
            bool eq = jinja_value_equal(a, b);
            r = json_boolean(n->op == OP_EQ ? eq : !eq);
        } else if (n->op == OP_IN || n->op == OP_NOTIN) {
            bool in = false;
            if (!a)
                jinja_err(c, ERR_INVALID, "'%s' is undefined", node_desc(n->a));
            else if (!contains(c, b, a, &in))
                r = json_boolean(n->op == OP_IN ? in : !in);
        } else {
            int cmp = 0;
            if (!a || !b)
                jinja_err(c, ERR_INVALID, "'%s' is undefined", node_desc(a ? n->b : n->a));
            else if (!compare(c, a, b, &cmp))
                r = json_boolean(n->op == OP_LT ? cmp < 0 : n->op == OP_GT ? cmp > 0 : n->op == OP_LE ? cmp <= 0 : cmp >= 0);
        }
        json_decref(a);
        json_decref(b);
        return r;
    }
    case JN_COND: {
        json_t *t = eval(c, n->b);
        if (jinja_failed(c))
            return NULL;
        bool yes = jinja_value_truthy(t);
        json_decref(t);
        if (yes)
            return eval(c, n->a);
        return n->c ? eval(c, n->c) : NULL;
    }
    }
    return jinja_err(c, ERR_INTERNAL, "a statement used as an expression");
}

/* ---- statements ---- */

static int emit(struct jctx *c, json_t *v)
{
    size_t before = c->out.n;
    int rc = jinja_value_str(c, v, &c->out);
    if (rc)
        return rc;
    if (c->out.n > c->max_output && c->out.n > before)
        return jinja_err(c, ERR_RANGE, "rendered prompt exceeds %zu bytes", c->max_output), ERR_RANGE;
    return 0;
}

static int exec_for(struct jctx *c, const struct jnode *n)
{
    json_t *it = eval(c, n->a);
    if (jinja_failed(c))
        return c->e->code;
    json_t *items = NULL;
    if (!it) {
        items = json_array(); /* iterating undefined yields nothing, as in Jinja */
    } else if (json_is_array(it)) {
        items = json_incref(it);
    } else if (json_is_object(it)) {
        items = json_array();
        const char *k;
        json_t *v;
        json_object_foreach(it, k, v) json_array_append_new(items, json_string(k));
    } else if (json_is_string(it)) {
        json_t *one = json_integer(1);
        items = json_array();
        long long len = (long long)jinja_utf8_len(json_string_value(it), json_string_length(it));
        for (long long i = 0; i < len; i++) {
            json_t *a = json_integer(i), *b = json_integer(i + 1);
            json_array_append_new(items, jinja_builtin_slice(c, it, a, b, one));
            json_decref(a);
            json_decref(b);
        }
        json_decref(one);
    } else {
        jinja_err(c, ERR_INVALID, "%s is not iterable", jinja_value_type(it));
    }
    json_decref(it);
    if (!items)
        return jinja_failed(c) ? c->e->code : (jinja_err(c, ERR_NOMEM, "out of memory"), ERR_NOMEM);

    /* the inline `if` filters before loop.* counting, as Jinja does */
    if (n->d) {
        json_t *kept = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(items, i, x) {
            if (push_scope(c))
                break;
            if (n->n_names == 1)
                set_var(c, n->names[0], json_incref(x));
            else
                for (int k = 0; k < n->n_names; k++)
                    set_var(c, n->names[k], json_incref(json_array_get(x, (size_t)k)));
            json_t *t = eval(c, n->d);
            pop_scope(c);
            if (jinja_failed(c))
                break;
            if (jinja_value_truthy(t))
                json_array_append(kept, x);
            json_decref(t);
        }
        json_decref(items);
        items = kept;
        if (jinja_failed(c))
            return json_decref(items), c->e->code;
    }

    size_t len = json_array_size(items);
    int rc = 0;
    for (size_t i = 0; i < len && !rc; i++) {
        json_t *x = json_array_get(items, i);
        if (++c->steps > c->max_steps) {
            jinja_err(c, ERR_RANGE, "the template runs too long (more than %lld loop steps)", c->max_steps);
            rc = ERR_RANGE;
            break;
        }
        if ((rc = push_scope(c)))
            break;
        if (n->n_names == 1) {
            set_var(c, n->names[0], json_incref(x));
        } else if (!json_is_array(x) || json_array_size(x) != (size_t)n->n_names) {
            c->line = n->line;
            jinja_err(c, ERR_INVALID, "cannot unpack %s into %d loop variables", jinja_value_type(x), n->n_names);
        } else {
            for (int k = 0; k < n->n_names; k++)
                set_var(c, n->names[k], json_incref(json_array_get(x, (size_t)k)));
        }
        json_t *loop = json_pack("{s:I, s:I, s:I, s:I, s:b, s:b, s:I, s:I, s:I}", "index", (json_int_t)i + 1,
                                 "index0", (json_int_t)i, "revindex", (json_int_t)(len - i), "revindex0",
                                 (json_int_t)(len - i - 1), "first", i == 0, "last", i + 1 == len, "length",
                                 (json_int_t)len, "depth", (json_int_t)1, "depth0", (json_int_t)0);
        if (loop && i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (loop && i + 1 < len)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        set_var(c, "loop", loop);
        if (!jinja_failed(c))
            rc = exec(c, n->b);
        pop_scope(c);
        if (jinja_failed(c))
            rc = c->e->code;
        if (c->loop_ctl == 1) {
            c->loop_ctl = 0;
            break;
        }
        c->loop_ctl = 0;
    }
    json_decref(items);
    if (!rc && len == 0 && n->c)
        rc = exec(c, n->c);
    return rc;
}

static bool is_namespace(struct jctx *c, json_t *v);

static int exec(struct jctx *c, const struct jnode *n)
{
    if (jinja_failed(c))
        return c->e->code;
    c->line = n->line;
    switch (n->kind) {
    case JN_BLOCK:
        for (int i = 0; i < n->n_kids; i++) {
            int rc = exec(c, n->kids[i]);
            if (rc)
                return rc;
            if (c->loop_ctl)
                return 0;
        }
        return 0;
    case JN_TEXT:
        if (jinja_buf_put(&c->out, json_string_value(n->lit), json_string_length(n->lit)))
            return jinja_err(c, ERR_NOMEM, "out of memory"), ERR_NOMEM;
        if (c->out.n > c->max_output)
            return jinja_err(c, ERR_RANGE, "rendered prompt exceeds %zu bytes", c->max_output), ERR_RANGE;
        return 0;
    case JN_OUTPUT: {
        json_t *v = eval(c, n->a);
        int rc = jinja_failed(c) ? c->e->code : emit(c, v);
        json_decref(v);
        return rc;
    }
    case JN_IF: {
        json_t *t = eval(c, n->a);
        if (jinja_failed(c))
            return c->e->code;
        bool yes = jinja_value_truthy(t);
        json_decref(t);
        if (yes)
            return exec(c, n->b);
        return n->c ? exec(c, n->c) : 0;
    }
    case JN_FOR:
        return exec_for(c, n);
    case JN_SET: {
        json_t *v = eval(c, n->a);
        if (jinja_failed(c))
            return c->e->code;
        if (n->attr) {
            json_t *ns = lookup(c, n->name);
            c->line = n->line;
            if (!ns || !is_namespace(c, ns)) {
                json_decref(ns);
                json_decref(v);
                return jinja_err(c, ERR_INVALID, "cannot assign attribute '%s' of '%s': not a namespace()", n->attr,
                            n->name), ERR_INVALID;
            }
            if (v)
                json_object_set_new(ns, n->attr, v);
            else
                json_object_del(ns, n->attr);
            json_decref(ns);
            return 0;
        }
        if (n->n_names > 1) {
            if (!json_is_array(v) || json_array_size(v) != (size_t)n->n_names) {
                json_decref(v);
                return jinja_err(c, ERR_INVALID, "cannot unpack into %d names", n->n_names), ERR_INVALID;
            }
            for (int k = 0; k < n->n_names; k++)
                set_var(c, n->names[k], json_incref(json_array_get(v, (size_t)k)));
            json_decref(v);
            return 0;
        }
        return set_var(c, n->name, v);
    }
    case JN_SETBLK: {
        struct jbuf saved = c->out;
        memset(&c->out, 0, sizeof c->out);
        int rc = exec(c, n->b);
        struct jbuf mine = c->out;
        c->out = saved;
        if (!rc)
            rc = set_var(c, n->name, json_stringn_nocheck(mine.p ? mine.p : "", mine.n));
        free(mine.p);
        return rc;
    }
    case JN_MACRO:
        if (c->n_macros == c->cap_macros) {
            int cap = c->cap_macros ? c->cap_macros * 2 : 8;
            struct jmacro *m = realloc(c->macros, (size_t)cap * sizeof *m);
            if (!m)
                return jinja_err(c, ERR_NOMEM, "out of memory"), ERR_NOMEM;
            c->macros = m;
            c->cap_macros = cap;
        }
        c->macros[c->n_macros++] = (struct jmacro){n->name, n};
        return 0;
    case JN_BREAK:
        c->loop_ctl = 1;
        return 0;
    case JN_CONTINUE:
        c->loop_ctl = 2;
        return 0;
    }
    json_t *v = eval(c, n);
    json_decref(v);
    return jinja_failed(c) ? c->e->code : 0;
}

static bool is_namespace(struct jctx *c, json_t *v)
{
    (void)c;
    return json_is_object(v) && json_object_get(v, NS_MARK);
}

int jinja_render(const struct jinja_tmpl *t, json_t *vars, const struct jinja_opts *opts, char **out,
                 size_t *out_len, struct err *e)
{
    struct err local;
    if (!e)
        e = &local;
    err_clear(e);
    *out = NULL;
    if (out_len)
        *out_len = 0;
    struct jctx c = {.e = e};
    c.now = opts && opts->now ? opts->now : time(NULL);
    c.max_output = opts && opts->max_output ? opts->max_output : (size_t)64 << 20;
    c.max_steps = opts && opts->max_steps > 0 ? opts->max_steps : 2000000;
    json_t *top = vars && json_is_object(vars) ? json_incref(vars) : json_object();
    c.scopes = malloc(16 * sizeof *c.scopes);
    if (!c.scopes || !top) {
        free(c.scopes);
        json_decref(top);
        return err_set(e, ERR_NOMEM, "chat template: out of memory");
    }
    c.cap_scopes = 16;
    c.scopes[c.n_scopes++] = top;
    int rc = push_scope(&c);
    if (!rc)
        rc = exec(&c, t->root);
    if (!rc && jinja_failed(&c))
        rc = e->code;
    while (c.n_scopes > 0)
        pop_scope(&c);
    free(c.scopes);
    free(c.macros);
    if (rc) {
        free(c.out.p);
        return rc;
    }
    if (!c.out.p && jinja_buf_put(&c.out, "", 0))
        return err_set(e, ERR_NOMEM, "chat template: out of memory");
    *out = c.out.p;
    if (out_len)
        *out_len = c.out.n;
    return 0;
}
