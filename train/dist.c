// dist.c — what both implementations of dist.h share: how a launcher announces a world.
// The world itself is dist_mpi.c (KG_MPI builds) or dist_local.c (a world of one).
#include "dist.h"

#include <stdlib.h>

// The first of the launchers' variables vars[0..3] that is set to a number >= min, or -1.
static int launcher_int(const char *const vars[4], int min) {
    for (int i = 0; i < 4; i++) {
        const char *s = getenv(vars[i]);
        if (s && atoi(s) >= min) return atoi(s);
    }
    return -1;
}

int dist_launched_size(void) {
    const char *const vars[4] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    int n = launcher_int(vars, 1);
    return n > 0 ? n : getenv("PMIX_RANK") ? 1 : 0;
}

int dist_local_size(void) {
    const char *const vars[4] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                 "SLURM_NTASKS_PER_NODE", "PMIX_LOCAL_SIZE"};
    int n = launcher_int(vars, 1);
    return n > 0 ? n : 1;
}

int dist_local_rank(void) {
    const char *const vars[4] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "PMIX_LOCAL_RANK"};
    int n = launcher_int(vars, 0);
    return n >= 0 ? n : 0;
}

void dist_shard(size_t n, int size, int r, size_t *lo, size_t *count) {
    size_t k = (size_t)size, q = n / k, extra = n % k, i = (size_t)r;
    *count = q + (i < extra);
    *lo = i * q + (i < extra ? i : extra);
}
