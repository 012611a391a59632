// config.h — the model's hyper-parameters, read from a Hugging Face GPT2Config config.json.
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>

// The MLP's activation (the kernels' activation switch; not only GELUs).
typedef enum {
    GPT2_GELU_TANH, // "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast": GPT-2, KoGPT2 v2
    GPT2_GELU_ERF,  // "gelu": exact, KoGPT2 v1
    GPT2_RELU       // "relu": max(x, 0)
} Gpt2Gelu;

typedef struct {
    size_t n_layer;     // L
    size_t n_head;      // NH
    size_t n_embd;      // C
    size_t n_ctx;       // T: positions (n_positions; n_ctx when that is all there is)
    size_t vocab_size;  // V
    size_t n_inner;     // MLP width, 4C unless the file says otherwise
    float ln_eps;       // layer_norm_epsilon
    Gpt2Gelu gelu;      // activation_function
    int bos_id, eos_id; // -1 when absent
    int pad_id;         // -1 when absent
    int tie_embeddings; // tie_word_embeddings (default true): the LM head is wte
} Gpt2Config;

// Limits that keep every size product inside size_t and a forward pass sane.
#define GPT2_MAX_LAYERS 256
#define GPT2_MAX_EMBD   65536
#define GPT2_MAX_CTX    1048576
#define GPT2_MAX_VOCAB  4194304

// A config of the given shape with GPT-2's defaults for the rest: n_inner 4C, eps 1e-5,
// gelu_new, tied embeddings, no special token ids.
Gpt2Config gpt2_config_shape(size_t n_layer, size_t n_embd, size_t n_head, size_t n_ctx,
                             size_t vocab_size);

// Parses len bytes of config.json text. Unknown keys are ignored; a missing key takes
// GPT2Config's default (n_layer 12, n_head 12, n_embd 768, n_positions 1024,
// vocab_size 50257, gelu_new, eps 1e-5). A value of the wrong type or out of range, an
// n_embd not divisible by n_head or an unknown activation is KG_EFORMAT naming the key.
// What this engine does not compute is KG_EUNSUP naming the key, never computed as
// something else: a model_type other than gpt2, add_cross_attention or
// scale_attn_by_inverse_layer_idx true, scale_attn_weights false.
int gpt2_config_parse(Gpt2Config *c, const char *json, size_t len, char *err);

// Reads and parses the file at path. KG_EIO if it cannot be read.
int gpt2_config_load(Gpt2Config *c, const char *path, char *err);

// Writes c as a GPT2Config config.json that Hugging Face transformers also reads.
int gpt2_config_save(const Gpt2Config *c, const char *path, char *err);

#endif
