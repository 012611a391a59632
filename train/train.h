// train.h — the training loop of kogpt2-train (llm.c's shape: next batch, zero grads,
// forward, backward, all-reduce, AdamW), validation, and the `export` step.
#ifndef TRAIN_TRAIN_H
#define TRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dist.h"
#include "model/safetensors.h"

typedef struct {
    const char *data_dir, *out_dir;
    const char *init;      // HF model dir to fine-tune, or NULL for a new model
    const char *tokenizer; // file or dir; required for a new model
    size_t n_layer, n_embd, n_head, n_ctx;
    uint64_t steps;    // total optimizer steps (the LR schedule spans them)
    size_t B, T;       // per rank, per micro-step
    size_t grad_accum; // micro-steps per optimizer step
    float lr, min_lr, weight_decay, clip;
    uint64_t warmup, seed;
    uint64_t val_every, save_every, val_tokens, log_every;
    uint64_t stop_at; // stop after this step as an interruption would (0: never); for tests
    int resume, threads, recompute;
    const char *device; // "auto", "cpu", "cuda" or "cuda:N" (kg_backend_new)
    int precision;      // matmul compute type: KG_F32, KG_BF16 or KG_F16 (with loss scaling)
    float loss_scale;   // KG_F16: the dynamic loss scale's start
} TrainArgs;

// The defaults every flag starts from (main.c overrides them).
TrainArgs train_defaults(void);

// Trains as args say; progress lines go to log (NULL: silent; ranks other than 0 pass NULL).
// Returns KG_OK or an error with err filled; the last good checkpoint stays on error.
int train_run(const TrainArgs *args, Dist *d, FILE *log, char *err);

// Writes the checkpoint (or any model dir) `from` as a servable model dir `out` with
// model.safetensors in dtype and the tokenizer file copied, without the training state.
int train_export(const char *from, const char *out, int dtype, char *err);

#endif
