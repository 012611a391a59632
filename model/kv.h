// kv.h — the KV cache: one pool of fixed-size blocks per model, a block table per sequence,
// and the prefix cache over the blocks (vLLM's paged attention and automatic prefix caching).
//
// Memory. The pool is one backend buffer of n_blocks blocks, allocated once (on the CPU its
// pages cost nothing until a block is first written). A block holds KV_BLOCK_LEN positions of
// every layer's keys and values in the backend's KV dtype (be->kv_dtype): block b, layer l,
// kind k (0 keys, 1 values), head h, slot o at
//     b * block_bytes + ((l * 2 + k) * NH + h) * KV_BLOCK_LEN * row_bytes + o * row_bytes,
// row_bytes = one head's hs values (q8_0: hs / 32 blocks of 34 bytes), so a head's 16 keys
// are one contiguous run for the attention kernels (kv_seq_attn gives them the addressing).
// A sequence never owns a buffer: its table names the blocks that hold positions
// [16 i, 16 i + 16), and it asks the pool for one more block every 16 positions.
//
// Sharing. A block the sequence has filled is registered in the prefix cache under the
// tokens up to its end: a rolling 64-bit hash of every token of the sequence so far, chained
// from block to block (and, for a sequence's last, partly filled block, when the sequence
// ends, under each of its first k tokens). Another sequence whose tokens match takes the
// block into its own table, refcounted, instead of computing it; a hit is verified token by
// token against the block and its predecessor's identity, so a hash collision is a miss. A
// registered block is never written again: a sequence that must append to a shared, partly
// filled last block copies it first (copy-on-write; full blocks are never written anyway).
// A block nobody holds stays cached, least recently used first out, up to cache_limit blocks;
// beyond that, and whenever a block is needed and none is free, the oldest is evicted.
//
// Identity. Each allocation gives a block a new 64-bit serial, never reused: a registered
// block names its predecessor by serial, so a chain of blocks is matched exactly, and a block
// evicted and allocated again can never be taken for its former self.
//
// Threads: none inside. A pool and its sequences belong to one thread at a time (the engine
// thread, or a caller that runs one sequence).
#ifndef KV_H
#define KV_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"

// Positions per block: vLLM's default. A sequence wastes at most 15 positions (1.5 % of a
// 1,024-token context), prefixes are shared in steps of 16 tokens, and the copy-on-write of a
// partly filled block (1.2 MB at KoGPT2-base in f32) is a small fraction of a decode step.
#define KV_BLOCK_LEN   16
#define KV_BLOCK_SHIFT 4 // log2(KV_BLOCK_LEN)

typedef struct KvPool KvPool;

// One sequence's view of a pool: its block table and how many positions it holds.
typedef struct {
    KvPool *pool;
    uint32_t *blocks; // (max_blocks: the pool's blocks for n_ctx positions) block ids
    size_t n_blocks;  // entries held: those covering [0, len), then any reserved ahead
    size_t len;       // positions cached: 0 .. len - 1
    uint64_t hash;    // the rolling hash of the tokens at [0, len)
} KvSeq;

// Counts for metrics and tests; a snapshot.
typedef struct {
    size_t blocks, block_bytes; // the pool: blocks and bytes each
    size_t used;                // blocks some sequence holds
    size_t refs;                // table entries naming them: refs > used when blocks are shared
    size_t cached;              // blocks nobody holds, kept for their prefix (LRU)
    size_t free;                // blocks holding nothing
    size_t registered;          // blocks in the prefix cache (held or not)
    size_t touched;             // blocks ever written (on the CPU: the pool's resident pages)
    uint64_t hit_blocks;        // blocks taken from the prefix cache by kv_seq_match
    uint64_t cow_copies;        // partly filled blocks copied before a write
    uint64_t evictions;         // cached blocks dropped for a new allocation or the limit
    uint64_t dedup;             // blocks found already cached when they filled, and merged
} KvPoolStats;

// A pool of n_blocks blocks for config c on be, in be->kv_dtype (KG_EUNSUP when be's
// ops->kv_dtypes lacks it, or for q8_0 a head size that is not a multiple of 32).
// cache_limit: the most unreferenced blocks kept for the prefix cache (0: none, nothing is
// shared across sequences). KG_EINVAL when n_blocks cannot hold one context of n_ctx
// positions plus a block to copy on write, KG_ENOMEM. Free with kv_pool_free().
int kv_pool_new(KvPool **out, const Gpt2Config *c, KgBackend *be, size_t n_blocks,
                size_t cache_limit, char *err);
// Frees the pool; every sequence on it must have been released.
void kv_pool_free(KvPool *p);
// Bytes of one block for c in dtype (kv_pool_new's block_bytes): to size a pool by memory.
size_t kv_block_bytes(const Gpt2Config *c, KgDtype dtype);
void kv_pool_stats(const KvPool *p, KvPoolStats *st);
// Blocks a new sequence could get now without preempting anyone: free plus cached.
size_t kv_pool_available(const KvPool *p);
// Blocks that hold positions [0, len) (at least one position in each).
static inline size_t kv_blocks_for(size_t len) { return (len + KV_BLOCK_LEN - 1) / KV_BLOCK_LEN; }

// An empty sequence on p: its block table (for n_ctx positions) is allocated here, once.
// KG_ENOMEM. Release with kv_seq_release().
int kv_seq_init(KvSeq *s, KvPool *p, char *err);
// Gives back every block (a partly filled last one is registered first, so a later prompt
// may share it) and frees the table; s is then empty and may be initialized again.
void kv_seq_release(KvSeq *s);
// Gives back every block as kv_seq_release does, but keeps the table: s is empty, on the same
// pool (a preempted sequence, or a caller reusing one).
void kv_seq_reset(KvSeq *s);

// Extends s with cached blocks that hold its next tokens: next (n of them) are the tokens of
// positions s->len, s->len + 1, ... (s->len must be a multiple of KV_BLOCK_LEN, as it is for
// an empty sequence: sharing starts at block boundaries). Full blocks are followed through the
// chained hash; the last may be a block whose first k tokens match, which s then shares up to
// k (a later write copies it). Returns the positions added (0 without a prefix cache).
size_t kv_seq_match(KvSeq *s, const int *next, size_t n);
// Blocks kv_seq_reserve(s, n) would take from the pool (new blocks, and the copy of a
// shared last block), without changing anything.
size_t kv_seq_blocks_needed(const KvSeq *s, size_t n);
// Makes room to append n positions: a copy of a shared, partly filled last block, then new
// blocks up to position len + n. No allocation outside the pool. All or nothing: KG_ERANGE
// past n_ctx, KG_ENOMEM when the pool has too few blocks (err says so; s unchanged).
int kv_seq_reserve(KvSeq *s, size_t n, char *err);
// Records that positions [len, len + n) now hold tokens (after the forward wrote them;
// kv_seq_reserve made room): len grows by n, and blocks that became full are registered in
// the prefix cache (a block already cached with the same tokens replaces this one).
void kv_seq_commit(KvSeq *s, const int *tokens, size_t n);
// Forgets positions len.. (len <= s->len): blocks past them go back to the pool; a later
// write into a shared last block copies it.
void kv_seq_truncate(KvSeq *s, size_t len);
// Shares dst's first len positions with src (len <= src->len; dst empty, on the same pool):
// src's blocks, refcounted, the last one copied when either writes to it. KG_ENOMEM never (no
// block is taken here).
void kv_seq_fork(KvSeq *dst, const KvSeq *src, size_t len);

// Points a at layer l of s's keys and values (KgAttnSeq's block addressing; row0, n, pos0,
// att and dk/dv are the caller's).
void kv_seq_attn(const KvSeq *s, size_t l, KgAttnSeq *a);
// The prefix cache's rolling hash of tokens (n of them) from the start of a sequence: what
// KvSeq.hash holds after them. For other caches keyed by a whole prompt (the engine's logits
// memo), which verify their hits as this one does.
uint64_t kv_tokens_hash(const int *tokens, size_t n);

#endif
