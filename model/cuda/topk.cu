// topk.cu — the k most probable next tokens of one row of V logits, found on the device so
// that only k candidates (and the log-sum-exp) cross to the host.
//
// One block of TOPK_THREADS: the log-sum-exp of logits / temperature (as
// logits_logsumexp: raw max, then the sum of kg_expf((x - max) / T)); a radix select of
// the k-th largest logit in four 8-bit passes over order-preserving keys; the candidates
// above it plus, among those equal to it, the lowest ids; then each candidate's place by
// counting those that rank before it (higher logit, then lower id: sampler.c's rule).
// Probabilities are finished on the host with logits_topk's own formula.
#include <math.h>
#include <stdlib.h>

#include "cuda.h"

#define TOPK_THREADS 1024

// An unsigned key in the order of the floats (-0 counts as +0, which compares equal).
__device__ __forceinline__ uint32_t topk_key(float f) {
    uint32_t u = kg_f32_to_bits(f == 0.0f ? 0.0f : f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

__device__ __forceinline__ int ranks_before(float la, int ia, float lb, int ib) {
    return la > lb || (la == lb && ia < ib);
}

// out (k): ids and raw logits, best first; *lse = log sum exp(x / T). k <= CUDA_TOPK_MAX.
__global__ void topk_kernel(KgCandidate *out, double *lse, const float *x, size_t V, float inv_t,
                            unsigned k) {
    __shared__ unsigned hist[256], warp_ties[32];
    __shared__ unsigned s_prefix, s_left, s_count, s_ties;
    __shared__ float shf[32];
    __shared__ double shd[32];
    __shared__ int cid[CUDA_TOPK_MAX];
    __shared__ float clogit[CUDA_TOPK_MAX];
    const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    // log-sum-exp, reduced in warp order (deterministic)
    float m = -INFINITY;
    for (size_t i = tid; i < V; i += TOPK_THREADS)
        m = fmaxf(m, x[i]);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) shf[warp] = m;
    double s = 0.0;
    __syncthreads();
    m = shf[0];
    for (int w = 1; w < TOPK_THREADS / 32; w++)
        m = fmaxf(m, shf[w]);
    for (size_t i = tid; i < V; i += TOPK_THREADS)
        s += kg_expf((x[i] - m) * inv_t);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) shd[warp] = s;
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int w = 0; w < TOPK_THREADS / 32; w++)
            sum += shd[w];
        *lse = (double)m * inv_t + log(sum);
        s_prefix = 0;
        s_left = k; // how many of the keys matching the prefix are still to be taken
    }

    // radix select: after the pass at shift, the top 32 - shift bits of the k-th key are known
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (unsigned b = tid; b < 256; b += TOPK_THREADS)
            hist[b] = 0;
        __syncthreads();
        uint32_t prefix = s_prefix;
        for (size_t i = tid; i < V; i += TOPK_THREADS) {
            uint32_t key = topk_key(x[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned left = s_left;
            for (int b = 255; b >= 0; b--) { // bins from the largest keys down
                if (hist[b] >= left) {
                    s_prefix = prefix | (uint32_t)b << shift;
                    break;
                }
                left -= hist[b];
            }
            s_left = left;
        }
        mask |= 255u << shift;
        __syncthreads();
    }
    // every key above the threshold, and the s_left lowest ids among keys equal to it
    const uint32_t thr = s_prefix;
    const unsigned ties_wanted = s_left;
    if (tid == 0) s_count = s_ties = 0;
    __syncthreads();
    for (size_t base = 0; base < V; base += TOPK_THREADS) {
        size_t i = base + tid;
        uint32_t key = i < V ? topk_key(x[i]) : 0;
        int eq = i < V && key == thr;
        if (i < V && key > thr) {
            unsigned slot = atomicAdd(&s_count, 1u);
            cid[slot] = (int)i;
            clogit[slot] = x[i];
        }
        unsigned ballot = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) warp_ties[warp] = __popc(ballot);
        __syncthreads();
        unsigned rank = s_ties + __popc(ballot & ((1u << lane) - 1u)); // ties before i, in id order
        for (unsigned w = 0; w < warp; w++)
            rank += warp_ties[w];
        if (eq && rank < ties_wanted) {
            unsigned slot = atomicAdd(&s_count, 1u);
            cid[slot] = (int)i;
            clogit[slot] = x[i];
        }
        __syncthreads();
        if (tid == 0)
            for (unsigned w = 0; w < TOPK_THREADS / 32; w++)
                s_ties += warp_ties[w];
        __syncthreads();
    }
    // place each candidate by counting those ranking before it (k is small: k^2 compares)
    for (unsigned c = tid; c < k; c += TOPK_THREADS) {
        unsigned place = 0;
        for (unsigned j = 0; j < k; j++)
            place += ranks_before(clogit[j], cid[j], clogit[c], cid[c]);
        out[place].id = cid[c];
        out[place].logit = clogit[c];
    }
}

size_t cuda_logits_topk(KgBackend *be, const float *logits, size_t V, float temperature, size_t k,
                        KgCandidate *out) {
    CudaBackend *cb = cuda_use(be);
    if (k > V) k = V;
    if (k == 0) return 0;
    temperature = logits_usable_temperature(temperature); // a tiny one acts as its limit
    if (k > CUDA_TOPK_MAX) { // a near-full sort: bring the row home and use the sampler's
        float *host = (float *)malloc(V * sizeof *host);
        if (!host) return 0;
        if (!cuda_check(cb, cudaMemcpyAsync(host, logits, V * sizeof *host, cudaMemcpyDeviceToHost,
                                            cb->stream)) &&
            !cuda_check(cb, cudaStreamSynchronize(cb->stream)))
            k = logits_topk(host, V, temperature, k, out);
        else
            k = 0;
        free(host);
        return k;
    }
    KgCandidate *d_cand = (KgCandidate *)cb->topk_dev, *h_cand = (KgCandidate *)cb->topk_host;
    double *d_lse = (double *)(d_cand + CUDA_TOPK_MAX), *h_lse = (double *)(h_cand + CUDA_TOPK_MAX);
    topk_kernel<<<1, TOPK_THREADS, 0, cb->stream>>>(d_cand, d_lse, logits, V, 1.0f / temperature,
                                                    (unsigned)k);
    if (cuda_check(cb, cudaGetLastError()) ||
        cuda_check(cb, cudaMemcpyAsync(h_cand, d_cand, k * sizeof *h_cand, cudaMemcpyDeviceToHost,
                                       cb->stream)) ||
        cuda_check(
            cb, cudaMemcpyAsync(h_lse, d_lse, sizeof *h_lse, cudaMemcpyDeviceToHost, cb->stream)) ||
        cuda_check(cb, cudaStreamSynchronize(cb->stream)))
        return 0;
    for (size_t i = 0; i < k; i++) { // logits_topk's formula, on the host as there
        out[i] = h_cand[i];
        out[i].logprob = (float)((double)out[i].logit * (double)(1.0f / temperature) - *h_lse);
        out[i].prob = expf(out[i].logprob);
    }
    return k;
}
