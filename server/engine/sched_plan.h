// sched_plan.h — the batch planner: which rows of which jobs go into the engine's next forward.
// A new batching policy is written here alone; sched.c reserves the rows' KV blocks, runs the
// forward and hands each job its rows of logits.
//
// The policy: every active job, in admission order, may add one sequence. A decoding job
// feeds the one token it sampled. A job still reading its prompt feeds the next chunk of it
// from one budget of prompt rows per step (sched_plan_prefill_budget: the step's token budget
// less the decode rows), so a long prompt enters in pieces between the running streams'
// tokens; a prompt being scored (logits at every position) also takes at most
// SCHED_PLAN_SCORE_ROWS of it, which bounds the extra logits memory. A job that was preempted
// first replays the positions it lost (no logits) from the same budget. A chunk whose turn
// comes with the budget spent waits for the next step. Logits: the last prompt row (the
// answer or the first sampled token), every row of a scored prompt, a decode row.
#ifndef SCHED_PLAN_H
#define SCHED_PLAN_H

#include <stddef.h>

#include "sched_seq.h"

// Logits rows per step for prompts being scored: at most this many times V extra floats.
#define SCHED_PLAN_SCORE_ROWS 32

// One sequence of a planned step: its job, where its rows start in the forward's logits, and
// whether it only replays positions a preemption took (nothing to consume).
typedef struct {
    SchedSeq *job;
    size_t first_row;
    int replay;
} SchedPlanEntry;

// Prompt rows a step takes when no job decodes: nobody waits on the chunks, and a prompt in
// fewer, larger chunks reads the weights fewer times.
#define SCHED_IDLE_PREFILL_ROWS 256

// The prompt rows a step may take: step_tokens less one row per decoding job, at least
// SCHED_MIN_PREFILL_ROWS (a prompt always moves on, however many jobs decode), and at least
// SCHED_IDLE_PREFILL_ROWS when none decodes.
size_t sched_plan_prefill_budget(SchedSeq *const *active, size_t n_active, size_t step_tokens);

// Plans the next forward over active[0 .. n_active): fills seqs[i] and entries[i] (room for
// n_active each) and returns how many; *rows is the token rows fed. Changes no job: the
// caller advances each job's n_fed by its sequence's n once the forward has run.
size_t sched_plan_step(SchedSeq *const *active, size_t n_active, size_t prefill_budget,
                       Gpt2Seq *seqs, SchedPlanEntry *entries, size_t *rows);

// The rows of logits gpt2_forward writes for q.
size_t sched_plan_logits_rows(const Gpt2Seq *q);

#endif
