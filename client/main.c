/* llm170 — command-line entry point (placeholder until the verbs land). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: llm170 COMMAND [options]\n");
        return 0;
    }
    fprintf(stderr, "llm170: no command given (try --help)\n");
    return 2;
}
