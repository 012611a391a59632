// attention.cu — causal multi-head attention over each sequence's keys and values, and the
// store of new keys and values into their blocks.
// N = rows, C = channels, NH = heads, hs = head size (<= ATT_MAX_HS), T = positions seen.
//
// Keys and values are read through each sequence's block table (backend.h's KgAttnSeq: the
// inference pool's blocks of 16 positions, or training's qkv as one block): the descriptors
// and the tables are staged to the device together, and every row a warp reads is found as
// blocks[t >> shift] * block_stride + h * head_stride + (t & mask) * row_stride (att_row). The
// KV dtype is f32 (ops->kv_dtypes); another is refused as an invalid value.
//
// One block per (query row, head), the same kernel for a 512-token prefill and a one-token
// decode step. Keys go 32 at a time, one per lane: each lane scores its key against the
// query (kept in shared memory), the warp updates an online softmax (running max and sum,
// rescaled as larger scores appear), then adds the 32 weighted value rows with lanes spread
// over the head's channels (coalesced); the block's warps take alternate key blocks and
// merge at the end. No (T, T) matrix unless training asks for the probabilities. Not
// flash-tiled: K/V rows are read once per query row (from L2). The backward: a warp per
// (row, head) for dq, then a warp per (key, head) for dk and dv.
#include <string.h>

#include "cuda.h"

#define ATT_WARPS  4   // backward: warps (one (row, head) or (key, head) each) per block
#define ATT_SPLIT  8   // forward: warps sharing one (row, head), over alternate key blocks
#define ATT_MAX_HS 256 // head channels a warp keeps in registers (8 per lane)
#define ATT_REGS   (ATT_MAX_HS / 32)

// Head h of position t in s's keys or values (base: s.k or s.v; or its gradients dk, dv).
__device__ __forceinline__ float *att_row(const KgAttnSeq &s, const void *base, size_t t,
                                          size_t h) {
    const size_t slot = t & (((size_t)1 << s.block_shift) - 1);
    return (float *)((char *)base + (size_t)s.blocks[t >> s.block_shift] * s.block_stride +
                     h * s.head_stride + slot * s.row_stride);
}

// The rows a warp walks: row j of a strided array (dout), or head h of position t0 + j of a
// sequence's keys or values, through its block table.
struct StridedRows {
    const float *base;
    size_t ld;
    __device__ const float *operator()(size_t j) const { return base + j * ld; }
};
struct KvRows {
    const KgAttnSeq &s;
    const void *base;
    size_t t0, h;
    __device__ const float *operator()(size_t j) const { return att_row(s, base, t0 + j, h); }
};

// acc (this lane's channels lane, lane + 32, ... of one head) += the sum over j < nt of
// w_j * rows(j), where lane j holds w_j: a warp adds nt weighted key or value rows at once,
// lanes spread over the channels (coalesced).
template <typename Rows>
__device__ __forceinline__ void warp_add_rows(float *acc, float w, Rows rows, size_t nt,
                                              unsigned lane, size_t hs) {
    for (size_t j = 0; j < nt; j++) {
        float wj = __shfl_sync(0xffffffffu, w, (int)j);
        const float *row = rows(j);
#pragma unroll
        for (int i = 0; i < ATT_REGS; i++)
            if (lane + 32 * i < hs) acc[i] += wj * row[lane + 32 * i];
    }
}

// One step of warp_dot_rows' reduce-scatter: p[j] for j < O becomes this lane's row j + O
// (bit O of the lane set) or row j, summed with the lane O away. A template, so that every
// index is known at compile time and p stays in registers.
template <int O> __device__ __forceinline__ void reduce_scatter_step(float *p, unsigned lane) {
    const bool upper = lane & O; // keeps rows j + O, sends rows j
#pragma unroll
    for (int j = 0; j < O; j++) {
        float send = upper ? p[j] : p[j + O], keep = upper ? p[j + O] : p[j];
        p[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

// Lane j (< nt) gets dot(x, rows(j)) over the head's channels, x held as this lane's
// channels lane, lane + 32, ... (xr); lanes from nt on get 0.
// The warp reads each row together (coalesced), every lane keeping its partial sum per row,
// then a reduce-scatter across the lanes (31 shuffles for 32 rows, where a warp sum per row
// takes 5 each) leaves row j's total in lane j: after the step of distance o, a lane holds
// the rows whose bit o matches its own, summed over both lanes.
template <typename Rows>
__device__ __forceinline__ float warp_dot_rows(const float *xr, Rows rows, size_t nt, unsigned lane,
                                               size_t hs) {
    float p[32];
#pragma unroll
    for (int j = 0; j < 32; j++) {
        p[j] = 0.0f;
        if ((size_t)j < nt) {
            const float *row = rows(j);
#pragma unroll
            for (int i = 0; i < ATT_REGS; i++)
                if (lane + 32 * i < hs) p[j] += xr[i] * row[lane + 32 * i];
        }
    }
    reduce_scatter_step<16>(p, lane);
    reduce_scatter_step<8>(p, lane);
    reduce_scatter_step<4>(p, lane);
    reduce_scatter_step<2>(p, lane);
    reduce_scatter_step<1>(p, lane);
    return p[0];
}

// This lane's channels lane, lane + 32, ... of a head's row x (hs), times scale.
__device__ __forceinline__ void warp_load_row(float *xr, const float *x, unsigned lane, size_t hs,
                                              float scale) {
#pragma unroll
    for (int i = 0; i < ATT_REGS; i++)
        xr[i] = lane + 32 * i < hs ? x[lane + 32 * i] * scale : 0.0f;
}

// One warp's work: a query row i of sequence seq (forward, dq) or a key i (dk, dv); base
// is the index of the sequence's first row task (row tasks go sequence by sequence).
typedef struct {
    int seq, i, base;
} AttTask;

typedef struct {
    const KgAttnSeq *seqs; // (n_seq) device copies of the descriptors, blocks pointing at...
    const AttTask *rows;   // (M) one per query row
    const AttTask *keys;   // (nk) one per key position, backward only
    size_t M, nk;
} AttPlan;

// Entries of s's block table that its positions [0, pos0 + n) use.
static size_t att_table_len(const KgAttnSeq *s) {
    return ((s->pos0 + s->n - 1) >> s->block_shift) + 1;
}

// Uploads the descriptors, their block tables (each descriptor's blocks then points at its
// device copy) and the task lists as one staged block. 0, or -1 when there are no rows, for
// a KV dtype other than f32, or on failure.
static int att_plan(CudaBackend *cb, const KgAttnSeq *seqs, size_t n_seq, int with_keys,
                    AttPlan *pl) {
    size_t n_table = 0;
    pl->M = pl->nk = 0;
    for (size_t i = 0; i < n_seq; i++) {
        if (seqs[i].n && seqs[i].kv_dtype != KG_F32) {
            cuda_check(cb, cudaErrorInvalidValue);
            return -1;
        }
        pl->M += seqs[i].n;
        pl->nk += with_keys ? seqs[i].pos0 + seqs[i].n : 0;
        n_table += seqs[i].n ? att_table_len(&seqs[i]) : 0;
    }
    if (!pl->M) return -1;
    size_t head = (n_seq * sizeof *seqs + 255) / 256 * 256;
    size_t tables = (n_table * sizeof(uint32_t) + 255) / 256 * 256;
    size_t bytes = head + tables + (pl->M + pl->nk) * sizeof(AttTask);
    char *h = (char *)cuda_stage_begin(cb, bytes);
    if (!h) return -1;
    char *d = cb->stage_dev + (h - cb->stage_host); // where the block lands: its device mirror
    KgAttnSeq *desc = (KgAttnSeq *)h;
    uint32_t *table = (uint32_t *)(h + head);
    memcpy(desc, seqs, n_seq * sizeof *seqs);
    for (size_t i = 0, off = 0; i < n_seq; i++) {
        size_t len = seqs[i].n ? att_table_len(&seqs[i]) : 0;
        memcpy(table + off, seqs[i].blocks, len * sizeof *table);
        desc[i].blocks = (const uint32_t *)(d + head) + off;
        off += len;
    }
    AttTask *rows = (AttTask *)(h + head + tables), *keys = rows + pl->M;
    for (size_t i = 0, k = 0, j = 0, base = 0; i < n_seq; base += seqs[i].n, i++) {
        for (size_t r = 0; r < seqs[i].n; r++)
            rows[k++] = AttTask{(int)i, (int)r, (int)base};
        for (size_t u = 0; with_keys && u < seqs[i].pos0 + seqs[i].n; u++)
            keys[j++] = AttTask{(int)i, (int)u, (int)base};
    }
    if (cuda_stage_end(cb, bytes) != d) return -1;
    pl->seqs = (const KgAttnSeq *)d;
    pl->rows = (const AttTask *)(d + head + tables);
    pl->keys = pl->rows + pl->M;
    return 0;
}

// Row b / 2 of the new rows (task b's sequence and row), keys (b even) or values, every head:
// k or v (row0 + r, ld) -> position pos0 + r of the sequence's blocks.
__global__ void kv_store_kernel(const KgAttnSeq *seqs, const AttTask *tasks, const float *k,
                                const float *v, size_t ld, size_t NH, size_t hs) {
    const AttTask task = tasks[blockIdx.x / 2];
    const KgAttnSeq s = seqs[task.seq];
    const int values = blockIdx.x % 2;
    const float *src = (values ? v : k) + (s.row0 + (size_t)task.i) * ld;
    for (size_t c = threadIdx.x; c < NH * hs; c += blockDim.x)
        att_row(s, values ? s.v : s.k, s.pos0 + (size_t)task.i, c / hs)[c % hs] = src[c];
}

void cuda_kv_store(KgBackend *be, const KgAttnSeq *seqs, size_t n_seq, const float *k,
                   const float *v, size_t ld, size_t NH, size_t hs) {
    CudaBackend *cb = cuda_use(be);
    AttPlan pl;
    if (att_plan(cb, seqs, n_seq, 0, &pl)) return;
    kv_store_kernel<<<(unsigned)(2 * pl.M), 256, 0, cb->stream>>>(pl.seqs, pl.rows, k, v, ld, NH,
                                                                  hs);
    cuda_check(cb, cudaGetLastError());
}

// out (N, C) from q (N, ld_q): block b does row task b / NH, head b % NH. Its ATT_SPLIT
// warps take turns over blocks of 32 keys (warp i: keys 32 i .., 32 (i + ATT_SPLIT) ..),
// each with its own online softmax, merged at the end: a decode step has only NH tasks, and
// this lets ATT_SPLIT warps share each one. The scores of 32 keys come from warp_dot_rows
// (the query in registers, each key row read coalesced). With s.att the probabilities of the row go
// to att (NH, n, Tk) (zeros past the row's position): the raw scores are parked there and
// normalized once the row's max and sum are known.
__global__ void attention_forward_kernel(float *out, const float *q, size_t ld_q,
                                         const KgAttnSeq *seqs, const AttTask *tasks, size_t NH,
                                         size_t hs, float scale) {
    extern __shared__ float att_smem[]; // per warp: m, l, acc (hs)
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const AttTask task = tasks[blockIdx.x / NH];
    const KgAttnSeq s = seqs[task.seq];
    const size_t h = blockIdx.x % NH, r = (size_t)task.i, row = s.row0 + r, p = s.pos0 + r;
    const size_t Tk = s.pos0 + s.n;
    float *wm = att_smem, *wl = wm + ATT_SPLIT, *wacc = wl + ATT_SPLIT;
    float qr[ATT_REGS]; // this lane's channels of the query, pre-scaled
    warp_load_row(qr, q + row * ld_q + h * hs, lane, hs, scale);
    float *att = s.att ? s.att + (h * s.n + r) * Tk : NULL;
    float acc[ATT_REGS] = {0};
    float m = -INFINITY, l = 0.0f; // this warp's running max and sum
    for (size_t t0 = 32 * warp; t0 <= p; t0 += 32 * ATT_SPLIT) {
        size_t t = t0 + lane, nt = p + 1 - t0 < 32 ? p + 1 - t0 : 32;
        float sc = warp_dot_rows(qr, KvRows{s, s.k, t0, h}, nt, lane, hs); // key t's score
        if (t > p) sc = -INFINITY;
        if (att && t <= p) att[t] = sc;
        float bm = cuda_warp_max(sc); // finite: lane 0's key t0 <= p
        if (bm > m) {                 // rescale what was summed under the smaller max
            float corr = kg_expf(m - bm);
            l *= corr;
#pragma unroll
            for (int i = 0; i < ATT_REGS; i++)
                acc[i] *= corr;
            m = bm;
        }
        float e = t <= p ? kg_expf(sc - m) : 0.0f;
        l += cuda_warp_sum(e);
        warp_add_rows(acc, e, KvRows{s, s.v, t0, h}, nt, lane, hs);
    }
    // merge the warps: a warp that saw no key has m = -inf, l = 0, acc = 0 (weight 0)
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATT_REGS; i++)
        if (lane + 32 * i < hs) wacc[warp * hs + lane + 32 * i] = acc[i];
    __syncthreads(); // also makes every warp's parked scores visible to the whole block
    float M = wm[0], L = 0.0f;
    for (int w = 1; w < ATT_SPLIT; w++)
        M = fmaxf(M, wm[w]);
    for (int w = 0; w < ATT_SPLIT; w++)
        L += wl[w] * kg_expf(wm[w] - M);
    float inv = 1.0f / L;
    float *o = out + row * NH * hs + h * hs;
    for (size_t d = threadIdx.x; d < hs; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < ATT_SPLIT; w++)
            sum += wacc[w * hs + d] * kg_expf(wm[w] - M);
        o[d] = sum * inv;
    }
    if (att)
        for (size_t t = threadIdx.x; t < Tk; t += blockDim.x)
            att[t] = t <= p ? kg_expf(att[t] - M) * inv : 0.0f;
}

void cuda_attention_forward(KgBackend *be, float *out, const float *q, size_t ld_q,
                            const KgAttnSeq *seqs, size_t n_seq, size_t NH, size_t hs) {
    CudaBackend *cb = cuda_use(be);
    if (hs > ATT_MAX_HS) { // every GPT-2 has 64; the model loader allows any C / NH
        cuda_check(cb, cudaErrorInvalidValue);
        return;
    }
    AttPlan pl;
    if (att_plan(cb, seqs, n_seq, 0, &pl)) return;
    size_t smem = ATT_SPLIT * (2 + hs) * sizeof(float);
    attention_forward_kernel<<<(unsigned)(pl.M * NH), ATT_SPLIT * 32, smem, cb->stream>>>(
        out, q, ld_q, pl.seqs, pl.rows, NH, hs, 1.0f / sqrtf((float)hs));
    cuda_check(cb, cudaGetLastError());
}

// Backward from the saved probabilities a = att, per query row r and head:
//   datt[u] = dout_r . v[u];  dpre[r][u] = a[u] (datt[u] - D[r]) / sqrt(hs),
//   D[r] = sum_u a[u] datt[u];  dq_r += sum_u dpre[r][u] k[u]
// and per key u: dk[u] += sum_r dpre[r][u] q_r;  dv[u] += sum_r a[r][u] dout_r.
// Two kernels, each writing only what it owns (no atomics, the same bits on every run):
// one warp per (row, head) computes D and dq, then one warp per (key, head) dk and dv.

// dq (N, ld_q) += ...; D (M, NH) = the rows' sums, for the key kernel.
__global__ void attention_dq_kernel(float *dq, float *D, const float *dout, size_t ld_q,
                                    const KgAttnSeq *seqs, const AttTask *tasks, size_t M,
                                    size_t NH, size_t hs, float scale) {
    size_t w = (size_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    unsigned lane = threadIdx.x % 32;
    if (w >= M * NH) return;
    const AttTask task = tasks[w / NH];
    const KgAttnSeq s = seqs[task.seq];
    const size_t h = w % NH, r = (size_t)task.i, row = s.row0 + r, p = s.pos0 + r;
    const size_t Tk = s.pos0 + s.n, C = NH * hs;
    float dr[ATT_REGS]; // this lane's channels of the row's dout
    warp_load_row(dr, dout + row * C + h * hs, lane, hs, 1.0f);
    const float *a = s.att + (h * s.n + r) * Tk;
    float sum = 0.0f; // D[r]
    for (size_t t0 = 0; t0 <= p; t0 += 32) {
        size_t u = t0 + lane, nt = p + 1 - t0 < 32 ? p + 1 - t0 : 32;
        float datt = warp_dot_rows(dr, KvRows{s, s.v, t0, h}, nt, lane, hs);
        if (u <= p) sum += a[u] * datt;
    }
    sum = cuda_warp_sum(sum);
    if (lane == 0) D[w] = sum; // w = task * NH + h
    float acc[ATT_REGS] = {0};
    for (size_t t0 = 0; t0 <= p; t0 += 32) {
        size_t u = t0 + lane, nt = p + 1 - t0 < 32 ? p + 1 - t0 : 32;
        float datt = warp_dot_rows(dr, KvRows{s, s.v, t0, h}, nt, lane, hs);
        float dp = u <= p ? a[u] * (datt - sum) * scale : 0.0f;
        warp_add_rows(acc, dp, KvRows{s, s.k, t0, h}, nt, lane, hs);
    }
    float *dqr = dq + row * ld_q + h * hs;
#pragma unroll
    for (int i = 0; i < ATT_REGS; i++)
        if (lane + 32 * i < hs) dqr[lane + 32 * i] += acc[i];
}

// Each sequence's dk, dv (addressed as its keys and values) += ... for key u from the rows at
// or after it, 32 rows at a time, one per lane; D from attention_dq_kernel.
__global__ void attention_dkv_kernel(const float *dout, const float *q, size_t ld_q, const float *D,
                                     const KgAttnSeq *seqs, const AttTask *keys, size_t nk,
                                     size_t NH, size_t hs, float scale) {
    size_t w = (size_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    unsigned lane = threadIdx.x % 32;
    if (w >= nk * NH) return;
    const AttTask key = keys[w / NH];
    const KgAttnSeq s = seqs[key.seq];
    const size_t h = w % NH, u = (size_t)key.i, Tk = s.pos0 + s.n, C = NH * hs;
    float vr[ATT_REGS]; // this lane's channels of the value row v[u]
    warp_load_row(vr, att_row(s, s.v, u, h), lane, hs, 1.0f);
    float acc_k[ATT_REGS] = {0}, acc_v[ATT_REGS] = {0};
    for (size_t r0 = u > s.pos0 ? u - s.pos0 : 0; r0 < s.n; r0 += 32) { // rows seeing u
        size_t r = r0 + lane, nr = s.n - r0 < 32 ? s.n - r0 : 32;
        float datt =
            warp_dot_rows(vr, StridedRows{dout + (s.row0 + r0) * C + h * hs, C}, nr, lane, hs);
        float dp = 0.0f, ar = 0.0f;
        if (r < s.n) {
            ar = s.att[(h * s.n + r) * Tk + u];
            dp = ar * (datt - D[((size_t)key.base + r) * NH + h]) * scale;
        }
        for (size_t j = 0; j < nr; j++) {
            float dj = __shfl_sync(0xffffffffu, dp, (int)j);
            float aj = __shfl_sync(0xffffffffu, ar, (int)j);
            size_t row = s.row0 + r0 + j;
            const float *qj = q + row * ld_q + h * hs, *dj_out = dout + row * C + h * hs;
#pragma unroll
            for (int i = 0; i < ATT_REGS; i++) {
                size_t d = lane + 32 * i;
                if (d < hs) {
                    acc_k[i] += dj * qj[d];
                    acc_v[i] += aj * dj_out[d];
                }
            }
        }
    }
    float *dk = att_row(s, s.dk, u, h), *dv = att_row(s, s.dv, u, h);
#pragma unroll
    for (int i = 0; i < ATT_REGS; i++) {
        size_t d = lane + 32 * i;
        if (d < hs) {
            dk[d] += acc_k[i];
            dv[d] += acc_v[i];
        }
    }
}

void cuda_attention_backward(KgBackend *be, float *dq, const float *dout, const float *q,
                             size_t ld_q, const KgAttnSeq *seqs, size_t n_seq, size_t NH,
                             size_t hs) {
    CudaBackend *cb = cuda_use(be);
    if (hs > ATT_MAX_HS) {
        cuda_check(cb, cudaErrorInvalidValue);
        return;
    }
    size_t M = 0;
    for (size_t i = 0; i < n_seq; i++)
        M += seqs[i].n;
    float *D = (float *)cuda_scratch(cb, (M ? M : 1) * NH * sizeof(float)); // (M, NH)
    AttPlan pl;
    if (!D || att_plan(cb, seqs, n_seq, 1, &pl)) return;
    const float scale = 1.0f / sqrtf((float)hs);
    size_t warps = pl.M * NH;
    attention_dq_kernel<<<(unsigned)((warps + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * 32, 0,
                          cb->stream>>>(dq, D, dout, ld_q, pl.seqs, pl.rows, pl.M, NH, hs, scale);
    warps = pl.nk * NH;
    attention_dkv_kernel<<<(unsigned)((warps + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * 32, 0,
                           cb->stream>>>(dout, q, ld_q, D, pl.seqs, pl.keys, pl.nk, NH, hs, scale);
    cuda_check(cb, cudaGetLastError());
}
