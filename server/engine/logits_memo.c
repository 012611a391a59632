// logits_memo.c — the logits memo (logits_memo.h): a fixed array of entries, a linear search by
// hash and length (a few dozen entries), the least recently used replaced by a use counter.
#include "logits_memo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/kv.h"

typedef struct {
    uint64_t hash; // kv_tokens_hash of its tokens
    size_t n;      // 0: empty
    uint64_t stamp;
} MemoEntry;

struct LogitsMemo {
    size_t cap, max_tokens, V;
    MemoEntry *entries; // (cap)
    int *tokens;        // (cap, max_tokens) each entry's prompt
    float *rows;        // (cap, V) the logits after it
    uint64_t clock;
};

LogitsMemo *logits_memo_new(size_t capacity, size_t max_tokens, size_t V) {
    LogitsMemo *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    *m = (LogitsMemo){.cap = capacity, .max_tokens = max_tokens, .V = V};
    size_t slots = capacity ? capacity : 1;
    m->entries = calloc(slots, sizeof *m->entries);
    m->tokens = malloc(slots * max_tokens * sizeof *m->tokens);
    m->rows = malloc(slots * V * sizeof *m->rows);
    if (!m->entries || !m->tokens || !m->rows) {
        logits_memo_free(m);
        return NULL;
    }
    return m;
}

void logits_memo_free(LogitsMemo *m) {
    if (!m) return;
    free(m->entries);
    free(m->tokens);
    free(m->rows);
    free(m);
}

// The entry holding exactly tokens (n), or -1.
static long memo_find(const LogitsMemo *m, uint64_t hash, const int *tokens, size_t n) {
    for (size_t i = 0; i < m->cap; i++)
        if (m->entries[i].n == n && m->entries[i].hash == hash &&
            !memcmp(m->tokens + i * m->max_tokens, tokens, n * sizeof *tokens))
            return (long)i;
    return -1;
}

const float *logits_memo_get(LogitsMemo *m, const int *tokens, size_t n) {
    long i = n ? memo_find(m, kv_tokens_hash(tokens, n), tokens, n) : -1;
    if (i < 0) return NULL;
    m->entries[i].stamp = ++m->clock;
    return m->rows + (size_t)i * m->V;
}

void logits_memo_put(LogitsMemo *m, const int *tokens, size_t n, const float *row) {
    if (!m->cap || !n || n > m->max_tokens) return;
    uint64_t hash = kv_tokens_hash(tokens, n);
    long at = memo_find(m, hash, tokens, n); // the same prompt again: its row is refreshed
    for (size_t i = 0; at < 0 && i < m->cap; i++)
        if (!m->entries[i].n) at = (long)i; // an empty entry first
    if (at < 0) {                           // else the least recently used
        at = 0;
        for (size_t i = 1; i < m->cap; i++)
            if (m->entries[i].stamp < m->entries[at].stamp) at = (long)i;
    }
    m->entries[at] = (MemoEntry){hash, n, ++m->clock};
    memcpy(m->tokens + (size_t)at * m->max_tokens, tokens, n * sizeof *tokens);
    memcpy(m->rows + (size_t)at * m->V, row, m->V * sizeof *row);
}

size_t logits_memo_bytes(const LogitsMemo *m) {
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++)
        n += m->entries[i].n != 0;
    return n * m->V * sizeof(float);
}

size_t logits_memo_capacity_bytes(const LogitsMemo *m) { return m->cap * m->V * sizeof(float); }
