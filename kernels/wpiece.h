/* wpiece.h — the weight pieces of the tensor-core GEMMs (mma.cu: mma.sync tiles; wgmma.cu: sm_90a
 * warpgroup tiles): for each weight type, how one thread of a row's pair loads its share of a 64-wide k
 * step into registers (or, for the cp.async ring, names its 16-byte chunks) and dequantizes it to f16,
 * handing the halves to a writer of the tile's shared-memory layout. NVIDIA only. */
#ifndef LLM170_KERNELS_WPIECE_H
#define LLM170_KERNELS_WPIECE_H

#include "qtypes.h"
#include "tc.h"

#if !defined(LLM_HIP)

/* 16 halves (8 words) to shared memory at dst (16-byte aligned) */
static __device__ __forceinline__ void st16h(u16 *dst, const u32 *w)
{
    uint4 *d = (uint4 *)dst;
    d[0] = make_uint4(w[0], w[1], w[2], w[3]);
    d[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* where a weight piece's store puts 16 halves at k offset ko (a multiple of 8) of its row: a row of the
 * ldmatrix tiles (pitch MP) */
struct row_put {
    u16 *d; /* the row's first half */
    __device__ __forceinline__ void operator()(int ko, const u32 *w) const { st16h(d + ko, w); }
};

static __device__ __forceinline__ u32 byte_of(const u32 *w, int i) { return (w[i / 4] >> (8 * (i % 4))) & 0xFF; }

/* byte k (compile-time) of w as a float, minus off: the byte goes into the mantissa of 2^23 (one
 * prmt) and 2^23 + off is subtracted, exact for bytes; an int-to-float conversion runs at a quarter of
 * the FMA rate and dominated the dequantization */
static __device__ __forceinline__ float bytef(u32 w, int k, float off)
{
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0x4B000000u), "r"(0x7650u | (u32)k));
    return __uint_as_float(r) - (8388608.0f + off);
}

/* byte i (run-time index < 12) of the three words of a K-quant's scale bytes, by selects: a
 * run-time index into a register array would put it in local memory */
static __device__ __forceinline__ int sbyte(const u32 *s, int i)
{
    const u32 w = i < 4 ? s[0] : i < 8 ? s[1] : s[2];
    return (int)((w >> (8 * (i % 4))) & 0xFF);
}

/* scale and min of sub-block j (run-time) of a q4_K/q5_K super-block, as scale_min_k4 */
static __device__ __forceinline__ void scale_min_sel(int j, const u32 *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = sbyte(s, j) & 63;
        *m = sbyte(s, j + 4) & 63;
    } else {
        *sc = (sbyte(s, j + 4) & 0xF) | ((sbyte(s, j - 4) >> 6) << 4);
        *m = (sbyte(s, j + 4) >> 4) | ((sbyte(s, j) >> 6) << 4);
    }
}

/* the scales and mins (d·sc, dmin·m) of sub-blocks 2c and 2c + 1 of a q4_K/q5_K super-block: chunk c's two
 * halves; dd holds d and dmin as f16, s the 12 scale bytes */
static __device__ __forceinline__ void chunk_scales(int c, u32 dd, const u32 *s, float *d0, float *n0, float *d1,
                                                    float *n1)
{
    int sc0, m0, sc1, m1;
    scale_min_sel(2 * c, s, &sc0, &m0);
    scale_min_sel(2 * c + 1, s, &sc1, &m1);
    const float d = h2f((u16)(dd & 0xFFFF)), dm = h2f((u16)(dd >> 16));
    *d0 = d * (float)sc0, *n0 = dm * (float)m0, *d1 = d * (float)sc1, *n1 = dm * (float)m1;
}

/* ---- weight pieces: the row's thread h (0, 1) of a 64-wide k step at k0 ----
 * load: the raw bytes into registers (issued one step ahead); store: dequantize them and hand the
 * piece's 32 halves to put in two runs of 16 (k offsets within the step: P0 + i and P1 + i, i < 16),
 * which writes them in the tile's layout (row_put, or wg_put in wgmma.cu). */
template <int T> struct wpiece;

/* q4_K: the step is chunk c = (k0 % 256) / 64 of a super-block: sub-blocks 2c (low nibbles of 32
 * bytes) and 2c + 1 (high nibbles). Thread h takes bytes 16h..16h+15: elements 16h + i and 32 + 16h + i. */
template <> struct wpiece<KT_Q4_K> {
    uint4 q;
    u32 dd, s[3];
    int c;
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const u8 *b = row + 144 * (k0 / 256);
        c = (k0 % 256) / 64;
        q = *(const uint4 *)(b + 16 + 32 * c + 16 * h);
        const u32 *w = (const u32 *)b;
        dd = w[0], s[0] = w[1], s[1] = w[2], s[2] = w[3];
    }
    /* the async pipeline's 16-byte chunks (wchunks): 0 the super-block header (d, dmin, scales), 1 the
     * thread's 16 quant bytes; load_chunks takes them back from shared memory, 256 chunks apart */
    static __device__ __forceinline__ const void *chunk(const u8 *row, int k0, int h, int i)
    {
        const u8 *b = row + 144 * (k0 / 256);
        return i == 0 ? b : b + 16 + 32 * ((k0 % 256) / 64) + 16 * h;
    }
    __device__ __forceinline__ void load_chunks(const uint4 *r, int k0)
    {
        const uint4 hd = r[0];
        q = r[256];
        dd = hd.x, s[0] = hd.y, s[1] = hd.z, s[2] = hd.w;
        c = (k0 % 256) / 64;
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        float d0, n0, d1, n1;
        chunk_scales(c, dd, s, &d0, &n0, &d1, &n1);
        const u32 w[4] = { q.x, q.y, q.z, q.w };
        /* in f16x2 arithmetic, two elements an instruction: a byte pair spread to the two halves (prmt),
         * its nibbles OR 0x6400 are the f16 values 1024 + q (low) and 1024 + 16q (high); q comes out exact
         * (a subtraction, or ·1/16 − 64), then one fma by the sub-block's scale and min rounded to f16:
         * f16(q·f16(d·sc) − f16(dmin·m)), one rounding after the product (tests/test_hip_kernels models it).
         * Half the instructions of the f32 path, which dominated the 64-token tile's steps. */
        const u32 D0 = h2pack(d0, d0), N0 = h2pack(-n0, -n0), D1 = h2pack(d1, d1), N1 = h2pack(-n1, -n1);
        const u32 B1024 = 0x64006400u, I16 = 0x2C002C00u /* 1/16 */, M64 = 0xD400D400u /* −64 */;
        u32 lo[8], hi[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int k = 0; k < 2; k++) {
                u32 p, xl, xh, ql, qh;
                asm("prmt.b32 %0, %1, 0, %2;" : "=r"(p) : "r"(w[j]), "r"(k ? 0x4342u : 0x4140u));
                asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(xl) : "r"(p)); /* (p & m) | c */
                asm("lop3.b32 %0, %1, 0x00F000F0, 0x64006400, 0xEA;" : "=r"(xh) : "r"(p));
                asm("sub.f16x2 %0, %1, %2;" : "=r"(ql) : "r"(xl), "r"(B1024));
                asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(qh) : "r"(xh), "r"(I16), "r"(M64));
                asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(lo[2 * j + k]) : "r"(ql), "r"(D0), "r"(N0));
                asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(hi[2 * j + k]) : "r"(qh), "r"(D1), "r"(N1));
            }
        }
        put(16 * h, lo);
        put(32 + 16 * h, hi);
    }
};

/* 16-byte chunks a thread stages per step in the 64-token tile's cp.async pipeline (mma_body):
 * types whose pieces are 16-byte aligned and define chunk / load_chunks; 0: registers (loaded a step ahead) */
template <int T> struct wchunks {
    static constexpr int n = 0;
};
template <> struct wchunks<KT_Q4_K> {
    static constexpr int n = 2;
};

/* q5_K: as q4_K plus the fifth bit of element l of sub-block j in bit j of qh[l] */
template <> struct wpiece<KT_Q5_K> {
    uint4 q, qh;
    u32 dd, s[3];
    int c;
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const u8 *b = row + 176 * (k0 / 256);
        c = (k0 % 256) / 64;
        q = *(const uint4 *)(b + 48 + 32 * c + 16 * h);
        qh = *(const uint4 *)(b + 16 + 16 * h);
        const u32 *w = (const u32 *)b;
        dd = w[0], s[0] = w[1], s[1] = w[2], s[2] = w[3];
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        float d0, n0, d1, n1;
        chunk_scales(c, dd, s, &d0, &n0, &d1, &n1);
        const u32 w[4] = { q.x, q.y, q.z, q.w }, hw[4] = { qh.x, qh.y, qh.z, qh.w };
        u32 lo[8], hi[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const u32 hb = hw[j] >> (2 * c);
            const u32 l = (w[j] & 0x0F0F0F0Fu) | ((hb & 0x01010101u) << 4);
            const u32 u = ((w[j] >> 4) & 0x0F0F0F0Fu) | ((hb & 0x02020202u) << 3);
#pragma unroll
            for (int k = 0; k < 4; k += 2) {
                lo[2 * j + k / 2] = h2pack(d0 * bytef(l, k, 0.0f) - n0, d0 * bytef(l, k + 1, 0.0f) - n0);
                hi[2 * j + k / 2] = h2pack(d1 * bytef(u, k, 0.0f) - n1, d1 * bytef(u, k + 1, 0.0f) - n1);
            }
        }
        put(16 * h, lo);
        put(32 + 16 * h, hi);
    }
};

/* Loads feed registers that are only used a step later (store): no arithmetic on loaded values in
 * load, or the warp would wait for them there. Blocks of 210 (q6_K) and 34 (q8_0) bytes are only
 * 2-byte aligned, so their bytes come as the aligned words around them, shifted into place in store. */
static __device__ __forceinline__ const u32 *aligned_words(const u8 *p, int *sh)
{
    *sh = (int)((unsigned long long)p & 3) * 8; /* 0 or 16 */
    return (const u32 *)((unsigned long long)p & ~3ull);
}
static __device__ __forceinline__ u32 shr64(u32 lo, u32 hi, int sh) /* (hi:lo) >> sh, low word */
{
    u32 r;
    asm("shf.r.wrap.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(sh));
    return r;
}

/* q6_K: the step is quarter c of a super-block: half hh = c / 2, element groups g0 = 2(c % 2) and
 * g0 + 1, l < 32 each. Thread h takes l in 16h..16h+15: group g0 from L[l], g0 + 1 from L[l + 32]
 * (low nibbles when g0 = 0, high when 2), two high bits of each from H[l]. */
template <> struct wpiece<KT_Q6_K> {
    u32 la[5], lb[5], hb[5]; /* aligned words around L[16h..], L[32 + 16h..], H[16h..] */
    u32 dq;                  /* f16 bits of d */
    int s0, s1;              /* the two 16-element scales (int8) */
    int c, sh;
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const u8 *b = row + 210 * (k0 / 256);
        c = (k0 % 256) / 64;
        const int hh = c / 2, g0 = 2 * (c % 2);
        const u8 *L = b + 64 * hh + 16 * h, *H = b + 128 + 32 * hh + 16 * h;
        const u32 *pa = aligned_words(L, &sh), *pb = (const u32 *)((const u8 *)pa + 32);
        const u32 *ph = (const u32 *)((const u8 *)pa + (H - L));
#pragma unroll
        for (int i = 0; i < 5; i++)
            la[i] = pa[i], lb[i] = pb[i], hb[i] = ph[i];
        const i8 *S = (const i8 *)(b + 192 + 8 * hh);
        dq = ld16(b + 208);
        s0 = S[h + 2 * g0];
        s1 = S[h + 2 * g0 + 2];
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        u32 wa[4], wb[4], wh[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            wa[i] = shr64(la[i], la[i + 1], sh), wb[i] = shr64(lb[i], lb[i + 1], sh), wh[i] = shr64(hb[i], hb[i + 1], sh);
        const float d = h2f((u16)dq), d0 = d * (float)s0, d1 = d * (float)s1;
        const int ns = 4 * (c % 2); /* nibble of L: low for groups 0/1, high for 2/3 */
        const int hs = 4 * (c % 2); /* H bits 2·g0 (and 2·g0 + 2 for the second group) */
        u32 lo[8], hi[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const u32 qa = ((wa[j] >> ns) & 0x0F0F0F0Fu) | (((wh[j] >> hs) & 0x03030303u) << 4);
            const u32 qb = ((wb[j] >> ns) & 0x0F0F0F0Fu) | (((wh[j] >> (hs + 2)) & 0x03030303u) << 4);
#pragma unroll
            for (int k = 0; k < 4; k += 2) {
                lo[2 * j + k / 2] = h2pack(d0 * bytef(qa, k, 32.0f), d0 * bytef(qa, k + 1, 32.0f));
                hi[2 * j + k / 2] = h2pack(d1 * bytef(qb, k, 32.0f), d1 * bytef(qb, k + 1, 32.0f));
            }
        }
        put(16 * h, lo);
        put(32 + 16 * h, hi);
    }
};

/* q8_0: thread h takes block k0 / 32 + h: elements 32h + i */
template <> struct wpiece<KT_Q8_0> {
    u32 q[9]; /* aligned words around the 32 quants */
    u32 dq;
    int sh;
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const u8 *b = row + 34 * (k0 / 32 + h);
        dq = ld16(b);
        const u32 *p = aligned_words(b + 2, &sh);
#pragma unroll
        for (int i = 0; i < 8; i++)
            q[i] = p[i];
        q[8] = sh ? p[8] : 0u; /* aligned: the 32 bytes are 8 words; never read past the block */
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        u32 w[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            w[i] = shr64(q[i], q[i + 1], sh);
        const float d = h2f((u16)dq);
        u32 o[16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const u32 u = w[j] ^ 0x80808080u; /* signed bytes + 128 */
            o[2 * j] = h2pack(d * bytef(u, 0, 128.0f), d * bytef(u, 1, 128.0f));
            o[2 * j + 1] = h2pack(d * bytef(u, 2, 128.0f), d * bytef(u, 3, 128.0f));
        }
        put(32 * h, o);
        put(32 * h + 16, o + 8);
    }
};

/* iq4_xs: thread h takes sub-block ib = (k0 % 256) / 32 + h: 16 bytes, low nibbles elements 32h + i,
 * high 32h + 16 + i, through the non-linear table */
template <> struct wpiece<KT_IQ4_XS> {
    uint2 qa, qb;
    u32 dh;  /* f16 d | scales_h << 16 */
    u32 scl; /* the scales_l byte holding ib's low 4 bits */
    int ib;
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const u8 *b = row + 136 * (k0 / 256);
        ib = (k0 % 256) / 32 + h;
        qa = *(const uint2 *)(b + 8 + 16 * ib);
        qb = *(const uint2 *)(b + 16 + 16 * ib);
        dh = *(const u32 *)b;
        scl = b[4 + ib / 2];
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        const int ls = (int)((scl >> (4 * (ib % 2))) & 0xF) | (int)(((dh >> (16 + 2 * ib)) & 3) << 4);
        const float dl = h2f((u16)(dh & 0xFFFF)) * (float)(ls - 32);
        const u32 w[4] = { qa.x, qa.y, qb.x, qb.y };
        u32 lo[8], hi[8];
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
            const u32 b0 = byte_of(w, i), b1 = byte_of(w, i + 1);
            lo[i / 2] = h2pack(dl * (float)k_iq4nl[b0 & 0xF], dl * (float)k_iq4nl[b1 & 0xF]);
            hi[i / 2] = h2pack(dl * (float)k_iq4nl[b0 >> 4], dl * (float)k_iq4nl[b1 >> 4]);
        }
        put(32 * h, lo);
        put(32 * h + 16, hi);
    }
};

/* f16: thread h copies halves k0 + 32h .. + 31 (rows of 2·k bytes, k % 64 == 0: 16-byte aligned) */
template <> struct wpiece<KT_F16> {
    uint4 v[4];
    __device__ __forceinline__ void load(const u8 *row, int k0, int h)
    {
        const uint4 *p = (const uint4 *)(row + 2 * (k0 + 32 * h));
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = p[i];
    }
    template <class P> __device__ __forceinline__ void store(P put, int h) const
    {
        const u32 w[16] = { v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w,
                            v[2].x, v[2].y, v[2].z, v[2].w, v[3].x, v[3].y, v[3].z, v[3].w };
        put(32 * h, w);
        put(32 * h + 16, w + 8);
    }
};

#endif /* !LLM_HIP */
#endif
