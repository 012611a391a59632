// test_model_kv — the KV block pool (model/kv.h) without a model: allocation and its
// all-or-nothing failures, sharing a cached prefix (refcounts, the chained hash following whole
// blocks, the longest partly filled block for a prompt's tail), copy-on-write of a shared last
// block (the cached copy keeps its values), least-recently-used eviction and the cache's limit,
// two sequences that fill the same block merged into one, truncation, forks; and the keys and
// values the CPU's kv_store wrote, read back through another sequence's block table.
//
// Every expected count follows from the block size (16 positions) and the calls made; the
// stored values are position * 1000 + head * 100 + channel, exact in f32.
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "model/kv.h"

static KgBackend *g_be;
static const Gpt2Config CFG = {.n_layer = 2, .n_head = 2, .n_embd = 8, .n_ctx = 64};
#define HS 4 // n_embd / n_head

static KvPool *pool_new(size_t n_blocks, size_t cache_limit) {
    KvPool *p;
    char err[KG_ERRLEN];
    REQUIRE(!kv_pool_new(&p, &CFG, g_be, n_blocks, cache_limit, err), "%s", err);
    return p;
}

static void seq_new(KvSeq *s, KvPool *p) {
    char err[KG_ERRLEN];
    REQUIRE(!kv_seq_init(s, p, err), "%s", err);
}

static void tokens_from(int *t, size_t n, int first) {
    for (size_t i = 0; i < n; i++)
        t[i] = first + (int)i;
}

// Appends n tokens to s as a forward would: room, then the commit.
static void append(KvSeq *s, const int *t, size_t n) {
    char err[KG_ERRLEN];
    REQUIRE(!kv_seq_reserve(s, n, err), "%s", err);
    kv_seq_commit(s, t, n);
}

static KvPoolStats stats(const KvPool *p) {
    KvPoolStats st;
    kv_pool_stats(p, &st);
    return st;
}

// Layer 1's keys of s at positions [pos0, pos0 + n) written by the CPU's kv_store from rows
// whose values are position * 1000 + head * 100 + channel (values: their negatives).
static void store_rows(const KvSeq *s, size_t pos0, size_t n) {
    float k[64 * 8], v[64 * 8];
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < 8; c++) {
            k[r * 8 + c] = (float)((pos0 + r) * 1000 + c / HS * 100 + c % HS);
            v[r * 8 + c] = -k[r * 8 + c];
        }
    KgAttnSeq a = {.row0 = 0, .n = n, .pos0 = pos0};
    kv_seq_attn(s, 1, &a);
    g_be->ops->kv_store(g_be, &a, 1, k, v, 8, 2, HS);
}

// The key s holds at position pos, head h, channel c (layer 1), read through its table.
static float key_at(const KvSeq *s, size_t pos, size_t h, size_t c) {
    KgAttnSeq a = {0};
    kv_seq_attn(s, 1, &a);
    return ((const float *)((const char *)a.k + kg_attn_offset(&a, pos, h)))[c];
}

static void test_allocation(void) {
    KvPool *p;
    char err[KG_ERRLEN];
    // one context (64 positions: 4 blocks) and a block to copy on write is the least
    CHECK(kv_pool_new(&p, &CFG, g_be, 4, 0, err) == KG_EINVAL && strstr(err, "needs 5"));
    p = pool_new(8, 0);
    KvSeq s;
    seq_new(&s, p);
    CHECK(kv_pool_available(p) == 8 && stats(p).free == 8 && kv_seq_blocks_needed(&s, 40) == 3);
    int t[64];
    tokens_from(t, 64, 100);
    append(&s, t, 40);
    KvPoolStats st = stats(p);
    CHECK(s.len == 40 && s.n_blocks == 3 && st.used == 3 && st.free == 5 && st.registered == 0);
    CHECK(kv_seq_reserve(&s, 25, err) == KG_ERANGE && s.n_blocks == 3); // 65 > n_ctx
    KvSeq big, one;
    seq_new(&big, p), seq_new(&one, p);
    append(&big, t, 64); // 4 more
    append(&one, t, 16); // and the last
    CHECK(kv_seq_reserve(&s, 24, err) == KG_ENOMEM && s.n_blocks == 3 && s.len == 40);
    CHECK(stats(p).free == 0);
    kv_seq_release(&big), kv_seq_release(&one);
    kv_seq_release(&s);
    CHECK(stats(p).free == 8 && stats(p).used == 0); // no prefix cache: nothing kept
    kv_pool_free(p);
    printf("allocation: blocks counted, a refused reserve changes nothing, all back at release\n");
}

static void test_sharing_and_cow(void) {
    KvPool *p = pool_new(16, 16);
    KvSeq a, b, c;
    seq_new(&a, p), seq_new(&b, p), seq_new(&c, p);
    int t[40];
    tokens_from(t, 40, 7);
    append(&a, t, 40);
    store_rows(&a, 0, 40);
    CHECK(stats(p).registered == 2); // the two full blocks, at once
    // b finds a's full blocks (a's partly filled third is a's own until a ends)
    CHECK(kv_seq_match(&b, t, 40) == 32 && b.blocks[0] == a.blocks[0] &&
          b.blocks[1] == a.blocks[1]);
    KvPoolStats st = stats(p);
    CHECK(st.used == 3 && st.refs == 5 && st.hit_blocks == 2);
    CHECK(key_at(&b, 31, 1, 3) == 31103.0f); // a's values, through b's table
    kv_seq_release(&b);
    uint32_t tail = a.blocks[2];
    kv_seq_release(&a); // its last block (8 positions) joins the cache
    CHECK(stats(p).registered == 3 && stats(p).cached == 3 && stats(p).used == 0);
    CHECK(kv_seq_match(&c, t, 40) == 40 && c.blocks[2] == tail);
    CHECK(kv_seq_blocks_needed(&c, 1) == 1); // a copy of the shared last block
    int next = 999;
    append(&c, &next, 1);
    st = stats(p);
    CHECK(c.blocks[2] != tail && st.cow_copies == 1 && c.len == 41);
    store_rows(&c, 40, 1);
    KvSeq d; // the cached block still holds a's values: the write went into c's copy
    seq_new(&d, p);
    CHECK(kv_seq_match(&d, t, 40) == 40 && d.blocks[2] == tail);
    CHECK(key_at(&d, 39, 0, 2) == 39002.0f && key_at(&c, 39, 0, 2) == 39002.0f);
    CHECK(key_at(&c, 40, 1, 0) == 40100.0f && key_at(&d, 40, 1, 0) == 0.0f);
    kv_seq_release(&c), kv_seq_release(&d);
    kv_pool_free(p);
    printf("sharing: full blocks by hash, a tail block shared, copied on write (%llu copy)\n",
           (unsigned long long)st.cow_copies);
}

static void test_matching(void) {
    KvPool *p = pool_new(16, 16);
    KvSeq s, q;
    seq_new(&s, p), seq_new(&q, p);
    int x[32], z[32];
    tokens_from(x, 32, 1);
    tokens_from(z, 32, 1);
    append(&s, x, 32); // two full blocks cached
    kv_seq_release(&s);
    z[0] = 500;                          // another first block before the same second block
    CHECK(kv_seq_match(&q, z, 32) == 0); // the hash is of every token up to a block's end
    z[0] = 1, z[20] = 500; // the same first block, a second that differs at its 5th token
    CHECK(kv_seq_match(&q, z, 32) == 20); // the first, and the cached second's first 4
    kv_seq_release(&q);
    kv_pool_free(p);
    // tails of 5 and of 9 tokens after one cached block: the longest that matches is shared
    p = pool_new(16, 16);
    size_t lens[3] = {16, 21, 25};
    for (int i = 0; i < 3; i++) {
        seq_new(&s, p);
        append(&s, x, lens[i]);
        kv_seq_release(&s);
    }
    CHECK(stats(p).registered == 3); // the first block once (its twins merged), two tails
    seq_new(&q, p);
    int y[32];
    memcpy(y, x, sizeof y);
    CHECK(kv_seq_match(&q, y, 32) == 25);
    kv_seq_reset(&q);
    y[23] = 777; // 7 tokens of the second block match: only the 9-token tail has them
    CHECK(kv_seq_match(&q, y, 32) == 23);
    kv_seq_reset(&q);
    y[18] = 777; // 2 match: either tail
    CHECK(kv_seq_match(&q, y, 32) == 18);
    kv_seq_release(&q);
    kv_pool_free(p);
    printf("matching: chained hash over whole blocks, the longest cached tail\n");
}

static void test_eviction(void) {
    KvPool *p = pool_new(6, 6); // a context (4) + 1, and one more
    KvSeq s;
    int t[3][16];
    for (int i = 0; i < 3; i++) { // three one-block prompts, cached in this order
        tokens_from(t[i], 16, 100 * (i + 1));
        seq_new(&s, p);
        append(&s, t[i], 16);
        kv_seq_release(&s);
    }
    CHECK(stats(p).cached == 3 && stats(p).free == 3);
    seq_new(&s, p); // using prompt 0 again makes it the most recent
    CHECK(kv_seq_match(&s, t[0], 16) == 16);
    kv_seq_release(&s);
    seq_new(&s, p); // 4 blocks: 3 free, then the least recently used: prompt 1's
    int u[64];
    tokens_from(u, 64, 9000);
    append(&s, u, 64);
    KvPoolStats st = stats(p);
    CHECK(st.evictions == 1 && st.cached == 2 && st.free == 0);
    kv_seq_release(&s);
    int hit[3];
    for (int i = 0; i < 3; i++) {
        seq_new(&s, p);
        hit[i] = (int)kv_seq_match(&s, t[i], 16);
        kv_seq_release(&s);
    }
    CHECK(hit[0] == 16 && hit[1] == 0 && hit[2] == 16);
    kv_pool_free(p);
    // the cache's limit: 2 blocks nobody holds; a third pushes the oldest out
    p = pool_new(8, 2);
    for (int i = 0; i < 3; i++) {
        seq_new(&s, p);
        append(&s, t[i], 16);
        kv_seq_release(&s);
    }
    seq_new(&s, p);
    st = stats(p);
    CHECK(st.cached == 2 && st.evictions == 1 && kv_seq_match(&s, t[0], 16) == 0);
    kv_seq_reset(&s);
    CHECK(kv_seq_match(&s, t[2], 16) == 16);
    kv_seq_release(&s);
    kv_pool_free(p);
    printf("eviction: least recently used first, at most the cache's limit kept\n");
}

static void test_merge_truncate_fork(void) {
    KvPool *p = pool_new(16, 16);
    KvSeq a, b, f;
    seq_new(&a, p), seq_new(&b, p), seq_new(&f, p);
    int t[20];
    tokens_from(t, 20, 3);
    append(&a, t, 16);
    append(&b, t, 16); // computed twice (as two prompts in one step are): one copy kept
    KvPoolStats st = stats(p);
    CHECK(a.blocks[0] == b.blocks[0] && st.used == 1 && st.refs == 2 && st.dedup == 1);
    // b truncated into the shared block, then written: the block is copied, a's stays
    kv_seq_truncate(&b, 10);
    CHECK(b.len == 10 && kv_seq_blocks_needed(&b, 1) == 1);
    append(&b, t + 10, 1);
    CHECK(b.blocks[0] != a.blocks[0] && stats(p).cow_copies == 1);
    // a fork shares a's first 18 positions: 2 blocks, the second partly filled
    append(&a, t + 16, 4);
    kv_seq_fork(&f, &a, 18);
    CHECK(f.len == 18 && f.n_blocks == 2 && f.blocks[1] == a.blocks[1]);
    append(&f, t, 1);
    CHECK(f.blocks[1] != a.blocks[1] && f.blocks[0] == a.blocks[0]);
    kv_seq_release(&a), kv_seq_release(&b), kv_seq_release(&f);
    st = stats(p);
    CHECK(st.used == 0 && st.refs == 0);
    kv_pool_free(p);
    printf("merge, truncate, fork: one copy of a block filled twice, copies only on write\n");
}

int main(void) {
    char err[KG_ERRLEN];
    REQUIRE((g_be = kg_cpu_backend_new(2, err)), "%s", err);
    test_allocation();
    test_sharing_and_cow();
    test_matching();
    test_eviction();
    test_merge_truncate_fork();
    kg_backend_free(g_be);
    return check_report();
}
