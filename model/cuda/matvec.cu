// matvec.cu — out (N, OC) = inp (N, C) @ W + bias for a few rows (N <= CUDA_MATVEC_ROWS: a
// decode step, an Explorer click), W read once in its stored dtype, activations and sums
// in f32. N = rows, C = channels in, OC = channels out.
//
// Why not cuBLAS here: with one row the work is reading W, and cuBLAS's GEMM path for
// f16/bf16 first rounds the activations into scratch (a launch of its own), adds the bias
// in another, and picks tiles made for many rows; at KoGPT2's shape a decode step ran at
// 4-10 % of the card's bandwidth. Each lane here loads 16 bytes of W at a time (4 f32 or 8
// f16/bf16 weights) and multiplies them with every row of inp.
//
// W must be transposed (OC, C): the CUDA backend asks gpt2_open for every matrix that way
// (matrices_out_major), so each output's weights are one contiguous row. A warp per output
// column walks that row against the rows of inp and sums across its lanes: no partial sums
// between blocks, and the same order in every run. Other shapes (W as stored (C, OC), C
// not a multiple of 16 bytes of W, unaligned pointers) return -1 and the caller uses cuBLAS.
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "cuda.h"

#define MV_WARPS 8 // outputs (warps) per block

// 16 bytes of W starting at element i, widened to f32: W16<dt>::n values.
template <int DT> struct W16;
template <> struct W16<KG_F32> {
    static constexpr int n = 4;
    __device__ static void load(const void *p, size_t i, float *v) {
        float4 q = __ldg((const float4 *)((const float *)p + i));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
};
template <> struct W16<KG_F16> {
    static constexpr int n = 8;
    __device__ static void load(const void *p, size_t i, float *v) {
        uint4 q = __ldg((const uint4 *)((const uint16_t *)p + i));
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 h;
            memcpy(&h, &u[j], sizeof h);
            float2 f = __half22float2(h); // exact, as kg_f16_to_f32
            v[2 * j] = f.x, v[2 * j + 1] = f.y;
        }
    }
};
template <> struct W16<KG_BF16> {
    static constexpr int n = 8;
    __device__ static void load(const void *p, size_t i, float *v) {
        uint4 q = __ldg((const uint4 *)((const uint16_t *)p + i));
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++) { // bf16 is the top half of an f32
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
    }
};

// What a finished sum becomes: + bias, kept in pre (when not NULL) before the GELU (gelu:
// -1 none, else a Gpt2Gelu), then stored.
__device__ __forceinline__ void mv_store(float *out, float *pre, size_t i, float v,
                                         const float *bias, size_t oc, int gelu) {
    if (bias) v += bias[oc];
    if (pre) pre[i] = v;
    out[i] = gelu < 0 ? v : kg_activation(v, gelu);
}

// Warp per output column oc (W's row oc); grid ceil(OC / MV_WARPS) blocks.
template <int DT, int NR>
__global__ void matvec_rows_kernel(float *out, float *pre, const float *inp, const void *w,
                                   const float *bias, size_t C, size_t OC, int gelu) {
    constexpr int V = W16<DT>::n;
    const unsigned lane = threadIdx.x % 32;
    const size_t oc = (size_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (oc >= OC) return;
    float acc[NR] = {0};
#pragma unroll 4
    for (size_t c = lane * V; c < C; c += 32 * V) {
        float wv[V];
        W16<DT>::load(w, oc * C + c, wv);
#pragma unroll
        for (int n = 0; n < NR; n++)
#pragma unroll
            for (int j = 0; j < V; j += 4) {
                float4 x = *(const float4 *)(inp + n * C + c + j);
                acc[n] += wv[j] * x.x + wv[j + 1] * x.y + wv[j + 2] * x.z + wv[j + 3] * x.w;
            }
    }
#pragma unroll
    for (int n = 0; n < NR; n++) {
        float s = cuda_warp_sum(acc[n]);
        if (lane == 0) mv_store(out, pre, n * OC + oc, s, bias, oc, gelu);
    }
}

template <int DT, int NR>
static void matvec_launch(CudaBackend *cb, float *out, float *pre, const float *inp, KgMat w,
                          const float *bias, size_t C, size_t OC, int gelu) {
    unsigned blocks = (unsigned)((OC + MV_WARPS - 1) / MV_WARPS);
    matvec_rows_kernel<DT, NR>
        <<<blocks, MV_WARPS * 32, 0, cb->stream>>>(out, pre, inp, w.data, bias, C, OC, gelu);
    cuda_check(cb, cudaGetLastError());
}

template <int DT>
static void matvec_rows(CudaBackend *cb, float *out, float *pre, const float *inp, KgMat w,
                        const float *bias, size_t N, size_t C, size_t OC, int gelu) {
    static_assert(CUDA_MATVEC_ROWS == 4, "one instance per row count");
    switch (N) {
    case 1:
        return matvec_launch<DT, 1>(cb, out, pre, inp, w, bias, C, OC, gelu);
    case 2:
        return matvec_launch<DT, 2>(cb, out, pre, inp, w, bias, C, OC, gelu);
    case 3:
        return matvec_launch<DT, 3>(cb, out, pre, inp, w, bias, C, OC, gelu);
    default:
        return matvec_launch<DT, 4>(cb, out, pre, inp, w, bias, C, OC, gelu);
    }
}

int cuda_matvec(CudaBackend *cb, float *out, float *pre, const float *inp, KgMat w,
                const float *bias, size_t N, size_t C, size_t OC, int gelu) {
    // 16-byte loads of W's rows and of inp's rows
    if (N == 0 || N > CUDA_MATVEC_ROWS || !w.transposed || C % (16 / kg_dtype_size(w.dtype)) ||
        (uintptr_t)w.data % 16 || (uintptr_t)inp % 16)
        return -1;
    if (w.dtype == KG_F16)
        matvec_rows<KG_F16>(cb, out, pre, inp, w, bias, N, C, OC, gelu);
    else if (w.dtype == KG_BF16)
        matvec_rows<KG_BF16>(cb, out, pre, inp, w, bias, N, C, OC, gelu);
    else
        matvec_rows<KG_F32>(cb, out, pre, inp, w, bias, N, C, OC, gelu);
    return 0;
}
