// train_sync.c — gradients and weights the same on every rank (train_sync.h).
#include "train_sync.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

int train_sync_init(TrainSync *s, Dist *d, KgBackend *be, float *grads, size_t n, int zero,
                    size_t bucket, KgDtype wire, AdamW *o, FILE *log, char *err) {
    *s = (TrainSync){.d = d, .be = be, .grads = grads, .n = n, .wire = wire, .count = n};
    int rc;
    if (d->size > 1 && (zero || wire != KG_F32) && !be->ops->host_memory)
        return kg_err(err, KG_EUNSUP,
                      "%s is implemented for host memory over MPI (the CPU backend); on GPUs "
                      "gradients go over NCCL in f32",
                      zero ? "--zero 1" : "--wire bf16/f16");
    if (d->size > 1 && zero) {
        s->zero = 1;
        dist_shard(n, d->size, d->rank, &s->lo, &s->count);
        if (!(s->shard = malloc((s->count ? s->count : 1) * sizeof *s->shard)))
            return kg_err(err, KG_ENOMEM, "train: out of memory for a %zu-float shard", s->count);
    } else if (d->size > 1 && be->ops->host_memory) {
        rc = dist_grads_new(&s->bucket, d, grads, n, bucket, wire, err);
        if (rc == KG_EUNSUP && wire == KG_F32) { // no thread: after backward, not during it
            if (log && d->rank == 0)
                fprintf(log, "note: %s; gradients are all-reduced after backward\n", err);
        } else if (rc) {
            return rc;
        }
    }
    return adamw_init_shard(o, be, s->lo, s->count, n, err);
}

void train_sync_free(TrainSync *s) {
    dist_grads_free(s->bucket);
    free(s->shard);
    memset(s, 0, sizeof *s);
}

// The hook of the GPU path: each layer's all-reduce queued as backward finishes it.
static void reduce_be(void *ctx, size_t offset, size_t count) {
    TrainSync *s = ctx;
    if (!s->rc) s->rc = dist_allreduce_mean_start_be(s->d, s->be, s->grads + offset, count, s->err);
}

void train_sync_hook(TrainSync *s, Gpt2GradReady *fn, void **ctx, char *err) {
    s->rc = KG_OK;
    s->err = err;
    *fn = NULL;
    *ctx = NULL;
    if (s->d->size == 1 || s->zero) return;
    if (s->bucket) {
        *fn = dist_grads_ready;
        *ctx = s->bucket;
    } else if (!s->be->ops->host_memory) {
        *fn = reduce_be;
        *ctx = s;
    }
}

int train_sync_grads(TrainSync *s, double *sumsq, char *err) {
    *sumsq = 0;
    s->exposed_s = 0;
    if (s->d->size == 1) return KG_OK;
    double t0 = kg_now_s();
    int rc = KG_OK;
    if (s->zero) {
        rc = dist_reduce_scatter_mean(s->d, s->grads, s->n, s->shard, s->wire, err);
        if (!rc) {
            memcpy(s->grads + s->lo, s->shard, s->count * sizeof *s->shard);
            *sumsq = s->be->ops->sum_squares(s->be, s->grads + s->lo, s->count);
        }
    } else if (s->bucket) {
        rc = dist_grads_wait(s->bucket, err);
    } else if (s->be->ops->host_memory) { // no thread for the bucketed reducer
        rc = dist_allreduce_mean(s->d, s->grads, s->n, err);
    } else { // the hook's errors first, then what is still queued on the GPU
        rc = s->rc ? s->rc : dist_wait_be(s->d, err);
    }
    s->exposed_s = kg_now_s() - t0;
    return rc;
}

int train_sync_params(TrainSync *s, float *params, char *err) {
    return s->zero ? dist_allgather(s->d, params, s->n, err) : KG_OK;
}

int train_sync_full(TrainSync *s, const AdamW *o, AdamW *full, char *err) {
    *full = *o;
    if (!s->zero) return KG_OK;
    *full = (AdamW){.be = o->be, .n = s->n, .total = s->n, .t = o->t};
    int rc = KG_OK;
    if (s->d->rank == 0) {
        full->m = malloc(s->n * sizeof *full->m);
        full->v = malloc(s->n * sizeof *full->v);
        if (!full->m || !full->v)
            rc = kg_err(err, KG_ENOMEM,
                        "train: out of memory for the %zu moments a checkpoint "
                        "gathers",
                        2 * s->n);
    }
    // rank 0's verdict first: without its buffers it cannot take part in the gather
    double failed = rc != 0;
    int rc2 = dist_allreduce_sum_f64(s->d, &failed, 1, rc ? NULL : err);
    if (rc || rc2) return rc ? rc : rc2;
    if (failed > 0) return kg_err(err, KG_ENOMEM, "rank 0 could not gather the optimizer state");
    rc = dist_gather(s->d, o->m, full->m, s->n, err);
    return rc ? rc : dist_gather(s->d, o->v, full->v, s->n, err);
}

void train_sync_full_free(TrainSync *s, const AdamW *o, AdamW *full) {
    if (s->zero && full->m != o->m) {
        free(full->m);
        free(full->v);
    }
    memset(full, 0, sizeof *full);
}
