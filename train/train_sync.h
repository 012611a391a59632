// train_sync.h — how one optimizer step's gradients and weights are kept the same on every
// rank (train.c's step calls it). Three ways, chosen once per run:
//   - one rank: nothing to do;
//   - data parallelism: the gradients all-reduced to their mean during the last micro-step's
//     backward, in buckets (host memory over MPI: DistGrads, with a bf16/f16 wire if asked;
//     GPU memory: NCCL per layer, dist.h's _be collectives), and every rank steps AdamW over
//     the whole buffer;
//   - ZeRO-1 (--zero 1, host memory): after backward the gradients are reduce-scattered, each
//     rank steps AdamW over its shard only (dist_shard: 1/N of the moments), then the weights
//     are all-gathered. The f32 parameter buffer is the model every rank runs forward on, so
//     it stays whole (there is no separate master copy to shard).
#ifndef TRAIN_TRAIN_SYNC_H
#define TRAIN_TRAIN_SYNC_H

#include <stdio.h>

#include "adamw.h"
#include "dist.h"
#include "model/gpt2.h"

typedef struct {
    Dist *d;
    KgBackend *be;
    float *grads;      // (n) the gradient buffer (gpt2_train_grads)
    size_t n;          // floats
    int zero;          // ZeRO-1
    KgDtype wire;      // KG_F32, KG_BF16 or KG_F16 on the wire
    DistGrads *bucket; // data parallelism on host memory: the bucketed reducer
    size_t lo, count;  // this rank's shard (ZeRO-1); [0, n) otherwise
    float *shard;      // ZeRO-1: (count) the reduce-scatter's result
    int rc;            // the gradient hook's first error (GPU path)
    char *err;         // where the hook writes it (the step's err)
    double exposed_s;  // the last step's wait for communication after backward
} TrainSync;

// Chooses the way for d, be (host memory or not) and the flags: zero (0 or 1), bucket (floats
// per bucket), wire. ZeRO-1 and a 16-bit wire need host memory over MPI (KG_EUNSUP on a GPU);
// where MPI gives no thread for the bucketed reducer, gradients are all-reduced after backward
// instead (a note on log). Then the optimizer: o over [s->lo, s->lo + s->count) of n.
// KG_OK, KG_ENOMEM, KG_EUNSUP with err filled. Free with train_sync_free (before d's end).
int train_sync_init(TrainSync *s, Dist *d, KgBackend *be, float *grads, size_t n, int zero,
                    size_t bucket, KgDtype wire, AdamW *o, FILE *log, char *err);
void train_sync_free(TrainSync *s);

// The gradient hook for the last micro-step's backward (gpt2_train_set_grad_hook), fn NULL
// when none (one rank, ZeRO-1). err receives the hook's first error.
void train_sync_hook(TrainSync *s, Gpt2GradReady *fn, void **ctx, char *err);

// After the last backward: s->grads[lo, lo + count) holds the mean over ranks (all of it but
// under ZeRO-1), and *sumsq its sum of squares under ZeRO-1 (the caller sums it over ranks),
// 0 otherwise. KG_OK or the collective's error.
int train_sync_grads(TrainSync *s, double *sumsq, char *err);

// After the optimizer step: ZeRO-1 all-gathers the weights (params, n floats); else nothing.
int train_sync_params(TrainSync *s, float *params, char *err);

// The whole optimizer state, for a checkpoint: *full = o when o holds it all; under ZeRO-1 the
// shards gathered on rank 0 (its *full owns host copies: train_sync_full_free; elsewhere *full
// is empty). A collective: every rank calls it.
int train_sync_full(TrainSync *s, const AdamW *o, AdamW *full, char *err);
void train_sync_full_free(TrainSync *s, const AdamW *o, AdamW *full);

#endif
