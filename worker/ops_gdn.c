/* ops_gdn.c — Gated DeltaNet ops (see ops_gdn.h). */
#include "ops_gdn.h"

#include <math.h>
#include <string.h>

#include "ops.h"

void gdn_l2_norm(float *x, int n, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float nrm = sqrtf((float)sum);
    const float scale = 1.0f / (nrm > eps ? nrm : eps);
    for (int i = 0; i < n; i++)
        x[i] *= scale;
}

void gdn_conv(const float *in, size_t in_stride, float *out, size_t out_stride, const int *rows, int T,
              const float *w, float *state, int d_conv, int c0, int c1)
{
    const int ns = d_conv - 1;
    for (int c = c0; c < c1; c++) {
        const float *wc = w + (size_t)c * (size_t)d_conv;
        float *st = state + (size_t)c * (size_t)ns;
        for (int t = 0; t < T; t++) {
            const size_t r = (size_t)rows[t];
            const float xt = in[r * in_stride + (size_t)c];
            float sum = 0.0f; /* taps oldest first, as ggml_ssm_conv */
            for (int k = 0; k < ns; k++)
                sum += st[k] * wc[k];
            sum += xt * wc[ns];
            out[r * out_stride + (size_t)c] = ops_silu(sum);
            if (ns > 0) {
                memmove(st, st + 1, sizeof(float) * (size_t)(ns - 1));
                st[ns - 1] = xt;
            }
        }
    }
}

void gdn_recurrent(const struct gdn_head *h, const int *rows, int T, float *S)
{
    const int dk = h->d_k, dv = h->d_v;
    for (int t = 0; t < T; t++) {
        const size_t r = (size_t)rows[t];
        const float *q = h->Q + r * h->qk_stride, *k = h->K + r * h->qk_stride, *v = h->V + r * h->v_stride;
        const float beta = h->beta[r * h->gate_stride];
        const float decay = expf(h->gdecay[r * h->gate_stride]);
        float *o = h->O + r * h->o_stride;
        for (int b = 0; b < dv; b++) {
            float *s = S + (size_t)b * (size_t)dk;
            float u = 0.0f;
            for (int a = 0; a < dk; a++) {
                s[a] *= decay;
                u += s[a] * k[a];
            }
            const float d = (v[b] - u) * beta;
            float y = 0.0f;
            for (int a = 0; a < dk; a++) {
                s[a] += k[a] * d;
                y += s[a] * q[a];
            }
            o[b] = y * h->scale;
        }
    }
}

size_t gdn_chunk_work(int d_k, int d_v)
{
    const size_t C = GDN_CHUNK, dk = (size_t)d_k, dv = (size_t)d_v;
    /* Sd, kk, qq, Sk, Sq, delta, KK, QK, G */
    return dv * dk + 2 * C * dk + 3 * C * dv + 2 * C * C + C;
}

void gdn_chunked(const struct gdn_head *h, const int *rows, int T, float *S, double *work)
{
    const int dk = h->d_k, dv = h->d_v, C = GDN_CHUNK;
    double *Sd = work;                              /* [dv][dk] state */
    double *kk = Sd + (size_t)dv * dk;              /* [C][dk] keys of the chunk */
    double *qq = kk + (size_t)C * dk;               /* [C][dk] queries */
    double *Sk = qq + (size_t)C * dk;               /* [C][dv] Sᵀk_i of the incoming state */
    double *Sq = Sk + (size_t)C * dv;               /* [C][dv] Sᵀq_i */
    double *dl = Sq + (size_t)C * dv;               /* [C][dv] δ_i */
    double *KK = dl + (size_t)C * dv;               /* [C][C] k_i·k_m, m < i */
    double *QK = KK + (size_t)C * C;                /* [C][C] q_i·k_m, m ≤ i */
    double *G = QK + (size_t)C * C;                 /* [C] inclusive cumulative log decay */
    for (size_t i = 0; i < (size_t)dv * dk; i++)
        Sd[i] = S[i];

    for (int c0 = 0; c0 < T; c0 += C) {
        const int L = T - c0 < C ? T - c0 : C;
        double acc = 0.0;
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            const float *q = h->Q + r * h->qk_stride, *k = h->K + r * h->qk_stride;
            for (int a = 0; a < dk; a++) {
                kk[(size_t)i * dk + a] = k[a];
                qq[(size_t)i * dk + a] = q[a];
            }
            acc += (double)h->gdecay[r * h->gate_stride];
            G[i] = acc;
        }
        /* incoming-state terms */
        for (int i = 0; i < L; i++) {
            const double *ki = kk + (size_t)i * dk, *qi = qq + (size_t)i * dk;
            for (int b = 0; b < dv; b++) {
                const double *s = Sd + (size_t)b * dk;
                double u = 0.0, y = 0.0;
                for (int a = 0; a < dk; a++) {
                    u += s[a] * ki[a];
                    y += s[a] * qi[a];
                }
                Sk[(size_t)i * dv + b] = u;
                Sq[(size_t)i * dv + b] = y;
            }
        }
        for (int i = 0; i < L; i++) {
            const double *ki = kk + (size_t)i * dk, *qi = qq + (size_t)i * dk;
            for (int m = 0; m <= i; m++) {
                const double *km = kk + (size_t)m * dk;
                double x = 0.0, y = 0.0;
                for (int a = 0; a < dk; a++) {
                    x += ki[a] * km[a];
                    y += qi[a] * km[a];
                }
                KK[(size_t)i * C + m] = x;
                QK[(size_t)i * C + m] = y;
            }
        }
        /* δ by forward substitution of (I + M) δ = β (v − e^G Sᵀk), M[i][m] = β_i (k_i·k_m) e^{G_i−G_m} */
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            const float *v = h->V + r * h->v_stride;
            const double beta = h->beta[r * h->gate_stride], eg = exp(G[i]);
            double *di = dl + (size_t)i * dv;
            for (int b = 0; b < dv; b++)
                di[b] = beta * ((double)v[b] - eg * Sk[(size_t)i * dv + b]);
            for (int m = 0; m < i; m++) {
                const double coef = beta * KK[(size_t)i * C + m] * exp(G[i] - G[m]);
                const double *dm = dl + (size_t)m * dv;
                for (int b = 0; b < dv; b++)
                    di[b] -= coef * dm[b];
            }
        }
        /* outputs with the state after each token */
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            float *o = h->O + r * h->o_stride;
            const double eg = exp(G[i]);
            double *y = Sk + (size_t)i * dv; /* Sᵀk_i is spent; reuse its row */
            for (int b = 0; b < dv; b++)
                y[b] = eg * Sq[(size_t)i * dv + b];
            for (int m = 0; m <= i; m++) {
                const double coef = QK[(size_t)i * C + m] * exp(G[i] - G[m]);
                const double *dm = dl + (size_t)m * dv;
                for (int b = 0; b < dv; b++)
                    y[b] += coef * dm[b];
            }
            for (int b = 0; b < dv; b++)
                o[b] = (float)y[b] * h->scale;
        }
        /* state at the end of the chunk */
        const double eL = exp(G[L - 1]);
        for (int m = 0; m < L; m++)
            G[m] = exp(G[L - 1] - G[m]); /* G is spent; keep the decay to the chunk end */
        for (int b = 0; b < dv; b++) {
            double *s = Sd + (size_t)b * dk;
            for (int a = 0; a < dk; a++)
                s[a] *= eL;
            for (int m = 0; m < L; m++) {
                const double f = G[m] * dl[(size_t)m * dv + b];
                const double *km = kk + (size_t)m * dk;
                for (int a = 0; a < dk; a++)
                    s[a] += f * km[a];
            }
        }
    }
    for (size_t i = 0; i < (size_t)dv * dk; i++)
        S[i] = (float)Sd[i];
}
