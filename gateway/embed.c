/* embed.c — POST /v1/embeddings (embed.h): validation, the jobs, the response.
 *
 * Locking: x->mu guards the progress fields. It is never held across be->submit (a job's events may come
 * from another thread before submit returns); `busy` counts the submit calls in progress, and the job
 * events still on their way from their bookkeeping to emb_pump, so the last job's event cannot end the
 * request (and let http.c free it) while another thread still has to touch x: two jobs ending at once
 * on two backend threads, the first between its unlock and its pump, the second ending the request and
 * http.c freeing it, had the first lock a freed mutex (heap corruption under load). */
#include "embed.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Between a job event's bookkeeping and its pump: tests/test_gateway.c (which includes this file) widens
 * it to check that the request does not end while an event is still there. */
#ifndef EMB_EVENT_GAP
#define EMB_EVENT_GAP() ((void)0)
#endif

struct emb_user {
    struct gw_embed *x;
    size_t i;
};

struct gw_embed {
    pthread_mutex_t mu;
    char *model;                /* as requested ("" when absent) */
    size_t n;                   /* inputs */
    char **texts;               /* [n] text inputs, or NULL */
    int32_t **ids;              /* [n] token-id inputs, or NULL */
    size_t *n_ids;              /* [n] */
    int dims;                   /* 0 = all */
    bool base64;
    /* progress */
    const struct gw_backend *be;
    const char *run_model;      /* the model the jobs ask for (http.c's string, alive until free) */
    void (*done)(void *);
    void *done_user;
    size_t next;                /* next input to submit */
    int running;                /* submitted, final event not yet delivered */
    int busy;                   /* submit calls in progress, and job events on their way to emb_pump */
    bool started, ended, canceled, failed;
    struct gw_job **jobs;       /* [n] */
    bool *final;                /* [n] */
    struct emb_user *users;     /* [n] */
    float **vec;                /* [n] each input's vector */
    size_t n_embd;
    int64_t n_prompt;           /* tokens over all inputs */
    int err_code;
    char err_msg[512];
};

static void emb_fail(struct gw_embed *x, int code, const char *msg)
{
    if (x->failed)
        return; /* the first error wins */
    x->failed = true;
    x->err_code = code;
    snprintf(x->err_msg, sizeof x->err_msg, "%s", msg);
}

static int emb_bad(char *param, size_t cap, const char *field, struct err *e, const char *msg)
{
    snprintf(param, cap, "%s", field);
    return err_set(e, ERR_INVALID, "%s", msg);
}

/* A token-id array input: non-empty, every element an integer in [0, 2^31). */
static int emb_parse_ids(json_t *a, int32_t **out, size_t *n, char *param, size_t cap, struct err *e)
{
    size_t k = json_array_size(a);
    if (!k)
        return emb_bad(param, cap, "input", e, "'input' holds an empty token array");
    int32_t *ids = malloc(k * sizeof *ids);
    if (!ids)
        return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(ids);
            return emb_bad(param, cap, "input", e, "'input' token ids must be integers in [0, 2^31)");
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    *out = ids;
    *n = k;
    return 0;
}

int gw_embed_parse(json_t *body, struct gw_embed **out, char *param, size_t cap, struct err *e)
{
    *out = NULL;
    param[0] = 0;
    if (!json_is_object(body))
        return emb_bad(param, cap, "", e, "the request body must be a JSON object");
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return emb_bad(param, cap, "model", e, "'model' must be a string");
    json_t *fmt = json_object_get(body, "encoding_format");
    bool b64 = false;
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return emb_bad(param, cap, "encoding_format", e, "'encoding_format' must be \"float\" or \"base64\"");
        b64 = !strcmp(f, "base64");
    }
    json_t *dim = json_object_get(body, "dimensions");
    int dims = 0;
    if (dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1 || json_integer_value(dim) > (1 << 20))
            return emb_bad(param, cap, "dimensions", e, "'dimensions' must be a positive integer");
        dims = (int)json_integer_value(dim);
    }
    json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in))
        return emb_bad(param, cap, "input", e, "'input' is required");
    /* the shape: one string, strings, one token array, or token arrays */
    size_t n = 0;
    int kind = 0; /* 1 string(s), 2 one token array, 3 token arrays */
    if (json_is_string(in)) {
        n = 1;
        kind = 1;
    } else if (json_is_array(in)) {
        n = json_array_size(in);
        if (!n)
            return emb_bad(param, cap, "input", e, "'input' must not be an empty array");
        json_t *f = json_array_get(in, 0);
        kind = json_is_string(f) ? 1 : json_is_integer(f) ? 2 : json_is_array(f) ? 3 : 0;
        for (size_t i = 0; kind && i < n; i++) {
            json_t *v = json_array_get(in, i);
            if ((kind == 1 && !json_is_string(v)) || (kind == 2 && !json_is_integer(v)) ||
                (kind == 3 && !json_is_array(v)))
                kind = 0;
        }
        if (kind == 2)
            n = 1;
    }
    if (!kind)
        return emb_bad(param, cap, "input", e,
                   "'input' must be a string, an array of strings, an array of token ids, or an array of token-id arrays");
    if (n > GW_EMBED_MAX_INPUTS) {
        char m[160];
        snprintf(m, sizeof m, "'input' has %zu entries; at most %d per request", n, GW_EMBED_MAX_INPUTS);
        return emb_bad(param, cap, "input", e, m);
    }
    struct gw_embed *x = calloc(1, sizeof *x);
    if (!x)
        return err_set(e, ERR_NOMEM, "out of memory");
    pthread_mutex_init(&x->mu, NULL);
    x->n = n;
    x->dims = dims;
    x->base64 = b64;
    x->model = strdup(json_is_string(model) ? json_string_value(model) : "");
    x->texts = kind == 1 ? calloc(n, sizeof *x->texts) : NULL;
    x->ids = kind != 1 ? calloc(n, sizeof *x->ids) : NULL;
    x->n_ids = calloc(n, sizeof *x->n_ids);
    x->jobs = calloc(n, sizeof *x->jobs);
    x->final = calloc(n, sizeof *x->final);
    x->users = calloc(n, sizeof *x->users);
    x->vec = calloc(n, sizeof *x->vec);
    if (!x->model || (kind == 1 ? !x->texts : !x->ids) || !x->n_ids || !x->jobs || !x->final || !x->users ||
        !x->vec) {
        gw_embed_free(x);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        x->users[i] = (struct emb_user){x, i};
        int rc = 0;
        if (kind == 1) {
            const char *s = json_string_value(json_is_string(in) ? in : json_array_get(in, i));
            size_t len = json_string_length(json_is_string(in) ? in : json_array_get(in, i));
            if (!len || strlen(s) != len) {
                rc = emb_bad(param, cap, "input", e, len ? "'input' holds a string with a NUL character"
                                                     : "'input' holds an empty string");
            } else if (!(x->texts[i] = strdup(s))) {
                rc = err_set(e, ERR_NOMEM, "out of memory");
            }
        } else {
            rc = emb_parse_ids(kind == 2 ? in : json_array_get(in, i), &x->ids[i], &x->n_ids[i], param, cap, e);
        }
        if (rc) {
            gw_embed_free(x);
            return rc;
        }
    }
    *out = x;
    return 0;
}

const char *gw_embed_model(const struct gw_embed *x) { return x->model; }

static void emb_pump(struct gw_embed *x, bool from_event);

/* A job's event (a backend thread). */
static void emb_on_event(void *user, const struct gw_event *ev)
{
    struct emb_user *u = user;
    struct gw_embed *x = u->x;
    if (ev->kind == GW_EV_TOKEN)
        return; /* an embedding generates nothing */
    pthread_mutex_lock(&x->mu);
    if (ev->kind == GW_EV_DONE) {
        if (!ev->embd || !ev->n_embd) {
            emb_fail(x, ERR_INTERNAL, "the worker returned no embedding (a worker without embeddings?)");
        } else if (x->n_embd && ev->n_embd != x->n_embd) {
            emb_fail(x, ERR_INTERNAL, "the worker returned embeddings of different sizes");
        } else if (!(x->vec[u->i] = malloc(ev->n_embd * sizeof(float)))) {
            emb_fail(x, ERR_NOMEM, "out of memory");
        } else {
            memcpy(x->vec[u->i], ev->embd, ev->n_embd * sizeof(float));
            x->n_embd = ev->n_embd;
            x->n_prompt += ev->n_prompt;
        }
    } else if (!x->canceled) {
        /* a cancel nobody here asked for (the worker stopped) is an error too, as for generations */
        bool c = ev->err_code == ERR_CANCELED;
        emb_fail(x, c ? ERR_IO : ev->err_code,
             c ? "the embedding was canceled by the server (worker stopped or restarted)"
               : ev->err_msg ? ev->err_msg : "embedding failed");
    }
    if (x->failed) /* the others are of no use now */
        for (size_t i = 0; i < x->n; i++)
            if (x->jobs[i] && !x->final[i] && i != u->i)
                x->be->cancel(x->be->ctx, x->jobs[i]);
    x->final[u->i] = true;
    x->running--;
    x->busy++; /* until emb_pump has it: nobody ends the request before */
    pthread_mutex_unlock(&x->mu);
    EMB_EVENT_GAP();
    emb_pump(x, true);
}

/* Submit inputs while the window has room, then end the request when nothing runs or is left. from_event:
 * called by a job's event, which holds a `busy` count for it. */
static void emb_pump(struct gw_embed *x, bool from_event)
{
    pthread_mutex_lock(&x->mu);
    if (from_event)
        x->busy--;
    while (!x->failed && !x->canceled && x->next < x->n && x->running < GW_EMBED_WINDOW) {
        size_t i = x->next++;
        x->running++;
        x->busy++;
        pthread_mutex_unlock(&x->mu);
        struct proto_gen g; /* a view into x (backend.h) */
        proto_gen_init(&g);
        g.model = (char *)x->run_model;
        g.prompt = x->texts ? x->texts[i] : NULL;
        g.tokens = x->ids ? x->ids[i] : NULL;
        g.n_tokens = x->ids ? x->n_ids[i] : 0;
        g.max_tokens = -1;
        g.logprobs = -1;
        g.embed = true;
        struct gw_job *job = NULL;
        struct err e;
        int rc = x->be->submit(x->be->ctx, &g, emb_on_event, &x->users[i], &job, &e);
        pthread_mutex_lock(&x->mu);
        x->busy--;
        if (rc) { /* it will never report */
            x->running--;
            x->final[i] = true;
            emb_fail(x, rc, e.msg);
        } else {
            x->jobs[i] = job;
            if ((x->canceled || x->failed) && !x->final[i])
                x->be->cancel(x->be->ctx, job);
        }
    }
    bool end = !x->ended && x->busy == 0 && x->running == 0 && (x->failed || x->canceled || x->next == x->n);
    if (end)
        x->ended = true;
    pthread_mutex_unlock(&x->mu);
    if (end)
        x->done(x->done_user);
}

void gw_embed_start(struct gw_embed *x, const struct gw_backend *be, const char *model, void (*done)(void *user),
                    void *user)
{
    pthread_mutex_lock(&x->mu);
    x->be = be;
    x->run_model = model;
    x->done = done;
    x->done_user = user;
    x->started = true;
    pthread_mutex_unlock(&x->mu);
    emb_pump(x, false);
}

void gw_embed_cancel(struct gw_embed *x)
{
    pthread_mutex_lock(&x->mu);
    x->canceled = true;
    for (size_t i = 0; x->started && i < x->n; i++)
        if (x->jobs[i] && !x->final[i])
            x->be->cancel(x->be->ctx, x->jobs[i]);
    pthread_mutex_unlock(&x->mu);
}

char *gw_base64(const unsigned char *p, size_t n)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *q++ = al[v >> 18 & 63];
        *q++ = al[v >> 12 & 63];
        *q++ = i + 1 < n ? al[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? al[v & 63] : '=';
    }
    *q = 0;
    return o;
}

/* One input's vector as the response wants it: the first d values, L2-normalised again when cut. */
static json_t *emb_value(const struct gw_embed *x, const float *v, size_t d)
{
    float *w = malloc(d * sizeof *w);
    if (!w)
        return NULL;
    double ss = 0.0;
    for (size_t k = 0; k < d; k++)
        ss += (double)v[k] * (double)v[k];
    const double scale = d < x->n_embd && ss > 0.0 ? 1.0 / sqrt(ss) : 1.0; /* the whole vector is unit already */
    for (size_t k = 0; k < d; k++)
        w[k] = (float)(v[k] * scale);
    json_t *out = NULL;
    if (x->base64) {
        unsigned char *b = malloc(4 * d);
        for (size_t k = 0; b && k < d; k++) {
            uint32_t u;
            memcpy(&u, &w[k], 4);
            for (int j = 0; j < 4; j++)
                b[4 * k + (size_t)j] = (unsigned char)(u >> (8 * j)); /* little-endian whatever the host */
        }
        char *s = b ? gw_base64(b, 4 * d) : NULL;
        out = s ? json_string(s) : NULL;
        free(s);
        free(b);
    } else {
        out = json_array();
        for (size_t k = 0; out && k < d; k++)
            if (json_array_append_new(out, json_real(w[k]))) {
                json_decref(out);
                out = NULL;
            }
    }
    free(w);
    return out;
}

int gw_embed_result(struct gw_embed *x, const char *model, char **body, int *code, char *msg, size_t msg_cap,
                    char *param, size_t param_cap)
{
    *body = NULL;
    *code = 0;
    param[0] = 0;
    pthread_mutex_lock(&x->mu);
    int status = 200;
    if (x->failed) {
        *code = x->err_code;
        snprintf(msg, msg_cap, "%s", x->err_msg);
        status = gw_http_status(x->err_code);
    } else if (x->canceled || x->next < x->n) {
        *code = ERR_CANCELED;
        snprintf(msg, msg_cap, "canceled");
        status = 499;
    } else if (x->dims > 0 && (size_t)x->dims > x->n_embd) {
        *code = ERR_INVALID;
        snprintf(msg, msg_cap, "'dimensions' is %d, larger than the model's %zu", x->dims, x->n_embd);
        snprintf(param, param_cap, "dimensions");
        status = 400;
    } else {
        size_t d = x->dims > 0 ? (size_t)x->dims : x->n_embd;
        json_t *o = json_object(), *data = json_array(), *usage = json_object();
        bool ok = o && data && usage;
        for (size_t i = 0; ok && i < x->n; i++) {
            json_t *item = json_object(), *v = emb_value(x, x->vec[i], d);
            ok = item && v && !json_object_set_new(item, "object", json_string("embedding")) &&
                 !json_object_set_new(item, "index", json_integer((json_int_t)i)) &&
                 !json_object_set_new(item, "embedding", v) && !json_array_append_new(data, item);
            if (!ok) {
                json_decref(item);
                if (!item)
                    json_decref(v);
            }
        }
        ok = ok && !json_object_set_new(usage, "prompt_tokens", json_integer(x->n_prompt)) &&
             !json_object_set_new(usage, "total_tokens", json_integer(x->n_prompt)) &&
             !json_object_set_new(o, "object", json_string("list")) && !json_object_set(o, "data", data) &&
             !json_object_set_new(o, "model", json_string(model)) && !json_object_set(o, "usage", usage);
        *body = ok ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL; /* 9 digits: a float exactly */
        json_decref(data);
        json_decref(usage);
        json_decref(o);
        if (!*body) {
            *code = ERR_NOMEM;
            snprintf(msg, msg_cap, "out of memory");
            status = 500;
        }
    }
    pthread_mutex_unlock(&x->mu);
    return status;
}

void gw_embed_free(struct gw_embed *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < x->n; i++) {
        if (x->jobs && x->jobs[i])
            x->be->release(x->be->ctx, x->jobs[i]);
        if (x->texts)
            free(x->texts[i]);
        if (x->ids)
            free(x->ids[i]);
        if (x->vec)
            free(x->vec[i]);
    }
    free(x->texts);
    free(x->ids);
    free(x->n_ids);
    free(x->jobs);
    free(x->final);
    free(x->users);
    free(x->vec);
    free(x->model);
    pthread_mutex_destroy(&x->mu);
    free(x);
}
