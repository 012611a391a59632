// tok_bpe_impl.h — the insides of TokBpe, shared by tok_bpe_load.c (reads tokenizer.json)
// and tok_bpe.c (encodes and decodes). Lookups used on the hot path are inline here.
#ifndef TOK_BPE_IMPL_H
#define TOK_BPE_IMPL_H

#include <stdint.h>
#include <string.h>

#include "tok_bpe.h"

#define BPE_MAX_ID    (1 << 24)  // ids above this are rejected as malformed
#define BPE_MAX_FILE  (1u << 30) // bytes of tokenizer.json (KoGPT2 v2's: 2.8 MB)
#define BPE_MAX_NORMS 8
#define BPE_BMP       0x10000

typedef enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS } BpePrepend;

// A byte trie of added tokens; root[] indexes the first byte directly.
typedef struct {
    int32_t child;   // first child node, -1 if none
    int32_t sibling; // next node with the same parent, -1 if none
    int32_t id;      // token id if a token ends here, else -1
    uint8_t byte;
} TrieNode;

typedef struct {
    TrieNode *nodes;
    size_t n, cap;
    int32_t root[256]; // node of each first byte, -1 if no token starts with it
    int empty;         // 1 while no token was inserted
} Trie;

// Open-addressing maps: pieces -> id (keys are the strings of vocab[]), id pair -> merge.
typedef struct {
    int32_t *slot; // id or -1
    size_t mask;
} StrMap;

typedef struct {
    uint64_t key; // (left << 32) | right
    int32_t rank; // -1: empty slot
    int32_t new_id;
} MergeSlot;

struct TokBpe {
    size_t V;             // ids are 0 .. V-1 (model.vocab's largest id + 1)
    const char **vocab;   // (V) model.vocab strings, NULL for ids the file leaves out
    uint32_t *vocab_len;  // (V) their byte lengths
    const char **piece;   // (V) what an id decodes from: vocab, or the added token's content
    uint8_t *piece_owned; // (V) 1 where piece[id] is its own allocation (an added token's)
    char *arena;          // every string above lives here
    StrMap vmap;          // vocab string -> id
    int32_t *char_id;     // (BPE_BMP) id of each one-character BMP piece, -1 if none
    MergeSlot *merges;    // (mask + 1)
    size_t merge_mask;
    size_t n_merges;
    int unk_id; // -1: unknown characters are dropped
    int fuse_unk, byte_fallback, ignore_merges;
    int byte_id[256]; // <0xAB> pieces for byte_fallback, -1 if absent
    Trie raw_trie;    // added tokens matched before normalization
    Trie norm_trie;   // added tokens matched after normalization
    int norms[BPE_MAX_NORMS];
    int n_norms;
    int norm_composes;  // all normalizers compose (NFC/NFKC): the fast path below may skip them
    uint8_t *nf_stable; // (BPE_BMP / 8) bitmap: BMP characters NFC/NFKC never change or join
    int pre_metaspace, pre_split;
    BpePrepend pre_prepend;
    char rep[8]; // the Metaspace replacement character, UTF-8, NUL-terminated
    size_t rep_len;
    int dec_metaspace, dec_strip_first;
    char dec_rep[8];
    size_t dec_rep_len;
    TokSpecial special;
    char notes[KG_ERRLEN];
};

// ---- lookups ----

static inline uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static inline uint64_t hash_u64(uint64_t x) { // splitmix64's finalizer
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline int vmap_find(const TokBpe *b, const char *s, size_t n) {
    size_t i = hash_bytes(s, n) & b->vmap.mask;
    for (;; i = (i + 1) & b->vmap.mask) {
        int32_t id = b->vmap.slot[i];
        if (id < 0) return -1;
        if (b->vocab_len[id] == n && !memcmp(b->vocab[id], s, n)) return id;
    }
}

static inline const MergeSlot *merge_find(const TokBpe *b, int32_t left, int32_t right) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = hash_u64(key) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
        const MergeSlot *m = &b->merges[i];
        if (m->rank < 0) return NULL;
        if (m->key == key) return m;
    }
}

// Length of the longest token starting at s (n bytes left), 0 if none; *id its id.
static inline size_t trie_longest(const Trie *t, const uint8_t *s, size_t n, int32_t *id) {
    int32_t node = t->root[s[0]];
    size_t best = 0;
    for (size_t i = 1; node >= 0; i++) {
        if (t->nodes[node].id >= 0) best = i, *id = t->nodes[node].id;
        if (i == n) break;
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != s[i])
            c = t->nodes[c].sibling;
        node = c;
    }
    return best;
}

#endif
