/* misc.cu — the small kernels of a forward pass: embedding rows, RMSNorm,
 * q/k norm + RoPE + KV store, residual add, SwiGLU, MoE routing and
 * combination, greedy argmax. */
#include "qtypes.h"

/* x[t] = dequant(table row tok[t]). Grid: n tokens. */
extern "C" __global__ void embed_rows(const u8 *table, long long row_bytes, int type, const int *tok, float *x,
                                      int n_embd)
{
    const u8 *row = table + (long long)tok[blockIdx.x] * row_bytes;
    float *y = x + (long long)blockIdx.x * n_embd;
    for (int i = threadIdx.x; i < n_embd; i += blockDim.x)
        y[i] = deq_any(type, row, i);
}

/* y[r] = (x[src(r)] · 1/sqrt(mean(x²) + eps)) * w, src(r) = rows ? rows[r] : r. Grid: rows.
 * With q (n a multiple of WARP) the row is also written as q8: q [rows][n], qd [rows][n/32][2]. */
extern "C" __global__ void rms_norm(float *y, const float *x, const float *w, const int *rows, int n, float eps,
                                    int x_stride, int y_stride, i8 *q, float *qd)
{
    __shared__ float red[32];
    const int r = blockIdx.x;
    const float *xr = x + (long long)(rows ? rows[r] : r) * x_stride;
    float *yr = y + (long long)r * y_stride;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float t = xr[i] * scale;
        yr[i] = w ? t * w[i] : t;
    }
    if (!q)
        return;
    __syncthreads();
    const int lane = threadIdx.x % WARP, wp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    for (int b = wp * WARP; b < n; b += nw * WARP) /* whole warps, n a multiple of WARP */
        q8_group(yr[b + lane], q + (long long)r * n, qd + (long long)r * (n / 32) * 2, b + lane);
}

/* x [rows][x_stride] f32 → q8 q [rows][n], qd [rows][n/32][2]; n a multiple of 32.
 * n a multiple of WARP. Grid: (ceil(n / blockDim), rows). */
extern "C" __global__ void quantize_q8(const float *x, int n, int x_stride, i8 *q, float *qd)
{
    const int r = blockIdx.y;
    const int b = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * WARP;
    if (b >= n)
        return;
    const int e = b + threadIdx.x % WARP;
    q8_group(x[(long long)r * x_stride + e], q + (long long)r * n, qd + (long long)r * (n / 32) * 2, e);
}

/* Grid (n, n_head + n_head_kv), blockDim >= hd. Heads below n_head are query heads (normed and
 * rotated in place); the rest are KV heads: K normed, rotated and stored, V stored. */
extern "C" __global__ void rope_store(const struct rope_args a)
{
    __shared__ float red[32];
    __shared__ float xs[1024];
    const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x;
    const bool is_q = hh < a.n_head;
    const int g = hh - a.n_head;
    float *src = is_q ? a.q + (long long)t * a.q_stride + (long long)hh * a.hd
                      : (float *)a.k + (long long)t * a.kv_stride + (long long)g * a.hd;
    const float *nw = is_q ? a.q_norm : a.k_norm;
    float x = i < a.hd ? src[i] : 0.0f;
    if (nw) {
        const float ss = block_sum(x * x, red);
        const float scale = 1.0f / sqrtf(ss / (float)a.hd + a.eps);
        if (i < a.hd)
            x = (x * scale) * nw[i];
    }
    if (i < a.hd)
        xs[i] = x;
    __syncthreads();
    const float *cs = a.cs + (long long)t * a.n_rot;
    if (i < a.n_rot) {
        if (a.neox) {
            const int half = a.n_rot / 2;
            if (i < half) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                x = xs[i] * c - xs[i + half] * s;
            } else {
                const int j = i - half;
                const float c = cs[2 * j], s = cs[2 * j + 1];
                x = xs[j] * s + xs[i] * c;
            }
        } else {
            const int p = i / 2;
            const float c = cs[2 * p], s = cs[2 * p + 1];
            if (i % 2 == 0)
                x = xs[i] * c - xs[i + 1] * s;
            else
                x = xs[i - 1] * s + xs[i] * c;
        }
    }
    if (i >= a.hd)
        return;
    if (is_q) {
        src[i] = x;
        return;
    }
    const long long cell = (long long)a.seq[t] * a.seq_stride + (long long)a.pos[t] * (a.n_head_kv * a.hd) +
                           (long long)g * a.hd + i;
    const float v = a.v[(long long)t * a.kv_stride + (long long)g * a.hd + i];
    if (a.kv_f16) {
        ((u16 *)a.kc)[cell] = f2h(x);
        ((u16 *)a.vc)[cell] = f2h(v);
    } else {
        ((float *)a.kc)[cell] = x;
        ((float *)a.vc)[cell] = v;
    }
}

extern "C" __global__ void add_f32(float *y, const float *x, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

extern "C" __global__ void swiglu_f32(float *g, const float *u, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        g[i] = silu_f(g[i]) * u[i];
}

/* In-place softmax of rows of n (max-subtracted). Grid: rows. */
extern "C" __global__ void softmax_rows(float *x, int n, int stride)
{
    __shared__ float red[32];
    float *r = x + (long long)blockIdx.x * stride;
    float m = -INF_F;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, r[i]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(r[i] - m);
        r[i] = e;
        s += e;
    }
    s = block_sum(s, red);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        r[i] *= inv;
}

/* MoE routing of one token per block (one thread: X and K are small): softmax over the router
 * logits, the K largest in descending order (earlier index wins a tie, as ops_topk), weights
 * renormalised to sum 1 and scaled. sel/w: [n][K]. */
extern "C" __global__ void moe_route(const float *logits, int X, int K, int *sel, float *w, float scale)
{
    if (threadIdx.x != 0)
        return;
    const float *l = logits + (long long)blockIdx.x * X;
    int *s = sel + (long long)blockIdx.x * K;
    float *ww = w + (long long)blockIdx.x * K;
    float m = -INF_F;
    for (int i = 0; i < X; i++)
        m = fmaxf(m, l[i]);
    double sum = 0.0;
    for (int i = 0; i < X; i++)
        sum += (double)expf(l[i] - m);
    const float inv = (float)(1.0 / sum);
    int cnt = 0;
    float pv[64];
    for (int i = 0; i < X; i++) {
        const float p = expf(l[i] - m) * inv;
        if (cnt == K && !(p > pv[K - 1]))
            continue;
        int j = cnt < K ? cnt++ : K - 1;
        while (j > 0 && p > pv[j - 1]) {
            pv[j] = pv[j - 1];
            s[j] = s[j - 1];
            j--;
        }
        pv[j] = p;
        s[j] = i;
    }
    double tot = 0.0;
    for (int k = 0; k < K; k++)
        tot += (double)pv[k];
    float ts = (float)tot;
    if (ts < 6.103515625e-5f)
        ts = 6.103515625e-5f;
    for (int k = 0; k < K; k++) {
        float v = pv[k] / ts;
        if (scale != 0.0f && scale != 1.0f)
            v *= scale;
        ww[k] = v;
    }
}

/* x[t] += Σ_k w[t][k] · ey[t·K + k] in selection order. Grid: n tokens. */
extern "C" __global__ void moe_combine(float *x, const float *ey, const float *w, int E, int K)
{
    const int t = blockIdx.x;
    const float *wt = w + (long long)t * K;
    const float *y = ey + (long long)t * K * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) {
        float s = wt[0] * y[i];
        for (int k = 1; k < K; k++)
            s = s + wt[k] * y[(long long)k * E + i];
        x[(long long)t * E + i] += s;
    }
}

/* out[r] = index of the largest of row r (the lowest index among equals). Grid: rows. */
extern "C" __global__ void argmax_rows(const float *x, int n, int stride, int *out)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *r = x + (long long)blockIdx.x * stride;
    float bv = -INF_F;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (r[i] > bv)
            bv = r[i], bi = i;
    for (int m = WARP / 2; m > 0; m >>= 1) {
        const float ov = shfl_xor(bv, m);
        const int oi = shfl_xor_i(bi, m);
        if (ov > bv || (ov == bv && oi < bi))
            bv = ov, bi = oi;
    }
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    if (lane == 0)
        sv[w] = bv, si[w] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < nw; k++)
            if (sv[k] > bv || (sv[k] == bv && si[k] < bi))
                bv = sv[k], bi = si[k];
        out[blockIdx.x] = bi;
    }
}
