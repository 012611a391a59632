// layernorm.cu — layer normalization over the channels of each row. N = rows, C = channels.
// Statistics in f32 by two passes (mean, then the centred variance) as on the CPU. The
// forward gives each row a block (a decode step has one row: a warp alone would walk its
// 768 channels in 24 dependent steps); the backward a warp per row. Every backward output
// is accumulated with +=.
#include "cuda.h"

#define LN_WARPS   8   // backward: rows per block
#define LN_THREADS 256 // forward: threads per row

// The sum of x over the block (every thread gets it); red: LN_THREADS / 32 floats.
__device__ float ln_block_sum(float x, float *red) {
    x = cuda_warp_sum(x);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < LN_THREADS / 32; w++)
        s += red[w];
    __syncthreads(); // red is reused by the next sum
    return s;
}

// out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved when not NULL.
// out may equal inp: each thread reads its elements before it writes them.
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, size_t C, float eps) {
    __shared__ float red[LN_THREADS / 32];
    const size_t row = blockIdx.x;
    const float *x = inp + row * C;
    float s = 0.0f;
    for (size_t i = threadIdx.x; i < C; i += LN_THREADS)
        s += x[i];
    float m = ln_block_sum(s, red) / (float)C;
    float v = 0.0f;
    for (size_t i = threadIdx.x; i < C; i += LN_THREADS)
        v += (x[i] - m) * (x[i] - m);
    float r = 1.0f / sqrtf(ln_block_sum(v, red) / (float)C + eps);
    float *o = out + row * C;
    for (size_t i = threadIdx.x; i < C; i += LN_THREADS)
        o[i] = (x[i] - m) * r * w[i] + b[i];
    if (threadIdx.x == 0 && mean) mean[row] = m;
    if (threadIdx.x == 0 && rstd) rstd[row] = r;
}

void cuda_layernorm_forward(KgBackend *be, float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, size_t N, size_t C, float eps) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    layernorm_forward_kernel<<<(unsigned)N, LN_THREADS, 0, cb->stream>>>(out, mean, rstd, inp, w, b,
                                                                         C, eps);
    cuda_check(cb, cudaGetLastError());
}

// Rows: dinp (N, C) += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd,
// dnorm = w * dout.
__global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd,
                                      size_t N, size_t C) {
    size_t row = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32;
    unsigned lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + row * C, *d = dout + row * C;
    float m = mean[row], r = rstd[row], dm = 0.0f, dnm = 0.0f;
    for (size_t i = lane; i < C; i += 32) {
        float dnorm = w[i] * d[i];
        dm += dnorm;
        dnm += dnorm * (x[i] - m) * r;
    }
    dm = cuda_warp_sum(dm) / (float)C;
    dnm = cuda_warp_sum(dnm) / (float)C;
    float *dx = dinp + row * C;
    for (size_t i = lane; i < C; i += 32)
        dx[i] += (w[i] * d[i] - dm - (x[i] - m) * r * dnm) * r;
}

#define LN_COLS 32 // columns per block of the column sums
#define LN_ROWS 16 // row strides per block

// Columns: dw (C) += sum over rows of xhat * dout, db (C) += sum of dout. A block owns
// LN_COLS columns; its LN_ROWS thread rows stride over the N rows and their partial sums
// are added in a fixed order (deterministic, no atomics).
__global__ void layernorm_dw_kernel(float *dw, float *db, const float *dout, const float *inp,
                                    const float *mean, const float *rstd, size_t N, size_t C) {
    __shared__ float sw[LN_ROWS][LN_COLS], sb[LN_ROWS][LN_COLS];
    size_t c = (size_t)blockIdx.x * LN_COLS + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (size_t n = threadIdx.y; n < N; n += LN_ROWS) {
            float d = dout[n * C + c];
            aw += (inp[n * C + c] - mean[n]) * rstd[n] * d;
            ab += d;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    for (int y = 1; y < LN_ROWS; y++) {
        aw += sw[y][threadIdx.x];
        ab += sb[y][threadIdx.x];
    }
    dw[c] += aw;
    db[c] += ab;
}

void cuda_layernorm_backward(KgBackend *be, float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean, const float *rstd,
                             size_t N, size_t C) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    unsigned blocks = (unsigned)((N + LN_WARPS - 1) / LN_WARPS);
    layernorm_dinp_kernel<<<blocks, LN_WARPS * 32, 0, cb->stream>>>(dinp, dout, inp, w, mean, rstd,
                                                                    N, C);
    dim3 threads(LN_COLS, LN_ROWS);
    layernorm_dw_kernel<<<(unsigned)((C + LN_COLS - 1) / LN_COLS), threads, 0, cb->stream>>>(
        dw, db, dout, inp, mean, rstd, N, C);
    cuda_check(cb, cudaGetLastError());
}
