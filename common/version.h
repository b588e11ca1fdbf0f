/* version.h — what every llm170 program says to --version: the release, the
 * commit it was built from and the backends built in. The release number
 * lives here and nowhere else (the daemon reports it to clients too). */
#ifndef LLM170_VERSION_H
#define LLM170_VERSION_H

#include <stdio.h>

#define LLM170_VERSION "0.1.0"

/* The short git commit of the build ("unknown" outside a git checkout). */
const char *version_commit(void);
/* Backends compiled in, space-separated: "cpu hip". `hip` loads its vendor
 * libraries with dlopen, so it is listed even where no GPU is present. */
const char *version_backends(void);
/* One line: "PROG 0.1.0 (commit abc1234; backends: cpu hip)". */
void version_print(FILE *f, const char *prog);

#endif
