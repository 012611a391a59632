// elementwise.cu — GELU, the residual add, the fused cross-entropy, AdamW and the sum of
// squares. The scalar math is kgmath.h's, the same functions the CPU kernels call.
// n = elements, N = rows, V = vocabulary.
#include <math.h>

#include "cuda.h"

#define EW_THREADS 256
#define CE_THREADS 512 // one block per row of V logits

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n, Gpt2Gelu kind) {
    GRID_STRIDE(i, n) { out[i] = kg_activation(inp[i], kind); }
}

void cuda_gelu_forward(KgBackend *be, float *out, const float *inp, size_t n, Gpt2Gelu kind) {
    CudaBackend *cb = cuda_use(be);
    if (!n) return;
    gelu_forward_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, cb->stream>>>(out, inp, n, kind);
    cuda_check(cb, cudaGetLastError());
}

__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

void cuda_residual_forward(KgBackend *be, float *out, const float *a, const float *b, size_t n) {
    CudaBackend *cb = cuda_use(be);
    if (!n) return;
    residual_forward_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, cb->stream>>>(out, a, b, n);
    cuda_check(cb, cudaGetLastError());
}

// dinp (n) += gelu'(inp) * dout
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n,
                                     Gpt2Gelu kind) {
    GRID_STRIDE(i, n) { dinp[i] += kg_activation_grad(inp[i], kind) * dout[i]; }
}

void cuda_gelu_backward(KgBackend *be, float *dinp, const float *inp, const float *dout, size_t n,
                        Gpt2Gelu kind) {
    CudaBackend *cb = cuda_use(be);
    if (!n) return;
    gelu_backward_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, cb->stream>>>(dinp, inp, dout,
                                                                                  n, kind);
    cuda_check(cb, cudaGetLastError());
}

// Block-wide max and sum (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. The sum adds the warps' partial sums in warp order (deterministic).
__device__ float block_max(float x, float *sh) {
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = x;
    __syncthreads();
    float m = sh[0];
    for (unsigned w = 1; w < blockDim.x / 32; w++)
        m = fmaxf(m, sh[w]);
    __syncthreads(); // sh may be reused at once
    return m;
}

__device__ double block_sum(double x, double *sh) {
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = x;
    __syncthreads();
    double s = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; w++)
        s += sh[w];
    __syncthreads();
    return s;
}

// One row per block: losses[n] = logsumexp - logit[target]; the row becomes
// (softmax - onehot) * dscale. The exponentials are summed in double (51,200 terms), as
// on the CPU; each thread rewrites only the elements it read, so no barrier is needed
// between the passes beyond the reductions'.
__global__ void crossentropy_kernel(float *losses, float *logits, const int *targets, size_t V,
                                    float dscale) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    float *x = logits + (size_t)blockIdx.x * V;
    int target = targets[blockIdx.x];
    if (target < 0) { // ignored position: loss 0, zero gradient
        for (size_t i = threadIdx.x; i < V; i += blockDim.x)
            x[i] = 0.0f;
        if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
        return;
    }
    float xt = x[target]; // read before block_max's barrier; written only after it
    float m = -INFINITY;
    for (size_t i = threadIdx.x; i < V; i += blockDim.x)
        m = fmaxf(m, x[i]);
    m = block_max(m, shf);
    double s = 0.0;
    for (size_t i = threadIdx.x; i < V; i += blockDim.x) {
        float e = kg_expf(x[i] - m);
        x[i] = e;
        s += e;
    }
    s = block_sum(s, shd);
    float zt = xt - m;
    if (threadIdx.x == 0) losses[blockIdx.x] = (float)(log(s) - zt);
    float inv = (float)(dscale / s);
    for (size_t i = threadIdx.x; i < V; i += blockDim.x)
        x[i] = x[i] * inv - (i == (size_t)target ? dscale : 0.0f);
}

void cuda_crossentropy_forward_backward(KgBackend *be, float *losses, float *logits,
                                        const int *targets, size_t N, size_t V, float dscale) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    const int *d_targets = (const int *)cuda_stage(cb, targets, N * sizeof *targets);
    if (!d_targets) return;
    crossentropy_kernel<<<(unsigned)N, CE_THREADS, 0, cb->stream>>>(losses, logits, d_targets, V,
                                                                    dscale);
    cuda_check(cb, cudaGetLastError());
}

// params, m, v (n) by one AdamW step on g = grads * grad_scale (kg_adamw_update per element).
__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n,
                             KgAdamWStep a) {
    GRID_STRIDE(i, n) {
        kg_adamw_update(&params[i], &m[i], &v[i], grads[i] * a.grad_scale, a.lr, a.beta1, a.beta2,
                        a.eps, a.weight_decay, a.b1c, a.b2c);
    }
}

void cuda_adamw_update(KgBackend *be, float *params, const float *grads, float *m, float *v,
                       size_t n, const KgAdamWStep *a) {
    CudaBackend *cb = cuda_use(be);
    if (!n) return;
    adamw_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, cb->stream>>>(params, grads, m, v, n,
                                                                          *a);
    cuda_check(cb, cudaGetLastError());
}

// partial[block] = sum of x[i]^2 over the block's grid-stride elements, in double. The
// grid is always CUDA_SUM_BLOCKS x EW_THREADS, so each partial, and the host's ordered
// sum of them, is the same on every run.
__global__ void sum_squares_kernel(double *partial, const float *x, size_t n) {
    __shared__ double sh[EW_THREADS];
    double s = 0.0;
    GRID_STRIDE(i, n) { s += (double)x[i] * x[i]; }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = EW_THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

double cuda_sum_squares(KgBackend *be, const float *x, size_t n) {
    CudaBackend *cb = cuda_use(be);
    if (!n) return 0.0;
    sum_squares_kernel<<<CUDA_SUM_BLOCKS, EW_THREADS, 0, cb->stream>>>(cb->partial_dev, x, n);
    if (cuda_check(cb, cudaGetLastError()) ||
        cuda_check(cb, cudaMemcpyAsync(cb->partial_host, cb->partial_dev,
                                       CUDA_SUM_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
                                       cb->stream)) ||
        cuda_check(cb, cudaStreamSynchronize(cb->stream)))
        return NAN; // a failed device is not a finite norm
    double s = 0.0;
    for (int b = 0; b < CUDA_SUM_BLOCKS; b++)
        s += cb->partial_host[b];
    return s;
}
