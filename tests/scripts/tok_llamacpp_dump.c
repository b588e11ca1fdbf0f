/* tok_llamacpp_dump.c — print llama.cpp's own answers for one vocabulary in
 * the golden format test_tokenizer reads (tests/golden/tok_llamacpp_*.txt):
 * the EOG set, a hash of every token's piece (special off and on), the ids
 * of each input (add_special+parse_special, then parse_special only) and
 * llama_detokenize of the first id list with remove_special/unparse_special
 * off and on. With --unicode: the category table of every codepoint. Built and run by tok_llamacpp_goldens.sh against the llama.cpp
 * CPU libraries of npm node-llama-cpp 3.21.1 (llama.cpp 80fb11a) and the
 * oracle's hand-written API declarations (tests/oracle/llama_api.h); it is a
 * test-data generator, never part of the build. */
#include "llama_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's unicode_cpt_flags_from_cpt (C++; its 2-byte flag struct comes back in a register) */
uint16_t unicode_cpt_flags_raw(uint32_t cp) __asm__("_Z26unicode_cpt_flags_from_cptj");

/* Category runs: "<first codepoint hex> <mask>" whenever the mask changes, mask bits as
 * test_tokenizer reads them: 1 whitespace, 2 letter, 4 number, 8 mark, 16 punctuation,
 * 32 symbol, 64 other (undefined, separator or control). */
static int dump_unicode(void)
{
    printf("# llama.cpp 80fb11a (npm node-llama-cpp 3.21.1) unicode_cpt_flags_from_cpt, written by "
           "tests/scripts/tok_llamacpp_goldens.sh\n");
    int prev = -1;
    for (uint32_t cp = 0; cp <= 0x110000; cp++) {
        unsigned f = unicode_cpt_flags_raw(cp), m = 0;
        if (f & 0x100) m |= 1;
        if (f & 0x004) m |= 2;
        if (f & 0x002) m |= 4;
        if (f & 0x010) m |= 8;
        if (f & 0x020) m |= 16;
        if (f & 0x040) m |= 32;
        if (f & 0x089) m |= 64;
        if ((int)m != prev)
            printf("%06X %u\n", cp, m);
        prev = (int)m;
    }
    return 0;
}

int32_t llama_detokenize(const struct llama_vocab *vocab, const llama_token *tokens, int32_t n_tokens, char *text,
                         int32_t text_len_max, bool remove_special, bool unparse_special);

static void quiet(int32_t level, const char *text, void *user)
{
    (void)level; (void)text; (void)user;
}

static uint64_t g_h = 1469598103934665603ull;
static void hash(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        g_h ^= (unsigned char)s[i];
        g_h *= 1099511628211ull;
    }
}

static int hexs(char *out, const char *s, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += sprintf(out + k, "%02x", (unsigned char)s[i]);
    if (!n)
        out[k++] = '-';
    out[k] = 0;
    return k;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--unicode"))
        return dump_unicode();
    if (argc < 5) {
        fprintf(stderr, "usage: tok_llamacpp_dump CPU_BACKEND.so NAME VOCAB.gguf INPUT... | --unicode\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    ggml_log_set(quiet, NULL);
    if (!ggml_backend_load(argv[1])) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    mp.n_gpu_layers = 0;
    struct llama_model *m = llama_model_load_from_file(argv[3], mp);
    if (!m) {
        fprintf(stderr, "cannot load %s\n", argv[3]);
        return 1;
    }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(v);
    static char buf[1 << 20], hx[(1 << 21) + 4], hx0[(1 << 21) + 4];
    printf("# llama.cpp 80fb11a (npm node-llama-cpp 3.21.1) on %s, written by tests/scripts/tok_llamacpp_goldens.sh\n",
           strrchr(argv[3], '/') ? strrchr(argv[3], '/') + 1 : argv[3]);
    printf("vocab %s\neog", argv[2]);
    for (int i = 0; i < nv; i++)
        if (llama_vocab_is_eog(v, i))
            printf(" %d", i);
    printf("\n");
    /* pieces: FNV-1a 64 over the lines "<id> <hex special=0> <hex special=1>\n" */
    for (int i = 0; i < nv; i++) {
        int n0 = llama_token_to_piece(v, i, buf, sizeof buf, 0, false);
        int k = sprintf(hx, "%d ", i);
        k += hexs(hx + k, buf, n0 < 0 ? 0 : n0);
        int n1 = llama_token_to_piece(v, i, buf, sizeof buf, 0, true);
        hx[k++] = ' ';
        k += hexs(hx + k, buf, n1 < 0 ? 0 : n1);
        hx[k++] = '\n';
        hash(hx, (size_t)k);
    }
    printf("pieces_fnv64 %016llx\n", (unsigned long long)g_h);
    for (int f = 4; f < argc; f++) {
        FILE *fp = fopen(argv[f], "rb");
        if (!fp)
            return 1;
        fseek(fp, 0, SEEK_END);
        long len = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *t = malloc((size_t)len + 1);
        if (fread(t, 1, (size_t)len, fp) != (size_t)len)
            return 1;
        fclose(fp);
        const char *name = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
        static llama_token ids[2][1 << 16];
        int n[2];
        for (int mode = 0; mode < 2; mode++) {
            n[mode] = llama_tokenize(v, t, (int32_t)len, ids[mode], 1 << 16, mode == 0, true);
            printf("ids %s %d", name, mode);
            for (int i = 0; i < n[mode]; i++)
                printf(" %d", ids[mode][i]);
            printf("\n");
        }
        for (int c = 0; c < 4; c++) {
            int rs = c & 1, us = c >> 1;
            int k = llama_detokenize(v, ids[0], n[0], buf, sizeof buf, rs, us);
            hexs(hx, buf, k < 0 ? 0 : k);
            if (c == 0)
                strcpy(hx0, hx);
            printf("detok %s %d %d %s\n", name, rs, us, c && !strcmp(hx, hx0) ? "=" : hx);
        }
        free(t);
    }
    llama_model_free(m);
    return 0;
}
