// sched_explain.c — a next-token job's lens and attention view (sched_explain.h).
#include "sched_explain.h"

#include <stdlib.h>

int sched_explain_capture(const Gpt2 *m, SchedSeq *j) {
    const SchedParams *p = &j->in.p;
    char err[KG_ERRLEN];
    Gpt2Capture *c = calloc(1, sizeof *c);
    int rc =
        c ? gpt2_capture_init(c, m, p->lens, p->n_tokens - 1, p->attention, p->attention_pos, err)
          : kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(c);
        sched_seq_finish(j, SCHED_DONE_ERROR, rc, err);
        return rc;
    }
    j->work.capture = c;
    return KG_OK;
}

void sched_explain_release(const Gpt2 *m, SchedSeq *j) {
    if (!j->work.capture) return;
    gpt2_capture_free(j->work.capture, m);
    free(j->work.capture);
    j->work.capture = NULL;
}

void sched_explain_free(SchedExplain *e) {
    if (!e) return;
    gpt2_lens_free(&e->lens);
    free(e->attention);
    free(e);
}

SchedExplain *sched_explain_make(const Gpt2 *m, size_t V, SchedSeq *j,
                                 const KgCandidate *candidates, int *rc, char *err) {
    const SchedParams *p = &j->in.p;
    *rc = KG_OK;
    if (!j->work.capture) return NULL;
    SchedExplain *e = calloc(1, sizeof *e);
    if (!e) {
        *rc = kg_err(err, KG_ENOMEM, "out of memory");
        return NULL;
    }
    if (p->lens) {
        int tracked[SCHED_LENS_TRACK];
        size_t n = candidates ? p->n_candidates : 0;
        n = n < SCHED_LENS_TRACK ? n : SCHED_LENS_TRACK;
        for (size_t i = 0; i < n; i++)
            tracked[i] = candidates[i].id;
        *rc = gpt2_capture_lens(m, j->work.capture, V, p->lens_k, tracked, n, &e->lens, err);
    }
    if (!*rc && p->attention) {
        e->layers = m->config.n_layer;
        e->heads = m->config.n_head;
        e->attention_pos = p->attention_pos; // < n_ctx: the product stays small
        e->attention = malloc(e->layers * e->heads * (p->attention_pos + 1) * sizeof(float));
        *rc = e->attention ? gpt2_capture_attention(m, j->work.capture, e->attention, err)
                           : kg_err(err, KG_ENOMEM, "out of memory");
    }
    sched_explain_release(m, j);
    if (*rc) {
        sched_explain_free(e);
        return NULL;
    }
    return e;
}
