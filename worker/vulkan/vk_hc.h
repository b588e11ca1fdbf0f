/* vk_hc.h — qwen4exp's hyper-connections on the vulkan backend (shared spec arch-qwen4exp.md §3.2–§3.3,
 * §3.7; the CPU's cpu_hc.c): the HC mix that stands in for a sublayer's RMSNorm, and the write-back of its
 * output into every stream. A token's residual is hc streams of n_embd (stream s at + s·n_embd). */
#ifndef LLM170_VK_HC_H
#define LLM170_VK_HC_H

#include "../../common/err.h"
#include "../model/model.h"
#include "vk_ops.h"

/* One mixer on the device: its matrices, and its norm weight's offset in the engine's vector buffer. */
struct vk_hc_mix {
    struct vk_mat down, up, inject; /* model.h shapes; inject absent for the output mixer */
    uint32_t norm;                  /* [hc·n_embd] at this offset */
};

/* The mixes' step scratch, B = n_batch rows. */
struct vk_hc {
    int hc, E, lr;
    struct vk_buf xn;   /* [B][hc·n_embd] per-stream normed input ⊙ norm weight */
    struct vk_buf lo;   /* [B][hc_lr] silu(down·xn / hc) */
    struct vk_buf g;    /* [B][hc·n_embd] up·lo */
    struct vk_buf j;    /* [B][hc] the last mix's write-back logits */
};

int vk_hc_init(struct vk_hc *h, struct vk_ops *o, int n_batch, const struct hparams *hp, uint64_t *bytes,
               struct err *e);
void vk_hc_free(struct vk_hc *h, struct vk_ops *o);
/* upload one mixer's matrices (the norm's offset is the caller's); *bytes += what was uploaded */
int vk_hc_mix_upload(struct vk_ops *o, struct vk_hc_mix *d, const struct hc_mix *m, uint64_t *bytes, struct err *e);
void vk_hc_mix_free(struct vk_ops *o, struct vk_hc_mix *d);
/* h rows [n][n_embd] = HCMix(x rows [n][hc·n_embd]); with an inject, its logits kept for vk_hc_combine */
int vk_hc_mix(struct vk_hc *h, struct vk_ops *o, const struct vk_hc_mix *m, const struct vk_buf *vecs,
              struct vk_view x, struct vk_view out, int n, float eps, struct err *e);
/* x[t] stream s += a[t] · 2·sigmoid(j[t][s] / hc), j from the last mix with an inject */
int vk_hc_combine(struct vk_hc *h, struct vk_ops *o, struct vk_view x, struct vk_view a, int n, struct err *e);

#endif
