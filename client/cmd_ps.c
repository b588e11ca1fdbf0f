/* cmd_ps.c — `llm170 ps` / `llm170 status`: what the daemon runs. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/client.h"
#include "cli.h"


static void human_bytes(uint64_t b, char *out, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(out, cap, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(out, cap, "%.1f MiB", (double)b / (double)(1ull << 20));
    else
        snprintf(out, cap, "%llu B", (unsigned long long)b);
}

static void human_uptime(uint64_t s, char *out, size_t cap)
{
    if (s >= 86400)
        snprintf(out, cap, "%llud%02lluh", (unsigned long long)(s / 86400), (unsigned long long)(s % 86400 / 3600));
    else if (s >= 3600)
        snprintf(out, cap, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s % 3600 / 60));
    else
        snprintf(out, cap, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
}

int cmd_ps(int argc, char **argv)
{
    const char *url = NULL, *config = NULL;
    char url_buf[512];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llm170 %s [--socket URL] [--config F]\n"
                   "Shows what llm170d runs: workers, device, model, memory, active/queued requests; then, per\n"
                   "worker, how long its load took (read, compile, upload, allocate) and what its memory holds.\n"
                   "  --socket URL   the daemon's socket (default: the config's [daemon] socket, else\n"
                   "                 $LLM170_SOCKET, else the user or system socket)\n"
                   "  --config F     the config file to take the socket from (default: llm170d's)\n",
                   argv[0]);
            return 0;
        }
        if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
            url = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
            continue;
        }
        fprintf(stderr, "llm170: %s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
        return 2;
    }
    struct pc_client *c;
    struct err e;
    if (!url && config) {
        if (pc_config_url(config, url_buf, sizeof url_buf, &e)) {
            fprintf(stderr, "llm170: %s\n", e.msg);
            return 1;
        }
        url = url_buf;
    }
    if (pc_open(&c, url, 5000, 0, &e)) {
        fprintf(stderr, "llm170: %s (is llm170d running?)\n", e.msg);
        return 1;
    }
    struct proto_status st;
    int rc = pc_status(c, &st, &e);
    pc_close(c);
    if (rc) {
        fprintf(stderr, "llm170: %s\n", e.msg);
        return 1;
    }
    char up[32];
    human_uptime(st.uptime_s, up, sizeof up);
    printf("llm170d %s, up %s, %s; %d active, %d queued requests\n", st.version ? st.version : "?", up,
           st.ready ? "ready" : "not ready", st.active, st.queued);
    printf("%-3s %-6s %-7s %-12s %-8s %-20s %5s %6s %6s %6s %10s %8s\n", "ID", "DEVICE", "BACKEND", "STATE", "PID",
           "MODEL", "SLOTS", "ACTIVE", "QUEUED", "CTX", "MEMORY", "RESTARTS");
    for (size_t i = 0; i < st.n_workers; i++) {
        const struct proto_worker *w = &st.workers[i];
        char mem[32];
        human_bytes(w->mem, mem, sizeof mem);
        printf("%-3d %-6s %-7s %-12s %-8d %-20s %5d %6d %6d %6d %10s %8d\n", w->idx, w->device ? w->device : "-",
               w->backend ? w->backend : "-", w->state ? w->state : "-", w->pid, w->model ? w->model : "-", w->slots,
               w->active, w->queued, w->n_ctx, w->mem ? mem : "-", w->restarts);
    }
    /* below the table, per worker that said: how its load went and what it holds (an older worker sends
     * neither) */
    bool blank = false;
    for (size_t i = 0; i < st.n_workers; i++) {
        const struct proto_worker *w = &st.workers[i];
        const uint64_t held = w->mem_weights + w->mem_kv + w->mem_state + w->mem_snap + w->mem_scratch;
        if (!w->load_ms && !held)
            continue;
        if (!blank)
            printf("\n");
        blank = true;
        if (w->load_ms)
            printf("worker %d: ready in %.2f s (read %.2f, compile %.2f, upload %.2f, allocate %.2f)\n", w->idx,
                   (double)w->load_ms / 1000.0, (double)w->read_ms / 1000.0, (double)w->compile_ms / 1000.0,
                   (double)w->upload_ms / 1000.0, (double)w->alloc_ms / 1000.0);
        if (!held)
            continue;
        char t[32], a[32], b[32], c[32], d[32], f[32], g[32];
        human_bytes(held, t, sizeof t);
        human_bytes(w->mem_weights, a, sizeof a);
        human_bytes(w->mem_kv, b, sizeof b);
        human_bytes(w->mem_state, c, sizeof c);
        human_bytes(w->mem_snap, d, sizeof d);
        human_bytes(w->state_per_slot, f, sizeof f);
        human_bytes(w->mem_scratch, g, sizeof g);
        printf("worker %d: memory %s: weights %s, KV %s, states %s, snapshots %s (%d per slot of %s), scratch %s",
               w->idx, t, a, b, c, d, w->n_snap, f, g);
        if (w->dev_total) {
            char u[32], v[32];
            human_bytes(w->dev_used, u, sizeof u);
            human_bytes(w->dev_total, v, sizeof v);
            printf("; device reports %s used of %s", u, v);
        }
        printf("\n");
    }
    proto_status_free(&st);
    return 0;
}

int cmd_status(int argc, char **argv) { return cmd_ps(argc, argv); }
