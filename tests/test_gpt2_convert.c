// test_gpt2_convert.c — quantized model directories (issue 16): `gpt2_convert --dtype
// q8_0|q4_0` and `kogpt2 convert` against quantizing at load, on random models written here
// (tests/testmodel.h: f32 and f16, tied, Conv1D in x out; one untied copy) and on
// models/default (real f16 weights). Per model and scheme:
//   - the logits of the converted directory, loaded as auto and as the scheme, equal those of
//     the source loaded with --dtype q8_0/q4_0 bit for bit (memcmp of every logit);
//   - the file holds exactly the bytes it should (layer matrices and the LM head in blocks,
//     the rest as in the source) and is smaller than the source;
//   - the loader serves the blocks from the mapping (every layer matrix and the head point
//     into the file; the same check fails on the source quantized at load);
//   - converting the converted directory again gives the same file, byte for byte;
//   - any other dtype is refused: at load and by convert (KG_EUNSUP).
// Then broken quantized files, each refused with one line naming the cause: wrong U8 shapes,
// a NaN or infinite block scale, __metadata__ disagreeing with the shapes or missing or
// unknown or holding a NUL, a missing LM head, a float matrix among the blocks, blocks where
// an embedding belongs, blocks for a matrix of 48 inputs, shards of two schemes, and a
// backend without quantized kernels (a stand-in for CUDA; the real one too when a GPU is
// present).
// Last, nothing converts over its source (any spelling) or another model without --force.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "model/gpt2.h"
#include "testmodel.h"

static char g_tmp[512];
static KgBackend *g_be;

// err after "mark" (a message without its path), or all of err.
static const char *after(const char *err, const char *mark) {
    const char *p = strstr(err, mark);
    return p ? p + strlen(mark) : err;
}

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_tmp, name);
    return buf;
}

// The logits (n, V) of a fixed prompt of n = min(T, 16) tokens under dir loaded with dtype
// (*out malloc'd). KG_OK, or the load's error.
static int logits_of(const char *dir, KgDtype dtype, float **out, size_t *count, char *err) {
    Gpt2 m;
    int rc = gpt2_open(&m, dir, g_be, dtype, err);
    if (rc) return rc;
    const size_t V = m.config.vocab_size, n = m.config.n_ctx < 16 ? m.config.n_ctx : 16;
    int tokens[16];
    for (size_t i = 0; i < n; i++)
        tokens[i] = (int)((i * 7919 + 13) % V);
    Gpt2State s;
    KvSeq kv;
    REQUIRE(!gpt2_state_init(&s, &m, n, n, err) && !kv_init(&kv, &m, err), "%s", err);
    Gpt2Seq q = {&kv, tokens, n, GPT2_LOGITS_ALL};
    REQUIRE(!gpt2_forward(&m, &s, &q, 1, err), "%s", err);
    *count = n * V;
    *out = malloc(*count * sizeof **out);
    REQUIRE(*out, "oom");
    memcpy(*out, s.logits_host, *count * sizeof **out);
    kv_free(&kv);
    gpt2_state_free(&s, &m);
    gpt2_close(&m);
    return KG_OK;
}

static size_t file_size(const char *dir) {
    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(stat(path, &sb) == 0, "stat %s: %s", path, strerror(errno));
    return (size_t)sb.st_size;
}

static int same_file(const char *dir_a, const char *dir_b) {
    char path[1200], *a, *b;
    size_t na, nb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir_a);
    REQUIRE(!kg_read_file(path, 1u << 30, &a, &na, NULL), "read %s", path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir_b);
    REQUIRE(!kg_read_file(path, 1u << 30, &b, &nb, NULL), "read %s", path);
    int same = na == nb && !memcmp(a, b, na);
    free(a);
    free(b);
    return same;
}

static int in_mapping(const Gpt2 *m, const void *p) {
    for (size_t f = 0; f < m->src.n_files; f++) {
        const char *b = m->src.files[f].map;
        if ((const char *)p >= b && (const char *)p < b + m->src.files[f].map_size) return 1;
    }
    return 0;
}

// How many of m's layer matrices and LM head are blocks of q inside the mapping (4L + 1 when
// the loader serves the file's blocks as they are).
static size_t blocks_in_place(const Gpt2 *m, KgDtype q) {
    size_t n = 0;
    for (size_t l = 0; l < m->config.n_layer; l++) {
        const Gpt2LayerWeights *lw = &m->layers[l];
        const KgMat *mats[] = {&lw->qkv_w, &lw->attproj_w, &lw->fc_w, &lw->fcproj_w};
        for (int i = 0; i < 4; i++)
            n += mats[i]->dtype == q && in_mapping(m, mats[i]->data);
    }
    return n + (m->w.lm_head.dtype == q && in_mapping(m, m->w.lm_head.data) &&
                m->w.lm_head.data != m->w.wte.data);
}

static int is_block_matrix(const char *name) {
    const char *tails[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                           "mlp.c_proj.weight", "lm_head.weight"};
    for (int i = 0; i < 5; i++)
        if (kg_ends_with(name, tails[i])) return 1;
    return 0;
}

// The data bytes a q-converted src must hold, from src's own tensors: each layer matrix and
// the head in blocks (a tied head added), everything else as stored.
static size_t expected_data_bytes(const char *src, KgDtype q) {
    char path[1200], err[KG_ERRLEN];
    Gpt2Config c;
    SafeTensors st;
    snprintf(path, sizeof path, "%s/config.json", src);
    REQUIRE(!gpt2_config_load(&c, path, err), "%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    REQUIRE(!safetensors_open(&st, path, err), "%s", err);
    size_t bytes = c.tie_embeddings ? kg_dtype_bytes(q, c.vocab_size * c.n_embd) : 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor *t = &st.tensors[i];
        bytes += is_block_matrix(t->name) ? kg_dtype_bytes(q, t->n_elems) : t->nbytes;
    }
    safetensors_close(&st);
    return bytes;
}

static size_t data_bytes(const char *dir) {
    char path[1200], err[KG_ERRLEN];
    SafeTensors st;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(!safetensors_open(&st, path, err), "%s", err);
    size_t bytes = 0;
    for (size_t i = 0; i < st.n_tensors; i++)
        bytes += st.tensors[i].nbytes;
    safetensors_close(&st);
    return bytes;
}

// src converted to q and compared with src quantized at load (the header's list).
static void check_model(const char *label, const char *src, KgDtype q) {
    char out[700], again[800], name[128], err[KG_ERRLEN] = "";
    const char *qn = kg_dtype_name(q);
    snprintf(name, sizeof name, "%s_%s", label, qn);
    tmp_path(out, sizeof out, name);
    int rc = gpt2_convert(src, out, q, NULL, NULL, err);
    REQUIRE(rc == KG_OK, "%s: convert: %s", name, err);

    float *ref, *got;
    size_t n_ref, n_got;
    REQUIRE(!logits_of(src, q, &ref, &n_ref, err), "%s: load %s at %s: %s", name, src, qn, err);
    const KgDtype dtypes[] = {KG_DTYPE_AUTO, q};
    for (int d = 0; d < 2; d++) {
        rc = logits_of(out, dtypes[d], &got, &n_got, err);
        CHECK_MSG(rc == KG_OK, "%s: load as %s: %s", name, d ? qn : "auto", err);
        if (rc) continue;
        double max_diff = 0;
        for (size_t i = 0; i < n_got && n_got == n_ref; i++)
            if (fabs((double)got[i] - ref[i]) > max_diff) max_diff = fabs((double)got[i] - ref[i]);
        CHECK_MSG(n_got == n_ref && !memcmp(got, ref, n_ref * sizeof *ref),
                  "%s as %s: logits differ from quantizing at load (max |diff| %g)", name,
                  d ? qn : "auto", max_diff);
        printf("%-22s loaded as %-4s: %zu logits, max |diff| vs %s at load %g (memcmp)\n", name,
               d ? qn : "auto", n_got, qn, max_diff);
        free(got);
    }
    free(ref);

    // the bytes: blocks where they belong, the rest as it was; and smaller than the source
    size_t want = expected_data_bytes(src, q), have = data_bytes(out);
    size_t size = file_size(out), src_size = file_size(src);
    CHECK_MSG(have == want, "%s: %zu bytes of tensors, want %zu", name, have, want);
    CHECK_MSG(size < src_size, "%s: %zu bytes, the source %zu", name, size, src_size);
    printf("%-22s %zu bytes (%.3f of the source's %zu), tensors %zu bytes as expected\n", name,
           size, (double)size / src_size, src_size, have);

    // served from the mapping, not quantized again (and the check can tell the difference)
    Gpt2 m;
    REQUIRE(!gpt2_open(&m, out, g_be, KG_DTYPE_AUTO, err), "%s", err);
    size_t blocks = blocks_in_place(&m, q), want_blocks = 4 * m.config.n_layer + 1;
    CHECK_MSG(blocks == want_blocks && m.dtype == q, "%s: %zu of %zu matrices in place as %s", name,
              blocks, want_blocks, qn);
    gpt2_close(&m);
    REQUIRE(!gpt2_open(&m, src, g_be, q, err), "%s", err);
    CHECK_MSG(blocks_in_place(&m, q) == 0, "%s: the in-place check passes a load that quantizes",
              name);
    gpt2_close(&m);
    printf("%-22s %zu matrices served from the file's blocks (quantized at load: 0)\n", name,
           blocks);

    // converting what was converted changes nothing, as auto or as its own scheme
    snprintf(again, sizeof again, "%s_again", out);
    for (int d = 0; d < 2; d++) {
        rc = gpt2_convert(out, again, dtypes[d], NULL, NULL, err);
        CHECK_MSG(rc == KG_OK && same_file(out, again), "%s: converted again as %s: %s", name,
                  d ? qn : "auto", rc ? err : "a different file");
    }

    // other dtypes: refused at load and by convert, with the reason
    const KgDtype others[] = {KG_F32, KG_F16, KG_BF16, q == KG_Q8_0 ? KG_Q4_0 : KG_Q8_0};
    for (int d = 0; d < 4; d++) {
        err[0] = '\0';
        rc = gpt2_open(&m, out, g_be, others[d], err);
        CHECK_MSG(rc == KG_EUNSUP && strstr(err, "load only as they are"), "%s as %s: rc %d (%s)",
                  name, kg_dtype_name(others[d]), rc, err);
        if (!rc) gpt2_close(&m);
        if (d == 0) printf("%-22s as F32: %s\n", name, after(err, "model.safetensors: "));
        rc = gpt2_convert(out, again, others[d], NULL, NULL, err);
        CHECK_MSG(rc == KG_EUNSUP, "%s converted to %s: rc %d (%s)", name, kg_dtype_name(others[d]),
                  rc, err);
        if (d == 1) printf("%-22s to F16: %s\n", name, after(err, "convert: "));
    }
}

// dst: src's config untied and its tensors plus an lm_head.weight of its own (wte's rows in
// reverse order, so that the head and the embedding differ).
static void write_untied(const char *src, const char *dst) {
    char path[1200], err[KG_ERRLEN];
    Gpt2Config c;
    SafeTensors st;
    REQUIRE(mkdir(dst, 0755) == 0 || errno == EEXIST, "mkdir %s", dst);
    snprintf(path, sizeof path, "%s/config.json", src);
    REQUIRE(!gpt2_config_load(&c, path, err), "%s", err);
    c.tie_embeddings = 0;
    snprintf(path, sizeof path, "%s/config.json", dst);
    REQUIRE(!gpt2_config_save(&c, path, err), "%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    REQUIRE(!safetensors_open(&st, path, err), "%s", err);
    StWrite *w = calloc(st.n_tensors + 1, sizeof *w);
    REQUIRE(w, "oom");
    const StTensor *wte = safetensors_find(&st, "transformer.wte.weight");
    REQUIRE(wte, "no wte in %s", src);
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor *t = &st.tensors[i];
        w[i] = (StWrite){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
    }
    const size_t row = wte->nbytes / wte->shape[0];
    char *head = malloc(wte->nbytes);
    REQUIRE(head, "oom");
    for (size_t r = 0; r < wte->shape[0]; r++)
        memcpy(head + r * row, (const char *)wte->data + (wte->shape[0] - 1 - r) * row, row);
    w[st.n_tensors] =
        (StWrite){"lm_head.weight", wte->dtype, 2, {wte->shape[0], wte->shape[1]}, head};
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    REQUIRE(!safetensors_save(path, w, st.n_tensors + 1, err), "%s", err);
    free(head);
    free(w);
    safetensors_close(&st);
}

// --- broken quantized files ---

// A model file taken apart: its tensors as StWrite entries (U8 blocks as (out, in) of q) that a
// test changes before writing them back.
typedef struct {
    SafeTensors st;
    StWrite w[64];
    size_t n;
} Edit;

static void edit_load(Edit *e, const char *dir, KgDtype q) {
    char path[1200], err[KG_ERRLEN];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(!safetensors_open(&e->st, path, err), "%s", err);
    REQUIRE(e->st.n_tensors <= 64, "%s: too many tensors", path);
    e->n = e->st.n_tensors;
    for (size_t i = 0; i < e->n; i++) {
        const StTensor *t = &e->st.tensors[i];
        int blocks = !strcmp(t->dtype_name, "U8");
        size_t in = blocks ? t->shape[1] / kg_dtype_bytes(q, KG_QBLOCK) * KG_QBLOCK : t->shape[1];
        e->w[i] = (StWrite){t->name, blocks ? q : t->dtype, t->ndim, {t->shape[0], in}, t->data};
    }
}

static StWrite *edit_find(Edit *e, const char *name) {
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->w[i].name, name)) return &e->w[i];
    REQUIRE(0, "no tensor %s", name);
    return NULL;
}

// Writes e with meta as dir/model.safetensors (dir holds a config) and opens dir on be with
// dtype: rc must be want_rc and the message must contain want, on one line.
static void expect_bad(const char *what, const Edit *e, const char *const *meta, const char *dir,
                       KgBackend *be, KgDtype dtype, int want_rc, const char *want) {
    char path[1200], err[KG_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(!safetensors_save_meta(path, e->w, e->n, meta, NULL, err), "%s", err);
    Gpt2 m;
    int rc = gpt2_open(&m, dir, be, dtype, err);
    if (rc == KG_OK) gpt2_close(&m);
    CHECK_MSG(rc == want_rc && strstr(err, want) && !strchr(err, '\n'),
              "%s: rc %d (%s), want %d and '%s'", what, rc, err, want_rc, want);
    printf("%-34s -> %s\n", what, after(err, "model.safetensors: "));
}

// A copy of the blocks of w (the test frees it).
static void *copy_blocks(StWrite *w) {
    size_t bytes = kg_dtype_bytes(w->dtype, w->shape[0] * w->shape[1]);
    void *p = malloc(bytes + 64);
    REQUIRE(p, "oom");
    memcpy(p, w->data, bytes);
    w->data = p;
    return p;
}

static void copy_config(const char *from_dir, const char *to_dir) {
    char from[1200], to[1200], err[KG_ERRLEN];
    REQUIRE(mkdir(to_dir, 0755) == 0 || errno == EEXIST, "mkdir %s", to_dir);
    snprintf(from, sizeof from, "%s/config.json", from_dir);
    snprintf(to, sizeof to, "%s/config.json", to_dir);
    REQUIRE(!kg_copy_file(from, to, err), "%s", err);
}

static void test_broken(const char *qdir) {
    char bad[1100], err[KG_ERRLEN];
    const char *q8[] = {"format", "pt", GPT2_META_QUANT, "q8_0", NULL};
    const char *q4[] = {"format", "pt", GPT2_META_QUANT, "q4_0", NULL};
    const char *q5[] = {"format", "pt", GPT2_META_QUANT, "q5_k", NULL};
    const char *none[] = {"format", "pt", NULL};
    tmp_path(bad, sizeof bad, "bad");
    copy_config(qdir, bad);
    Edit e;
    edit_load(&e, qdir, KG_Q8_0);
    expect_bad("the file as converted", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_OK, "");
    expect_bad("metadata q4_0, blocks q8_0", &e, q4, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "U8 (192, 68), but kogpt2.quant says Q4_0: expected U8 (192, 36)");
    expect_bad("metadata q5_k", &e, q5, bad, g_be, KG_DTYPE_AUTO, KG_EUNSUP, "'q5_k'");
    // "q8_0\u0000x", which cJSON reads as q8_0 (issue 24): written as q8_0_u0000x, then the
    // '_' made a backslash in the file (the same length, so the header length still holds)
    const char *q8_nul[] = {"format", "pt", GPT2_META_QUANT, "q8_0_u0000x", NULL};
    expect_bad("metadata q8_0_u0000x", &e, q8_nul, bad, g_be, KG_DTYPE_AUTO, KG_EUNSUP,
               "'q8_0_u0000x'");
    {
        char path[1200], *text;
        size_t len;
        snprintf(path, sizeof path, "%s/model.safetensors", bad);
        REQUIRE(!kg_read_file(path, 1 << 28, &text, &len, err), "%s", err);
        char *at = strstr(text + 8, "q8_0_u0000x");
        REQUIRE(at, "%s: no scheme in the header", path);
        at[4] = '\\';
        FILE *f = fopen(path, "wb");
        REQUIRE(f && fwrite(text, 1, len, f) == len && fclose(f) == 0, "write %s", path);
        free(text);
        Gpt2 m;
        int rc = gpt2_open(&m, bad, g_be, KG_DTYPE_AUTO, err);
        if (rc == KG_OK) gpt2_close(&m);
        CHECK_MSG(rc == KG_EFORMAT &&
                      strstr(err, "\"__metadata__\": \"kogpt2.quant\" holds a NUL (\\u0000)") &&
                      !strchr(err, '\n'),
                  "metadata q8_0\\u0000x: rc %d (%s)", rc, err);
        printf("%-34s -> %s\n", "metadata q8_0\\u0000x", after(err, "model.safetensors: "));
    }
    expect_bad("blocks, no kogpt2.quant", &e, none, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "has no kogpt2.quant");
    expect_bad("no metadata at all", &e, NULL, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "has no kogpt2.quant");

    StWrite *w = edit_find(&e, "transformer.h.1.attn.c_proj.weight"), saved = *w;
    void *big = calloc(1, kg_dtype_bytes(KG_Q8_0, (w->shape[0] + 1) * (w->shape[1] + 32)));
    REQUIRE(big, "oom");
    w->data = big;
    w->shape[1] += 32; // one block too many per row: U8 (64, 102)
    expect_bad("U8 rows one block too wide", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.1.attn.c_proj.weight: U8 (64, 102)");
    w->shape[1] = saved.shape[1];
    w->shape[0] += 1; // one output too many
    expect_bad("U8 one row too many", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.1.attn.c_proj.weight: U8 (65, 68)");
    w->ndim = 1, w->shape[0] = saved.shape[0] * saved.shape[1]; // the same bytes, flattened
    w->shape[1] = 0;
    expect_bad("U8 blocks flattened to 1-d", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.1.attn.c_proj.weight: U8 (4352)");
    free(big);
    *w = saved;

    uint8_t *blk = copy_blocks(w);
    blk[5 * KG_Q8_0_BYTES] = 0x00, blk[5 * KG_Q8_0_BYTES + 1] = 0x7e; // f16 NaN scale, block 5
    expect_bad("a NaN block scale", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.1.attn.c_proj.weight: the scale of the block at element 160 is not a finite");
    free(blk);
    *w = saved;
    StWrite *head = edit_find(&e, "lm_head.weight"), head_saved = *head;
    blk = copy_blocks(head);
    size_t last = head->shape[0] * head->shape[1] / KG_QBLOCK - 1;
    blk[last * KG_Q8_0_BYTES] = 0x00, blk[last * KG_Q8_0_BYTES + 1] = 0xfc; // -inf, last block
    expect_bad("an infinite block scale", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "lm_head.weight: the scale of the block");
    free(blk);
    *head = head_saved;

    *head = e.w[--e.n]; // drop lm_head.weight (moved from the end into its place)
    expect_bad("no lm_head.weight (tied)", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "lm_head.weight: missing (a Q8_0 file");
    e.w[e.n++] = *head;
    *head = head_saved;

    // a float matrix among the blocks: c_fc dequantized back to F32 (C, F), in x out
    w = edit_find(&e, "transformer.h.0.mlp.c_fc.weight"), saved = *w;
    const size_t C = w->shape[1], F = w->shape[0];
    float *rows = malloc(F * C * sizeof *rows), *conv1d = malloc(F * C * sizeof *conv1d);
    REQUIRE(rows && conv1d, "oom");
    kg_dequantize_rows(rows, w->data, KG_Q8_0, F, C);
    for (size_t o = 0; o < F; o++)
        for (size_t i = 0; i < C; i++)
            conv1d[i * F + o] = rows[o * C + i];
    *w = (StWrite){w->name, KG_F32, 2, {C, F}, conv1d};
    expect_bad("an F32 matrix in a q8_0 file", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.0.mlp.c_fc.weight: F32 (64, 256), but kogpt2.quant says Q8_0");
    *w = saved;
    free(rows);
    free(conv1d);

    // blocks where the embedding belongs
    w = edit_find(&e, "transformer.wte.weight"), saved = *w;
    size_t wte_bytes = kg_dtype_bytes(KG_Q8_0, w->shape[0] * w->shape[1]);
    void *wte_blocks = calloc(1, wte_bytes);
    REQUIRE(wte_blocks, "oom");
    *w = (StWrite){w->name, KG_Q8_0, 2, {w->shape[0], w->shape[1]}, wte_blocks};
    expect_bad("wte in blocks", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "wte.weight: dtype U8, expected F32");
    *w = saved;
    free(wte_blocks);

    // a backend without quantized kernels: a stand-in with the CPU's ops, then a real GPU
    KgBackendOps no_quant = *g_be->ops;
    no_quant.quant_weights = 0;
    no_quant.name = "gpu-standin";
    const KgBackendOps *cpu_ops = g_be->ops;
    g_be->ops = &no_quant;
    expect_bad("on a backend without q kernels", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EUNSUP,
               "Q8_0 blocks (kogpt2.quant) need the cpu backend: gpu-standin has no quantized");
    g_be->ops = cpu_ops;
    if (kg_cuda_device_count(NULL, 0) > 0) {
        KgBackend *gpu = kg_cuda_backend_new(0, err);
        REQUIRE(gpu, "cuda: %s", err);
        expect_bad("on the CUDA backend", &e, q8, bad, gpu, KG_DTYPE_AUTO, KG_EUNSUP,
                   "has no quantized kernels");
        kg_backend_free(gpu);
    } else {
        printf("%-34s -> skipped: no GPU\n", "on the CUDA backend");
    }

    // shards of two schemes
    char dir[1100], path[1200];
    tmp_path(dir, sizeof dir, "shards");
    copy_config(qdir, dir);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    REQUIRE(!safetensors_save_meta(path, e.w, e.n / 2, q8, NULL, err), "%s", err);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    REQUIRE(!safetensors_save_meta(path, e.w + e.n / 2, e.n - e.n / 2, q4, NULL, err), "%s", err);
    char *index = malloc(64 * 128);
    REQUIRE(index, "oom");
    int len = snprintf(index, 64 * 128, "{\"weight_map\": {");
    for (size_t i = 0; i < e.n; i++)
        len += snprintf(index + len, 64 * 128 - (size_t)len, "%s\"%s\": \"%s\"", i ? ", " : "",
                        e.w[i].name, i < e.n / 2 ? "a.safetensors" : "b.safetensors");
    snprintf(index + len, 64 * 128 - (size_t)len, "}}\n");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fputs(index, f) >= 0 && fclose(f) == 0, "write %s", path);
    free(index);
    Gpt2 m;
    int rc = gpt2_open(&m, dir, g_be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "shards' kogpt2.quant differ (Q8_0 and Q4_0)"),
              "shards of two schemes: rc %d (%s)", rc, err);
    if (rc == KG_OK) gpt2_close(&m);
    printf("%-34s -> %s\n", "shards of two schemes", after(err, "index.json: "));
    safetensors_close(&e.st);

    // a matrix of 48 inputs cannot be in blocks of 32
    TestModelSpec sp = {.L = 1, .C = 48, .NH = 4, .T = 8, .V = 64, .dtype = KG_F32, .seed = 5};
    tmp_path(dir, sizeof dir, "c48");
    REQUIRE(!testmodel_write(dir, &sp, err), "%s", err);
    edit_load(&e, dir, KG_Q8_0);
    w = edit_find(&e, "transformer.h.0.attn.c_attn.weight");
    void *b48 = calloc(1, 3 * 48 * KG_Q8_0_BYTES);
    REQUIRE(b48, "oom");
    *w = (StWrite){w->name, KG_Q8_0, 2, {3 * 48, 32}, b48}; // U8 (144, 34): one block a row
    tmp_path(bad, sizeof bad, "c48_bad");                   // not dir: its file is mapped
    copy_config(dir, bad);
    expect_bad("blocks for 48 inputs", &e, q8, bad, g_be, KG_DTYPE_AUTO, KG_EFORMAT,
               "h.0.attn.c_attn.weight: Q8_0 needs inputs in blocks of 32, the matrix has 48");
    free(b48);
    safetensors_close(&e.st);
}

// `kogpt2 convert` and `kogpt2 next` on what it wrote: the same answer as --dtype at load.
static void test_cli(const char *src) {
    const char *build = getenv("KG_BUILD_DIR");
    char bin[1100], out[1100], cmd[4096], a[1100], b[1100];
    snprintf(bin, sizeof bin, "%s/kogpt2", build ? build : ".");
    if (access(bin, X_OK)) {
        printf("SKIP: kogpt2 CLI: %s is not built\n", bin);
        return;
    }
    tmp_path(out, sizeof out, "cli_q4_0");
    tmp_path(a, sizeof a, "next_a.json");
    tmp_path(b, sizeof b, "next_b.json");
    snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s --dtype q4_0 >/dev/null", bin, src,
             out);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
    const char *next = "next --device cpu --tokens 5,6,7,8 --top-k 5 --json";
    snprintf(cmd, sizeof cmd, "%s %s --model %s --dtype q4_0 >%s 2>/dev/null", bin, next, src, a);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
    const char *dtypes[] = {"auto", "q4_0"};
    for (int d = 0; d < 2; d++) {
        snprintf(cmd, sizeof cmd, "%s %s --model %s --dtype %s >%s 2>/dev/null", bin, next, out,
                 dtypes[d], b);
        CHECK_MSG(system(cmd) == 0, "%s", cmd);
        char *ta, *tb;
        REQUIRE(!kg_read_file(a, 1 << 20, &ta, NULL, NULL) &&
                    !kg_read_file(b, 1 << 20, &tb, NULL, NULL),
                "read %s, %s", a, b);
        CHECK_MSG(!strcmp(ta, tb) && strstr(ta, "candidates"),
                  "kogpt2 next --dtype %s on the q4_0 dir: %s; at load: %s", dtypes[d], tb, ta);
        free(ta);
        free(tb);
    }
    printf("kogpt2 next on the q4_0 dir (auto, q4_0) = --dtype q4_0 at load\n");
    snprintf(cmd, sizeof cmd, "%s %s --model %s --dtype f32 >/dev/null 2>&1", bin, next, out);
    CHECK_MSG(system(cmd) != 0, "%s succeeded", cmd);
    snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s_f16 --dtype f16 >/dev/null 2>&1", bin,
             out, out);
    CHECK_MSG(system(cmd) != 0, "%s succeeded", cmd);
    snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s_x --dtype q5_1 >/dev/null 2>&1", bin,
             src, out);
    CHECK_MSG(WEXITSTATUS(system(cmd)) == 2, "%s: not a usage error", cmd);
}

// Runs cmd with its output into out (KG_ERRLEN bytes, one line expected); its exit status.
static int run_cmd(const char *cmd, char *out) {
    char full[4200], file[1100];
    tmp_path(file, sizeof file, "cmd.out");
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, file);
    int rc = system(full);
    char *text = NULL;
    out[0] = '\0';
    if (!kg_read_file(file, 1 << 20, &text, NULL, NULL)) snprintf(out, KG_ERRLEN, "%s", text);
    free(text);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Nothing converts over its source or over another model by accident (issue 24): --out that
// is the source (D, D/, ./D, a symlink) is refused by gpt2_convert, --force or not; an --out
// that holds a model needs --force; either refusal leaves the bytes as they were. An unknown
// --dtype is named.
static void test_overwrite(const char *src) {
    char dir[1100], link[1100], spelled[1200], err[KG_ERRLEN], path[1200], msg[KG_ERRLEN];
    char *before, *after_bytes;
    size_t n_before, n_after;
    tmp_path(dir, sizeof dir, "own");
    REQUIRE(!gpt2_convert(src, dir, KG_F32, NULL, NULL, err), "%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(!kg_read_file(path, 1 << 26, &before, &n_before, err), "%s", err);
    tmp_path(link, sizeof link, "own_link");
    REQUIRE(!symlink(dir, link), "symlink %s: %s", link, strerror(errno));
    const char *spellings[] = {"%s", "%s/", "%s/./", "LINK"};
    for (int i = 0; i < 4; i++) {
        if (i == 3)
            snprintf(spelled, sizeof spelled, "%s", link);
        else
            snprintf(spelled, sizeof spelled, spellings[i], dir);
        err[0] = '\0';
        int rc = gpt2_convert(dir, spelled, KG_Q8_0, NULL, NULL, err);
        CHECK_MSG(rc == KG_EINVAL && strstr(err, "is the source directory"), "%s: rc %d, %s",
                  spelled, rc, err);
        rc = gpt2_convert(link, spelled, KG_F16, NULL, NULL, err);
        CHECK_MSG(rc == KG_EINVAL && strstr(err, "is the source directory"), "%s: rc %d, %s",
                  spelled, rc, err);
    }
    printf("in place: %s\n", err);

    const char *build = getenv("KG_BUILD_DIR");
    char bin[1100], cmd[4096];
    snprintf(bin, sizeof bin, "%s/kogpt2", build ? build : ".");
    if (access(bin, X_OK)) {
        printf("SKIP: kogpt2 CLI: %s is not built\n", bin);
    } else {
        snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s/ --dtype q8_0", bin, dir, dir);
        CHECK_MSG(run_cmd(cmd, msg) == 1 && strstr(msg, "is the source directory"), "%s: %s", cmd,
                  msg);
        snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s --dtype q8_0 --force", bin, link,
                 dir);
        CHECK_MSG(run_cmd(cmd, msg) == 1 && strstr(msg, "is the source directory"), "%s: %s", cmd,
                  msg);
        snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s --dtype q8_0", bin, src, dir);
        CHECK_MSG(run_cmd(cmd, msg) == 1 && strstr(msg, "holds a model already (config.json): "
                                                        "--force replaces it"),
                  "%s: %s", cmd, msg);
        printf("over a model: %s", msg);
        snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s_x --dtype q9", bin, src, dir);
        CHECK_MSG(run_cmd(cmd, msg) == 2 &&
                      !strcmp(msg, "kogpt2 convert: --dtype: unknown dtype 'q9': auto, f32, f16, "
                                   "bf16, q8_0 or q4_0\n"),
                  "%s: %s", cmd, msg);
    }
    REQUIRE(!kg_read_file(path, 1 << 26, &after_bytes, &n_after, err), "%s", err);
    CHECK_MSG(n_after == n_before && !memcmp(before, after_bytes, n_before),
              "a refused convert changed %s", path);
    free(after_bytes);
    if (!access(bin, X_OK)) { // on purpose: --force replaces it
        snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s --dtype q8_0 --force", bin, src,
                 dir);
        CHECK_MSG(run_cmd(cmd, msg) == 0, "%s: %s", cmd, msg);
        REQUIRE(!kg_read_file(path, 1 << 26, &after_bytes, &n_after, err), "%s", err);
        CHECK_MSG(n_after < n_before, "--force did not replace %s", path);
        free(after_bytes);
    }
    free(before);
}

int main(void) {
    const char *build = getenv("KG_BUILD_DIR"), *source = getenv("KG_SOURCE_DIR");
    char parent[400], err[KG_ERRLEN], dir[1100], untied[1100];
    snprintf(parent, sizeof parent, "%s/testdata", build ? build : "/tmp");
    mkdir(parent, 0755);
    snprintf(g_tmp, sizeof g_tmp, "%s/convert-XXXXXX", parent);
    REQUIRE(mkdtemp(g_tmp), "mkdtemp %s: %s", g_tmp, strerror(errno));
    REQUIRE((g_be = kg_cpu_backend_new(2, err)), "backend: %s", err);

    const struct {
        const char *name;
        TestModelSpec spec;
    } models[] = {
        {"f32_tied", {.L = 2, .C = 64, .NH = 4, .T = 16, .V = 300, .dtype = KG_F32, .seed = 1}},
        {"f16_tied", {.L = 2, .C = 96, .NH = 4, .T = 16, .V = 301, .dtype = KG_F16, .seed = 2}},
    };
    const KgDtype schemes[] = {KG_Q8_0, KG_Q4_0};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        tmp_path(dir, sizeof dir, models[i].name);
        REQUIRE(!testmodel_write(dir, &models[i].spec, err), "%s", err);
        for (int q = 0; q < 2; q++)
            check_model(models[i].name, dir, schemes[q]);
    }
    tmp_path(dir, sizeof dir, "f32_tied");
    tmp_path(untied, sizeof untied, "f32_untied");
    write_untied(dir, untied);
    for (int q = 0; q < 2; q++)
        check_model("f32_untied", untied, schemes[q]);
    snprintf(dir, sizeof dir, "%s/models/default", source ? source : ".");
    if (access(dir, R_OK) == 0)
        for (int q = 0; q < 2; q++)
            check_model("default", dir, schemes[q]);
    else
        printf("SKIP: the default model's checks: %s is absent\n", dir);

    tmp_path(dir, sizeof dir, "f32_tied_Q8_0");
    test_broken(dir);
    tmp_path(dir, sizeof dir, "f32_tied");
    test_cli(dir);
    test_overwrite(dir);

    kg_backend_free(g_be);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
