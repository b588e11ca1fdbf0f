/* qtypes.h — device-side weight formats (shared spec gguf-and-quants.md §3):
 * per-element dequantization (embedding rows, tiled GEMM) and the "unit"
 * dot products of the GEMV kernels. A unit is the slice of a row one lane
 * reads at once: 16 bytes of 4-bit quants and the activations they meet,
 * so eight consecutive lanes cover one 256-element super-block and a warp's
 * loads are contiguous. load_x fetches the activations of a unit once so
 * that a warp can dot them with several rows. */
#ifndef LLM170_KERNEL_QTYPES_H
#define LLM170_KERNEL_QTYPES_H

#include "prelude.h"
#include "args.h"

__constant__ signed char k_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

static __device__ __forceinline__ u16 ld16(const u8 *p) { return (u16)(p[0] | (p[1] << 8)); }
static __device__ __forceinline__ u32 ld32a2(const u8 *p) /* 2-byte aligned */
{
    const u16 *h = (const u16 *)p;
    return (u32)h[0] | ((u32)h[1] << 16);
}

static __device__ __forceinline__ void scale_min_k4(int j, const u8 *S, int *sc, int *m)
{
    if (j < 4) {
        *sc = S[j] & 63;
        *m = S[j + 4] & 63;
    } else {
        *sc = (S[j + 4] & 0xF) | ((S[j - 4] >> 6) << 4);
        *m = (S[j + 4] >> 4) | ((S[j] >> 6) << 4);
    }
}

/* The same from the super-block's first 16 bytes held in registers (one 16-byte load: d, dmin and
 * the 12 scale bytes in hd.y, hd.z, hd.w), instead of several byte loads per unit. */
static __device__ __forceinline__ void scale_min_k4w(const int4 hd, int j, int *sc, int *m)
{
    const int s = 8 * (j & 3);
    const u32 a = (u32)hd.y >> s, b = (u32)hd.z >> s, c = (u32)hd.w >> s;
    if (j < 4) {
        *sc = (int)(a & 63);
        *m = (int)(b & 63);
    } else {
        *sc = (int)((c & 0xF) | ((a >> 6 & 3) << 4));
        *m = (int)((c >> 4 & 0xF) | ((b >> 6 & 3) << 4));
    }
}

/* ---- one element e of a row ---- */
template <int T> static __device__ float deq_elem(const u8 *row, int e);

template <> __device__ float deq_elem<KT_F32>(const u8 *row, int e) { return ((const float *)row)[e]; }
template <> __device__ float deq_elem<KT_F16>(const u8 *row, int e) { return h2f(((const u16 *)row)[e]); }
template <> __device__ float deq_elem<KT_Q8_0>(const u8 *row, int e)
{
    const u8 *b = row + (e / 32) * 34;
    return (float)(i8)b[2 + e % 32] * h2f(ld16(b));
}
template <> __device__ float deq_elem<KT_Q4_K>(const u8 *row, int e)
{
    const u8 *b = row + (e / 256) * 144;
    const int r = e % 256, c = r / 64, k = r % 64, j = 2 * c + (k >= 32);
    const u8 byte = b[16 + 32 * c + k % 32];
    const int q = k < 32 ? (byte & 0xF) : (byte >> 4);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    return (h2f(ld16(b)) * (float)sc) * (float)q - h2f(ld16(b + 2)) * (float)m;
}
template <> __device__ float deq_elem<KT_Q5_K>(const u8 *row, int e)
{
    const u8 *b = row + (e / 256) * 176;
    const int r = e % 256, c = r / 64, k = r % 64, j = 2 * c + (k >= 32);
    const u8 byte = b[48 + 32 * c + k % 32];
    const int q = (k < 32 ? (byte & 0xF) : (byte >> 4)) + 16 * ((b[16 + k % 32] >> j) & 1);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    return (h2f(ld16(b)) * (float)sc) * (float)q - h2f(ld16(b + 2)) * (float)m;
}
template <> __device__ float deq_elem<KT_Q6_K>(const u8 *row, int e)
{
    const u8 *b = row + (e / 256) * 210;
    const int r = e % 256, h = r / 128, g = (r % 128) / 32, l = r % 32;
    const u8 *L = b + 64 * h, *H = b + 128 + 32 * h;
    const i8 *S = (const i8 *)(b + 192 + 8 * h);
    const int lo = (g & 1) ? L[l + 32] : L[l];
    const int low4 = (g & 2) ? (lo >> 4) : (lo & 0xF);
    const int high2 = (H[l] >> (2 * g)) & 3;
    const int q = (low4 | (high2 << 4)) - 32;
    return (h2f(ld16(b + 208)) * (float)S[l / 16 + 2 * g]) * (float)q;
}
template <> __device__ float deq_elem<KT_IQ4_XS>(const u8 *row, int e)
{
    const u8 *b = row + (e / 256) * 136;
    const int r = e % 256, ib = r / 32, j = r % 32;
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((ld16(b + 2) >> (2 * ib)) & 3) << 4);
    const float dl = h2f(ld16(b)) * (float)(ls - 32);
    const u8 byte = b[8 + 16 * ib + j % 16];
    return dl * (float)k_iq4nl[j < 16 ? (byte & 0xF) : (byte >> 4)];
}

static __device__ __forceinline__ float deq_any(int t, const u8 *row, int e)
{
    switch (t) {
    case KT_F32: return deq_elem<KT_F32>(row, e);
    case KT_F16: return deq_elem<KT_F16>(row, e);
    case KT_Q8_0: return deq_elem<KT_Q8_0>(row, e);
    case KT_Q4_K: return deq_elem<KT_Q4_K>(row, e);
    case KT_Q5_K: return deq_elem<KT_Q5_K>(row, e);
    case KT_Q6_K: return deq_elem<KT_Q6_K>(row, e);
    case KT_IQ4_XS: return deq_elem<KT_IQ4_XS>(row, e);
    }
    return 0.0f;
}

/* ---- GEMV units ----
 * UE: elements per unit; XS: floats load_x keeps (the activations, plus sums where the format has mins). */
template <int T> struct unit;

static __device__ __forceinline__ void ldx4(const float *x, float *d)
{
    const float4 v = *(const float4 *)x;
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
}

template <> struct unit<KT_F32> {
    enum { UE = 4, XS = 4 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs) { ldx4(x + 4 * u, xs); }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const float4 w = ((const float4 *)row)[u];
        return w.x * xs[0] + w.y * xs[1] + w.z * xs[2] + w.w * xs[3];
    }
};
template <> struct unit<KT_F16> {
    enum { UE = 4, XS = 4 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs) { ldx4(x + 4 * u, xs); }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const uint2 w = ((const uint2 *)row)[u];
        return h2f((u16)(w.x & 0xFFFF)) * xs[0] + h2f((u16)(w.x >> 16)) * xs[1] + h2f((u16)(w.y & 0xFFFF)) * xs[2] +
               h2f((u16)(w.y >> 16)) * xs[3];
    }
};
/* q8_0: one 34-byte block per unit */
template <> struct unit<KT_Q8_0> {
    enum { UE = 32, XS = 32 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs)
    {
#pragma unroll
        for (int i = 0; i < 8; i++)
            ldx4(x + 32 * u + 4 * i, xs + 4 * i);
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const u8 *b = row + 34 * u;
        const u16 *h = (const u16 *)b;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const u16 p = h[1 + i];
            s += (float)(i8)(p & 0xFF) * xs[2 * i] + (float)(i8)(p >> 8) * xs[2 * i + 1];
        }
        return s * h2f(h[0]);
    }
};
/* q4_K / q5_K: lane t of a super-block reads qs[16t .. 16t+15]: chunk c = t/2, low nibbles are
 * elements 64c + 16(t%2) + i (sub-block 2c), high nibbles 64c + 32 + 16(t%2) + i (sub-block 2c+1). */
static __device__ __forceinline__ void load_x_k4(const float *x, int u, float *xs)
{
    const int sb = u / 8, t = u % 8, c = t / 2;
    const float *p = x + 256 * sb + 64 * c + 16 * (t % 2);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        ldx4(p + 4 * i, xs + 4 * i);
        ldx4(p + 32 + 4 * i, xs + 16 + 4 * i);
    }
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++)
        s0 += xs[i], s1 += xs[16 + i];
    xs[32] = s0, xs[33] = s1;
}
template <> struct unit<KT_Q4_K> {
    enum { UE = 32, XS = 34 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs) { load_x_k4(x, u, xs); }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const int sb = u / 8, t = u % 8, c = t / 2;
        const u8 *b = row + 144 * sb;
        const uint4 q4 = *(const uint4 *)(b + 16 + 16 * t);
        const u32 qw[4] = { q4.x, q4.y, q4.z, q4.w };
        float slo = 0.0f, shi = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const u32 byte = (qw[i / 4] >> (8 * (i % 4))) & 0xFF;
            slo += (float)(byte & 0xF) * xs[i];
            shi += (float)(byte >> 4) * xs[16 + i];
        }
        int sc0, m0, sc1, m1;
        const int4 hd = *(const int4 *)b;
        scale_min_k4w(hd, 2 * c, &sc0, &m0);
        scale_min_k4w(hd, 2 * c + 1, &sc1, &m1);
        const u32 dd = (u32)hd.x;
        const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
        return d * ((float)sc0 * slo + (float)sc1 * shi) - dm * ((float)m0 * xs[32] + (float)m1 * xs[33]);
    }
};
template <> struct unit<KT_Q5_K> {
    enum { UE = 32, XS = 34 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs) { load_x_k4(x, u, xs); }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const int sb = u / 8, t = u % 8, c = t / 2;
        const u8 *b = row + 176 * sb;
        const uint4 q4 = *(const uint4 *)(b + 48 + 16 * t);
        const uint4 h4 = *(const uint4 *)(b + 16 + 16 * (t % 2));
        const u32 qw[4] = { q4.x, q4.y, q4.z, q4.w };
        const u32 hw[4] = { h4.x, h4.y, h4.z, h4.w };
        float slo = 0.0f, shi = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const u32 byte = (qw[i / 4] >> (8 * (i % 4))) & 0xFF;
            const u32 hb = (hw[i / 4] >> (8 * (i % 4))) & 0xFF;
            slo += (float)((byte & 0xF) | (((hb >> (2 * c)) & 1) << 4)) * xs[i];
            shi += (float)((byte >> 4) | (((hb >> (2 * c + 1)) & 1) << 4)) * xs[16 + i];
        }
        int sc0, m0, sc1, m1;
        const int4 hd = *(const int4 *)b;
        scale_min_k4w(hd, 2 * c, &sc0, &m0);
        scale_min_k4w(hd, 2 * c + 1, &sc1, &m1);
        const u32 dd = (u32)hd.x;
        const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
        return d * ((float)sc0 * slo + (float)sc1 * shi) - dm * ((float)m0 * xs[32] + (float)m1 * xs[33]);
    }
};
/* q6_K: lane t of a super-block takes half h = t/4 and l in [8(t%4), 8(t%4)+8): the four element
 * groups 128h + l + {0, 32, 64, 96}. */
template <> struct unit<KT_Q6_K> {
    enum { UE = 32, XS = 32 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
        const float *p = x + 256 * sb + 128 * h + l0;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            ldx4(p + 32 * g, xs + 8 * g);
            ldx4(p + 32 * g + 4, xs + 8 * g + 4);
        }
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
        const u8 *b = row + 210 * sb;
        const u8 *L = b + 64 * h + l0, *H = b + 128 + 32 * h + l0;
        const u32 la[2] = { ld32a2(L), ld32a2(L + 4) }, lb[2] = { ld32a2(L + 32), ld32a2(L + 36) };
        const u32 ha[2] = { ld32a2(H), ld32a2(H + 4) };
        float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int sh = 8 * (i % 4);
            const int a = (la[i / 4] >> sh) & 0xFF, bb = (lb[i / 4] >> sh) & 0xFF, hh = (ha[i / 4] >> sh) & 0xFF;
            s[0] += (float)(((a & 0xF) | ((hh & 3) << 4)) - 32) * xs[i];
            s[1] += (float)(((bb & 0xF) | (((hh >> 2) & 3) << 4)) - 32) * xs[8 + i];
            s[2] += (float)(((a >> 4) | (((hh >> 4) & 3) << 4)) - 32) * xs[16 + i];
            s[3] += (float)(((bb >> 4) | (((hh >> 6) & 3) << 4)) - 32) * xs[24 + i];
        }
        const i8 *S = (const i8 *)(b + 192 + 8 * h + l0 / 16);
        return h2f(ld16(b + 208)) *
               ((float)S[0] * s[0] + (float)S[2] * s[1] + (float)S[4] * s[2] + (float)S[6] * s[3]);
    }
};
/* iq4_xs: one 32-element sub-block per unit */
template <> struct unit<KT_IQ4_XS> {
    enum { UE = 32, XS = 32 };
    static __device__ __forceinline__ void load_x(const float *x, int u, float *xs)
    {
#pragma unroll
        for (int i = 0; i < 8; i++)
            ldx4(x + 32 * u + 4 * i, xs + 4 * i);
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const float *xs)
    {
        const int sb = u / 8, ib = u % 8;
        const u8 *b = row + 136 * sb;
        const uint2 qa = *(const uint2 *)(b + 8 + 16 * ib), qb = *(const uint2 *)(b + 16 + 16 * ib);
        const u32 qw[4] = { qa.x, qa.y, qb.x, qb.y };
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const u32 byte = (qw[i / 4] >> (8 * (i % 4))) & 0xFF;
            s += (float)k_iq4nl[byte & 0xF] * xs[i] + (float)k_iq4nl[byte >> 4] * xs[16 + i];
        }
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((ld16(b + 2) >> (2 * ib)) & 3) << 4);
        return h2f(ld16(b)) * (float)(ls - 32) * s;
    }
};

/* ---- GEMV units on q8 activations (int8 quants + per-32 scale, as llama.cpp's MMVQ) ----
 * load_x fetches a unit's int8 activations and their block scales once for all rows of a warp;
 * dot does the integer products with dp4a and applies the scales in f32. */
struct xq8 {
    int a[8];       /* int8 activations, 4 per word */
    float d[4];     /* block scales of the unit's 32-element groups */
    int s[4];       /* per group Σq (or 32·Σq for q6_K's offset) */
};
template <int T> struct qunit;

static __device__ __forceinline__ float2 ldd(const float *xd, int blk) { return ((const float2 *)xd)[blk]; }

static __device__ __forceinline__ void load_xq_k4(const i8 *x, const float *xd, int u, struct xq8 &r)
{
    const int sb = u / 8, t = u % 8, c = t / 2;
    const int e0 = 256 * sb + 64 * c + 16 * (t % 2);
    const int4 lo = *(const int4 *)(x + e0), hi = *(const int4 *)(x + e0 + 32);
    r.a[0] = lo.x, r.a[1] = lo.y, r.a[2] = lo.z, r.a[3] = lo.w;
    r.a[4] = hi.x, r.a[5] = hi.y, r.a[6] = hi.z, r.a[7] = hi.w;
    r.d[0] = ldd(xd, e0 / 32).x;
    r.d[1] = ldd(xd, e0 / 32 + 1).x;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 = dp4a(0x01010101, r.a[i], s0);
        s1 = dp4a(0x01010101, r.a[4 + i], s1);
    }
    r.s[0] = s0, r.s[1] = s1;
}

template <> struct qunit<KT_Q4_K> {
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, struct xq8 &r)
    {
        load_xq_k4(x, xd, u, r);
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const struct xq8 &r)
    {
        const int sb = u / 8, t = u % 8, c = t / 2;
        const u8 *b = row + 144 * sb;
        const int4 q4 = *(const int4 *)(b + 16 + 16 * t);
        const int qw[4] = { q4.x, q4.y, q4.z, q4.w };
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s0 = dp4a(qw[i] & 0x0F0F0F0F, r.a[i], s0);
            s1 = dp4a((qw[i] >> 4) & 0x0F0F0F0F, r.a[4 + i], s1);
        }
        int sc0, m0, sc1, m1;
        const int4 hd = *(const int4 *)b; /* super-blocks are 16-byte aligned (144 and 176 bytes) */
        scale_min_k4w(hd, 2 * c, &sc0, &m0);
        scale_min_k4w(hd, 2 * c + 1, &sc1, &m1);
        const u32 dd = (u32)hd.x;
        const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
        return d * ((float)(sc0 * s0) * r.d[0] + (float)(sc1 * s1) * r.d[1]) -
               dm * ((float)(m0 * r.s[0]) * r.d[0] + (float)(m1 * r.s[1]) * r.d[1]);
    }
};
template <> struct qunit<KT_Q5_K> {
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, struct xq8 &r)
    {
        load_xq_k4(x, xd, u, r);
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const struct xq8 &r)
    {
        const int sb = u / 8, t = u % 8, c = t / 2;
        const u8 *b = row + 176 * sb;
        const int4 q4 = *(const int4 *)(b + 48 + 16 * t);
        const int4 h4 = *(const int4 *)(b + 16 + 16 * (t % 2));
        const int qw[4] = { q4.x, q4.y, q4.z, q4.w };
        const int hw[4] = { h4.x, h4.y, h4.z, h4.w };
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int lo = (qw[i] & 0x0F0F0F0F) | (((hw[i] >> (2 * c)) & 0x01010101) << 4);
            const int hi = ((qw[i] >> 4) & 0x0F0F0F0F) | (((hw[i] >> (2 * c + 1)) & 0x01010101) << 4);
            s0 = dp4a(lo, r.a[i], s0);
            s1 = dp4a(hi, r.a[4 + i], s1);
        }
        int sc0, m0, sc1, m1;
        const int4 hd = *(const int4 *)b; /* super-blocks are 16-byte aligned (144 and 176 bytes) */
        scale_min_k4w(hd, 2 * c, &sc0, &m0);
        scale_min_k4w(hd, 2 * c + 1, &sc1, &m1);
        const u32 dd = (u32)hd.x;
        const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
        return d * ((float)(sc0 * s0) * r.d[0] + (float)(sc1 * s1) * r.d[1]) -
               dm * ((float)(m0 * r.s[0]) * r.d[0] + (float)(m1 * r.s[1]) * r.d[1]);
    }
};
/* q6_K: as unit<KT_Q6_K>; group g's activations are 8 int8 at 256sb + 128h + 32g + l0 */
template <> struct qunit<KT_Q6_K> {
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, struct xq8 &r)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int e = 256 * sb + 128 * h + 32 * g + l0;
            const int2 v = *(const int2 *)(x + e);
            r.a[2 * g] = v.x, r.a[2 * g + 1] = v.y;
            r.d[g] = ldd(xd, e / 32).x;
            r.s[g] = dp4a(0x20202020, v.x, dp4a(0x20202020, v.y, 0)); /* 32·Σq: the −32 offset */
        }
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const struct xq8 &r)
    {
        const int sb = u / 8, t = u % 8, h = t / 4, l0 = 8 * (t % 4);
        const u8 *b = row + 210 * sb;
        const u8 *L = b + 64 * h + l0, *H = b + 128 + 32 * h + l0;
        const int la[2] = { (int)ld32a2(L), (int)ld32a2(L + 4) }, lb[2] = { (int)ld32a2(L + 32), (int)ld32a2(L + 36) };
        const int ha[2] = { (int)ld32a2(H), (int)ld32a2(H + 4) };
        int s[4] = { 0, 0, 0, 0 };
#pragma unroll
        for (int i = 0; i < 2; i++) {
            s[0] = dp4a((la[i] & 0x0F0F0F0F) | ((ha[i] & 0x03030303) << 4), r.a[i], s[0]);
            s[1] = dp4a((lb[i] & 0x0F0F0F0F) | (((ha[i] >> 2) & 0x03030303) << 4), r.a[2 + i], s[1]);
            s[2] = dp4a(((la[i] >> 4) & 0x0F0F0F0F) | (((ha[i] >> 4) & 0x03030303) << 4), r.a[4 + i], s[2]);
            s[3] = dp4a(((lb[i] >> 4) & 0x0F0F0F0F) | (((ha[i] >> 6) & 0x03030303) << 4), r.a[6 + i], s[3]);
        }
        const i8 *S = (const i8 *)(b + 192 + 8 * h + l0 / 16);
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; g++)
            acc += (float)((int)S[2 * g] * (s[g] - r.s[g])) * r.d[g];
        return h2f(ld16(b + 208)) * acc;
    }
};
/* q8_0: one block per unit */
template <> struct qunit<KT_Q8_0> {
    static __device__ __forceinline__ void load_x(const i8 *x, const float *xd, int u, struct xq8 &r)
    {
        const int4 a = *(const int4 *)(x + 32 * u), b = *(const int4 *)(x + 32 * u + 16);
        r.a[0] = a.x, r.a[1] = a.y, r.a[2] = a.z, r.a[3] = a.w;
        r.a[4] = b.x, r.a[5] = b.y, r.a[6] = b.z, r.a[7] = b.w;
        r.d[0] = ldd(xd, u).x;
    }
    static __device__ __forceinline__ float dot(const u8 *row, int u, const struct xq8 &r)
    {
        const u8 *b = row + 34 * u;
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++)
            s = dp4a((int)ld32a2(b + 2 + 4 * i), r.a[i], s);
        return h2f(ld16(b)) * r.d[0] * (float)s;
    }
};

/* Quantize 32 consecutive values held by 32 consecutive lanes to q8 (llama.cpp CUDA: d = amax/127,
 * q = round(x/d), ties away from zero). e: this lane's element index in the row (a multiple of 32
 * starts a block); reductions stay inside aligned groups of 32 lanes, so WARP = 64 works too. */
static __device__ __forceinline__ void q8_group(float v, i8 *qrow, float *qdrow, int e)
{
    float amax = fabsf(v);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        amax = fmaxf(amax, shfl_xor(amax, m));
    const float d = amax / 127.0f;
    const int qi = amax == 0.0f ? 0 : (int)roundf(v / d);
    float s = (float)qi;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        s += shfl_xor(s, m);
    qrow[e] = (i8)qi;
    if (e % 32 == 0)
        qdrow[2 * (e / 32)] = d, qdrow[2 * (e / 32) + 1] = d * s;
}

#endif
