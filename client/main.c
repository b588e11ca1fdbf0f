/* main.c — `llm170`: dispatch to the verbs (system.md, "Command line"). */
#include <stdio.h>
#include <string.h>

#include "../common/version.h"
#include "cli.h"

struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct verb VERBS[] = {
    { "infer", cmd_infer, "generate in-process, one JSON line per token" },
    { "tokenize", cmd_tokenize, "print the token ids of a text" },
    { "detokenize", cmd_detokenize, "print the text of token ids" },
    { "gguf-dump", cmd_gguf_dump, "show a GGUF file's metadata and tensors" },
    { "bench", cmd_bench, "measure prompt processing and generation speed" },
    { "diag", cmd_diag, "diagnostics: logits dump, chunked-prefill check" },
    { "serve", cmd_serve, "run the daemon, one worker and the HTTP gateway in the foreground" },
    { "run", cmd_run, "one completion through the daemon, streamed" },
    { "chat", cmd_chat, "interactive chat through the daemon" },
    { "ps", cmd_ps, "what the daemon runs: workers, devices, models, requests" },
    { "status", cmd_status, "same as ps" },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: llm170 COMMAND [options]   (llm170 COMMAND --help for details; llm170 --version)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        fprintf(f, "  %-12s %s\n", VERBS[i].name, VERBS[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        version_print(stdout, "llm170");
        return 0;
    }
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        if (!strcmp(argv[1], VERBS[i].name))
            return VERBS[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (try 'llm170 --help')", argv[1]);
    return EXIT_USAGE;
}
