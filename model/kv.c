// kv.c — the block pool (kv.h): allocation from a free stack, refcounts, the prefix cache's
// keys (a hash table of every registered block's token prefixes) and its LRU list,
// copy-on-write of a shared last block, and the block addressing the attention ops read.
//
// A block is in exactly one of three states: held (refs > 0; registered or not), cached
// (refs 0, registered: on the LRU list), free (refs 0, unregistered: on the free stack).
// A registered block with fill f has f keys: entry b * 16 + k - 1 is the rolling hash of the
// sequence's tokens up to the block's k-th, so a lookup finds a block by any prefix of it.
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

#define KV_NONE UINT32_MAX

typedef struct {
    uint64_t serial;     // the identity of what the block holds; new at each allocation
    uint64_t parent;     // serial of the block before it in the sequence that wrote it (0: none)
    uint64_t h0;         // the rolling hash of every token before the block
    uint32_t refs;       // sequences whose tables hold it
    uint32_t fill;       // registered: positions its keys cover (1..16); 0: not registered
    uint32_t prev, next; // the LRU list while cached (prev: older)
    int touched;         // written at least once since the pool was made
    int tokens[KV_BLOCK_LEN];
} KvBlock;

struct KvPool {
    KgBackend *be;
    size_t L, NH, hs, n_ctx;
    KgDtype dtype;
    size_t row_bytes;   // one head's hs values of one position
    size_t block_bytes; // L * 2 * NH * KV_BLOCK_LEN * row_bytes
    size_t max_blocks;  // a sequence's table: blocks for n_ctx positions
    char *data;         // backend memory, n_blocks * block_bytes
    KvBlock *blocks;    // (n_blocks) host
    uint32_t n_blocks;
    uint32_t *free_stack; // (n_blocks) free block ids, the most recently freed on top
    size_t n_free;
    uint32_t lru_oldest, lru_newest; // cached blocks
    size_t n_lru, cache_limit;
    uint64_t *key;      // (n_blocks * 16) an entry's rolling hash
    uint32_t *key_next; // (n_blocks * 16) the next entry in its bucket
    uint32_t *bucket;   // (bucket_mask + 1) an entry, or KV_NONE
    size_t bucket_mask;
    uint64_t next_serial;
    size_t n_registered, n_touched, n_refs;
    KvPoolStats st; // the counters; the block counts are filled in when asked
};

// ---------------------------------------------------------------------------------------
// Hashing: one 64-bit state rolled over the tokens (splitmix64's finalizer as the mix)

#define KV_HASH_SEED 0x6b6f67707432ull // "kogpt2"

static uint64_t kv_hash_step(uint64_t h, int token) {
    uint64_t z = h + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)token + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// ---------------------------------------------------------------------------------------
// The prefix cache's keys

static uint32_t *kv_bucket_of(KvPool *p, uint64_t key) { return &p->bucket[key & p->bucket_mask]; }

// Adds block b's keys for its first b->fill tokens.
static void kv_keys_add(KvPool *p, uint32_t b) {
    const KvBlock *blk = &p->blocks[b];
    uint64_t h = blk->h0;
    for (uint32_t k = 1; k <= blk->fill; k++) {
        uint32_t e = b * KV_BLOCK_LEN + k - 1;
        h = kv_hash_step(h, blk->tokens[k - 1]);
        uint32_t *head = kv_bucket_of(p, h);
        p->key[e] = h;
        p->key_next[e] = *head;
        *head = e;
    }
}

static void kv_keys_remove(KvPool *p, uint32_t b) {
    for (uint32_t k = 1; k <= p->blocks[b].fill; k++) {
        uint32_t e = b * KV_BLOCK_LEN + k - 1, *link = kv_bucket_of(p, p->key[e]);
        while (*link != e)
            link = &p->key_next[*link];
        *link = p->key_next[e];
    }
}

// A registered block whose first k tokens are tokens[0, k) after the block with serial parent,
// the rolling hash then being h; KV_NONE if none.
static uint32_t kv_find(const KvPool *p, uint64_t h, uint64_t parent, const int *tokens,
                        uint32_t k) {
    for (uint32_t e = p->bucket[h & p->bucket_mask]; e != KV_NONE; e = p->key_next[e]) {
        const KvBlock *blk = &p->blocks[e / KV_BLOCK_LEN];
        if (p->key[e] == h && e % KV_BLOCK_LEN == k - 1 && blk->parent == parent &&
            !memcmp(blk->tokens, tokens, k * sizeof *tokens))
            return e / KV_BLOCK_LEN;
    }
    return KV_NONE;
}

// ---------------------------------------------------------------------------------------
// Block states

static void kv_lru_unlink(KvPool *p, uint32_t b) {
    KvBlock *blk = &p->blocks[b];
    if (blk->prev != KV_NONE)
        p->blocks[blk->prev].next = blk->next;
    else
        p->lru_oldest = blk->next;
    if (blk->next != KV_NONE)
        p->blocks[blk->next].prev = blk->prev;
    else
        p->lru_newest = blk->prev;
    p->n_lru--;
}

static void kv_lru_push(KvPool *p, uint32_t b) {
    KvBlock *blk = &p->blocks[b];
    blk->prev = p->lru_newest;
    blk->next = KV_NONE;
    if (p->lru_newest != KV_NONE)
        p->blocks[p->lru_newest].next = b;
    else
        p->lru_oldest = b;
    p->lru_newest = b;
    p->n_lru++;
}

// blk is written (its pages resident from now on, on the CPU).
static void kv_block_touch(KvPool *p, KvBlock *blk) {
    p->n_touched += !blk->touched;
    blk->touched = 1;
}

// A cached block leaves the cache for the free stack.
static void kv_evict(KvPool *p, uint32_t b) {
    kv_lru_unlink(p, b);
    kv_keys_remove(p, b);
    p->blocks[b].fill = 0;
    p->n_registered--;
    p->free_stack[p->n_free++] = b;
    p->st.evictions++;
}

// A block for a sequence (refs 1, a new serial): the most recently freed, else the least
// recently used cached one. KV_NONE when the pool is spent.
static uint32_t kv_block_take_new(KvPool *p) {
    if (!p->n_free && p->n_lru) kv_evict(p, p->lru_oldest);
    if (!p->n_free) return KV_NONE;
    uint32_t b = p->free_stack[--p->n_free];
    KvBlock *blk = &p->blocks[b];
    *blk = (KvBlock){.serial = p->next_serial++, .refs = 1, .touched = blk->touched};
    p->n_refs++;
    return b;
}

static void kv_block_ref(KvPool *p, uint32_t b) {
    p->n_refs++;
    if (p->blocks[b].refs++ == 0) kv_lru_unlink(p, b); // a held block is never cached-only
}

static void kv_block_unref(KvPool *p, uint32_t b) {
    KvBlock *blk = &p->blocks[b];
    p->n_refs--;
    if (--blk->refs) return;
    if (!blk->fill) {
        p->free_stack[p->n_free++] = b;
        return;
    }
    kv_lru_push(p, b);
    while (p->n_lru > p->cache_limit)
        kv_evict(p, p->lru_oldest);
}

// Registers block b, filled to fill (1..16) and held by its writer only, unless a block
// with the same predecessor and tokens is cached already: then that one (with its reference
// taken) is returned for the writer to hold instead, and b goes back to the pool.
static uint32_t kv_register(KvPool *p, uint32_t b, uint32_t fill) {
    KvBlock *blk = &p->blocks[b];
    uint64_t h = blk->h0;
    for (uint32_t k = 0; k < fill; k++)
        h = kv_hash_step(h, blk->tokens[k]);
    uint32_t same = kv_find(p, h, blk->parent, blk->tokens, fill);
    if (same != KV_NONE) {
        kv_block_ref(p, same);
        kv_block_unref(p, b);
        p->st.dedup++;
        return same;
    }
    blk->fill = fill;
    p->n_registered++;
    kv_keys_add(p, b);
    return b;
}

// ---------------------------------------------------------------------------------------
// The pool

size_t kv_block_bytes(const Gpt2Config *c, KgDtype dtype) {
    return c->n_layer * 2 * c->n_head * KV_BLOCK_LEN * kg_dtype_bytes(dtype, c->n_embd / c->n_head);
}

int kv_pool_new(KvPool **out, const Gpt2Config *c, KgBackend *be, size_t n_blocks,
                size_t cache_limit, char *err) {
    *out = NULL;
    const KgDtype dt = be->kv_dtype;
    const size_t hs = c->n_embd / c->n_head, need = kv_blocks_for(c->n_ctx) + 1;
    if (!(be->ops->kv_dtypes & (1u << dt)))
        return kg_err(err, KG_EUNSUP, "kv cache: %s has no %s kernels", be->ops->name,
                      kg_dtype_name(dt));
    if (kg_dtype_quantized(dt) && hs % KG_QBLOCK)
        return kg_err(err, KG_EUNSUP, "kv cache: %s needs a head size that is a multiple of %d",
                      kg_dtype_name(dt), KG_QBLOCK);
    if (n_blocks < need || n_blocks >= KV_NONE / KV_BLOCK_LEN)
        return kg_err(err, KG_EINVAL,
                      "kv cache: %zu blocks of %d positions; one context of %zu needs %zu "
                      "(and at most %u)",
                      n_blocks, KV_BLOCK_LEN, c->n_ctx, need, KV_NONE / KV_BLOCK_LEN - 1);
    KvPool *p = calloc(1, sizeof *p);
    if (!p) return kg_err(err, KG_ENOMEM, "kv cache: out of memory");
    *p = (KvPool){.be = be,
                  .L = c->n_layer,
                  .NH = c->n_head,
                  .hs = hs,
                  .n_ctx = c->n_ctx,
                  .dtype = dt,
                  .row_bytes = kg_dtype_bytes(dt, hs),
                  .block_bytes = kv_block_bytes(c, dt),
                  .max_blocks = kv_blocks_for(c->n_ctx),
                  .n_blocks = (uint32_t)n_blocks,
                  .lru_oldest = KV_NONE,
                  .lru_newest = KV_NONE,
                  .cache_limit = cache_limit < n_blocks ? cache_limit : n_blocks,
                  .next_serial = 1};
    size_t n_keys = n_blocks * KV_BLOCK_LEN, n_buckets = 1, bytes;
    while (n_buckets < n_keys)
        n_buckets <<= 1;
    p->bucket_mask = n_buckets - 1;
    p->blocks = calloc(n_blocks, sizeof *p->blocks);
    p->free_stack = malloc(n_blocks * sizeof *p->free_stack);
    p->key = malloc(n_keys * sizeof *p->key);
    p->key_next = malloc(n_keys * sizeof *p->key_next);
    p->bucket = malloc(n_buckets * sizeof *p->bucket);
    if (kg_mul_overflow(n_blocks, p->block_bytes, &bytes) || !p->blocks || !p->free_stack ||
        !p->key || !p->key_next || !p->bucket || !(p->data = be->ops->alloc(be, bytes))) {
        kv_pool_free(p);
        return kg_err(err, KG_ENOMEM, "kv cache: out of memory for %zu blocks of %zu bytes",
                      n_blocks, p->block_bytes);
    }
    memset(p->bucket, 0xff, n_buckets * sizeof *p->bucket); // every bucket KV_NONE
    for (size_t i = 0; i < n_blocks; i++) // block 0 on top: the pool fills from its start
        p->free_stack[i] = (uint32_t)(n_blocks - 1 - i);
    p->n_free = n_blocks;
    *out = p;
    return KG_OK;
}

void kv_pool_free(KvPool *p) {
    if (!p) return;
    if (p->data) p->be->ops->free(p->be, p->data);
    free(p->blocks);
    free(p->free_stack);
    free(p->key);
    free(p->key_next);
    free(p->bucket);
    free(p);
}

void kv_pool_stats(const KvPool *p, KvPoolStats *st) {
    *st = p->st;
    st->blocks = p->n_blocks;
    st->block_bytes = p->block_bytes;
    st->cached = p->n_lru;
    st->free = p->n_free;
    st->used = p->n_blocks - p->n_lru - p->n_free;
    st->refs = p->n_refs;
    st->registered = p->n_registered;
    st->touched = p->n_touched;
}

size_t kv_pool_available(const KvPool *p) { return p->n_free + p->n_lru; }

// ---------------------------------------------------------------------------------------
// Sequences

int kv_seq_init(KvSeq *s, KvPool *p, char *err) {
    *s = (KvSeq){.pool = p, .hash = KV_HASH_SEED};
    if (!(s->blocks = malloc(p->max_blocks * sizeof *s->blocks)))
        return kg_err(err, KG_ENOMEM, "kv cache: out of memory");
    return KG_OK;
}

// Drops table entries from `from` on, the last first (so a sequence's tail is older in the
// LRU list than its head and leaves the cache first).
static void kv_seq_drop_from(KvSeq *s, size_t from) {
    while (s->n_blocks > from)
        kv_block_unref(s->pool, s->blocks[--s->n_blocks]);
}

void kv_seq_reset(KvSeq *s) {
    KvPool *p = s->pool;
    size_t tail = s->len % KV_BLOCK_LEN;
    if (tail && p->cache_limit) { // the partly filled last block, for a later prompt
        size_t i = s->len / KV_BLOCK_LEN;
        KvBlock *blk = &p->blocks[s->blocks[i]];
        if (blk->refs == 1 && !blk->fill)
            s->blocks[i] = kv_register(p, s->blocks[i], (uint32_t)tail);
    }
    kv_seq_drop_from(s, 0);
    s->len = 0;
    s->hash = KV_HASH_SEED;
}

void kv_seq_release(KvSeq *s) {
    if (!s->pool) return;
    kv_seq_reset(s);
    free(s->blocks);
    *s = (KvSeq){0};
}

// The serial of the block before position pos's block in s (0 for the first block).
static uint64_t kv_parent_serial(const KvSeq *s, size_t pos) {
    size_t i = pos / KV_BLOCK_LEN;
    return i ? s->pool->blocks[s->blocks[i - 1]].serial : 0;
}

size_t kv_seq_match(KvSeq *s, const int *next, size_t n) {
    KvPool *p = s->pool;
    size_t start = s->len, end = s->len + n < p->n_ctx ? s->len + n : p->n_ctx;
    if (!p->cache_limit || start % KV_BLOCK_LEN || s->n_blocks > start / KV_BLOCK_LEN) return 0;
    while (s->len < end) {
        const int *tokens = next + (s->len - start);
        uint32_t r = end - s->len < KV_BLOCK_LEN ? (uint32_t)(end - s->len) : KV_BLOCK_LEN;
        uint64_t h[KV_BLOCK_LEN], hk = s->hash, parent = kv_parent_serial(s, s->len);
        for (uint32_t k = 0; k < r; k++)
            h[k] = hk = kv_hash_step(hk, tokens[k]);
        uint32_t k = r, b; // the longest prefix of the next r tokens that is cached
        while ((b = kv_find(p, h[k - 1], parent, tokens, k)) == KV_NONE && --k > 0) {
        }
        if (b == KV_NONE) break;
        kv_block_ref(p, b);
        s->blocks[s->n_blocks++] = b;
        s->len += k;
        s->hash = h[k - 1];
        p->st.hit_blocks++;
        if (k < KV_BLOCK_LEN) break; // a partly matched block ends the shared prefix
    }
    return s->len - start;
}

// 1 when s must copy its last block before writing position s->len into it: the block is
// shared or registered (a registered block never changes).
static int kv_seq_tail_shared(const KvSeq *s) {
    if (s->len % KV_BLOCK_LEN == 0) return 0;
    const KvBlock *blk = &s->pool->blocks[s->blocks[s->len / KV_BLOCK_LEN]];
    return blk->refs > 1 || blk->fill > 0;
}

size_t kv_seq_blocks_needed(const KvSeq *s, size_t n) {
    size_t want = kv_blocks_for(s->len + n);
    return (want > s->n_blocks ? want - s->n_blocks : 0) + (n && kv_seq_tail_shared(s));
}

// s's last block replaced by a private copy of it (its positions [0, len % 16) and their
// tokens, predecessor and hash); KG_ENOMEM when the pool is spent.
static int kv_seq_copy_tail(KvSeq *s) {
    KvPool *p = s->pool;
    size_t i = s->len / KV_BLOCK_LEN;
    uint32_t old = s->blocks[i], b = kv_block_take_new(p);
    if (b == KV_NONE) return KG_ENOMEM;
    KvBlock *src = &p->blocks[old], *dst = &p->blocks[b];
    dst->parent = src->parent;
    dst->h0 = src->h0;
    kv_block_touch(p, dst);
    memcpy(dst->tokens, src->tokens, sizeof dst->tokens);
    // a whole block in one copy: its unused slots are written before they are read
    p->be->ops->copy_rows(p->be, (float *)(p->data + b * p->block_bytes), 0,
                          (const float *)(p->data + old * p->block_bytes), 0, 1,
                          p->block_bytes / sizeof(float));
    s->blocks[i] = b;
    kv_block_unref(p, old);
    p->st.cow_copies++;
    return KG_OK;
}

int kv_seq_reserve(KvSeq *s, size_t n, char *err) {
    KvPool *p = s->pool;
    if (s->len + n > p->n_ctx)
        return kg_err(err, KG_ERANGE, "kv cache: %zu positions exceed n_ctx %zu", s->len + n,
                      p->n_ctx);
    size_t need = kv_seq_blocks_needed(s, n);
    if (need > kv_pool_available(p))
        return kg_err(err, KG_ENOMEM, "kv cache: %zu blocks needed, %zu of %u left", need,
                      kv_pool_available(p), p->n_blocks);
    if (n && kv_seq_tail_shared(s) && kv_seq_copy_tail(s))
        return kg_err(err, KG_ENOMEM, "kv cache: no block to copy into"); // counted above
    for (size_t want = kv_blocks_for(s->len + n); s->n_blocks < want;) {
        uint32_t b = kv_block_take_new(p);
        if (b == KV_NONE) return kg_err(err, KG_ENOMEM, "kv cache: no block left");
        s->blocks[s->n_blocks++] = b;
    }
    return KG_OK;
}

void kv_seq_commit(KvSeq *s, const int *tokens, size_t n) {
    KvPool *p = s->pool;
    for (size_t k = 0; k < n; k++, s->len++) {
        size_t i = s->len / KV_BLOCK_LEN, slot = s->len % KV_BLOCK_LEN;
        KvBlock *blk = &p->blocks[s->blocks[i]];
        if (slot == 0) { // a new block: its place in the chain
            blk->parent = kv_parent_serial(s, s->len);
            blk->h0 = s->hash;
        }
        blk->tokens[slot] = tokens[k];
        kv_block_touch(p, blk);
        s->hash = kv_hash_step(s->hash, tokens[k]);
        if (slot == KV_BLOCK_LEN - 1 && p->cache_limit)
            s->blocks[i] = kv_register(p, s->blocks[i], KV_BLOCK_LEN);
    }
}

// s->hash recomputed from the tokens its blocks hold at [0, len).
static void kv_seq_rehash(KvSeq *s) {
    s->hash = KV_HASH_SEED;
    for (size_t pos = 0; pos < s->len; pos++)
        s->hash = kv_hash_step(
            s->hash, s->pool->blocks[s->blocks[pos / KV_BLOCK_LEN]].tokens[pos % KV_BLOCK_LEN]);
}

void kv_seq_truncate(KvSeq *s, size_t len) {
    if (len >= s->len) return;
    kv_seq_drop_from(s, kv_blocks_for(len));
    s->len = len;
    kv_seq_rehash(s);
}

void kv_seq_fork(KvSeq *dst, const KvSeq *src, size_t len) {
    KvPool *p = src->pool;
    if (len > src->len) len = src->len;
    kv_seq_reset(dst);
    for (size_t i = 0; i < kv_blocks_for(len); i++) {
        kv_block_ref(p, src->blocks[i]);
        dst->blocks[dst->n_blocks++] = src->blocks[i];
    }
    dst->len = len;
    kv_seq_rehash(dst);
}

void kv_seq_attn(const KvSeq *s, size_t l, KgAttnSeq *a) {
    const KvPool *p = s->pool;
    const size_t head = KV_BLOCK_LEN * p->row_bytes;
    a->k = p->data + (l * 2 + 0) * p->NH * head;
    a->v = p->data + (l * 2 + 1) * p->NH * head;
    a->blocks = s->blocks;
    a->block_shift = KV_BLOCK_SHIFT;
    a->block_stride = p->block_bytes;
    a->head_stride = head;
    a->row_stride = p->row_bytes;
    a->kv_dtype = p->dtype;
}

uint64_t kv_tokens_hash(const int *tokens, size_t n) {
    uint64_t h = KV_HASH_SEED;
    for (size_t i = 0; i < n; i++)
        h = kv_hash_step(h, tokens[i]);
    return h;
}
