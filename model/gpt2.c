// gpt2.c — the GPT-2 graph: the KV cache and the forward pass. Every op is the backend's
// (backend.h); this file only says which op runs on which buffer. Loading a model directory
// is gpt2_load.c's, the training graph gpt2_train.c's.
//
// Shapes: L layers, C = n_embd, NH heads, hs = C / NH, T = n_ctx, V = vocab, F = n_inner,
// N = new tokens in one forward call, R = rows that want logits.
#include "gpt2.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "gpt2_capture.h"

// ---------------------------------------------------------------------------------------
// A sequence on its own pool

int kv_init(KvSeq *kv, const Gpt2 *m, char *err) {
    KvPool *pool;
    *kv = (KvSeq){0};
    int rc = kv_pool_new(&pool, &m->config, m->be, kv_blocks_for(m->config.n_ctx) + 1, 0, err);
    if (rc) return rc;
    if ((rc = kv_seq_init(kv, pool, err))) kv_pool_free(pool);
    return rc;
}

void kv_free(KvSeq *kv) {
    KvPool *pool = kv->pool;
    kv_seq_release(kv);
    kv_pool_free(pool);
}

// ---------------------------------------------------------------------------------------
// Run state

int gpt2_state_init(Gpt2State *s, const Gpt2 *m, size_t max_rows, size_t max_logit_rows,
                    char *err) {
    const Gpt2Config *c = &m->config;
    KgBackend *be = m->be;
    const size_t C = c->n_embd, F = c->n_inner, V = c->vocab_size;
    *s = (Gpt2State){.max_rows = max_rows, .max_logit_rows = max_logit_rows};
    if (!max_rows || !max_logit_rows || max_logit_rows > max_rows)
        return kg_err(err, KG_EINVAL, "state: need 1 <= logit rows <= rows");
    s->x = be->ops->alloc(be, max_rows * C * sizeof(float));
    s->ln = be->ops->alloc(be, max_rows * C * sizeof(float));
    s->proj = be->ops->alloc(be, max_rows * C * sizeof(float));
    s->qkv = be->ops->alloc(be, max_rows * 3 * C * sizeof(float));
    s->atty = be->ops->alloc(be, max_rows * C * sizeof(float));
    s->fc = be->ops->alloc(be, max_rows * F * sizeof(float));
    s->lnf = be->ops->alloc(be, max_logit_rows * C * sizeof(float));
    s->logits = be->ops->alloc(be, max_logit_rows * V * sizeof(float));
    // the CPU computes in host memory: logits need no copy
    s->logits_host = be->ops->host_memory ? s->logits : malloc(max_logit_rows * V * 4);
    s->tokens = malloc(max_rows * sizeof *s->tokens);
    s->pos = malloc(max_rows * sizeof *s->pos);
    s->attn = malloc(max_rows * sizeof *s->attn);
    s->attn_cap = max_rows;
    if (!s->x || !s->ln || !s->proj || !s->qkv || !s->atty || !s->fc || !s->lnf || !s->logits ||
        !s->logits_host || !s->tokens || !s->pos || !s->attn) {
        gpt2_state_free(s, m);
        return kg_err(err, KG_ENOMEM, "state: out of memory for %zu rows", max_rows);
    }
    return KG_OK;
}

void gpt2_state_free(Gpt2State *s, const Gpt2 *m) {
    KgBackend *be = m->be;
    float *bufs[] = {s->x, s->ln, s->proj, s->qkv, s->atty, s->fc, s->lnf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    if (s->logits_host != s->logits) free(s->logits_host);
    if (s->logits) be->ops->free(be, s->logits);
    free(s->tokens);
    free(s->pos);
    free(s->attn);
    *s = (Gpt2State){0};
}

// ---------------------------------------------------------------------------------------
// Forward

static size_t logit_rows(const Gpt2Seq *q) {
    return q->logits == GPT2_LOGITS_ALL ? q->n : q->logits == GPT2_LOGITS_LAST && q->n ? 1 : 0;
}

// Everything that can be wrong with a batch, checked before any cache changes.
static int check_batch(const Gpt2 *m, const Gpt2State *s, const Gpt2Seq *seqs, size_t n_seq,
                       char *err) {
    const Gpt2Config *c = &m->config;
    size_t rows = 0, lrows = 0;
    for (size_t i = 0; i < n_seq; i++) {
        const Gpt2Seq *q = &seqs[i];
        if (q->kv->len + q->n > c->n_ctx)
            return kg_err(err, KG_ERANGE,
                          "n_prompt_tokens %zu exceeds n_ctx %zu (the model's context)",
                          q->kv->len + q->n, c->n_ctx);
        for (size_t k = 0; k < q->n; k++)
            if (q->tokens[k] < 0 || (size_t)q->tokens[k] >= c->vocab_size)
                return kg_err(err, KG_ERANGE, "token id %d is outside the vocabulary (0..%zu)",
                              q->tokens[k], c->vocab_size - 1);
        rows += q->n;
        lrows += logit_rows(q);
    }
    if (rows > s->max_rows || lrows > s->max_logit_rows)
        return kg_err(err, KG_EINVAL, "batch of %zu rows (%zu with logits) exceeds %zu (%zu)", rows,
                      lrows, s->max_rows, s->max_logit_rows);
    return KG_OK;
}

// Room in every sequence's blocks for its new tokens (no-ops when the engine reserved them).
static int reserve_blocks(Gpt2Seq *seqs, size_t n_seq, char *err) {
    for (size_t i = 0; i < n_seq; i++) {
        int rc = kv_seq_reserve(seqs[i].kv, seqs[i].n, err);
        if (rc) return rc;
    }
    return KG_OK;
}

int gpt2_forward(const Gpt2 *m, Gpt2State *s, Gpt2Seq *seqs, size_t n_seq, char *err) {
    const Gpt2Config *c = &m->config;
    const Gpt2Weights *w = &m->w;
    KgBackend *be = m->be;
    const KgBackendOps *op = be->ops;
    const size_t C = c->n_embd, NH = c->n_head, hs = C / NH, F = c->n_inner, V = c->vocab_size;
    int rc;
    if ((rc = check_batch(m, s, seqs, n_seq, err))) return rc;
    if ((rc = reserve_blocks(seqs, n_seq, err))) return rc;
    if (n_seq > s->attn_cap) {
        KgAttnSeq *a = realloc(s->attn, n_seq * sizeof *a);
        if (!a) return kg_err(err, KG_ENOMEM, "forward: out of memory");
        s->attn = a;
        s->attn_cap = n_seq;
    }
    // flatten the batch: row r is token tokens[r] at position pos[r] of its sequence
    size_t N = 0;
    for (size_t i = 0; i < n_seq; i++) {
        s->attn[i] = (KgAttnSeq){.row0 = N, .n = seqs[i].n, .pos0 = seqs[i].kv->len};
        for (size_t k = 0; k < seqs[i].n; k++, N++) {
            s->tokens[N] = seqs[i].tokens[k];
            s->pos[N] = (int)(seqs[i].kv->len + k);
        }
    }
    s->n_logit_rows = 0;
    if (N == 0) return KG_OK;

    op->encoder_forward(be, s->x, s->tokens, s->pos, w->wte, w->wpe, N, C); // x = wte + wpe
    gpt2_capture_stage(m, s, n_seq, 0); // the lens and attention view, where asked
    for (size_t l = 0; l < c->n_layer; l++) {
        if (s->cancel && s->cancel(s->cancel_ctx))
            return kg_err(err, KG_ECANCEL, "forward: cancelled");
        const Gpt2LayerWeights *lw = &w->layers[l];
        op->layernorm_forward(be, s->ln, NULL, NULL, s->x, lw->ln1_w, lw->ln1_b, N, C, c->ln_eps);
        op->matmul_forward(be, s->qkv, s->ln, lw->qkv_w, lw->qkv_b, N, C, 3 * C); // q, k, v
        for (size_t i = 0; i < n_seq; i++) // each sequence's blocks of layer l
            kv_seq_attn(seqs[i].kv, l, &s->attn[i]);
        op->kv_store(be, s->attn, n_seq, s->qkv + C, s->qkv + 2 * C, 3 * C, NH, hs); // k, v in
        op->attention_forward(be, s->atty, s->qkv, 3 * C, s->attn, n_seq, NH, hs);
        op->matmul_forward(be, s->proj, s->atty, lw->attproj_w, lw->attproj_b, N, C, C);
        op->residual_forward(be, s->x, s->x, s->proj, N * C); // x += attention
        op->layernorm_forward(be, s->ln, NULL, NULL, s->x, lw->ln2_w, lw->ln2_b, N, C, c->ln_eps);
        op->matmul_gelu_forward(be, s->fc, NULL, s->ln, lw->fc_w, lw->fc_b, N, C, F, c->gelu);
        op->matmul_forward(be, s->proj, s->fc, lw->fcproj_w, lw->fcproj_b, N, F, C);
        op->residual_forward(be, s->x, s->x, s->proj, N * C); // x += mlp
        gpt2_capture_stage(m, s, n_seq, l + 1);               // x and qkv of block l, where asked
    }
    if (s->cancel && s->cancel(s->cancel_ctx)) return kg_err(err, KG_ECANCEL, "forward: cancelled");
    // final layer norm and LM head, only on the rows that want logits
    size_t R = 0;
    for (size_t i = 0; i < n_seq; i++) {
        size_t r = logit_rows(&seqs[i]), first = s->attn[i].row0 + seqs[i].n - r;
        op->copy_rows(be, s->lnf + R * C, C, s->x + first * C, C, r, C);
        R += r;
    }
    if (R) {
        op->layernorm_forward(be, s->lnf, NULL, NULL, s->lnf, w->lnf_w, w->lnf_b, R, C, c->ln_eps);
        op->matmul_forward(be, s->logits, s->lnf, w->lm_head, NULL, R, C, V); // (R, V)
        if (!s->logits_stay) op->to_host(be, s->logits_host, s->logits, R * V * sizeof(float));
    }
    rc = op->status(be, err); // a GPU's asynchronous failure surfaces here
    for (size_t i = 0; !rc && i < n_seq; i++)
        kv_seq_commit(seqs[i].kv, seqs[i].tokens, seqs[i].n);
    s->n_logit_rows = rc ? 0 : R;
    return rc;
}

int gpt2_prefill(const Gpt2 *m, Gpt2State *s, KvSeq *kv, const int *tokens, size_t n,
                 int want_logits, char *err) {
    if (n == 0 && want_logits) return kg_err(err, KG_EINVAL, "prefill: no tokens to predict from");
    if (kv->len + n > m->config.n_ctx) // say the whole prompt's length, not a chunk's
        return kg_err(err, KG_ERANGE, "n_prompt_tokens %zu exceeds n_ctx %zu (the model's context)",
                      kv->len + n, m->config.n_ctx);
    size_t done = 0, len0 = kv->len;
    do {
        size_t chunk = n - done < s->max_rows ? n - done : s->max_rows;
        Gpt2Seq q = {kv, tokens + done, chunk,
                     want_logits && done + chunk == n ? GPT2_LOGITS_LAST : GPT2_LOGITS_NONE};
        int rc = gpt2_forward(m, s, &q, 1, err);
        if (rc) {
            kv_seq_truncate(kv, len0); // all or nothing: earlier chunks are forgotten
            return rc;
        }
        done += chunk;
    } while (done < n);
    return KG_OK;
}
