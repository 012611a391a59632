// pcache.h — the prefix cache: KV caches of recent prompts keyed by their token ids, each
// with the logits after its last token, bounded in memory, least recently used out first.
//
// A prompt that extends a cached one (the Explorer appends one token per click) copies the
// cached keys and values and computes only the new tokens; a prompt that is cached whole
// costs no forward pass at all. Only the engine thread uses it: no locking. (/v1/score's memo
// of finished per-position scores, for the HTTP threads, is beside it: score_memo.h.)
#ifndef PCACHE_H
#define PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt2.h"

typedef struct PCache PCache;

typedef struct {
    int *tokens; // the key (n ids)
    size_t n;
    KvCache kv;     // positions 0..n-1 of exactly these tokens
    float *logits;  // (V) after tokens[n-1]
    size_t bytes;   // what the entry counts against the capacity
    uint64_t stamp; // last use, for LRU
} PCacheEntry;

// NULL on OOM. capacity_bytes 0 disables caching (lookups miss, inserts do nothing).
PCache *pcache_new(const Gpt2 *m, size_t capacity_bytes);
void pcache_free(PCache *c);

// The entry sharing the longest prefix with tokens (n of them); *match is the length shared
// (<= the entry's n). NULL (and *match 0) when nothing shares a first token. The entry is
// valid until the next pcache_insert.
const PCacheEntry *pcache_lookup(PCache *c, const int *tokens, size_t n, size_t *match);

// Stores a copy of kv's first n positions and of logits (V) under tokens, evicting the
// least recently used entries to make room. An entry larger than the whole capacity is not
// stored (KG_OK). KG_ENOMEM when memory runs out.
int pcache_insert(PCache *c, const int *tokens, size_t n, const KvCache *kv, const float *logits,
                  char *err);

typedef struct {
    size_t entries, bytes, capacity;
} PCacheStats;
void pcache_stats(const PCache *c, PCacheStats *st);

#endif
