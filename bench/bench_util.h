// bench_util.h — timing, random numbers, percentiles and the machine's own limits (memory read
// bandwidth, peak single-precision FLOP/s) for the benchmarks to compare against in the same run.
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

static inline uint64_t bench_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// qsort's comparison of two doubles, ascending.
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The p-th quantile (0..1) of v (n values, sorted ascending; nearest rank); 0 when n is 0.
static inline double bench_pct(const double *v, size_t n, double p) {
    return n ? v[(size_t)(p * (double)(n - 1) + 0.5)] : 0;
}

// The median of v (n >= 1 values; sorts v in place): the middle one, or the mean of the two.
static inline double bench_median(double *v, size_t n) {
    qsort(v, n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef float bench_v16 __attribute__((vector_size(64)));

typedef struct {
    const float *buf;
    size_t n;
    double sum;
    long iters;
} BenchJob;

// Sums the buffer with eight independent accumulators so that loads, not adds, limit it.
#define BENCH_READ_BODY                                                                            \
    BenchJob *j = arg;                                                                             \
    bench_v16 acc[8] = {{0}};                                                                      \
    for (size_t i = 0; i + 128 <= j->n; i += 128)                                                  \
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {                                      \
            bench_v16 v;                                                                           \
            memcpy(&v, j->buf + i + 16 * k, sizeof v);                                             \
            acc[k] += v;                                                                           \
        }                                                                                          \
    float s = 0;                                                                                   \
    for (int k = 0; k < 8; k++)                                                                    \
        for (int i = 0; i < 16; i++)                                                               \
            s += acc[k][i];                                                                        \
    j->sum = s;                                                                                    \
    return NULL;

__attribute__((target("avx512f"))) static void *bench_read_job_avx512(void *arg) { BENCH_READ_BODY }
__attribute__((target("avx2"))) static void *bench_read_job_avx2(void *arg) { BENCH_READ_BODY }

// Bytes per second that `threads` threads read from a 1 GiB buffer (far beyond the caches):
// the best of three passes.
static inline double bench_read_bandwidth(int threads) {
    size_t n = (size_t)1 << 28; // floats
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i & 1023);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        BenchJob jobs[64];
        double t0 = kg_now_s();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (BenchJob){buf + n / threads * t, n / threads, 0, 0};
            pthread_create(&th[t], NULL,
                           __builtin_cpu_supports("avx512f") ? bench_read_job_avx512
                                                             : bench_read_job_avx2,
                           &jobs[t]);
        }
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        double bw = n * sizeof(float) / (kg_now_s() - t0);
        best = bw > best ? bw : best;
    }
    free(buf);
    return best;
}

// 16 independent chains of fused multiply-adds on 16-float vectors: the FMA units' limit.
__attribute__((target("avx512f,fma"))) static void *bench_fma_job_avx512(void *arg) {
    BenchJob *j = arg;
    bench_v16 a[16], m = {0}, x = {0};
    for (int i = 0; i < 16; i++)
        a[i] = (bench_v16){0} + (float)i;
    m += 0.999999f;
    x += 1e-7f;
    for (long it = 0; it < j->iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            a[i] = a[i] * m + x;
    float s = 0;
    for (int i = 0; i < 16; i++)
        s += a[i][0];
    j->sum = s;
    return NULL;
}

typedef float bench_v8 __attribute__((vector_size(32)));
__attribute__((target("avx2,fma"))) static void *bench_fma_job_avx2(void *arg) {
    BenchJob *j = arg;
    bench_v8 a[12], m = {0}, x = {0};
    for (int i = 0; i < 12; i++)
        a[i] = (bench_v8){0} + (float)i;
    m += 0.999999f;
    x += 1e-7f;
    for (long it = 0; it < j->iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            a[i] = a[i] * m + x;
    float s = 0;
    for (int i = 0; i < 12; i++)
        s += a[i][0];
    j->sum = s;
    return NULL;
}

// Peak single-precision FLOP/s of `threads` threads with the widest FMA this CPU has.
static inline double bench_peak_flops(int threads) {
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    void *(*job)(void *) = avx512 ? bench_fma_job_avx512 : bench_fma_job_avx2;
    double per_iter = avx512 ? 16 * 16 * 2 : 12 * 8 * 2;
    long iters = 20000000;
    pthread_t th[64];
    BenchJob jobs[64];
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = kg_now_s();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (BenchJob){NULL, 0, 0, iters};
            pthread_create(&th[t], NULL, job, &jobs[t]);
        }
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        double f = threads * (double)iters * per_iter / (kg_now_s() - t0);
        best = f > best ? f : best;
    }
    return best;
}

#endif
