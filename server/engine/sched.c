// sched.c — the engine thread (sched.h): the queue and admission, prefix reuse, each step's
// forward (plan, forward, consume), what a job does with its logits (answer, score, sample),
// and speculative next clicks when idle.
//
// Beside it: a job's record and the caller's reads (sched_job.c), which rows go into a step
// (the batch planner, sched_plan.c), a generation's text, stop strings and held-back bytes
// (gentext.c), the prefix cache (pcache.c), a next-token answer's lens and attention view
// (sched_explain.c).
#include "sched.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pcache.h"
#include "sched_explain.h"
#include "sched_job.h"
#include "sched_plan.h"

#define SCHED_SPEC_CANDIDATES 10 // precomputed after a next-token answer (the Explorer's 10)

// The guess run when idle: the last answered prompt's best candidates, one token further.
typedef struct {
    int *prompt; // (n) the tokens of the last answered next-token job; NULL: no guess
    size_t n;
    int candidates[SCHED_SPEC_CANDIDATES];
    size_t n_candidates;
    KvCache kv[SCHED_SPEC_CANDIDATES]; // each candidate's copy of the prompt's KV (kept)
} Speculation;

// What the HTTP threads and the engine thread share: every field under mu.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    SchedJob *queue_head, *queue_tail;
    size_t n_queued;
    size_t n_busy; // jobs taken off the queue and not yet dropped (at most max_batch)
    int stopping;
    double stop_deadline;
    SchedGauges gauges;
} SchedShared;

struct Sched {
    const Gpt2 *m;
    const Tokenizer *tok;
    // ids the model and the tokenizer share: a model's rows past the tokenizer's vocabulary
    // (padding) are never proposed, so every answer can be spelled
    size_t V;
    SchedOptions opt;
    Gpt2State st;
    PCache *cache;
    SchedJob **active; // (max_batch) the jobs being advanced, in admission order
    size_t n_active;
    Gpt2Seq *seqs;          // (max(max_batch, SCHED_SPEC_CANDIDATES)) a step's sequences
    SchedPlanEntry *plan;   // (max_batch) each sequence's job and first logits row
    Gpt2Capture **captures; // (max_batch) each sequence's capture in a step, or NULL
    Speculation spec;
    float *penalized; // (V) a row with a job's penalties and UTF-8 mask, sampled instead of the raw
    SamplerUtf8 utf8; // the tokenizer's byte tokens, for utf8_strict (sampler_utf8.h)
    pthread_t thread;
    int joined; // the engine thread was joined (sched_stop); only its owner reads it
    SchedShared shared;
};

static const float *sched_logits_row(const Sched *s, size_t row) {
    return s->st.logits_host + row * s->m->config.vocab_size;
}

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

static void sched_set_cached(SchedJob *j, size_t n) {
    pthread_mutex_lock(&j->out.mu); // the caller may read the figures at any time
    j->out.stats.cached_tokens = n;
    pthread_mutex_unlock(&j->out.mu);
}

// ---------------------------------------------------------------------------------------
// What a job does with its logits

// Remembers p's prompt and its best candidates (of its answer): the next click is probably
// one of them. On OOM the previous guess stays.
static void sched_spec_remember(Sched *s, const SchedParams *p, const KgCandidate *candidates) {
    Speculation *sp = &s->spec;
    int *copy = candidates ? malloc(p->n_tokens * sizeof *copy) : NULL;
    if (!copy) return;
    free(sp->prompt);
    sp->prompt = copy;
    sp->n = p->n_tokens;
    memcpy(copy, p->tokens, p->n_tokens * sizeof *copy);
    sp->n_candidates =
        p->n_candidates < SCHED_SPEC_CANDIDATES ? p->n_candidates : SCHED_SPEC_CANDIDATES;
    for (size_t i = 0; i < sp->n_candidates; i++)
        sp->candidates[i] = candidates[i].id;
}

static void sched_answer_next_token(Sched *s, SchedJob *j, const float *logits) {
    const SchedParams *p = &j->in.p;
    int oom, rc;
    char err[KG_ERRLEN];
    KgCandidate *candidates = sched_candidates(s, logits, p->n_candidates, p->temperature, &oom);
    // the exact entropy needs the whole row, which only the engine holds: once per answer
    double entropy = logits_entropy(logits, s->V, p->temperature > 0 ? p->temperature : 1.0f);
    SchedExplain *explain = oom ? NULL : sched_explain_make(s->m, s->V, j, candidates, &rc, err);
    if (!oom && rc) {
        free(candidates);
        sched_job_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    if (oom || sched_job_emit_answer(j, candidates, p->n_candidates, entropy, explain)) {
        sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    if (p->speculate && s->opt.speculate) sched_spec_remember(s, p, candidates);
    sched_job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

// Draws a generation's next token from logits (its penalties and, with utf8_strict, the UTF-8
// mask applied to a copy) and counts it in the penalties and the mask's state. The id, or -1
// with the job finished.
static int sched_sample(Sched *s, SchedJob *j, const float *logits) {
    SchedJobWork *w = &j->work;
    const float *row = logits; // the raw row stays: the reported logprobs are its
    if (sampler_penalty_active(w->penalty)) {
        sampler_penalty_apply(w->penalty, s->penalized, logits);
        row = s->penalized;
    }
    int strict = j->in.p.utf8_strict && s->utf8.any;
    if (strict) {
        sampler_utf8_mask(&s->utf8, &w->utf8, s->penalized, row, s->V);
        row = s->penalized;
    }
    int id = sampler_sample(w->sampler, row);
    if (id < 0) { // every logit NaN: nothing to draw (a broken model; never an index)
        sched_job_finish(j, SCHED_DONE_ERROR, KG_EINTERNAL, "the model's logits are not numbers");
        return -1;
    }
    char err[KG_ERRLEN];
    if (w->penalty && sampler_penalty_accept(w->penalty, id, err)) {
        sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
        return -1;
    }
    if (strict) sampler_utf8_accept(&w->utf8, tok_byte(s->tok, id));
    return id;
}

// How id ends the generation without being part of it: SCHED_DONE_EOS (the end-of-text
// token, unless ignored), SCHED_DONE_STOP (a stop token), else SCHED_RUNNING.
static SchedState sched_end_token(const Sched *s, const SchedJob *j, int id) {
    const SchedParams *p = &j->in.p;
    for (size_t i = 0; i < p->n_stop_tokens; i++)
        if (id == p->stop_tokens[i]) return SCHED_DONE_STOP;
    int eos = s->m->config.eos_id >= 0 ? s->m->config.eos_id : tok_special(s->tok).eos;
    return id == eos && !p->ignore_eos ? SCHED_DONE_EOS : SCHED_RUNNING;
}

// The generation ends before a token: what was held back goes out as a last entry.
static void sched_end_text(SchedJob *j, SchedState state) {
    GenText *g = &j->work.text;
    const char *t;
    size_t tl, len;
    char *rest = NULL;
    if (!tok_stream_flush(j->work.stream, &t, &tl, NULL) && !gentext_append(g, t, tl) &&
        (rest = gentext_release(g, g->text.len, &len)) && len)
        sched_job_emit(j, -1, 0.0f, rest, len, NULL, 0);
    else
        free(rest);
    sched_job_finish(j, state, KG_OK, NULL);
}

// Emits generated token id (its text up to a stop string, less what may start one) and ends
// the job at a stop string or at the length limit.
static void sched_emit_generated(Sched *s, SchedJob *j, int id, float logprob,
                                 KgCandidate *candidates) {
    GenText *g = &j->work.text;
    long stop = gentext_find_stop(g);
    int done_len = j->work.n_gen >= j->in.p.max_tokens || j->work.kv.len + 1 > s->m->config.n_ctx;
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
    if (!text || sched_job_emit(j, id, logprob, text, len, candidates, j->in.p.n_logprobs)) {
        sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    if (stop >= 0)
        sched_job_finish(j, SCHED_DONE_STOP, KG_OK, NULL);
    else if (done_len)
        sched_job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

// Samples the next token of a generation from logits and emits its text.
static void sched_generate_step(Sched *s, SchedJob *j, const float *logits) {
    SchedJobWork *w = &j->work;
    if (w->t_first == 0) w->t_first = sched_job_now_ms();
    int id = sched_sample(s, j, logits);
    if (id < 0) return;
    SchedState end = sched_end_token(s, j, id);
    if (end != SCHED_RUNNING) {
        sched_end_text(j, end);
        return;
    }
    float logprob = (float)(logits[id] - logits_logsumexp(logits, s->V, 1.0f));
    int oom;
    KgCandidate *candidates = sched_candidates(s, logits, j->in.p.n_logprobs, 1.0f, &oom);
    const char *piece;
    size_t piece_len;
    char err[KG_ERRLEN];
    int rc = oom ? kg_err(err, KG_ENOMEM, "out of memory")
                 : tok_stream_push(w->stream, id, &piece, &piece_len, err);
    if (!rc && gentext_append(&w->text, piece, piece_len))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(candidates);
        sched_job_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    w->n_gen++;
    w->next_id = id;
    pthread_mutex_lock(&j->out.mu); // kept current, so a cancelled job still reports its tokens
    j->out.stats.generated_tokens = w->n_gen;
    pthread_mutex_unlock(&j->out.mu);
    sched_emit_generated(s, j, id, logprob, candidates);
}

// The prompt's logits are known: answer, or sample the first generated token.
static void sched_prompt_done(Sched *s, SchedJob *j, const float *logits) {
    j->work.phase = SCHED_DECODE;
    pthread_mutex_lock(&j->out.mu);
    j->out.stats.prefill_ms = sched_job_now_ms() - j->work.t_start;
    pthread_mutex_unlock(&j->out.mu);
    if (j->in.p.kind == SCHED_NEXT_TOKEN)
        sched_answer_next_token(s, j, logits);
    else if (j->in.p.max_tokens == 0) // scoring only
        sched_job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
    else
        sched_generate_step(s, j, logits);
}

// Emits prompt token id's score: its logprob and rank under logits (NULL for the first token,
// which nothing predicts) and the n_logprobs candidates there. 0, or an error code with the job
// finished.
static int sched_score_emit(Sched *s, SchedJob *j, int id, const float *logits) {
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
    if (!rc && sched_job_emit_score(j, id, lp, text, len, candidates, n_candidates, rank))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    else if (rc) {
        free(text);
        free(candidates);
    }
    if (rc) sched_job_finish(j, SCHED_DONE_ERROR, rc, err);
    return rc;
}

// A scored chunk of j's prompt (n rows of logits from row, after fed prompt tokens): row r
// predicts prompt token fed + r + 1. 1 while the job waits for more of its prompt (or has
// failed), 0 once the prompt is complete: its last row then answers as any prompt's does.
static int sched_score_chunk(Sched *s, SchedJob *j, size_t fed, size_t n, size_t row) {
    const int *tokens = j->in.p.tokens;
    int failed = 0;
    for (size_t r = 0; r + 1 < n && !failed; r++)
        failed = sched_score_emit(s, j, tokens[fed + r + 1], sched_logits_row(s, row + r)) != 0;
    if (!failed && fed + n < j->in.p.n_tokens)
        failed = sched_score_emit(s, j, tokens[fed + n], sched_logits_row(s, row + n - 1)) != 0;
    return failed || j->work.n_fed < j->in.p.n_tokens;
}

// ---------------------------------------------------------------------------------------
// Admission

// A generation's sampler and text stream, the stream and the UTF-8 mask's state started from
// the prompt's last token, or its last byte tokens (tok_stream_prime: a prompt ending inside a
// character goes on with it; kogpt2 generate starts the same way). KG_OK, or KG_ENOMEM with the
// job finished.
static int sched_start_generation(Sched *s, SchedJob *j) {
    const SchedParams *p = &j->in.p;
    SchedJobWork *w = &j->work;
    w->sampler = sampler_new(s->V, p->temperature, p->top_k, p->top_p, p->seed);
    w->stream = tok_stream_new(s->tok);
    size_t from = 0;
    char err[KG_ERRLEN];
    int rc = !w->sampler || !w->stream
                 ? KG_ENOMEM
                 : tok_stream_prime(w->stream, p->tokens, p->n_tokens, &from, err);
    for (size_t i = from; i < p->n_tokens && !rc; i++)
        sampler_utf8_accept(&w->utf8, tok_byte(s->tok, p->tokens[i]));
    if (rc) {
        sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return KG_ENOMEM;
    }
    return KG_OK;
}

// Starts j's KV from the longest cached prefix of its prompt. 1 when that answered the job
// (a next-token prompt cached whole) or finished it.
static int sched_reuse_prefix(Sched *s, SchedJob *j) {
    const SchedParams *p = &j->in.p;
    char err[KG_ERRLEN];
    size_t match;
    const PCacheEntry *e = pcache_lookup(s->cache, p->tokens, p->n_tokens, &match);
    int explain = p->lens || p->attention; // its passes must hold what it shows
    if (e && match == p->n_tokens && e->n == match && !explain) { // the whole prompt is cached
        sched_set_cached(j, match);
        if (p->kind == SCHED_NEXT_TOKEN) {
            sched_prompt_done(s, j, e->logits);
            return 1;
        }
        if (kv_copy(&j->work.kv, &e->kv, match, s->m, err)) {
            sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
            return 1;
        }
        j->work.n_fed = match;
        sched_prompt_done(s, j, e->logits);
        return j->out.state != SCHED_RUNNING; // (only this thread writes it)
    }
    if (match > p->n_tokens - 1) match = p->n_tokens - 1; // the last token must run
    if (p->attention) match = 0;                          // and every key the view reads
    if (e && match && kv_copy(&j->work.kv, &e->kv, match, s->m, err)) match = 0;
    j->work.n_fed = match;
    sched_set_cached(j, match);
    return 0;
}

// A job leaves the queue: its figures so far, its sampler and stream, the longest cached
// prefix. 1 when the job is already done (answered from the cache alone, or failed).
static int sched_admit(Sched *s, SchedJob *j) {
    const SchedParams *p = &j->in.p;
    j->work.t_start = sched_job_now_ms();
    pthread_mutex_lock(&j->out.mu); // the caller may read the figures at any time
    j->out.stats.queue_ms = j->work.t_start - j->in.t_submit;
    j->out.stats.prompt_tokens = p->n_tokens;
    pthread_mutex_unlock(&j->out.mu);
    if (p->kind == SCHED_GENERATE && sched_start_generation(s, j)) return 1;
    if ((p->lens || p->attention) && sched_explain_capture(s->m, j)) return 1;
    if (p->score_prompt) { // every position's logits are needed: no cached prefix
        if (!(j->work.prompt_stream = tok_stream_new(s->tok))) {
            sched_job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
            return 1;
        }
        return sched_score_emit(s, j, p->tokens[0], NULL) != 0;
    }
    return sched_reuse_prefix(s, j);
}

// A finished job leaves the engine: its cache is freed, its figures counted, its owner woken.
static void sched_drop(Sched *s, SchedJob *j) {
    kv_free(&j->work.kv, s->m);
    sched_explain_release(s->m, j);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.n_busy--;
    s->shared.gauges.cached_tokens_total += j->out.stats.cached_tokens;
    s->shared.gauges.generated_tokens_total += j->work.n_gen;
    pthread_mutex_unlock(&s->shared.mu);
    sched_job_notify(j);
    sched_job_unref(j);
}

// Moves queued jobs into free batch slots.
static void sched_admit_queued(Sched *s) {
    SchedShared *sh = &s->shared;
    pthread_mutex_lock(&sh->mu);
    while (sh->queue_head && s->n_active < s->opt.max_batch) {
        SchedJob *j = sh->queue_head;
        sh->queue_head = j->next_queued;
        if (!sh->queue_head) sh->queue_tail = NULL;
        sh->n_queued--;
        sh->n_busy++; // counted from here until sched_drop, so sched_submit never over-admits
        pthread_mutex_unlock(&sh->mu);
        if (atomic_load(&j->cancelled)) sched_job_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        if (j->out.state == SCHED_RUNNING && !sched_admit(s, j))
            s->active[s->n_active++] = j;
        else
            sched_drop(s, j); // cancelled, or answered from the cache alone
        pthread_mutex_lock(&sh->mu);
    }
    pthread_mutex_unlock(&sh->mu);
}

// Drops finished and cancelled jobs from the batch.
static void sched_retire(Sched *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->n_active; i++) {
        SchedJob *j = s->active[i];
        if (atomic_load(&j->cancelled)) sched_job_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        if (sched_job_state(j) == SCHED_RUNNING)
            s->active[kept++] = j;
        else
            sched_drop(s, j);
    }
    s->n_active = kept;
}

// ---------------------------------------------------------------------------------------
// A step: plan, forward, consume

// Hands entry e of the step's plan its sequence q's results (rc: the forward's error code,
// err its message): the prompt advances, then the job scores, answers or samples.
static void sched_consume(Sched *s, const SchedPlanEntry *e, const Gpt2Seq *q, int rc,
                          const char *err) {
    SchedJob *j = e->job;
    if (rc) {
        sched_job_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    int prompt = j->work.phase == SCHED_PREFILL;
    size_t fed = j->work.n_fed, row = e->first_row;
    if (prompt) j->work.n_fed += q->n;
    if (q->logits == GPT2_LOGITS_NONE) return;
    if (q->logits == GPT2_LOGITS_ALL) {
        if (sched_score_chunk(s, j, fed, q->n, row)) {
            sched_job_notify(j);
            return;
        }
        row += q->n - 1; // the last prompt position: its logits answer as below
    }
    const float *logits = sched_logits_row(s, row);
    if (prompt)
        sched_prompt_done(s, j, logits);
    else
        sched_generate_step(s, j, logits);
    sched_job_notify(j);
    // after the answer: the cache's copy of the prompt's KV only serves later requests
    if (prompt)
        pcache_insert(s->cache, j->in.p.tokens, j->in.p.n_tokens, &j->work.kv, logits, NULL);
}

// One forward over the rows the planner picks from every active job.
static void sched_step(Sched *s) {
    size_t rows, n_seq = sched_plan_step(s->active, s->n_active, s->opt.prefill_chunk, s->seqs,
                                         s->plan, &rows);
    char err[KG_ERRLEN];
    for (size_t i = 0; i < n_seq; i++) // what the lens and attention views keep, where asked
        s->captures[i] = s->plan[i].job->work.capture;
    s->st.captures = s->captures;
    int rc = gpt2_forward(s->m, &s->st, s->seqs, n_seq, err);
    s->st.captures = NULL; // (the speculative pass has none)
    for (size_t i = 0; i < n_seq; i++)
        sched_consume(s, &s->plan[i], &s->seqs[i], rc, err);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.gauges.steps++;
    s->shared.gauges.last_batch_rows = rows;
    pthread_mutex_unlock(&s->shared.mu);
}

// ---------------------------------------------------------------------------------------
// Speculation

// 1 while a job waits in the queue or the engine is stopping. Asked between the layers of a
// speculative pass (Gpt2State.cancel).
static int sched_work_waiting(void *arg) {
    Sched *s = arg;
    pthread_mutex_lock(&s->shared.mu);
    int waiting = s->shared.queue_head || s->shared.stopping;
    pthread_mutex_unlock(&s->shared.mu);
    return waiting;
}

// The speculative batch into s->seqs: one sequence per candidate not cached yet, each on a
// copy of the prompt's KV (entry e; ext holds the prompt and room for one token). Its size;
// *rc is KG_ECANCEL when a job arrived meanwhile.
static size_t sched_spec_batch(Sched *s, const PCacheEntry *e, int *ext, int *rc) {
    Speculation *sp = &s->spec;
    size_t n = sp->n, n_seq = 0;
    for (size_t i = 0; i < sp->n_candidates; i++) {
        if (sched_work_waiting(s)) { // each copy below is a whole prompt's KV
            *rc = KG_ECANCEL;
            break;
        }
        ext[n] = sp->candidates[i];
        size_t match;
        const PCacheEntry *hit = pcache_lookup(s->cache, ext, n + 1, &match);
        if (hit && match == n + 1 && hit->n == n + 1) continue; // already cached
        if (kv_copy(&sp->kv[n_seq], &e->kv, n, s->m, NULL)) break;
        s->seqs[n_seq] = (Gpt2Seq){&sp->kv[n_seq], &sp->candidates[i], 1, GPT2_LOGITS_LAST};
        n_seq++;
    }
    return n_seq;
}

// Idle: run the last answer's best candidates one token further, as one batch, and cache
// their logits, so that clicking any of them is answered from the cache. The guess gives way
// to a job that arrives meanwhile, which would otherwise wait for the rest of a pass over the
// weights (on the CPU as long as a 20-token prompt's own prefill); it is kept, and runs again
// once the engine is idle.
static void sched_speculate(Sched *s) {
    Speculation *sp = &s->spec;
    size_t n = sp->n, match;
    int rc = KG_OK;
    const PCacheEntry *e = pcache_lookup(s->cache, sp->prompt, n, &match);
    int *ext = e && match == n && e->n == n && n + 1 <= s->m->config.n_ctx
                   ? malloc((n + 1) * sizeof *ext)
                   : NULL;
    if (ext) {
        memcpy(ext, sp->prompt, n * sizeof *ext);
        size_t n_seq = sched_spec_batch(s, e, ext, &rc);
        s->st.cancel = sched_work_waiting;
        if (!rc && n_seq) rc = gpt2_forward(s->m, &s->st, s->seqs, n_seq, NULL);
        s->st.cancel = NULL; // the jobs' own steps always run to the end
        for (size_t i = 0; !rc && i < n_seq; i++) {
            ext[n] = *s->seqs[i].tokens;
            pcache_insert(s->cache, ext, n + 1, &sp->kv[i], sched_logits_row(s, i), NULL);
        }
        free(ext);
    }
    if (rc == KG_ECANCEL) return; // kept for the next idle moment
    free(sp->prompt);             // done (or not worth it): forget the guess, keep the KV buffers
    sp->prompt = NULL;
    sp->n = sp->n_candidates = 0;
}

// ---------------------------------------------------------------------------------------
// The engine thread

static int sched_should_sleep(const Sched *s) {
    return !s->shared.queue_head && !s->n_active && !(s->spec.prompt && s->opt.speculate) &&
           !s->shared.stopping;
}

static int sched_queue_empty(Sched *s) {
    pthread_mutex_lock(&s->shared.mu);
    int empty = !s->shared.queue_head;
    pthread_mutex_unlock(&s->shared.mu);
    return empty;
}

static void sched_publish_cache_gauges(Sched *s) {
    PCacheStats cs;
    pcache_stats(s->cache, &cs);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.gauges.cache_entries = cs.entries;
    s->shared.gauges.cache_bytes = cs.bytes;
    s->shared.gauges.cache_capacity = cs.capacity;
    pthread_mutex_unlock(&s->shared.mu);
}

static void *sched_main(void *arg) {
    Sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->shared.mu);
        while (sched_should_sleep(s))
            pthread_cond_wait(&s->shared.wake, &s->shared.mu);
        int stopping = s->shared.stopping;
        int timed_out = stopping && sched_job_now_ms() > s->shared.stop_deadline;
        pthread_mutex_unlock(&s->shared.mu);
        if (timed_out) // past the drain timeout: whatever is left is cancelled
            for (size_t i = 0; i < s->n_active; i++)
                atomic_store(&s->active[i]->cancelled, 1);
        sched_admit_queued(s);
        sched_retire(s);
        if (s->n_active) {
            sched_step(s);
            sched_retire(s);
        } else if (s->spec.prompt && s->opt.speculate && !stopping) {
            sched_speculate(s);
        } else if (stopping && sched_queue_empty(s)) {
            return NULL;
        }
        sched_publish_cache_gauges(s);
    }
}

// ---------------------------------------------------------------------------------------
// Public API

// Frees what sched_start made (the thread aside).
static void sched_free_memory(Sched *s) {
    for (int i = 0; i < SCHED_SPEC_CANDIDATES; i++)
        kv_free(&s->spec.kv[i], s->m);
    free(s->spec.prompt);
    pcache_free(s->cache);
    free(s->seqs);
    free(s->penalized);
    free(s->plan);
    free(s->captures);
    free(s->active);
    gpt2_state_free(&s->st, s->m);
    free(s);
}

// Sequences one forward may hold: a step's (one per active job) or the speculation's.
static size_t sched_max_seqs(const SchedOptions *opt) {
    return opt->max_batch > SCHED_SPEC_CANDIDATES ? opt->max_batch : SCHED_SPEC_CANDIDATES;
}

// The prefix cache and the batch arrays; 0 on OOM (sched_free_memory frees what was made).
static int sched_alloc_buffers(Sched *s) {
    s->cache = pcache_new(s->m, s->opt.cache_mb << 20);
    s->seqs = calloc(sched_max_seqs(&s->opt), sizeof *s->seqs);
    s->plan = calloc(s->opt.max_batch, sizeof *s->plan);
    s->captures = calloc(s->opt.max_batch, sizeof *s->captures);
    s->penalized = malloc(s->m->config.vocab_size * sizeof *s->penalized);
    s->active = calloc(s->opt.max_batch, sizeof *s->active);
    return s->cache && s->seqs && s->plan && s->captures && s->active && s->penalized;
}

int sched_start(Sched **out, const Gpt2 *m, const Tokenizer *tok, const SchedOptions *opt,
                char *err) {
    *out = NULL;
    if (!opt->max_batch || !opt->prefill_chunk || !opt->max_prompt ||
        opt->max_prompt > m->config.n_ctx)
        return kg_err(err, KG_EINVAL,
                      "engine: need max_batch, prefill_chunk >= 1 and 1 <= ctx-size <= %zu",
                      m->config.n_ctx);
    Sched *s = calloc(1, sizeof *s);
    if (!s) return kg_err(err, KG_ENOMEM, "engine: out of memory");
    s->m = m;
    s->tok = tok;
    s->V = m->config.vocab_size < tok_vocab_size(tok) ? m->config.vocab_size : tok_vocab_size(tok);
    s->opt = *opt;
    int byte_id[256];
    tok_byte_ids(tok, s->V, byte_id);
    sampler_utf8_init(&s->utf8, byte_id);
    size_t max_seqs = sched_max_seqs(opt); // the planner's rows (sched_plan.h) or the guess's
    int rc = gpt2_state_init(&s->st, m, opt->prefill_chunk + max_seqs,
                             max_seqs + SCHED_PLAN_SCORE_ROWS, err);
    if (rc) {
        free(s);
        return rc;
    }
    s->st.cancel_ctx = s;
    if (!sched_alloc_buffers(s)) {
        sched_free_memory(s);
        return kg_err(err, KG_ENOMEM, "engine: out of memory");
    }
    pthread_mutex_init(&s->shared.mu, NULL);
    pthread_cond_init(&s->shared.wake, NULL);
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        pthread_mutex_destroy(&s->shared.mu);
        pthread_cond_destroy(&s->shared.wake);
        sched_free_memory(s);
        return kg_err(err, KG_ENOMEM, "engine: cannot start its thread");
    }
    *out = s;
    return KG_OK;
}

void sched_stop(Sched *s, int timeout_ms) {
    if (!s || s->joined) return;
    pthread_mutex_lock(&s->shared.mu);
    s->shared.stopping = 1;
    s->shared.stop_deadline = sched_job_now_ms() + timeout_ms;
    pthread_cond_signal(&s->shared.wake);
    pthread_mutex_unlock(&s->shared.mu);
    pthread_join(s->thread, NULL);
    s->joined = 1;
}

void sched_free(Sched *s) {
    if (!s) return;
    sched_stop(s, 0);
    pthread_mutex_destroy(&s->shared.mu);
    pthread_cond_destroy(&s->shared.wake);
    sched_free_memory(s);
}

static int sched_check_params(const Sched *s, const SchedParams *p, char *err) {
    if (p->n_tokens == 0) return kg_err(err, KG_EINVAL, "the prompt is empty");
    if (p->n_tokens > s->opt.max_prompt)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens %zu exceeds n_ctx %zu", p->n_tokens,
                      s->opt.max_prompt);
    for (size_t i = 0; i < p->n_tokens; i++)
        if (p->tokens[i] < 0 || (size_t)p->tokens[i] >= s->V)
            return kg_err(err, KG_ERANGE, "token id %d is outside the vocabulary (0..%zu)",
                          p->tokens[i], s->V - 1);
    if (p->n_candidates > s->V || p->n_logprobs > s->V)
        return kg_err(err, KG_EINVAL, "too many candidates");
    if (!(p->temperature >= 0) || (p->kind == SCHED_NEXT_TOKEN && !(p->temperature > 0)))
        return kg_err(err, KG_EINVAL, "temperature must be > 0");
    if (p->kind == SCHED_GENERATE && p->max_tokens == 0 && !p->score_prompt)
        return kg_err(err, KG_EINVAL, "max_tokens must be >= 1");
    // 0: a top_p in (0, 1] too small for a float, which acts as its limit (the best token)
    if (p->kind == SCHED_GENERATE && !(p->top_p >= 0 && p->top_p <= 1))
        return kg_err(err, KG_EINVAL, "top_p must be in (0, 1]");
    if (p->score_prompt && p->kind != SCHED_GENERATE)
        return kg_err(err, KG_EINVAL, "only a generation scores its prompt");
    if ((p->lens || p->attention) && p->kind != SCHED_NEXT_TOKEN)
        return kg_err(err, KG_EINVAL, "only a next-token answer has a lens or attention view");
    if (p->lens && (p->lens_k == 0 || p->lens_k > s->V))
        return kg_err(err, KG_EINVAL, "lens: top_k must be in 1..%zu", s->V);
    if (p->attention && p->attention_pos >= p->n_tokens)
        return kg_err(err, KG_ERANGE, "attention: position %zu is past the prompt's %zu tokens",
                      p->attention_pos, p->n_tokens);
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return kg_err(err, KG_EINVAL, "stop strings must not be empty");
    return KG_OK;
}

int sched_submit(Sched *s, const SchedParams *p, void (*notify)(void *ctx), void *ctx,
                 SchedJob **job, char *err) {
    *job = NULL;
    int rc = sched_check_params(s, p, err);
    if (rc) return rc;
    SchedJob *j;
    if ((rc = sched_job_new(&j, s->V, p, notify, ctx, err))) return rc;
    j->in.t_submit = sched_job_now_ms();
    SchedShared *sh = &s->shared;
    pthread_mutex_lock(&sh->mu);
    if (sh->stopping)
        rc = kg_err(err, KG_ECANCEL, "the server is shutting down");
    else if (sh->n_queued >= s->opt.max_queue + (s->opt.max_batch - sh->n_busy))
        rc = kg_err(err, KG_EBUSY, "the queue is full (%zu waiting)", sh->n_queued);
    if (rc) {
        pthread_mutex_unlock(&sh->mu);
        sched_job_free(j);
        return rc;
    }
    if (sh->queue_tail)
        sh->queue_tail->next_queued = j;
    else
        sh->queue_head = j;
    sh->queue_tail = j;
    sh->n_queued++;
    sh->gauges.prompt_tokens_total += p->n_tokens;
    pthread_cond_signal(&sh->wake);
    pthread_mutex_unlock(&sh->mu);
    *job = j;
    return KG_OK;
}

void sched_gauges(Sched *s, SchedGauges *g) {
    pthread_mutex_lock(&s->shared.mu);
    *g = s->shared.gauges;
    g->queued = s->shared.n_queued;
    g->running = s->shared.n_busy; // live, as queued is: a job admitted is never in neither
    pthread_mutex_unlock(&s->shared.mu);
}
