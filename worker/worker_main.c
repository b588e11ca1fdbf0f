/* llm170-worker — owns one device (or the CPU): loads the model, runs the
 * continuous-batching scheduler and serves llm170d over one pair0 socket.
 *
 *   llm170-worker --connect URL --model PATH [--name NAME] [--backend cpu|hip|vulkan]
 *                 [--gpu N] [--slots N] [--queue N] [--threads N] [--ctx N] [--batch N] [--idx N]
 *                 [--flush-ms N] [--snapshots N]
 *
 * Two threads: the main one receives the daemon's messages (generate,
 * cancel, ping, tokenize, detokenize, shutdown); the scheduler thread steps
 * the engine and sends each token back as it is produced. Exit status 3
 * means "cannot load/run this model here": the daemon does not restart it. */
#include <errno.h>
#include <malloc.h>
#include <jansson.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat_render.h"
#include "../common/clock.h"
#include "../common/toolcall.h"
#include "../common/version.h"
#include "../proto/wire.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "serve/intake.h"
#include "serve/sampling.h"
#include "serve/sched.h"
#include "serve/toolgram.h"
#include "tok/tok.h"

#define EXIT_FATAL 3
#define BATCH_SEND_BYTES (1u << 20) /* a batch this large goes out whatever its age */
#define DEFAULT_FLUSH_MS 10         /* under the gateway's 20 ms poll gap: a held chunk rarely misses a poll */

struct worker {
    nng_socket sock;
    struct model *m;
    const struct tok_vocab *v;
    struct engine_ctx *eng;
    struct sched *s;
    struct smp_params smp_model; /* llama-server defaults + the GGUF's general.sampling.* */
    char *chat_tmpl;             /* tokenizer.chat_template, NULL = ChatML */
    pthread_mutex_t pre_mu;      /* guards pre */
    struct prefilled *pre;       /* requests whose first event still owes the reply's prefilled start */
    atomic_int n_pre;            /* entries in pre: the event path looks only while there are any */
    struct intake *in;           /* tokenizes and renders requests off the receive loop */
    size_t span_max;             /* tok_span_max: a prompt's bytes bound its tokens from below */
    volatile int quit;
    volatile int shutting;       /* refusing new requests */
    volatile int drained;        /* ... and every one received has reached the scheduler */
    int idx;
    /* chunks of the scheduler steps since the last send: one message per
     * flush_ms at most while steps follow each other (not one per stream and
     * token, nor one per step: every message wakes llm170d, whose threads
     * share the cores with the engine's), at once when the scheduler idles */
    struct proto_chunkbuf batch; /* the steps' chunks message, encoded as their events come */
    uint64_t flush_ns;           /* --flush-ms: the longest a chunk waits in batch while steps run */
    bool batch_final;            /* batch holds a stream's final chunk */
};

static volatile sig_atomic_t g_term;
static void on_term(int sig) { (void)sig; g_term = 1; }

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llm170-worker: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void send_msg(struct worker *w, const struct proto_msg *m)
{
    struct err e;
    if (proto_send(w->sock, m, 5000, &e))
        logf_("send %s: %s", proto_type_name(m->type), e.msg);
}

static void send_error(struct worker *w, uint64_t id, int err_code, const char *msg)
{
    struct proto_msg m;
    proto_error(&m, id, proto_errc_from_err(err_code), msg);
    send_msg(w, &m);
}

/* ---------------------------------------------------------------- events */

/* A request whose prompt ends with the start of its reply (a tool call's
 * opening, tc_prefill): the model continues it, so the text it generates
 * lacks it; the first event carries it in front, and the reply reads as
 * the model's whole turn (the gateway finds the call in it). */
struct prefilled {
    uint64_t id;
    char *text;
    struct prefilled *next;
};

static void pre_add(struct worker *w, uint64_t id, char *text)
{
    struct prefilled *p = malloc(sizeof *p);
    if (!p) {
        free(text);
        return;
    }
    *p = (struct prefilled){id, text, NULL};
    pthread_mutex_lock(&w->pre_mu);
    p->next = w->pre;
    w->pre = p;
    atomic_fetch_add(&w->n_pre, 1);
    pthread_mutex_unlock(&w->pre_mu);
}

/* The prefill request id still owes (malloc'ed; NULL none), forgotten here. */
static char *pre_take(struct worker *w, uint64_t id)
{
    char *text = NULL;
    pthread_mutex_lock(&w->pre_mu);
    for (struct prefilled **pp = &w->pre; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct prefilled *p = *pp;
            *pp = p->next;
            text = p->text;
            free(p);
            atomic_fetch_sub(&w->n_pre, 1);
            break;
        }
    }
    pthread_mutex_unlock(&w->pre_mu);
    return text;
}

static void flush_batch(struct worker *w);

/* True on the scheduler thread while it is inside sched_step: its events are
 * batched; an event from any other thread goes out alone. */
static _Thread_local bool tl_in_step;

static void send_event(struct worker *w, const struct sched_event *ev)
{
    struct proto_chunk c = {0};
    c.token = ev->token;
    c.text = (char *)(ev->text ? ev->text : ""); /* n_text bytes, not NUL-terminated */
    c.has_logprob = ev->has_logprob;
    c.logprob = isfinite(ev->logprob) ? ev->logprob : -1e30f;
    struct proto_top top[32];
    for (int i = 0; i < ev->n_top && i < 32; i++)
        top[i] = (struct proto_top){ev->top[i].token, isfinite(ev->top[i].logprob) ? ev->top[i].logprob : -1e30f,
                                    (char *)ev->top[i].text};
    c.top = ev->n_top ? top : NULL;
    c.n_top = (size_t)(ev->n_top < 32 ? ev->n_top : 32);
    c.finish = ev->finish;
    c.n_prompt = ev->n_prompt;
    c.n_gen = ev->n_gen;
    c.n_cached = ev->n_cached;
    c.stop_hit = ev->stop_hit;
    c.embd = (float *)ev->embd; /* an embedding's final event */
    c.n_embd = ev->embd ? (size_t)ev->n_embd : 0;
    if (ev->finish == SCHED_ERROR) {
        c.errc = proto_errc_from_err(ev->err_code);
        if (c.errc == PE_NONE || c.errc == PE_QUEUE_FULL)
            c.errc = PE_INTERNAL;
        c.message = (char *)(ev->message ? ev->message : "generation failed");
    }
    if (tl_in_step) {
        struct err e;
        c.sid = ev->id;
        if (!proto_chunkbuf_add(&w->batch, &c, ev->n_text, &e)) {
            w->batch_final |= ev->finish != 0;
            return;
        }
        flush_batch(w); /* out of memory for the batch: what it holds goes first, in order */
        c.sid = 0;
    }
    /* alone, in a message of its stream: proto_encode wants the text NUL-terminated */
    char *text = malloc(ev->n_text + 1);
    if (!text)
        return;
    memcpy(text, c.text, ev->n_text);
    text[ev->n_text] = 0;
    c.text = text;
    struct proto_msg m;
    proto_msg_init(&m, PT_CHUNKS);
    m.id = ev->id;
    m.chunks = &c;
    m.n_chunks = 1;
    send_msg(w, &m);
    free(text);
}

/* Send the chunks batched so far as one message (id 0: each chunk names its stream). */
static void on_event(void *user, const struct sched_event *ev)
{
    struct worker *w = user;
    char *pre = atomic_load_explicit(&w->n_pre, memory_order_relaxed) ? pre_take(w, ev->id) : NULL;
    char *joined = NULL;
    struct sched_event with_pre;
    if (pre && ev->finish != SCHED_ERROR && ev->finish != SCHED_CANCEL) {
        size_t pl = strlen(pre);
        joined = malloc(pl + ev->n_text + 1);
        if (joined) {
            memcpy(joined, pre, pl);
            if (ev->n_text)
                memcpy(joined + pl, ev->text, ev->n_text);
            joined[pl + ev->n_text] = 0;
            with_pre = *ev;
            with_pre.text = joined;
            with_pre.n_text = pl + ev->n_text;
            ev = &with_pre;
        }
    }
    send_event(w, ev);
    free(joined);
    free(pre);
}

static void flush_batch(struct worker *w)
{
    if (!w->batch.n)
        return;
    struct err e;
    const char *buf;
    size_t len;
    if (proto_chunkbuf_end(&w->batch, &buf, &len, &e) || proto_send_bytes(w->sock, buf, len, 5000, &e))
        logf_("send chunks: %s", e.msg);
    proto_chunkbuf_reset(&w->batch);
    w->batch_final = false;
}

/* LLM170_SCHED_STATS=S: every S seconds, one line on stderr with what the
 * scheduler thread did since the last line (occupancy, empty slots between
 * requests, time per phase): how a serving worker spends its time. */
struct step_stats {
    uint64_t t_last, ns_flush, ns_wait;
    struct sched_counters prev;
};

static void step_stats_log(struct worker *w, struct step_stats *st, uint64_t now)
{
    struct sched_counters c;
    sched_get_counters(w->s, &c);
    const struct sched_counters *p = &st->prev;
    double steps = (double)(c.steps - p->steps), adm = (double)(c.admitted - p->admitted);
    double gaps = (double)(c.slot_gaps - p->slot_gaps), wall = (double)(now - st->t_last) / 1e6;
    if (steps > 0)
        logf_("stats %.0f ms: %.0f steps, %.1f decode rows + %.1f prompt tokens a step; per step: admit %.3f, decode %.3f "
              "(grammar masks %.3f of it), sample %.3f, emit %.3f, send %.3f ms; idle %.1f ms; %.0f admitted, "
              "submit→admit %.2f ms, empty slot %.2f ms",
              wall, steps, (double)(c.decode_rows - p->decode_rows) / steps,
              (double)(c.prefill_tokens - p->prefill_tokens) / steps, (double)(c.ns_admit - p->ns_admit) / steps / 1e6,
              (double)(c.ns_decode - p->ns_decode) / steps / 1e6, (double)(c.ns_mask - p->ns_mask) / steps / 1e6,
              (double)(c.ns_sample - p->ns_sample) / steps / 1e6,
              (double)(c.ns_emit - p->ns_emit) / steps / 1e6, (double)st->ns_flush / steps / 1e6, (double)st->ns_wait / 1e6,
              adm, adm > 0 ? (double)(c.submit_wait_ns - p->submit_wait_ns) / adm / 1e6 : 0.0,
              gaps > 0 ? (double)(c.slot_gap_ns - p->slot_gap_ns) / gaps / 1e6 : 0.0);
    st->prev = c;
    st->t_last = now;
    st->ns_flush = st->ns_wait = 0;
}

static void *sched_main(void *arg)
{
    struct worker *w = arg;
    const char *ss = getenv("LLM170_SCHED_STATS");
    uint64_t every = ss && atoi(ss) > 0 ? (uint64_t)atoi(ss) * 1000000000u : 0;
    struct step_stats st = {.t_last = clock_now_ns()};
    uint64_t t_flush = 0; /* when batch last went out */
    while (!w->quit) {
        struct err e;
        tl_in_step = true;
        int rc = sched_step(w->s, &e);
        tl_in_step = false;
        uint64_t t0 = clock_now_ns();
        /* A chunk waits for later steps only while steps keep coming; the
         * first chunks after a quiet spell (a new request's first token) and
         * everything before the scheduler waits go out at once. So does a
         * stream's end when no request waits for the slot it freed: that
         * slot stays empty until the client hears of the end and sends its
         * next request (64 streams of 64 tokens: ~17 → ~3 ms empty). */
        int active = 0, queued = 0;
        if (w->batch_final)
            sched_stats(w->s, &active, &queued);
        if (rc <= 0 || t0 - t_flush >= w->flush_ns || w->batch.sb.size >= BATCH_SEND_BYTES ||
            (w->batch_final && queued == 0)) {
            flush_batch(w);
            t_flush = t0;
        }
        if (every) {
            uint64_t t1 = clock_now_ns();
            st.ns_flush += t1 - t0;
            if (t1 - st.t_last >= every)
                step_stats_log(w, &st, t1);
        }
        if (rc < 0)
            logf_("step: %s", e.msg);
        if (rc == 0) {
            if (w->drained && sched_idle(w->s)) {
                w->quit = 1;
                break;
            }
            uint64_t t2 = every ? clock_now_ns() : 0;
            sched_wait(w->s, 100);
            if (every)
                st.ns_wait += clock_now_ns() - t2;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- requests */

/* The GGUF's recommended sampling values (general.sampling.*) as text. */
static void model_sampling_defaults(struct worker *w)
{
    static const char *const names[] = {"sequence", "top_k", "top_p", "min_p", "xtc_probability",
                                        "xtc_threshold", "temp", "penalty_last_n", "penalty_repeat",
                                        "mirostat", "mirostat_tau", "mirostat_eta"};
    w->smp_model = smp_params_default();
    const struct gguf *g = model_gguf(w->m);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char key[64], text[256];
        snprintf(key, sizeof key, "general.sampling.%s", names[i]);
        if (!gguf_find_kv(g, key))
            continue;
        struct err e;
        int64_t iv;
        float fv;
        if (gguf_get_cstr(g, key, text, sizeof text, &e) == 0) {
        } else if (gguf_get_i64(g, key, &iv, &e) == 0) {
            snprintf(text, sizeof text, "%lld", (long long)iv);
        } else if (gguf_get_f32(g, key, &fv, &e) == 0) {
            snprintf(text, sizeof text, "%.9g", (double)fv);
        } else {
            continue;
        }
        if (smp_params_apply_model_value(&w->smp_model, names[i], text, &e))
            logf_("ignoring %s: %s", key, e.msg);
    }
}

/* Request fields over the model's defaults, as llama-server: request > GGUF > built-in. */
static struct smp_params request_sampling(struct worker *w, const struct proto_gen *g)
{
    struct smp_params p = smp_params_default();
    /* the fields the request gave, by proto.h's one list of them */
#define MERGE(m, bit, kind, lo, hi, sm, sbit)                                                                       \
    if (g->set & (bit)) {                                                                                           \
        p.sm = g->m;                                                                                                \
        p.set_mask |= (sbit);                                                                                       \
    }
    PROTO_SAMPLING_FIELDS(MERGE)
#undef MERGE
    /* what the request left open takes the model's recommendation */
    const struct smp_params *d = &w->smp_model;
    if (!(p.set_mask & SMP_SET_TEMP)) p.temp = d->temp;
    if (!(p.set_mask & SMP_SET_TOP_K)) p.top_k = d->top_k;
    if (!(p.set_mask & SMP_SET_TOP_P)) p.top_p = d->top_p;
    if (!(p.set_mask & SMP_SET_MIN_P)) p.min_p = d->min_p;
    if (!(p.set_mask & SMP_SET_PENALTY_LAST_N)) p.repeat_last_n = d->repeat_last_n;
    if (!(p.set_mask & SMP_SET_PENALTY_REPEAT)) p.repeat_penalty = d->repeat_penalty;
    p.n_samplers = d->n_samplers;
    memcpy(p.samplers, d->samplers, sizeof p.samplers);
    p.xtc_probability = d->xtc_probability;
    p.xtc_threshold = d->xtc_threshold;
    p.mirostat = d->mirostat;
    p.mirostat_tau = d->mirostat_tau;
    p.mirostat_eta = d->mirostat_eta;
    return p;
}

/* Chat messages → prompt text through the model's template (ChatML when the
 * GGUF has none); tools and template kwargs reach the template too. The
 * values came decoded from the message (proto.h): nothing to parse here. */
static int render_chat(struct worker *w, const struct proto_gen *g, char **out, char **prefill, struct gram **gram,
                       struct err *e)
{
    json_t *tools = g->tools;
    int32_t bos = tok_bos(w->v), eos = tok_eos(w->v);
    int rc = chat_render(w->chat_tmpl, g->messages, tools, true, bos >= 0 ? tok_text(w->v, bos) : "",
                         eos >= 0 ? tok_text(w->v, eos) : "", g->template_kwargs, out, e);
    /* tool_choice "required" / a function: the assistant's turn starts as a
     * call in the template's own form, so the model writes one, and the
     * grammar of the call(s) (toolgram.h) holds the rest of the reply to the
     * frame and the function's parameters schema. */
    if (!rc && g->tool_required && g->json_schema)
        rc = err_set(e, ERR_INVALID, "response_format cannot be combined with tool_choice \"required\" or a function");
    if (!rc && g->tool_required && tools) {
        int family = tc_family_from_template(w->chat_tmpl);
        struct tc_choice c = {.mode = g->tool_name ? TC_CHOICE_NAMED : TC_CHOICE_REQUIRED, .parallel = !g->tool_single};
        snprintf(c.name, sizeof c.name, "%s", g->tool_name ? g->tool_name : "");
        rc = toolgram_compile(tools, &c, family, gram, e);
    }
    if (!rc && g->tool_required && tools) {
        char *pre = tc_prefill(tc_family_from_template(w->chat_tmpl), g->tool_name);
        size_t ol = strlen(*out), pl = pre ? strlen(pre) : 0;
        char *grown = pre ? realloc(*out, ol + pl + 1) : NULL;
        if (grown) {
            memcpy(grown + ol, pre, pl + 1);
            *out = grown;
            *prefill = pre;
        } else {
            free(pre);
        }
    }
    return rc;
}

/* A request the intake thread works on: the daemon's message (moved out of
 * the receive loop) and what preparing it gave. */
struct job {
    struct proto_msg m; /* PT_GENERATE or PT_TOKENIZE */
    int32_t *ids;
    size_t n_ids;
    char *prefill;      /* the reply's prefilled start (render_chat), sent in front of its first event */
    struct gram *gram;  /* the grammar of a call the tool choice forces (render_chat), or NULL */
    struct smp_bias *bias; /* [n_bias] the request's logit biases, text keys tokenized (resolve_bias) */
    size_t n_bias;
    int rc;             /* prepare's outcome */
    struct err e;
};

/* Most bytes a prompt may have per position of the context. Real text
 * averages 2 to 6 bytes a token; a vocabulary's longest token (a run of
 * spaces or dashes) can be 128 or more, which makes the bound below loose
 * (a 32k context would take 8 MB of text to tokenize before refusing it). */
#define PROMPT_MAX_BYTES_PER_TOKEN 16

/* A prompt of len bytes that cannot fit the context whatever it tokenizes
 * to (tok_count_min), or longer than PROMPT_MAX_BYTES_PER_TOKEN bytes a
 * position, is refused before tokenizing, with the error sched_submit gives
 * a prompt too long (ERR_RANGE: HTTP 400 exceed_context_size_error). */
static int prompt_too_long(struct worker *w, const char *text, size_t len, struct err *e)
{
    size_t n = tok_count_min(w->v, text, len, w->span_max);
    int n_ctx = engine_n_ctx(w->eng);
    if (n >= (size_t)n_ctx)
        return err_set(e, ERR_RANGE,
                       "prompt of at least %zu tokens (%zu bytes) does not fit the context of %d (at least one "
                       "position must stay free)", n, len, n_ctx);
    if (len > (size_t)n_ctx * PROMPT_MAX_BYTES_PER_TOKEN)
        return err_set(e, ERR_RANGE,
                       "prompt of %zu bytes does not fit the context of %d (at most %d bytes a position are "
                       "accepted)", len, n_ctx, PROMPT_MAX_BYTES_PER_TOKEN);
    return 0;
}

/* The request's logit biases for the sampler: a token entry as it is, a text entry on every token of
 * its text (llama-server: no BOS, no special-token parsing); a large negative float is the ban. */
static int resolve_bias(struct worker *w, const struct proto_gen *g, struct job *j, struct err *e)
{
    if (!g->n_logit_bias)
        return 0;
    size_t cap = g->n_logit_bias, n = 0;
    struct smp_bias *b = malloc(cap * sizeof *b);
    if (!b)
        return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->n_logit_bias; i++) {
        const float v = g->logit_bias[i].bias < -1e30f ? -INFINITY : g->logit_bias[i].bias;
        int32_t one = g->logit_bias[i].token, *ids = &one;
        size_t nid = 1;
        if (g->logit_bias[i].text) {
            const char *t = g->logit_bias[i].text;
            int rc = tok_encode(w->v, t, strlen(t), false, false, &ids, &nid, e);
            if (rc) {
                free(b);
                return rc;
            }
        }
        if (n + nid > cap) {
            cap = n + nid + 8;
            struct smp_bias *nb = realloc(b, cap * sizeof *nb);
            if (!nb) {
                if (ids != &one)
                    free(ids);
                free(b);
                return err_set(e, ERR_NOMEM, "out of memory");
            }
            b = nb;
        }
        for (size_t k = 0; k < nid; k++)
            b[n++] = (struct smp_bias){ids[k], v};
        if (ids != &one)
            free(ids);
    }
    j->bias = b;
    j->n_bias = n;
    return 0;
}

/* Intake thread: text → token ids, the slow part of a request. */
static void job_prepare(void *user, void *job)
{
    struct worker *w = user;
    struct job *j = job;
    struct proto_gen *g = &j->m.gen;
    if (j->m.type != PT_TOKENIZE && (j->rc = resolve_bias(w, g, j, &j->e)))
        return;
    if (j->m.type == PT_TOKENIZE) {
        j->rc = tok_encode(w->v, j->m.text, strlen(j->m.text), j->m.add_special, j->m.parse_special, &j->ids,
                           &j->n_ids, &j->e);
    } else if (g->tokens) {
        j->ids = g->tokens;
        j->n_ids = g->n_tokens;
        g->tokens = NULL;
    } else if (g->prompt) {
        size_t len = strlen(g->prompt);
        if (!(j->rc = prompt_too_long(w, g->prompt, len, &j->e)))
            j->rc = tok_encode(w->v, g->prompt, len, g->add_special, g->parse_special, &j->ids, &j->n_ids, &j->e);
    } else {
        char *text = NULL;
        j->rc = render_chat(w, g, &text, &j->prefill, &j->gram, &j->e);
        if (!j->rc && !(j->rc = prompt_too_long(w, text, strlen(text), &j->e)))
            j->rc = tok_encode(w->v, text, strlen(text), true, true, &j->ids, &j->n_ids, &j->e);
        free(text);
    }
}

static void submit_tokenize(struct worker *w, struct job *j)
{
    if (j->rc) {
        send_error(w, j->m.id, ERR_INVALID, j->e.msg);
        return;
    }
    struct proto_msg r;
    proto_msg_init(&r, PT_TOKENS);
    r.id = j->m.id;
    r.tokens = j->ids ? j->ids : (int32_t[1]){0};
    r.n_tokens = j->n_ids;
    send_msg(w, &r);
}

/* Intake thread, under the intake's lock: the tokens go to the scheduler. */
static void job_submit(void *user, void *job)
{
    struct worker *w = user;
    struct job *j = job;
    struct proto_gen *g = &j->m.gen;
    if (j->m.type == PT_TOKENIZE) {
        submit_tokenize(w, j);
        return;
    }
    struct err e;
    int rc = j->rc;
    if (rc) {
        send_error(w, j->m.id, rc == ERR_NOMEM ? ERR_INTERNAL : rc == ERR_RANGE ? ERR_RANGE : ERR_INVALID, j->e.msg);
        return;
    }
    struct sched_request q;
    sched_request_init(&q);
    q.id = j->m.id;
    q.prompt = j->ids;
    q.n_prompt = j->n_ids;
    q.smp = request_sampling(w, g);
    q.smp.logit_bias = j->bias;
    q.smp.n_logit_bias = (int32_t)j->n_bias;
    q.max_tokens = (g->set & PG_MAX_TOKENS) ? g->max_tokens : -1;
    q.stop = (const char *const *)g->stop;
    q.n_stop = (int)g->n_stop;
    q.n_probs = g->logprobs;
    q.ignore_eos = g->ignore_eos;
    q.special = g->special;
    q.cache_prompt = g->cache_prompt;
    q.embed = g->embed;
    q.pooling = g->pooling;
    q.json_schema = g->json_schema;
    q.gram = j->gram; /* sched_submit takes it; its state starts past the prefill, which the prompt ends with */
    j->gram = NULL;
    q.gram_prefix = j->prefill; /* read during sched_submit only, while the prefill list holds it */
    if (j->prefill) {
        pre_add(w, j->m.id, j->prefill); /* before the first event can come */
        j->prefill = NULL;
    }
    rc = sched_submit(w->s, &q, &e); /* the scheduler keeps its own copy of the biases */
    if (rc) {
        free(pre_take(w, j->m.id));
        send_error(w, j->m.id, rc == ERR_CANCELED ? ERR_IO : rc, e.msg);
        return;
    }
    struct proto_msg a;
    proto_msg_init(&a, PT_ACCEPTED);
    a.id = j->m.id;
    a.worker.idx = w->idx;
    send_msg(w, &a);
}

/* A request canceled while it waited for the intake ends as one canceled in
 * the scheduler's queue does: a final chunk saying so. */
static void job_canceled(void *user, void *job)
{
    struct worker *w = user;
    struct job *j = job;
    if (j->m.type == PT_TOKENIZE) {
        send_error(w, j->m.id, ERR_CANCELED, "canceled");
        return;
    }
    struct sched_event ev = {.id = j->m.id, .token = -1, .text = "", .finish = SCHED_CANCEL};
    on_event(w, &ev);
}

static void job_free(void *user, void *job)
{
    (void)user;
    struct job *j = job;
    free(j->ids);
    free(j->prefill);
    free(j->bias);
    gram_free(j->gram);
    proto_msg_free(&j->m);
    free(j);
}

static const struct intake_ops job_ops = {job_prepare, job_submit, job_canceled, job_free};

/* Receive loop: hand a generate or tokenize request to the intake thread
 * (the message moves into the job). */
static void h_request(struct worker *w, struct proto_msg *m)
{
    if (m->type == PT_GENERATE && w->shutting) {
        send_error(w, m->id, ERR_IO, "worker is shutting down");
        return;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        send_error(w, m->id, ERR_INTERNAL, "out of memory");
        return;
    }
    j->m = *m; /* the job owns the message from here */
    proto_msg_init(m, PT_NONE);
    if (intake_push(w->in, j->m.id, j)) {
        send_error(w, j->m.id, ERR_INTERNAL, "out of memory");
        job_free(w, j);
    }
}

static int cancel_in_sched(void *ctx, uint64_t id) { return sched_cancel(ctx, id); }

/* Refuse new requests, let those already received reach the scheduler,
 * then let the scheduler finish what it holds. */
static void begin_shutdown(struct worker *w)
{
    w->shutting = 1;
    intake_flush(w->in);
    sched_close(w->s);
    w->drained = 1;
}

static void h_detokenize(struct worker *w, struct proto_msg *m)
{
    int32_t nv = tok_n_vocab(w->v);
    for (size_t i = 0; i < m->n_tokens; i++)
        if (m->tokens[i] < 0 || m->tokens[i] >= nv) {
            char msg[128];
            snprintf(msg, sizeof msg, "token %zu is %d, outside the vocabulary [0, %d)", i, m->tokens[i], nv);
            send_error(w, m->id, ERR_INVALID, msg);
            return;
        }
    size_t len;
    char *text = tok_detokenize(w->v, m->tokens, m->n_tokens, false, &len);
    if (!text) {
        send_error(w, m->id, ERR_INTERNAL, "out of memory");
        return;
    }
    struct proto_msg r;
    proto_msg_init(&r, PT_TEXT);
    r.id = m->id;
    r.text = text;
    send_msg(w, &r);
    free(text);
}

/* ---------------------------------------------------------------- main */

static double ts_diff(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}
static uint64_t ms_of(double s) { return s > 0 ? (uint64_t)(s * 1000.0 + 0.5) : 0; }
/* Ask the kernel to read the model's files ahead (MADV_WILLNEED) while the engine is created: on a GPU
 * the kernels compile meanwhile, and the weights' upload then copies from the page cache instead of
 * waiting on the disk chunk by chunk. On its own thread, as the advice may wait for the disk's queue.
 * Not for a model larger than half the memory, whose pages would push each other out. */
static void *prefetch_main(void *arg)
{
    const struct gguf *g = arg;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t total = 0;
    for (int i = 0; i < g->n_parts; i++)
        total += g->parts[i].size;
    if (pages > 0 && psz > 0 && total > (uint64_t)pages * (uint64_t)psz / 2)
        return NULL;
    for (int i = 0; i < g->n_parts; i++)
        if (g->parts[i].map && g->parts[i].fd >= 0)
            madvise(g->parts[i].map, g->parts[i].size, MADV_WILLNEED);
    return NULL;
}

static void fmt_bytes(uint64_t b, char *out, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(out, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(out, cap, "%.1f MiB", (double)b / (double)(1ull << 20));
}

static void usage(FILE *f)
{
    fprintf(f, "usage: llm170-worker --connect URL --model PATH [--name NAME] [--backend cpu|hip|vulkan] [--gpu N]\n"
               "                     [--slots N] [--queue N] [--threads N] [--ctx N] [--batch N] [--prefill-chunk N]\n"
               "                     [--idx N] [--flush-ms N] [--snapshots N]   |   --version\n"
               "Started by llm170d; serves one device over the daemon's socket.\n");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *path = NULL, *name = NULL, *backend = "cpu", *gpu = NULL;
    int slots = 4, queue = 64, threads = 0, ctx = 0, batch = 0, prefill = 256, idx = 0, flush_ms = DEFAULT_FLUSH_MS;
    int snaps = 0; /* recurrent-state snapshots per slot (hybrids); 0: the engine's default */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            version_print(stdout, "llm170-worker");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llm170-worker: option '%s' needs a value (or is unknown)\n", argv[i]);
            return 2;
        }
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--connect")) url = v;
        else if (!strcmp(k, "--model")) path = v;
        else if (!strcmp(k, "--name")) name = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else if (!strcmp(k, "--gpu")) gpu = v;
        else if (!strcmp(k, "--slots")) slots = atoi(v);
        else if (!strcmp(k, "--queue")) queue = atoi(v);
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--ctx")) ctx = atoi(v);
        else if (!strcmp(k, "--batch")) batch = atoi(v);
        else if (!strcmp(k, "--prefill-chunk")) prefill = atoi(v);
        else if (!strcmp(k, "--idx")) idx = atoi(v);
        else if (!strcmp(k, "--flush-ms")) flush_ms = atoi(v);
        else if (!strcmp(k, "--snapshots")) snaps = atoi(v);
        else {
            fprintf(stderr, "llm170-worker: unknown option '%s'\n", k);
            return 2;
        }
    }
    if (!url || !path) {
        usage(stderr);
        return 2;
    }
    if (slots < 1 || slots > 256 || queue < 0 || flush_ms < 0 || flush_ms > 1000 || snaps < 0 ||
        snaps > ENGINE_N_SNAP_MAX) {
        fprintf(stderr, "llm170-worker: --slots must be in [1, 256], --queue >= 0, --flush-ms in [0, 1000], "
                        "--snapshots in [0, %d]\n", ENGINE_N_SNAP_MAX);
        return 2;
    }
    int gpu_idx = -1; /* the device this worker opens: one worker per GPU */
    if (gpu) {
        char *end;
        long g = strtol(gpu, &end, 10);
        if (end == gpu || *end || g < 0 || g > 1023) {
            fprintf(stderr, "llm170-worker: --gpu must be a device index (0, 1, …), not '%s'\n", gpu);
            return 2;
        }
        gpu_idx = (int)g;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    static struct worker ww;
    struct worker *w = &ww;
    w->idx = idx;
    pthread_mutex_init(&w->pre_mu, NULL);
    w->flush_ns = (uint64_t)flush_ms * 1000000u;
    struct err e;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (model_load(&w->m, path, &e)) {
        logf_("cannot load model '%s': %s", path, e.msg);
        return EXIT_FATAL;
    }
    struct timespec t_read;
    clock_gettime(CLOCK_MONOTONIC, &t_read);
    pthread_t pf;
    const bool pf_on = pthread_create(&pf, NULL, prefetch_main, (void *)model_gguf(w->m)) == 0;
    w->v = model_vocab(w->m);
    struct engine_params ep;
    engine_params_default(&ep);
    if (!engine_backend_parse(backend, &ep.backend)) {
        logf_("unknown backend '%s' (" ENGINE_BACKEND_NAMES ")", backend);
        return EXIT_FATAL;
    }
    ep.n_seq = slots;
    ep.n_ctx = ctx;
    ep.n_batch = batch > 0 ? batch : 512;
    if (ep.n_batch < slots)
        ep.n_batch = slots;
    ep.n_threads = threads;
    ep.n_snap = snaps;
    ep.has_device = gpu_idx >= 0;
    ep.device = gpu_idx;
    if (engine_create(&w->eng, w->m, &ep, &e)) {
        logf_("backend %s%s%s: %s", backend, gpu ? " gpu " : "", gpu ? gpu : "", e.msg);
        return EXIT_FATAL;
    }
    const char *dt = getenv("LLM170_DEVICE_TOPK"); /* 0: sample from whole rows on a GPU too (A/B runs) */
    struct sched_params sp = {.n_slots = slots, .n_queue = queue, .n_batch = ep.n_batch,
                               /* a long prompt joins the running decodes in slices, not in one long step */
                               .prefill_chunk = prefill, .whole_rows = dt && !strcmp(dt, "0")};
    if (sched_create(&w->s, w->eng, w->m, &sp, on_event, w, &e)) {
        logf_("%s", e.msg);
        return EXIT_FATAL;
    }
    model_sampling_defaults(w);
    struct gguf_str ts;
    if (gguf_get_str(model_gguf(w->m), "tokenizer.chat_template", &ts, &e) == 0) {
        w->chat_tmpl = malloc(ts.len + 1);
        if (w->chat_tmpl) {
            memcpy(w->chat_tmpl, ts.ptr, ts.len);
            w->chat_tmpl[ts.len] = 0;
        }
    }
    w->span_max = tok_span_max(w->v);
    if (intake_create(&w->in, &job_ops, w, &e)) {
        logf_("%s", e.msg);
        return EXIT_FATAL;
    }
    /* A fixed threshold (no dynamic raising): a request's megabytes (a long
     * prompt's message, its text) go back to the system when freed instead
     * of staying in the heap for the worker's life. */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    int rv = nng_pair0_open(&w->sock);
    if (!rv) {
        nng_socket_set_size(w->sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_MSG);
        rv = nng_dial(w->sock, url, NULL, 0);
    }
    if (rv) {
        logf_("cannot connect to llm170d at '%s': %s", url, nng_strerror(rv));
        return 1;
    }
    const struct model_info *mi = model_info(w->m);
    int n_ctx = engine_n_ctx(w->eng);
    struct proto_msg r;
    proto_msg_init(&r, PT_READY);
    r.worker.idx = idx;
    r.worker.model = (char *)(name ? name : mi->name);
    r.worker.model_path = (char *)path;
    r.worker.backend = (char *)backend;
    r.worker.device = (char *)(gpu ? gpu : "cpu");
    r.worker.slots = slots;
    r.worker.n_ctx = n_ctx;
    r.worker.n_vocab = mi->n_vocab;
    /* how the load went and what the engine holds (engine_load): the ready line, `llm170 ps` */
    struct engine_load ld;
    engine_load_info(w->eng, &ld);
    ld.t_read = ts_diff(t0, t_read);
    const double t_all = ts_diff(t0, t1);
    r.worker.load_ms = ms_of(t_all);
    r.worker.read_ms = ms_of(ld.t_read);
    r.worker.compile_ms = ms_of(ld.t_compile);
    r.worker.upload_ms = ms_of(ld.t_upload);
    r.worker.alloc_ms = ms_of(ld.t_alloc);
    r.worker.mem_weights = ld.weights;
    r.worker.mem_kv = ld.kv;
    r.worker.mem_state = ld.state;
    r.worker.mem_snap = ld.snap;
    r.worker.mem_scratch = ld.scratch;
    r.worker.state_per_slot = ld.state_per_seq;
    r.worker.n_snap = ld.n_snap;
    r.worker.dev_used = ld.dev_used;
    r.worker.dev_total = ld.dev_total;
    const uint64_t held = ld.weights + ld.kv + ld.state + ld.snap + ld.scratch;
    /* the backend's count; without one, weights + an upper bound of the f16 KV cache (n_embd per layer
     * for K and V) */
    r.worker.mem = held ? held : mi->n_bytes + (uint64_t)mi->n_layer * (uint64_t)n_ctx * (uint64_t)slots * 2u *
                                                   (uint64_t)mi->n_embd * 2u;
    send_msg(w, &r);
    logf_("%s ready in %.2f s (read %.2f, compile %.2f, upload %.2f, allocate %.2f; %s: %s, %d slots, ctx %d)",
          name ? name : mi->name, t_all, ld.t_read, ld.t_compile, ld.t_upload, ld.t_alloc, backend,
          engine_device(w->eng), slots, n_ctx);
    char b[7][24];
    const uint64_t parts[7] = { held, ld.weights, ld.kv, ld.state, ld.snap, ld.state_per_seq, ld.scratch };
    for (int i = 0; i < 7; i++)
        fmt_bytes(parts[i], b[i], sizeof b[i]);
    logf_("memory %s: weights %s, KV %s, states %s, snapshots %s (%d per slot of %s), scratch %s", b[0], b[1], b[2],
          b[3], b[4], ld.n_snap, b[5], b[6]);

    pthread_t th;
    if (pthread_create(&th, NULL, sched_main, w)) {
        logf_("cannot start the scheduler thread");
        return 1;
    }
    while (!w->quit) {
        if (g_term && !w->shutting) /* SIGTERM: finish what runs, then exit */
            begin_shutdown(w);
        if (getppid() == 1) /* the daemon is gone (and PDEATHSIG missed) */
            break;
        struct proto_msg m;
        int rc = proto_recv(w->sock, &m, 200, &e);
        if (rc == ERR_IO)
            continue; /* timeout (a closed pipe redials by itself) */
        if (rc) {
            logf_("bad message from the daemon: %s", e.msg);
            if (m.type != PT_NONE && m.id)
                send_error(w, m.id, rc, e.msg);
            proto_msg_free(&m);
            continue;
        }
        switch (m.type) {
        case PT_GENERATE: h_request(w, &m); break;
        case PT_CANCEL: intake_cancel(w->in, m.id, cancel_in_sched, w->s); break;
        case PT_TOKENIZE: h_request(w, &m); break;
        case PT_DETOKENIZE: h_detokenize(w, &m); break;
        case PT_PING: {
            struct proto_msg p;
            proto_msg_init(&p, PT_PONG);
            p.id = m.id;
            int a, q;
            sched_stats(w->s, &a, &q);
            p.worker.active = a;
            p.worker.queued = q;
            p.worker.slots = slots;
            send_msg(w, &p);
            break;
        }
        case PT_SHUTDOWN:
            if (!w->shutting)
                begin_shutdown(w);
            break;
        default:
            logf_("unexpected '%s' message ignored", proto_type_name(m.type));
        }
        proto_msg_free(&m);
    }
    w->quit = 1;
    intake_free(w->in); /* what it still holds ends canceled */
    sched_close(w->s);
    pthread_join(th, NULL);
    nng_close(w->sock);
    sched_free(w->s);
    proto_chunkbuf_free(&w->batch);
    engine_free(w->eng);
    free(w->chat_tmpl);
    while (w->pre)
        free(pre_take(w, w->pre->id));
    if (pf_on)
        pthread_join(pf, NULL); /* done long since; the mapping outlives it */
    model_free(w->m);
    return 0;
}
