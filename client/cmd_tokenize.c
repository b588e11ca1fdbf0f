/* cmd_tokenize.c — `llm170 tokenize` and `llm170 detokenize`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char *TOK_USAGE =
    "usage: llm170 tokenize --model M [--no-special] [--no-bos] [--text S | --file F]\n"
    "Reads stdin when neither --text nor --file is given. Prints [id, id, ...].\n"
    "  --no-special   special-token texts are tokenized as plain text (parse_special off)\n"
    "  --no-bos       do not add BOS/EOS (add_special off)\n";

static const char *DETOK_USAGE =
    "usage: llm170 detokenize --model M ID...\n"
    "IDs as separate arguments or comma-separated. Prints the text.\n"
    "  --special      render control tokens' text too\n";

/* Only the vocabulary is loaded (a vocab-only GGUF works too); the weights
 * stay untouched in the mapping. */
static struct tok_vocab *load_vocab(const char *path, struct gguf **g)
{
    struct err e;
    err_clear(&e);
    struct tok_vocab *v = NULL;
    if (gguf_open(g, path, &e) != 0) {
        if (e.code == ERR_IO && access(path, R_OK) != 0)
            cli_error("cannot open model '%s': %s", path, strerror(errno));
        else
            cli_error("%s", e.msg);
        return NULL;
    }
    if (tok_load(&v, *g, &e) != 0) {
        cli_error("%s: %s", path, e.msg);
        gguf_close(*g);
        *g = NULL;
        return NULL;
    }
    return v;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model_path = NULL, *text = NULL, *file = NULL, *v;
    bool missing = false, parse_special = true, add_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(TOK_USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--no-special")) {
            parse_special = false;
        } else if (!strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (cli_opt(argc, argv, &i, "--model", &v, &missing) ||
                   cli_opt(argc, argv, &i, "--text", &v, &missing) ||
                   cli_opt(argc, argv, &i, "--file", &v, &missing)) {
            if (missing)
                return cli_usage_error("tokenize", "%s needs a value", a);
            if (!strncmp(a, "--model", 7))
                model_path = v;
            else if (!strncmp(a, "--text", 6))
                text = v;
            else
                file = v;
        } else {
            return cli_usage_error("tokenize", "unknown option '%s'", a);
        }
    }
    if (!model_path)
        return cli_usage_error("tokenize", "--model is required");
    if (text && file)
        return cli_usage_error("tokenize", "--text and --file exclude each other");

    struct err e;
    err_clear(&e);
    char *buf = NULL;
    size_t len = 0;
    if (!text) {
        buf = cli_read_file(file ? file : "-", &len, &e);
        if (!buf) {
            cli_error("%s", e.msg);
            return 1;
        }
        text = buf;
    } else {
        len = strlen(text);
    }
    struct gguf *g = NULL;
    struct tok_vocab *vocab = load_vocab(model_path, &g);
    if (!vocab) {
        free(buf);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(vocab, text, len, add_special, parse_special, &ids, &n, &e);
    if (rc != 0) {
        cli_error("cannot tokenize: %s", e.msg);
    } else {
        fputc('[', stdout);
        for (size_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", ids[i]);
        fputs("]\n", stdout);
    }
    free(ids);
    free(buf);
    tok_free(vocab);
    gguf_close(g);
    return rc ? 1 : 0;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model_path = NULL, *v;
    bool missing = false, special = false;
    int32_t *ids = NULL;
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(DETOK_USAGE, stdout);
            free(ids);
            return 0;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (cli_opt(argc, argv, &i, "--model", &v, &missing)) {
            if (missing) {
                free(ids);
                return cli_usage_error("detokenize", "--model needs a value");
            }
            model_path = v;
        } else if (a[0] == '-' && a[1] == '-') {
            free(ids);
            return cli_usage_error("detokenize", "unknown option '%s'", a);
        } else {
            int32_t *more;
            size_t nm;
            if (!cli_parse_ids(a, &more, &nm)) {
                free(ids);
                return cli_usage_error("detokenize", "'%s' is not a token id list", a);
            }
            int32_t *all = realloc(ids, (n + nm + 1) * sizeof *all);
            if (!all) {
                free(more);
                free(ids);
                cli_error("out of memory");
                return 1;
            }
            ids = all;
            memcpy(ids + n, more, nm * sizeof *more);
            n += nm;
            free(more);
        }
    }
    if (!model_path) {
        free(ids);
        return cli_usage_error("detokenize", "--model is required");
    }
    struct gguf *g = NULL;
    struct tok_vocab *vocab = load_vocab(model_path, &g);
    if (!vocab) {
        free(ids);
        return 1;
    }
    int rc = 0;
    int32_t nv = tok_n_vocab(vocab);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= nv) {
            cli_error("token id %d is outside the vocabulary (%d tokens)", ids[i], nv);
            rc = 1;
            break;
        }
    if (!rc) {
        size_t len = 0;
        char *text = tok_detokenize(vocab, ids, n, special, &len);
        if (!text) {
            cli_error("out of memory");
            rc = 1;
        } else {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
            free(text);
        }
    }
    free(ids);
    tok_free(vocab);
    gguf_close(g);
    return rc;
}
