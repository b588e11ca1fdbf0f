/* config.c — llm170d's INI config file.
 *
 *   # comment            ; comment
 *   [daemon]
 *   socket = ipc:///run/llm170/llm170d.sock
 *   model = stories            (a path, or a name from [models])
 *   devices = cpu,0
 *   slots = 4
 *   snapshots = 4              (hybrids: state snapshots per slot)
 *   [models]
 *   stories = /srv/models/stories260K.gguf
 *
 * Keys of [daemon] may also stand before any section. Unknown keys are
 * reported on stderr and skipped (a newer config still starts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/ini.h"
#include "../proto/client.h"
#include "daemon.h"

void dconfig_defaults(struct dconfig *c)
{
    memset(c, 0, sizeof *c);
    pc_default_url(c->socket, sizeof c->socket);
    snprintf(c->devices, sizeof c->devices, "cpu");
    snprintf(c->gpu_backend, sizeof c->gpu_backend, "hip");
    c->slots = 4;
    c->queue = 64;
    c->drain_s = 30;
    c->ping_ms = 1000;
    c->ping_timeout_ms = 10000;
    c->load_timeout_s = 600;
    c->n_client_threads = 64;
    c->stream_idle_ms = PC_STREAM_IDLE_MS;
    c->flush_ms = 10;
}

void dconfig_default_path(char *buf, size_t cap) { ini_default_path(buf, cap); }

static int set_int(const char *path, int line, const char *key, const char *val, int lo, int hi, int *out,
                   struct err *e)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi)
        return err_set(e, ERR_INVALID, "%s:%d: '%s' must be an integer in [%d, %d], not '%s'", path, line, key,
                       lo, hi, val);
    *out = (int)v;
    return 0;
}

int dconfig_set(struct dconfig *c, const char *path, int line, const char *key, const char *val, struct err *e)
{
#define STR(k, f) if (!strcmp(key, k)) { snprintf(c->f, sizeof c->f, "%s", val); return 0; }
#define INT(k, f, lo, hi) if (!strcmp(key, k)) return set_int(path, line, key, val, lo, hi, &c->f, e)
    STR("socket", socket);
    STR("model", model);
    STR("devices", devices);
    STR("worker", worker_bin);
    STR("gpu_backend", gpu_backend);
    STR("allow_group", allow_group);
    STR("allow_uids", allow_uids);
    INT("threads", threads, 0, 1024);
    INT("ctx", ctx, 0, 1 << 24);
    INT("snapshots", snapshots, 0, 64); /* ENGINE_N_SNAP_MAX */
    INT("slots", slots, 1, 256);
    INT("queue", queue, 0, 100000);
    INT("drain_timeout", drain_s, 0, 3600);
    INT("ping_interval_ms", ping_ms, 50, 600000);
    INT("ping_timeout_ms", ping_timeout_ms, 100, 3600000);
    INT("load_timeout", load_timeout_s, 1, 86400);
    INT("client_threads", n_client_threads, 1, 1024);
    INT("stream_idle_ms", stream_idle_ms, 100, 86400000);
    INT("flush_ms", flush_ms, 0, 1000);
#undef STR
#undef INT
    fprintf(stderr, "llm170d: %s:%d: unknown key '%s' ignored\n", path, line, key);
    return 0;
}

static int on_key(void *ctx, const char *path, int line, const char *section, const char *key, const char *val,
                  struct err *e)
{
    struct dconfig *c = ctx;
    if (!strcmp(section, "models")) {
        if (c->n_models >= 8)
            return err_set(e, ERR_RANGE, "%s:%d: more than 8 models", path, line);
        snprintf(c->models[c->n_models][0], sizeof c->models[0][0], "%s", key);
        snprintf(c->models[c->n_models][1], sizeof c->models[0][1], "%s", val);
        c->n_models++;
        return 0;
    }
    if (ini_is_daemon_section(section))
        return dconfig_set(c, path, line, key, val, e);
    return 0; /* other sections belong to other programs (gateway …) */
}

int dconfig_load(struct dconfig *c, const char *path, bool required, struct err *e)
{
    return ini_read(path, required, on_key, c, e);
}

int dconfig_finish(struct dconfig *c, struct err *e)
{
    if (!c->model[0])
        return err_set(e, ERR_INVALID, "no model given (--model M or 'model =' in the config)");
    const char *name = NULL;
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->model, c->models[i][0])) {
            name = c->models[i][0];
            snprintf(c->model, sizeof c->model, "%s", c->models[i][1]);
            break;
        }
    if (name) {
        snprintf(c->model_name, sizeof c->model_name, "%.255s", name);
    } else {
        const char *b = strrchr(c->model, '/');
        b = b ? b + 1 : c->model;
        size_t bl = strlen(b);
        if (bl >= sizeof c->model_name)
            bl = sizeof c->model_name - 1;
        memcpy(c->model_name, b, bl);
        c->model_name[bl] = 0;
        size_t n = strlen(c->model_name);
        if (n > 5 && !strcmp(c->model_name + n - 5, ".gguf"))
            c->model_name[n - 5] = 0;
    }
    if (access(c->model, R_OK) != 0)
        return err_set(e, ERR_IO, "cannot open model '%s': %s", c->model, strerror(errno));
    return 0;
}
