/* metrics.h — the gateway's Prometheus counters and histograms (GET /metrics):
 * requests by endpoint and status, tokens in/out, time to first token and
 * inter-token latency measured here, plus the daemon's queue depth, active
 * slots and per-worker memory taken from its status at scrape time. */
#ifndef LLM170_GATEWAY_METRICS_H
#define LLM170_GATEWAY_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define GW_HIST_BUCKETS 14

struct gw_hist {
    const double *le;                   /* [GW_HIST_BUCKETS] upper bounds, seconds */
    uint64_t count[GW_HIST_BUCKETS];    /* per bucket (not cumulative) */
    uint64_t n;
    double sum;
};

struct gw_req_count {
    char endpoint[32];
    int status;
    uint64_t n;
};

struct gw_metrics {
    pthread_mutex_t mu;
    struct gw_req_count req[64];        /* (endpoint, status) → count */
    int n_req;
    uint64_t prompt_tokens, completion_tokens;
    int64_t in_flight;                  /* generation requests being served */
    struct gw_hist ttft, itl;
};

void gw_metrics_init(struct gw_metrics *m);
void gw_metrics_destroy(struct gw_metrics *m);
void gw_metrics_request(struct gw_metrics *m, const char *endpoint, int status);
void gw_metrics_tokens(struct gw_metrics *m, int64_t prompt, int64_t gen);
void gw_metrics_in_flight(struct gw_metrics *m, int delta);
void gw_metrics_ttft(struct gw_metrics *m, double seconds);
void gw_metrics_itl(struct gw_metrics *m, double seconds);
/* Prometheus text exposition (malloc'ed); st may be NULL when the daemon
 * did not answer (then llm170_daemon_up is 0). */
char *gw_metrics_render(struct gw_metrics *m, const struct gw_status *st);

#endif
