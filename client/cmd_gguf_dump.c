/* cmd_gguf_dump.c — `llm170 gguf-dump`: metadata and tensor table of a GGUF. */
#include <stdio.h>
#include <string.h>

#include "../worker/gguf/gguf.h"
#include "../worker/gguf/gguf_dump.h"
#include "cli.h"

static const char *USAGE =
    "usage: llm170 gguf-dump [--meta-only] [--limit N] MODEL.gguf\n"
    "  --meta-only   keys only, no tensor table\n"
    "  --limit N     show at most N elements of each array (default 16)\n";

int cmd_gguf_dump(int argc, char **argv)
{
    const char *path = NULL, *v;
    bool meta_only = false, missing = false;
    long limit = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--meta-only")) {
            meta_only = true;
        } else if (cli_opt(argc, argv, &i, "--limit", &v, &missing)) {
            if (missing || !cli_parse_int(v, 0, 1L << 30, &limit))
                return cli_usage_error("gguf-dump", "--limit wants a count");
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_usage_error("gguf-dump", "unknown option '%s'", a);
        } else if (path) {
            return cli_usage_error("gguf-dump", "one model file at a time");
        } else {
            path = a;
        }
    }
    if (!path)
        return cli_usage_error("gguf-dump", "give a GGUF file");
    struct err e;
    err_clear(&e);
    struct gguf *g = NULL;
    if (gguf_open(&g, path, &e) != 0) {
        cli_error("%s", e.msg);
        return 1;
    }
    int rc = gguf_dump(stdout, g, meta_only, (int)limit);
    gguf_close(g);
    return rc ? 1 : 0;
}
