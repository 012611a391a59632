// dist_mpi.c — dist.h over MPI: ranks are MPI processes, buffers move with MPI collectives.
#include <mpi.h>

#include "base/kg.h"
#include "dist.h"

int dist_init(Dist *d, int *argc, char ***argv, char *err) {
    *d = (Dist){.rank = 0, .size = 1};
    if (!dist_launched_size()) return KG_OK; // a plain run: a world of one, MPI untouched
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return kg_err(err, KG_EIO, "MPI_Init failed");
    d->mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    return KG_OK;
}

void dist_finalize(Dist *d) {
    if (d->mpi) MPI_Finalize();
    d->mpi = 0;
}

int dist_broadcast(Dist *d, float *buf, size_t n, char *err) {
    for (size_t i = 0; d->size > 1 && i < n; i += DIST_BUCKET) {
        int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
        if (MPI_Bcast(buf + i, k, MPI_FLOAT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            return kg_err(err, KG_EIO, "MPI_Bcast failed");
    }
    return KG_OK;
}

int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err) {
    float inv = 1.0f / (float)d->size;
    for (size_t i = 0; d->size > 1 && i < n; i += DIST_BUCKET) {
        int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
        if (MPI_Allreduce(MPI_IN_PLACE, buf + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
            MPI_SUCCESS)
            return kg_err(err, KG_EIO, "MPI_Allreduce failed");
        for (int j = 0; j < k; j++)
            buf[i + (size_t)j] *= inv;
    }
    return KG_OK;
}

int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err) {
    if (d->size > 1 && MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM,
                                     MPI_COMM_WORLD) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "MPI_Allreduce failed");
    return KG_OK;
}

int dist_barrier(Dist *d, char *err) {
    if (d->size > 1 && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "MPI_Barrier failed");
    return KG_OK;
}
