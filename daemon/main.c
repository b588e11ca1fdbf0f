/* llm170d — the supervisor: config, workers, client socket, systemd. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "../common/malloc_tune.h"
#include "daemon.h"

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = g_signal ? 2 : 1; /* a second signal stops at once */
    (void)sig;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llm170d [--config F] [--socket URL] [--model M] [--devices cpu,0,1] [options]\n"
            "  --config F        INI config (default $XDG_CONFIG_HOME/llm170/llm170.conf, else\n"
            "                    /etc/llm170/llm170.conf); flags override it\n"
            "  --socket URL      client socket (default ipc://$XDG_RUNTIME_DIR/llm170/llm170d.sock\n"
            "                    or ipc:///run/llm170/llm170d.sock)\n"
            "  --model M         GGUF path, or a name from the config's [models]\n"
            "  --devices LIST    one worker per entry: 'cpu' or a GPU index (default cpu)\n"
            "  --gpu-backend B   backend of GPU workers (default hip)\n"
            "  --slots N         sequences each worker decodes together (default 4)\n"
            "  --queue N         requests each worker queues beyond its slots (default 64)\n"
            "  --threads N       CPU threads per worker (default: all cores)\n"
            "  --ctx N           context positions per sequence (default: the model's, at most 4096)\n"
            "  --snapshots N     hybrids: recurrent-state snapshots each slot keeps for prefix reuse\n"
            "                    (0..64; default 0 = the engine's, 4)\n"
            "  --worker PATH     the worker program (default llm170-worker next to llm170d)\n"
            "  --drain-timeout S on SIGTERM, wait this long for open requests (default 30)\n"
            "  --ping-timeout-ms N  restart a worker silent this long (default 10000)\n"
            "  --flush-ms N      a busy worker sends its tokens this often (default 10; 0 = every step)\n"
            "  --version         version, commit and backends built in\n");
}

static void notify_status(struct daemon *d)
{
    int ready = 0, loading = 0;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n_workers; i++) {
        ready += d->w[i].state == W_READY;
        loading += d->w[i].state == W_LOADING || d->w[i].state == W_BACKOFF;
    }
    int open = streams_open(d);
    int ever = 0;
    for (int i = 0; i < d->n_workers; i++)
        ever += d->w[i].ever_ready || d->w[i].state == W_FAILED;
    pthread_mutex_unlock(&d->mu);
    char line[sizeof d->status_line];
    snprintf(line, sizeof line, "%s%d/%d workers ready (%.64s), %d open requests",
             d->stop ? "draining: " : "", ready, d->n_workers, d->cfg.model_name, open);
    if (strcmp(line, d->status_line)) {
        snprintf(d->status_line, sizeof d->status_line, "%s", line);
        sd_notifyf(0, "STATUS=%s", line);
    }
    /* READY once every worker has loaded the model (or failed for good), and
     * at least one serves. */
    if (!d->notified_ready && ever == d->n_workers && ready > 0) {
        d->notified_ready = true;
        sd_notify(0, "READY=1");
        d_log("ready: %d/%d workers serving '%s' on %s", ready, d->n_workers, d->cfg.model_name, d->cfg.socket);
    }
    (void)loading;
}

static bool all_failed(struct daemon *d)
{
    bool all = true;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n_workers; i++)
        all &= d->w[i].state == W_FAILED;
    pthread_mutex_unlock(&d->mu);
    return all;
}

int main(int argc, char **argv)
{
    static struct daemon dd;
    struct daemon *d = &dd;
    struct err e;
    const char *config = NULL;
    malloc_tune(argv, "llm170d");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            version_print(stdout, "llm170d");
            return 0;
        }
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[i + 1];
    }
    dconfig_defaults(&d->cfg);
    char path[1024];
    if (config) {
        snprintf(path, sizeof path, "%s", config);
    } else {
        dconfig_default_path(path, sizeof path);
    }
    if (path[0] && dconfig_load(&d->cfg, path, config != NULL, &e)) {
        fprintf(stderr, "llm170d: %s\n", e.msg);
        return 1;
    }
    static const struct { const char *flag, *key; } flags[] = {
        {"--socket", "socket"}, {"--model", "model"}, {"--devices", "devices"}, {"--worker", "worker"},
        {"--gpu-backend", "gpu_backend"}, {"--slots", "slots"}, {"--queue", "queue"},
        {"--threads", "threads"}, {"--ctx", "ctx"}, {"--snapshots", "snapshots"}, {"--drain-timeout", "drain_timeout"},
        {"--ping-timeout-ms", "ping_timeout_ms"}, {"--ping-interval-ms", "ping_interval_ms"},
        {"--load-timeout", "load_timeout"}, {"--stream-idle-ms", "stream_idle_ms"}, {"--flush-ms", "flush_ms"},
        {"--config", NULL},
    };
    for (int i = 1; i < argc; i += 2) { /* every flag takes a value */
        size_t k, nf = sizeof flags / sizeof *flags;
        for (k = 0; k < nf; k++)
            if (!strcmp(argv[i], flags[k].flag))
                break;
        if (k == nf) {
            fprintf(stderr, "llm170d: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llm170d: option '%s' needs a value\n", argv[i]);
            return 2;
        }
        if (flags[k].key && dconfig_set(&d->cfg, "command line", 0, flags[k].key, argv[i + 1], &e)) {
            fprintf(stderr, "llm170d: %s\n", e.msg);
            return 2;
        }
    }
    if (dconfig_finish(&d->cfg, &e)) {
        fprintf(stderr, "llm170d: %s\n", e.msg);
        return e.code == ERR_INVALID ? 2 : 1;
    }

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    pthread_mutex_init(&d->mu, NULL);
    pipeset_init(&d->refused);
    pthread_condattr_init(&d->cv_attr);
    pthread_condattr_setclock(&d->cv_attr, CLOCK_MONOTONIC);
    pthread_cond_init(&d->poll_cv, &d->cv_attr);
    d->t0_ms = d_now_ms();

    if (front_start(d, &e) || workers_init(d, &e)) {
        fprintf(stderr, "llm170d: %s\n", e.msg);
        sd_notifyf(0, "STATUS=failed: %s", e.msg);
        return 1;
    }
    d_log("serving '%s' (%s) on %s with devices %s", d->cfg.model_name, d->cfg.model, d->cfg.socket,
          d->cfg.devices);

    uint64_t wd_usec = 0;
    bool watchdog = sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0;
    int64_t wd_period = watchdog ? (int64_t)(wd_usec / 2000) : 0, t_wd = 0;
    int64_t drain_deadline = 0;
    int rc = 0;
    for (;;) {
        int64_t now = d_now_ms();
        if (g_signal && !d->stop) {
            d->stop = 1;
            drain_deadline = now + (int64_t)d->cfg.drain_s * 1000;
            sd_notify(0, "STOPPING=1");
            d_log("draining: no new requests; waiting up to %d s for open ones", d->cfg.drain_s);
        }
        if (g_signal == 2)
            d->stop = 2;
        workers_tick(d);
        streams_tick(d);
        notify_status(d);
        if (watchdog && now - t_wd >= wd_period) {
            sd_notify(0, "WATCHDOG=1");
            t_wd = now;
        }
        if (all_failed(d)) {
            d_log("no worker could load '%s'; exiting", d->cfg.model);
            rc = 1;
            break;
        }
        if (d->stop) {
            pthread_mutex_lock(&d->mu);
            int open = streams_open(d);
            pthread_mutex_unlock(&d->mu);
            if (!open || d->stop == 2 || now > drain_deadline) {
                if (open)
                    d_log("stopping with %d requests still open", open);
                break;
            }
        }
        usleep(20000);
    }
    workers_stop(d, 5000);
    front_stop(d);
    pipeset_free(&d->refused);
    if (d->run_dir_owned)
        rmdir(d->run_dir);
    d_log("stopped");
    return rc;
}
