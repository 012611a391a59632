// dist.c — dist.h over MPI (KG_HAVE_MPI) or a world of one.
#include "dist.h"

#include <stdlib.h>

#include "model/kg.h"

#ifdef KG_HAVE_MPI
#include <mpi.h>
#endif

// The world size a launcher announced, or 0 when not started by one.
static int launcher_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && atoi(s) > 0) return atoi(s);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int dist_init(Dist *d, int *argc, char ***argv, char *err) {
    *d = (Dist){.rank = 0, .size = 1};
    int launched = launcher_size();
#ifdef KG_HAVE_MPI
    if (launched) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS) return kg_err(err, KG_EIO, "MPI_Init failed");
        d->mpi = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    }
    return KG_OK;
#else
    (void)argc;
    (void)argv;
    if (launched > 1)
        return kg_err(err, KG_EUNSUP,
                      "started as %d ranks, but this kogpt2-train was built without MPI "
                      "(configure with -DKG_MPI=ON)",
                      launched);
    return KG_OK;
#endif
}

void dist_finalize(Dist *d) {
#ifdef KG_HAVE_MPI
    if (d->mpi) MPI_Finalize();
#endif
    d->mpi = 0;
}

int dist_broadcast(Dist *d, float *buf, size_t n, char *err) {
#ifdef KG_HAVE_MPI
    if (d->size > 1)
        for (size_t i = 0; i < n; i += DIST_BUCKET) {
            int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
            if (MPI_Bcast(buf + i, k, MPI_FLOAT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
                return kg_err(err, KG_EIO, "MPI_Bcast failed");
        }
#else
    (void)d;
    (void)buf;
    (void)n;
    (void)err;
#endif
    return KG_OK;
}

int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err) {
#ifdef KG_HAVE_MPI
    if (d->size > 1) {
        float inv = 1.0f / (float)d->size;
        for (size_t i = 0; i < n; i += DIST_BUCKET) {
            int k = (int)(n - i < DIST_BUCKET ? n - i : DIST_BUCKET);
            if (MPI_Allreduce(MPI_IN_PLACE, buf + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
                MPI_SUCCESS)
                return kg_err(err, KG_EIO, "MPI_Allreduce failed");
            for (int j = 0; j < k; j++)
                buf[i + (size_t)j] *= inv;
        }
    }
#else
    (void)d;
    (void)buf;
    (void)n;
    (void)err;
#endif
    return KG_OK;
}

int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err) {
#ifdef KG_HAVE_MPI
    if (d->size > 1 && MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM,
                                     MPI_COMM_WORLD) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "MPI_Allreduce failed");
#else
    (void)d;
    (void)buf;
    (void)n;
    (void)err;
#endif
    return KG_OK;
}

int dist_barrier(Dist *d, char *err) {
#ifdef KG_HAVE_MPI
    if (d->size > 1 && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS)
        return kg_err(err, KG_EIO, "MPI_Barrier failed");
#else
    (void)d;
    (void)err;
#endif
    return KG_OK;
}
