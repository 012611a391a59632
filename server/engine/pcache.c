// pcache.c — the prefix cache (pcache.h): an unordered array of entries, a linear longest-prefix
// search, least-recently-used eviction by a use counter.
#include "pcache.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

struct PCache {
    const Gpt2 *m;
    PCacheEntry *entries; // unordered; a prompt cache holds tens to hundreds of entries
    size_t n, cap;
    size_t bytes, capacity;
    uint64_t clock;
};

PCache *pcache_new(const Gpt2 *m, size_t capacity_bytes) {
    PCache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->m = m;
    c->capacity = capacity_bytes;
    return c;
}

static void pcache_entry_free(PCache *c, PCacheEntry *e) {
    kv_free(&e->kv, c->m);
    free(e->tokens);
    free(e->logits);
}

void pcache_free(PCache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++)
        pcache_entry_free(c, &c->entries[i]);
    free(c->entries);
    free(c);
}

static size_t pcache_common_prefix(const int *a, size_t na, const int *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

const PCacheEntry *pcache_lookup(PCache *c, const int *tokens, size_t n, size_t *match) {
    PCacheEntry *best = NULL;
    *match = 0;
    for (size_t i = 0; i < c->n; i++) {
        size_t shared = pcache_common_prefix(c->entries[i].tokens, c->entries[i].n, tokens, n);
        // prefer the longer match; among equals the shorter entry (cheaper to copy)
        if (shared > *match || (shared && shared == *match && c->entries[i].n < best->n)) {
            *match = shared;
            best = &c->entries[i];
        }
    }
    if (best) best->stamp = ++c->clock;
    return best;
}

static void pcache_evict_lru(PCache *c) {
    size_t lru = 0;
    for (size_t i = 1; i < c->n; i++)
        if (c->entries[i].stamp < c->entries[lru].stamp) lru = i;
    c->bytes -= c->entries[lru].bytes;
    pcache_entry_free(c, &c->entries[lru]);
    c->entries[lru] = c->entries[--c->n];
}

int pcache_insert(PCache *c, const int *tokens, size_t n, const KvCache *kv, const float *logits,
                  char *err) {
    const size_t V = c->m->config.vocab_size;
    size_t bytes = kv_bytes(&c->m->config, n) + V * sizeof(float) + n * sizeof(int);
    if (n == 0 || bytes > c->capacity) return KG_OK;
    for (size_t i = 0; i < c->n; i++) // the same prompt again: refresh its stamp only
        if (c->entries[i].n == n && !memcmp(c->entries[i].tokens, tokens, n * sizeof *tokens)) {
            c->entries[i].stamp = ++c->clock;
            return KG_OK;
        }
    while (c->n && c->bytes + bytes > c->capacity)
        pcache_evict_lru(c);
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        PCacheEntry *grown = realloc(c->entries, cap * sizeof *grown);
        if (!grown) return kg_err(err, KG_ENOMEM, "prefix cache: out of memory");
        c->entries = grown;
        c->cap = cap;
    }
    PCacheEntry e = {.n = n, .bytes = bytes, .stamp = ++c->clock};
    e.tokens = malloc(n * sizeof *e.tokens);
    e.logits = malloc(V * sizeof *e.logits);
    if (!e.tokens || !e.logits || kv_copy(&e.kv, kv, n, c->m, err)) {
        pcache_entry_free(c, &e);
        return kg_err(err, KG_ENOMEM, "prefix cache: out of memory");
    }
    memcpy(e.tokens, tokens, n * sizeof *tokens);
    memcpy(e.logits, logits, V * sizeof *logits);
    c->entries[c->n++] = e;
    c->bytes += bytes;
    return KG_OK;
}

void pcache_stats(const PCache *c, PCacheStats *st) {
    *st = (PCacheStats){c->n, c->bytes, c->capacity};
}
