// shard.h — token shards: the file format and the trainer's reader, which memory-maps them
// and hands out (B, T+1) windows in a seeded shuffled order. prepare.h writes them.
//
// A shard file (little-endian):
//   bytes  0..7   magic "KGSHARD\0"
//   u32    8      version (1)
//   u32    12     dtype: bytes per id, 2 (uint16, when V <= 65536) or 4 (uint32)
//   u64    16     vocab size of the tokenizer that wrote it
//   u64    24     n_tokens: ids that follow the header
//   u64    32     n_docs: documents (each one is followed by EOS)
//   u64    40     text_bytes: UTF-8 bytes of those documents, +1 per document for its
//                 separator (the EOS stands for the newline): for bits-per-byte
//   bytes  48..63 zero
//   then n_tokens ids.
// Names: DATA_DIR/train_NNNNNN.bin and DATA_DIR/val_NNNNNN.bin; beside each val shard its
// documents' text, one per line, as val_NNNNNN.txt (exactly text_bytes bytes: compare the
// model's bits-per-byte with `xz -9` on it). A shard is written to
// NAME.tmp and renamed, so a reader never sees half a shard. A directory that already holds
// shards is refused unless the caller says to add to them (SHARD_APPEND: new shards are
// numbered after the old ones, and a running trainer picks them up at its next epoch) or
// to replace them (SHARD_REPLACE: the old ones go once the new ones are complete).
#ifndef TRAIN_SHARD_H
#define TRAIN_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC       "KGSHARD"
#define SHARD_VERSION     1
#define SHARD_HEADER_SIZE 64
#define SHARD_NAME_MAX    64

typedef struct {
    uint32_t version;
    uint32_t dtype_size; // 2 or 4
    uint64_t vocab_size, n_tokens, n_docs, text_bytes;
} ShardHeader;

// One mapped shard.
typedef struct {
    char name[SHARD_NAME_MAX]; // file name within the data directory
    ShardHeader h;
    void *map;
    size_t map_size;
    const void *ids; // n_tokens ids of h.dtype_size bytes
} Shard;

// Maps dir/name and validates its header (magic, version, dtype, size). KG_EIO/KG_EFORMAT.
int shard_open(Shard *s, const char *dir, const char *name, char *err);
void shard_close(Shard *s);
// Id i of s (i < n_tokens).
static inline int shard_id(const Shard *s, uint64_t i) {
    return s->h.dtype_size == 2 ? (int)((const uint16_t *)s->ids)[i]
                                : (int)((const uint32_t *)s->ids)[i];
}

// Whether name is a train shard's plain file name, as shard_list gives them: "train_", then
// no '/', then ".bin", shorter than SHARD_NAME_MAX. A name from a file (a checkpoint's list)
// must pass before it is joined to the data directory: "../x/train_0.bin" would leave it.
int shard_name_ok(const char *name);

// Names of dir's shards whose name starts with prefix ("train_" or "val_") and ends in
// ".bin", sorted. *names is malloc'd (free with free()); *n may be 0.
int shard_list(const char *dir, const char *prefix, char (**names)[SHARD_NAME_MAX], size_t *n,
               char *err);

// The data position: enough to continue the window stream exactly (saved in checkpoints).
typedef struct {
    uint64_t epoch;  // epochs started so far - 1
    uint64_t shard;  // index into this epoch's shard order
    uint64_t window; // windows of that shard already handed out
} ShardPos;

// Hands out windows of T+1 ids: window w of a shard is ids [w T, w T + T]. Every epoch
// rescans the directory (new train_*.bin shards join), visits the shards in a shuffled
// order and each shard's windows in a shuffled order; both orders depend only on (seed,
// epoch, shard name), so every rank of a data-parallel run sees the same stream and a
// resumed run continues it exactly.
typedef struct {
    char *dir;
    size_t T;
    uint64_t seed;
    uint32_t vocab_size; // ids must be below this (the model's V)
    ShardPos pos;
    char (*names)[SHARD_NAME_MAX]; // this epoch's shards, in visiting order
    size_t n_names;
    Shard cur;      // the open shard (cur.map NULL when none)
    uint32_t *perm; // window order of cur
    uint64_t n_windows;
    uint64_t windows_total; // windows in this epoch, over all shards
} ShardLoader;

// Opens the loader at pos (zeroed: the start). The epoch's shard list is rebuilt from the
// directory; names (may be NULL) overrides it, for a resumed run that saved its list.
// KG_EINVAL when there is no train shard with a full window, KG_EFORMAT for a bad shard,
// one whose vocab exceeds vocab_size, or a name in names that fails shard_name_ok.
int shard_loader_open(ShardLoader *l, const char *dir, size_t T, uint64_t seed, uint32_t vocab_size,
                      const ShardPos *pos, char (*names)[SHARD_NAME_MAX], size_t n_names,
                      char *err);
void shard_loader_close(ShardLoader *l);
// Fills inputs (B, T) and targets (B, T) with the next B windows.
int shard_loader_next(ShardLoader *l, int *inputs, int *targets, size_t B, char *err);
// Skips n windows (the other ranks' share of a step).
int shard_loader_skip(ShardLoader *l, uint64_t n, char *err);

#endif
