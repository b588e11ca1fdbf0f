/* embed.h — POST /v1/embeddings: the request's validation, its inputs run as
 * embedding jobs of the backend (proto_gen.embed; a few at a time, so a long
 * input array neither fills the worker's queue nor starts a thread per
 * input), and the OpenAI response. No I/O here: http.c owns the connection
 * and is told through `done` when every job has ended.
 *
 * Request: input (a string, an array of strings, an array of token ids = one
 * input, or an array of token-id arrays; never empty), model, encoding_format
 * ("float" default, or "base64": the little-endian f32 bytes), dimensions
 * (the first N values, L2-normalised again; more than the model has is a 400).
 * Response: {object:"list", data:[{object:"embedding", index, embedding}],
 * model, usage:{prompt_tokens, total_tokens}}. */
#ifndef LLM170_GATEWAY_EMBED_H
#define LLM170_GATEWAY_EMBED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "backend.h"

#define GW_EMBED_MAX_INPUTS 2048 /* OpenAI's limit per request */
#define GW_EMBED_WINDOW 16       /* inputs in flight at once */

struct gw_embed;

/* Validate the body and make the request's state (nothing runs yet). ERR_INVALID with the message in e
 * and the offending field in param. */
int gw_embed_parse(json_t *body, struct gw_embed **out, char *param, size_t param_cap, struct err *e);
/* The model named in the request ("" when none). */
const char *gw_embed_model(const struct gw_embed *x);

/* Start the jobs on be for `model`. done(user) is called once, from whichever thread ends the last job (or
 * from this call when nothing could start): then gw_embed_result answers. The backend must outlive x. */
void gw_embed_start(struct gw_embed *x, const struct gw_backend *be, const char *model, void (*done)(void *user),
                    void *user);
/* Stop what runs and submit nothing more (the client left); done still comes. */
void gw_embed_cancel(struct gw_embed *x);
/* After done: 200 with the response body (malloc'ed), or the error's status, ERR_* code and message
 * (param names the field at fault, "" when none). */
int gw_embed_result(struct gw_embed *x, const char *model, char **body, int *code, char *msg, size_t msg_cap,
                    char *param, size_t param_cap);
/* After done (or when never started): release the jobs and free. */
void gw_embed_free(struct gw_embed *x);

/* The base64 of n bytes (RFC 4648, padded), malloc'ed. */
char *gw_base64(const unsigned char *p, size_t n);

#endif
