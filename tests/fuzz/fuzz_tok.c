// fuzz_tok.c — one tokenizer's encode and decode (tokenizer.h), built twice: fuzz_tok_spm
// with the project's own SentencePiece model (models/default, in the repo, so it runs in a
// fresh clone) and fuzz_tok_bpe with KoGPT2 v2's tokenizer.json from ../shared (skipped,
// saying so, when that is absent). FUZZ_TOK_BPE picks the second.
//
// Input: byte 0 picks the mode, the rest is its argument.
//   even: UTF-8 text (or not) -> tok_encode; valid text must encode, invalid must be
//         KG_EINVAL; the ids it gives must decode, whole and as a stream;
//   odd:  2 bytes per id (little-endian) -> ids in -1 .. V, so both ends of the range are
//         hit -> tok_decode, tok_stream_push/flush and tok_piece/tok_piece_text per id.
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/http/json_in.h"
#include "tokenizer/tokenizer.h"

#ifdef FUZZ_TOK_BPE
#define FUZZ_TOK_NAME "fuzz_tok_bpe"
#else
#define FUZZ_TOK_NAME "fuzz_tok_spm"
#endif

static Tokenizer *fuzz_tok;
static size_t fuzz_vocab; // V

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[4096], err[KG_ERRLEN];
#ifdef FUZZ_TOK_BPE
    fuzz_data_file(path, sizeof path, "KG_SHARED_DIR", KG_FUZZ_SHARED_DIR,
                   "data/kogpt2/v2/tokenizer.json", FUZZ_TOK_NAME);
#else
    fuzz_data_file(path, sizeof path, "KG_SOURCE_DIR", KG_FUZZ_SOURCE_DIR,
                   "models/default/kogpt2-default.model", FUZZ_TOK_NAME);
#endif
    if (tok_open(&fuzz_tok, path, err)) {
        fprintf(stderr, FUZZ_TOK_NAME ": %s\n", err);
        exit(1);
    }
    fuzz_vocab = tok_vocab_size(fuzz_tok);
    return 0;
}

// Decodes ids whole and as a stream; both must succeed (all ids are in range) and give
// valid UTF-8 (a decoder never hands out half a character).
static void fuzz_decode_valid(const int *ids, size_t n) {
    char err[KG_ERRLEN], *text = NULL;
    size_t len = 0;
    FUZZ_CHECK(tok_decode(fuzz_tok, ids, n, &text, &len, err) == KG_OK);
    FUZZ_CHECK(text && strlen(text) <= len && json_utf8_valid(text, len, NULL));
    free(text);
    TokStream *s = tok_stream_new(fuzz_tok);
    FUZZ_CHECK(s);
    const char *part;
    size_t part_len;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(tok_stream_push(s, ids[i], &part, &part_len, err) == KG_OK);
        FUZZ_CHECK(json_utf8_valid(part, part_len, NULL));
    }
    FUZZ_CHECK(tok_stream_flush(s, &part, &part_len, err) == KG_OK);
    FUZZ_CHECK(json_utf8_valid(part, part_len, NULL));
    tok_stream_free(s);
}

static void fuzz_encode(const char *text, size_t len) {
    char err[KG_ERRLEN];
    int *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(fuzz_tok, text, len, &ids, &n, err);
    FUZZ_CHECK(rc == (json_utf8_valid(text, len, NULL) ? KG_OK : KG_EINVAL));
    if (rc) return;
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < fuzz_vocab);
    fuzz_decode_valid(ids, n);
    free(ids);
}

// ids straight from the input, some outside the vocabulary: every call must refuse those
// with KG_ERANGE / NULL and handle the rest.
static void fuzz_decode(const uint8_t *data, size_t size) {
    size_t n = size / 2, n_bad = 0;
    int *ids = malloc(n ? n * sizeof *ids : 1);
    FUZZ_CHECK(ids);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int)((data[2 * i] | (unsigned)data[2 * i + 1] << 8) % (fuzz_vocab + 2)) - 1;
        int ok = ids[i] >= 0 && (size_t)ids[i] < fuzz_vocab;
        n_bad += !ok;
        char *piece_text = tok_piece_text(fuzz_tok, ids[i]);
        FUZZ_CHECK(!ok == !tok_piece(fuzz_tok, ids[i]) && !ok == !piece_text);
        if (ok) FUZZ_CHECK(tok_piece_id(fuzz_tok, tok_piece(fuzz_tok, ids[i])) >= 0);
        free(piece_text);
    }
    if (n_bad == 0) {
        fuzz_decode_valid(ids, n);
    } else {
        char err[KG_ERRLEN], *text = NULL;
        FUZZ_CHECK(tok_decode(fuzz_tok, ids, n, &text, NULL, err) == KG_ERANGE && !text);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] % 2 == 0) {
        // a copy of exactly size - 1 bytes: a read past the text's end is an ASan error
        char *text = malloc(size - 1 ? size - 1 : 1);
        FUZZ_CHECK(text);
        memcpy(text, data + 1, size - 1);
        fuzz_encode(text, size - 1);
        free(text);
    } else {
        fuzz_decode(data + 1, size - 1);
    }
    return 0;
}
