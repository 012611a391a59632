// sched_plan.c — the batch planner (sched_plan.h): replays of preempted jobs and prefill chunks
// within a row budget, a scoring budget, one decode row per generating job.
#include "sched_plan.h"

size_t sched_plan_logits_rows(const Gpt2Seq *q) {
    return q->logits == GPT2_LOGITS_ALL ? q->n : q->logits == GPT2_LOGITS_LAST ? 1 : 0;
}

// 1 when j's next row is a decode row: a decoding job holding every position before it.
static int sched_plan_decodes(const SchedSeq *j) {
    return j->work.phase == SCHED_DECODE && j->work.kv.len >= sched_seq_replay_target(j);
}

size_t sched_plan_prefill_budget(SchedSeq *const *active, size_t n_active, size_t step_tokens) {
    size_t decoding = 0;
    for (size_t i = 0; i < n_active; i++)
        decoding += sched_plan_decodes(active[i]);
    size_t left = step_tokens > decoding ? step_tokens - decoding : 0;
    size_t least = decoding ? SCHED_MIN_PREFILL_ROWS : SCHED_IDLE_PREFILL_ROWS;
    return left > least ? left : least;
}

// The positions a preempted j lost, from kv.len on, within the budget (which shrinks by
// them), as a sequence without logits; n = 0 when the budget is spent.
static Gpt2Seq sched_plan_replay(SchedSeq *j, size_t *budget) {
    size_t run, len = j->work.kv.len, left = sched_seq_replay_target(j) - len;
    const int *tokens = sched_seq_tokens_at(j, len, &run);
    size_t n = left < run ? left : run;
    if (n > *budget) n = *budget;
    *budget -= n;
    return (Gpt2Seq){&j->work.kv, tokens, n, GPT2_LOGITS_NONE};
}

// The next chunk of j's prompt within the budgets (both shrink by it): its sequence, or
// n = 0 when a budget is spent.
static Gpt2Seq sched_plan_prefill(SchedSeq *j, size_t *budget, size_t *score_budget) {
    const SchedParams *p = &j->in.p;
    size_t left = p->n_tokens - j->work.n_fed;
    size_t n = left < *budget ? left : *budget;
    if (p->score_prompt && n > *score_budget) n = *score_budget;
    *budget -= n;
    if (p->score_prompt) *score_budget -= n;
    Gpt2Logits logits = p->score_prompt ? GPT2_LOGITS_ALL
                        : n == left     ? GPT2_LOGITS_LAST
                                        : GPT2_LOGITS_NONE;
    return (Gpt2Seq){&j->work.kv, p->tokens + j->work.n_fed, n, logits};
}

size_t sched_plan_step(SchedSeq *const *active, size_t n_active, size_t prefill_budget,
                       Gpt2Seq *seqs, SchedPlanEntry *entries, size_t *rows) {
    size_t n_seq = 0, n_logits = 0, budget = prefill_budget, score_budget = SCHED_PLAN_SCORE_ROWS;
    *rows = 0;
    for (size_t i = 0; i < n_active; i++) {
        SchedSeq *j = active[i];
        Gpt2Seq *q = &seqs[n_seq];
        int replay = j->work.kv.len < sched_seq_replay_target(j);
        if (replay)
            *q = sched_plan_replay(j, &budget);
        else if (j->work.phase == SCHED_PREFILL)
            *q = sched_plan_prefill(j, &budget, &score_budget);
        else
            *q = (Gpt2Seq){&j->work.kv, &j->work.next_id, 1, GPT2_LOGITS_LAST};
        if (q->n == 0) continue; // the budget is spent: next step
        entries[n_seq++] = (SchedPlanEntry){j, n_logits, replay};
        n_logits += sched_plan_logits_rows(q);
        *rows += q->n;
    }
    return n_seq;
}
