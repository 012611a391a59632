// tok_spm.h — a C view of Debian's libsentencepiece (C++), used only by tok.c.
// No C++ type or exception crosses this line: every function catches everything and
// returns KG_OK or a negative KG_E* code with one "what: why" line in err (may be NULL).
// A loaded TokSpm is read-only and safe to share between threads.
#ifndef TOK_SPM_H
#define TOK_SPM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TokSpm TokSpm;

// How a piece decodes (SentencePiece's piece types, as far as decoding cares).
typedef enum {
    TOK_SPM_NORMAL,  // normal and user-defined pieces: the text, '▁' read as a space
    TOK_SPM_CONTROL, // <s>, </s>, <pad>: decode to nothing
    TOK_SPM_UNKNOWN, // <unk>: decodes to " ⁇ "
    TOK_SPM_UNUSED,
    TOK_SPM_BYTE // <0xAB> byte pieces (byte_fallback models)
} TokSpmType;

// Loads a serialized ModelProto (*.model, *.spiece). KG_OK and *out set, or KG_EIO (cannot
// read) / KG_EFORMAT (not a model) with *out NULL. Free with tok_spm_free().
int tok_spm_open(TokSpm **out, const char *path, char *err);
void tok_spm_free(TokSpm *s);

// Encodes len bytes of valid UTF-8 (the caller checks). On KG_OK *ids is malloc'd (*n ids,
// NULL when *n is 0). KG_ENOMEM or KG_EINTERNAL otherwise, nothing allocated.
int tok_spm_encode(const TokSpm *s, const char *text, size_t len, int **ids, size_t *n, char *err);
// Decodes ids (all in 0 .. size-1: the caller checks) with SentencePiece's own Decode.
// On KG_OK *text is malloc'd, NUL-terminated, *len bytes.
int tok_spm_decode(const TokSpm *s, const int *ids, size_t n, char **text, size_t *len, char *err);

size_t tok_spm_size(const TokSpm *s);
// The most bytes of text one token stands for (tokenizer.h, tok_max_bytes_per_token), 0 for
// none; read from the model at load.
size_t tok_spm_max_bytes(const TokSpm *s);
// The piece of id (owned by s), NULL if out of range.
const char *tok_spm_piece(const TokSpm *s, int id);
// The id of piece, -1 if none (SentencePiece itself answers unk for unknown pieces).
int tok_spm_piece_id(const TokSpm *s, const char *piece);
TokSpmType tok_spm_type(const TokSpm *s, int id);
// bos, eos, unk, pad ids as the model states them (-1: none).
void tok_spm_special(const TokSpm *s, int *bos, int *eos, int *unk, int *pad);

#ifdef __cplusplus
}
#endif

#endif
