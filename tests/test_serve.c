/* test_serve.c — llm170d + the real llm170-worker on stories260K, through
 * the client library: greedy text equal to llama.cpp's goldens, concurrent
 * requests equal to sequential ones, tokenize, chat messages, cancel, worker
 * SIGKILL mid-stream (error within 2 s, restart, next request succeeds),
 * READY=1 on a fake NOTIFY_SOCKET only once the model is loaded, then
 * WATCHDOG=1. SKIPs without ../shared/data. Every wait is bounded. */
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../proto/client.h"
#include "check.h"
#include "proc_util.h"

static char tmpdir[256], sockurl[400], daemon_bin[1024], worker_bin[1024], model[4200], notify_path[400];
static pid_t g_daemon;
static struct pc_client *g_c;
static json_t *g_golden;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A client once the daemon reports ready; with not_pid > 0, only once its
 * first worker is a process other than not_pid (a restart the daemon may not
 * have noticed yet must not read as ready). */
static struct pc_client *wait_ready_not(int timeout_ms, pid_t not_pid)
{
    struct pc_client *c = NULL;
    struct err e;
    int64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        if (!c && pc_open(&c, sockurl, 2000, 0, &e)) {
            c = NULL;
            usleep(20000);
            continue;
        }
        struct proto_status st;
        if (pc_status(c, &st, &e) == 0) {
            bool ready = st.ready && (not_pid <= 0 || (st.n_workers > 0 && st.workers[0].pid != not_pid));
            proto_status_free(&st);
            if (ready)
                return c;
        }
        usleep(20000);
    }
    pc_close(c);
    proc_log_tail(30);
    return NULL;
}

static struct pc_client *wait_ready(int timeout_ms) { return wait_ready_not(timeout_ms, 0); }

struct result {
    int32_t toks[512];
    int n;
    char text[4096];
    int finish, errc, n_prompt;
    int64_t t_end;
    int replies; /* answers to "next" that carried chunks */
};

static int run_stream(struct pc_stream *s, struct result *r, int max_ms)
{
    struct err e;
    int64_t end = now_ms() + max_ms;
    while (!pc_stream_done(s) && now_ms() < end) {
        struct proto_chunk *ch;
        size_t n;
        if (pc_next(s, 500, &ch, &n, &e))
            return -1;
        r->replies += n > 0;
        for (size_t i = 0; i < n; i++) {
            if (ch[i].token >= 0 && r->n < 512)
                r->toks[r->n++] = ch[i].token;
            if (ch[i].text)
                strncat(r->text, ch[i].text, sizeof r->text - strlen(r->text) - 1);
            if (ch[i].finish) {
                r->finish = ch[i].finish;
                r->errc = ch[i].errc;
                r->n_prompt = ch[i].n_prompt;
                r->t_end = now_ms();
            }
        }
        proto_chunks_free(ch, n);
    }
    return 0;
}

static int generate(struct pc_client *c, const int32_t *toks, size_t n, const char *prompt, int max_tokens,
                    struct result *r)
{
    memset(r, 0, sizeof *r);
    struct proto_gen g;
    proto_gen_init(&g);
    g.tokens = (int32_t *)toks;
    g.n_tokens = n;
    g.prompt = (char *)prompt;
    g.max_tokens = max_tokens;
    g.temperature = 0;
    g.set |= PG_MAX_TOKENS | PG_TEMPERATURE;
    struct pc_stream *s;
    struct err e;
    int rc = pc_generate(c, &g, &s, &e);
    if (rc) {
        printf("# generate: %s\n", e.msg);
        return rc;
    }
    rc = run_stream(s, r, 20000);
    pc_stream_free(s);
    return rc;
}

static int golden_prompt(int i, int32_t *ids, int cap, const char **text)
{
    json_t *cs = json_array_get(json_object_get(g_golden, "cases"), (size_t)i);
    json_t *p = json_object_get(cs, "prompt");
    if (text)
        *text = json_string_value(json_object_get(cs, "prompt_text"));
    int n = 0;
    for (size_t k = 0; k < json_array_size(p) && n < cap; k++)
        ids[n++] = (int32_t)json_integer_value(json_array_get(p, k));
    return n;
}

/* comparable greedy steps of golden case i: up to the first near-tie */
static int golden_len(int i, int cap)
{
    json_t *cs = json_array_get(json_object_get(g_golden, "cases"), (size_t)i);
    json_t *t1 = json_object_get(cs, "top1_kv_f16"), *gp = json_object_get(cs, "gap_kv_f16");
    int k = 0;
    while (k < cap && k < (int)json_array_size(gp)) {
        double top1 = json_number_value(json_array_get(t1, (size_t)k)), gap = json_number_value(json_array_get(gp, (size_t)k));
        k++;
        if (gap / (fabs(top1) > 1 ? fabs(top1) : 1) < 1e-2)
            break;
    }
    return k;
}

static bool golden_match(int i, const struct result *r, int upto)
{
    json_t *ids = json_object_get(json_array_get(json_object_get(g_golden, "cases"), (size_t)i), "ids_kv_f16");
    for (int k = 0; k < upto; k++)
        if (k >= r->n || r->toks[k] != (int32_t)json_integer_value(json_array_get(ids, (size_t)k)))
            return false;
    return true;
}

/* llm170d on socket url with the real worker, the test model, a context of
 * 256, the flags in extra and the environment entries in env (both
 * NULL-terminated, env may be NULL). */
static pid_t spawn_daemon(const char *url, const char *const *extra, const char *const *env)
{
    const char *argv[] = {daemon_bin, "--socket", url, "--model", model, "--worker", worker_bin, "--ctx", "256", NULL};
    return proc_spawn(argv, extra, env);
}

static int notify_fd = -1;

static void start(void)
{
    /* a fake systemd: our own datagram socket */
    snprintf(notify_path, sizeof notify_path, "%s/notify.sock", tmpdir);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(notify_path) < sizeof sa.sun_path)
        memcpy(sa.sun_path, notify_path, strlen(notify_path) + 1);
    if (bind(notify_fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        perror("bind");
    struct timeval tv = {0, 100000};
    setsockopt(notify_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static char notify_env[500];
    snprintf(notify_env, sizeof notify_env, "NOTIFY_SOCKET=%s", notify_path);
    const char *env[] = {notify_env, "WATCHDOG_USEC=300000", NULL};
    const char *extra[] = {"--devices", "cpu", "--slots", "8", "--threads", "2", "--ping-interval-ms", "200", NULL};
    g_daemon = spawn_daemon(sockurl, extra, env);
}

static void notify_ready_then_watchdog(void)
{
    if (!g_golden)
        SKIP("stories260K.gguf or tests/golden absent");
    start();
    int64_t t0 = now_ms(), t_ready = 0;
    int wd_after = 0;
    bool worker_ready_at_ready = false;
    while (now_ms() - t0 < 20000 && wd_after < 2) {
        char buf[1024];
        ssize_t n = recv(notify_fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = 0;
        if (!t_ready && strstr(buf, "READY=1")) {
            t_ready = now_ms();
            struct pc_client *c;
            struct err e;
            if (pc_open(&c, sockurl, 2000, 0, &e) == 0) {
                struct proto_status st;
                if (pc_status(c, &st, &e) == 0) {
                    /* the model is loaded: the worker said "ready" with its model facts */
                    worker_ready_at_ready = st.ready && st.n_workers == 1 && st.workers[0].n_vocab == 512 &&
                                            st.workers[0].pid > 0 && !strcmp(st.workers[0].state, "ready");
                    proto_status_free(&st);
                }
                pc_close(c);
            }
        }
        if (t_ready && strstr(buf, "WATCHDOG=1"))
            wd_after++;
    }
    /* stop listening: a fake systemd that no longer reads would block sd_notify */
    close(notify_fd);
    unlink(notify_path);
    CHECK(t_ready > 0, "READY=1 received");
    CHECK(worker_ready_at_ready, "at READY=1 the worker has loaded the model (status: ready, n_vocab 512)");
    CHECK(wd_after >= 2, "WATCHDOG=1 after READY (%d)", wd_after);
    g_c = wait_ready(10000);
    CHECK(g_c != NULL, "client connects");
}

static void greedy_equals_golden(void)
{
    if (!g_c)
        SKIP("daemon not running");
    int cases = 0, tokens = 0;
    for (int i = 0; i < 10; i++) {
        int32_t ids[64];
        int n = golden_prompt(i, ids, 64, NULL);
        int upto = golden_len(i, 32);
        struct result r;
        CHECK(generate(g_c, ids, (size_t)n, NULL, 32, &r) == 0, "case %d", i);
        CHECK_EQ_INT(r.finish, PF_LENGTH);
        CHECK_EQ_INT(r.n, 32);
        bool ok = golden_match(i, &r, upto);
        CHECK(ok, "case %d: greedy ids differ from llama.cpp within the first %d", i, upto);
        cases += ok;
        tokens += ok ? upto : 0;
    }
    printf("# %d/10 prompts, %d tokens equal to llama.cpp through daemon + worker\n", cases, tokens);
    /* text prompt: the worker tokenizes it as llama.cpp does */
    const char *text;
    int32_t ids[64];
    int n = golden_prompt(0, ids, 64, &text);
    struct result a, b;
    CHECK(generate(g_c, NULL, 0, text, 16, &a) == 0, "text prompt");
    CHECK_EQ_INT(a.n_prompt, n);
    CHECK(golden_match(0, &a, golden_len(0, 16)), "text prompt gives the golden ids");
    int32_t *tk;
    size_t ntk;
    struct err e;
    CHECK(pc_tokenize(g_c, NULL, text, true, true, &tk, &ntk, &e) == 0, "tokenize: %s", e.msg);
    CHECK(ntk == (size_t)n && !memcmp(tk, ids, ntk * sizeof *tk), "tokenize equals the golden prompt ids");
    char *dt;
    CHECK(pc_detokenize(g_c, NULL, tk, ntk, &dt, &e) == 0 && strstr(dt, text), "detokenize: '%s'", dt);
    free(dt);
    free(tk);
    (void)b;
}

struct par {
    int i;
    struct result r;
};

static void *par_main(void *arg)
{
    struct par *p = arg;
    int32_t ids[64];
    int n = golden_prompt(p->i % 10, ids, 64, NULL);
    generate(g_c, ids, (size_t)n, NULL, 24, &p->r);
    return NULL;
}

static void concurrent_equal_sequential(void)
{
    if (!g_c)
        SKIP("daemon not running");
    static struct par seq[10], par[16];
    for (int i = 0; i < 10; i++) {
        seq[i].i = i;
        par_main(&seq[i]);
    }
    pthread_t t[16];
    for (int i = 0; i < 16; i++) {
        par[i].i = i;
        pthread_create(&t[i], NULL, par_main, &par[i]);
    }
    int same = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        struct result *a = &par[i].r, *b = &seq[i % 10].r;
        bool eq = a->finish == PF_LENGTH && a->n == b->n && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n) &&
                  !strcmp(a->text, b->text);
        CHECK(eq, "request %d: concurrent output differs", i);
        same += eq;
    }
    printf("# %d/16 concurrent requests (8 slots + queue) equal to their sequential runs\n", same);
}

static void chat_and_cancel(void)
{
    if (!g_c)
        SKIP("daemon not running");
    struct proto_gen g;
    proto_gen_init(&g);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Tell me a story.");
    g.messages = msgs;
    g.max_tokens = 8;
    g.set |= PG_MAX_TOKENS;
    g.seed = 42;
    g.set |= PG_SEED;
    struct pc_stream *s;
    struct err e;
    CHECK(pc_generate(g_c, &g, &s, &e) == 0, "chat: %s", e.msg);
    struct result r = {0};
    if (s) {
        run_stream(s, &r, 10000);
        pc_stream_free(s);
        CHECK(r.finish == PF_LENGTH || r.finish == PF_STOP, "chat finished (%d)", r.finish);
        CHECK(r.n_prompt > 5, "template applied (%d prompt tokens)", r.n_prompt);
    }
    json_decref(msgs);
    /* the full OpenAI messages (extra fields kept), tools and template kwargs, as msgpack structures */
    proto_gen_init(&g);
    msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                      "{\"role\":\"user\",\"content\":\"Tell me a story.\",\"name\":\"sam\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]", 0, NULL);
    json_t *kwargs = json_loads("{\"enable_thinking\":false}", 0, NULL), *bad_kwargs = json_loads("[1]", 0, NULL);
    json_t *bad_msgs = json_loads("[{\"role\":1,\"content\":\"x\"}]", 0, NULL);
    g.messages = msgs;
    g.tools = tools;
    g.template_kwargs = kwargs;
    g.max_tokens = 4;
    g.set |= PG_MAX_TOKENS;
    CHECK(pc_generate(g_c, &g, &s, &e) == 0, "messages with every field: %s", e.msg);
    if (s) {
        memset(&r, 0, sizeof r);
        run_stream(s, &r, 10000);
        pc_stream_free(s);
        CHECK(r.finish == PF_LENGTH || r.finish == PF_STOP, "messages finished (%d)", r.finish);
        CHECK(r.n_prompt > 10, "system + user turns rendered (%d prompt tokens)", r.n_prompt);
    }
    /* what the template cannot take is a 400 naming the field */
    g.messages = bad_msgs;
    int brc = pc_generate(g_c, &g, &s, &e);
    CHECK(brc == ERR_INVALID && pc_http_status(brc) == 400 && strstr(e.msg, "role"), "a role that is not a string: "
          "%d %s", brc, e.msg);
    g.messages = msgs;
    g.template_kwargs = bad_kwargs;
    brc = pc_generate(g_c, &g, &s, &e);
    CHECK(brc != 0 && pc_http_status(brc) == 400 && strstr(e.msg, "template_kwargs"), "kwargs not an object: %d %s",
          brc, e.msg);
    json_decref(msgs);
    json_decref(tools);
    json_decref(kwargs);
    json_decref(bad_kwargs);
    json_decref(bad_msgs);
    /* cancel a long request: it ends with "cancel" */
    proto_gen_init(&g);
    g.prompt = "Once upon a time";
    g.ignore_eos = true;
    g.max_tokens = 100000; /* stops at the 256 context otherwise */
    g.set |= PG_MAX_TOKENS;
    CHECK(pc_generate(g_c, &g, &s, &e) == 0, "long: %s", e.msg);
    if (s) {
        struct proto_chunk *ch;
        size_t n;
        memset(&r, 0, sizeof r);
        pc_next(s, 2000, &ch, &n, &e);
        /* the worker batches a stream's chunks (flush_ms): on a fast step loop the whole 256-position
         * run, finish included, can come in this first read */
        for (size_t i = 0; i < n; i++)
            if (ch[i].finish)
                r.finish = ch[i].finish;
        proto_chunks_free(ch, n);
        CHECK(pc_cancel(s, &e) == 0, "cancel");
        if (!r.finish)
            run_stream(s, &r, 5000);
        CHECK(r.finish == PF_CANCEL || r.finish == PF_LENGTH, "canceled (%d)", r.finish);
        pc_stream_free(s);
    }
    /* prompt longer than the context is refused up front */
    static int32_t big[400];
    for (int i = 0; i < 400; i++)
        big[i] = 300;
    proto_gen_init(&g);
    g.tokens = big;
    g.n_tokens = 400;
    int rc = pc_generate(g_c, &g, &s, &e);
    CHECK(rc == ERR_RANGE && pc_http_status(rc) == 400, "too long: %d %s", rc, e.msg);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* A 4 MB prompt (text, and as a chat message) for a 256-token context is
 * refused from its byte length, before tokenizing it (tokenizing took the
 * worker ~1 s and left it megabytes larger): the same "too long" error
 * (400), the worker no larger afterwards, a stream running meanwhile
 * unaffected. */
static void huge_prompt_refused_untokenized(void)
{
    if (!g_c)
        SKIP("daemon not running");
    struct proto_status st;
    struct err e;
    pid_t wpid = 0;
    if (pc_status(g_c, &st, &e) == 0) {
        wpid = st.n_workers ? st.workers[0].pid : 0;
        proto_status_free(&st);
    }
    int32_t ids[64];
    int np = golden_prompt(0, ids, 64, NULL);
    struct result ref, r = {0};
    CHECK(generate(g_c, ids, (size_t)np, NULL, 48, &ref) == 0 && ref.finish == PF_LENGTH, "reference stream");
    long rss0 = rss_kb(wpid);
    struct proto_gen g;
    proto_gen_init(&g);
    g.tokens = ids;
    g.n_tokens = (size_t)np;
    g.max_tokens = 48;
    g.temperature = 0;
    g.set |= PG_MAX_TOKENS | PG_TEMPERATURE;
    struct pc_stream *a = NULL, *s = NULL;
    CHECK(pc_generate(g_c, &g, &a, &e) == 0, "stream A: %s", e.msg);
    const size_t big = 4u << 20;
    char *text = malloc(big + 1);
    for (size_t i = 0; text && i < big; i++)
        text[i] = "Once upon a time. "[i % 18];
    if (text)
        text[big] = 0;
    proto_gen_init(&g);
    g.prompt = text;
    int rc = pc_generate(g_c, &g, &s, &e);
    CHECK(rc == ERR_RANGE && pc_http_status(rc) == 400 && strstr(e.msg, "context"), "4 MB prompt: %d %s", rc, e.msg);
    /* "prompt of at least N tokens (B bytes)": counted from the bytes, not tokenized */
    CHECK(strstr(e.msg, "bytes)") != NULL, "refused from its length, not its token count: %s", e.msg);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
    proto_gen_init(&g);
    g.messages = msgs;
    rc = pc_generate(g_c, &g, &s, &e);
    CHECK(rc == ERR_RANGE && strstr(e.msg, "bytes)"), "4 MB chat message: %d %s", rc, e.msg);
    json_decref(msgs);
    free(text);
    if (a) {
        run_stream(a, &r, 10000);
        pc_stream_free(a);
    }
    CHECK(r.finish == PF_LENGTH && r.n == ref.n && !memcmp(r.toks, ref.toks, sizeof(int32_t) * (size_t)ref.n),
          "stream A unaffected (finish %d, %d tokens)", r.finish, r.n);
    long rss1 = rss_kb(wpid);
    printf("# worker RSS %ld kB before the 4 MB prompts, %ld kB after\n", rss0, rss1);
#ifdef __SANITIZE_ADDRESS__
    /* ASan's allocator keeps freed memory in quarantine: RSS says nothing there */
    printf("# RSS not checked under AddressSanitizer\n");
#else
    CHECK(rss0 > 0 && rss1 - rss0 < 2048, "worker RSS grew by %ld kB", rss1 - rss0);
#endif
}

/* A vocabulary whose longest token is 48 bytes (Llama 2's) bounds a prompt
 * of B bytes only at B / 48 tokens: beyond 16 bytes a position of the
 * context the worker refuses a prompt without tokenizing it, with the same
 * "too long" error (400). Llama 2's tiny random model, a second daemon. */
static void prompt_bytes_capped(void)
{
    const char *sh = check_shared_dir();
    char m2[4300], url[460];
    snprintf(m2, sizeof m2, "%s/models/untrained/llama-2-tiny-random.gguf", sh ? sh : "../shared/data");
    if (!sh || access(m2, R_OK) != 0 || access(daemon_bin, X_OK) != 0)
        SKIP("llama-2-tiny-random.gguf or the programs absent");
    snprintf(url, sizeof url, "ipc://%s/cap.sock", tmpdir);
    const char *argv[] = {daemon_bin, "--socket", url, "--model", m2, "--worker", worker_bin, "--ctx", "256",
                          "--devices", "cpu", "--slots", "2", "--threads", "1", NULL};
    pid_t d = proc_spawn(argv, NULL, NULL);
    struct pc_client *c = NULL;
    struct err e;
    int64_t end = now_ms() + 20000;
    bool ready = false;
    while (!ready && now_ms() < end) {
        struct proto_status st;
        if (!c && pc_open(&c, url, 2000, 0, &e))
            c = NULL;
        else if (pc_status(c, &st, &e) == 0) {
            ready = st.ready;
            proto_status_free(&st);
        }
        if (!ready)
            usleep(20000);
    }
    CHECK(ready, "daemon with llama-2-tiny-random ready");
    if (ready) {
        /* 256 · 16 + 18 bytes: about 1000 tokens, but only ≥ 86 by the 48-byte bound */
        char text[256 * 16 + 19];
        size_t n = 256 * 16 + 18;
        for (size_t i = 0; i < n; i++)
            text[i] = "Once upon a time. "[i % 18];
        text[n] = 0;
        struct proto_gen g;
        proto_gen_init(&g);
        g.prompt = text;
        struct pc_stream *s = NULL;
        int rc = pc_generate(c, &g, &s, &e);
        CHECK(rc == ERR_RANGE && pc_http_status(rc) == 400 && strstr(e.msg, "context"), "4 KB prompt: %d %s", rc,
              e.msg);
        CHECK(strstr(e.msg, "bytes a position") != NULL, "refused from its byte length: %s", e.msg);
        text[200] = 0; /* a short one is served */
        struct result r;
        CHECK(generate(c, NULL, 0, text, 2, &r) == 0 && r.finish == PF_LENGTH, "200-byte prompt served (%d)",
              r.finish);
    }
    pc_close(c);
    kill(d, SIGTERM);
    int st = -1;
    end = now_ms() + 10000;
    while (now_ms() < end && waitpid(d, &st, WNOHANG) != d)
        usleep(20000);
    if (!WIFEXITED(st) && !WIFSIGNALED(st)) {
        kill(d, SIGKILL);
        waitpid(d, &st, 0);
    }
}

static void worker_sigkill(void)
{
    if (!g_c)
        SKIP("daemon not running");
    struct proto_status st;
    struct err e;
    pc_status(g_c, &st, &e);
    pid_t wpid = st.n_workers ? st.workers[0].pid : 0;
    proto_status_free(&st);
    struct proto_gen g;
    proto_gen_init(&g);
    g.prompt = "Once upon a time";
    g.ignore_eos = true;
    struct pc_stream *s;
    CHECK(wpid > 0, "the daemon's status names the worker's pid (%d)", (int)wpid);
    CHECK(pc_generate(g_c, &g, &s, &e) == 0, "generate: %s", e.msg);
    if (!s || wpid <= 0)
        return;
    struct proto_chunk *ch;
    size_t n;
    pc_next(s, 2000, &ch, &n, &e);
    proto_chunks_free(ch, n);
    kill(wpid, SIGKILL);
    int64_t t_kill = now_ms();
    struct result r = {0};
    run_stream(s, &r, 5000);
    pc_stream_free(s);
    /* a 256-position context ends a healthy stream quickly too: accept only an error here */
    printf("# SIGKILL → finish '%s' after %lld ms\n", proto_finish_name(r.finish), (long long)(r.t_end - t_kill));
    if (r.finish == PF_ERROR) {
        CHECK_EQ_INT(r.errc, PE_INTERNAL);
        CHECK(r.t_end - t_kill < 2000, "error within 2 s (%lld ms)", (long long)(r.t_end - t_kill));
    } else {
        CHECK(r.finish == PF_LENGTH && r.t_end <= t_kill + 500, "stream had already ended (%d)", r.finish);
    }
    pc_close(g_c);
    g_c = wait_ready_not(20000, wpid);
    CHECK(g_c != NULL, "worker restarted and ready");
    if (g_c) {
        pc_status(g_c, &st, &e);
        CHECK(st.n_workers == 1 && st.workers[0].restarts == 1 && st.workers[0].pid != wpid, "restarted once");
        proto_status_free(&st);
        int32_t ids[64];
        int np = golden_prompt(2, ids, 64, NULL);
        CHECK(generate(g_c, ids, (size_t)np, NULL, 16, &r) == 0 && r.finish == PF_LENGTH, "next request works");
        CHECK(golden_match(2, &r, golden_len(2, 16)), "and is still right");
    }
}


/* --flush-ms: a worker holds the tokens of the steps that follow each other
 * and sends them together, but the first token after a quiet spell and the
 * rest when the scheduler runs dry go out at once. With a flush interval far
 * longer than the whole generation, a 200-token greedy stream leaves the
 * worker in two messages (first token; the rest with the final chunk), so
 * the client's "next" gets it in at most three answers (one step a message
 * it would be dozens on most machines), and the tokens are the golden ones. */
static void flush_holds_tokens(void)
{
    if (!g_golden)
        SKIP("stories260K.gguf or tests/golden absent");
    char url[460];
    snprintf(url, sizeof url, "ipc://%s/flush.sock", tmpdir);
    const char *extra[] = {"--devices", "cpu", "--slots", "2", "--threads", "1", "--flush-ms", "1000", NULL};
    pid_t d = spawn_daemon(url, extra, NULL);
    struct pc_client *c = NULL;
    struct err e;
    int64_t end = now_ms() + 20000;
    while (!c && now_ms() < end) {
        struct proto_status st;
        if (pc_open(&c, url, 2000, 0, &e)) {
            c = NULL;
        } else if (pc_status(c, &st, &e) == 0 && st.ready) {
            proto_status_free(&st);
            break;
        } else {
            proto_status_free(&st);
            pc_close(c);
            c = NULL;
        }
        usleep(20000);
    }
    CHECK(c != NULL, "daemon with --flush-ms 1000 ready");
    if (c) {
        int32_t ids[64];
        int n = golden_prompt(1, ids, 64, NULL);
        struct result r;
        int64_t t0 = now_ms();
        CHECK(generate(c, ids, (size_t)n, NULL, 200, &r) == 0, "generate");
        CHECK(r.finish == PF_LENGTH && r.n == 200, "200 tokens, finish 'length' (%d, %d)", r.n, r.finish);
        CHECK(golden_match(1, &r, golden_len(1, 32)), "greedy ids equal llama.cpp's");
        CHECK(r.replies >= 1 && r.replies <= 3, "the tokens came in %d answers (at most 3)", r.replies);
        printf("# 200 tokens in %d answers, %lld ms\n", r.replies, (long long)(now_ms() - t0));
        pc_close(c);
    }
    kill(d, SIGTERM);
    int st = 0;
    end = now_ms() + 10000;
    while (now_ms() < end && waitpid(d, &st, WNOHANG) != d)
        usleep(20000);
    if (now_ms() >= end) {
        kill(d, SIGKILL);
        waitpid(d, &st, 0);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stops cleanly (%d)", st);
}

static void drain_and_stop(void)
{
    if (!g_daemon)
        SKIP("daemon not started");
    pc_close(g_c);
    g_c = NULL;
    kill(g_daemon, SIGTERM);
    int st = -1;
    int64_t end = now_ms() + 10000;
    while (now_ms() < end && waitpid(g_daemon, &st, WNOHANG) != g_daemon)
        usleep(20000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "llm170d exits 0 on SIGTERM (status %d)", st);
    if (!WIFEXITED(st) && !WIFSIGNALED(st)) {
        kill(g_daemon, SIGKILL);
        waitpid(g_daemon, &st, 0);
    }
    g_daemon = 0;
}

/* A GPU device whose backend cannot run here fails for good (no restart
 * loop) while the CPU worker serves; with a usable GPU both serve. */
static void unusable_gpu_device(void)
{
    if (!g_golden)
        SKIP("stories260K.gguf or tests/golden absent");
    char url2[450];
    snprintf(url2, sizeof url2, "ipc://%s/gpu.sock", tmpdir);
    const char *extra[] = {"--devices", "cpu,0", "--threads", "2", NULL};
    pid_t d = spawn_daemon(url2, extra, NULL);
    struct pc_client *c = NULL;
    struct err e;
    bool settled = false;
    int64_t end = now_ms() + 15000;
    while (now_ms() < end && !settled) {
        usleep(50000);
        if (!c && pc_open(&c, url2, 2000, 0, &e)) {
            c = NULL;
            continue;
        }
        struct proto_status st;
        if (pc_status(c, &st, &e))
            continue;
        settled = st.ready && st.n_workers == 2 && !strcmp(st.workers[0].state, "ready") &&
                  (!strcmp(st.workers[1].state, "failed") || !strcmp(st.workers[1].state, "ready"));
        if (settled)
            printf("# device 0 (%s): %s, %d restarts\n", st.workers[1].backend, st.workers[1].state,
                   st.workers[1].restarts);
        if (settled)
            CHECK_EQ_INT(st.workers[1].restarts, 0);
        proto_status_free(&st);
    }
    CHECK(settled, "cpu worker ready, GPU worker ready or failed for good");
    if (c) {
        int32_t ids[64];
        int n = golden_prompt(1, ids, 64, NULL);
        struct result r;
        CHECK(generate(c, ids, (size_t)n, NULL, 8, &r) == 0 && r.finish == PF_LENGTH, "serves");
        pc_close(c);
    }
    kill(d, SIGTERM);
    int st = -1;
    end = now_ms() + 10000;
    while (now_ms() < end && waitpid(d, &st, WNOHANG) != d)
        usleep(20000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stops cleanly (%d)", st);
    if (!WIFEXITED(st)) {
        kill(d, SIGKILL);
        waitpid(d, NULL, 0);
    }
}

int main(void)
{
    const char *bin = getenv("LLM170_BIN");
    snprintf(daemon_bin, sizeof daemon_bin, "%s/llm170d", bin ? bin : "bin");
    snprintf(worker_bin, sizeof worker_bin, "%s/llm170-worker", bin ? bin : "bin");
    const char *shared = check_shared_dir();
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", shared ? shared : "../shared/data");
    json_error_t je;
    if (shared && access(model, R_OK) == 0 && access(daemon_bin, X_OK) == 0 && access(worker_bin, X_OK) == 0)
        g_golden = json_load_file("tests/golden/greedy_stories260K.json", 0, &je);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llm170-test-serve.XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    snprintf(sockurl, sizeof sockurl, "ipc://%s/d.sock", tmpdir);
    char child_log[300];
    snprintf(child_log, sizeof child_log, "%s/children.log", tmpdir);
    setenv("TEST_CHILD_LOG", child_log, 0);
    signal(SIGPIPE, SIG_IGN);
    RUN(notify_ready_then_watchdog);
    RUN(greedy_equals_golden);
    RUN(concurrent_equal_sequential);
    RUN(chat_and_cancel);
    RUN(huge_prompt_refused_untokenized);
    RUN(prompt_bytes_capped);
    RUN(worker_sigkill);
    RUN(flush_holds_tokens);
    RUN(drain_and_stop);
    RUN(unusable_gpu_device);
    if (g_daemon) {
        kill(g_daemon, SIGKILL);
        waitpid(g_daemon, NULL, 0);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    json_decref(g_golden);
    CHECK_EXIT();
}
