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

#include <stdint.h>

#include "model/backend.h"
#include "model/dtype.h"

// Collectives never wait forever: each one is started non-blocking and polled against a
// deadline of timeout_s seconds (MPI over a dead TCP link would block for good). One that
// misses it is an error naming the step and the collective, and, after a roll call among the
// ranks (each rank that timed out says so to the others for a short grace), the ranks that
// did not answer and their hosts; the world is then broken (dist_abort ends the job: a
// collective left half done cannot be finalized). Not thread-safe: one thread calls MPI at a
// time (the gradient reducer's thread only while its work is in flight; DistGrads).
typedef struct {
    int rank, size;
    int mpi;          // MPI was initialized here (finalize it)
    void *nccl;       // the NCCL communicator and stream (dist_nccl.c), made on first use
    double timeout_s; // a collective not done within this many seconds fails (0: no limit)
    uint64_t step;    // the optimizer step under way (1-based; 0: before the first), for errors
    int broken;       // a collective failed or timed out: only dist_abort can end the world
    char host[64];    // this rank's host name
    void *world;      // dist_mpi.c's: every rank's host name, the roll call's communicator
} Dist;

#define DIST_TIMEOUT_DEFAULT 600 // seconds: well past a checkpoint save rank 0 does alone

// The number of processes a launcher (mpirun, srun) started, from its environment; 0 when
// the process was not started by one.
int dist_launched_size(void);

// Joins the world (see above) with timeout_s DIST_TIMEOUT_DEFAULT, and learns every rank's
// host name. KG_EUNSUP when launched as several ranks without MPI support.
int dist_init(Dist *d, int *argc, char ***argv, char *err);
// Leaves the world; a broken one (d->broken) is aborted instead (dist_abort).
void dist_finalize(Dist *d);
// Ends every rank of the job now with status code (MPI_Abort: the launcher kills the others),
// after an error that left a collective unfinished. Returns only in a world of one.
void dist_abort(Dist *d, int code);
// The host name of rank r ("?" when not known).
const char *dist_host(const Dist *d, int r);

// buf (n floats) on every rank = rank 0's buf.
int dist_broadcast(Dist *d, float *buf, size_t n, char *err);
// buf (n floats) = the mean over ranks of buf, in pieces of DIST_BUCKET floats (MPI counts are
// ints).
int dist_allreduce_mean(Dist *d, float *buf, size_t n, char *err);
// buf (n doubles) = the sum over ranks (losses, token counts).
int dist_allreduce_sum_f64(Dist *d, double *buf, size_t n, char *err);
// Returns when every rank has called it.
int dist_barrier(Dist *d, char *err);

// --- ZeRO-1: each rank owns a contiguous shard of the flat parameter buffer ---
// Rank r's shard of n floats over size ranks: [*lo, *lo + *count), the first n % size ranks
// one float longer. Pure; the same on every rank.
void dist_shard(size_t n, int size, int r, size_t *lo, size_t *count);
// shard (this rank's count floats) = the mean over ranks of buf[lo, lo + count), buf (n
// floats, every rank's gradients) left as it was; on the wire as wire says (KG_F32, or
// KG_BF16 / KG_F16: each rank's values scaled by 1/size, rounded to 16 bits, summed in f32 and
// rounded again at every hop). KG_EUNSUP for another wire type.
int dist_reduce_scatter_mean(Dist *d, const float *buf, size_t n, float *shard, KgDtype wire,
                             char *err);
// buf (n floats): every rank's shard [lo, lo + count) of it sent to every rank (in place).
int dist_allgather(Dist *d, float *buf, size_t n, char *err);
// Rank 0's full (n floats, only rank 0's is written; NULL elsewhere) = every rank's shard
// (count floats, dist_shard's) in rank order.
int dist_gather(Dist *d, const float *shard, float *full, size_t n, char *err);

// --- gradients reduced during backward, in buckets (host memory over MPI) ---
// Horovod's tensor fusion and PyTorch DDP's buckets: backward tells dist_grads_ready each
// range of the gradient buffer it has finished (gpt2_train_set_grad_hook: layers top down,
// then the embeddings); adjacent ranges fuse into one bucket until it holds bucket floats,
// and a full bucket is all-reduced at once by a communication thread (MPI_Iallreduce
// progressed by polling while backward computes the layers below), so most of the traffic
// hides behind compute. wire: KG_F32, or KG_BF16 / KG_F16 (dist_reduce_scatter_mean's
// rounding; half the bytes). Only between dist_grads_ready's first call and dist_grads_wait's
// return does the thread call MPI; outside that window the caller's thread owns MPI.
typedef struct DistGrads DistGrads;
// For n floats of gradients at grads (host memory). KG_ENOMEM, KG_EIO (no thread), KG_EUNSUP
// (a build without MPI, or MPI without thread support). Free with dist_grads_free.
int dist_grads_new(DistGrads **g, Dist *d, float *grads, size_t n, size_t bucket, KgDtype wire,
                   char *err);
// From backward's gradient hook: grads[offset, offset + count) is final (Gpt2GradReady).
void dist_grads_ready(void *g, size_t offset, size_t count);
// Sends what is left, then returns once every range told this step holds the mean over ranks;
// the first error (a timeout: Dist's message) otherwise, with d->broken set.
int dist_grads_wait(DistGrads *g, char *err);
// Seconds the last dist_grads_wait waited (communication not hidden behind backward).
double dist_grads_exposed_s(const DistGrads *g);
void dist_grads_free(DistGrads *g);

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
