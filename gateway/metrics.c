/* metrics.c — Prometheus text for GET /metrics (metrics.h). */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_le[GW_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double itl_le[GW_HIST_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

void gw_metrics_init(struct gw_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = ttft_le;
    m->itl.le = itl_le;
}

void gw_metrics_destroy(struct gw_metrics *m) { pthread_mutex_destroy(&m->mu); }

void gw_metrics_request(struct gw_metrics *m, const char *endpoint, int status)
{
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint))
            break;
    if (i == m->n_req && m->n_req < 64) {
        snprintf(m->req[i].endpoint, sizeof m->req[i].endpoint, "%s", endpoint);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < 64)
        m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_tokens(struct gw_metrics *m, int64_t prompt, int64_t gen)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt > 0 ? (uint64_t)prompt : 0;
    m->completion_tokens += gen > 0 ? (uint64_t)gen : 0;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_in_flight(struct gw_metrics *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->in_flight += delta;
    pthread_mutex_unlock(&m->mu);
}

static void observe(struct gw_metrics *m, struct gw_hist *h, double s)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < GW_HIST_BUCKETS; i++)
        if (s <= h->le[i]) {
            h->count[i]++;
            break;
        }
    h->n++;
    h->sum += s;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_ttft(struct gw_metrics *m, double s) { observe(m, &m->ttft, s); }
void gw_metrics_itl(struct gw_metrics *m, double s) { observe(m, &m->itl, s); }

struct out {
    char *p;
    size_t n, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(o->p ? o->p + o->n : NULL, o->p ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0)
            return;
        if (o->p && o->n + (size_t)w < o->cap) {
            o->n += (size_t)w;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->n + (size_t)w + 1)
            cap *= 2;
        char *np = realloc(o->p, cap);
        if (!np)
            return;
        o->p = np;
        o->cap = cap;
    }
}

/* label values: escape \ " and newline */
static void label(char *dst, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') dst[o++] = '\\';
        if (*s == '\n') { dst[o++] = '\\'; dst[o++] = 'n'; continue; }
        dst[o++] = *s;
    }
    dst[o] = 0;
}

static void hist(struct out *o, const char *name, const char *help, const struct gw_hist *h)
{
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < GW_HIST_BUCKETS; i++) {
        cum += h->count[i];
        put(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    put(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->n, name, h->sum,
        name, (unsigned long long)h->n);
}

char *gw_metrics_render(struct gw_metrics *m, const struct gw_status *st)
{
    struct out o = {0};
    pthread_mutex_lock(&m->mu);
    put(&o, "# HELP llm170_http_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE llm170_http_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        put(&o, "llm170_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->req[i].endpoint,
            m->req[i].status, (unsigned long long)m->req[i].n);
    put(&o, "# HELP llm170_prompt_tokens_total Prompt tokens processed.\n# TYPE llm170_prompt_tokens_total counter\n"
            "llm170_prompt_tokens_total %llu\n",
        (unsigned long long)m->prompt_tokens);
    put(&o, "# HELP llm170_completion_tokens_total Tokens generated.\n# TYPE llm170_completion_tokens_total counter\n"
            "llm170_completion_tokens_total %llu\n",
        (unsigned long long)m->completion_tokens);
    put(&o, "# HELP llm170_requests_in_flight Generation requests the gateway is serving.\n"
            "# TYPE llm170_requests_in_flight gauge\nllm170_requests_in_flight %lld\n",
        (long long)m->in_flight);
    hist(&o, "llm170_time_to_first_token_seconds", "Time from request to the first generated token.", &m->ttft);
    hist(&o, "llm170_inter_token_seconds", "Time between consecutive generated tokens of a stream.", &m->itl);
    pthread_mutex_unlock(&m->mu);

    put(&o, "# HELP llm170_daemon_up Whether llm170d answered the status query.\n# TYPE llm170_daemon_up gauge\n"
            "llm170_daemon_up %d\n",
        st != NULL);
    if (st) {
        put(&o, "# HELP llm170_ready Whether a worker is ready.\n# TYPE llm170_ready gauge\nllm170_ready %d\n",
            st->ready);
        put(&o, "# HELP llm170_queue_depth Requests waiting for a slot.\n# TYPE llm170_queue_depth gauge\n"
                "llm170_queue_depth %d\n",
            st->queued);
        put(&o, "# HELP llm170_active_slots Requests holding a slot.\n# TYPE llm170_active_slots gauge\n"
                "llm170_active_slots %d\n",
            st->active);
        put(&o, "# HELP llm170_worker_memory_bytes Bytes of weights and KV cache a worker holds.\n"
                "# TYPE llm170_worker_memory_bytes gauge\n");
        for (int i = 0; i < st->n_workers; i++) {
            char dev[80], model[300], state[40];
            label(dev, sizeof dev, st->workers[i].device);
            label(model, sizeof model, st->workers[i].model);
            label(state, sizeof state, st->workers[i].state);
            put(&o, "llm170_worker_memory_bytes{worker=\"%d\",device=\"%s\",model=\"%s\"} %llu\n", st->workers[i].idx,
                dev, model, (unsigned long long)st->workers[i].mem);
        }
        put(&o, "# HELP llm170_worker_slots Sequences a worker decodes together.\n# TYPE llm170_worker_slots gauge\n");
        for (int i = 0; i < st->n_workers; i++)
            put(&o, "llm170_worker_slots{worker=\"%d\"} %d\n", st->workers[i].idx, st->workers[i].slots);
        put(&o, "# HELP llm170_worker_active_slots Slots in use per worker.\n"
                "# TYPE llm170_worker_active_slots gauge\n");
        for (int i = 0; i < st->n_workers; i++)
            put(&o, "llm170_worker_active_slots{worker=\"%d\"} %d\n", st->workers[i].idx, st->workers[i].active);
        put(&o, "# HELP llm170_worker_queue_depth Requests waiting per worker.\n"
                "# TYPE llm170_worker_queue_depth gauge\n");
        for (int i = 0; i < st->n_workers; i++)
            put(&o, "llm170_worker_queue_depth{worker=\"%d\"} %d\n", st->workers[i].idx, st->workers[i].queued);
        put(&o, "# HELP llm170_worker_ready Whether a worker is ready (1) or not (0).\n"
                "# TYPE llm170_worker_ready gauge\n");
        for (int i = 0; i < st->n_workers; i++) {
            char state[40];
            label(state, sizeof state, st->workers[i].state);
            put(&o, "llm170_worker_ready{worker=\"%d\",state=\"%s\"} %d\n", st->workers[i].idx, state,
                !strcmp(st->workers[i].state, "ready"));
        }
    }
    return o.p;
}
