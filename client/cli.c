/* cli.c — argument parsing, errors and model loading shared by the verbs. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("llm170: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("llm170: ", stderr);
    if (verb)
        fprintf(stderr, "%s: ", verb);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'llm170 %s%s--help')\n", verb ? verb : "", verb ? " " : "");
    va_end(ap);
    return EXIT_USAGE;
}

bool cli_parse_int(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool cli_parse_float(const char *s, double *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 16, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return false;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '[' || *p == ']' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return false;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return false;
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
        if (*p && *p != ',' && *p != ' ' && *p != ']' && *p != '\t' && *p != '\n') {
            free(v);
            return false;
        }
    }
    *ids = v;
    *n = cnt;
    return true;
}

bool cli_opt(int argc, char **argv, int *i, const char *name, const char **val, bool *missing)
{
    const char *a = argv[*i];
    size_t nl = strlen(name);
    if (strncmp(a, name, nl) != 0)
        return false;
    if (a[nl] == '=') {
        *val = a + nl + 1;
        *missing = false;
        return true;
    }
    if (a[nl] != '\0')
        return false;
    if (*i + 1 >= argc) {
        *missing = true;
        *val = NULL;
        return true;
    }
    *missing = false;
    *val = argv[++*i];
    return true;
}

char *cli_read_file(const char *path, size_t *len, struct err *e)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        err_set(e, ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            err_set(e, ERR_NOMEM, "out of memory reading '%s'", path);
            break;
        }
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                err_set(e, ERR_IO, "cannot read '%s': %s", path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

bool cli_parse_backend(const char *s, enum backend_kind *out) { return engine_backend_parse(s, out); }

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fault the weights in now, with a progress line on a terminal, so the first
 * token does not pay for page faults and a slow disk shows as such. */
static void prefault(const struct model *m)
{
    const struct gguf *g = model_gguf(m);
    bool tty = isatty(2);
    uint64_t total = 0, done = 0;
    for (int p = 0; p < g->n_parts; p++)
        total += g->parts[p].size;
    double t0 = cli_now(), last = t0;
    volatile uint8_t sink = 0;
    for (int p = 0; p < g->n_parts; p++) {
        const uint8_t *base = g->parts[p].map;
        uint64_t size = g->parts[p].size;
        if (!base)
            continue;
        madvise((void *)base, size, MADV_WILLNEED);
        for (uint64_t off = 0; off < size; off += 4096) {
            sink ^= base[off];
            done += off + 4096 <= size ? 4096 : size - off;
            if (tty && (done & ((64u << 20) - 1)) == 0) {
                double now = cli_now();
                if (now - last > 0.2) {
                    fprintf(stderr, "\rloading model: %llu / %llu MB (%.0f MB/s)   ", (unsigned long long)(done >> 20),
                            (unsigned long long)(total >> 20), (double)done / 1e6 / (now - t0));
                    last = now;
                }
            }
        }
    }
    (void)sink;
    if (tty && last > t0)
        fprintf(stderr, "\rloading model: %llu MB in %.1f s%30s\n", (unsigned long long)(total >> 20), cli_now() - t0, "");
}

struct model *cli_load_model(const char *path)
{
    struct err e;
    err_clear(&e);
    struct model *m = NULL;
    if (model_load(&m, path, &e) != 0) {
        /* the loader's messages already name the file; add it only when they don't */
        if (e.code == ERR_IO && access(path, R_OK) != 0)
            cli_error("cannot open model '%s': %s", path, strerror(errno));
        else if (strstr(e.msg, path))
            cli_error("%s", e.msg);
        else
            cli_error("cannot load model '%s': %s", path, e.msg);
        return NULL;
    }
    prefault(m);
    return m;
}
