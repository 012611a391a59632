// backend.h — the op list every compute backend implements (model/cpu/, model/cuda/).
//
// The model graph (gpt2.c) is written once against this table. A backend owns its memory:
// activations, KV caches and (on a GPU) the weights live in buffers it allocates, and the
// graph only passes its pointers back to it. On the CPU "device" memory is host memory.
//
// Legend for shapes: N = rows (tokens in the batch), C = channels in, OC = channels out,
// V = vocabulary, T = positions, NH = heads, hs = head size (C / NH).
#ifndef BACKEND_H
#define BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "dtype.h"

// A weight matrix in its stored dtype and layout. Logically it is (C, OC) and
// out = inp @ W. Conv1D weights (GPT-2's attention and MLP) are stored that way,
// in x out; the embedding table doubling as the LM head is stored transposed, (OC, C).
typedef struct {
    const void *data; // backend memory
    KgDtype dtype;    // KG_F32, KG_F16, KG_BF16, or KG_Q8_0 / KG_Q4_0 (always transposed)
    int transposed;   // 0: (C, OC) row-major; 1: (OC, C) row-major
} KgMat;

// One sequence's share of a batched attention call. Rows [row0, row0 + n) of q and out
// are positions [pos0, pos0 + n) of the sequence. Its keys and values for positions
// [0, pos0 + n) are read through a block table, the addressing of vLLM's paged attention:
// position t is slot t % 2^block_shift of block blocks[t >> block_shift], and head h of it
// starts kg_attn_offset(s, t, h) bytes into k (or v). The inference KV pool (kv.h) has
// blocks of KV_BLOCK_LEN positions anywhere in its memory, each head's rows together;
// training's keys and values are its own qkv rows: one block of every position (blocks =
// {0}), row_stride 3C floats, head_stride hs floats. Causal: position p sees 0..p.
// Training also sets att, where the forward saves the probabilities, and dk/dv, where the
// backward adds the key/value gradients (addressed as k and v, f32).
typedef struct {
    size_t row0, n, pos0;
    void *k, *v;            // backend memory: the sequence's block 0 of this layer's keys, values
    const uint32_t *blocks; // host memory: (ceil((pos0 + n) / 2^block_shift)) block ids (a GPU
                            // backend stages the table with the descriptors)
    unsigned block_shift;   // positions per block = 2^block_shift
    size_t block_stride;    // bytes from one block id to the next
    size_t head_stride;     // bytes from head h to head h + 1 within a position
    size_t row_stride;      // bytes from slot o to slot o + 1 within a block
    KgDtype kv_dtype;       // of k and v: KG_F32, or a dtype the backend lists in kv_dtypes
    float *att;             // (NH, n, pos0 + n) softmax probabilities, or NULL (inference)
    float *dk, *dv;         // backward only: as k and v (f32)
} KgAttnSeq;

// The byte offset of head h of position t in s's keys or values (or gradients).
static inline size_t kg_attn_offset(const KgAttnSeq *s, size_t t, size_t h) {
    const size_t slot = t & (((size_t)1 << s->block_shift) - 1);
    return (size_t)s->blocks[t >> s->block_shift] * s->block_stride + h * s->head_stride +
           slot * s->row_stride;
}

// One AdamW step's scalars (kg_adamw_update in kgmath.h does the per-element math).
typedef struct {
    float lr, beta1, beta2, eps;
    float weight_decay; // 0 for tensors that take no decay (biases, layer norms)
    float grad_scale;   // folds in 1/accumulation steps, clipping and loss unscaling
    float b1c, b2c;     // bias corrections 1 - beta1^t, 1 - beta2^t for this step t
} KgAdamWStep;

// The scalars of AdamW step t (1-based); the bias corrections follow from the betas and t.
static inline KgAdamWStep kg_adamw_step(float lr, float beta1, float beta2, float eps,
                                        float weight_decay, float grad_scale, uint64_t t) {
    return (KgAdamWStep){.lr = lr,
                         .beta1 = beta1,
                         .beta2 = beta2,
                         .eps = eps,
                         .weight_decay = weight_decay,
                         .grad_scale = grad_scale,
                         .b1c = 1.0f - powf(beta1, (float)t),
                         .b2c = 1.0f - powf(beta2, (float)t)};
}

// One next-token candidate, as logits_topk returns it.
typedef struct {
    int id;
    float logit;   // raw, before temperature
    float prob;    // softmax over the whole vocabulary of logit / temperature
    float logprob; // its natural log, computed as logit/temperature - logsumexp (no log(prob))
} KgCandidate;

typedef struct KgBackend KgBackend;

typedef struct {
    const char *name; // e.g. "cpu-avx512"
    int host_memory;  // 1: backend memory is host memory the caller may touch (the CPU)
    // 1: the backend reads a weight matrix fastest as (out, in) rows, so gpt2_open hands it
    // every stored (in, out) Conv1D matrix transposed (a GPU: a decode step's matvec then
    // reads each output's weights as one contiguous row; see cuda/matvec.cu)
    int matrices_out_major;
    // 1: matmul_forward also takes KG_Q8_0 / KG_Q4_0 matrices, held transposed (OC, C) in
    // blocks along C (dtype.h); gpt2_open refuses quantized weights on a backend without them
    int quant_weights;
    // 1: `mixed` (below) also rounds the backward matmuls' operands (a GPU). 0: the backward
    // stays f32 (the CPU), and a rounded forward under an exact backward would give gradients
    // of another function, so the trainer leaves such a backend at KG_F32.
    int mixed_backward;
    // 1: bf16 operands multiply in hardware (tensor cores, AVX512-BF16's vdpbf16ps); 0: the
    // rounding is emulated, so --precision bf16 runs slower than f32 there.
    int bf16_native;
    // The dtypes the backend owns (DESIGN.md, "Precision by backend"): act_dtype is the
    // activation buffers' (f32 on both backends today; the graph only passes them back to the
    // ops), kv_dtypes the KV cache dtypes its kv_store and attention_forward take, a bit
    // 1u << dtype each (the CPU: f32, f16, bf16, q8_0; CUDA: f32 for now). KgBackend.kv_dtype
    // picks one of them.
    KgDtype act_dtype;
    unsigned kv_dtypes;

    // From here to the end only function pointers, every one set by every backend (the loader
    // of a backend library checks each: cuda_load.c).
    // --- memory ---
    // Zeroed backend memory, aligned for any vector load; NULL on OOM.
    void *(*alloc)(KgBackend *be, size_t bytes);
    void (*free)(KgBackend *be, void *p);
    // Makes host weights usable by the ops. The CPU returns host itself (no copy: the mmap
    // stays the storage); a GPU copies them into memory it frees in destroy(). NULL on OOM.
    const void *(*weights_map)(KgBackend *be, const void *host, size_t bytes);
    void (*to_device)(KgBackend *be, void *dst, const void *src, size_t bytes);
    void (*to_host)(KgBackend *be, void *dst, const void *src, size_t bytes);
    // dst (rows, ld_dst) <- src (rows, ld_src), cols floats of each row; both backend memory.
    void (*copy_rows)(KgBackend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
                      size_t rows, size_t cols);
    void (*zero)(KgBackend *be, void *p, size_t bytes);
    // Returns when every op queued so far has finished: a GPU runs ops asynchronously on its
    // stream, so this comes before another stream or library (NCCL) touches backend memory.
    // The CPU's ops are done when they return.
    void (*synchronize)(KgBackend *be);
    // KG_OK, or KG_EIO with err filled: the first failure an op met since the backend was
    // made. Ops return nothing (a GPU reports its failures later, asynchronously), so the
    // graph asks here at the end of each forward and optimizer step. The CPU never fails.
    int (*status)(KgBackend *be, char *err);
    void (*destroy)(KgBackend *be);

    // --- forward ops ---
    // out (N, C) = wte[tokens[i]] + wpe[pos[i]]; tokens and pos are host arrays of N.
    void (*encoder_forward)(KgBackend *be, float *out, const int *tokens, const int *pos, KgMat wte,
                            KgMat wpe, size_t N, size_t C);
    // out (N, C) = (inp - mean) * rstd * w + b per row; mean, rstd (N) may be NULL
    // (inference) or are saved for the backward pass.
    void (*layernorm_forward)(KgBackend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, size_t N, size_t C, float eps);
    // out (N, OC) = inp (N, C) @ w (C, OC) + bias (OC); bias may be NULL.
    void (*matmul_forward)(KgBackend *be, float *out, const float *inp, KgMat w, const float *bias,
                           size_t N, size_t C, size_t OC);
    // The MLP's first half in one call: out (N, OC) = gelu(inp @ w + bias), and pre (N, OC),
    // when not NULL, = inp @ w + bias before the GELU (training keeps it for the backward).
    // A GPU fuses bias and GELU into the matmul's epilogue (the seeds' "fused GELU"), one
    // pass over the output instead of three; the CPU runs matmul_forward then gelu_forward.
    void (*matmul_gelu_forward)(KgBackend *be, float *out, float *pre, const float *inp, KgMat w,
                                const float *bias, size_t N, size_t C, size_t OC, Gpt2Gelu kind);
    // Each sequence's new keys and values into its blocks: rows [row0, row0 + n) of k and v
    // (N, ld floats apart; head h at columns h*hs) become positions [pos0, pos0 + n), in the
    // sequence's kv_dtype (rounded to nearest; q8_0: ggml's blocks of 32 along each head).
    void (*kv_store)(KgBackend *be, const KgAttnSeq *seqs, size_t n_seq, const float *k,
                     const float *v, size_t ld, size_t NH, size_t hs);
    // Causal multi-head attention: out (N, C) from q (N, ld_q) (head h at columns h*hs,
    // pre-scaling) and each sequence's keys/values. Softmax over (q.k) / sqrt(hs).
    void (*attention_forward)(KgBackend *be, float *out, const float *q, size_t ld_q,
                              const KgAttnSeq *seqs, size_t n_seq, size_t NH, size_t hs);
    // out (n) = gelu(inp (n)); out may equal inp.
    void (*gelu_forward)(KgBackend *be, float *out, const float *inp, size_t n, Gpt2Gelu kind);
    // out (n) = a (n) + b (n); out may equal a or b. (Its backward is this op again:
    // the gradient flows unchanged into both inputs.)
    void (*residual_forward)(KgBackend *be, float *out, const float *a, const float *b, size_t n);

    // --- backward ops (training; f32 weights). Every gradient is accumulated with +=, so
    // micro-batches add up; the caller zeroes gradients once per optimizer step. ---
    // dwte (V, C), dwpe (T, C) += dout (N, C) scattered to the rows the forward read.
    void (*encoder_backward)(KgBackend *be, float *dwte, float *dwpe, const float *dout,
                             const int *tokens, const int *pos, size_t N, size_t C);
    // dinp (N, C), dw (C), db (C) from dout (N, C) and what the forward saved.
    void (*layernorm_backward)(KgBackend *be, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, size_t N, size_t C);
    // dinp (N, C) += dout @ w^T; dw (w's layout) += inp^T @ dout; dbias (OC) += sum of dout
    // (dbias may be NULL).
    void (*matmul_backward)(KgBackend *be, float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, KgMat w, size_t N, size_t C, size_t OC);
    // dq (N, ld_q) and each sequence's dk, dv from dout (N, C), q and the saved att.
    void (*attention_backward)(KgBackend *be, float *dq, const float *dout, const float *q,
                               size_t ld_q, const KgAttnSeq *seqs, size_t n_seq, size_t NH,
                               size_t hs);
    // dinp (n) += gelu'(inp) * dout
    void (*gelu_backward)(KgBackend *be, float *dinp, const float *inp, const float *dout, size_t n,
                          Gpt2Gelu kind);
    // Fused softmax + cross-entropy: losses (N) = -log softmax(logits)[target], and logits
    // (N, V) is overwritten by its gradient (softmax - onehot) * dscale. targets is a host
    // array; a target of -1 gives loss 0 and a zero gradient row.
    void (*crossentropy_forward_backward)(KgBackend *be, float *losses, float *logits,
                                          const int *targets, size_t N, size_t V, float dscale);

    // --- optimizer (training) ---
    // params, m, v (n) updated in place by one AdamW step on g = grads * a->grad_scale.
    void (*adamw_update)(KgBackend *be, float *params, const float *grads, float *m, float *v,
                         size_t n, const KgAdamWStep *a);
    // Sum of x[i]^2 over n floats, accumulated in double (the global gradient norm); a
    // non-finite x gives a non-finite sum (the dynamic loss scaler's overflow test).
    double (*sum_squares)(KgBackend *be, const float *x, size_t n);

    // --- host work beside the ops ---
    // fn(ctx, i, thread) for every i in [0, n), spread over the backend's host threads (the
    // CPU's pool, or one after another on the calling thread: the CUDA backend's, whose
    // host has no pool; thread < be->threads indexes per-thread scratch); returns when all have
    // run.
    // For per-row work on host logits that would otherwise leave the other threads idle
    // between forwards: the engine draws every decoding sequence's token this way.
    void (*host_parallel)(KgBackend *be, void (*fn)(void *ctx, size_t i, int thread), void *ctx,
                          size_t n);

    // --- next-token candidates ---
    // The k most probable tokens of one row of V logits (backend memory) under
    // softmax(logits / temperature), highest first, into out (k, host): only k candidates
    // leave the device, not V logits. Returns how many (min(k, V)).
    size_t (*logits_topk)(KgBackend *be, const float *logits, size_t V, float temperature, size_t k,
                          KgCandidate *out);
} KgBackendOps;

struct KgBackend {
    const KgBackendOps *ops;
    int threads; // compute threads the backend uses (CPU)
    // Mixed precision: KG_F32 computes matmuls in f32; KG_BF16 or KG_F16 rounds both
    // operands to that type and accumulates in f32 (training keeps the f32 parameters as
    // master weights). The caller sets it after creation (kogpt2d and kogpt2 next
    // --precision, kogpt2-train --precision). CUDA: every cuBLAS matmul with f32 weights,
    // forward and backward; decode's matrix-vector kernel (up to 4 rows) stays f32.
    // CPU: KG_BF16 in every forward matmul over the layers' f32/f16/bf16 Conv1D weights, at
    // any row count (vdpbf16ps with AVX512-BF16, emulated elsewhere); the LM head, q8_0/q4_0
    // weights and the backward stay f32, so training on the CPU leaves it KG_F32; KG_F16 is
    // not supported there and computes in f32.
    KgDtype mixed;
    // The dtype the KV pools made on this backend hold (kv.h): the backend's default (KG_F32,
    // which keeps the CPU's logits bit for bit those of a contiguous cache), or another of
    // ops->kv_dtypes the caller sets after creation (kogpt2d --kv-dtype).
    KgDtype kv_dtype;
    void *impl; // the backend's own state
};

// The CPU backend: a thread pool of `threads` workers (0 = one per core) and the best
// kernels this processor supports (AVX-512 with VNNI and BF16, with VNNI, alone, AVX2+FMA,
// or portable C), chosen at run time.
// NULL with err filled on failure. Free with kg_backend_free().
KgBackend *kg_cpu_backend_new(int threads, char *err);

// As kg_cpu_backend_new but forcing an instruction set: "avx512bf16" (AVX-512, VNNI and
// BF16: vdpbf16ps for bf16 matmul operands), "avx512vnni" (AVX-512 plus VNNI: the quantized
// kernels' vpdpbusd), "avx512", "avx2" or "generic".
// KG_EUNSUP in err when this processor lacks it. For tests and benchmarks.
KgBackend *kg_cpu_backend_new_isa(int threads, const char *isa, char *err);

// The CUDA backend (model/cuda/, built with KG_CUDA as libkgcuda.so beside the programs,
// opened on the first call: cuda_load.c) on GPU `device`: weights, KV caches and activations
// in device memory, matrices through cuBLAS. NULL with err filled when the build has no CUDA
// (KG_EUNSUP), the library cannot be loaded (KG_EIO, naming the file and why), or no such GPU
// can be used (KG_EIO). Thread-safe.
KgBackend *kg_cuda_backend_new(int device, char *err);
// GPUs the NVIDIA driver sees (libcuda.so.1, probed once per process; the CUDA runtime and
// cuBLAS stay unmapped); 0 in a build without CUDA or when there is no usable driver. With a
// buffer, a one-line description of GPU 0, or "no GPU found (why)". Thread-safe.
int kg_cuda_device_count(char *why, size_t why_size);

// Picks a backend by name: "cpu", "cuda" (GPU 0; "cuda:N" for GPU N) or "auto" (the GPU
// when one exists, else the CPU). Writes one line saying what it chose, and why, to log
// (may be NULL). threads applies to the CPU. NULL with err filled on failure.
KgBackend *kg_backend_new(const char *device, int threads, FILE *log, char *err);

// "cpu", "cuda", "auto" or "cuda:N": KG_OK, else KG_EINVAL with err filled ("--device must
// be auto, cpu, cuda or cuda:N, not 'gpu'").
int kg_device_check(const char *device, char *err);

// kg_device_check as a flag table's parser (base/flags.h, KG_FLAG_FUNC): field is a const char *
// set to value; err names the flag or variable from.
int kg_device_flag(void *field, const char *value, const char *from, char *err);

void kg_backend_free(KgBackend *be);

// A one-line note on be's --precision worth a startup log line, or NULL: a CPU without
// AVX512-BF16 emulates bf16 operands, slower than f32. A static string; be is unchanged.
const char *kg_precision_note(const KgBackend *be);

#endif
