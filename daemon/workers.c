/* workers.c — spawning, watching and restarting llm170-worker processes.
 *
 * Each worker has a pair0 socket the daemon listens on for the whole life of
 * the daemon; every (re)spawned process dials it. A receive thread per worker
 * turns its messages into stream/worker updates. The main loop (workers_tick)
 * reaps exits, restarts with exponential back-off, pings ready workers and
 * kills one that stops answering or never finishes loading. */
#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../proto/wire.h"
#include "daemon.h"

#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 30000
#define EXIT_FATAL 3 /* a worker that cannot load its model says so with this status: no restart */

int64_t d_now_ms(void) { return clock_now_ms(); }

void d_log(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "llm170d: %s\n", buf);
}

static const char *const wstate_names[] = {"starting", "loading", "ready", "restarting", "failed", "stopping",
                                           "stopped"};
const char *wstate_name(int s) { return s >= 0 && s <= W_STOPPED ? wstate_names[s] : "?"; }

static void set_str(char **dst, const char *src)
{
    free(*dst);
    *dst = src ? strdup(src) : NULL;
}

/* ---------------------------------------------------------------- receive */

static void on_message(struct daemon *d, struct worker *w, struct proto_msg *m)
{
    struct stream *s = m->id ? stream_find(d, m->id) : NULL;
    switch (m->type) {
    case PT_READY:
        if (w->state == W_STOPPING || w->state == W_STOPPED)
            break; /* loaded just as we stop it */
        w->state = W_READY;
        w->ever_ready = true;
        w->t_ready_ms = w->t_pong_ms = d_now_ms();
        w->info.slots = m->worker.slots;
        w->info.n_ctx = m->worker.n_ctx;
        w->info.n_vocab = m->worker.n_vocab;
        w->info.mem = m->worker.mem;
        /* the load split and the memory breakdown, for `llm170 ps` (zeros from an older worker) */
        w->info.load_ms = m->worker.load_ms;
        w->info.read_ms = m->worker.read_ms;
        w->info.compile_ms = m->worker.compile_ms;
        w->info.upload_ms = m->worker.upload_ms;
        w->info.alloc_ms = m->worker.alloc_ms;
        w->info.mem_weights = m->worker.mem_weights;
        w->info.mem_kv = m->worker.mem_kv;
        w->info.mem_state = m->worker.mem_state;
        w->info.mem_snap = m->worker.mem_snap;
        w->info.mem_scratch = m->worker.mem_scratch;
        w->info.state_per_slot = m->worker.state_per_slot;
        w->info.n_snap = m->worker.n_snap;
        w->info.dev_used = m->worker.dev_used;
        w->info.dev_total = m->worker.dev_total;
        if (m->worker.model && *m->worker.model)
            set_str(&w->info.model, m->worker.model);
        if (m->worker.backend)
            set_str(&w->info.backend, m->worker.backend);
        d_log("worker %d (%s): ready in %.1f s (read %.1f, compile %.1f, upload %.1f, allocate %.1f) — model %s, "
              "%d slots, ctx %d, %.1f MiB", w->idx, w->device, (double)(w->t_ready_ms - w->t_start_ms) / 1000.0,
              (double)w->info.read_ms / 1000.0, (double)w->info.compile_ms / 1000.0,
              (double)w->info.upload_ms / 1000.0, (double)w->info.alloc_ms / 1000.0,
              w->info.model ? w->info.model : "?", w->info.slots, w->info.n_ctx, (double)w->info.mem / 1048576.0);
        break;
    case PT_PONG:
        w->t_pong_ms = d_now_ms();
        w->info.active = m->worker.active;
        w->info.queued = m->worker.queued;
        break;
    case PT_ACCEPTED:
        if (s && s->state == S_PENDING)
            s->state = S_ACTIVE;
        break;
    case PT_CHUNKS:
        if (!m->id) {
            /* scheduler steps: chunks of several streams, each naming its
             * own. Waiters are woken once per message, not per chunk: a
             * poll of a group woken 64 times a step rescans every stream. */
            struct stream *cur = NULL;
            bool grouped = false;
            for (size_t i = 0; i < m->n_chunks; i++) {
                if (!cur || cur->id != m->chunks[i].sid)
                    cur = stream_find(d, m->chunks[i].sid);
                if (!cur || cur->kind != S_STREAM || cur->state == S_DONE)
                    continue; /* expired or canceled meanwhile */
                if (cur->state == S_PENDING)
                    cur->state = S_ACTIVE;
                if (!stream_append(cur, &m->chunks[i]))
                    continue;
                if (cur->waiters)
                    pthread_cond_broadcast(&cur->cv);
                grouped |= cur->group != 0;
            }
            if (grouped)
                pthread_cond_broadcast(&d->poll_cv);
            break;
        }
        if (!s || s->kind != S_STREAM)
            break; /* expired or canceled meanwhile */
        if (s->state == S_PENDING)
            s->state = S_ACTIVE;
        for (size_t i = 0; i < m->n_chunks && s->state != S_DONE; i++)
            stream_push(d, s, &m->chunks[i]);
        break;
    case PT_ERROR:
        if (!s) {
            d_log("worker %d (%s): %s", w->idx, w->device, m->message ? m->message : proto_errc_name(m->errc));
            break;
        }
        if (s->kind == S_CALL) {
            s->reply = *m;
            proto_msg_init(m, PT_NONE);
            s->state = S_DONE;
        } else {
            stream_fail(d, s, m->errc, m->message ? m->message : proto_errc_name(m->errc));
        }
        break;
    case PT_TOKENS:
    case PT_TEXT:
    case PT_OK:
        if (s && s->kind == S_CALL) {
            s->reply = *m;
            proto_msg_init(m, PT_NONE);
            s->state = S_DONE;
        }
        break;
    default:
        d_log("worker %d (%s): unexpected '%s' message ignored", w->idx, w->device, proto_type_name(m->type));
        break;
    }
    if (s)
        pthread_cond_broadcast(&s->cv);
}

struct rx_arg {
    struct daemon *d;
    int idx;
};

static void *rx_main(void *arg)
{
    struct daemon *d = ((struct rx_arg *)arg)->d;
    struct worker *w = &d->w[((struct rx_arg *)arg)->idx];
    free(arg);
    while (!d->quit_threads) {
        struct proto_msg m;
        struct err e;
        /* no timeout: every aio with a deadline joins nng's expiry list, and
         * workers_stop closes the socket, which ends this wait */
        int rc = proto_recv(w->sock, &m, NNG_DURATION_INFINITE, &e);
        if (rc == ERR_IO && proto_timed_out(&e))
            continue;
        if (rc == ERR_IO)
            break; /* socket closed: shutting down */
        if (rc) {
            d_log("worker %d (%s): bad message: %s", w->idx, w->device, e.msg);
            proto_msg_free(&m);
            continue;
        }
        pthread_mutex_lock(&d->mu);
        on_message(d, w, &m);
        pthread_mutex_unlock(&d->mu);
        proto_msg_free(&m);
    }
    return NULL;
}

/* ---------------------------------------------------------------- setup */

/* A new connection to worker w's socket: only the process we spawned for
 * that slot may be its worker. Another local process racing a restart (or
 * dialing while the worker runs) would otherwise receive the prompts and
 * answer in its place. mu is taken: spawn() sets w->pid under it, so the
 * child's own dial never sees a stale pid. */
static void worker_on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct worker_ref *a = arg;
    struct daemon *d = a->d;
    struct worker *w = &d->w[a->idx];
    (void)ev;
    if (strncmp(w->url, "ipc://", 6))
        return; /* tcp:// workers run elsewhere: no pid to compare */
    uint64_t pid = 0, uid = 0;
    bool known = !nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid);
    nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid);
    pthread_mutex_lock(&d->mu);
    bool ok = known && w->pid > 0 && (uint64_t)w->pid == pid;
    int64_t now = d_now_ms();
    bool say = !ok && now - w->t_refused_log_ms >= 1000;
    if (say)
        w->t_refused_log_ms = now;
    pid_t expect = w->pid;
    pthread_mutex_unlock(&d->mu);
    if (ok)
        return;
    if (say)
        d_log("worker %d: connection from pid %llu (uid %llu) refused: not the worker process (pid %d)", w->idx,
              (unsigned long long)pid, (unsigned long long)uid, (int)expect);
    nng_pipe_close(p);
}

int workers_init(struct daemon *d, struct err *e)
{
    /* Worker sockets live in a private directory (mkdtemp: 0700, a name
     * nobody can predict) next to the client socket when that is ipc, else
     * under $TMPDIR or /tmp. Only our user can reach them; the peer check
     * (worker_on_pipe) stops even that user's other processes. */
    char parent[512];
    if (!strncmp(d->cfg.socket, "ipc://", 6)) {
        snprintf(parent, sizeof parent, "%s", d->cfg.socket + 6);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent)
            *slash = 0;
        else
            snprintf(parent, sizeof parent, slash ? "/" : ".");
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(parent, sizeof parent, "%s", tmp && *tmp == '/' ? tmp : "/tmp");
    }
    snprintf(d->run_dir, sizeof d->run_dir, "%.480s/llm170d-workers.XXXXXX", parent);
    if (!mkdtemp(d->run_dir))
        return err_set(e, ERR_IO, "cannot create a private directory in '%s': %s", parent, strerror(errno));
    d->run_dir_owned = true;
    char list[256];
    snprintf(list, sizeof list, "%s", d->cfg.devices);
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        if (d->n_workers >= D_MAX_WORKERS)
            return err_set(e, ERR_RANGE, "more than %d devices in '%s'", D_MAX_WORKERS, d->cfg.devices);
        char *end;
        if (strcmp(tok, "cpu") && (strtol(tok, &end, 10) < 0 || *end || end == tok))
            return err_set(e, ERR_INVALID, "device '%s' is neither 'cpu' nor a GPU index", tok);
        struct worker *w = &d->w[d->n_workers];
        memset(w, 0, sizeof *w);
        w->idx = d->n_workers++;
        snprintf(w->device, sizeof w->device, "%s", tok);
        snprintf(w->url, sizeof w->url, "ipc://%s/worker-%d.sock", d->run_dir, w->idx);
        w->state = W_BACKOFF;
        w->t_next_ms = 0;
        w->info.idx = w->idx;
        set_str(&w->info.device, w->device);
        set_str(&w->info.backend, strcmp(tok, "cpu") ? d->cfg.gpu_backend : "cpu");
        set_str(&w->info.model, d->cfg.model_name);
        set_str(&w->info.model_path, d->cfg.model);
        int rv = nng_pair0_open(&w->sock);
        if (rv)
            return err_set(e, ERR_IO, "worker %d: cannot open its socket: %s", w->idx, nng_strerror(rv));
        nng_socket_set_size(w->sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_MSG);
        w->ref.d = d;
        w->ref.idx = w->idx;
        if ((rv = nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_PRE, worker_on_pipe, &w->ref)) != 0)
            return err_set(e, ERR_IO, "worker %d: cannot watch its socket: %s", w->idx, nng_strerror(rv));
        nng_listener l;
        if ((rv = nng_listener_create(&l, w->sock, w->url)) != 0 ||
            (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) != 0 || (rv = nng_listener_start(l, 0)) != 0)
            return err_set(e, ERR_IO, "worker %d: cannot listen on '%s': %s", w->idx, w->url, nng_strerror(rv));
        struct rx_arg *a = malloc(sizeof *a);
        if (!a)
            return err_set(e, ERR_NOMEM, "out of memory");
        a->d = d;
        a->idx = w->idx;
        if (pthread_create(&w->rx, NULL, rx_main, a)) {
            free(a);
            return err_set(e, ERR_INTERNAL, "cannot start a thread");
        }
        w->rx_started = true;
    }
    if (!d->n_workers)
        return err_set(e, ERR_INVALID, "no devices given (--devices cpu,0,…)");
    return 0;
}

static void worker_bin(struct daemon *d, char *out, size_t cap)
{
    if (d->cfg.worker_bin[0]) {
        snprintf(out, cap, "%s", d->cfg.worker_bin);
        return;
    }
    char self[900];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(out, cap, "llm170-worker");
        return;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;
    snprintf(out, cap, "%s/llm170-worker", self);
}

static void spawn(struct daemon *d, struct worker *w)
{
    char bin[1024], slots[16], queue[16], threads[16], ctx[16], idx[16], flush[16], snaps[16];
    worker_bin(d, bin, sizeof bin);
    snprintf(slots, sizeof slots, "%d", d->cfg.slots);
    snprintf(queue, sizeof queue, "%d", d->cfg.queue);
    snprintf(threads, sizeof threads, "%d", d->cfg.threads);
    snprintf(ctx, sizeof ctx, "%d", d->cfg.ctx);
    snprintf(idx, sizeof idx, "%d", w->idx);
    snprintf(flush, sizeof flush, "%d", d->cfg.flush_ms);
    snprintf(snaps, sizeof snaps, "%d", d->cfg.snapshots);
    bool gpu = strcmp(w->device, "cpu") != 0;
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--connect"; argv[n++] = w->url;
    argv[n++] = "--model"; argv[n++] = d->cfg.model;
    argv[n++] = "--name"; argv[n++] = d->cfg.model_name;
    argv[n++] = "--backend"; argv[n++] = gpu ? d->cfg.gpu_backend : "cpu";
    if (gpu) {
        argv[n++] = "--gpu";
        argv[n++] = w->device;
    }
    argv[n++] = "--slots"; argv[n++] = slots;
    argv[n++] = "--queue"; argv[n++] = queue;
    argv[n++] = "--threads"; argv[n++] = threads;
    argv[n++] = "--ctx"; argv[n++] = ctx;
    if (d->cfg.snapshots > 0) { /* only when set: the worker's default otherwise */
        argv[n++] = "--snapshots";
        argv[n++] = snaps;
    }
    argv[n++] = "--idx"; argv[n++] = idx;
    argv[n++] = "--flush-ms"; argv[n++] = flush;
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        d_log("worker %d (%s): fork failed: %s", w->idx, w->device, strerror(errno));
        w->state = W_BACKOFF;
        w->t_next_ms = d_now_ms() + 1000;
        return;
    }
    if (pid == 0) {
        /* Own process group: a terminal's Ctrl-C reaches the daemon, which
         * drains and then stops its workers. Die with the daemon. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "llm170d: cannot run worker '%s': %s\n", bin, strerror(errno));
        _exit(EXIT_FATAL);
    }
    w->pid = pid;
    w->info.pid = pid;
    w->state = W_LOADING;
    w->t_start_ms = d_now_ms();
    w->t_pong_ms = w->t_ping_ms = w->t_start_ms;
    d_log("worker %d (%s): started, pid %d", w->idx, w->device, (int)pid);
}

/* ---------------------------------------------------------------- tick */

static void reap(struct daemon *d)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        struct worker *w = NULL;
        for (int i = 0; i < d->n_workers; i++)
            if (d->w[i].pid == pid)
                w = &d->w[i];
        if (!w)
            continue;
        char how[64];
        if (WIFSIGNALED(st))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
        else
            snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
        w->pid = 0;
        w->info.pid = 0;
        w->info.active = w->info.queued = 0;
        char msg[160];
        snprintf(msg, sizeof msg, "worker %d (%s) %s", w->idx, w->device, how);
        streams_fail_worker(d, w->idx, PE_INTERNAL, msg);
        if (w->state == W_STOPPING || d->stop == 2) {
            w->state = W_STOPPED;
            d_log("worker %d (%s): stopped (%s)", w->idx, w->device, how);
            continue;
        }
        int64_t now = d_now_ms();
        if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_FATAL && !w->ever_ready) {
            w->state = W_FAILED;
            d_log("worker %d (%s): %s before loading its model; not restarting", w->idx, w->device, how);
            continue;
        }
        /* A worker that ran well for a while starts over at the short delay. */
        if (w->state == W_READY && now - w->t_ready_ms > 60000)
            w->backoff_ms = 0;
        w->backoff_ms = w->backoff_ms ? w->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (w->backoff_ms > BACKOFF_MAX_MS)
            w->backoff_ms = BACKOFF_MAX_MS;
        w->state = W_BACKOFF;
        w->t_next_ms = now + w->backoff_ms;
        w->restarts++;
        w->info.restarts = w->restarts;
        d_log("%s; restarting in %.2f s", msg, (double)w->backoff_ms / 1000.0);
    }
}

void workers_tick(struct daemon *d)
{
    int ping[D_MAX_WORKERS], n_ping = 0;
    pthread_mutex_lock(&d->mu);
    reap(d);
    int64_t now = d_now_ms();
    for (int i = 0; i < d->n_workers; i++) {
        struct worker *w = &d->w[i];
        if (w->state == W_BACKOFF && now >= w->t_next_ms && !d->stop) {
            spawn(d, w);
        } else if (w->state == W_READY) {
            if (now - w->t_pong_ms > d->cfg.ping_timeout_ms && w->pid > 0) {
                d_log("worker %d (%s): no answer for %d ms; killing pid %d", w->idx, w->device,
                      (int)(now - w->t_pong_ms), (int)w->pid);
                kill(w->pid, SIGKILL);
                w->t_pong_ms = now; /* one kill per timeout */
            } else if (now - w->t_ping_ms >= d->cfg.ping_ms) {
                w->t_ping_ms = now;
                ping[n_ping++] = i;
            }
        } else if (w->state == W_LOADING && now - w->t_start_ms > (int64_t)d->cfg.load_timeout_s * 1000 &&
                   w->pid > 0) {
            d_log("worker %d (%s): not ready after %d s; killing pid %d", w->idx, w->device,
                  d->cfg.load_timeout_s, (int)w->pid);
            kill(w->pid, SIGKILL);
            w->t_start_ms = now;
        }
    }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n_ping; i++) {
        struct proto_msg m;
        struct err e;
        proto_msg_init(&m, PT_PING);
        m.id = 0;
        workers_send(d, ping[i], &m, &e); /* a lost ping shows up as a missing pong */
    }
}

bool worker_alive(const struct daemon *d, const struct worker *w, int64_t now)
{
    /* pings go out every ping_ms and the worker answers them on its own
     * thread (not between scheduler steps), so two periods and a half-second
     * of slack without a pong mean it is stopped or hung */
    int64_t overdue = 2 * (int64_t)d->cfg.ping_ms + 500;
    if (overdue > d->cfg.ping_timeout_ms)
        overdue = d->cfg.ping_timeout_ms;
    return now - w->t_pong_ms <= overdue;
}

int workers_send(struct daemon *d, int idx, const struct proto_msg *m, struct err *e)
{
    int rc = proto_send(d->w[idx].sock, m, 1000, e);
    if (rc)
        err_prefix(e, "worker %d", idx);
    return rc;
}

int workers_pick(struct daemon *d, const char *model, int *idx, struct err *e)
{
    int best = -1;
    double best_load = 0;
    bool known = false;
    /* load = requests we routed there and that are still open (fresher than
     * the workers' own counts, which only come with each pong) */
    int open[D_MAX_WORKERS] = {0};
    for (struct stream *s = d->streams; s; s = s->next)
        if (s->kind == S_STREAM && s->state != S_DONE && s->worker >= 0 && s->worker < D_MAX_WORKERS)
            open[s->worker]++;
    for (int i = 0; i < d->n_workers; i++) {
        struct worker *w = &d->w[i];
        if (model && *model && strcmp(model, w->info.model ? w->info.model : "") &&
            strcmp(model, d->cfg.model) && strcmp(model, d->cfg.model_name))
            continue;
        known = true;
        if (w->state != W_READY)
            continue;
        double load = (double)(open[i] + 1) / (w->info.slots > 0 ? w->info.slots : 1);
        if (best < 0 || load < best_load) {
            best = i;
            best_load = load;
        }
    }
    if (best >= 0) {
        *idx = best;
        return 0;
    }
    if (!known)
        return err_set(e, ERR_NOTFOUND, "model '%s' is not served here (serving '%s')", model,
                       d->cfg.model_name);
    char why[256] = "";
    size_t o = 0;
    for (int i = 0; i < d->n_workers && o < sizeof why - 40; i++)
        o += (size_t)snprintf(why + o, sizeof why - o, "%sworker %d %s", i ? ", " : "", i,
                              wstate_name(d->w[i].state));
    return err_set(e, ERR_IO, "no worker is ready (%s)", why);
}

void workers_stop(struct daemon *d, int grace_ms)
{
    int targets[D_MAX_WORKERS], n = 0;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n_workers; i++) {
        struct worker *w = &d->w[i];
        if (w->pid > 0) {
            if (w->state == W_READY)
                targets[n++] = i;
            else
                kill(w->pid, SIGTERM); /* still loading: nothing to finish */
            w->state = W_STOPPING;
        } else {
            w->state = W_STOPPED;
        }
    }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n; i++) {
        struct proto_msg m;
        struct err e;
        proto_msg_init(&m, PT_SHUTDOWN);
        if (workers_send(d, targets[i], &m, &e)) {
            pthread_mutex_lock(&d->mu);
            if (d->w[targets[i]].pid > 0)
                kill(d->w[targets[i]].pid, SIGTERM);
            pthread_mutex_unlock(&d->mu);
        }
    }
    int64_t deadline = d_now_ms() + grace_ms;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        reap(d);
        int alive = 0;
        for (int i = 0; i < d->n_workers; i++)
            if (d->w[i].pid > 0) {
                alive++;
                if (d_now_ms() > deadline) {
                    d_log("worker %d (%s): did not stop in time; killing pid %d", i, d->w[i].device,
                          (int)d->w[i].pid);
                    kill(d->w[i].pid, SIGKILL);
                }
            }
        pthread_mutex_unlock(&d->mu);
        if (!alive)
            break;
        usleep(20000);
    }
    d->quit_threads = 1;
    for (int i = 0; i < d->n_workers; i++) {
        nng_close(d->w[i].sock);
        if (d->w[i].rx_started)
            pthread_join(d->w[i].rx, NULL);
        proto_worker_free(&d->w[i].info);
    }
}
