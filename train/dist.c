// dist.c — what both implementations of dist.h share: how a launcher announces a world.
// The world itself is dist_mpi.c (KG_MPI builds) or dist_local.c (a world of one).
#include "dist.h"

#include <stdlib.h>

int dist_launched_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && atoi(s) > 0) return atoi(s);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int dist_local_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                          "PMIX_LOCAL_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && atoi(s) > 0) return atoi(s);
    }
    return 1;
}

int dist_local_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                          "PMIX_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && atoi(s) >= 0) return atoi(s);
    }
    return 0;
}
