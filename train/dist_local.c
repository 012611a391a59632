// dist_local.c — dist.h in a build without MPI: a world of one process, where every
// collective is the identity. Started as several ranks by a launcher, it refuses to run
// rather than train N copies that overwrite each other's checkpoints.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kg.h"
#include "dist.h"

int dist_init(Dist *d, int *argc, char ***argv, char *err) {
    (void)argc;
    (void)argv;
    *d = (Dist){.rank = 0, .size = 1, .timeout_s = DIST_TIMEOUT_DEFAULT};
    if (gethostname(d->host, sizeof d->host - 1)) snprintf(d->host, sizeof d->host, "?");
    int launched = dist_launched_size();
    if (launched > 1)
        return kg_err(err, KG_EUNSUP,
                      "started as %d ranks, but this kogpt2-train was built without MPI "
                      "(apt-get install libopenmpi-dev and rebuild)",
                      launched);
    return KG_OK;
}

void dist_finalize(Dist *d) { d->mpi = 0; }

void dist_abort(Dist *d, int code) { (void)d, (void)code; }

const char *dist_host(const Dist *d, int r) { return r == 0 ? d->host : "?"; }

int dist_broadcast(Dist *d, float *buf, size_t n, char *err) {
    (void)d, (void)buf, (void)n, (void)err;
    return KG_OK;
}

int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err) {
    (void)d, (void)buf, (void)n, (void)err;
    return KG_OK;
}

int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err) {
    (void)d, (void)buf, (void)n, (void)err;
    return KG_OK;
}

int dist_barrier(Dist *d, char *err) {
    (void)d, (void)err;
    return KG_OK;
}

int dist_reduce_scatter_mean(Dist *d, const float *buf, size_t n, float *shard, KgDtype wire,
                             char *err) {
    (void)d, (void)wire, (void)err;
    memcpy(shard, buf, n * sizeof *buf);
    return KG_OK;
}

int dist_allgather(Dist *d, float *buf, size_t n, char *err) {
    (void)d, (void)buf, (void)n, (void)err;
    return KG_OK;
}

int dist_gather(Dist *d, const float *shard, float *full, size_t n, char *err) {
    (void)d, (void)err;
    memcpy(full, shard, n * sizeof *shard);
    return KG_OK;
}

// A world of one has nothing to reduce: the trainer never asks (it reduces only over 2+).
int dist_grads_new(DistGrads **g, Dist *d, float *grads, size_t n, size_t bucket, KgDtype wire,
                   char *err) {
    (void)d, (void)grads, (void)n, (void)bucket, (void)wire;
    *g = NULL;
    return kg_err(err, KG_EUNSUP, "dist: built without MPI");
}

void dist_grads_ready(void *g, size_t offset, size_t count) { (void)g, (void)offset, (void)count; }

int dist_grads_wait(DistGrads *g, char *err) {
    (void)g, (void)err;
    return KG_OK;
}

double dist_grads_exposed_s(const DistGrads *g) {
    (void)g;
    return 0;
}

void dist_grads_free(DistGrads *g) { (void)g; }
