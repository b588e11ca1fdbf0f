/* peer.h — who may talk to llm170d over its local socket.
 *
 * The client socket's file mode (0660) is the first gate; this is the
 * second, checked on every new connection from the peer's credentials
 * (SO_PEERCRED, through nng): root, the daemon's own user, members of an
 * allowed group (the daemon's own group, plus `allow_group`, by default the
 * group "llm170" when it exists), and the uids in `allow_uids`. A peer is a
 * member of a group when its primary gid is that group or its supplementary
 * groups (/proc/<pid>/status "Groups:") list it. Pure functions but for the
 * group-name and /proc look-ups, so the policy has a unit test. */
#ifndef LLM170_DAEMON_PEER_H
#define LLM170_DAEMON_PEER_H

#include <stdbool.h>
#include <sys/types.h>

#include "../common/err.h"

#define PEER_MAX_IDS 32

struct peer_policy {
    uid_t self_uid;
    uid_t uids[PEER_MAX_IDS]; /* allow_uids */
    int n_uids;
    gid_t gids[PEER_MAX_IDS]; /* the daemon's egid + allow_group */
    int n_gids;
};

/* allow_group: comma-separated group names or numbers ("" = "llm170" if that
 * group exists); allow_uids: comma-separated uids or user names. A name that
 * does not exist is ERR_INVALID (a typo must not silently lock users out, nor in). */
int peer_policy_init(struct peer_policy *p, uid_t self_uid, gid_t self_gid, const char *allow_group,
                     const char *allow_uids, struct err *e);

/* The decision for a peer with uid/gid and supplementary groups[n_groups]. */
bool peer_allowed(const struct peer_policy *p, uid_t uid, gid_t gid, const gid_t *groups, int n_groups);

/* The supplementary groups of process pid from /proc (at most cap); -1 when unreadable. */
int peer_proc_groups(pid_t pid, gid_t *out, int cap);

#endif
