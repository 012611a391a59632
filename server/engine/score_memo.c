// score_memo.c — the prompts last scored and their per-position scores (score_memo.h).
#include "score_memo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SCORE_MEMO_N 16 // prompts remembered

typedef struct {
    int *tokens;   // (n)
    ScorePos *pos; // (n)
    size_t n;
} ScoreMemoEntry;

struct ScoreMemo {
    pthread_mutex_t mu;
    ScoreMemoEntry entries[SCORE_MEMO_N];
    size_t next; // the entry to replace next (the oldest)
};

ScoreMemo *score_memo_new(void) {
    ScoreMemo *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void score_memo_free(ScoreMemo *m) {
    if (!m) return;
    for (size_t i = 0; i < SCORE_MEMO_N; i++) {
        free(m->entries[i].tokens);
        free(m->entries[i].pos);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

size_t score_memo_lookup(ScoreMemo *m, const int *tokens, size_t n, ScorePos *pos) {
    if (!m) return 0;
    pthread_mutex_lock(&m->mu);
    size_t best = 0, best_i = 0;
    for (size_t i = 0; i < SCORE_MEMO_N; i++) {
        const ScoreMemoEntry *e = &m->entries[i];
        size_t shared = 0;
        while (shared < e->n && shared < n && e->tokens[shared] == tokens[shared])
            shared++;
        if (shared > best) best = shared, best_i = i;
    }
    if (best) memcpy(pos, m->entries[best_i].pos, best * sizeof *pos);
    pthread_mutex_unlock(&m->mu);
    return best;
}

void score_memo_insert(ScoreMemo *m, const int *tokens, const ScorePos *pos, size_t n) {
    if (!m) return;
    int *t = malloc(n * sizeof *t);
    ScorePos *p = malloc(n * sizeof *p);
    if (!t || !p) {
        free(t);
        free(p);
        return;
    }
    memcpy(t, tokens, n * sizeof *t);
    memcpy(p, pos, n * sizeof *p);
    pthread_mutex_lock(&m->mu);
    ScoreMemoEntry *e = &m->entries[m->next++ % SCORE_MEMO_N];
    free(e->tokens);
    free(e->pos);
    *e = (ScoreMemoEntry){t, p, n};
    pthread_mutex_unlock(&m->mu);
}
