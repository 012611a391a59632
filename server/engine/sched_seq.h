// sched_seq.h — inside the engine: one sequence's record and its life cycle, for sched.c and the
// batch planner (sched_plan.c). Endpoints see only sched.h's opaque SchedSeq.
//
// A sequence has three parts by who touches them: what was submitted (copied by sched_seq_new,
// then read-only), the engine thread's working state (only that thread), and the output
// the caller reads (under out.mu). Two references hold it, the caller's and the engine's;
// the last sched_seq_unref frees it.
#ifndef SCHED_SEQ_H
#define SCHED_SEQ_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/kg.h"
#include "gentext.h"
#include "model/sampler_utf8.h"
#include "sched.h"

typedef enum { SCHED_PREFILL, SCHED_DECODE } SchedPhase;

// What sched_submit was given: copied, then read-only.
typedef struct {
    SchedParams p;    // tokens, stop_tokens and stop point into the job's own copies
    int *tokens;      // (p.n_tokens) the prompt
    int *stop_tokens; // (p.n_stop_tokens)
    double t_submit;  // ms (kg_now_ms)
} SchedSeqInput;

// The engine thread's working state.
typedef struct {
    SchedPhase phase;
    KvSeq kv;     // its block table (pool NULL until admitted)
    size_t n_fed; // prompt tokens fed and consumed (in kv unless preempted)
    int next_id;  // the token to feed in the next decode step
    int *gen;     // (gen_cap) the generated ids, for a recompute after preemption
    size_t gen_cap;
    int admitted;             // admitted once: a re-admission after preemption keeps the rest
    size_t n_gen;             // tokens generated
    Sampler *sampler;         // generate only
    SamplerPenalty *penalty;  // repetition/frequency/presence counts and logit_bias
    SamplerUtf8State utf8;    // where the text is inside a character (utf8_strict's mask)
    TokStream *stream;        // generated ids to text
    TokStream *prompt_stream; // score_prompt: the prompt's text, token by token
    GenText text;             // the generated text, its stop strings, the bytes held back
    Gpt2Capture *capture;     // next-token with lens or attention: what its passes keep
    double t_start, t_first;  // ms: admitted, first token sampled (0: not yet)
} SchedSeqWork;

// What the caller reads (sched_seq_read, _error, _stats): every field under mu.
typedef struct {
    pthread_mutex_t mu;
    SchedToken *tokens; // (n, cap) entries produced; n_read of them handed out
    size_t n, cap, n_read;
    SchedState state;
    int err_code;
    char err[KG_ERRLEN];
    SchedStats stats;
} SchedSeqOutput;

struct SchedSeq {
    SchedSeqInput in;
    SchedSeqWork work;
    SchedSeqOutput out;
    // notify is cleared by release under notify_mu, so it never runs on a freed ctx
    pthread_mutex_t notify_mu;
    void (*notify)(void *ctx);
    void *ctx;
    atomic_int refs; // the caller's and the engine's
    atomic_int cancelled;
    SchedSeq *next_queued; // in the queue, or among the engine's preempted jobs
};

// A job holding copies of what p points to (p is checked already), with the penalty state
// of a generation (it counts the prompt) and two references. KG_OK and *out, or an error
// (KG_ENOMEM) with err.
int sched_seq_new(SchedSeq **out, size_t V, const SchedParams *p, void (*notify)(void *), void *ctx,
                  char *err);
// Frees j at once (sched_submit's refusal); otherwise drop references with sched_seq_unref.
void sched_seq_free(SchedSeq *j);
void sched_seq_unref(SchedSeq *j);

// Runs the job's notify callback unless the caller has released the job.
void sched_seq_notify(SchedSeq *j);

// Appends one generated token, taking text and candidates (freed on failure). KG_OK or
// KG_ENOMEM.
int sched_seq_emit(SchedSeq *j, int id, float logprob, char *text, size_t text_len,
                   KgCandidate *candidates, size_t n_candidates);
// Appends a scored prompt token (score_prompt), as sched_seq_emit, with its rank there (0 for
// the first token, which nothing predicts).
int sched_seq_emit_score(SchedSeq *j, int id, float logprob, char *text, size_t text_len,
                         KgCandidate *candidates, size_t n_candidates, size_t rank);
// Appends a next-token job's answer: its candidates and explain (both taken, freed on failure;
// explain may be NULL) and the entropy of the distribution they come from. KG_OK or KG_ENOMEM.
int sched_seq_emit_answer(SchedSeq *j, KgCandidate *candidates, size_t n_candidates, double entropy,
                          SchedExplain *explain);

// Marks the job finished (only the first call counts) with its final figures; msg may be
// NULL.
void sched_seq_finish(SchedSeq *j, SchedState state, int code, const char *msg);

// The job's state as the caller would see it now.
SchedState sched_seq_state(SchedSeq *j);

// The positions j's KV must hold before its next row: the prompt tokens consumed (prefill),
// or the prompt and every generated token but the last (decode, which feeds that one). A
// preempted job's KV holds fewer, and it replays [kv.len, target) without logits first.
size_t sched_seq_replay_target(const SchedSeq *j);
// The token at position pos of j's sequence (the prompt, then the generated ids), and how many
// follow it in the same array (a chunk never spans both).
const int *sched_seq_tokens_at(const SchedSeq *j, size_t pos, size_t *run);

#endif
