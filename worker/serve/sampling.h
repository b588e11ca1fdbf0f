/* sampling.h — llama.cpp's sampler chain, token for token (shared/spec/sampling.md).
 *
 * Goal: for the same logits, parameters and seed, pick the same token as
 * llama-server (llama.cpp 80fb11a). The chain is built per request:
 *   logit-bias (if any entry) → configured samplers (default order
 *   penalties → dry → top_n_sigma → top_k → typical_p → top_p → min_p → xtc →
 *   temperature) → dist(seed).
 * The RNG is MT19937 with libstdc++'s generate_canonical<double,53>, one draw
 * per sampled token, so a seed reproduces llama.cpp's choices.
 *
 * dry, top_n_sigma, xtc, mirostat and dynamic temperature are not specified
 * (spec §3.8) and therefore not implemented: they are no-ops while disabled
 * (the defaults) and smp_new rejects parameters that would enable them.
 *
 * Memory: smp_new allocates every buffer (candidates for the whole vocab,
 * scratch, penalty window); smp_sample / smp_accept / smp_*probs never
 * allocate. A chain is not thread-safe; use one per sequence. */
#ifndef LLM170_SAMPLING_H
#define LLM170_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "../../common/err.h"

struct gguf;

/* The configurable samplers (llama.cpp's common_sampler_type). */
enum smp_type {
    SMP_PENALTIES = 0,
    SMP_DRY,
    SMP_TOP_N_SIGMA,
    SMP_TOP_K,
    SMP_TYPICAL_P,
    SMP_TOP_P,
    SMP_MIN_P,
    SMP_XTC,
    SMP_TEMPERATURE,
    SMP_TYPE_COUNT,
};

#define SMP_MAX_SAMPLERS 16
#define SMP_DEFAULT_SEED 0xFFFFFFFFu /* LLAMA_DEFAULT_SEED: pick a random seed */

/* One logit-bias entry: logit[token] += bias (bias may be -INFINITY). */
struct smp_bias {
    int32_t token;
    float bias;
};

/* Bits of smp_params.set_mask: a parameter given explicitly (command line or
 * request) is never replaced by the GGUF's general.sampling.* value. */
enum smp_param_bit {
    SMP_SET_SEQUENCE = 1u << 0,
    SMP_SET_TOP_K = 1u << 1,
    SMP_SET_TOP_P = 1u << 2,
    SMP_SET_MIN_P = 1u << 3,
    SMP_SET_XTC_PROBABILITY = 1u << 4,
    SMP_SET_XTC_THRESHOLD = 1u << 5,
    SMP_SET_TEMP = 1u << 6,
    SMP_SET_PENALTY_LAST_N = 1u << 7,
    SMP_SET_PENALTY_REPEAT = 1u << 8,
    SMP_SET_MIROSTAT = 1u << 9,
    SMP_SET_MIROSTAT_TAU = 1u << 10,
    SMP_SET_MIROSTAT_ETA = 1u << 11,
};

struct smp_params {
    float temp;              /* ≤ 0 → greedy (argmax, first maximum wins) */
    int32_t top_k;           /* ≤ 0 → off */
    float top_p;             /* ≥ 1 → off */
    float min_p;             /* ≤ 0 → off */
    float typical_p;         /* ≥ 1 → off */
    float repeat_penalty;    /* 1 → off */
    int32_t repeat_last_n;   /* window of accepted tokens; 0 → off; −1 → n_ctx */
    float frequency_penalty; /* subtracted c·freq for a token seen c times in the window */
    float presence_penalty;  /* subtracted once for a token seen in the window */
    int32_t n_ctx;           /* slot context size, only used when repeat_last_n == −1 */
    int32_t min_keep;        /* top_p / min_p / typical_p keep at least this many */
    uint32_t seed;           /* SMP_DEFAULT_SEED → random from the system */
    int32_t n_probs;         /* top logprobs the caller wants reported (0 = none) */
    bool post_sampling_probs;/* report chain probabilities instead of raw-logit softmax */

    /* Not specified by the spec; must stay at their "off" values. */
    float dry_multiplier;    /* 0 → off */
    float top_n_sigma;       /* ≤ 0 → off */
    float xtc_probability;   /* ≤ 0 → off */
    float xtc_threshold;     /* > 0.5 → off */
    int32_t mirostat;        /* 0 → off */
    float mirostat_tau, mirostat_eta;
    float dynatemp_range;    /* ≤ 0 → plain temperature */

    int32_t n_samplers;                       /* entries used in samplers[] */
    enum smp_type samplers[SMP_MAX_SAMPLERS]; /* chain order before dist */

    /* Logit-bias list, applied in order: request entries, then −inf for each
     * eog token when ignore_eos, then −inf for each suppressed token. The
     * arrays are copied by smp_new; ids outside [0, n_vocab) are dropped. */
    const struct smp_bias *logit_bias; /* [n_logit_bias] */
    int32_t n_logit_bias;
    bool ignore_eos;
    const int32_t *eog_tokens;         /* [n_eog_tokens], used when ignore_eos */
    int32_t n_eog_tokens;
    const int32_t *suppress_tokens;    /* [n_suppress_tokens], GGUF tokenizer.ggml.suppress_tokens */
    int32_t n_suppress_tokens;

    uint32_t set_mask;       /* enum smp_param_bit: fields the GGUF must not override */
};

/* llama-server's built-in defaults (common_params_sampling): temp 0.8,
 * top_k 40, top_p 0.95, min_p 0.05, typical 1, repeat 1 / last_n 64, seed
 * random, the default chain order; set_mask 0. */
struct smp_params smp_params_default(void);

/* Apply one GGUF recommendation `general.sampling.<name>` (name without the
 * prefix, e.g. "top_k", "temp", "sequence") given its value as text, as
 * llama.cpp does (strtol/strtof; sequence = names separated by ';'). Skipped
 * when the matching set_mask bit is set. Unknown names are ignored (0). */
int smp_params_apply_model_value(struct smp_params *p, const char *name, const char *text,
                                 struct err *e);

/* Apply the model's recommendations, the GGUF keys general.sampling.sequence,
 * .top_k, .top_p, .min_p, .xtc_probability, .xtc_threshold, .temp,
 * .penalty_last_n, .penalty_repeat, .mirostat, .mirostat_tau, .mirostat_eta
 * — each only when present and its set_mask bit is clear (precedence:
 * request > command line > GGUF > built-in, spec §2). Values are read as
 * llama.cpp does: as text (floats printed "%f"), then strtol/strtof; a value
 * that does not parse (bool, array, bad text) is ignored; the sequence is
 * split on ';' only. */
int smp_params_apply_gguf(struct smp_params *p, const struct gguf *g, struct err *e);

/* tokenizer.ggml.suppress_tokens (INT32 array) for smp_params.suppress_tokens:
 * *out is malloc'ed (caller frees; NULL with *n_out 0 when the key is
 * absent); ids outside [0, n_vocab) are dropped. */
int smp_suppress_tokens_from_gguf(const struct gguf *g, int32_t n_vocab, int32_t **out,
                                  int32_t *n_out, struct err *e);

/* Parse a sampler sequence ("top_k;top_p;min_p;temperature", separator any of
 * ';' ',' ' ') into p->samplers. Accepts llama.cpp's names and aliases
 * (case-insensitive); unknown names are skipped as llama.cpp does; infill and
 * adaptive_p give ERR_UNSUPPORTED. */
int smp_params_set_sequence(struct smp_params *p, const char *text, struct err *e);

/* Name of a sampler type ("top_k" …). */
const char *smp_type_name(enum smp_type t);

struct smp_chain;

/* Build a chain for a vocabulary of n_vocab tokens. Validates the
 * parameters (ERR_INVALID / ERR_UNSUPPORTED); NULL on failure with e set. */
struct smp_chain *smp_new(const struct smp_params *p, int32_t n_vocab, struct err *e);
void smp_free(struct smp_chain *c);

/* Back to the state right after smp_new: empty penalty window, RNG reseeded
 * with the same seed (the one actually used when the seed was random). */
void smp_reset(struct smp_chain *c);

/* The seed in use (the drawn one when params asked for a random seed). */
uint32_t smp_seed(const struct smp_chain *c);

/* Run the chain on logits[n_vocab] (not modified) and return the chosen
 * token id (≥ 0), or a negative ERR_* code when no candidate is left. Does
 * not accept the token: call smp_accept. */
int32_t smp_sample(struct smp_chain *c, const float *logits);

/* Constrain the following smp_sample calls to the tokens whose bit is set
 * in allow[(n_vocab + 31) / 32] (structured output, gram.h): the others
 * leave the candidate list before anything else runs (logit bias,
 * penalties, top-k, greedy), so neither a sampler nor the draw can pick
 * them. The chain keeps the pointer; NULL lifts the constraint. While set,
 * a pre-selection for smp_sample_cands must be made among the allowed
 * tokens (engine_decode_topk's allow): one made without the mask may hold
 * none of them. */
void smp_set_allowed(struct smp_chain *c, const uint32_t *allow);

/* The k of a chain whose draw depends on the k largest logits of the row
 * alone (the first of its samplers that does anything is top-k with
 * 0 < k < n_vocab; no logit bias, no penalties), else 0. Such a chain can
 * sample from a pre-selection made where the logits are (a GPU's top-k
 * candidates, engine_decode_topk) instead of the whole row. */
int32_t smp_topk_only(const struct smp_chain *c);

/* Whether x[0..n) holds no NaN and no ±inf: one pass at memory speed over
 * the row. A broken model (an overwritten weight) gives NaN rows, which
 * smp_sample would quietly read as −inf and still draw a token from. */
bool smp_row_finite(const float *x, int32_t n);

/* smp_sample over a pre-selection of the row: ids[0..n) with their logits,
 * in any order, at least smp_topk_only(c) of them, and every logit of the
 * row left out below every one given (ties go in together). Picks the same
 * token, with the same candidates afterwards, as smp_sample on the whole
 * row. With a constraint set (smp_set_allowed), the row is its allowed
 * tokens: the pre-selection is the k largest of those, or every one of them
 * when fewer than k (then 1 ≤ n < k). ERR_INVALID when the chain is not
 * smp_topk_only or n < its k without a constraint (n < 1 with one),
 * ERR_RANGE for an id outside the vocabulary. */
int32_t smp_sample_cands(struct smp_chain *c, const int32_t *ids, const float *logits, int32_t n);

/* Record a token in the penalty window (prompt tokens too, in order, as
 * llama-server does). ERR_RANGE for an id outside the vocabulary. */
int smp_accept(struct smp_chain *c, int32_t token);

/* One reported probability. */
struct smp_prob {
    int32_t token;
    float p;       /* probability */
    float logprob; /* ln(p); -INFINITY when p == 0 */
};

/* The probabilities OpenAI logprobs/top_logprobs report for one position
 * (spec §6.2). Default: softmax of the raw logits[n_vocab] over the whole
 * vocabulary (before bias, penalties, temperature and truncation). When the
 * chain's params set post_sampling_probs: the candidate probabilities left by
 * the last smp_sample (only survivors, the top list ends before the first
 * p == 0 as in llama-server; logits is then unused).
 * Writes the chosen token's probability to *chosen and the n_top most
 * probable tokens, descending, to top[]; returns how many were written
 * (≤ n_top), or a negative ERR_* code. No allocation: the chain's scratch
 * holds the selection, so call it after smp_sample for the same position. */
int smp_probs(struct smp_chain *c, const float *logits, int32_t token, struct smp_prob *chosen,
              struct smp_prob *top, int32_t n_top);

/* One candidate of the working list (llama_token_data). */
struct smp_cand {
    int32_t id;
    float logit;
    float p;
};

/* The candidate list as the last smp_sample left it (survivors in list
 * order, p normalized by dist) and the index of the chosen one. For tests
 * and post-sampling probabilities; valid until the next smp_sample. */
int32_t smp_candidates(const struct smp_chain *c, const struct smp_cand **out, int32_t *selected);

/* Test hooks: the chain's random generator (one MT19937 output, and the
 * generate_canonical<double,53> uniform). They advance the chain's RNG. */
uint32_t smp_rng_next_u32(struct smp_chain *c);
double smp_rng_uniform(struct smp_chain *c);

#endif
