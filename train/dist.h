// dist.h — data parallelism across processes, as a small interface: dist_mpi.c implements it
// over MPI, dist_local.c as a world of one (builds without MPI), and NCCL can implement it
// for GPU buffers (dist_device.c, dist_nccl.c).
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

#include "model/backend.h"

typedef struct {
    int rank, size;
    int mpi;    // MPI was initialized here (finalize it)
    void *nccl; // the NCCL communicator and stream (dist_nccl.c), made on first use
} Dist;

// The number of processes a launcher (mpirun, srun) started, from its environment; 0 when
// the process was not started by one.
int dist_launched_size(void);

// Joins the world (see above). KG_EUNSUP when launched as several ranks without MPI support.
int dist_init(Dist *d, int *argc, char ***argv, char *err);
void dist_finalize(Dist *d);

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

// --- buffers in backend memory (the trainer's parameters and gradients) ---
// The collectives above on backend memory. Host memory (the CPU) goes straight to them; GPU
// memory goes over NCCL in a build with CUDA, MPI and NCCL (a communicator bootstrapped over
// MPI, on its own stream, after the backend's queued ops finish), else through host memory
// one bucket at a time.
int dist_broadcast_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err);
int dist_allreduce_mean_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err);
// Starts the mean all-reduce of buf (n floats of backend memory): over NCCL it is queued on
// the communication stream once the backend's queued ops finish and returns at once, so it
// overlaps the ops queued next (backward of the layers below); elsewhere it completes before
// returning. dist_wait_be returns when every started one has finished.
int dist_allreduce_mean_start_be(Dist *d, KgBackend *be, float *buf, size_t n, char *err);
int dist_wait_be(Dist *d, char *err);
// Frees what the backend-memory collectives made (the NCCL communicator); before the backend.
void dist_release_be(Dist *d);

// This rank's index among the ranks on its node, from the launcher (it picks the rank's
// GPU); 0 when there is no launcher.
int dist_local_rank(void);
// The ranks on this node, from the launcher; 1 when there is none. Ranks on one machine
// share its cores: each takes nproc / this many threads unless --threads says otherwise.
int dist_local_size(void);

#define DIST_BUCKET ((size_t)1 << 22) // 4 Mi floats = 16 MiB per all-reduce

#endif
