// sched.c — the engine thread: admission, continuous batching, prefix reuse, sampling,
// stop strings, and speculative next clicks. See sched.h for the contract.
#include "sched.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kg.h"
#include "pcache.h"

#define SCHED_SPEC_K 10 // candidates precomputed after a next-token answer (the Explorer's 10)
// Logit rows per step for prompts being scored (every position's logits): bounds the extra
// logits memory to SCHED_SCORE_ROWS * V floats.
#define SCHED_SCORE_ROWS 32

typedef enum { PHASE_PREFILL, PHASE_DECODE } Phase;

struct SchedJob {
    // set at submit, then read-only
    SchedParams p;
    int *tokens;     // the prompt (p.tokens points here)
    char **stop;     // copies of the stop strings
    size_t stop_max; // longest stop string
    double t_submit;

    // the engine thread's working state
    Phase phase;
    KvCache kv;
    size_t n_fed; // prompt tokens in kv
    Sampler *sampler;
    SamplerPenalty *penalty; // the job's repetition/frequency/presence counts and logit_bias
    int *stop_tokens;        // (p.n_stop_tokens) own copy
    TokStream *stream;
    TokStream *prompt_stream;            // score_prompt: the prompt's text, token by token
    char *text;                          // generated text so far (for stop strings)
    size_t text_len, text_cap, released; // released: bytes handed out in SchedTokens
    size_t n_gen;
    int next_id; // the token to feed in the next decode step
    double t_start, t_first;

    // shared with the caller: every field of `shared` is read and written under mu
    pthread_mutex_t mu;
    struct {
        SchedToken *out;
        size_t n_out, cap_out, n_read;
        SchedState state;
        int err_code;
        char err[KG_ERRLEN];
        SchedStats stats;
    } shared;

    // notify is cleared by release under notify_mu, so it never runs on a freed ctx
    pthread_mutex_t notify_mu;
    void (*notify)(void *ctx);
    void *ctx;

    atomic_int refs; // the caller's and the engine's
    atomic_int cancelled;
    SchedJob *next_queued;
};

// One entry of a step's batch: its job, and where its rows of logits start.
typedef struct {
    SchedJob *job;
    size_t first_row;
} SchedEntry;

typedef struct {
    int *prompt; // the tokens of the last answered next-token job
    size_t n;
    int cand[SCHED_SPEC_K];
    size_t n_cand;
} Speculation;

struct Sched {
    const Gpt2 *m;
    const Tokenizer *tok;
    // ids the model and the tokenizer share: a model's rows past the tokenizer's vocabulary
    // (padding) are never proposed, so every answer can be spelled
    size_t V;
    SchedOptions opt;
    Gpt2State st;
    PCache *cache;
    Gpt2Seq *seqs;     // (max_batch + SCHED_SPEC_K) the step's batch
    SchedEntry *batch; // (max_batch) each batch entry's job and first logits row
    SchedJob **active; // (max_batch)
    size_t n_active;
    KvCache spec_kv[SCHED_SPEC_K];
    Speculation spec;
    float *penalized; // (V) a row with a job's penalties applied, sampled instead of the raw

    pthread_t thread;
    pthread_mutex_t mu; // queue, stopping, gauges
    pthread_cond_t wake;
    SchedJob *queue_head, *queue_tail;
    size_t n_queued;
    size_t n_busy; // jobs taken off the queue and not yet dropped (at most max_batch)
    int stopping;
    int joined; // the engine thread was joined (sched_stop); only its owner reads it
    double stop_deadline;
    SchedGauges gauges;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ---------------------------------------------------------------------------------------
// Jobs

static void job_free(SchedJob *j) {
    for (size_t i = 0; i < j->shared.n_out; i++) {
        free((char *)j->shared.out[i].text);
        free((KgCandidate *)j->shared.out[i].candidates);
    }
    free(j->shared.out);
    for (size_t i = 0; i < j->p.n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    free(j->tokens);
    free(j->text);
    sampler_free(j->sampler);
    sampler_penalty_free(j->penalty);
    free(j->stop_tokens);
    tok_stream_free(j->stream);
    tok_stream_free(j->prompt_stream);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->notify_mu);
    free(j);
}

static void job_unref(SchedJob *j) {
    if (atomic_fetch_sub(&j->refs, 1) == 1) job_free(j);
}

// Copies what sched_submit was given and makes the penalty state (it counts the prompt);
// KG_OK and *out, or an error with err.
static int job_new(SchedJob **out, size_t V, const SchedParams *p, void (*notify)(void *),
                   void *ctx, char *err) {
    *out = NULL;
    SchedJob *j = calloc(1, sizeof *j);
    if (!j) return kg_err(err, KG_ENOMEM, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->notify_mu, NULL);
    j->p = *p;
    j->notify = notify;
    j->ctx = ctx;
    atomic_init(&j->refs, 2);
    j->tokens = malloc((p->n_tokens ? p->n_tokens : 1) * sizeof *j->tokens);
    j->stop = calloc(p->n_stop + 1, sizeof *j->stop);
    j->stop_tokens = malloc((p->n_stop_tokens ? p->n_stop_tokens : 1) * sizeof *j->stop_tokens);
    if (!j->tokens || !j->stop || !j->stop_tokens) goto oom;
    memcpy(j->tokens, p->tokens, p->n_tokens * sizeof *j->tokens);
    j->p.tokens = j->tokens;
    if (p->n_stop_tokens)
        memcpy(j->stop_tokens, p->stop_tokens, p->n_stop_tokens * sizeof *j->stop_tokens);
    j->p.stop_tokens = j->stop_tokens;
    KgPenalties pen = p->penalties;
    j->p.penalties.bias = NULL;                  // the penalty state has its own copy
    if (pen.repetition == 0) pen.repetition = 1; // a zero-initialized SchedParams: none
    int rc = p->kind == SCHED_GENERATE ? sampler_penalty_new(&j->penalty, V, &pen, err) : KG_OK;
    if (!rc && j->penalty) rc = sampler_penalty_prompt(j->penalty, j->tokens, p->n_tokens, err);
    if (rc) {
        j->p.n_stop = 0;
        job_free(j);
        return rc;
    }
    for (size_t i = 0; i < p->n_stop; i++) {
        if (!(j->stop[i] = strdup(p->stop[i]))) goto oom;
        size_t len = strlen(p->stop[i]);
        j->stop_max = len > j->stop_max ? len : j->stop_max;
    }
    j->p.stop = (const char *const *)j->stop;
    *out = j;
    return KG_OK;
oom:
    j->p.n_stop = 0; // only the copies made so far are freed
    for (size_t i = 0; j->stop && j->stop[i]; i++)
        free(j->stop[i]);
    job_free(j);
    return kg_err(err, KG_ENOMEM, "out of memory");
}

static void job_notify(SchedJob *j) {
    pthread_mutex_lock(&j->notify_mu);
    if (j->notify) j->notify(j->ctx);
    pthread_mutex_unlock(&j->notify_mu);
}

// Appends one output entry (takes ownership of text and cands). 0 or KG_ENOMEM.
static int job_emit_entry(SchedJob *j, int id, float logprob, char *text, size_t text_len,
                          KgCandidate *cands, size_t n_cands, int prompt) {
    pthread_mutex_lock(&j->mu);
    int rc = KG_OK;
    if (j->shared.n_out == j->shared.cap_out) {
        size_t cap = j->shared.cap_out ? 2 * j->shared.cap_out : 16;
        SchedToken *grown = realloc(j->shared.out, cap * sizeof *grown);
        if (!grown) {
            rc = KG_ENOMEM;
            goto end;
        }
        j->shared.out = grown;
        j->shared.cap_out = cap;
    }
    j->shared.out[j->shared.n_out++] =
        (SchedToken){id, logprob, text, text_len, cands, n_cands, prompt};
end:
    pthread_mutex_unlock(&j->mu);
    if (rc) {
        free(text);
        free(cands);
    }
    return rc;
}

static int job_emit(SchedJob *j, int id, float logprob, char *text, size_t text_len,
                    KgCandidate *cands, size_t n_cands) {
    return job_emit_entry(j, id, logprob, text, text_len, cands, n_cands, 0);
}

// Marks the job finished (once) with its final figures.
static void job_finish(SchedJob *j, SchedState state, int code, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (j->shared.state == SCHED_RUNNING) {
        j->shared.state = state;
        j->shared.err_code = code;
        if (msg) snprintf(j->shared.err, sizeof j->shared.err, "%s", msg);
        double t = now_ms();
        j->shared.stats.generated_tokens = j->n_gen;
        j->shared.stats.total_ms = t - j->t_submit;
        if (j->t_first > 0) j->shared.stats.decode_ms = t - j->t_first;
    }
    pthread_mutex_unlock(&j->mu);
}

// ---------------------------------------------------------------------------------------
// Generation: text, stop strings, held-back bytes

static int text_append(SchedJob *j, const char *s, size_t n) {
    if (j->text_len + n + 1 > j->text_cap) {
        size_t cap = (j->text_len + n + 1) * 2;
        char *grown = realloc(j->text, cap);
        if (!grown) return KG_ENOMEM;
        j->text = grown;
        j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, s, n);
    j->text_len += n;
    j->text[j->text_len] = '\0';
    return KG_OK;
}

// The first stop string in the generated text: its offset, or -1.
static long find_stop(const SchedJob *j) {
    long best = -1;
    // only the tail can hold a new match: the last stop_max bytes plus what was released
    size_t from = j->released > j->stop_max ? j->released - j->stop_max : 0;
    for (size_t i = 0; i < j->p.n_stop; i++) {
        const char *hit = strstr(j->text + from, j->stop[i]);
        if (hit && (best < 0 || hit - j->text < best)) best = hit - j->text;
    }
    return best;
}

// Bytes at the end of the text that could still grow into a stop string: they wait.
static size_t held_back(const SchedJob *j) {
    size_t hold = 0;
    for (size_t i = 0; i < j->p.n_stop; i++) {
        size_t ls = strlen(j->stop[i]);
        for (size_t k = ls - 1; k > hold && k >= 1; k--)
            if (k <= j->text_len && !memcmp(j->text + j->text_len - k, j->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

// Hands out text[released .. upto) as a malloc'd string.
static char *release_text(SchedJob *j, size_t upto, size_t *len) {
    *len = upto > j->released ? upto - j->released : 0;
    char *s = malloc(*len + 1);
    if (!s) return NULL;
    memcpy(s, j->text + j->released, *len);
    s[*len] = '\0';
    j->released += *len;
    return s;
}

// ---------------------------------------------------------------------------------------
// The engine

static const float *logits_row(const Sched *s, size_t row) {
    return s->st.logits_host + row * s->m->config.vocab_size;
}

// Candidates (n_cands of them, temperature t) as a malloc'd array, or NULL when n_cands is 0.
// On the host, from the row gpt2_forward brought back: the sampler reads that whole row anyway
// (temperature, top-p, penalties), so one O(V) heap pass here is cheaper than another trip
// to the device and back.
static KgCandidate *candidates_of(const Sched *s, const float *logits, size_t n_cands, float t,
                                  int *oom) {
    *oom = 0;
    if (!n_cands) return NULL;
    KgCandidate *c = malloc(n_cands * sizeof *c);
    if (!c) {
        *oom = 1;
        return NULL;
    }
    logits_topk(logits, s->V, t > 0 ? t : 1.0f, n_cands, c);
    return c;
}

static void answer_next_token(Sched *s, SchedJob *j, const float *logits) {
    int oom;
    KgCandidate *cands = candidates_of(s, logits, j->p.n_candidates, j->p.temperature, &oom);
    if (oom || job_emit(j, -1, 0.0f, NULL, 0, cands, j->p.n_candidates)) {
        job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    // remember the prompt and its best candidates: the next click is probably one of them
    int *copy = j->p.speculate && s->opt.speculate ? malloc(j->p.n_tokens * sizeof *copy) : NULL;
    if (copy && cands) {
        free(s->spec.prompt);
        s->spec.prompt = copy;
        s->spec.n = j->p.n_tokens;
        memcpy(copy, j->p.tokens, j->p.n_tokens * sizeof *copy);
        s->spec.n_cand = j->p.n_candidates < SCHED_SPEC_K ? j->p.n_candidates : SCHED_SPEC_K;
        for (size_t i = 0; i < s->spec.n_cand; i++)
            s->spec.cand[i] = cands[i].id;
    } else {
        free(copy);
    }
    job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

// Samples the next token of a generation from logits and emits its text.
static void generate_step(Sched *s, SchedJob *j, const float *logits) {
    const size_t V = s->V;
    if (j->t_first == 0) j->t_first = now_ms();
    const float *row = logits; // the raw row stays: the reported logprobs are its
    if (sampler_penalty_active(j->penalty)) {
        sampler_penalty_apply(j->penalty, s->penalized, logits);
        row = s->penalized;
    }
    int id = sampler_sample(j->sampler, row);
    if (id < 0) { // every logit NaN: nothing to draw (a broken model; never an index)
        job_finish(j, SCHED_DONE_ERROR, KG_EINTERNAL, "the model's logits are not numbers");
        return;
    }
    char err[KG_ERRLEN];
    if (j->penalty && sampler_penalty_accept(j->penalty, id, err)) {
        job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
        return;
    }
    int eos = s->m->config.eos_id >= 0 ? s->m->config.eos_id : tok_special(s->tok).eos;
    int stop_token = 0;
    for (size_t i = 0; i < j->p.n_stop_tokens; i++)
        stop_token |= id == j->p.stop_tokens[i];
    if ((id == eos && !j->p.ignore_eos) || stop_token) {
        size_t len;
        char *rest = NULL;
        const char *t;
        size_t tl;
        if (!tok_stream_flush(j->stream, &t, &tl, NULL) && !text_append(j, t, tl) &&
            (rest = release_text(j, j->text_len, &len)) && len)
            job_emit(j, -1, 0.0f, rest, len, NULL, 0);
        else
            free(rest);
        job_finish(j, stop_token ? SCHED_DONE_STOP : SCHED_DONE_EOS, KG_OK, NULL);
        return;
    }
    float logprob = (float)(logits[id] - logits_logsumexp(logits, V, 1.0f));
    int oom;
    KgCandidate *cands = candidates_of(s, logits, j->p.n_candidates, 1.0f, &oom);
    const char *piece;
    size_t piece_len;
    int rc = oom ? kg_err(err, KG_ENOMEM, "out of memory")
                 : tok_stream_push(j->stream, id, &piece, &piece_len, err);
    if (!rc && text_append(j, piece, piece_len)) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(cands);
        job_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    j->n_gen++;
    j->next_id = id;
    pthread_mutex_lock(&j->mu); // kept current, so a cancelled job still reports its tokens
    j->shared.stats.generated_tokens = j->n_gen;
    pthread_mutex_unlock(&j->mu);
    long stop = find_stop(j);
    int done_len = j->n_gen >= j->p.max_tokens || j->kv.len + 1 > s->m->config.n_ctx;
    size_t upto = stop >= 0 ? (size_t)stop : j->text_len - held_back(j);
    if (done_len && stop < 0) { // the end: nothing can match any more
        const char *t;
        size_t tl;
        if (!tok_stream_flush(j->stream, &t, &tl, NULL)) text_append(j, t, tl);
        upto = j->text_len;
    }
    size_t len;
    char *text = release_text(j, upto, &len);
    if (!text || job_emit(j, id, logprob, text, len, cands, j->p.n_candidates)) {
        job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
        return;
    }
    if (stop >= 0)
        job_finish(j, SCHED_DONE_STOP, KG_OK, NULL);
    else if (done_len)
        job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
}

// The prompt's logits are known: answer, or sample the first generated token.
static void prompt_done(Sched *s, SchedJob *j, const float *logits) {
    j->phase = PHASE_DECODE;
    pthread_mutex_lock(&j->mu);
    j->shared.stats.prefill_ms = now_ms() - j->t_start;
    pthread_mutex_unlock(&j->mu);
    if (j->p.kind == SCHED_NEXT_TOKEN)
        answer_next_token(s, j, logits);
    else if (j->p.max_tokens == 0) // scoring only
        job_finish(j, SCHED_DONE_LENGTH, KG_OK, NULL);
    else
        generate_step(s, j, logits);
}

// Emits prompt token `id`'s score: its logprob under logits (NULL for the first token,
// which nothing predicts) and the n_cands candidates there. 0, or an error code with the job
// finished.
static int score_emit(Sched *s, SchedJob *j, int id, const float *logits) {
    const char *piece;
    size_t len;
    char err[KG_ERRLEN];
    int rc = tok_stream_push(j->prompt_stream, id, &piece, &len, err), oom = 0;
    KgCandidate *cands =
        logits && !rc ? candidates_of(s, logits, j->p.n_candidates, 1.0f, &oom) : NULL;
    char *text = !rc && !oom ? strndup(piece, len) : NULL;
    if (!rc && !text) rc = kg_err(err, KG_ENOMEM, "out of memory");
    float lp = logits ? (float)(logits[id] - logits_logsumexp(logits, s->V, 1.0f)) : NAN;
    if (!rc && job_emit_entry(j, id, lp, text, len, cands, logits ? j->p.n_candidates : 0, 1))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    else if (rc) {
        free(text);
        free(cands);
    }
    if (rc) job_finish(j, SCHED_DONE_ERROR, rc, err);
    return rc;
}

// A job leaves the queue: set up its sampler and stream, reuse the longest cached prefix.
// Returns 1 when the job was answered from the cache alone.
static int admit(Sched *s, SchedJob *j) {
    j->t_start = now_ms();
    pthread_mutex_lock(&j->mu); // the caller may read the figures at any time
    j->shared.stats.queue_ms = j->t_start - j->t_submit;
    j->shared.stats.prompt_tokens = j->p.n_tokens;
    pthread_mutex_unlock(&j->mu);
    char err[KG_ERRLEN];
    if (j->p.kind == SCHED_GENERATE) {
        j->sampler = sampler_new(s->V, j->p.temperature, j->p.top_k, j->p.top_p, j->p.seed);
        j->stream = tok_stream_new(s->tok);
        const char *t;
        size_t tl;
        // prime the stream with the last prompt token: the first generated piece then keeps
        // its leading space, as it would inside the whole decoded text
        if (!j->sampler || !j->stream ||
            tok_stream_push(j->stream, j->p.tokens[j->p.n_tokens - 1], &t, &tl, err)) {
            job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
            return 1;
        }
    }
    if (j->p.score_prompt) { // every position's logits are needed: no cached prefix
        if (!(j->prompt_stream = tok_stream_new(s->tok))) {
            job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
            return 1;
        }
        return score_emit(s, j, j->p.tokens[0], NULL) != 0;
    }
    size_t match;
    const PCacheEntry *e = pcache_lookup(s->cache, j->p.tokens, j->p.n_tokens, &match);
    if (e && match == j->p.n_tokens && e->n == match) { // the whole prompt is cached
        pthread_mutex_lock(&j->mu);
        j->shared.stats.cached_tokens = match;
        pthread_mutex_unlock(&j->mu);
        if (j->p.kind == SCHED_NEXT_TOKEN) {
            prompt_done(s, j, e->logits);
            return 1;
        }
        if (kv_copy(&j->kv, &e->kv, match, s->m, err)) {
            job_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
            return 1;
        }
        j->n_fed = match;
        prompt_done(s, j, e->logits);
        return j->shared.state != SCHED_RUNNING;
    }
    if (match > j->p.n_tokens - 1) match = j->p.n_tokens - 1; // the last token must run
    if (e && match && kv_copy(&j->kv, &e->kv, match, s->m, err)) match = 0;
    j->n_fed = match;
    pthread_mutex_lock(&j->mu);
    j->shared.stats.cached_tokens = match;
    pthread_mutex_unlock(&j->mu);
    return 0;
}

// A finished job leaves the engine: its cache is freed, its figures counted, its owner woken.
static void drop(Sched *s, SchedJob *j) {
    kv_free(&j->kv, s->m);
    pthread_mutex_lock(&s->mu);
    s->n_busy--;
    s->gauges.cached_tokens_total += j->shared.stats.cached_tokens;
    s->gauges.generated_tokens_total += j->n_gen;
    pthread_mutex_unlock(&s->mu);
    job_notify(j);
    job_unref(j);
}

// Moves queued jobs into free batch slots.
static void admit_queued(Sched *s) {
    pthread_mutex_lock(&s->mu);
    while (s->queue_head && s->n_active < s->opt.max_batch) {
        SchedJob *j = s->queue_head;
        s->queue_head = j->next_queued;
        if (!s->queue_head) s->queue_tail = NULL;
        s->n_queued--;
        s->n_busy++; // counted from here until drop(), so sched_submit never over-admits
        pthread_mutex_unlock(&s->mu);
        if (atomic_load(&j->cancelled)) job_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        if (j->shared.state == SCHED_RUNNING && !admit(s, j))
            s->active[s->n_active++] = j;
        else
            drop(s, j); // cancelled, or answered from the cache alone
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

// Drops finished and cancelled jobs from the batch.
static void retire(Sched *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->n_active; i++) {
        SchedJob *j = s->active[i];
        if (atomic_load(&j->cancelled)) job_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        pthread_mutex_lock(&j->mu);
        int running = j->shared.state == SCHED_RUNNING;
        pthread_mutex_unlock(&j->mu);
        if (running)
            s->active[kept++] = j;
        else
            drop(s, j);
    }
    s->n_active = kept;
}

// Rows of logits gpt2_forward writes for q.
static size_t logits_rows(const Gpt2Seq *q) {
    return q->logits == GPT2_LOGITS_ALL ? q->n : q->logits == GPT2_LOGITS_LAST ? 1 : 0;
}

// One forward over every active job's next rows: a prompt chunk or one generated token.
// While the batch is built, each entry records its job and its first logits row, so the
// results are walked entry by entry afterwards.
static void step(Sched *s) {
    size_t n_seq = 0, budget = s->opt.prefill_chunk, rows = 0, score_budget = SCHED_SCORE_ROWS;
    size_t n_logits = 0;
    for (size_t i = 0; i < s->n_active; i++) {
        SchedJob *j = s->active[i];
        Gpt2Seq *q = &s->seqs[n_seq];
        if (j->phase == PHASE_PREFILL) {
            size_t left = j->p.n_tokens - j->n_fed;
            size_t n = left < budget ? left : budget;
            if (j->p.score_prompt && n > score_budget) n = score_budget;
            if (n == 0) continue; // the budget is spent: next step
            budget -= n;
            if (j->p.score_prompt) score_budget -= n;
            *q = (Gpt2Seq){&j->kv, j->p.tokens + j->n_fed, n,
                           j->p.score_prompt ? GPT2_LOGITS_ALL
                           : n == left       ? GPT2_LOGITS_LAST
                                             : GPT2_LOGITS_NONE};
        } else {
            *q = (Gpt2Seq){&j->kv, &j->next_id, 1, GPT2_LOGITS_LAST};
        }
        s->batch[n_seq] = (SchedEntry){j, n_logits};
        n_logits += logits_rows(q);
        rows += q->n;
        n_seq++;
    }
    char err[KG_ERRLEN];
    int rc = gpt2_forward(s->m, &s->st, s->seqs, n_seq, err);
    for (size_t k = 0; k < n_seq; k++) {
        SchedJob *j = s->batch[k].job;
        const Gpt2Seq *q = &s->seqs[k];
        size_t row = s->batch[k].first_row;
        if (rc) {
            job_finish(j, SCHED_DONE_ERROR, rc, err);
            continue;
        }
        size_t fed = j->n_fed;
        if (j->phase == PHASE_PREFILL) j->n_fed += q->n;
        if (q->logits == GPT2_LOGITS_NONE) continue;
        if (q->logits == GPT2_LOGITS_ALL) { // scoring: row r predicts prompt token fed + r + 1
            int failed = 0;
            for (size_t r = 0; r + 1 < q->n && !failed; r++)
                failed = score_emit(s, j, j->p.tokens[fed + r + 1], logits_row(s, row + r)) != 0;
            if (!failed && fed + q->n < j->p.n_tokens)
                failed = score_emit(s, j, j->p.tokens[fed + q->n], logits_row(s, row + q->n - 1));
            if (failed || j->n_fed < j->p.n_tokens) {
                job_notify(j);
                continue;
            }
            row += q->n - 1; // the last prompt position: its logits answer as below
        }
        const float *logits = logits_row(s, row);
        int prompt = j->phase == PHASE_PREFILL;
        if (prompt)
            prompt_done(s, j, logits);
        else
            generate_step(s, j, logits);
        job_notify(j);
        // after the answer: the cache's copy of the prompt's KV only serves later requests
        if (prompt) pcache_insert(s->cache, j->p.tokens, j->p.n_tokens, &j->kv, logits, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->gauges.steps++;
    s->gauges.last_batch_rows = rows;
    pthread_mutex_unlock(&s->mu);
}

// 1 while a job waits in the queue or the engine is stopping. Asked between the layers of a
// speculative pass (Gpt2State.cancel).
static int work_waiting(void *arg) {
    Sched *s = arg;
    pthread_mutex_lock(&s->mu);
    int waiting = s->queue_head || s->stopping;
    pthread_mutex_unlock(&s->mu);
    return waiting;
}

// Idle: run the last answer's best candidates one token further, as one batch, and cache
// their logits, so that clicking any of them is answered from the cache. The guess gives way
// to a job that arrives meanwhile, which would otherwise wait for the rest of a pass over the
// weights (on the CPU as long as a 20-token prompt's own prefill); it is kept, and runs again
// once the engine is idle.
static void speculate(Sched *s) {
    Speculation *sp = &s->spec;
    size_t n = sp->n, match, k = 0;
    int rc = KG_OK;
    const PCacheEntry *e = pcache_lookup(s->cache, sp->prompt, n, &match);
    if (!e || match != n || e->n != n || n + 1 > s->m->config.n_ctx) goto done;
    int *ext = malloc((n + 1) * sizeof *ext);
    if (!ext) goto done;
    memcpy(ext, sp->prompt, n * sizeof *ext);
    for (size_t i = 0; i < sp->n_cand; i++) {
        if (work_waiting(s)) { // each copy below is a whole prompt's KV
            rc = KG_ECANCEL;
            break;
        }
        ext[n] = sp->cand[i];
        size_t m2;
        const PCacheEntry *hit = pcache_lookup(s->cache, ext, n + 1, &m2);
        if (hit && m2 == n + 1 && hit->n == n + 1) continue; // already cached
        if (kv_copy(&s->spec_kv[k], &e->kv, n, s->m, NULL)) break;
        s->seqs[k] = (Gpt2Seq){&s->spec_kv[k], &sp->cand[i], 1, GPT2_LOGITS_LAST};
        k++;
    }
    s->st.cancel = work_waiting;
    if (!rc && k) rc = gpt2_forward(s->m, &s->st, s->seqs, k, NULL);
    s->st.cancel = NULL; // the jobs' own steps always run to the end
    for (size_t i = 0; !rc && i < k; i++) {
        ext[n] = *s->seqs[i].tokens;
        pcache_insert(s->cache, ext, n + 1, &s->spec_kv[i], logits_row(s, i), NULL);
    }
    free(ext);
    if (rc == KG_ECANCEL) return; // kept for the next idle moment
done:
    free(sp->prompt);
    *sp = (Speculation){0};
}

static int should_sleep(Sched *s) {
    return !s->queue_head && !s->n_active && !(s->spec.prompt && s->opt.speculate) && !s->stopping;
}

static void *engine_main(void *arg) {
    Sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (should_sleep(s))
            pthread_cond_wait(&s->wake, &s->mu);
        int stopping = s->stopping;
        int timed_out = stopping && now_ms() > s->stop_deadline;
        pthread_mutex_unlock(&s->mu);
        if (timed_out) // past the drain timeout: whatever is left is cancelled
            for (size_t i = 0; i < s->n_active; i++)
                atomic_store(&s->active[i]->cancelled, 1);
        admit_queued(s);
        retire(s);
        if (s->n_active) {
            step(s);
            retire(s);
        } else if (s->spec.prompt && s->opt.speculate && !stopping) {
            speculate(s);
        } else if (stopping) {
            pthread_mutex_lock(&s->mu);
            int empty = !s->queue_head;
            pthread_mutex_unlock(&s->mu);
            if (empty) return NULL;
        }
        PCacheStats cs;
        pcache_stats(s->cache, &cs);
        pthread_mutex_lock(&s->mu);
        s->gauges.cache_entries = cs.entries;
        s->gauges.cache_bytes = cs.bytes;
        s->gauges.cache_capacity = cs.capacity;
        pthread_mutex_unlock(&s->mu);
    }
}

// ---------------------------------------------------------------------------------------
// Public API

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
    size_t max_seqs = opt->max_batch > SCHED_SPEC_K ? opt->max_batch : SCHED_SPEC_K;
    int rc =
        gpt2_state_init(&s->st, m, opt->prefill_chunk + max_seqs, max_seqs + SCHED_SCORE_ROWS, err);
    if (rc) {
        free(s);
        return rc;
    }
    s->st.cancel_ctx = s;
    s->cache = pcache_new(m, opt->cache_mb << 20);
    s->seqs = calloc(max_seqs, sizeof *s->seqs);
    s->batch = calloc(opt->max_batch, sizeof *s->batch);
    s->penalized = malloc(m->config.vocab_size * sizeof *s->penalized);
    s->active = calloc(opt->max_batch, sizeof *s->active);
    if (!s->cache || !s->seqs || !s->batch || !s->active || !s->penalized) {
        rc = kg_err(err, KG_ENOMEM, "engine: out of memory");
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (pthread_create(&s->thread, NULL, engine_main, s)) {
        rc = kg_err(err, KG_ENOMEM, "engine: cannot start its thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->wake);
        goto fail;
    }
    *out = s;
    return KG_OK;
fail:
    pcache_free(s->cache);
    free(s->seqs);
    free(s->penalized);
    free(s->batch);
    free(s->active);
    gpt2_state_free(&s->st, m);
    free(s);
    return rc;
}

void sched_stop(Sched *s, int timeout_ms) {
    if (!s || s->joined) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->stop_deadline = now_ms() + timeout_ms;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->joined = 1;
}

void sched_free(Sched *s) {
    if (!s) return;
    sched_stop(s, 0);
    for (int i = 0; i < SCHED_SPEC_K; i++)
        kv_free(&s->spec_kv[i], s->m);
    free(s->spec.prompt);
    pcache_free(s->cache);
    free(s->seqs);
    free(s->penalized);
    free(s->batch);
    free(s->active);
    gpt2_state_free(&s->st, s->m);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

static int check_params(const Sched *s, const SchedParams *p, char *err) {
    if (p->n_tokens == 0) return kg_err(err, KG_EINVAL, "the prompt is empty");
    if (p->n_tokens > s->opt.max_prompt)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens %zu exceeds n_ctx %zu", p->n_tokens,
                      s->opt.max_prompt);
    for (size_t i = 0; i < p->n_tokens; i++)
        if (p->tokens[i] < 0 || (size_t)p->tokens[i] >= s->V)
            return kg_err(err, KG_ERANGE, "token id %d is outside the vocabulary (0..%zu)",
                          p->tokens[i], s->V - 1);
    if (p->n_candidates > s->V) return kg_err(err, KG_EINVAL, "too many candidates");
    if (!(p->temperature >= 0) || (p->kind == SCHED_NEXT_TOKEN && !(p->temperature > 0)))
        return kg_err(err, KG_EINVAL, "temperature must be > 0");
    if (p->kind == SCHED_GENERATE && p->max_tokens == 0 && !p->score_prompt)
        return kg_err(err, KG_EINVAL, "max_tokens must be >= 1");
    // 0: a top_p in (0, 1] too small for a float, which acts as its limit (the best token)
    if (p->kind == SCHED_GENERATE && !(p->top_p >= 0 && p->top_p <= 1))
        return kg_err(err, KG_EINVAL, "top_p must be in (0, 1]");
    if (p->score_prompt && p->kind != SCHED_GENERATE)
        return kg_err(err, KG_EINVAL, "only a generation scores its prompt");
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return kg_err(err, KG_EINVAL, "stop strings must not be empty");
    return KG_OK;
}

int sched_submit(Sched *s, const SchedParams *p, void (*notify)(void *ctx), void *ctx,
                 SchedJob **job, char *err) {
    *job = NULL;
    int rc = check_params(s, p, err);
    if (rc) return rc;
    SchedJob *j;
    if ((rc = job_new(&j, s->V, p, notify, ctx, err))) return rc;
    j->t_submit = now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->stopping)
        rc = kg_err(err, KG_ECANCEL, "the server is shutting down");
    else if (s->n_queued >= s->opt.max_queue + (s->opt.max_batch - s->n_busy))
        rc = kg_err(err, KG_EBUSY, "the queue is full (%zu waiting)", s->n_queued);
    if (rc) {
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        return rc;
    }
    if (s->queue_tail)
        s->queue_tail->next_queued = j;
    else
        s->queue_head = j;
    s->queue_tail = j;
    s->n_queued++;
    s->gauges.prompt_tokens_total += p->n_tokens;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    *job = j;
    return KG_OK;
}

size_t sched_job_read(SchedJob *j, SchedToken *out, size_t cap, SchedState *state) {
    pthread_mutex_lock(&j->mu);
    size_t n = 0;
    while (n < cap && j->shared.n_read < j->shared.n_out)
        out[n++] = j->shared.out[j->shared.n_read++];
    // report the final state only once every output entry has been read
    *state = j->shared.n_read < j->shared.n_out ? SCHED_RUNNING : j->shared.state;
    pthread_mutex_unlock(&j->mu);
    return n;
}

int sched_job_error(SchedJob *j, char *err) {
    pthread_mutex_lock(&j->mu);
    int code = j->shared.err_code;
    kg_err(err, code, "%s", j->shared.err);
    pthread_mutex_unlock(&j->mu);
    return code;
}

void sched_job_stats(SchedJob *j, SchedStats *stats) {
    pthread_mutex_lock(&j->mu);
    *stats = j->shared.stats;
    pthread_mutex_unlock(&j->mu);
}

void sched_job_cancel(SchedJob *j) { atomic_store(&j->cancelled, 1); }

void sched_job_release(SchedJob *j) {
    atomic_store(&j->cancelled, 1);
    pthread_mutex_lock(&j->notify_mu);
    j->notify = NULL;
    pthread_mutex_unlock(&j->notify_mu);
    job_unref(j);
}

void sched_gauges(Sched *s, SchedGauges *g) {
    pthread_mutex_lock(&s->mu);
    *g = s->gauges;
    g->queued = s->n_queued;
    g->running = s->n_busy; // live, as queued is: a job admitted is never in neither
    pthread_mutex_unlock(&s->mu);
}
