// score_memo.h — /v1/score's memo: the per-position scores of the prompts scored last, so a
// prompt sharing a prefix with one of them (the Explorer's next click, or a retyped last
// word) needs only its new positions scored. A position's score depends only on the tokens
// up to it, so a shared prefix's scores are exact.
//
// Beside the prefix cache (pcache.h), which keeps KV caches and logits on the engine thread,
// this keeps finished answers for the HTTP threads: one per app (SrvApp.score_memo), a fixed
// number of prompts, the oldest replaced first. Thread-safe (one mutex).
#ifndef SCORE_MEMO_H
#define SCORE_MEMO_H

#include <stddef.h>

// One prompt position's score.
typedef struct {
    int id, top_id;
    int rank; // 1.., 0: beyond the ranks reported or not scored (the first token)
    float logprob, top_logprob;
    int scored; // 0 for the first token
} ScorePos;

typedef struct ScoreMemo ScoreMemo;

// NULL on OOM (callers then remember nothing: every function takes NULL).
ScoreMemo *score_memo_new(void);
void score_memo_free(ScoreMemo *m);

// Copies the scores of the longest remembered prefix of tokens (n) into pos and returns its
// length (0: none).
size_t score_memo_lookup(ScoreMemo *m, const int *tokens, size_t n, ScorePos *pos);

// Remembers the scores pos (n) of tokens (n), replacing the oldest prompt; on OOM nothing is
// remembered.
void score_memo_insert(ScoreMemo *m, const int *tokens, const ScorePos *pos, size_t n);

#endif
