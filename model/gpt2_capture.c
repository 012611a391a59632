// gpt2_capture.c — the logit lens and the attention view of one position (gpt2_capture.h).
//
// Shapes: L layers, C channels, NH heads, hs = C / NH, V vocabulary, P = pos + 1 positions,
// S = L + 1 stages (the embedding, then after each block), P = att_pos + 1.
#include "gpt2_capture.h"

#include <math.h>
#include <stdlib.h>

#include "base/kg.h"
#include "logits.h"

int gpt2_capture_init(Gpt2Capture *c, const Gpt2 *m, int lens, size_t lens_pos, int attention,
                      size_t att_pos, char *err) {
    const Gpt2Config *cfg = &m->config;
    KgBackend *be = m->be;
    const size_t L = cfg->n_layer, C = cfg->n_embd, P = att_pos + 1;
    *c = (Gpt2Capture){
        .lens = lens, .lens_pos = lens_pos, .attention = attention, .att_pos = att_pos};
    if ((lens && lens_pos >= cfg->n_ctx) || (attention && att_pos >= cfg->n_ctx) ||
        (!lens && !attention))
        return kg_err(err, KG_EINVAL,
                      "capture: lens %d at %zu, attention %d at %zu, of %zu positions", lens,
                      lens_pos, attention, att_pos, cfg->n_ctx);
    int ok = 1;
    if (lens) ok = (c->resid = be->ops->alloc(be, (L + 1) * C * sizeof(float))) != NULL;
    if (ok && attention) {
        c->q = be->ops->alloc(be, L * C * sizeof(float));
        c->k = be->ops->alloc(be, L * P * C * sizeof(float)); // P <= n_ctx: no overflow
        ok = c->q && c->k;
    }
    if (!ok) {
        gpt2_capture_free(c, m);
        return kg_err(err, KG_ENOMEM, "capture: out of memory for %zu positions", P);
    }
    return KG_OK;
}

void gpt2_capture_free(Gpt2Capture *c, const Gpt2 *m) {
    KgBackend *be = m->be;
    float *bufs[] = {c->resid, c->q, c->k};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    *c = (Gpt2Capture){0};
}

// One sequence's share of a stage: rows [row0, row0 + n) of the pass are its positions
// [pos0, pos0 + n).
static void capture_seq(const Gpt2 *m, const Gpt2State *s, Gpt2Capture *c, const KgAttnSeq *a,
                        size_t stage) {
    KgBackend *be = m->be;
    const size_t C = m->config.n_embd, P = c->att_pos + 1;
    if (c->lens && c->lens_pos >= a->pos0 && c->lens_pos < a->pos0 + a->n) {
        size_t row = a->row0 + (c->lens_pos - a->pos0);
        be->ops->copy_rows(be, c->resid + stage * C, C, s->x + row * C, C, 1, C);
        c->resid_set = 1;
    }
    if (!c->attention || stage == 0 || a->pos0 > c->att_pos) return;
    const size_t l = stage - 1;
    if (a->pos0 != c->k_next) c->k_gap = 1;              // positions before pos0 ran elsewhere
    size_t n = a->pos0 + a->n <= P ? a->n : P - a->pos0; // its positions up to att_pos
    const float *qkv = s->qkv + a->row0 * 3 * C;         // (n, 3C): q | k | v
    be->ops->copy_rows(be, c->k + (l * P + a->pos0) * C, C, qkv + C, 3 * C, n, C);
    if (c->att_pos < a->pos0 + a->n) // the query row of att_pos
        be->ops->copy_rows(be, c->q + l * C, C, qkv + (c->att_pos - a->pos0) * 3 * C, 3 * C, 1, C);
    if (l + 1 == m->config.n_layer) c->k_next = a->pos0 + n; // every layer has these keys
}

void gpt2_capture_stage(const Gpt2 *m, const Gpt2State *s, size_t n_seq, size_t stage) {
    for (size_t i = 0; s->captures && i < n_seq; i++)
        if (s->captures[i] && s->attn[i].n) capture_seq(m, s, s->captures[i], &s->attn[i], stage);
}

// ---------------------------------------------------------------------------------------
// The lens

void gpt2_lens_free(Gpt2Lens *l) {
    free(l->top);
    free(l->tracked);
    free(l->rank);
    free(l->logprob);
    *l = (Gpt2Lens){0};
}

// Each stage's top k, the tracked ids' ranks and log-probabilities, and where the last
// stage's top-1 first became top-1, from the host rows of logits (S, ld) over their first V ids.
static void lens_from_logits(Gpt2Lens *l, const float *logits, size_t ld, size_t V) {
    const size_t S = l->n_stages, k = l->k, nt = l->n_tracked;
    for (size_t st = 0; st < S; st++) {
        const float *row = logits + st * ld;
        logits_topk(row, V, 1.0f, k, l->top + st * k);
        double lse = logits_logsumexp(row, V, 1.0f);
        for (size_t t = 0; t < nt; t++) {
            l->rank[st * nt + t] = logits_rank(row, V, l->tracked[t]);
            l->logprob[st * nt + t] = (float)(row[l->tracked[t]] - lse);
        }
    }
    l->final_id = l->top[(S - 1) * k].id;
    l->first_top_stage = S - 1;
    for (size_t st = 0; st < S; st++)
        if (l->top[st * k].id == l->final_id) {
            l->first_top_stage = st;
            break;
        }
    size_t before = l->first_top_stage;
    l->rank_before = before ? logits_rank(logits + (before - 1) * ld, V, l->final_id) : 0;
}

// ln_f and the LM head over the S captured rows on the backend; the logits (S, Vm) on the host
// in *host (malloc'd, or the backend buffer itself on the CPU: then *dev == *host).
static int lens_logits(const Gpt2 *m, const Gpt2Capture *c, float **dev, float **host, char *err) {
    const Gpt2Config *cfg = &m->config;
    KgBackend *be = m->be;
    const size_t S = cfg->n_layer + 1, C = cfg->n_embd, Vm = cfg->vocab_size;
    float *lnf = be->ops->alloc(be, S * C * sizeof(float));
    *dev = be->ops->alloc(be, S * Vm * sizeof(float));
    *host = be->ops->host_memory ? *dev : malloc(S * Vm * sizeof(float));
    int rc = lnf && *dev && *host ? KG_OK : kg_err(err, KG_ENOMEM, "lens: out of memory");
    if (!rc) {
        be->ops->layernorm_forward(be, lnf, NULL, NULL, c->resid, m->w.lnf_w, m->w.lnf_b, S, C,
                                   cfg->ln_eps);
        be->ops->matmul_forward(be, *dev, lnf, m->w.lm_head, NULL, S, C, Vm); // (S, Vm)
        if (*host != *dev) be->ops->to_host(be, *host, *dev, S * Vm * sizeof(float));
        rc = be->ops->status(be, err);
    }
    if (lnf) be->ops->free(be, lnf);
    return rc;
}

int gpt2_capture_lens(const Gpt2 *m, const Gpt2Capture *c, size_t V, size_t k, const int *tracked,
                      size_t n_tracked, Gpt2Lens *out, char *err) {
    const Gpt2Config *cfg = &m->config;
    KgBackend *be = m->be;
    const size_t S = cfg->n_layer + 1, Vm = cfg->vocab_size;
    *out = (Gpt2Lens){.n_stages = S, .k = k, .n_tracked = n_tracked};
    if (!c->lens || !c->resid_set)
        return kg_err(err, KG_EINVAL, "lens: position %zu was not captured", c->lens_pos);
    if (k == 0 || k > V || V == 0 || V > Vm)
        return kg_err(err, KG_EINVAL, "lens: %zu tokens of %zu (vocabulary %zu)", k, V, Vm);
    for (size_t t = 0; t < n_tracked; t++)
        if (tracked[t] < 0 || (size_t)tracked[t] >= V)
            return kg_err(err, KG_EINVAL, "lens: token id %d is outside 0..%zu", tracked[t], V - 1);
    out->top = malloc(S * k * sizeof *out->top);
    out->tracked = malloc((n_tracked ? n_tracked : 1) * sizeof *out->tracked);
    out->rank = malloc((n_tracked ? S * n_tracked : 1) * sizeof *out->rank);
    out->logprob = malloc((n_tracked ? S * n_tracked : 1) * sizeof *out->logprob);
    float *dev = NULL, *host = NULL;
    int rc = out->top && out->tracked && out->rank && out->logprob
                 ? lens_logits(m, c, &dev, &host, err)
                 : kg_err(err, KG_ENOMEM, "lens: out of memory");
    if (!rc) {
        for (size_t t = 0; t < n_tracked; t++)
            out->tracked[t] = tracked[t];
        lens_from_logits(out, host, Vm, V);
    }
    if (host != dev) free(host);
    if (dev) be->ops->free(be, dev);
    if (rc) gpt2_lens_free(out);
    return rc;
}

// ---------------------------------------------------------------------------------------
// The attention view

// out (P) = softmax over p of q (hs) . k[p] (hs, rows ld apart) * scale; sums in double.
static void attention_row(float *out, const float *q, const float *k, size_t ld, size_t P,
                          size_t hs, double scale) {
    double mx = -INFINITY, sum = 0;
    for (size_t p = 0; p < P; p++) {
        double dot = 0;
        for (size_t i = 0; i < hs; i++)
            dot += (double)q[i] * k[p * ld + i];
        out[p] = (float)(dot * scale);
        mx = out[p] > mx ? out[p] : mx;
    }
    for (size_t p = 0; p < P; p++) {
        out[p] = (float)exp(out[p] - mx);
        sum += out[p];
    }
    for (size_t p = 0; p < P; p++)
        out[p] = (float)(out[p] / sum);
}

int gpt2_capture_attention(const Gpt2 *m, const Gpt2Capture *c, float *att, char *err) {
    const Gpt2Config *cfg = &m->config;
    KgBackend *be = m->be;
    const size_t L = cfg->n_layer, C = cfg->n_embd, NH = cfg->n_head, hs = C / NH;
    const size_t P = c->att_pos + 1;
    if (!c->attention || c->k_gap || c->k_next != P)
        return kg_err(err, KG_EINVAL,
                      "attention: the attention view needs positions 0..%zu in this pass "
                      "(%zu of them ran)",
                      c->att_pos, c->k_gap ? 0 : c->k_next);
    const float *q = c->q, *k = c->k;
    float *q_host = NULL, *k_host = NULL;
    if (!be->ops->host_memory) { // a GPU: q and k come to the host once
        q_host = malloc(L * C * sizeof(float));
        k_host = malloc(L * P * C * sizeof(float));
        if (!q_host || !k_host) {
            free(q_host);
            free(k_host);
            return kg_err(err, KG_ENOMEM, "attention: out of memory");
        }
        be->ops->to_host(be, q_host, c->q, L * C * sizeof(float));
        be->ops->to_host(be, k_host, c->k, L * P * C * sizeof(float));
        q = q_host;
        k = k_host;
    }
    const double scale = 1.0 / sqrt((double)hs);
    for (size_t l = 0; l < L; l++)
        for (size_t h = 0; h < NH; h++)
            attention_row(att + (l * NH + h) * P, q + l * C + h * hs, k + l * P * C + h * hs, C, P,
                          hs, scale);
    free(q_host);
    free(k_host);
    return be->ops->status(be, err);
}
