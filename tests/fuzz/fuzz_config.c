// fuzz_config.c — config.json text through gpt2_config_parse(). The input is passed with its
// length and no terminating NUL, as a file's bytes are: the parser must not read past it.
// On KG_OK the config must keep the promises of config.h (every size in its limit, n_embd
// divisible by n_head, eps in (0, 1)), since the loader sizes buffers from it unchecked.
#include <math.h>

#include "base/kg.h"
#include "fuzz.h"
#include "model/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Gpt2Config c;
    char err[KG_ERRLEN];
    int rc = gpt2_config_parse(&c, (const char *)data, size, err);
    if (rc != KG_OK) {
        FUZZ_CHECK(rc == KG_EFORMAT || rc == KG_EUNSUP || rc == KG_ENOMEM);
        return 0;
    }
    FUZZ_CHECK(c.n_layer >= 1 && c.n_layer <= GPT2_MAX_LAYERS);
    FUZZ_CHECK(c.n_head >= 1 && c.n_embd >= 1 && c.n_embd <= GPT2_MAX_EMBD);
    FUZZ_CHECK(c.n_embd % c.n_head == 0);
    FUZZ_CHECK(c.n_ctx >= 1 && c.n_ctx <= GPT2_MAX_CTX);
    FUZZ_CHECK(c.vocab_size >= 1 && c.vocab_size <= GPT2_MAX_VOCAB);
    FUZZ_CHECK(c.n_inner >= 1 && c.n_inner <= 4 * (size_t)GPT2_MAX_EMBD);
    FUZZ_CHECK(isfinite(c.ln_eps) && c.ln_eps > 0 && c.ln_eps < 1);
    FUZZ_CHECK(c.gelu == GPT2_GELU_TANH || c.gelu == GPT2_GELU_ERF || c.gelu == GPT2_RELU);
    FUZZ_CHECK(c.bos_id >= -1 && c.eos_id >= -1 && c.pad_id >= -1);
    FUZZ_CHECK(c.tie_embeddings == 0 || c.tie_embeddings == 1);
    return 0;
}
