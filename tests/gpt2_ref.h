// gpt2_ref.h — the reference files tests/ref/gpt2_ref.py (and kv_dtype_ref.py) write, read back:
//   uint32 magic 0x5250474B ("KGPR"), uint32 version 1,
//   int32 n_layer, n_embd, n_head, n_ctx, vocab_size, n_tokens, int32 tokens[n_tokens],
//   float32 logprobs[n_tokens][vocab_size]
// and the distance of our logits from them.
#ifndef TESTS_GPT2_REF_H
#define TESTS_GPT2_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/logits.h"

#define REF_MAGIC   0x5250474Bu // "KGPR"
#define REF_VERSION 1u

typedef struct {
    int n_layer, n_embd, n_head, n_ctx, V, n;
    int *tokens;     // (n)
    float *logprobs; // (n, V)
} Ref;

// 0, -1 when path cannot be opened, -2 when it is not a whole reference file.
static inline int ref_load(Ref *r, const char *path) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint32_t head[2];
    int32_t dims[6];
    int ok = fread(head, 4, 2, f) == 2 && head[0] == REF_MAGIC && head[1] == REF_VERSION &&
             fread(dims, 4, 6, f) == 6;
    if (ok) {
        r->n_layer = dims[0], r->n_embd = dims[1], r->n_head = dims[2];
        r->n_ctx = dims[3], r->V = dims[4], r->n = dims[5];
        ok = r->V > 0 && r->n > 0 && r->n <= r->n_ctx;
    }
    if (ok) {
        r->tokens = malloc((size_t)r->n * sizeof(int));
        r->logprobs = malloc((size_t)r->n * r->V * sizeof(float));
        ok = r->tokens && r->logprobs && fread(r->tokens, 4, (size_t)r->n, f) == (size_t)r->n &&
             fread(r->logprobs, 4, (size_t)r->n * r->V, f) == (size_t)r->n * r->V &&
             fgetc(f) == EOF;
    }
    fclose(f);
    return ok ? 0 : -2;
}

static inline void ref_free(Ref *r) {
    free(r->tokens);
    free(r->logprobs);
}

// max over the vocabulary of |(logits - logsumexp) - ref|, for rows rows of V.
static inline double logprob_diff(const float *logits, const float *ref, size_t rows, size_t V) {
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *z = logits + r * V;
        double lse = logits_logsumexp(z, V, 1.0f);
        for (size_t i = 0; i < V; i++) {
            double d = fabs((z[i] - lse) - ref[r * V + i]);
            if (!(d <= worst)) worst = d; // a NaN sticks
        }
    }
    return worst;
}

#endif
