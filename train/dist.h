// dist.h — data parallelism across processes, as a small interface: dist_mpi.c implements it
// over MPI, dist_local.c as a world of one (builds without MPI), and NCCL can implement it
// later for GPU buffers.
//
// When MPI is used: only in a build with MPI (KG_MPI, on when OpenMPI is found), and only when the
// process was started by a launcher (mpirun/mpiexec/srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK). A plain `kogpt2-train train ...` is then a world of one without touching MPI, so the
// same binary runs anywhere. A build without MPI started under a launcher with more than one
// process refuses to run (dist_init fails) rather than train N copies that overwrite each
// other's checkpoints.
#ifndef TRAIN_DIST_H
#define TRAIN_DIST_H

#include <stddef.h>

typedef struct {
    int rank, size;
    int mpi; // MPI was initialized here (finalize it)
} Dist;

// The number of processes a launcher (mpirun, srun) started, from its environment; 0 when
// the process was not started by one.
int dist_launched_size(void);

// Joins the world (see above). KG_EUNSUP when launched as several ranks without MPI support.
int dist_init(Dist *d, int *argc, char ***argv, char *err);
void dist_finalize(Dist *d);
static inline int dist_rank(const Dist *d) { return d->rank; }
static inline int dist_size(const Dist *d) { return d->size; }

// buf (n floats) on every rank = rank 0's buf.
int dist_broadcast(Dist *d, float *buf, size_t n, char *err);
// buf (n floats) = the mean over ranks of buf, in buckets of DIST_BUCKET floats (bounded
// temporary memory on the network side; a future overlap with backward sends a bucket as
// soon as its gradients are final).
int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err);
// buf (n doubles) = the sum over ranks (losses, token counts).
int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err);
// Returns when every rank has called it.
int dist_barrier(Dist *d, char *err);

#define DIST_BUCKET ((size_t)1 << 22) // 4 Mi floats = 16 MiB per all-reduce

#endif
