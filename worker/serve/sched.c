/* sched.c — continuous batching over one engine context (see sched.h).
 *
 * Ownership: `incoming` (submitted, not yet in a slot) and every request's
 * `canceled` flag are shared with the submitting threads under s->mu. Slots
 * and everything inside a running request belong to the stepping thread; it
 * takes s->mu only to admit requests and to publish slot changes, never
 * around engine_decode or the emit callback. */
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/clock.h"
#include "gram.h"
#include "gram_cache.h"
#include "jsg_schema.h"
#include "stop.h"
#include "../tok/tok.h"

/* Bytes of grammar masks kept for reuse across requests (gram_cache.h): ~3,400 masks of a 152k-token
 * vocabulary, more than the parser sets a bounded schema meets. */
#define SCHED_GRAM_CACHE_BYTES ((size_t)64 << 20)

struct sreq {
    struct sreq *next;          /* incoming queue link */
    uint64_t id;
    int32_t *prompt;            /* [n_prompt] */
    int n_prompt;
    int n_past;                 /* positions of this request in the KV (prompt done + generated decoded) */
    int n_cached;               /* prompt positions reused from a cache */
    int n_gen;                  /* tokens sampled */
    uint64_t admitted;          /* admission order: older prompts get the prefill budget first */
    uint64_t t_submit;          /* CLOCK_MONOTONIC ns of sched_submit */
    int32_t pending;            /* sampled but not decoded yet (-1 none) */
    int32_t max_tokens, n_probs;
    bool ignore_eos, special, cache_prompt;
    bool canceled;              /* under s->mu */
    struct smp_params smp_p;    /* kept until admission (arrays copied below) */
    struct smp_bias *bias;      /* [n_bias] copy of smp_p.logit_bias */
    struct smp_chain *smp;
    struct stop_matcher *stop;
    int stop_hit;               /* 1 + the index of the stop string that ended it, 0 none */
    struct tok_stream ts;
    struct smp_prob *probs;     /* [33] with logprobs (n_probs >= 0), else NULL */
    struct sched_top *tops;     /* [32] likewise */
    char *top_text;             /* [32][3 * piece_cap + 1] likewise: each piece cleaned, up to 3 bytes a byte */
    /* an embedding request (sched_request.embed): pool is enum sched_pool, resolved; acc [n_embd] the sum of
     * the pooled rows so far (mean: every position, possibly over several prefill chunks; cls: the first; last:
     * the last), vec [n_embd] the result */
    int pool;
    double *acc;
    float *vec;
    struct gram *gram;          /* structured output: the response's grammar, NULL none */
    struct gram_state *gs;      /* where the output so far stands in it */
    uint32_t *allow;            /* [(n_vocab + 31) / 32] the tokens it allows next */
};

/* What the parallel part of a step made of one logits row, for the stepping
 * thread to send out in batch order. */
enum row_fate { ROW_NONE, ROW_TOKEN, ROW_EOG, ROW_NO_CANDIDATE, ROW_STOP_NOMEM, ROW_NONFINITE, ROW_GRAMMAR_END,
                ROW_GRAMMAR_FAIL };
struct row_out {
    int fate;               /* enum row_fate */
    struct sched_event ev;  /* ROW_TOKEN, ROW_EOG: the token's event (text in the request's stop matcher) */
    bool stopped;           /* ROW_TOKEN: a stop string matched */
    int which;              /* … its index */
};

struct slot {
    struct sreq *r;   /* running request, NULL when free */
    uint64_t t_free;  /* CLOCK_MONOTONIC ns when its last request ended (0 = never used) */
    int32_t *cache;   /* [n_ctx] tokens whose KV this sequence holds (first n_cache) */
    int n_cache;
};

struct sched {
    struct engine_ctx *eng;
    const struct model *m;
    const struct tok_vocab *v;
    struct sched_params p;
    int n_ctx, n_vocab;
    sched_emit_fn emit;
    void *user;

    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signaled on submit / cancel */
    struct sreq *incoming, **incoming_tail;
    int n_incoming;
    int n_running;              /* slots in use (published under mu) */
    bool closed;
    bool work;                  /* something arrived since the last sched_wait */
    uint64_t n_admitted;        /* admissions so far (stepping thread) */

    struct slot *slots;         /* [n_slots] */
    struct engine_tok *batch;   /* [n_batch] */
    int *row_slot;              /* [n_slots] slot of each logits row */
    struct row_out *rows;       /* [n_slots] each logits row's outcome */
    float *logits;              /* [n_slots][n_vocab] */
    float *embd;                /* [n_batch][n_embd] a step's hidden-state rows for embeddings (at first use) */
    bool *embd_want;            /* [n_batch] which batch tokens those rows are of */
    int n_embd;
    /* a step's top-k pre-selection made by the engine (engine_decode_topk), when it can: */
    bool topk;                  /* the engine pre-selects and whole_rows is off */
    bool step_cands;            /* this step's rows came through engine_decode_topk */
    int32_t *topk_k;            /* [n_slots] each row's k (0: the whole row) */
    const uint32_t **row_allow; /* [n_slots] each row's grammar mask for the pre-selection, NULL none */
    int step_rows;              /* this step's logits rows (masks_prepare) */
    uint64_t ns_mask_step;      /* this step's time in masks_prepare */
    int32_t *n_cands;           /* [n_slots] each row's candidates, −1: the whole row is in logits */
    int32_t *cand_ids;          /* [n_slots][ENGINE_CAND_CAP] */
    float *cand_vals;           /* [n_slots][ENGINE_CAND_CAP] */
    char *piece;                /* [n_slots][3 · piece_cap] each row's detokenized piece (room for nul_to_fffd) */
    size_t piece_cap;
    char *text;                 /* [text_cap] final event text (stepping thread) */
    size_t text_cap;
    int32_t *eog;               /* [n_eog] EOG ids for ignore_eos biasing */
    int n_eog;
    struct gram_vocab *gv;      /* the vocabulary's byte trie for grammar masks, made at the first such request */
    struct gram_cache *gc;      /* masks shared by the requests of equal grammars, made with gv */
    struct sched_counters cnt;  /* stepping thread */
};

void sched_get_counters(struct sched *s, struct sched_counters *out) { *out = s->cnt; }

void sched_request_init(struct sched_request *r)
{
    memset(r, 0, sizeof *r);
    r->smp = smp_params_default();
    r->smp.temp = 0.0f;
    r->max_tokens = -1;
    r->n_probs = -1;
    r->cache_prompt = true;
}

static void sreq_free(struct sreq *r)
{
    if (!r)
        return;
    free(r->prompt);
    free(r->bias);
    free(r->probs);
    free(r->tops);
    free(r->top_text);
    free(r->acc);
    free(r->vec);
    smp_free(r->smp);
    stop_free(r->stop);
    gram_state_free(r->gs);
    gram_free(r->gram);
    free(r->allow);
    free(r);
}

int sched_create(struct sched **out, struct engine_ctx *eng, const struct model *m, const struct sched_params *p,
                 sched_emit_fn emit, void *user, struct err *e)
{
    *out = NULL;
    if (!eng || !m || !emit || p->n_slots < 1 || p->n_slots > 1024 || p->n_queue < 0)
        return err_set(e, ERR_INVALID, "sched: needs an engine, a model, an emit callback and 1 <= n_slots <= 1024");
    struct sched *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(e, ERR_NOMEM, "sched: out of memory");
    s->eng = eng;
    s->m = m;
    s->v = model_vocab(m);
    s->p = *p;
    if (s->p.n_batch <= 0)
        s->p.n_batch = 512;
    if (s->p.prefill_chunk <= 0 || s->p.prefill_chunk > s->p.n_batch)
        s->p.prefill_chunk = s->p.n_batch;
    if (s->p.n_batch < s->p.n_slots) {
        free(s);
        return err_set(e, ERR_INVALID, "sched: n_batch %d is smaller than n_slots %d", p->n_batch, p->n_slots);
    }
    s->n_ctx = engine_n_ctx(eng);
    s->n_vocab = model_info(m)->n_vocab;
    s->n_embd = model_info(m)->n_embd;
    s->emit = emit;
    s->user = user;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->incoming_tail = &s->incoming;
    s->piece_cap = tok_piece_max(s->v) + 16;
    s->text_cap = 4 * s->piece_cap + 64;
    s->slots = calloc((size_t)s->p.n_slots, sizeof *s->slots);
    s->batch = calloc((size_t)s->p.n_batch, sizeof *s->batch);
    s->embd_want = calloc((size_t)s->p.n_batch, sizeof *s->embd_want);
    s->row_slot = calloc((size_t)s->p.n_slots, sizeof *s->row_slot);
    s->rows = calloc((size_t)s->p.n_slots, sizeof *s->rows);
    s->logits = engine_logits_alloc(eng, (size_t)s->p.n_slots * (size_t)s->n_vocab);
    s->piece = malloc((size_t)s->p.n_slots * 3 * s->piece_cap);
    s->text = malloc(s->text_cap);
    s->eog = calloc((size_t)s->n_vocab, sizeof *s->eog);
    bool ok = s->slots && s->batch && s->embd_want && s->row_slot && s->rows && s->logits && s->piece && s->text && s->eog;
    s->topk = engine_has_topk(eng) && !p->whole_rows;
    if (ok && s->topk) {
        s->topk_k = calloc((size_t)s->p.n_slots, sizeof *s->topk_k);
        s->row_allow = calloc((size_t)s->p.n_slots, sizeof *s->row_allow);
        s->n_cands = calloc((size_t)s->p.n_slots, sizeof *s->n_cands);
        s->cand_ids = malloc((size_t)s->p.n_slots * ENGINE_CAND_CAP * sizeof *s->cand_ids);
        s->cand_vals = malloc((size_t)s->p.n_slots * ENGINE_CAND_CAP * sizeof *s->cand_vals);
        ok = s->topk_k && s->row_allow && s->n_cands && s->cand_ids && s->cand_vals;
    }
    for (int i = 0; ok && i < s->p.n_slots; i++)
        ok = (s->slots[i].cache = malloc((size_t)s->n_ctx * sizeof(int32_t))) != NULL;
    if (!ok) {
        sched_free(s);
        return err_set(e, ERR_NOMEM, "sched: out of memory (%d slots, n_vocab %d)", p->n_slots, s->n_vocab);
    }
    for (int32_t t = 0; t < s->n_vocab; t++)
        if (tok_is_eog(s->v, t))
            s->eog[s->n_eog++] = t;
    for (int i = 0; i < s->p.n_slots; i++)
        engine_seq_truncate(eng, i, 0);
    *out = s;
    return 0;
}

void sched_free(struct sched *s)
{
    if (!s)
        return;
    while (s->incoming) {
        struct sreq *r = s->incoming;
        s->incoming = r->next;
        sreq_free(r);
    }
    for (int i = 0; s->slots && i < s->p.n_slots; i++) {
        sreq_free(s->slots[i].r);
        free(s->slots[i].cache);
    }
    free(s->slots);
    free(s->batch);
    free(s->row_slot);
    free(s->rows);
    engine_logits_free(s->eng, s->logits);
    free(s->embd);
    free(s->embd_want);
    free(s->topk_k);
    free(s->row_allow);
    free(s->n_cands);
    free(s->cand_ids);
    free(s->cand_vals);
    free(s->piece);
    free(s->text);
    free(s->eog);
    gram_cache_free(s->gc);
    gram_vocab_free(s->gv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---------------------------------------------------------------- submit */

int sched_pooling(const struct model *m)
{
    int p = model_info(m)->pooling_type;
    return p == SCHED_POOL_MEAN || p == SCHED_POOL_CLS || p == SCHED_POOL_LAST ? p : p == 4 ? -1 : SCHED_POOL_LAST;
}

static int submit(struct sched *s, const struct sched_request *q, bool *taken, struct err *e);

/* q->gram is taken whatever the outcome (submit frees it with the request once it holds it). */
int sched_submit(struct sched *s, const struct sched_request *q, struct err *e)
{
    bool taken = false;
    int rc = submit(s, q, &taken, e);
    if (rc && !taken)
        gram_free(q->gram);
    return rc;
}

static int submit(struct sched *s, const struct sched_request *q, bool *taken, struct err *e)
{
    if (q->n_prompt == 0)
        return err_set(e, ERR_INVALID, "empty prompt");
    int pool = 0;
    if (q->embed) {
        if (!engine_has_embd(s->eng)) /* the engine's own message names the backend */
            return engine_decode_embd(s->eng, &(struct engine_tok){0}, 1, &(bool){true}, NULL, NULL, e);
        pool = q->pooling == SCHED_POOL_MODEL ? sched_pooling(s->m) : q->pooling;
        if (pool < SCHED_POOL_MEAN || pool > SCHED_POOL_LAST)
            return err_set(e, ERR_UNSUPPORTED, pool < 0 ? "the model is a reranker (pooling_type rank): no embeddings"
                                                        : "unknown pooling %d (1 mean, 2 cls, 3 last)", q->pooling);
        /* nothing is generated after the prompt, so it may fill the context */
        if (q->n_prompt > (size_t)s->n_ctx)
            return err_set(e, ERR_RANGE, "input of %zu tokens does not fit the context of %d", q->n_prompt, s->n_ctx);
    } else if (q->n_prompt >= (size_t)s->n_ctx)
        return err_set(e, ERR_RANGE, "prompt of %zu tokens does not fit the context of %d (at least one position must stay free)",
                       q->n_prompt, s->n_ctx);
    for (size_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= s->n_vocab)
            return err_set(e, ERR_INVALID, "prompt token %zu is %d, outside the vocabulary [0, %d)", i,
                           q->prompt[i], s->n_vocab);
    if (q->n_probs > 32)
        return err_set(e, ERR_INVALID, "at most 32 top logprobs, not %d", q->n_probs);
    struct sreq *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(e, ERR_NOMEM, "out of memory");
    r->gram = q->gram; /* from here sreq_free frees it */
    *taken = true;
    r->id = q->id;
    r->t_submit = clock_now_ns();
    r->n_prompt = (int)q->n_prompt;
    r->pending = -1;
    r->max_tokens = q->max_tokens;
    r->n_probs = q->n_probs;
    r->ignore_eos = q->ignore_eos;
    r->special = q->special;
    r->cache_prompt = q->cache_prompt;
    r->pool = pool;
    if (q->embed) {
        r->max_tokens = -1;
        r->n_probs = -1;
        r->acc = calloc((size_t)s->n_embd, sizeof *r->acc);
        r->vec = calloc((size_t)s->n_embd, sizeof *r->vec);
        if (!r->acc || !r->vec) {
            sreq_free(r);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
    }
    tok_stream_init(&r->ts);
    r->prompt = malloc(q->n_prompt * sizeof *r->prompt);
    if (!r->prompt) {
        sreq_free(r);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    memcpy(r->prompt, q->prompt, q->n_prompt * sizeof *r->prompt);
    if (r->n_probs >= 0) { /* its own: the rows of a step are worked on in parallel */
        r->probs = calloc(33, sizeof *r->probs);
        r->tops = calloc(32, sizeof *r->tops);
        r->top_text = malloc(32 * (3 * s->piece_cap + 1));
        if (!r->probs || !r->tops || !r->top_text) {
            sreq_free(r);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
    }
    /* The sampler: built now so bad parameters are refused at submission. */
    struct smp_params sp = q->smp;
    sp.n_ctx = s->n_ctx;
    sp.n_probs = q->n_probs > 0 ? q->n_probs : 0;
    sp.ignore_eos = q->ignore_eos;
    sp.eog_tokens = s->eog;
    sp.n_eog_tokens = s->n_eog;
    if (!(r->smp = smp_new(&sp, s->n_vocab, e))) {
        sreq_free(r);
        return e ? e->code : ERR_INVALID;
    }
    int rc = stop_new(&r->stop, q->stop, q->n_stop, e);
    if (rc) {
        sreq_free(r);
        return rc;
    }
    /* Structured output: the schema compiled here, on the submitting thread, so a bad one is refused at
     * once; its size is bounded by jsg_schema.h's limits. */
    if (q->json_schema && q->gram) {
        sreq_free(r);
        return err_set(e, ERR_INVALID, "a JSON schema and a grammar for one request");
    }
    if (q->json_schema || q->gram) {
        if ((q->json_schema && (rc = jsg_compile_text(q->json_schema, strlen(q->json_schema), &r->gram, e))) ||
            !(r->gs = gram_state_new(r->gram, e))) {
            sreq_free(r);
            return rc ? rc : e ? e->code : ERR_NOMEM;
        }
        /* the text the grammar starts with that the prompt already ends with (a tool call's prefilled start):
         * the model goes on from there */
        if (q->gram_prefix && gram_advance(r->gs, q->gram_prefix, strlen(q->gram_prefix), NULL)) {
            sreq_free(r);
            return err_set(e, ERR_INVALID, "the grammar does not accept the reply's prefilled start \"%.64s\"",
                           q->gram_prefix);
        }
        if (!(r->allow = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *r->allow))) {
            sreq_free(r);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
    }
    pthread_mutex_lock(&s->mu);
    if (s->closed) {
        pthread_mutex_unlock(&s->mu);
        sreq_free(r);
        return err_set(e, ERR_CANCELED, "the scheduler is shutting down");
    }
    int free_slots = s->p.n_slots - s->n_running;
    if (s->n_incoming >= s->p.n_queue + free_slots) {
        int waiting = s->n_incoming;
        pthread_mutex_unlock(&s->mu);
        sreq_free(r);
        return err_set(e, ERR_FULL, "queue full: %d slots busy and %d requests waiting", s->p.n_slots, waiting);
    }
    *s->incoming_tail = r;
    s->incoming_tail = &r->next;
    s->n_incoming++;
    s->work = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int sched_cancel(struct sched *s, uint64_t id)
{
    int rc = ERR_NOTFOUND;
    pthread_mutex_lock(&s->mu);
    for (struct sreq *r = s->incoming; r; r = r->next)
        if (r->id == id) {
            r->canceled = true;
            rc = 0;
        }
    for (int i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].r && s->slots[i].r->id == id) {
            s->slots[i].r->canceled = true;
            rc = 0;
        }
    if (!rc) {
        s->work = true;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sched_close(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    s->work = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_stats(struct sched *s, int *active, int *queued)
{
    pthread_mutex_lock(&s->mu);
    *active = s->n_running;
    *queued = s->n_incoming;
    pthread_mutex_unlock(&s->mu);
}

bool sched_idle(struct sched *s)
{
    int a, q;
    sched_stats(s, &a, &q);
    return a == 0 && q == 0;
}

void sched_wait(struct sched *s, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->work && s->n_incoming == 0 && s->n_running == 0)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts))
            break;
    s->work = false;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- events */

static void emit_final(struct sched *s, struct sreq *r, int finish, const char *text, size_t n_text, int err_code,
                       const char *message)
{
    struct sched_event ev = {
        .id = r->id, .token = -1, .text = text ? text : "", .n_text = text ? n_text : 0, .finish = finish,
        .n_prompt = r->n_prompt, .n_gen = r->n_gen, .n_cached = r->n_cached, .err_code = err_code,
        .message = message, .stop_hit = r->stop_hit,
    };
    if (r->pool && finish == SCHED_STOP) {
        ev.embd = r->vec;
        ev.n_embd = s->n_embd;
    }
    s->emit(s->user, &ev);
}

/* End a running request: flush held-back text, emit the final event, free
 * the slot (its KV stays for prefix reuse). */
static void finish_slot(struct sched *s, int si, int finish, int err_code, const char *message)
{
    struct slot *sl = &s->slots[si];
    struct sreq *r = sl->r;
    size_t n = 0;
    if (finish == SCHED_LENGTH || (finish == SCHED_STOP && r)) {
        /* what the detokenizer and the stop matcher still hold is output too */
        n = tok_stream_flush(&r->ts, s->text, s->text_cap);
        struct stop_result sr;
        if (n && stop_feed(r->stop, s->text, n, &sr) == 0) {
            memmove(s->text, sr.emit, sr.n_emit);
            n = sr.n_emit;
        } else {
            n = 0;
        }
        if (stop_flush(r->stop, &sr) == 0 && sr.n_emit && n + sr.n_emit < s->text_cap) {
            memcpy(s->text + n, sr.emit, sr.n_emit);
            n += sr.n_emit;
        }
    }
    emit_final(s, r, finish, s->text, n, err_code, message);
    sl->t_free = clock_now_ns();
    pthread_mutex_lock(&s->mu);
    sl->r = NULL;
    s->n_running--;
    pthread_mutex_unlock(&s->mu);
    sreq_free(r);
}

/* ---------------------------------------------------------------- admission */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb)
{
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Put r into a free slot, reusing the longest cached prefix: a free slot's
 * own leftover KV, or a copy from any slot's. At least the last prompt token
 * is always evaluated (its logits start generation). */
/* A token's bytes as the output text holds them (gram_vocab_new's callback). */
static size_t vocab_piece(void *user, int32_t id, char *buf, size_t cap)
{
    return tok_piece(user, id, false, buf, cap);
}

static int admit(struct sched *s, struct sreq *r, struct err *e)
{
    int best_free = -1, best_free_lcp = -1, best_src = -1, best_src_lcp = 0;
    for (int i = 0; i < s->p.n_slots; i++) {
        struct slot *sl = &s->slots[i];
        int lcp = r->cache_prompt ? common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt) : 0;
        if (!sl->r && lcp > best_free_lcp) {
            best_free = i;
            best_free_lcp = lcp;
        }
        if (lcp > best_src_lcp) {
            best_src = i;
            best_src_lcp = lcp;
        }
    }
    if (best_free < 0)
        return err_set(e, ERR_INTERNAL, "sched: admit without a free slot");
    if (r->gs && !s->gv && !(s->gv = gram_vocab_new(s->n_vocab, vocab_piece, (void *)s->v, e)))
        return e ? e->code : ERR_NOMEM;
    if (r->gs && !s->gc && !(s->gc = gram_cache_new(s->gv, SCHED_GRAM_CACHE_BYTES, e)))
        return e ? e->code : ERR_NOMEM;
    struct slot *sl = &s->slots[best_free];
    int reuse = best_free_lcp;
    /* mean and cls pooling need the hidden states of the first positions too: nothing is reused */
    int limit = r->pool == SCHED_POOL_MEAN || r->pool == SCHED_POOL_CLS ? 0 : r->n_prompt - 1;
    if (best_src >= 0 && best_src != best_free && best_src_lcp > reuse) {
        int n = best_src_lcp < limit ? best_src_lcp : limit;
        struct err ce;
        if (n > 0 && engine_seq_copy(s->eng, best_src, best_free, n, &ce) == 0) {
            memcpy(sl->cache, s->slots[best_src].cache, (size_t)n * sizeof *sl->cache);
            reuse = n;
        } else {
            reuse = 0;
        }
    }
    if (reuse > limit)
        reuse = limit;
    if (reuse < 0)
        reuse = 0;
    /* recurrent (hybrid) layers can only go back to their snapshots: reuse
     * the longest prefix the slot's state can really be cut back to */
    reuse = engine_seq_restorable(s->eng, best_free, reuse);
    if (reuse < 0 || engine_seq_truncate(s->eng, best_free, reuse) != 0) {
        reuse = 0;
        engine_seq_truncate(s->eng, best_free, 0);
    }
    sl->n_cache = reuse;
    r->n_past = reuse;
    r->n_cached = reuse;
    r->admitted = ++s->n_admitted;
    s->cnt.admitted++;
    s->cnt.submit_wait_ns += clock_now_ns() - r->t_submit;
    if (sl->t_free) {
        s->cnt.slot_gaps++;
        s->cnt.slot_gap_ns += clock_now_ns() - sl->t_free;
    }
    /* llama-server feeds the prompt to the penalty window */
    for (int i = 0; !r->pool && i < r->n_prompt; i++)
        smp_accept(r->smp, r->prompt[i]);
    pthread_mutex_lock(&s->mu);
    sl->r = r;
    s->n_running++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---------------------------------------------------------------- step */

/* Copy n bytes to out (cap ≥ 3n + 1) as valid UTF-8: a byte that does not
 * start a complete, well-formed sequence becomes U+FFFD. A single token's
 * piece may be part of a character (byte tokens), and JSON needs valid text. */
static size_t utf8_clean(const char *in, size_t n, char *out)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && c != 0 && i + len <= n; /* a NUL cannot travel in the C strings ahead */
        for (size_t k = 1; ok && k < len; k++)
            ok = (p[i + k] & 0xC0) == 0x80;
        if (ok && len > 1) { /* no overlong forms, surrogates or values past U+10FFFF */
            unsigned v = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
            for (size_t k = 1; k < len; k++)
                v = v << 6 | (p[i + k] & 0x3F);
            ok = !((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) ||
                   (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF);
        }
        if (ok) {
            memcpy(out + o, in + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    return o;
}

/* A NUL byte of a token's piece (byte-level vocabularies have a token for byte 0; a random or confused
 * model picks it) as U+FFFD, in place (buf holds 3n bytes): the text travels as C strings from here to
 * the client, and the wire refuses a NUL inside one — the whole message of chunks it sat in would be
 * lost. Returns the new length. */
static size_t nul_to_fffd(char *buf, size_t n)
{
    size_t nul = 0;
    for (size_t i = 0; i < n; i++)
        nul += buf[i] == 0;
    if (!nul)
        return n;
    size_t o = n + 2 * nul;
    for (size_t i = n; i-- > 0;) {
        if (buf[i]) {
            buf[--o] = buf[i];
        } else {
            o -= 3;
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
        }
    }
    return n + 2 * nul;
}

/* Grammar row i, on any of the engine's threads, before the step's selection reads the masks (masks_prepare:
 * inside the engine call with a GPU, before it otherwise): the tokens its grammar allows next into its
 * request's mask (from the shared cache when another state met the same set), so the
 * engine's top-k pre-selection can run over the allowed tokens only (mask before selection) and the row
 * comes back as candidates, not whole. The end of generation is allowed only once the text is complete. A
 * row left with nothing (complete and nothing else to say, or a dead end) or whose mask fails gets its fate
 * here, and sample_row leaves it be. */
static void mask_row(void *ctx, int64_t i, int worker)
{
    (void)worker;
    struct sched *s = ctx;
    struct row_out *o = &s->rows[i];
    struct sreq *r = s->slots[s->row_slot[i]].r;
    if (!r || !r->gs)
        return;
    int32_t n_ok = gram_cache_mask(s->gc, r->gs, r->allow, NULL);
    if (n_ok < 0) {
        o->fate = ROW_GRAMMAR_FAIL;
        return;
    }
    /* an end-of-generation token whose piece the grammar would take as text (a vocabulary may give one a
     * visible piece) still ends the request: it is allowed by completeness alone */
    const bool end_ok = gram_complete(r->gs) && !r->ignore_eos;
    for (int k = 0; k < s->n_eog; k++) {
        uint32_t *w = &r->allow[s->eog[k] >> 5], bit = 1u << (s->eog[k] & 31);
        n_ok += end_ok - !!(*w & bit);
        *w = end_ok ? *w | bit : *w & ~bit;
    }
    if (n_ok == 0) { /* stop rather than break the format */
        o->fate = ROW_GRAMMAR_END;
        return;
    }
    smp_set_allowed(r->smp, r->allow);
}

/* The step's grammar masks (mask_row on the engine's threads), and k 0 for a row they decided (it needs
 * no selection): engine_select.prepare, so with a GPU it runs while the step computes. */
static void masks_prepare(void *ctx)
{
    struct sched *s = ctx;
    uint64_t t = clock_now_ns();
    engine_parallel(s->eng, mask_row, s, s->step_rows);
    for (int row = 0; s->topk && row < s->step_rows; row++)
        if (s->rows[row].fate != ROW_NONE)
            s->topk_k[row] = 0;
    s->ns_mask_step += clock_now_ns() - t;
}

/* Logits row i, on any of the engine's threads: sample it, accept the token,
 * work out its logprobs, detokenize it and feed the stop matcher. Everything
 * touched is the row's own (its request's sampler, detokenizer, matcher and
 * logprob buffers, its piece buffer; the vocabulary is only read), so rows
 * run in any order and the outcome is the one a single thread would get. */
static void sample_row(void *ctx, int64_t i, int worker)
{
    (void)worker;
    struct sched *s = ctx;
    struct row_out *o = &s->rows[i];
    struct sreq *r = s->slots[s->row_slot[i]].r;
    if (!r || o->fate != ROW_NONE) /* mask_row decided it */
        return;
    const float *logits = s->logits + (size_t)i * s->n_vocab;
    const size_t co = (size_t)i * ENGINE_CAND_CAP;
    const bool cands = s->step_cands && s->n_cands[i] >= 0;
    /* A NaN or inf in the row means the model is broken for this sequence (an overwritten weight, an
     * overflow): end it with an error rather than draw from garbage. Where the engine pre-selected,
     * only its candidates are here; its pre-selection leaves NaN and −inf out, and a row with +inf or
     * fewer than k finite logits (all NaN: what a bad weight spreads to) comes back whole, caught here. */
    if (!(cands ? smp_row_finite(s->cand_vals + co, s->n_cands[i]) : smp_row_finite(logits, s->n_vocab))) {
        o->fate = ROW_NONFINITE;
        return;
    }
    /* structured output: mask_row set the request's mask on its sampler, which filters a whole row by it;
     * candidates were selected from the allowed tokens only */
    int32_t tok = cands ? smp_sample_cands(r->smp, s->cand_ids + co, s->cand_vals + co, s->n_cands[i])
                        : smp_sample(r->smp, logits);
    if (tok < 0) {
        o->fate = ROW_NO_CANDIDATE;
        return;
    }
    if (r->gs && !tok_is_eog(s->v, tok)) {
        size_t len;
        const char *bytes = gram_vocab_piece(s->gv, tok, &len);
        if (gram_advance(r->gs, bytes, len, NULL)) {
            o->fate = ROW_GRAMMAR_FAIL;
            return;
        }
    }
    smp_accept(r->smp, tok);
    r->n_gen++;
    o->ev = (struct sched_event){.id = r->id, .token = tok, .text = "", .n_prompt = r->n_prompt,
                                 .n_gen = r->n_gen, .n_cached = r->n_cached};
    if (r->n_probs >= 0) {
        struct smp_prob chosen;
        int n_top = smp_probs(r->smp, logits, tok, &chosen, r->probs, r->n_probs);
        char *piece = s->piece + (size_t)i * 3 * s->piece_cap;
        o->ev.has_logprob = true;
        o->ev.logprob = chosen.logprob;
        for (int k = 0; k < n_top; k++) {
            char *t = r->top_text + (size_t)k * (3 * s->piece_cap + 1);
            size_t n = tok_piece(s->v, r->probs[k].token, true, piece, s->piece_cap);
            utf8_clean(piece, n < s->piece_cap ? n : s->piece_cap, t);
            r->tops[k] = (struct sched_top){r->probs[k].token, r->probs[k].logprob, t};
        }
        o->ev.top = r->tops;
        o->ev.n_top = n_top > 0 ? n_top : 0;
    }
    if (!r->ignore_eos && tok_is_eog(s->v, tok)) {
        o->fate = ROW_EOG; /* llama-server does not stream the end-of-generation token's text */
        return;
    }
    char *piece = s->piece + (size_t)i * 3 * s->piece_cap;
    size_t n = nul_to_fffd(piece, tok_stream_push(s->v, &r->ts, tok, r->special, piece, s->piece_cap));
    struct stop_result sr = {0};
    if (stop_feed(r->stop, piece, n, &sr)) {
        o->fate = ROW_STOP_NOMEM;
        return;
    }
    o->ev.text = sr.emit;
    o->ev.n_text = sr.n_emit;
    o->stopped = sr.stopped;
    o->which = sr.which;
    o->fate = ROW_TOKEN;
}

/* Send out what sample_row made of a row of slot si, and end the request
 * when that token ends it (stepping thread, in batch order). */
static void emit_row(struct sched *s, int si, const struct row_out *o)
{
    struct slot *sl = &s->slots[si];
    struct sreq *r = sl->r;
    switch (o->fate) {
    case ROW_NO_CANDIDATE:
        finish_slot(s, si, SCHED_ERROR, ERR_INTERNAL, "sampler: no candidate token left");
        return;
    case ROW_STOP_NOMEM:
        finish_slot(s, si, SCHED_ERROR, ERR_NOMEM, "out of memory in the stop matcher");
        return;
    case ROW_NONFINITE:
        /* what this sequence's KV holds produced it: no later request may reuse it */
        engine_seq_truncate(s->eng, si, 0);
        sl->n_cache = 0;
        finish_slot(s, si, SCHED_ERROR, ERR_INTERNAL, "model produced non-finite logits");
        return;
    case ROW_EOG:
        s->emit(s->user, &o->ev);
        finish_slot(s, si, SCHED_STOP, 0, NULL);
        return;
    case ROW_GRAMMAR_END:
        finish_slot(s, si, SCHED_STOP, 0, NULL);
        return;
    case ROW_GRAMMAR_FAIL:
        finish_slot(s, si, SCHED_ERROR, ERR_NOMEM, "structured output: the grammar could not follow the token");
        return;
    case ROW_TOKEN:
        break;
    default:
        return;
    }
    s->emit(s->user, &o->ev);
    if (o->stopped) {
        r->stop_hit = o->which >= 0 ? o->which + 1 : 0; /* the API that asked may name it (Anthropic's stop_sequence) */
        emit_final(s, r, SCHED_STOP, "", 0, 0, NULL);
        sl->t_free = clock_now_ns();
        pthread_mutex_lock(&s->mu);
        sl->r = NULL;
        s->n_running--;
        pthread_mutex_unlock(&s->mu);
        sreq_free(r);
        return;
    }
    r->pending = o->ev.token;
    /* the pending token goes to position n_past: it must exist for one more step */
    if ((r->max_tokens >= 0 && r->n_gen >= r->max_tokens) || r->n_past >= s->n_ctx)
        finish_slot(s, si, SCHED_LENGTH, 0, NULL);
}

/* An embedding's vector from its pooled sum: the mean divides by the positions; then the L2 normalisation
 * llama.cpp's common_embd_normalize does (sum of squares in double, a zero vector stays zero). False when a
 * value is NaN or infinite (a broken model, as for logits). */
static bool embd_finish(struct sched *s, struct sreq *r)
{
    const int E = s->n_embd;
    const double div = r->pool == SCHED_POOL_MEAN ? (double)r->n_prompt : 1.0;
    double ss = 0.0;
    for (int k = 0; k < E; k++) {
        r->vec[k] = (float)(r->acc[k] / div);
        ss += (double)r->vec[k] * (double)r->vec[k];
    }
    const float scale = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int k = 0; k < E; k++)
        r->vec[k] *= scale;
    return isfinite(ss);
}

int sched_step(struct sched *s, struct err *e)
{
    /* 1. cancellations and admissions */
    uint64_t t0 = clock_now_ns();
    struct sreq *gone = NULL;
    int cancel_slots[1024], n_cancel = 0;
    pthread_mutex_lock(&s->mu);
    for (struct sreq **pp = &s->incoming; *pp;) {
        struct sreq *r = *pp;
        if (r->canceled) {
            *pp = r->next;
            r->next = gone;
            gone = r;
            s->n_incoming--;
        } else {
            pp = &r->next;
        }
    }
    s->incoming_tail = &s->incoming;
    while (*s->incoming_tail)
        s->incoming_tail = &(*s->incoming_tail)->next;
    for (int i = 0; i < s->p.n_slots && n_cancel < 1024; i++)
        if (s->slots[i].r && s->slots[i].r->canceled)
            cancel_slots[n_cancel++] = i;
    pthread_mutex_unlock(&s->mu);
    int progress = 0;
    while (gone) {
        struct sreq *r = gone;
        gone = r->next;
        emit_final(s, r, SCHED_CANCEL, "", 0, 0, NULL);
        sreq_free(r);
        progress++;
    }
    for (int i = 0; i < n_cancel; i++) {
        finish_slot(s, cancel_slots[i], SCHED_CANCEL, 0, NULL);
        progress++;
    }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct sreq *r = NULL;
        if (s->incoming && s->n_running < s->p.n_slots) {
            r = s->incoming;
            s->incoming = r->next;
            if (!s->incoming)
                s->incoming_tail = &s->incoming;
            s->n_incoming--;
        }
        pthread_mutex_unlock(&s->mu);
        if (!r)
            break;
        r->next = NULL;
        if (admit(s, r, e)) {
            emit_final(s, r, SCHED_ERROR, "", 0, e ? e->code : ERR_INTERNAL, e ? e->msg : "admission failed");
            sreq_free(r);
            continue;
        }
        if (r->max_tokens == 0) { /* nothing to generate: done before any work */
            for (int i = 0; i < s->p.n_slots; i++)
                if (s->slots[i].r == r)
                    finish_slot(s, i, SCHED_LENGTH, 0, NULL);
        }
    }

    /* 2. the batch: every decoding sequence's pending token first ... */
    int nb = 0, n_rows = 0;
    for (int i = 0; i < s->p.n_slots; i++) {
        struct sreq *r = s->slots[i].r;
        if (!r || r->pending < 0)
            continue;
        s->embd_want[nb] = false;
        s->batch[nb++] = (struct engine_tok){r->pending, r->n_past, i, true};
        s->row_slot[n_rows++] = i;
    }
    const int n_dec = nb;
    /* ... then prefill chunks, oldest admission first, within the budget */
    int budget = s->p.n_batch - nb;
    if (budget > s->p.prefill_chunk)
        budget = s->p.prefill_chunk;
    int chunk_of[1024] = {0}, order[1024], n_order = 0;
    for (int i = 0; i < s->p.n_slots; i++) {
        struct sreq *r = s->slots[i].r;
        if (!r || r->pending >= 0 || r->n_past >= r->n_prompt)
            continue;
        int k = n_order++; /* insertion sort by admission: a handful of entries */
        while (k > 0 && s->slots[order[k - 1]].r->admitted > r->admitted) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    int n_erows = 0; /* rows of hidden states for embeddings */
    for (int oi = 0; oi < n_order && budget > 0; oi++) {
        int i = order[oi];
        struct sreq *r = s->slots[i].r;
        int take = r->n_prompt - r->n_past;
        if (take > budget)
            take = budget;
        for (int k = 0; k < take; k++) {
            int pos = r->n_past + k;
            bool last = pos == r->n_prompt - 1;
            if (r->pool) { /* an embedding: no logits, the hidden states its pooling needs */
                bool want = r->pool == SCHED_POOL_MEAN || (r->pool == SCHED_POOL_CLS && pos == 0) ||
                            (r->pool == SCHED_POOL_LAST && last);
                s->embd_want[nb] = want;
                s->batch[nb++] = (struct engine_tok){r->prompt[pos], pos, i, false};
                n_erows += want;
                continue;
            }
            s->embd_want[nb] = false;
            s->batch[nb++] = (struct engine_tok){r->prompt[pos], pos, i, last};
            if (last)
                s->row_slot[n_rows++] = i;
        }
        chunk_of[i] = take;
        budget -= take;
    }
    if (nb == 0)
        return progress;

    /* 3. one engine call for all of it; where the engine can pre-select top-k near the logits, the rows
     * whose draw depends on their k largest alone (no logprobs: those need the whole row) come back as
     * candidates (a 152k-token row is 600 KB to copy and ~0.1 ms to pre-select on the host); a grammar
     * row's k largest among the tokens its mask allows. The grammar rows' masks are made by
     * masks_prepare: inside that call once the engine has queued the step (a GPU computes meanwhile),
     * else before it. */
    uint64_t t1 = clock_now_ns();
    bool any_gram = false;
    s->step_cands = false;
    s->step_rows = n_rows;
    s->ns_mask_step = 0;
    for (int row = 0; row < n_rows; row++) {
        const struct sreq *r = s->slots[s->row_slot[row]].r;
        s->rows[row].fate = ROW_NONE;
        any_gram = any_gram || r->gs;
        if (!s->topk)
            continue;
        int32_t k = r->n_probs < 0 ? smp_topk_only(r->smp) : 0;
        s->topk_k[row] = k <= ENGINE_CAND_CAP / 2 ? k : 0;
        s->row_allow[row] = r->gs ? r->allow : NULL;
        s->step_cands |= s->topk_k[row] > 0;
    }
    if (n_erows && !s->embd) {
        s->embd = malloc((size_t)s->p.n_batch * (size_t)s->n_embd * sizeof *s->embd);
        if (!s->embd)
            n_erows = -1;
    }
    if (n_erows) /* the engine's whole rows: no top-k pre-selection in a step with embeddings */
        s->step_cands = false;
    if (any_gram && !s->step_cands)
        masks_prepare(s);
    const struct engine_select sel = { s->topk_k, s->row_allow, any_gram ? masks_prepare : NULL, s };
    int rc;
    if (n_erows < 0)
        rc = err_set(e, ERR_NOMEM, "sched: out of memory for the embeddings' hidden states");
    else if (n_erows)
        rc = engine_decode_embd(s->eng, s->batch, nb, s->embd_want, s->logits, s->embd, e);
    else
        rc = s->step_cands ? engine_decode_topk(s->eng, s->batch, nb, &sel, s->cand_ids, s->cand_vals, s->n_cands,
                                                s->logits, e)
                           : engine_decode(s->eng, s->batch, nb, s->logits, e);
    uint64_t t2 = clock_now_ns();
    s->cnt.steps++;
    s->cnt.decode_rows += (uint64_t)n_dec;
    s->cnt.prefill_tokens += (uint64_t)(nb - n_dec);
    s->cnt.ns_admit += t1 - t0;
    s->cnt.ns_mask += s->ns_mask_step;
    s->cnt.ns_decode += t2 - t1;
    if (rc) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e ? e->msg : "engine_decode failed");
        for (int i = 0; i < s->p.n_slots; i++) {
            if (!s->slots[i].r)
                continue;
            engine_seq_truncate(s->eng, i, 0);
            s->slots[i].n_cache = 0;
            finish_slot(s, i, SCHED_ERROR, rc, msg);
        }
        return rc;
    }
    /* embeddings: pool this step's rows into their requests (in batch order, so mean sums the positions
     * in order whatever the chunking) */
    for (int t = 0, row = 0; n_erows > 0 && t < nb; t++) {
        if (!s->embd_want[t])
            continue;
        struct sreq *r = s->slots[s->batch[t].seq].r;
        const float *h = s->embd + (size_t)row++ * (size_t)s->n_embd;
        for (int k = 0; k < s->n_embd; k++)
            r->acc[k] += h[k];
    }
    /* bookkeeping: positions now in the KV */
    for (int t = 0; t < nb; t++) {
        struct slot *sl = &s->slots[s->batch[t].seq];
        sl->cache[s->batch[t].pos] = s->batch[t].token;
        if (s->batch[t].pos + 1 > sl->n_cache)
            sl->n_cache = s->batch[t].pos + 1;
    }
    for (int i = 0; i < s->p.n_slots; i++) {
        struct sreq *r = s->slots[i].r;
        if (!r)
            continue;
        if (r->pending >= 0) {
            r->n_past++;
            r->pending = -1;
        } else {
            r->n_past += chunk_of[i];
        }
        if (r->pool && r->n_past >= r->n_prompt) { /* its last chunk ran: the embedding is done */
            if (embd_finish(s, r)) {
                finish_slot(s, i, SCHED_STOP, 0, NULL);
            } else { /* what this sequence's KV holds produced it: no later request may reuse it */
                engine_seq_truncate(s->eng, i, 0);
                s->slots[i].n_cache = 0;
                finish_slot(s, i, SCHED_ERROR, ERR_INTERNAL, "model produced a non-finite hidden state");
            }
            progress++;
        }
    }

    /* 4. sample, detokenize and stop-match every row that has logits on the engine's threads (the rows
     * are independent: each request has its own sampler, RNG, detokenizer and matcher), then emit in
     * batch order on this thread */
    engine_parallel(s->eng, sample_row, s, n_rows);
    uint64_t t3 = clock_now_ns();
    for (int row = 0; row < n_rows; row++) {
        int si = s->row_slot[row];
        if (s->slots[si].r)
            emit_row(s, si, &s->rows[row]);
        progress++;
    }
    s->cnt.ns_sample += t3 - t2;
    s->cnt.ns_emit += clock_now_ns() - t3;
    return progress > 0 ? progress : 1;
}
