// cpu.h — the CPU backend's state, shared by backend.c (compiled once) and ops.c
// (compiled once per instruction set).
#ifndef CPU_CPU_H
#define CPU_CPU_H

#include "../backend.h"
#include "pool.h"

// Per-thread scratch for widening f16/bf16 weight panels before an sgemm: 1 MiB each,
// sized to sit in L2 next to the activations.
#define CPU_PANEL_FLOATS (256u * 1024u)

typedef struct {
    CpuPool *pool;
    float **panel; // (threads) CPU_PANEL_FLOATS each
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

static inline CpuBackend *cpu_of(KgBackend *be) { return (CpuBackend *)be->impl; }

#endif
