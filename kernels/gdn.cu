/* gdn.cu — the hybrid (qwen35 / qwen35moe) layer kernels: the Gated
 * DeltaNet's causal conv with its rolling state and its delta-rule
 * recurrence (gates and q/k L2 norm fused in), the gated output norm, the
 * gated-attention query/gate split and sigmoid gate, and the shared expert's
 * gated add. Math: shared spec arch-qwen35.md §6; CPU references in
 * worker/ops_gdn.c and worker/forward_hybrid.c. */
#include "qtypes.h"
#include "gdn_args.h"

static __device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
static __device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

#define CONV_MAX 8 /* d_conv up to this (qwen35: 4) */

extern "C" __global__ void gdn_conv(const struct gdn_conv_args a)
{
    const int gi = blockIdx.x;
    if (gi >= *a.g.n_grp)
        return;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= a.conv_dim)
        return;
    const int ns = a.d_conv - 1, cd = a.conv_dim;
    float *st = a.state + (long long)a.g.seq[gi] * a.seq_stride;
    const float *w = a.w + (long long)c * a.d_conv;
    const bool fresh = a.g.fresh[gi] != 0;
    float hist[CONV_MAX - 1], wk[CONV_MAX];
#pragma unroll
    for (int k = 0; k < CONV_MAX - 1; k++)
        hist[k] = k < ns && !fresh ? st[(long long)k * cd + c] : 0.0f;
#pragma unroll
    for (int k = 0; k < CONV_MAX; k++)
        wk[k] = k <= ns ? w[k] : 0.0f;
    const int s0 = a.g.start[gi], T = a.g.len[gi];
    for (int t = 0; t < T; t++) {
        const long long r = a.g.rows[s0 + t];
        const float x = a.in[r * cd + c];
        float sum = 0.0f; /* taps oldest first, as the CPU's gdn_conv */
#pragma unroll
        for (int k = 0; k < CONV_MAX - 1; k++)
            if (k < ns)
                sum += hist[k] * wk[k];
        float wl = 0.0f;
#pragma unroll
        for (int k = 0; k < CONV_MAX; k++)
            if (k == ns)
                wl = wk[k];
        sum += x * wl;
        a.out[r * cd + c] = silu_f(sum);
#pragma unroll
        for (int k = 0; k < CONV_MAX - 1; k++) {
            if (k + 1 < ns)
                hist[k] = hist[k + 1];
            else if (k + 1 == ns)
                hist[k] = x;
        }
    }
#pragma unroll
    for (int k = 0; k < CONV_MAX - 1; k++)
        if (k < ns)
            st[(long long)k * cd + c] = hist[k];
}

/* One block per (group, value head, WARP value columns): lane j of every warp owns value column
 * WARP·z + j; warp w keeps the state rows a ∈ [w·R, (w+1)·R) of that column in registers
 * (R = DK / NW) for the whole group. A step: each warp L2-norms the step's q and k itself (they are
 * d_k floats), takes its slice, and the two sums over a (Sᵀk, then Sᵀq) are the warps' partial sums
 * met in shared memory — two block barriers a step, and NW times the parallelism of one warp per
 * column block (decode reads the state once, so more warps in flight hide more latency). */
template <int DK, int NW>
static __device__ __forceinline__ void gdn_rec(const struct gdn_rec_args &a)
{
    constexpr int R = DK / NW, PER = (DK + WARP - 1) / WARP;
    __shared__ float ks[DK], qs[DK], red_u[NW][WARP], red_y[NW][WARP];
    const int gi = blockIdx.x, vh = blockIdx.y, lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (gi >= *a.g.n_grp)
        return;
    const int dv = a.d_v, HV = a.n_v_heads, kh = vh % a.n_k_heads; /* tiled head map (§6.4 step 6) */
    const int b = blockIdx.z * WARP + lane;
    const bool act = b < dv;
    const int key_dim = a.n_k_heads * DK;
    float *S = a.state + (long long)a.g.seq[gi] * a.seq_stride + (long long)vh * DK * dv + (long long)w * R * dv;
    const bool fresh = a.g.fresh[gi] != 0;
    float s[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        s[i] = act && !fresh ? S[(long long)i * dv + b] : 0.0f;
    const int s0 = a.g.start[gi], T = a.g.len[gi];
    const float dtv = a.dt[vh], Av = a.A[vh];
    for (int t = 0; t < T; t++) {
        const long long r = a.g.rows[s0 + t];
        const float *row = a.qkv + r * a.conv_dim;
        const float *q = row + kh * DK, *k = row + key_dim + kh * DK;
        float kr[PER], qr[PER], sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int i = j * WARP + lane;
            kr[j] = i < DK ? k[i] : 0.0f;
            qr[j] = i < DK ? q[i] : 0.0f;
            sk += kr[j] * kr[j];
            sq += qr[j] * qr[j];
        }
        sk = warp_sum(sk);
        sq = warp_sum(sq);
        const float ik = 1.0f / fmaxf(sqrtf(sk), a.eps), iq = 1.0f / fmaxf(sqrtf(sq), a.eps);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int i = j * WARP + lane;
            if (i >= w * R && i < (w + 1) * R) { /* this warp's slice only: no other warp reads it */
                ks[i] = kr[j] * ik;
                qs[i] = qr[j] * iq;
            }
        }
        __syncwarp();
        const float beta = sigmoid_f(a.b[r * HV + vh]);
        const float decay = expf(softplus_f(a.a[r * HV + vh] + dtv) * Av);
        const float *kw = ks + w * R, *qw = qs + w * R;
        float u = 0.0f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            s[i] *= decay;
            u += s[i] * kw[i];
        }
        if (NW > 1) {
            red_u[w][lane] = u;
            __syncthreads();
            u = 0.0f;
#pragma unroll
            for (int j = 0; j < NW; j++)
                u += red_u[j][lane];
        }
        const float vb = act ? row[2 * key_dim + vh * dv + b] : 0.0f;
        const float d = (vb - u) * beta;
        float y = 0.0f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            s[i] += kw[i] * d;
            y += s[i] * qw[i];
        }
        if (NW > 1) {
            red_y[w][lane] = y;
            __syncthreads();
            if (w == 0) {
                y = 0.0f;
#pragma unroll
                for (int j = 0; j < NW; j++)
                    y += red_y[j][lane];
            }
        }
        if (w == 0 && act)
            a.o[r * (long long)(HV * dv) + vh * dv + b] = y * a.scale;
        __syncwarp(); /* this warp's ks/qs slice is rewritten by the next step */
    }
    if (act) {
#pragma unroll
        for (int i = 0; i < R; i++)
            S[(long long)i * dv + b] = s[i];
    }
}

/* blockDim = WARP · NW with NW = max(1, d_k / 32) (worker/forward_hip_hybrid.c) */
extern "C" __global__ void __launch_bounds__(WARP) gdn_rec_16(const struct gdn_rec_args a) { gdn_rec<16, 1>(a); }
extern "C" __global__ void __launch_bounds__(WARP) gdn_rec_32(const struct gdn_rec_args a) { gdn_rec<32, 1>(a); }
extern "C" __global__ void __launch_bounds__(2 * WARP) gdn_rec_64(const struct gdn_rec_args a) { gdn_rec<64, 2>(a); }
extern "C" __global__ void __launch_bounds__(4 * WARP) gdn_rec_128(const struct gdn_rec_args a) { gdn_rec<128, 4>(a); }

/* o[t][h] ← RMSNorm(o[t][h]) · w ⊙ silu(z[t][h]) per value head of dv. Grid (n, H_v),
 * blockDim ≥ dv (a multiple of WARP). With q (dv a multiple of WARP) also the q8 copy of o for the
 * out-projection GEMV: q [n][value_dim], qd [n][value_dim / 32][2]. */
extern "C" __global__ void gdn_gnorm(float *o, const float *z, const float *w, int value_dim, int dv, float eps,
                                     i8 *q, float *qd)
{
    __shared__ float red[32];
    const long long off = (long long)blockIdx.x * value_dim + (long long)blockIdx.y * dv;
    const int i = threadIdx.x;
    const float x = i < dv ? o[off + i] : 0.0f;
    const float ss = block_sum(x * x, red);
    const float scale = 1.0f / sqrtf(ss / (float)dv + eps);
    const float y = i < dv ? ((x * scale) * w[i]) * silu_f(z[off + i]) : 0.0f;
    if (i < dv)
        o[off + i] = y;
    if (q && dv % WARP == 0) /* whole warps inside one head */
        q8_group(y, q + (long long)blockIdx.x * value_dim, qd + (long long)blockIdx.x * (value_dim / 32) * 2,
                 blockIdx.y * dv + i);
}

/* Gated attention's query projection, per head [query hd | gate hd], split into the query rows
 * q [n][q_stride] and the gate [n][n_head·hd]. Grid: (n, ceil(n_head·hd / blockDim)). */
extern "C" __global__ void gattn_split(const float *mix, float *q, int q_stride, float *gate, int n_head, int hd)
{
    const int t = blockIdx.x, nq = n_head * hd, i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= nq)
        return;
    const float *src = mix + (long long)t * 2 * nq;
    const int h = i / hd, j = i % hd;
    q[(long long)t * q_stride + i] = src[h * 2 * hd + j];
    gate[(long long)t * nq + i] = src[h * 2 * hd + hd + j];
}

/* o ← o ⊙ σ(gate) over rows of nq, n elements. With q (nq a multiple of 32, n of WARP) also the q8
 * copy of o for the output-projection GEMV: q [rows][nq], qd [rows][nq / 32][2]. */
extern "C" __global__ void gattn_gate(float *o, const float *gate, int n, int nq, i8 *q, float *qd)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) /* whole warps when q is set */
        return;
    const float y = o[i] * sigmoid_f(gate[i]);
    o[i] = y;
    if (q) {
        const int r = i / nq;
        q8_group(y, q + (long long)r * nq, qd + (long long)r * (nq / 32) * 2, i % nq);
    }
}

/* Shared expert's gated add: x[t] += σ(wg · h[t]) · y[t]. Grid: (n, ceil(E / blockDim)): every block
 * forms the gate's dot product (E multiply-adds, cheaper than a second launch) and adds its slice. */
extern "C" __global__ void shexp_add(float *x, const float *y, const float *h, const float *wg, int E)
{
    __shared__ float red[32];
    const long long t = blockIdx.x;
    float d = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        d += wg[i] * h[t * E + i];
    d = block_sum(d, red);
    const float gam = sigmoid_f(d);
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < E)
        x[t * E + i] += y[t * E + i] * gam;
}
