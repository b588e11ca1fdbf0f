/* snap.h — which snapshot of a sequence's recurrent state lives where.
 *
 * The hybrid engines (CPU: cpu_hybrid.c, GPU: hip_hybrid.c) keep a few snapshots of each
 * sequence's Gated DeltaNet state, so a sequence can be cut back or copied at a snapshot position.
 * They store the states differently (host floats, device buffers) but follow one rule for the slots,
 * kept here: a slot records the position its state belongs to (-1: empty) and when it was taken; a new
 * snapshot reuses the slot already at its position, else an empty one, else the oldest. */
#ifndef LLM170_SNAP_SLOTS_H
#define LLM170_SNAP_SLOTS_H

#include <stdint.h>

struct snap_slot {
    int pos;        /* position the state belongs to; -1 = empty */
    uint64_t stamp; /* when it was taken (a per-engine counter), for eviction */
};

/* The slots s[0..n) of one sequence. */
void snap_slots_clear(struct snap_slot *s, int n);
/* Index of the slot holding position pos, or -1. */
int snap_find(const struct snap_slot *s, int n, int pos);
/* The largest snapshot position ≤ pos, or 0 (the empty state) when there is none. */
int snap_restorable(const struct snap_slot *s, int n, int pos);
/* Empty every slot past pos (they no longer describe the cut sequence's cells). */
void snap_drop_after(struct snap_slot *s, int n, int pos);
/* Index of the slot a snapshot at pos goes to (n > 0). */
int snap_slot_for(const struct snap_slot *s, int n, int pos);
/* Record that slot s now holds position pos, taken at ++*clock. */
void snap_take(struct snap_slot *s, int pos, uint64_t *clock);

#endif
