/* vk_engine.h — the `vulkan` engine: the shared layer loop (model/model_forward.h) on a Vulkan
 * device through vk_rt. Weights are uploaded once, the KV cache and the activations live on the
 * device, one step is one command buffer (plus one per MoE layer), and only the logits of the rows
 * that asked come back.
 *
 * It runs attention with dense or MoE FFNs (llama, qwen2, qwen3, qwen3moe) with every weight type
 * deq.glsl decodes; a model with hybrid layers or shared experts fails at create with ERR_UNSUPPORTED
 * naming the layer.
 * The arithmetic follows the CPU engine's (f32 activations, an f16 or f32 cache rounded the same
 * way), so their logits agree to a tolerance (tests/test_vk_engine.c). */
#ifndef LLM170_VK_ENGINE_H
#define LLM170_VK_ENGINE_H

#include "../backend/backend.h"

/* The backend's ops table, for the table of backends (engine/engine_backends.c). */
extern const struct backend_ops vk_backend;

#endif
