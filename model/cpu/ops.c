// ops.c — the CPU backend's op table for one instruction set.
//
// CMake compiles this file once per ISA (-DCPU_ISA=generic|avx2|avx512|avx512vnni|avx512bf16
// with the matching -m flags), so every kernel below is written once, in simd.h's native-width
// vectors, and backend.c picks the table this processor can run. The kernel files are included
// rather than linked so that each compilation gets its own copy at its own width.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef KG_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "../kgmath.h"
#include "../logits.h"
#include "base/kg.h"
#include "cpu.h"
#include "simd.h"

// the KV cache's rows first: attention.c reads them through it
#include "kv_rows.c"

#include "attention.c"
#include "elementwise.c"
#include "encoder.c"
#include "layernorm.c"
#include "matmul.c"
#include "matmul_q.c"

static void cpu_zero(KgBackend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}

static void cpu_copy_rows(KgBackend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
                          size_t rows, size_t cols) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        memmove(dst + r * ld_dst, src + r * ld_src, cols * sizeof *dst);
}

// matmul_forward for every weight dtype: f32/f16/bf16 (matmul.c) or q8_0/q4_0 (matmul_q.c).
static void cpu_matmul_any_forward(KgBackend *be, float *out, const float *inp, KgMat w,
                                   const float *bias, size_t N, size_t C, size_t OC) {
    if (kg_dtype_quantized(w.dtype))
        cpu_matmul_q_forward(be, out, inp, w, bias, N, C, OC);
    else
        cpu_matmul_forward(be, out, inp, w, bias, N, C, OC);
}

// No fusion to gain on the CPU: the matmul's output tiles are long gone from cache by the
// time a fused GELU could touch them, so this is the two ops in a row.
static void cpu_matmul_gelu_forward(KgBackend *be, float *out, float *pre, const float *inp,
                                    KgMat w, const float *bias, size_t N, size_t C, size_t OC,
                                    Gpt2Gelu kind) {
    float *lin = pre ? pre : out;
    cpu_matmul_any_forward(be, lin, inp, w, bias, N, C, OC);
    cpu_gelu_forward(be, out, lin, N * OC, kind);
}

static void cpu_host_parallel(KgBackend *be, void (*fn)(void *ctx, size_t i, int thread), void *ctx,
                              size_t n) {
    cpu_pool_run(cpu_of(be)->pool, fn, ctx, n);
}

static void cpu_synchronize(KgBackend *be) { (void)be; }

static int cpu_status(KgBackend *be, char *err) {
    (void)be;
    (void)err;
    return KG_OK;
}

#define CPU_OPS_NAME_(isa) CPU_OPS_##isa
#define CPU_OPS_NAME(isa)  CPU_OPS_NAME_(isa)
#define STR_(x)            #x
#define STR(x)             STR_(x)

const KgBackendOps CPU_OPS_NAME(CPU_ISA_UPPER) = {
    .name = "cpu-" STR(CPU_ISA),
    .host_memory = 1,
    .mixed_backward = 0,
#if defined(__AVX512BF16__)
    .bf16_native = 1, // vdpbf16ps
#else
    .bf16_native = 0, // simd.h emulates the rounding
#endif
    .act_dtype = KG_F32,
    .kv_dtypes = 1u << KG_F32 | 1u << KG_F16 | 1u << KG_BF16 | 1u << KG_Q8_0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .weights_map = cpu_weights_map,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy_rows = cpu_copy_rows,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .status = cpu_status,
    .destroy = cpu_destroy,
    .encoder_forward = cpu_encoder_forward,
    .layernorm_forward = cpu_layernorm_forward,
    .quant_weights = 1,
    .matmul_forward = cpu_matmul_any_forward,
    .matmul_gelu_forward = cpu_matmul_gelu_forward,
    .kv_store = cpu_kv_store,
    .attention_forward = cpu_attention_forward,
    .gelu_forward = cpu_gelu_forward,
    .residual_forward = cpu_residual_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_backward = cpu_matmul_backward,
    .attention_backward = cpu_attention_backward,
    .gelu_backward = cpu_gelu_backward,
    .crossentropy_forward_backward = cpu_crossentropy_forward_backward,
    .adamw_update = cpu_adamw_update,
    .sum_squares = cpu_sum_squares,
    .host_parallel = cpu_host_parallel,
    .logits_topk = cpu_logits_topk,
};
