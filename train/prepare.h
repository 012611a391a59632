// prepare.h — `kogpt2-train prepare`: streams a text corpus through the tokenizer into
// token shards (the format and the reader: shard.h), and reads the same documents for
// validation text and `kogpt2-train eval` (shard_read_docs).
#ifndef TRAIN_PREPARE_H
#define TRAIN_PREPARE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shard.h"
#include "tokenizer/tokenizer.h"

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

#endif
