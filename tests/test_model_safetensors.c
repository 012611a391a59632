// test_model_safetensors.c — malformed safetensors files and models: each one is refused with
// its own error code and a message naming the tensor (never a crash), plus a save/open round
// trip. Part one feeds safetensors_parse/open hand-made headers; part two writes a valid tiny
// GPT-2 with safetensors_save and breaks one tensor at a time for gpt2_open.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "model/safetensors.h"

static char g_tmp[1024]; // this run's scratch directory

// A file image: 8-byte length, the header text as given (no padding), data_len bytes 0..255.
static unsigned char *image(const char *header, size_t data_len, size_t *size) {
    size_t hlen = strlen(header);
    *size = 8 + hlen + data_len;
    unsigned char *b = malloc(*size);
    REQUIRE(b, "oom");
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hlen + i] = (unsigned char)i;
    return b;
}

// Parses header + data_len bytes; expects rc and a message containing want (NULL: any).
static void expect_parse(const char *what, const char *header, size_t data_len, int want_rc,
                         const char *want) {
    size_t size;
    unsigned char *b = image(header, data_len, &size);
    SafeTensors st;
    char err[KG_ERRLEN] = "";
    int rc = safetensors_parse(&st, b, size, err);
    CHECK_MSG(rc == want_rc, "%s: rc %d, want %d (%s)", what, rc, want_rc, err);
    if (want_rc != KG_OK) {
        CHECK_MSG(err[0] != 0, "%s: no message", what);
        CHECK_MSG(!want || strstr(err, want), "%s: message '%s' does not name '%s'", what, err,
                  want);
    }
    if (rc == KG_OK) safetensors_close(&st);
    printf("%-34s -> %s\n", what, rc == KG_OK ? "ok" : err);
    free(b);
}

// Header text padded with spaces so that the data starts 8-byte aligned.
static const char *padded(const char *json) {
    static char buf[4096];
    size_t n = strlen(json);
    snprintf(buf, sizeof buf, "%s%*s", json, (int)((8 - n % 8) % 8), "");
    return buf;
}

static void test_parse_errors(void) {
    // a valid baseline: two F32 tensors and metadata
    expect_parse("valid",
                 padded("{\"__metadata__\":{\"format\":\"pt\"},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                        "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]}}"),
                 32, KG_OK, NULL);

    // header length larger than the file
    {
        unsigned char b[64] = {0};
        b[0] = 200; // 200-byte header in a 64-byte file
        SafeTensors st;
        char err[KG_ERRLEN] = "";
        int rc = safetensors_parse(&st, b, sizeof b, err);
        CHECK_MSG(rc == KG_EFORMAT && strstr(err, "header"), "truncated header: %d %s", rc, err);
        printf("%-34s -> %s\n", "header length > file", err);
        rc = safetensors_parse(&st, b, 5, err);
        CHECK_MSG(rc == KG_EFORMAT && err[0], "5-byte file: %d %s", rc, err);
        printf("%-34s -> %s\n", "file shorter than 8 bytes", err);
        memset(b, 0xff, 8); // 2^64 - 1
        rc = safetensors_parse(&st, b, sizeof b, err);
        CHECK_MSG(rc == KG_EFORMAT && err[0], "header length 2^64-1: %d %s", rc, err);
    }
    expect_parse("header not JSON", padded("{\"a\": {\"dtype\": F32"), 0, KG_EFORMAT, "JSON");
    expect_parse("header not an object", padded("[1, 2, 3]"), 0, KG_EFORMAT, "object");
    expect_parse("trailing bytes after header",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} xyz", 4,
                 KG_EFORMAT, "trailing");
    expect_parse("unknown dtype",
                 padded("{\"w1\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}"), 4,
                 KG_EFORMAT, "w1");
    expect_parse("dtype not a string",
                 padded("{\"w1\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}"), 4,
                 KG_EFORMAT, "w1");
    expect_parse("entry not an object", padded("{\"w1\":[1,2]}"), 0, KG_EFORMAT, "w1");
    expect_parse("missing data_offsets", padded("{\"w1\":{\"dtype\":\"F32\",\"shape\":[1]}}"), 4,
                 KG_EFORMAT, "w1");
    expect_parse("missing shape", padded("{\"w1\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}"), 4,
                 KG_EFORMAT, "w1");
    expect_parse("shape/data_offsets mismatch",
                 padded("{\"w2\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}"), 24,
                 KG_EFORMAT, "w2");
    expect_parse("offsets outside the file",
                 padded("{\"w3\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}"), 24,
                 KG_EFORMAT, "w3");
    expect_parse("offsets begin > end",
                 padded("{\"w3\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}"), 24,
                 KG_EFORMAT, "w3");
    expect_parse("negative offset",
                 padded("{\"w3\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}"), 24,
                 KG_EFORMAT, "w3");
    expect_parse("overlapping tensors",
                 padded("{\"w4\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                        "\"w5\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}"),
                 24, KG_EFORMAT, "overlap");
    expect_parse("duplicate names",
                 padded("{\"w6\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"w6\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}"),
                 8, KG_EFORMAT, "w6");
    expect_parse("misaligned data",
                 padded("{\"w7\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[2,18]}}"), 24,
                 KG_EFORMAT, "w7");
    expect_parse("shape product overflows size_t",
                 padded("{\"w8\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
                        "4294967296],\"data_offsets\":[0,16]}}"),
                 16, KG_EFORMAT, "w8");
    expect_parse("shape overflow to a small product",
                 padded("{\"w8\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
                        "\"data_offsets\":[0,0]}}"),
                 16, KG_EFORMAT, "w8");
    // each dimension fits the 64 KiB of data, their product (2^64) does not fit size_t
    expect_parse("shape product 2^64, dims in range",
                 padded("{\"w8\":{\"dtype\":\"U8\",\"shape\":[65536,65536,65536,65536],"
                        "\"data_offsets\":[0,65536]}}"),
                 65536, KG_EFORMAT, "w8");
    expect_parse("negative dimension",
                 padded("{\"w9\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}"),
                 16, KG_EFORMAT, "w9");
    expect_parse("fractional dimension",
                 padded("{\"w9\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}"), 16,
                 KG_EFORMAT, "w9");
    expect_parse("dimension not a number",
                 padded("{\"w9\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}"),
                 16, KG_EFORMAT, "w9");
    expect_parse("more than 8 dims",
                 padded("{\"w9\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "w9");
    // __metadata__ is a map of strings (the reference implementation refuses anything else)
    expect_parse("__metadata__ not an object",
                 padded("{\"__metadata__\":[\"pt\"],"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "__metadata__ is not an object");
    expect_parse("__metadata__ value not a string",
                 padded("{\"__metadata__\":{\"format\":\"pt\",\"kogpt2.quant\":8},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "__metadata__ kogpt2.quant is not a string");
    // accepted: a 0-d tensor, an empty tensor, other dtypes (they are parsed, not computed on)
    expect_parse("0-d, empty and I64 tensors",
                 padded("{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[8,8]},"
                        "\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[8,24]}}"),
                 24, KG_OK, NULL);
}

// Issue 24: sizes and offsets near 2^64 (a product or a sum that would wrap to a small
// number), and names, dtypes and __metadata__ values holding a NUL, which cJSON would cut
// short ("F32\u0000x" read as F32). Each is refused naming its tensor or key.
static void test_parse_overflow_nul(void) {
    expect_parse("shape (2^62 + 16) F32 in 64 bytes",
                 padded("{\"w10\":{\"dtype\":\"F32\",\"shape\":[4611686018427387920],"
                        "\"data_offsets\":[0,64]}}"),
                 64, KG_EFORMAT, "w10");
    // each dimension fits the data; the product is 2^64, which would wrap to an empty tensor
    expect_parse("shape product wraps to 0",
                 padded("{\"w10\":{\"dtype\":\"U8\",\"shape\":[65536,65536,65536,65536],"
                        "\"data_offsets\":[0,0]}}"),
                 65536, KG_EFORMAT, "w10");
    expect_parse("shape product wraps to the data size",
                 padded("{\"w10\":{\"dtype\":\"F32\",\"shape\":[65536,65536,65536,65536,1],"
                        "\"data_offsets\":[0,0]},"
                        "\"w11\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}"),
                 65536, KG_EFORMAT, "w10");
    expect_parse("data_offsets at 2^64 - 1",
                 padded("{\"w11\":{\"dtype\":\"U8\",\"shape\":[0],"
                        "\"data_offsets\":[18446744073709551615,18446744073709551615]}}"),
                 16, KG_EFORMAT, "w11");
    expect_parse("data_offsets [2^64 - 64, 2^64]",
                 padded("{\"w11\":{\"dtype\":\"U8\",\"shape\":[64],"
                        "\"data_offsets\":[18446744073709551552,18446744073709551616]}}"),
                 64, KG_EFORMAT, "w11");
    expect_parse("q8_0 rows: 2^62 of 34 bytes",
                 padded("{\"__metadata__\":{\"kogpt2.quant\":\"q8_0\"},"
                        "\"h.0.attn.c_attn.weight\":{\"dtype\":\"U8\",\"shape\":"
                        "[4611686018427387904,34],\"data_offsets\":[0,68]}}"),
                 68, KG_EFORMAT, "h.0.attn.c_attn.weight");

    expect_parse("NUL in a tensor name",
                 padded("{\"w12\\u0000junk\":{\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "the key \"w12...\" holds a NUL");
    expect_parse("NUL in a dtype",
                 padded("{\"w12\":{\"dtype\":\"F32\\u0000x\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "\"w12\": \"dtype\" holds a NUL");
    expect_parse("NUL in the quantization scheme",
                 padded("{\"__metadata__\":{\"kogpt2.quant\":\"q8_0\\u0000x\"},"
                        "\"w12\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "\"kogpt2.quant\" holds a NUL");
    expect_parse("NUL in a __metadata__ key",
                 padded("{\"__metadata__\":{\"kogpt2.quant\\u0000\":\"q8_0\"},"
                        "\"w12\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "the key \"kogpt2.quant...\" holds a NUL");
    {
        static const char raw[] =
            "{\"w12\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0      ";
        size_t size;
        unsigned char *b = image("", 4, &size); // 8 bytes of length, then 4 of data
        unsigned char *f = malloc(8 + sizeof raw - 1 + 4);
        REQUIRE(f, "oom");
        for (int i = 0; i < 8; i++)
            f[i] = (unsigned char)((uint64_t)(sizeof raw - 1) >> (8 * i));
        memcpy(f + 8, raw, sizeof raw - 1);
        memcpy(f + 8 + sizeof raw - 1, b + 8, 4);
        SafeTensors st;
        char err[KG_ERRLEN] = "";
        int rc = safetensors_parse(&st, f, 8 + sizeof raw - 1 + 4, err);
        CHECK_MSG(rc == KG_EFORMAT && strstr(err, "a NUL byte"), "raw NUL: rc %d (%s)", rc, err);
        if (rc == KG_OK) safetensors_close(&st);
        printf("%-34s -> %s\n", "a raw NUL byte in the header", err);
        free(b);
        free(f);
    }
    // a name with a newline (a JSON escape): the message stays on one line
    expect_parse("newline in a tensor name",
                 padded("{\"w13\\nx\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
                 4, KG_EFORMAT, "w13?x");
    // a backslash and the text u0000 in a name is a name like any other
    expect_parse("escaped backslash, then u0000",
                 padded("{\"w14\\\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}"),
                 4, KG_OK, NULL);
}

static void test_open_errors(void) {
    char err[KG_ERRLEN] = "", path[1200];
    SafeTensors st;
    snprintf(path, sizeof path, "%s/absent.safetensors", g_tmp);
    int rc = safetensors_open(&st, path, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "absent.safetensors"), "missing file: %d %s", rc, err);
    printf("%-34s -> %s\n", "missing file", err);

    snprintf(path, sizeof path, "%s/empty.safetensors", g_tmp);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fclose(f) == 0, "create %s", path);
    rc = safetensors_open(&st, path, err);
    CHECK_MSG(rc != KG_OK && strstr(err, "empty.safetensors"), "empty file: %d %s", rc, err);
    printf("%-34s -> %s\n", "empty file", err);
    unlink(path);

    rc = safetensors_open(&st, g_tmp, err);
    CHECK_MSG(rc != KG_OK && err[0], "a directory: %d %s", rc, err);
    printf("%-34s -> %s\n", "a directory", err);
}

// safetensors_save -> safetensors_open gives back every name, dtype, shape and byte, aligned.
static void test_round_trip(void) {
    char err[KG_ERRLEN] = "", path[1200];
    snprintf(path, sizeof path, "%s/round.safetensors", g_tmp);
    float a[6] = {1, -2, 3.5f, 1e-20f, -0.0f, 65504};
    uint16_t h[3] = {0x3c00, 0x8001, 0x7bff}, bf[5] = {0x3f80, 0xc000, 0x0001, 0x7f7f, 0x4049};
    StWrite w[] = {
        {"transformer.a", KG_F32, 2, {2, 3}, a},
        {"h", KG_F16, 1, {3}, h}, // 6 bytes: the next tensor must still start aligned
        {"bf", KG_BF16, 2, {5, 1}, bf},
        {"scalar", KG_F32, 0, {0}, a},
    };
    int rc = safetensors_save(path, w, 4, err);
    CHECK_MSG(rc == KG_OK, "save: %s", err);
    SafeTensors st;
    rc = safetensors_open(&st, path, err);
    CHECK_MSG(rc == KG_OK, "open what was saved: %s", err);
    if (rc) return;
    CHECK(st.n_tensors == 4);
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        const StTensor *t = safetensors_find(&st, w[i].name);
        CHECK_MSG(t != NULL, "%s missing after the round trip", w[i].name);
        if (!t) continue;
        CHECK(t->dtype == w[i].dtype && t->ndim == w[i].ndim);
        size_t n = 1;
        for (int d = 0; d < w[i].ndim; d++) {
            CHECK(t->shape[d] == w[i].shape[d]);
            n *= w[i].shape[d];
        }
        CHECK(t->n_elems == n && t->nbytes == n * kg_dtype_size(w[i].dtype));
        CHECK_MSG(t->nbytes == 0 || !memcmp(t->data, w[i].data, t->nbytes), "%s bytes differ",
                  w[i].name);
        CHECK_MSG((uintptr_t)t->data % t->elem_size == 0, "%s not aligned", w[i].name);
    }
    const unsigned char *p = st.map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    CHECK_MSG((8 + hlen) % 8 == 0, "header of %llu bytes leaves the data unaligned",
              (unsigned long long)hlen);
    CHECK(safetensors_find(&st, "nope") == NULL);
    CHECK(st.n_meta == 0 && safetensors_meta(&st, "format") == NULL);
    safetensors_close(&st);
    unlink(path);
    printf("%-34s -> ok\n", "save/open round trip");
}

// Mixed element sizes, quantized blocks and metadata: tensors of 2 and 1-byte alignment
// given before f32 ones still come back aligned with no gap between them (the format allows
// none), a q8_0 (3, 32) tensor as U8 (3, 34), and every metadata pair.
static void test_round_trip_blocks(void) {
    char err[KG_ERRLEN] = "", path[1200];
    snprintf(path, sizeof path, "%s/blocks.safetensors", g_tmp);
    uint8_t q[3 * KG_Q8_0_BYTES], q4[KG_Q4_0_BYTES];
    uint16_t h[3] = {1, 2, 3};
    float a[3] = {1, 2, 3};
    for (size_t i = 0; i < sizeof q; i++)
        q[i] = (uint8_t)(i * 7);
    memset(q4, 0x5a, sizeof q4);
    StWrite w[] = {
        {"q", KG_Q8_0, 2, {3, 32}, q},   // 102 bytes
        {"h", KG_F16, 1, {3}, h},        // 6 bytes
        {"q4", KG_Q4_0, 2, {1, 32}, q4}, // 18 bytes
        {"a", KG_F32, 1, {3}, a},
    };
    const char *meta[] = {"format", "pt", "kogpt2.quant", "q8_0", NULL};
    CHECK_MSG(safetensors_save_meta(path, w, 4, meta, NULL, err) == KG_OK, "save: %s", err);
    SafeTensors st;
    int rc = safetensors_open(&st, path, err);
    CHECK_MSG(rc == KG_OK, "open: %s", err);
    if (rc) return;
    const StTensor *tq = safetensors_find(&st, "q"), *tq4 = safetensors_find(&st, "q4");
    CHECK(tq && !strcmp(tq->dtype_name, "U8") && tq->ndim == 2 && tq->shape[0] == 3 &&
          tq->shape[1] == KG_Q8_0_BYTES && !memcmp(tq->data, q, sizeof q));
    CHECK(tq4 && !strcmp(tq4->dtype_name, "U8") && tq4->shape[1] == KG_Q4_0_BYTES &&
          !memcmp(tq4->data, q4, sizeof q4));
    size_t end = 0;
    for (size_t i = 0; i < st.n_tensors; i++) { // sorted by offset: contiguous, each aligned
        const StTensor *t = &st.tensors[i];
        size_t off = (size_t)((const char *)t->data - (const char *)st.tensors[0].data);
        CHECK_MSG(off == end && (uintptr_t)t->data % t->elem_size == 0, "%s at %zu, want %zu",
                  t->name, off, end);
        end = off + t->nbytes;
    }
    CHECK(!strcmp(st.tensors[0].name, "a")); // the f32 one first
    CHECK(st.n_meta == 2 && !strcmp(safetensors_meta(&st, "format"), "pt") &&
          !strcmp(safetensors_meta(&st, "kogpt2.quant"), "q8_0") &&
          safetensors_meta(&st, "kogpt2") == NULL);
    safetensors_close(&st);
    unlink(path);
    printf("%-34s -> ok\n", "blocks + metadata round trip");
}

// --- gpt2_open on broken models ---

enum { L = 2, C = 16, NH = 2, T = 8, V = 32, F = 64 };

typedef struct {
    char name[80];
    KgDtype dtype;
    int ndim;
    size_t shape[2];
    float *data; // room for twice the elements, so a test may grow the shape
} Tensor;

typedef struct {
    Tensor t[64];
    int n;
} Model;

static void add(Model *m, const char *name, size_t d0, size_t d1) {
    Tensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "transformer.%s", name);
    t->dtype = KG_F32;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0, t->shape[1] = d1;
    size_t n = d0 * (d1 ? d1 : 1);
    t->data = calloc(2 * n, sizeof(float));
    REQUIRE(t->data, "oom");
    for (size_t i = 0; i < n; i++)
        t->data[i] = 0.01f * (float)((i * 37) % 17) - 0.08f;
}

static void model_build(Model *m) {
    m->n = 0;
    add(m, "wte.weight", V, C);
    add(m, "wpe.weight", T, C);
    for (int l = 0; l < L; l++) {
        char p[64];
#define ADD(suffix, d0, d1) (snprintf(p, sizeof p, "h.%d.%s", l, suffix), add(m, p, d0, d1))
        ADD("ln_1.weight", C, 0);
        ADD("ln_1.bias", C, 0);
        ADD("attn.c_attn.weight", C, 3 * C);
        ADD("attn.c_attn.bias", 3 * C, 0);
        ADD("attn.c_proj.weight", C, C);
        ADD("attn.c_proj.bias", C, 0);
        ADD("ln_2.weight", C, 0);
        ADD("ln_2.bias", C, 0);
        ADD("mlp.c_fc.weight", C, F);
        ADD("mlp.c_fc.bias", F, 0);
        ADD("mlp.c_proj.weight", F, C);
        ADD("mlp.c_proj.bias", C, 0);
#undef ADD
    }
    add(m, "ln_f.weight", C, 0);
    add(m, "ln_f.bias", C, 0);
}

static Tensor *model_find(Model *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    REQUIRE(0, "no tensor %s", name);
    return NULL;
}

static void model_free(Model *m) {
    for (int i = 0; i < m->n; i++)
        free(m->t[i].data);
    m->n = 0;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

static const char *CONFIG_FMT = "{\"model_type\": \"gpt2\", \"n_layer\": %d, \"n_head\": %d, "
                                "\"n_embd\": %d, \"n_positions\": %d, \"vocab_size\": %d, "
                                "\"activation_function\": \"gelu_new\", "
                                "\"tie_word_embeddings\": %s}\n";

// Writes m into g_tmp/model (config with n_layer, tie) and calls gpt2_open on it.
static int open_model(Model *m, int n_layer, int tied, KgBackend *be, char *err) {
    char dir[1100], path[1200], cfg[512];
    snprintf(dir, sizeof dir, "%s/model", g_tmp);
    REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    snprintf(cfg, sizeof cfg, CONFIG_FMT, n_layer, NH, C, T, V, tied ? "true" : "false");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    StWrite w[64];
    for (int i = 0; i < m->n; i++) {
        Tensor *t = &m->t[i];
        w[i] = (StWrite){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(safetensors_save(path, w, (size_t)m->n, err) == KG_OK, "save: %s", err);
    Gpt2 g;
    err[0] = 0;
    int rc = gpt2_open(&g, dir, be, KG_DTYPE_AUTO, err);
    if (rc == KG_OK) gpt2_close(&g);
    return rc;
}

static void expect_open(const char *what, Model *m, int n_layer, int tied, KgBackend *be,
                        int want_rc, const char *want) {
    char err[KG_ERRLEN];
    int rc = open_model(m, n_layer, tied, be, err);
    if (want_rc == KG_OK) {
        CHECK_MSG(rc == KG_OK, "%s: %s", what, err);
    } else {
        CHECK_MSG(rc != KG_OK && (want_rc == 0 || rc == want_rc), "%s: rc %d, want %d (%s)", what,
                  rc, want_rc, err);
        CHECK_MSG(strstr(err, want), "%s: message '%s' does not name '%s'", what, err, want);
    }
    printf("%-34s -> %s\n", what, rc == KG_OK ? "ok" : err);
}

static void test_gpt2_open_errors(void) {
    char err[KG_ERRLEN] = "";
    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "backend: %s", err);
    Model m;

    model_build(&m);
    expect_open("valid tiny model", &m, L, 1, be, KG_OK, NULL);
    // a checkpoint carrying an explicit lm_head.weight (V, C), untied
    Tensor *head = &m.t[m.n++];
    *head = *model_find(&m, "transformer.wte.weight");
    snprintf(head->name, sizeof head->name, "lm_head.weight");
    head->data = calloc(V * C, sizeof(float));
    REQUIRE(head->data, "oom");
    expect_open("untied lm_head.weight", &m, L, 0, be, KG_OK, NULL);
    head->shape[0] = V - 1;
    expect_open("lm_head.weight of the wrong shape", &m, L, 0, be, KG_EFORMAT, "lm_head.weight");
    model_free(&m);

    model_build(&m);
    expect_open("untied without lm_head.weight", &m, L, 0, be, KG_EFORMAT, "lm_head.weight");
    expect_open("n_layer 3, file has 2", &m, 3, 1, be, KG_EFORMAT, "h.2.");
    free(m.t[--m.n].data); // drop transformer.ln_f.bias
    expect_open("missing tensor", &m, L, 1, be, KG_EFORMAT, "ln_f.bias");
    model_free(&m);

    model_build(&m);
    model_find(&m, "transformer.h.0.attn.c_attn.weight")->shape[1] = 2 * C;
    expect_open("c_attn (C, 2C)", &m, L, 1, be, KG_EFORMAT, "h.0.attn.c_attn.weight");
    model_free(&m);

    model_build(&m);
    Tensor *t = model_find(&m, "transformer.h.1.attn.c_proj.weight");
    t->shape[0] = C * C, t->shape[1] = 0, t->ndim = 1; // right size, flattened
    expect_open("c_proj flattened to 1-d", &m, L, 1, be, KG_EFORMAT, "h.1.attn.c_proj.weight");
    model_free(&m);

    model_build(&m);
    model_find(&m, "transformer.wpe.weight")->shape[0] = T - 1;
    expect_open("wpe shorter than n_positions", &m, L, 1, be, KG_EFORMAT, "wpe.weight");
    model_free(&m);

    model_build(&m);
    model_find(&m, "transformer.wte.weight")->shape[0] = V - 1;
    expect_open("wte rows != vocab_size", &m, L, 1, be, KG_EFORMAT, "wte.weight");
    model_free(&m);

    model_build(&m);
    model_find(&m, "transformer.h.1.ln_2.bias")->shape[0] = C + 1;
    expect_open("ln_2.bias (C + 1)", &m, L, 1, be, KG_EFORMAT, "h.1.ln_2.bias");
    model_free(&m);
    kg_backend_free(be);
}

// Writes a raw safetensors image as the model file of g_tmp/raw (with a valid config).
static void expect_open_raw(const char *what, const char *header, size_t data_len, KgBackend *be,
                            const char *want) {
    char dir[1100], path[1200], cfg[512], err[KG_ERRLEN] = "";
    snprintf(dir, sizeof dir, "%s/raw", g_tmp);
    REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    snprintf(cfg, sizeof cfg, CONFIG_FMT, 1, 1, 4, 2, 3, "true");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    size_t size;
    unsigned char *b = image(header, data_len, &size);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(b, 1, size, f) == size && fclose(f) == 0, "write %s", path);
    free(b);
    Gpt2 g;
    int rc = gpt2_open(&g, dir, be, KG_DTYPE_AUTO, err);
    if (rc == KG_OK) gpt2_close(&g);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, want), "%s: rc %d (%s), want '%s'", what, rc, err,
              want);
    printf("%-34s -> %s\n", what, err);
}

static void test_gpt2_open_dtypes(void) {
    char err[KG_ERRLEN] = "";
    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "backend: %s", err);
    // safetensors_save writes only float dtypes and blocks, so these files are made by hand: a
    // 1-layer model (C 4, V 3, T 2) with every tensor present, one of them of a dtype that
    // cannot be a weight.
    char h[4096];
    size_t off = 0;
    int n = 0;
    struct {
        const char *name, *dtype;
        size_t d0, d1;
    } spec[] = {
        {"wte.weight", "F32", 3, 4},
        {"wpe.weight", "F32", 2, 4},
        {"h.0.ln_1.weight", "F32", 4, 0},
        {"h.0.ln_1.bias", "F32", 4, 0},
        {"h.0.attn.c_attn.weight", "F32", 4, 12},
        {"h.0.attn.c_attn.bias", "F32", 12, 0},
        {"h.0.attn.c_proj.weight", "F32", 4, 4},
        {"h.0.attn.c_proj.bias", "F32", 4, 0},
        {"h.0.ln_2.weight", "F32", 4, 0},
        {"h.0.ln_2.bias", "F32", 4, 0},
        {"h.0.mlp.c_fc.weight", "I64", 4, 16},
        {"h.0.mlp.c_fc.bias", "F32", 16, 0},
        {"h.0.mlp.c_proj.weight", "F32", 16, 4},
        {"h.0.mlp.c_proj.bias", "F32", 4, 0},
        {"ln_f.weight", "F32", 4, 0},
        {"ln_f.bias", "F32", 4, 0},
    };
    for (int pass = 0; pass < 2; pass++) {
        // pass 0: c_fc.weight is I64 (8 bytes an element); pass 1: ln_1.weight is U8
        n = snprintf(h, sizeof h, "{");
        off = 0;
        for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
            const char *dt = spec[i].dtype;
            if (pass == 1) dt = !strcmp(spec[i].name, "h.0.ln_1.weight") ? "U8" : "F32";
            size_t es = !strcmp(dt, "I64") ? 8 : !strcmp(dt, "U8") ? 1 : 4;
            size_t bytes = es * spec[i].d0 * (spec[i].d1 ? spec[i].d1 : 1);
            char shape[64];
            if (spec[i].d1)
                snprintf(shape, sizeof shape, "[%zu,%zu]", spec[i].d0, spec[i].d1);
            else
                snprintf(shape, sizeof shape, "[%zu]", spec[i].d0);
            n += snprintf(h + n, sizeof h - (size_t)n,
                          "%s\"transformer.%s\":{\"dtype\":\"%s\",\"shape\":%s,"
                          "\"data_offsets\":[%zu,%zu]}",
                          i ? "," : "", spec[i].name, dt, shape, off, off + bytes);
            off += (bytes + 7) / 8 * 8; // keep every tensor 8-byte aligned
        }
        snprintf(h + n, sizeof h - (size_t)n, "}");
        if (pass == 0)
            expect_open_raw("I64 where a weight belongs", padded(h), off, be,
                            "h.0.mlp.c_fc.weight");
        else
            expect_open_raw("U8 layer-norm weight", padded(h), off, be, "h.0.ln_1.weight");
    }
    // the file cut short: the last tensor's data is missing
    expect_open_raw("model file truncated",
                    padded("{\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],"
                           "\"data_offsets\":[0,48]}}"),
                    40, be, "wte.weight");
    kg_backend_free(be);
}

// A shard index (model.safetensors.index.json) whose weight_map names hold a NUL: the tensor
// "x\u0000y" would be looked up as x, the shard "a.safetensors\u0000/../b" opened as
// a.safetensors. Refused at the index, naming the entry (issue 24).
static void test_index_nul(void) {
    char dir[1100], path[1200], cfg[512], err[KG_ERRLEN];
    snprintf(dir, sizeof dir, "%s/index", g_tmp);
    REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    snprintf(cfg, sizeof cfg, CONFIG_FMT, 1, 1, 4, 2, 3, "true");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    size_t size;
    unsigned char *b =
        image(padded("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"), 4, &size);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(b, 1, size, f) == size && fclose(f) == 0, "write %s", path);
    free(b);
    static const struct {
        const char *what, *index, *want;
    } CASES[] = {
        {"index: NUL in a tensor name", "{\"weight_map\": {\"x\\u0000y\": \"a.safetensors\"}}",
         "the key \"x...\" holds a NUL"},
        {"index: NUL in a shard name",
         "{\"weight_map\": {\"x\": \"a.safetensors\\u0000/../../b\"}}",
         "\"weight_map\": \"x\" holds a NUL"},
    };
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "backend: %s", err);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        write_text(path, CASES[i].index);
        Gpt2 g;
        err[0] = '\0';
        int rc = gpt2_open(&g, dir, be, KG_DTYPE_AUTO, err);
        if (rc == KG_OK) gpt2_close(&g);
        CHECK_MSG(rc == KG_EFORMAT && strstr(err, CASES[i].want) && strstr(err, "index.json"),
                  "%s: rc %d (%s), want '%s'", CASES[i].what, rc, err, CASES[i].want);
        printf("%-34s -> %s\n", CASES[i].what,
               strstr(err, "index.json") ? strstr(err, "index.json") : err);
    }
    kg_backend_free(be);
}

int main(void) {
    const char *build = getenv("KG_BUILD_DIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/testdata/st-XXXXXX", build ? build : "/tmp");
    char parent[900];
    snprintf(parent, sizeof parent, "%s/testdata", build ? build : "/tmp");
    mkdir(parent, 0755);
    REQUIRE(mkdtemp(g_tmp), "mkdtemp %s: %s", g_tmp, strerror(errno));

    test_parse_errors();
    test_parse_overflow_nul();
    test_open_errors();
    test_round_trip();
    test_round_trip_blocks();
    test_gpt2_open_errors();
    test_gpt2_open_dtypes();
    test_index_nul();

    char path[1200];
    const char *left[] = {"model/config.json",
                          "model/model.safetensors",
                          "raw/config.json",
                          "raw/model.safetensors",
                          "index/config.json",
                          "index/a.safetensors",
                          "index/model.safetensors.index.json",
                          "model",
                          "raw",
                          "index"};
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_tmp, left[i]);
        if (unlink(path) != 0) rmdir(path);
    }
    rmdir(g_tmp);
    return check_report();
}
