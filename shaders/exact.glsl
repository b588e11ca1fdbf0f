/* exact.glsl — f32 division and square root rounded as IEEE rounds them (the CPU's), from adds and
 * multiplies only: a shader's "/" may be 2.5 ulp off and its sqrt 3 ulp, and fma may be a multiply and
 * an add (Vulkan allows each), while the CPU's results are correctly rounded. Adds, subtracts and
 * multiplies are correctly rounded in Vulkan; `precise` keeps the compiler from reassociating them.
 *   two_prod(a, b, p, e): p + e = a·b exactly (Dekker: 12-bit halves, products exact in f32)
 *   div_rn(a, b), sqrt_rn(a): the approximate result, corrected once by its exact residual (a quotient or
 *   root of floats is never exactly halfway between two floats, so one step rounds it right) */
void two_prod(float a, float b, out float p, out float e)
{
    precise float ca = 4097.0 * a, cb = 4097.0 * b;
    precise float ah = ca - (ca - a), bh = cb - (cb - b);
    precise float al = a - ah, bl = b - bh;
    precise float pp = a * b;
    precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = ee;
}

float div_rn(float a, float b)
{
    precise float q = a / b;
    float p, e;
    two_prod(q, b, p, e);
    precise float r = (a - p) - e; /* a − q·b, exact while q is within a few ulp */
    precise float c = q + r / b;
    return c;
}

float sqrt_rn(float a)
{
    precise float s = sqrt(a);
    float p, e;
    two_prod(s, s, p, e);
    precise float r = (a - p) - e;
    precise float c = s + r / (2.0 * s);
    return c;
}
