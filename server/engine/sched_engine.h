// sched_engine.h — inside the engine: its state and the calls between the files of the engine
// thread (sched.c: the thread, admission, preemption, steps; sched_logits.c: what a job does
// with its logits; sched_spec.c: the speculative next clicks). Endpoints see only sched.h.
#ifndef SCHED_ENGINE_H
#define SCHED_ENGINE_H

#include <pthread.h>

#include "logits_memo.h"
#include "model/kv.h"
#include "sched.h"
#include "sched_plan.h"
#include "sched_seq.h"

#define SCHED_SPEC_CANDIDATES 10 // precomputed after a next-token answer (the Explorer's 10)
#define SCHED_MEMO_ROWS       64 // prompts whose last logits are remembered

// A generation's next token as sched_draw drew it, before its text is emitted.
typedef struct {
    int id;                  // -1: nothing drawn (the job has been finished with an error)
    float logprob;           // under the raw row (temperature 1)
    KgCandidate *candidates; // the job's n_logprobs best there (malloc'd), or NULL
} SchedDraw;

// The guess run when idle: the last answered prompt's best candidates, one token further.
typedef struct {
    int *prompt; // (n + 1) the tokens of the last answered next-token job, room for one more;
                 // NULL: no guess
    size_t n;
    int candidates[SCHED_SPEC_CANDIDATES];
    size_t n_candidates;
    KvSeq kv[SCHED_SPEC_CANDIDATES]; // each candidate's sequence (tables made once, at start)
} Speculation;

// What the HTTP threads and the engine thread share: every field under mu.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    SchedSeq *queue_head, *queue_tail;
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
    KvPool *pool;      // every job's KV blocks and the prefix cache
    LogitsMemo *memo;  // the last logits of prompts, by the blocks that hold them
    SchedSeq **active; // (max_batch) the jobs being advanced, in admission order
    size_t n_active;
    // jobs preempted to free blocks, the earliest admitted first: re-admitted before the queue
    SchedSeq *preempted;
    Gpt2Seq *seqs;          // (max(max_batch, SCHED_SPEC_CANDIDATES)) a step's sequences
    SchedPlanEntry *plan;   // (max_batch) each sequence's job and first logits row
    Gpt2Capture **captures; // (max_batch) each sequence's capture in a step, or NULL
    Speculation spec;
    // (threads, V) per host thread: a row with a job's penalties and UTF-8 mask, sampled
    // instead of the raw one
    float *penalized;
    SchedDraw *draws; // (max_batch) each planned sequence's drawn token (sched_step)
    SamplerUtf8 utf8; // the tokenizer's byte tokens, for utf8_strict (sampler_utf8.h)
    pthread_t thread;
    int joined; // the engine thread was joined (sched_stop); only its owner reads it
    SchedShared shared;
};

// Row of the last forward's logits (host memory).
static inline const float *sched_logits_row(const Sched *s, size_t row) {
    return s->st.logits_host + row * s->m->config.vocab_size;
}

// --- sched_logits.c: what a job does with its logits ---

// Draws j's next token from its row of logits: penalties and the UTF-8 mask applied on
// scratch (V floats, the calling thread's), the sampler, the logprob and candidates. Changes
// only j (its sampler, penalty counts, mask state, or its end on an error), so the engine may
// draw several jobs' tokens at once on the backend's host threads.
void sched_draw(const Sched *s, SchedSeq *j, const float *logits, float *scratch, SchedDraw *d);
// The engine thread's half: the drawn token ends the job, or its text is emitted.
void sched_emit_draw(Sched *s, SchedSeq *j, SchedDraw *d);

// A generation's sampler, text stream and generated-ids array (KG_OK), or KG_ENOMEM with the
// job finished.
int sched_start_generation(Sched *s, SchedSeq *j);
// The prompt's logits are known: answer, or sample the first generated token.
void sched_prompt_done(Sched *s, SchedSeq *j, const float *logits);
// Samples the next token of a generation from logits and emits its text (or ends the job):
// sched_draw, then sched_emit_draw, on the engine thread.
void sched_generate_step(Sched *s, SchedSeq *j, const float *logits);
// Emits prompt token id's score (logits NULL for the first token, which nothing predicts).
// 0, or an error code with the job finished.
int sched_score_emit(Sched *s, SchedSeq *j, int id, const float *logits);
// A scored chunk of j's prompt (n rows of logits from row, after fed prompt tokens): 1 while
// the job waits for more of its prompt (or has failed), 0 once its last row must answer.
int sched_score_chunk(Sched *s, SchedSeq *j, size_t fed, size_t n, size_t row);

// --- sched_spec.c: the speculative next clicks ---

// Remembers p's prompt and its best candidates (of its answer) for the next idle moment; on
// OOM the previous guess stays.
void sched_spec_remember(Sched *s, const SchedParams *p, const KgCandidate *candidates);
// Idle: runs the remembered candidates one token further as one batch and remembers their
// logits; gives way (and keeps the guess) when a job arrives.
void sched_speculate(Sched *s);
// 1 while a job waits in the queue or the engine is stopping (asked between a speculative
// pass's layers).
int sched_work_waiting(void *arg);

#endif
