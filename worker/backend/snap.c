/* snap.c — the slot rule of the hybrids' state snapshots (snap.h). */
#include "snap.h"

void snap_slots_clear(struct snap_slot *s, int n)
{
    for (int i = 0; i < n; i++)
        s[i] = (struct snap_slot){ .pos = -1, .stamp = 0 };
}

int snap_find(const struct snap_slot *s, int n, int pos)
{
    for (int i = 0; i < n; i++)
        if (s[i].pos == pos)
            return i;
    return -1;
}

int snap_restorable(const struct snap_slot *s, int n, int pos)
{
    int best = 0;
    for (int i = 0; i < n; i++)
        if (s[i].pos <= pos && s[i].pos > best)
            best = s[i].pos;
    return best;
}

void snap_drop_after(struct snap_slot *s, int n, int pos)
{
    for (int i = 0; i < n; i++)
        if (s[i].pos > pos)
            s[i].pos = -1;
}

int snap_slot_for(const struct snap_slot *s, int n, int pos)
{
    int at = snap_find(s, n, pos);
    if (at >= 0)
        return at;
    at = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].pos < 0)
            return i;
        if (s[i].stamp < s[at].stamp)
            at = i;
    }
    return at;
}

void snap_take(struct snap_slot *s, int pos, uint64_t *clock)
{
    s->pos = pos;
    s->stamp = ++*clock;
}
