/* daemon.h — llm170d's shared state: configuration, the worker table and the
 * open streams. One mutex (d->mu) guards everything below it; each stream
 * has its own condition variable (with d->mu), signaled when it changes, so a
 * token wakes only the client thread polling that stream. */
#ifndef LLM170_DAEMON_H
#define LLM170_DAEMON_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"
#include "../common/version.h"
#include "../proto/proto.h"
#include "peer.h"
#include "pipeset.h"

#define D_MAX_WORKERS 16
#define D_VERSION LLM170_VERSION /* common/version.h */

struct dconfig {
    char socket[512];      /* client URL */
    char model[1024];      /* model path (or a name from [models]) */
    char model_name[256];  /* name clients use; the file's base name without .gguf */
    char devices[256];     /* "cpu,0,1" */
    char worker_bin[1024]; /* llm170-worker path; "" = next to llm170d */
    char gpu_backend[16];  /* backend passed to GPU workers ("hip") */
    int threads;           /* CPU threads per worker, 0 = worker decides */
    int ctx;               /* positions per sequence, 0 = worker decides */
    int snapshots;         /* recurrent-state snapshots each slot keeps (hybrids; prefix reuse), 0 = worker
                            * decides (ENGINE_N_SNAP_DEFAULT, worker/backend/backend.h) */
    int slots;             /* sequences per worker (engine n_seq) */
    int queue;             /* waiting requests per worker beyond its slots */
    int drain_s;           /* SIGTERM: longest wait for open requests */
    int ping_ms;           /* health ping period */
    int ping_timeout_ms;   /* no pong for this long → the worker is killed and restarted */
    int load_timeout_s;    /* a worker that is not ready after this long is restarted */
    int n_client_threads;  /* REP contexts serving clients at once */
    int stream_idle_ms;    /* a stream nobody polls for this long is canceled */
    int flush_ms;          /* a worker sends its tokens at least this often while it steps (0 = every step) */
    char allow_group[256]; /* groups (names or gids, comma-separated) whose members may use the client socket;
                            * "" = the group 'llm170' when it exists (see peer.h) */
    char allow_uids[256];  /* further uids allowed on the client socket (comma-separated) */
    char models[8][2][1024]; /* [models] name = path */
    int n_models;
};

/* Defaults, then the config file (explicit path, else the user's, else
 * /etc/llm170/llm170.conf), leaving flags for the caller to apply. */
void dconfig_defaults(struct dconfig *c);
int dconfig_set(struct dconfig *c, const char *path, int line, const char *key, const char *val,
                struct err *e); /* one key (config line or flag) */
int dconfig_load(struct dconfig *c, const char *path, bool required, struct err *e);
/* The config file to read when --config is not given ("" when none exists). */
void dconfig_default_path(char *buf, size_t cap);
/* Resolve model names through [models] and derive model_name. */
int dconfig_finish(struct dconfig *c, struct err *e);

enum wstate { W_STARTING, W_LOADING, W_READY, W_BACKOFF, W_FAILED, W_STOPPING, W_STOPPED };
const char *wstate_name(int s);

struct daemon;
/* (daemon, worker index): the argument of a worker's nng callbacks */
struct worker_ref {
    struct daemon *d;
    int idx;
};

struct worker {
    int idx;
    struct worker_ref ref;  /* points back here, for worker_on_pipe */
    char device[32];        /* "cpu" or a GPU index */
    char url[600];          /* pair0 socket the daemon listens on */
    nng_socket sock;
    pthread_t rx;           /* receive thread */
    bool rx_started;
    int state;              /* enum wstate */
    pid_t pid;
    int restarts;
    int64_t t_start_ms;     /* when the current process was spawned */
    int64_t t_ready_ms;
    int64_t t_next_ms;      /* W_BACKOFF: when to respawn */
    int64_t backoff_ms;
    int64_t t_ping_ms;      /* last ping sent */
    int64_t t_pong_ms;      /* last pong seen */
    int64_t t_refused_log_ms; /* last "foreign process refused" log line (one per second at most) */
    bool ever_ready;
    struct proto_worker info; /* from "ready" + "pong" (model, slots, n_ctx, mem, active, queued) */
};

enum skind { S_STREAM, S_CALL };
enum sstate { S_PENDING, S_ACTIVE, S_DONE };

/* A generate stream, or a one-shot call (tokenize) waiting for its reply. */
struct stream {
    struct stream *next;
    uint64_t id;            /* the request id the worker knows it by (a counter; never shown to clients) */
    struct proto_sid key;   /* the id its client knows it by: 128 random bits */
    uint32_t pipe;          /* nng pipe (client connection) that created it: only that one may poll/cancel it */
    int kind;               /* enum skind */
    int state;              /* enum sstate */
    int worker;             /* index */
    int waiters;            /* client threads blocked on it: never freed while > 0 */
    pthread_cond_t cv;      /* signaled on every change (chunk, accept, failure) */
    bool canceled;          /* its client canceled it: nobody waits for the rest */
    struct proto_chunk *q;  /* [n] chunks held, q[0] has index base */
    size_t n, cap;
    uint64_t base;
    int64_t t_poll_ms;      /* last client activity */
    uint64_t group;         /* poll group its client collects it with (0 = polled alone with "next") */
    int64_t t_done_ms;      /* when the final chunk was handed to the client (0 = not yet) */
    int errc;               /* S_PENDING failed: the worker's error */
    char errmsg[256];
    struct proto_msg reply; /* S_CALL: the worker's answer (type PT_NONE until it comes) */
};

struct daemon {
    struct dconfig cfg;
    pthread_mutex_t mu;
    pthread_condattr_t cv_attr; /* CLOCK_MONOTONIC, for the streams' condition variables */
    struct worker w[D_MAX_WORKERS];
    int n_workers;
    struct stream *streams;
    pthread_cond_t poll_cv; /* signaled when a stream of any poll group gets a chunk */
    uint64_t next_id;       /* request ids for workers */
    struct peer_policy peers; /* who may connect to the client socket */
    struct pipeset refused;   /* client connections peers refused, answered "forbidden" until they close */
    _Atomic int64_t t_refused_log_ms; /* last "client refused" log line: one a second, so a local */
    atomic_int n_refused_quiet;       /* user cannot flood the journal (the rest are counted) */
    int64_t t0_ms;
    volatile int stop;      /* 1 draining, 2 stopping now */
    volatile int quit_threads;
    bool notified_ready;
    char run_dir[512];      /* where worker sockets live */
    bool run_dir_owned;
    nng_socket front;
    pthread_t *front_threads;
    int n_front_threads;
    char status_line[256];
};

int64_t d_now_ms(void);
void d_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* workers.c */
int workers_init(struct daemon *d, struct err *e);
void workers_tick(struct daemon *d);             /* spawn, reap, ping, time out (main loop) */
void workers_stop(struct daemon *d, int grace_ms); /* shutdown message, wait, then SIGKILL */
int workers_send(struct daemon *d, int idx, const struct proto_msg *m, struct err *e); /* mu NOT held */
int workers_pick(struct daemon *d, const char *model, int *idx, struct err *e);        /* mu held */

/* streams (front.c) */
struct stream *stream_find(struct daemon *d, uint64_t id);   /* mu held */
void stream_push(struct daemon *d, struct stream *s, struct proto_chunk *c); /* mu held; takes c's contents */
/* stream_push without waking anyone (the caller wakes the waiters once for
 * many chunks); false when the chunk was dropped */
bool stream_append(struct stream *s, struct proto_chunk *c);
void stream_fail(struct daemon *d, struct stream *s, int errc, const char *msg); /* mu held */
void streams_fail_worker(struct daemon *d, int idx, int errc, const char *msg);  /* mu held */
void streams_tick(struct daemon *d);              /* expire idle / finished streams */
int front_start(struct daemon *d, struct err *e);
void front_stop(struct daemon *d);
int streams_open(struct daemon *d);               /* mu held: streams not yet finished */

/* True when the worker answered its last ping recently enough to count as
 * serving (a stopped or hung process is not, well before the kill timeout). mu held. */
bool worker_alive(const struct daemon *d, const struct worker *w, int64_t now);
/* Create dir (and its parents) with mode, and make sure dir itself has
 * exactly mode and is owned by us when we created it. */
int d_mkdir_mode(const char *dir, mode_t mode, struct err *e);

#endif
