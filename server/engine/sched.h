// sched.h — the engine: one thread owns the model and runs every forward pass.
//
// A sequence (SchedSeq) is one thing the engine runs: a generation or a scoring of one
// prompt, one choice of one request (job.h's JobRequest submits one per choice). HTTP
// handlers submit sequences and read their output; they never touch tensors. Each engine
// step advances every running sequence together (continuous batching: one forward over the new
// rows of all of them). Memory is counted in KV blocks (model/kv.h): one pool per model,
// sized once; a sequence holds a block table, never a buffer, and a prompt starts from the blocks
// of its longest cached prefix, shared with every other sequence that has it (vLLM's automatic
// prefix caching); a prompt cached whole whose logits are remembered (logits_memo.h) costs
// no forward pass. When idle after a next-token answer that asked for it, the engine
// precomputes the top candidates' continuations, so the Explorer's likely next click is
// already answered; a sequence that arrives meanwhile stops that pass (it runs again when the
// engine is next idle).
//
// Admission and preemption, by counting blocks (vLLM's policy): a queued sequence joins the
// batch when it fits max_batch and the pool has blocks for its whole prompt (after its
// cached prefix) plus one for every running sequence's next step; otherwise it waits, first in
// line. A step whose rows need more blocks than are left preempts the sequence admitted last: its
// blocks go back (its filled blocks stay in the prefix cache), and it waits at the front of
// the line to be recomputed from its tokens, keeping its sampler, so its output goes on as
// if nothing happened. A full pool is never an error a client sees.
//
// Where the engine lives: sched.c runs the thread (queue, admission, preemption, each step's
// forward); sched_logits.c is what a sequence does with its logits (answer, score, sample, emit);
// sched_spec.c the speculative next clicks; sched_seq.c one sequence's record and the
// sched_seq_* calls below; the batch planner, which rows of which sequences go into a step (a new
// batching policy goes there), is sched_plan.c; a generation's text, stop strings and
// held-back bytes are gentext.c; the remembered logits logits_memo.c, and /v1/score's memo
// of finished scores score_memo.c; a next-token answer's lens and attention view
// (SchedParams.lens, .attention) are sched_explain.c.
//
// Threads: sched_* functions may be called from any thread. A sequence's notify callback runs
// on the engine thread; it must only wake the sequence's owner (e.g. MHD_resume_connection).
#ifndef SCHED_H
#define SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt2.h"
#include "model/gpt2_capture.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct Sched Sched;
typedef struct SchedSeq SchedSeq;

typedef struct {
    size_t max_batch;    // jobs advanced together per step, at most (--max-batch)
    size_t max_queue;    // jobs waiting beyond those (--max-queue); more is KG_EBUSY (429)
    size_t kv_blocks;    // the KV pool's blocks (--kv-cache-mb); at least one context's + 1
    size_t cache_blocks; // blocks nobody holds kept for the prefix cache, at most (--cache-mb);
                         // 0: no prefix cache (nothing shared across jobs, no logits memo)
    size_t max_prompt;   // tokens per prompt, <= n_ctx (--ctx-size)
    // rows per step (--max-batch-tokens): one for every decoding job, then prompt chunks in
    // what is left (at least SCHED_MIN_PREFILL_ROWS), so a long prompt enters in pieces
    // between the running streams' tokens instead of stalling them
    size_t step_tokens;
    int speculate; // allow jobs to ask for speculation (--no-speculate turns it off)
} SchedOptions;

// Prompt rows a step takes at least while a prompt waits, however many jobs decode.
#define SCHED_MIN_PREFILL_ROWS 16

typedef enum { SCHED_NEXT_TOKEN, SCHED_GENERATE } SchedKind;

typedef struct {
    SchedKind kind;
    const int *tokens; // the prompt (copied by sched_submit)
    size_t n_tokens;
    float temperature; // next-token: divides the logits (1 = raw); generate: 0 = greedy
    // next-token only: how many candidates the answer has, best first (a request's top_k)
    size_t n_candidates;
    // generate only
    size_t n_logprobs; // top candidates reported per token (OpenAI's logprobs, 0..20; /v1/score
                       // asks more for a scored prompt), each token's own logprob aside
    size_t max_tokens;
    size_t top_k; // 0 = off
    float top_p;  // 1 = off
    uint64_t seed;
    const char *const *stop; // stop strings (copied); the text stops before the first match
    size_t n_stop;
    const int *stop_tokens; // ids that end the generation as a stop string does (copied; a
    size_t n_stop_tokens;   // chat's <usr>: the model starting the user's next turn)
    // repetition, frequency and presence penalties and logit_bias (sampler.h), on the row
    // that is sampled; the logprobs reported stay those of the raw distribution. All zero
    // (repetition 0 included) means none
    KgPenalties penalties;
    int ignore_eos; // keep going past the end-of-text token
    // draw no byte token that would keep the text from being valid UTF-8 (sampler_utf8.h): a
    // byte that cannot go on the character under way, or a text token inside one
    int utf8_strict;
    // score the prompt first (OpenAI's echo with logprobs, as evaluation harnesses use it):
    // one SchedToken with .prompt set per prompt token, in order, each with its logprob
    // given the tokens before it (NAN for the first), its rank and n_logprobs candidates
    // there. Reads no cached prefix (every position's logits are needed). max_tokens may then
    // be 0.
    int score_prompt;
    // next-token only: when idle afterwards, run the best candidates one token further and
    // cache them (the Explorer's likely next click). Off by default: it costs a forward pass
    // that a request arriving meanwhile waits for.
    int speculate;
    // next-token only: how the answer was made (model/gpt2_capture.h), off by default. lens:
    // the logit lens at the prompt's last position, lens_k (1..V) tokens per stage, following
    // the answer's first SCHED_LENS_TRACK candidates through the stages; attention: every
    // layer's attention at prompt position attention_pos over the positions up to it. The
    // prompt then runs in the job's own passes: the lens needs its last token to run (a prompt
    // cached whole runs that token again), the attention all of it from the first (no cached
    // prefix). The answer's entry carries the result (SchedToken.explain).
    int lens;
    size_t lens_k;
    int attention;
    size_t attention_pos;
} SchedParams;

// The answer's candidates a lens follows through the stages (at most).
#define SCHED_LENS_TRACK 20

// What a next-token job asked to see of its answer (SchedParams.lens, .attention).
typedef struct {
    Gpt2Lens lens;    // n_stages 0 when not asked
    float *attention; // (L, NH, attention_pos + 1) softmax probabilities; NULL when not asked
    size_t layers, heads, attention_pos;
} SchedExplain;

typedef enum {
    SCHED_RUNNING,
    SCHED_DONE_LENGTH, // max_tokens reached (or the context is full)
    SCHED_DONE_STOP,   // a stop string matched
    SCHED_DONE_EOS,    // the model produced the end-of-text token
    SCHED_DONE_ERROR,  // see the job's error code and message
    SCHED_DONE_CANCELLED
} SchedState;

// One generated token. A next-token job yields one entry with id -1 and the candidates.
// A generation may end with an entry of id -1 that only carries text: what was held back
// because it could have been the start of a stop string or of a UTF-8 character.
typedef struct {
    int id;
    float logprob;
    const char *text; // the UTF-8 text this token completes (never half a character)
    size_t text_len;
    const KgCandidate *candidates; // n_candidates of them, best first
    size_t n_candidates;
    int prompt; // a prompt token's score (score_prompt), not a generated token
    // a prompt token's rank at its position over the whole vocabulary (logits_rank: 1 = the
    // model's top choice), exact however far down; 0 for the first token and generated ones
    size_t rank;
    // a next-token entry: the entropy (nats) of the whole distribution its candidates come
    // from, at the job's temperature; else 0
    double entropy;
    const SchedExplain *explain; // a next-token entry's lens and attention, when asked; or NULL
} SchedToken;

// Timing and cache figures of a job, for the response's "timings" and the metrics.
typedef struct {
    size_t prompt_tokens, cached_tokens, generated_tokens;
    double queue_ms, prefill_ms, decode_ms, total_ms;
} SchedStats;

// Starts the engine thread on a loaded model and tokenizer (both must outlive it).
// KG_OK and *out, or an error (KG_ENOMEM, KG_EINVAL for bad options).
int sched_start(Sched **out, const Gpt2 *m, const Tokenizer *tok, const SchedOptions *opt,
                char *err);
// Stops taking jobs (sched_submit answers KG_ECANCEL from here on), lets the running ones
// finish (up to timeout_ms, then cancels them) and joins the engine thread. The engine's
// memory stays until sched_free(), so an HTTP thread still dispatching a request gets that
// clean refusal instead of freed memory. Jobs still held by callers stay valid until
// released.
void sched_stop(Sched *s, int timeout_ms);
// Frees the engine (stopping it first if needed), once nothing can call sched_* any more.
void sched_free(Sched *s);

// Queues a job. KG_EBUSY when the queue is full (HTTP 429), KG_ERANGE when the prompt is
// longer than max_prompt or a token id is outside the vocabulary (message says which),
// KG_EINVAL for bad parameters, KG_ECANCEL when stopping. notify(ctx) runs on the engine
// thread whenever the job has new output or finishes. On KG_OK the caller owns *job and
// must call sched_seq_release() once.
int sched_submit(Sched *s, const SchedParams *p, void (*notify)(void *ctx), void *ctx,
                 SchedSeq **job, char *err);

// Copies out the tokens produced since the last call (at most cap), and the job's state.
// The SchedToken strings and candidates stay valid until the job is released.
size_t sched_seq_read(SchedSeq *j, SchedToken *out, size_t cap, SchedState *state);
// Error code and message of a job in SCHED_DONE_ERROR.
int sched_seq_error(SchedSeq *j, char *err);
void sched_seq_stats(SchedSeq *j, SchedStats *stats);
// The client went away: stop working on the job (its slot is freed at the next step).
void sched_seq_cancel(SchedSeq *j);
// Drops the caller's reference; cancels the job if it is still running. Once it returns,
// the job's notify callback is never called again (so ctx may be freed).
void sched_seq_release(SchedSeq *j);

// Gauges for /metrics: jobs waiting, jobs running, rows in the last batch, the KV pool and
// the prefix cache.
typedef struct {
    size_t queued, running, last_batch_rows;
    size_t cache_entries, cache_bytes, cache_capacity; // registered blocks + remembered logits
    KvPoolStats kv; // the pool's blocks by state, block refs, bytes (kv.h)
    uint64_t steps, cached_tokens_total, prompt_tokens_total, generated_tokens_total;
    uint64_t preemptions_total; // jobs whose blocks were taken back to let a step run
    // speculative next clicks finished (their logits remembered, or found not worth it): a
    // test waits on it instead of sleeping while the idle engine speculates
    uint64_t speculations_total;
} SchedGauges;
void sched_gauges(Sched *s, SchedGauges *g);

#endif
