// val.h — a model's loss and bits per byte on held-out text: the one definition that
// `kogpt2-train train` validates with (every --val-every steps, and at its first step) and
// `kogpt2-train eval` (models/eval_bpb.sh) reports.
//
// The text is documents in order (a prepared directory's val_*.bin shards, or a text file or
// directory read as prepare reads it: a line of a .txt, a record of a .tsv/.csv), each one's
// tokens followed by EOS. Every token of it is scored exactly once, EOS included: the stream
// EOS, doc 1, EOS, doc 2, EOS, ... is cut into windows of T predicted tokens, and each token
// is predicted from the tokens before it in its window (the first window starts from the EOS
// that opens the stream, GPT-2's separator; a window's first token has the one before it).
//
//   loss = sum over scored tokens of -ln p(token | context) / tokens          (nats/token)
//   bpb  = sum over scored tokens of -log2 p(token | context) / bytes          (bits/byte)
//
// bytes = each scored document's UTF-8 bytes as the tokenizer decodes its tokens, plus 1
// for the newline its EOS stands for: what the model's bits encode. A tokenizer that
// round-trips text (the project's own, byte-level BPE) decodes a document to its bytes as
// written, so bytes is then the text's size (what `xz -9` gets); ValSet.text_bytes keeps the
// written size where it is known, to say so when they differ. A budget of max_tokens scores
// the first documents up to that many tokens, the last one whole, so that bytes and bits
// always cover the same documents (never a mean extrapolated to the rest). What prepare
// drops (empty lines, lines that are not UTF-8) is neither scored nor counted.
#ifndef TRAIN_VAL_H
#define TRAIN_VAL_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int *ids;            // (n) the documents' tokens, each document followed by EOS
    uint64_t n;          // tokens to score
    int eos;             // the stream's opening context
    uint64_t docs;       // documents in ids
    uint64_t bytes;      // their decoded UTF-8 bytes + 1 each (the bpb denominator)
    uint64_t text_bytes; // the same documents' bytes as written, where known (else 0)
    uint64_t docs_all;   // documents the source holds (more than docs under a budget)
} ValSet;

// Whether path is a prepared directory with validation shards (val_*.bin).
int val_is_shard_dir(const char *path);

// Loads the validation documents of path: the val_*.bin shards of a prepared directory
// (val_is_shard_dir), else text (a file, a pipe or a directory of text files, read as prepare
// reads them, every document). tok decodes (bytes) and, for text, encodes; ids must be below
// V. max_tokens: score at most the first documents that hold that many tokens, the last one
// whole (0: all). KG_OK; KG_EINVAL when path holds no document (or a shard directory holds
// no val_*.bin: "... holds no val_*.bin"), KG_EFORMAT for a bad shard or an id >= V, KG_EIO,
// KG_ENOMEM, with err filled. Free with val_free().
int val_load(ValSet *v, const char *path, const Tokenizer *tok, size_t V, uint64_t max_tokens,
             char *err);
void val_free(ValSet *v);

typedef struct {
    double nats;     // summed over the scored tokens
    uint64_t tokens; // scored tokens (v->n)
    double loss;     // nats / tokens
    double bpb;      // nats / ln 2 / v->bytes
} ValResult;

// Scores v with m (no gradients kept: t is the trainer's activation space for batches of B
// windows of T tokens; inputs and targets are (B, T) host scratch). Windows are dealt
// round-robin to d's ranks and the sums all-reduced, so every rank gets the same *out.
// KG_OK, or the forward's or the all-reduce's error.
int val_score(const Gpt2 *m, Gpt2Train *t, const ValSet *v, Dist *d, size_t B, size_t T,
              int *inputs, int *targets, ValResult *out, char *err);

#endif
