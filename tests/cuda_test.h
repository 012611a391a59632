// cuda_test.h — what test_cuda_ops.c (every op) and test_cuda_model.c (the whole model)
// share: the two backends they compare, one random stream, the normwise error and the
// tolerances. Header-only, as testmodel.h; one test per process.
//
// Errors are "max |gpu - cpu| / max |cpu|" over a whole output tensor (normwise, so a
// near-zero element does not dominate). Tolerances, each stated beside its use:
// - f32: the same math in a different summation order (warp trees, cuBLAS blocking, FMA
//   contraction, atomics): ~1e-6 seen in sums of up to a few thousand terms; 1e-5 for
//   element-wise ops and short sums, 1e-4 for long sums and the whole model.
// - f16/bf16 weights: the CPU widens W and keeps f32 activations; the GPU also rounds the
//   activations to W's type (unit roundoff f16 2^-11 = 4.9e-4, bf16 2^-8 = 3.9e-3); with
//   random signs the normwise error stays within a few units of roundoff.
// - be->mixed (f32 weights, both operands rounded on the GPU only): twice that.
#ifndef TESTS_CUDA_TEST_H
#define TESTS_CUDA_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"

#define TOL_F32_SHORT  1e-5 // element-wise ops, layer norm, short sums
#define TOL_F32_LONG   1e-4 // matmul/attention backward, whole-model logits and gradients
#define TOL_F16_W      3e-3 // f16 weights: ~6 units of f16 roundoff
#define TOL_BF16_W     2e-2 // bf16 weights: ~5 units of bf16 roundoff
#define TOL_MIXED_F16  6e-3 // be->mixed = f16: both operands rounded
#define TOL_MIXED_BF16 4e-2 // be->mixed = bf16: both operands rounded
// whole model, f16/bf16 weights: each of the layers' matmuls rounds its activations again
#define TOL_MODEL_F16  1e-2
#define TOL_MODEL_BF16 6e-2

static KgBackend *g_cpu, *g_gpu; // the backends compared (cuda_test_open)
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static inline uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

// uniform in [-scale, scale)
static inline float rnd_f(float scale) { return scale * ((float)rnd_u32() / 2147483648.0f - 1.0f); }

static inline float *rnd_vec(size_t n, float scale) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    REQUIRE(x, "out of memory");
    for (size_t i = 0; i < n; i++)
        x[i] = rnd_f(scale);
    return x;
}

// The normwise error of got against want[0..n) (above); NaN counts as the worst.
static inline double rel_err(const float *got, const float *want, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        d = e > d || e != e ? e : d; // NaN counts as the worst
        m = fabs(want[i]) > m ? fabs(want[i]) : m;
    }
    return d / (m > 1e-30 ? m : 1e-30);
}

static inline const char *dt_name(KgDtype dt) {
    return dt == KG_F16 ? "f16" : dt == KG_BF16 ? "bf16" : "f32";
}

// Opens both backends; SKIP (77) without a usable CUDA device, REQUIRE (exit 1) when a
// backend fails to open.
static inline void cuda_test_open(void) {
    char why[256] = "", err[KG_ERRLEN];
    if (kg_cuda_device_count(why, sizeof why) <= 0) SKIP("no CUDA device (%s)", why);
    printf("%s\n", why);
    REQUIRE(g_cpu = kg_cpu_backend_new(0, err), "%s", err);
    REQUIRE(g_gpu = kg_cuda_backend_new(0, err), "%s", err);
    printf("cpu: %s, gpu: %s\n", g_cpu->ops->name, g_gpu->ops->name);
}

// Checks that no op met a CUDA or cuBLAS failure along the way (they return nothing; the
// status op says), unless a fault was injected on purpose; frees both backends.
static inline void cuda_test_close(int fault_injected) {
    char err[KG_ERRLEN];
    if (!fault_injected)
        CHECK_MSG(g_gpu->ops->status(g_gpu, err) == KG_OK, "the GPU backend failed: %s", err);
    kg_backend_free(g_cpu);
    kg_backend_free(g_gpu);
}

#endif
