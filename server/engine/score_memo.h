// score_memo.h — /v1/score's memo: the per-position scores of the prompts scored last, so a
// prompt sharing a prefix with one of them (the Explorer's next click, or a retyped last
// word) needs only its new positions scored. A position's score depends only on the tokens
// up to it, so a shared prefix's scores are exact.
//
// Beside the prefix cache (model/kv.h's shared blocks) and the logits memo (logits_memo.h),
// which the engine thread keeps, this keeps finished answers for the HTTP threads: one per app
// (ApiApp.score_memo), a fixed number of prompts, the oldest replaced first. Thread-safe (one
// mutex).
#ifndef SCORE_MEMO_H
#define SCORE_MEMO_H

#include <stddef.h>

// The model's best tokens kept per position (/v1/score's top_alternatives asks 0..this): a
// fixed array, so a position costs ~100 bytes and the memo's 16 prompts of at most n_ctx
// positions at most 1.6 MB at n_ctx 1024.
#define SCORE_MAX_ALTERNATIVES 10

// One prompt position's score.
typedef struct {
    int id;
    int rank; // 1.. over the whole vocabulary (1: the model's top choice); 0: not scored
    float logprob;
    int scored;   // 0 for the first token, which nothing predicts
    size_t n_alt; // the model's best tokens there, best first (alt_id[0] is its top choice)
    int alt_id[SCORE_MAX_ALTERNATIVES];
    float alt_logprob[SCORE_MAX_ALTERNATIVES];
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
