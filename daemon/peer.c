/* peer.c — the client socket's access policy (peer.h). */
#include "peer.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number, or a name looked up with lookup (getgrnam / getpwnam). */
static int parse_id(const char *tok, bool group, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(tok, &end, 10);
    if (!errno && end != tok && !*end && v < 0xFFFFFFFFul) {
        *out = (unsigned)v;
        return 0;
    }
    if (group) {
        struct group *g = getgrnam(tok);
        if (!g)
            return -1;
        *out = g->gr_gid;
    } else {
        struct passwd *pw = getpwnam(tok);
        if (!pw)
            return -1;
        *out = pw->pw_uid;
    }
    return 0;
}

static int parse_list(const char *list, bool group, unsigned *ids, int *n, const char *key, struct err *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (*n >= PEER_MAX_IDS)
            return err_set(e, ERR_RANGE, "%s: more than %d entries", key, PEER_MAX_IDS);
        if (parse_id(tok, group, &ids[*n]))
            return err_set(e, ERR_INVALID, "%s: no %s '%s' on this system", key, group ? "group" : "user", tok);
        (*n)++;
    }
    return 0;
}

int peer_policy_init(struct peer_policy *p, uid_t self_uid, gid_t self_gid, const char *allow_group,
                     const char *allow_uids, struct err *e)
{
    memset(p, 0, sizeof *p);
    p->self_uid = self_uid;
    p->gids[p->n_gids++] = self_gid;
    unsigned ids[PEER_MAX_IDS];
    int n = 0, rc;
    if (allow_group && *allow_group) {
        if ((rc = parse_list(allow_group, true, ids, &n, "allow_group", e)))
            return rc;
    } else {
        struct group *g = getgrnam("llm170");
        if (g)
            ids[n++] = g->gr_gid;
    }
    for (int i = 0; i < n && p->n_gids < PEER_MAX_IDS; i++)
        p->gids[p->n_gids++] = ids[i];
    n = 0;
    if (allow_uids && *allow_uids && (rc = parse_list(allow_uids, false, ids, &n, "allow_uids", e)))
        return rc;
    for (int i = 0; i < n; i++)
        p->uids[p->n_uids++] = ids[i];
    return 0;
}

bool peer_allowed(const struct peer_policy *p, uid_t uid, gid_t gid, const gid_t *groups, int n_groups)
{
    if (uid == 0 || uid == p->self_uid)
        return true;
    for (int i = 0; i < p->n_uids; i++)
        if (p->uids[i] == uid)
            return true;
    for (int i = 0; i < p->n_gids; i++) {
        if (p->gids[i] == gid)
            return true;
        for (int k = 0; k < n_groups; k++)
            if (groups[k] == p->gids[i])
                return true;
    }
    return false;
}

int peer_proc_groups(pid_t pid, gid_t *out, int cap)
{
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Groups:", 7))
            continue;
        n = 0;
        char *s = line + 7, *end;
        for (;;) {
            errno = 0;
            unsigned long v = strtoul(s, &end, 10);
            if (end == s || errno || n >= cap)
                break;
            out[n++] = (gid_t)v;
            s = end;
        }
        break;
    }
    fclose(f);
    return n;
}
