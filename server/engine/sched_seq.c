// sched_seq.c — one engine sequence: made from what sched_submit was given, its output entries and
// end, its references; and the caller's side of sched.h (read, error, stats, cancel, release).
#include "sched_seq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "sched_explain.h"

void sched_seq_free(SchedSeq *j) {
    for (size_t i = 0; i < j->out.n; i++) {
        free((char *)j->out.tokens[i].text);
        free((KgCandidate *)j->out.tokens[i].candidates);
        sched_explain_free((SchedExplain *)j->out.tokens[i].explain);
    }
    free(j->out.tokens);
    free(j->in.tokens);
    free(j->in.stop_tokens);
    free(j->work.gen);
    kv_seq_release(&j->work.kv);
    gentext_free(&j->work.text);
    sampler_free(j->work.sampler);
    sampler_penalty_free(j->work.penalty);
    tok_stream_free(j->work.stream);
    tok_stream_free(j->work.prompt_stream);
    pthread_mutex_destroy(&j->out.mu);
    pthread_mutex_destroy(&j->notify_mu);
    free(j);
}

void sched_seq_unref(SchedSeq *j) {
    if (atomic_fetch_sub(&j->refs, 1) == 1) sched_seq_free(j);
}

// Copies the prompt, the stop ids and the stop strings into j and points j->in.p at them.
static int sched_seq_copy_input(SchedSeq *j, const SchedParams *p) {
    SchedSeqInput *in = &j->in;
    in->p = *p;
    in->tokens = malloc((p->n_tokens ? p->n_tokens : 1) * sizeof *in->tokens);
    in->stop_tokens = malloc((p->n_stop_tokens ? p->n_stop_tokens : 1) * sizeof *in->stop_tokens);
    if (!in->tokens || !in->stop_tokens || gentext_init(&j->work.text, p->stop, p->n_stop))
        return KG_ENOMEM;
    memcpy(in->tokens, p->tokens, p->n_tokens * sizeof *in->tokens);
    if (p->n_stop_tokens)
        memcpy(in->stop_tokens, p->stop_tokens, p->n_stop_tokens * sizeof *in->stop_tokens);
    in->p.tokens = in->tokens;
    in->p.stop_tokens = in->stop_tokens;
    in->p.stop = (const char *const *)j->work.text.stop;
    in->p.penalties.bias = NULL; // the penalty state has its own copy
    return KG_OK;
}

int sched_seq_new(SchedSeq **out, size_t V, const SchedParams *p, void (*notify)(void *), void *ctx,
                  char *err) {
    *out = NULL;
    SchedSeq *j = calloc(1, sizeof *j);
    if (!j) return kg_err(err, KG_ENOMEM, "out of memory");
    pthread_mutex_init(&j->out.mu, NULL);
    pthread_mutex_init(&j->notify_mu, NULL);
    j->notify = notify;
    j->ctx = ctx;
    atomic_init(&j->refs, 2);
    int rc = sched_seq_copy_input(j, p) ? kg_err(err, KG_ENOMEM, "out of memory") : KG_OK;
    KgPenalties pen = p->penalties;
    if (pen.repetition == 0) pen.repetition = 1; // a zero-initialized SchedParams: none
    if (!rc && p->kind == SCHED_GENERATE) rc = sampler_penalty_new(&j->work.penalty, V, &pen, err);
    if (!rc && j->work.penalty)
        rc = sampler_penalty_prompt(j->work.penalty, j->in.tokens, p->n_tokens, err);
    if (rc) {
        sched_seq_free(j);
        return rc;
    }
    *out = j;
    return KG_OK;
}

void sched_seq_notify(SchedSeq *j) {
    pthread_mutex_lock(&j->notify_mu);
    if (j->notify) j->notify(j->ctx);
    pthread_mutex_unlock(&j->notify_mu);
}

// Appends t, taking its text and candidates (freed on failure).
static int sched_seq_push(SchedSeq *j, const SchedToken *t) {
    SchedSeqOutput *o = &j->out;
    pthread_mutex_lock(&o->mu);
    int rc = KG_OK;
    if (KG_GROW(o->tokens, &o->cap, o->n + 1, NULL)) {
        rc = KG_ENOMEM;
        goto end;
    }
    o->tokens[o->n++] = *t;
end:
    pthread_mutex_unlock(&o->mu);
    if (rc) {
        free((char *)t->text);
        free((KgCandidate *)t->candidates);
        sched_explain_free((SchedExplain *)t->explain);
    }
    return rc;
}

int sched_seq_emit(SchedSeq *j, int id, float logprob, char *text, size_t text_len,
                   KgCandidate *candidates, size_t n_candidates) {
    return sched_seq_push(j, &(SchedToken){.id = id,
                                           .logprob = logprob,
                                           .text = text,
                                           .text_len = text_len,
                                           .candidates = candidates,
                                           .n_candidates = n_candidates});
}

int sched_seq_emit_score(SchedSeq *j, int id, float logprob, char *text, size_t text_len,
                         KgCandidate *candidates, size_t n_candidates, size_t rank) {
    return sched_seq_push(j, &(SchedToken){.id = id,
                                           .logprob = logprob,
                                           .text = text,
                                           .text_len = text_len,
                                           .candidates = candidates,
                                           .n_candidates = n_candidates,
                                           .prompt = 1,
                                           .rank = rank});
}

int sched_seq_emit_answer(SchedSeq *j, KgCandidate *candidates, size_t n_candidates, double entropy,
                          SchedExplain *explain) {
    return sched_seq_push(j, &(SchedToken){.id = -1,
                                           .candidates = candidates,
                                           .n_candidates = n_candidates,
                                           .entropy = entropy,
                                           .explain = explain});
}

void sched_seq_finish(SchedSeq *j, SchedState state, int code, const char *msg) {
    SchedSeqOutput *o = &j->out;
    pthread_mutex_lock(&o->mu);
    if (o->state == SCHED_RUNNING) {
        o->state = state;
        o->err_code = code;
        if (msg) snprintf(o->err, sizeof o->err, "%s", msg);
        double t = kg_now_ms();
        o->stats.generated_tokens = j->work.n_gen;
        o->stats.total_ms = t - j->in.t_submit;
        if (j->work.t_first > 0) o->stats.decode_ms = t - j->work.t_first;
    }
    pthread_mutex_unlock(&o->mu);
}

size_t sched_seq_replay_target(const SchedSeq *j) {
    if (j->work.phase == SCHED_PREFILL) return j->work.n_fed;
    return j->in.p.n_tokens + j->work.n_gen - 1; // next_id, the last generated, is fed next
}

const int *sched_seq_tokens_at(const SchedSeq *j, size_t pos, size_t *run) {
    const size_t n = j->in.p.n_tokens;
    if (pos < n) {
        *run = n - pos;
        return j->in.tokens + pos;
    }
    *run = j->work.n_gen - (pos - n);
    return j->work.gen + (pos - n);
}

SchedState sched_seq_state(SchedSeq *j) {
    pthread_mutex_lock(&j->out.mu);
    SchedState state = j->out.state;
    pthread_mutex_unlock(&j->out.mu);
    return state;
}

// --- the caller's side (sched.h) ---

size_t sched_seq_read(SchedSeq *j, SchedToken *out, size_t cap, SchedState *state) {
    SchedSeqOutput *o = &j->out;
    pthread_mutex_lock(&o->mu);
    size_t n = 0;
    while (n < cap && o->n_read < o->n)
        out[n++] = o->tokens[o->n_read++];
    // report the final state only once every output entry has been read
    *state = o->n_read < o->n ? SCHED_RUNNING : o->state;
    pthread_mutex_unlock(&o->mu);
    return n;
}

int sched_seq_error(SchedSeq *j, char *err) {
    pthread_mutex_lock(&j->out.mu);
    int code = j->out.err_code;
    kg_err(err, code, "%s", j->out.err);
    pthread_mutex_unlock(&j->out.mu);
    return code;
}

void sched_seq_stats(SchedSeq *j, SchedStats *stats) {
    pthread_mutex_lock(&j->out.mu);
    *stats = j->out.stats;
    pthread_mutex_unlock(&j->out.mu);
}

void sched_seq_cancel(SchedSeq *j) { atomic_store(&j->cancelled, 1); }

void sched_seq_release(SchedSeq *j) {
    atomic_store(&j->cancelled, 1);
    pthread_mutex_lock(&j->notify_mu);
    j->notify = NULL;
    pthread_mutex_unlock(&j->notify_mu);
    sched_seq_unref(j);
}
