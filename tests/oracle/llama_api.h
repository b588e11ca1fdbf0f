/* llama_api.h — the part of llama.cpp's C API (release "v0.4.0", commit 80fb11a, as shipped in npm
 * @node-llama-cpp/linux-x64@3.21.1) that the test oracle calls. Written here from that release's
 * public header; only what oracle.c uses is declared. The struct layouts must match the shared
 * library's ABI exactly: every field of the three parameter structs is listed in its order (x86-64
 * SysV: C enums are 4-byte ints, so they appear as int32_t here). oracle.c checks at start-up that
 * the library's default values land where this file expects them (sanity_check_abi()).
 *
 * This is test tooling only; nothing here is linked into llm170. */
#ifndef LLM170_ORACLE_LLAMA_API_H
#define LLM170_ORACLE_LLAMA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;

struct llama_model;   /* opaque */
struct llama_context; /* opaque */
struct llama_vocab;   /* opaque */
struct ggml_backend_reg;

/* ggml_type ids used for the KV cache */
#define ORACLE_GGML_F32 0
#define ORACLE_GGML_F16 1

/* flash attention switch: -1 auto, 0 off, 1 on */
#define ORACLE_FA_OFF 0

/* log levels of ggml's callback: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation */
typedef void (*oracle_log_fn)(int32_t level, const char *text, void *user);

/* Model loading parameters (llama_model_params). */
struct llama_model_params {
    void *devices;                    /* NULL-terminated device list, NULL = all */
    const void *tensor_buft_overrides;/* NULL-terminated pattern list */
    int32_t n_gpu_layers;
    int32_t split_mode;               /* enum */
    int32_t load_mode;                /* enum: -1 auto, 0 none, 1 mmap, ... */
    int32_t lazy_mode;                /* enum */
    int32_t main_gpu;
    const float *tensor_split;
    bool (*progress_callback)(float progress, void *user);
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only;                  /* load only the vocabulary */
    bool check_tensors;
    bool use_extra_bufts;             /* weight repacking buffers */
    bool no_host;
    bool no_alloc;
    bool load_mtp;
};

/* Context parameters (llama_context_params). */
struct llama_context_params {
    uint32_t n_ctx;                   /* context cells, 0 = from model */
    uint32_t n_batch;                 /* max tokens one llama_decode may take */
    uint32_t n_ubatch;                /* physical micro-batch */
    uint32_t n_seq_max;
    uint32_t n_rs_seq;
    uint32_t n_outputs_max;
    uint32_t n_outputs_max_per_seq;
    int32_t n_threads;                /* threads for single-token decode */
    int32_t n_threads_batch;          /* threads for prompt batches */
    int32_t ctx_type;                 /* enum */
    int32_t rope_scaling_type;        /* enum, -1 = from model */
    int32_t pooling_type;             /* enum */
    int32_t attention_type;           /* enum */
    int32_t flash_attn_type;          /* enum: -1 auto, 0 off, 1 on */
    float rope_freq_base;
    float rope_freq_scale;
    float yarn_ext_factor;
    float yarn_attn_factor;
    float yarn_beta_fast;
    float yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    float defrag_thold;
    void *cb_eval;                    /* graph-eval callback */
    void *cb_eval_user_data;
    int32_t type_k;                   /* ggml_type of the K cache */
    int32_t type_v;                   /* ggml_type of the V cache */
    bool (*abort_callback)(void *data);
    void *abort_callback_data;
    bool embeddings;
    bool offload_kqv;
    bool no_perf;
    bool op_offload;
    bool swa_full;
    bool kv_unified;
    void *samplers;                   /* backend sampler configs */
    size_t n_samplers;
    struct llama_context *ctx_other;
};

/* Quantization parameters (llama_model_quantize_params). */
struct llama_model_quantize_params {
    int32_t nthread;
    int32_t ftype;                    /* enum llama_ftype */
    int32_t output_tensor_type;       /* ggml_type, GGML_TYPE_COUNT = unset */
    int32_t token_embedding_type;     /* ggml_type, GGML_TYPE_COUNT = unset */
    bool allow_requantize;
    bool quantize_output_tensor;
    bool only_copy;
    bool pure;                        /* every quantizable tensor gets the ftype's base type */
    bool keep_split;
    bool dry_run;
    const void *imatrix;
    const void *kv_overrides;
    const void *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
};

/* A batch of tokens for llama_decode (llama_batch); arrays have n_tokens entries. */
struct llama_batch {
    int32_t n_tokens;
    llama_token *token;               /* [n_tokens] */
    float *embd;                      /* unused here (NULL) */
    llama_pos *pos;                   /* [n_tokens] */
    int32_t *n_seq_id;                /* [n_tokens] */
    llama_seq_id **seq_id;            /* [n_tokens][n_seq_id[i]] */
    int8_t *logits;                   /* [n_tokens]: 1 = output this row's logits */
};

/* library functions */
void llama_backend_init(void);
void llama_backend_free(void);
void llama_log_set(oracle_log_fn fn, void *user);
struct llama_model_params llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);
struct llama_model_quantize_params llama_model_quantize_default_params(void);
struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params params);
void llama_model_free(struct llama_model *model);
struct llama_context *llama_init_from_model(struct llama_model *model, struct llama_context_params params);
void llama_free(struct llama_context *ctx);
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *model);
int32_t llama_vocab_n_tokens(const struct llama_vocab *vocab);
llama_token llama_vocab_bos(const struct llama_vocab *vocab);
bool llama_vocab_get_add_bos(const struct llama_vocab *vocab);
bool llama_vocab_is_eog(const struct llama_vocab *vocab, llama_token token);
/* Returns the count, or minus the needed count when n_tokens_max is too small. */
int32_t llama_tokenize(const struct llama_vocab *vocab, const char *text, int32_t text_len,
                       llama_token *tokens, int32_t n_tokens_max, bool add_special, bool parse_special);
int32_t llama_token_to_piece(const struct llama_vocab *vocab, llama_token token, char *buf,
                             int32_t length, int32_t lstrip, bool special);
int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch);
/* Embeddings (context made with embeddings = true): n_embd, and a sequence's pooled embedding of the
 * last decode (pooling_type mean / cls / last; not normalised). */
int32_t llama_model_n_embd(const struct llama_model *model);
float *llama_get_embeddings_seq(struct llama_context *ctx, llama_seq_id seq_id);
/* Row i of the outputs of the last decode (i counts rows with logits != 0; -1 = last). */
float *llama_get_logits_ith(struct llama_context *ctx, int32_t i);
uint32_t llama_model_quantize(const char *in, const char *out, const struct llama_model_quantize_params *p);
const char *llama_print_system_info(void);

/* from libggml: backend registry (the CPU backend is a separately loaded library) */
struct ggml_backend_reg *ggml_backend_load(const char *path);
size_t ggml_backend_dev_count(void);
void ggml_log_set(oracle_log_fn fn, void *user);

#endif
