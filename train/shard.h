// shard.h — token shards: the `prepare` step that streams a text corpus through the
// tokenizer into shard files, and the trainer's reader that memory-maps them and hands out
// (B, T+1) windows in a seeded shuffled order.
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
#include <stdio.h>

#include "tokenizer/tokenizer.h"

#define SHARD_MAGIC       "KGSHARD"
#define SHARD_VERSION     1
#define SHARD_HEADER_SIZE 64
#define SHARD_NAME_MAX    64

typedef struct {
    uint32_t version;
    uint32_t dtype_size; // 2 or 4
    uint64_t vocab_size, n_tokens, n_docs, text_bytes;
} ShardHeader;

// --- prepare ---

// The longest line (a CSV/TSV record: the whole record) prepare keeps, in bytes without its
// line ending; a longer one is dropped and counted, read past without being held. 1 MiB is
// some 350,000 Hangul syllables, a whole long document (a training window of 1024 tokens is
// a few KB), and bounds memory: SentencePiece's encode peaks near 70 bytes per input byte
// (a 1 MiB line: 73 MB resident; 16 MiB: 1 GB), and a line is held whole before it.
#define SHARD_MAX_LINE_DEFAULT 1048576 // 1 MiB (a literal: prepare --help shows it)

// What prepare does with shards already in out_dir.
typedef enum {
    SHARD_NEW,    // refuse (KG_EINVAL): a second prepare would silently duplicate data
    SHARD_APPEND, // add to them
    SHARD_REPLACE // replace them (only once the new shards are complete)
} ShardPrepareMode;

typedef struct {
    const char *const *inputs; // files or directories (directories: their .txt .tsv .csv
    size_t n_inputs;           // files, optionally .gz, recursively, in name order)
    const char *out_dir;       // created if missing
    uint64_t shard_tokens;     // ids per train shard before a new one starts (0: 1 << 26)
    uint64_t val_every;        // every val_every-th document goes to validation (0: none)
    size_t max_line_bytes;     // longest line kept (0: SHARD_MAX_LINE_DEFAULT)
    ShardPrepareMode mode;
    FILE *progress; // progress lines with an ETA (base/progress.h) go here; NULL: none
} ShardPrepareArgs;

typedef struct {
    uint64_t files, docs, train_tokens, val_tokens, val_docs, bytes_in;
    int train_shards, val_shards;
    uint64_t dropped_utf8;   // lines (CSV/TSV: records) dropped: not valid UTF-8
    uint64_t dropped_nul;    // dropped: a NUL byte inside (binary, not text)
    uint64_t dropped_long;   // dropped: longer than max_line_bytes
    size_t max_line_bytes;   // the limit applied
    char first_dropped[256]; // "PATH:LINE" of the first dropped line, "" when none
} ShardPrepareStats;

// A corpus prepare never reads (../shared/data/corpora/korean_hate_speech: toxic comments,
// kept for evaluation): a named input under it is KG_EINVAL, a directory walk skips it.
#define SHARD_NEVER_TRAIN "korean_hate_speech"

// Streams every input line by line (zlib reads .gz and plain files alike; memory stays
// O(max_line_bytes + one shard buffer), whatever the input) through tok, writing shards into
// args->out_dir (SHARD_NEW refuses a directory that holds shards already: ShardPrepareMode).
// An input is a file, a directory or a pipe (--input /dev/stdin, <(xzcat ...)); a device
// (/dev/zero) is KG_EINVAL, and a directory walk reads only its regular files.
// A document is one non-empty line of a .txt file, or one record of a .tsv/.csv file
// reduced to its non-ASCII fields (text, not ids or labels) joined by '\n'; a CSV record
// may span lines inside quotes. Document k (0-based, over all inputs in order) goes to the
// validation shard when val_every > 0 and k % val_every == val_every - 1. Files with other
// extensions inside a directory are skipped; a named file is always read.
// A line that is not valid UTF-8, holds a NUL byte or is longer than max_line_bytes is
// dropped and counted (stats), not an error; but when no document at all is left, that is
// KG_EINVAL with the counts in err.
// KG_EIO / KG_EINVAL (tokenizer without EOS, shards already there) with err filled; stats
// (may be NULL) filled on KG_OK. On error out_dir holds the shards it held before.
// With args->progress, a progress line: the bytes read of the inputs' total size (a .gz file
// counts its compressed bytes), with the rate and an ETA; a pipe among the inputs leaves the
// total unknown (bytes and rate only).
int shard_prepare(const Tokenizer *tok, const ShardPrepareArgs *args, ShardPrepareStats *stats,
                  char *err);

// Called with each document shard_read_docs reads: its n ids (no EOS) and its text (len bytes,
// not NUL-terminated; valid during the call). A non-zero return (a KG_E* code, err filled)
// stops the reading.
typedef int (*ShardDocFn)(void *ctx, const int *ids, size_t n, const char *text, size_t len,
                          char *err);

// Reads inputs (files, directories, pipes) exactly as shard_prepare does, the same documents
// in the same order, and hands each to fn instead of writing shards: validation text
// (--val FILE) and `kogpt2-train eval`. Unlike prepare it reads SHARD_NEVER_TRAIN too (its
// use is evaluation). max_line_bytes 0: SHARD_MAX_LINE_DEFAULT; progress as in
// ShardPrepareArgs; stats (may be NULL) counts files, documents, bytes and dropped lines.
// KG_OK, fn's error, or KG_EIO / KG_EINVAL (no document at all) with err filled.
int shard_read_docs(const Tokenizer *tok, const char *const *inputs, size_t n_inputs,
                    size_t max_line_bytes, ShardDocFn fn, void *ctx, FILE *progress,
                    ShardPrepareStats *stats, char *err);

// What prepare dropped, for its summary: "3 lines dropped (2 not UTF-8, 1 with NUL bytes,
// 0 over 1048576 bytes), the first at PATH:LINE", or "" when nothing was. out has cap bytes.
void shard_prepare_dropped(const ShardPrepareStats *st, char *out, size_t cap);

// --- reading ---

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
