/* cli.h — shared helpers of the llm170 command-line verbs.
 *
 * Conventions (system.md): errors are one line on stderr prefixed "llm170: ",
 * exit 1 for failures, 2 for bad usage; `--help` prints usage to stdout, exit 0. */
#ifndef LLM170_CLI_H
#define LLM170_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../worker/engine/engine.h"

#define EXIT_USAGE 2

/* Print "llm170: <fmt>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cli_error + a hint to --help; returns EXIT_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing: the whole string must be a number in range. */
bool cli_parse_int(const char *s, long lo, long hi, long *out);
bool cli_parse_float(const char *s, double *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* "1,2,3" (also spaces or brackets tolerated) → malloc'ed ids; false on junk. */
bool cli_parse_ids(const char *s, int32_t **ids, size_t *n);

/* Option scanning: when argv[*i] is `name` (or `name=value`), store its value
 * and advance; *missing is set when the value is absent. */
bool cli_opt(int argc, char **argv, int *i, const char *name, const char **val, bool *missing);

/* Read a whole file (or stdin for "-") into a malloc'ed NUL-terminated buffer. */
char *cli_read_file(const char *path, size_t *len, struct err *e);

/* Load a model, with progress on a terminal; prints the error and returns NULL on failure. */
struct model *cli_load_model(const char *path);

/* Parse --backend NAME. */
bool cli_parse_backend(const char *s, enum backend_kind *out);

/* Monotonic seconds. */
double cli_now(void);

/* The verbs. Each returns the process exit code. */
int cmd_infer(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_gguf_dump(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_diag(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_status(int argc, char **argv);

#endif
