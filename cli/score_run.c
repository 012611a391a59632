// score_run.c — kogpt2 score's windows, batched forwards and in-order output (score_run.h).
// Shapes: V vocabulary, T predicted tokens per window, rows = up to batch * chunk per forward.
#include "score_run.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "model/logits.h"

int score_run_init(ScoreRun *r, const Gpt2 *m, Gpt2State *s, const Tokenizer *tok, size_t T,
                   size_t batch, size_t chunk, char *err) {
    *r = (ScoreRun){.m = m, .s = s, .tok = tok, .T = T, .batch = batch, .chunk = chunk};
    r->eos = tok_special(tok).eos;
    if (r->eos < 0 || (size_t)r->eos >= m->config.vocab_size)
        return kg_err(err, KG_EINVAL, "the tokenizer has no EOS within the model's vocabulary");
    if (!T || T > m->config.n_ctx || !batch || !chunk || batch * chunk > s->max_logit_rows)
        return kg_err(err, KG_EINVAL, "score: windows of %zu, %zu x %zu rows", T, batch, chunk);
    r->slots = calloc(batch, sizeof *r->slots);
    r->seqs = calloc(batch, sizeof *r->seqs);
    r->seq_slot = calloc(batch, sizeof *r->seq_slot);
    int rc = r->slots && r->seqs && r->seq_slot ? KG_OK : kg_err(err, KG_ENOMEM, "out of memory");
    // blocks for every slot's window (batch <= SCORE_MAX_BATCH, T <= n_ctx: no overflow), at
    // least the one context and a block to copy that a pool must hold
    size_t blocks = batch * kv_blocks_for(T), one = kv_blocks_for(m->config.n_ctx);
    if (!rc)
        rc = kv_pool_new(&r->pool, &m->config, m->be, (blocks > one ? blocks : one) + 1, 0, err);
    for (size_t i = 0; !rc && i < batch; i++)
        rc = kv_seq_init(&r->slots[i].kv, r->pool, err);
    if (rc) score_run_free(r);
    return rc;
}

static void score_doc_free(ScoreDoc *d) {
    free(d->stream);
    free(d);
}

void score_run_free(ScoreRun *r) {
    for (size_t i = 0; r->slots && i < r->batch; i++)
        kv_seq_release(&r->slots[i].kv); // (an uninitialized one: nothing)
    if (r->pool) kv_pool_free(r->pool);
    while (r->head) {
        ScoreDoc *d = r->head;
        r->head = d->next;
        score_doc_free(d);
    }
    free(r->slots);
    free(r->seqs);
    free(r->seq_slot);
    *r = (ScoreRun){0};
}

ScoreDoc *score_run_add(ScoreRun *r, size_t line, uint64_t raw_bytes, char *err) {
    ScoreDoc *d = calloc(1, sizeof *d);
    if (!d) {
        kg_err(err, KG_ENOMEM, "out of memory");
        return NULL;
    }
    d->line = line;
    d->raw_bytes = raw_bytes;
    if (r->tail)
        r->tail->next = d;
    else
        r->head = d;
    r->tail = d;
    return d;
}

int score_doc_skip(ScoreDoc *d, const char *why) {
    d->skipped = why;
    return KG_OK;
}

int score_doc_error(ScoreDoc *d, const char *what, const char *field) {
    snprintf(d->error, sizeof d->error, "%s (the text is read from \"%.64s\")", what, field);
    return KG_OK;
}

int score_run_text(ScoreRun *r, ScoreDoc *d, const char *text, size_t len, char *err) {
    if (!len) return score_doc_skip(d, "empty");
    int *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(r->tok, text, len, &ids, &n, err);
    if (rc == KG_EINVAL) { // tok_encode's only user error: as prepare, dropped
        free(ids);
        return score_doc_skip(d, "not UTF-8");
    }
    for (size_t i = 0; !rc && i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= r->m->config.vocab_size)
            rc = kg_err(err, KG_EINVAL, "line %zu: token id %d is outside the model's vocabulary",
                        d->line, ids[i]);
    char *decoded = NULL;
    size_t dlen = 0;
    if (!rc) rc = tok_decode(r->tok, ids, n, &decoded, &dlen, err); // bytes as the tokens decode
    free(decoded);
    if (!rc && !(d->stream = malloc((n + 2) * sizeof *d->stream)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) {
        d->stream[0] = d->stream[n + 1] = r->eos;
        memcpy(d->stream + 1, ids, n * sizeof *ids);
        d->n_stream = n + 2;
        d->bytes = (uint64_t)dlen + 1;
        d->windows = (n + 1 + r->T - 1) / r->T; // n + 1 predicted tokens
    }
    free(ids);
    return rc;
}

// 1 when d's line can be written: not scored, or every window finished.
static int score_doc_complete(const ScoreDoc *d) { return !d->stream || d->finished == d->windows; }

int score_run_done(const ScoreRun *r) { return r->head == NULL; }

// Gives free slots the next windows of the lines read, in order.
static void score_run_assign(ScoreRun *r) {
    ScoreDoc *d = r->head;
    for (size_t i = 0; i < r->batch; i++) {
        ScoreSlot *sl = &r->slots[i];
        if (sl->doc) continue;
        while (d && (!d->stream || d->handed_out == d->windows))
            d = d->next;
        if (!d) return;
        size_t w = d->handed_out++, predicted = d->n_stream - 1;
        sl->doc = d;
        sl->k0 = w * r->T;
        sl->n = predicted - sl->k0 < r->T ? predicted - sl->k0 : r->T;
        sl->fed = 0;
        kv_seq_truncate(&sl->kv, 0); // a window is predicted from its own tokens only
    }
}

int score_run_full(ScoreRun *r) {
    score_run_assign(r);
    for (size_t i = 0; i < r->batch; i++)
        if (!r->slots[i].doc) return 0;
    return 1;
}

// The JSON line of a completed document.
static cJSON *score_doc_json(const ScoreDoc *d) {
    cJSON *j = cJSON_CreateObject();
    int ok = j && cJSON_AddNumberToObject(j, "line", (double)d->line);
    if (ok && d->skipped)
        ok = cJSON_AddStringToObject(j, "skipped", d->skipped) != NULL;
    else if (ok && d->error[0])
        ok = cJSON_AddStringToObject(j, "error", d->error) != NULL;
    else if (ok) {
        size_t tokens = d->n_stream - 1;
        ok = cJSON_AddNumberToObject(j, "tokens", (double)tokens) &&
             cJSON_AddNumberToObject(j, "bytes", (double)d->bytes) &&
             cJSON_AddNumberToObject(j, "logprob", d->logprob) &&
             cJSON_AddNumberToObject(j, "mean_logprob", d->logprob / (double)tokens) &&
             cJSON_AddNumberToObject(j, "bits_per_byte", -d->logprob / M_LN2 / (double)d->bytes);
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

// Writes and frees the completed lines at the head, counting them in the totals.
static int score_run_flush(ScoreRun *r, FILE *out, KgProgress *pr, char *err) {
    while (r->head && score_doc_complete(r->head)) {
        ScoreDoc *d = r->head;
        cJSON *j = score_doc_json(d);
        char *text = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        if (!text) return kg_err(err, KG_ENOMEM, "out of memory");
        int bad = fputs(text, out) == EOF || fputc('\n', out) == EOF;
        cJSON_free(text);
        if (bad) return kg_err(err, KG_EIO, "write: the output is closed or full");
        if (d->stream) {
            r->totals.docs++;
            r->totals.tokens += d->n_stream - 1;
            r->totals.bytes += d->bytes;
            r->totals.logprob += d->logprob;
        } else {
            r->totals.skipped++;
        }
        progress_advance(pr, d->raw_bytes);
        r->head = d->next;
        if (!r->head) r->tail = NULL;
        score_doc_free(d);
    }
    return KG_OK;
}

// Scores the rows of one step: slot seq_slot[i]'s c rows predict its stream's next c tokens.
static void score_run_consume(ScoreRun *r, size_t n_seq) {
    const size_t V = r->m->config.vocab_size;
    const float *row = r->s->logits_host; // (rows, V), the sequences' rows in order
    for (size_t i = 0; i < n_seq; i++) {
        ScoreSlot *sl = &r->slots[r->seq_slot[i]];
        const int *target = sl->doc->stream + sl->k0 + sl->fed + 1;
        for (size_t k = 0; k < r->seqs[i].n; k++, row += V)
            sl->doc->logprob += row[target[k]] - logits_logsumexp(row, V, 1.0f);
        sl->fed += r->seqs[i].n;
        if (sl->fed == sl->n) {
            sl->doc->finished++;
            sl->doc = NULL;
        }
    }
}

int score_run_step(ScoreRun *r, FILE *out, KgProgress *pr, char *err) {
    score_run_assign(r);
    size_t n_seq = 0;
    for (size_t i = 0; i < r->batch; i++) {
        ScoreSlot *sl = &r->slots[i];
        if (!sl->doc) continue;
        size_t c = sl->n - sl->fed < r->chunk ? sl->n - sl->fed : r->chunk;
        r->seqs[n_seq] = (Gpt2Seq){.kv = &sl->kv,
                                   .tokens = sl->doc->stream + sl->k0 + sl->fed,
                                   .n = c,
                                   .logits = GPT2_LOGITS_ALL};
        r->seq_slot[n_seq++] = i;
    }
    if (n_seq) {
        int rc = gpt2_forward(r->m, r->s, r->seqs, n_seq, err);
        if (rc) return rc;
        score_run_consume(r, n_seq);
    }
    return score_run_flush(r, out, pr, err);
}
