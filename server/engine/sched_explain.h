// sched_explain.h — inside the engine: a next-token job's lens and attention view
// (SchedParams.lens, .attention; model/gpt2_capture.h). At admission the job gets a capture,
// which sched.c hands the forward with the job's sequence (Gpt2State.captures); when its prompt
// is done the capture becomes the answer's SchedExplain, and is released. Engine thread only.
#ifndef SCHED_EXPLAIN_H
#define SCHED_EXPLAIN_H

#include "sched_seq.h"

// j's capture (j asked for a lens or an attention view). KG_OK, or an error with j finished.
int sched_explain_capture(const Gpt2 *m, SchedSeq *j);

// What j asked to see of its answer, from its capture (which is released), the lens following
// the answer's first candidates (n_candidates of j's, NULL when none) over the first V ids:
// NULL with *rc KG_OK when it asked nothing; NULL with *rc and err set on failure. Costs the LM
// head over L + 1 rows (the lens) and L NH (P) dot products of hs on the host (the attention).
SchedExplain *sched_explain_make(const Gpt2 *m, size_t V, SchedSeq *j,
                                 const KgCandidate *candidates, int *rc, char *err);

// Releases j's capture, if it has one (a job that ends before its answer).
void sched_explain_release(const Gpt2 *m, SchedSeq *j);

// Frees an explanation (NULL is fine): what SchedToken.explain points to.
void sched_explain_free(SchedExplain *e);

#endif
