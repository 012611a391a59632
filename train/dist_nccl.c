// dist_nccl.c — dist.h's backend-memory collectives on GPUs over NCCL (built with CUDA, MPI
// and NCCL), as libkgnccl.so behind its door (dist_nccl.h). One communicator for the world,
// bootstrapped over MPI (rank 0 makes the unique id and broadcasts it), one CUDA stream of its
// own for communication. Each collective first waits for the backend's queued ops, so the
// gradients it reduces are final.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>

#include "base/kg.h"
#include "dist_nccl.h"

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
} Nccl;

// The communicator, made on first use on the GPU the backend's ops run on (current device).
static Nccl *nccl_of(Dist *d, char *err) {
    if (d->nccl) return d->nccl;
    Nccl *nc = calloc(1, sizeof *nc);
    if (!nc) {
        kg_err(err, KG_ENOMEM, "nccl: out of memory");
        return NULL;
    }
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (d->rank == 0) r = ncclGetUniqueId(&id);
    // every rank joins the broadcast, so a failure on rank 0 cannot leave the others waiting
    int ok = r == ncclSuccess;
    if (MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        !ok || MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(nc);
        kg_err(err, KG_EIO, "nccl: no unique id from rank 0 (%s)",
               r == ncclSuccess ? "MPI failed" : ncclGetErrorString(r));
        return NULL;
    }
    cudaError_t ce = cudaStreamCreateWithFlags(&nc->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        free(nc);
        kg_err(err, KG_EIO, "nccl: cudaStreamCreate: %s", cudaGetErrorString(ce));
        return NULL;
    }
    if ((r = ncclCommInitRank(&nc->comm, d->size, id, d->rank)) != ncclSuccess) {
        cudaStreamDestroy(nc->stream);
        free(nc);
        kg_err(err, KG_EIO, "nccl: ncclCommInitRank (rank %d of %d): %s", d->rank, d->size,
               ncclGetErrorString(r));
        return NULL;
    }
    return d->nccl = nc;
}

// Waits for the collective on the communication stream; reports NCCL's asynchronous errors.
static int nccl_finish(Nccl *nc, ncclResult_t r, const char *what, char *err) {
    if (r == ncclSuccess) {
        cudaError_t ce = cudaStreamSynchronize(nc->stream);
        if (ce != cudaSuccess)
            return kg_err(err, KG_EIO, "nccl: %s: %s", what, cudaGetErrorString(ce));
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(nc->comm, &ar);
        r = ar;
    }
    if (r != ncclSuccess) return kg_err(err, KG_EIO, "nccl: %s: %s", what, ncclGetErrorString(r));
    return KG_OK;
}

static int nccl_broadcast(Dist *d, KgBackend *be, float *buf, size_t n, char *err) {
    Nccl *nc = nccl_of(d, err);
    if (!nc) return KG_EIO;
    be->ops->synchronize(be);
    return nccl_finish(nc, ncclBroadcast(buf, buf, n, ncclFloat, 0, nc->comm, nc->stream),
                       "ncclBroadcast", err);
}

// In DIST_BUCKET pieces, like the MPI path. With wait 0 the all-reduce stays queued on the
// communication stream (nccl_wait finishes it) while the caller queues more compute.
static int nccl_allreduce_mean(Dist *d, KgBackend *be, float *buf, size_t n, int wait, char *err) {
    Nccl *nc = nccl_of(d, err);
    if (!nc) return KG_EIO;
    be->ops->synchronize(be); // the gradients in buf are final
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; r == ncclSuccess && i < n; i += DIST_BUCKET) {
        size_t k = n - i < DIST_BUCKET ? n - i : DIST_BUCKET;
        r = ncclAllReduce(buf + i, buf + i, k, ncclFloat, ncclAvg, nc->comm, nc->stream);
    }
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess) r = g;
    if (!wait && r == ncclSuccess) return KG_OK;
    return nccl_finish(nc, r, "ncclAllReduce", err);
}

static int nccl_wait(Dist *d, char *err) {
    return nccl_finish(d->nccl, ncclSuccess, "ncclAllReduce", err);
}

static void nccl_release(Dist *d) {
    Nccl *nc = d->nccl;
    if (!nc) return;
    ncclCommDestroy(nc->comm);
    cudaStreamDestroy(nc->stream);
    free(nc);
    d->nccl = NULL;
}

static const DistNcclLib NCCL_LIB = {
    .abi = DIST_NCCL_ABI,
    .lib_size = sizeof(DistNcclLib),
    .dist_size = sizeof(Dist),
    .broadcast = nccl_broadcast,
    .allreduce_mean = nccl_allreduce_mean,
    .wait = nccl_wait,
    .release = nccl_release,
};

// The library's one exported symbol (DIST_NCCL_LIB_SYMBOL; everything else is hidden).
__attribute__((visibility("default"))) const DistNcclLib *kg_nccl_lib(void) { return &NCCL_LIB; }
