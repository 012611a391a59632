// gpt2_train.c — the training graph: a trainable model (one f32 parameter buffer), the
// forward pass that keeps activations, and the backward pass, in llm.c's shape: each layer
// is ~10 op calls forward, and the same list read from the bottom up backward.
//
// Shapes: B sequences of T tokens, N = B*T rows, C = n_embd, NH heads, hs = C / NH,
// F = n_inner, V = vocab, L layers.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/kg.h"
#include "gpt2.h"

// ---------------------------------------------------------------------------------------
// A trainable model

static uint64_t rng_next(uint64_t *s) { // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_normal(uint64_t *s) { // Box-Muller
    double u1 = ((rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// GPT-2's initialization: N(0, 0.02) matrices (residual projections / sqrt(2L)), LN 1, 0.
static void init_random(const Gpt2Config *c, const Gpt2ParamTensor *t, size_t n, float *host,
                        uint64_t seed) {
    uint64_t rng = seed;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    for (size_t i = 0; i < n; i++) {
        float *p = host + t[i].offset;
        int is_ln_w = strstr(t[i].name, "ln_") && strstr(t[i].name, ".weight");
        int is_proj = strstr(t[i].name, "c_proj.weight") != NULL;
        for (size_t k = 0; k < t[i].count; k++)
            p[k] = t[i].ndim == 1 ? (is_ln_w ? 1.0f : 0.0f)
                                  : rng_normal(&rng) * (is_proj ? proj_std : 0.02f);
    }
}

// Copies an opened model's weights (any dtype) into host, in parameter order.
static int init_from_model(const Gpt2 *src, const Gpt2ParamTensor *t, size_t n, float *host,
                           char *err) {
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        const StTensor *st = wsrc_find(&src->src, name);
        if (!st && !strncmp(name, "transformer.", 12)) st = wsrc_find(&src->src, name + 12);
        if (!st) return kg_err(err, KG_EFORMAT, "tensor %s: missing", name);
        kg_dtype_convert(host + t[i].offset, KG_F32, st->data, st->dtype, t[i].count);
    }
    return KG_OK;
}

int gpt2_train_model_new(Gpt2 *m, const Gpt2Config *c, const char *init_from, KgBackend *be,
                         uint64_t seed, char *err) {
    *m = (Gpt2){.be = be, .dtype = KG_F32};
    Gpt2 src = {0};
    int rc;
    if (init_from) { // gpt2_open has checked every tensor's shape against its config
        if ((rc = gpt2_open(&src, init_from, be, KG_DTYPE_AUTO, err))) return rc;
        m->config = src.config;
    } else {
        m->config = *c;
    }
    size_t n = gpt2_param_tensors(&m->config, NULL), count = gpt2_param_count(&m->config);
    Gpt2ParamTensor *t = calloc(n, sizeof *t);
    float *host = malloc(count * sizeof *host);
    m->layers = calloc(m->config.n_layer, sizeof *m->layers);
    m->params = be->ops->alloc(be, count * sizeof(float));
    if (!t || !host || !m->layers || !m->params) {
        rc = kg_err(err, KG_ENOMEM, "model: out of memory for %zu parameters", count);
        goto end;
    }
    gpt2_param_tensors(&m->config, t);
    if (init_from)
        rc = init_from_model(&src, t, n, host, err);
    else {
        init_random(&m->config, t, n, host, seed);
        rc = KG_OK;
    }
    if (rc) goto end;
    be->ops->to_device(be, m->params, host, count * sizeof(float));
    if (gpt2_bind_params(&m->config, m->params, &m->w, m->layers))
        rc = kg_err(err, KG_ENOMEM, "model: out of memory");
end:
    free(t);
    free(host);
    gpt2_close(&src);
    if (rc) gpt2_close(m);
    return rc;
}

int gpt2_save(const Gpt2 *m, const char *dir, KgDtype dtype, char *err) {
    const Gpt2Config *c = &m->config;
    size_t n = gpt2_param_tensors(c, NULL), count = gpt2_param_count(c);
    Gpt2ParamTensor *t = calloc(n, sizeof *t);
    StWrite *w = calloc(n, sizeof *w);
    float *host = malloc(count * sizeof *host);
    uint16_t *half = dtype == KG_F32 ? NULL : malloc(count * sizeof *half);
    char path[4096];
    int rc = KG_ENOMEM;
    if (!t || !w || !host || (dtype != KG_F32 && !half) || !m->params) {
        rc = m->params ? kg_err(err, KG_ENOMEM, "save: out of memory")
                       : kg_err(err, KG_EINVAL, "save: not a trainable model");
        goto end;
    }
    gpt2_param_tensors(c, t);
    m->be->ops->to_host(m->be, host, m->params, count * sizeof(float));
    if (half) kg_dtype_convert(half, dtype, host, KG_F32, count);
    for (size_t i = 0; i < n; i++) {
        w[i] = (StWrite){t[i].name,
                         dtype,
                         t[i].ndim,
                         {t[i].shape[0], t[i].shape[1]},
                         half ? (const void *)(half + t[i].offset)
                              : (const void *)(host + t[i].offset)};
    }
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = gpt2_config_save(c, path, err))) goto end;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = safetensors_save(path, w, n, err);
end:
    free(t);
    free(w);
    free(host);
    free(half);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Activations

// What one layer's forward saves for its backward.
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; // (N, C), (N), (N)
    float *qkv;                       // (N, 3C)
    float *att;                       // (B, NH, T, T)
    float *atty;                      // (N, C)
    float *resid2;                    // (N, C) the residual after attention
    float *ln2, *ln2_mean, *ln2_rstd; // (N, C), (N), (N)
    float *fch, *fch_gelu;            // (N, F), (N, F)
} LayerActs;

struct Gpt2Train {
    size_t B, T, N;
    int recompute;
    float loss_scale; // the backward's gradients are of loss * loss_scale
    size_t n_params;
    float *grads;  // (gpt2_param_count) same layout as the parameters
    Gpt2Weights g; // the gradients, bound like the weights
    Gpt2LayerWeights *g_layers;
    // layer l's gradients are [layers_lo + l * per_layer, + per_layer) of grads (per_layer 0:
    // not laid out that way, so grad_ready hears of everything at the end)
    size_t layers_lo, per_layer;
    Gpt2GradReady grad_ready; // gpt2_train_set_grad_hook
    void *grad_ready_ctx;
    float *acts; // everything below, one backend buffer
    size_t acts_bytes;
    float **resid;    // (L + 1) x (N, C): the input of each layer, and the last output
    LayerActs *layer; // (L); with recompute all point at one shared set
    float *lnf, *lnf_mean, *lnf_rstd; // (N, C), (N), (N)
    float *logits;                    // (N, V); after the forward, the loss gradient
    float *losses;                    // (N)
    float *tmp;                       // (N, C) a projection before it joins the residual
    // backward scratch
    float *dres, *dln, *datty; // (N, C)
    float *dqkv;               // (N, 3C)
    float *dfch, *dfch_gelu;   // (N, F)
    // host
    int *inputs, *targets, *pos; // (N)
    float *losses_host;          // (N)
    KgAttnSeq *seqs;             // (B)
    KgBackend *be;
};

// Lays the activations out in one buffer; with base NULL only counts the floats.
static size_t layout(Gpt2Train *t, const Gpt2Config *c, float *base) {
    const size_t N = t->N, C = c->n_embd, F = c->n_inner, L = c->n_layer;
    const size_t att = t->B * c->n_head * t->T * t->T;
    size_t off = 0;
#define TAKE(ptr, n)                                                                               \
    do {                                                                                           \
        if (base) ptr = base + off;                                                                \
        off += (n);                                                                                \
    } while (0)
    for (size_t l = 0; l <= L; l++)
        TAKE(t->resid[l], N * C);
    for (size_t l = 0; l < L; l++) {
        LayerActs *a = &t->layer[l];
        if (t->recompute && l > 0) { // one set of internals, recomputed layer by layer
            if (base) *a = t->layer[0];
            continue;
        }
        TAKE(a->ln1, N * C);
        TAKE(a->ln1_mean, N);
        TAKE(a->ln1_rstd, N);
        TAKE(a->qkv, N * 3 * C);
        TAKE(a->att, att);
        TAKE(a->atty, N * C);
        TAKE(a->resid2, N * C);
        TAKE(a->ln2, N * C);
        TAKE(a->ln2_mean, N);
        TAKE(a->ln2_rstd, N);
        TAKE(a->fch, N * F);
        TAKE(a->fch_gelu, N * F);
    }
    TAKE(t->lnf, N * C);
    TAKE(t->lnf_mean, N);
    TAKE(t->lnf_rstd, N);
    TAKE(t->logits, N * c->vocab_size);
    TAKE(t->losses, N);
    TAKE(t->tmp, N * C);
    TAKE(t->dres, N * C);
    TAKE(t->dln, N * C);
    TAKE(t->datty, N * C);
    TAKE(t->dqkv, N * 3 * C);
    TAKE(t->dfch, N * F);
    TAKE(t->dfch_gelu, N * F);
#undef TAKE
    return off;
}

// Where the layers' tensors lie in the parameter buffer: each layer contiguous, one after
// the other from *lo, *per floats each (*per = 0 when the order is otherwise).
static int layer_ranges(const Gpt2Config *c, size_t *lo, size_t *per) {
    size_t n = gpt2_param_tensors(c, NULL);
    Gpt2ParamTensor *pt = malloc(n * sizeof *pt);
    if (!pt) return KG_ENOMEM;
    gpt2_param_tensors(c, pt);
    size_t first = SIZE_MAX, end = 0, in_layers = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        if (sscanf(pt[i].name, "transformer.h.%zu.", &l) != 1) continue;
        first = pt[i].offset < first ? pt[i].offset : first;
        end = pt[i].offset + pt[i].count > end ? pt[i].offset + pt[i].count : end;
        in_layers += pt[i].count;
    }
    free(pt);
    // contiguous and evenly split (every layer has the same shape)
    int ok = c->n_layer && in_layers == end - first && in_layers % c->n_layer == 0;
    *lo = ok ? first : 0;
    *per = ok ? in_layers / c->n_layer : 0;
    return KG_OK;
}

Gpt2Train *gpt2_train_new(const Gpt2 *m, size_t B, size_t T, int recompute, char *err) {
    const Gpt2Config *c = &m->config;
    KgBackend *be = m->be;
    if (!m->params || !B || !T || T > c->n_ctx) {
        kg_err(err, KG_EINVAL, "train: need a trainable model and 1 <= T <= n_ctx (%zu)", c->n_ctx);
        return NULL;
    }
    Gpt2Train *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    *t = (Gpt2Train){
        .B = B, .T = T, .N = B * T, .recompute = recompute, .be = be, .loss_scale = 1.0f};
    size_t count = t->n_params = gpt2_param_count(c);
    t->resid = calloc(c->n_layer + 1, sizeof *t->resid);
    t->layer = calloc(c->n_layer, sizeof *t->layer);
    t->g_layers = calloc(c->n_layer, sizeof *t->g_layers);
    t->inputs = malloc(t->N * sizeof *t->inputs);
    t->targets = malloc(t->N * sizeof *t->targets);
    t->pos = malloc(t->N * sizeof *t->pos);
    t->losses_host = malloc(t->N * sizeof *t->losses_host);
    t->seqs = calloc(B, sizeof *t->seqs);
    if (!t->resid || !t->layer || !t->g_layers || !t->inputs || !t->targets || !t->pos ||
        !t->losses_host || !t->seqs)
        goto oom;
    t->acts_bytes = layout(t, c, NULL) * sizeof(float);
    t->acts = be->ops->alloc(be, t->acts_bytes);
    t->grads = be->ops->alloc(be, count * sizeof(float));
    if (!t->acts || !t->grads || gpt2_bind_params(c, t->grads, &t->g, t->g_layers)) goto oom;
    layout(t, c, t->acts);
    for (size_t i = 0; i < t->N; i++)
        t->pos[i] = (int)(i % T);
    if (layer_ranges(c, &t->layers_lo, &t->per_layer)) goto oom;
    return t;
oom:
    gpt2_train_free(t);
    kg_err(err, KG_ENOMEM, "train: out of memory for B=%zu T=%zu", B, T);
    return NULL;
}

void gpt2_train_free(Gpt2Train *t) {
    if (!t) return;
    if (t->acts) t->be->ops->free(t->be, t->acts);
    if (t->grads) t->be->ops->free(t->be, t->grads);
    free(t->resid);
    free(t->layer);
    free(t->g_layers);
    free(t->inputs);
    free(t->targets);
    free(t->pos);
    free(t->losses_host);
    free(t->seqs);
    free(t);
}

size_t gpt2_train_bytes(const Gpt2Train *t) { return t->acts_bytes; }
float *gpt2_train_grads(Gpt2Train *t) { return t->grads; }

void gpt2_train_set_loss_scale(Gpt2Train *t, float scale) { t->loss_scale = scale; }

void gpt2_train_zero_grad(Gpt2Train *t) {
    t->be->ops->zero(t->be, t->grads, t->n_params * sizeof(float));
}

// ---------------------------------------------------------------------------------------
// Forward and backward

// Every sequence's keys and values are in one block: its own qkv rows (block 0).
static const uint32_t TRAIN_ONE_BLOCK[1] = {0};

// Points each sequence's attention at its rows of qkv / dqkv and its part of att: one block of
// all T positions (2^31 > any n_ctx), a position's keys 3C floats after the last's.
static void attn_seqs(Gpt2Train *t, const Gpt2Config *c, LayerActs *a) {
    const size_t C = c->n_embd, T = t->T, hs = C / c->n_head;
    for (size_t b = 0; b < t->B; b++) {
        float *qkv = a->qkv + b * T * 3 * C;
        float *dqkv = t->dqkv + b * T * 3 * C;
        t->seqs[b] = (KgAttnSeq){.row0 = b * T,
                                 .n = T,
                                 .pos0 = 0,
                                 .k = qkv + C,
                                 .v = qkv + 2 * C,
                                 .blocks = TRAIN_ONE_BLOCK,
                                 .block_shift = 31,
                                 .head_stride = hs * sizeof(float),
                                 .row_stride = 3 * C * sizeof(float),
                                 .kv_dtype = KG_F32,
                                 .att = a->att + b * c->n_head * T * T,
                                 .dk = dqkv + C,
                                 .dv = dqkv + 2 * C};
    }
}

// One block: resid[l] -> resid[l + 1], saving what the backward needs in a.
static void layer_forward(const Gpt2 *m, Gpt2Train *t, size_t l) {
    const Gpt2Config *c = &m->config;
    const KgBackendOps *op = m->be->ops;
    KgBackend *be = m->be;
    const size_t N = t->N, C = c->n_embd, F = c->n_inner;
    const Gpt2LayerWeights *lw = &m->w.layers[l];
    LayerActs *a = &t->layer[l];
    const float *x = t->resid[l];
    op->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, lw->ln1_w, lw->ln1_b, N, C,
                          c->ln_eps);
    op->matmul_forward(be, a->qkv, a->ln1, lw->qkv_w, lw->qkv_b, N, C, 3 * C);
    attn_seqs(t, c, a);
    op->attention_forward(be, a->atty, a->qkv, 3 * C, t->seqs, t->B, c->n_head, C / c->n_head);
    op->matmul_forward(be, t->tmp, a->atty, lw->attproj_w, lw->attproj_b, N, C, C);
    op->residual_forward(be, a->resid2, x, t->tmp, N * C);
    op->layernorm_forward(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->resid2, lw->ln2_w, lw->ln2_b, N,
                          C, c->ln_eps);
    op->matmul_gelu_forward(be, a->fch_gelu, a->fch, a->ln2, lw->fc_w, lw->fc_b, N, C, F, c->gelu);
    op->matmul_forward(be, t->tmp, a->fch_gelu, lw->fcproj_w, lw->fcproj_b, N, F, C);
    op->residual_forward(be, t->resid[l + 1], a->resid2, t->tmp, N * C);
}

int gpt2_train_forward(const Gpt2 *m, Gpt2Train *t, const int *inputs, const int *targets,
                       float *loss, char *err) {
    const Gpt2Config *c = &m->config;
    const KgBackendOps *op = m->be->ops;
    KgBackend *be = m->be;
    const size_t N = t->N, C = c->n_embd, V = c->vocab_size, L = c->n_layer;
    size_t valid = 0;
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || (size_t)inputs[i] >= V || targets[i] < -1 || targets[i] >= (int)V)
            return kg_err(err, KG_ERANGE, "train: token id out of range at %zu", i);
        valid += targets[i] >= 0;
    }
    memcpy(t->inputs, inputs, N * sizeof *inputs);
    memcpy(t->targets, targets, N * sizeof *targets);
    op->encoder_forward(be, t->resid[0], t->inputs, t->pos, m->w.wte, m->w.wpe, N, C);
    for (size_t l = 0; l < L; l++)
        layer_forward(m, t, l);
    op->layernorm_forward(be, t->lnf, t->lnf_mean, t->lnf_rstd, t->resid[L], m->w.lnf_w, m->w.lnf_b,
                          N, C, c->ln_eps);
    op->matmul_forward(be, t->logits, t->lnf, m->w.lm_head, NULL, N, C, V); // (N, V)
    // the loss, and its gradient in place of the logits (d mean loss: 1 / valid targets)
    op->crossentropy_forward_backward(be, t->losses, t->logits, t->targets, N, V,
                                      valid ? t->loss_scale / (float)valid : 0.0f);
    op->to_host(be, t->losses_host, t->losses, N * sizeof(float));
    int rc = op->status(be, err); // a GPU's asynchronous failure surfaces here
    if (rc) return rc;
    double sum = 0;
    for (size_t i = 0; i < N; i++)
        sum += t->losses_host[i];
    *loss = valid ? (float)(sum / (double)valid) : 0.0f;
    return KG_OK;
}

// One block's backward: t->dres holds d resid[l + 1] on entry and d resid[l] on return.
static void layer_backward(const Gpt2 *m, Gpt2Train *t, size_t l) {
    const Gpt2Config *c = &m->config;
    const KgBackendOps *op = m->be->ops;
    KgBackend *be = m->be;
    const size_t N = t->N, C = c->n_embd, F = c->n_inner, NH = c->n_head;
    const Gpt2LayerWeights *lw = &m->w.layers[l];
    Gpt2LayerWeights *gw = &t->g_layers[l];
    LayerActs *a = &t->layer[l];
    if (t->recompute) layer_forward(m, t, l); // its internals were overwritten since
    // MLP: resid[l+1] = resid2 + fcproj(gelu(fc(ln2(resid2))))
    op->zero(be, t->dfch_gelu, N * F * sizeof(float));
    op->matmul_backward(be, t->dfch_gelu, (float *)gw->fcproj_w.data, (float *)gw->fcproj_b,
                        t->dres, a->fch_gelu, lw->fcproj_w, N, F, C);
    op->zero(be, t->dfch, N * F * sizeof(float));
    op->gelu_backward(be, t->dfch, a->fch, t->dfch_gelu, N * F, c->gelu);
    op->zero(be, t->dln, N * C * sizeof(float));
    op->matmul_backward(be, t->dln, (float *)gw->fc_w.data, (float *)gw->fc_b, t->dfch, a->ln2,
                        lw->fc_w, N, C, F);
    op->layernorm_backward(be, t->dres, (float *)gw->ln2_w, (float *)gw->ln2_b, t->dln, a->resid2,
                           lw->ln2_w, a->ln2_mean, a->ln2_rstd, N, C); // d resid2
    // attention: resid2 = resid[l] + attproj(attention(qkv(ln1(resid[l]))))
    op->zero(be, t->datty, N * C * sizeof(float));
    op->matmul_backward(be, t->datty, (float *)gw->attproj_w.data, (float *)gw->attproj_b, t->dres,
                        a->atty, lw->attproj_w, N, C, C);
    op->zero(be, t->dqkv, N * 3 * C * sizeof(float));
    attn_seqs(t, c, a);
    op->attention_backward(be, t->dqkv, t->datty, a->qkv, 3 * C, t->seqs, t->B, NH, C / NH);
    op->zero(be, t->dln, N * C * sizeof(float));
    op->matmul_backward(be, t->dln, (float *)gw->qkv_w.data, (float *)gw->qkv_b, t->dqkv, a->ln1,
                        lw->qkv_w, N, C, 3 * C);
    op->layernorm_backward(be, t->dres, (float *)gw->ln1_w, (float *)gw->ln1_b, t->dln, t->resid[l],
                           lw->ln1_w, a->ln1_mean, a->ln1_rstd, N, C); // d resid[l]
}

void gpt2_train_backward(const Gpt2 *m, Gpt2Train *t) {
    const Gpt2Config *c = &m->config;
    const KgBackendOps *op = m->be->ops;
    KgBackend *be = m->be;
    const size_t N = t->N, C = c->n_embd, V = c->vocab_size, L = c->n_layer;
    // LM head and final layer norm; t->logits already holds d loss / d logits
    op->zero(be, t->dln, N * C * sizeof(float));
    op->matmul_backward(be, t->dln, (float *)t->g.lm_head.data, NULL, t->logits, t->lnf,
                        m->w.lm_head, N, C, V);
    op->zero(be, t->dres, N * C * sizeof(float));
    op->layernorm_backward(be, t->dres, (float *)t->g.lnf_w, (float *)t->g.lnf_b, t->dln,
                           t->resid[L], m->w.lnf_w, t->lnf_mean, t->lnf_rstd, N, C);
    for (size_t l = L; l-- > 0;) {
        layer_backward(m, t, l);
        if (t->grad_ready && t->per_layer)
            t->grad_ready(t->grad_ready_ctx, t->layers_lo + l * t->per_layer, t->per_layer);
    }
    op->encoder_backward(be, (float *)t->g.wte.data, (float *)t->g.wpe.data, t->dres, t->inputs,
                         t->pos, N, C);
    if (t->grad_ready) { // the rest: embeddings, final norm, an untied head
        size_t lo = t->layers_lo, hi = t->layers_lo + L * t->per_layer;
        if (!t->per_layer) lo = hi = t->n_params; // everything, in one piece
        if (lo) t->grad_ready(t->grad_ready_ctx, 0, lo);
        if (hi < t->n_params) t->grad_ready(t->grad_ready_ctx, hi, t->n_params - hi);
    }
}

void gpt2_train_set_grad_hook(Gpt2Train *t, Gpt2GradReady fn, void *ctx) {
    t->grad_ready = fn;
    t->grad_ready_ctx = ctx;
}
