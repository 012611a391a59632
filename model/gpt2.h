// gpt2.h — a GPT-2 model on a backend: open a Hugging Face model directory, run the
// forward pass over a batch of sequences with KV caches, get logits.
//
// Shapes: L layers, C = n_embd, NH heads, hs = C / NH, T = n_ctx, V = vocab_size,
// F = n_inner (4C). N = rows (new tokens) in one forward call.
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "kv.h"
#include "safetensors.h"
#include "wsrc.h"

typedef struct {
    const float *ln1_w, *ln1_b; // (C)
    KgMat qkv_w;                // (C, 3C) c_attn: q, k, v side by side
    const float *qkv_b;         // (3C)
    KgMat attproj_w;            // (C, C) attn.c_proj
    const float *attproj_b;     // (C)
    const float *ln2_w, *ln2_b; // (C)
    KgMat fc_w;                 // (C, F) mlp.c_fc
    const float *fc_b;          // (F)
    KgMat fcproj_w;             // (F, C) mlp.c_proj
    const float *fcproj_b;      // (C)
} Gpt2LayerWeights;

// Pointers only: into the mmap (CPU), into device memory (GPU) or into a trainer's one
// parameter buffer. Vectors are always f32; matrices keep their stored dtype.
typedef struct {
    KgMat wte;                  // (V, C) stored transposed: a row per token
    KgMat wpe;                  // (T, C) stored transposed: a row per position
    Gpt2LayerWeights *layers;   // (L)
    const float *lnf_w, *lnf_b; // (C)
    KgMat lm_head;              // (C, V) logically; wte itself when tied
} Gpt2Weights;

typedef struct {
    Gpt2Config config;
    Gpt2Weights w;
    KgBackend *be; // not owned
    KgDtype dtype; // of the big matrices as the backend holds them
    // what the model owns:
    WeightSrc src;    // the mapped weight files (src.what: one line saying what was loaded)
    void *host_owned; // f32 vectors widened from f16/bf16, matrices converted by --dtype
    Gpt2LayerWeights *layers;
    float *params;           // a trainable model's parameters (backend memory), else NULL
    char warning[KG_ERRLEN]; // tensors in the files the model does not use; "" when none
} Gpt2;

// Opens dir/config.json and the directory's weights (wsrc.h: model.safetensors, an index
// of shards, or pytorch_model.bin). Tensors are found by their GPT2LMHeadModel names
// ("transformer.h.0.attn.c_attn.weight"; the "transformer." prefix may be absent;
// "lm_head.weight" is used when present and not tied) and each one's dtype and shape are
// checked against the config. The old attn.bias / attn.masked_bias buffers are ignored;
// any other tensor the model does not use is named in m->warning (not an error), and
// m->src.what says which file was loaded, its dtype and size: both for the caller's log.
// dtype: KG_DTYPE_AUTO keeps the stored dtype (zero-copy), or KG_F32/KG_F16/KG_BF16
// converts the matrices once at load, or KG_Q8_0/KG_Q4_0 quantizes them (CPU backend).
// A quantized file (gpt2_convert; GPT2_META_QUANT in __metadata__) is served as stored:
// dtype must be KG_DTYPE_AUTO or its scheme, else KG_EUNSUP, and so on a backend without
// quantized kernels; every layer matrix and the LM head must be U8 blocks of that scheme,
// else KG_EFORMAT.
// On error: KG_EIO / KG_EFORMAT / KG_EUNSUP / KG_ENOMEM, err names the file and tensor, m
// holds nothing. Close with gpt2_close(); the backend must outlive the model.
int gpt2_open(Gpt2 *m, const char *dir, KgBackend *be, KgDtype dtype, char *err);
void gpt2_close(Gpt2 *m);

// The __metadata__ key of a quantized model.safetensors, and its values "q8_0" / "q4_0": the
// layer matrices and the LM head (its own copy when tied) are then U8 tensors
// (out, in / 32 * block bytes), each row one output's blocks along its inputs (dtype.h);
// embeddings, layer norms and biases stay in their float dtype.
#define GPT2_META_QUANT "kogpt2.quant"

// Writes the model directory src (anything gpt2_open reads, checked as it does) as a clean
// out/model.safetensors: the model's tensors under their GPT2LMHeadModel names, in their
// stored dtype (KG_DTYPE_AUTO) or converted to KG_F32/KG_F16/KG_BF16, or with the layer
// matrices and the LM head quantized to KG_Q8_0/KG_Q4_0 exactly as gpt2_open quantizes at
// load (GPT2_META_QUANT); then copies config.json and the tokenizer's and generation files
// beside it. A quantized src stays as it is under KG_DTYPE_AUTO or its own scheme; any
// other dtype is KG_EUNSUP. out is created if missing; the weights go through a temporary
// name, so a failed run leaves no torn file. what (KG_ERRLEN bytes, may be NULL) gets the
// line saying what src held. progress (may be NULL: silent) is the stream the caller gives
// the progress line (base/progress.h: redrawn on a terminal with an ETA, elsewhere a line
// per 10 %), counted in bytes of weights converted and written; the function itself prints
// nothing else. KG_OK or an error.
int gpt2_convert(const char *src, const char *out, KgDtype dtype, FILE *progress, char *what,
                 char *err);

// The tensors of m, opened on the CPU backend, as gpt2_convert writes them: those of
// gpt2_param_tensors() in its order, then lm_head.weight when the config ties the head but m
// holds its own blocks. A matrix m holds in q8_0/q4_0 blocks is written from those blocks as
// (out, in) of that dtype; every other tensor is the files' own, in its stored dtype. w and
// names have room for gpt2_param_tensors() + 1 entries; w's names point into names. KG_OK
// with *n set, or KG_ENOMEM.
int gpt2_export_tensors(const Gpt2 *m, StWrite *w, char (*names)[80], size_t *n);

// Bytes of weights one forward pass reads (the decode roofline's numerator).
size_t gpt2_weight_bytes(const Gpt2 *m);

// --- KV cache (kv.h): a pool of blocks per model, a block table per sequence ---

// A sequence on a pool of its own, with room for one context (the model's n_ctx positions, on
// the CPU memory only as positions are written) and no prefix cache: for a caller that runs
// its sequences without an engine (kogpt2 next/generate, benches, tests). KG_ENOMEM, or
// KG_EUNSUP for a KV dtype the backend lacks. Free with kv_free().
int kv_init(KvSeq *kv, const Gpt2 *m, char *err);
// Frees a sequence made by kv_init and its pool.
void kv_free(KvSeq *kv);

// --- forward ---
typedef enum {
    GPT2_LOGITS_NONE, // only extend the cache
    GPT2_LOGITS_LAST, // logits of the last new token
    GPT2_LOGITS_ALL   // logits of every new token (perplexity, scoring)
} Gpt2Logits;

// One sequence in a batch: n new tokens appended at positions kv->len ... (n = 0 adds no
// rows and no logits row).
typedef struct {
    KvSeq *kv;
    const int *tokens; // (n) host memory
    size_t n;
    Gpt2Logits logits;
} Gpt2Seq;

// What one position's prediction looked like inside (gpt2_capture.h): the logit lens and
// the attention view.
typedef struct Gpt2Capture Gpt2Capture;

// Scratch for one forward call of at most max_rows new tokens, max_logit_rows of which
// want logits. One state per thread that runs forward passes.
typedef struct {
    size_t max_rows, max_logit_rows;
    float *x;               // backend: (N, C) the residual stream
    float *ln;              // backend: (N, C) ln1's or ln2's output, a matmul's input
    float *qkv, *atty, *fc; // backend: (N, 3C), (N, C), (N, F)
    float *proj;            // backend: (N, C) attproj's or fcproj's output, added to x
    float *lnf;             // backend: (R, C) final-LN rows that want logits
    float *logits;          // backend: (R, V)
    float *logits_host;     // host: (R, V); aliases logits on the CPU
    int *tokens, *pos;      // host: (N)
    KgAttnSeq *attn;        // host: one per sequence, max_rows of them from the start
    size_t attn_cap;
    size_t n_logit_rows; // rows of logits_host the last forward filled
    // Set by a caller that only wants candidates: the logits stay in s->logits (backend
    // memory; logits_host is not filled) for the backend's logits_topk, so on a GPU only k
    // candidates cross to the host instead of V floats a row.
    int logits_stay;
    // Optional, for a pass that may give way: asked before each layer and before the LM head;
    // non-zero stops the pass with KG_ECANCEL, every cache as it was (the server's speculative
    // pass yields to a request that arrives meanwhile).
    int (*cancel)(void *ctx);
    void *cancel_ctx;
    // Optional: what the passes keep of some sequences (gpt2_capture.h). captures[i] goes with
    // seqs[i] of each gpt2_forward call (NULL: nothing); captures NULL: none at all.
    Gpt2Capture *const *captures;
} Gpt2State;

int gpt2_state_init(Gpt2State *s, const Gpt2 *m, size_t max_rows, size_t max_logit_rows, char *err);
void gpt2_state_free(Gpt2State *s, const Gpt2 *m);

// Runs the new tokens of every sequence through the model in one batch: each linear layer
// is one matrix multiply over all rows. Each sequence's keys and values go into its blocks
// (kv_seq_reserve makes room first, taking blocks from its pool; an engine that counts
// blocks reserves them before, so this finds them there), and on KG_OK each grows by its n
// and its filled blocks join the prefix cache (kv_seq_commit). s->logits_host then holds
// s->n_logit_rows rows of V logits, in the order of seqs.
// Checked first, before any sequence changes: token ids < V (KG_ERANGE), kv->len + n <= T
// (KG_ERANGE, "n_prompt_tokens ... exceeds n_ctx ..."), rows <= s->max_rows and logit
// rows <= s->max_logit_rows (KG_EINVAL). KG_ENOMEM when a pool has too few blocks left;
// KG_ECANCEL when s->cancel said so. On any error every sequence keeps its length (a block
// reserved or copied on write stays in its table, unused).
int gpt2_forward(const Gpt2 *m, Gpt2State *s, Gpt2Seq *seqs, size_t n_seq, char *err);

// Feeds a prompt of any length (up to T - kv->len) to one sequence in chunks of
// s->max_rows; with want_logits the last token's logits end in s->logits_host row 0
// (KG_EINVAL when n is 0 then). All or nothing: on error the sequence is as it was.
int gpt2_prefill(const Gpt2 *m, Gpt2State *s, KvSeq *kv, const int *tokens, size_t n,
                 int want_logits, char *err);

// --- training (llm.c's layout: one buffer of parameters, one of activations) ---
//
// A trainable model keeps every parameter in f32 in one backend buffer, in the order of
// gpt2_param_tensors(); gradients and AdamW's moments are buffers of the same layout, so
// an all-reduce or an optimizer step is one pass over a flat array.

typedef struct {
    char name[80]; // GPT2LMHeadModel name, e.g. "transformer.h.0.attn.c_attn.weight"
    size_t offset; // in floats, into the parameter buffer
    size_t count;  // floats
    int ndim;
    size_t shape[2];
    int decay; // AdamW weight decay applies: matrices yes; biases and LN no
} Gpt2ParamTensor;

// The parameter tensors of a config in buffer order; returns how many (out may be NULL).
size_t gpt2_param_tensors(const Gpt2Config *c, Gpt2ParamTensor *out);
// Floats in the parameter buffer.
size_t gpt2_param_count(const Gpt2Config *c);
// Points w (and its L layers) into base, a buffer of gpt2_param_count floats in that
// order, as f32 (for parameters, or for gradients of the same layout). KG_ENOMEM or KG_OK.
int gpt2_bind_params(const Gpt2Config *c, float *base, Gpt2Weights *w, Gpt2LayerWeights *layers);

// A trainable model: config and an f32 parameter buffer in backend memory (m->params,
// owned), weights bound into it. With init_from a model directory, its weights (any
// dtype) are copied in and the config is that model's (c is ignored); otherwise c gives
// the shape and the weights are GPT-2's initialization (N(0, 0.02), residual projections
// scaled by 1/sqrt(2L), LN weights 1, biases 0) from seed. Free with gpt2_close().
int gpt2_train_model_new(Gpt2 *m, const Gpt2Config *c, const char *init_from, KgBackend *be,
                         uint64_t seed, char *err);

// Writes m as a servable model directory's model.safetensors (f32 or f16) and config.json.
// The caller writes to a temporary directory and renames it (never a torn checkpoint).
int gpt2_save(const Gpt2 *m, const char *dir, KgDtype dtype, char *err);

// Activations saved for backward, for batches of B sequences of T tokens.
typedef struct Gpt2Train Gpt2Train;

// recompute: keep only each layer's input and recompute the rest in backward (less memory,
// ~1/3 more compute). NULL on OOM with err filled. Free with gpt2_train_free().
Gpt2Train *gpt2_train_new(const Gpt2 *m, size_t B, size_t T, int recompute, char *err);
void gpt2_train_free(Gpt2Train *t);
// Bytes of activation memory t holds (to report what recompute saves).
size_t gpt2_train_bytes(const Gpt2Train *t);
// The gradient buffer (backend memory, gpt2_param_count floats, same layout as m->params).
float *gpt2_train_grads(Gpt2Train *t);
// Makes backward produce the gradients of loss * scale (1 by default): mixed precision in
// f16 multiplies the loss so that small gradients do not flush to zero, and the optimizer
// divides it out again (train/lossscale.h).
void gpt2_train_set_loss_scale(Gpt2Train *t, float scale);
// Sets every gradient to zero (once per optimizer step; backward accumulates with +=).
void gpt2_train_zero_grad(Gpt2Train *t);

// Forward over inputs (B, T) with targets (B, T) (host arrays, ids < V; a target of -1 is
// ignored): returns the mean cross-entropy loss in nats, and keeps what backward needs.
// KG_ERANGE for a bad token id (then *loss is untouched).
int gpt2_train_forward(const Gpt2 *m, Gpt2Train *t, const int *inputs, const int *targets,
                       float *loss, char *err);
// Backward of the last forward: adds d(mean loss)/d(params) into the gradient buffer.
// Over K micro-batches the gradients add up: scale by 1/K for the mean.
void gpt2_train_backward(const Gpt2 *m, Gpt2Train *t);

// Told during backward as parameter gradients become final (queued on the backend), in
// backward order: each layer's range of the gradient buffer right after its backward, then
// the rest (embeddings, final norm, an untied head) at the end; together the calls cover the
// buffer once. Data parallelism all-reduces a layer while the layers below it are still in
// backward. offset and count are in floats.
typedef void (*Gpt2GradReady)(void *ctx, size_t offset, size_t count);
// fn NULL: no calls (the default).
void gpt2_train_set_grad_hook(Gpt2Train *t, Gpt2GradReady fn, void *ctx);

#endif
