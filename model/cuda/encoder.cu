// encoder.cu — token plus position embeddings. N = rows, C = channels.
#include <stdlib.h>
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

// The rows of one embedding's backward grouped by the row of the table they read: group g
// adds rows order[first[g] .. first[g + 1]) of dout into table row key[g]. Built on the host
// (tokens and positions arrive there) sorted by (key, row), so each table row has one writer
// that adds its rows in a fixed order: the gradient is the same bits in every run, which
// --resume's exact continuation needs (atomicAdd's order varies from run to run).
typedef struct {
    int key, row;
} KeyRow;

static int keyrow_cmp(const void *a, const void *b) {
    const KeyRow *x = (const KeyRow *)a, *y = (const KeyRow *)b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

// Writes order (N), first (G + 1) and key (G) for the N keys into dst (room for 3 N + 1
// ints); returns G. tmp has room for N KeyRows.
static size_t group_rows(const int *keys, size_t N, KeyRow *tmp, int *dst) {
    for (size_t n = 0; n < N; n++)
        tmp[n] = KeyRow{keys[n], (int)n};
    qsort(tmp, N, sizeof *tmp, keyrow_cmp);
    size_t G = 0;
    for (size_t n = 0; n < N; n++)
        G += n == 0 || tmp[n].key != tmp[n - 1].key;
    int *order = dst, *first = dst + N, *key = first + G + 1;
    for (size_t n = 0, g = 0; n < N; n++) {
        order[n] = tmp[n].row;
        if (n == 0 || tmp[n].key != tmp[n - 1].key) {
            first[g] = (int)n;
            key[g++] = tmp[n].key;
        }
    }
    first[G] = (int)N;
    return G;
}

// dw (rows, C) += dout (N, C) by groups: block g sums its group's rows of dout in order.
__global__ void embedding_backward_kernel(float *dw, const float *dout, const int *order,
                                          const int *first, const int *key, size_t C) {
    size_t g = blockIdx.x;
    float *row = dw + (size_t)key[g] * C;
    for (size_t i = threadIdx.x; i < C; i += blockDim.x) {
        float s = 0.0f;
        for (int j = first[g]; j < first[g + 1]; j++)
            s += dout[(size_t)order[j] * C + i];
        row[i] += s;
    }
}

// dwte (V, C), dwpe (T, C) += dout (N, C) at the rows the forward read.
void cuda_encoder_backward(KgBackend *be, float *dwte, float *dwpe, const float *dout,
                           const int *tokens, const int *pos, size_t N, size_t C) {
    CudaBackend *cb = cuda_use(be);
    if (!N) return;
    KeyRow *tmp = (KeyRow *)malloc(N * sizeof *tmp);
    int *groups = (int *)malloc(2 * (3 * N + 1) * sizeof *groups);
    if (!tmp || !groups) {
        free(tmp);
        free(groups);
        cuda_check(cb, cudaErrorMemoryAllocation);
        return;
    }
    // tokens' groups, then positions' groups, staged as one block
    size_t Gt = group_rows(tokens, N, tmp, groups);
    size_t nt = 2 * N + 1 + Gt; // ints of the token groups
    size_t Gp = group_rows(pos, N, tmp, groups + nt);
    size_t bytes = (nt + 2 * N + 1 + Gp) * sizeof(int);
    const int *d = (const int *)cuda_stage(cb, groups, bytes);
    free(tmp);
    free(groups);
    if (!d) return;
    embedding_backward_kernel<<<(unsigned)Gt, 256, 0, cb->stream>>>(dwte, dout, d, d + N,
                                                                    d + N + Gt + 1, C);
    const int *dp = d + nt;
    embedding_backward_kernel<<<(unsigned)Gp, 256, 0, cb->stream>>>(dwpe, dout, dp, dp + N,
                                                                    dp + N + Gp + 1, C);
    cuda_check(cb, cudaGetLastError());
}
