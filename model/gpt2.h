// gpt2.h — a GPT-2 model on a backend: open a Hugging Face model directory, run the
// forward pass over a batch of sequences with KV caches, get logits.
//
// Shapes: L layers, C = n_embd, NH heads, hs = C / NH, T = n_ctx, V = vocab_size,
// F = n_inner (4C). N = rows (new tokens) in one forward call.
#ifndef GPT2_H
#define GPT2_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "safetensors.h"

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
    SafeTensors st;   // the mapped file
    void *host_owned; // f32 vectors widened from f16/bf16, matrices converted by --dtype
    Gpt2LayerWeights *layers;
} Gpt2;

typedef enum { GPT2_DTYPE_AUTO = -1 } Gpt2DtypeAuto;

// Opens dir/config.json and dir/model.safetensors. Tensors are found by their
// GPT2LMHeadModel names ("transformer.h.0.attn.c_attn.weight"; the "transformer." prefix
// may be absent; "lm_head.weight" is used when present and not tied) and each one's dtype
// and shape are checked against the config. dtype: GPT2_DTYPE_AUTO keeps the stored dtype
// (zero-copy), or KG_F32/KG_F16/KG_BF16 converts the matrices once at load.
// On error: KG_EIO / KG_EFORMAT / KG_ENOMEM, err names the file and tensor, m holds nothing.
// Close with gpt2_close(); the backend must outlive the model.
int gpt2_open(Gpt2 *m, const char *dir, KgBackend *be, int dtype, char *err);
void gpt2_close(Gpt2 *m);

// Bytes of weights one forward pass reads (the decode roofline's numerator).
size_t gpt2_weight_bytes(const Gpt2 *m);

// --- KV cache: one sequence's keys and values, in backend memory ---
typedef struct {
    float *data; // (L, 2, cap, C): layer l's keys at 2l, values at 2l + 1
    size_t len;  // positions cached, 0 .. len-1
    size_t cap;  // positions allocated
} KvCache;

// An empty cache with room for cap positions (cap may be 0; it grows on demand).
// KG_ENOMEM on failure. Free with kv_free().
int kv_init(KvCache *kv, const Gpt2 *m, size_t cap, char *err);
void kv_free(KvCache *kv, const Gpt2 *m);
// Makes room for cap positions, keeping what is cached. KG_ENOMEM leaves kv unchanged.
int kv_reserve(KvCache *kv, const Gpt2 *m, size_t cap, char *err);
// Forgets positions len.. (len <= kv->len).
void kv_truncate(KvCache *kv, size_t len);
// dst = the first len positions of src (len <= src->len); dst is (re)allocated as needed.
int kv_copy(KvCache *dst, const KvCache *src, size_t len, const Gpt2 *m, char *err);
// Backend bytes a cache of cap positions uses.
size_t kv_bytes(const Gpt2Config *c, size_t cap);

// --- forward ---
typedef enum {
    GPT2_LOGITS_NONE, // only extend the cache
    GPT2_LOGITS_LAST, // logits of the last new token
    GPT2_LOGITS_ALL   // logits of every new token (perplexity, scoring)
} Gpt2Logits;

// One sequence in a batch: n new tokens appended at positions kv->len ... (n = 0 adds no
// rows and no logits row).
typedef struct {
    KvCache *kv;
    const int *tokens; // (n) host memory
    size_t n;
    Gpt2Logits logits;
} Gpt2Seq;

// Scratch for one forward call of at most max_rows new tokens, max_logit_rows of which
// want logits. One state per thread that runs forward passes.
typedef struct {
    size_t max_rows, max_logit_rows;
    float *x, *ln, *qkv, *atty, *fc; // backend: (N, C), (N, C), (N, 3C), (N, C), (N, F)
    float *lnf;                      // backend: (R, C) final-LN rows that want logits
    float *logits;                   // backend: (R, V)
    float *logits_host;              // host: (R, V); aliases logits on the CPU
    int *tokens, *pos;               // host: (N)
    KgAttnSeq *attn;                 // host: one per sequence, sized on demand
    size_t attn_cap;
    size_t n_logit_rows; // rows of logits_host the last forward filled
} Gpt2State;

int gpt2_state_init(Gpt2State *s, const Gpt2 *m, size_t max_rows, size_t max_logit_rows, char *err);
void gpt2_state_free(Gpt2State *s, const Gpt2 *m);

// Runs the new tokens of every sequence through the model in one batch: each linear layer
// is one matrix multiply over all rows. Each cache grows by its sequence's n. On KG_OK
// s->logits_host holds s->n_logit_rows rows of V logits, in the order of seqs.
// Checked first, before any cache changes: token ids < V (KG_ERANGE), kv->len + n <= T
// (KG_ERANGE, "n_prompt_tokens ... exceeds n_ctx ..."), rows <= s->max_rows and logit
// rows <= s->max_logit_rows (KG_EINVAL). KG_ENOMEM if a cache cannot grow.
int gpt2_forward(const Gpt2 *m, Gpt2State *s, Gpt2Seq *seqs, size_t n_seq, char *err);

// Feeds a prompt of any length (up to T - kv->len) to one sequence in chunks of
// s->max_rows; with want_logits the last token's logits end in s->logits_host row 0
// (KG_EINVAL when n is 0 then). All or nothing: on error the cache is as it was.
int gpt2_prefill(const Gpt2 *m, Gpt2State *s, KvCache *kv, const int *tokens, size_t n,
                 int want_logits, char *err);

#endif
