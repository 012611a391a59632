// train.c — the training loop (train.h). Shapes: B sequences of T tokens per micro-step
// and rank, V vocabulary, n = parameters (one flat f32 buffer, gpt2_param_tensors order).
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adamw.h"
#include "base/kg.h"
#include "ckpt.h"
#include "lossscale.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "shard.h"
#include "tokenizer/tokenizer.h"
#include "train_sync.h"
#include "trainlog.h"

// "1h02m", "3m05s", "12s"
static void fmt_duration(char *buf, size_t cap, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lds", t);
}

// --- setup ---

typedef struct {
    KgBackend *be;
    Gpt2 m;
    int have_model;
    Gpt2ParamTensor *tensors;
    size_t n_tensors, n_params;
    Gpt2Train *t;
    AdamW opt;      // over this rank's range: all, or its ZeRO-1 shard (sync)
    TrainSync sync; // how gradients and weights stay the same on every rank
    int have_sync;
    LossScaler scaler; // f16 mixed precision; otherwise a constant 1
    ShardLoader loader;
    int have_loader;
    ValSet val;            // the validation documents (val.n 0: no validation)
    const char *val_from;  // where they came from
    int *inputs, *targets; // (B, T) host
    char tok_file[4096];
    CkptState st;         // resumed state (names owned)
    const char *lock_dir; // the output directory this process holds locked (ckpt_lock)
    int lock_fd;          // -1: none
    int resuming;
    int val_logged;   // resuming: the log holds the validation of the step resumed at
    TrainLog log;     // rank 0: out_dir.log.jsonl
    char *args_json;  // train_args.json's text, saved with each checkpoint
    double best_loss; // the lowest validation loss so far (INFINITY: none), its step and bpb
    double best_bpb;
    uint64_t best_step;
    double last_loss, last_bpb; // the latest validation (NAN: none)
} Run;

static void run_free(Run *r) {
    free(r->inputs);
    free(r->targets);
    free(r->args_json);
    trainlog_close(&r->log);
    val_free(&r->val);
    if (r->have_loader) shard_loader_close(&r->loader);
    if (r->have_sync) train_sync_free(&r->sync);
    adamw_free(&r->opt);
    if (r->t) gpt2_train_free(r->t);
    free(r->tensors);
    if (r->have_model) gpt2_close(&r->m);
    if (r->be) kg_backend_free(r->be);
    ckpt_state_free(&r->st);
    ckpt_unlock(r->lock_dir, r->lock_fd); // last: after the final save
}

// Builds or loads the model: from the checkpoint when resuming, else from --init, else new.
static int run_model(Run *r, const TrainArgs *a, int resuming, char *err) {
    Gpt2Config c = {0};
    const char *from = resuming ? a->out_dir : a->init;
    const char *tok_src = a->tokenizer ? a->tokenizer : from;
    if (resuming) tok_src = a->out_dir;
    if (!tok_src) return kg_err(err, KG_EINVAL, "train: --tokenizer is required for a new model");
    int rc = ckpt_tokenizer_file(tok_src, r->tok_file, sizeof r->tok_file, err);
    if (rc) return rc;
    if (!from) {
        Tokenizer *tok = NULL;
        if ((rc = tok_open(&tok, r->tok_file, err))) return rc;
        TokSpecial sp = tok_special(tok);
        c = gpt2_config_shape(a->n_layer, a->n_embd, a->n_head, a->n_ctx, tok_vocab_size(tok));
        c.bos_id = sp.bos;
        c.eos_id = sp.eos;
        c.pad_id = sp.pad;
        tok_free(tok);
        if (!a->n_head || a->n_embd % a->n_head)
            return kg_err(err, KG_EINVAL, "train: --n-embd %zu is not a multiple of --n-head %zu",
                          a->n_embd, a->n_head);
    }
    if ((rc = gpt2_train_model_new(&r->m, &c, from, r->be, a->seed, err))) return rc;
    r->have_model = 1;
    if (a->T > r->m.config.n_ctx)
        return kg_err(err, KG_EINVAL, "train: --seq %zu exceeds the model's n_ctx %zu", a->T,
                      r->m.config.n_ctx);
    r->n_params = gpt2_param_count(&r->m.config);
    r->n_tensors = gpt2_param_tensors(&r->m.config, NULL);
    r->tensors = malloc(r->n_tensors * sizeof *r->tensors);
    if (!r->tensors) return kg_err(err, KG_ENOMEM, "train: out of memory");
    gpt2_param_tensors(&r->m.config, r->tensors);
    return KG_OK;
}

// Decides, before any step, what the run does with out_dir (recovered already): continue its
// checkpoint, or start a new run where that loses nothing, or where force says to.
static int run_check_out(const TrainArgs *a, int *resuming, char *err) {
    CkptDirKind kind;
    char first[4096];
    int rc = ckpt_dir_kind(a->out_dir, &kind, first, sizeof first, err);
    if (rc) return rc;
    *resuming = a->resume && kind == CKPT_DIR_CKPT;
    if (*resuming) return KG_OK;
    if (kind == CKPT_DIR_OTHER) // the first save would replace the directory, and it with it
        return kg_err(err, KG_EINVAL,
                      "%s holds %s, which no checkpoint has: a run replaces only a checkpoint "
                      "or a model (--force too); move it, or choose another --out",
                      a->out_dir, first);
    if (a->force) return ckpt_remove_run_files(a->out_dir, err); // a new run's log, best, steps
    if (kind == CKPT_DIR_EMPTY && !a->resume && ckpt_run_files(a->out_dir, first, sizeof first))
        return kg_err(err, KG_EINVAL,
                      "%s is left from an earlier run into %s: a new run would replace it; "
                      "--force to do so, or choose another --out",
                      first, a->out_dir);
    if (kind == CKPT_DIR_EMPTY && !a->resume) return KG_OK;
    if (a->resume && kind == CKPT_DIR_EMPTY)
        return kg_err(err, KG_EINVAL,
                      "--resume: no checkpoint in %s (missing or empty); drop --resume to start "
                      "a new run",
                      a->out_dir);
    if (a->resume) // a model (an export, a fine-tune's --init) is not a run to continue
        return kg_err(err, KG_EINVAL,
                      "--resume: %s holds %s but no " CKPT_STATE_FILE ", so no run to continue; "
                      "--init fine-tunes from it, --force replaces it",
                      a->out_dir, first);
    if (kind == CKPT_DIR_CKPT) {
        CkptState st;
        uint64_t step = 0;
        if (!ckpt_state_read(a->out_dir, &st, NULL, NULL)) step = st.step;
        ckpt_state_free(&st);
        return kg_err(err, KG_EINVAL,
                      "%s holds a checkpoint (step %llu): --resume continues it, --force starts "
                      "over and replaces it",
                      a->out_dir, (unsigned long long)step);
    }
    return kg_err(err, KG_EINVAL,
                  "%s holds a model (%s): a new run would replace it; --force to do so, or "
                  "choose another --out",
                  a->out_dir, first);
}

static int shape_mismatch(char *err, const char *what, size_t value, const char *dir,
                          const char *key, size_t ckpt) {
    return kg_err(err, KG_EINVAL,
                  "--resume: %s %zu disagrees with the checkpoint in %s (%s %zu); drop it or "
                  "choose another --out",
                  what, value, dir, key, ckpt);
}

// A resumed run takes its shape from the checkpoint, so a shape given as well (a flag, the
// vocabulary of --tokenizer, the model of --init) would be ignored: it must agree.
static int run_check_shape(const TrainArgs *a, char *err) {
    char path[4096];
    Gpt2Config c, init;
    kg_path_join(path, sizeof path, a->out_dir, "config.json");
    int rc = gpt2_config_load(&c, path, err);
    if (rc) return rc;
    const struct {
        unsigned bit;
        const char *flag, *key;
        size_t value, ckpt;
    } f[] = {{TRAIN_GIVEN_N_LAYER, "--n-layer", "n_layer", a->n_layer, c.n_layer},
             {TRAIN_GIVEN_N_EMBD, "--n-embd", "n_embd", a->n_embd, c.n_embd},
             {TRAIN_GIVEN_N_HEAD, "--n-head", "n_head", a->n_head, c.n_head},
             {TRAIN_GIVEN_N_CTX, "--n-ctx", "n_ctx", a->n_ctx, c.n_ctx}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if ((a->shape_given & f[i].bit) && f[i].value != f[i].ckpt)
            return shape_mismatch(err, f[i].flag, f[i].value, a->out_dir, f[i].key, f[i].ckpt);
    if (a->tokenizer) {
        Tokenizer *tok = NULL;
        if ((rc = tok_open(&tok, a->tokenizer, err))) return rc;
        size_t V = tok_vocab_size(tok);
        tok_free(tok);
        if (V != c.vocab_size)
            return shape_mismatch(err, "--tokenizer's vocabulary", V, a->out_dir, "vocab_size",
                                  c.vocab_size);
    }
    if (!a->init) return KG_OK;
    kg_path_join(path, sizeof path, a->init, "config.json");
    if ((rc = gpt2_config_load(&init, path, err))) return rc;
    const struct {
        const char *key;
        size_t value, ckpt;
    } g[] = {{"n_layer", init.n_layer, c.n_layer},
             {"n_embd", init.n_embd, c.n_embd},
             {"n_head", init.n_head, c.n_head},
             {"n_ctx", init.n_ctx, c.n_ctx},
             {"vocab_size", init.vocab_size, c.vocab_size}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (g[i].value != g[i].ckpt) {
            char what[64];
            snprintf(what, sizeof what, "--init's %s", g[i].key);
            return shape_mismatch(err, what, g[i].value, a->out_dir, g[i].key, g[i].ckpt);
        }
    return KG_OK;
}

// Rank 0, before any work: the run's log (a resumed run's trimmed to its step) and the best
// validation so far (out_dir.best/val.json), which a resumed run must beat.
static int run_open_log(Run *r, const TrainArgs *a, uint64_t step, char *err) {
    char path[4096];
    if (ckpt_sibling(path, sizeof path, a->out_dir, CKPT_LOG_SUFFIX))
        return kg_err(err, KG_EINVAL, "%s: path too long", a->out_dir);
    int rc = trainlog_open(&r->log, path, r->resuming, step, &r->val_logged, err);
    if (rc || !r->resuming) return rc;
    ckpt_sibling(path, sizeof path, a->out_dir, CKPT_BEST_SUFFIX "/val.json");
    char *text = NULL;
    if (kg_read_file(path, 4096, &text, NULL, NULL)) return KG_OK; // none yet
    unsigned long long best_step;
    double loss, bpb;
    if (sscanf(text, "{\"step\":%llu,\"loss\":%lf,\"bpb\":%lf", &best_step, &loss, &bpb) == 3) {
        r->best_step = best_step;
        r->best_loss = loss;
        r->best_bpb = bpb;
    }
    free(text);
    return KG_OK;
}

// The validation documents: --val, else the data directory's val shards when it has some
// (else none: validation is skipped, and a log says so when it was asked for).
static int run_open_val(Run *r, const TrainArgs *a, FILE *log, char *err) {
    r->val_from = a->val ? a->val : a->data_dir;
    if (!a->val && !val_is_shard_dir(a->data_dir)) {
        if (log && a->val_every)
            fprintf(log,
                    "note: no validation: %s holds no val_*.bin (prepare --val-every-doc) "
                    "and no --val was given\n",
                    a->data_dir);
        return KG_OK;
    }
    Tokenizer *tok = NULL;
    int rc = tok_open(&tok, r->tok_file, err);
    if (!rc) rc = val_load(&r->val, r->val_from, tok, r->m.config.vocab_size, a->val_tokens, err);
    tok_free(tok);
    if (rc || !log) return rc;
    fprintf(log, "val: %s, %llu documents, %llu tokens, %llu bytes%s\n", r->val_from,
            (unsigned long long)r->val.docs, (unsigned long long)r->val.n,
            (unsigned long long)r->val.bytes,
            a->val_tokens && r->val.n >= a->val_tokens ? " (--val-tokens: the first documents)"
                                                       : "");
    if (r->val.text_bytes && r->val.text_bytes != r->val.bytes)
        fprintf(log,
                "note: the tokenizer does not give back the validation text as written (%llu "
                "bytes, decoded %llu): bits per byte count the decoded bytes\n",
                (unsigned long long)r->val.text_bytes, (unsigned long long)r->val.bytes);
    return KG_OK;
}

// Resuming with flags that differ from the checkpoint's run: allowed (a longer run, a new
// learning rate), but the trajectory differs from an uninterrupted run; each is said once.
static void run_note_changes(const Run *r, const TrainArgs *a, uint64_t ranks, FILE *log) {
    if (!log) return;
    const CkptState *st = &r->st;
    const unsigned long long at = (unsigned long long)st->step;
    if (st->total_steps != a->steps)
        fprintf(log,
                "note: --steps %llu, the checkpoint's run planned %llu: the learning-rate "
                "schedule differs from step %llu\n",
                (unsigned long long)a->steps, (unsigned long long)st->total_steps, at);
    // each step takes the next B x grad_accum x ranks windows of one stream: the same windows
    // make each step whenever that product, T and the seed are the same
    if (st->T != a->T || st->B * st->grad_accum * st->ranks != a->B * a->grad_accum * ranks ||
        st->seed != a->seed)
        fprintf(log,
                "note: the checkpoint's run used --batch %llu --seq %llu --grad-accum %llu "
                "--seed %llu on %llu ranks, now %zu %zu %zu %llu on %llu: the data order "
                "differs from step %llu\n",
                (unsigned long long)st->B, (unsigned long long)st->T,
                (unsigned long long)st->grad_accum, (unsigned long long)st->seed,
                (unsigned long long)st->ranks, a->B, a->T, a->grad_accum,
                (unsigned long long)a->seed, (unsigned long long)ranks, at);
    TrainArgs was = {.min_lr = -1}; // the fields below are in every train_args.json
    char *owned = NULL;
    if (train_args_load(&was, a->out_dir, &owned, NULL)) return; // an older checkpoint
    if (was.lr != a->lr || was.min_lr != a->min_lr || was.warmup != a->warmup)
        fprintf(log,
                "note: the checkpoint's run used --lr %g --min-lr %g --warmup %llu, now %g %g "
                "%llu: the learning-rate schedule differs from step %llu\n",
                was.lr, was.min_lr < 0 ? was.lr * 0.1 : was.min_lr, (unsigned long long)was.warmup,
                a->lr, a->min_lr < 0 ? a->lr * 0.1 : a->min_lr, (unsigned long long)a->warmup, at);
    free(owned);
}

// The line that says how ranks share the work: the optimizer's memory on each, the buckets.
static void run_log_sync(const Run *r, const TrainArgs *a, const Dist *d, FILE *log) {
    double mib = 2.0 * sizeof(float) / 1048576.0;
    if (d->size == 1) return;
    if (r->sync.zero)
        fprintf(log,
                "ZeRO-1: AdamW moments %.2f MiB on each rank (of %.2f MiB; rank 0 gathers them "
                "to save), gradients reduce-scattered after backward (wire %s), weights "
                "all-gathered\n",
                (double)r->opt.n * mib, (double)r->n_params * mib,
                a->wire == KG_F32 ? "f32" : kg_dtype_name(a->wire));
    else if (r->sync.bucket)
        fprintf(log,
                "gradients: all-reduced during backward in buckets of %.3g MiB (wire %s); AdamW "
                "moments %.2f MiB on each rank\n",
                a->bucket_mb, a->wire == KG_F32 ? "f32" : kg_dtype_name(a->wire),
                (double)r->opt.n * mib);
}

// Resuming at another world size: the checkpoint's global batch (B x grad_accum x ranks
// windows) kept by the accumulation, unless --grad-accum was given. st: the checkpoint's.
static int run_fit_world(TrainArgs *a, const CkptState *st, const Dist *d, FILE *log, char *err) {
    if (st->ranks == (uint64_t)d->size || a->accum_given) return KG_OK;
    uint64_t global = st->B * st->grad_accum * st->ranks, per = (uint64_t)a->B * d->size;
    if (global % per)
        return kg_err(err, KG_EINVAL,
                      "--resume on %d ranks: the checkpoint's global batch of %llu windows (%llu "
                      "x %llu accum x %llu ranks) is not a multiple of --batch %zu x %d ranks; "
                      "choose a --batch that divides it, or give --grad-accum",
                      d->size, (unsigned long long)global, (unsigned long long)st->B,
                      (unsigned long long)st->grad_accum, (unsigned long long)st->ranks, a->B,
                      d->size);
    a->grad_accum = (size_t)(global / per);
    if (log)
        fprintf(log,
                "resuming on %d ranks a checkpoint of %llu: --grad-accum %zu keeps the global "
                "batch of %llu windows\n",
                d->size, (unsigned long long)st->ranks, a->grad_accum, (unsigned long long)global);
    return KG_OK;
}

static int run_setup(Run *r, TrainArgs *a, Dist *d, FILE *log, char *err) {
    // before the first step, rank 0 alone (it writes the checkpoints): lock out_dir against
    // a second run (whose recovery and saves would take this one's DIR.tmp and DIR.old),
    // repair a torn save, refuse what would lose work, check that a checkpoint can be written
    int rc = KG_OK, resuming = 0;
    if (d->rank == 0) {
        rc = ckpt_lock(a->out_dir, "kogpt2-train", &r->lock_fd, err);
        r->lock_dir = a->out_dir;
        if (!rc) rc = ckpt_recover(a->out_dir, err);
        if (!rc) rc = run_check_out(a, &resuming, err);
        if (!rc && resuming) rc = run_check_shape(a, err);
        CkptState st = {0};
        if (!rc && resuming) // the sidecar's fields and shard names, before any work
            rc = ckpt_state_read(a->out_dir, &st, NULL, err);
        ckpt_state_free(&st);
        if (!rc) rc = ckpt_probe(a->out_dir, err);
        r->resuming = resuming;
        if (!rc) rc = run_open_log(r, a, st.step, err);
    }
    // every rank learns rank 0's verdict, so a refusal there ends them all before any step
    // (and what its log and best model say, so that every rank validates and saves alike)
    double verdict[4] = {rc != 0, resuming, r->val_logged, d->rank == 0 ? r->best_loss : 0};
    int rc2 = dist_allreduce_sum_f64(d, verdict, 4, rc ? NULL : err);
    if (rc || rc2) return rc ? rc : rc2;
    if (verdict[0] > 0)
        return kg_err(err, KG_EINVAL, "rank 0 did not start the run (its message says why)");
    r->resuming = resuming = verdict[1] > 0;
    r->val_logged = verdict[2] > 0;
    r->best_loss = verdict[3];
    // several ranks on a node each take their own GPU: "cuda" means GPU <local rank>
    char device[32];
    snprintf(device, sizeof device, "%s", a->device);
    int n_gpu = d->size > 1 && !strcmp(a->device, "auto") ? kg_cuda_device_count(NULL, 0) : 0;
    if (d->size > 1 && !strcmp(a->device, "cuda"))
        snprintf(device, sizeof device, "cuda:%d", dist_local_rank());
    else if (n_gpu > 0)
        snprintf(device, sizeof device, "cuda:%d", dist_local_rank() % n_gpu);
    // ranks on one machine share its cores (each taking every core would overload them):
    // --threads 0 means this rank's share
    int threads = a->threads, local = dist_local_size();
    if (!threads && local > 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > local ? (int)(cores / local) : 1;
    }
    if (!(r->be = kg_backend_new(device, threads, d->rank == 0 ? log : NULL, err))) return KG_EIO;
    // a backend whose backward stays f32 trains in f32 (backend.h, mixed_backward)
    if (r->be->ops->mixed_backward) r->be->mixed = a->precision;
    // f16's range needs the loss scaled; bf16 has f32's exponent range and f32 needs nothing
    r->scaler =
        a->precision == KG_F16 ? loss_scaler_new(a->loss_scale, 2000) : loss_scaler_new(1.0f, 0);
    if ((rc = run_model(r, a, resuming, err))) return rc;
    r->t = gpt2_train_new(&r->m, a->B, a->T, a->recompute, err);
    if (!r->t) return KG_ENOMEM;
    size_t bucket = (size_t)((double)a->bucket_mb * 1048576.0 / sizeof(float));
    if ((rc = train_sync_init(&r->sync, d, r->be, gpt2_train_grads(r->t), r->n_params, a->zero,
                              bucket, a->wire, &r->opt, log, err)))
        return rc;
    r->have_sync = 1;
    if (resuming) {
        if ((rc = ckpt_state_read(a->out_dir, &r->st, &r->opt, err))) return rc;
        if ((rc = run_fit_world(a, &r->st, d, d->rank == 0 ? log : NULL, err))) return rc;
        run_note_changes(r, a, (uint64_t)d->size, d->rank == 0 ? log : NULL);
    }
    // every rank starts from rank 0's weights (a checkpoint or a seeded init agree anyway)
    if ((rc = dist_broadcast_be(d, r->be, r->m.params, r->n_params, err))) return rc;
    rc = shard_loader_open(&r->loader, a->data_dir, a->T, a->seed, (uint32_t)r->m.config.vocab_size,
                           resuming ? &r->st.pos : NULL, r->st.names, r->st.n_names, err);
    if (rc) return rc;
    r->have_loader = 1;
    if ((rc = run_open_val(r, a, d->rank == 0 ? log : NULL, err))) return rc;
    if (a->precision != KG_F32 && !r->be->ops->mixed_backward && log && d->rank == 0)
        fprintf(log, "note: the CPU computes matmuls in f32; --precision %s applies on a GPU\n",
                a->precision == KG_BF16 ? "bf16" : "fp16");
    r->inputs = malloc(a->B * a->T * sizeof *r->inputs);
    r->targets = malloc(a->B * a->T * sizeof *r->targets);
    r->args_json = train_args_json(a);
    if (!r->inputs || !r->targets || !r->args_json)
        return kg_err(err, KG_ENOMEM, "train: out of memory");
    if (log) {
        const Gpt2Config *c = &r->m.config;
        fprintf(log,
                "model: L=%zu C=%zu NH=%zu n_ctx=%zu V=%zu, %.2fM parameters; activations "
                "%.1f MiB%s\n",
                c->n_layer, c->n_embd, c->n_head, c->n_ctx, c->vocab_size, r->n_params / 1e6,
                gpt2_train_bytes(r->t) / 1048576.0, a->recompute ? " (recompute)" : "");
        fprintf(log, "batch: %zu x %zu tokens x %zu accum x %d ranks = %zu tokens/step\n", a->B,
                a->T, a->grad_accum, d->size, a->B * a->T * a->grad_accum * (size_t)d->size);
        run_log_sync(r, a, d, log);
        float min_lr = a->min_lr < 0 ? a->lr * 0.1f : a->min_lr;
        fprintf(log,
                "schedule: %llu steps, lr linear warmup to %g over %llu steps, then cosine "
                "to %g\n",
                (unsigned long long)a->steps, a->lr, (unsigned long long)a->warmup, min_lr);
        if (resuming)
            fprintf(log, "resumed %s at step %llu\n", a->out_dir, (unsigned long long)r->st.step);
    }
    return KG_OK;
}

static int run_save(Run *r, const TrainArgs *a, Dist *d, uint64_t step, char *err) {
    AdamW full; // every moment (ZeRO-1: gathered on rank 0)
    int rc = train_sync_full(&r->sync, &r->opt, &full, err);
    if (!rc && d->rank == 0) {
        CkptState st = {.step = step,
                        .total_steps = a->steps,
                        .seed = a->seed,
                        .B = a->B,
                        .T = a->T,
                        .ranks = (uint64_t)d->size,
                        .grad_accum = a->grad_accum,
                        .n_params = r->n_params,
                        .pos = r->loader.pos,
                        .names = r->loader.names,
                        .n_names = r->loader.n_names};
        CkptFile args = {TRAIN_ARGS_FILE, r->args_json};
        rc = ckpt_keep_prev(a->out_dir, a->keep, err);
        if (!rc)
            rc = ckpt_save_files(a->out_dir, &r->m, KG_F32, r->tok_file, &st, &full, &args, 1, err);
    }
    train_sync_full_free(&r->sync, &r->opt, &full);
    if (d->broken) return rc; // the gather failed: no barrier to wait for
    int rc2 = dist_barrier(d, rc ? NULL : err);
    return rc ? rc : rc2;
}

// Rank 0: the model as out_dir.best (a servable model with val.json), for a new best.
static int run_save_best(Run *r, const TrainArgs *a, uint64_t step, const ValResult *v, char *err) {
    char dir[4096], json[256];
    if (ckpt_sibling(dir, sizeof dir, a->out_dir, CKPT_BEST_SUFFIX))
        return kg_err(err, KG_EINVAL, "%s: path too long", a->out_dir);
    // (run_open_log reads the first three back)
    snprintf(json, sizeof json,
             "{\"step\":%llu,\"loss\":%.9g,\"bpb\":%.9g,\"tokens\":%llu,"
             "\"bytes\":%llu}\n",
             (unsigned long long)step, v->loss, v->bpb, (unsigned long long)v->tokens,
             (unsigned long long)r->val.bytes);
    CkptFile f = {CKPT_VAL_FILE, json};
    return ckpt_save_files(dir, &r->m, KG_F32, r->tok_file, NULL, NULL, &f, 1, err);
}

// Validates the weights after `step` steps: the log line and record, and a new best saved.
static int run_validate(Run *r, const TrainArgs *a, Dist *d, FILE *log, uint64_t step, char *err) {
    if (!r->val.n) return KG_OK;
    ValResult v;
    int rc = val_score(&r->m, r->t, &r->val, d, a->B, a->T, r->inputs, r->targets, &v, err);
    if (rc) return rc;
    r->last_loss = v.loss;
    r->last_bpb = v.bpb;
    int best = isfinite(v.loss) && !(v.loss >= r->best_loss);
    if (best) {
        r->best_loss = v.loss;
        r->best_bpb = v.bpb;
        r->best_step = step;
        if (d->rank == 0) rc = run_save_best(r, a, step, &v, err);
        int rc2 = dist_barrier(d, rc ? NULL : err);
        if (rc || rc2) return rc ? rc : rc2;
    }
    if (log) {
        fprintf(log, "val step %llu loss %.4f bpb %.4f%s%s%s\n", (unsigned long long)step, v.loss,
                v.bpb, best ? " (new best: " : "", best ? a->out_dir : "",
                best ? CKPT_BEST_SUFFIX ")" : "");
        fflush(log);
    }
    return trainlog_val(&r->log, step, v.loss, v.bpb, v.tokens, r->val.bytes, best, err);
}

// One optimizer step: grad_accum micro-steps of B windows on each rank, then all-reduce
// and AdamW. *loss = the mean over micro-steps and ranks; *stop = whether any rank was asked
// to stop (a->stop), the same on every rank.
static int run_step(Run *r, const TrainArgs *a, Dist *d, uint64_t step, double *loss, double *norm,
                    float *lr, int *skipped, int *stop, char *err) {
    const size_t B = a->B;
    const uint64_t others = (uint64_t)(d->size - 1 - d->rank) * B;
    double loss_sum = 0;
    int rc;
    *skipped = 0;
    d->step = step + 1; // named by a collective's error
    float *grads = gpt2_train_grads(r->t);
    Gpt2GradReady hook;
    void *hook_ctx;
    train_sync_hook(&r->sync, &hook, &hook_ctx, err);
    gpt2_train_zero_grad(r->t);
    gpt2_train_set_loss_scale(r->t, r->scaler.scale);
    for (size_t k = 0; k < a->grad_accum; k++) {
        // global micro-batch k*size + rank: every rank reads the same stream, takes its slice
        if ((rc = shard_loader_skip(&r->loader, (uint64_t)d->rank * B, err))) return rc;
        if ((rc = shard_loader_next(&r->loader, r->inputs, r->targets, B, err))) return rc;
        if ((rc = shard_loader_skip(&r->loader, others, err))) return rc;
        float l;
        if ((rc = gpt2_train_forward(&r->m, r->t, r->inputs, r->targets, &l, err))) return rc;
        // the last micro-step's backward sends each layer's gradients as it finishes them
        gpt2_train_set_grad_hook(r->t, k + 1 == a->grad_accum ? hook : NULL, hook_ctx);
        gpt2_train_backward(&r->m, r->t);
        loss_sum += l;
    }
    gpt2_train_set_grad_hook(r->t, NULL, NULL);
    double sumsq; // ZeRO-1: of this rank's shard
    if ((rc = train_sync_grads(&r->sync, &sumsq, err))) return rc;
    // the stop flag rides with the loss: every rank stops after the same step even when only
    // one got the signal (a rank that stopped alone would leave the others waiting in the
    // next all-reduce), at no all-reduce of its own; so do ZeRO-1's squares for the norm
    double sums[3] = {loss_sum / (double)a->grad_accum, a->stop && atomic_load(a->stop), sumsq};
    if ((rc = dist_allreduce_sum_f64(d, sums, 3, err))) return rc;
    *loss = sums[0] / d->size;
    *stop = sums[1] > 0;
    // backward summed the micro-steps' means of loss * loss scale
    float scale = 1.0f / ((float)a->grad_accum * r->scaler.scale);
    *norm = (r->sync.zero ? sqrt(sums[2]) : adamw_grad_norm(r->be, grads, r->n_params)) * scale;
    *lr = adamw_lr(step, a->steps, a->warmup, a->lr, a->min_lr < 0 ? a->lr * 0.1f : a->min_lr);
    // every rank sees the same all-reduced norm, so all skip or all step together
    if (!loss_scaler_update(&r->scaler, isfinite(*norm))) {
        *skipped = 1;
        return KG_OK;
    }
    scale *= adamw_clip_scale(*norm, a->clip);
    AdamWHyper h = ADAMW_DEFAULTS;
    h.weight_decay = a->weight_decay;
    adamw_step(&r->opt, r->m.params, grads, r->tensors, r->n_tensors, *lr, scale, &h);
    if ((rc = r->be->ops->status(r->be, err))) return rc; // backward's and the optimizer's
    return train_sync_params(&r->sync, r->m.params, err);
}

// "1h02m", "3m05s", "12s" as in the step lines, and tokens as "4.10M"
static void fmt_tokens(char *buf, size_t cap, double n) {
    if (n >= 1e9)
        snprintf(buf, cap, "%.2fG", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, cap, "%.2fM", n / 1e6);
    else
        snprintf(buf, cap, "%.0f", n);
}

// The end-of-run line (a finished or an interrupted run) and its log record.
static int run_summary(Run *r, const TrainArgs *a, Dist *d, FILE *log, uint64_t step,
                       uint64_t steps_run, double elapsed, char *err) {
    double tokens_per_step = (double)(a->B * a->T * a->grad_accum) * d->size;
    double tokens = tokens_per_step * (double)steps_run;
    int rc = trainlog_end(&r->log, step, (uint64_t)(tokens_per_step * (double)step), elapsed,
                          r->last_loss, r->last_bpb, r->best_step, r->best_loss, err);
    if (!log) return rc;
    char took[32], tok[32], val[160] = "", best[4300] = "";
    fmt_duration(took, sizeof took, elapsed);
    fmt_tokens(tok, sizeof tok, tokens);
    if (!isnan(r->last_loss))
        snprintf(val, sizeof val, "; val loss %.4f bpb %.4f", r->last_loss, r->last_bpb);
    if (isfinite(r->best_loss))
        snprintf(best, sizeof best, "; best val loss %.4f bpb %.4f at step %llu -> %s%s",
                 r->best_loss, r->best_bpb, (unsigned long long)r->best_step, a->out_dir,
                 CKPT_BEST_SUFFIX);
    fprintf(log,
            "%s: step %llu/%llu, %llu steps and %s tokens in %s (%.0f tok/s)%s%s; "
            "checkpoint %s (step %llu)\n",
            step >= a->steps ? "done" : "stopped", (unsigned long long)step,
            (unsigned long long)a->steps, (unsigned long long)steps_run, tok, took,
            elapsed > 0 ? tokens / elapsed : 0.0, val, best, a->out_dir, (unsigned long long)step);
    fflush(log);
    return rc;
}

int train_run(const TrainArgs *args, Dist *d, FILE *log, char *err) {
    Run r = {.lock_fd = -1, .best_loss = INFINITY, .last_loss = NAN, .last_bpb = NAN};
    TrainArgs fitted = *args; // a resume at another world size may change grad_accum
    const TrainArgs *a = &fitted;
    d->timeout_s = args->dist_timeout;
    int rc = run_setup(&r, &fitted, d, log, err);
    uint64_t step = r.st.step;
    double t_start = kg_now_s(), t_last = t_start;
    uint64_t steps_timed = 0;
    const double tokens_per_step = (double)(a->B * a->T * a->grad_accum) * d->size;
    if (!rc) rc = trainlog_run(&r.log, step, a->steps, tokens_per_step, r.resuming, err);
    int stopped = 0;
    for (; !rc && step < a->steps && !(a->stop_at && step >= a->stop_at); step++) {
        // before the first step too (a fine-tune's "before" figure); a resumed run does not
        // repeat the validation its log holds for the step it resumed at
        if (a->val_every && step % a->val_every == 0 &&
            !(r.resuming && step == r.st.step && r.val_logged) &&
            (rc = run_validate(&r, a, d, log, step, err)))
            break;
        double loss, norm;
        float lr;
        int skipped, stop;
        if ((rc = run_step(&r, a, d, step, &loss, &norm, &lr, &skipped, &stop, err))) break;
        if (skipped && log) { // an overflow is expected only of fp16's scaled gradients
            if (a->precision == KG_F16)
                fprintf(log,
                        "step %llu: gradients overflowed in f16: step skipped, loss scale %g\n",
                        (unsigned long long)step + 1, r.scaler.scale);
            else
                fprintf(log, "step %llu: the gradient norm is %g: step skipped\n",
                        (unsigned long long)step + 1, norm);
            fflush(log);
        }
        double t_now = kg_now_s(), dt = t_now - t_last;
        t_last = t_now;
        steps_timed++;
        if (!isfinite(loss)) {
            rc = kg_err(err, KG_EINTERNAL, "step %llu: loss is %f", (unsigned long long)step + 1,
                        loss);
            break;
        }
        if (a->log_every <= 1 || (step + 1) % a->log_every == 0 || step == 0 ||
            step + 1 == a->steps) {
            if (log) {
                char eta[32];
                fmt_duration(eta, sizeof eta,
                             (t_now - t_start) / steps_timed * (a->steps - step - 1));
                char comm[48] = ""; // communication not hidden behind backward
                if (d->size > 1) snprintf(comm, sizeof comm, " comm %.1f", r.sync.exposed_s * 1e3);
                fprintf(log,
                        "step %llu/%llu loss %.6f lr %.3e norm %.3f tok/s %.0f ms %.1f eta %s%s\n",
                        (unsigned long long)step + 1, (unsigned long long)a->steps, loss, lr, norm,
                        tokens_per_step / dt, dt * 1e3, eta, comm);
                fflush(log);
            }
            rc = trainlog_train(&r.log, step + 1, loss, lr, norm,
                                (uint64_t)(tokens_per_step * (double)(step + 1)),
                                tokens_per_step / dt, dt * 1e3, t_now - t_start, err);
            if (rc) break;
        }
        int last = step + 1 == a->steps || step + 1 == a->stop_at;
        stop = stop && !last; // the last step saves and ends anyway
        if ((a->save_every && (step + 1) % a->save_every == 0) || last || stop) {
            if ((rc = run_save(&r, a, d, step + 1, err))) break;
            if (log) {
                fprintf(log, "%scheckpoint step %llu -> %s%s\n", stop ? "interrupted: " : "",
                        (unsigned long long)step + 1, a->out_dir,
                        stop ? " (--resume continues from it)" : "");
                fflush(log);
            }
        }
        if (stop) {
            stopped = 1;
            step++;
            break; // the step under way is saved: no finished step is lost
        }
    }
    if (!rc && a->val_every && step == a->steps && step > r.st.step)
        rc = run_validate(&r, a, d, log, step, err);
    if (!rc && (step > r.st.step || stopped))
        rc = run_summary(&r, a, d, log, step, steps_timed, kg_now_s() - t_start, err);
    dist_release_be(d); // the NCCL communicator, before its GPU's backend
    run_free(&r);
    return rc;
}
