/* ini.h — the one reader of llm170's config file (INI, or the TOML subset
 * `key = "value"` + [section]), shared by llm170d, llm170-gateway and the CLI
 * so that a key such as `[daemon] socket` means the same to all of them.
 *
 *   # comment            ; comment          key = value   # trailing comment
 *   [section]
 *
 * Keys before any section have section "" (llm170d's by convention). Values
 * are trimmed and one level of matching quotes is removed. */
#ifndef LLM170_INI_H
#define LLM170_INI_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Called for each `key = value`; a non-zero return stops the reading and
 * becomes ini_read's result (set e then). */
typedef int (*ini_fn)(void *ctx, const char *path, int line, const char *section, const char *key,
                      const char *val, struct err *e);

/* Read path; a missing file is 0 unless required. Syntax errors are ERR_FORMAT
 * naming the file and line. */
int ini_read(const char *path, bool required, ini_fn fn, void *ctx, struct err *e);

/* The config file to read when none is given: $XDG_CONFIG_HOME/llm170/llm170.conf
 * (else ~/.config/llm170/llm170.conf) when readable, else /etc/llm170/llm170.conf
 * when readable, else "". */
void ini_default_path(char *buf, size_t cap);

/* True for the section names whose keys are llm170d's ("", "daemon", "llm170d"). */
bool ini_is_daemon_section(const char *section);

#endif
