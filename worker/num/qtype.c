/* qtype.c — the ggml type table: block sizes, byte sizes, vec_dot types
 * (shared spec gguf-and-quants.md §2). Compute support is marked per type;
 * types we can only skip over (IQ2/IQ3/IQ1/TQ, integer types) are `known`
 * so a GGUF that holds them still opens and reports them by name. */
#include "quant.h"

#define T(id, nm, b, s, comp, vd) [id] = { nm, b, s, true, comp, vd }

static const struct qtype_info g_types[QT_COUNT] = {
    T(QT_F32, "f32", 1, 4, true, QT_F32),
    T(QT_F16, "f16", 1, 2, true, QT_F16),
    T(QT_Q4_0, "q4_0", 32, 18, true, QT_Q8_0),
    T(QT_Q4_1, "q4_1", 32, 20, true, QT_Q8_1),
    T(QT_Q5_0, "q5_0", 32, 22, true, QT_Q8_0),
    T(QT_Q5_1, "q5_1", 32, 24, true, QT_Q8_1),
    T(QT_Q8_0, "q8_0", 32, 34, true, QT_Q8_0),
    T(QT_Q8_1, "q8_1", 32, 36, false, QT_Q8_1),
    T(QT_Q2_K, "q2_K", 256, 84, true, QT_Q8_K),
    T(QT_Q3_K, "q3_K", 256, 110, true, QT_Q8_K),
    T(QT_Q4_K, "q4_K", 256, 144, true, QT_Q8_K),
    T(QT_Q5_K, "q5_K", 256, 176, true, QT_Q8_K),
    T(QT_Q6_K, "q6_K", 256, 210, true, QT_Q8_K),
    T(QT_Q8_K, "q8_K", 256, 292, false, QT_Q8_K),
    T(QT_IQ2_XXS, "iq2_xxs", 256, 66, false, QT_Q8_K),
    T(QT_IQ2_XS, "iq2_xs", 256, 74, false, QT_Q8_K),
    T(QT_IQ3_XXS, "iq3_xxs", 256, 98, false, QT_Q8_K),
    T(QT_IQ1_S, "iq1_s", 256, 50, false, QT_Q8_K),
    T(QT_IQ4_NL, "iq4_nl", 32, 18, true, QT_Q8_0),
    T(QT_IQ3_S, "iq3_s", 256, 110, false, QT_Q8_K),
    T(QT_IQ2_S, "iq2_s", 256, 82, false, QT_Q8_K),
    T(QT_IQ4_XS, "iq4_xs", 256, 136, true, QT_Q8_K),
    T(QT_I8, "i8", 1, 1, false, QT_I8),
    T(QT_I16, "i16", 1, 2, false, QT_I16),
    T(QT_I32, "i32", 1, 4, false, QT_I32),
    T(QT_I64, "i64", 1, 8, false, QT_I64),
    T(QT_F64, "f64", 1, 8, false, QT_F64),
    T(QT_IQ1_M, "iq1_m", 256, 56, false, QT_Q8_K),
    T(QT_BF16, "bf16", 1, 2, true, QT_BF16),
    T(QT_TQ1_0, "tq1_0", 256, 54, false, QT_Q8_K),
    T(QT_TQ2_0, "tq2_0", 256, 66, false, QT_Q8_K),
    T(QT_MXFP4, "mxfp4", 32, 17, true, QT_Q8_0),
};

const struct qtype_info *qtype_get(uint32_t type)
{
    if (type >= QT_COUNT || !g_types[type].known)
        return NULL;
    return &g_types[type];
}

size_t qtype_row_size(enum qtype t, int64_t n)
{
    const struct qtype_info *q = qtype_get((uint32_t)t);
    if (!q || n < 0)
        return 0;
    return (size_t)(n / q->blck) * (size_t)q->size;
}
