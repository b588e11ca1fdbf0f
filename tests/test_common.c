/* test_common.c — err and fp16 helpers. */
#include "../common/err.h"
#include "../common/fp16.h"
#include "../worker/backend/snap.h"
#include "../common/tpool.h"

#include <stdatomic.h>
#include <time.h>
#include "check.h"

static void err_messages(void)
{
    struct err e;
    err_clear(&e);
    CHECK_EQ_INT(e.code, ERR_OK);
    int rc = err_set(&e, ERR_FORMAT, "bad magic at offset %d", 0);
    CHECK_EQ_INT(rc, ERR_FORMAT);
    CHECK(!strcmp(e.msg, "bad magic at offset 0"), "msg '%s'", e.msg);
    err_prefix(&e, "cannot open '%s'", "x.gguf");
    CHECK(!strcmp(e.msg, "cannot open 'x.gguf': bad magic at offset 0"), "msg '%s'", e.msg);
    CHECK_EQ_INT(e.code, ERR_FORMAT);
}

static void fp16_roundtrip(void)
{
    /* every finite half converts to f32 and back unchanged */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads are only kept quiet */
        if (fp16_from_f32(fp16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* known values: 1.0, -2.0, max half, smallest subnormal, RNE tie to even */
    CHECK_EQ_INT(fp16_from_f32(1.0f), 0x3c00);
    CHECK_EQ_INT(fp16_from_f32(-2.0f), 0xc000);
    CHECK_EQ_INT(fp16_from_f32(65504.0f), 0x7bff);
    CHECK_EQ_INT(fp16_from_f32(65520.0f), 0x7c00);
    CHECK_EQ_INT(fp16_from_f32(5.9604645e-8f), 0x0001);
    CHECK_EQ_INT(fp16_from_f32(1.0f + 1.0f / 2048), 0x3c00);          /* tie → even (down) */
    CHECK_EQ_INT(fp16_from_f32(1.0f + 3.0f / 2048), 0x3c02);          /* tie → even (up) */
    CHECK_NEAR(fp16_to_f32(0x3555), 0.333251953125, 0);
    CHECK_EQ_INT(bf16_from_f32(1.00390625f), 0x3f80);                 /* tie → even */
    CHECK_EQ_INT(bf16_from_f32(1.01171875f), 0x3f82);
}

struct sum_ctx { int64_t hits[1000]; };
static void add_one(void *p, int64_t i, int worker)
{
    (void)worker;
    struct sum_ctx *c = p;
    c->hits[i]++;
}

static void threadpool_covers_all(void)
{
    struct tpool *tp = tpool_create(4);
    CHECK(tp != NULL, "create");
    static struct sum_ctx c;
    for (int rep = 0; rep < 50; rep++)
        tpool_run(tp, add_one, &c, 1000);
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += c.hits[i] != 50;
    CHECK_EQ_INT(bad, 0);
    tpool_destroy(tp);
}

/* Many short jobs, each with its own context on the stack: every item of
 * every job runs exactly once and only under its own job — workers that wake
 * late (after pauses long enough for them to sleep) must not claim items of
 * a job they did not see, nor hold up the caller. */
struct job_ctx { int64_t job; _Atomic int hits[8]; _Atomic int wrong; };
static void count_item(void *p, int64_t i, int worker)
{
    (void)worker;
    struct job_ctx *c = p;
    if (i < 0 || i >= 8)
        atomic_fetch_add(&c->wrong, 1);
    else
        atomic_fetch_add(&c->hits[i], 1);
}

static void threadpool_jobs_never_mix(void)
{
    struct tpool *tp = tpool_create(3);
    CHECK(tp != NULL, "create");
    int bad = 0;
    for (int64_t job = 0; job < 20000; job++) {
        struct job_ctx c = {.job = job};
        const int n = 2 + (int)(job % 7);
        tpool_run(tp, count_item, &c, n);
        for (int i = 0; i < 8; i++)
            bad += atomic_load(&c.hits[i]) != (i < n);
        bad += atomic_load(&c.wrong) != 0;
        if (job % 2000 == 1999) {
            struct timespec ts = {0, 3000000}; /* long enough for the workers to fall asleep */
            nanosleep(&ts, NULL);
        }
    }
    CHECK_EQ_INT(bad, 0);
    tpool_destroy(tp);
}

/* The hybrids' snapshot slots (worker/backend/snap.h): a snapshot reuses its position's slot, else an
 * empty one, else the oldest; a cut empties the slots past it; restorable is the largest position ≤. */
static void snap_slot_rule(void)
{
    struct snap_slot s[3];
    uint64_t clock = 0;
    snap_slots_clear(s, 3);
    CHECK_EQ_INT(snap_find(s, 3, 0), -1);
    CHECK_EQ_INT(snap_restorable(s, 3, 100), 0);
    const int first[] = { 10, 20, 30 };
    for (int k = 0; k < 3; k++) { /* empty slots first, in order */
        int i = snap_slot_for(s, 3, first[k]);
        CHECK_EQ_INT(i, k);
        snap_take(&s[i], first[k], &clock);
    }
    CHECK_EQ_INT(snap_slot_for(s, 3, 20), 1);   /* the slot already at 20 */
    snap_take(&s[1], 20, &clock);              /* retaken: now the newest */
    CHECK_EQ_INT(snap_slot_for(s, 3, 40), 0);   /* full: the oldest (10) */
    snap_take(&s[0], 40, &clock);
    CHECK_EQ_INT(snap_slot_for(s, 3, 50), 2);   /* then 30, older than the retaken 20 */
    CHECK_EQ_INT(snap_restorable(s, 3, 35), 30);
    CHECK_EQ_INT(snap_restorable(s, 3, 19), 0);
    CHECK_EQ_INT(snap_find(s, 3, 40), 0);
    snap_drop_after(s, 3, 25);                  /* 40 and 30 go, 20 stays */
    CHECK_EQ_INT(snap_find(s, 3, 40), -1);
    CHECK_EQ_INT(snap_find(s, 3, 30), -1);
    CHECK_EQ_INT(snap_find(s, 3, 20), 1);
    CHECK_EQ_INT(snap_restorable(s, 3, 100), 20);
    CHECK_EQ_INT(snap_slot_for(s, 3, 60), 0);   /* an emptied slot before any eviction */
}

int main(void)
{
    RUN(err_messages);
    RUN(fp16_roundtrip);
    RUN(threadpool_covers_all);
    RUN(threadpool_jobs_never_mix);
    RUN(snap_slot_rule);
    CHECK_EXIT();
}
