// dist_nccl.h — the door of libkgnccl.so (dist_nccl.c): dist.h's collectives on GPU memory
// over NCCL, in a library beside the programs that dist_device.c opens on the first
// collective over GPU memory, so that kogpt2-train on the CPU never maps NCCL or the CUDA
// runtime. The library exports one symbol, DIST_NCCL_LIB_SYMBOL, a DistNcclDoor.
#ifndef TRAIN_DIST_NCCL_H
#define TRAIN_DIST_NCCL_H

#include <stddef.h>

#include "dist.h"

// Raised when DistNcclLib's meaning changes in a way its size does not show.
#define DIST_NCCL_ABI        1
#define DIST_NCCL_LIB_NAME   "libkgnccl.so"
#define DIST_NCCL_LIB_SYMBOL "kg_nccl_lib"

typedef struct {
    int abi;          // DIST_NCCL_ABI as the library was built (these three fields first, in
    size_t lib_size;  // every version, so that the loader reads them before the rest)
    size_t dist_size; // sizeof(Dist) there
    // dist_broadcast_be over NCCL: buf (n floats of be's memory) = rank 0's.
    int (*broadcast)(Dist *d, KgBackend *be, float *buf, size_t n, char *err);
    // dist_allreduce_mean_be over NCCL; with wait 0 it stays queued (dist_wait_be: wait).
    int (*allreduce_mean)(Dist *d, KgBackend *be, float *buf, size_t n, int wait, char *err);
    int (*wait)(Dist *d, char *err);
    // Frees the communicator and stream (d->nccl), if any.
    void (*release)(Dist *d);
} DistNcclLib;

// The type of DIST_NCCL_LIB_SYMBOL: the library's door, static for the process's life.
typedef const DistNcclLib *(*DistNcclDoor)(void);

#endif
