/* test_gateway.c — the gateway's HTTP layer (gateway/http.c, oai.c,
 * metrics.c) against a fake backend: routing, request validation, OpenAI
 * error objects and statuses, JSON and SSE responses, n > 1, logprobs, stop
 * strings, API keys, body limits, invalid UTF-8, client disconnects, idle
 * connections, /metrics; the Anthropic Messages API (anthropic.c).
 *
 * The fake is a test double for the HTTP layer only: it "generates" a
 * predictable token sequence so the expected JSON can be written down here
 * from the OpenAI API's shapes (system.md, sampling.md §6). The product path
 * through llm170d is tested end to end by tests/test_openai_sdk.sh. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* embed.c's gap between a job event's bookkeeping and its pump: armed, the first event of a request to
 * reach it waits there 200 ms, so another job's event comes past it first */
static atomic_int emb_gap_armed;
static void emb_gap(void)
{
    if (atomic_exchange(&emb_gap_armed, 0))
        usleep(200000);
}
#define EMB_EVENT_GAP() emb_gap()

#include "../gateway/http.c"
#include "../gateway/metrics.c"
#include "../gateway/oai.c"
#include "../gateway/embed.c"
#include "../gateway/anthropic.c"
#include "check.h"

#include "fake_backend.h"

/* ------------------------------------------------------------ HTTP client */

static struct gw_server *srv_open, *srv_key;
static int port_open, port_key;

struct resp {
    int status;
    char *headers;
    char *body;
    size_t len;
};

static void resp_free(struct resp *r)
{
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void send_request(int fd, const char *method, const char *path, const char *extra_headers, const char *body,
                         size_t len)
{
    char head[2048];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%sContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      method, path, extra_headers ? extra_headers : "", body ? len : 0);
    send_all(fd, head, (size_t)hl);
    if (body)
        send_all(fd, body, len);
}

/* Read the whole response (the server closes: Connection: close). */
static void read_response(int fd, struct resp *r)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    buf[n] = 0;
    memset(r, 0, sizeof *r);
    char *eoh = strstr(buf, "\r\n\r\n");
    if (!eoh || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        r->body = strdup("");
        r->headers = strdup("");
        return;
    }
    r->headers = strndup(buf, (size_t)(eoh - buf));
    char *b = eoh + 4;
    size_t bl = n - (size_t)(b - buf);
    if (strcasestr(r->headers, "Transfer-Encoding: chunked")) {
        char *out = malloc(bl + 1);
        size_t o = 0;
        char *p = b;
        while (p < b + bl) {
            unsigned long sz = strtoul(p, NULL, 16);
            char *nl = strstr(p, "\r\n");
            if (!nl || sz == 0)
                break;
            p = nl + 2;
            if (p + sz > b + bl)
                sz = (unsigned long)(b + bl - p);
            memcpy(out + o, p, sz);
            o += sz;
            p += sz + 2;
        }
        out[o] = 0;
        r->body = out;
        r->len = o;
    } else {
        r->body = strndup(b, bl);
        r->len = bl;
    }
    free(buf);
}

static struct resp http(int port, const char *method, const char *path, const char *headers, const char *body)
{
    struct resp r;
    int fd = dial(port);
    if (fd < 0) {
        memset(&r, 0, sizeof r);
        r.body = strdup("");
        r.headers = strdup("");
        return r;
    }
    send_request(fd, method, path, headers, body, body ? strlen(body) : 0);
    read_response(fd, &r);
    close(fd);
    return r;
}

static json_t *body_json(const struct resp *r)
{
    return json_loadb(r->body ? r->body : "", r->len, 0, NULL);
}

/* The error object of a response: checks the shape, returns the message. */
static const char *check_error(const struct resp *r, int status, const char *type, json_t **keep)
{
    CHECK(r->status == status, "status %d, want %d (body %s)", r->status, status, r->body);
    json_t *j = body_json(r);
    *keep = j;
    json_t *err = json_object_get(j, "error");
    CHECK(json_is_object(err), "no error object in %s", r->body);
    CHECK(json_is_string(json_object_get(err, "message")), "error.message missing: %s", r->body);
    CHECK(json_is_string(json_object_get(err, "type")) &&
              !strcmp(json_string_value(json_object_get(err, "type")), type),
          "error.type in %s, want %s", r->body, type);
    CHECK(json_integer_value(json_object_get(err, "code")) == status, "error.code in %s", r->body);
    const char *m = json_string_value(json_object_get(err, "message"));
    return m ? m : "";
}

#define EXPECT_ERROR(port, path, headers, body, status, type, needle)                                   \
    do {                                                                                                \
        struct resp r_ = http((port), "POST", (path), (headers), (body));                              \
        json_t *k_ = NULL;                                                                              \
        const char *m_ = check_error(&r_, (status), (type), &k_);                                       \
        CHECK(strstr(m_, (needle)) != NULL, "message '%s' lacks '%s'", m_, (needle));                   \
        json_decref(k_);                                                                                \
        resp_free(&r_);                                                                                 \
    } while (0)

/* SSE: the JSON objects of "data: " lines; *done says whether [DONE] ended it. */
static json_t *sse_events(const char *body, bool *done)
{
    json_t *arr = json_array();
    *done = false;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            *done = end[2] == 0; /* and nothing after it */
            break;
        }
        json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
        json_array_append_new(arr, j ? j : json_null());
        p = end + 2;
    }
    return arr;
}

/* ------------------------------------------------------------ cases */

static void health_and_models(void)
{
    struct resp r = http(port_open, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"ok\""), "health: %d %s", r.status, r.body);
    resp_free(&r);
    fake_ready = false;
    r = http(port_open, "GET", "/health", NULL, NULL);
    json_t *k;
    check_error(&r, 503, "unavailable_error", &k);
    json_decref(k);
    resp_free(&r);
    /* generation without a ready worker: 503 */
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":\"x\"}", 503, "unavailable_error", "no worker");
    fake_ready = true;

    r = http(port_open, "GET", "/v1/models", NULL, NULL);
    json_t *j = body_json(&r);
    CHECK(r.status == 200, "models status %d", r.status);
    CHECK(!strcmp(json_string_value(json_object_get(j, "object")) ?: "", "list"), "models: %s", r.body);
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(m0, "id")) ?: "", "fake-model"), "models: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(m0, "object")) ?: "", "model"), "models: %s", r.body);
    json_decref(j);
    resp_free(&r);

    r = http(port_open, "GET", "/v1/models/fake-model", NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"fake-model\""), "retrieve: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_open, "GET", "/v1/models/other", NULL, NULL);
    check_error(&r, 404, "not_found_error", &k);
    json_decref(k);
    resp_free(&r);

    r = http(port_open, "GET", "/nowhere", NULL, NULL);
    check_error(&r, 404, "not_found_error", &k);
    json_decref(k);
    resp_free(&r);
    r = http(port_open, "GET", "/v1/chat/completions", NULL, NULL); /* wrong method */
    check_error(&r, 404, "not_found_error", &k);
    json_decref(k);
    resp_free(&r);
}

static void chat_non_stream(void)
{
    struct resp r = http(port_open, "POST", "/v1/chat/completions", NULL,
                         "{\"model\":\"fake-model\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                         "\"max_tokens\":3,\"temperature\":0.5,\"top_k\":7,\"user\":\"u1\",\"unknown_field\":[1]}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    CHECK(strcasestr(r.headers, "Content-Type: application/json") != NULL, "headers %s", r.headers);
    json_t *j = body_json(&r);
    CHECK(!strncmp(json_string_value(json_object_get(j, "id")) ?: "", "chatcmpl-", 9), "id in %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "object")) ?: "", "chat.completion"), "object in %s", r.body);
    CHECK(json_is_integer(json_object_get(j, "created")), "created in %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "model")) ?: "", "fake-model"), "model in %s", r.body);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c0, "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "role")) ?: "", "assistant"), "%s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")) ?: "", "w0 w1 w2 "), "%s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(c0, "finish_reason")) ?: "", "length"), "%s", r.body);
    CHECK(json_is_null(json_object_get(c0, "logprobs")), "%s", r.body);
    json_t *u = json_object_get(j, "usage");
    CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 5 &&
              json_integer_value(json_object_get(u, "completion_tokens")) == 3 &&
              json_integer_value(json_object_get(u, "total_tokens")) == 8,
          "usage in %s", r.body);
    json_decref(j);
    resp_free(&r);
    /* what reached the backend: parts joined by "\n", sampling fields marked as given */
    pthread_mutex_lock(&fake_mu);
    CHECK(!strcmp(fake_last_msgs, "system:S|user:a\nb|"), "messages '%s'", fake_last_msgs);
    CHECK((fake_last.set & (PG_TEMPERATURE | PG_TOP_K | PG_MAX_TOKENS)) == (PG_TEMPERATURE | PG_TOP_K | PG_MAX_TOKENS) &&
              !(fake_last.set & (PG_TOP_P | PG_SEED)),
          "set bits %x", fake_last.set);
    CHECK(fake_last.top_k == 7 && fabsf(fake_last.temperature - 0.5f) < 1e-6f, "params");
    pthread_mutex_unlock(&fake_mu);
}

static void chat_stream(void)
{
    struct resp r = http(port_open, "POST", "/v1/chat/completions", NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true},\"stop\":\"w2\"}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    CHECK(strcasestr(r.headers, "Content-Type: text/event-stream") != NULL, "headers %s", r.headers);
    bool done;
    json_t *ev = sse_events(r.body, &done);
    CHECK(done, "stream did not end with data: [DONE]: %s", r.body);
    size_t n = json_array_size(ev);
    CHECK(n >= 4, "only %zu events: %s", n, r.body);
    json_t *first = json_array_get(ev, 0);
    json_t *d0 = json_object_get(json_array_get(json_object_get(first, "choices"), 0), "delta");
    CHECK(!strcmp(json_string_value(json_object_get(d0, "role")) ?: "", "assistant"), "first delta: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(first, "object")) ?: "", "chat.completion.chunk"), "%s", r.body);
    char text[256] = "";
    const char *finish = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i);
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        const char *t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
        if (t)
            strncat(text, t, sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c, "finish_reason")))
            finish = json_string_value(json_object_get(c, "finish_reason"));
        if (i + 1 < n)
            CHECK(json_is_null(json_object_get(e, "usage")), "usage should be null before the last chunk: %s", r.body);
    }
    /* the stop string and what follows it never reach the client */
    CHECK(!strcmp(text, "w0 w1 "), "streamed text '%s'", text);
    CHECK(finish && !strcmp(finish, "stop"), "finish %s", finish ? finish : "(none)");
    json_t *last = json_array_get(ev, n - 1);
    CHECK(json_array_size(json_object_get(last, "choices")) == 0, "usage chunk has choices: %s", r.body);
    CHECK(json_integer_value(json_object_get(json_object_get(last, "usage"), "completion_tokens")) == 3,
          "usage chunk: %s", r.body);
    json_decref(ev);
    resp_free(&r);
}

static void completions(void)
{
    struct resp r = http(port_open, "POST", "/v1/completions", NULL,
                         "{\"prompt\":\"Once\",\"max_tokens\":5,\"stop\":[\"w3\",\"\"],\"logprobs\":2}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *j = body_json(&r);
    CHECK(!strncmp(json_string_value(json_object_get(j, "id")) ?: "", "cmpl-", 5), "%s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "object")) ?: "", "text_completion"), "%s", r.body);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(c0, "text")) ?: "", "w0 w1 w2 "), "%s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(c0, "finish_reason")) ?: "", "stop"), "%s", r.body);
    json_t *lp = json_object_get(c0, "logprobs");
    CHECK(json_array_size(json_object_get(lp, "tokens")) == 4 && json_array_size(json_object_get(lp, "token_logprobs")) == 4,
          "legacy logprobs: %s", r.body);
    CHECK(json_object_size(json_array_get(json_object_get(lp, "top_logprobs"), 0)) == 2, "top_logprobs: %s", r.body);
    CHECK(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)) == 3, "text_offset: %s", r.body);
    json_decref(j);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.n_stop == 1, "empty stop strings are dropped (%zu)", fake_last.n_stop);
    pthread_mutex_unlock(&fake_mu);

    /* token-array prompt, streamed: text_completion chunks, then [DONE] */
    r = http(port_open, "POST", "/v1/completions", NULL, "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":true}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    bool done;
    json_t *ev = sse_events(r.body, &done);
    CHECK(done, "no [DONE]: %s", r.body);
    char text[128] = "";
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *c = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(ev, i), "object")) ?: "", "text_completion"),
              "%s", r.body);
        if (json_string_value(json_object_get(c, "text")))
            strncat(text, json_string_value(json_object_get(c, "text")), sizeof text - strlen(text) - 1);
    }
    CHECK(!strcmp(text, "w0 w1 "), "text '%s'", text);
    json_decref(ev);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.n_tokens == 3 && fake_last.tokens && fake_last.tokens != NULL, "token prompt");
    pthread_mutex_unlock(&fake_mu);
}

static void n_choices_seed_logprobs(void)
{
    struct resp r = http(port_open, "POST", "/v1/chat/completions", NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"seed\":42,\"max_tokens\":2,"
                         "\"logprobs\":true,\"top_logprobs\":2}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *ch = json_object_get(j, "choices");
    CHECK(json_array_size(ch) == 2, "choices: %s", r.body);
    const char *t0 = json_string_value(json_object_get(json_object_get(json_array_get(ch, 0), "message"), "content"));
    const char *t1 = json_string_value(json_object_get(json_object_get(json_array_get(ch, 1), "message"), "content"));
    CHECK(t0 && !strcmp(t0, "s42_0 s42_1 "), "choice 0 '%s'", t0 ? t0 : "");
    CHECK(t1 && !strcmp(t1, "s43_0 s43_1 "), "choice 1 '%s'", t1 ? t1 : "");
    CHECK(json_integer_value(json_object_get(json_array_get(ch, 1), "index")) == 1, "%s", r.body);
    json_t *lc = json_object_get(json_object_get(json_array_get(ch, 0), "logprobs"), "content");
    CHECK(json_array_size(lc) == 2, "logprobs.content: %s", r.body);
    json_t *e0 = json_array_get(lc, 0);
    CHECK(fabs(json_number_value(json_object_get(e0, "logprob")) + 0.25) < 1e-6, "logprob: %s", r.body);
    CHECK(json_array_size(json_object_get(e0, "top_logprobs")) == 2, "top_logprobs: %s", r.body);
    CHECK(json_is_array(json_object_get(e0, "bytes")), "bytes: %s", r.body);
    CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")) == 4, "usage %s", r.body);
    json_decref(j);
    resp_free(&r);

    /* n = 2 streamed: both indexes appear, one [DONE] */
    r = http(port_open, "POST", "/v1/chat/completions", NULL,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"max_tokens\":2,\"stream\":true}");
    bool done;
    json_t *ev = sse_events(r.body, &done);
    int finishes[2] = {0, 0};
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *c = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
        long long idx = json_integer_value(json_object_get(c, "index"));
        if (json_is_string(json_object_get(c, "finish_reason")) && idx >= 0 && idx < 2)
            finishes[idx]++;
    }
    CHECK(done && finishes[0] == 1 && finishes[1] == 1, "n=2 stream: %s", r.body);
    json_decref(ev);
    resp_free(&r);
}

static void bad_requests(void)
{
    const char *chat = "/v1/chat/completions";
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\": [", 400, "invalid_request_error", "invalid JSON");
    EXPECT_ERROR(port_open, chat, NULL, "", 400, "invalid_request_error", "invalid JSON");
    EXPECT_ERROR(port_open, chat, NULL, "[1,2]", 400, "invalid_request_error", "must be a JSON object");
    EXPECT_ERROR(port_open, chat, NULL, "{}", 400, "invalid_request_error", "'messages' is required");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":\"hi\"}", 400, "invalid_request_error", "must be an array");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400,
                 "invalid_request_error", "'temperature' must be a number");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", 400,
                 "invalid_request_error", "'max_tokens' must be an integer");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":99}", 400,
                 "invalid_request_error", "'n' must be between 1 and 8");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", 400,
                 "invalid_request_error", "'stream' must be a boolean");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", 400,
                 "invalid_request_error", "'stop' must be a string or an array");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", 400,
                 "invalid_request_error", "requires 'logprobs': true");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":\"x\"}}",
                 400, "invalid_request_error", "logit_bias");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":7}", 400,
                 "invalid_request_error", "'model' must be a string");
    {
        /* a message's extra field nested past what the wire carries (proto.h PROTO_MAX_DEPTH): a 400 naming
         * it, before any backend sees it; one level less is served */
        char deep[512], ok[512];
        int n = 0, m = 0;
        n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"meta\":");
        m += snprintf(ok + m, sizeof ok - (size_t)m, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"meta\":");
        for (int i = 0; i < PROTO_MAX_DEPTH - 1; i++)
            deep[n++] = '[';
        for (int i = 0; i < PROTO_MAX_DEPTH - 2; i++)
            ok[m++] = '[';
        for (int i = 0; i < PROTO_MAX_DEPTH - 1; i++)
            deep[n++] = ']';
        for (int i = 0; i < PROTO_MAX_DEPTH - 2; i++)
            ok[m++] = ']';
        snprintf(deep + n, sizeof deep - (size_t)n, "}]}");
        snprintf(ok + m, sizeof ok - (size_t)m, "}]}");
        EXPECT_ERROR(port_open, chat, NULL, deep, 400, "invalid_request_error", "'messages' is nested");
        struct resp r = http(port_open, "POST", chat, NULL, ok);
        CHECK(r.status == 200, "one level less: %d %s", r.status, r.body ? r.body : "");
        resp_free(&r);
    }
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                 400, "invalid_request_error", "'image_url' is not supported");
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}", 400,
                 "invalid_request_error", "not supported");
    /* a schema outside the structured-output subset: 400 naming the keyword */
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
                 "{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}}}}",
                 400, "invalid_request_error", "'multipleOf'");
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"max_tokens\":3}", 400, "invalid_request_error",
                 "'prompt' is required");
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":[\"a\",\"b\"]}", 400, "invalid_request_error",
                 "only one prompt");
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":[1,-2]}", 400, "invalid_request_error", "token ids");
    /* invalid UTF-8 in the body (a lone continuation byte inside a JSON string) */
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"\x80\"}]}", 400,
                 "invalid_request_error", "not valid UTF-8");
    /* error param names the field */
    struct resp r = http(port_open, "POST", chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":2}");
    json_t *j = body_json(&r);
    CHECK(r.status == 400 && !strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "param")) ?: "", "top_p"),
          "param: %s", r.body);
    json_decref(j);
    resp_free(&r);
}

static void backend_errors(void)
{
    EXPECT_ERROR(port_open, "/v1/chat/completions", NULL,
                 "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404, "not_found_error",
                 "model 'nope' not found");
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":\"QUEUE_FULL\"}", 429, "rate_limit_error", "queue is full");
    /* a prompt over the context comes back asynchronously from the worker: still a 400, also for a stream */
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":\"TOO_LONG\"}", 400, "exceed_context_size_error",
                 "does not fit the context");
    EXPECT_ERROR(port_open, "/v1/completions", NULL, "{\"prompt\":\"TOO_LONG\",\"stream\":true}", 400,
                 "exceed_context_size_error", "does not fit the context");
}

/* POST /v1/embeddings over the fake backend (8-value vectors that depend on the prompt): more inputs than the
 * gateway keeps in flight, in order; float vs base64; dimensions; the refusals and the backend's errors. */
static void embeddings(void)
{
    char *b3 = gw_base64((const unsigned char *)"Man", 3), *b2 = gw_base64((const unsigned char *)"Ma", 2),
         *b1 = gw_base64((const unsigned char *)"M", 1);
    CHECK(!strcmp(b3, "TWFu") && !strcmp(b2, "TWE=") && !strcmp(b1, "TQ=="), "base64 %s %s %s", b3, b2, b1);
    free(b3);
    free(b2);
    free(b1);
    char body[4096] = "{\"input\":[";
    for (int i = 0; i < 40; i++)
        strcat(body, i ? (i % 2 ? ",\"bb\"" : ",\"a\"") : "\"a\"");
    strcat(body, "]}");
    int before = atomic_load(&fake_submitted);
    struct resp r = http(port_open, "POST", "/v1/embeddings", NULL, body);
    CHECK(r.status == 200, "status %d %s", r.status, r.body);
    CHECK_EQ_INT(atomic_load(&fake_submitted) - before, 40);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *data = json_object_get(j, "data");
    CHECK(json_is_string(json_object_get(j, "object")) && !strcmp(json_string_value(json_object_get(j, "object")), "list"),
          "object");
    CHECK_EQ_INT(json_array_size(data), 40);
    bool order = true, same = true;
    for (size_t i = 0; i < json_array_size(data); i++) {
        json_t *d = json_array_get(data, i);
        order &= json_integer_value(json_object_get(d, "index")) == (json_int_t)i &&
                 !strcmp(json_string_value(json_object_get(d, "object")), "embedding");
        same &= json_equal(json_object_get(d, "embedding"), json_object_get(json_array_get(data, i % 2), "embedding"));
    }
    CHECK(order && same, "indexes in order %d, the same input the same vector %d", order, same);
    CHECK(!json_equal(json_object_get(json_array_get(data, 0), "embedding"),
                      json_object_get(json_array_get(data, 1), "embedding")),
          "two prompts, two vectors");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 60);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 60);
    /* base64: the float values' little-endian bytes */
    json_t *fv = json_object_get(json_array_get(data, 0), "embedding");
    unsigned char le[32];
    for (size_t k = 0; k < 8 && k < json_array_size(fv); k++) {
        float f = (float)json_real_value(json_array_get(fv, k));
        uint32_t u;
        memcpy(&u, &f, 4);
        for (int b = 0; b < 4; b++)
            le[4 * k + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    char *want = gw_base64(le, sizeof le);
    struct resp r2 = http(port_open, "POST", "/v1/embeddings", NULL, "{\"input\":\"a\",\"encoding_format\":\"base64\"}");
    json_t *j2 = json_loads(r2.body, 0, NULL);
    const char *got = json_string_value(json_object_get(json_array_get(json_object_get(j2, "data"), 0), "embedding"));
    CHECK(r2.status == 200 && got && !strcmp(got, want), "base64 '%s', want '%s'", got ? got : r2.body, want);
    free(want);
    json_decref(j2);
    resp_free(&r2);
    /* dimensions: the first 4, unit length again */
    r2 = http(port_open, "POST", "/v1/embeddings", NULL, "{\"input\":\"a\",\"dimensions\":4}");
    j2 = json_loads(r2.body, 0, NULL);
    json_t *dv = json_object_get(json_array_get(json_object_get(j2, "data"), 0), "embedding");
    double ss = 0, ss4 = 0, worst = 0;
    for (size_t k = 0; k < 4; k++)
        ss4 += json_real_value(json_array_get(fv, k)) * json_real_value(json_array_get(fv, k));
    for (size_t k = 0; k < json_array_size(dv); k++) {
        double x = json_real_value(json_array_get(dv, k));
        ss += x * x;
        double d = fabs(x - json_real_value(json_array_get(fv, k)) / sqrt(ss4));
        worst = d > worst ? d : worst;
    }
    CHECK(r2.status == 200 && json_array_size(dv) == 4 && fabs(ss - 1) < 1e-6 && worst < 1e-6,
          "dimensions 4: status %d, %zu values, |v|^2 %g, off by %g", r2.status, json_array_size(dv), ss, worst);
    json_decref(j2);
    resp_free(&r2);
    json_decref(j);
    resp_free(&r);
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":\"a\",\"dimensions\":9}", 400,
                 "invalid_request_error", "larger than the model's 8");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":\"\"}", 400, "invalid_request_error", "empty string");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":[]}", 400, "invalid_request_error", "empty array");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":[1,\"a\"]}", 400, "invalid_request_error",
                 "must be a string");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":[[1],[]]}", 400, "invalid_request_error",
                 "empty token array");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":\"a\",\"encoding_format\":\"f16\"}", 400,
                 "invalid_request_error", "encoding_format");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":[\"a\",\"TOO_LONG\"]}", 400,
                 "exceed_context_size_error", "does not fit the context");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":\"QUEUE_FULL\"}", 429, "rate_limit_error",
                 "queue is full");
    EXPECT_ERROR(port_open, "/v1/embeddings", NULL, "{\"input\":\"a\",\"model\":\"nope\"}", 404, "not_found_error",
                 "model 'nope' not found");
    EXPECT_ERROR(port_key, "/v1/embeddings", NULL, "{\"input\":\"a\"}", 401, "authentication_error", "missing API key");
}

/* An embeddings request ends only when every job's event is done with it: the first of two events waits
 * 200 ms between its bookkeeping and its pump while the other comes past. The request used to end on the
 * other one, and the first then locked the freed request (a heap corruption once seen under load). */
static void embeddings_end_after_every_event(void)
{
    atomic_store(&emb_gap_armed, 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct resp r = http(port_open, "POST", "/v1/embeddings", NULL, "{\"input\":[\"a\",\"bb\"]}");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    json_t *j = json_loads(r.body, 0, NULL);
    CHECK(r.status == 200 && json_array_size(json_object_get(j, "data")) == 2, "status %d %s", r.status, r.body);
    CHECK(!atomic_load(&emb_gap_armed), "no job event reached the gap");
    CHECK(ms >= 190.0, "the response came %.0f ms after the request, while a job's event was still in the gap", ms);
    json_decref(j);
    resp_free(&r);
}

static void logit_bias_forms(void)
{
    struct resp r = http(port_open, "POST", "/v1/completions", NULL,
                         "{\"prompt\":\"x\",\"max_tokens\":1,\"logit_bias\":{\"15\":-100,\"hello\":false,\"-3\":5}}");
    CHECK(r.status == 200, "status %d %s", r.status, r.body);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(!strcmp(fake_last_bias, "15:-100,hello:-inf,"), "bias '%s'", fake_last_bias); /* negative ids dropped */
    pthread_mutex_unlock(&fake_mu);
    r = http(port_open, "POST", "/v1/completions", NULL,
             "{\"prompt\":\"x\",\"max_tokens\":1,\"logit_bias\":[[7,2.5],[\"ab\",-1]],\"seed\":-1}");
    CHECK(r.status == 200, "status %d %s", r.status, r.body);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(!strcmp(fake_last_bias, "7:2.5,ab:-1,"), "bias '%s'", fake_last_bias);
    CHECK(!(fake_last.set & PG_SEED), "seed -1 means random");
    pthread_mutex_unlock(&fake_mu);
}

static void limits(void)
{
    /* Content-Length over the limit with Expect: 100-continue: 413 before any body is sent */
    int fd = dial(port_open);
    const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Expect: 100-continue\r\nContent-Length: 104857600\r\n\r\n";
    send_all(fd, head, sizeof head - 1);
    struct resp r;
    read_response(fd, &r);
    close(fd);
    json_t *k;
    const char *m = check_error(&r, 413, "invalid_request_error", &k);
    CHECK(strstr(m, "too large (104857600 bytes") != NULL, "413 message '%s'", m);
    json_decref(k);
    resp_free(&r);

    /* without Expect the client is already sending: the body is read and dropped, then 413 */
    char junk[65536];
    memset(junk, 'a', sizeof junk);
    fd = dial(port_open);
    const char head2[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Content-Length: 3145728\r\n\r\n";
    send_all(fd, head2, sizeof head2 - 1);
    for (int i = 0; i < 48; i++) /* 3 MiB > the 1 MiB test limit */
        send_all(fd, junk, sizeof junk);
    read_response(fd, &r);
    close(fd);
    m = check_error(&r, 413, "invalid_request_error", &k);
    CHECK(strstr(m, "too large") != NULL, "413 message '%s'", m);
    json_decref(k);
    resp_free(&r);

    /* a chunked body that grows past the limit */
    fd = dial(port_open);
    const char chead[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_all(fd, chead, sizeof chead - 1);
    for (int i = 0; i < 20; i++) { /* 20 × 64 KiB > the 1 MiB test limit */
        char sz[16];
        int l = snprintf(sz, sizeof sz, "%zx\r\n", sizeof junk);
        send_all(fd, sz, (size_t)l);
        send_all(fd, junk, sizeof junk);
        send_all(fd, "\r\n", 2);
    }
    send_all(fd, "0\r\n\r\n", 5);
    read_response(fd, &r);
    close(fd);
    check_error(&r, 413, "invalid_request_error", &k);
    json_decref(k);
    resp_free(&r);
}

static void api_keys(void)
{
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":1}";
    EXPECT_ERROR(port_key, "/v1/completions", NULL, body, 401, "authentication_error", "missing API key");
    EXPECT_ERROR(port_key, "/v1/completions", "Authorization: Bearer wrong\r\n", body, 401, "authentication_error",
                 "invalid API key");
    EXPECT_ERROR(port_key, "/v1/completions", "Authorization: Bearer sk-test-12\r\n", body, 401, "authentication_error",
                 "invalid API key"); /* a prefix of the key */
    struct resp r = http(port_key, "POST", "/v1/completions", "Authorization: Bearer sk-test-123\r\n", body);
    CHECK(r.status == 200, "right key: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_key, "GET", "/v1/models", NULL, NULL);
    CHECK(r.status == 401, "models without key: %d", r.status);
    resp_free(&r);
    /* srv_key allows two origins (--cors-origin) */
    r = http(port_key, "OPTIONS", "/v1/chat/completions",
             "Origin: http://ui.example\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    CHECK(r.status == 204 && strcasestr(r.headers, "Access-Control-Allow-Origin: http://ui.example\r") &&
              strcasestr(r.headers, "Access-Control-Allow-Headers: Authorization"),
          "CORS preflight (no key needed): %d %s", r.status, r.headers);
    resp_free(&r);
    r = http(port_key, "GET", "/health", "Origin: http://localhost:3000\r\n", NULL); /* load balancers probe without keys */
    CHECK(strcasestr(r.headers, "Access-Control-Allow-Origin: http://localhost:3000\r") != NULL, "CORS header: %s", r.headers);
    CHECK(r.status == 200, "health without key: %d", r.status);
    resp_free(&r);
}

/* CORS is off unless origins are configured, and never "*" */
static void cors(void)
{
    struct resp r = http(port_open, "GET", "/health", "Origin: http://evil.example\r\n", NULL);
    CHECK(r.status == 200 && !strcasestr(r.headers, "Access-Control-Allow-Origin"), "CORS off by default: %s", r.headers);
    resp_free(&r);
    r = http(port_open, "OPTIONS", "/v1/chat/completions",
             "Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n", NULL);
    CHECK(!strcasestr(r.headers, "Access-Control-Allow-"), "preflight with CORS off: %s", r.headers);
    resp_free(&r);
    r = http(port_key, "GET", "/health", "Origin: http://evil.example\r\n", NULL);
    CHECK(r.status == 200 && !strcasestr(r.headers, "Access-Control-Allow-Origin") && strcasestr(r.headers, "Vary: Origin"),
          "an origin not in the list: %s", r.headers);
    resp_free(&r);
}

/* 429 tells the client when to come back */
static void retry_after(void)
{
    struct resp r = http(port_open, "POST", "/v1/completions", NULL, "{\"prompt\":\"QUEUE_FULL\"}");
    CHECK(r.status == 429 && strcasestr(r.headers, "\r\nRetry-After: 1"), "429 headers: %d %s", r.status, r.headers);
    resp_free(&r);
}

/* Raw bytes on a fresh connection; read until the server closes (at most
 * 3 s). Returns how many status lines came; *status is the first one's,
 * *closed whether the server closed the connection. */
static int raw_exchange(int port, const char *bytes, int *status, bool *closed)
{
    *status = 0;
    *closed = false;
    int fd = dial(port);
    if (fd < 0)
        return 0;
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    send_all(fd, bytes, strlen(bytes));
    char buf[16384];
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) {
            *closed = true;
            break;
        }
        if (k < 0 || (n += (size_t)k) >= sizeof buf - 1)
            break;
    }
    close(fd);
    buf[n] = 0;
    int count = 0;
    for (char *p = buf; (p = strstr(p, "HTTP/1.1 ")); p += 9)
        if (p == buf || p[-1] == '\n' || p[-1] == '}' || p[-1] == '>') {
            if (!count++)
                *status = atoi(p + 9);
        }
    return count;
}

/* Framing that a proxy in front could read differently: one answer, then the
 * connection is closed, so nothing after it is taken for a request. */
static void strict_framing(void)
{
    const char *B = "{\"prompt\":\"a\",\"max_tokens\":1}"; /* 29 bytes, valid */
    char req[1024];
    struct { const char *name, *fmt; int want; } cases[] = {
        {"valid control", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 29\r\n\r\n%s", 200},
        {"duplicate Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 29\r\nContent-Length: 29\r\n\r\n%s", 400},
        {"conflicting Content-Length",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 29\r\nContent-Length: 60\r\n\r\n%sGET /health HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"Content-Length with chunked",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 34\r\nTransfer-Encoding: chunked\r\n\r\n1d\r\n%s\r\n0\r\n\r\n"
         "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"bare CR in a header", "GET /health HTTP/1.1\r\nHost: x\r\nX-Note: a\rX-Injected: b\r\n\r\n%s", 400},
        {"%00 in the path", "GET /health%%00.html HTTP/1.1\r\nHost: x\r\n\r\n%s", 400},
        {"%00 in a model id", "GET /v1/models/fake-model%%00x HTTP/1.1\r\nHost: x\r\n\r\n%s", 400},
        {"unknown Transfer-Encoding", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n%s", 501},
        {"chunked, gzip", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n1d\r\n%s\r\n0\r\n\r\n", 501},
        {"two Transfer-Encodings",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n1d\r\n%s\r\n0\r\n\r\n", 501},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(req, sizeof req, cases[i].fmt, cases[i].want == 200 || strstr(cases[i].fmt, "POST") ? B : "");
        int st;
        bool closed;
        double t0 = now_s();
        int n = raw_exchange(port_open, req, &st, &closed);
        CHECK(st == cases[i].want && n == 1 && closed, "%s: status %d (want %d), %d responses, %s after %.1f s",
              cases[i].name, st, cases[i].want, n, closed ? "closed" : "still open", now_s() - t0);
    }
    /* libmicrohttpd itself answers a negative Content-Length 400 and closes */
    int st;
    bool closed;
    raw_exchange(port_open, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", &st, &closed);
    CHECK(st == 400 && closed, "negative Content-Length: %d, %s", st, closed ? "closed" : "open");
    struct resp r = http(port_open, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200, "served after the malformed requests: %d", r.status);
    resp_free(&r);
}

/* A second server on a port in use fails (no SO_REUSEPORT sharing) */
static void port_in_use(void)
{
    struct gw_config cfg;
    gw_config_default(&cfg);
    cfg.port = port_open;
    struct gw_server *s2 = NULL;
    struct err e;
    err_clear(&e);
    int rc = gw_server_start(&s2, &cfg, &fake, &e);
    CHECK(rc != 0 && strstr(e.msg, "Address already in use"), "second server on port %d: rc %d '%s'", port_open, rc, e.msg);
    if (!rc)
        gw_server_stop(s2);
}

static int dial_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    d.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&d, sizeof d)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Whether the server closed fd within ms (EOF or reset). */
static bool closed_within(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    double end = now_s() + ms / 1000.0;
    while (now_s() < end) {
        if (poll(&p, 1, 50) > 0) {
            char b[256];
            ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN))
                return true;
        }
    }
    return false;
}

/* Slow headers: a header block must be complete within the header deadline
 * however the bytes trickle in; a body or a stream after it is not cut. One
 * client address holds at most max_per_ip connections; others are served. */
static void header_deadline_and_per_ip(void)
{
    struct gw_config cfg;
    gw_config_default(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    cfg.header_timeout_s = 1;
    cfg.max_per_ip = 4;
    struct gw_server *s = NULL;
    struct err e;
    if (gw_server_start(&s, &cfg, &fake, &e)) {
        CHECK(0, "server: %s", e.msg);
        return;
    }
    int port = gw_server_port(s);
    /* a slowloris: a header line every 300 ms, never the blank line */
    double t0 = now_s();
    int fd = dial(port);
    const char *line = "GET /health HTTP/1.1\r\nHost: x\r\n";
    send_all(fd, line, strlen(line));
    bool closed = false;
    for (int i = 0; i < 20 && !closed; i++) {
        usleep(300000);
        send_all(fd, "X-Slow: y\r\n", 11);
        CHECK(!closed_within(fd, 1) || now_s() - t0 >= 0.9, "closed before the deadline");
        closed = closed_within(fd, 1);
    }
    double took = now_s() - t0;
    CHECK(closed && took >= 0.9 && took < 3.0, "slow header block: %s after %.1f s (deadline 1 s)",
          closed ? "closed" : "still open", took);
    close(fd);
    /* a stream that runs past the header deadline is not cut (SLOW: 20 ms a token, 100 tokens = 2 s) */
    struct resp r = http(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"SLOW\",\"max_tokens\":100,\"stream\":true}");
    bool done = false;
    json_t *ev = sse_events(r.body ? r.body : "", &done);
    CHECK(r.status == 200 && done && json_array_size(ev) >= 100, "2 s stream under a 1 s header deadline: %d, %zu events, done %d",
          r.status, json_array_size(ev), done);
    json_decref(ev);
    resp_free(&r);
    /* a body that trickles in after complete headers is not cut by it either */
    fd = dial(port);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 29\r\n\r\n";
    const char *body = "{\"prompt\":\"a\",\"max_tokens\":1}";
    send_all(fd, head, strlen(head));
    for (int i = 0; i < 29; i += 8) {
        usleep(400000);
        send_all(fd, body + i, i + 8 <= 29 ? 8 : (size_t)(29 - i));
    }
    struct resp rr;
    read_response(fd, &rr);
    CHECK(rr.status == 200, "body sent over 1.6 s after the headers: %d", rr.status);
    resp_free(&rr);
    close(fd);
    /* per address: 4 idle connections from 127.0.0.1 fill its share ... */
    int idle[4], extra;
    for (int i = 0; i < 4; i++)
        idle[i] = dial(port);
    usleep(100000);
    extra = dial(port);
    CHECK(extra >= 0 && closed_within(extra, 1000), "a 5th connection from one address is closed at once");
    close(extra);
    /* ... and 127.0.0.2 is still served */
    int other = dial_from(port, "127.0.0.2");
    if (other < 0) {
        CHECK(0, "cannot connect from 127.0.0.2");
    } else {
        send_request(other, "GET", "/health", NULL, NULL, 0);
        read_response(other, &rr);
        CHECK(rr.status == 200, "another address beside a full one: %d", rr.status);
        resp_free(&rr);
        close(other);
    }
    /* the idle ones are closed by the header deadline too */
    bool all = true;
    for (int i = 0; i < 4; i++) {
        all &= idle[i] >= 0 && closed_within(idle[i], 2500);
        close(idle[i]);
    }
    CHECK(all, "idle connections without a request outlived the header deadline");
    gw_server_stop(s);
}

/* tools, roles, content */
static void chat_fields(void)
{
    const char *chat = "/v1/chat/completions";
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[1]}", 400,
                 "invalid_request_error", "tools[0] must be a function object");
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
                 400, "invalid_request_error", "tools[0] must be a function object");
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"web\",\"function\":{\"name\":\"f\"}}]}",
                 400, "invalid_request_error", "tools[0] must be a function object");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", 400,
                 "invalid_request_error", "'tools' must be an array");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400,
                 "invalid_request_error", "messages[0].role 'wizard' is not one of");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\"}]}", 400,
                 "invalid_request_error", "messages[1] (user) has no 'content'");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400,
                 "invalid_request_error", "has no 'content'");
    /* still accepted: an assistant turn that only calls tools, a tool result, a real tool list */
    struct resp r = http(port_open, "POST", chat, NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
                         "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                         "\"function\":{\"name\":\"get\",\"arguments\":\"{}\"}}]},"
                         "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],"
                         "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{}}}],\"max_tokens\":1}");
    CHECK(r.status == 200, "tool round trip: %d %s", r.status, r.body);
    resp_free(&r);
}

/* ------------------------------------------------------------ tool calls */

#define TOOLS_JSON                                                                                                 \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","  \
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\","   \
    "\"parameters\":{\"type\":\"object\"}}}]"

/* POST a chat request whose last message is `say` (the fake backend's script). */
static struct resp tool_request(const char *say, const char *extra)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]," TOOLS_JSON "%s%s}", say,
             extra ? "," : "", extra ? extra : "");
    return http(port_open, "POST", "/v1/chat/completions", NULL, body);
}

/* "content|name(args)|…" of a non-streamed reply; *finish its finish_reason. */
static void tool_summary(json_t *j, char *out, size_t cap, char *finish, size_t fcap, bool *content_null)
{
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c0, "message");
    *content_null = json_is_null(json_object_get(msg, "content"));
    snprintf(out, cap, "%s", json_string_value(json_object_get(msg, "content")) ?: "");
    snprintf(finish, fcap, "%s", json_string_value(json_object_get(c0, "finish_reason")) ?: "");
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
        json_t *fn = json_object_get(tc, "function");
        CHECK(!strncmp(json_string_value(json_object_get(tc, "id")) ?: "", "call_", 5), "id of call %zu", i);
        CHECK(!strcmp(json_string_value(json_object_get(tc, "type")) ?: "", "function"), "type of call %zu", i);
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "|%s(%s)", json_string_value(json_object_get(fn, "name")) ?: "?",
                 json_string_value(json_object_get(fn, "arguments")) ?: "?");
    }
}

static void tool_calls_reply(void)
{
    char got[1024], fin[32];
    bool cnull;
    struct resp r = tool_request("TOOLCALL", NULL);
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strcmp(got, "|get_weather({\"city\":\"Paris\"})"), "one call: %s", r.body);
    CHECK(cnull, "content must be null when the reply only calls: %s", r.body);
    CHECK(!strcmp(fin, "tool_calls"), "finish %s", fin);
    json_decref(j);
    resp_free(&r);

    r = tool_request("TOOLCALL2", NULL);
    j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strcmp(got, "I will check both.|get_weather({\"city\":\"Paris\"})|get_time({\"tz\":\"CET\"})"), "two calls: %s",
          r.body);
    CHECK(!strcmp(fin, "tool_calls"), "finish %s", fin);
    json_decref(j);
    resp_free(&r);

    r = tool_request("TOOLCALL2", "\"parallel_tool_calls\":false");
    j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strcmp(got, "I will check both.|get_weather({\"city\":\"Paris\"})"), "parallel false: %s", r.body);
    json_decref(j);
    resp_free(&r);

    /* broken JSON: the text is the content, finish stays "stop" */
    r = tool_request("TOOLBAD", NULL);
    j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strcmp(got, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city}}\n</tool_call>"), "bad: %s", r.body);
    CHECK(!strcmp(fin, "stop"), "finish %s", fin);
    json_decref(j);
    resp_free(&r);

    /* tool_choice "none": no tools reach the model, nothing is read as a call */
    r = tool_request("TOOLCALL", "\"tool_choice\":\"none\"");
    j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strncmp(got, "<tool_call>", 11) && !strchr(got, '|') && !strcmp(fin, "stop"), "none: %s", r.body);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tools == NULL && !fake_last.tool_required, "none: tools reached the backend");
    pthread_mutex_unlock(&fake_mu);
    json_decref(j);
    resp_free(&r);

    /* without tools in the request the reply is plain content */
    r = http(port_open, "POST", "/v1/chat/completions", NULL,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL\"}]}");
    j = body_json(&r);
    tool_summary(j, got, sizeof got, fin, sizeof fin, &cnull);
    CHECK(!strncmp(got, "<tool_call>", 11) && !strchr(got, '|'), "no tools: %s", r.body);
    json_decref(j);
    resp_free(&r);

    /* required / a named function reach the backend (for constrained decoding) */
    r = tool_request("TOOLCALL", "\"tool_choice\":\"required\"");
    CHECK(r.status == 200, "required: %d %s", r.status, r.body);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tool_required && !fake_last_tool[0], "required not passed on");
    CHECK(!fake_last.tool_single, "parallel_tool_calls defaults to true");
    pthread_mutex_unlock(&fake_mu);
    resp_free(&r);
    r = tool_request("TOOLCALL", "\"tool_choice\":\"required\",\"parallel_tool_calls\":false");
    CHECK(r.status == 200, "required, one call: %d %s", r.status, r.body);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tool_required && fake_last.tool_single, "parallel_tool_calls false not passed on");
    pthread_mutex_unlock(&fake_mu);
    resp_free(&r);
    r = tool_request("TOOLCALL", "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}");
    CHECK(r.status == 200, "named: %d %s", r.status, r.body);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tool_required && !strcmp(fake_last_tool, "get_weather"), "named: '%s'", fake_last_tool);
    pthread_mutex_unlock(&fake_mu);
    resp_free(&r);

    /* bad tool_choice: 400 naming the field */
    const char *chat = "/v1/chat/completions";
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS_JSON
                 ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"launch\"}}}",
                 400, "invalid_request_error", "'launch', which is not in 'tools'");
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS_JSON ",\"tool_choice\":\"sometimes\"}", 400,
                 "invalid_request_error", "'tool_choice' must be");
    EXPECT_ERROR(port_open, chat, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
                 400, "invalid_request_error", "needs a non-empty 'tools'");
    /* one grammar a reply: a forced call's or the response format's */
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS_JSON ",\"tool_choice\":\"required\","
                 "\"response_format\":{\"type\":\"json_object\"}}",
                 400, "invalid_request_error", "cannot be combined with tool_choice");
    EXPECT_ERROR(port_open, chat, NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS_JSON ",\"parallel_tool_calls\":1}", 400,
                 "invalid_request_error", "'parallel_tool_calls' must be a boolean");
    r = http(port_open, "POST", chat, NULL,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS_JSON ",\"tool_choice\":\"bad\"}");
    json_t *k = body_json(&r);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(k, "error"), "param")) ?: "", "tool_choice"),
          "param: %s", r.body);
    json_decref(k);
    resp_free(&r);
}

/* A streamed reply with calls, reassembled as an SDK does, equals the whole reply. */
static void tool_calls_stream_one(const char *say, const char *extra)
{
    char want[1024], wfin[32];
    bool cnull;
    struct resp r = tool_request(say, extra);
    json_t *j = body_json(&r);
    tool_summary(j, want, sizeof want, wfin, sizeof wfin, &cnull);
    json_decref(j);
    resp_free(&r);

    char ex[256];
    snprintf(ex, sizeof ex, "%s%s\"stream\":true", extra ? extra : "", extra ? "," : "");
    r = tool_request(say, ex);
    CHECK(r.status == 200, "status %d", r.status);
    bool done;
    json_t *ev = sse_events(r.body, &done);
    CHECK(done, "no [DONE]: %s", r.body);
    char content[1024] = "", names[4][64] = {{0}}, args[4][256] = {{0}}, ids[4][40] = {{0}}, fin[32] = "";
    size_t n_calls = 0, i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        const char *t = json_string_value(json_object_get(d, "content"));
        if (t) /* text of a call that leaked as content would make it differ from the whole reply's */
            strncat(content, t, sizeof content - strlen(content) - 1);
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), k, tc) {
            json_int_t idx = json_integer_value(json_object_get(tc, "index"));
            CHECK(idx >= 0 && idx < 4, "index %lld", (long long)idx);
            if (idx < 0 || idx >= 4)
                continue;
            json_t *fn = json_object_get(tc, "function");
            if (json_object_get(tc, "id")) {
                CHECK((size_t)idx == n_calls, "call %lld starts out of order", (long long)idx);
                n_calls = (size_t)idx + 1;
                snprintf(ids[idx], sizeof ids[idx], "%s", json_string_value(json_object_get(tc, "id")) ?: "");
                snprintf(names[idx], sizeof names[idx], "%s", json_string_value(json_object_get(fn, "name")) ?: "");
                CHECK(!strcmp(json_string_value(json_object_get(tc, "type")) ?: "", "function"), "type");
            }
            const char *a = json_string_value(json_object_get(fn, "arguments"));
            if (a)
                strncat(args[idx], a, sizeof args[idx] - strlen(args[idx]) - 1);
        }
        if (json_is_string(json_object_get(c, "finish_reason")))
            snprintf(fin, sizeof fin, "%s", json_string_value(json_object_get(c, "finish_reason")));
    }
    char got[1024];
    snprintf(got, sizeof got, "%s", content);
    for (size_t c = 0; c < n_calls; c++) {
        CHECK(!strncmp(ids[c], "call_", 5), "id '%s'", ids[c]);
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "|%s(%s)", names[c], args[c]);
    }
    CHECK(!strcmp(got, want), "%s: streamed '%s' != whole '%s'", say, got, want);
    CHECK(!strcmp(fin, wfin), "%s: finish %s != %s", say, fin, wfin);
    json_decref(ev);
    resp_free(&r);
}

static void tool_calls_streamed(void)
{
    tool_calls_stream_one("TOOLCALL", NULL);
    tool_calls_stream_one("TOOLCALL2", NULL);
    tool_calls_stream_one("TOOLCALL2", "\"parallel_tool_calls\":false");
    tool_calls_stream_one("TOOLBAD", NULL);
}

/* A stream the backend ends with an error, or a cancel the client did not
 * ask for (a worker that died), ends with an error event and [DONE]. */
static void stream_failure_ends_stream(void)
{
    const char *prompts[] = {"FAIL_MID", "CANCEL_MID"};
    for (int k = 0; k < 2; k++) {
        char body[200];
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":10,\"stream\":true}", prompts[k]);
        struct resp r = http(port_open, "POST", "/v1/completions", NULL, body);
        bool done = false;
        json_t *ev = sse_events(r.body ? r.body : "", &done);
        size_t n = json_array_size(ev);
        json_t *last = n ? json_object_get(json_array_get(ev, n - 1), "error") : NULL;
        CHECK(r.status == 200 && n >= 2 && json_is_object(last) && json_is_string(json_object_get(last, "message")) && done,
              "%s: %d, %zu events, last is an error: %d, ends with [DONE]: %d; %s", prompts[k], r.status, n,
              json_is_object(last), done, r.body);
        json_decref(ev);
        resp_free(&r);
    }
}

/* Metric value of one labelled series in /metrics text (0 when absent). */
static long long metric(const char *text, const char *series)
{
    const char *p = strstr(text, series);
    return p ? atoll(p + strlen(series)) : 0;
}

static bool wait_canceled(int before, int ms);

/* A client that leaves mid-stream is counted 499, not 200 */
static void stream_disconnect_is_499(void)
{
    const char *series = "llm170_http_requests_total{endpoint=\"/v1/completions\",status=\"499\"} ";
    struct resp m = http(port_open, "GET", "/metrics", NULL, NULL);
    long long before = metric(m.body, series);
    resp_free(&m);
    int canceled = atomic_load(&fake_canceled);
    int fd = dial(port_open);
    const char *body = "{\"prompt\":\"SLOW\",\"stream\":true}";
    send_request(fd, "POST", "/v1/completions", NULL, body, strlen(body));
    char buf[512];
    CHECK(recv(fd, buf, sizeof buf, 0) > 0, "no stream bytes");
    close(fd);
    wait_canceled(canceled, 3000);
    long long after = before;
    for (int i = 0; i < 50 && after == before; i++) {
        usleep(20000);
        m = http(port_open, "GET", "/metrics", NULL, NULL);
        after = metric(m.body, series);
        resp_free(&m);
    }
    CHECK(after == before + 1, "499 count %lld -> %lld after a client left mid-stream", before, after);
}

static bool wait_canceled(int before, int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        if (atomic_load(&fake_canceled) > before)
            return true;
        usleep(10000);
    }
    return false;
}

static void client_disconnect_cancels(void)
{
    /* mid-stream: read the first bytes, then vanish */
    int before = atomic_load(&fake_canceled);
    int fd = dial(port_open);
    const char *body = "{\"prompt\":\"SLOW\",\"stream\":true}";
    send_request(fd, "POST", "/v1/completions", NULL, body, strlen(body));
    char buf[512];
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    CHECK(k > 0, "no stream bytes before disconnecting");
    close(fd);
    CHECK(wait_canceled(before, 3000), "the stream was not canceled after the client left");

    /* waiting for a non-streamed answer: the socket watcher notices */
    before = atomic_load(&fake_canceled);
    fd = dial(port_open);
    body = "{\"prompt\":\"SLOW\"}";
    send_request(fd, "POST", "/v1/completions", NULL, body, strlen(body));
    usleep(100000);
    close(fd);
    CHECK(wait_canceled(before, 3000), "the request was not canceled after the client left");
}

static void idle_connections(void)
{
    enum { N = 300 };
    int fds[N], open_n = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = dial(port_open);
        if (fds[i] >= 0)
            open_n++;
    }
    CHECK(open_n == N, "only %d of %d connections accepted", open_n, N);
    /* a few idle clients that sent half a request */
    for (int i = 0; i < 10; i++)
        if (fds[i] >= 0)
            send_all(fds[i], "POST /v1/completions HTTP/1.1\r\n", 31);
    struct resp r = http(port_open, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":1}");
    CHECK(r.status == 200, "request beside %d idle connections: %d", N, r.status);
    resp_free(&r);
    r = http(port_open, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200, "health beside idle connections: %d", r.status);
    resp_free(&r);
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void tokenize_endpoints(void)
{
    struct resp r = http(port_open, "POST", "/tokenize", NULL, "{\"content\":\"hi\",\"add_special\":true}");
    CHECK(r.status == 200 && strstr(r.body, "\"tokens\":[1,104,105]"), "tokenize: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_open, "POST", "/tokenize", NULL, "{\"content\":\"h\",\"with_pieces\":true}");
    CHECK(r.status == 200 && strstr(r.body, "{\"id\":104,\"piece\":\"h\"}"), "with_pieces: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_open, "POST", "/detokenize", NULL, "{\"tokens\":[104,105]}");
    CHECK(r.status == 200 && strstr(r.body, "\"content\":\"hi\""), "detokenize: %d %s", r.status, r.body);
    resp_free(&r);
    EXPECT_ERROR(port_open, "/tokenize", NULL, "{\"content\":5}", 400, "invalid_request_error", "'content' must be a string");
    EXPECT_ERROR(port_open, "/detokenize", NULL, "{\"tokens\":[\"a\"]}", 400, "invalid_request_error", "token ids");
    EXPECT_ERROR(port_open, "/detokenize", NULL, "{\"tokens\":[999]}", 400, "invalid_request_error", "outside the vocabulary");
}

static void metrics_text(void)
{
    struct resp r = http(port_open, "GET", "/metrics", NULL, NULL);
    CHECK(r.status == 200, "metrics %d", r.status);
    CHECK(strcasestr(r.headers, "Content-Type: text/plain") != NULL, "headers %s", r.headers);
    const char *want[] = {
        "llm170_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} ",
        "llm170_http_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 2\n", /* backend_errors, retry_after */
        "llm170_completion_tokens_total ",
        "llm170_prompt_tokens_total ",
        "# TYPE llm170_time_to_first_token_seconds histogram",
        "llm170_time_to_first_token_seconds_bucket{le=\"+Inf\"} ",
        "llm170_inter_token_seconds_count ",
        "llm170_queue_depth 2\n",
        "llm170_active_slots 1\n",
        "llm170_worker_memory_bytes{worker=\"0\",device=\"cpu\",model=\"fake-model\"} 12345\n",
        "llm170_daemon_up 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(r.body, want[i]) != NULL, "metrics lack '%s'", want[i]);
    /* TTFT was observed for the requests above */
    const char *c = strstr(r.body, "llm170_time_to_first_token_seconds_count ");
    CHECK(c && atoi(c + strlen("llm170_time_to_first_token_seconds_count ")) > 0, "no TTFT observations");
    resp_free(&r);
}

static void think_split(const char *const *pieces, const char *want_r, const char *want_c)
{
    struct oai_think t = {0};
    struct oai_str r = {0}, c = {0};
    for (int i = 0; pieces[i]; i++)
        oai_think_feed(&t, pieces[i], false, &r, &c);
    oai_think_feed(&t, NULL, true, &r, &c);
    CHECK(!strcmp(r.p ? r.p : "", want_r), "reasoning '%s' want '%s'", r.p ? r.p : "", want_r);
    CHECK(!strcmp(c.p ? c.p : "", want_c), "content '%s' want '%s'", c.p ? c.p : "", want_c);
    free(r.p);
    free(c.p);
}

static void reasoning_content(void)
{
    /* tags split across deltas, newlines around them are layout */
    const char *a[] = {"<th", "ink>\nI reason", "ed.\n</th", "ink>\n\nAnswer", " here", NULL};
    think_split(a, "I reasoned.", "Answer here");
    const char *b[] = {"<think>", "\n\n</think>\n\n", "Hi", NULL}; /* thinking disabled: empty block */
    think_split(b, "", "Hi");
    const char *c[] = {"Hello <think>x</think>", NULL}; /* not at the start: plain content */
    think_split(c, "", "Hello <think>x</think>");
    const char *d[] = {"<think>\ncut off by max_tokens", NULL};
    think_split(d, "cut off by max_tokens", "");
    const char *e[] = {"<", "b>bold", NULL};
    think_split(e, "", "<b>bold");
    /* the non-streamed chat message carries reasoning_content */
    struct oai_choice ch = {0};
    struct gw_event ev = {.kind = GW_EV_TOKEN, .token = 1, .text = "<think>\nwhy\n</think>\n\nbecause"};
    oai_choice_add(OAI_CHAT, &ch, &ev, false);
    struct gw_event done = {.kind = GW_EV_DONE, .finish = "stop", .n_gen = 1};
    oai_choice_add(OAI_CHAT, &ch, &done, false);
    struct oai_meta m = {"chatcmpl-x", 1, "m", NULL};
    char *body = oai_response_body(OAI_CHAT, &m, &ch, 1, 3, true);
    CHECK(body && strstr(body, "\"reasoning_content\":\"why\"") && strstr(body, "\"content\":\"because\""), "body %s",
          body ? body : "(null)");
    free(body);
    body = oai_response_body(OAI_CHAT, &m, &ch, 1, 3, false); /* reasoning_format: none */
    CHECK(body && !strstr(body, "reasoning_content") && strstr(body, "<think>"), "body %s", body ? body : "(null)");
    free(body);
    oai_choice_free(&ch);
}

/* response_format: json_object and json_schema become the schema text the
 * worker compiles; text is none; the rest is a 400 naming the field or keyword. */
static void response_format_parse(void)
{
    static const char *const cases[][2] = {
        {"{\"type\":\"text\"}", NULL},
        {"{\"type\":\"json_object\"}", "{\"type\":\"object\"}"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"object\","
         "\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}}}",
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
         "\"additionalProperties\":false}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":%s}",
                 cases[i][0]);
        json_t *o = json_loads(body, 0, NULL);
        struct oai_request rq;
        char param[64];
        struct err e;
        err_clear(&e);
        int rc = oai_parse_request(OAI_CHAT, o, &rq, param, sizeof param, &e);
        CHECK(rc == 0, "%s: %s", cases[i][0], e.msg);
        const char *got = rq.gen.json_schema;
        CHECK(cases[i][1] ? got && !strcmp(got, cases[i][1]) : !got, "%s: schema %s", cases[i][0], got ? got : "(none)");
        oai_request_free(&rq);
        json_decref(o);
    }
    static const char *const bad[][2] = {
        {"{\"type\":\"json_schema\"}", "json_schema"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", "schema"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"format\":\"email\"}}}", "'format'"},
        {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"maxItems\":999999}}}", "maxItems"},
        {"{\"type\":\"json_object\",\"schema\":{\"allOf\":[]}}", "'allOf'"},
        {"\"json\"", "response_format"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":%s}",
                 bad[i][0]);
        json_t *o = json_loads(body, 0, NULL);
        struct oai_request rq;
        char param[64];
        struct err e;
        err_clear(&e);
        int rc = oai_parse_request(OAI_CHAT, o, &rq, param, sizeof param, &e);
        CHECK(rc == ERR_INVALID && !strcmp(param, "response_format") && strstr(e.msg, bad[i][1]),
              "%s: rc %d param '%s' message '%s' (want '%s')", bad[i][0], rc, param, e.msg, bad[i][1]);
        oai_request_free(&rq);
        json_decref(o);
    }
}

/* Requests with every known field set to values of random types: each one
 * parses or fails with ERR_INVALID and a message naming a field (run under
 * `make asan`). */
static void parse_fuzz(void)
{
    static const char *const keys[] = {
        "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n_predict", "temperature", "top_p",
        "top_k", "min_p", "typical_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
        "seed", "stop", "stream", "stream_options", "n", "logprobs", "top_logprobs", "n_probs", "logit_bias",
        "ignore_eos", "user", "tools", "chat_template_kwargs", "response_format", "reasoning_format",
    };
    static const char *const vals[] = {
        "null", "true", "false", "0", "-1", "1", "7", "99999999999", "-3.5", "0.5", "1e300", "\"\"", "\"x\"",
        "\"none\"", "[]", "{}", "[1,2]", "[\"a\",\"\"]", "[[1,2]]", "[[\"ab\",false]]", "{\"5\":-1}",
        "{\"include_usage\":true}", "{\"type\":\"text\"}", "[{\"role\":\"user\",\"content\":\"hi\"}]",
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]", "[{\"role\":1}]",
        "[[1],[2]]", "[-5]", "{\"a\":{\"b\":[]}}",
    };
    unsigned long long seed = 42;
    int ok = 0, bad = 0;
    for (int t = 0; t < 3000; t++) {
        json_t *o = json_pack("{s:s, s:[{s:s, s:s}]}", "prompt", "x", "messages", "role", "user", "content", "hi");
        int fields = 1 + t % 3;
        for (int k = 0; k < fields; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const char *key = keys[(seed >> 33) % (sizeof keys / sizeof keys[0])];
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            json_object_set_new(o, key, json_loads(vals[(seed >> 33) % (sizeof vals / sizeof vals[0])], JSON_DECODE_ANY, NULL));
        }
        for (int kind = OAI_CHAT; kind <= OAI_COMPLETION; kind++) {
            struct oai_request rq;
            char param[64];
            struct err e;
            err_clear(&e);
            int rc = oai_parse_request(kind, o, &rq, param, sizeof param, &e);
            if (rc) {
                bad++;
                CHECK(rc == ERR_INVALID && e.msg[0], "rc %d msg '%s'", rc, e.msg);
            } else {
                ok++;
                CHECK(rq.n >= 1 && rq.n <= OAI_MAX_N && rq.gen.n_stop <= OAI_MAX_STOP, "bounds");
            }
            oai_request_free(&rq);
        }
        json_decref(o);
    }
    CHECK(ok > 20 && bad > 20, "fuzz mix: %d parsed, %d refused", ok, bad);
}

struct conc_arg {
    int id, bad;
};
static void *conc_main(void *arg)
{
    struct conc_arg *a = arg;
    for (int k = 0; k < 6; k++) {
        bool stream = (a->id + k) % 2;
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":\"c%d\",\"max_tokens\":%d,\"n\":%d,\"stream\":%s,\"seed\":%d}", a->id,
                 3 + k, 1 + k % 2, stream ? "true" : "false", 100 * a->id + k);
        struct resp r = http(port_open, "POST", "/v1/completions", NULL, body);
        char want[128] = "";
        for (int i = 0; i < 3 + k; i++) {
            char piece[32];
            snprintf(piece, sizeof piece, "s%d_%d ", 100 * a->id + k, i);
            strcat(want, piece);
        }
        bool ok = r.status == 200;
        if (ok && stream) {
            bool done;
            json_t *ev = sse_events(r.body, &done);
            char text[256] = "";
            for (size_t i = 0; i < json_array_size(ev); i++) {
                json_t *c = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
                if (json_integer_value(json_object_get(c, "index")) == 0 && json_string_value(json_object_get(c, "text")))
                    strncat(text, json_string_value(json_object_get(c, "text")), sizeof text - strlen(text) - 1);
            }
            ok = done && !strcmp(text, want);
            json_decref(ev);
        } else if (ok) {
            json_t *j = body_json(&r);
            const char *t = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
            ok = t && !strcmp(t, want) && json_array_size(json_object_get(j, "choices")) == (size_t)(1 + k % 2);
            json_decref(j);
        }
        if (!ok) {
            a->bad++;
            printf("#   client %d request %d: %d %.300s\n", a->id, k, r.status, r.body);
        }
        resp_free(&r);
    }
    return NULL;
}

/* many clients at once, streamed and not, n = 1 and 2: every answer whole and its own */
static void concurrent_clients(void)
{
    enum { T = 24 };
    pthread_t th[T];
    struct conc_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i] = (struct conc_arg){i, 0};
        pthread_create(&th[i], NULL, conc_main, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        bad += a[i].bad;
    }
    CHECK(bad == 0, "%d of %d requests answered wrongly", bad, T * 6);
    /* nothing left in flight */
    pthread_mutex_lock(&srv_open->mu);
    int live = srv_open->n_live;
    pthread_mutex_unlock(&srv_open->mu);
    CHECK(live == 0, "%d requests still registered", live);
}

struct drain_client {
    int port;
    struct resp r;
};
static void *drain_client_main(void *arg)
{
    struct drain_client *d = arg;
    d->r = http(d->port, "POST", "/v1/completions", NULL, "{\"prompt\":\"SLOW\",\"max_tokens\":10}");
    return NULL;
}

/* SIGTERM path: stop accepting, let the request in flight finish, then stop */
static void drain_lets_requests_finish(void)
{
    struct gw_config cfg;
    gw_config_default(&cfg);
    cfg.port = 0;
    cfg.threads = 1;
    struct gw_server *s;
    struct err e;
    if (gw_server_start(&s, &cfg, &fake, &e))
        SKIP("cannot start a server");
    struct drain_client d = {.port = gw_server_port(s)};
    pthread_t th;
    pthread_create(&th, NULL, drain_client_main, &d);
    for (int i = 0; i < 200; i++) { /* wait until it is in flight */
        pthread_mutex_lock(&s->mu);
        int live = s->n_live;
        pthread_mutex_unlock(&s->mu);
        if (live)
            break;
        usleep(5000);
    }
    int left = gw_server_drain(s, 10, NULL);
    CHECK(left == 0, "%d requests still running after the drain", left);
    int fd = dial(d.port);
    CHECK(fd < 0, "a new connection was accepted while draining");
    if (fd >= 0)
        close(fd);
    pthread_join(th, NULL);
    CHECK(d.r.status == 200 && strstr(d.r.body, "w9 "), "request in flight: %d %s", d.r.status, d.r.body);
    resp_free(&d.r);
    gw_server_stop(s);
}

static void parse_unit(void)
{
    /* precedence n_predict > max_completion_tokens > max_tokens; chat logprobs default 20 alternatives */
    json_t *b = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,"
                           "\"max_completion_tokens\":6,\"logprobs\":true,\"stop\":\"END\",\"seed\":7}",
                           0, NULL);
    struct oai_request rq;
    char param[64];
    struct err e;
    int rc = oai_parse_request(OAI_CHAT, b, &rq, param, sizeof param, &e);
    CHECK(rc == 0, "parse: %s", e.msg);
    CHECK(rq.gen.max_tokens == 6, "max_tokens %d", rq.gen.max_tokens);
    CHECK(rq.gen.logprobs == 20, "logprobs %d", rq.gen.logprobs);
    CHECK(rq.gen.n_stop == 1 && !strcmp(rq.gen.stop[0], "END"), "stop");
    CHECK((rq.gen.set & PG_SEED) && rq.gen.seed == 7, "seed");
    oai_request_free(&rq);
    json_decref(b);
    b = json_loads("{\"prompt\":\"x\",\"n_predict\":3,\"max_tokens\":9,\"logprobs\":0}", 0, NULL);
    rc = oai_parse_request(OAI_COMPLETION, b, &rq, param, sizeof param, &e);
    CHECK(rc == 0 && rq.gen.max_tokens == 3 && rq.logprobs && rq.gen.logprobs == 0, "completion parse");
    oai_request_free(&rq);
    json_decref(b);
    /* UTF-8 validator */
    size_t bad;
    CHECK(oai_utf8_valid("a\xc3\xa9\xf0\x9f\x98\x80", 7, &bad), "valid UTF-8 rejected");
    CHECK(!oai_utf8_valid("ab\xc0\xaf", 4, &bad) && bad == 2, "overlong accepted");
    CHECK(!oai_utf8_valid("\xed\xa0\x80", 3, &bad), "surrogate accepted");
    CHECK(!oai_utf8_valid("\xe2\x82", 2, &bad), "truncated accepted");
}

/* ------------------------------------------------------------ Anthropic Messages API */

/* An Anthropic error object {"type":"error","error":{"type","message"}}: checks the shape, returns the message. */
static const char *check_anth_error(const struct resp *r, int status, const char *type, json_t **keep)
{
    CHECK(r->status == status, "status %d, want %d (body %s)", r->status, status, r->body);
    json_t *j = body_json(r);
    *keep = j;
    json_t *err = json_object_get(j, "error");
    CHECK(!strcmp(json_string_value(json_object_get(j, "type")) ?: "", "error"), "type 'error' missing: %s", r->body);
    CHECK(json_is_object(err) && !strcmp(json_string_value(json_object_get(err, "type")) ?: "", type),
          "error.type in %s, want %s", r->body, type);
    const char *m = json_string_value(json_object_get(err, "message"));
    CHECK(m != NULL, "error.message missing: %s", r->body);
    return m ? m : "";
}

#define EXPECT_ANTH_ERROR(port, path, headers, body, status, type, needle)                              \
    do {                                                                                                \
        struct resp r_ = http((port), "POST", (path), (headers), (body));                              \
        json_t *k_ = NULL;                                                                              \
        const char *m_ = check_anth_error(&r_, (status), (type), &k_);                                  \
        CHECK(strstr(m_, (needle)) != NULL, "message '%s' lacks '%s'", m_, (needle));                   \
        json_decref(k_);                                                                                \
        resp_free(&r_);                                                                                 \
    } while (0)

#define ANTH_TOOLS                                                                                                  \
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather of a city\",\"input_schema\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}},{\"name\":\"get_time\","               \
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}}]"

/* "type:text|type:text|…" of a message's content blocks (tool_use: name(input)). */
static void anth_blocks(json_t *msg, char *out, size_t cap)
{
    out[0] = 0;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(msg, "content"), i, b) {
        const char *type = json_string_value(json_object_get(b, "type")) ?: "?";
        char one[512];
        if (!strcmp(type, "tool_use")) {
            char *in = json_dumps(json_object_get(b, "input"), JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
            snprintf(one, sizeof one, "tool_use:%s(%s)|", json_string_value(json_object_get(b, "name")) ?: "?",
                     in ? in : "?");
            free(in);
            CHECK(!strncmp(json_string_value(json_object_get(b, "id")) ?: "", "toolu_", 6), "tool_use id: %s",
                  json_string_value(json_object_get(b, "id")) ?: "(none)");
        } else {
            snprintf(one, sizeof one, "%s:%s|", type, json_string_value(json_object_get(b, "text")) ?: "?");
        }
        strncat(out, one, cap - strlen(out) - 1);
    }
}

static void anth_messages_text(void)
{
    /* the request's fields reach the backend as the chat request they stand for */
    struct resp r = http(port_open, "POST", "/v1/messages", "anthropic-version: 2023-06-01\r\n",
                         "{\"model\":\"fake-model\",\"max_tokens\":3,\"system\":[{\"type\":\"text\",\"text\":\"be\"},"
                         "{\"type\":\"text\",\"text\":\"brief\"}],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                         "\"text\",\"text\":\"hi\"}]},{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":\"user\","
                         "\"content\":\"again\"}],\"metadata\":{\"user_id\":\"u1\"},\"temperature\":0.5,\"top_p\":0.9,"
                         "\"top_k\":7}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    CHECK(strcasestr(r.headers, "Content-Type: application/json") != NULL, "headers: %s", r.headers);
    json_t *j = body_json(&r);
    CHECK(!strncmp(json_string_value(json_object_get(j, "id")) ?: "", "msg_", 4), "id: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "type")) ?: "", "message"), "type: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "role")) ?: "", "assistant"), "role: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "model")) ?: "", "fake-model"), "model: %s", r.body);
    char blocks[1024];
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(!strcmp(blocks, "text:w0 w1 w2 |"), "content: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "max_tokens"), "stop_reason: %s", r.body);
    CHECK(json_is_null(json_object_get(j, "stop_sequence")), "stop_sequence: %s", r.body);
    json_t *u = json_object_get(j, "usage");
    CHECK(json_integer_value(json_object_get(u, "input_tokens")) == 5 &&
              json_integer_value(json_object_get(u, "output_tokens")) == 3,
          "usage: %s", r.body);
    json_decref(j);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(!strcmp(fake_last_msgs, "system:be\nbrief|user:hi|assistant:hello|user:again|"), "messages '%s'",
          fake_last_msgs);
    CHECK(fake_last.max_tokens == 3 && (fake_last.set & PG_MAX_TOKENS), "max_tokens %d", fake_last.max_tokens);
    CHECK(fake_last.temperature == 0.5f && (fake_last.set & PG_TEMPERATURE), "temperature %g", fake_last.temperature);
    CHECK(fake_last.top_p == 0.9f && fake_last.top_k == 7 && (fake_last.set & PG_TOP_K), "top_p %g top_k %d",
          fake_last.top_p, fake_last.top_k);
    CHECK(fake_last.tools == NULL && fake_last_tools[0] == 0, "tools: %s", fake_last_tools);
    pthread_mutex_unlock(&fake_mu);

    /* a reply that ends by itself: end_turn (the fake's tool-call script, read as text without tools) */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL\"}]}");
    j = body_json(&r);
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(r.status == 200 && !strncmp(blocks, "text:<tool_call>", 16), "no tools: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "end_turn"), "stop_reason: %s", r.body);
    json_decref(j);
    resp_free(&r);

    /* stop_sequences: the text ends before the one that matched, which the reply names */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":10,\"stop_sequences\":[\"zzz\",\"w2\"],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    j = body_json(&r);
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(r.status == 200 && !strcmp(blocks, "text:w0 w1 |"), "stop: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "stop_sequence"), "stop_reason: %s",
          r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_sequence")) ?: "", "w2"), "stop_sequence: %s", r.body);
    json_decref(j);
    resp_free(&r);
}

/* The SSE events of an Anthropic stream: [[name, data], …]; every "event:" line has its "data:" line. */
static json_t *anth_events(const char *body)
{
    json_t *arr = json_array();
    const char *p = body;
    while ((p = strstr(p, "event: "))) {
        p += 7;
        const char *nl = strchr(p, '\n');
        if (!nl || strncmp(nl + 1, "data: ", 6))
            break;
        const char *d = nl + 7, *end = strstr(d, "\n\n");
        if (!end)
            break;
        json_t *j = json_loadb(d, (size_t)(end - d), 0, NULL);
        json_array_append_new(arr, json_pack("[s%o]", p, (size_t)(nl - p), j ? j : json_null()));
        p = end + 2;
    }
    return arr;
}

/* "name name …" of the events, each event's data.type checked against its name; text of the deltas into text. */
static void anth_sequence(json_t *ev, char *names, size_t cap, char *text, size_t tcap)
{
    names[0] = text[0] = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *name = json_string_value(json_array_get(e, 0));
        json_t *d = json_array_get(e, 1);
        CHECK(!strcmp(json_string_value(json_object_get(d, "type")) ?: "", name), "event %s has data.type %s", name,
              json_string_value(json_object_get(d, "type")) ?: "(none)");
        strncat(names, name, cap - strlen(names) - 1);
        strncat(names, " ", cap - strlen(names) - 1);
        json_t *delta = json_object_get(d, "delta");
        const char *t = json_string_value(json_object_get(delta, "text"));
        const char *pj = json_string_value(json_object_get(delta, "partial_json"));
        if (t || pj)
            strncat(text, t ? t : pj, tcap - strlen(text) - 1);
    }
}

static void anth_messages_stream(void)
{
    struct resp r = http(port_open, "POST", "/v1/messages", NULL,
                         "{\"model\":\"fake-model\",\"max_tokens\":2,\"stream\":true,\"messages\":[{\"role\":\"user\","
                         "\"content\":\"hi\"}]}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    CHECK(strcasestr(r.headers, "Content-Type: text/event-stream") != NULL, "headers: %s", r.headers);
    CHECK(!strstr(r.body, "[DONE]"), "an Anthropic stream has no [DONE]: %s", r.body);
    json_t *ev = anth_events(r.body);
    char names[1024], text[256];
    anth_sequence(ev, names, sizeof names, text, sizeof text);
    CHECK(!strcmp(names, "message_start content_block_start content_block_delta content_block_delta "
                         "content_block_stop message_delta message_stop "),
          "sequence: %s\n%s", names, r.body);
    CHECK(!strcmp(text, "w0 w1 "), "text '%s'", text);
    json_t *start = json_object_get(json_array_get(json_array_get(ev, 0), 1), "message");
    CHECK(!strncmp(json_string_value(json_object_get(start, "id")) ?: "", "msg_", 4) &&
              json_array_size(json_object_get(start, "content")) == 0 &&
              json_is_null(json_object_get(start, "stop_reason")) &&
              !strcmp(json_string_value(json_object_get(start, "model")) ?: "", "fake-model") &&
              json_is_object(json_object_get(start, "usage")) &&
              json_integer_value(json_object_get(json_object_get(start, "usage"), "input_tokens")) == 5,
          "message_start (usage.input_tokens = the prompt's 5 tokens): %s", r.body);
    json_t *cbs = json_array_get(json_array_get(ev, 1), 1);
    CHECK(json_integer_value(json_object_get(cbs, "index")) == 0 &&
              !strcmp(json_string_value(json_object_get(json_object_get(cbs, "content_block"), "type")) ?: "", "text"),
          "content_block_start: %s", r.body);
    json_t *d1 = json_array_get(json_array_get(ev, 2), 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(d1, "delta"), "type")) ?: "", "text_delta") &&
              json_integer_value(json_object_get(d1, "index")) == 0,
          "delta: %s", r.body);
    json_t *md = json_array_get(json_array_get(ev, 5), 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_reason")) ?: "", "max_tokens") &&
              json_is_null(json_object_get(json_object_get(md, "delta"), "stop_sequence")) &&
              json_integer_value(json_object_get(json_object_get(md, "usage"), "output_tokens")) == 2 &&
              json_integer_value(json_object_get(json_object_get(md, "usage"), "input_tokens")) == 5,
          "message_delta: %s", r.body);
    json_decref(ev);
    resp_free(&r);

    /* streamed stop sequence */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":10,\"stream\":true,\"stop_sequences\":[\"w1\"],\"messages\":[{\"role\":\"user\","
             "\"content\":\"x\"}]}");
    ev = anth_events(r.body);
    anth_sequence(ev, names, sizeof names, text, sizeof text);
    CHECK(!strcmp(text, "w0 "), "text '%s'", text);
    md = json_array_get(json_array_get(ev, json_array_size(ev) - 2), 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_reason")) ?: "",
                  "stop_sequence") &&
              !strcmp(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_sequence")) ?: "", "w1"),
          "message_delta: %s", r.body);
    json_decref(ev);
    resp_free(&r);

    /* a failure after the stream started: an error event ends it */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":10,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"FAIL_MID\"}]}");
    ev = anth_events(r.body);
    anth_sequence(ev, names, sizeof names, text, sizeof text);
    CHECK(r.status == 200 && !strcmp(names, "message_start content_block_start content_block_delta content_block_delta "
                                            "error "),
          "failure: %s\n%s", names, r.body);
    json_t *err = json_object_get(json_array_get(json_array_get(ev, json_array_size(ev) - 1), 1), "error");
    CHECK(!strcmp(json_string_value(json_object_get(err, "type")) ?: "", "api_error") &&
              strstr(json_string_value(json_object_get(err, "message")) ?: "", "the worker crashed"),
          "error event: %s", r.body);
    json_decref(ev);
    resp_free(&r);
}

static void anth_tool_use(void)
{
    /* the tools reach the backend in function form; the scripted Qwen <tool_call> comes back as tool_use */
    struct resp r = http(port_open, "POST", "/v1/messages", NULL,
                         "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL weather?\"}],"
                         ANTH_TOOLS "}");
    CHECK(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *j = body_json(&r);
    char blocks[1024];
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(!strcmp(blocks, "tool_use:get_weather({\"city\":\"Paris\"})|"), "content: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "tool_use"), "stop_reason: %s", r.body);
    char id[64];
    snprintf(id, sizeof id, "%s",
             json_string_value(json_object_get(json_array_get(json_object_get(j, "content"), 0), "id")) ?: "");
    json_decref(j);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(strstr(fake_last_tools, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{") &&
              strstr(fake_last_tools, "\"description\":\"Weather of a city\""),
          "tools: %s", fake_last_tools);
    CHECK(!fake_last.tool_required, "auto is not required");
    pthread_mutex_unlock(&fake_mu);

    /* text and two calls */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL2\"}]," ANTH_TOOLS "}");
    j = body_json(&r);
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(!strcmp(blocks, "text:I will check both.|tool_use:get_weather({\"city\":\"Paris\"})|"
                          "tool_use:get_time({\"tz\":\"CET\"})|"),
          "content: %s", r.body);
    json_decref(j);
    resp_free(&r);

    /* streamed: a tool_use block whose input comes as input_json_delta */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL2\"}],"
             ANTH_TOOLS "}");
    json_t *ev = anth_events(r.body);
    char names[2048], text[512];
    anth_sequence(ev, names, sizeof names, text, sizeof text);
    CHECK(strstr(names, "content_block_stop content_block_start content_block_delta content_block_stop "
                        "content_block_start content_block_delta content_block_stop message_delta message_stop ") != NULL,
          "sequence: %s", names);
    CHECK(!strcmp(text, "I will check both.{\"city\":\"Paris\"}{\"tz\":\"CET\"}"), "text: %s", text);
    size_t i;
    json_t *e;
    int tool_starts = 0;
    json_array_foreach(ev, i, e) {
        json_t *d = json_array_get(e, 1);
        json_t *cb = json_object_get(d, "content_block");
        if (!strcmp(json_string_value(json_object_get(cb, "type")) ?: "", "tool_use")) {
            tool_starts++;
            CHECK(json_integer_value(json_object_get(d, "index")) == tool_starts &&
                      !strncmp(json_string_value(json_object_get(cb, "id")) ?: "", "toolu_", 6) &&
                      json_is_object(json_object_get(cb, "input")),
                  "tool_use start: %s", r.body);
        }
        json_t *delta = json_object_get(d, "delta");
        if (json_object_get(delta, "partial_json"))
            CHECK(!strcmp(json_string_value(json_object_get(delta, "type")) ?: "", "input_json_delta"), "delta type");
        if (!strcmp(json_string_value(json_array_get(e, 0)) ?: "", "message_delta"))
            CHECK(!strcmp(json_string_value(json_object_get(delta, "stop_reason")) ?: "", "tool_use"), "stop: %s",
                  r.body);
    }
    CHECK(tool_starts == 2, "%d tool_use blocks", tool_starts);
    json_decref(ev);
    resp_free(&r);

    /* the follow-up: the assistant's tool_use and the user's tool_result become tool_calls and a tool message */
    char body[2048];
    snprintf(body, sizeof body,
             "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL weather?\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me check.\"},{\"type\":\"tool_use\","
             "\"id\":\"%s\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"%s\",\"content\":[{\"type\":"
             "\"text\",\"text\":\"sunny\"}]},{\"type\":\"text\",\"text\":\"and tomorrow?\"}]}]," ANTH_TOOLS "}",
             id, id);
    r = http(port_open, "POST", "/v1/messages", NULL, body);
    CHECK(r.status == 200, "follow-up: %d %s", r.status, r.body);
    j = body_json(&r);
    CHECK(!strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "max_tokens"), "follow-up: %s", r.body);
    json_decref(j);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(!strcmp(fake_last_msgs, "user:TOOLCALL weather?|assistant:Let me check.|tool:sunny|user:and tomorrow?|"),
          "messages '%s'", fake_last_msgs);
    char want[256];
    snprintf(want, sizeof want, "%s=get_weather({\"city\":\"Paris\"});<-%s;", id, id);
    CHECK(!strcmp(fake_last_calls, want), "calls '%s', want '%s'", fake_last_calls, want);
    pthread_mutex_unlock(&fake_mu);

    /* tool_choice: any = required, tool = a named function, none = no tools */
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL\"}]," ANTH_TOOLS
             ",\"tool_choice\":{\"type\":\"any\"}}");
    CHECK(r.status == 200, "any: %d %s", r.status, r.body);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tool_required && !fake_last_tool[0], "any not passed on as required");
    pthread_mutex_unlock(&fake_mu);
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL\"}]," ANTH_TOOLS
             ",\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_time\"}}");
    CHECK(r.status == 200, "tool: %d %s", r.status, r.body);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tool_required && !strcmp(fake_last_tool, "get_time"), "tool: '%s'", fake_last_tool);
    pthread_mutex_unlock(&fake_mu);
    r = http(port_open, "POST", "/v1/messages", NULL,
             "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"TOOLCALL\"}]," ANTH_TOOLS
             ",\"tool_choice\":{\"type\":\"none\"}}");
    j = body_json(&r);
    anth_blocks(j, blocks, sizeof blocks);
    CHECK(!strncmp(blocks, "text:<tool_call>", 16) &&
              !strcmp(json_string_value(json_object_get(j, "stop_reason")) ?: "", "end_turn"),
          "none: %s", r.body);
    json_decref(j);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(fake_last.tools == NULL && !fake_last.tool_required, "none: tools reached the backend");
    pthread_mutex_unlock(&fake_mu);
    EXPECT_ANTH_ERROR(port_open, "/v1/messages", NULL,
                      "{\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," ANTH_TOOLS
                      ",\"tool_choice\":{\"type\":\"tool\",\"name\":\"launch\"}}",
                      400, "invalid_request_error", "'launch', which is not in 'tools'");
}

static void anth_count_and_errors(void)
{
    /* count_tokens: the rendered prompt's tokens (the fake counts 5), nothing generated */
    int before = atomic_load(&fake_submitted);
    struct resp r = http(port_open, "POST", "/v1/messages/count_tokens", NULL,
                         "{\"model\":\"fake-model\",\"system\":\"s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         ANTH_TOOLS ",\"tool_choice\":{\"type\":\"any\"}}");
    CHECK(r.status == 200 && !strcmp(r.body, "{\"input_tokens\":5}"), "count: %d %s", r.status, r.body);
    resp_free(&r);
    pthread_mutex_lock(&fake_mu);
    CHECK(atomic_load(&fake_submitted) == before + 1, "one submit");
    CHECK((fake_last.set & PG_MAX_TOKENS) && fake_last.max_tokens == 0 && !fake_last.tool_required,
          "count_tokens generates nothing: max_tokens %d", fake_last.max_tokens);
    CHECK(!strcmp(fake_last_msgs, "system:s|user:hi|") && fake_last_tools[0], "count: messages '%s'", fake_last_msgs);
    pthread_mutex_unlock(&fake_mu);

    const char *msgs = "/v1/messages";
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
                      "invalid_request_error", "'max_tokens' is required");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                      400, "invalid_request_error", "'max_tokens' must be a positive integer");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5}", 400, "invalid_request_error",
                      "'messages' is required");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
                      400, "invalid_request_error", "must be 'user' or 'assistant'");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL,
                      "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
                      400, "invalid_request_error", "'image' are not supported");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL,
                      "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
                      "\"name\":\"f\",\"input\":{}}]}]}",
                      400, "invalid_request_error", "belongs to an assistant message");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL,
                      "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                      "\"web_search_20250305\",\"name\":\"web_search\"}]}",
                      400, "invalid_request_error", "'web_search_20250305' are not supported");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL,
                      "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":"
                      "\"sometimes\"}}",
                      400, "invalid_request_error", "not one of auto, any, tool, none");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                      "\"stop_sequences\":\"x\"}", 400, "invalid_request_error", "'stop_sequences' must be an array");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,", 400, "invalid_request_error", "invalid JSON");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL,
                      "{\"model\":\"other\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404,
                      "not_found_error", "model 'other' not found");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"QUEUE_FULL\"}]}",
                      429, "rate_limit_error", "queue is full");
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"TOO_LONG\"}]}",
                      400, "invalid_request_error", "does not fit the context");
    fake_ready = false;
    EXPECT_ANTH_ERROR(port_open, msgs, NULL, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 503,
                      "overloaded_error", "no worker");
    fake_ready = true;
    EXPECT_ANTH_ERROR(port_open, "/v1/messages/count_tokens", NULL, "{\"messages\":[]}", 400, "invalid_request_error",
                      "'messages' must not be empty");

    /* API keys: x-api-key as well as Authorization: Bearer; errors as Anthropic's */
    const char *body = "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    EXPECT_ANTH_ERROR(port_key, msgs, NULL, body, 401, "authentication_error", "missing API key");
    EXPECT_ANTH_ERROR(port_key, msgs, "x-api-key: wrong\r\n", body, 401, "authentication_error", "invalid API key");
    EXPECT_ANTH_ERROR(port_key, msgs, "x-api-key: sk-test-12\r\nanthropic-version: 2023-06-01\r\n", body, 401,
                      "authentication_error", "invalid API key");
    r = http(port_key, "POST", msgs, "x-api-key: sk-test-123\r\nanthropic-version: 2023-06-01\r\n", body);
    CHECK(r.status == 200 && strstr(r.body, "\"type\":\"message\""), "x-api-key: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_key, "POST", msgs, "Authorization: Bearer sk-test-123\r\n", body);
    CHECK(r.status == 200, "bearer: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_key, "POST", "/v1/chat/completions", "x-api-key: sk-test-123\r\n",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1}");
    CHECK(r.status == 200, "x-api-key on the OpenAI route: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(port_key, "POST", "/v1/messages/count_tokens", "x-api-key: sk-test-123\r\n",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    CHECK(r.status == 200 && strstr(r.body, "input_tokens"), "count with key: %d %s", r.status, r.body);
    resp_free(&r);
}

/* anthropic.c without HTTP: a reasoning model's <think> becomes a thinking block, whole and streamed. */
static void anth_unit(void)
{
    json_t *body = json_loads("{\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 0, NULL);
    struct oai_request rq;
    char param[64];
    struct err e;
    CHECK(anth_parse(body, false, &rq, param, sizeof param, &e) == 0, "parse: %s", e.msg);
    CHECK(rq.kind == OAI_CHAT && rq.gen.max_tokens == 9 && rq.think, "chat request with the reasoning split");
    struct anth_state *a = anth_state_new(&rq, "msg_1", "m");
    char *s = anth_response_body(a, "<think>\nhmm\n</think>\n\nHello", "stop", 0, 4, 6);
    CHECK(s && !strcmp(s, "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":"
                          "\"thinking\",\"thinking\":\"hmm\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"Hello\"}],"
                          "\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":4,"
                          "\"output_tokens\":6}}"),
          "whole: %s", s ? s : "(null)");
    free(s);
    char *buf = NULL;
    size_t len = 0;
    static const char *const pieces[] = {"<thi", "nk>\nhm", "m\n</think>\n\nHel", "lo"};
    for (size_t i = 0; i < 4; i++) {
        struct gw_event ev = {.kind = GW_EV_TOKEN, .token = (int32_t)i, .text = pieces[i]};
        CHECK(anth_sse_event(a, &ev, &buf, &len) == 0, "event %zu", i);
    }
    struct gw_event done = {.kind = GW_EV_DONE, .finish = "stop", .n_prompt = 4, .n_gen = 4};
    CHECK(anth_sse_event(a, &done, &buf, &len) == 0, "done");
    json_t *ev = anth_events(buf ? buf : "");
    char names[1024], text[256];
    anth_sequence(ev, names, sizeof names, text, sizeof text);
    CHECK(!strcmp(names, "message_start content_block_start content_block_delta content_block_delta content_block_stop "
                         "content_block_start content_block_delta content_block_delta content_block_stop message_delta "
                         "message_stop "),
          "sequence: %s", names);
    CHECK(!strcmp(text, "Hello"), "text '%s'", text);
    CHECK(strstr(buf, "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\"") &&
              strstr(buf, "\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}") &&
              strstr(buf, "\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"m\"}") &&
              strstr(buf, "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\""),
          "blocks: %s", buf);
    json_decref(ev);
    free(buf);
    anth_state_free(a);
    oai_request_free(&rq);
    json_decref(body);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl; /* both ends of the idle connections live in this process */
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct gw_config cfg;
    gw_config_default(&cfg);
    cfg.port = 0;
    cfg.max_body = 1 << 20;
    cfg.threads = 2;
    struct err e;
    if (gw_server_start(&srv_open, &cfg, &fake, &e)) {
        printf("not ok - server_start: %s\n", e.msg);
        return 1;
    }
    port_open = gw_server_port(srv_open);
    snprintf(cfg.api_key, sizeof cfg.api_key, "sk-test-123");
    snprintf(cfg.cors_origins, sizeof cfg.cors_origins, "http://ui.example, http://localhost:3000");
    if (gw_server_start(&srv_key, &cfg, &fake, &e)) {
        printf("not ok - server_start (key): %s\n", e.msg);
        return 1;
    }
    port_key = gw_server_port(srv_key);
    RUN(parse_unit);
    RUN(reasoning_content);
    RUN(parse_fuzz);
    RUN(health_and_models);
    RUN(chat_non_stream);
    RUN(chat_stream);
    RUN(completions);
    RUN(n_choices_seed_logprobs);
    RUN(bad_requests);
    RUN(response_format_parse);
    RUN(backend_errors);
    RUN(embeddings);
    RUN(embeddings_end_after_every_event);
    RUN(logit_bias_forms);
    RUN(limits);
    RUN(api_keys);
    RUN(cors);
    RUN(retry_after);
    RUN(strict_framing);
    RUN(port_in_use);
    RUN(header_deadline_and_per_ip);
    RUN(chat_fields);
    RUN(tool_calls_reply);
    RUN(tool_calls_streamed);
    RUN(anth_unit);
    RUN(anth_messages_text);
    RUN(anth_messages_stream);
    RUN(anth_tool_use);
    RUN(anth_count_and_errors);
    RUN(stream_failure_ends_stream);
    RUN(client_disconnect_cancels);
    RUN(stream_disconnect_is_499);
    RUN(idle_connections);
    RUN(concurrent_clients);
    RUN(tokenize_endpoints);
    RUN(metrics_text);
    RUN(drain_lets_requests_finish);
    gw_server_stop(srv_key);
    gw_server_stop(srv_open);
    CHECK_EXIT();
}
