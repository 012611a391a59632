// sched_spec.c — the speculative next clicks (sched_engine.h): after a next-token answer that
// asked for it, and only while the engine is idle, the answer's best candidates run one token
// further as one batch (one pass over the weights for all of them), and their logits are
// remembered (logits_memo.h). The click the user is most likely to make is then answered with
// no forward pass. Each candidate's sequence shares the prompt's blocks from the prefix cache;
// only the prompt's partly filled last block is copied for each (copy-on-write).
#include <stdlib.h>
#include <string.h>

#include "sched_engine.h"

int sched_work_waiting(void *arg) {
    Sched *s = arg;
    pthread_mutex_lock(&s->shared.mu);
    int waiting = s->shared.queue_head || s->shared.stopping;
    pthread_mutex_unlock(&s->shared.mu);
    return waiting;
}

void sched_spec_remember(Sched *s, const SchedParams *p, const KgCandidate *candidates) {
    Speculation *sp = &s->spec;
    if (!candidates || p->n_tokens + 1 > s->m->config.n_ctx) return; // no room for one more
    int *copy = malloc((p->n_tokens + 1) * sizeof *copy);
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

// Candidate i's sequence, the prompt's blocks from the cache and room for the candidate: KG_OK,
// 1 when its logits are remembered already (nothing to run), KG_EBUSY when the prompt's
// blocks have left the cache or no block is left (the guess is not worth a prefill).
static int sched_spec_seq(Sched *s, size_t i, KvSeq *kv) {
    Speculation *sp = &s->spec;
    const size_t n = sp->n;
    sp->prompt[n] = sp->candidates[i];
    size_t got = kv_seq_match(kv, sp->prompt, n + 1);
    if (got == n + 1 && logits_memo_get(s->memo, sp->prompt, n + 1)) return 1;
    kv_seq_truncate(kv, n); // the candidate's own position runs (a cached one is recomputed)
    if (got < n || kv_seq_reserve(kv, 1, NULL)) return KG_EBUSY;
    return KG_OK;
}

void sched_speculate(Sched *s) {
    Speculation *sp = &s->spec;
    size_t n_seq = 0;
    int rc = KG_OK;
    for (size_t i = 0; i < sp->n_candidates && !rc; i++) {
        if (sched_work_waiting(s)) { // a job is worth more than the guess
            rc = KG_ECANCEL;
            break;
        }
        KvSeq *kv = &sp->kv[n_seq];
        int got = sched_spec_seq(s, i, kv);
        if (got == KG_OK)
            s->seqs[n_seq++] = (Gpt2Seq){kv, &sp->candidates[i], 1, GPT2_LOGITS_LAST};
        else
            kv_seq_reset(kv);
        if (got == KG_EBUSY) rc = got;
    }
    if (rc == KG_EBUSY) rc = KG_OK; // run the candidates that found room; forget the rest
    s->st.cancel = sched_work_waiting;
    if (!rc && n_seq) rc = gpt2_forward(s->m, &s->st, s->seqs, n_seq, NULL);
    s->st.cancel = NULL; // the jobs' own steps always run to the end
    for (size_t i = 0; i < n_seq; i++) {
        if (!rc) {
            sp->prompt[sp->n] = *s->seqs[i].tokens;
            logits_memo_put(s->memo, sp->prompt, sp->n + 1, sched_logits_row(s, i));
        }
        kv_seq_reset(&sp->kv[i]); // its block joins the prefix cache
    }
    if (rc == KG_ECANCEL) return; // kept for the next idle moment
    free(sp->prompt);             // done (or not worth it): forget the guess
    sp->prompt = NULL;
    sp->n = sp->n_candidates = 0;
    pthread_mutex_lock(&s->shared.mu);
    s->shared.gauges.speculations_total++;
    pthread_mutex_unlock(&s->shared.mu);
}
