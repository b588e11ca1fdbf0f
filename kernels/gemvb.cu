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
#include "qtypes.h"

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
            const long long yi = (long long)(z0 + t) * a.y_stride + row;
            if (a.bias)
                s += a.bias[row];
            if (DUAL && a.bias2)
                s2 += a.bias2[row];
            if (!DUAL && a.mode == 1)
                a.y[yi] += s;
            else if (!DUAL)
                a.y[yi] = s;
            else if (a.mode == 2)
                a.y[yi] = silu_f(s) * s2;
            else
                a.y[yi] = s, a.y2[yi] = s2;
        }
    }
    if (!DUAL || a.mode != 2 || !a.yq)
        return;
    /* The SwiGLU output's q8 copy for the down GEMV: the block that completes a group of 32 rows of
     * this token chunk (32 / R blocks write one) quantizes it for each token, and resets the count. */
    __shared__ int last;
    __threadfence(); /* this block's rows are visible before its count */
    __syncthreads();
    if (tid == 0) {
        int *cn = a.cnt + (long long)z0 * (a.n_rows / 32) + row0 / 32;
        last = atomicAdd(cn, 1) + 1 == 32 / R;
        if (last)
            *cn = 0;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int e = row0 / 32 * 32 + tid % 32;
    for (int t = tid / 32; t < nt; t += (int)blockDim.x / 32) { /* 32 threads a token */
        const long long z = z0 + t;
        const float y = ld_cg(a.y + z * a.y_stride + e); /* past L1: other blocks' rows */
        q8_group(y, a.yq + z * a.n_rows, a.yqd + z * (a.n_rows / 32) * 2, e);
    }
}

#define GEMVB(name, T, R, NT, DUAL) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemvb_body<T, R, NT, DUAL>(a); }

/* modes 0 and 1: 4 rows × 8 tokens, or 2 rows × 16 tokens in one pass */
GEMVB(gemvb_q8_0, KT_Q8_0, 4, 8, false)
GEMVB(gemvb_q4_K, KT_Q4_K, 4, 8, false)
GEMVB(gemvb_q5_K, KT_Q5_K, 4, 8, false)
GEMVB(gemvb_q6_K, KT_Q6_K, 4, 8, false)
GEMVB(gemvb16_q8_0, KT_Q8_0, 2, 16, false)
GEMVB(gemvb16_q4_K, KT_Q4_K, 2, 16, false)
GEMVB(gemvb16_q5_K, KT_Q5_K, 2, 16, false)
GEMVB(gemvb16_q6_K, KT_Q6_K, 2, 16, false)
/* modes 2 and 3: 2 rows of each matrix × 8 tokens, or 1 row × 16 tokens */
GEMVB(gemvbd_q8_0, KT_Q8_0, 2, 8, true)
GEMVB(gemvbd_q4_K, KT_Q4_K, 2, 8, true)
GEMVB(gemvbd_q5_K, KT_Q5_K, 2, 8, true)
GEMVB(gemvbd_q6_K, KT_Q6_K, 2, 8, true)
GEMVB(gemvbd16_q8_0, KT_Q8_0, 1, 16, true)
GEMVB(gemvbd16_q4_K, KT_Q4_K, 1, 16, true)
GEMVB(gemvbd16_q5_K, KT_Q5_K, 1, 16, true)
GEMVB(gemvbd16_q6_K, KT_Q6_K, 1, 16, true)
