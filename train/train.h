// train.h — the training loop of kogpt2-train (llm.c's shape: next batch, zero grads,
// forward, backward, all-reduce, AdamW), validation, and the `export` step.
#ifndef TRAIN_TRAIN_H
#define TRAIN_TRAIN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "dist.h"
#include "model/safetensors.h"
#include "val.h"

// The shape flags given on the command line (TrainArgs.shape_given): a resumed run takes its
// shape from the checkpoint, and a flag given as well must agree with it.
#define TRAIN_GIVEN_N_LAYER (1u << 0)
#define TRAIN_GIVEN_N_EMBD  (1u << 1)
#define TRAIN_GIVEN_N_HEAD  (1u << 2)
#define TRAIN_GIVEN_N_CTX   (1u << 3)

typedef struct {
    const char *data_dir, *out_dir;
    const char *val;       // held-out text or a prepared dir (--val); NULL: data_dir's val_*.bin
    const char *init;      // HF model dir to fine-tune, or NULL for a new model
    const char *tokenizer; // file or dir; required for a new model
    size_t n_layer, n_embd, n_head, n_ctx;
    unsigned shape_given; // TRAIN_GIVEN_* bits
    uint64_t steps;       // total optimizer steps (the LR schedule spans them)
    size_t B, T;          // per rank, per micro-step
    size_t grad_accum;    // micro-steps per optimizer step
    float lr, min_lr, weight_decay, clip;
    uint64_t warmup, seed;
    uint64_t val_every, save_every, val_tokens, log_every;
    unsigned keep;    // checkpoints kept: CKPT_DIR and the keep - 1 before it (ckpt_keep_prev)
    uint64_t stop_at; // stop after this step as an interruption would (0: never); for tests
    int resume;       // continue the checkpoint in out_dir; there must be one unless force
    int force;        // start over even where that replaces what out_dir holds
    int threads, recompute;
    const char *device; // "auto", "cpu", "cuda" or "cuda:N" (kg_backend_new)
    KgDtype precision;  // matmul compute type: KG_F32, KG_BF16 or KG_F16 (with loss scaling)
    float loss_scale;   // KG_F16: the dynamic loss scale's start
    // several ranks (dist.h, train_sync.h)
    int zero;            // 1: ZeRO-1, AdamW's moments sharded over the ranks (--zero)
    float bucket_mb;     // MiB of gradients fused into one all-reduce (--bucket-mb)
    KgDtype wire;        // the gradients on the wire: KG_F32, KG_BF16, KG_F16 (--wire)
    double dist_timeout; // seconds a collective may take before the run fails (0: no limit)
    int accum_given;     // --grad-accum was on the command line (a resume at another world
                         // size keeps the global batch by changing it only when not)
    // Non-zero asks the run to stop: it saves a checkpoint at the end of the step under way
    // and returns KG_OK. main's signal handler sets it; NULL: never. Under MPI one rank's
    // flag stops every rank after the same step (it is all-reduced with each step's loss).
    atomic_int *stop;
} TrainArgs;

// What a run was asked, saved in each of its checkpoints (JSON: the data and val paths made
// absolute, steps, batch, seq, the schedule, the intervals, keep, precision...), so that
// `--resume DIR` alone continues it; shape and tokenizer come from config.json and the
// tokenizer file beside it. Not kept: device, threads, stop_at, force, dist_timeout (this
// machine's).
#define TRAIN_ARGS_FILE CKPT_ARGS_FILE

// a as train_args.json's text: malloc'd (free()), NULL on OOM.
char *train_args_json(const TrainArgs *a);

// Sets a's fields from dir/train_args.json (the others are left as they are); a->data_dir
// and a->val then point into *owned (free() it after the run). KG_OK; KG_EIO when the file
// cannot be read (checkpoints of kogpt2-train 0.2 have none), KG_EFORMAT naming a bad field.
int train_args_load(TrainArgs *a, const char *dir, char **owned, char *err);

// Trains as args say; progress lines go to log (NULL: silent; ranks other than 0 pass NULL).
// Returns KG_OK or an error with err filled; the last good checkpoint stays on error.
// Besides out_dir, rank 0 writes the run's log (out_dir.log.jsonl, trainlog.h; appended on
// resume), the best model by validation loss (out_dir.best, saved when a validation beats
// the best so far) and, with keep > 1, the earlier checkpoints (out_dir.step-S; ckpt.h).
// Validation (val.h) runs before the first step, every val_every steps and after the last;
// a resumed run does not repeat one its log already holds.
// Rank 0 holds out_dir locked for the run (ckpt_lock): a second run on it is refused
// (KG_EBUSY, naming the holder's pid) before it touches anything.
// Resumed at another world size than the checkpoint's, it keeps the global batch (B x
// grad_accum x ranks windows per step, so the same windows make each step) by setting
// grad_accum, unless it was given (accum_given); KG_EINVAL when the batch does not divide.
// Under MPI every collective has d->timeout_s = a->dist_timeout to finish (dist.h); one that
// misses it is an error naming the step, and d->broken tells the caller to dist_abort.
// Before any step it refuses (KG_EINVAL) what would lose work: --resume without a checkpoint
// in out_dir, a new run into an out_dir that holds files or beside an earlier run's log, best
// model or kept checkpoints (unless force, which replaces them), and, resuming, a shape flag,
// --tokenizer vocabulary or --init shape that disagrees with the checkpoint.
int train_run(const TrainArgs *args, Dist *d, FILE *log, char *err);

// Writes the checkpoint (or any model dir) `from` as a servable model dir `out` with
// model.safetensors in dtype and the tokenizer file copied, without the training state.
// out is locked as train_run locks its out_dir (KG_EBUSY while a run holds it); out that is
// from itself or holds a checkpoint (train_state.bin) is refused (KG_EINVAL), and so is an
// out that holds other files unless force (then they are replaced, as train --force does).
int train_export(const char *from, const char *out, KgDtype dtype, int force, char *err);

// What `kogpt2-train eval` measured: the result and the text's counts (val.h).
typedef struct {
    ValResult res;
    uint64_t docs, bytes, text_bytes; // ValSet's
    size_t T;                         // the window used
} TrainEval;

// `kogpt2-train eval`: the loss and bits per byte (val.h) of the model in model_dir on the
// text or prepared directory at path, with windows of T tokens (0: the model's n_ctx) in
// batches of B, at most max_tokens (0: all). The backend from device and threads (its device
// line to log, NULL: none), matmuls in precision (KG_F32; KG_BF16 or KG_F16 on a GPU, as the
// trainer validates). KG_OK with *out, or an error with err filled.
int train_eval(const char *model_dir, const char *path, size_t T, size_t B, uint64_t max_tokens,
               const char *device, int threads, KgDtype precision, FILE *log, TrainEval *out,
               char *err);

#endif
