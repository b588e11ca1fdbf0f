/* test_gguf.c — GGUF reader: the shared stories260K model against the facts
 * in ../shared/data/models/PROVENANCE.md. */
#include "../worker/gguf.h"
#include "check.h"

static void stories260k_facts(void)
{
    const char *dir = check_shared_dir();
    if (!dir)
        SKIP("../shared/data not present");
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        SKIP("stories260K.gguf not present");
    fclose(f);
    struct gguf *g;
    struct err e;
    int rc = gguf_open(&g, path, &e);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        printf("#   %s\n", e.msg);
        return;
    }
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->n_kv, 19);
    CHECK_EQ_INT(g->n_tensors, 48);
    CHECK_EQ_INT(g->alignment, 32);
    CHECK_EQ_INT(g->parts[0].data_start, 14176);
    gguf_close(g);
}

int main(void)
{
    RUN(stories260k_facts);
    CHECK_EXIT();
}
