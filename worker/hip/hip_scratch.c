/* hip_scratch.c — the `hip` engine's step buffers, sized (hip_scratch.h). */
#include "hip_scratch.h"

#include <string.h>

void hip_scratch_plan(const struct model *m, const struct engine_params *p, struct hip_scratch *s)
{
    const struct hparams *hp = &m->hp;
    int nqm = 0, nkvm = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const int nq = m->layers[il].n_head * hp->head_dim, nkv = m->layers[il].n_head_kv * hp->head_dim;
        nqm = nq > nqm ? nq : nqm;
        nkvm = nkv > nkvm ? nkv : nkvm;
    }
    const size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab;
    const size_t X = (size_t)hp->n_expert, K = (size_t)(hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    memset(s, 0, sizeof *s);
    s->nq_max = nqm;
    s->nkv_max = nkvm;
    s->W = nqm + 2 * nkvm;
    s->F = hp->n_ff_max > hp->n_ff_exp ? hp->n_ff_max : hp->n_ff_exp;
    s->Kq = X ? (int)K : 1;
    const size_t F = (size_t)s->F, FK = X ? F * K : F, KS = HIP_GEMV_MAX * (size_t)s->Kq;
    size_t qmax = E > F ? E : F;
    if ((size_t)nqm > qmax)
        qmax = (size_t)nqm;
    size_t *b = s->bytes;
    b[HIP_SCR_IO] = 4 * B * sizeof(int32_t) + B * (size_t)hp->n_rot * sizeof(float);
    b[HIP_SCR_X] = B * E * 4;
    b[HIP_SCR_H] = B * E * 4;
    b[HIP_SCR_QKV] = B * (size_t)s->W * 4;
    b[HIP_SCR_O] = B * (size_t)nqm * 4;
    b[HIP_SCR_FG] = B * FK * 4;
    b[HIP_SCR_FU] = B * FK * 4;
    b[HIP_SCR_LOGITS] = B * V * 4;
    b[HIP_SCR_PART] = (size_t)HIP_SPLIT_TOKENS * (size_t)hp->n_head_max * HIP_DEC_SPLIT_MAX(hp->head_dim) *
                          ((size_t)hp->head_dim + 2) * 4;
    b[HIP_SCR_RL] = B * (X ? X : 1) * 4;
    b[HIP_SCR_SEL] = B * K * 4;
    b[HIP_SCR_SW] = B * K * 4;
    b[HIP_SCR_EY] = X ? B * K * E * 4 : 4;
    b[HIP_SCR_AMAX] = B * 4;
    b[HIP_SCR_AMX] = B * (2 * HIP_AMAX_SLICES + 1) * 4;
    b[HIP_SCR_XQ] = B * K * qmax;
    b[HIP_SCR_XQD] = B * K * (qmax / 32 + 1) * 8;
    b[HIP_SCR_FQ] = KS * F;
    b[HIP_SCR_FQD] = KS * (F / 32 + 1) * 8;
    b[HIP_SCR_FCNT] = KS * (F / 32 + 1) * 4;
    b[HIP_SCR_HQ] = HIP_GEMV_MAX * E;
    b[HIP_SCR_HQD] = HIP_GEMV_MAX * (E / 32) * 8;
    b[HIP_SCR_HSP] = HIP_GEMV_MAX * (E / 32) * 4;
    b[HIP_SCR_NCNT] = HIP_GEMV_MAX * (E / 32 + 1) * 4;
    b[HIP_SCR_ACNT] = (size_t)HIP_SPLIT_TOKENS * (size_t)hp->n_head_max * 4;
    b[HIP_SCR_TOPK] = HIP_TOPK_BYTES(B, (size_t)hp->n_vocab);
    b[HIP_SCR_GRP] = X ? (HIP_GRP_MAP(B * K, X) + B * K) * 4 : 4;
    /* a tensor-core GEMM's activations as f16 and their row scales: B rows of any product's input width,
     * or the MoE down's B·K pair rows of n_ff_exp; none where every batch takes the GEMVs — up to
     * HIP_TOKEN_GEMV_MAX tokens, since weights without a multi-token GEMV (f16, iq4_xs) take the GEMM
     * from there on (a 16-token batch on f16 weights failed: "beyond its f16 buffer") */
    size_t kx = qmax, rx = B;
    const size_t vd = (size_t)hp->n_v_heads * (size_t)hp->d_state, fsh = (size_t)hp->n_ff_shexp;
    kx = vd > kx ? vd : kx;
    kx = fsh > kx ? fsh : kx;
    size_t xh = rx * kx;
    if (X && B * K * (size_t)hp->n_ff_exp > xh)
        xh = B * K * (size_t)hp->n_ff_exp;
    if (X && B * K > rx)
        rx = B * K;
    const bool mma = B > HIP_TOKEN_GEMV_MAX;
    b[HIP_SCR_XSC] = mma ? rx * 4 : 4;
    b[HIP_SCR_XH] = mma ? xh * 2 : 4;
    b[HIP_SCR_XF] = 2 * 8 * (qmax + 64);
    b[HIP_SCR_XFD] = 2 * (qmax / 32 + 2) * 8 * 8;
}

uint64_t hip_scratch_bytes(const struct model *m, const struct engine_params *p)
{
    struct hip_scratch s;
    hip_scratch_plan(m, p, &s);
    uint64_t t = 0;
    for (int i = 0; i < HIP_SCR_COUNT; i++)
        t += s.bytes[i];
    return t;
}
