/* gemvb.cu — multi-token q8 GEMV for batched decode: y[z] (op)= W · x[z] for a few tokens z
 * (2..16) at once. The per-token GEMV (gemv.cu) reads every weight row once per token (from L2
 * after the first) and the tensor-core tile (mma.cu) dequantizes to f16 in shared memory for 32
 * tokens however few there are; here a block owns R rows and NT tokens, each thread loads its
 * unit of each row once into registers (quants with the nibbles already split, the scales already
 * multiplied out), then dots it with every token's q8 activations (dp4a) and keeps NT × R partial
 * sums in registers. Blocks of consecutive index take the token chunks of the same rows, so a
 * second chunk reads the rows from L2.
 * Partial sums meet with one butterfly per warp: the 32 sums (NT·R, or twice NT·R for the dual
 * modes) are halved across lanes five times, so each lane ends with the warp total of one of them
 * (31 shuffles instead of 32 × 5), then across warps through shared memory.
 * Modes 0..3 as struct gemv_args (plain, added into the residual, SwiGLU with its q8 copy, two
 * outputs of one input); no expert slices, no fused norm or routing (the host keeps those on gemv.cu). */
/* llm170-parts: 6 (part.h) */
#include "part.h"
#include "gemv_out.h"
#include "gemv_pdl.h"
#include "group_tail.h"
#include "qtypes.h"
#include "tc.h"

#define BMAXW 8 /* warps per block at most */

/* int to float, exact for |v| < 2^22: v in the mantissa of 1.5·2^23 and one subtraction (a
 * conversion instruction runs at a quarter of the FMA rate) */
static __device__ __forceinline__ float i2f(int v) { return __int_as_float(0x4B400000 + v) - 12582912.0f; }

/* A weight type's unit (32 elements, the lane layout of qtypes.h's qunit) split in two halves:
 * W, one row's unit decoded once (load_w), and X, one token's activations of it (load_x);
 * dot(W, X) is their product. */
template <int T> struct bunit;

/* q4_K / q5_K activations: lane t of a super-block meets 16 elements of sub-block 2c and 16 of 2c+1 */
struct xk4 {
    int a[8];     /* int8 activations, 4 per word: a[0..3] sub-block 2c, a[4..7] 2c+1 */
    float d[2];   /* their groups' scales */
    float m[2];   /* d · Σq over the lane's 16 of each group (for the mins) */
};
static __device__ __forceinline__ void load_xb_k4(const i8 *x, const float *xd, int u, struct xk4 &r)
{
    const int sb = u / 8, t = u % 8, c = t / 2;
    const int e0 = 256 * sb + 64 * c + 16 * (t % 2);
    const int4 lo = *(const int4 *)(x + e0), hi = *(const int4 *)(x + e0 + 32);
    r.a[0] = lo.x, r.a[1] = lo.y, r.a[2] = lo.z, r.a[3] = lo.w;
    r.a[4] = hi.x, r.a[5] = hi.y, r.a[6] = hi.z, r.a[7] = hi.w;
    r.d[0] = ((const float2 *)xd)[e0 / 32].x;
    r.d[1] = ((const float2 *)xd)[e0 / 32 + 1].x;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 = dp4a(0x01010101, r.a[i], s0);
        s1 = dp4a(0x01010101, r.a[4 + i], s1);
    }
    r.m[0] = r.d[0] * i2f(s0), r.m[1] = r.d[1] * i2f(s1);
}
/* q4_K / q5_K weights: 4-bit (5-bit) values of sub-block 2c in lo, of 2c+1 in hi, 4 per word */
struct wk4 {
    int lo[4], hi[4];
    float f[2];   /* d · scale of each sub-block */
    float g[2];   /* dmin · min of each sub-block */
};
static __device__ __forceinline__ void k4_scales(const int4 hd, int c, struct wk4 &w)
{
    int sc0, m0, sc1, m1;
    scale_min_k4w(hd, 2 * c, &sc0, &m0);
    scale_min_k4w(hd, 2 * c + 1, &sc1, &m1);
    const u32 dd = (u32)hd.x;
    const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
    w.f[0] = d * (float)sc0, w.f[1] = d * (float)sc1;
    w.g[0] = dm * (float)m0, w.g[1] = dm * (float)m1;
}
static __device__ __forceinline__ float dot_k4(const struct wk4 &w, const struct xk4 &x)
{
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 = dp4a(w.lo[i], x.a[i], s0);
        s1 = dp4a(w.hi[i], x.a[4 + i], s1);
    }
    return fmaf(w.f[0] * i2f(s0), x.d[0], w.f[1] * i2f(s1) * x.d[1]) - fmaf(w.g[0], x.m[0], w.g[1] * x.m[1]);
}

template <> struct bunit<KT_Q4_K> {
    typedef struct wk4 W;
    typedef struct xk4 X;
    static __device__ __forceinline__ void load_w(const u8 *row, int u, W &w)
    {
        const int sb = u / 8, t = u % 8;
        const u8 *b = row + 144 * sb;
        const int4 q4 = *(const int4 *)(b + 16 + 16 * t);
        const int qw[4] = { q4.x, q4.y, q4.z, q4.w };
#pragma unroll
        for (int i = 0; i < 4; i++)
            w.lo[i] = qw[i] & 0x0F0F0F0F, w.hi[i] = (qw[i] >> 4) & 0x0F0F0F0F;
        k4_scales(*(const int4 *)b, t / 2, w); /* super-blocks are 16-byte aligned (144 bytes) */
    }
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, X &r) { load_xb_k4(x, xd, u, r); }
    static __device__ __forceinline__ float dot(const W &w, const X &x) { return dot_k4(w, x); }
};
template <> struct bunit<KT_Q5_K> {
    typedef struct wk4 W;
    typedef struct xk4 X;
    static __device__ __forceinline__ void load_w(const u8 *row, int u, W &w)
    {
        const int sb = u / 8, t = u % 8, c = t / 2;
        const u8 *b = row + 176 * sb;
        const int4 q4 = *(const int4 *)(b + 48 + 16 * t);
        const int4 h4 = *(const int4 *)(b + 16 + 16 * (t % 2));
        const int qw[4] = { q4.x, q4.y, q4.z, q4.w };
        const int hw[4] = { h4.x, h4.y, h4.z, h4.w };
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w.lo[i] = (qw[i] & 0x0F0F0F0F) | (((hw[i] >> (2 * c)) & 0x01010101) << 4);
            w.hi[i] = ((qw[i] >> 4) & 0x0F0F0F0F) | (((hw[i] >> (2 * c + 1)) & 0x01010101) << 4);
        }
        k4_scales(*(const int4 *)b, c, w); /* 176-byte super-blocks: 16-byte aligned */
    }
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, X &r) { load_xb_k4(x, xd, u, r); }
    static __device__ __forceinline__ float dot(const W &w, const X &x) { return dot_k4(w, x); }
};
/* q6_K: lane t of a super-block takes half h = t/4 and l in [8(t%4), 8(t%4)+8) of the four element
 * groups 128h + 32g + l (qtypes.h) */
template <> struct bunit<KT_Q6_K> {
    struct W {
        int q[8];     /* 6-bit values 0..63 (the −32 offset is applied through X.s): group g in q[2g], q[2g+1] */
        float f[4];   /* d · the group's scale */
    };
    struct X {
        int a[8];     /* group g's 8 activations in a[2g], a[2g+1] */
        float d[4];
        int s[4];     /* 32·Σq of the group's 8: the offset */
    };
    static __device__ __forceinline__ void load_w(const u8 *row, int u, W &w)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
        const u8 *b = row + 210 * sb;
        const u8 *L = b + 64 * h + l0, *H = b + 128 + 32 * h + l0;
        const int la[2] = { (int)ld32a2(L), (int)ld32a2(L + 4) }, lb[2] = { (int)ld32a2(L + 32), (int)ld32a2(L + 36) };
        const int ha[2] = { (int)ld32a2(H), (int)ld32a2(H + 4) };
#pragma unroll
        for (int i = 0; i < 2; i++) {
            w.q[i] = (la[i] & 0x0F0F0F0F) | ((ha[i] & 0x03030303) << 4);
            w.q[2 + i] = (lb[i] & 0x0F0F0F0F) | (((ha[i] >> 2) & 0x03030303) << 4);
            w.q[4 + i] = ((la[i] >> 4) & 0x0F0F0F0F) | (((ha[i] >> 4) & 0x03030303) << 4);
            w.q[6 + i] = ((lb[i] >> 4) & 0x0F0F0F0F) | (((ha[i] >> 6) & 0x03030303) << 4);
        }
        const i8 *S = (const i8 *)(b + 192 + 8 * h + l0 / 16);
        const float d = h2f(ld16(b + 208));
#pragma unroll
        for (int g = 0; g < 4; g++)
            w.f[g] = d * (float)S[2 * g];
    }
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, X &r)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int e = 256 * sb + 128 * h + 32 * g + l0;
            const int2 v = *(const int2 *)(x + e);
            r.a[2 * g] = v.x, r.a[2 * g + 1] = v.y;
            r.d[g] = ((const float2 *)xd)[e / 32].x;
            r.s[g] = dp4a(0x20202020, v.x, dp4a(0x20202020, v.y, 0));
        }
    }
    static __device__ __forceinline__ float dot(const W &w, const X &x)
    {
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int s = dp4a(w.q[2 * g + 1], x.a[2 * g + 1], dp4a(w.q[2 * g], x.a[2 * g], 0)) - x.s[g];
            acc = fmaf(w.f[g] * i2f(s), x.d[g], acc);
        }
        return acc;
    }
};
/* q8_0: one 34-byte block per unit (2-byte aligned: read as halves) */
template <> struct bunit<KT_Q8_0> {
    struct W {
        int q[8];
        float d;
    };
    struct X {
        int a[8];
        float d;
    };
    static __device__ __forceinline__ void load_w(const u8 *row, int u, W &w)
    {
        const u8 *b = row + 34 * u;
#pragma unroll
        for (int i = 0; i < 8; i++)
            w.q[i] = (int)ld32a2(b + 2 + 4 * i);
        w.d = h2f(ld16(b));
    }
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, X &r)
    {
        const int4 a = *(const int4 *)(x + 32 * u), b = *(const int4 *)(x + 32 * u + 16);
        r.a[0] = a.x, r.a[1] = a.y, r.a[2] = a.z, r.a[3] = a.w;
        r.a[4] = b.x, r.a[5] = b.y, r.a[6] = b.z, r.a[7] = b.w;
        r.d = ((const float2 *)xd)[u].x;
    }
    static __device__ __forceinline__ float dot(const W &w, const X &x)
    {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++)
            s = dp4a(w.q[i], x.a[i], s);
        return w.d * i2f(s) * x.d;
    }
};

/* One butterfly step of width M over sums v[0 .. 2M): afterwards v[0 .. M) hold pair totals */
template <int M> static __device__ __forceinline__ void halve(float *v, int lane)
{
    const bool up = (lane & M) != 0;
#pragma unroll
    for (int i = 0; i < M; i++) {
        const float send = up ? v[i] : v[i + M], keep = up ? v[i + M] : v[i];
        v[i] = keep + shfl_xor(send, M);
    }
}

/* Block: R rows (row0 ..) × NT tokens (z0 ..) of which nt exist; DUAL: modes 2 and 3 (two matrices).
 * NT · R · (DUAL ? 2 : 1) = 32: one partial sum per lane after the butterfly. */
template <int T, int R, int NT, bool DUAL>
static __device__ __forceinline__ void gemvb_body(const struct gemv_args &a)
{
    typedef bunit<T> U;
    const int NV = NT * R * (DUAL ? 2 : 1);
    static_assert(NV == 32, "one sum per lane");
    const int nch = (a.nz + NT - 1) / NT;
    const int ch = (int)blockIdx.x % nch, row0 = (int)blockIdx.x / nch * R;
    gemv_pdl_enter(a, true, row0, R, DUAL); /* kernels/gemv_pdl.h */
    const int z0 = ch * NT, nt = min(NT, a.nz - z0);
    const int tid = (int)threadIdx.x, lane = tid % WARP, warp = tid / WARP, nw = (int)blockDim.x / WARP;
    const u8 *rows[R], *rows2[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const long long rr = min(row0 + r, a.n_rows - 1); /* clamped: the epilogue skips the extra rows */
        rows[r] = a.w + rr * a.row_bytes;
        rows2[r] = DUAL ? a.w2 + rr * a.row_bytes : rows[r];
    }
    const i8 *x = (const i8 *)a.x + (long long)z0 * a.x_stride;
    const float *xd = a.xd + (long long)z0 * (a.x_stride / 32) * 2;
    float acc[NT][R], acc2[NT][R];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[t][r] = 0.0f, acc2[t][r] = 0.0f;
    const int nu = a.k / 32;
    for (int u = tid; u < nu; u += (int)blockDim.x) {
        typename U::W w[R], w2[DUAL ? R : 1];
#pragma unroll
        for (int r = 0; r < R; r++) {
            U::load_w(rows[r], u, w[r]);
            if (DUAL)
                U::load_w(rows2[r], u, w2[DUAL ? r : 0]);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) /* uniform over the block */
                break;
            typename U::X xs;
            U::load_x(x + (long long)t * a.x_stride, xd + (long long)t * (a.x_stride / 32) * 2, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[t][r] += U::dot(w[r], xs);
                if (DUAL)
                    acc2[t][r] += U::dot(w2[DUAL ? r : 0], xs);
            }
        }
    }
    /* butterfly: at width m the lanes with bit m set keep the upper half of the sums, the others the
     * lower half, each adding the partner's copy; lane l ends with the warp total of sum l % 32 */
    float v[32];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            v[t * R + r] = acc[t][r];
            if (DUAL)
                v[(NV / 2 + t * R + r) % 32] = acc2[t][r];
        }
#if WARP == 64
#pragma unroll
    for (int i = 0; i < 32; i++)
        v[i] += shfl_xor(v[i], 32);
#endif
    halve<16>(v, lane);
    halve<8>(v, lane);
    halve<4>(v, lane);
    halve<2>(v, lane);
    halve<1>(v, lane);
    __shared__ float red[BMAXW][32];
    if (lane < 32)
        red[warp][lane] = v[0];
    __syncthreads();
    const int l = tid;
    if (l < (DUAL ? 16 : 32)) {
        float s = 0.0f, s2 = 0.0f;
        for (int w = 0; w < nw; w++) {
            s += red[w][l];
            if (DUAL)
                s2 += red[w][(l + 16) % 32];
        }
        const int t = l / R, r = l % R, row = row0 + r;
        if (t < nt && row < a.n_rows) {
            gemv_out(a, (long long)(z0 + t) * a.y_stride + row, row, s, s2, DUAL);
        }
    }
    if (!DUAL || a.mode != 2 || !a.yq)
        return;
    /* The SwiGLU output's q8 copy for the down GEMV: the block that completes a group of 32 rows of
     * this token chunk (32 / R blocks write one) quantizes it for each token (group_tail.h). */
    if (!group_done(a.cnt + (long long)z0 * (a.n_rows / 32) + row0 / 32, 32 / R))
        return;
    const int e = row0 / 32 * 32 + tid % 32;
    for (int t = tid / 32; t < nt; t += (int)blockDim.x / 32) { /* 32 threads a token */
        const long long z = z0 + t;
        group_q8(a.y + z * a.y_stride, 0, a.yq + z * a.n_rows, a.yqd + z * (a.n_rows / 32) * 2, e);
    }
}

#define GEMVB(name, T, R, NT, DUAL) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemvb_body<T, R, NT, DUAL>(a); }

/* modes 0 and 1: 4 rows × 8 tokens, or 2 rows × 16 tokens in one pass */
#if IN_PART(KT_Q8_0)
GEMVB(gemvb_q8_0, KT_Q8_0, 4, 8, false)
#endif
#if IN_PART(KT_Q4_K)
GEMVB(gemvb_q4_K, KT_Q4_K, 4, 8, false)
#endif
#if IN_PART(KT_Q5_K)
GEMVB(gemvb_q5_K, KT_Q5_K, 4, 8, false)
#endif
#if IN_PART(KT_Q6_K)
GEMVB(gemvb_q6_K, KT_Q6_K, 4, 8, false)
#endif
#if IN_PART(KT_Q8_0)
GEMVB(gemvb16_q8_0, KT_Q8_0, 2, 16, false)
#endif
#if IN_PART(KT_Q4_K)
GEMVB(gemvb16_q4_K, KT_Q4_K, 2, 16, false)
#endif
#if IN_PART(KT_Q5_K)
GEMVB(gemvb16_q5_K, KT_Q5_K, 2, 16, false)
#endif
#if IN_PART(KT_Q6_K)
GEMVB(gemvb16_q6_K, KT_Q6_K, 2, 16, false)
#endif
/* modes 2 and 3: 2 rows of each matrix × 8 tokens, or 1 row × 16 tokens */
#if IN_PART(KT_Q8_0)
GEMVB(gemvbd_q8_0, KT_Q8_0, 2, 8, true)
#endif
#if IN_PART(KT_Q4_K)
GEMVB(gemvbd_q4_K, KT_Q4_K, 2, 8, true)
#endif
#if IN_PART(KT_Q5_K)
GEMVB(gemvbd_q5_K, KT_Q5_K, 2, 8, true)
#endif
#if IN_PART(KT_Q6_K)
GEMVB(gemvbd_q6_K, KT_Q6_K, 2, 8, true)
#endif
#if IN_PART(KT_Q8_0)
GEMVB(gemvbd16_q8_0, KT_Q8_0, 1, 16, true)
#endif
#if IN_PART(KT_Q4_K)
GEMVB(gemvbd16_q4_K, KT_Q4_K, 1, 16, true)
#endif
#if IN_PART(KT_Q5_K)
GEMVB(gemvbd16_q5_K, KT_Q5_K, 1, 16, true)
#endif
#if IN_PART(KT_Q6_K)
GEMVB(gemvbd16_q6_K, KT_Q6_K, 1, 16, true)
#endif

/* ---- the same products on int8 tensor cores (NVIDIA sm_80+): gemvbm_<type> ----
 * A block owns 16 weight rows (and 16 of W2 in the dual modes) and every token of the batch (≤ 16: two
 * 8-token tiles); its 8 warps split the row's 256-element chunks. Per 32-element group a warp multiplies
 * the rows' quants (A, int8 16 × 32) by the tokens' q8 activations (B, 32 × 8) with
 * mma.m16n8k32.s8 (k = 32 is one q8 group, one q4_K/q5_K sub-block, one q8_0 block; q6_K's two
 * 16-element scales take two m16n8k16), then applies the row's scale and the token's in f32, and the
 * mins through the group's precomputed d·Σq. Weights are read once from memory as raw bytes into the
 * A fragments (a lane holds 4 bytes of rows g and g + 8 at k = 4·(lane % 4) and + 16), so the
 * activations, not the weights, are what each block re-reads — 1 byte per weight element for 16 tokens,
 * where the SIMT kernels above re-read ~10 with 2 rows a block. */
#if !defined(LLM_HIP)
#define MW 8 /* warps a block */

/* (unused: in the parts of no weight type, kernels/part.h, which NVRTC would warn about) */
static __device__ __forceinline__ __attribute__((unused)) void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0,
                                                                             int b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
static __device__ __forceinline__ __attribute__((unused)) void mma_k16(int (&c)[4], int a0, int a1, int b0)
{
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* One row's 256-element chunk q as a lane (k offset kq = 4·(lane % 4)) needs it: load() fetches the raw
 * words, group(j) gives group j's A words at k = kq (lo) and k = 16 + kq (hi) and its scales:
 * f[0] for k < 16, f[1] for k >= 16 (equal but for q6_K), fm the min's factor (0 without mins). */
template <int T> struct mrow;
template <> struct mrow<KT_Q4_K> {
    enum { SPLIT16 = 0, CB = 144 }; /* CB: bytes of a 256-element chunk */
    int4 hd;
    int w[4][2];   /* qs[32c + kq], qs[32c + 16 + kq] */
    __device__ __forceinline__ void load(const u8 *row, int q, int kq)
    {
        const u8 *b = row + CB * q;
        hd = *(const int4 *)b;
#pragma unroll
        for (int c = 0; c < 4; c++)
            w[c][0] = *(const int *)(b + 16 + 32 * c + kq), w[c][1] = *(const int *)(b + 16 + 32 * c + 16 + kq);
    }
    __device__ __forceinline__ void group(int j, int &lo, int &hi, float *f, float &fm) const
    {
        const int s = 4 * (j & 1);
        lo = (w[j / 2][0] >> s) & 0x0F0F0F0F, hi = (w[j / 2][1] >> s) & 0x0F0F0F0F;
        int sc, m;
        scale_min_k4w(hd, j, &sc, &m);
        const u32 dd = (u32)hd.x;
        f[0] = f[1] = h2f((u16)(dd & 0xFFFF)) * (float)sc;
        fm = h2f((u16)(dd >> 16)) * (float)m;
    }
};
template <> struct mrow<KT_Q5_K> {
    enum { SPLIT16 = 0, CB = 176 };
    int4 hd;
    int w[4][2];
    int h[2];      /* qh[kq], qh[16 + kq]: bit j is sub-block j's fifth bit */
    __device__ __forceinline__ void load(const u8 *row, int q, int kq)
    {
        const u8 *b = row + CB * q;
        hd = *(const int4 *)b;
        h[0] = *(const int *)(b + 16 + kq), h[1] = *(const int *)(b + 32 + kq);
#pragma unroll
        for (int c = 0; c < 4; c++)
            w[c][0] = *(const int *)(b + 48 + 32 * c + kq), w[c][1] = *(const int *)(b + 48 + 32 * c + 16 + kq);
    }
    __device__ __forceinline__ void group(int j, int &lo, int &hi, float *f, float &fm) const
    {
        const int s = 4 * (j & 1);
        lo = ((w[j / 2][0] >> s) & 0x0F0F0F0F) | (((h[0] >> j) & 0x01010101) << 4);
        hi = ((w[j / 2][1] >> s) & 0x0F0F0F0F) | (((h[1] >> j) & 0x01010101) << 4);
        int sc, m;
        scale_min_k4w(hd, j, &sc, &m);
        const u32 dd = (u32)hd.x;
        f[0] = f[1] = h2f((u16)(dd & 0xFFFF)) * (float)sc;
        fm = h2f((u16)(dd >> 16)) * (float)m;
    }
};
/* q6_K group j: half hh = j / 4, element group g = j % 4 (qtypes.h deq_elem): low 4 bits in
 * ql[64hh + 32(g & 1) + l] (nibble g >> 1), high 2 in qh[32hh + l] (bits 2g), scale per 16 */
template <> struct mrow<KT_Q6_K> {
    enum { SPLIT16 = 1, CB = 210 };
    int l[2][2][2];   /* [hh][g & 1][lo/hi] */
    int h[2][2];      /* [hh][lo/hi] */
    int s[4];         /* the 16 scale bytes */
    float d;
    __device__ __forceinline__ void load(const u8 *row, int q, int kq)
    {
        const u8 *b = row + CB * q; /* 2-byte aligned: words are read as halves */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
#pragma unroll
            for (int g1 = 0; g1 < 2; g1++)
                l[hh][g1][0] = (int)ld32a2(b + 64 * hh + 32 * g1 + kq), l[hh][g1][1] = (int)ld32a2(b + 64 * hh + 32 * g1 + 16 + kq);
            h[hh][0] = (int)ld32a2(b + 128 + 32 * hh + kq), h[hh][1] = (int)ld32a2(b + 128 + 32 * hh + 16 + kq);
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            s[i] = (int)ld32a2(b + 192 + 4 * i);
        d = h2f(ld16(b + 208));
    }
    __device__ __forceinline__ void group(int j, int &lo, int &hi, float *f, float &fm) const
    {
        const int hh = j / 4, g = j % 4, sh = 4 * (g >> 1);
        /* 6-bit value minus 32 per byte: values are 0..63, so (v | 0x80) − 0x20 never borrows across
         * bytes, and flipping bit 7 back gives v − 32 as a signed byte */
        lo = ((((l[hh][g & 1][0] >> sh) & 0x0F0F0F0F) | (((h[hh][0] >> (2 * g)) & 0x03030303) << 4) | 0x80808080) -
              0x20202020) ^ 0x80808080;
        hi = ((((l[hh][g & 1][1] >> sh) & 0x0F0F0F0F) | (((h[hh][1] >> (2 * g)) & 0x03030303) << 4) | 0x80808080) -
              0x20202020) ^ 0x80808080;
        const int si = 8 * hh + 2 * g; /* scale of elements 0..15 of the group; si + 1 of 16..31 */
        f[0] = d * (float)(signed char)(s[si / 4] >> (8 * (si % 4)));
        f[1] = d * (float)(signed char)(s[(si + 1) / 4] >> (8 * ((si + 1) % 4)));
        fm = 0.0f;
    }
};
template <> struct mrow<KT_Q8_0> {
    enum { SPLIT16 = 0, CB = 34 * 8 };
    int w[8][2];
    float d[8];
    __device__ __forceinline__ void load(const u8 *row, int q, int kq)
    {
        const u8 *b = row + CB * q;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            w[j][0] = (int)ld32a2(b + 34 * j + 2 + kq), w[j][1] = (int)ld32a2(b + 34 * j + 18 + kq);
            d[j] = h2f(ld16(b + 34 * j));
        }
    }
    __device__ __forceinline__ void group(int j, int &lo, int &hi, float *f, float &fm) const
    {
        lo = w[j][0], hi = w[j][1];
        f[0] = f[1] = d[j];
        fm = 0.0f;
    }
};

/* The block's B operands: token 8n + gid's q8 words (xb, at k offset kq) and the scales of tokens
 * 8n + 2(lane % 4) + {0, 1} (xs), tokens past nz clamped to the last (their outputs are not written) */
struct mtok {
    const i8 *xb[2];
    const float2 *xs[2][2];
};
static __device__ __forceinline__ struct mtok mtok_ptrs(const struct gemv_args &a, int lane)
{
    struct mtok t;
    const int gid = lane / 4, kq = 4 * (lane % 4), nz = a.nz;
#pragma unroll
    for (int n = 0; n < 2; n++) {
        t.xb[n] = (const i8 *)a.x + (long long)min(8 * n + gid, nz - 1) * a.x_stride + kq;
#pragma unroll
        for (int e = 0; e < 2; e++)
            t.xs[n][e] = (const float2 *)(a.xd + (long long)min(8 * n + 2 * (lane % 4) + e, nz - 1) *
                                                     (a.x_stride / 32) * 2);
    }
    return t;
}

/* acc[m][n][i] += group j's products of rows gid, gid + 8 (r[m][0..1]) with token tile n, whose B words are
 * bw[n] and scale pairs xd[n][i % 2]: c[i] is row gid + 8·(i / 2), token 8n + 2(lane % 4) + i % 2 */
template <int T, int ND>
static __device__ __forceinline__ void mgroup(const mrow<T> (&r)[2][2], int j, const int (&bw)[2][2],
                                              const float2 (&xd)[2][2], int ntile, float (&acc)[2][2][4])
{
#pragma unroll
    for (int m = 0; m < ND; m++) {
        int lo[2], hi[2];
        float f[2][2], fm[2];
        r[m][0].group(j, lo[0], hi[0], f[0], fm[0]);
        r[m][1].group(j, lo[1], hi[1], f[1], fm[1]);
#pragma unroll
        for (int n = 0; n < 2; n++) {
            if (n >= ntile)
                break;
            int c[4], c2[4];
            float v[4];
            if (mrow<T>::SPLIT16) {
                mma_k16(c, lo[0], lo[1], bw[n][0]);
                mma_k16(c2, hi[0], hi[1], bw[n][1]);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = fmaf(f[i / 2][0], i2f(c[i]), f[i / 2][1] * i2f(c2[i]));
            } else {
                mma_k32(c, lo[0], lo[1], hi[0], hi[1], bw[n][0], bw[n][1]);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = f[i / 2][0] * i2f(c[i]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[m][n][i] += fmaf(v[i], xd[n][i % 2].x, -fm[i / 2] * xd[n][i % 2].y);
        }
    }
}

/* acc += chunk q's products (mgroup), the tokens' words and scales loaded from their rows (mtok) */
template <int T, int ND>
static __device__ __forceinline__ void mchunk(const mrow<T> (&r)[2][2], const struct mtok &t, int q, int ntile,
                                              float (&acc)[2][2][4])
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int e = 256 * q + 32 * j; /* the group's first element */
        int bw[2][2];
        float2 xd[2][2];
#pragma unroll
        for (int n = 0; n < 2; n++) {
            if (n < ntile) {
                bw[n][0] = *(const int *)(t.xb[n] + e), bw[n][1] = *(const int *)(t.xb[n] + e + 16);
                xd[n][0] = t.xs[n][0][e / 32], xd[n][1] = t.xs[n][1][e / 32];
            }
        }
        mgroup<T, ND>(r, j, bw, xd, ntile, acc);
    }
}

/* The fragment order (q8_frag below writes it, mchunk_xf reads it), over the G = k / 32 groups: the byte offset
 * of lane L's 16 bytes for 8-token tile n and group pair p, and the float2 index of tile n's group g's pair for
 * token slot s (0..7) */
static __device__ __forceinline__ __attribute__((unused)) long long xf_words(int n, int G, int p, int lane)
{
    return ((long long)n * (G / 2) + p) * 512 + 16 * lane;
}
static __device__ __forceinline__ __attribute__((unused)) long long xf_pair(int n, int G, int g, int s)
{
    return ((long long)n * G + g) * 8 + s;
}

/* The same from the activations in fragment order: one 16-byte load a lane gives its B words of two groups,
 * one 16-byte load its two tokens' scale pairs of a group */
template <int T, int ND>
static __device__ __forceinline__ void mchunk_xf(const mrow<T> (&r)[2][2], const i8 *f, const float *fd, int G,
                                                 int lane, int q, int ntile, float (&acc)[2][2][4])
{
    uint4 u[2] = {};
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int gj = 8 * q + j;
        int bw[2][2];
        float2 xd[2][2];
#pragma unroll
        for (int n = 0; n < 2; n++) {
            if (n < ntile) {
                if (j % 2 == 0)
                    u[n] = *(const uint4 *)(f + xf_words(n, G, gj / 2, lane));
                bw[n][0] = (int)(j % 2 ? u[n].z : u[n].x), bw[n][1] = (int)(j % 2 ? u[n].w : u[n].y);
                const float4 s4 = *(const float4 *)(fd + 2 * xf_pair(n, G, gj, 2 * (lane % 4)));
                xd[n][0] = make_float2(s4.x, s4.y), xd[n][1] = make_float2(s4.z, s4.w);
            }
        }
        mgroup<T, ND>(r, j, bw, xd, ntile, acc);
    }
}

/* The warps' sums meet in red (MW × 2 × 16 × 17 floats), rows row0 .. row0 + 15 are written, and mode 2's
 * q8 copy is made by the second of the two blocks of each 32-row group. */
template <bool DUAL>
static __device__ __forceinline__ void mblock_out(const struct gemv_args &a, float (*red)[2][16][17], int row0,
                                                  const float (&acc)[2][2][4])
{
    const int ND = DUAL ? 2 : 1;
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32, gid = lane / 4, nz = a.nz;
#pragma unroll
    for (int m = 0; m < ND; m++)
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                red[warp][m][gid + 8 * (i / 2)][8 * n + 2 * (lane % 4) + i % 2] = acc[m][n][i];
    __syncthreads();
    const int tid = (int)threadIdx.x, rr = tid / 16, t = tid % 16, row = row0 + rr;
    if (t < nz && row < a.n_rows) {
        float s = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int w = 0; w < MW; w++) {
            s += red[w][0][rr][t];
            if (DUAL)
                s2 += red[w][1][rr][t];
        }
        gemv_out(a, (long long)t * a.y_stride + row, row, s, s2, DUAL);
    }
    if (!DUAL || a.mode != 2 || !a.yq)
        return;
    if (!group_done(a.cnt + row0 / 32, 2))
        return;
    const int e = row0 / 32 * 32 + lane;
    for (int z = warp; z < nz; z += MW)
        group_q8(a.y + (long long)z * a.y_stride, 0, a.yq + (long long)z * a.n_rows,
                 a.yqd + (long long)z * (a.n_rows / 32) * 2, e);
}

template <int T, bool DUAL>
static __device__ __forceinline__ void gemvbm_body(const struct gemv_args &a)
{
    const int ND = DUAL ? 2 : 1;
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int gid = lane / 4, kq = 4 * (lane % 4);
    const int row0 = (int)blockIdx.x * 16, ntile = a.nz > 8 ? 2 : 1;
    gemv_pdl_enter(a, true, row0, 16, DUAL);
    const u8 *rw[2][2]; /* [matrix][rows g, g + 8], clamped */
#pragma unroll
    for (int m = 0; m < ND; m++)
#pragma unroll
        for (int i = 0; i < 2; i++)
            rw[m][i] = (m ? a.w2 : a.w) + (long long)min(row0 + gid + 8 * i, a.n_rows - 1) * a.row_bytes;
    const struct mtok tk = mtok_ptrs(a, lane);
    float acc[2][2][4] = {}; /* [matrix][tile][c] */
    const int nq = a.k / 256;
    for (int q = warp; q < nq; q += MW) {
        mrow<T> r[2][2];
#pragma unroll
        for (int m = 0; m < ND; m++)
#pragma unroll
            for (int i = 0; i < 2; i++)
                r[m][i].load(rw[m][i], q, kq);
        mchunk<T, ND>(r, tk, q, ntile, acc);
    }
    __shared__ float red[MW][2][16][17]; /* [warp][matrix][row][token], padded */
    mblock_out<DUAL>(a, red, row0, acc);
}

/* The same products with the weights streamed (gemvbp_<type>): each warp's chunks come through a ring of
 * GEMVBP_STAGES(T, DUAL) stages in shared memory filled by cp.async, the next chunks in flight while the
 * warp multiplies one. Why: in gemvbm a warp loads a chunk, then spends about as long on its arithmetic
 * (the scales of 16 rows × 16 tokens a group) as the load took, and with 2 chunks a warp for 4096-wide
 * rows the loads and the arithmetic of a multiprocessor's 16 warps fall in step instead of overlapping.
 * A stage holds, for each matrix and each of the 16 rows, the 16-byte-aligned window around the row's
 * chunk (GEMVBP_WIN bytes apart: the 8 rows a load instruction touches fall in distinct banks); q6_K's
 * 210-byte chunks start 2-aligned, so its window is 224 bytes from the chunk's 16-byte floor, the others'
 * are the chunk itself (the host sends them here only when w is 16-aligned). The first stages are
 * requested before the PDL wait (weights are never written). */
template <int T> struct mwin { /* 16-byte pieces of a window: the chunk's, q6_K's 224 bytes */
    enum { PIECES = T == KT_Q6_K ? 14 : mrow<T>::CB / 16 };
};

template <int T, bool DUAL, bool XF = false>
static __device__ __forceinline__ void gemvbp_body(const struct gemv_args &a)
{
    const int ND = DUAL ? 2 : 1, S = GEMVBP_STAGES(T, DUAL), WIN = GEMVBP_WIN(T), P = mwin<T>::PIECES;
    const int CB = mrow<T>::CB;
    extern __shared__ __align__(16) unsigned char gb_ring[];
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int gid = lane / 4, kq = 4 * (lane % 4);
    const int row0 = (int)blockIdx.x * 16, ntile = a.nz > 8 ? 2 : 1, nq = a.k / 256;
    const int nmine = nq > warp ? (nq - warp + MW - 1) / MW : 0; /* chunks q = warp + MW·i */
    unsigned char *ring = gb_ring + warp * S * ND * 16 * WIN;
    const u32 ring_s = smem_addr(ring);
    const long long mbytes = (long long)a.n_rows * a.row_bytes;
    auto chunk = [&](int m, int r, int q) { /* row row0 + r's chunk q of matrix m (rows past the end clamped) */
        return (m ? a.w2 : a.w) + (long long)min(row0 + r, a.n_rows - 1) * a.row_bytes + (long long)CB * q;
    };
    auto issue = [&](int i) { /* chunk warp + MW·i into stage i % S */
        const int q = warp + MW * i;
        const u32 dst = ring_s + (u32)((i % S) * ND * 16 * WIN);
        for (int p = lane; p < ND * 16 * P; p += 32) {
            const int m = p / (16 * P), r = p / P % 16, c = p % P;
            const u8 *src = (const u8 *)((unsigned long long)chunk(m, r, q) & ~15ull) + 16 * c;
            const long long left = (m ? a.w2 : a.w) + mbytes - src; /* q6_K's window may reach past the matrix */
            cp_async16(dst + (u32)((m * 16 + r) * WIN + 16 * c), left > 0 ? src : a.w,
                       left >= 16 ? 16 : left > 0 ? (int)left : 0);
        }
    };
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < nmine)
            issue(i);
        cp_async_commit();
    }
    PDL_ENTER();
    const struct mtok tk = mtok_ptrs(a, lane);
    float acc[2][2][4] = {};
    for (int i = 0; i < nmine; i++) {
        if (i + S - 1 < nmine)
            issue(i + S - 1); /* into the stage chunk i − 1 left (the __syncwarp after its loads) */
        cp_async_commit();
        cp_async_wait<S - 1>(); /* this lane's copies of chunk i have landed */
        __syncwarp();           /* ... and every lane's */
        const int q = warp + MW * i;
        const unsigned char *st = ring + (i % S) * ND * 16 * WIN;
        mrow<T> r[2][2];
#pragma unroll
        for (int m = 0; m < ND; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int rr = gid + 8 * h;
                r[m][h].load(st + (m * 16 + rr) * WIN + ((unsigned long long)chunk(m, rr, q) & 15), 0, kq);
            }
        __syncwarp(); /* the stage is free for the refill */
        if (XF)
            mchunk_xf<T, ND>(r, (const i8 *)a.x, a.xd, a.k / 32, lane, q, ntile, acc);
        else
            mchunk<T, ND>(r, tk, q, ntile, acc);
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp is done with its ring: the reduction reuses it */
    mblock_out<DUAL>(a, (float(*)[2][16][17])gb_ring, row0, acc);
}

/* The nz ≤ 16 tokens' q8 rows x [nz][x_stride] with their (d, d·Σq) pairs xd [nz][x_stride / 32] in the order
 * gemvbp*_f reads them: f, for 8-token tile n and group pair p (groups 2p, 2p + 1 of k / 32), 512 bytes, lane L's
 * 16 at 16·L — token 8n + L / 4's words at k = 4(L % 4) and 16 + 4(L % 4) of group 2p, then of 2p + 1 (mma's B
 * fragment); fd, for tile n and group g, the 8 tokens' pairs in order. Tokens past nz are zeros. Grid
 * (k / 64, 2), 32 threads. Why a copy: read from the rows, a warp's words of a group touch 8 tokens' 16 bytes
 * each (half of every sector) in four loads with its scales; in this order, one 16-byte load a lane for two
 * groups and one for a group's scales — gemvbp_q4_K 31.2 → 22.0 µs a call at 16 tokens on the H100. */
#if IN_PART0
extern "C" __global__ void __launch_bounds__(32) q8_frag(const struct gemv_args a, i8 *f, float *fd)
{
    const int lane = (int)threadIdx.x, p = (int)blockIdx.x, n = (int)blockIdx.y, G = a.k / 32;
    const int z = 8 * n + lane / 4, kq = 4 * (lane % 4);
    uint4 u = make_uint4(0, 0, 0, 0);
    if (z < a.nz) {
        const i8 *x = (const i8 *)a.x + (long long)z * a.x_stride + 64 * p + kq;
        u = make_uint4(*(const u32 *)x, *(const u32 *)(x + 16), *(const u32 *)(x + 32), *(const u32 *)(x + 48));
    }
    *(uint4 *)(f + xf_words(n, G, p, lane)) = u;
    if (lane < 16) { /* group 2p + lane / 8, token 8n + lane % 8 */
        const int g = 2 * p + lane / 8, zt = 8 * n + lane % 8;
        float2 v = make_float2(0.0f, 0.0f);
        if (zt < a.nz)
            v = ((const float2 *)(a.xd + (long long)zt * (a.x_stride / 32) * 2))[g];
        ((float2 *)fd)[xf_pair(n, G, g, lane % 8)] = v;
    }
}
#endif

/* MINB resident blocks a multiprocessor at least: 2 (≤ 128 registers) where that costs at most a few
 * spilled words (q4_K / q5_K, and the single-matrix kernels), 1 for the dual q6_K / q8_0 ones */
#define GEMVBM(name, T, DUAL, MINB) \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const struct gemv_args a) { gemvbm_body<T, DUAL>(a); }

#if IN_PART(KT_Q8_0)
GEMVBM(gemvbm_q8_0, KT_Q8_0, false, 2)
#endif
#if IN_PART(KT_Q4_K)
GEMVBM(gemvbm_q4_K, KT_Q4_K, false, 2)
#endif
#if IN_PART(KT_Q5_K)
GEMVBM(gemvbm_q5_K, KT_Q5_K, false, 2)
#endif
#if IN_PART(KT_Q6_K)
GEMVBM(gemvbm_q6_K, KT_Q6_K, false, 2)
#endif
#if IN_PART(KT_Q8_0)
GEMVBM(gemvbmd_q8_0, KT_Q8_0, true, 1)
#endif
#if IN_PART(KT_Q4_K)
GEMVBM(gemvbmd_q4_K, KT_Q4_K, true, 2)
#endif
#if IN_PART(KT_Q5_K)
GEMVBM(gemvbmd_q5_K, KT_Q5_K, true, 2)
#endif
#if IN_PART(KT_Q6_K)
GEMVBM(gemvbmd_q6_K, KT_Q6_K, true, 1)
#endif
/* gemvbp: 2 blocks a multiprocessor where their rings fit (GEMVBP_SMEM), else 1 */
#define GEMVBP(name, T, DUAL, MINB) \
    extern "C" __global__ void __launch_bounds__(256, MINB) name(const struct gemv_args a) { gemvbp_body<T, DUAL>(a); }
/* ... and its twin name_f on the activations in fragment order (q8_frag): q4_K's, the type measured so far */
#define GEMVBPF(name, T, DUAL, MINB)                                                                               \
    extern "C" __global__ void __launch_bounds__(256, MINB) name##_f(const struct gemv_args a)                 \
    {                                                                                                          \
        gemvbp_body<T, DUAL, true>(a);                                                                         \
    }
#if IN_PART(KT_Q8_0)
GEMVBP(gemvbp_q8_0, KT_Q8_0, false, 2)
GEMVBP(gemvbpd_q8_0, KT_Q8_0, true, 1)
#endif
#if IN_PART(KT_Q4_K)
GEMVBP(gemvbp_q4_K, KT_Q4_K, false, 2)
GEMVBP(gemvbpd_q4_K, KT_Q4_K, true, 2)
GEMVBPF(gemvbp_q4_K, KT_Q4_K, false, 2)
GEMVBPF(gemvbpd_q4_K, KT_Q4_K, true, 2)
#endif
#if IN_PART(KT_Q5_K)
GEMVBP(gemvbp_q5_K, KT_Q5_K, false, 2)
GEMVBP(gemvbpd_q5_K, KT_Q5_K, true, 2)
#endif
#if IN_PART(KT_Q6_K)
GEMVBP(gemvbp_q6_K, KT_Q6_K, false, 2)
GEMVBP(gemvbpd_q6_K, KT_Q6_K, true, 1)
#endif
#endif
