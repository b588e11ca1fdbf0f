/* proto.h — the one message schema spoken between the CLI, llm170d, the
 * workers and the gateway (see proto/README.md for the wire and transport).
 *
 * Every message is a msgpack map with string keys. Two keys are always
 * present: "v" (protocol version, PROTO_VERSION) and "t" (the type name).
 * Unknown keys are ignored so either side may add fields; a missing or
 * wrongly typed required key is an ERR_FORMAT error from proto_decode (the
 * receiver answers with an "error" message; it never crashes).
 *
 * struct proto_msg is one flat record for every type: a type uses the fields
 * its comment names and leaves the rest zero. Decoded messages own all their
 * strings/arrays (free with proto_msg_free); a message built by a caller for
 * proto_encode only borrows the caller's pointers. */
#ifndef LLM170_PROTO_H
#define LLM170_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <msgpack/sbuffer.h>

#include "../common/err.h"

#define PROTO_VERSION 1

/* Hard limits a decoder enforces (a peer cannot make us allocate more). */
#define PROTO_MAX_MSG (64u << 20)      /* bytes in one message */
#define PROTO_MAX_TOKENS (1u << 22)    /* ids in one token array */
#define PROTO_MAX_STOP 16              /* stop strings per request */
#define PROTO_MAX_TOP 32               /* top alternatives per token */
#define PROTO_MAX_ACKS (1u << 20)      /* acknowledgements in one poll */
#define PROTO_MAX_EMBD (1u << 20)      /* floats in one embedding */
#define PROTO_WIRE_DEPTH 30            /* nesting of a whole message (msgpack-c's unpacker stops at 32) */
#define PROTO_MAX_DEPTH 24             /* levels of arrays and maps in a chat value (messages, tools, kwargs;
                                        * the value itself is level 1), inside the message's own two */

enum proto_type {
    PT_NONE = 0,
    PT_STATUS,       /* C→D            — (no fields) */
    PT_STATUS_REPLY, /* D→C            status */
    PT_GENERATE,     /* C→D, D→W       gen; D→W also id (the daemon's request id) */
    PT_ACCEPTED,     /* D→C            stream, worker.idx; W→D id */
    PT_NEXT,         /* C→D            stream, from, wait_ms */
    PT_CHUNKS,       /* D→C stream, W→D id; chunks[], done */
    PT_CANCEL,       /* C→D stream, D→W id */
    PT_OK,           /* any reply      id */
    PT_ERROR,        /* any reply      id (0 when not about a request), errc, message */
    PT_TOKENIZE,     /* C→D, D→W       id, gen.model, text, add_special, parse_special */
    PT_TOKENS,       /* reply          id, tokens[] */
    PT_DETOKENIZE,   /* C→D, D→W       id, gen.model, tokens[] */
    PT_TEXT,         /* reply          id, text */
    PT_PING,         /* D→W            id */
    PT_PONG,         /* W→D            id, worker (active, queued, slots) */
    PT_READY,        /* W→D            worker (model, backend, device, slots, n_ctx, n_vocab, mem) */
    PT_SHUTDOWN,     /* D→W            — finish open requests, then exit */
    PT_POLL,         /* C→D            id (= the poll group), acks[], wait_ms, hold_ms → chunks of every stream of the group */
    PT_COUNT
};

/* A stream id as clients see it: 128 random bits the daemon draws for each
 * stream (unguessable; see proto/README.md), sent as a 16-byte msgpack bin
 * under the keys that hold ids ("id", a chunk's "s", a poll ack's first
 * element). All zero = none. Between the daemon and its workers ids stay
 * 64-bit integers (the daemon's request ids). */
#define PROTO_SID_BYTES 16
struct proto_sid {
    uint8_t b[PROTO_SID_BYTES];
};
bool proto_sid_is_zero(const struct proto_sid *s);
bool proto_sid_eq(const struct proto_sid *a, const struct proto_sid *b);
/* 32 lower-case hex digits and a NUL. */
void proto_sid_hex(const struct proto_sid *s, char out[2 * PROTO_SID_BYTES + 1]);
/* Parse 32 hex digits; ERR_INVALID otherwise. */
int proto_sid_parse(const char *hex, struct proto_sid *s, struct err *e);

/* Error classes carried on the wire ("code" key, as its name string). */
enum proto_errc {
    PE_NONE = 0,
    PE_BAD_REQUEST,  /* malformed message / field out of range        → HTTP 400 */
    PE_NOT_FOUND,    /* unknown model / stream                         → 404 */
    PE_QUEUE_FULL,   /* every slot busy and the wait queue full        → 429 */
    PE_UNAVAILABLE,  /* no worker ready (loading, restarting), daemon down → 503 */
    PE_TOO_LONG,     /* prompt does not fit the context                → 400 */
    PE_CANCELED,     /* canceled by its owner                          (499) */
    PE_TIMEOUT,      /* a deadline passed                              → 504 */
    PE_INTERNAL,     /* a real fault: worker died mid-request, bug     → 500 */
    PE_VERSION,      /* peer speaks another protocol version           → 400 */
    PE_FORBIDDEN,    /* the connecting user may not use llm170d        → 403 */
    PE_COUNT
};
const char *proto_errc_name(int errc);      /* "queue_full" … ("internal" when unknown) */
int proto_errc_parse(const char *name);     /* PE_INTERNAL when unknown */
int proto_errc_http(int errc);              /* HTTP status for the class */
int proto_errc_to_err(int errc);            /* ERR_* code a client function returns */
int proto_errc_from_err(int err_code);      /* class for a local ERR_* code */

/* Why a stream ended (final chunk's "finish"). */
enum proto_finish { PF_NONE = 0, PF_STOP, PF_LENGTH, PF_CANCEL, PF_ERROR };
const char *proto_finish_name(int f);       /* "stop", "length", "cancel", "error", "" */

/* Which optional sampling fields a generate request gave (proto_gen.set).
 * Fields not given take llama-server's defaults, or the GGUF's
 * general.sampling.* values — the worker decides, so it must know. */
enum {
    PG_MAX_TOKENS = 1u << 0, PG_TEMPERATURE = 1u << 1, PG_TOP_K = 1u << 2, PG_TOP_P = 1u << 3,
    PG_MIN_P = 1u << 4, PG_TYPICAL_P = 1u << 5, PG_REPEAT_PENALTY = 1u << 6,
    PG_REPEAT_LAST_N = 1u << 7, PG_PRESENCE = 1u << 8, PG_FREQUENCY = 1u << 9, PG_SEED = 1u << 10,
};

/* The optional sampling fields of a generate request, one row each:
 *   X(member of proto_gen, PG_* bit, kind, lo, hi, member of the worker's smp_params, its SMP_SET_* bit)
 * kind I32 (an int in [lo, hi]), F32 (a finite float) or SEED (an int in [lo, hi], -1 meaning random).
 * The wire key is the member's name. This one list drives proto.c's encode and decode and the worker's
 * merge into its sampler (a set bit of 0: the sampler keeps no mark for that field); max_tokens, a
 * limit of the generation rather than of sampling, stays beside it. */
#define PROTO_SAMPLING_FIELDS(X)                                                                                \
    X(temperature, PG_TEMPERATURE, F32, 0, 0, temp, SMP_SET_TEMP)                                                \
    X(top_k, PG_TOP_K, I32, -1, INT32_MAX, top_k, SMP_SET_TOP_K)                                                 \
    X(top_p, PG_TOP_P, F32, 0, 0, top_p, SMP_SET_TOP_P)                                                          \
    X(min_p, PG_MIN_P, F32, 0, 0, min_p, SMP_SET_MIN_P)                                                          \
    X(typical_p, PG_TYPICAL_P, F32, 0, 0, typical_p, 0)                                                          \
    X(repeat_penalty, PG_REPEAT_PENALTY, F32, 0, 0, repeat_penalty, SMP_SET_PENALTY_REPEAT)                      \
    X(repeat_last_n, PG_REPEAT_LAST_N, I32, -1, INT32_MAX, repeat_last_n, SMP_SET_PENALTY_LAST_N)                \
    X(presence_penalty, PG_PRESENCE, F32, 0, 0, presence_penalty, 0)                                             \
    X(frequency_penalty, PG_FREQUENCY, F32, 0, 0, frequency_penalty, 0)                                          \
    X(seed, PG_SEED, SEED, INT32_MIN, UINT32_MAX, seed, 0)

struct proto_bias {
    int32_t token; /* the token, when text is NULL */
    char *text;    /* or a text: the worker tokenizes it (no BOS, no special-token parsing, as llama-server)
                    * and every one of its tokens gets the bias; sent as [text, bias] */
    float bias;    /* added to the logit; -INFINITY bans (sent as a large negative float) */
};

/* A generate request. One prompt form is required: prompt (text, tokenized
 * by the worker), tokens (ids), or messages (chat template). */
struct proto_gen {
    char *model;                      /* model name; NULL/"" = whatever the daemon serves */
    char *prompt;                     /* text prompt */
    int32_t *tokens;                  /* [n_tokens] prompt ids */
    size_t n_tokens;
    /* chat: the OpenAI messages array with every field kept (role, content as text or parts, tool_calls,
     * tool_call_id, name, reasoning_content …), owned; on the wire the same structure in msgpack (maps,
     * arrays, strings, numbers, booleans, nil), not JSON text */
    json_t *messages;
    json_t *tools;                    /* chat: the OpenAI tools array for the template, owned, or NULL */
    json_t *template_kwargs;          /* chat: an object merged into the template variables (enable_thinking …),
                                       * owned, or NULL */
    bool tool_required;               /* chat: tool_choice "required" or a function: the reply must call a tool */
    char *tool_name;                  /* chat: … this function (tool_choice names it); NULL = any */
    bool tool_single;                 /* chat: … once (parallel_tool_calls false); absent = one or more calls */
    char *json_schema;                /* structured output: the JSON Schema the response must match (a json_object
                                       * response_format is {"type":"object"}); NULL = free text */
    uint32_t set;                     /* PG_* bits of the fields below that were given */
    int32_t max_tokens;               /* -1 = until EOG or the context is full */
    float temperature;                /* <= 0 → greedy */
    int32_t top_k;
    float top_p, min_p, typical_p;
    float repeat_penalty;
    int32_t repeat_last_n;
    float presence_penalty, frequency_penalty;
    uint32_t seed;                    /* 0xFFFFFFFF = random */
    char **stop;                      /* [n_stop] stop strings (not included in the output) */
    size_t n_stop;
    int32_t logprobs;                 /* -1 none; 0 the sampled token's; N also N top alternatives */
    struct proto_bias *logit_bias;    /* [n_logit_bias] */
    size_t n_logit_bias;
    bool ignore_eos;                  /* keep generating past EOG tokens */
    bool add_special;                 /* BOS/EOS per the vocab when tokenizing prompt (default true) */
    bool parse_special;               /* special-token text in prompt is parsed (default true) */
    bool special;                     /* render control tokens in output text (default false) */
    bool cache_prompt;                /* allow KV prefix reuse (default true) */
    uint64_t group;                   /* C→D: poll group the stream joins (0 = none; polled with "next") */
    /* an embedding instead of a generation ("embed", "pooling"; absent = false): the prompt's pooled,
     * L2-normalised final hidden states come back on the final chunk (embd); no token is generated */
    bool embed;
    int32_t pooling;                  /* embed: 1 mean, 2 cls, 3 last (llama.cpp's numbers); 0 = the model's */
};
/* Zero the request and set the defaults named above. */
void proto_gen_init(struct proto_gen *g);
/* Levels of arrays and objects in v (a scalar 0, [] 1, [[1]] 2): a request's messages, tools and kwargs
 * may have at most PROTO_MAX_DEPTH. */
int proto_json_depth(const json_t *v);

/* One top alternative of a token's distribution. */
struct proto_top {
    int32_t token;
    float logprob;
    char *text; /* the token's piece */
};

/* One stream event: a generated token, or the final record (finish != PF_NONE). */
struct proto_chunk {
    uint64_t sid;          /* W→D: its request's id when the message carries several ("s"); 0 = the message's id */
    struct proto_sid stream; /* D→C: its stream's id in a poll reply ("s" as bin); zero = the message's */
    uint64_t i;            /* index within its stream, from 0, no gaps */
    int32_t token;         /* generated id; -1 on a final chunk without a token */
    char *text;            /* complete UTF-8 text this token adds (may be "") */
    bool has_logprob;
    float logprob;         /* log-softmax of the raw logits at the sampled id */
    struct proto_top *top; /* [n_top] best alternatives, descending */
    size_t n_top;
    int finish;            /* PF_*; set on the last chunk of a stream only */
    int32_t n_prompt;      /* final: prompt tokens */
    int32_t n_gen;         /* final: generated tokens */
    int32_t n_cached;      /* final: prompt tokens reused from the KV cache */
    int32_t stop_hit;      /* final PF_STOP by a stop string: 1 + its index in gen.stop ("stop_hit"); 0 none */
    int errc;              /* final with PF_ERROR: PE_* class */
    char *message;         /* final with PF_ERROR: one line */
    float *embd;           /* final of an embedding request: [n_embd] ("emb": bin of little-endian f32) */
    size_t n_embd;
};

/* What one worker is and does (status replies, ready, pong). */
struct proto_worker {
    int32_t idx;       /* index in the daemon's worker table */
    char *device;      /* "cpu", "0", "1" … */
    char *backend;     /* "cpu", "hip", "vulkan" */
    char *state;       /* "starting", "loading", "ready", "unresponsive" (ready, but its pongs are overdue),
                        * "restarting", "failed", "stopping" */
    int32_t pid;
    char *model;       /* model name */
    char *model_path;
    int32_t restarts;
    int32_t slots;     /* sequences decoded together (engine n_seq) */
    int32_t active;    /* requests holding a slot */
    int32_t queued;    /* requests waiting for one */
    int32_t n_ctx;
    int32_t n_vocab;
    uint64_t mem;      /* bytes of weights + KV the worker holds (the breakdown's sum when it sent one) */
    /* From "ready" on (optional on the wire: 0 when an older worker did not send them). How long the
     * load took, in ms: the whole of it (process start to ready), then reading the GGUF, compiling
     * kernels, uploading weights and allocating the rest (engine_load in worker/backend/backend.h) */
    uint64_t load_ms, read_ms, compile_ms, upload_ms, alloc_ms;
    /* What it holds, in bytes: weights, KV cache, recurrent states, their snapshots, step buffers;
     * one sequence's recurrent state (a snapshot is as large) and the snapshots kept per sequence;
     * the device's own count of its used and total memory (0: no device, e.g. the CPU) */
    uint64_t mem_weights, mem_kv, mem_state, mem_snap, mem_scratch, state_per_slot;
    int32_t n_snap;
    uint64_t dev_used, dev_total;
};

struct proto_status {
    bool ready;                   /* at least one worker is ready */
    char *version;                /* llm170d's version string */
    uint64_t uptime_s;
    int32_t active, queued;       /* totals over workers */
    char **models;                /* [n_models] names served by a ready worker */
    size_t n_models;
    struct proto_worker *workers; /* [n_workers] */
    size_t n_workers;
};

/* A poll's acknowledgement: the client holds every chunk of stream id below from. */
struct proto_ack {
    struct proto_sid stream;
    uint64_t from;
};

struct proto_msg {
    int type;                     /* enum proto_type */
    uint64_t id;                  /* request id (daemon ↔ worker), poll group; 0 = none */
    struct proto_sid stream;      /* client ↔ daemon stream id (accepted, next, cancel, chunks); sent as "id"
                                   * (bin) instead of the integer when not zero */
    struct proto_gen gen;         /* generate; gen.model for tokenize/detokenize */
    uint64_t from;                /* next: first chunk index the client still lacks */
    int32_t wait_ms;              /* next, poll: longest wait for a chunk */
    int32_t hold_ms;              /* poll: keep mid-stream chunks this long (final chunks go at once); 0 = none */
    struct proto_ack *acks;       /* poll: [n_acks] */
    size_t n_acks;
    struct proto_chunk *chunks;   /* chunks: [n_chunks]; with id 0 every chunk names its stream (sid) */
    size_t n_chunks;
    bool done;                    /* chunks: the stream ended (its final chunk is in this or an earlier reply) */
    int errc;                     /* error: PE_* */
    char *message;                /* error: one line */
    struct proto_status status;   /* status_reply */
    struct proto_worker worker;   /* ready, pong, accepted (idx) */
    int32_t *tokens;              /* tokens, detokenize: [n_tokens] */
    size_t n_tokens;
    char *text;                   /* tokenize, text */
    bool add_special;             /* tokenize (default true) */
    bool parse_special;           /* tokenize (default true) */
};

const char *proto_type_name(int type);

/* Zero a message and set its type (and the defaults of gen/tokenize). */
void proto_msg_init(struct proto_msg *m, int type);
/* Free what proto_decode allocated; the message is zeroed. */
void proto_msg_free(struct proto_msg *m);
void proto_chunk_free(struct proto_chunk *c);       /* its strings/arrays only */
void proto_chunks_free(struct proto_chunk *c, size_t n); /* each, then the array */
void proto_status_free(struct proto_status *s);
void proto_worker_free(struct proto_worker *w);
void proto_gen_free(struct proto_gen *g);

/* Deep copies (the copy owns everything). */
int proto_chunk_copy(struct proto_chunk *dst, const struct proto_chunk *src, struct err *e);
int proto_gen_copy(struct proto_gen *dst, const struct proto_gen *src, struct err *e);
int proto_worker_copy(struct proto_worker *dst, const struct proto_worker *src, struct err *e);

/* Encode to a malloc'ed buffer (*buf, *len). */
int proto_encode(const struct proto_msg *m, char **buf, size_t *len, struct err *e);
/* One chunks message of several streams (id 0, done false) encoded a chunk
 * at a time into a buffer that is kept from message to message: the worker
 * builds its step's message as the events come, with no per-chunk copy.
 * Equivalent to proto_encode of the same chunks (the array's length is a
 * 32-bit msgpack header, patched by proto_chunkbuf_end). */
struct proto_chunkbuf {
    msgpack_sbuffer sb; /* the message so far: sb.size bytes; the allocation stays from message to message */
    size_t at_n;        /* offset of the chunks array's 32-bit length in sb.data */
    uint32_t n;         /* chunks added since proto_chunkbuf_reset */
    bool oom;           /* a write found no memory: the message is incomplete */
};
/* Forget the message (the allocation stays). */
void proto_chunkbuf_reset(struct proto_chunkbuf *b);
/* Append c (c->sid must be set); its text is the n_text bytes at c->text,
 * which need no terminating NUL. ERR_NOMEM leaves b as it was before. */
int proto_chunkbuf_add(struct proto_chunkbuf *b, const struct proto_chunk *c, size_t n_text, struct err *e);
/* Close the message: *buf (owned by b) holds *len bytes ready to send. */
int proto_chunkbuf_end(struct proto_chunkbuf *b, const char **buf, size_t *len, struct err *e);
void proto_chunkbuf_free(struct proto_chunkbuf *b);

/* Decode one message; on error *m is left freed/zeroed and e names the key.
 * Never crashes on any input of any length. */
int proto_decode(const void *buf, size_t len, struct proto_msg *m, struct err *e);

/* Build an error message (message is borrowed). */
void proto_error(struct proto_msg *m, uint64_t id, int errc, const char *message);

#endif
