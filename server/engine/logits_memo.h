// logits_memo.h — the logits after recent prompts: a prompt remembered here is answered with no
// forward pass at all (the Explorer's click on a speculated candidate, a repeated prompt),
// and a generation whose prompt's blocks are all in the prefix cache starts sampling at once.
// The KV blocks are shared in the pool (model/kv.h); only this last row of V floats per prompt
// is kept apart, for a fixed number of prompts, the least recently used replaced first. Keyed
// by the prompt's tokens (the prefix cache's rolling hash, each hit verified token by token).
//
// Only the engine thread uses it: no locking.
#ifndef LOGITS_MEMO_H
#define LOGITS_MEMO_H

#include <stddef.h>

typedef struct LogitsMemo LogitsMemo;

// A memo of capacity prompts of up to max_tokens ids, each with a row of V floats, allocated
// here at once (capacity 0: one that never remembers). NULL on OOM. Free with
// logits_memo_free().
LogitsMemo *logits_memo_new(size_t capacity, size_t max_tokens, size_t V);
void logits_memo_free(LogitsMemo *m);

// The row remembered after tokens (n of them), or NULL; a hit counts as a use. The row stays
// valid until the next logits_memo_put.
const float *logits_memo_get(LogitsMemo *m, const int *tokens, size_t n);
// Remembers row (V floats) after tokens (1 <= n <= max_tokens, else nothing), in place of the
// least recently used.
void logits_memo_put(LogitsMemo *m, const int *tokens, size_t n, const float *row);
// Bytes of the rows held now, and of every row the memo may hold.
size_t logits_memo_bytes(const LogitsMemo *m);
size_t logits_memo_capacity_bytes(const LogitsMemo *m);

#endif
