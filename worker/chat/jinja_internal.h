/* jinja_internal.h — shared between the Jinja-subset lexer/parser (jinja.c),
 * the evaluator (jinja_eval.c) and the builtin filters/tests/methods
 * (jinja_builtins.c). Not a public header: use jinja.h. */
#ifndef LLM170_JINJA_INTERNAL_H
#define LLM170_JINJA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "../../common/err.h"
#include "jinja.h"

enum jn_kind {
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* name */
    JN_LIST,   /* kids = items (tuples too) */
    JN_DICT,   /* kids = key0, value0, key1, value1 … */
    JN_ATTR,   /* a.name */
    JN_INDEX,  /* a[b] */
    JN_SLICE,  /* a[kids[0]:kids[1]:kids[2]] (each may be NULL) */
    JN_CALL,   /* a(kids…) with kw[i] naming keyword arguments */
    JN_FILTER, /* a | name(kids…) */
    JN_TEST,   /* a is [not] name(kids…); op = 1 when negated */
    JN_UNARY,  /* op a: '-', '+', 'n' (not) */
    JN_BINARY, /* a op b (enum jn_op) */
    JN_COND,   /* a if b else c (c may be NULL) */
    /* statements */
    JN_TEXT,   /* literal text: lit is a string */
    JN_OUTPUT, /* {{ a }} */
    JN_BLOCK,  /* kids = statements */
    JN_IF,     /* if a: b else c (c is a BLOCK or NULL; elif chains nest as IF) */
    JN_FOR,    /* for names in a [if d]: b else c */
    JN_SET,    /* set name[.attr] = a, or set names = a (unpack) */
    JN_SETBLK, /* set name %} b {% endset */
    JN_MACRO,  /* macro name(names = kids defaults) b */
    JN_BREAK,
    JN_CONTINUE,
};

enum jn_op {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN, OP_AND, OP_OR,
};

/* namespace() objects carry this private key, one no template can spell */
#define NS_MARK "\x01ns"

struct jnode {
    int kind;            /* enum jn_kind */
    int line;            /* 1-based template line, for messages */
    int op;              /* enum jn_op / unary char / test negation */
    char *name;          /* NAME, ATTR, FILTER, TEST, SET target, MACRO */
    char *attr;          /* SET target attribute (set ns.x = …) */
    json_t *lit;         /* LIT / TEXT value (owned) */
    struct jnode *a, *b, *c, *d;
    struct jnode **kids; /* [n_kids] children (arguments, items, statements) */
    char **kw;           /* [n_kids] keyword names for CALL/FILTER args, NULL = positional */
    int n_kids;
    char **names;        /* [n_names] FOR/SET targets, MACRO parameters */
    int n_names;
};

struct jarena_blk;
struct jinja_tmpl {
    struct jnode *root;      /* a JN_BLOCK */
    struct jarena_blk *mem;  /* every node and string of the tree */
    json_t *lits;            /* array owning every literal value */
};

/* ---- evaluator context (jinja_eval.c) ---- */
struct jmacro {
    const char *name;
    const struct jnode *node;
};

struct jbuf {
    char *p;
    size_t n, cap;
};
int jinja_buf_put(struct jbuf *b, const char *s, size_t n);
int jinja_buf_puts(struct jbuf *b, const char *s);

struct jctx {
    json_t **scopes; /* [n_scopes] objects, innermost last; scopes[0] = the caller's vars */
    int n_scopes, cap_scopes;
    struct jmacro *macros;
    int n_macros, cap_macros;
    struct jbuf out;
    struct err *e;
    int line;          /* line of the node being evaluated */
    int depth;         /* macro call depth */
    int loop_ctl;      /* 1 = break, 2 = continue pending */
    time_t now;
    size_t max_output;
    long long steps;     /* loop iterations and macro calls so far … */
    long long max_steps; /* … bounded: a template is data from a model file, and
                          * nested loops over huge ranges must end in an error,
                          * not hang a worker */
};

/* Set an error (first one wins) and return NULL, for value-returning code. */
json_t *jinja_err(struct jctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool jinja_failed(const struct jctx *c);

/* value helpers (jinja_builtins.c) */
bool jinja_value_truthy(const json_t *v);
int jinja_value_str(struct jctx *c, const json_t *v, struct jbuf *b); /* Jinja {{ }} rendering */
int jinja_value_repr(struct jctx *c, const json_t *v, struct jbuf *b); /* Python repr */
int jinja_value_json(struct jctx *c, const json_t *v, struct jbuf *b, int indent, int level); /* tojson */
const char *jinja_value_type(const json_t *v);
bool jinja_value_equal(const json_t *a, const json_t *b);
size_t jinja_utf8_len(const char *s, size_t n);

json_t *jinja_builtin_filter(struct jctx *c, const char *name, json_t *v, json_t **args, char **kw, int n);
json_t *jinja_builtin_test(struct jctx *c, const char *name, json_t *v, json_t **args, int n); /* json bool or NULL on error */
json_t *jinja_builtin_method(struct jctx *c, json_t *obj, const char *name, json_t **args, char **kw, int n);
json_t *jinja_builtin_global(struct jctx *c, const char *name, json_t **args, char **kw, int n, bool *found);
json_t *jinja_builtin_slice(struct jctx *c, json_t *v, json_t *start, json_t *stop, json_t *step);
/* Python's `fmt % args` (args: one value or a list as the tuple) */
json_t *jinja_builtin_percent_format(struct jctx *c, json_t *fmt, json_t *args);

#endif
