// tok_bpe.c — Hugging Face tokenizer.json BPE in C (KoGPT2 v2's tokenizer).
//
// Encoding follows the pipeline of HF tokenizers (Rust), stage by stage:
//   1. added tokens with normalized=false are split out of the raw text, leftmost-longest
//      (a byte trie); they become their ids directly;
//   2. every other section is normalized (NFC/NFD/NFKC/NFKD through utf8proc);
//   3. added tokens with normalized=true are split out of the normalized text;
//   4. Metaspace pre-tokenizer: ' ' -> '▁', a '▁' prepended to each section (prepend_scheme
//      "always", which old files spell add_prefix_space: true; "first": only to the section at
//      offset 0), then split before every '▁';
//   5. BPE per word: one symbol per character (unknown characters: byte fallback, <unk> or
//      dropped, as the file says), merges applied lowest rank first, leftmost on ties, with a
//      binary heap over the candidate pairs (O(n log n) per word, no rescans).
// Decoding maps ids to pieces and runs the Metaspace decoder ('▁' -> ' ', the first token's
// leading space dropped), as tokenizers' Tokenizer.decode does (no clean-up of spaces).
// Loading (and what is refused) is in tok_bpe_load.c; the struct in tok_bpe_impl.h.
#include <stdlib.h>
#include <utf8proc.h>

#include "base/kg.h"
#include "tok_bpe_impl.h"

// The leftmost match at or after s, longest there (*at: its offset, *mlen its length);
// 0 if the rest holds none.
static int trie_next(const Trie *t, const uint8_t *s, size_t n, size_t *at, size_t *mlen,
                     int32_t *id) {
    if (t->empty) return 0;
    for (size_t i = 0; i < n; i++) {
        if (t->root[s[i]] < 0) continue;
        size_t m = trie_longest(t, s + i, n - i, id);
        if (m) {
            *at = i;
            *mlen = m;
            return 1;
        }
    }
    return 0;
}

// ---- encoding ----

typedef struct {
    int32_t id;         // token id; -1 once merged into its left neighbour
    int32_t prev, next; // neighbours in the word, -1 at the ends
} Sym;

typedef struct {
    int32_t rank, pos, new_id; // merge sym[pos] with its right neighbour into new_id
} Cand;

// bpe_word's and push_id's results: 0, or why the encode stops.
enum { BPE_OOM = -1, BPE_OVER = -2 };

// Scratch for one tok_bpe_encode call (the TokBpe itself stays read-only).
typedef struct {
    int *ids; // (cap) output
    size_t n, cap;
    size_t max;         // more ids than this: stop (BPE_OVER)
    size_t piece_bytes; // word bytes one token covers at most (0: no bound)
    KgBuf word;         // a section after Metaspace
    Sym *sym;           // (sym_cap) symbols of the current word
    size_t sym_cap;
    Cand *heap; // (heap_cap) binary min-heap on (rank, pos)
    size_t heap_n, heap_cap;
} BpeRun;

static int push_id(BpeRun *r, int id) {
    if (r->n == r->max) return BPE_OVER; // the caller's limit: the array never grows past it
    if (KG_GROW(r->ids, &r->cap, r->n + 1, NULL)) return BPE_OOM;
    r->ids[r->n++] = id;
    return 0;
}

static int cand_less(Cand a, Cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static int heap_push(BpeRun *r, Cand c) {
    if (KG_GROW(r->heap, &r->heap_cap, r->heap_n + 1, NULL)) return -1;
    size_t i = r->heap_n++;
    while (i > 0 && cand_less(c, r->heap[(i - 1) / 2])) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = c;
    return 0;
}

static Cand heap_pop(BpeRun *r) {
    Cand top = r->heap[0], last = r->heap[--r->heap_n];
    size_t i = 0, n = r->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(r->heap[c + 1], r->heap[c])) c++;
        if (!cand_less(r->heap[c], last)) break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n) r->heap[i] = last;
    return top;
}

// Queues the merge of sym[pos] with its right neighbour, if the merges have one.
static int queue_pair(const TokBpe *b, BpeRun *r, int32_t pos) {
    if (pos < 0 || r->sym[pos].next < 0) return 0;
    int32_t next = r->sym[pos].next;
    const MergeSlot *m = merge_find(b, r->sym[pos].id, r->sym[next].id);
    return m ? heap_push(r, (Cand){m->rank, pos, m->new_id}) : 0;
}

// Decodes one code point of valid UTF-8 (checked on entry to tok_encode); returns its length.
static size_t utf8_next(const uint8_t *s, int32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) return *cp = c, 1;
    if (c < 0xE0) return *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F), 2;
    if (c < 0xF0) return *cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F), 3;
    *cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

// Splits a word into one symbol per character: its vocab id, else its <0xAB> byte pieces
// (byte_fallback), else <unk> (consecutive ones fused with fuse_unk), else nothing.
static size_t word_symbols(const TokBpe *b, Sym *sym, const uint8_t *w, size_t n) {
    size_t k = 0;
    int prev_unk = 0;
    for (size_t i = 0, cl; i < n; i += cl) {
        int32_t cp, id;
        cl = utf8_next(w + i, &cp);
        id = cp < BPE_BMP ? b->char_id[cp] : vmap_find(b, (const char *)w + i, cl);
        if (id >= 0) {
            sym[k++].id = id;
            prev_unk = 0;
            continue;
        }
        if (b->byte_fallback) {
            size_t j = 0;
            while (j < cl && b->byte_id[w[i + j]] >= 0)
                j++;
            if (j == cl) {
                for (j = 0; j < cl; j++)
                    sym[k++].id = b->byte_id[w[i + j]];
                prev_unk = 0;
                continue;
            }
        }
        if (b->unk_id < 0) continue; // no unk token: the character is dropped
        if (!(b->fuse_unk && prev_unk)) sym[k++].id = b->unk_id;
        prev_unk = 1;
    }
    return k;
}

// BPE on one pre-token: lowest-rank merge first, leftmost on ties, until none applies.
// 0, BPE_OOM, or BPE_OVER when the ids would pass r->max (a word of n bytes becomes at least
// n / piece_bytes tokens: one too long for what is left is refused before its merges run).
static int bpe_word(const TokBpe *b, BpeRun *r, const uint8_t *w, size_t n) {
    if (r->piece_bytes && n && (n - 1) / r->piece_bytes + 1 > r->max - r->n) return BPE_OVER;
    if (b->ignore_merges) {
        int id = vmap_find(b, (const char *)w, n);
        if (id >= 0) return push_id(r, id);
    }
    if (n > r->sym_cap) { // at most one symbol per byte
        Sym *p = realloc(r->sym, n * sizeof(Sym));
        if (!p) return BPE_OOM;
        r->sym = p;
        r->sym_cap = n;
    }
    Sym *sym = r->sym;
    int32_t k = (int32_t)word_symbols(b, sym, w, n);
    for (int32_t i = 0; i < k; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < k ? i + 1 : -1;
    }
    r->heap_n = 0;
    for (int32_t i = 0; i + 1 < k; i++)
        if (queue_pair(b, r, i)) return BPE_OOM;
    while (r->heap_n) {
        Cand c = heap_pop(r);
        Sym *s = &sym[c.pos];
        if (s->id < 0 || s->next < 0) continue; // merged away, or now last
        const MergeSlot *m = merge_find(b, s->id, sym[s->next].id);
        if (!m || m->new_id != c.new_id) continue; // stale: a neighbour changed since
        Sym *t = &sym[s->next];
        s->id = c.new_id;
        s->next = t->next;
        if (t->next >= 0) sym[t->next].prev = c.pos;
        t->id = -1;
        if (queue_pair(b, r, s->prev) || queue_pair(b, r, c.pos)) return BPE_OOM;
    }
    int rc = 0;
    for (int32_t i = k ? 0 : -1; !rc && i >= 0; i = sym[i].next)
        rc = push_id(r, sym[i].id);
    return rc;
}

// Metaspace, then BPE per word. first: the section starts at offset 0 of the input.
// 0, BPE_OOM or BPE_OVER.
static int encode_words(const TokBpe *b, BpeRun *r, const uint8_t *s, size_t n, int first) {
    if (!b->pre_metaspace) return bpe_word(b, r, s, n);
    KgBuf *w = &r->word;
    w->len = 0;
    if (buf_reserve(w, n * b->rep_len + b->rep_len)) return BPE_OOM;
    int has_rep = s[0] == ' ' || (n >= b->rep_len && !memcmp(s, b->rep, b->rep_len));
    if (!has_rep &&
        (b->pre_prepend == PREPEND_ALWAYS || (b->pre_prepend == PREPEND_FIRST && first))) {
        memcpy(w->p, b->rep, b->rep_len);
        w->len = b->rep_len;
    }
    for (size_t i = 0; i < n; i++) { // written in place: the room was reserved above
        if (s[i] == ' ') {
            memcpy(w->p + w->len, b->rep, b->rep_len);
            w->len += b->rep_len;
        } else {
            w->p[w->len++] = (char)s[i];
        }
    }
    const uint8_t *p = (const uint8_t *)w->p;
    if (!b->pre_split) return bpe_word(b, r, p, w->len);
    size_t start = 0; // each word runs from one replacement character to the next
    for (size_t i = 1; i + b->rep_len <= w->len; i++) {
        const uint8_t *hit = memchr(p + i, (uint8_t)b->rep[0], w->len - i);
        if (!hit) break;
        i = (size_t)(hit - p);
        if (i + b->rep_len > w->len) break;
        if (memcmp(hit, b->rep, b->rep_len)) continue;
        int rc = bpe_word(b, r, p + start, i - start);
        if (rc) return rc;
        start = i;
    }
    return bpe_word(b, r, p + start, w->len - start);
}

// True if NFC and NFKC leave s as it is: every character is in the nf_stable bitmap.
static int nfc_fast_path(const TokBpe *b, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int32_t cp = s[i];
        i += cp < 0x80 ? 1 : utf8_next(s + i, &cp);
        if (cp >= BPE_BMP || !(b->nf_stable[cp >> 3] & (1u << (cp & 7)))) return 0;
    }
    return 1;
}

// The error of a BPE_* code.
static int bpe_error(int rc, const BpeRun *r, char *err) {
    if (rc == BPE_OVER) return kg_err(err, KG_ERANGE, "encode: more than %zu tokens", r->max);
    return kg_err(err, KG_ENOMEM, "encode: out of memory");
}

// Normalizes a section between raw added tokens, splits out normalized added tokens, encodes.
static int encode_section(const TokBpe *b, BpeRun *r, const uint8_t *s, size_t n, int first,
                          char *err) {
    const uint8_t *t = s;
    size_t tn = n;
    uint8_t *owned = NULL;
    if (b->n_norms && !(b->norm_composes && nfc_fast_path(b, s, n))) {
        for (int i = 0; i < b->n_norms; i++) {
            uint8_t *out = NULL;
            utf8proc_ssize_t m =
                utf8proc_map(t, (utf8proc_ssize_t)tn, &out, (utf8proc_option_t)b->norms[i]);
            free(owned);
            if (m < 0)
                return kg_err(err, m == UTF8PROC_ERROR_NOMEM ? KG_ENOMEM : KG_EINTERNAL,
                              "normalize: %s", utf8proc_errmsg(m));
            owned = out, t = out, tn = (size_t)m;
        }
    }
    // the normalized text has no more bytes than its tokens' pieces: one that the tokens left
    // to the limit cannot cover is refused before Metaspace and BPE run over it
    size_t left = r->max - r->n;
    int rc = r->piece_bytes && left < SIZE_MAX / r->piece_bytes && tn > left * r->piece_bytes
                 ? BPE_OVER
                 : 0;
    size_t pos = 0, at, mlen;
    int32_t id;
    while (!rc && pos < tn) {
        int found = trie_next(&b->norm_trie, t + pos, tn - pos, &at, &mlen, &id);
        size_t len = found ? at : tn - pos;
        if (len) rc = encode_words(b, r, t + pos, len, first && pos == 0);
        if (!found) break;
        if (!rc) rc = push_id(r, id);
        pos += at + mlen;
    }
    free(owned);
    return rc ? bpe_error(rc, r, err) : KG_OK;
}

int tok_bpe_encode(const TokBpe *b, const char *text, size_t len, size_t max, size_t piece_bytes,
                   int **ids, size_t *n, char *err) {
    *ids = NULL;
    *n = 0;
    BpeRun r = {.max = max, .piece_bytes = piece_bytes};
    const uint8_t *s = (const uint8_t *)text;
    int rc = KG_OK;
    size_t pos = 0, at, mlen;
    int32_t id;
    while (pos < len) {
        int found = trie_next(&b->raw_trie, s + pos, len - pos, &at, &mlen, &id);
        size_t seg = found ? at : len - pos;
        if (seg && (rc = encode_section(b, &r, s + pos, seg, pos == 0, err))) break;
        if (!found) break;
        int pushed = push_id(&r, id);
        if (pushed) {
            rc = bpe_error(pushed, &r, err);
            break;
        }
        pos += at + mlen;
    }
    free(r.word.p);
    free(r.sym);
    free(r.heap);
    if (rc) {
        free(r.ids);
        return rc;
    }
    *ids = r.ids;
    *n = r.n;
    return KG_OK;
}

void tok_bpe_bounds(const TokBpe *b, size_t *piece_bytes, size_t *text_bytes) {
    *piece_bytes = *text_bytes = 0;
    int all_bytes = b->byte_fallback; // every byte of valid UTF-8 has its <0xAB> piece
    for (int c = 0; all_bytes && c < 0xF5; c++)
        all_bytes = (c >= 0xC0 && c < 0xC2) || b->byte_id[c] >= 0;
    if (!all_bytes && (b->unk_id < 0 || b->fuse_unk)) return; // 0 tokens, or 1, for any run
    size_t longest = 4; // an <unk> (or its bytes) covers one character of at most 4 bytes
    for (size_t id = 0; id < b->V; id++) {
        size_t k = b->piece[id] ? strlen(b->piece[id]) : 0;
        if (k > longest) longest = k;
    }
    *piece_bytes = longest;
    *text_bytes = b->n_norms ? 4 * longest : longest;
}

// ---- decoding and lookups ----

int tok_bpe_surface(const TokBpe *b, int id, int first, KgBuf *out) {
    const char *p = b->piece[id] ? b->piece[id] : "";
    if (!b->dec_metaspace) { // no decoder: tokens joined by spaces, as tokenizers does
        if (!first && buf_append(out, " ", 1)) return -1;
        return buf_append(out, p, strlen(p));
    }
    size_t start = out->len;
    for (const char *hit; (hit = strstr(p, b->dec_rep)); p = hit + b->dec_rep_len)
        if (buf_append(out, p, (size_t)(hit - p)) || buf_append(out, " ", 1)) return -1;
    if (buf_append(out, p, strlen(p))) return -1;
    if (first && b->dec_strip_first && out->len > start && out->p[start] == ' ') {
        memmove(out->p + start, out->p + start + 1, out->len - start); // moves the NUL too
        out->len--;
    }
    return 0;
}

size_t tok_bpe_size(const TokBpe *b) { return b->V; }

const char *tok_bpe_piece(const TokBpe *b, int id) {
    return id >= 0 && (size_t)id < b->V ? b->piece[id] : NULL;
}

int tok_bpe_piece_id(const TokBpe *b, const char *piece) {
    size_t n = strlen(piece);
    int32_t id = -1;
    if (!n) return -1;
    if (trie_longest(&b->raw_trie, (const uint8_t *)piece, n, &id) == n) return id;
    if (trie_longest(&b->norm_trie, (const uint8_t *)piece, n, &id) == n) return id;
    return vmap_find(b, piece, n);
}

TokSpecial tok_bpe_special(const TokBpe *b) { return b->special; }

const char *tok_bpe_notes(const TokBpe *b) { return b->notes; }
