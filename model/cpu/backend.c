// backend.c — the CPU backend's memory, its thread pool, and the choice of op table for
// this processor.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KG_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "base/kg.h"
#include "cpu.h"

// calloc'd with room to align to 64 bytes; the block calloc returned is kept in the 8 bytes
// before the aligned pointer. calloc, not posix_memalign and memset: glibc hands a large block
// (a KV pool) out as a fresh mapping it need not clear, so its pages cost no memory until they
// are first written, and the pool's resident size follows the blocks in use.
void *cpu_alloc(KgBackend *be, size_t bytes) {
    (void)be;
    size_t total;
    if (kg_add_overflow(bytes, 64 + sizeof(void *), &total)) return NULL;
    char *raw = calloc(1, total);
    if (!raw) return NULL;
    uintptr_t aligned = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)aligned)[-1] = raw;
    return (void *)aligned;
}

void cpu_free(KgBackend *be, void *p) {
    (void)be;
    if (p) free(((void **)p)[-1]);
}

const void *cpu_weights_map(KgBackend *be, const void *host, size_t bytes) {
    (void)be;
    (void)bytes;
    return host; // the mapping or the model's own buffer is the storage
}

void cpu_memcpy(KgBackend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (dst != src) memmove(dst, src, bytes);
}

void cpu_destroy(KgBackend *be) {
    CpuBackend *cb = cpu_of(be);
    for (int i = 0; cb->scratch && cb->pool && i < cpu_pool_threads(cb->pool); i++)
        free(cb->scratch[i]);
    free(cb->scratch);
    free(cb->partial);
    pthread_mutex_destroy(&cb->partial_mutex);
    cpu_pool_free(cb->pool);
    free(cb);
    free(be);
}

static const KgBackendOps *ops_for_isa(const char *isa) {
#if defined(__x86_64__) && !defined(KG_CPU_GENERIC_ONLY) // (built with -DKG_CPU_SIMD=OFF)
    __builtin_cpu_init();
    if (!strcmp(isa, "avx512bf16"))
        return ops_for_isa("avx512vnni") && __builtin_cpu_supports("avx512bf16")
                   ? &CPU_OPS_AVX512BF16
                   : NULL;
    if (!strcmp(isa, "avx512vnni"))
        return ops_for_isa("avx512") && __builtin_cpu_supports("avx512vnni") ? &CPU_OPS_AVX512VNNI
                                                                             : NULL;
    if (!strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")
                   ? &CPU_OPS_AVX512
                   : NULL;
    if (!strcmp(isa, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &CPU_OPS_AVX2
                                                                               : NULL;
#endif
    return !strcmp(isa, "generic") ? &CPU_OPS_GENERIC : NULL;
}

KgBackend *kg_cpu_backend_new_isa(int threads, const char *isa, char *err) {
    const KgBackendOps *ops = ops_for_isa(isa);
    if (!ops) {
        kg_err(err, KG_EUNSUP, "cpu backend: this processor or build has no %s kernels", isa);
        return NULL;
    }
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0) threads = 1;
#ifdef KG_HAVE_OPENBLAS
    openblas_set_num_threads(1); // our pool splits the work; each task calls sgemm alone
#endif
    KgBackend *be = calloc(1, sizeof *be);
    CpuBackend *cb = calloc(1, sizeof *cb);
    if (!be || !cb || !(cb->pool = cpu_pool_new(threads, err)) ||
        !(cb->scratch = calloc((size_t)threads, sizeof *cb->scratch))) {
        if (cb && cb->pool) cpu_pool_free(cb->pool);
        free(cb);
        free(be);
        kg_err(err, KG_ENOMEM, "cpu backend: out of memory");
        return NULL;
    }
    be->ops = ops;
    be->threads = threads;
    be->mixed = KG_F32;    // KG_BF16: every forward matmul over f32/f16/bf16 weights (matmul.c)
    be->kv_dtype = KG_F32; // bit-exact with a contiguous cache; f16, bf16, q8_0 on request
    be->impl = cb;
    pthread_mutex_init(&cb->partial_mutex, NULL);
    for (int i = 0; i < threads; i++)
        if (!(cb->scratch[i] = malloc(CPU_SCRATCH_FLOATS * sizeof(float)))) {
            cpu_destroy(be);
            kg_err(err, KG_ENOMEM, "cpu backend: out of memory");
            return NULL;
        }
    return be;
}

KgBackend *kg_cpu_backend_new(int threads, char *err) {
    const char *order[] = {"avx512bf16", "avx512vnni", "avx512", "avx2", "generic"};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (ops_for_isa(order[i])) return kg_cpu_backend_new_isa(threads, order[i], err);
    return kg_cpu_backend_new_isa(threads, "generic", err);
}
