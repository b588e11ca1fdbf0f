/* quant_gen.h — deterministic test matrices for the matmul goldens, shared by
 * tests/test_quant.c and tests/golden/gen_matmul_golden.c (which computes the
 * expected outputs with llama.cpp). Weights are random bytes with the scale
 * fields set to moderate finite values; they never pass through our code. */
#ifndef LLM170_QUANT_GEN_H
#define LLM170_QUANT_GEN_H

#include <stdint.h>
#include <string.h>

#define QG_N_IN 512
#define QG_N_OUT 8
#define QG_N_TOK 3

struct qg_rng { uint64_t s; };
static inline uint64_t qg_next(struct qg_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
static inline float qg_unit(struct qg_rng *r) { return (float)((double)(qg_next(r) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }
/* fp16 bits: random sign and mantissa, exponent field 10..14 (≈ 2^-5 .. 1) */
static inline uint16_t qg_h(struct qg_rng *r)
{
    return (uint16_t)((qg_next(r) & 1) << 15 | (10 + qg_next(r) % 5) << 10 | (qg_next(r) & 1023));
}
static inline void qg_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* ggml type id, block elements, block bytes, byte offsets of fp16 scales (−1: none) */
struct qg_type { int id; const char *name; int blck, size, off0, off1; };
static const struct qg_type qg_types[] = {
    {0, "f32", 1, 4, -1, -1},      {1, "f16", 1, 2, -1, -1},      {30, "bf16", 1, 2, -1, -1},
    {2, "q4_0", 32, 18, 0, -1},    {3, "q4_1", 32, 20, 0, 2},     {6, "q5_0", 32, 22, 0, -1},
    {7, "q5_1", 32, 24, 0, 2},     {8, "q8_0", 32, 34, 0, -1},    {10, "q2_K", 256, 84, 80, 82},
    {11, "q3_K", 256, 110, 108, -1}, {12, "q4_K", 256, 144, 0, 2}, {13, "q5_K", 256, 176, 0, 2},
    {14, "q6_K", 256, 210, 208, -1}, {20, "iq4_nl", 32, 18, 0, -1}, {23, "iq4_xs", 256, 136, 0, -1},
    {39, "mxfp4", 32, 17, -1, -1},
};
#define QG_NTYPES (int)(sizeof qg_types / sizeof qg_types[0])

/* Weights of type k: QG_N_OUT rows of QG_N_IN elements into w (bytes returned). */
static inline size_t qg_weights(int k, uint8_t *w)
{
    const struct qg_type *t = &qg_types[k];
    struct qg_rng r = {0x243F6A8885A308D3ull + (uint64_t)t->id * 0x9E3779B97F4A7C15ull};
    size_t nb = (size_t)QG_N_OUT * QG_N_IN / t->blck, bytes = nb * t->size;
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)qg_next(&r);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *B = w + b * t->size;
        if (t->id == 0) {
            float f = qg_unit(&r);
            memcpy(B, &f, 4);
        } else if (t->id == 1) {
            qg_put16(B, qg_h(&r));
        } else if (t->id == 30) {
            float f = qg_unit(&r);
            uint32_t u;
            memcpy(&u, &f, 4);
            qg_put16(B, (uint16_t)(u >> 16));
        } else if (t->id == 39) {
            B[0] = (uint8_t)(120 + qg_next(&r) % 8);
        }
        if (t->off0 >= 0)
            qg_put16(B + t->off0, qg_h(&r));
        if (t->off1 >= 0)
            qg_put16(B + t->off1, qg_h(&r));
    }
    return bytes;
}

/* Activations: QG_N_TOK rows of QG_N_IN floats. */
static inline void qg_acts(float *x)
{
    struct qg_rng r = {0x13198A2E03707344ull};
    for (int i = 0; i < QG_N_TOK * QG_N_IN; i++)
        x[i] = qg_unit(&r) * 2.0f;
}

#endif
