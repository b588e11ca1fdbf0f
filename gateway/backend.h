/* backend.h — the narrow interface between the gateway's HTTP layer and
 * whatever generates text. The product implementation (backend_daemon.c)
 * talks to llm170d through proto/client.h; the HTTP-layer unit tests plug in
 * a fake. Everything here is OpenAI-agnostic: the HTTP layer owns the
 * OpenAI JSON, the backend owns the daemon protocol.
 *
 * Errors are ERR_* codes with a one-line message; gw_http_status() says
 * what HTTP status each one becomes:
 *   ERR_INVALID / ERR_UNSUPPORTED 400 · ERR_RANGE 400 (prompt longer than the
 *   context) · ERR_NOTFOUND 404 (unknown model) · ERR_FULL 429 (queue full) ·
 *   ERR_IO 503 (daemon/worker not reachable or not ready) · others 500. */
#ifndef LLM170_GATEWAY_BACKEND_H
#define LLM170_GATEWAY_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../proto/proto.h"

/* One generation (one choice of a request) is a struct proto_gen (proto.h), filled by the API parsers with
 * pointers into their request (a view: nothing in it is freed through it) and borrowed by submit: the
 * backend copies what it keeps. Its PG_* bits mark the fields given; logit_bias text keys stay text (the
 * worker tokenizes them); embed asks for an embedding of the prompt (gateway/embed.h): no TOKEN events,
 * the DONE event carries the vector. */

/* One alternative of a token's distribution. */
struct gw_top {
    int32_t token;
    float logprob;
    const char *text;
};

/* A stream event. A backend delivers events of one job in order from one
 * thread at a time; the strings are only valid during the callback. */
enum gw_ev_kind { GW_EV_TOKEN = 1, GW_EV_DONE, GW_EV_ERROR };
struct gw_event {
    int kind;
    /* TOKEN */
    int32_t token;             /* -1: text without a token (held-back text released) */
    const char *text;          /* UTF-8 released with this token ("" while held back) */
    bool has_logprob;
    float logprob;
    const struct gw_top *top;  /* [n_top] */
    size_t n_top;
    /* DONE */
    const char *finish;        /* "stop" / "length" */
    int stop_hit;              /* "stop" by a stop string: 1 + its index in the request's stop; 0 = none (end of generation) */
    int32_t n_prompt, n_gen;
    const float *embd;         /* an embedding job's vector (L2-normalised), [n_embd] */
    size_t n_embd;
    /* ERROR (the job's final event, also for a cancel) */
    int err_code;
    const char *err_msg;
};

typedef void (*gw_event_fn)(void *user, const struct gw_event *ev);

struct gw_job;

/* Daemon status, in the shape the HTTP layer reports. */
struct gw_worker_status {
    char device[32], backend[16], state[16], model[128];
    int32_t idx, slots, active, queued, n_ctx;
    uint64_t mem;
};
struct gw_status {
    bool ready;
    int32_t active, queued;
    char models[16][128];
    int n_models;
    struct gw_worker_status workers[16];
    int n_workers;
};

struct gw_backend {
    void *ctx;
    int (*status)(void *ctx, struct gw_status *st, struct err *e);
    int (*tokenize)(void *ctx, const char *model, const char *text, bool add_special, bool parse_special,
                    int32_t **ids, size_t *n, struct err *e);
    int (*detokenize)(void *ctx, const char *model, const int32_t *ids, size_t n, char **text, struct err *e);
    /* Start a generation. Returns at once; `fn` then gets TOKEN events and
     * exactly one final DONE or ERROR (from another thread, possibly before
     * submit returns). A submit that fails returns the error and calls fn
     * never. */
    int (*submit)(void *ctx, const struct proto_gen *g, gw_event_fn fn, void *user, struct gw_job **job,
                  struct err *e);
    /* Ask the job to stop; its final event still comes (ERROR ERR_CANCELED or DONE). */
    void (*cancel)(void *ctx, struct gw_job *job);
    /* Free a job after its final event was delivered. */
    void (*release)(void *ctx, struct gw_job *job);
};

/* HTTP status and OpenAI error type for an ERR_* code. */
int gw_http_status(int err_code);
const char *gw_error_type(int http_status, int err_code);

#endif
