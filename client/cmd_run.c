/* cmd_run.c — `llm170 run` (one completion) and `llm170 chat` (interactive)
 * through the daemon, streaming text to the terminal as it is generated.
 * Ctrl-C cancels the request in flight (chat: the reply, then Ctrl-C again
 * or EOF to leave). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../proto/client.h"
#include "cli.h"


static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) { (void)sig; g_interrupt++; }

struct opts {
    const char *url;
    const char *config; /* --config: where the daemon's [daemon] socket is read (when no --socket) */
    char url_buf[512];
    const char *system;
    struct proto_gen g;
    char *stop[PROTO_MAX_STOP];
    bool verbose;
};

static void usage_common(FILE *f)
{
    fprintf(f, "  --model NAME       model served by the daemon (default: any)\n"
               "  --socket URL       the daemon's socket (default: the config's [daemon] socket, else\n"
               "                     $LLM170_SOCKET, else the user or system socket)\n"
               "  --config F         the config file to take the socket from (default: llm170d's)\n"
               "  --max-tokens N     stop after N tokens (-n N)\n"
               "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S\n"
               "  --stop TEXT        stop string (repeatable)\n"
               "  --verbose          print token counts to stderr at the end\n");
}

static bool num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* One option at argv[*i]; 1 = consumed, 0 = not an option of ours, -1 = bad value. */
static int parse_opt(struct opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    static const struct { const char *name; uint32_t bit; double lo, hi; } nums[] = {
        {"--max-tokens", PG_MAX_TOKENS, -1, 1e9}, {"-n", PG_MAX_TOKENS, -1, 1e9},
        {"--temp", PG_TEMPERATURE, 0, 100}, {"--top-k", PG_TOP_K, 0, 1e9}, {"--top-p", PG_TOP_P, 0, 1},
        {"--min-p", PG_MIN_P, 0, 1}, {"--repeat-penalty", PG_REPEAT_PENALTY, 0, 100},
        {"--seed", PG_SEED, -1, 4294967295.0},
    };
    bool has_val = *i + 1 < argc;
    for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
        if (strcmp(a, nums[k].name))
            continue;
        double v;
        if (!has_val || !num(argv[*i + 1], nums[k].lo, nums[k].hi, &v)) {
            fprintf(stderr, "llm170: %s needs a number in [%g, %g]\n", a, nums[k].lo, nums[k].hi);
            return -1;
        }
        (*i)++;
        o->g.set |= nums[k].bit;
        switch (nums[k].bit) {
        case PG_MAX_TOKENS: o->g.max_tokens = (int32_t)v; break;
        case PG_TEMPERATURE: o->g.temperature = (float)v; break;
        case PG_TOP_K: o->g.top_k = (int32_t)v; break;
        case PG_TOP_P: o->g.top_p = (float)v; break;
        case PG_MIN_P: o->g.min_p = (float)v; break;
        case PG_REPEAT_PENALTY: o->g.repeat_penalty = (float)v; break;
        case PG_SEED: o->g.seed = v < 0 ? 0xFFFFFFFFu : (uint32_t)v; break;
        }
        return 1;
    }
    const char **strs[] = {&o->url, (const char **)&o->g.model, &o->system, &o->config};
    const char *snames[] = {"--socket", "--model", "--system", "--config"};
    for (size_t k = 0; k < 4; k++) {
        if (strcmp(a, snames[k]))
            continue;
        if (!has_val) {
            fprintf(stderr, "llm170: %s needs a value\n", a);
            return -1;
        }
        *strs[k] = argv[++(*i)];
        return 1;
    }
    if (!strcmp(a, "--stop")) {
        if (!has_val || o->g.n_stop >= PROTO_MAX_STOP) {
            fprintf(stderr, "llm170: --stop needs a value (at most %d)\n", PROTO_MAX_STOP);
            return -1;
        }
        o->stop[o->g.n_stop++] = argv[++(*i)];
        o->g.stop = o->stop;
        return 1;
    }
    if (!strcmp(a, "--verbose")) {
        o->verbose = true;
        return 1;
    }
    return 0;
}

/* Stream one request to stdout; the reply text is appended to *acc when given.
 * Returns 0, 1 on errors, 130 when interrupted. */
static int stream(struct pc_client *c, struct opts *o, char **acc, bool verbose)
{
    struct pc_stream *s;
    struct err e;
    if (pc_generate(c, &o->g, &s, &e)) {
        fprintf(stderr, "llm170: %s\n", e.msg);
        return 1;
    }
    int rc = 0, interrupts = g_interrupt;
    bool canceled = false;
    size_t acc_len = acc && *acc ? strlen(*acc) : 0;
    struct proto_chunk last = {0};
    while (!pc_stream_done(s)) {
        if (g_interrupt != interrupts && !canceled) {
            pc_cancel(s, &e);
            canceled = true;
        }
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 250, &ch, &n, &e)) {
            if (e.code == ERR_IO && errno == EINTR)
                continue;
            fprintf(stderr, "\nllm170: %s\n", e.msg);
            rc = 1;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            size_t tl = ch[i].text ? strlen(ch[i].text) : 0;
            if (tl) {
                fwrite(ch[i].text, 1, tl, stdout);
                if (acc) {
                    char *na = realloc(*acc, acc_len + tl + 1);
                    if (na) {
                        memcpy(na + acc_len, ch[i].text, tl);
                        acc_len += tl;
                        na[acc_len] = 0;
                        *acc = na;
                    }
                }
            }
            if (ch[i].finish) {
                last = ch[i];
                last.text = last.message = NULL;
                last.top = NULL;
                last.n_top = 0;
                if (ch[i].finish == PF_ERROR) {
                    fprintf(stderr, "\nllm170: %s\n", ch[i].message ? ch[i].message : "generation failed");
                    rc = 1;
                }
            }
        }
        fflush(stdout);
        proto_chunks_free(ch, n);
    }
    pc_stream_free(s);
    if (isatty(STDOUT_FILENO) || acc)
        putchar('\n');
    fflush(stdout);
    if (verbose && last.finish)
        fprintf(stderr, "llm170: %s; %d prompt tokens (%d cached), %d generated\n", proto_finish_name(last.finish),
                last.n_prompt, last.n_cached, last.n_gen);
    if (canceled && !rc)
        rc = 130;
    return rc;
}

/* All of stdin as a malloc'ed string ("" when empty, NULL when out of memory). */
static char *read_stdin(void)
{
    size_t n = 0;
    char *text = calloc(1, 1), buf[4096];
    size_t k;
    while (text && (k = fread(buf, 1, sizeof buf, stdin)) > 0) {
        char *nb = realloc(text, n + k + 1);
        if (!nb) {
            free(text);
            return NULL;
        }
        text = nb;
        memcpy(text + n, buf, k);
        n += k;
        text[n] = 0;
    }
    while (text && n && (text[n - 1] == '\n' || text[n - 1] == '\r')) /* `echo … |` adds one */
        text[--n] = 0;
    return text;
}

static void install_sigint(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: waits end early */
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Appends {"role": role, "content": text} to the messages array; nonzero when text is not UTF-8 (or out of
 * memory). */
static int turn_add(json_t *msgs, const char *role, const char *text)
{
    json_t *t = json_string(text);
    if (!t)
        return -1;
    return json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", t));
}

int cmd_run(int argc, char **argv)
{
    struct opts o = {0};
    proto_gen_init(&o.g);
    bool chat = false;
    char *prompt = NULL;
    size_t plen = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llm170 run [options] \"prompt\"   (no prompt or \"-\": read it from stdin)\n"
                   "Completion through llm170d, streamed to the terminal. Ctrl-C cancels.\n"
                   "  --chat             wrap the prompt in the model's chat template (as one user turn)\n"
                   "  --system TEXT      with --chat: a system message first\n");
            usage_common(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--chat")) {
            chat = true;
            continue;
        }
        int r = parse_opt(&o, argc, argv, &i);
        if (r < 0) {
            free(prompt);
            return 2;
        }
        if (r > 0)
            continue;
        if (argv[i][0] == '-' && argv[i][1] && strcmp(argv[i], "-")) {
            fprintf(stderr, "llm170: run: unknown option '%s' (try --help)\n", argv[i]);
            free(prompt);
            return 2;
        }
        /* words of the prompt ("-" = stdin) */
        const char *w = argv[i];
        char *stdin_text = NULL;
        if (!strcmp(w, "-")) {
            stdin_text = read_stdin();
            w = stdin_text ? stdin_text : "";
        }
        size_t wl = strlen(w);
        char *np = realloc(prompt, plen + wl + 2);
        if (!np) {
            free(stdin_text);
            free(prompt);
            fprintf(stderr, "llm170: out of memory\n");
            return 1;
        }
        prompt = np;
        if (plen)
            prompt[plen++] = ' ';
        memcpy(prompt + plen, w, wl + 1);
        plen += wl;
        free(stdin_text);
    }
    if (!prompt) /* no prompt words: read stdin */
        prompt = read_stdin();
    if (!prompt || !*prompt) {
        free(prompt);
        fprintf(stderr, "llm170: run: no prompt given (try --help)\n");
        return 2;
    }
    json_t *msgs = NULL; /* owned here: o.g borrows it */
    if (chat) {
        msgs = json_array();
        if (!msgs || (o.system && turn_add(msgs, "system", o.system)) || turn_add(msgs, "user", prompt)) {
            fprintf(stderr, "llm170: run: the prompt (or --system) is not UTF-8 text\n");
            json_decref(msgs);
            free(prompt);
            return 2;
        }
        o.g.messages = msgs;
    } else {
        o.g.prompt = prompt;
    }
    struct pc_client *c;
    struct err e;
    if (!o.url && o.config && pc_config_url(o.config, o.url_buf, sizeof o.url_buf, &e)) {
        fprintf(stderr, "llm170: %s\n", e.msg);
        json_decref(msgs);
        free(prompt);
        return 1;
    }
    if (!o.url && o.config)
        o.url = o.url_buf;
    if (pc_open(&c, o.url, 0, 0, &e)) {
        fprintf(stderr, "llm170: %s (is llm170d running? 'llm170 serve' starts one)\n", e.msg);
        json_decref(msgs);
        free(prompt);
        return 1;
    }
    install_sigint();
    int rc = stream(c, &o, NULL, o.verbose);
    pc_close(c);
    json_decref(msgs);
    free(prompt);
    return rc;
}

int cmd_chat(int argc, char **argv)
{
    struct opts o = {0};
    proto_gen_init(&o.g);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llm170 chat [options]\n"
                   "Interactive chat through llm170d with the model's chat template. One line is one\n"
                   "turn; /reset forgets the conversation; /exit or end of input leaves. Ctrl-C stops a reply.\n"
                   "  --system TEXT      system message\n");
            usage_common(stdout);
            return 0;
        }
        int r = parse_opt(&o, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 0) {
            fprintf(stderr, "llm170: chat: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    struct pc_client *c;
    struct err e;
    if (!o.url && o.config && pc_config_url(o.config, o.url_buf, sizeof o.url_buf, &e)) {
        fprintf(stderr, "llm170: %s\n", e.msg);
        return 1;
    }
    if (!o.url && o.config)
        o.url = o.url_buf;
    if (pc_open(&c, o.url, 0, 0, &e)) {
        fprintf(stderr, "llm170: %s (is llm170d running? 'llm170 serve' starts one)\n", e.msg);
        return 1;
    }
    install_sigint();
    bool tty = isatty(STDIN_FILENO);
    json_t *hist = json_array(); /* the conversation so far (o.g borrows it) */
    if (!hist || (o.system && turn_add(hist, "system", o.system))) {
        fprintf(stderr, "llm170: chat: out of memory, or --system is not UTF-8 text\n");
        json_decref(hist);
        pc_close(c);
        return 1;
    }
    const size_t n_fixed = json_array_size(hist); /* kept by /reset */
    int rc = 0;
    char line[65536];
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        g_interrupt = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (errno == EINTR && g_interrupt && !feof(stdin)) {
                clearerr(stdin);
                putchar('\n');
                break; /* Ctrl-C at the prompt leaves */
            }
            break;
        }
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = 0;
        if (!l)
            continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit"))
            break;
        if (!strcmp(line, "/reset")) {
            while (json_array_size(hist) > n_fixed)
                json_array_remove(hist, json_array_size(hist) - 1);
            continue;
        }
        if (turn_add(hist, "user", line)) {
            fprintf(stderr, "llm170: chat: that line is not UTF-8 text\n");
            if (!tty) {
                rc = 1;
                break;
            }
            continue;
        }
        o.g.messages = hist;
        char *reply = NULL;
        int r = stream(c, &o, &reply, o.verbose);
        if (r == 1) {
            free(reply);
            json_array_remove(hist, json_array_size(hist) - 1); /* the turn failed: forget it */
            if (!tty) {
                rc = 1;
                break;
            }
            continue;
        }
        /* the reply is what the worker sent: UTF-8 (invalid bytes come as U+FFFD) */
        int ar = turn_add(hist, "assistant", reply ? reply : "");
        free(reply);
        if (ar) {
            rc = 1;
            break;
        }
    }
    json_decref(hist);
    pc_close(c);
    return rc;
}
