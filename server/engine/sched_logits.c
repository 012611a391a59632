// sched_logits.c — what a job does with its logits (sched_engine.h): a next-token answer, a
// scored prompt position, a sampled token and the text it completes; and a generation's
// sampler, stream and generated ids, made when the job is admitted. Runs on the engine thread.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_engine.h"
#include "sched_explain.h"

// Candidates (n_candidates of them, temperature t) as a malloc'd array, or NULL when
// n_candidates is 0. On the host, from the row gpt2_forward brought back: the sampler reads
// that whole row anyway (temperature, top-p, penalties), so one O(V) heap pass here is cheaper
// than another trip to the device and back.
static KgCandidate *sched_candidates(const Sched *s, const float *logits, size_t n_candidates,
                                     float t, int *oom) {
    *oom = 0;
    if (!n_candidates) return NULL;
    KgCandidate *c = malloc(n_candidates * sizeof *c);
    if (!c) {
        *oom = 1;
        return NULL;
    }
    logits_topk(logits, s->V, t > 0 ? t : 1.0f, n_candidates, c);
    return c;
}

static void sched_answer_next_token(Sched *s, SchedSeq *j, const float *logits) {
    const SchedParams *p = &j->in.p;
    int oom, rc;
    char err[KG_ERRLEN];
    KgCandidate *candidates = sched_candidates(s, logits, p->n_candidates, p->temperature, &oom);
    // the exact entropy needs the whole row, which only the engine holds: once per answer
    double entropy = logits_entropy(logits, s->V, p->temperature > 0 ? p->temperature : 1.0f);
    SchedExplain *explain = oom ? NULL : sched_explain_make(s->m, s->V, j, candidates, &rc, err);
    if (!oom && rc) {
        free(candidates);
        sched_seq_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    if (oom || sched_seq_emit_answer(j, candidates, p->n_candidates, entropy, explain)) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    if (p->speculate && s->opt.speculate) sched_spec_remember(s, p, candidates);
    sched_seq_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

// Draws a generation's next token from logits (its penalties and, with utf8_strict, the UTF-8
// mask applied to a copy in scratch) and counts it in the penalties and the mask's state. The
// id, or -1 with the job finished.
static int sched_sample(const Sched *s, SchedSeq *j, const float *logits, float *scratch) {
    SchedSeqWork *w = &j->work;
    const float *row = logits; // the raw row stays: the reported logprobs are its
    if (sampler_penalty_active(w->penalty)) {
        sampler_penalty_apply(w->penalty, scratch, logits);
        row = scratch;
    }
    int strict = j->in.p.utf8_strict && s->utf8.any;
    if (strict) {
        sampler_utf8_mask(&s->utf8, &w->utf8, scratch, row, s->V);
        row = scratch;
    }
    int id = sampler_sample(w->sampler, row);
    if (id < 0) { // every logit NaN: nothing to draw (a broken model; never an index)
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_EINTERNAL, "the model's logits are not numbers");
        return -1;
    }
    char err[KG_ERRLEN];
    if (w->penalty && sampler_penalty_accept(w->penalty, id, err)) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
        return -1;
    }
    if (strict) sampler_utf8_accept(&w->utf8, tok_byte(s->tok, id));
    return id;
}

// How id ends the generation without being part of it: SCHED_DONE_EOS (the end-of-text
// token, unless ignored), SCHED_DONE_STOP (a stop token), else SCHED_RUNNING.
static SchedState sched_end_token(const Sched *s, const SchedSeq *j, int id) {
    const SchedParams *p = &j->in.p;
    for (size_t i = 0; i < p->n_stop_tokens; i++)
        if (id == p->stop_tokens[i]) return SCHED_DONE_STOP;
    int eos = s->m->config.eos_id >= 0 ? s->m->config.eos_id : tok_special(s->tok).eos;
    return id == eos && !p->ignore_eos ? SCHED_DONE_EOS : SCHED_RUNNING;
}

// The generation ends before a token: what was held back goes out as a last entry.
static void sched_end_text(SchedSeq *j, SchedState state) {
    GenText *g = &j->work.text;
    const char *t;
    size_t tl, len;
    char *rest = NULL;
    if (!tok_stream_flush(j->work.stream, &t, &tl, NULL) && !gentext_append(g, t, tl) &&
        (rest = gentext_release(g, g->text.len, &len)) && len)
        sched_seq_emit(j, -1, 0.0f, rest, len, NULL, 0);
    else
        free(rest);
    sched_seq_finish(j, state, KG_OK, NULL);
}

// Emits generated token id (its text up to a stop string, less what may start one) and ends
// the job at a stop string or at the length limit.
static void sched_emit_generated(Sched *s, SchedSeq *j, int id, float logprob,
                                 KgCandidate *candidates) {
    GenText *g = &j->work.text;
    long stop = gentext_find_stop(g);
    // the context is full when feeding id would need a position past n_ctx
    int done_len = j->work.n_gen >= j->in.p.max_tokens ||
                   j->in.p.n_tokens + j->work.n_gen > s->m->config.n_ctx;
    size_t upto = stop >= 0 ? (size_t)stop : g->text.len - gentext_held_back(g);
    if (done_len && stop < 0) { // the end: nothing can match any more
        const char *t;
        size_t tl;
        if (!tok_stream_flush(j->work.stream, &t, &tl, NULL)) gentext_append(g, t, tl);
        upto = g->text.len;
    }
    size_t len;
    char *text = gentext_release(g, upto, &len);
    if (!text) free(candidates);
    if (!text || sched_seq_emit(j, id, logprob, text, len, candidates, j->in.p.n_logprobs)) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    if (stop >= 0)
        sched_seq_finish(j, SCHED_DONE_STOP, KG_OK, NULL);
    else if (done_len)
        sched_seq_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

void sched_draw(const Sched *s, SchedSeq *j, const float *logits, float *scratch, SchedDraw *d) {
    SchedSeqWork *w = &j->work;
    *d = (SchedDraw){.id = -1};
    if (w->t_first == 0) w->t_first = kg_now_ms();
    if ((d->id = sched_sample(s, j, logits, scratch)) < 0) return;
    d->logprob = (float)(logits[d->id] - logits_logsumexp(logits, s->V, 1.0f));
    int oom;
    d->candidates = sched_candidates(s, logits, j->in.p.n_logprobs, 1.0f, &oom);
    if (oom) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        d->id = -1;
    }
}

void sched_emit_draw(Sched *s, SchedSeq *j, SchedDraw *d) {
    SchedSeqWork *w = &j->work;
    if (d->id < 0) return;
    SchedState end = sched_end_token(s, j, d->id);
    if (end != SCHED_RUNNING) {
        free(d->candidates);
        sched_end_text(j, end);
        return;
    }
    const char *piece;
    size_t piece_len;
    char err[KG_ERRLEN];
    int rc = tok_stream_push(w->stream, d->id, &piece, &piece_len, err);
    if (!rc && gentext_append(&w->text, piece, piece_len))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(d->candidates);
        sched_seq_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    w->gen[w->n_gen++] = d->id; // gen_cap covers max_tokens and the context (admission)
    w->next_id = d->id;
    pthread_mutex_lock(&j->out.mu); // kept current, so a cancelled job still reports its tokens
    j->out.stats.generated_tokens = w->n_gen;
    pthread_mutex_unlock(&j->out.mu);
    sched_emit_generated(s, j, d->id, d->logprob, d->candidates);
}

void sched_generate_step(Sched *s, SchedSeq *j, const float *logits) {
    SchedDraw d;
    sched_draw(s, j, logits, s->penalized, &d); // thread 0's scratch: the engine thread's
    sched_emit_draw(s, j, &d);
}

// The prompt's logits are known: answer, or sample the first generated token.
void sched_prompt_done(Sched *s, SchedSeq *j, const float *logits) {
    j->work.phase = SCHED_DECODE;
    pthread_mutex_lock(&j->out.mu);
    j->out.stats.prefill_ms = kg_now_ms() - j->work.t_start;
    pthread_mutex_unlock(&j->out.mu);
    if (j->in.p.kind == SCHED_NEXT_TOKEN)
        sched_answer_next_token(s, j, logits);
    else if (j->in.p.max_tokens == 0) // scoring only
        sched_seq_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
    else
        sched_generate_step(s, j, logits);
}

// Emits prompt token id's score: its logprob and rank under logits (NULL for the first token,
// which nothing predicts) and the n_logprobs candidates there. 0, or an error code with the job
// finished.
int sched_score_emit(Sched *s, SchedSeq *j, int id, const float *logits) {
    const char *piece;
    size_t len;
    char err[KG_ERRLEN];
    size_t n_candidates = logits ? j->in.p.n_logprobs : 0;
    int rc = tok_stream_push(j->work.prompt_stream, id, &piece, &len, err), oom = 0;
    KgCandidate *candidates = !rc ? sched_candidates(s, logits, n_candidates, 1.0f, &oom) : NULL;
    char *text = !rc && !oom ? strndup(piece, len) : NULL;
    if (!rc && !text) rc = kg_err(err, KG_ENOMEM, "out of memory");
    float lp = logits ? (float)(logits[id] - logits_logsumexp(logits, s->V, 1.0f)) : NAN;
    size_t rank = logits ? logits_rank(logits, s->V, id) : 0;
    if (!rc && sched_seq_emit_score(j, id, lp, text, len, candidates, n_candidates, rank))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    else if (rc) {
        free(text);
        free(candidates);
    }
    if (rc) sched_seq_finish(j, SCHED_DONE_ERROR, rc, err);
    return rc;
}

// A scored chunk of j's prompt (n rows of logits from row, after fed prompt tokens): row r
// predicts prompt token fed + r + 1. 1 while the job waits for more of its prompt (or has
// failed), 0 once the prompt is complete: its last row then answers as any prompt's does.
int sched_score_chunk(Sched *s, SchedSeq *j, size_t fed, size_t n, size_t row) {
    const int *tokens = j->in.p.tokens;
    int failed = 0;
    for (size_t r = 0; r + 1 < n && !failed; r++)
        failed = sched_score_emit(s, j, tokens[fed + r + 1], sched_logits_row(s, row + r)) != 0;
    if (!failed && fed + n < j->in.p.n_tokens)
        failed = sched_score_emit(s, j, tokens[fed + n], sched_logits_row(s, row + n - 1)) != 0;
    return failed || j->work.n_fed < j->in.p.n_tokens;
}

// A generation's sampler, text stream and generated ids. The stream is primed with the last
// prompt token: the first generated piece then keeps its leading space, as it would inside the
// whole decoded text. A prompt that ends in byte tokens primes it (and the UTF-8 mask's state)
// with up to the last 4 of them instead: a prompt ending inside a character (the Explorer's
// clicked bytes) goes on with that character. KG_OK, or KG_ENOMEM with the job finished.
int sched_start_generation(Sched *s, SchedSeq *j) {
    const SchedParams *p = &j->in.p;
    SchedSeqWork *w = &j->work;
    w->sampler = sampler_new(s->V, p->temperature, p->top_k, p->top_p, p->seed);
    w->stream = tok_stream_new(s->tok);
    size_t from = p->n_tokens - 1; // a character has at most 4 bytes
    while (from > 0 && p->n_tokens - from < 4 && tok_byte(s->tok, p->tokens[from]) >= 0 &&
           tok_byte(s->tok, p->tokens[from - 1]) >= 0)
        from--;
    // every token the generation can draw: max_tokens, and never past the context
    size_t room = s->m->config.n_ctx - p->n_tokens + 1;
    w->gen_cap = p->max_tokens < room ? p->max_tokens : room;
    w->gen = malloc((w->gen_cap ? w->gen_cap : 1) * sizeof *w->gen);
    const char *t;
    size_t tl;
    char err[KG_ERRLEN];
    int rc = !w->sampler || !w->stream || !w->gen ? KG_ENOMEM : KG_OK;
    for (size_t i = from; i < p->n_tokens && !rc; i++) {
        rc = tok_stream_push(w->stream, p->tokens[i], &t, &tl, err);
        sampler_utf8_accept(&w->utf8, tok_byte(s->tok, p->tokens[i]));
    }
    if (rc) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return KG_ENOMEM;
    }
    return KG_OK;
}
