// sched.c — the engine thread (sched.h): the queue, admission by KV blocks with the longest
// cached prefix, preemption when a step runs out of blocks, each step's forward (plan,
// reserve, forward, consume), and the public calls.
//
// Beside it (sched_engine.h): what a job does with its logits (sched_logits.c), the
// speculative next clicks (sched_spec.c), a job's record and the caller's reads
// (sched_seq.c), which rows go into a step (the batch planner, sched_plan.c), a generation's
// text (gentext.c), the remembered logits (logits_memo.c), a next-token answer's lens and
// attention view (sched_explain.c); the blocks are model/kv.c's.
#define _GNU_SOURCE // pthread_setname_np
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#include "sched_engine.h"
#include "sched_explain.h"

static void sched_set_cached(SchedSeq *j, size_t n) {
    pthread_mutex_lock(&j->out.mu); // the caller may read the figures at any time
    j->out.stats.cached_tokens = n;
    pthread_mutex_unlock(&j->out.mu);
}

// ---------------------------------------------------------------------------------------
// Admission: blocks counted, the longest cached prefix shared

// Jobs whose next step is a decode row: each may need a new block within KV_BLOCK_LEN steps,
// so admission leaves them one each (vLLM's watermark, per running sequence).
static size_t sched_blocks_held_back(const Sched *s) { return s->n_active; }

// j's KV from the longest cached prefix of what it must hold (the whole prompt, so that a
// prompt cached whole with its logits remembered runs nothing; the positions a preempted job
// lost). Returns the cached positions; *logits the remembered row when the prompt is whole.
// A lens or attention view must see its positions run in the job's own passes: the lens its
// last token (never a remembered row), the attention every key it reads (nothing cached).
static size_t sched_match_prefix(Sched *s, SchedSeq *j, const float **logits) {
    const SchedParams *p = &j->in.p;
    KvSeq *kv = &j->work.kv;
    *logits = NULL;
    if (!j->work.admitted) { // the prompt, first time in: its last token must run, or be known
        // every position's logits are needed, or every position's keys: nothing cached
        if (p->score_prompt || p->attention) return 0;
        size_t got = kv_seq_match(kv, p->tokens, p->n_tokens);
        if (got == p->n_tokens && !p->lens)
            *logits = logits_memo_get(s->memo, p->tokens, p->n_tokens);
        if (got == p->n_tokens && !*logits) kv_seq_truncate(kv, --got);
        return got;
    }
    size_t target = sched_seq_replay_target(j), got = 0, run, step;
    do { // the prompt, then the generated ids: two arrays
        const int *t = sched_seq_tokens_at(j, kv->len, &run);
        got += step = kv_seq_match(kv, t, run < target - kv->len ? run : target - kv->len);
    } while (step && kv->len < target && kv->len % KV_BLOCK_LEN == 0);
    return got;
}

// Blocks j needs from the pool to hold every position before its next row, and that row.
static size_t sched_blocks_wanted(const SchedSeq *j) {
    const KvSeq *kv = &j->work.kv;
    size_t upto =
        j->work.phase == SCHED_PREFILL ? j->in.p.n_tokens : sched_seq_replay_target(j) + 1;
    return kv_seq_blocks_needed(kv, upto - kv->len);
}

// The first admission's bookkeeping: figures, the sampler and streams, the first score.
// KG_OK, or an error with the job finished.
static int sched_admit_first(Sched *s, SchedSeq *j) {
    const SchedParams *p = &j->in.p;
    j->work.t_start = kg_now_ms();
    pthread_mutex_lock(&j->out.mu); // the caller may read the figures at any time
    j->out.stats.queue_ms = j->work.t_start - j->in.t_submit;
    j->out.stats.prompt_tokens = p->n_tokens;
    pthread_mutex_unlock(&j->out.mu);
    if (p->kind == SCHED_GENERATE && sched_start_generation(s, j)) return KG_ENOMEM;
    if ((p->lens || p->attention) && sched_explain_capture(s->m, j)) return KG_ENOMEM;
    if (p->score_prompt) {
        if (!(j->work.prompt_stream = tok_stream_new(s->tok))) {
            sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, "out of memory");
            return KG_ENOMEM;
        }
        return sched_score_emit(s, j, p->tokens[0], NULL);
    }
    return KG_OK;
}

// Admission of j, first or after a preemption. 1: admitted (it joins the batch); 0: the pool
// has too few blocks now (j waits, first in line); -1: done already (answered from the cache
// alone, or failed).
static int sched_admit(Sched *s, SchedSeq *j) {
    char err[KG_ERRLEN];
    if (!j->work.kv.pool && kv_seq_init(&j->work.kv, s->pool, err)) {
        sched_seq_finish(j, SCHED_DONE_ERROR, KG_ENOMEM, err);
        return -1;
    }
    const float *logits;
    size_t cached = sched_match_prefix(s, j, &logits);
    if (!logits &&
        kv_pool_available(s->pool) < sched_blocks_wanted(j) + sched_blocks_held_back(s)) {
        kv_seq_reset(&j->work.kv); // wait for blocks; the match is made again then
        return 0;
    }
    if (j->work.admitted) return 1;
    j->work.admitted = 1;
    if (sched_admit_first(s, j)) return -1;
    j->work.n_fed = cached;
    sched_set_cached(j, cached);
    if (!logits) return 1;
    sched_prompt_done(s, j, logits);               // the whole prompt cached, its logits remembered
    return j->out.state == SCHED_RUNNING ? 1 : -1; // (only this thread writes it)
}

// A finished job leaves the engine: its blocks go back, its figures counted, its owner woken.
static void sched_drop(Sched *s, SchedSeq *j) {
    kv_seq_release(&j->work.kv);
    sched_explain_release(s->m, j);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.n_busy--;
    s->shared.gauges.cached_tokens_total += j->out.stats.cached_tokens;
    s->shared.gauges.generated_tokens_total += j->work.n_gen;
    pthread_mutex_unlock(&s->shared.mu);
    sched_seq_notify(j);
    sched_seq_unref(j);
}

// The next job to admit: a preempted one first (the earliest admitted first), else the
// queue's head; taken off its list. NULL when none waits.
static SchedSeq *sched_next_waiting(Sched *s) {
    SchedSeq *j = s->preempted;
    if (j) {
        s->preempted = j->next_queued;
        return j;
    }
    SchedShared *sh = &s->shared;
    pthread_mutex_lock(&sh->mu);
    if ((j = sh->queue_head)) {
        sh->queue_head = j->next_queued;
        if (!sh->queue_head) sh->queue_tail = NULL;
        sh->n_queued--;
        sh->n_busy++; // counted from here until sched_drop, so sched_submit never over-admits
    }
    pthread_mutex_unlock(&sh->mu);
    return j;
}

// j back at the front of the waiting jobs, before the other preempted ones (those were
// admitted after it) and the queue.
static void sched_wait_again(Sched *s, SchedSeq *j) {
    j->next_queued = s->preempted;
    s->preempted = j;
}

// Moves waiting jobs into free batch slots while the pool has blocks for them.
static void sched_admit_queued(Sched *s) {
    SchedSeq *j;
    while (s->n_active < s->opt.max_batch && (j = sched_next_waiting(s))) {
        if (atomic_load(&j->cancelled)) sched_seq_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        int admitted = j->out.state == SCHED_RUNNING ? sched_admit(s, j) : -1;
        if (admitted > 0) {
            s->active[s->n_active++] = j;
        } else if (admitted < 0) {
            sched_drop(s, j); // cancelled, answered from the cache alone, or failed
        } else {
            sched_wait_again(s, j);
            break;
        }
    }
}

// Drops finished and cancelled jobs from the batch.
static void sched_retire(Sched *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->n_active; i++) {
        SchedSeq *j = s->active[i];
        if (atomic_load(&j->cancelled)) sched_seq_finish(j, SCHED_DONE_CANCELLED, KG_ECANCEL, NULL);
        if (sched_seq_state(j) == SCHED_RUNNING)
            s->active[kept++] = j;
        else
            sched_drop(s, j);
    }
    s->n_active = kept;
}

// ---------------------------------------------------------------------------------------
// Preemption

// The job admitted last gives its blocks back (its full blocks stay in the prefix cache, its
// partly filled one joins it) and waits at the front of the line; its sampler and output
// stay, and a replay recomputes its positions when it is admitted again.
static void sched_preempt_last(Sched *s) {
    SchedSeq *j = s->active[--s->n_active];
    kv_seq_reset(&j->work.kv);
    sched_wait_again(s, j);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.gauges.preemptions_total++;
    pthread_mutex_unlock(&s->shared.mu);
}

// Every planned sequence's blocks, taken from the pool before the forward (copies of shared
// last blocks included): on a shortage the job admitted last is preempted and the step
// planned again. The plan's size (0 only if nothing is left to run).
static size_t sched_plan_with_blocks(Sched *s, size_t *rows) {
    for (;;) {
        size_t budget = sched_plan_prefill_budget(s->active, s->n_active, s->opt.step_tokens);
        size_t n_seq = sched_plan_step(s->active, s->n_active, budget, s->seqs, s->plan, rows);
        size_t i = 0;
        while (i < n_seq && !kv_seq_reserve(s->seqs[i].kv, s->seqs[i].n, NULL))
            i++;
        if (i == n_seq) return n_seq;
        if (s->n_active == 1) { // the pool holds a context and a copy: only a bug gets here
            sched_seq_finish(s->active[0], SCHED_DONE_ERROR, KG_EINTERNAL,
                             "the KV cache has no block left for one sequence");
            return 0;
        }
        sched_preempt_last(s);
    }
}

// ---------------------------------------------------------------------------------------
// A step: plan, reserve, forward, consume

// Hands entry e of the step's plan its sequence q's results (rc: the forward's error code,
// err its message): the prompt advances, then the job scores, answers or samples.
static void sched_consume(Sched *s, const SchedPlanEntry *e, const Gpt2Seq *q, int rc,
                          const char *err) {
    SchedSeq *j = e->job;
    if (rc) {
        sched_seq_finish(j, SCHED_DONE_ERROR, rc, err);
        return;
    }
    if (e->replay) return; // positions a preemption took, back in the KV
    int prompt = j->work.phase == SCHED_PREFILL;
    size_t fed = j->work.n_fed, row = e->first_row;
    if (prompt) j->work.n_fed += q->n;
    if (q->logits == GPT2_LOGITS_NONE) return;
    if (q->logits == GPT2_LOGITS_ALL) {
        if (sched_score_chunk(s, j, fed, q->n, row)) {
            sched_seq_notify(j);
            return;
        }
        row += q->n - 1; // the last prompt position: its logits answer as below
    }
    const float *logits = sched_logits_row(s, row);
    if (prompt) { // remembered for the same prompt again (before the answer: a copy)
        logits_memo_put(s->memo, j->in.p.tokens, j->in.p.n_tokens, logits);
        sched_prompt_done(s, j, logits);
    } else { // its token drawn already, beside the others' (sched_draw_decodes)
        sched_emit_draw(s, j, &s->draws[e - s->plan]);
    }
    sched_seq_notify(j);
}

// 1 when entry e of the plan is a decode row: its job draws a token from its logits.
static int sched_entry_decodes(const SchedPlanEntry *e) {
    return !e->replay && e->job->work.phase == SCHED_DECODE;
}

static void sched_draw_task(void *ctx, size_t i, int thread) {
    Sched *s = ctx;
    const SchedPlanEntry *e = &s->plan[i];
    if (sched_entry_decodes(e))
        sched_draw(s, e->job, sched_logits_row(s, e->first_row),
                   s->penalized + (size_t)thread * s->m->config.vocab_size, &s->draws[i]);
}

// Every decode row's token drawn at once on the backend's host threads (sampling reads a
// whole row of logits per sequence: serial, it left the CPU's other threads idle between
// forwards); the text and the output follow on the engine thread, in order.
static void sched_draw_decodes(Sched *s, size_t n_seq) {
    KgBackend *be = s->m->be;
    be->ops->host_parallel(be, sched_draw_task, s, n_seq);
}

// One forward over the rows the planner picks from every active job.
static void sched_step(Sched *s) {
    size_t rows, n_seq = sched_plan_with_blocks(s, &rows);
    char err[KG_ERRLEN];
    for (size_t i = 0; i < n_seq; i++) // what the lens and attention views keep, where asked
        s->captures[i] = s->plan[i].job->work.capture;
    s->st.captures = s->captures;
    int rc = n_seq ? gpt2_forward(s->m, &s->st, s->seqs, n_seq, err) : KG_OK;
    s->st.captures = NULL; // (the speculative pass has none)
    if (!rc) sched_draw_decodes(s, n_seq);
    for (size_t i = 0; i < n_seq; i++)
        sched_consume(s, &s->plan[i], &s->seqs[i], rc, err);
    pthread_mutex_lock(&s->shared.mu);
    s->shared.gauges.steps++;
    s->shared.gauges.last_batch_rows = rows;
    pthread_mutex_unlock(&s->shared.mu);
}

// ---------------------------------------------------------------------------------------
// The engine thread

static int sched_should_sleep(const Sched *s) {
    return !s->shared.queue_head && !s->n_active && !s->preempted &&
           !(s->spec.prompt && s->opt.speculate) && !s->shared.stopping;
}

static int sched_queue_empty(Sched *s) {
    pthread_mutex_lock(&s->shared.mu);
    int empty = !s->shared.queue_head;
    pthread_mutex_unlock(&s->shared.mu);
    return empty && !s->preempted;
}

static void sched_publish_pool_gauges(Sched *s) {
    KvPoolStats st;
    kv_pool_stats(s->pool, &st);
    pthread_mutex_lock(&s->shared.mu);
    SchedGauges *g = &s->shared.gauges;
    g->kv = st;
    g->cache_entries = st.registered;
    g->cache_bytes = st.registered * st.block_bytes + logits_memo_bytes(s->memo);
    g->cache_capacity = s->opt.cache_blocks * st.block_bytes + logits_memo_capacity_bytes(s->memo);
    pthread_mutex_unlock(&s->shared.mu);
}

static void *sched_main(void *arg) {
    Sched *s = arg;
    pthread_setname_np(pthread_self(), "kg-engine"); // for top -H and per-thread CPU shares
    for (;;) {
        pthread_mutex_lock(&s->shared.mu);
        while (sched_should_sleep(s))
            pthread_cond_wait(&s->shared.wake, &s->shared.mu);
        int stopping = s->shared.stopping;
        int timed_out = stopping && kg_now_ms() > s->shared.stop_deadline;
        pthread_mutex_unlock(&s->shared.mu);
        if (timed_out) { // past the drain timeout: whatever is left is cancelled
            for (size_t i = 0; i < s->n_active; i++)
                atomic_store(&s->active[i]->cancelled, 1);
            for (SchedSeq *j = s->preempted; j; j = j->next_queued)
                atomic_store(&j->cancelled, 1);
        }
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
        sched_publish_pool_gauges(s);
    }
}

// ---------------------------------------------------------------------------------------
// Public API

// Frees what sched_start made (the thread aside).
static void sched_free_memory(Sched *s) {
    for (int i = 0; i < SCHED_SPEC_CANDIDATES; i++)
        kv_seq_release(&s->spec.kv[i]);
    free(s->spec.prompt);
    logits_memo_free(s->memo);
    kv_pool_free(s->pool);
    free(s->seqs);
    free(s->penalized);
    free(s->draws);
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

// Rows one forward may hold: every decoding job's one and the prompt budget, or the
// speculation's (sched_plan.h).
static size_t sched_max_rows(const SchedOptions *opt) {
    size_t rows = opt->max_batch + SCHED_MIN_PREFILL_ROWS;
    if (rows < opt->step_tokens) rows = opt->step_tokens;
    if (rows < SCHED_IDLE_PREFILL_ROWS) rows = SCHED_IDLE_PREFILL_ROWS;
    return rows > SCHED_SPEC_CANDIDATES ? rows : SCHED_SPEC_CANDIDATES;
}

// The pool, the memo and the batch arrays; KG_OK, or an error (sched_free_memory frees what
// was made).
static int sched_alloc_buffers(Sched *s, char *err) {
    const Gpt2Config *c = &s->m->config;
    int rc = kv_pool_new(&s->pool, c, s->m->be, s->opt.kv_blocks, s->opt.cache_blocks, err);
    if (rc) return rc;
    for (int i = 0; i < SCHED_SPEC_CANDIDATES; i++)
        if ((rc = kv_seq_init(&s->spec.kv[i], s->pool, err))) return rc;
    s->memo = logits_memo_new(s->opt.cache_blocks ? SCHED_MEMO_ROWS : 0, s->opt.max_prompt + 1,
                              c->vocab_size);
    s->seqs = calloc(sched_max_seqs(&s->opt), sizeof *s->seqs);
    s->plan = calloc(s->opt.max_batch, sizeof *s->plan);
    s->captures = calloc(s->opt.max_batch, sizeof *s->captures);
    size_t threads = s->m->be->threads > 0 ? (size_t)s->m->be->threads : 1;
    s->penalized = malloc(threads * c->vocab_size * sizeof *s->penalized);
    s->draws = calloc(s->opt.max_batch, sizeof *s->draws);
    s->active = calloc(s->opt.max_batch, sizeof *s->active);
    if (!s->memo || !s->seqs || !s->plan || !s->captures || !s->active || !s->penalized ||
        !s->draws)
        return kg_err(err, KG_ENOMEM, "engine: out of memory");
    return KG_OK;
}

int sched_start(Sched **out, const Gpt2 *m, const Tokenizer *tok, const SchedOptions *opt,
                char *err) {
    *out = NULL;
    if (!opt->max_batch || !opt->step_tokens || !opt->max_prompt ||
        opt->max_prompt > m->config.n_ctx)
        return kg_err(err, KG_EINVAL,
                      "engine: need max_batch, step_tokens >= 1 and 1 <= ctx-size <= %zu",
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
    size_t rows = sched_max_rows(opt), logit_rows = sched_max_seqs(opt) + SCHED_PLAN_SCORE_ROWS;
    int rc = gpt2_state_init(&s->st, m, rows, logit_rows < rows ? logit_rows : rows, err);
    if (rc) {
        free(s);
        return rc;
    }
    s->st.cancel_ctx = s;
    if ((rc = sched_alloc_buffers(s, err))) {
        sched_free_memory(s);
        return rc;
    }
    sched_publish_pool_gauges(s);
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
    s->shared.stop_deadline = kg_now_ms() + timeout_ms;
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
                 SchedSeq **job, char *err) {
    *job = NULL;
    int rc = sched_check_params(s, p, err);
    if (rc) return rc;
    SchedSeq *j;
    if ((rc = sched_seq_new(&j, s->V, p, notify, ctx, err))) return rc;
    j->in.t_submit = kg_now_ms();
    SchedShared *sh = &s->shared;
    pthread_mutex_lock(&sh->mu);
    if (sh->stopping)
        rc = kg_err(err, KG_ECANCEL, "the server is shutting down");
    else if (sh->n_queued >= s->opt.max_queue + (s->opt.max_batch - sh->n_busy))
        rc = kg_err(err, KG_EBUSY, "the queue is full (%zu waiting)", sh->n_queued);
    if (rc) {
        pthread_mutex_unlock(&sh->mu);
        sched_seq_free(j);
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
