// tok_bpe.h — Hugging Face tokenizer.json BPE (KoGPT2 v2), used only by tok.c.
// A loaded TokBpe is read-only; encode/decode may run on many threads at once.
#ifndef TOK_BPE_H
#define TOK_BPE_H

#include <stddef.h>

#include "base/buf.h"
#include "tokenizer.h"

typedef struct TokBpe TokBpe;

// Parses a tokenizer.json. KG_OK and *out set; KG_EIO, KG_EFORMAT (malformed JSON or
// model), KG_EUNSUP (a normalizer/pre-tokenizer/decoder/model option this C port lacks) or
// KG_ENOMEM with err filled and *out NULL. Free with tok_bpe_free().
int tok_bpe_open(TokBpe **out, const char *path, char *err);
void tok_bpe_free(TokBpe *b);

// Encodes len bytes of valid UTF-8 (the caller validates). Same contract as tok_encode_max():
// KG_ERANGE as soon as more than max tokens are certain; piece_bytes (from tok_bpe_bounds, 0:
// none) lets a word that cannot fit be refused before its merges run.
int tok_bpe_encode(const TokBpe *b, const char *text, size_t len, size_t max, size_t piece_bytes,
                   int **ids, size_t *n, char *err);

// The most bytes one token stands for (tokenizer.h, tok_max_bytes_per_token): *piece_bytes of
// a word after normalization and Metaspace, *text_bytes of the text as given; both 0 when
// unknown characters are dropped or fused (no bound). O(V): call once, after loading.
void tok_bpe_bounds(const TokBpe *b, size_t *piece_bytes, size_t *text_bytes);

// Appends the text of id (0 <= id < size, checked by the caller) as the file's decoder
// renders it; first: id is the first token of the sequence. 0 ok, -1 on OOM.
int tok_bpe_surface(const TokBpe *b, int id, int first, KgBuf *out);

size_t tok_bpe_size(const TokBpe *b);
const char *tok_bpe_piece(const TokBpe *b, int id);
int tok_bpe_piece_id(const TokBpe *b, const char *piece);
TokSpecial tok_bpe_special(const TokBpe *b);
// What loading noticed but tolerated ("" if nothing), e.g. added tokens out of range.
const char *tok_bpe_notes(const TokBpe *b);

#endif
