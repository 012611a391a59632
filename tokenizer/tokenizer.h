// tokenizer.h — one C interface for KoGPT2's two tokenizer generations:
//   - SentencePiece models (*.model, *.spiece: KoGPT2 v1 and the project's own models),
//     through a small extern "C" shim over Debian's libsentencepiece (tok_spm.cc);
//   - Hugging Face tokenizer.json BPE (KoGPT2 v2), in C with cJSON and utf8proc (tok_bpe.c).
//
// Thread safety: a loaded Tokenizer is read-only; tok_encode/tok_decode/tok_piece may be
// called from many threads at once. A TokStream belongs to one thread.
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>

#include "base/kg.h"

typedef struct Tokenizer Tokenizer;

typedef enum { TOK_SPM, TOK_BPE } TokKind;

// Special token ids; -1 where the tokenizer has none.
typedef struct {
    int bos, eos, unk, pad;
} TokSpecial;

// Opens a tokenizer from a file (tokenizer.json, *.model, *.spiece) or from a model
// directory (tokenizer.json is preferred, then *.model / *.spiece).
// KG_OK and *out set; or KG_EIO / KG_EFORMAT with err filled and *out NULL. Free with tok_free().
int tok_open(Tokenizer **out, const char *path, char *err);
void tok_free(Tokenizer *t);

TokKind tok_kind(const Tokenizer *t);
size_t tok_vocab_size(const Tokenizer *t); // ids are 0 .. vocab_size-1
// Special ids. SentencePiece: as the model states them (KoGPT2 v1: bos <s>=0, eos </s>=1,
// unk <unk>=5, pad <pad>=3). tokenizer.json: unk = model.unk_token, bos/eos/pad = the ids of
// "<s>", "</s>", "<pad>" (KoGPT2 v2: 0, 1, 5, 3, as its config.json; note SKT's own generation
// code starts prompts with </s>, not <s>).
TokSpecial tok_special(const Tokenizer *t);
// What loading noticed but tolerated, "" if nothing (never NULL; owned by t). KoGPT2 v2's
// tokenizer.json lists an added token `<|endoftext|>` with id 51200, outside its 51,200-id
// vocabulary; it is left out (never produced, and text "<|endoftext|>" encodes as plain
// text), and this note says so.
const char *tok_notes(const Tokenizer *t);

// Encodes len bytes of UTF-8 text (no BOS/EOS added). On KG_OK *ids is a malloc'd array of
// *n ids (free()); empty text gives *n = 0 and *ids may be NULL.
// Invalid UTF-8 gives KG_EINVAL with the byte offset in err; nothing is allocated then.
int tok_encode(const Tokenizer *t, const char *text, size_t len, int **ids, size_t *n, char *err);

// tok_encode for a caller with a limit of max tokens: KG_ERANGE ("encode: more than MAX
// tokens" in err, nothing allocated) as soon as the text certainly needs more. That is at once
// when len > max * tok_max_bytes_per_token(t); tokenizer.json BPE also stops within a word of
// passing max; libsentencepiece cannot stop inside an encode, so a SentencePiece text within
// the byte bound (or with none) is encoded whole, then counted. Otherwise as tok_encode.
int tok_encode_max(const Tokenizer *t, const char *text, size_t len, size_t max, int **ids,
                   size_t *n, char *err);

// The most bytes of text (as given to tok_encode) one token can stand for, so that a text of
// len bytes needs at least len / this tokens; 0 when there is no such bound. Fixed at load:
//   tokenizer.json: the longest piece (byte-fallback pieces and added tokens included; at
//     least 4, an <unk>'s one character), times 4 when a normalizer runs (NFKC maps one 4-byte
//     character to 1 byte, and composes 8 bytes into 2); none when unknown characters are
//     dropped (no unk_token) or fused (fuse_unk). KoGPT2 v2: 30 x 4 = 120.
//   SentencePiece: the longest piece when the model maps no characters, keeps whitespace runs
//     and falls back to bytes (the project's own models: 48); none otherwise (KoGPT2 v1's
//     nmt_nfkc folds a run of spaces into one and drops control characters).
size_t tok_max_bytes_per_token(const Tokenizer *t);

// Decodes ids to UTF-8 text as the reference implementation does (v2: Metaspace decoder,
// v1: SentencePiece DecodeIds). On KG_OK *text is malloc'd and NUL-terminated (free()),
// *len (may be NULL) its byte length. An id outside the vocabulary is KG_ERANGE.
int tok_decode(const Tokenizer *t, const int *ids, size_t n, char **text, size_t *len, char *err);

// The vocabulary piece of id as stored (e.g. "▁안녕"), NUL-terminated, owned by t;
// NULL if id is out of range.
const char *tok_piece(const Tokenizer *t, int id);
// The piece of id as it reads inside a sentence: '▁' (U+2581) turned into a space, e.g.
// " 안녕" (the Explorer's and the API's "text" of a candidate). malloc'd, NUL-terminated;
// NULL if id is out of range or on OOM.
char *tok_piece_text(const Tokenizer *t, int id);
// The id of a piece, or -1 if the vocabulary has no such piece.
int tok_piece_id(const Tokenizer *t, const char *piece);
// The byte 0..255 a byte-fallback piece (SentencePiece's <0xAB>) decodes to; -1 for any other
// id (also one out of range). O(1): a table made at load. tokenizer.json's decoders render
// such pieces as their text, so there it is -1 for every id.
int tok_byte(const Tokenizer *t, int id);
// byte_id[b] = the id below V of byte b's byte-fallback piece, -1 where there is none (the
// table sampler_utf8_init takes).
void tok_byte_ids(const Tokenizer *t, size_t V, int byte_id[256]);
// The bytes id adds to a decoded text after a complete character, as the decoder renders it:
// a byte piece its one byte (not UTF-8 on its own unless < 0x80), a control piece (</s>)
// nothing, any other piece its text ('▁' a space). KG_OK with *out malloc'd, NUL-terminated
// (free()), *len bytes; KG_ERANGE for an id outside the vocabulary, KG_ENOMEM.
int tok_token_bytes(const Tokenizer *t, int id, char **out, size_t *len, char *err);

// Incremental decoding for streaming: feed ids one at a time, get only complete UTF-8
// text back (never half a character), with the decoder's rules for leading spaces.
typedef struct TokStream TokStream;
// NULL on OOM. Free with tok_stream_free().
TokStream *tok_stream_new(const Tokenizer *t);
void tok_stream_free(TokStream *s);
// Appends id; on KG_OK *text points to the newly completed text (*len bytes, may be 0),
// valid until the next call on s. KG_ERANGE for an id outside the vocabulary.
int tok_stream_push(TokStream *s, int id, const char **text, size_t *len, char *err);
// Returns whatever is still held back at the end of the stream (an incomplete character
// is emitted as U+FFFD, as the reference decoders do).
int tok_stream_flush(TokStream *s, const char **text, size_t *len, char *err);
// Starts a generation's stream after the prompt ids[0..n) (n >= 1): pushes, its text dropped,
// the prompt's last token, so that the first generated piece keeps its leading space as inside
// the whole decoded text; or, when the prompt ends in byte tokens, up to its last 4 tokens from
// the first of those bytes, so that a prompt ending inside a character (the Explorer's clicked
// bytes) goes on with that character. *from is the first token pushed: a sampler's UTF-8 state
// takes the same tokens (sampler_utf8.h). kogpt2d's engine and kogpt2 generate both start so.
// KG_OK, or tok_stream_push's error.
int tok_stream_prime(TokStream *s, const int *ids, size_t n, size_t *from, char *err);

#endif
