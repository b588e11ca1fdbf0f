/* fake_gateway.c — the gateway's HTTP layer over the test double of
 * tests/fake_backend.h, as a server for client-side tests
 * (tests/test_gateway_sdk.sh runs the OpenAI SDK against it). Not a product:
 * llm170-gateway talks to llm170d.
 *   fake_gateway [--api-key K] [--timeout S] [--max-connections N] [--max-conns-per-ip N (default 0)]
 *                [--header-timeout S]
 * prints "port N" (and "max_connections N", the limit in force) once
 * listening, runs until stdin closes */
#include <signal.h>

#include "../../gateway/http.c"
#include "../../gateway/metrics.c"
#include "../../gateway/oai.c"
#include "../../gateway/embed.c"
#include "../../gateway/anthropic.c"
#include "../fake_backend.h"

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    struct gw_config cfg;
    gw_config_default(&cfg);
    cfg.port = 0;
    cfg.max_per_ip = 0; /* every test client comes from 127.0.0.1 (10 000 of them in test_idle_conns) */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--api-key"))
            snprintf(cfg.api_key, sizeof cfg.api_key, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--timeout"))
            cfg.timeout_s = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-conns-per-ip"))
            cfg.max_per_ip = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--header-timeout"))
            cfg.header_timeout_s = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-connections"))
            cfg.max_connections = (unsigned)atoi(argv[++i]);
    struct gw_server *s;
    struct err e;
    if (gw_server_start(&s, &cfg, &fake, &e)) {
        fprintf(stderr, "fake_gateway: %s\n", e.msg);
        return 1;
    }
    printf("port %d\nmax_connections %u\n", gw_server_port(s), gw_server_max_connections(s));
    fflush(stdout);
    char buf[256];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    gw_server_stop(s);
    return 0;
}
