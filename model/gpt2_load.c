// gpt2_load.c — a Hugging Face model directory onto a backend: the tensor table of a config
// (weight_specs), each tensor found by its GPT2LMHeadModel name and checked against the config
// (dtype, shape, finite values), then bound in place (the mapping) or converted, transposed or
// quantized once into memory the model owns; the trainer's parameter layout (one f32 buffer in
// the same order) and the tensors gpt2_convert writes. The forward pass and the KV cache are
// gpt2.c's.
//
// Shapes: L layers, C = n_embd, T = n_ctx, V = vocab, F = n_inner.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "gpt2.h"

// One tensor the model needs: where its pointer goes and the shape the config implies.
typedef struct {
    char name[64];     // without the "transformer." prefix
    size_t rows, cols; // cols = 0 for a vector of rows elements
    KgMat *mat;        // a matrix keeps its dtype (or takes the requested one)
    const float **vec; // a vector is always f32
    int transposed;
    int embedding; // wte, wpe: read by row lookups, never quantized
} WeightSpec;

// The tensor table, in the order of the training parameter buffer (wte, wpe, each layer,
// ln_f, then lm_head when untied), with where each pointer goes. Returns the count; at most
// cap are written.
static size_t weight_specs(const Gpt2Config *c, Gpt2Weights *w, Gpt2LayerWeights *layers,
                           WeightSpec *spec, size_t cap) {
    const size_t C = c->n_embd, F = c->n_inner;
    size_t n = 0;
#define SPEC(r, cl, M, Vp, tr, ...)                                                                \
    do {                                                                                           \
        if (n < cap) {                                                                             \
            spec[n] = (WeightSpec){.rows = (r),                                                    \
                                   .cols = (cl),                                                   \
                                   .mat = (M),                                                     \
                                   .vec = (Vp),                                                    \
                                   .transposed = (tr),                                             \
                                   .embedding = (M) == &w->wte || (M) == &w->wpe};                 \
            snprintf(spec[n].name, sizeof spec[n].name, __VA_ARGS__);                              \
        }                                                                                          \
        n++;                                                                                       \
    } while (0)
    SPEC(c->vocab_size, C, &w->wte, NULL, 1, "wte.weight");
    SPEC(c->n_ctx, C, &w->wpe, NULL, 1, "wpe.weight");
    for (size_t l = 0; l < c->n_layer; l++) {
        Gpt2LayerWeights *lw = &layers[l];
        SPEC(C, 0, NULL, &lw->ln1_w, 0, "h.%zu.ln_1.weight", l);
        SPEC(C, 0, NULL, &lw->ln1_b, 0, "h.%zu.ln_1.bias", l);
        SPEC(C, 3 * C, &lw->qkv_w, NULL, 0, "h.%zu.attn.c_attn.weight", l);
        SPEC(3 * C, 0, NULL, &lw->qkv_b, 0, "h.%zu.attn.c_attn.bias", l);
        SPEC(C, C, &lw->attproj_w, NULL, 0, "h.%zu.attn.c_proj.weight", l);
        SPEC(C, 0, NULL, &lw->attproj_b, 0, "h.%zu.attn.c_proj.bias", l);
        SPEC(C, 0, NULL, &lw->ln2_w, 0, "h.%zu.ln_2.weight", l);
        SPEC(C, 0, NULL, &lw->ln2_b, 0, "h.%zu.ln_2.bias", l);
        SPEC(C, F, &lw->fc_w, NULL, 0, "h.%zu.mlp.c_fc.weight", l);
        SPEC(F, 0, NULL, &lw->fc_b, 0, "h.%zu.mlp.c_fc.bias", l);
        SPEC(F, C, &lw->fcproj_w, NULL, 0, "h.%zu.mlp.c_proj.weight", l);
        SPEC(C, 0, NULL, &lw->fcproj_b, 0, "h.%zu.mlp.c_proj.bias", l);
    }
    SPEC(C, 0, NULL, &w->lnf_w, 0, "ln_f.weight");
    SPEC(C, 0, NULL, &w->lnf_b, 0, "ln_f.bias");
    if (!c->tie_embeddings) SPEC(c->vocab_size, C, &w->lm_head, NULL, 1, "lm_head.weight");
#undef SPEC
    return n;
}

// Finds a tensor by its GPT2LMHeadModel name, with or without the "transformer." prefix.
static const StTensor *find_tensor(const WeightSrc *src, const char *name) {
    char full[128];
    snprintf(full, sizeof full, "transformer.%s", name);
    const StTensor *t = wsrc_find(src, full);
    return t ? t : wsrc_find(src, name);
}

// Buffers of checkpoints written before transformers 4.31, by name: h.N.attn.bias (the
// causal mask, (1, 1, T, T) bool or uint8) and h.N.attn.masked_bias (a scalar).
static int is_old_buffer(const char *name) {
    size_t n = strlen(name);
    return (n > 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

// m->warning names the tensors of the files that the model does not use (used[0..n_used)
// are the ones it does; a tied lm_head.weight and the old buffers are expected extras).
static void note_unused(Gpt2 *m, const StTensor *const *used, size_t n_used) {
    size_t n = 0;
    char names[120] = "";
    for (size_t f = 0; f < m->src.n_files; f++)
        for (size_t i = 0; i < m->src.files[f].n_tensors; i++) {
            const StTensor *t = &m->src.files[f].tensors[i];
            size_t k = 0;
            while (k < n_used && used[k] != t)
                k++;
            if (k < n_used || is_old_buffer(t->name) || !strcmp(t->name, "lm_head.weight"))
                continue;
            char shown[41];
            if (n++ < 3)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         n > 1 ? ", " : "", kg_show(shown, sizeof shown, t->name, strlen(t->name)));
        }
    const char *file = strrchr(m->src.path, '/');
    if (n)
        snprintf(m->warning, sizeof m->warning,
                 "%.60s: ignored %zu tensor%s the model does not use: %s%s",
                 file ? file + 1 : m->src.path, n, n > 1 ? "s" : "", names, n > 3 ? ", ..." : "");
}

// A matrix spec's output and input sizes (Conv1D is stored in x out, the embeddings out x in).
static size_t spec_out(const WeightSpec *s) { return s->transposed ? s->rows : s->cols; }
static size_t spec_in(const WeightSpec *s) { return s->transposed ? s->cols : s->rows; }

// The quantized dtype of a layer matrix or LM head stored as rows of blocks: a U8 tensor
// (out, in / 32 * block bytes), one output's blocks along its inputs a row, as gpt2_convert
// writes it; KG_DTYPE_OTHER when t is not one. check_weight holds it to the file's
// GPT2_META_QUANT; the embeddings are never blocks (they are read a row per token).
static KgDtype stored_quant(const StTensor *t, const WeightSpec *s) {
    if (!t || !s->mat || s->embedding || strcmp(t->dtype_name, "U8") || t->ndim != 2 ||
        t->shape[0] != spec_out(s) || spec_in(s) % KG_QBLOCK)
        return KG_DTYPE_OTHER;
    if (t->shape[1] == kg_dtype_bytes(KG_Q8_0, spec_in(s))) return KG_Q8_0;
    if (t->shape[1] == kg_dtype_bytes(KG_Q4_0, spec_in(s))) return KG_Q4_0;
    return KG_DTYPE_OTHER;
}

// "768, 2304": t's shape for a message.
static const char *shape_str(char *buf, size_t cap, const StTensor *t) {
    buf[0] = '\0';
    for (int d = 0; d < t->ndim; d++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%zu", d ? ", " : "", t->shape[d]);
    return buf;
}

static int check_tensor(const StTensor *t, const char *name, size_t rows, size_t cols, char *err) {
    if (!t) return kg_err(err, KG_EFORMAT, "tensor %s: missing", name);
    if (t->dtype == KG_DTYPE_OTHER)
        return kg_err(err, KG_EFORMAT, "tensor %s: dtype %s, expected F32, F16 or BF16", name,
                      t->dtype_name);
    int ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                  : t->ndim == 1 && t->shape[0] == rows;
    if (!ok) {
        char got[64];
        shape_str(got, sizeof got, t);
        if (cols)
            return kg_err(err, KG_EFORMAT, "tensor %s: shape (%s), config says (%zu, %zu)", name,
                          got, rows, cols);
        return kg_err(err, KG_EFORMAT, "tensor %s: shape (%s), config says (%zu)", name, got, rows);
    }
    return KG_OK;
}

// The index of t's first NaN or infinite value (all exponent bits set), or -1: one pass over
// memory the load reads anyway.
static long long first_nonfinite(const StTensor *t, KgDtype quant) {
    if (quant != KG_DTYPE_OTHER) { // the scale of each block (the int8 values are all finite)
        const size_t bs = kg_dtype_bytes(quant, KG_QBLOCK);
        const unsigned char *p = t->data;
        for (size_t i = 0; i < t->nbytes; i += bs)
            if (((p[i] | p[i + 1] << 8) & 0x7c00) == 0x7c00) return (long long)(i / bs * KG_QBLOCK);
        return -1;
    }
    if (t->dtype == KG_F32) {
        const uint32_t *u = t->data;
        for (size_t i = 0; i < t->n_elems; i++)
            if ((u[i] & 0x7f800000u) == 0x7f800000u) return (long long)i;
        return -1;
    }
    const uint16_t *u = t->data, mask = t->dtype == KG_F16 ? 0x7c00 : 0x7f80;
    for (size_t i = 0; i < t->n_elems; i++)
        if ((u[i] & mask) == mask) return (long long)i;
    return -1;
}

// KG_OK, or KG_EFORMAT naming the tensor and the place of its first NaN or infinite value:
// such weights would load and serve NaN probabilities.
static int check_finite(const StTensor *t, KgDtype quant, const char *name, char *err) {
    long long bad = first_nonfinite(t, quant);
    if (bad < 0) return KG_OK;
    if (quant != KG_DTYPE_OTHER)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: the scale of the block at element %lld is not a finite number",
                      name, bad);
    if (t->ndim == 2)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: element %lld (row %lld, column %lld) is not a finite number",
                      name, bad, bad / (long long)t->shape[1], bad % (long long)t->shape[1]);
    return kg_err(err, KG_EFORMAT, "tensor %s: element %lld is not a finite number", name, bad);
}

static void transpose(void *dst, const void *src, size_t rows, size_t cols, size_t esize);

// The dtype t is stored in: its safetensors dtype, or q8_0/q4_0 for a matrix of blocks.
static KgDtype stored_dtype(const StTensor *t, const WeightSpec *s) {
    KgDtype q = stored_quant(t, s);
    return q != KG_DTYPE_OTHER ? q : t->dtype;
}

// The dtype the backend holds a tensor in: vectors f32; matrices as stored (dtype AUTO) or
// converted to dtype, except the embedding tables, which a quantized model keeps in f32 for
// their row lookups (the tied LM head then gets its own quantized copy).
static KgDtype target_dtype(const StTensor *t, const WeightSpec *s, KgDtype dtype) {
    if (s->vec) return KG_F32;
    if (dtype == KG_DTYPE_AUTO) return stored_dtype(t, s);
    if (s->embedding && kg_dtype_quantized(dtype)) return KG_F32;
    return dtype;
}

// Host bytes a tensor needs beyond the mapping: f32 vectors widened from f16/bf16, and
// matrices converted (or quantized) to the requested dtype.
static size_t owned_bytes(const StTensor *t, const WeightSpec *s, KgDtype dtype) {
    KgDtype to = target_dtype(t, s, dtype);
    size_t b = to == stored_dtype(t, s) ? 0 : kg_dtype_bytes(to, t->n_elems);
    return (b + 63) / 64 * 64;
}

// dst (OC, C blocks of dt) = t quantized, t a float matrix stored as s says. KG_ENOMEM or KG_OK.
static int quantize_weight(void *dst, KgDtype dt, const StTensor *t, const WeightSpec *s) {
    const size_t n = t->n_elems;
    // f32 is read in place; f16/bf16 widened first
    float *wide = t->dtype == KG_F32 ? NULL : malloc(n * sizeof *wide);
    float *flip = s->transposed ? NULL : malloc(n * sizeof *flip);
    if ((t->dtype != KG_F32 && !wide) || (!s->transposed && !flip)) {
        free(wide);
        free(flip);
        return KG_ENOMEM;
    }
    if (wide) kg_dtype_convert(wide, KG_F32, t->data, t->dtype, n);
    const float *f = wide ? wide : t->data;
    if (flip) transpose(flip, f, s->rows, s->cols, sizeof(float)); // (C, OC) -> (OC, C)
    kg_quantize_rows(dst, dt, flip ? flip : f, spec_out(s), spec_in(s));
    free(wide);
    free(flip);
    return KG_OK;
}

// dst (cols, rows) = src (rows, cols) transposed, elements of esize bytes (2 or 4), in 32 x 32
// tiles so that both sides are walked in cache lines.
static void transpose(void *dst, const void *src, size_t rows, size_t cols, size_t esize) {
    for (size_t r0 = 0; r0 < rows; r0 += 32)
        for (size_t c0 = 0; c0 < cols; c0 += 32)
            for (size_t r = r0; r < rows && r < r0 + 32; r++)
                for (size_t c = c0; c < cols && c < c0 + 32; c++)
                    if (esize == 2)
                        ((uint16_t *)dst)[c * rows + r] = ((const uint16_t *)src)[r * cols + c];
                    else
                        ((uint32_t *)dst)[c * rows + r] = ((const uint32_t *)src)[r * cols + c];
}

// Points one weight at its data: the mapping itself, or a converted copy in *cursor; a
// backend that wants (out, in) matrices gets a stored (in, out) one transposed (a host copy
// that lives only until weights_map has copied it to the device). *in_place: 1 when the
// backend reads the mapping itself (so its pages must stay).
static int bind_weight(Gpt2 *m, const WeightSpec *s, const StTensor *t, KgDtype dtype,
                       char **cursor, int *in_place) {
    const void *src = t->data;
    KgDtype dt = target_dtype(t, s, dtype);
    size_t extra = owned_bytes(t, s, dtype);
    if (extra && kg_dtype_quantized(dt)) {
        if (quantize_weight(*cursor, dt, t, s)) return KG_ENOMEM;
    } else if (extra) {
        kg_dtype_convert(*cursor, dt, t->data, t->dtype, t->n_elems);
    }
    if (extra) {
        src = *cursor;
        *cursor += extra;
    }
    size_t bytes = kg_dtype_bytes(dt, s->rows * (s->cols ? s->cols : 1));
    int transposed = s->transposed || kg_dtype_quantized(dt); // blocks run along C: (OC, C)
    void *flipped = NULL;
    if (s->mat && !transposed && m->be->ops->matrices_out_major) {
        if (!(flipped = malloc(bytes))) return KG_ENOMEM;
        transpose(flipped, src, s->rows, s->cols, kg_dtype_size(dt));
        src = flipped;
        transposed = 1;
    }
    const void *dev = m->be->ops->weights_map(m->be, src, bytes);
    free(flipped);
    if (!dev) return KG_ENOMEM;
    *in_place = dev == t->data;
    if (s->vec)
        *s->vec = dev;
    else
        *s->mat = (KgMat){dev, dt, transposed};
    return KG_OK;
}

// Why t is not the blocks of quant (the file's GPT2_META_QUANT) that spec s must be.
static int blocks_error(const StTensor *t, const WeightSpec *s, KgDtype quant, char *err) {
    const char *q = kg_dtype_name(quant);
    char got[64];
    if (!t)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: missing (a %s file holds every layer matrix and the LM head "
                      "as blocks)",
                      s->name, q);
    if (spec_in(s) % KG_QBLOCK)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: %s needs inputs in blocks of %d, the matrix has %zu", s->name, q,
                      KG_QBLOCK, spec_in(s));
    return kg_err(err, KG_EFORMAT, "tensor %s: %s (%s), but %s says %s: expected U8 (%zu, %zu)",
                  s->name, t->dtype_name, shape_str(got, sizeof got, t), GPT2_META_QUANT, q,
                  spec_out(s), kg_dtype_bytes(quant, spec_in(s)));
}

// Every check of one tensor against its spec, before any is bound: present, dtype and shape,
// quantizable when it is to be quantized, and in blocks exactly when the file's scheme quant
// (GPT2_META_QUANT, KG_DTYPE_OTHER for none) says so: every layer matrix and the LM head.
static int check_weight(const StTensor *t, const WeightSpec *s, KgDtype dtype, KgDtype quant,
                        char *err) {
    KgDtype q = stored_quant(t, s);
    int rc;
    if (quant != KG_DTYPE_OTHER && s->mat && !s->embedding) {
        if (q != quant) return blocks_error(t, s, quant, err);
        return KG_OK;
    }
    if (q != KG_DTYPE_OTHER)
        return kg_err(err, KG_EFORMAT,
                      "tensor %s: U8 rows of %s blocks, but the file's __metadata__ has no %s",
                      s->name, kg_dtype_name(q), GPT2_META_QUANT);
    if ((rc = check_tensor(t, s->name, s->rows, s->cols, err))) return rc;
    KgDtype to = target_dtype(t, s, dtype);
    if (kg_dtype_quantized(to) && spec_in(s) % KG_QBLOCK)
        return kg_err(err, KG_EUNSUP,
                      "tensor %s: %s needs inputs in blocks of %d, the matrix has %zu", s->name,
                      kg_dtype_name(to), KG_QBLOCK, spec_in(s));
    return KG_OK;
}

// The values of a tensor check_weight passed: finite (q8_0/q4_0: every block's scale).
static int check_values(const StTensor *t, const WeightSpec *s, char *err) {
    return check_finite(t, stored_quant(t, s), s->name, err);
}

// The files' quantization scheme: the GPT2_META_QUANT entry of their __metadata__, KG_Q8_0 or
// KG_Q4_0 into *quant, KG_DTYPE_OTHER when none names one (shards that do must agree).
static int file_quant(const WeightSrc *src, KgDtype *quant, char *err) {
    *quant = KG_DTYPE_OTHER;
    for (size_t f = 0; f < src->n_files; f++) {
        const char *v = safetensors_meta(&src->files[f], GPT2_META_QUANT);
        if (!v) continue;
        KgDtype dt = KG_DTYPE_OTHER;
        char shown[41];
        if (kg_dtype_parse(v, &dt, NULL) || !kg_dtype_quantized(dt))
            return kg_err(err, KG_EUNSUP, "__metadata__ %s is '%s': not q8_0 or q4_0",
                          GPT2_META_QUANT, kg_show(shown, sizeof shown, v, strlen(v)));
        if (*quant != KG_DTYPE_OTHER && *quant != dt)
            return kg_err(err, KG_EFORMAT, "the shards' %s differ (%s and %s)", GPT2_META_QUANT,
                          kg_dtype_name(*quant), kg_dtype_name(dt));
        *quant = dt;
    }
    return KG_OK;
}

// A quantized file is served as stored: on a backend with quantized kernels, and with dtype
// auto or the file's own scheme (which then mean the same). KG_OK with *dtype set to auto.
static int check_quant_load(const Gpt2 *m, KgDtype quant, KgDtype *dtype, char *err) {
    const char *q = kg_dtype_name(quant);
    if (!m->be->ops->quant_weights)
        return kg_err(err, KG_EUNSUP,
                      "%s blocks (%s) need the cpu backend: %s has no quantized kernels", q,
                      GPT2_META_QUANT, m->be->ops->name);
    if (*dtype != KG_DTYPE_AUTO && *dtype != quant)
        return kg_err(err, KG_EUNSUP,
                      "%s blocks (%s) load only as they are (dtype auto or %s), not as %s; "
                      "convert the original model for that",
                      q, GPT2_META_QUANT, q, kg_dtype_name(*dtype));
    *dtype = KG_DTYPE_AUTO;
    return KG_OK;
}

// The file pages of every bound tensor t[i] (NULL: none) that the backend holds elsewhere
// (converted, quantized, on a GPU) leave the resident memory, unless another binding reads the
// same tensor in place (wte, kept f32 for its row lookups, under a quantized copy as the head).
static void drop_converted(const WeightSrc *src, const StTensor *const *t, const int *in_place,
                           size_t n) {
    for (size_t i = 0; i < n; i++) {
        int keep = !t[i];
        for (size_t k = 0; k < n && !keep; k++)
            keep = t[k] == t[i] && in_place[k];
        if (!keep) wsrc_drop_pages(src, t[i]);
    }
}

static int bind_all(Gpt2 *m, KgDtype dtype, char *err) {
    const Gpt2Config *c = &m->config;
    // lm_head, when untied, is found under its own name below (never "transformer.")
    size_t n = weight_specs(c, &m->w, m->layers, NULL, 0) - !c->tie_embeddings;
    WeightSpec *spec = calloc(n + 1, sizeof *spec);
    const StTensor **t = calloc(n + 1, sizeof *t);
    int *in_place = calloc(n + 1, sizeof *in_place);
    KgDtype quant; // the file's scheme: KG_DTYPE_OTHER, or every layer matrix is in its blocks
    int rc = KG_OK;
    if (!spec || !t || !in_place) {
        rc = kg_err(err, KG_ENOMEM, "model: out of memory");
        goto end;
    }
    if ((rc = file_quant(&m->src, &quant, err)) ||
        (quant != KG_DTYPE_OTHER && (rc = check_quant_load(m, quant, &dtype, err))))
        goto end;
    weight_specs(c, &m->w, m->layers, spec, n);
    for (size_t i = 0; i < n; i++) {
        t[i] = find_tensor(&m->src, spec[i].name);
        if (!t[i]) {
            rc = kg_err(err, KG_EFORMAT, "tensor %s: missing", spec[i].name);
            goto end;
        }
    }
    // the LM head: lm_head.weight (V, C) when the config unties them; when tied, wte itself,
    // or for quantized layers its own copy in blocks (a quantized file's lm_head.weight, else
    // quantized from wte here)
    const StTensor *head = wsrc_find(&m->src, "lm_head.weight");
    WeightSpec head_spec = {.name = "lm_head.weight",
                            .rows = c->vocab_size,
                            .cols = c->n_embd,
                            .mat = &m->w.lm_head,
                            .transposed = 1};
    size_t first = 0; // the first layer matrix (h.0.attn.c_attn) says what the layers hold
    while (!spec[first].mat || spec[first].embedding)
        first++;
    KgDtype layer_dt =
        quant != KG_DTYPE_OTHER ? quant : target_dtype(t[first], &spec[first], dtype);
    // a quantized model quantizes the tied head too (a copy of wte in blocks; wte stays f32
    // for the lookups). Why, by arithmetic rather than a measurement: on the KoGPT2-base shape
    // the head is 39 M of the 124 M weights a decode step reads, and decode reads every weight
    // once, so an f32 head would be read at 4 bytes a weight against q8_0's 1.06. Its rounding
    // is inside the logits test_gpt2_quant compares with f32 (top-1 agreement and KL).
    int own_head = !c->tie_embeddings || kg_dtype_quantized(layer_dt);
    int head_dtype = dtype;
    if (c->tie_embeddings && own_head) {
        if (quant == KG_DTYPE_OTHER) head = t[0]; // quantized from wte
        head_dtype = (int)layer_dt;
    }
    size_t extra = 0;
    for (size_t i = 0; i < n; i++) {
        if ((rc = check_weight(t[i], &spec[i], dtype, quant, err))) goto end;
        extra += owned_bytes(t[i], &spec[i], dtype);
    }
    if (own_head) {
        if ((rc = check_weight(head, &head_spec, head_dtype, quant, err)) ||
            (rc = check_values(head, &head_spec, err)))
            goto end;
        extra += owned_bytes(head, &head_spec, head_dtype);
    }
    for (size_t i = 0; i < n; i++) // the values, once every header is known to be right
        if ((rc = check_values(t[i], &spec[i], err))) goto end;
    if (extra && posix_memalign(&m->host_owned, 64, extra)) {
        m->host_owned = NULL;
        rc = kg_err(err, KG_ENOMEM, "model: out of memory for %zu bytes of converted weights",
                    extra);
        goto end;
    }
    char *cursor = m->host_owned;
    for (size_t i = 0; i < n; i++)
        if ((rc = bind_weight(m, &spec[i], t[i], dtype, &cursor, &in_place[i]))) {
            rc = kg_err(err, rc, "tensor %s: out of backend memory", spec[i].name);
            goto end;
        }
    m->w.lm_head = m->w.wte;
    if (own_head && (rc = bind_weight(m, &head_spec, head, head_dtype, &cursor, &in_place[n]))) {
        rc = kg_err(err, rc, "tensor lm_head.weight: out of backend memory");
        goto end;
    }
    m->dtype = m->layers[0].fc_w.dtype;
    t[n] = own_head ? head : NULL;
    drop_converted(&m->src, t, in_place, n + 1);
    // wte read in place but not as the head (that has its own copy): from now on only the
    // rows of the tokens seen are read, so the pages come back as rows are looked up
    if (own_head && in_place[0]) wsrc_drop_pages(&m->src, t[0]);
    note_unused(m, t, n + 1);
end:
    free(spec);
    free(t);
    free(in_place);
    return rc;
}

int gpt2_open(Gpt2 *m, const char *dir, KgBackend *be, KgDtype dtype, char *err) {
    *m = (Gpt2){.be = be};
    if (dtype != KG_DTYPE_AUTO && (dtype < KG_F32 || dtype > KG_Q4_0))
        return kg_err(err, KG_EINVAL, "model: unknown weight dtype %d", (int)dtype);
    if (kg_dtype_quantized(dtype) && !be->ops->quant_weights)
        return kg_err(err, KG_EUNSUP,
                      "model: %s weights need the cpu backend (%s has no "
                      "quantized kernels)",
                      kg_dtype_name(dtype), be->ops->name);
    char path[PATH_MAX];
    int rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = gpt2_config_load(&m->config, path, err))) return rc;
    if ((rc = wsrc_open_dir(&m->src, dir, err))) return rc;
    m->layers = calloc(m->config.n_layer, sizeof *m->layers);
    if (!m->layers) {
        gpt2_close(m);
        return kg_err(err, KG_ENOMEM, "model: out of memory");
    }
    m->w.layers = m->layers;
    char terr[KG_ERRLEN];
    if ((rc = bind_all(m, dtype, terr))) {
        kg_err(err, rc, "%s: %s", m->src.path, terr);
        gpt2_close(m);
        return rc;
    }
    return KG_OK;
}

void gpt2_close(Gpt2 *m) {
    if (m->params) m->be->ops->free(m->be, m->params);
    wsrc_close(&m->src);
    free(m->host_owned);
    free(m->layers);
    *m = (Gpt2){0};
}

int gpt2_export_tensors(const Gpt2 *m, StWrite *w, char (*names)[80], size_t *n) {
    const Gpt2Config *c = &m->config;
    Gpt2Weights held = m->w; // the specs point into this copy: m stays const
    size_t k = weight_specs(c, &held, m->layers, NULL, 0);
    WeightSpec *spec = calloc(k + 1, sizeof *spec);
    if (!spec) return KG_ENOMEM;
    weight_specs(c, &held, m->layers, spec, k);
    if (c->tie_embeddings && kg_dtype_quantized(held.lm_head.dtype)) // its own blocks (bind_all)
        spec[k++] = (WeightSpec){.name = "lm_head.weight",
                                 .rows = c->vocab_size,
                                 .cols = c->n_embd,
                                 .mat = &held.lm_head,
                                 .transposed = 1};
    for (size_t i = 0; i < k; i++) {
        const WeightSpec *s = &spec[i];
        int prefixed = strcmp(s->name, "lm_head.weight") != 0;
        snprintf(names[i], sizeof names[i], "%s%s", prefixed ? "transformer." : "", s->name);
        if (s->mat && kg_dtype_quantized(s->mat->dtype)) { // (out, in): U8 rows of blocks
            w[i] = (StWrite){names[i], s->mat->dtype, 2, {spec_out(s), spec_in(s)}, s->mat->data};
        } else { // as the files hold it (gpt2_open found it under one of its names)
            const StTensor *t =
                prefixed ? find_tensor(&m->src, s->name) : wsrc_find(&m->src, s->name);
            w[i] = (StWrite){names[i], t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
        }
    }
    free(spec);
    *n = k;
    return KG_OK;
}

size_t gpt2_weight_bytes(const Gpt2 *m) {
    const Gpt2Config *c = &m->config;
    size_t C = c->n_embd, F = c->n_inner;
    size_t per_layer = C * 3 * C + C * C + C * F + F * C;
    // a decode step reads every layer matrix and the LM head; wte/wpe contribute one row
    return c->n_layer * kg_dtype_bytes(m->dtype, per_layer) +
           kg_dtype_bytes(m->w.lm_head.dtype, c->vocab_size * C);
}

size_t gpt2_param_tensors(const Gpt2Config *c, Gpt2ParamTensor *out) {
    Gpt2Weights w;
    Gpt2LayerWeights *layers = calloc(c->n_layer, sizeof *layers);
    size_t n = weight_specs(c, &w, layers, NULL, 0);
    WeightSpec *spec = calloc(n, sizeof *spec);
    if (out && spec && layers) {
        weight_specs(c, &w, layers, spec, n);
        size_t offset = 0;
        for (size_t i = 0; i < n; i++) {
            Gpt2ParamTensor *t = &out[i];
            int prefixed = strcmp(spec[i].name, "lm_head.weight") != 0;
            snprintf(t->name, sizeof t->name, "%s%s", prefixed ? "transformer." : "", spec[i].name);
            t->offset = offset;
            t->count = spec[i].rows * (spec[i].cols ? spec[i].cols : 1);
            t->ndim = spec[i].cols ? 2 : 1;
            t->shape[0] = spec[i].rows;
            t->shape[1] = spec[i].cols;
            t->decay = t->ndim == 2; // matrices decay; biases and layer norms do not
            offset += t->count;
        }
    }
    free(spec);
    free(layers);
    return n;
}

size_t gpt2_param_count(const Gpt2Config *c) {
    size_t C = c->n_embd, F = c->n_inner;
    size_t per_layer = 4 * C + C * 3 * C + 3 * C + C * C + C + C * F + F + F * C + C;
    return (c->vocab_size + c->n_ctx) * C + c->n_layer * per_layer + 2 * C +
           (c->tie_embeddings ? 0 : c->vocab_size * C);
}

int gpt2_bind_params(const Gpt2Config *c, float *base, Gpt2Weights *w, Gpt2LayerWeights *layers) {
    size_t n = weight_specs(c, w, layers, NULL, 0), offset = 0;
    WeightSpec *spec = calloc(n, sizeof *spec);
    if (!spec) return KG_ENOMEM;
    weight_specs(c, w, layers, spec, n);
    for (size_t i = 0; i < n; i++) {
        if (spec[i].vec)
            *spec[i].vec = base + offset;
        else
            *spec[i].mat = (KgMat){base + offset, KG_F32, spec[i].transposed};
        offset += spec[i].rows * (spec[i].cols ? spec[i].cols : 1);
    }
    free(spec);
    w->layers = layers;
    if (c->tie_embeddings) w->lm_head = w->wte;
    return KG_OK;
}
