// dist_local.c — dist.h in a build without MPI: a world of one process, where every
// collective is the identity. Started as several ranks by a launcher, it refuses to run
// rather than train N copies that overwrite each other's checkpoints.
#include "base/kg.h"
#include "dist.h"

int dist_init(Dist *d, int *argc, char ***argv, char *err) {
    (void)argc;
    (void)argv;
    *d = (Dist){.rank = 0, .size = 1};
    int launched = dist_launched_size();
    if (launched > 1)
        return kg_err(err, KG_EUNSUP,
                      "started as %d ranks, but this kogpt2-train was built without MPI "
                      "(apt-get install libopenmpi-dev and rebuild)",
                      launched);
    return KG_OK;
}

void dist_finalize(Dist *d) { d->mpi = 0; }

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
