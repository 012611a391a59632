// matmul.cu — out (N, OC) = inp (N, C) @ W + bias through cuBLAS, W in f32, f16 or bf16,
// stored (C, OC) (Conv1D, in x out) or transposed (OC, C) (the tied LM head).
// N = rows, C = channels in, OC = channels out.
//
// cuBLAS is column-major: a row-major (R, K) matrix is a column-major (K, R) one, so
// out^T (OC, N) = W^T (OC, C) @ inp^T (C, N) needs no copies; a transposed W is the same
// call with op T on W. f16/bf16 operands (an f16/bf16 W, or be->mixed with f32 weights)
// are rounded into scratch by kgmath.h's conversions and multiplied by cublasGemmEx with
// f32 accumulation and an f32 result. Plain f32 uses CUBLAS_COMPUTE_32F (no TF32). The MLP's
// first matmul goes through cuBLASLt instead, with bias and GELU in its epilogue. Up to
// CUDA_MATVEC_ROWS rows (decode) take matvec.cu's kernels instead of either.
#include "cuda.h"

// The type both operands are multiplied in: an f16/bf16 weight's own, else be->mixed.
static KgDtype matmul_type(const KgBackend *be, KgMat w) {
    if (w.dtype != KG_F32) return w.dtype;
    return be->mixed == KG_F16 || be->mixed == KG_BF16 ? be->mixed : KG_F32;
}

static cudaDataType cuda_type(KgDtype dt) {
    return dt == KG_F16 ? CUDA_R_16F : dt == KG_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// dst (n) = src (n) rounded to f16 or bf16 (round to nearest even, as on the CPU).
__global__ void round_half_kernel(uint16_t *dst, const float *src, size_t n, KgDtype dt) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = dt == KG_F16 ? kg_f32_to_f16(src[i]) : kg_f32_to_bf16(src[i]);
}

// out (N, OC) = bias (OC) in every row: the GEMM then adds with beta = 1.
__global__ void bias_rows_kernel(float *out, const float *bias, size_t N, size_t OC) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * OC;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

// dbias (OC) += column sums of dout (N, OC); a block owns 32 columns, its 16 thread rows
// stride over N and are added in a fixed order (deterministic).
__global__ void column_sums_kernel(float *dbias, const float *dout, size_t N, size_t OC) {
    __shared__ float part[16][32];
    size_t c = (size_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < OC)
        for (size_t n = threadIdx.y; n < N; n += 16)
            s += dout[n * OC + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || c >= OC) return;
    for (int y = 1; y < 16; y++)
        s += part[y][threadIdx.x];
    dbias[c] += s;
}

// Operands of one matmul call in the type they are multiplied in: each is the caller's
// f32 pointer, W's own storage, or a rounded copy in scratch.
typedef struct {
    const void *inp, *w, *dout;
} Operands;

// Rounds what needs rounding into scratch (inp (N, C), dout (N, OC) when not NULL, and
// an f32 W (C * OC)). 0, or -1 when scratch cannot be had.
static int round_operands(CudaBackend *cb, Operands *o, KgDtype dt, KgMat w, const float *inp,
                          const float *dout, size_t N, size_t C, size_t OC) {
    o->inp = inp;
    o->w = w.data;
    o->dout = dout;
    if (dt == KG_F32) return 0;
    const size_t a = 256; // each copy 256-byte aligned for cuBLAS
    size_t b_inp = (N * C * 2 + a - 1) / a * a, b_dout = dout ? (N * OC * 2 + a - 1) / a * a : 0;
    size_t b_w = w.dtype == KG_F32 ? C * OC * 2 : 0;
    char *s = (char *)cuda_scratch(cb, b_inp + b_dout + b_w);
    if (!s) return -1;
    round_half_kernel<<<cuda_grid(N * C, 256), 256, 0, cb->stream>>>((uint16_t *)s, inp, N * C, dt);
    o->inp = s;
    if (dout) {
        round_half_kernel<<<cuda_grid(N * OC, 256), 256, 0, cb->stream>>>((uint16_t *)(s + b_inp),
                                                                          dout, N * OC, dt);
        o->dout = s + b_inp;
    }
    if (b_w) {
        round_half_kernel<<<cuda_grid(C * OC, 256), 256, 0, cb->stream>>>(
            (uint16_t *)(s + b_inp + b_dout), (const float *)w.data, C * OC, dt);
        o->w = s + b_inp + b_dout;
    }
    return cuda_check(cb, cudaGetLastError());
}

// C (m, n) = alpha op(A) op(B) + beta C, column-major; A and B of type t, C f32.
static void gemm(CudaBackend *cb, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                 size_t k, const void *A, size_t lda, const void *B, size_t ldb, float beta,
                 float *Cm, size_t ldc, cudaDataType t) {
    const float one = 1.0f;
    cuda_check_blas(cb, cublasGemmEx(cb->blas, ta, tb, (int)m, (int)n, (int)k, &one, A, t, (int)lda,
                                     B, t, (int)ldb, &beta, Cm, CUDA_R_32F, (int)ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_matmul_forward(KgBackend *be, float *out, const float *inp, KgMat w, const float *bias,
                         size_t N, size_t C, size_t OC) {
    CudaBackend *cb = cuda_use(be);
    if (!N || !cuda_matvec(cb, out, NULL, inp, w, bias, N, C, OC, -1)) return; // few rows
    KgDtype dt = matmul_type(be, w);
    Operands o;
    if (round_operands(cb, &o, dt, w, inp, NULL, N, C, OC)) return;
    float beta = 0.0f;
    if (bias) {
        bias_rows_kernel<<<cuda_grid(N * OC, 256), 256, 0, cb->stream>>>(out, bias, N, OC);
        beta = 1.0f;
    }
    // out^T (OC, N) = W^T (OC, C) @ inp^T (C, N); W (C, OC) row-major is (OC, C)
    // column-major with ld OC, a transposed W (OC, C) is (C, OC) column-major: op T
    gemm(cb, w.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, o.w,
         w.transposed ? C : OC, o.inp, C, beta, out, OC, cuda_type(dt));
}

// Sets one attribute of a cuBLASLt matmul description; 1 on success.
static int lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                  size_t size) {
    return cublasLtMatmulDescSetAttribute(d, a, v, size) == CUBLAS_STATUS_SUCCESS;
}

// out (N, OC) = gelu(inp @ W + bias) in one cuBLASLt call, bias and the tanh GELU in its
// epilogue, with pre (when not NULL) getting the values before the GELU (the epilogue's aux
// output, f32, ld OC). Operands as cuda_matmul_forward lays them out. 0 when it ran; -1 when
// cuBLASLt does not take this shape or type (the caller then runs the two ops).
static int matmul_gelu_lt(CudaBackend *cb, float *out, float *pre, const Operands *o, KgMat w,
                          const float *bias, size_t N, size_t C, size_t OC, KgDtype dt) {
    cudaDataType t = cuda_type(dt);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasOperation_t ta = w.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t ep = pre ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    int64_t ld_aux = (int64_t)OC;
    const float one = 1.0f, zero = 0.0f;
    // out^T (OC, N) = W^T (OC, C) @ inp^T (C, N): A = W as stored, (OC, C) column-major, or
    // (C, OC) with op T when transposed; B = inp, (C, N); D = out, (OC, N); bias per row of D
    int ok =
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) &&
        lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) &&
        lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) &&
        lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) &&
        (!pre || (lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre) &&
                  lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux))) &&
        cublasLtMatrixLayoutCreate(&la, t, w.transposed ? C : OC, w.transposed ? OC : C,
                                   (int64_t)(w.transposed ? C : OC)) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&lb, t, C, N, (int64_t)C) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, OC, N, (int64_t)OC) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmul(cb->lt, desc, &one, o->w, la, o->inp, lb, &zero, out, lc, out, lc, NULL,
                       NULL, 0, cb->stream) == CUBLAS_STATUS_SUCCESS;
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return ok ? 0 : -1;
}

void cuda_matmul_gelu_forward(KgBackend *be, float *out, float *pre, const float *inp, KgMat w,
                              const float *bias, size_t N, size_t C, size_t OC, Gpt2Gelu kind) {
    CudaBackend *cb = cuda_use(be);
    if (!N || !cuda_matvec(cb, out, pre, inp, w, bias, N, C, OC, kind)) return; // few rows
    // cuBLASLt's GELU epilogue is the tanh form (GPT-2's gelu_new); the erf GELU (KoGPT2 v1),
    // ReLU and a matmul without bias take the two ops
    if (kind == GPT2_GELU_TANH && bias) {
        KgDtype dt = matmul_type(be, w);
        Operands o;
        if (round_operands(cb, &o, dt, w, inp, NULL, N, C, OC)) return;
        if (!matmul_gelu_lt(cb, out, pre, &o, w, bias, N, C, OC, dt)) return;
    }
    float *lin = pre ? pre : out;
    cuda_matmul_forward(be, lin, inp, w, bias, N, C, OC);
    cuda_gelu_forward(be, out, lin, N * OC, kind);
}

void cuda_matmul_backward(KgBackend *be, float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, KgMat w, size_t N, size_t C, size_t OC) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    KgDtype dt = matmul_type(be, w);
    cudaDataType t = cuda_type(dt);
    Operands o;
    if (round_operands(cb, &o, dt, w, inp, dout, N, C, OC)) return;
    // dinp^T (C, N) += W (C, OC) @ dout^T (OC, N)
    gemm(cb, w.transposed ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC, o.w,
         w.transposed ? C : OC, o.dout, OC, 1.0f, dinp, C, t);
    if (w.transposed) // dw (OC, C) row-major = (C, OC) column-major += inp^T (C, N) @ dout (N, OC)
        gemm(cb, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, o.inp, C, o.dout, OC, 1.0f, dw, C, t);
    else // dw (C, OC) row-major = (OC, C) column-major += dout^T (OC, N) @ inp (N, C)
        gemm(cb, CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N, o.dout, OC, o.inp, C, 1.0f, dw, OC, t);
    if (dbias) {
        column_sums_kernel<<<(unsigned)((OC + 31) / 32), dim3(32, 16), 0, cb->stream>>>(dbias, dout,
                                                                                        N, OC);
        cuda_check(cb, cudaGetLastError());
    }
}
