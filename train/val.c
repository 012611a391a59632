// val.c — validation text and its score (val.h). Shapes: B windows of T tokens per forward.
#include "val.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "prepare.h"

// Building a ValSet: documents appended one at a time, up to a budget.
typedef struct {
    ValSet *v;
    const Tokenizer *tok;
    size_t V;
    uint64_t max_tokens; // 0: no budget
    size_t cap;          // ids allocated
    int full;            // the budget is spent: later documents are left out
    const char *what;    // the source, for messages
} ValLoad;

int val_is_shard_dir(const char *path) {
    if (!kg_is_dir(path)) return 0;
    char(*names)[SHARD_NAME_MAX] = NULL;
    size_t n = 0;
    int rc = shard_list(path, "val_", &names, &n, NULL);
    free(names);
    return !rc && n > 0;
}

void val_free(ValSet *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

// Appends one document (n ids, then EOS) and counts its decoded bytes + 1. written: its
// bytes as written, or -1 when not known here.
static int load_doc(ValLoad *l, const int *ids, size_t n, long long written, char *err) {
    ValSet *v = l->v;
    if (l->full) return KG_OK;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= l->V)
            return kg_err(err, KG_EFORMAT, "%s: token id %d is outside the model's vocabulary %zu",
                          l->what, ids[i], l->V);
    if (KG_GROW(v->ids, &l->cap, v->n + n + 1, NULL))
        return kg_err(err, KG_ENOMEM, "%s: out of memory for %zu tokens", l->what, v->n + n + 1);
    char *text = NULL;
    size_t len = 0;
    int rc = tok_decode(l->tok, ids, n, &text, &len, err);
    free(text);
    if (rc) return rc;
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->ids[v->n + n] = v->eos;
    v->n += n + 1;
    v->docs++;
    v->bytes += len + 1;
    if (written >= 0) v->text_bytes += (uint64_t)written + 1;
    l->full = l->max_tokens && v->n >= l->max_tokens;
    return KG_OK;
}

// shard_read_docs' ShardDocFn for a text source.
static int load_text_doc(void *ctx, const int *ids, size_t n, const char *text, size_t len,
                         char *err) {
    (void)text;
    ValLoad *l = ctx;
    if (l->full) return KG_ECANCEL; // the budget is spent: stop reading
    return load_doc(l, ids, n, (long long)len, err);
}

// The documents of one val shard, each ending at an EOS (prepare writes one after each).
// *whole = 1 when all of them were taken (the budget did not cut the shard).
static int load_shard(ValLoad *l, const Shard *s, int *whole, char *err) {
    uint64_t start = 0, n = s->h.n_tokens, docs0 = l->v->docs;
    int *doc = NULL;
    size_t cap = 0;
    int rc = KG_OK;
    for (uint64_t i = 0; i < n && !rc && !l->full; i++) {
        int eos = shard_id(s, i) == l->v->eos;
        if (!eos && i + 1 < n) continue;
        size_t len = (size_t)(i - start) + !eos; // the document without its EOS
        if (len > cap) {
            int *q = realloc(doc, len * sizeof *q);
            if (!q) {
                rc = kg_err(err, KG_ENOMEM, "%s: out of memory", l->what);
                break;
            }
            doc = q;
            cap = len;
        }
        for (size_t j = 0; j < len; j++)
            doc[j] = shard_id(s, start + j);
        rc = load_doc(l, doc, len, -1, err);
        start = i + 1;
    }
    free(doc);
    *whole = start >= n && l->v->docs - docs0 == s->h.n_docs;
    return rc;
}

// The val shards of dir in name order; the written size (the headers' text_bytes) is known
// when no shard was cut.
static int load_shards(ValLoad *l, const char *dir, char *err) {
    char(*names)[SHARD_NAME_MAX] = NULL;
    size_t n = 0;
    int rc = shard_list(dir, "val_", &names, &n, err);
    if (!rc && !n) rc = kg_err(err, KG_EINVAL, "%s holds no val_*.bin shards", dir);
    uint64_t text_bytes = 0;
    int whole = 1;
    for (size_t i = 0; i < n && !rc && !l->full; i++) {
        Shard s;
        if ((rc = shard_open(&s, dir, names[i], err))) break;
        int all;
        rc = load_shard(l, &s, &all, err);
        whole &= all;
        text_bytes += s.h.text_bytes;
        shard_close(&s);
    }
    l->v->text_bytes = whole ? text_bytes : 0;
    free(names);
    return rc;
}

int val_load(ValSet *v, const char *path, const Tokenizer *tok, size_t V, uint64_t max_tokens,
             char *err) {
    memset(v, 0, sizeof *v);
    v->eos = tok_special(tok).eos;
    if (v->eos < 0 || (size_t)v->eos >= V)
        return kg_err(err, KG_EINVAL,
                      "validation: the tokenizer has no EOS within the model's "
                      "vocabulary");
    ValLoad l = {.v = v, .tok = tok, .V = V, .max_tokens = max_tokens, .what = path};
    int rc;
    if (val_is_shard_dir(path)) {
        rc = load_shards(&l, path, err);
    } else {
        const char *inputs[1] = {path};
        rc = shard_read_docs(tok, inputs, 1, 0, load_text_doc, &l, NULL, NULL, err);
        if (rc == KG_ECANCEL && l.full) rc = KG_OK;
        if (!rc && l.full) v->text_bytes = 0; // cut short: the rest is not counted
    }
    if (!rc && !v->n) rc = kg_err(err, KG_EINVAL, "%s: no document to validate on", path);
    if (rc) val_free(v);
    return rc;
}

// One forward over the b windows gathered in inputs/targets (rows b..B-1 padded with
// ignored targets); adds the nats and the scored targets into acc.
static int score_batch(const Gpt2 *m, Gpt2Train *t, size_t b, size_t B, size_t T, int *inputs,
                       int *targets, double acc[2], char *err) {
    for (size_t i = b * T; i < B * T; i++) {
        inputs[i] = 0;
        targets[i] = -1;
    }
    size_t valid = 0;
    for (size_t i = 0; i < b * T; i++)
        valid += targets[i] >= 0;
    if (!valid) return KG_OK;
    float loss; // the mean over the valid targets
    int rc = gpt2_train_forward(m, t, inputs, targets, &loss, err);
    if (rc) return rc;
    acc[0] += (double)loss * (double)valid;
    acc[1] += (double)valid;
    return KG_OK;
}

int val_score(const Gpt2 *m, Gpt2Train *t, const ValSet *v, Dist *d, size_t B, size_t T,
              int *inputs, int *targets, ValResult *out, char *err) {
    double acc[2] = {0, 0}; // nats, scored targets (this rank)
    uint64_t n_windows = (v->n + T - 1) / T;
    size_t b = 0;
    int rc = KG_OK;
    for (uint64_t w = (uint64_t)d->rank; w < n_windows && !rc; w += (uint64_t)d->size) {
        for (size_t i = 0; i < T; i++) { // target k is predicted from input k - 1 (EOS first)
            uint64_t k = w * T + i;
            inputs[b * T + i] = k >= v->n ? 0 : k ? v->ids[k - 1] : v->eos;
            targets[b * T + i] = k < v->n ? v->ids[k] : -1;
        }
        if (++b == B) {
            rc = score_batch(m, t, b, B, T, inputs, targets, acc, err);
            b = 0;
        }
    }
    if (!rc && b > 0) rc = score_batch(m, t, b, B, T, inputs, targets, acc, err);
    if (!rc) rc = dist_allreduce_sum_f64(d, acc, 2, err);
    if (rc) return rc;
    *out = (ValResult){.nats = acc[0],
                       .tokens = (uint64_t)acc[1],
                       .loss = acc[1] > 0 ? acc[0] / acc[1] : NAN,
                       .bpb = v->bytes ? acc[0] / M_LN2 / (double)v->bytes : NAN};
    return KG_OK;
}
