/* ple.c — PLE's n-gram rows (ple.h). */
#include "ple.h"

#include <stdbool.h>

void ple_gather(const struct ple_hash *h, const int *hist, int pos, int token, float *out)
{
    uint64_t c[8];
    c[0] = (uint64_t)token;
    bool cut = false;
    for (int s = 1; s < h->ngram; s++) {
        if (!cut && (pos - s < 0 || hist[pos - s] == h->eos))
            cut = true;
        c[s] = (uint64_t)(cut ? h->eos : hist[pos - s]);
    }
    for (int nord = 2; nord <= h->ngram; nord++) {
        uint64_t mix = 0;
        for (int i = 0; i < nord; i++)
            mix ^= c[i] * h->mult[i]; /* wrapping 64-bit, as the reference */
        for (int g = 0; g < h->heads_per_ngram; g++) {
            const int hd = (nord - 2) * h->heads_per_ngram + g;
            const uint64_t row = mix % h->vocab[hd] + h->off[hd];
            dequant_row(h->type, (const char *)h->table + (size_t)row * h->row_bytes, out + (size_t)hd * h->d_ple,
                        h->d_ple);
        }
    }
}
