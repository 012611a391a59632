// cuda.h — the CUDA backend's state and the launchers each kernel file exports to
// backend.cu, which builds the op table. Included only by the .cu files (C++ under nvcc).
//
// Legend: N = rows, C = channels in, OC = channels out, V = vocabulary, NH = heads,
// hs = head size. Every launcher queues work on the backend's one stream and returns
// at once; only to_host, sum_squares and logits_topk wait for the device.
#ifndef CUDA_CUDA_H
#define CUDA_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../kgmath.h"
extern "C" {
#include "../backend.h"
#include "../logits.h"
#include "base/kg.h"
}

#define CUDA_STAGE_BYTES   (4u << 20) // first size of the pinned staging ring
#define CUDA_SUM_BLOCKS    256        // sum_squares: fixed split, so the sum is deterministic
#define CUDA_TOPK_MAX      1024       // logits_topk on the device up to this k
#define CUDA_ELEMWISE_GRID 4096       // most blocks an element-wise kernel launches
#define CUDA_MATVEC_ROWS   4          // matmuls of up to this many rows take matvec.cu

typedef struct {
    int device;
    char name[160];
    cudaStream_t stream; // every op runs on it, in the order the graph calls them
    cublasHandle_t blas;
    cublasLtHandle_t lt; // matmul_gelu_forward's fused bias + GELU epilogue
    // Staging for host arrays the ops receive (tokens, targets, attention descriptors):
    // a ring of pinned host memory mirrored by a ring of device memory. An upload copies
    // into the host ring at off and queues host -> device; before the ring wraps,
    // stage_done (recorded after the newest upload) is waited for, so no copy that is
    // still pending is ever overwritten. The device ring is reused only in stream order.
    char *stage_host, *stage_dev;
    size_t stage_cap, stage_off;
    cudaEvent_t stage_done;
    // matmul's f16/bf16 operand copies, grown on demand (bytes)
    void *scratch;
    size_t scratch_cap;
    // sum_squares' per-block partial sums (CUDA_SUM_BLOCKS doubles), device and pinned host
    double *partial_dev, *partial_host;
    // logits_topk's answer: k (id, logit) pairs then the log-sum-exp, device and pinned host
    void *topk_dev, *topk_host;
    // weights_map's copies, freed by destroy
    void **weights;
    size_t n_weights, weights_cap;
    // the first CUDA or cuBLAS error an op met (ops return void; see the report of issue 8)
    cudaError_t first_error;
} CudaBackend;

// The backend state of be, with be's GPU made current for the calling thread (the engine
// thread is not the one that created the backend).
CudaBackend *cuda_use(KgBackend *be);
// Records the first failure; returns 0 on success.
int cuda_check(CudaBackend *cb, cudaError_t e);
int cuda_check_blas(CudaBackend *cb, cublasStatus_t s);
// Copies bytes of host memory to the device through the staging ring; returns the device
// copy (valid for kernels queued next on the stream), NULL on failure.
void *cuda_stage(CudaBackend *cb, const void *host, size_t bytes);
// The same in two steps, for arrays built in place: begin returns host memory for bytes
// (NULL on failure), end queues its copy and returns the device copy (NULL on failure).
// An op stages all its arrays as one block: a later upload may wrap the ring over an
// earlier one whose kernel has not been queued yet.
void *cuda_stage_begin(CudaBackend *cb, size_t bytes);
void *cuda_stage_end(CudaBackend *cb, size_t bytes);
// Device scratch of at least bytes (grown on demand, contents undefined); NULL on OOM.
void *cuda_scratch(CudaBackend *cb, size_t bytes);
// Blocks for an element-wise kernel over n items with threads per block.
unsigned cuda_grid(size_t n, unsigned threads);

// Device helper: element i of a weight stored as f32, f16 or bf16, widened to f32.
__device__ __forceinline__ float cuda_load_as(const void *p, KgDtype dt, size_t i) {
    if (dt == KG_F16) return kg_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == KG_BF16) return kg_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

// Warp sums and maxima (every lane gets the result).
__device__ __forceinline__ float cuda_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float cuda_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// --- the ops, one file per family (same signatures as KgBackendOps) ---
// encoder.cu
void cuda_encoder_forward(KgBackend *be, float *out, const int *tokens, const int *pos, KgMat wte,
                          KgMat wpe, size_t N, size_t C);
void cuda_encoder_backward(KgBackend *be, float *dwte, float *dwpe, const float *dout,
                           const int *tokens, const int *pos, size_t N, size_t C);
// layernorm.cu
void cuda_layernorm_forward(KgBackend *be, float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, size_t N, size_t C, float eps);
void cuda_layernorm_backward(KgBackend *be, float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean, const float *rstd,
                             size_t N, size_t C);
// matvec.cu: out = gelu(inp @ W + bias) for N <= CUDA_MATVEC_ROWS and a transposed W (gelu
// -1: none; pre, when not NULL, gets the values before the GELU). -1 when the shape or
// alignment is not one it takes (nothing queued), else 0.
int cuda_matvec(CudaBackend *cb, float *out, float *pre, const float *inp, KgMat w,
                const float *bias, size_t N, size_t C, size_t OC, int gelu);
// matmul.cu
void cuda_matmul_forward(KgBackend *be, float *out, const float *inp, KgMat w, const float *bias,
                         size_t N, size_t C, size_t OC);
void cuda_matmul_gelu_forward(KgBackend *be, float *out, float *pre, const float *inp, KgMat w,
                              const float *bias, size_t N, size_t C, size_t OC, Gpt2Gelu kind);
void cuda_matmul_backward(KgBackend *be, float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, KgMat w, size_t N, size_t C, size_t OC);
// attention.cu
void cuda_kv_store(KgBackend *be, const KgAttnSeq *seqs, size_t n_seq, const float *k,
                   const float *v, size_t ld, size_t NH, size_t hs);
void cuda_attention_forward(KgBackend *be, float *out, const float *q, size_t ld_q,
                            const KgAttnSeq *seqs, size_t n_seq, size_t NH, size_t hs);
void cuda_attention_backward(KgBackend *be, float *dq, const float *dout, const float *q,
                             size_t ld_q, const KgAttnSeq *seqs, size_t n_seq, size_t NH,
                             size_t hs);
// elementwise.cu
void cuda_gelu_forward(KgBackend *be, float *out, const float *inp, size_t n, Gpt2Gelu kind);
void cuda_residual_forward(KgBackend *be, float *out, const float *a, const float *b, size_t n);
void cuda_gelu_backward(KgBackend *be, float *dinp, const float *inp, const float *dout, size_t n,
                        Gpt2Gelu kind);
void cuda_crossentropy_forward_backward(KgBackend *be, float *losses, float *logits,
                                        const int *targets, size_t N, size_t V, float dscale);
void cuda_adamw_update(KgBackend *be, float *params, const float *grads, float *m, float *v,
                       size_t n, const KgAdamWStep *a);
double cuda_sum_squares(KgBackend *be, const float *x, size_t n);
// topk.cu
size_t cuda_logits_topk(KgBackend *be, const float *logits, size_t V, float temperature, size_t k,
                        KgCandidate *out);

#endif
