// testmodel.h — writes a random GPT-2 checkpoint in the Hugging Face layout (config.json +
// model.safetensors), for tests and benchmarks that need a model of a given shape.
#ifndef TESTS_TESTMODEL_H
#define TESTS_TESTMODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/kg.h"
#include "model/config.h"
#include "model/kgmath.h"
#include "model/safetensors.h"

typedef struct {
    size_t L, C, NH, T, V;
    KgDtype dtype;
    float wte_std; // embedding scale: larger makes the next-token distribution peakier
    uint64_t seed;
} TestModelSpec;

static inline float testmodel_randn(uint64_t *s) {
    float u = 0;
    for (int i = 0; i < 4; i++) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        u += (float)(*s >> 40) / 16777216.0f;
    }
    return (u - 2.0f) * 1.7320508f; // four uniforms: mean 0, variance 1
}

// One tensor of random values (std), or of ones (std < 0), in the spec's dtype.
static inline void *testmodel_tensor(const TestModelSpec *sp, size_t n, float std, uint64_t *rng) {
    void *buf = malloc(n * kg_dtype_size(sp->dtype));
    if (!buf) return NULL;
    for (size_t e = 0; e < n; e++) {
        float v = std < 0 ? 1.0f : std * testmodel_randn(rng);
        if (sp->dtype == KG_F32)
            ((float *)buf)[e] = v;
        else
            ((uint16_t *)buf)[e] = sp->dtype == KG_F16 ? kg_f32_to_f16(v) : kg_f32_to_bf16(v);
    }
    return buf;
}

// Writes dir (created if missing). KG_OK or an error with err filled.
static inline int testmodel_write(const char *dir, const TestModelSpec *sp, char *err) {
    mkdir(dir, 0755);
    Gpt2Config c = gpt2_config_shape(sp->L, sp->C, sp->NH, sp->T, sp->V);
    c.bos_id = 0;
    c.eos_id = 1;
    c.pad_id = 3;
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = gpt2_config_save(&c, path, err);
    if (rc) return rc;
    const size_t C = sp->C, F = 4 * sp->C, n_max = 4 + 12 * sp->L;
    StWrite *t = calloc(n_max, sizeof *t);
    char(*names)[64] = calloc(n_max, sizeof *names);
    uint64_t rng = sp->seed ? sp->seed : 42;
    size_t n = 0;
    rc = KG_ENOMEM;
    if (!t || !names) goto end;
    // name, rows, cols (0: a vector), std (< 0: ones)
    struct {
        const char *fmt;
        size_t r, c;
        float std;
    } layer[] = {{"ln_1.weight", C, 0, -1},
                 {"ln_1.bias", C, 0, 0.02f},
                 {"attn.c_attn.weight", C, 3 * C, 0.02f},
                 {"attn.c_attn.bias", 3 * C, 0, 0.02f},
                 {"attn.c_proj.weight", C, C, 0.02f},
                 {"attn.c_proj.bias", C, 0, 0.02f},
                 {"ln_2.weight", C, 0, -1},
                 {"ln_2.bias", C, 0, 0.02f},
                 {"mlp.c_fc.weight", C, F, 0.02f},
                 {"mlp.c_fc.bias", F, 0, 0.02f},
                 {"mlp.c_proj.weight", F, C, 0.02f},
                 {"mlp.c_proj.bias", C, 0, 0.02f}};
#define TM_ADD(r_, c_, std_, ...)                                                                  \
    do {                                                                                           \
        snprintf(names[n], 64, __VA_ARGS__);                                                       \
        t[n] = (StWrite){names[n], sp->dtype, (c_) ? 2 : 1, {(r_), (c_)}, NULL};                   \
        if (!(t[n].data = testmodel_tensor(sp, (r_) * ((c_) ? (c_) : 1), (std_), &rng))) goto end; \
        n++;                                                                                       \
    } while (0)
    TM_ADD(sp->V, C, sp->wte_std > 0 ? sp->wte_std : 0.02f, "transformer.wte.weight");
    TM_ADD(sp->T, C, 0.01f, "transformer.wpe.weight");
    for (size_t l = 0; l < sp->L; l++)
        for (size_t k = 0; k < sizeof layer / sizeof layer[0]; k++)
            TM_ADD(layer[k].r, layer[k].c, layer[k].std, "transformer.h.%zu.%s", l, layer[k].fmt);
    TM_ADD(C, 0, -1, "transformer.ln_f.weight");
    TM_ADD(C, 0, 0.02f, "transformer.ln_f.bias");
#undef TM_ADD
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = safetensors_save(path, t, n, err);
end:
    if (rc == KG_ENOMEM) kg_err(err, rc, "test model: out of memory");
    for (size_t i = 0; t && i < n; i++)
        free((void *)t[i].data);
    free(t);
    free(names);
    return rc;
}

#endif
