// encoder.cu — token plus position embeddings. N = rows, C = channels.
#include <string.h>

#include "cuda.h"

// Uploads tokens and pos (N each) as one staged block, so that neither can be overwritten
// by the other's upload. 0, or -1 on failure.
static int stage_rows(CudaBackend *cb, const int *tokens, const int *pos, size_t N,
                      const int **d_tok, const int **d_pos) {
    size_t half = (N * sizeof(int) + 255) / 256 * 256;
    char *h = (char *)cuda_stage_begin(cb, 2 * half);
    if (!h) return -1;
    memcpy(h, tokens, N * sizeof(int));
    memcpy(h + half, pos, N * sizeof(int));
    const char *d = (const char *)cuda_stage_end(cb, 2 * half);
    if (!d) return -1;
    *d_tok = (const int *)d;
    *d_pos = (const int *)(d + half);
    return 0;
}

// out (N, C) = wte[tokens[n]] + wpe[pos[n]]: one block per row, rows widened from their
// stored dtype.
__global__ void encoder_forward_kernel(float *out, const int *tokens, const int *pos,
                                       const void *wte, KgDtype wte_dt, const void *wpe,
                                       KgDtype wpe_dt, size_t C) {
    size_t n = blockIdx.x;
    size_t te = (size_t)tokens[n] * C, pe = (size_t)pos[n] * C;
    for (size_t i = threadIdx.x; i < C; i += blockDim.x)
        out[n * C + i] = cuda_load_as(wte, wte_dt, te + i) + cuda_load_as(wpe, wpe_dt, pe + i);
}

void cuda_encoder_forward(KgBackend *be, float *out, const int *tokens, const int *pos, KgMat wte,
                          KgMat wpe, size_t N, size_t C) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    const int *d_tok, *d_pos;
    if (stage_rows(cb, tokens, pos, N, &d_tok, &d_pos)) return;
    encoder_forward_kernel<<<(unsigned)N, 256, 0, cb->stream>>>(out, d_tok, d_pos, wte.data,
                                                                wte.dtype, wpe.data, wpe.dtype, C);
    cuda_check(cb, cudaGetLastError());
}

// dwte (V, C), dwpe (T, C) += dout (N, C) at the rows the forward read. Repeated tokens
// and positions add into the same row, hence atomicAdd (the order of the adds, and so
// the last bits of a repeated token's gradient, may vary between runs).
__global__ void encoder_backward_kernel(float *dwte, float *dwpe, const float *dout,
                                        const int *tokens, const int *pos, size_t C) {
    size_t n = blockIdx.x;
    float *te = dwte + (size_t)tokens[n] * C, *pe = dwpe + (size_t)pos[n] * C;
    for (size_t i = threadIdx.x; i < C; i += blockDim.x) {
        float d = dout[n * C + i];
        atomicAdd(te + i, d);
        atomicAdd(pe + i, d);
    }
}

void cuda_encoder_backward(KgBackend *be, float *dwte, float *dwpe, const float *dout,
                           const int *tokens, const int *pos, size_t N, size_t C) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    const int *d_tok, *d_pos;
    if (stage_rows(cb, tokens, pos, N, &d_tok, &d_pos)) return;
    encoder_backward_kernel<<<(unsigned)N, 256, 0, cb->stream>>>(dwte, dwpe, dout, d_tok, d_pos, C);
    cuda_check(cb, cudaGetLastError());
}
