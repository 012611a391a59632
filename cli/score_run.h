// score_run.h — kogpt2 score's scoring (cmd_score.c has the command): documents in input order,
// each cut into windows of T predicted tokens, up to `batch` windows advanced together by one
// gpt2_forward per step (`chunk` rows of each, logits at every row), the results written in
// input order as each document completes. The definitions are cmd_score.c's (train/val.h's).
//
// Use: score_run_init; per input line score_run_add then one of score_doc_skip / score_doc_error
// / score_run_text; while score_run_full: score_run_step; at the end, score_run_step until
// score_run_done; score_run_free. One thread.
#ifndef CLI_SCORE_RUN_H
#define CLI_SCORE_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "base/progress.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"

#define SCORE_MAX_BATCH 64  // windows per step
#define SCORE_MAX_CHUNK 256 // rows of a window per step

// One input line: a document to score, or why it is not one.
typedef struct ScoreDoc {
    size_t line;         // 1-based
    uint64_t raw_bytes;  // the line as read, newline included (for the progress)
    const char *skipped; // why it is not scored (a static string), or NULL
    char error[160];     // what is wrong with a JSONL line, or ""
    int *stream;         // (n_stream) EOS, the document's ids, EOS; NULL when not scored
    size_t n_stream;
    uint64_t bytes;                       // the ids decoded, + 1 (the newline)
    size_t windows, handed_out, finished; // windows of T predicted tokens
    double logprob;                       // summed over the scored tokens (nats)
    struct ScoreDoc *next;                // the next line's
} ScoreDoc;

// A window being scored: stream[k0 .. k0 + n) fed (fed so far) into kv, predicting the next n.
typedef struct {
    ScoreDoc *doc; // NULL: a free slot
    size_t k0, n, fed;
    KvSeq kv; // on the run's pool
} ScoreSlot;

typedef struct {
    uint64_t docs, skipped, tokens, bytes; // the scored documents' (skipped: lines not scored)
    double logprob;
} ScoreTotals;

typedef struct {
    const Gpt2 *m;
    Gpt2State *s; // room for batch * chunk rows, all with logits
    const Tokenizer *tok;
    size_t T, batch, chunk;
    int eos;
    KvPool *pool;          // every slot's blocks: a window of T positions each, no prefix cache
    ScoreSlot *slots;      // (batch)
    Gpt2Seq *seqs;         // (batch) a step's sequences
    size_t *seq_slot;      // (batch) which slot each is
    ScoreDoc *head, *tail; // lines read and not written yet, in input order
    ScoreTotals totals;
} ScoreRun;

// A run over m with its state s (at least batch * chunk rows, as many with logits) and tok
// (its EOS opens and closes every document; it must be below the model's vocabulary). KG_OK, or
// KG_EINVAL / KG_ENOMEM with err. Free with score_run_free().
int score_run_init(ScoreRun *r, const Gpt2 *m, Gpt2State *s, const Tokenizer *tok, size_t T,
                   size_t batch, size_t chunk, char *err);
void score_run_free(ScoreRun *r);

// A new line (its number and raw size) at the end of the run's lines: the caller then says what
// it holds. NULL on OOM (err filled).
ScoreDoc *score_run_add(ScoreRun *r, size_t line, uint64_t raw_bytes, char *err);
// The line is not scored (why: a static string such as "empty"). KG_OK.
int score_doc_skip(ScoreDoc *d, const char *why);
// The line is wrong: what, naming the field. KG_OK.
int score_doc_error(ScoreDoc *d, const char *what, const char *field);
// The line's document text[0..len): encoded (not UTF-8: skipped), its stream and bytes. KG_OK, or
// KG_ENOMEM / the tokenizer's error with err.
int score_run_text(ScoreRun *r, ScoreDoc *d, const char *text, size_t len, char *err);

// 1 when every slot has a window: step before reading more.
int score_run_full(ScoreRun *r);
// 1 when every line has been written.
int score_run_done(const ScoreRun *r);
// Hands free slots the windows waiting, runs one forward over every busy slot's next chunk,
// scores its rows, then writes the completed lines at the head to out as JSON lines (progress:
// their raw bytes). KG_OK, or the forward's error / KG_EIO (a write) with err.
int score_run_step(ScoreRun *r, FILE *out, KgProgress *pr, char *err);

#endif
