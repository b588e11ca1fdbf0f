/* cmd_infer.c — `llm170 infer`: in-process generation, one JSON line per token.
 *
 * Every --prompt-tokens (or the one --prompt) is its own sequence; all are
 * prefilled and then decoded together, one batched engine step per token. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/chat/model_chat.h"
#include "../worker/serve/sampling.h"
#include "cli.h"

static const char *USAGE =
    "usage: llm170 infer --model M (--prompt TEXT | --prompt-tokens 1,2,3 ...) [options]\n"
    "  --n-predict N        tokens to generate per sequence (default 128)\n"
    "  --backend B          cpu | hip | vulkan (default cpu)\n"
    "  --threads N          CPU threads (default: all cores)\n"
    "  --ctx N              context length per sequence (default min(train ctx, 4096))\n"
    "  --temp T             temperature (default 0 = greedy)\n"
    "  --top-k K --top-p P --min-p P --repeat-penalty R --seed S\n"
    "  --chat               wrap --prompt in the model's chat template\n"
    "  --kv-f32             f32 KV cache (default f16)\n"
    "Prints {\"seq\":S,\"pos\":P,\"token\":ID,\"text\":\"...\"} per generated token.\n";

struct seq_state {
    int32_t *prompt;         /* [n_prompt] token ids */
    size_t n_prompt;
    struct smp_chain *smp;   /* this sequence's sampler */
    struct tok_stream stream;/* detokenizer state */
    int32_t last;            /* last sampled token */
    int pos;                 /* position of the next token to feed */
    int generated;
    bool done;
};

static void print_token(int seq, int pos, int32_t tok, const char *text)
{
    json_t *o = json_object();
    json_object_set_new(o, "seq", json_integer(seq));
    json_object_set_new(o, "pos", json_integer(pos));
    json_object_set_new(o, "token", json_integer(tok));
    json_object_set_new(o, "text", json_string(text));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (s) {
        puts(s);
        free(s);
    }
    json_decref(o);
    fflush(stdout);
}

int cmd_infer(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL, *v;
    bool missing = false, chat = false;
    int32_t **prompts = NULL;
    size_t *n_prompts = NULL;
    int n_seq = 0;
    long n_predict = 128, n_threads = 0, n_ctx = 0;
    struct engine_params ep;
    engine_params_default(&ep);
    struct smp_params sp = smp_params_default();
    bool seeded = false;
    sp.temp = 0.0f;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double d;
        long l;
        uint64_t u;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (cli_opt(argc, argv, &i, "--model", &v, &missing) && !missing) {
            model_path = v;
        } else if (!missing && cli_opt(argc, argv, &i, "--prompt", &v, &missing) && !missing) {
            prompt = v;
        } else if (!missing && cli_opt(argc, argv, &i, "--prompt-tokens", &v, &missing) && !missing) {
            int32_t **np = realloc(prompts, (size_t)(n_seq + 1) * sizeof *np);
            size_t *nn = realloc(n_prompts, (size_t)(n_seq + 1) * sizeof *nn);
            if (!np || !nn) {
                cli_error("out of memory");
                free(np ? np : prompts);
                free(nn ? nn : n_prompts);
                return 1;
            }
            prompts = np;
            n_prompts = nn;
            if (!cli_parse_ids(v, &prompts[n_seq], &n_prompts[n_seq]) || n_prompts[n_seq] == 0)
                return cli_usage_error("infer", "--prompt-tokens wants a list of token ids like 1,2,3, got '%s'", v);
            n_seq++;
        } else if (!missing && cli_opt(argc, argv, &i, "--n-predict", &v, &missing) && !missing) {
            if (!cli_parse_int(v, 0, 1 << 24, &n_predict))
                return cli_usage_error("infer", "--n-predict wants a count, got '%s'", v);
        } else if (!missing && cli_opt(argc, argv, &i, "--backend", &v, &missing) && !missing) {
            if (!cli_parse_backend(v, &ep.backend))
                return cli_usage_error("infer", "unknown backend '%s' (" ENGINE_BACKEND_NAMES ")", v);
        } else if (!missing && cli_opt(argc, argv, &i, "--threads", &v, &missing) && !missing) {
            if (!cli_parse_int(v, 1, 1024, &n_threads))
                return cli_usage_error("infer", "--threads wants 1..1024, got '%s'", v);
        } else if (!missing && cli_opt(argc, argv, &i, "--ctx", &v, &missing) && !missing) {
            if (!cli_parse_int(v, 1, 1 << 24, &n_ctx))
                return cli_usage_error("infer", "--ctx wants a positive count, got '%s'", v);
        } else if (!missing && cli_opt(argc, argv, &i, "--temp", &v, &missing) && !missing) {
            if (!cli_parse_float(v, &d))
                return cli_usage_error("infer", "--temp wants a number, got '%s'", v);
            sp.temp = (float)d;
        } else if (!missing && cli_opt(argc, argv, &i, "--top-k", &v, &missing) && !missing) {
            if (!cli_parse_int(v, 0, 1 << 30, &l))
                return cli_usage_error("infer", "--top-k wants a count, got '%s'", v);
            sp.top_k = (int32_t)l;
        } else if (!missing && cli_opt(argc, argv, &i, "--top-p", &v, &missing) && !missing) {
            if (!cli_parse_float(v, &d))
                return cli_usage_error("infer", "--top-p wants a number, got '%s'", v);
            sp.top_p = (float)d;
        } else if (!missing && cli_opt(argc, argv, &i, "--min-p", &v, &missing) && !missing) {
            if (!cli_parse_float(v, &d))
                return cli_usage_error("infer", "--min-p wants a number, got '%s'", v);
            sp.min_p = (float)d;
        } else if (!missing && cli_opt(argc, argv, &i, "--repeat-penalty", &v, &missing) && !missing) {
            if (!cli_parse_float(v, &d))
                return cli_usage_error("infer", "--repeat-penalty wants a number, got '%s'", v);
            sp.repeat_penalty = (float)d;
        } else if (!missing && cli_opt(argc, argv, &i, "--seed", &v, &missing) && !missing) {
            if (!cli_parse_u64(v, &u) || u >= SMP_DEFAULT_SEED)
                return cli_usage_error("infer", "--seed wants an integer in 0..4294967294, got '%s'", v);
            sp.seed = (uint32_t)u;
            seeded = true;
        } else if (!missing && !strcmp(a, "--chat")) {
            chat = true;
        } else if (!missing && !strcmp(a, "--kv-f32")) {
            ep.kv_f32 = true;
        } else if (missing) {
            return cli_usage_error("infer", "%s needs a value", a);
        } else {
            return cli_usage_error("infer", "unknown option '%s'", a);
        }
        if (missing)
            return cli_usage_error("infer", "%s needs a value", a);
    }
    if (!model_path)
        return cli_usage_error("infer", "--model is required");
    if (!prompt && n_seq == 0)
        return cli_usage_error("infer", "give --prompt TEXT or --prompt-tokens IDS");
    if (prompt && n_seq > 0)
        return cli_usage_error("infer", "--prompt and --prompt-tokens exclude each other");
    if (chat && !prompt)
        return cli_usage_error("infer", "--chat needs --prompt");

    struct model *m = cli_load_model(model_path);
    if (!m)
        return 1;
    const struct tok_vocab *vocab = model_vocab(m);
    struct err e;
    err_clear(&e);
    struct engine_ctx *ctx = NULL;
    struct seq_state *seqs = NULL;
    float *logits = NULL; /* [n_seq][n_vocab] next-token logits per sequence */
    float *step = NULL;   /* [n_seq][n_vocab] one decode step's rows, batch order */
    struct engine_tok *batch = NULL;

    if (prompt) {
        char *text = NULL;
        if (chat) {
            if (model_chat_render_prompt(m, prompt, &text, &e) != 0) {
                cli_error("%s", e.msg);
                goto out;
            }
        }
        prompts = malloc(sizeof *prompts);
        n_prompts = malloc(sizeof *n_prompts);
        if (!prompts || !n_prompts) {
            free(text);
            cli_error("out of memory");
            goto out;
        }
        const char *t = text ? text : prompt;
        int trc = tok_encode(vocab, t, strlen(t), true, true, &prompts[0], &n_prompts[0], &e);
        free(text);
        if (trc != 0) {
            cli_error("cannot tokenize the prompt: %s", e.msg);
            goto out;
        }
        n_seq = 1;
        if (n_prompts[0] == 0) {
            cli_error("the prompt tokenizes to nothing");
            goto out;
        }
    }

    int32_t n_vocab = tok_n_vocab(vocab);
    for (int s = 0; s < n_seq; s++)
        for (size_t j = 0; j < n_prompts[s]; j++)
            if (prompts[s][j] >= n_vocab) {
                cli_error("token id %d is outside the vocabulary (%d tokens)", prompts[s][j], n_vocab);
                goto out;
            }

    ep.n_seq = n_seq;
    ep.n_ctx = (int)n_ctx;
    ep.n_threads = (int)n_threads;
    if (engine_create(&ctx, m, &ep, &e) != 0) {
        cli_error("%s", e.msg);
        goto out;
    }
    int ctx_len = engine_n_ctx(ctx);
    for (int s = 0; s < n_seq; s++)
        if ((long)n_prompts[s] + n_predict > ctx_len) {
            if ((long)n_prompts[s] >= ctx_len) {
                cli_error("prompt of sequence %d has %zu tokens; the context holds %d", s, n_prompts[s], ctx_len);
                goto out;
            }
        }

    seqs = calloc((size_t)n_seq, sizeof *seqs);
    logits = malloc((size_t)n_seq * (size_t)n_vocab * sizeof *logits);
    step = malloc((size_t)n_seq * (size_t)n_vocab * sizeof *step);
    int n_batch_max = ep.n_batch > 0 ? ep.n_batch : 512;
    batch = malloc((size_t)(n_batch_max > n_seq ? n_batch_max : n_seq) * sizeof *batch);
    if (!seqs || !logits || !step || !batch) {
        cli_error("out of memory");
        goto out;
    }
    for (int s = 0; s < n_seq; s++) {
        seqs[s].prompt = prompts[s];
        seqs[s].n_prompt = n_prompts[s];
        struct smp_params p = sp;
        if (seeded) /* distinct, reproducible streams per sequence */
            p.seed = (uint32_t)((sp.seed + (uint32_t)s) % SMP_DEFAULT_SEED);
        seqs[s].smp = smp_new(&p, n_vocab, &e);
        if (!seqs[s].smp) {
            cli_error("%s", e.msg);
            goto out;
        }
        for (size_t j = 0; j < n_prompts[s]; j++)
            smp_accept(seqs[s].smp, prompts[s][j]);
        tok_stream_init(&seqs[s].stream);
    }

    /* Prefill each sequence in chunks of n_batch; the last chunk asks for logits. */
    for (int s = 0; s < n_seq; s++) {
        size_t done = 0;
        while (done < seqs[s].n_prompt) {
            int n = (int)(seqs[s].n_prompt - done);
            if (n > n_batch_max)
                n = n_batch_max;
            for (int j = 0; j < n; j++) {
                batch[j].token = seqs[s].prompt[done + (size_t)j];
                batch[j].pos = (int32_t)(done + (size_t)j);
                batch[j].seq = s;
                batch[j].logits = done + (size_t)j + 1 == seqs[s].n_prompt;
            }
            if (engine_decode(ctx, batch, n, logits + (size_t)s * (size_t)n_vocab, &e) != 0) {
                cli_error("decode failed: %s", e.msg);
                goto out;
            }
            done += (size_t)n;
        }
        seqs[s].pos = (int)seqs[s].n_prompt;
    }

    /* Decode: sample every live sequence, print, then one batched step. */
    char text[1024];
    for (;;) {
        int n = 0;
        for (int s = 0; s < n_seq; s++) {
            struct seq_state *q = &seqs[s];
            if (q->done)
                continue;
            if (q->generated >= n_predict) {
                q->done = true;
                continue;
            }
            const float *row = logits + (size_t)s * (size_t)n_vocab;
            int32_t tok = smp_sample(q->smp, row);
            smp_accept(q->smp, tok);
            size_t tl = tok_stream_push(vocab, &q->stream, tok, false, text, sizeof text - 1);
            text[tl] = '\0';
            print_token(s, q->pos, tok, text);
            q->generated++;
            if (tok_is_eog(vocab, tok) || q->generated >= n_predict || q->pos + 1 >= ctx_len) {
                q->done = true;
                continue;
            }
            batch[n].token = tok;
            batch[n].pos = q->pos;
            batch[n].seq = s;
            batch[n].logits = true;
            q->pos++;
            n++;
        }
        if (n == 0)
            break;
        /* logits come back in batch order; scatter them to their sequences */
        if (engine_decode(ctx, batch, n, step, &e) != 0) {
            cli_error("decode failed: %s", e.msg);
            goto out;
        }
        for (int j = 0; j < n; j++)
            memcpy(logits + (size_t)batch[j].seq * (size_t)n_vocab, step + (size_t)j * (size_t)n_vocab,
                   (size_t)n_vocab * sizeof *step);
    }
    rc = 0;

out:
    if (seqs)
        for (int s = 0; s < n_seq; s++)
            smp_free(seqs[s].smp);
    if (prompts)
        for (int s = 0; s < n_seq; s++)
            free(prompts[s]);
    free(prompts);
    free(n_prompts);
    free(seqs);
    free(logits);
    free(step);
    free(batch);
    engine_free(ctx);
    model_free(m);
    return rc;
}
