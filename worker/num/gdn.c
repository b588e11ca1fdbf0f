/* gdn.c — Gated DeltaNet ops (see gdn.h). */
#include "gdn.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
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

void gdn_recurrent_ref(const struct gdn_head *h, const int *rows, int T, float *S)
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
    /* reference (doubles): Sd, kk, qq, Sk, Sq, delta, KK, QK, G; the f32 form needs less */
    return dv * dk + 2 * C * dk + 3 * C * dv + 2 * C * C + C;
}

void gdn_chunked_ref(const struct gdn_head *h, const int *rows, int T, float *S, double *work)
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

static void axpy_ref(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static float dot_ref(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The chunked form in f32 on row vectors: the state transposed to St[d_k][d_v] so that every
 * product is an axpy or a dot over contiguous memory. */
static void chunked_f32(const struct gdn_head *h, const int *rows, int T, float *S, double *work,
                        void (*axpy)(float *, float, const float *, int), float (*dot)(const float *, const float *, int))
{
    const int dk = h->d_k, dv = h->d_v, C = GDN_CHUNK;
    float *St = (float *)work;                      /* [dk][dv] */
    float *Sk = St + (size_t)dk * dv;               /* [C][dv] Sᵀk_i, then o_i */
    float *Sq = Sk + (size_t)C * dv;                /* [C][dv] */
    float *dl = Sq + (size_t)C * dv;                /* [C][dv] δ_i */
    float *KK = dl + (size_t)C * dv;                /* [C][C] */
    float *QK = KK + (size_t)C * C;                 /* [C][C] */
    double *G = (double *)(QK + (size_t)C * C + 2); /* [C] (the +2 floats keep 8-byte alignment) */
    float eG[GDN_CHUNK];
    const float *kp[GDN_CHUNK], *qp[GDN_CHUNK];
    for (int b = 0; b < dv; b++)
        for (int a = 0; a < dk; a++)
            St[(size_t)a * dv + b] = S[(size_t)b * dk + a];
    for (int c0 = 0; c0 < T; c0 += C) {
        const int L = T - c0 < C ? T - c0 : C;
        double acc = 0.0;
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            kp[i] = h->K + r * h->qk_stride;
            qp[i] = h->Q + r * h->qk_stride;
            acc += (double)h->gdecay[r * h->gate_stride];
            G[i] = acc;
            eG[i] = (float)exp(acc);
        }
        for (int i = 0; i < L; i++) {
            float *sk = Sk + (size_t)i * dv, *sq = Sq + (size_t)i * dv;
            memset(sk, 0, sizeof(float) * (size_t)dv);
            memset(sq, 0, sizeof(float) * (size_t)dv);
            for (int a = 0; a < dk; a++) {
                axpy(sk, kp[i][a], St + (size_t)a * dv, dv);
                axpy(sq, qp[i][a], St + (size_t)a * dv, dv);
            }
            for (int m = 0; m <= i; m++) {
                KK[(size_t)i * C + m] = dot(kp[i], kp[m], dk);
                QK[(size_t)i * C + m] = dot(qp[i], kp[m], dk);
            }
        }
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            const float *v = h->V + r * h->v_stride;
            const float beta = h->beta[r * h->gate_stride];
            float *di = dl + (size_t)i * dv;
            for (int b = 0; b < dv; b++)
                di[b] = beta * (v[b] - eG[i] * Sk[(size_t)i * dv + b]);
            for (int m = 0; m < i; m++)
                axpy(di, -beta * KK[(size_t)i * C + m] * (float)exp(G[i] - G[m]), dl + (size_t)m * dv, dv);
        }
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)rows[c0 + i];
            float *o = h->O + r * h->o_stride, *y = Sk + (size_t)i * dv;
            for (int b = 0; b < dv; b++)
                y[b] = eG[i] * Sq[(size_t)i * dv + b];
            for (int m = 0; m <= i; m++)
                axpy(y, QK[(size_t)i * C + m] * (float)exp(G[i] - G[m]), dl + (size_t)m * dv, dv);
            for (int b = 0; b < dv; b++)
                o[b] = y[b] * h->scale;
        }
        const float eL = eG[L - 1];
        float f[GDN_CHUNK];
        for (int m = 0; m < L; m++)
            f[m] = (float)exp(G[L - 1] - G[m]);
        for (int a = 0; a < dk; a++) {
            float *st = St + (size_t)a * dv;
            for (int b = 0; b < dv; b++)
                st[b] *= eL;
            for (int m = 0; m < L; m++)
                axpy(st, f[m] * kp[m][a], dl + (size_t)m * dv, dv);
        }
    }
    for (int b = 0; b < dv; b++)
        for (int a = 0; a < dk; a++)
            S[(size_t)b * dk + a] = St[(size_t)a * dv + b];
}

/* SIMD dispatch, chosen once; LLM170_SIMD=scalar forces the reference (as ops.c). */
static bool g_avx2;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void dispatch_init(void)
{
    __builtin_cpu_init();
    const char *cap = getenv("LLM170_SIMD");
    g_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !(cap && !strcmp(cap, "scalar"));
}

void gdn_recurrent(const struct gdn_head *h, const int *rows, int T, float *S)
{
    pthread_once(&g_once, dispatch_init);
    if (g_avx2 && h->d_k % 8 == 0)
        gdn_recurrent_avx2(h, rows, T, S);
    else
        gdn_recurrent_ref(h, rows, T, S);
}

void gdn_chunked(const struct gdn_head *h, const int *rows, int T, float *S, double *work)
{
    pthread_once(&g_once, dispatch_init);
    if (g_avx2 && h->d_v % 8 == 0 && h->d_k % 8 == 0)
        chunked_f32(h, rows, T, S, work, gdn_axpy_avx2, gdn_dot_avx2);
    else
        chunked_f32(h, rows, T, S, work, axpy_ref, dot_ref);
}
