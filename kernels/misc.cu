/* misc.cu — the small kernels of a forward pass: embedding rows, RMSNorm,
 * q/k norm + RoPE + KV store, residual add, SwiGLU, MoE routing and
 * combination, greedy argmax. */
#include "qtypes.h"
#include "route.h"

/* x[t] = dequant(table row tok[t]). Grid: n tokens. */
/* x[t] = dequantized row tok[t] of the table. Grid (tokens, slices of the row): one block per token
 * took ~30 µs for a 4096-wide q4_K row, a single multiprocessor dequantizing element by element. */
extern "C" __global__ void embed_rows(const u8 *table, long long row_bytes, int type, const int *tok, float *x,
                                      int n_embd)
{
    const u8 *row = table + (long long)tok[blockIdx.x] * row_bytes;
    float *y = x + (long long)blockIdx.x * n_embd;
    const int per = (n_embd + (int)gridDim.y - 1) / (int)gridDim.y, i0 = (int)blockIdx.y * per;
    const int i1 = min(n_embd, i0 + per);
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x)
        y[i] = deq_any(type, row, i);
}

#define RMS_EPT 8 /* row elements a thread keeps in registers: rows up to RMS_EPT · blockDim in one pass */

/* y[r] = (x[src(r)] · 1/sqrt(mean(x²) + eps)) * w, src(r) = rows ? rows[r] : r. Grid: rows.
 * With q (n a multiple of WARP) the row is also written as q8: q [rows][n], qd [rows][n/32][2].
 * With xh (rows of at most RMS_EPT · blockDim) also the f16 copy the tensor-core GEMM reads, as
 * mma_xprep writes it: xh [rows][n] = f16(y · xsc[r]), xsc[r] = f16_row_scale(max |y|, lim).
 * A row of up to RMS_EPT · blockDim stays in registers: one read of x, and the q8 groups are made
 * from the registers in the same pass that writes y (element j·blockDim + tid, so each warp holds
 * whole groups of 32). Longer rows take the strided path, which re-reads y for the q8 copy. */
extern "C" __global__ void __launch_bounds__(1024) rms_norm(float *y, const float *x, const float *w, const int *rows,
                                                            int n, float eps, int x_stride, int y_stride, i8 *q,
                                                            float *qd, u16 *xh, float *xsc, float lim)
{
    __shared__ float red[32];
    PDL_ENTER();
    const int r = blockIdx.x, nt = blockDim.x, tid = threadIdx.x;
    const float *xr = x + (long long)(rows ? rows[r] : r) * x_stride;
    float *yr = y + (long long)r * y_stride;
    i8 *qr = q ? q + (long long)r * n : 0;
    float *qdr = q ? qd + (long long)r * (n / 32) * 2 : 0;
    if (n <= RMS_EPT * nt) {
        float v[RMS_EPT];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < RMS_EPT; j++) {
            const int i = j * nt + tid;
            v[j] = i < n ? xr[i] : 0.0f;
            ss += v[j] * v[j];
        }
        ss = block_sum(ss, red);
        const float scale = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
        for (int j = 0; j < RMS_EPT; j++) {
            if (j * nt >= n) /* uniform over the block */
                break;
            const int i = j * nt + tid;
            float t = v[j] * scale;
            if (i < n) {
                t = w ? t * w[i] : t;
                yr[i] = t;
            }
            v[j] = i < n ? t : 0.0f;
            if (q && i - tid % WARP < n) /* n a multiple of WARP: whole warps */
                q8_group(t, qr, qdr, i);
        }
        if (xh) {
            float mx = 0.0f;
#pragma unroll
            for (int j = 0; j < RMS_EPT; j++)
                mx = fmaxf(mx, fabsf(v[j]));
            const float s = f16_row_scale(block_max(mx, red), lim);
            if (tid == 0)
                xsc[r] = s;
            u16 *o = xh + (long long)r * n;
#pragma unroll
            for (int j = 0; j < RMS_EPT; j++)
                if (j * nt + tid < n)
                    o[j * nt + tid] = f2h(v[j] * s);
        }
        return;
    }
    float ss = 0.0f;
    for (int i = tid; i < n; i += nt)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = tid; i < n; i += nt) {
        const float t = xr[i] * scale;
        yr[i] = w ? t * w[i] : t;
    }
    if (!q)
        return;
    __syncthreads();
    const int lane = tid % WARP, wp = tid / WARP, nw = nt / WARP;
    for (int b = wp * WARP; b < n; b += nw * WARP) /* whole warps, n a multiple of WARP */
        q8_group(yr[b + lane], qr, qdr, b + lane);
}

/* x [rows][x_stride] f32 → q8 q [rows][n], qd [rows][n/32][2]; n a multiple of 32.
 * n a multiple of WARP. Grid: (ceil(n / blockDim), rows). */
extern "C" __global__ void quantize_q8(const float *x, int n, int x_stride, i8 *q, float *qd)
{
    PDL_ENTER();
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
    PDL_ENTER();
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

/* swiglu_f32 by rows of n, also writing the f16 copy the tensor-core GEMM after it reads, as mma_xprep
 * writes it: xh [rows][n] = f16(g · xsc[r]), xsc[r] = f16_row_scale(max |g|, lim) — a launch and a pass
 * over the row fewer. Each thread re-reads only what it wrote. Grid: rows. */
extern "C" __global__ void __launch_bounds__(1024) swiglu_rows(float *g, const float *u, int n, u16 *xh, float *xsc,
                                                               float lim)
{
    __shared__ float red[32];
    float *gr = g + (long long)blockIdx.x * n;
    const float *ur = u + (long long)blockIdx.x * n;
    float mx = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = silu_f(gr[i]) * ur[i];
        gr[i] = v;
        mx = fmaxf(mx, fabsf(v));
    }
    const float s = f16_row_scale(block_max(mx, red), lim);
    if (threadIdx.x == 0)
        xsc[blockIdx.x] = s;
    u16 *o = xh + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = f2h(gr[i] * s);
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

/* MoE routing of one token per block of one warp (route.h). sel/w: [n][K]. */
extern "C" __global__ void moe_route(const float *logits, int X, int K, int *sel, float *w, float scale)
{
    PDL_ENTER();
    if (threadIdx.x >= WARP)
        return;
    const long long t = blockIdx.x;
    route_token(logits + t * X, X, K, sel + t * K, w + t * K, scale);
}

/* The (token, slot) pairs z < nz grouped by their expert sel[z] for the grouped tensor-core GEMM
 * (mmag*, kernels/mma.cu): perm lists the pairs expert by expert; gmap[0] is the tile count, then per
 * tile of at most MT pairs (expert, first index into perm, pairs). The order of pairs inside an expert
 * follows shared-memory atomics, which changes no result: each pair's output row is its own dot
 * products. One block; X <= 1024. */
extern "C" __global__ void __launch_bounds__(1024) moe_group(const int *sel, int nz, int X, int MT, int *perm, int *gmap)
{
    __shared__ int cnt[1024], off[1024];
    for (int e = threadIdx.x; e < X; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int z = threadIdx.x; z < nz; z += blockDim.x)
        atomicAdd(&cnt[sel[z]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, t = 0;
        for (int e = 0; e < X; e++) {
            off[e] = o;
            for (int j = 0; j < cnt[e]; j += MT, t++) {
                gmap[1 + 3 * t] = e;
                gmap[2 + 3 * t] = o + j;
                gmap[3 + 3 * t] = min(MT, cnt[e] - j);
            }
            o += cnt[e];
        }
        gmap[0] = t;
    }
    __syncthreads();
    for (int z = threadIdx.x; z < nz; z += blockDim.x)
        perm[atomicAdd(&off[sel[z]], 1)] = z;
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

/* The block's best (value, index) of each thread's (bv, bi), the lowest index among equals; thread 0
 * gets it. sv/si: __shared__ [32]. */
static __device__ __forceinline__ void block_argmax(float &bv, int &bi, float *sv, int *si)
{
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
    }
}

/* out[r] = index of the largest of row r (the lowest index among equals). Grid: rows. */
extern "C" __global__ void argmax_rows(const float *x, int n, int stride, int *out)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    PDL_ENTER();
    const float *r = x + (long long)blockIdx.x * stride;
    float bv = -INF_F;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (r[i] > bv)
            bv = r[i], bi = i;
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi;
}

/* argmax_rows spread over gridDim.x blocks a row (one block of 1024 threads took ~59 us for a
 * 152k vocabulary): block b scans its slice, writes its best to pv/pi [rows][gridDim.x], and the
 * row's last block (counted in cnt [rows], zero between launches) picks the best of the slices, the
 * lowest index among equals: the same answer. Grid: (slices, rows). */
extern "C" __global__ void argmax_split(const float *x, int n, int stride, int *out, float *pv, int *pi, int *cnt)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ int last;
    PDL_ENTER();
    const int row = blockIdx.y, nb = gridDim.x;
    const int chunk = (n + nb - 1) / nb, i0 = (int)blockIdx.x * chunk, i1 = min(n, i0 + chunk);
    const float *r = x + (long long)row * stride;
    float bv = -INF_F;
    int bi = 0x7fffffff;
    for (int i = i0 + (int)threadIdx.x; i < i1; i += blockDim.x)
        if (r[i] > bv)
            bv = r[i], bi = i;
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        pv[(long long)row * nb + blockIdx.x] = bv;
        pi[(long long)row * nb + blockIdx.x] = bi;
        __threadfence(); /* the slice's best is visible before its count */
        last = atomicAdd(cnt + row, 1) + 1 == nb;
        if (last)
            cnt[row] = 0;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    bv = -INF_F, bi = 0x7fffffff;
    /* other blocks' slices: volatile reads skip the (non-coherent) L1 */
    const volatile float *vp = pv + (long long)row * nb;
    const volatile int *ip = pi + (long long)row * nb;
    for (int k = threadIdx.x; k < nb; k += blockDim.x) {
        const float v = vp[k];
        const int i = ip[k];
        if (v > bv || (v == bv && i < bi))
            bv = v, bi = i;
    }
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0)
        out[row] = bi;
}

/* Candidates of each row for the host's sampler when its chain starts with top-k: every element whose
 * bin (of TOPK_BINS equal bins over the row's finite [min, max]) is at or above the bin holding the
 * k-th largest. The bin is monotone in the value, so everything left out is below everything kept,
 * the kept ones are at least k, and with their ties: the k first (value desc, index asc) are among
 * them whatever the order of ids/vals, which the atomic compaction leaves unspecified. cnt[row] =
 * how many (≤ cap), or −1 (the host then reads the whole row) when kk[row] ≤ 0, the row holds +inf,
 * NaN or −inf (the host's finite check then ends that request with an error: a model's raw logits are
 * never legitimately non-finite), one value only, or more than cap would be kept. Three passes over the row (range, histogram in shared memory, compaction) instead of
 * the copy of a whole row to the host: 152k floats a row.
 * A masked row (masked[row], its bits allow[row][(n + 31) / 32]: a grammar's tokens) selects among its
 * allowed elements only — the range, the histogram and the compaction skip the others, which count as
 * absent — and when at most cap are allowed they are all the candidates, fewer than k included (the
 * sampler's top-k then keeps them all). The finite check stays over the whole row. Grid: rows; block 1024. */
#define TOPK_BINS 2048

static __device__ __forceinline__ int topk_bin(float v, float mn, float scale)
{
    return min(TOPK_BINS - 1, (int)((v - mn) * scale));
}

static __device__ __forceinline__ bool topk_allowed(const unsigned *am, int i)
{
    return !am || (am[i >> 5] >> (i & 31)) & 1u;
}

extern "C" __global__ void __launch_bounds__(1024) topk_cut(const float *x, int n, int stride, const int *kk, int cap,
                                                            const int *masked, const unsigned *allow, int *cnt,
                                                            int *ids, float *vals)
{
    __shared__ float red[32];
    __shared__ int hist[TOPK_BINS];
    __shared__ int lanes[64];
    __shared__ int s_bin, s_kept, s_pos;
    const int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const int k = kk[row];
    if (k <= 0) {
        if (tid == 0)
            cnt[row] = -1;
        return;
    }
    const float *r = x + (long long)row * stride;
    const unsigned *am = masked[row] ? allow + (long long)row * ((n + 31) >> 5) : nullptr;
    /* mx, mn: the allowed finite range; nf: finite elements of the whole row; na: allowed finite ones */
    float mx = -INF_F, mn = INF_F, nf = 0.0f, na = 0.0f;
    for (int i = tid; i < n; i += nt) {
        const float v = r[i];
        const bool fin = v > -INF_F && v < INF_F; /* false for NaN */
        nf += fin ? 1.0f : 0.0f;
        if (fin && topk_allowed(am, i)) {
            mx = fmaxf(mx, v);
            mn = fminf(mn, v);
            na += 1.0f;
        }
    }
    mx = block_max(mx, red);
    mn = -block_max(-mn, red);
    nf = block_sum(nf, red);
    na = block_sum(na, red);
    /* nf < n: a NaN or ±inf somewhere; na < k: fewer values than k (unmasked: a short row). Uniform: every
     * thread has the same four. */
    const bool all = am && na >= 1.0f && na <= (float)cap; /* a masked row whose allowed ones all fit */
    if (nf < (float)n || (!all && (!(mx > mn) || na < (float)k))) {
        if (tid == 0)
            cnt[row] = -1;
        return;
    }
    const float scale = all ? 0.0f : (float)TOPK_BINS / (mx - mn);
    if (all) {
        if (tid == 0) {
            s_bin = 0;
            s_kept = (int)na;
            s_pos = 0;
        }
    } else {
        for (int b = tid; b < TOPK_BINS; b += nt)
            hist[b] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += nt) {
            const float v = r[i];
            if (v >= mn && topk_allowed(am, i)) /* false for NaN and −inf */
                atomicAdd(&hist[topk_bin(v, mn, scale)], 1);
        }
        __syncthreads();
        const int per = TOPK_BINS / WARP;
        if (tid < WARP) {
            int s = 0;
            for (int j = 0; j < per; j++)
                s += hist[tid * per + j];
            lanes[tid] = s;
        }
        __syncthreads();
        if (tid == 0) {
            /* from the top: whole lanes' bins while they keep fewer than k, then bin by bin */
            int acc = 0, l = WARP - 1;
            for (; l > 0 && acc + lanes[l] < k; l--)
                acc += lanes[l];
            int b = (l + 1) * per - 1;
            for (; b > l * per && acc + hist[b] < k; b--)
                acc += hist[b];
            s_bin = b;
            s_kept = acc + hist[b]; /* ≥ k: at bin 0 it is every finite value */
            s_pos = 0;
        }
    }
    __syncthreads();
    const int bin = s_bin, kept = s_kept;
    if (kept > cap) {
        if (tid == 0)
            cnt[row] = -1;
        return;
    }
    int *oi = ids + (long long)row * cap;
    float *ov = vals + (long long)row * cap;
    for (int i = tid; i < n; i += nt) {
        const float v = r[i];
        /* all: every allowed one (finite: checked above); scale 0 puts each in bin 0 */
        if (v >= mn && topk_allowed(am, i) && (all || topk_bin(v, mn, scale) >= bin)) {
            const int p = atomicAdd(&s_pos, 1);
            oi[p] = i;
            ov[p] = v;
        }
    }
    if (tid == 0)
        cnt[row] = kept;
}
