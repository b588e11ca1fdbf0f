/* deq.glsl — dequantization of weight rows for every ggml weight type, bit-exact with the CPU's
 * dequant_row (worker/num/quant_ref.c; block layouts: spec gguf-and-quants.md §3).
 *
 * The includer declares   layout(std430, binding = 0) readonly buffer WB { uint Wq[]; };
 * (the weight bytes as little-endian 32-bit words) and defines exactly one of T_F32, T_F16, T_BF16,
 * T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_NL, T_IQ4_XS,
 * T_MXFP4. Provided:
 *   const uint DEQ_BLOCK, DEQ_BYTES   elements and bytes of a block (32 or 256 elements; F32, F16 and
 *                                     BF16 count a 32-element group as a block: 128, 64, 64 bytes)
 *   void deq32(uint row_off, uint g, out float v[32])
 *       v[i] = element 32·g + i of the row whose first byte is byte row_off of Wq. For 256-element
 *       blocks, g is the 32-element sub-range g % 8 of block g / 8.
 *   The types whose CPU dot product is an integer sum per block also give the integers themselves, for
 *   products that keep that form (mm.comp):
 *     DEQ_Q8_INT (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): void deq32_q(uint row_off, uint g, out float q[32],
 *         out float d) — element = q·d
 *     DEQ_Q8_INT_MIN (Q4_1, Q5_1): void deq32_q(uint row_off, uint g, out float q[32], out float d,
 *         out float m) — element = q·d + m
 *   (DEQ32_FROM_Q: such a type's deq32 is built from its deq32_q at the end of the file; MXFP4 keeps
 *   its own for its subnormal scales.)
 * Blocks need not be word-aligned (18-, 17-, 110-byte blocks …): every read goes through deq_u8,
 * deq_u16 and deq_u32, which take any byte offset and combine words.
 *
 * Exactness: fp16 is decoded with integer operations (exact for subnormals, inf and NaN, independent
 * of the driver's denormal handling). Every float product below is exact in f32 (≤ 24 significant
 * bits), so the only rounding is the final "+ m" / "- dmin·m" of Q4_1, Q5_1, Q2_K, Q4_K and Q5_K — one
 * rounding whether or not the compiler fuses it into an fma. Multiplies keep the CPU's order anyway. */

/* ------------------------------------------------------------------ reads and conversions */

uint deq_u8(uint off) { return (Wq[off >> 2u] >> ((off & 3u) << 3u)) & 0xFFu; }

/* 4 bytes at any offset (little-endian); the second word is only read when the bytes straddle it */
uint deq_u32(uint off)
{
    const uint i = off >> 2u, s = (off & 3u) << 3u;
    uint w = Wq[i];
    if (s != 0u)
        w = (w >> s) | (Wq[i + 1u] << (32u - s));
    return w;
}

uint deq_u16(uint off)
{
    if ((off & 3u) == 3u)
        return deq_u32(off) & 0xFFFFu;
    return (Wq[off >> 2u] >> ((off & 3u) << 3u)) & 0xFFFFu;
}

/* binary16 bits → f32, as the CPU's fp16_to_f32 */
float deq_h2f(uint h)
{
    const uint s = (h & 0x8000u) << 16u, e = (h >> 10u) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) /* inf, NaN */
        return uintBitsToFloat(s | 0x7F800000u | (m << 13u));
    if (e != 0u)
        return uintBitsToFloat(s | ((e + 112u) << 23u) | (m << 13u));
    if (m == 0u)
        return uintBitsToFloat(s);
    const int msb = findMSB(m); /* subnormal half: m·2^-24, a normal f32 */
    return uintBitsToFloat(s | (uint(103 + msb) << 23u) | ((m << uint(23 - msb)) & 0x7FFFFFu));
}

float deq_f16(uint off) { return deq_h2f(deq_u16(off)); }

/* ------------------------------------------------------------------ types */

#if defined(T_F32)
/* F32: 4-byte IEEE binary32 elements. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 128u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + g * DEQ_BYTES;
    for (uint i = 0u; i < 32u; i++)
        v[i] = uintBitsToFloat(deq_u32(o + 4u * i));
}

#elif defined(T_F16)
/* F16: 2-byte IEEE binary16 elements. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 64u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + g * DEQ_BYTES;
    for (uint k = 0u; k < 16u; k++) {
        const uint w = deq_u32(o + 4u * k);
        v[2u * k] = deq_h2f(w & 0xFFFFu);
        v[2u * k + 1u] = deq_h2f(w >> 16u);
    }
}

#elif defined(T_BF16)
/* BF16: 2-byte elements, the top half of an f32. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 64u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + g * DEQ_BYTES;
    for (uint k = 0u; k < 16u; k++) {
        const uint w = deq_u32(o + 4u * k);
        v[2u * k] = uintBitsToFloat(w << 16u);
        v[2u * k + 1u] = uintBitsToFloat(w & 0xFFFF0000u);
    }
}

#elif defined(T_Q4_0)
/* Q4_0, 18 B: d fp16; qs[16] — low nibbles elements 0..15, high nibbles 16..31; y = (q - 8)·d. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 18u;
#define DEQ_Q8_INT
#define DEQ32_FROM_Q
void deq32_q(uint row_off, uint g, out float v[32], out float d)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 2u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float(int(q & 0xFu) - 8);
            v[j + 16u] = float(int(q >> 4u) - 8);
        }
    }
}

#elif defined(T_Q4_1)
/* Q4_1, 20 B: d fp16, m fp16; qs[16] as Q4_0; y = q·d + m. deq32_q: the q, d and m themselves. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 20u;
#define DEQ_Q8_INT_MIN
#define DEQ32_FROM_Q
void deq32_q(uint row_off, uint g, out float v[32], out float d, out float m)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o), m = deq_f16(o + 2u);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 4u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float(q & 0xFu);
            v[j + 16u] = float(q >> 4u);
        }
    }
}

#elif defined(T_Q5_0)
/* Q5_0, 22 B: d fp16; qh u32 (bit j = 5th bit of element j); qs[16] as Q4_0; y = (q - 16)·d. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 22u;
#define DEQ_Q8_INT
#define DEQ32_FROM_Q
void deq32_q(uint row_off, uint g, out float v[32], out float d)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o);
    const uint qh = deq_u32(o + 2u);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 6u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float(int((q & 0xFu) | (((qh >> j) & 1u) << 4u)) - 16);
            v[j + 16u] = float(int((q >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u)) - 16);
        }
    }
}

#elif defined(T_Q5_1)
/* Q5_1, 24 B: d fp16, m fp16; qh u32; qs[16] as Q5_0; y = q·d + m. deq32_q: the q, d and m themselves. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 24u;
#define DEQ_Q8_INT_MIN
#define DEQ32_FROM_Q
void deq32_q(uint row_off, uint g, out float v[32], out float d, out float m)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o), m = deq_f16(o + 2u);
    const uint qh = deq_u32(o + 4u);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 8u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float((q & 0xFu) | (((qh >> j) & 1u) << 4u));
            v[j + 16u] = float((q >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u));
        }
    }
}

#elif defined(T_Q8_0)
/* Q8_0, 34 B: d fp16; qs[32] int8; y = q·d. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 34u;
#define DEQ_Q8_INT
#define DEQ32_FROM_Q
void deq32_q(uint row_off, uint g, out float v[32], out float d)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o);
    for (uint k = 0u; k < 8u; k++) {
        const int w = int(deq_u32(o + 2u + 4u * k));
        for (uint b = 0u; b < 4u; b++)
            v[4u * k + b] = float(bitfieldExtract(w, int(8u * b), 8));
    }
}

#elif defined(T_IQ4_NL)
/* IQ4_NL, 18 B: d fp16; qs[16] as Q4_0, nibbles index kvalues_iq4nl; y = d·kvalues[q]. */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 18u;
#define DEQ_Q8_INT
#define DEQ32_FROM_Q
const int deq_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
void deq32_q(uint row_off, uint g, out float v[32], out float d)
{
    const uint o = row_off + g * DEQ_BYTES;
    d = deq_f16(o);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 2u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float(deq_kvalues_iq4nl[q & 0xFu]);
            v[j + 16u] = float(deq_kvalues_iq4nl[q >> 4u]);
        }
    }
}

#elif defined(T_MXFP4)
/* MXFP4, 17 B: e (E8M0 exponent, u8); qs[16] as Q4_0, nibbles index the doubled E2M1 table;
 * y = kvalues_mxfp4[q]·d with d = 2^(e-128), half the E8M0 value (the CPU's e8m0_half). */
const uint DEQ_BLOCK = 32u, DEQ_BYTES = 17u;
const int deq_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* k·2^(e-128) for e < 2, where d is an f32 subnormal that a GPU may flush: built from bits. k·2^(e-128)
 * = n·2^-149 with n = |k|·2^(21+e) < 2^26, whose only set bits are its top 4, so it is exact in f32. */
float deq_mxfp4_tiny(int k, uint e)
{
    const uint n = uint(abs(k)) << (21u + e), s = k < 0 ? 0x80000000u : 0u;
    if (n < 0x1000000u) /* exponent field 0 or 1: the bits are n itself */
        return uintBitsToFloat(s | n);
    const int msb = findMSB(n);
    return uintBitsToFloat(s | (uint(msb - 22) << 23u) | ((n >> uint(msb - 23)) & 0x7FFFFFu));
}

#define DEQ_Q8_INT
/* the table values and d (an f32 subnormal for e < 2: products with it may be flushed to 0 on a GPU that
 * flushes denormals, a loss below 2^-126 of what a block could hold) */
void deq32_q(uint row_off, uint g, out float v[32], out float d)
{
    const uint o = row_off + g * DEQ_BYTES;
    const uint e = deq_u8(o);
    d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23u);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 1u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = float(deq_kvalues_mxfp4[q & 0xFu]);
            v[j + 16u] = float(deq_kvalues_mxfp4[q >> 4u]);
        }
    }
}

void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + g * DEQ_BYTES;
    const uint e = deq_u8(o);
    const float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23u);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 1u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            const int lo = deq_kvalues_mxfp4[q & 0xFu], hi = deq_kvalues_mxfp4[q >> 4u];
            v[j] = e < 2u ? deq_mxfp4_tiny(lo, e) : float(lo) * d;
            v[j + 16u] = e < 2u ? deq_mxfp4_tiny(hi, e) : float(hi) * d;
        }
    }
}

#elif defined(T_Q2_K)
/* Q2_K, 84 B: scales[16] (low nibble scale, high nibble min, one per 16 elements); qs[64]; d, dmin fp16.
 * Element e: q = (qs[32·(e/128) + e%32] >> 2·((e%128)/32)) & 3; y = (d·sc)·q - dmin·min. */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 84u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, j = g & 7u;
    const float d = deq_f16(o + 80u), dmin = deq_f16(o + 82u);
    const uint sc2 = deq_u16(o + 2u * j); /* scales[2j] for elements 0..15, scales[2j+1] for 16..31 */
    const uint qo = o + 16u + 32u * (j >> 2u), sh = 2u * (j & 3u);
    for (uint h = 0u; h < 2u; h++) {
        const uint sc = (sc2 >> (8u * h)) & 0xFFu;
        const float dl = d * float(sc & 0xFu), ml = dmin * float(sc >> 4u);
        for (uint k = 0u; k < 4u; k++) {
            const uint w = deq_u32(qo + 16u * h + 4u * k);
            for (uint b = 0u; b < 4u; b++)
                v[16u * h + 4u * k + b] = dl * float((w >> (8u * b + sh)) & 3u) - ml;
        }
    }
}

#elif defined(T_Q3_K)
/* Q3_K, 110 B: hmask[32] (bit e/32 of hmask[e%32] = high bit of e); qs[64] low 2 bits as Q2_K;
 * scales[12] (16 six-bit scales, minus 32); d fp16. q = low2 - (hbit ? 0 : 4); y = (d·sc)·q. */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 110u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, j = g & 7u;
    const float d = deq_f16(o + 108u);
    const uint qo = o + 32u + 32u * (j >> 2u), sh = 2u * (j & 3u);
    for (uint h = 0u; h < 2u; h++) {
        const uint t = 2u * j + h; /* scale index, elements 16t..16t+15 */
        const uint low4 = t < 8u ? deq_u8(o + 96u + t) & 0xFu : deq_u8(o + 88u + t) >> 4u;
        const uint high2 = (deq_u8(o + 104u + (t & 3u)) >> (2u * (t >> 2u))) & 3u;
        const float dl = d * float(int(low4 | (high2 << 4u)) - 32);
        for (uint k = 0u; k < 4u; k++) {
            const uint w = deq_u32(qo + 16u * h + 4u * k), hm = deq_u32(o + 16u * h + 4u * k);
            for (uint b = 0u; b < 4u; b++) {
                const int low2 = int((w >> (8u * b + sh)) & 3u);
                const bool hbit = ((hm >> (8u * b + j)) & 1u) != 0u;
                v[16u * h + 4u * k + b] = dl * float(low2 - (hbit ? 0 : 4));
            }
        }
    }
}

#elif defined(T_Q4_K) || defined(T_Q5_K)
/* 6-bit scale and min of sub-block j from the 12 scale bytes at so (the CPU's k4_scale_min). */
void deq_k4_scale_min(uint so, uint j, out uint sc, out uint m)
{
    if (j < 4u) {
        sc = deq_u8(so + j) & 63u;
        m = deq_u8(so + j + 4u) & 63u;
    } else {
        sc = (deq_u8(so + j + 4u) & 0xFu) | ((deq_u8(so + j - 4u) >> 6u) << 4u);
        m = (deq_u8(so + j + 4u) >> 4u) | ((deq_u8(so + j) >> 6u) << 4u);
    }
}

#if defined(T_Q4_K)
/* Q4_K, 144 B: d, dmin fp16; scales[12] (8 six-bit scales + 8 mins); qs[128]: sub-block j is the
 * low (j even) or high (j odd) nibbles of qs[32·(j/2) ..]; y = (d·sc)·q - dmin·m. */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 144u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, j = g & 7u;
    const float d = deq_f16(o), dmin = deq_f16(o + 2u);
    uint sc, m;
    deq_k4_scale_min(o + 4u, j, sc, m);
    const float dl = d * float(sc), ml = dmin * float(m);
    const uint qo = o + 16u + 32u * (j >> 1u), sh = 4u * (j & 1u);
    for (uint k = 0u; k < 8u; k++) {
        const uint w = deq_u32(qo + 4u * k);
        for (uint b = 0u; b < 4u; b++)
            v[4u * k + b] = dl * float((w >> (8u * b + sh)) & 0xFu) - ml;
    }
}

#else
/* Q5_K, 176 B: d, dmin fp16; scales[12] as Q4_K; qh[32] (bit j of qh[l] = 5th bit of element l of
 * sub-block j); qs[128] as Q4_K; y = (d·sc)·(q4 + 16·hbit) - dmin·m. */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 176u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, j = g & 7u;
    const float d = deq_f16(o), dmin = deq_f16(o + 2u);
    uint sc, m;
    deq_k4_scale_min(o + 4u, j, sc, m);
    const float dl = d * float(sc), ml = dmin * float(m);
    const uint qo = o + 48u + 32u * (j >> 1u), sh = 4u * (j & 1u);
    for (uint k = 0u; k < 8u; k++) {
        const uint w = deq_u32(qo + 4u * k), hw = deq_u32(o + 16u + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = ((w >> (8u * b + sh)) & 0xFu) + 16u * ((hw >> (8u * b + j)) & 1u);
            v[4u * k + b] = dl * float(q) - ml;
        }
    }
}
#endif

#elif defined(T_Q6_K)
/* Q6_K, 210 B: ql[128] low 4 bits; qh[64] high 2 bits; scales[16] int8 (one per 16 elements); d fp16.
 * Half h = e/128, c = (e%128)/32, l = e%32: low4 = nibble c/2 of ql[64h + 32·(c%2) + l],
 * high2 = bits 2c of qh[32h + l]; y = (d·scales[e/16])·((low4 | high2 << 4) - 32). */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 210u;
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, j = g & 7u, h = j >> 2u, c = j & 3u;
    const float d = deq_f16(o + 208u);
    const uint lo = o + 64u * h + 32u * (c & 1u), lsh = 4u * (c >> 1u);
    const uint ho = o + 128u + 32u * h, hsh = 2u * c;
    for (uint i = 0u; i < 2u; i++) { /* is = l/16 */
        const int s = bitfieldExtract(int(deq_u8(o + 192u + 8u * h + i + 2u * c)), 0, 8);
        const float dl = d * float(s);
        for (uint k = 0u; k < 4u; k++) {
            const uint w = deq_u32(lo + 16u * i + 4u * k), hw = deq_u32(ho + 16u * i + 4u * k);
            for (uint b = 0u; b < 4u; b++) {
                const uint q = ((w >> (8u * b + lsh)) & 0xFu) | (((hw >> (8u * b + hsh)) & 3u) << 4u);
                v[16u * i + 4u * k + b] = dl * float(int(q) - 32);
            }
        }
    }
}

#elif defined(T_IQ4_XS)
/* IQ4_XS, 136 B: d fp16; scales_h u16 (2 high bits per sub-block); scales_l[4] (4 low bits per
 * sub-block); qs[128], 16 bytes per sub-block laid out as IQ4_NL; y = (d·(ls - 32))·kvalues[q]. */
const uint DEQ_BLOCK = 256u, DEQ_BYTES = 136u;
const int deq_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
void deq32(uint row_off, uint g, out float v[32])
{
    const uint o = row_off + (g >> 3u) * DEQ_BYTES, ib = g & 7u;
    const float d = deq_f16(o);
    const uint ls = ((deq_u8(o + 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 0xFu)
                    | (((deq_u16(o + 2u) >> (2u * ib)) & 3u) << 4u);
    const float dl = d * float(int(ls) - 32);
    for (uint k = 0u; k < 4u; k++) {
        const uint w = deq_u32(o + 8u + 16u * ib + 4u * k);
        for (uint b = 0u; b < 4u; b++) {
            const uint q = (w >> (8u * b)) & 0xFFu, j = 4u * k + b;
            v[j] = dl * float(deq_kvalues_iq4nl[q & 0xFu]);
            v[j + 16u] = dl * float(deq_kvalues_iq4nl[q >> 4u]);
        }
    }
}

#else
#error "deq.glsl: define one of T_F32, T_F16, T_BF16, T_Q4_0 … T_MXFP4"
#endif

/* the types that define their layout once, in deq32_q: elements from the integers */
#if defined(DEQ32_FROM_Q) && defined(DEQ_Q8_INT_MIN)
void deq32(uint row_off, uint g, out float v[32])
{
    float d, m;
    deq32_q(row_off, g, v, d, m);
    for (uint j = 0u; j < 32u; j++)
        v[j] = v[j] * d + m;
}
#elif defined(DEQ32_FROM_Q)
void deq32(uint row_off, uint g, out float v[32])
{
    float d;
    deq32_q(row_off, g, v, d);
    for (uint j = 0u; j < 32u; j++)
        v[j] = v[j] * d;
}
#endif
