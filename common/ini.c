/* ini.c — the config file reader (ini.h). */
#include "ini.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) { /* TOML-style quoting */
        s[n - 1] = 0;
        s++;
    }
    return s;
}

int ini_read(const char *path, bool required, ini_fn fn, void *ctx, struct err *e)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (!required && errno == ENOENT)
            return 0;
        return err_set(e, ERR_IO, "cannot open config '%s': %s", path, strerror(errno));
    }
    char buf[4096], section[64] = "";
    int line = 0, rc = 0;
    while (fgets(buf, sizeof buf, f)) {
        line++;
        /* a '#' after blank space starts a comment (a value may hold one elsewhere) */
        for (char *h = strchr(buf, '#'); h; h = strchr(h + 1, '#'))
            if (h == buf || h[-1] == ' ' || h[-1] == '\t') {
                *h = 0;
                break;
            }
        char *s = trim(buf);
        if (!*s || *s == ';')
            continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (!end) {
                rc = err_set(e, ERR_FORMAT, "%s:%d: unterminated section header", path, line);
                break;
            }
            *end = 0;
            snprintf(section, sizeof section, "%s", trim(s + 1));
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = err_set(e, ERR_FORMAT, "%s:%d: expected 'key = value'", path, line);
            break;
        }
        *eq = 0;
        if ((rc = fn(ctx, path, line, section, trim(s), trim(eq + 1), e)))
            break;
    }
    fclose(f);
    return rc;
}

void ini_default_path(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    buf[0] = 0;
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/llm170/llm170.conf", xdg);
    else if (home && *home)
        snprintf(buf, cap, "%s/.config/llm170/llm170.conf", home);
    if (buf[0] && access(buf, R_OK) == 0)
        return;
    snprintf(buf, cap, "/etc/llm170/llm170.conf");
    if (access(buf, R_OK) != 0)
        buf[0] = 0;
}

bool ini_is_daemon_section(const char *section)
{
    return !section[0] || !strcmp(section, "daemon") || !strcmp(section, "llm170d");
}
