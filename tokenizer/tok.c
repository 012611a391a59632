// tok.c — the one tokenizer interface (tokenizer.h): picks the implementation for a file or
// model directory, checks UTF-8 and ids at the boundary, and decodes incrementally.
#include "tokenizer.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/kg.h"
#include "tok_bpe.h"
#include "tok_spm.h"

struct Tokenizer {
    TokKind kind;
    TokSpm *spm;            // kind TOK_SPM
    TokBpe *bpe;            // kind TOK_BPE
    size_t piece_bytes;     // BPE: bytes of normalized text a token covers at most (0: no bound)
    size_t bytes_per_token; // tok_max_bytes_per_token (0: no bound)
    int16_t *byte_of;       // (V) tok_byte: the byte of a byte piece, -1; NULL: no byte pieces
};

struct TokStream {
    const Tokenizer *t;
    size_t count;   // ids pushed so far
    size_t emitted; // bytes handed out so far
    KgBuf pending;  // decoded bytes held back: an incomplete UTF-8 character at the end
    KgBuf out;      // what the last push/flush returned
};

#define SPM_SPACE "\xE2\x96\x81"   // U+2581 '▁'
#define SPM_UNK   " \xE2\x81\x87 " // " ⁇ ", SentencePiece's surface of <unk>
#define UTF8_FFFD "\xEF\xBF\xBD"

// A tokenizer.json is JSON: its first non-blank byte is '{'. A SentencePiece model is a
// protobuf, which never starts with '{' (0x7B would be field 15, wire type 3: unused).
static int looks_like_json(const char *path) {
    FILE *f = fopen(path, "rb");
    int c = EOF;
    if (!f) return 0;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {
    }
    fclose(f);
    return c == '{';
}

// In a model directory: tokenizer.json, else the one *.model / *.spiece (tokenizer.model or
// the alphabetically first one when there are several). KG_OK with the path in out.
static int find_in_dir(const char *dir, char *out, size_t cap, char *err) {
    snprintf(out, cap, "%s/tokenizer.json", dir);
    if (!access(out, R_OK)) return KG_OK;
    DIR *d = opendir(dir);
    if (!d) return kg_err(err, KG_EIO, "open %s: %s", dir, strerror(errno));
    char best[1024] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (!kg_ends_with(name, ".model") && !kg_ends_with(name, ".spiece")) continue;
        if (!strcmp(name, "tokenizer.model") ||
            (strcmp(best, "tokenizer.model") && (!best[0] || strcmp(name, best) < 0)))
            snprintf(best, sizeof(best), "%s", name);
    }
    closedir(d);
    if (!best[0])
        return kg_err(err, KG_EIO, "%s: no tokenizer.json, *.model or *.spiece in it", dir);
    snprintf(out, cap, "%s/%s", dir, best);
    return KG_OK;
}

// t->byte_of of a SentencePiece model: the byte of each <0xAB> piece, read once at load, so
// that the decoder and the sampler's UTF-8 mask never parse a piece per token. Stays NULL
// when the model has no byte pieces. KG_OK or KG_ENOMEM.
static int spm_byte_table(Tokenizer *t, char *err) {
    size_t V = tok_spm_size(t->spm);
    for (size_t id = 0; id < V; id++) {
        unsigned v;
        if (tok_spm_type(t->spm, (int)id) != TOK_SPM_BYTE ||
            sscanf(tok_spm_piece(t->spm, (int)id), "<0x%2X>", &v) != 1)
            continue;
        if (!t->byte_of) {
            if (!(t->byte_of = malloc(V * sizeof *t->byte_of)))
                return kg_err(err, KG_ENOMEM, "tokenizer: out of memory");
            for (size_t i = 0; i < V; i++)
                t->byte_of[i] = -1;
        }
        t->byte_of[id] = (int16_t)v;
    }
    return KG_OK;
}

int tok_open(Tokenizer **out, const char *path, char *err) {
    *out = NULL;
    struct stat st;
    char file[4096];
    if (stat(path, &st)) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        int rc = find_in_dir(path, file, sizeof(file), err);
        if (rc) return rc;
    } else {
        snprintf(file, sizeof(file), "%s", path);
    }
    int fd, rc = kg_open_regular(file, &fd, NULL, err); // a FIFO would hang the loaders' reads
    if (rc) return rc;
    close(fd); // the loaders open it by name
    Tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return kg_err(err, KG_ENOMEM, "open %s: out of memory", file);
    if (kg_ends_with(file, ".json") || looks_like_json(file)) {
        t->kind = TOK_BPE;
        rc = tok_bpe_open(&t->bpe, file, err);
        if (!rc) tok_bpe_bounds(t->bpe, &t->piece_bytes, &t->bytes_per_token);
    } else {
        t->kind = TOK_SPM;
        rc = tok_spm_open(&t->spm, file, err);
        if (!rc) t->bytes_per_token = tok_spm_max_bytes(t->spm);
        if (!rc) rc = spm_byte_table(t, err);
    }
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return KG_OK;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    tok_spm_free(t->spm);
    tok_bpe_free(t->bpe);
    free(t->byte_of);
    free(t);
}

TokKind tok_kind(const Tokenizer *t) { return t->kind; }

size_t tok_vocab_size(const Tokenizer *t) {
    return t->kind == TOK_SPM ? tok_spm_size(t->spm) : tok_bpe_size(t->bpe);
}

TokSpecial tok_special(const Tokenizer *t) {
    if (t->kind == TOK_BPE) return tok_bpe_special(t->bpe);
    TokSpecial s;
    tok_spm_special(t->spm, &s.bos, &s.eos, &s.unk, &s.pad);
    return s;
}

const char *tok_notes(const Tokenizer *t) {
    return t->kind == TOK_BPE ? tok_bpe_notes(t->bpe) : "";
}

const char *tok_piece(const Tokenizer *t, int id) {
    return t->kind == TOK_SPM ? tok_spm_piece(t->spm, id) : tok_bpe_piece(t->bpe, id);
}

char *tok_piece_text(const Tokenizer *t, int id) {
    const char *piece = tok_piece(t, id);
    char *out = piece ? malloc(strlen(piece) + 1) : NULL, *o = out;
    if (!out) return NULL;
    for (const char *p = piece; *p;) {
        if (!strncmp(p, SPM_SPACE, 3)) {
            *o++ = ' ';
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

int tok_byte(const Tokenizer *t, int id) {
    return t->byte_of && id >= 0 && (size_t)id < tok_vocab_size(t) ? t->byte_of[id] : -1;
}

void tok_byte_ids(const Tokenizer *t, size_t V, int byte_id[256]) {
    for (int b = 0; b < 256; b++)
        byte_id[b] = -1;
    for (size_t id = 0; id < V; id++)
        if (tok_byte(t, (int)id) >= 0) byte_id[tok_byte(t, (int)id)] = (int)id;
}

int tok_piece_id(const Tokenizer *t, const char *piece) {
    return t->kind == TOK_SPM ? tok_spm_piece_id(t->spm, piece) : tok_bpe_piece_id(t->bpe, piece);
}

// Length of the UTF-8 sequence a lead byte starts, 0 for a byte that cannot start one.
static size_t utf8_seq_len(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

// The character at s (n bytes left): 1 and *len if it is well-formed UTF-8 (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), 0 if it is a valid start cut short by
// the end of s, -1 if it is malformed.
static int utf8_char_at(const uint8_t *s, size_t n, size_t *len) {
    size_t k = utf8_seq_len(s[0]);
    if (!k) return -1;
    if (k > 1) {
        uint8_t lo = 0x80, hi = 0xBF; // the second byte's range depends on the lead
        if (s[0] == 0xE0) lo = 0xA0;
        if (s[0] == 0xED) hi = 0x9F;
        if (s[0] == 0xF0) lo = 0x90;
        if (s[0] == 0xF4) hi = 0x8F;
        for (size_t i = 1; i < k; i++) {
            if (i == n) return 0;
            if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return -1;
        }
    }
    *len = k;
    return 1;
}

// Offset of the first byte that is not well-formed UTF-8, or len if all is well.
static size_t utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t i = 0, k;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (utf8_char_at(s + i, len - i, &k) != 1) return i;
        i += k;
    }
    return len;
}

int tok_encode(const Tokenizer *t, const char *text, size_t len, int **ids, size_t *n, char *err) {
    return tok_encode_max(t, text, len, SIZE_MAX, ids, n, err);
}

size_t tok_max_bytes_per_token(const Tokenizer *t) { return t->bytes_per_token; }

int tok_encode_max(const Tokenizer *t, const char *text, size_t len, size_t max, int **ids,
                   size_t *n, char *err) {
    *ids = NULL;
    *n = 0;
    size_t bad = utf8_invalid_at((const uint8_t *)text, len);
    if (bad < len)
        return kg_err(err, KG_EINVAL, "encode: invalid UTF-8 at byte %zu (0x%02X)", bad,
                      (uint8_t)text[bad]);
    if (!len) return KG_OK;
    size_t bpt = t->bytes_per_token; // more bytes than max tokens can hold: refused unread
    if (bpt && max < SIZE_MAX / bpt && len > max * bpt)
        return kg_err(err, KG_ERANGE,
                      "encode: more than %zu tokens (%zu bytes, at most %zu a token)", max, len,
                      bpt);
    if (t->kind == TOK_BPE)
        return tok_bpe_encode(t->bpe, text, len, max, t->piece_bytes, ids, n, err);
    int rc = tok_spm_encode(t->spm, text, len, ids, n, err);
    if (!rc && *n > max) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        rc = kg_err(err, KG_ERANGE, "encode: more than %zu tokens", max);
    }
    return rc;
}

static int check_id(const Tokenizer *t, int id, char *err) {
    if (id < 0 || (size_t)id >= tok_vocab_size(t) || !tok_piece(t, id))
        return kg_err(err, KG_ERANGE, "token id %d is outside the vocabulary (0..%zu)", id,
                      tok_vocab_size(t) - 1);
    return KG_OK;
}

int tok_decode(const Tokenizer *t, const int *ids, size_t n, char **text, size_t *len, char *err) {
    *text = NULL;
    if (len) *len = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = check_id(t, ids[i], err);
        if (rc) return rc;
    }
    size_t dummy;
    if (t->kind == TOK_SPM) return tok_spm_decode(t->spm, ids, n, text, len ? len : &dummy, err);
    KgBuf out = {0};
    if (buf_reserve(&out, 0)) return kg_err(err, KG_ENOMEM, "decode: out of memory");
    out.p[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (tok_bpe_surface(t->bpe, ids[i], i == 0, &out)) {
            free(out.p);
            return kg_err(err, KG_ENOMEM, "decode: out of memory");
        }
    }
    *text = out.p;
    if (len) *len = out.len;
    return KG_OK;
}

// ---- incremental decoding ----

TokStream *tok_stream_new(const Tokenizer *t) {
    TokStream *s = calloc(1, sizeof(*s));
    if (s) s->t = t;
    return s;
}

void tok_stream_free(TokStream *s) {
    if (!s) return;
    free(s->pending.p);
    free(s->out.p);
    free(s);
}

// Appends SentencePiece piece id as DecodeIds renders it: control pieces vanish, <unk> reads
// " ⁇ ", a byte piece is its byte, others turn '▁' into ' ' and, with strip_space (nothing
// decoded yet: its is_bos_ws rule, checked against DecodeIds by the tests), lose a leading
// '▁'. 0, -1 on OOM.
static int spm_piece_surface(const Tokenizer *t, int id, int strip_space, KgBuf *b) {
    const char *p = tok_spm_piece(t->spm, id);
    int byte = tok_byte(t, id);
    switch (tok_spm_type(t->spm, id)) {
    case TOK_SPM_CONTROL:
        return 0;
    case TOK_SPM_UNKNOWN:
        return buf_append(b, SPM_UNK, strlen(SPM_UNK));
    case TOK_SPM_BYTE:
        if (byte < 0) return buf_append(b, p, strlen(p)); // not <0xAB>: its text
        return buf_append(b, &(uint8_t){(uint8_t)byte}, 1);
    default:
        break;
    }
    if (strip_space && !strncmp(p, SPM_SPACE, 3)) p += 3;
    for (const char *hit; (hit = strstr(p, SPM_SPACE)); p = hit + 3)
        if (buf_append(b, p, (size_t)(hit - p)) || buf_append(b, " ", 1)) return -1;
    return buf_append(b, p, strlen(p));
}

// SentencePiece's Decode, one piece at a time: a run of byte pieces cut short by another piece
// becomes U+FFFD per byte, then the piece's own surface.
static int spm_surface(TokStream *s, int id) {
    KgBuf *b = &s->pending;
    if (tok_spm_type(s->t->spm, id) != TOK_SPM_BYTE && b->len) {
        size_t n = b->len;
        b->len = 0;
        for (size_t i = 0; i < n; i++)
            if (buf_append(b, UTF8_FFFD, 3)) return -1;
    }
    return spm_piece_surface(s->t, id, s->emitted == 0 && b->len == 0, b);
}

int tok_token_bytes(const Tokenizer *t, int id, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    int rc = check_id(t, id, err);
    if (rc) return rc;
    KgBuf b = {0};
    int oom =
        t->kind == TOK_SPM ? spm_piece_surface(t, id, 0, &b) : tok_bpe_surface(t->bpe, id, 0, &b);
    if (oom || !(*out = buf_take(&b, len))) {
        buf_free(&b);
        return kg_err(err, KG_ENOMEM, "decode: out of memory");
    }
    return KG_OK;
}

// Moves the complete characters of pending into out. A malformed byte becomes U+FFFD (one
// per byte, as SentencePiece decodes byte pieces); a character cut short at the end stays
// pending, or with flush becomes U+FFFD too. out has room for 3 bytes per pending byte.
static void stream_emit(TokStream *s, int flush, const char **text, size_t *len) {
    KgBuf *p = &s->pending, *o = &s->out;
    const uint8_t *u = (const uint8_t *)p->p;
    size_t i = 0, k;
    o->len = 0;
    while (i < p->len) {
        int r = 1;
        k = 1;
        if (u[i] >= 0x80) r = utf8_char_at(u + i, p->len - i, &k);
        if (r == 0 && !flush) break;
        if (r == 1) {
            memcpy(o->p + o->len, u + i, k);
            o->len += k;
            i += k;
        } else {
            memcpy(o->p + o->len, UTF8_FFFD, 3);
            o->len += 3;
            i++;
        }
    }
    o->p[o->len] = '\0';
    if (i) memmove(p->p, p->p + i, p->len - i);
    p->len -= i;
    s->emitted += o->len;
    *text = o->p;
    *len = o->len;
}

int tok_stream_prime(TokStream *s, const int *ids, size_t n, size_t *from, char *err) {
    size_t f = n - 1; // a character has at most 4 bytes
    while (f > 0 && n - f < 4 && tok_byte(s->t, ids[f]) >= 0 && tok_byte(s->t, ids[f - 1]) >= 0)
        f--;
    *from = f;
    const char *text;
    size_t len;
    int rc = KG_OK;
    for (size_t i = f; i < n && !rc; i++)
        rc = tok_stream_push(s, ids[i], &text, &len, err);
    return rc;
}

int tok_stream_push(TokStream *s, int id, const char **text, size_t *len, char *err) {
    *text = "";
    *len = 0;
    int rc = check_id(s->t, id, err);
    if (rc) return rc;
    int oom = s->t->kind == TOK_SPM ? spm_surface(s, id)
                                    : tok_bpe_surface(s->t->bpe, id, s->count == 0, &s->pending);
    if (oom || buf_reserve(&s->out, 3 * s->pending.len))
        return kg_err(err, KG_ENOMEM, "decode: out of memory");
    s->count++;
    stream_emit(s, 0, text, len);
    return KG_OK;
}

int tok_stream_flush(TokStream *s, const char **text, size_t *len, char *err) {
    if (buf_reserve(&s->out, 3 * s->pending.len))
        return kg_err(err, KG_ENOMEM, "decode: out of memory");
    stream_emit(s, 1, text, len);
    return KG_OK;
}
