/* http.c — the gateway's HTTP server (http.h).
 *
 * libmicrohttpd runs a small pool of epoll event-loop threads, so thousands
 * of idle keep-alive connections cost no threads. Nothing blocks those
 * threads on generation: a generation request is submitted to the backend
 * and its connection suspended; backend events (from the backend's threads)
 * are turned into OpenAI JSON / SSE bytes under the request's lock and the
 * connection is resumed. Streams use a callback response whose reader
 * suspends itself when it has nothing to send.
 *
 * A suspended connection is not polled by libmicrohttpd, so a watcher thread
 * polls the sockets of in-flight generation requests for a peer hang-up and
 * cancels the request at once (system.md: a client that disconnects cancels
 * its request at the next step). */
#include "http.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "anthropic.h"
#include "embed.h"
#include "metrics.h"
#include "oai.h"

void gw_config_default(struct gw_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    c->max_body = 8u << 20;
    c->timeout_s = 120;
    c->threads = 4;
    c->max_connections = 16384;
    c->header_timeout_s = 10;
    c->max_per_ip = 512;
}

/* Descriptors kept free of connections: listening socket, epoll and
 * inter-thread descriptors, the daemon's sockets, logs. */
#define GW_FD_RESERVE 128

/* Raise the soft descriptor limit so max_connections fit (up to the hard
 * limit); return how many connections fit. */
static unsigned fd_room(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return want;
    rlim_t need = (rlim_t)want + GW_FD_RESERVE;
    if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = need < rl.rlim_max ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return want;
    return rl.rlim_cur > 2 * GW_FD_RESERVE ? (unsigned)(rl.rlim_cur - GW_FD_RESERVE) : GW_FD_RESERVE;
}

/* A too-large body up to this size is read and dropped so the client can
 * read the 413; beyond it the connection is answered and closed at once. */
#define GW_DISCARD_MAX (1ull << 30)

enum route { R_NONE, R_CHAT, R_COMPL, R_MODELS, R_MODEL_ONE, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE, R_PREFLIGHT,
             R_EMBED, R_MESSAGES, R_COUNT_TOKENS };

struct gen_req;

/* One open connection, for the header deadline: from accept (or the end of
 * its previous response) until its next header block is complete it is
 * "waiting"; the watcher shuts down the socket of one that waits too long.
 * libmicrohttpd reports the connection's close (under s->cmu) before it
 * closes the descriptor, so fd is always still this connection's. */
struct hconn {
    struct hconn *prev, *next;
    int fd;
    double t_wait; /* when it began waiting for a header block */
    bool waiting, cut;
};

static void header_deadline_sweep(struct gw_server *s);

struct gw_server {
    struct gw_config cfg;
    struct gw_backend be;
    struct MHD_Daemon *mhd;
    struct gw_metrics metrics;
    long long started;
    /* in-flight generation requests, for the hang-up watcher and shutdown */
    pthread_mutex_t mu;
    struct gen_req **live;
    int n_live, cap_live;
    bool stopping;
    pthread_t watcher;
    bool watcher_started;
    char default_model[128]; /* last model name the daemon reported */
    int n_gen_alive;         /* gen_req structs not yet freed (backend events may still come) */
    pthread_cond_t gen_cv;
    pthread_mutex_t cmu;     /* guards conns */
    struct hconn *conns;     /* every open connection (header deadline) */
    char nul_uri_mark;       /* its address: the URI log saw "%00" in the request line */
};

struct choice_user {
    struct gen_req *g;
    int idx;
};

struct gen_req {
    pthread_mutex_t mu;
    int refs;                       /* connection + each unfinished job + the SSE response */
    struct gw_server *srv;
    struct MHD_Connection *conn;    /* NULL once libmicrohttpd is done with the connection */
    int fd;                         /* the client socket, for the watcher */
    struct oai_request rq;
    char id[48], model[256];
    struct oai_meta meta;
    int n;                          /* jobs submitted */
    struct gw_job *jobs[OAI_MAX_N];
    bool final[OAI_MAX_N];          /* job delivered its last event */
    struct choice_user users[OAI_MAX_N];
    struct oai_choice choices[OAI_MAX_N];
    struct oai_think think[OAI_MAX_N]; /* streamed chat: reasoning split state */
    struct tc_parser tc[OAI_MAX_N];    /* streamed chat with tools: tool-call reading state */
    bool role_sent[OAI_MAX_N];
    int n_final;
    int32_t n_prompt, n_gen;
    bool failed;                    /* an error to report instead of a result */
    int err_status, err_code;
    char err_msg[512];
    bool suspended, streaming, closed, out_done;
    char *out;                      /* SSE bytes not yet handed to libmicrohttpd */
    size_t out_len, out_off;
    struct gw_embed *emb;           /* /v1/embeddings: its inputs' jobs (embed.c) instead of jobs[] */
    struct anth_state *anth;        /* /v1/messages (anthropic.c): the reply is written as Anthropic's */
    bool anth_count;                /* /v1/messages/count_tokens: answer the prompt's token count */
    int stop_hit;                   /* the DONE event's stop_hit */
    double t0, t_last;
    bool got_first;
};

struct conn {
    struct gw_server *srv;
    int route;
    const char *endpoint;
    char *body;
    size_t len, cap;
    bool too_large, responded;
    bool streamed;               /* a 200 SSE response started: counted when it ends (200 or 499) */
    bool close;                  /* answer with Connection: close */
    double t_start;              /* when the request's headers arrived */
    unsigned long long declared; /* Content-Length of a too-large body */
    struct gen_req *gen;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- responses */

/* Whether origin is one of the comma-separated list (exact match, no wildcard). */
static bool origin_allowed(const char *list, const char *origin)
{
    size_t ol = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ')
            e++;
        if (e > p && (size_t)(e - p) == ol && !strncmp(p, origin, ol))
            return true;
        p = e;
    }
    return false;
}

/* CORS is off unless --cors-origin names the browser origins that may call the
 * API: a matching Origin is echoed back (never "*", so another site's page
 * cannot read a local server's answers). */
static void common_headers(struct gw_server *s, struct MHD_Connection *mc, struct MHD_Response *r)
{
    if (!s->cfg.cors_origins[0])
        return;
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
    if (origin && origin_allowed(s->cfg.cors_origins, origin))
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
}

static enum MHD_Result respond(struct conn *c, struct MHD_Connection *mc, int status, const char *ctype, char *body,
                               size_t len)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    common_headers(c->srv, mc, r);
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 429) /* the queue is full: a slot frees within seconds */
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (c->close) /* malformed framing: nothing after this request can be trusted */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    c->responded = true;
    gw_metrics_request(&c->srv->metrics, c->endpoint, status);
    enum MHD_Result ok = MHD_queue_response(mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_json(struct conn *c, struct MHD_Connection *mc, int status, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return respond(c, mc, status, "application/json", s, s ? strlen(s) : 0);
}

static bool anth_route(int route) { return route == R_MESSAGES || route == R_COUNT_TOKENS; }

static enum MHD_Result respond_error(struct conn *c, struct MHD_Connection *mc, int status, int code, const char *msg,
                                     const char *param)
{
    /* each API's clients read their own error objects */
    char *s = anth_route(c->route) ? anth_error_body(status, code, msg) : oai_error_body(status, code, msg, param);
    return respond(c, mc, status, "application/json", s, s ? strlen(s) : 0);
}

/* ---------------------------------------------------------------- gen_req */

static void gen_decref(struct gen_req *g)
{
    pthread_mutex_lock(&g->mu);
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left)
        return;
    struct gw_server *s = g->srv;
    for (int i = 0; i < g->n; i++)
        if (g->jobs[i])
            g->srv->be.release(g->srv->be.ctx, g->jobs[i]);
    for (int i = 0; i < OAI_MAX_N; i++) {
        oai_choice_free(&g->choices[i]);
        tc_parser_free(&g->tc[i]);
    }
    oai_request_free(&g->rq);
    gw_embed_free(g->emb);
    anth_state_free(g->anth);
    free(g->out);
    pthread_mutex_destroy(&g->mu);
    free(g);
    pthread_mutex_lock(&s->mu);
    s->n_gen_alive--;
    pthread_cond_broadcast(&s->gen_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Collect the jobs still running (caller holds g->mu); cancel them after unlocking. */
static int running_jobs(struct gen_req *g, struct gw_job **out)
{
    int k = 0;
    for (int i = 0; i < g->n; i++)
        if (!g->final[i] && g->jobs[i])
            out[k++] = g->jobs[i];
    return k;
}

static void cancel_jobs(struct gen_req *g, struct gw_job **jobs, int k)
{
    for (int i = 0; i < k; i++)
        g->srv->be.cancel(g->srv->be.ctx, jobs[i]);
}

/* Resume the connection if its handler is waiting (caller holds g->mu). */
static void wake(struct gen_req *g)
{
    if (g->suspended && g->conn) {
        g->suspended = false;
        MHD_resume_connection(g->conn);
    }
}

static void sse_fail(struct gen_req *g, int rc)
{
    if (rc) { /* out of memory while formatting: end the stream rather than send half */
        g->closed = true;
    }
}

/* One streamed token (or, with flush, what the reasoning split still holds)
 * as a chunk for choice i; caller holds g->mu. */
static int stream_token(struct gen_req *g, int i, const struct gw_event *ev, bool flush)
{
    bool usage_null = g->rq.include_usage;
    const bool tools = g->meta.tools != NULL;
    if (!g->rq.think && !tools)
        return ev ? oai_sse_token(g->rq.kind, &g->meta, i, NULL, NULL, ev, g->rq.logprobs, g->rq.gen.logprobs,
                                  usage_null, &g->out, &g->out_len)
                  : 0;
    struct oai_str rs = {0}, cs = {0};
    int rc = 0;
    if (g->rq.think)
        rc = oai_think_feed(&g->think[i], ev ? ev->text : NULL, flush, &rs, &cs);
    else if (ev && ev->text)
        rc = oai_str_put(&cs, ev->text, strlen(ev->text));
    /* content → tool calls: what may be a call is held back until decided */
    struct tc_buf tb = {0};
    size_t first = 0;
    if (!rc && tools)
        rc = tc_feed(&g->tc[i], cs.p, cs.n, flush, &tb, &first);
    const char *content = tools ? (tb.p ? tb.p : "") : (cs.p ? cs.p : "");
    if (!rc && (ev || rs.n || *content))
        rc = oai_sse_token(g->rq.kind, &g->meta, i, content, rs.p, ev, g->rq.logprobs, g->rq.gen.logprobs,
                           usage_null, &g->out, &g->out_len);
    if (!rc && tools && first < g->tc[i].n_calls)
        rc = oai_sse_tool_calls(&g->meta, i, g->tc[i].calls + first, g->tc[i].n_calls - first, first, usage_null,
                                &g->out, &g->out_len);
    free(rs.p);
    free(cs.p);
    tc_buf_free(&tb);
    return rc;
}

/* Backend event for choice u->idx (runs on a backend thread). */
static void on_event(void *user, const struct gw_event *ev)
{
    struct choice_user *u = user;
    struct gen_req *g = u->g;
    struct gw_server *s = g->srv;
    struct gw_job *to_cancel[OAI_MAX_N];
    int n_cancel = 0;
    int i = u->idx;
    bool usage_null = g->rq.include_usage;
    pthread_mutex_lock(&g->mu);
    if (ev->kind == GW_EV_TOKEN) {
        double t = now_s();
        if (ev->token >= 0) {
            if (!g->got_first)
                gw_metrics_ttft(&s->metrics, t - g->t0);
            else
                gw_metrics_itl(&s->metrics, t - g->t_last);
            g->got_first = true;
            g->t_last = t;
        }
        if (g->closed) {
            /* nobody to tell: the job is being canceled */
        } else if (g->rq.stream) {
            if (!g->out_done && !g->failed && g->anth) {
                sse_fail(g, anth_sse_event(g->anth, ev, &g->out, &g->out_len));
            } else if (!g->out_done && !g->failed) {
                int rc = 0;
                if (!g->role_sent[i]) {
                    rc = oai_sse_role(g->rq.kind, &g->meta, i, usage_null, &g->out, &g->out_len);
                    g->role_sent[i] = true;
                }
                if (!rc)
                    rc = stream_token(g, i, ev, false);
                sse_fail(g, rc);
            }
        } else if (oai_choice_add(g->rq.kind, &g->choices[i], ev, g->rq.logprobs)) {
            g->failed = true;
            g->err_status = 500;
            g->err_code = ERR_NOMEM;
            snprintf(g->err_msg, sizeof g->err_msg, "out of memory");
        }
    } else {
        g->final[i] = true;
        g->n_final++;
        if (ev->kind == GW_EV_DONE) {
            g->n_prompt = ev->n_prompt;
            g->n_gen += ev->n_gen;
            gw_metrics_tokens(&s->metrics, 0, ev->n_gen);
            g->stop_hit = ev->stop_hit;
            if (g->rq.stream && g->anth) {
                if (!g->out_done && !g->failed)
                    sse_fail(g, anth_sse_event(g->anth, ev, &g->out, &g->out_len));
            } else if (g->rq.stream) {
                if (!g->out_done && !g->failed) {
                    int rc = 0;
                    if (!g->role_sent[i]) {
                        rc = oai_sse_role(g->rq.kind, &g->meta, i, usage_null, &g->out, &g->out_len);
                        g->role_sent[i] = true;
                    }
                    const char *fin = ev->finish && !strcmp(ev->finish, "length") ? "length" : "stop";
                    if (!rc)
                        rc = stream_token(g, i, NULL, true); /* text the reasoning split still held */
                    if (g->tc[i].n_calls && !strcmp(fin, "stop"))
                        fin = "tool_calls";
                    if (!rc)
                        rc = oai_sse_finish(g->rq.kind, &g->meta, i, fin, usage_null, &g->out, &g->out_len);
                    sse_fail(g, rc);
                }
            } else {
                oai_choice_add(g->rq.kind, &g->choices[i], ev, g->rq.logprobs);
            }
            if (g->n_final == g->n && !g->failed) {
                gw_metrics_tokens(&s->metrics, g->n_prompt, 0);
                if (g->rq.stream && !g->out_done && g->anth) {
                    g->out_done = true; /* message_stop was the last event */
                } else if (g->rq.stream && !g->out_done) {
                    int rc = 0;
                    if (g->rq.include_usage)
                        rc = oai_sse_usage(g->rq.kind, &g->meta, g->n_prompt, g->n_gen, &g->out, &g->out_len);
                    if (!rc)
                        rc = oai_sse_done(&g->out, &g->out_len);
                    sse_fail(g, rc);
                    g->out_done = true;
                }
            }
        } else if (!g->failed && !g->closed) {
            /* The first error wins; the other choices are stopped. A cancel
             * nobody here asked for (the client is still there: the daemon
             * or its worker ended the stream) is an error too, so a client
             * never takes a cut-off stream for a finished one. */
            bool canceled = ev->err_code == ERR_CANCELED;
            g->failed = true;
            g->err_code = canceled ? ERR_IO : ev->err_code;
            g->err_status = gw_http_status(g->err_code);
            snprintf(g->err_msg, sizeof g->err_msg, "%s",
                     canceled ? "the generation was canceled by the server (worker stopped or restarted)"
                              : ev->err_msg ? ev->err_msg : "generation failed");
            n_cancel = running_jobs(g, to_cancel);
            if (g->rq.stream && g->streaming && !g->out_done) {
                /* the 200 and earlier chunks are already sent: report in-band,
                 * then end the stream as every stream ends */
                int rc;
                if (g->anth) { /* Anthropic's streams end with the error event */
                    rc = anth_sse_error(g->err_status, g->err_code, g->err_msg, &g->out, &g->out_len);
                } else {
                    rc = oai_sse_error(g->err_status, g->err_code, g->err_msg, &g->out, &g->out_len);
                    if (!rc)
                        rc = oai_sse_done(&g->out, &g->out_len);
                }
                sse_fail(g, rc);
                g->out_done = true;
            }
        }
    }
    wake(g);
    bool last = ev->kind != GW_EV_TOKEN;
    pthread_mutex_unlock(&g->mu);
    cancel_jobs(g, to_cancel, n_cancel);
    if (last)
        gen_decref(g); /* the job's reference */
}

static void live_add(struct gw_server *s, struct gen_req *g)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_live == s->cap_live) {
        int cap = s->cap_live ? s->cap_live * 2 : 64;
        struct gen_req **nl = realloc(s->live, (size_t)cap * sizeof *nl);
        if (nl) {
            s->live = nl;
            s->cap_live = cap;
        }
    }
    if (s->n_live < s->cap_live) {
        s->live[s->n_live++] = g;
        pthread_mutex_lock(&g->mu);
        g->refs++;
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

static void live_remove(struct gw_server *s, struct gen_req *g)
{
    bool found = false;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == g) {
            s->live[i] = s->live[--s->n_live];
            found = true;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    if (found)
        gen_decref(g);
}

/* The client went away (or the server stops): stop generating, let
 * libmicrohttpd close the connection. */
static void gen_abandon(struct gen_req *g)
{
    struct gw_job *jobs[OAI_MAX_N];
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    int k = running_jobs(g, jobs);
    wake(g);
    pthread_mutex_unlock(&g->mu);
    cancel_jobs(g, jobs, k);
    if (g->emb)
        gw_embed_cancel(g->emb);
}

static void *watcher_main(void *arg)
{
    struct gw_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        int n = s->n_live;
        struct gen_req **snap = n ? malloc((size_t)n * sizeof *snap) : NULL;
        struct pollfd *pf = n ? calloc((size_t)n, sizeof *pf) : NULL;
        int k = 0;
        for (int i = 0; snap && pf && i < n; i++) {
            struct gen_req *g = s->live[i];
            pthread_mutex_lock(&g->mu);
            if (g->conn && !g->closed && g->fd >= 0) {
                g->refs++;
                snap[k] = g;
                pf[k].fd = g->fd;
                pf[k].events = POLLRDHUP;
                k++;
            }
            pthread_mutex_unlock(&g->mu);
        }
        pthread_mutex_unlock(&s->mu);
        header_deadline_sweep(s);
        int rc = poll(pf, (nfds_t)k, 100);
        if (k == 0 && rc == 0) {
            /* nothing to watch: poll(NULL, 0, 100) was the sleep */
        }
        for (int i = 0; i < k; i++) {
            if (rc > 0 && (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                gen_abandon(snap[i]);
            gen_decref(snap[i]);
        }
        free(snap);
        free(pf);
    }
}

/* ---------------------------------------------------------------- SSE */

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct gen_req *g = cls;
    ssize_t r;
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        r = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (g->out_off < g->out_len) {
        size_t n = g->out_len - g->out_off;
        if (n > max)
            n = max;
        memcpy(buf, g->out + g->out_off, n);
        g->out_off += n;
        if (g->out_off == g->out_len)
            g->out_off = g->out_len = 0;
        r = (ssize_t)n;
    } else if (g->out_done) {
        r = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (g->conn) {
        g->suspended = true;
        MHD_suspend_connection(g->conn);
        r = 0;
    } else {
        r = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&g->mu);
    return r;
}

static void sse_free(void *cls) { gen_decref(cls); }

/* ---------------------------------------------------------------- generation */

static void random_id(char *out, size_t cap, const char *prefix)
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)(rand() & 0xff);
    size_t o = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && o + 1 < cap; i++)
        out[o++] = al[r[i] % (sizeof al - 1)];
    out[o] = 0;
}

static void default_model(struct gw_server *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    snprintf(out, cap, "%s", s->default_model);
    pthread_mutex_unlock(&s->mu);
    if (*out)
        return;
    struct gw_status st;
    struct err e;
    if (!s->be.status(s->be.ctx, &st, &e) && st.n_models > 0) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->default_model, sizeof s->default_model, "%s", st.models[0]);
        pthread_mutex_unlock(&s->mu);
        snprintf(out, cap, "%s", st.models[0]);
    } else {
        snprintf(out, cap, "llm170");
    }
}

/* Called with the connection's handler: answer, start the stream, or wait. */
static enum MHD_Result gen_progress(struct conn *c, struct MHD_Connection *mc)
{
    struct gen_req *g = c->gen;
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        pthread_mutex_unlock(&g->mu);
        return MHD_NO;
    }
    if (g->failed && !g->streaming) {
        int st = g->err_status, code = g->err_code;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", g->err_msg);
        pthread_mutex_unlock(&g->mu);
        return respond_error(c, mc, st, code, msg, NULL);
    }
    if (g->emb) {
        if (g->n_final) { /* every input's job ended (emb_done) */
            char *body, msg[512], param[32];
            int code, st = gw_embed_result(g->emb, g->model, &body, &code, msg, sizeof msg, param, sizeof param);
            pthread_mutex_unlock(&g->mu);
            return body ? respond(c, mc, 200, "application/json", body, strlen(body))
                        : respond_error(c, mc, st, code, msg, param);
        }
    } else if (!g->rq.stream && g->n_final == g->n) {
        char *body = g->anth_count ? anth_count_body(g->n_prompt)
                     : g->anth     ? anth_response_body(g->anth, g->choices[0].text, g->choices[0].finish, g->stop_hit,
                                                        g->n_prompt, g->n_gen)
                                   : oai_response_body(g->rq.kind, &g->meta, g->choices, g->n, g->n_prompt, g->rq.think);
        pthread_mutex_unlock(&g->mu);
        return body ? respond(c, mc, 200, "application/json", body, strlen(body))
                    : respond_error(c, mc, 500, ERR_NOMEM, "out of memory", NULL);
    }
    if (g->rq.stream && !g->streaming && (g->out_len > 0 || g->out_done)) {
        g->streaming = true;
        g->refs++; /* the response's reference, dropped by sse_free */
        pthread_mutex_unlock(&g->mu);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, g, sse_free);
        if (!r) {
            gen_decref(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        common_headers(c->srv, mc, r);
        c->responded = true;
        c->streamed = true; /* counted in completed(): 200, or 499 when the client leaves mid-stream */
        enum MHD_Result ok = MHD_queue_response(mc, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    /* nothing to say yet: park the connection until the next event */
    g->suspended = true;
    MHD_suspend_connection(mc);
    pthread_mutex_unlock(&g->mu);
    return MHD_YES;
}

/* The request body as JSON; NULL after answering 400 (not UTF-8, not JSON), that answer in *res. */
static json_t *req_body_json(struct conn *c, struct MHD_Connection *mc, enum MHD_Result *res)
{
    size_t badat = 0;
    if (!oai_utf8_valid(c->body ? c->body : "", c->len, &badat)) {
        char m[128];
        snprintf(m, sizeof m, "the request body is not valid UTF-8 (byte %zu)", badat);
        *res = respond_error(c, mc, 400, ERR_INVALID, m, NULL);
        return NULL;
    }
    json_error_t je;
    json_t *body = json_loadb(c->body ? c->body : "", c->len, JSON_DECODE_ANY, &je);
    if (!body) {
        char m[400];
        snprintf(m, sizeof m, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        *res = respond_error(c, mc, 400, ERR_INVALID, m, NULL);
    }
    return body;
}


/* A chat request's values travel as msgpack structures (proto.h), whose nesting is bounded: deeper
 * messages, tools or template kwargs get a 400 naming the field instead of a refused message later. */
static int chat_depth_check(const struct proto_gen *g, struct err *e)
{
    const struct { const json_t *v; const char *name; } f[] = {
        { g->messages, "messages" }, { g->tools, "tools" }, { g->template_kwargs, "chat_template_kwargs" },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        int d = f[i].v ? proto_json_depth(f[i].v) : 0;
        if (d > PROTO_MAX_DEPTH)
            return err_set(e, ERR_INVALID, "'%s' is nested %d levels deep; at most %d are accepted", f[i].name, d,
                           PROTO_MAX_DEPTH);
    }
    return 0;
}

static enum MHD_Result handle_generate(struct conn *c, struct MHD_Connection *mc, int kind)
{
    const bool anth = anth_route(c->route);
    struct gw_server *s = c->srv;
    enum MHD_Result res;
    json_t *body = req_body_json(c, mc, &res);
    if (!body)
        return res;
    struct gen_req *g = calloc(1, sizeof *g);
    if (!g) {
        json_decref(body);
        return respond_error(c, mc, 500, ERR_NOMEM, "out of memory", NULL);
    }
    char param[64];
    struct err e;
    int rc = anth ? anth_parse(body, c->route == R_COUNT_TOKENS, &g->rq, param, sizeof param, &e)
                  : oai_parse_request(kind, body, &g->rq, param, sizeof param, &e);
    json_decref(body);
    if (rc) {
        oai_request_free(&g->rq);
        free(g);
        return respond_error(c, mc, gw_http_status(rc), rc, e.msg, param);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_lock(&s->mu);
    s->n_gen_alive++;
    pthread_mutex_unlock(&s->mu);
    g->refs = 1; /* the connection's */
    g->srv = s;
    g->conn = mc;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    random_id(g->id, sizeof g->id, anth ? "msg_" : kind == OAI_CHAT ? "chatcmpl-" : "cmpl-");
    if (g->rq.model[0])
        snprintf(g->model, sizeof g->model, "%s", g->rq.model);
    else
        default_model(s, g->model, sizeof g->model);
    g->meta = (struct oai_meta){g->id, (long long)time(NULL), g->model, NULL};
    g->anth_count = c->route == R_COUNT_TOKENS;
    if (anth && !(g->anth = anth_state_new(&g->rq, g->id, g->model))) {
        g->failed = true; /* answered by gen_progress below, before any job */
        g->err_status = 500;
        g->err_code = ERR_NOMEM;
        snprintf(g->err_msg, sizeof g->err_msg, "out of memory");
    }
    if (g->rq.tool_parse.family && !anth) {
        g->meta.tools = &g->rq.tool_parse;
        for (int i = 0; i < g->rq.n; i++)
            tc_parser_init(&g->tc[i], g->rq.tool_parse.family, g->rq.tool_parse.tools, g->rq.tool_parse.max_calls, 0);
    }
    g->t0 = now_s();
    c->gen = g;
    gw_metrics_in_flight(&s->metrics, 1);
    live_add(s, g);

    /* all choices count from the start, so an early finisher cannot end the request alone */
    int want = anth && !g->anth ? 0 : g->rq.n;
    pthread_mutex_lock(&g->mu);
    g->n = want;
    g->refs += want; /* one per job, dropped at its final event */
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < want; i++) {
        struct proto_gen gen = g->rq.gen; /* a view (backend.h) */
        if (i > 0 && (gen.set & PG_SEED))
            gen.seed += (uint32_t)i; /* distinct but reproducible choices */
        g->users[i] = (struct choice_user){g, i};
        struct gw_job *job = NULL;
        rc = chat_depth_check(&gen, &e);
        if (!rc)
            rc = s->be.submit(s->be.ctx, &gen, on_event, &g->users[i], &job, &e);
        pthread_mutex_lock(&g->mu);
        g->jobs[i] = job;
        if (rc) {
            /* this and the choices not yet submitted will never report */
            for (int k = i; k < want; k++)
                g->final[k] = true;
            g->n_final += want - i;
            g->refs -= want - i;
            if (!g->failed) {
                g->failed = true;
                g->err_code = rc;
                g->err_status = gw_http_status(rc);
                snprintf(g->err_msg, sizeof g->err_msg, "%s", e.msg);
            }
            struct gw_job *jobs[OAI_MAX_N];
            int k = running_jobs(g, jobs);
            pthread_mutex_unlock(&g->mu);
            cancel_jobs(g, jobs, k);
            break;
        }
        pthread_mutex_unlock(&g->mu);
    }
    return gen_progress(c, mc);
}

/* The embedding's last job ended (a backend thread, or the handler when nothing could start): answer. */
static void emb_done(void *user)
{
    struct gen_req *g = user;
    pthread_mutex_lock(&g->mu);
    g->n_final = 1;
    wake(g);
    pthread_mutex_unlock(&g->mu);
    gen_decref(g); /* the jobs' reference */
}

/* POST /v1/embeddings: a gen_req without choices (so the hang-up watcher, shutdown and the suspended
 * connection work as for generations) whose inputs run as embedding jobs (embed.c). */
static enum MHD_Result handle_embeddings(struct conn *c, struct MHD_Connection *mc)
{
    struct gw_server *s = c->srv;
    enum MHD_Result res;
    json_t *body = req_body_json(c, mc, &res);
    if (!body)
        return res;
    char param[64];
    struct err e;
    struct gw_embed *x = NULL;
    int rc = gw_embed_parse(body, &x, param, sizeof param, &e);
    json_decref(body);
    if (rc)
        return respond_error(c, mc, gw_http_status(rc), rc, e.msg, param);
    struct gen_req *g = calloc(1, sizeof *g);
    if (!g) {
        gw_embed_free(x);
        return respond_error(c, mc, 500, ERR_NOMEM, "out of memory", NULL);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_lock(&s->mu);
    s->n_gen_alive++;
    pthread_mutex_unlock(&s->mu);
    g->refs = 2; /* the connection's and the jobs' (emb_done) */
    g->srv = s;
    g->conn = mc;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    g->emb = x;
    if (gw_embed_model(x)[0])
        snprintf(g->model, sizeof g->model, "%s", gw_embed_model(x));
    else
        default_model(s, g->model, sizeof g->model);
    g->t0 = now_s();
    c->gen = g;
    gw_metrics_in_flight(&s->metrics, 1);
    live_add(s, g);
    gw_embed_start(x, &s->be, gw_embed_model(x), emb_done, g);
    return gen_progress(c, mc);
}

/* ---------------------------------------------------------------- other endpoints */

static enum MHD_Result handle_health(struct conn *c, struct MHD_Connection *mc)
{
    struct gw_status st;
    struct err e;
    int rc = c->srv->be.status(c->srv->be.ctx, &st, &e);
    if (rc)
        return respond_error(c, mc, 503, ERR_IO, e.msg, NULL);
    if (!st.ready) { /* every not-ready state of the daemon is 503; the message says which */
        bool stalled = false, ready = false;
        for (int i = 0; i < st.n_workers; i++) {
            stalled |= !strcmp(st.workers[i].state, "unresponsive");
            ready |= !strcmp(st.workers[i].state, "ready");
        }
        const char *why = stalled ? "a worker stopped answering (stopped or hung); llm170d restarts it"
                          : ready ? "llm170d is draining (shutting down)"
                                  : "no worker is ready (loading or restarting)";
        return respond_error(c, mc, 503, ERR_IO, why, NULL);
    }
    return respond_json(c, mc, 200, json_pack("{s:s}", "status", "ok"));
}

static json_t *model_obj(struct conn *c, const struct gw_status *st, int i)
{
    int n_ctx = 0;
    for (int w = 0; w < st->n_workers; w++)
        if (!strcmp(st->workers[w].model, st->models[i]))
            n_ctx = st->workers[w].n_ctx;
    return json_pack("{s:s, s:s, s:I, s:s, s:{s:i}}", "id", st->models[i], "object", "model", "created",
                     (json_int_t)c->srv->started, "owned_by", "llm170", "meta", "n_ctx", n_ctx);
}

static enum MHD_Result handle_models(struct conn *c, struct MHD_Connection *mc, const char *one)
{
    struct gw_status st;
    struct err e;
    int rc = c->srv->be.status(c->srv->be.ctx, &st, &e);
    if (rc)
        return respond_error(c, mc, gw_http_status(rc), rc, e.msg, NULL);
    if (st.n_models > 0) {
        pthread_mutex_lock(&c->srv->mu);
        snprintf(c->srv->default_model, sizeof c->srv->default_model, "%s", st.models[0]);
        pthread_mutex_unlock(&c->srv->mu);
    }
    if (one) {
        for (int i = 0; i < st.n_models; i++)
            if (!strcmp(st.models[i], one))
                return respond_json(c, mc, 200, model_obj(c, &st, i));
        char m[300];
        snprintf(m, sizeof m, "model '%.200s' not found", one);
        return respond_error(c, mc, 404, ERR_NOTFOUND, m, "model");
    }
    json_t *data = json_array();
    for (int i = 0; i < st.n_models; i++)
        json_array_append_new(data, model_obj(c, &st, i));
    return respond_json(c, mc, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static enum MHD_Result handle_metrics(struct conn *c, struct MHD_Connection *mc)
{
    struct gw_status st;
    struct err e;
    int rc = c->srv->be.status(c->srv->be.ctx, &st, &e);
    /* count this scrape before rendering so it shows up in its own output */
    gw_metrics_request(&c->srv->metrics, c->endpoint, 200);
    char *text = gw_metrics_render(&c->srv->metrics, rc ? NULL : &st);
    if (!text)
        return respond_error(c, mc, 500, ERR_NOMEM, "out of memory", NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    common_headers(c->srv, mc, r);
    c->responded = true;
    enum MHD_Result ok = MHD_queue_response(mc, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static json_t *parse_body_object(struct conn *c, struct MHD_Connection *mc, enum MHD_Result *res)
{
    size_t badat;
    if (!oai_utf8_valid(c->body ? c->body : "", c->len, &badat)) {
        char m[128];
        snprintf(m, sizeof m, "the request body is not valid UTF-8 (byte %zu)", badat);
        *res = respond_error(c, mc, 400, ERR_INVALID, m, NULL);
        return NULL;
    }
    json_error_t je;
    json_t *b = json_loadb(c->body ? c->body : "", c->len, JSON_DECODE_ANY, &je);
    if (!b || !json_is_object(b)) {
        char m[400];
        if (b)
            snprintf(m, sizeof m, "the request body must be a JSON object");
        else
            snprintf(m, sizeof m, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line,
                     je.column);
        json_decref(b);
        *res = respond_error(c, mc, 400, ERR_INVALID, m, NULL);
        return NULL;
    }
    json_t *m = json_object_get(b, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        json_decref(b);
        *res = respond_error(c, mc, 400, ERR_INVALID, "'model' must be a string", "model");
        return NULL;
    }
    return b;
}

static enum MHD_Result handle_tokenize(struct conn *c, struct MHD_Connection *mc)
{
    enum MHD_Result res = MHD_NO;
    json_t *b = parse_body_object(c, mc, &res);
    if (!b)
        return res;
    json_t *content = json_object_get(b, "content"), *as = json_object_get(b, "add_special"),
           *ps = json_object_get(b, "parse_special"), *wp = json_object_get(b, "with_pieces");
    const char *model = json_string_value(json_object_get(b, "model"));
    if (!json_is_string(content)) {
        json_decref(b);
        return respond_error(c, mc, 400, ERR_INVALID, "'content' must be a string", "content");
    }
    if ((as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps)) || (wp && !json_is_boolean(wp))) {
        json_decref(b);
        return respond_error(c, mc, 400, ERR_INVALID, "'add_special', 'parse_special' and 'with_pieces' must be booleans",
                             NULL);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    struct err e;
    /* llama-server's defaults: add_special false, parse_special true */
    int rc = c->srv->be.tokenize(c->srv->be.ctx, model, json_string_value(content), json_is_true(as), !json_is_false(ps),
                                 &ids, &n, &e);
    if (rc) {
        json_decref(b);
        return respond_error(c, mc, gw_http_status(rc), rc, e.msg, NULL);
    }
    if (json_is_true(wp) && n > 8192) { /* one daemon round trip per piece */
        free(ids);
        json_decref(b);
        return respond_error(c, mc, 400, ERR_INVALID, "'with_pieces' is limited to 8192 tokens", "with_pieces");
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (json_is_true(wp)) {
            char *piece = NULL;
            json_t *pj = NULL;
            if (!c->srv->be.detokenize(c->srv->be.ctx, model, &ids[i], 1, &piece, &e))
                pj = json_string(piece);
            if (!pj) { /* a piece that is part of a UTF-8 character: its bytes */
                pj = json_array();
                for (const unsigned char *p = (const unsigned char *)(piece ? piece : ""); *p; p++)
                    json_array_append_new(pj, json_integer(*p));
            }
            free(piece);
            json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece", pj));
        } else {
            json_array_append_new(arr, json_integer(ids[i]));
        }
    }
    free(ids);
    json_decref(b);
    return respond_json(c, mc, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result handle_detokenize(struct conn *c, struct MHD_Connection *mc)
{
    enum MHD_Result res = MHD_NO;
    json_t *b = parse_body_object(c, mc, &res);
    if (!b)
        return res;
    json_t *toks = json_object_get(b, "tokens");
    const char *model = json_string_value(json_object_get(b, "model"));
    if (!json_is_array(toks)) {
        json_decref(b);
        return respond_error(c, mc, 400, ERR_INVALID, "'tokens' must be an array of token ids", "tokens");
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    json_t *x;
    json_array_foreach(toks, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            free(ids);
            json_decref(b);
            return respond_error(c, mc, 400, ERR_INVALID, "'tokens' must be an array of token ids", "tokens");
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    char *text = NULL;
    struct err e;
    int rc = c->srv->be.detokenize(c->srv->be.ctx, model, ids, n, &text, &e);
    free(ids);
    json_decref(b);
    if (rc)
        return respond_error(c, mc, gw_http_status(rc), rc, e.msg, NULL);
    json_t *content = json_string(text ? text : "");
    if (!content) { /* ids that end inside a UTF-8 character */
        size_t l = strlen(text), bad = 0;
        while (!oai_utf8_valid(text, l, &bad) && l > 0)
            l = bad;
        content = json_stringn(text, l);
    }
    free(text);
    return respond_json(c, mc, 200, json_pack("{s:o}", "content", content));
}

static enum MHD_Result handle_preflight(struct conn *c, struct MHD_Connection *mc)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    common_headers(c->srv, mc, r);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST, OPTIONS");
    if (c->srv->cfg.cors_origins[0]) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS");
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
                                "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, "86400");
    }
    c->responded = true;
    enum MHD_Result ok = MHD_queue_response(mc, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---------------------------------------------------------------- routing */

static int route_of(const char *url, const char *method, const char **endpoint, bool *method_ok)
{
    static const struct { const char *path; const char *method; int route; const char *endpoint; } routes[] = {
        {"/v1/chat/completions", "POST", R_CHAT, "/v1/chat/completions"},
        {"/chat/completions", "POST", R_CHAT, "/v1/chat/completions"},
        {"/v1/completions", "POST", R_COMPL, "/v1/completions"},
        {"/completions", "POST", R_COMPL, "/v1/completions"},
        {"/v1/models", "GET", R_MODELS, "/v1/models"},
        {"/models", "GET", R_MODELS, "/v1/models"},
        {"/health", "GET", R_HEALTH, "/health"},
        {"/v1/health", "GET", R_HEALTH, "/health"},
        {"/metrics", "GET", R_METRICS, "/metrics"},
        {"/tokenize", "POST", R_TOKENIZE, "/tokenize"},
        {"/detokenize", "POST", R_DETOKENIZE, "/detokenize"},
        {"/v1/embeddings", "POST", R_EMBED, "/v1/embeddings"},
        {"/embeddings", "POST", R_EMBED, "/v1/embeddings"},
        {"/v1/messages", "POST", R_MESSAGES, "/v1/messages"},
        {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS, "/v1/messages/count_tokens"},
    };
    *method_ok = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path))
            continue;
        *endpoint = routes[i].endpoint;
        if (!strcmp(method, "OPTIONS")) {
            *method_ok = true;
            return R_PREFLIGHT;
        }
        bool head = !strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET");
        if (!strcmp(method, routes[i].method) || head) {
            *method_ok = true;
            return routes[i].route;
        }
        return R_NONE;
    }
    /* GET /v1/models/<id> (the SDKs' models.retrieve) */
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *endpoint = "/v1/models";
        *method_ok = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        return !strcmp(method, "OPTIONS") ? R_PREFLIGHT : *method_ok ? R_MODEL_ONE : R_NONE;
    }
    *endpoint = "other";
    return R_NONE;
}

static bool auth_ok(struct gw_server *s, struct MHD_Connection *mc)
{
    if (!s->cfg.api_key[0])
        return true;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ')
            h++;
    } else if (!(h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key"))) {
        return false; /* Anthropic's clients send the key as x-api-key */
    }
    /* compare in time independent of where they differ */
    size_t a = strlen(h), b = strlen(s->cfg.api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned)(unsigned char)s->cfg.api_key[i] ^ (unsigned)(unsigned char)(i < a ? h[i] : 0);
    return diff == 0;
}

/* ---------------------------------------------------------------- framing */

/* libmicrohttpd 0.9.75 lets through framing that a proxy in front may read
 * differently (request smuggling): it takes one of two Content-Lengths, takes
 * a chunked body beside a Content-Length, keeps a bare CR inside a header
 * value, and waits forever for a body in a transfer coding it cannot decode.
 * The first call of the access handler sees every header as received, so the
 * request is judged there, before a byte of its body is used. */
struct framing {
    int n_cl, n_te;
    bool cl_bad, te_bad, bare_cr;
};

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (strchr(key, '\r') || (value && strchr(value, '\r')))
        f->bare_cr = true;
    if (!value)
        value = "";
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        f->n_cl++;
        const char *p = value;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            f->cl_bad = true; /* "-1", "+5", "": not a length */
        while (*p >= '0' && *p <= '9')
            p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p)
            f->cl_bad = true;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_te++;
        /* only "chunked" alone is decoded here; anything else is 501 */
        const char *p = value;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t'))
            l--;
        if (l != 7 || strncasecmp(p, "chunked", 7))
            f->te_bad = true;
    }
    return MHD_YES;
}

/* 0 when the request's framing is sound, else the status to answer (and *why). */
static int framing_check(struct MHD_Connection *mc, bool nul_in_uri, const char **why)
{
    struct framing f = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, framing_header, &f);
    if (nul_in_uri)
        return *why = "the request path contains %00", 400;
    if (f.bare_cr)
        return *why = "a header contains a bare CR", 400;
    if (f.n_cl > 1)
        return *why = "more than one Content-Length header", 400;
    if (f.cl_bad)
        return *why = "Content-Length is not a non-negative decimal number", 400;
    if (f.n_cl && f.n_te)
        return *why = "both Content-Length and Transfer-Encoding", 400;
    if (f.n_te > 1 || f.te_bad)
        return *why = "unsupported Transfer-Encoding (only 'chunked' is understood)", 501;
    return 0;
}

/* Called once the request line is in: the raw URI, before libmicrohttpd
 * decodes %00 into a string end (GET /health%00.html would be GET /health).
 * What it returns becomes the request's first *con_cls. */
static void *uri_log(void *cls, const char *uri, struct MHD_Connection *mc)
{
    (void)mc;
    struct gw_server *s = cls;
    return uri && strstr(uri, "%00") ? &s->nul_uri_mark : NULL;
}

/* ---------------------------------------------------------------- header deadline */

static void conn_notify(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
    struct gw_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct hconn *h = calloc(1, sizeof *h);
        if (!h)
            return; /* this one goes without a header deadline */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        h->fd = ci ? ci->connect_fd : -1;
        h->t_wait = now_s();
        h->waiting = true;
        pthread_mutex_lock(&s->cmu);
        h->next = s->conns;
        if (s->conns)
            s->conns->prev = h;
        s->conns = h;
        pthread_mutex_unlock(&s->cmu);
        *socket_context = h;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct hconn *h = *socket_context;
        if (!h)
            return;
        pthread_mutex_lock(&s->cmu);
        if (h->prev)
            h->prev->next = h->next;
        else
            s->conns = h->next;
        if (h->next)
            h->next->prev = h->prev;
        pthread_mutex_unlock(&s->cmu);
        *socket_context = NULL;
        free(h);
    }
}

/* The connection's header block is complete (waiting = false) or its
 * response ended and it waits for the next one (waiting = true). */
static void conn_waiting(struct gw_server *s, struct MHD_Connection *mc, bool waiting)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct hconn *h = ci ? ci->socket_context : NULL;
    if (!h)
        return;
    pthread_mutex_lock(&s->cmu);
    h->waiting = waiting;
    h->t_wait = now_s();
    pthread_mutex_unlock(&s->cmu);
}

/* Shut down the sockets of connections whose header block is overdue. The
 * event loop then sees the end of the stream and closes the connection; a
 * slow sender holds nothing beyond the deadline. */
static void header_deadline_sweep(struct gw_server *s)
{
    if (!s->cfg.header_timeout_s)
        return;
    double now = now_s();
    pthread_mutex_lock(&s->cmu);
    for (struct hconn *h = s->conns; h; h = h->next)
        if (h->waiting && !h->cut && h->fd >= 0 && now - h->t_wait > s->cfg.header_timeout_s) {
            shutdown(h->fd, SHUT_RDWR);
            h->cut = true;
        }
    pthread_mutex_unlock(&s->cmu);
}

static enum MHD_Result ahc(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                           const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct gw_server *s = cls;
    struct conn *c = *con_cls;
    if (!c || c == (void *)&s->nul_uri_mark) {
        bool nul_in_uri = c != NULL;
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->srv = s;
        *con_cls = c;
        conn_waiting(s, mc, false);
        bool method_ok;
        c->route = route_of(url, method, &c->endpoint, &method_ok);
        const char *why = NULL;
        int bad = framing_check(mc, nul_in_uri, &why);
        if (bad) {
            c->close = true;
            return respond_error(c, mc, bad, bad == 501 ? ERR_UNSUPPORTED : ERR_INVALID, why, NULL);
        }
        if (c->route == R_NONE) {
            char m[300];
            snprintf(m, sizeof m, "unknown route: %.16s %.200s", method, url);
            return respond_error(c, mc, 404, ERR_NOTFOUND, m, NULL);
        }
        c->t_start = now_s();
        if (c->route == R_PREFLIGHT)
            return MHD_YES;
        if (c->route != R_HEALTH && !auth_ok(s, mc)) {
            bool h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION) ||
                     MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
            return respond_error(c, mc, 401, ERR_INVALID,
                                 h ? "invalid API key"
                                   : "missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')",
                                 NULL);
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared > s->cfg.max_body) {
            /* A client waiting for "100 Continue" gets the 413 now and never
             * sends the body. Any other client is already sending it: answer
             * now and close, and its socket errors out before it reads the
             * answer; so its body is read and dropped (as nginx's lingering
             * close does), unless it is beyond all reason. */
            const char *expect = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
            if ((expect && strcasestr(expect, "100-continue")) || declared > GW_DISCARD_MAX) {
                char m[200];
                snprintf(m, sizeof m, "request body too large (%llu bytes; the limit is %zu)", declared, s->cfg.max_body);
                return respond_error(c, mc, 413, ERR_RANGE, m, NULL);
            }
            c->too_large = true;
            c->declared = declared;
        }
        return MHD_YES;
    }
    if (c->responded) { /* answered early (413/401/404): drop the rest of the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (s->cfg.timeout_s && now_s() - c->t_start > s->cfg.timeout_s)
            return MHD_NO; /* a body trickling in for longer than the timeout: drop the connection */
        if (c->too_large || c->len + n > s->cfg.max_body) {
            c->too_large = true; /* a chunked body that grew past the limit */
            return MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->len + n + 1)
                cap *= 2;
            char *nb = realloc(c->body, cap);
            if (!nb)
                return MHD_NO;
            c->body = nb;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        c->body[c->len] = 0;
        return MHD_YES;
    }
    if (c->gen)
        return gen_progress(c, mc);
    if (c->too_large) {
        char m[200];
        if (c->declared)
            snprintf(m, sizeof m, "request body too large (%llu bytes; the limit is %zu)", c->declared, s->cfg.max_body);
        else
            snprintf(m, sizeof m, "request body too large (the limit is %zu bytes)", s->cfg.max_body);
        return respond_error(c, mc, 413, ERR_RANGE, m, NULL);
    }
    switch (c->route) {
    case R_CHAT: return handle_generate(c, mc, OAI_CHAT);
    case R_COMPL: return handle_generate(c, mc, OAI_COMPLETION);
    case R_MODELS: return handle_models(c, mc, NULL);
    case R_MODEL_ONE: return handle_models(c, mc, url + 11);
    case R_HEALTH: return handle_health(c, mc);
    case R_METRICS: return handle_metrics(c, mc);
    case R_TOKENIZE: return handle_tokenize(c, mc);
    case R_DETOKENIZE: return handle_detokenize(c, mc);
    case R_PREFLIGHT: return handle_preflight(c, mc);
    case R_EMBED: return handle_embeddings(c, mc);
    case R_MESSAGES: case R_COUNT_TOKENS: return handle_generate(c, mc, OAI_CHAT);
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct gw_server *s = cls;
    conn_waiting(s, mc, true); /* keep-alive: the next header block's deadline starts now */
    struct conn *c = *con_cls;
    if (!c || c == (void *)&s->nul_uri_mark)
        return;
    *con_cls = NULL;
    if (c->streamed) /* a stream is counted when it ends: 499 when the client left mid-stream */
        gw_metrics_request(&s->metrics, c->endpoint, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499);
    else if (!c->responded && !c->gen && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && c->endpoint)
        gw_metrics_request(&s->metrics, c->endpoint, 499); /* left while sending its body */
    struct gen_req *g = c->gen;
    if (g) {
        struct gw_job *jobs[OAI_MAX_N];
        pthread_mutex_lock(&g->mu);
        g->conn = NULL;
        g->suspended = false;
        int k = 0;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || g->n_final < g->n) {
            g->closed = true;
            k = running_jobs(g, jobs);
        }
        bool emb_stop = g->emb && !g->n_final;
        pthread_mutex_unlock(&g->mu);
        cancel_jobs(g, jobs, k);
        if (emb_stop)
            gw_embed_cancel(g->emb);
        if (!c->responded)
            gw_metrics_request(&c->srv->metrics, c->endpoint, 499); /* the client left first */
        gw_metrics_in_flight(&c->srv->metrics, -1);
        live_remove(c->srv, g);
        gen_decref(g); /* the connection's reference */
    }
    free(c->body);
    free(c);
}

/* ---------------------------------------------------------------- lifecycle */

int gw_server_start(struct gw_server **out, const struct gw_config *cfg, const struct gw_backend *be, struct err *e)
{
    *out = NULL;
    struct gw_server *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(e, ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->be = *be;
    s->started = (long long)time(NULL);
    gw_metrics_init(&s->metrics);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->gen_cv, NULL);
    pthread_mutex_init(&s->cmu, NULL);

    char host[256];
    snprintf(host, sizeof host, "%s", cfg->host);
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') { /* [::1] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (gai) {
        err_set(e, ERR_INVALID, "cannot resolve listen address '%s': %s", cfg->host, gai_strerror(gai));
        goto fail;
    }
    s->cfg.max_connections = fd_room(cfg->max_connections ? cfg->max_connections : 16384u);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, ahc, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_THREAD_POOL_SIZE, cfg->threads ? cfg->threads : 1u,
                              MHD_OPTION_CONNECTION_LIMIT, s->cfg.max_connections,
                              MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                              MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s, MHD_OPTION_URI_LOG_CALLBACK, uri_log, s,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_per_ip, MHD_OPTION_END);
    /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: with it (SO_REUSEPORT) a second
     * gateway on the same port started fine and the kernel split the
     * clients between the two; now it fails with EADDRINUSE. */
    int saved = errno;
    freeaddrinfo(ai);
    if (!s->mhd) {
        err_set(e, ERR_IO, "cannot listen on %s:%d: %s", cfg->host, cfg->port, saved ? strerror(saved) : "failed");
        goto fail;
    }
    if (pthread_create(&s->watcher, NULL, watcher_main, s)) {
        err_set(e, ERR_NOMEM, "cannot start the watcher thread");
        MHD_stop_daemon(s->mhd);
        goto fail;
    }
    s->watcher_started = true;
    *out = s;
    return 0;
fail:
    gw_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->cmu);
    pthread_cond_destroy(&s->gen_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return e->code;
}

int gw_server_port(const struct gw_server *s)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : s->cfg.port;
}

unsigned gw_server_max_connections(const struct gw_server *s) { return s->cfg.max_connections; }

int gw_server_drain(struct gw_server *s, unsigned timeout_s, volatile int *abort)
{
    MHD_socket ls = MHD_quiesce_daemon(s->mhd);
    if (ls != MHD_INVALID_SOCKET)
        close(ls); /* new clients are refused at once instead of queueing */
    double end = now_s() + timeout_s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int live = s->n_live;
        pthread_mutex_unlock(&s->mu);
        if (!live || now_s() >= end || (abort && *abort))
            return live;
        usleep(20000);
    }
}

void gw_server_stop(struct gw_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    int n = s->n_live;
    struct gen_req **snap = n ? malloc((size_t)n * sizeof *snap) : NULL;
    for (int i = 0; snap && i < n; i++) {
        snap[i] = s->live[i];
        pthread_mutex_lock(&snap[i]->mu);
        snap[i]->refs++;
        pthread_mutex_unlock(&snap[i]->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->watcher_started)
        pthread_join(s->watcher, NULL);
    /* every suspended connection must be resumed before the daemon stops */
    for (int i = 0; snap && i < n; i++) {
        gen_abandon(snap[i]);
        gen_decref(snap[i]);
    }
    free(snap);
    MHD_stop_daemon(s->mhd);
    /* canceled jobs still deliver their final events into our requests:
     * wait for them (bounded; a stuck backend leaks the server instead) */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&s->mu);
    while (s->n_gen_alive > 0)
        if (pthread_cond_timedwait(&s->gen_cv, &s->mu, &dl))
            break;
    int left = s->n_gen_alive;
    pthread_mutex_unlock(&s->mu);
    if (left)
        return;
    free(s->live);
    pthread_mutex_destroy(&s->cmu);
    pthread_cond_destroy(&s->gen_cv);
    gw_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
