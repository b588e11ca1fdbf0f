/* gdn.h — CPU ops of the Gated DeltaNet layer (shared spec
 * arch-qwen35.md §6.4, §8): gate activations, the causal depthwise conv with
 * its carried state, the q/k L2 norm, and the delta-rule recurrence of one
 * value head in two exact forms — token by token (what llama.cpp 80fb11a's
 * fused kernel runs, f32) and chunked (64-token blocks, for prefill; the
 * block algebra runs in double and the state is rounded to f32 once per
 * call, so both forms agree to f32 rounding).
 *
 * Recurrent state of one value head: S[d_v][d_k] f32, element (key a,
 * value b) at b·d_k + a (llama.cpp's layout, §6.4.2). */
#ifndef LLM170_GDN_H
#define LLM170_GDN_H

#include <stdbool.h>
#include <stddef.h>

#define GDN_CHUNK 64

static inline float gdn_sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
static inline float gdn_softplus(float x) { return x > 20.0f ? x : __builtin_logf(1.0f + __builtin_expf(x)); }

/* x ← x / max(‖x‖₂, eps) (ggml_l2_norm; Σx² in double). */
void gdn_l2_norm(float *x, int n, float eps);

/* Causal depthwise conv + SiLU over T inputs of one sequence, channels [c0, c1).
 * in: row t at in + t·in_stride (conv_dim wide); out likewise at out + t·out_stride.
 * w: [conv_dim][d_conv] taps (oldest first); state: [conv_dim][d_conv−1] previous inputs,
 * oldest first, updated to the last d_conv−1 inputs. rows[t] picks the batch row of step t. */
void gdn_conv(const float *in, size_t in_stride, float *out, size_t out_stride, const int *rows, int T,
              const float *w, float *state, int d_conv, int c0, int c1);

/* One value head over T tokens. For step t (batch row r = rows[t]):
 *   q = Q + r·qk_stride, k = K + r·qk_stride (d_k, L2-normed, unscaled), v = V + r·v_stride (d_v),
 *   β = beta[r·gate_stride], g = gdecay[r·gate_stride] (log decay, ≤ 0),
 *   S ← e^g S; δ = β (v − Sᵀk); S ← S + k δᵀ; o = scale · Sᵀq → O + r·o_stride.
 * S: [d_v][d_k] f32, updated in place. */
struct gdn_head {
    const float *Q, *K, *V;
    size_t qk_stride, v_stride;
    const float *beta, *gdecay;
    size_t gate_stride;
    float *O;
    size_t o_stride;
    int d_k, d_v;
    float scale;
};
void gdn_recurrent(const struct gdn_head *h, const int *rows, int T, float *S);
/* The scalar reference and the AVX2/FMA form gdn_recurrent dispatches to (d_k % 8 == 0). */
void gdn_recurrent_ref(const struct gdn_head *h, const int *rows, int T, float *S);
void gdn_recurrent_avx2(const struct gdn_head *h, const int *rows, int T, float *S);
/* The same result by 64-token chunks (spec §6.4.1), in f32 on contiguous rows (AVX2 when d_k and
 * d_v are multiples of 8). work: gdn_chunk_work(d_k, d_v) doubles. gdn_chunked_ref does the chunk
 * algebra in double (the reference the tests hold both forms to). */
void gdn_chunked(const struct gdn_head *h, const int *rows, int T, float *S, double *work);
void gdn_chunked_ref(const struct gdn_head *h, const int *rows, int T, float *S, double *work);
/* y += a·x and a·b over n floats (n % 8 == 0), for the f32 chunked form. */
void gdn_axpy_avx2(float *y, float a, const float *x, int n);
float gdn_dot_avx2(const float *a, const float *b, int n);
size_t gdn_chunk_work(int d_k, int d_v);

#endif
