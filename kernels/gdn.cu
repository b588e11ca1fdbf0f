/* gdn.cu — the hybrid (qwen35 / qwen35moe) layer kernels: the Gated
 * DeltaNet's causal conv with its rolling state and its delta-rule
 * recurrence (gates and q/k L2 norm fused in), the gated output norm, the
 * gated-attention query/gate split and sigmoid gate, and the shared expert's
 * gated add. Math: shared spec arch-qwen35.md §6; CPU references in
 * worker/num/gdn.c and worker/forward_hybrid.c. */
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

/* Prefill form of gdn_conv: one thread per (batch row, channel), so the steps of a group run in
 * parallel; the inputs before a group's first step come from the state, which gdn_conv_state
 * (launched after, same grid) rolls forward. Taps summed oldest first, as gdn_conv. */
extern "C" __global__ void gdn_conv_tok(const struct gdn_conv_args a)
{
    const int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= a.conv_dim)
        return;
    const int gi = a.g.row_grp[r], t = a.g.row_step[r], s0 = a.g.start[gi];
    const int ns = a.d_conv - 1, cd = a.conv_dim;
    const float *st = a.state + (long long)a.g.seq[gi] * a.seq_stride;
    const bool fresh = a.g.fresh[gi] != 0;
    const float *w = a.w + (long long)c * a.d_conv;
    float sum = 0.0f;
    for (int k = 0; k < ns; k++) {
        const int tau = t - ns + k; /* step of tap k; below 0: state slot ns + tau */
        const float x = tau >= 0 ? a.in[(long long)a.g.rows[s0 + tau] * cd + c]
                                 : (fresh ? 0.0f : st[(long long)(ns + tau) * cd + c]);
        sum += x * w[k];
    }
    sum += a.in[(long long)r * cd + c] * w[ns];
    a.out[(long long)r * cd + c] = silu_f(sum);
}

/* The state after a group's steps: slot k holds the input of step len − ns + k (slots ascending, so
 * a short group's slot k reads the old slot len + k > k before that is rewritten). */
extern "C" __global__ void gdn_conv_state(const struct gdn_conv_args a)
{
    const int gi = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (gi >= *a.g.n_grp || c >= a.conv_dim)
        return;
    const int ns = a.d_conv - 1, cd = a.conv_dim, s0 = a.g.start[gi], T = a.g.len[gi];
    float *st = a.state + (long long)a.g.seq[gi] * a.seq_stride;
    const bool fresh = a.g.fresh[gi] != 0;
    for (int k = 0; k < ns; k++) {
        const int tau = T - ns + k;
        const float x = tau >= 0 ? a.in[(long long)a.g.rows[s0 + tau] * cd + c]
                                 : (fresh ? 0.0f : st[(long long)(T + k) * cd + c]);
        st[(long long)k * cd + c] = x;
    }
}

/* ---- chunked delta rule (prefill) ----
 * Within a chunk of L ≤ GDN_CK steps with G_i the inclusive cumulative log decay, the token-by-token
 * rule is (the CPU's gdn_chunked_ref): (I + M) δ = diag(β)(V − diag(e^G) K̂ S), M[i][m] =
 * β_i (k̂_i·k̂_m) e^{G_i − G_m} for m < i; so with T = (I + M)⁻¹, δ = U − W·S where
 * W = T diag(β e^G) K̂ and U = T diag(β) V depend on the chunk only. gdn_chunk_prep makes W, U,
 * P[i][m] = (q̂_i·k̂_m) e^{G_i − G_m} (m ≤ i) and the per-step scales for every chunk and head at
 * once; gdn_chunk_scan then carries the state through a group's chunks with small products only. */
#define CK GDN_CK
#define CT 256 /* threads of both chunk kernels */

template <int DK>
static __device__ __forceinline__ void chunk_prep(const struct gdn_rec_args &a)
{
    constexpr int SL = DK < 32 ? DK : 32;   /* d_k slab of the q̂·k̂ products staged in shared memory */
    constexpr int MP = CK + 4;              /* row pitch of M and T: rows of whole float4s */
    constexpr int KQ = 2 * CK * (SL + 1);   /* floats of the K̂ and Q̂ slabs */
    constexpr int BUF = KQ > CK * MP ? KQ : CK * MP;
    __shared__ __align__(16) float buf[BUF]; /* K̂ | Q̂ slabs [CK][SL + 1], then T [CK][MP] */
    __shared__ __align__(16) float M[CK * MP];
    __shared__ float Rs[CK][33];            /* 32 columns of the right-hand sides of W | U */
    __shared__ float sG[CK], sb[CK], sik[CK], siq[CK], swk[CK];
    __shared__ int sr[CK];
    float *Ks = buf, *Qs = buf + CK * (SL + 1), *Tm = buf;
    const int ch = blockIdx.x, vh = blockIdx.y, tid = threadIdx.x, lane = tid % WARP, w = tid / WARP;
    const int gi = a.g.ck_grp[ch], c0 = a.g.ck_c0[ch], s0 = a.g.start[gi];
    const int L = min(CK, a.g.len[gi] - c0);
    const int HV = a.n_v_heads, kh = vh % a.n_k_heads, dv = a.d_v, key_dim = a.n_k_heads * DK, cd = a.conv_dim;
    const int NC = DK + dv;
    /* each step's row, q/k norms and gates (one warp a step) */
    for (int i = w; i < CK; i += CT / WARP) {
        int r = 0;
        float sk = 0.0f, sq = 0.0f;
        if (i < L) {
            r = a.g.rows[s0 + c0 + i];
            const float *row = a.qkv + (long long)r * cd;
            for (int j = lane; j < DK; j += WARP) {
                const float kv = row[key_dim + kh * DK + j], qv = row[kh * DK + j];
                sk += kv * kv;
                sq += qv * qv;
            }
        }
        sk = warp_sum(sk);
        sq = warp_sum(sq);
        if (lane == 0) {
            sr[i] = r;
            sik[i] = i < L ? 1.0f / fmaxf(sqrtf(sk), a.eps) : 0.0f;
            siq[i] = i < L ? 1.0f / fmaxf(sqrtf(sq), a.eps) : 0.0f;
            sb[i] = i < L ? sigmoid_f(a.b[(long long)r * HV + vh]) : 0.0f;
            sG[i] = i < L ? softplus_f(a.a[(long long)r * HV + vh] + a.dt[vh]) * a.A[vh] : 0.0f;
        }
    }
    __syncthreads();
    if (tid == 0) { /* cumulative log decay, summed in double as the CPU */
        double acc = 0.0;
        for (int i = 0; i < CK; i++) {
            acc += (double)sG[i];
            sG[i] = (float)acc;
        }
    }
    __syncthreads();
    const float GL = sG[L - 1];
    if (tid < L) {
        const int i = tid;
        const float eg = expf(sG[i]);
        swk[i] = sik[i] * sb[i] * eg; /* W's right-hand side scale of k_i */
        float *sc = a.sc + ((long long)sr[i] * HV + vh) * 4;
        sc[0] = siq[i] * eg;
        sc[1] = sik[i] * expf(GL - sG[i]);
        sc[2] = expf(GL);
        sc[3] = 0.0f;
    }
    /* k̂·k̂ and q̂·k̂ over d_k slabs: thread (ti, tm) owns rows ti + 16u, columns tm + 16v */
    const int ti = tid / 16, tm = tid % 16;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int v = 0; v < 4; v++)
            kk[u][v] = qk[u][v] = 0.0f;
    for (int a0 = 0; a0 < DK; a0 += SL) {
        for (int e = tid; e < CK * SL; e += CT) {
            const int i = e / SL, j = e % SL;
            float kv = 0.0f, qv = 0.0f;
            if (i < L) {
                const float *row = a.qkv + (long long)sr[i] * cd;
                kv = row[key_dim + kh * DK + a0 + j] * sik[i];
                qv = row[kh * DK + a0 + j] * siq[i];
            }
            Ks[i * (SL + 1) + j] = kv;
            Qs[i * (SL + 1) + j] = qv;
        }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < SL; j++) {
            float ki[4], qi[4], km[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                ki[u] = Ks[(ti + 16 * u) * (SL + 1) + j];
                qi[u] = Qs[(ti + 16 * u) * (SL + 1) + j];
                km[u] = Ks[(tm + 16 * u) * (SL + 1) + j];
            }
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int v = 0; v < 4; v++) {
                    kk[u][v] += ki[u] * km[v];
                    qk[u][v] += qi[u] * km[v];
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int i = ti + 16 * u, m = tm + 16 * v;
            const float dec = m <= i && i < L ? expf(sG[i] - sG[m]) : 0.0f;
            M[i * MP + m] = m < i ? sb[i] * kk[u][v] * dec : 0.0f;
            if (i < L)
                a.p[((long long)sr[i] * HV + vh) * CK + m] = qk[u][v] * dec;
        }
    __syncthreads();
    /* T = (I + M)⁻¹ (unit lower triangular), column m by thread m: T[i][m] = −Σ_{m ≤ k < i} M[i][k] T[k][m];
     * the sums run from k = 0 over T's zeros above the diagonal so that a warp's threads agree */
    if (tid < CK) {
        const int m = tid;
        for (int i = 0; i < CK; i++) {
            float acc = i == m ? 1.0f : 0.0f;
            for (int k = 0; k < i; k++)
                acc -= M[i * MP + k] * Tm[k * MP + m];
            Tm[i * MP + m] = i < m ? 0.0f : acc;
        }
    }
    /* W | U = T · [diag(β e^G ‖k‖⁻¹) K | diag(β) V], 32 columns at a time: thread (rg, cc) makes rows rg + 8u */
    const int cc = tid % 32, rg = tid / 32;
    for (int j0 = 0; j0 < NC; j0 += 32) {
        for (int e = tid; e < CK * 32; e += CT) {
            const int i = e / 32, j = j0 + e % 32;
            float v = 0.0f;
            if (i < L && j < NC) {
                const float *row = a.qkv + (long long)sr[i] * cd;
                v = j < DK ? row[key_dim + kh * DK + j] * swk[i] : row[2 * key_dim + vh * dv + j - DK] * sb[i];
            }
            Rs[i][e % 32] = v;
        }
        __syncthreads(); /* also T, before the first slab */
        float acc[CK / 8];
#pragma unroll
        for (int u = 0; u < CK / 8; u++)
            acc[u] = 0.0f;
        for (int m = 0; m < CK; m += 4) {
            const float r0 = Rs[m][cc], r1 = Rs[m + 1][cc], r2 = Rs[m + 2][cc], r3 = Rs[m + 3][cc];
#pragma unroll
            for (int u = 0; u < CK / 8; u++) {
                const float4 t = *(const float4 *)&Tm[(rg + 8 * u) * MP + m];
                acc[u] += t.x * r0 + t.y * r1 + t.z * r2 + t.w * r3;
            }
        }
#pragma unroll
        for (int u = 0; u < CK / 8; u++) {
            const int i = rg + 8 * u;
            if (i < L && j0 + cc < NC)
                a.wu[((long long)sr[i] * HV + vh) * NC + j0 + cc] = acc[u];
        }
        __syncthreads(); /* Rs is rewritten by the next slab */
    }
}

/* R consecutive floats, 16-byte aligned when R is a multiple of 4 (then float4 loads) */
template <int R>
static __device__ __forceinline__ void ld_run(const float *p, float *out)
{
    if (R % 4 == 0) {
#pragma unroll
        for (int k = 0; k < R; k += 4) {
            const float4 v = *(const float4 *)(p + k);
            out[k] = v.x, out[k + 1] = v.y, out[k + 2] = v.z, out[k + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < R; k++)
            out[k] = p[k];
    }
}

/* One block per (group, value head, 32 value columns); thread (rg, c) of the 256 (rg = tid / 32)
 * owns state rows [rg·R, (rg + 1)·R) of column 32·z + c, mirrored in shared memory for the
 * products over d_k, and steps i ≡ rg (mod 8) of each chunk. The chunk's W and q rows, P and k rows
 * pass through one shared tile buffer X, loaded with coalesced float4s into registers one tile
 * ahead of the products (the products themselves are few: the loads' latency is what to hide). */
template <int DK>
static __device__ __forceinline__ void chunk_scan(const struct gdn_rec_args &a)
{
    constexpr int NR = CT / 32, R = DK / NR, RU = CK / NR;
    constexpr int AT = DK < 32 ? DK : 32, AP = AT + 1, A4 = AT / 4; /* d_k tile of the W and q rows */
    constexpr int NA = CK * A4 / CT;                                 /* float4s a thread stages per matrix */
    constexpr int PP = CK + 4, NP = CK * CK / 4 / CT;                /* P: row pitch, float4s a thread */
    constexpr int KM = 4096 / DK < CK ? 4096 / DK : CK, KP = DK + 4; /* k rows per tile, row pitch */
    constexpr int NKF = KM * DK / 4, NK = (NKF + CT - 1) / CT;
    constexpr int X1 = 2 * CK * AP, X2 = CK * PP, X3 = KM * KP;
    constexpr int XN = X1 > X2 ? (X1 > X3 ? X1 : X3) : (X2 > X3 ? X2 : X3);
    __shared__ float S[DK][32]; /* state slice [d_k][32 columns] */
    __shared__ float D[CK][32]; /* δ of the chunk */
    __shared__ __align__(16) float X[XN];
    __shared__ float scq[CK], sck[CK];
    __shared__ int sr[CK];
    const int gi = blockIdx.x, vh = blockIdx.y, tid = threadIdx.x, c = tid % 32, rg = tid / 32;
    if (gi >= *a.g.n_grp)
        return;
    const int dv = a.d_v, HV = a.n_v_heads, kh = vh % a.n_k_heads, key_dim = a.n_k_heads * DK, cd = a.conv_dim;
    const int NC = DK + dv, b = blockIdx.z * 32 + c;
    const bool act = b < dv;
    float *Sg = a.state + (long long)a.g.seq[gi] * a.seq_stride + (long long)vh * DK * dv;
    const bool fresh = a.g.fresh[gi] != 0;
    const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float s[R];
#pragma unroll
    for (int k = 0; k < R; k++) {
        s[k] = act && !fresh ? Sg[(long long)(rg * R + k) * dv + b] : 0.0f;
        S[rg * R + k][c] = s[k];
    }
    /* rows past a short chunk's end meet zeros in P and in the k tiles: keep them finite */
    for (int i = rg; i < CK; i += NR)
        D[i][c] = 0.0f;
    for (int i = tid; i < CK; i += CT)
        scq[i] = sck[i] = 0.0f;
    const int s0 = a.g.start[gi], T = a.g.len[gi];
    for (int c0 = 0; c0 < T; c0 += CK) {
        const int L = min(CK, T - c0);
        if (tid < L) {
            const int r = a.g.rows[s0 + c0 + tid];
            const float *sc = a.sc + ((long long)r * HV + vh) * 4;
            sr[tid] = r;
            scq[tid] = sc[0];
            sck[tid] = sc[1];
        }
        __syncthreads();
        const float eL = a.sc[((long long)sr[L - 1] * HV + vh) * 4 + 2];
        /* W·S and q·S for this thread's steps, over d_k tiles of AT */
        float ws[RU], qs[RU];
#pragma unroll
        for (int u = 0; u < RU; u++)
            ws[u] = qs[u] = 0.0f;
        float4 pw[NA], pq[NA];
#pragma unroll
        for (int k = 0; k < NA; k++) {
            const int f = tid + CT * k, i = f / A4, q4 = f % A4;
            pw[k] = i < L ? *(const float4 *)(a.wu + ((long long)sr[i] * HV + vh) * NC + 4 * q4) : z4;
            pq[k] = i < L ? *(const float4 *)(a.qkv + (long long)sr[i] * cd + kh * DK + 4 * q4) : z4;
        }
        float4 pp[NP];
        for (int a0 = 0; a0 < DK; a0 += AT) {
#pragma unroll
            for (int k = 0; k < NA; k++) {
                const int f = tid + CT * k, i = f / A4, q4 = f % A4;
                float *w = X + i * AP + 4 * q4, *q = X + CK * AP + i * AP + 4 * q4;
                w[0] = pw[k].x, w[1] = pw[k].y, w[2] = pw[k].z, w[3] = pw[k].w;
                q[0] = pq[k].x, q[1] = pq[k].y, q[2] = pq[k].z, q[3] = pq[k].w;
            }
            __syncthreads();
            if (a0 + AT < DK) { /* the next tile */
#pragma unroll
                for (int k = 0; k < NA; k++) {
                    const int f = tid + CT * k, i = f / A4, q4 = f % A4;
                    pw[k] = i < L ? *(const float4 *)(a.wu + ((long long)sr[i] * HV + vh) * NC + a0 + AT + 4 * q4)
                                  : z4;
                    pq[k] = i < L ? *(const float4 *)(a.qkv + (long long)sr[i] * cd + kh * DK + a0 + AT + 4 * q4)
                                  : z4;
                }
            } else { /* P, for the outputs */
#pragma unroll
                for (int k = 0; k < NP; k++) {
                    const int f = tid + CT * k, i = f / (CK / 4), m4 = f % (CK / 4);
                    pp[k] = i < L ? *(const float4 *)(a.p + ((long long)sr[i] * HV + vh) * CK + 4 * m4) : z4;
                }
            }
#pragma unroll 8
            for (int j = 0; j < AT; j++) {
                const float sv = S[a0 + j][c];
#pragma unroll
                for (int u = 0; u < RU; u++) {
                    const int i = rg + NR * u;
                    ws[u] += X[i * AP + j] * sv;
                    qs[u] += X[CK * AP + i * AP + j] * sv;
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int u = 0; u < RU; u++) {
            const int i = rg + NR * u;
            if (i < L) {
                const float uv = act ? a.wu[((long long)sr[i] * HV + vh) * NC + DK + b] : 0.0f;
                D[i][c] = uv - ws[u];
                qs[u] *= scq[i];
            }
        }
#pragma unroll
        for (int k = 0; k < NP; k++) {
            const int f = tid + CT * k, i = f / (CK / 4), m4 = f % (CK / 4);
            *(float4 *)&X[i * PP + 4 * m4] = pp[k];
        }
        float4 pk[NK]; /* the first k tile, for the state */
#pragma unroll
        for (int k = 0; k < NK; k++) {
            const int f = tid + CT * k, m = f / (DK / 4), a4 = f % (DK / 4);
            pk[k] = f < NKF && m < L ? *(const float4 *)(a.qkv + (long long)sr[m] * cd + key_dim + kh * DK + 4 * a4)
                                     : z4;
        }
        __syncthreads();
        /* outputs: scale · (e^{G_i} q̂_i·S + Σ_{m ≤ i} P[i][m] δ_m) */
#pragma unroll
        for (int u = 0; u < RU; u++) {
            const int i = rg + NR * u;
            if (i < L) {
                float y = qs[u];
                for (int m = 0; m <= i; m += 4) { /* P[i][m'] = 0 past i */
                    const float4 pv = *(const float4 *)&X[i * PP + m];
                    y += pv.x * D[m][c] + pv.y * D[m + 1][c] + pv.z * D[m + 2][c] + pv.w * D[m + 3][c];
                }
                if (act)
                    a.o[(long long)sr[i] * (HV * dv) + vh * dv + b] = y * a.scale;
            }
        }
        __syncthreads();
        /* state: e^{G_L} S + Σ_m (‖k_m‖⁻¹ e^{G_L − G_m} k_m) δ_mᵀ over this thread's rows, KM steps a tile */
#pragma unroll
        for (int k = 0; k < R; k++)
            s[k] *= eL;
        for (int m0 = 0; m0 < L; m0 += KM) {
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int f = tid + CT * k, mm = f / (DK / 4), a4 = f % (DK / 4);
                if (f < NKF)
                    *(float4 *)&X[mm * KP + 4 * a4] = pk[k];
            }
            __syncthreads();
            if (m0 + KM < L) {
#pragma unroll
                for (int k = 0; k < NK; k++) {
                    const int f = tid + CT * k, m = m0 + KM + f / (DK / 4), a4 = f % (DK / 4);
                    pk[k] = f < NKF && m < L
                                ? *(const float4 *)(a.qkv + (long long)sr[m] * cd + key_dim + kh * DK + 4 * a4)
                                : z4;
                }
            }
#pragma unroll 4
            for (int mm = 0; mm < KM; mm++) {
                const float dm = D[m0 + mm][c] * sck[m0 + mm];
                float kr[R];
                ld_run<R>(X + mm * KP + rg * R, kr);
#pragma unroll
                for (int k = 0; k < R; k++)
                    s[k] += kr[k] * dm;
            }
            __syncthreads();
        }
#pragma unroll
        for (int k = 0; k < R; k++)
            S[rg * R + k][c] = s[k];
    }
    if (act) {
#pragma unroll
        for (int k = 0; k < R; k++)
            Sg[(long long)(rg * R + k) * dv + b] = s[k];
    }
}

#define GDN_CHUNK_KERNELS(dk)                                                                                  \
    extern "C" __global__ void __launch_bounds__(CT) gdn_chunk_prep_##dk(const struct gdn_rec_args a)       \
    {                                                                                                          \
        chunk_prep<dk>(a);                                                                                     \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(CT) gdn_chunk_scan_##dk(const struct gdn_rec_args a)       \
    {                                                                                                          \
        chunk_scan<dk>(a);                                                                                     \
    }
GDN_CHUNK_KERNELS(16)
GDN_CHUNK_KERNELS(32)
GDN_CHUNK_KERNELS(64)
GDN_CHUNK_KERNELS(128)

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

/* blockDim = WARP · NW with NW = max(1, d_k / 32) (worker/hip/hip_hybrid.c) */
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
