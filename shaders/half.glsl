/* half.glsl — f16 conversions with the CPU's rounding: f32 → f16 round to nearest even (packHalf2x16
 * leaves the rounding to the implementation), f16 → f32 exact. */
uint h_from_f(float f)
{
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) /* rounds to ≥ 65520: inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) { /* below f16's smallest normal: a subnormal, in units of 2^-24 */
        const uint e = ax >> 23;
        if (e < 102u) /* below half of 2^-24 */
            return sign;
        const uint m = (ax & 0x7fffffu) | 0x800000u;
        const uint sh = 126u - e; /* 14..24 */
        uint h = m >> sh;
        const uint rem = m & ((1u << sh) - 1u), half_ = 1u << (sh - 1u);
        if (rem > half_ || (rem == half_ && (h & 1u) != 0u))
            h++;
        return sign | h;
    }
    uint h = ((ax - 0x38000000u) >> 13); /* rebias the exponent (127 → 15), keep 10 mantissa bits */
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u))
        h++;
    return sign | h;
}

float f_from_h(uint h) { return unpackHalf2x16(h & 0xffffu).x; }

/* f rounded to f16 and back */
float round_h(float f) { return f_from_h(h_from_f(f)); }
