// train.c — the training loop (train.h). Shapes: B sequences of T tokens per micro-step
// and rank, V vocabulary, n = parameters (one flat f32 buffer, gpt2_param_tensors order).
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adamw.h"
#include "base/kg.h"
#include "ckpt.h"
#include "lossscale.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "shard.h"
#include "tokenizer/tokenizer.h"

TrainArgs train_defaults(void) {
    return (TrainArgs){.n_layer = 4,
                       .n_embd = 256,
                       .n_head = 4,
                       .n_ctx = 256,
                       .steps = 1000,
                       .B = 8,
                       .T = 128,
                       .grad_accum = 1,
                       .lr = 6e-4f,
                       .min_lr = -1,
                       .weight_decay = 0.1f,
                       .clip = 1.0f,
                       .warmup = 0,
                       .seed = 1337,
                       .val_every = 250,
                       .save_every = 500,
                       .val_tokens = 65536,
                       .log_every = 1,
                       .device = "auto",
                       .precision = KG_F32,
                       .loss_scale = 65536.0f};
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

// --- validation: windows of T+1 over the val shards in order, split over ranks ---

typedef struct {
    Shard *shards;
    size_t n;
    uint64_t tokens, bytes; // over all val shards: tokens per byte for bits-per-byte
} ValSet;

static void val_close(ValSet *v) {
    for (size_t i = 0; i < v->n; i++)
        shard_close(&v->shards[i]);
    free(v->shards);
    memset(v, 0, sizeof *v);
}

static int val_open(ValSet *v, const char *dir, size_t V, char *err) {
    memset(v, 0, sizeof *v);
    char(*names)[SHARD_NAME_MAX] = NULL;
    size_t n = 0;
    int rc = shard_list(dir, "val_", &names, &n, err);
    if (rc || !n) {
        free(names);
        return rc;
    }
    v->shards = calloc(n, sizeof *v->shards);
    if (!v->shards) rc = kg_err(err, KG_ENOMEM, "val: out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        if ((rc = shard_open(&v->shards[i], dir, names[i], err))) break;
        v->n++;
        if (v->shards[i].h.vocab_size > V)
            rc = kg_err(err, KG_EFORMAT, "%s/%s: vocabulary %llu exceeds the model's %zu", dir,
                        names[i], (unsigned long long)v->shards[i].h.vocab_size, V);
        v->tokens += v->shards[i].h.n_tokens;
        v->bytes += v->shards[i].h.text_bytes;
    }
    free(names);
    if (rc) val_close(v);
    return rc;
}

// Forward over the b windows gathered in inputs/targets (rows b..B-1 padded with ignored
// targets); adds nats and target counts into acc.
static int val_flush(const Gpt2 *m, Gpt2Train *t, size_t b, size_t B, size_t T, int *inputs,
                     int *targets, double acc[2], char *err) {
    for (size_t r = b; r < B; r++)
        for (size_t i = 0; i < T; i++) {
            inputs[r * T + i] = 0;
            targets[r * T + i] = -1;
        }
    float loss;
    int rc = gpt2_train_forward(m, t, inputs, targets, &loss, err);
    if (rc) return rc;
    acc[0] += (double)loss * (double)(b * T);
    acc[1] += (double)(b * T);
    return KG_OK;
}

// Mean loss (nats per token) over the first max_tokens of the val shards, windows dealt
// round-robin to the ranks.
static int validate(const Gpt2 *m, Gpt2Train *t, const ValSet *v, Dist *d, size_t B, size_t T,
                    uint64_t max_tokens, int *inputs, int *targets, double *loss_out, char *err) {
    double acc[2] = {0, 0}; // nats, targets (this rank)
    uint64_t w_global = 0, budget = max_tokens / T;
    size_t b = 0;
    int rc = KG_OK;
    for (size_t s = 0; s < v->n && w_global < budget && !rc; s++) {
        const Shard *sh = &v->shards[s];
        uint64_t nw = sh->h.n_tokens > T ? (sh->h.n_tokens - 1) / T : 0;
        for (uint64_t w = 0; w < nw && w_global < budget && !rc; w++, w_global++) {
            if (w_global % (uint64_t)d->size != (uint64_t)d->rank) continue;
            for (size_t i = 0; i < T; i++) {
                inputs[b * T + i] = shard_id(sh, w * T + i);
                targets[b * T + i] = shard_id(sh, w * T + i + 1);
            }
            if (++b == B) {
                rc = val_flush(m, t, b, B, T, inputs, targets, acc, err);
                b = 0;
            }
        }
    }
    if (!rc && b > 0) rc = val_flush(m, t, b, B, T, inputs, targets, acc, err);
    if (!rc) rc = dist_allreduce_sum_f64(d, acc, 2, err);
    if (rc) return rc;
    *loss_out = acc[1] > 0 ? acc[0] / acc[1] : NAN;
    return KG_OK;
}

// --- setup ---

typedef struct {
    KgBackend *be;
    Gpt2 m;
    int have_model;
    Gpt2ParamTensor *tensors;
    size_t n_tensors, n_params;
    Gpt2Train *t;
    AdamW opt;
    LossScaler scaler; // f16 mixed precision; otherwise a constant 1
    ShardLoader loader;
    int have_loader;
    ValSet val;
    int *inputs, *targets; // (B, T) host
    char tok_file[4096];
    CkptState st;         // resumed state (names owned)
    const char *lock_dir; // the output directory this process holds locked (ckpt_lock)
    int lock_fd;          // -1: none
} Run;

static void run_free(Run *r) {
    free(r->inputs);
    free(r->targets);
    val_close(&r->val);
    if (r->have_loader) shard_loader_close(&r->loader);
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
    char first[256];
    int rc = ckpt_dir_kind(a->out_dir, &kind, first, sizeof first, err);
    if (rc) return rc;
    *resuming = a->resume && kind == CKPT_DIR_CKPT;
    if (*resuming || a->force || (kind == CKPT_DIR_EMPTY && !a->resume)) return KG_OK;
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
                  "%s is not empty (it holds %s): a new run would replace it; --force to do so, "
                  "or choose another --out",
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

static int run_setup(Run *r, const TrainArgs *a, Dist *d, FILE *log, char *err) {
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
        if (!rc && resuming) { // the sidecar's fields and shard names, before any work
            CkptState st;
            rc = ckpt_state_read(a->out_dir, &st, NULL, err);
            ckpt_state_free(&st);
        }
        if (!rc) rc = ckpt_probe(a->out_dir, err);
    }
    // every rank learns rank 0's verdict, so a refusal there ends them all before any step
    double verdict[2] = {rc != 0, resuming};
    int rc2 = dist_allreduce_sum_f64(d, verdict, 2, rc ? NULL : err);
    if (rc || rc2) return rc ? rc : rc2;
    if (verdict[0] > 0)
        return kg_err(err, KG_EINVAL, "rank 0 did not start the run (its message says why)");
    resuming = verdict[1] > 0;
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
    if ((rc = adamw_init(&r->opt, r->be, r->n_params, err))) return rc;
    if (resuming) {
        if ((rc = ckpt_state_read(a->out_dir, &r->st, &r->opt, err))) return rc;
        if (r->st.total_steps != a->steps && log)
            fprintf(log, "note: checkpoint planned %llu steps, now %llu: the LR schedule differs\n",
                    (unsigned long long)r->st.total_steps, (unsigned long long)a->steps);
        if (r->st.T != a->T && log)
            fprintf(log, "note: checkpoint used --seq %llu, now %zu: the data order differs\n",
                    (unsigned long long)r->st.T, a->T);
    }
    // every rank starts from rank 0's weights (a checkpoint or a seeded init agree anyway)
    if ((rc = dist_broadcast_be(d, r->be, r->m.params, r->n_params, err))) return rc;
    rc = shard_loader_open(&r->loader, a->data_dir, a->T, a->seed, (uint32_t)r->m.config.vocab_size,
                           resuming ? &r->st.pos : NULL, r->st.names, r->st.n_names, err);
    if (rc) return rc;
    r->have_loader = 1;
    if ((rc = val_open(&r->val, a->data_dir, r->m.config.vocab_size, err))) return rc;
    r->t = gpt2_train_new(&r->m, a->B, a->T, a->recompute, err);
    if (!r->t) return KG_ENOMEM;
    if (a->precision != KG_F32 && !r->be->ops->mixed_backward && log && d->rank == 0)
        fprintf(log, "note: the CPU computes matmuls in f32; --precision %s applies on a GPU\n",
                a->precision == KG_BF16 ? "bf16" : "fp16");
    r->inputs = malloc(a->B * a->T * sizeof *r->inputs);
    r->targets = malloc(a->B * a->T * sizeof *r->targets);
    if (!r->inputs || !r->targets) return kg_err(err, KG_ENOMEM, "train: out of memory");
    if (log) {
        const Gpt2Config *c = &r->m.config;
        fprintf(log,
                "model: L=%zu C=%zu NH=%zu n_ctx=%zu V=%zu, %.2fM parameters; activations "
                "%.1f MiB%s\n",
                c->n_layer, c->n_embd, c->n_head, c->n_ctx, c->vocab_size, r->n_params / 1e6,
                gpt2_train_bytes(r->t) / 1048576.0, a->recompute ? " (recompute)" : "");
        fprintf(log, "batch: %zu x %zu tokens x %zu accum x %d ranks = %zu tokens/step\n", a->B,
                a->T, a->grad_accum, d->size, a->B * a->T * a->grad_accum * (size_t)d->size);
        if (resuming)
            fprintf(log, "resumed %s at step %llu\n", a->out_dir, (unsigned long long)r->st.step);
    }
    return KG_OK;
}

static int run_save(Run *r, const TrainArgs *a, Dist *d, uint64_t step, char *err) {
    int rc = KG_OK;
    if (d->rank == 0) {
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
        rc = ckpt_save(a->out_dir, &r->m, KG_F32, r->tok_file, &st, &r->opt, err);
    }
    int rc2 = dist_barrier(d, rc ? NULL : err);
    return rc ? rc : rc2;
}

static int run_validate(Run *r, const TrainArgs *a, Dist *d, FILE *log, uint64_t step, char *err) {
    if (!r->val.n || !r->val.bytes) return KG_OK;
    double loss;
    int rc = validate(&r->m, r->t, &r->val, d, a->B, a->T, a->val_tokens, r->inputs, r->targets,
                      &loss, err);
    if (rc) return rc;
    double bpb = loss / M_LN2 * (double)r->val.tokens / (double)r->val.bytes;
    if (log && !isnan(loss))
        fprintf(log, "val step %llu loss %.4f bpb %.4f\n", (unsigned long long)step, loss, bpb);
    return KG_OK;
}

// The gradient hook of the last micro-step: all-reduce each layer as backward finishes it.
typedef struct {
    Dist *d;
    KgBackend *be;
    float *grads;
    int rc; // the first error; later ranges are skipped
    char *err;
} GradReduce;

static void reduce_ready(void *ctx, size_t offset, size_t count) {
    GradReduce *g = ctx;
    if (!g->rc) g->rc = dist_allreduce_mean_start_be(g->d, g->be, g->grads + offset, count, g->err);
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
    float *grads = gpt2_train_grads(r->t);
    GradReduce reduce = {.d = d, .be = r->be, .grads = grads, .err = err};
    gpt2_train_zero_grad(r->t);
    gpt2_train_set_loss_scale(r->t, r->scaler.scale);
    for (size_t k = 0; k < a->grad_accum; k++) {
        // global micro-batch k*size + rank: every rank reads the same stream, takes its slice
        if ((rc = shard_loader_skip(&r->loader, (uint64_t)d->rank * B, err))) return rc;
        if ((rc = shard_loader_next(&r->loader, r->inputs, r->targets, B, err))) return rc;
        if ((rc = shard_loader_skip(&r->loader, others, err))) return rc;
        float l;
        if ((rc = gpt2_train_forward(&r->m, r->t, r->inputs, r->targets, &l, err))) return rc;
        // the last micro-step's backward all-reduces each layer's gradients as it goes
        int last = k + 1 == a->grad_accum && d->size > 1;
        gpt2_train_set_grad_hook(r->t, last ? reduce_ready : NULL, &reduce);
        gpt2_train_backward(&r->m, r->t);
        loss_sum += l;
    }
    gpt2_train_set_grad_hook(r->t, NULL, NULL);
    if (reduce.rc || (rc = dist_wait_be(d, err))) return reduce.rc ? reduce.rc : rc;
    // the stop flag rides with the loss: every rank stops after the same step even when only
    // one got the signal (a rank that stopped alone would leave the others waiting in the
    // next all-reduce), at no all-reduce of its own
    double sums[2] = {loss_sum / (double)a->grad_accum, a->stop && atomic_load(a->stop)};
    if ((rc = dist_allreduce_sum_f64(d, sums, 2, err))) return rc;
    *loss = sums[0] / d->size;
    *stop = sums[1] > 0;
    // backward summed the micro-steps' means of loss * loss scale
    float scale = 1.0f / ((float)a->grad_accum * r->scaler.scale);
    *norm = adamw_grad_norm(r->be, grads, r->n_params) * scale;
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
    return r->be->ops->status(r->be, err); // the backward's and the optimizer's failures
}

int train_run(const TrainArgs *a, Dist *d, FILE *log, char *err) {
    Run r = {.lock_fd = -1};
    int rc = run_setup(&r, a, d, log, err);
    uint64_t step = r.st.step;
    double t_start = now_s(), t_last = t_start;
    uint64_t steps_timed = 0;
    const double tokens_per_step = (double)(a->B * a->T * a->grad_accum) * d->size;
    for (; !rc && step < a->steps && !(a->stop_at && step >= a->stop_at); step++) {
        if (a->val_every && step % a->val_every == 0 && step > r.st.step &&
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
        double t_now = now_s(), dt = t_now - t_last;
        t_last = t_now;
        steps_timed++;
        if (!isfinite(loss)) {
            rc = kg_err(err, KG_EINTERNAL, "step %llu: loss is %f", (unsigned long long)step + 1,
                        loss);
            break;
        }
        if (log && (a->log_every <= 1 || (step + 1) % a->log_every == 0 || step == 0)) {
            char eta[32];
            fmt_duration(eta, sizeof eta, (t_now - t_start) / steps_timed * (a->steps - step - 1));
            fprintf(log, "step %llu/%llu loss %.6f lr %.3e norm %.3f tok/s %.0f ms %.1f eta %s\n",
                    (unsigned long long)step + 1, (unsigned long long)a->steps, loss, lr, norm,
                    tokens_per_step / dt, dt * 1e3, eta);
            fflush(log);
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
        if (stop) break; // the step under way is saved: no finished step is lost
    }
    if (!rc && step == a->steps && step > r.st.step) rc = run_validate(&r, a, d, log, step, err);
    dist_release_be(d); // the NCCL communicator, before its GPU's backend
    run_free(&r);
    return rc;
}

// What export must not write over: its source (the checkpoint would go, train_state.bin
// with it) and another run's checkpoint. KG_EINVAL naming the directory.
static int export_check_out(const char *from, const char *out, char *err) {
    struct stat a, b;
    if (!stat(from, &a) && !stat(out, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return kg_err(err, KG_EINVAL,
                      "--out %s is --from %s itself: the export would replace its source; "
                      "choose another --out",
                      out, from);
    if (ckpt_exists(out))
        return kg_err(err, KG_EINVAL,
                      "--out %s holds a checkpoint (" CKPT_STATE_FILE
                      "): the export would replace it; choose another --out",
                      out);
    return KG_OK;
}

int train_export(const char *from, const char *out, KgDtype dtype, char *err) {
    Run r = {.lock_fd = -1, .lock_dir = out};
    int rc = ckpt_lock(out, "kogpt2-train export", &r.lock_fd, err);
    if (!rc) rc = export_check_out(from, out, err);
    if (!rc) rc = ckpt_tokenizer_file(from, r.tok_file, sizeof r.tok_file, err);
    if (!rc && !(r.be = kg_cpu_backend_new(1, err))) rc = KG_ENOMEM;
    Gpt2Config unused = {0}; // the config comes from `from`
    if (!rc && !(rc = gpt2_train_model_new(&r.m, &unused, from, r.be, 0, err))) {
        r.have_model = 1;
        rc = ckpt_save(out, &r.m, dtype, r.tok_file, NULL, NULL, err);
    }
    run_free(&r);
    return rc;
}
