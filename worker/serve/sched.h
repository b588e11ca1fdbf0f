/* sched.h — the continuous-batching scheduler over one engine context.
 *
 * Requests are submitted from any thread; one thread drives sched_step. A
 * step decodes every running sequence's next token together in one
 * engine_decode call and folds prefill chunks of newly admitted requests
 * into the same batch (decode rows first, then prefill up to a per-step
 * budget, so neither starves the other). Each request has its own sampler
 * chain (sampling.h), stop strings (stop.h), streaming detokenizer, token
 * limit and EOG rule; results come back through an emit callback, one event
 * per generated token plus one final event.
 *
 * Slots: n_slots sequences of the engine (its n_seq). A request waits in a
 * bounded queue until a slot frees; beyond that sched_submit says ERR_FULL.
 * Prefix reuse: a finished request's KV stays in its slot; a new request
 * takes the slot (or copies from the slot, engine_seq_copy) whose cached
 * tokens share the longest prefix with its prompt and only evaluates the rest. */
#ifndef LLM170_SCHED_H
#define LLM170_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../engine/engine.h"
#include "sampling.h"

struct sched;

struct sched_params {
    int n_slots;       /* sequences decoded together; ≤ the engine's n_seq */
    int n_queue;       /* requests that may wait for a slot */
    int n_batch;       /* most tokens per engine_decode; ≤ the engine's n_batch; 0 = 512 */
    int prefill_chunk; /* most prompt tokens one step spends on prefill; 0 = n_batch */
    bool whole_rows;   /* sample from whole logits rows even where the engine pre-selects top-k near the
                          logits (engine_has_topk): for A/B runs */
};

/* The values of enum proto_finish. */
enum sched_finish { SCHED_RUNNING = 0, SCHED_STOP, SCHED_LENGTH, SCHED_CANCEL, SCHED_ERROR };

struct gram; /* gram.h */

struct sched_request {
    uint64_t id;                /* caller's id, unique among live requests */
    const int32_t *prompt;      /* [n_prompt] token ids (copied) */
    size_t n_prompt;
    struct smp_params smp;      /* sampler parameters (ignore_eos / logit_bias inside) */
    int32_t max_tokens;         /* -1 = until EOG or the context is full */
    const char *const *stop;    /* [n_stop] stop strings (copied) */
    int n_stop;
    int32_t n_probs;            /* -1 no logprobs; 0 the chosen token's; N also N top */
    bool ignore_eos;            /* EOG tokens do not end the request */
    bool special;               /* render control tokens in the text */
    bool cache_prompt;          /* allow KV prefix reuse */
    /* An embedding request: its prompt is evaluated (prefill only, batched with the rest), the final
     * hidden states of its positions (after the output norm, before the LM head) are pooled and L2-normalised,
     * and the final event carries the vector; no token is generated and the sampler fields are ignored. */
    bool embed;
    int32_t pooling;            /* embed: enum sched_pool; SCHED_POOL_MODEL = the model's (sched_pooling) */
    const char *json_schema;    /* structured output: JSON Schema text the response must match (jsg_schema.h;
                                 * compiled by sched_submit, ERR_INVALID naming the keyword it cannot do), or NULL */
    struct gram *gram;          /* instead: a grammar built by the caller (a tool call's, toolgram.h), or NULL;
                                 * sched_submit takes it, freeing it when it fails */
    const char *gram_prefix;    /* the text the grammar's sentence starts with that the prompt already ends with
                                 * (tc_prefill): the state starts past it; NULL none */
};

/* Pooling of an embedding, numbered as llama.cpp's pooling_type (0 none and 4 rank are not poolings here). */
enum sched_pool { SCHED_POOL_MODEL = 0, SCHED_POOL_MEAN = 1, SCHED_POOL_CLS = 2, SCHED_POOL_LAST = 3 };
/* The pooling an embedding request of model m gets when it asks for SCHED_POOL_MODEL: the GGUF's
 * {arch}.pooling_type when it is mean, cls or last; else (none, absent) last, which is what decoder
 * embedding models (Qwen3-Embedding) are trained with; -1 for rank (a reranker: no embedding). */
int sched_pooling(const struct model *m);
/* Greedy, no limit, no stop strings, prefix reuse on. */
void sched_request_init(struct sched_request *r);

struct sched_top {
    int32_t token;
    float logprob;
    const char *text; /* the token's piece as valid UTF-8 (a partial character → U+FFFD) */
};

/* One event. Pointers are valid during the callback only. */
struct sched_event {
    uint64_t id;
    int32_t token;             /* generated id, -1 on a final event */
    const char *text;          /* text this event adds (complete UTF-8; stop strings cut) */
    size_t n_text;
    bool has_logprob;
    float logprob;
    const struct sched_top *top; /* [n_top] */
    int n_top;
    int finish;                /* enum sched_finish; non-zero on the last event of a request */
    int32_t n_prompt, n_gen, n_cached;
    int stop_hit;              /* finish SCHED_STOP by a stop string: 1 + its index in the request's stop list; 0 none */
    const float *embd;         /* final event of an embedding request (finish SCHED_STOP): [n_embd], L2-normalised */
    int32_t n_embd;
    int err_code;              /* finish == SCHED_ERROR: ERR_* */
    const char *message;       /* finish == SCHED_ERROR */
};

typedef void (*sched_emit_fn)(void *user, const struct sched_event *ev);

/* The engine must have been created with n_seq ≥ p->n_slots and n_batch ≥
 * p->n_batch. The scheduler does not own the engine or the model. */
int sched_create(struct sched **out, struct engine_ctx *eng, const struct model *m, const struct sched_params *p,
                 sched_emit_fn emit, void *user, struct err *e);
void sched_free(struct sched *s);

/* Thread-safe. ERR_FULL: every slot busy and the queue full. ERR_RANGE: the
 * prompt does not fit the context. ERR_INVALID: empty prompt, an id outside
 * the vocabulary, bad sampler parameters. ERR_CANCELED: sched_close was called.
 * ERR_UNSUPPORTED: an embedding the engine or the model cannot make. */
int sched_submit(struct sched *s, const struct sched_request *r, struct err *e);
/* Thread-safe. The request ends with SCHED_CANCEL at the next step, its slot
 * freed. Returns ERR_NOTFOUND when no live request has that id. */
int sched_cancel(struct sched *s, uint64_t id);
/* Thread-safe. Refuse new requests from now on (running ones finish). */
void sched_close(struct sched *s);

/* One step: admit, cancel, decode, sample, emit. Returns the number of
 * requests that made progress (0 = nothing to do), or a negative ERR_* when
 * the engine failed (its requests then ended with SCHED_ERROR). Call from
 * one thread only. */
int sched_step(struct sched *s, struct err *e);
/* Block until there is work (a submission or cancel) or timeout_ms passes. */
void sched_wait(struct sched *s, int timeout_ms);
/* What the stepping thread did so far, for finding where a serving worker's
 * time goes (slot occupancy, idle slots between requests, the step's phases).
 * Times are CLOCK_MONOTONIC nanoseconds. Read from the stepping thread, or
 * accept a torn read elsewhere (statistics only). */
struct sched_counters {
    uint64_t steps;             /* steps that called engine_decode */
    uint64_t decode_rows;       /* sum over those steps of sequences decoding (one token each) */
    uint64_t prefill_tokens;    /* sum of prompt tokens evaluated */
    uint64_t admitted;          /* requests put into a slot */
    uint64_t slot_gaps;         /* admissions into a slot a previous request had left */
    uint64_t slot_gap_ns;       /* sum of those slots' empty time (last token → admission) */
    uint64_t submit_wait_ns;    /* sum over admissions of the time from sched_submit to admission */
    uint64_t ns_admit;          /* cancellations, admissions, batch building */
    uint64_t ns_decode;         /* the engine call, with the grammar masks */
    uint64_t ns_mask;           /* the grammar masks (on the engine's threads; with a GPU's selection they
                                 * run while the device computes the step, so only part of them adds) */
    uint64_t ns_sample;         /* sampling the rows (on the engine's threads) */
    uint64_t ns_emit;           /* accept, detokenize, stop strings, emit callbacks */
};
void sched_get_counters(struct sched *s, struct sched_counters *out);

/* Thread-safe counts: requests holding a slot, requests waiting. */
void sched_stats(struct sched *s, int *active, int *queued);
bool sched_idle(struct sched *s);

#endif
