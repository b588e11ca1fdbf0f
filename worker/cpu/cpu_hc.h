/* cpu_hc.h — qwen4exp's hyper-connections on the CPU (shared spec
 * arch-qwen4exp.md §3.2–§3.3, §3.7). The residual of a token is hc streams
 * of n_embd, stream-major ([hc][n_embd]); a sublayer reads them through an
 * HC mix (per-stream RMSNorm, a low-rank sigmoid gate, the mean over the
 * streams) instead of an RMSNorm, and its output goes back into every
 * stream with the weight 2·sigmoid(j_s / hc) the same mix computed. */
#ifndef LLM170_CPU_HC_H
#define LLM170_CPU_HC_H

#include "../../common/err.h"
#include "../../common/tpool.h"
#include "../model/model.h"

struct cpu_hc;

/* mm(mm_ctx, w, X, n, Y): the engine's Y[n][ne1] = X[n][ne0]·wᵀ. Scratch for n_batch rows. */
typedef void (*cpu_hc_mm_fn)(void *ctx, const struct wt *w, const float *X, int n, float *Y);
int cpu_hc_create(struct cpu_hc **out, const struct model *m, int n_batch, struct tpool *tp, cpu_hc_mm_fn mm,
                  void *mm_ctx, struct err *e);
void cpu_hc_free(struct cpu_hc *hc);
uint64_t cpu_hc_bytes(const struct cpu_hc *hc); /* scratch allocated */

/* h[n][n_embd] = HCMix(X[n][hc·n_embd]); with mix->inject, the write-back logits j are kept for
 * cpu_hc_combine. */
void cpu_hc_mix(struct cpu_hc *hc, const struct hc_mix *mix, const float *X, int n, float *h);
/* x[t] stream s += 2·sigmoid(j[t][s] / hc) · a[t] for the n rows of the last cpu_hc_mix. */
void cpu_hc_combine(struct cpu_hc *hc, float *x, const float *a, int n);

#endif
