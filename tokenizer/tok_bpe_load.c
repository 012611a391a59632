// tok_bpe_load.c — reads a Hugging Face tokenizer.json into a TokBpe (see tok_bpe.c for the
// pipeline). It validates as it goes: a malformed file is KG_EFORMAT, an option this C port
// does not implement is KG_EUNSUP, never a silent difference from the reference.
//
// Added tokens whose id lies outside model.vocab (KoGPT2 v2's spurious `<|endoftext|>` = 51200)
// are not loaded: they could only produce ids the model has no row for. tok_bpe_notes() says so.
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

#include "base/kg.h"
#include "base/kg_json.h"
#include "tok_bpe_impl.h"

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static void vmap_insert(TokBpe *b, int32_t id) {
    size_t i = hash_bytes(b->vocab[id], b->vocab_len[id]) & b->vmap.mask;
    while (b->vmap.slot[i] >= 0)
        i = (i + 1) & b->vmap.mask;
    b->vmap.slot[i] = id;
}

// A later duplicate overrides an earlier one, as in tokenizers (its map keeps the last).
static void merge_insert(TokBpe *b, int32_t left, int32_t right, int32_t rank, int32_t new_id) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = hash_u64(key) & b->merge_mask;
    while (b->merges[i].rank >= 0 && b->merges[i].key != key)
        i = (i + 1) & b->merge_mask;
    b->merges[i] = (MergeSlot){key, rank, new_id};
}

static void trie_init(Trie *t) {
    memset(t, 0, sizeof(*t));
    memset(t->root, -1, sizeof(t->root));
    t->empty = 1;
}

static int32_t trie_node_new(Trie *t, uint8_t byte) {
    if (KG_GROW(t->nodes, &t->cap, t->n + 1, NULL)) return -1;
    t->nodes[t->n] = (TrieNode){-1, -1, -1, byte};
    return (int32_t)t->n++;
}

// 0 ok, -1 on OOM. A duplicate content keeps the first id, as tokenizers does.
static int trie_insert(Trie *t, const char *s, size_t n, int32_t id) {
    const uint8_t *u = (const uint8_t *)s;
    int32_t node = t->root[u[0]];
    if (node < 0) {
        if ((node = trie_node_new(t, u[0])) < 0) return -1;
        t->root[u[0]] = node;
    }
    for (size_t i = 1; i < n; i++) {
        int32_t c = t->nodes[node].child, last = -1;
        while (c >= 0 && t->nodes[c].byte != u[i])
            last = c, c = t->nodes[c].sibling;
        if (c < 0) {
            if ((c = trie_node_new(t, u[i])) < 0) return -1;
            if (last < 0)
                t->nodes[node].child = c;
            else
                t->nodes[last].sibling = c;
        }
        node = c;
    }
    if (t->nodes[node].id < 0) t->nodes[node].id = id;
    t->empty = 0;
    return 0;
}

static const cJSON *j_get(const cJSON *j_obj, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(j_obj, name);
}

// Reads an optional boolean member (absent or null: def). -1 if it has another type.
static int j_bool(const cJSON *j_obj, const char *name, int def) {
    const cJSON *j = j_get(j_obj, name);
    if (!j || cJSON_IsNull(j)) return def;
    if (!cJSON_IsBool(j)) return -1;
    return cJSON_IsTrue(j);
}

static int j_is_type(const cJSON *j_obj, const char *type) {
    const cJSON *j_t = j_get(j_obj, "type");
    return cJSON_IsString(j_t) && !strcmp(j_t->valuestring, type);
}

static const char *j_type(const cJSON *j_obj) {
    const cJSON *j_t = j_get(j_obj, "type");
    return cJSON_IsString(j_t) ? j_t->valuestring : "(no type)";
}

// Appends the normalizers of j_norm (possibly a Sequence) to b->norms.
static int load_normalizer(TokBpe *b, const cJSON *j_norm, char *err) {
    if (!j_norm || cJSON_IsNull(j_norm)) return KG_OK;
    if (j_is_type(j_norm, "Sequence")) {
        const cJSON *j_list = j_get(j_norm, "normalizers"), *j_n;
        if (!cJSON_IsArray(j_list)) return kg_err(err, KG_EFORMAT, "normalizer: bad Sequence");
        cJSON_ArrayForEach(j_n, j_list) {
            int rc = load_normalizer(b, j_n, err);
            if (rc) return rc;
        }
        return KG_OK;
    }
    static const struct {
        const char *type;
        int flags;
    } FORMS[] = {
        {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
        {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
        {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
        {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    };
    for (size_t i = 0; i < sizeof(FORMS) / sizeof(FORMS[0]); i++) {
        if (!j_is_type(j_norm, FORMS[i].type)) continue;
        if (b->n_norms == BPE_MAX_NORMS)
            return kg_err(err, KG_EUNSUP, "normalizer: more than %d steps", BPE_MAX_NORMS);
        b->norms[b->n_norms++] = FORMS[i].flags;
        if (FORMS[i].flags & UTF8PROC_DECOMPOSE) b->norm_composes = 0;
        return KG_OK;
    }
    if (j_is_type(j_norm, "BertNormalizer")) {
        // With every option off (KoGPT2 v2) it changes nothing; strip_accents null follows
        // lowercase.
        int lower = j_bool(j_norm, "lowercase", 1);
        if (j_bool(j_norm, "clean_text", 1) != 0 ||
            j_bool(j_norm, "handle_chinese_chars", 1) != 0 || lower != 0 ||
            j_bool(j_norm, "strip_accents", lower) != 0)
            return kg_err(err, KG_EUNSUP, "normalizer: BertNormalizer with options on");
        return KG_OK;
    }
    return kg_err(err, KG_EUNSUP, "normalizer: %s is not supported", j_type(j_norm));
}

// Reads Metaspace's replacement (one character) into rep; the prepend scheme into *prepend.
static int load_metaspace(const cJSON *j_ms, char rep[8], size_t *rep_len, BpePrepend *prepend,
                          const char *what, char *err) {
    const cJSON *j_rep = j_get(j_ms, "replacement");
    const char *r = cJSON_IsString(j_rep) ? j_rep->valuestring : "\xE2\x96\x81";
    utf8proc_int32_t cp;
    size_t n = strlen(r);
    if (n == 0 || n > 4 || utf8proc_iterate((const uint8_t *)r, (utf8proc_ssize_t)n, &cp) != (int)n)
        return kg_err(err, KG_EUNSUP, "%s: Metaspace replacement must be one character", what);
    memcpy(rep, r, n + 1);
    *rep_len = n;
    const cJSON *j_scheme = j_get(j_ms, "prepend_scheme");
    if (cJSON_IsString(j_scheme)) { // newer files
        const char *s = j_scheme->valuestring;
        if (!strcmp(s, "always"))
            *prepend = PREPEND_ALWAYS;
        else if (!strcmp(s, "first"))
            *prepend = PREPEND_FIRST;
        else if (!strcmp(s, "never"))
            *prepend = PREPEND_NEVER;
        else
            return kg_err(err, KG_EFORMAT, "%s: unknown prepend_scheme '%s'", what, s);
    } else { // old files: add_prefix_space true means "always"
        int add = j_bool(j_ms, "add_prefix_space", 1);
        if (add < 0) return kg_err(err, KG_EFORMAT, "%s: add_prefix_space is not a bool", what);
        *prepend = add ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
    return KG_OK;
}

static int load_pre_tokenizer(TokBpe *b, const cJSON *j_pre, char *err) {
    if (!j_pre || cJSON_IsNull(j_pre)) return KG_OK;
    if (j_is_type(j_pre, "Sequence")) {
        const cJSON *j_list = j_get(j_pre, "pretokenizers");
        if (!cJSON_IsArray(j_list) || cJSON_GetArraySize(j_list) > 1)
            return kg_err(err, KG_EUNSUP, "pre_tokenizer: only a Sequence of one is supported");
        return cJSON_GetArraySize(j_list) ? load_pre_tokenizer(b, j_list->child, err) : KG_OK;
    }
    if (!j_is_type(j_pre, "Metaspace"))
        return kg_err(err, KG_EUNSUP, "pre_tokenizer: %s is not supported", j_type(j_pre));
    b->pre_metaspace = 1;
    b->pre_split = j_bool(j_pre, "split", 1);
    if (b->pre_split < 0) return kg_err(err, KG_EFORMAT, "pre_tokenizer: split is not a bool");
    return load_metaspace(j_pre, b->rep, &b->rep_len, &b->pre_prepend, "pre_tokenizer", err);
}

static int load_decoder(TokBpe *b, const cJSON *j_dec, char *err) {
    if (!j_dec || cJSON_IsNull(j_dec)) return KG_OK; // tokens joined by spaces
    if (!j_is_type(j_dec, "Metaspace"))
        return kg_err(err, KG_EUNSUP, "decoder: %s is not supported", j_type(j_dec));
    BpePrepend prepend;
    int rc = load_metaspace(j_dec, b->dec_rep, &b->dec_rep_len, &prepend, "decoder", err);
    b->dec_metaspace = 1;
    b->dec_strip_first = prepend != PREPEND_NEVER;
    return rc;
}

// Copies model.vocab into the arena and builds the piece -> id map.
static int load_vocab(TokBpe *b, const cJSON *j_vocab, char *err) {
    if (!cJSON_IsObject(j_vocab)) return kg_err(err, KG_EFORMAT, "model.vocab: not an object");
    size_t count = 0, bytes = 0;
    int max_id = -1;
    const cJSON *j_v;
    cJSON_ArrayForEach(j_v, j_vocab) {
        double d = cJSON_IsNumber(j_v) ? j_v->valuedouble : -1;
        if (!(d >= 0 && d < BPE_MAX_ID && d == (int)d))
            return kg_err(err, KG_EFORMAT, "model.vocab: bad id for '%.40s'", j_v->string);
        if ((int)d > max_id) max_id = (int)d;
        bytes += strlen(j_v->string) + 1;
        count++;
    }
    if (!count) return kg_err(err, KG_EFORMAT, "model.vocab: empty");
    b->V = (size_t)max_id + 1;
    b->vocab = calloc(b->V, sizeof(*b->vocab));
    b->piece = calloc(b->V, sizeof(*b->piece));
    b->vocab_len = calloc(b->V, sizeof(*b->vocab_len));
    b->piece_owned = calloc(b->V, 1);
    b->arena = malloc(bytes);
    b->vmap.mask = pow2_at_least(2 * count) - 1;
    b->vmap.slot = malloc((b->vmap.mask + 1) * sizeof(int32_t));
    if (!b->vocab || !b->piece || !b->vocab_len || !b->piece_owned || !b->arena || !b->vmap.slot)
        return kg_err(err, KG_ENOMEM, "model.vocab: out of memory");
    memset(b->vmap.slot, -1, (b->vmap.mask + 1) * sizeof(int32_t));
    char *p = b->arena;
    cJSON_ArrayForEach(j_v, j_vocab) {
        int id = (int)j_v->valuedouble;
        size_t n = strlen(j_v->string);
        if (b->vocab[id])
            return kg_err(err, KG_EFORMAT, "model.vocab: id %d appears twice ('%.40s', '%.40s')",
                          id, b->vocab[id], j_v->string);
        if (vmap_find(b, j_v->string, n) >= 0)
            return kg_err(err, KG_EFORMAT, "model.vocab: '%.40s' appears twice", j_v->string);
        memcpy(p, j_v->string, n + 1);
        b->vocab[id] = b->piece[id] = p;
        b->vocab_len[id] = (uint32_t)n;
        vmap_insert(b, id);
        p += n + 1;
    }
    return KG_OK;
}

// One-character pieces by code point (BMP) for the per-character lookups of encoding.
static int build_char_table(TokBpe *b, char *err) {
    b->char_id = malloc(BPE_BMP * sizeof(int32_t));
    if (!b->char_id) return kg_err(err, KG_ENOMEM, "tokenizer.json: out of memory");
    memset(b->char_id, -1, BPE_BMP * sizeof(int32_t));
    for (size_t id = 0; id < b->V; id++) {
        utf8proc_int32_t cp;
        if (!b->vocab[id] || b->vocab_len[id] == 0 || b->vocab_len[id] > 3) continue;
        utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)b->vocab[id], b->vocab_len[id], &cp);
        if (k == (utf8proc_ssize_t)b->vocab_len[id] && cp < BPE_BMP) b->char_id[cp] = (int32_t)id;
    }
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", i);
        b->byte_id[i] = vmap_find(b, name, 6);
    }
    return KG_OK;
}

// Marks the BMP characters that NFC and NFKC leave alone whatever surrounds them: no
// decomposition of any kind, combining class 0, never the second half of a composition (found
// by decomposing every code point), no conjoining Hangul jamo (composed by rule, not by table).
// Precomposed Hangul syllables are stable too: only a following T jamo joins them. Text made
// of such characters skips utf8proc; the parity tests hold this against the references.
static int build_nf_stable(TokBpe *b, char *err) {
    uint8_t *second = calloc(BPE_BMP / 8, 1);
    b->nf_stable = calloc(BPE_BMP / 8, 1);
    if (!second || !b->nf_stable) {
        free(second);
        return kg_err(err, KG_ENOMEM, "tokenizer.json: out of memory");
    }
    for (utf8proc_int32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (utf8proc_get_property(cp)->decomp_seqindex == UINT16_MAX) continue;
        utf8proc_int32_t d[4];
        int last;
        utf8proc_ssize_t k = utf8proc_decompose_char(cp, d, 4, UTF8PROC_DECOMPOSE, &last);
        if (k == 2 && d[1] < BPE_BMP) second[d[1] >> 3] |= (uint8_t)(1u << (d[1] & 7));
    }
    for (utf8proc_int32_t cp = 0; cp < BPE_BMP; cp++) {
        const utf8proc_property_t *p = utf8proc_get_property(cp);
        int jamo = (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
                   (cp >= 0xD7B0 && cp <= 0xD7FF);
        int syllable = cp >= 0xAC00 && cp <= 0xD7A3;
        int stable = p->decomp_seqindex == UINT16_MAX && p->combining_class == 0 &&
                     !(second[cp >> 3] & (1u << (cp & 7))) && !jamo &&
                     p->category != UTF8PROC_CATEGORY_CS;
        if (stable || syllable) b->nf_stable[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    free(second);
    return KG_OK;
}

// Splits one merge, "left right" (old files) or ["left", "right"], into its two ids.
static int merge_parse(const TokBpe *b, const cJSON *j_m, size_t rank, int32_t *left,
                       int32_t *right, int32_t *new_id, KgBuf *tmp, char *err) {
    const char *l, *r;
    size_t ln, rn;
    if (cJSON_IsString(j_m)) {
        const char *sp = strchr(j_m->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return kg_err(err, KG_EFORMAT, "model.merges[%zu]: '%.40s' is not 'left right'", rank,
                          j_m->valuestring);
        l = j_m->valuestring, ln = (size_t)(sp - l), r = sp + 1, rn = strlen(r);
    } else if (cJSON_IsArray(j_m) && cJSON_GetArraySize(j_m) == 2 && cJSON_IsString(j_m->child) &&
               cJSON_IsString(j_m->child->next)) {
        l = j_m->child->valuestring, ln = strlen(l);
        r = j_m->child->next->valuestring, rn = strlen(r);
    } else {
        return kg_err(err, KG_EFORMAT, "model.merges[%zu]: not a merge", rank);
    }
    *left = vmap_find(b, l, ln);
    *right = vmap_find(b, r, rn);
    tmp->len = 0;
    if (buf_append(tmp, l, ln) || buf_append(tmp, r, rn))
        return kg_err(err, KG_ENOMEM, "model.merges: out of memory");
    *new_id = vmap_find(b, tmp->p, tmp->len);
    if (*left < 0 || *right < 0 || *new_id < 0)
        return kg_err(err, KG_EFORMAT, "model.merges[%zu]: '%.*s' + '%.*s' not in the vocab", rank,
                      (int)(ln < 30 ? ln : 30), l, (int)(rn < 30 ? rn : 30), r);
    return KG_OK;
}

static int load_merges(TokBpe *b, const cJSON *j_merges, char *err) {
    if (!cJSON_IsArray(j_merges)) return kg_err(err, KG_EFORMAT, "model.merges: not an array");
    size_t n = (size_t)cJSON_GetArraySize(j_merges);
    b->merge_mask = pow2_at_least(2 * n + 1) - 1;
    b->merges = malloc((b->merge_mask + 1) * sizeof(MergeSlot));
    if (!b->merges) return kg_err(err, KG_ENOMEM, "model.merges: out of memory");
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i].rank = -1;
    KgBuf tmp = {0};
    size_t rank = 0;
    const cJSON *j_m;
    int rc = KG_OK;
    cJSON_ArrayForEach(j_m, j_merges) {
        int32_t l = -1, r = -1, id = -1;
        if ((rc = merge_parse(b, j_m, rank, &l, &r, &id, &tmp, err))) break;
        merge_insert(b, l, r, (int32_t)rank++, id);
    }
    free(tmp.p);
    b->n_merges = rank;
    return rc;
}

static int load_model(TokBpe *b, const cJSON *j_model, char *err) {
    if (!cJSON_IsObject(j_model)) return kg_err(err, KG_EFORMAT, "model: missing");
    if (j_get(j_model, "type") && !j_is_type(j_model, "BPE"))
        return kg_err(err, KG_EUNSUP, "model: %s is not supported (BPE only)", j_type(j_model));
    int rc = load_vocab(b, j_get(j_model, "vocab"), err);
    if (!rc) rc = build_char_table(b, err);
    if (!rc) rc = load_merges(b, j_get(j_model, "merges"), err);
    if (rc) return rc;
    const cJSON *j_unk = j_get(j_model, "unk_token"), *j_drop = j_get(j_model, "dropout");
    b->unk_id = -1;
    if (cJSON_IsString(j_unk)) {
        b->unk_id = vmap_find(b, j_unk->valuestring, strlen(j_unk->valuestring));
        if (b->unk_id < 0)
            return kg_err(err, KG_EFORMAT, "model.unk_token '%.40s' is not in the vocab",
                          j_unk->valuestring);
    }
    if (j_drop && !cJSON_IsNull(j_drop) && !(cJSON_IsNumber(j_drop) && j_drop->valuedouble == 0))
        return kg_err(err, KG_EUNSUP, "model.dropout: BPE dropout is not supported");
    static const char *AFFIXES[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j_a = j_get(j_model, AFFIXES[i]);
        if (j_a && !cJSON_IsNull(j_a) && !(cJSON_IsString(j_a) && !j_a->valuestring[0]))
            return kg_err(err, KG_EUNSUP, "model.%s is not supported", AFFIXES[i]);
    }
    b->fuse_unk = j_bool(j_model, "fuse_unk", 0);
    b->byte_fallback = j_bool(j_model, "byte_fallback", 0);
    b->ignore_merges = j_bool(j_model, "ignore_merges", 0);
    if (b->fuse_unk < 0 || b->byte_fallback < 0 || b->ignore_merges < 0)
        return kg_err(err, KG_EFORMAT, "model: fuse_unk/byte_fallback/ignore_merges not bools");
    return KG_OK;
}

// Loads the added tokens into the tries; an id it renames decodes as the added content.
static int load_added_tokens(TokBpe *b, const cJSON *j_added, char *err) {
    if (!j_added || cJSON_IsNull(j_added)) return KG_OK;
    if (!cJSON_IsArray(j_added)) return kg_err(err, KG_EFORMAT, "added_tokens: not an array");
    size_t ignored = 0;
    const cJSON *j_t;
    cJSON_ArrayForEach(j_t, j_added) {
        const cJSON *j_id = j_get(j_t, "id"), *j_c = j_get(j_t, "content");
        double d = cJSON_IsNumber(j_id) ? j_id->valuedouble : -1;
        if (!(d >= 0 && d < BPE_MAX_ID && d == (int)d) || !cJSON_IsString(j_c) ||
            !j_c->valuestring[0])
            return kg_err(err, KG_EFORMAT, "added_tokens: entry without id or content");
        int id = (int)d;
        const char *c = j_c->valuestring;
        if ((size_t)id >= b->V) { // KoGPT2 v2: <|endoftext|> = 51200
            if (!ignored++)
                snprintf(b->notes, sizeof(b->notes),
                         "added token '%.40s' has id %d, past the %zu ids of the tokenizer's "
                         "vocab: ignored",
                         c, id, b->V);
            continue;
        }
        if (j_bool(j_t, "lstrip", 0) == 1 || j_bool(j_t, "rstrip", 0) == 1 ||
            j_bool(j_t, "single_word", 0) == 1)
            return kg_err(err, KG_EUNSUP, "added_tokens: '%.40s': lstrip/rstrip/single_word", c);
        int special = j_bool(j_t, "special", 0) == 1;
        int normalized = j_bool(j_t, "normalized", !special) == 1;
        if (trie_insert(normalized ? &b->norm_trie : &b->raw_trie, c, strlen(c), id))
            return kg_err(err, KG_ENOMEM, "added_tokens: out of memory");
        if (!b->vocab[id] || strcmp(b->vocab[id], c)) { // it renames id: decode shows content
            char *copy = strdup(c);
            if (!copy) return kg_err(err, KG_ENOMEM, "added_tokens: out of memory");
            if (b->piece_owned[id]) free((void *)b->piece[id]);
            b->piece[id] = copy;
            b->piece_owned[id] = 1;
        }
    }
    if (ignored > 1) {
        size_t n = strlen(b->notes);
        snprintf(b->notes + n, sizeof(b->notes) - n, " (and %zu more)", ignored - 1);
    }
    return KG_OK;
}

static int load_json(TokBpe *b, const cJSON *j_root, char *err) {
    if (!cJSON_IsObject(j_root)) return kg_err(err, KG_EFORMAT, "not a JSON object");
    int rc = load_model(b, j_get(j_root, "model"), err);
    if (!rc) rc = load_added_tokens(b, j_get(j_root, "added_tokens"), err);
    if (!rc) rc = load_normalizer(b, j_get(j_root, "normalizer"), err);
    if (!rc && b->n_norms && b->norm_composes) rc = build_nf_stable(b, err);
    if (!rc) rc = load_pre_tokenizer(b, j_get(j_root, "pre_tokenizer"), err);
    if (!rc) rc = load_decoder(b, j_get(j_root, "decoder"), err);
    if (rc) return rc;
    // bos/eos/pad by their conventional pieces; config.json (bos 0, eos 1, pad 3) agrees.
    b->special.unk = b->unk_id;
    b->special.bos = tok_bpe_piece_id(b, "<s>");
    b->special.eos = tok_bpe_piece_id(b, "</s>");
    b->special.pad = tok_bpe_piece_id(b, "<pad>");
    return KG_OK;
}

int tok_bpe_open(TokBpe **out, const char *path, char *err) {
    *out = NULL;
    char *data = NULL, msg[KG_ERRLEN];
    size_t len = 0;
    int rc = kg_read_file(path, BPE_MAX_FILE, &data, &len, err);
    if (rc) return rc;
    TokBpe *b = calloc(1, sizeof(*b));
    if (!b) {
        free(data);
        return kg_err(err, KG_ENOMEM, "%s: out of memory", path);
    }
    trie_init(&b->raw_trie);
    trie_init(&b->norm_trie);
    b->norm_composes = 1;
    const char *end = NULL;
    cJSON *j_root = NULL;
    // a piece or a type holding a NUL would be read as its prefix
    rc = kg_json_check_nul(data, len, path, err);
    if (!rc && !(j_root = cJSON_ParseWithLengthOpts(data, len, &end, 0))) {
        rc = kg_err(err, KG_EFORMAT, "%s: invalid JSON near byte %zu", path,
                    end ? (size_t)(end - data) : len);
    } else if (!rc && (rc = load_json(b, j_root, msg))) {
        kg_err(err, rc, "%s: %s", path, msg);
    }
    cJSON_Delete(j_root);
    free(data);
    if (rc) {
        tok_bpe_free(b);
        return rc;
    }
    *out = b;
    return KG_OK;
}

void tok_bpe_free(TokBpe *b) {
    if (!b) return;
    for (size_t id = 0; b->piece_owned && id < b->V; id++)
        if (b->piece_owned[id]) free((void *)b->piece[id]);
    free(b->piece_owned);
    free(b->vocab);
    free((void *)b->piece);
    free(b->vocab_len);
    free(b->arena);
    free(b->vmap.slot);
    free(b->char_id);
    free(b->nf_stable);
    free(b->merges);
    free(b->raw_trie.nodes);
    free(b->norm_trie.nodes);
    free(b);
}
