// sched_plan.c — the batch planner (sched_plan.h): prefill chunks within a row budget, a
// scoring budget, one decode row per generating job.
#include "sched_plan.h"

size_t sched_plan_logits_rows(const Gpt2Seq *q) {
    return q->logits == GPT2_LOGITS_ALL ? q->n : q->logits == GPT2_LOGITS_LAST ? 1 : 0;
}

// The next chunk of j's prompt within the budgets (both shrink by it): its sequence, or
// n = 0 when a budget is spent.
static Gpt2Seq sched_plan_prefill(SchedJob *j, size_t *budget, size_t *score_budget) {
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

size_t sched_plan_step(SchedJob *const *active, size_t n_active, size_t prefill_chunk,
                       Gpt2Seq *seqs, SchedPlanEntry *entries, size_t *rows) {
    size_t n_seq = 0, n_logits = 0, budget = prefill_chunk, score_budget = SCHED_PLAN_SCORE_ROWS;
    *rows = 0;
    for (size_t i = 0; i < n_active; i++) {
        SchedJob *j = active[i];
        Gpt2Seq *q = &seqs[n_seq];
        if (j->work.phase == SCHED_PREFILL) {
            *q = sched_plan_prefill(j, &budget, &score_budget);
            if (q->n == 0) continue; // the budget is spent: next step
        } else {
            *q = (Gpt2Seq){&j->work.kv, &j->work.next_id, 1, GPT2_LOGITS_LAST};
        }
        entries[n_seq++] = (SchedPlanEntry){j, n_logits};
        n_logits += sched_plan_logits_rows(q);
        *rows += q->n;
    }
    return n_seq;
}
