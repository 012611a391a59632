// cpu.h — the CPU backend's state, shared by backend.c (compiled once) and ops.c
// (compiled once per instruction set).
#ifndef CPU_CPU_H
#define CPU_CPU_H

#include "../backend.h"
#include "pool.h"

#include <pthread.h>

// Per-thread scratch, 4 MiB each: the tiled matmul's packed block of W (96 rows of a thread's
// columns, widened to f32) and packed rows of x, the LM head's rows widened for an sgemm
// (matmul.c), a block of attention scores (attention.c).
#define CPU_SCRATCH_FLOATS (1024u * 1024u)

typedef struct {
    CpuPool *pool;
    float **scratch; // (threads) CPU_SCRATCH_FLOATS each
    // the streaming matmul's partial sums, grown on demand; the mutex keeps two threads
    // sharing the backend from using it at once
    float *partial;
    size_t partial_cap; // floats
    pthread_mutex_t partial_mutex;
} CpuBackend;

// Memory functions (backend.c): host memory, 64-byte aligned.
void *cpu_alloc(KgBackend *be, size_t bytes);
void cpu_free(KgBackend *be, void *p);
const void *cpu_weights_map(KgBackend *be, const void *host, size_t bytes);
void cpu_memcpy(KgBackend *be, void *dst, const void *src, size_t bytes);
void cpu_destroy(KgBackend *be);

// The op tables, one per instruction set (ops.c). A table whose ISA this compiler cannot
// target is absent (see CMakeLists.txt).
extern const KgBackendOps CPU_OPS_GENERIC;
extern const KgBackendOps CPU_OPS_AVX2;
extern const KgBackendOps CPU_OPS_AVX512;
extern const KgBackendOps CPU_OPS_AVX512VNNI;
extern const KgBackendOps CPU_OPS_AVX512BF16;

static inline CpuBackend *cpu_of(KgBackend *be) { return (CpuBackend *)be->impl; }

#endif
