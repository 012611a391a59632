// test_model_config.c — config.json as Hugging Face writes it, and every way it can be wrong:
// each bad file is KG_EFORMAT (or KG_EIO) with a message naming the key, never a crash. Also
// model directories that lack their files, for gpt2_open.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "model/safetensors.h"
#include "testmodel.h"

static char g_tmp[1024];

// A config in the shape of skt/kogpt2-base-v2's: the fields GPT2Config reads and some it ignores
static const char *KOGPT2_CONFIG = "{\n"
                                   "  \"_num_labels\": 1,\n"
                                   "  \"activation_function\": \"gelu_new\",\n"
                                   "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                                   "  \"attn_pdrop\": 0.1,\n"
                                   "  \"author\": \"Heewon Jeon(madjakarta@gmail.com)\",\n"
                                   "  \"bos_token_id\": 0,\n"
                                   "  \"created_date\": \"2021-04-28\",\n"
                                   "  \"embd_pdrop\": 0.1,\n"
                                   "  \"eos_token_id\": 1,\n"
                                   "  \"gradient_checkpointing\": false,\n"
                                   "  \"initializer_range\": 0.02,\n"
                                   "  \"layer_norm_epsilon\": 1e-05,\n"
                                   "  \"model_type\": \"gpt2\",\n"
                                   "  \"n_ctx\": 1024,\n"
                                   "  \"n_embd\": 768,\n"
                                   "  \"n_head\": 12,\n"
                                   "  \"n_inner\": null,\n"
                                   "  \"n_layer\": 12,\n"
                                   "  \"n_positions\": 1024,\n"
                                   "  \"pad_token_id\": 3,\n"
                                   "  \"summary_activation\": null,\n"
                                   "  \"task_specific_params\": {\"text-generation\": "
                                   "{\"do_sample\": true, \"max_length\": 50}},\n"
                                   "  \"use_cache\": true,\n"
                                   "  \"vocab_size\": 51200\n"
                                   "}\n";

static void test_valid(void) {
    char err[KG_ERRLEN] = "";
    Gpt2Config c;
    int rc = gpt2_config_parse(&c, KOGPT2_CONFIG, strlen(KOGPT2_CONFIG), err);
    CHECK_MSG(rc == KG_OK, "KoGPT2 config: %s", err);
    CHECK(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.n_ctx == 1024);
    CHECK(c.vocab_size == 51200 && c.n_inner == 3072 && c.gelu == GPT2_GELU_TANH);
    CHECK(c.ln_eps == 1e-5f && c.bos_id == 0 && c.eos_id == 1 && c.pad_id == 3);
    CHECK(c.tie_embeddings == 1);

    // GPT2Config's defaults for what is absent
    rc = gpt2_config_parse(&c, "{}", 2, err);
    CHECK_MSG(rc == KG_OK, "{}: %s", err);
    CHECK(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.n_ctx == 1024);
    CHECK(c.vocab_size == 50257 && c.n_inner == 3072 && c.gelu == GPT2_GELU_TANH);
    CHECK(c.ln_eps == 1e-5f && c.bos_id == -1 && c.eos_id == -1 && c.tie_embeddings == 1);

    const char *v1 = "{\"activation_function\": \"gelu\", \"n_embd\": 64, \"n_head\": 4, "
                     "\"n_inner\": 100, \"n_positions\": 32, \"n_ctx\": 16, "
                     "\"tie_word_embeddings\": false, \"layer_norm_epsilon\": 1e-6}";
    rc = gpt2_config_parse(&c, v1, strlen(v1), err);
    CHECK_MSG(rc == KG_OK, "v1-style config: %s", err);
    CHECK(c.gelu == GPT2_GELU_ERF && c.n_inner == 100 && c.tie_embeddings == 0);
    CHECK_MSG(c.n_ctx == 32, "n_positions (the size of wpe) wins over n_ctx: %zu", c.n_ctx);
    CHECK(c.ln_eps == 1e-6f);

    // the length is honoured: what follows len is not read
    const char *cut = "{\"n_layer\": 3}garbage";
    rc = gpt2_config_parse(&c, cut, 14, err);
    CHECK_MSG(rc == KG_OK && c.n_layer == 3, "parse of the first 14 bytes: %s", err);
}

static void expect_bad(const char *what, const char *json, const char *want) {
    char err[KG_ERRLEN] = "";
    Gpt2Config c;
    int rc = gpt2_config_parse(&c, json, strlen(json), err);
    CHECK_MSG(rc == KG_EFORMAT, "%s: rc %d, want KG_EFORMAT (%s)", what, rc, err);
    CHECK_MSG(strstr(err, want) != NULL, "%s: message '%s' does not name '%s'", what, err, want);
    printf("%-36s -> %s\n", what, err);
}

// Valid config.json options this engine does not compute: refused, naming the key (issue 14).
static void expect_unsup(const char *what, const char *json, const char *want) {
    char err[KG_ERRLEN] = "";
    Gpt2Config c;
    int rc = gpt2_config_parse(&c, json, strlen(json), err);
    CHECK_MSG(rc == KG_EUNSUP, "%s: rc %d, want KG_EUNSUP (%s)", what, rc, err);
    CHECK_MSG(strstr(err, want) != NULL, "%s: message '%s' does not name '%s'", what, err, want);
    printf("%-36s -> %s\n", what, err);
}

// Every activation the kernels compute, and the GPT2Config options at the values computed.
static void test_options(void) {
    const struct {
        const char *name;
        Gpt2Gelu kind;
    } acts[] = {{"gelu_new", GPT2_GELU_TANH},
                {"gelu_pytorch_tanh", GPT2_GELU_TANH},
                {"gelu_fast", GPT2_GELU_TANH},
                {"gelu", GPT2_GELU_ERF},
                {"relu", GPT2_RELU}};
    char json[256], err[KG_ERRLEN] = "";
    Gpt2Config c;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        snprintf(json, sizeof json, "{\"activation_function\": \"%s\"}", acts[i].name);
        int rc = gpt2_config_parse(&c, json, strlen(json), err);
        CHECK_MSG(rc == KG_OK && c.gelu == acts[i].kind, "%s: rc %d %s", acts[i].name, rc, err);
    }
    const char *ok = "{\"model_type\": \"gpt2\", \"add_cross_attention\": false, "
                     "\"scale_attn_weights\": true, \"scale_attn_by_inverse_layer_idx\": false, "
                     "\"reorder_and_upcast_attn\": true}";
    int rc = gpt2_config_parse(&c, ok, strlen(ok), err);
    CHECK_MSG(rc == KG_OK, "the computed option values: %s", err);
    expect_unsup("activation swish", "{\"activation_function\": \"swish\"}",
                 "activation_function swish");
    expect_unsup("activation quick_gelu", "{\"activation_function\": \"quick_gelu\"}",
                 "activation_function quick_gelu");
    expect_unsup("add_cross_attention true", "{\"add_cross_attention\": true}",
                 "add_cross_attention");
    expect_unsup("scale_attn_by_inverse_layer_idx", "{\"scale_attn_by_inverse_layer_idx\": true}",
                 "scale_attn_by_inverse_layer_idx");
    expect_unsup("scale_attn_weights false", "{\"scale_attn_weights\": false}",
                 "scale_attn_weights");
    expect_unsup("model_type gpt_neo", "{\"model_type\": \"gpt_neo\"}", "model_type gpt_neo");
    expect_bad("add_cross_attention a string", "{\"add_cross_attention\": \"no\"}",
               "add_cross_attention");
}

static void test_bad(void) {
    expect_bad("not JSON", "{\"n_layer\": 12,,}", "JSON");
    expect_bad("empty text", "", "JSON");
    expect_bad("top level an array", "[12, 768]", "object");
    expect_bad("trailing bytes", "{\"n_layer\": 12} {", "trailing");
    expect_bad("n_layer a string", "{\"n_layer\": \"12\"}", "n_layer");
    expect_bad("n_layer 0", "{\"n_layer\": 0}", "n_layer");
    expect_bad("n_layer negative", "{\"n_layer\": -3}", "n_layer");
    expect_bad("n_layer fractional", "{\"n_layer\": 2.5}", "n_layer");
    expect_bad("n_layer huge", "{\"n_layer\": 1e300}", "n_layer");
    expect_bad("n_head a bool", "{\"n_head\": true}", "n_head");
    expect_bad("n_embd an object", "{\"n_embd\": {}}", "n_embd");
    expect_bad("n_embd % n_head != 0", "{\"n_embd\": 770, \"n_head\": 12}", "n_embd");
    expect_bad("vocab_size above the limit", "{\"vocab_size\": 1e12}", "vocab_size");
    expect_bad("n_positions a string", "{\"n_positions\": \"1024\"}", "n_positions");
    expect_bad("n_inner negative", "{\"n_inner\": -1}", "n_inner");
    expect_bad("activation not a string", "{\"activation_function\": 1}", "activation_function");
    expect_bad("epsilon a string", "{\"layer_norm_epsilon\": \"1e-5\"}", "layer_norm_epsilon");
    expect_bad("epsilon 0", "{\"layer_norm_epsilon\": 0}", "layer_norm_epsilon");
    expect_bad("tie_word_embeddings a string", "{\"tie_word_embeddings\": \"yes\"}",
               "tie_word_embeddings");
    expect_bad("eos_token_id negative", "{\"eos_token_id\": -5}", "eos_token_id");
}

// A name holding a NUL (issue 24): cJSON reads "gpt_neo\u0000" as gpt_neo and "relu\u0000x"
// as relu, so each would pass as its prefix; refused, naming the field. A value shown in a
// message stays on one line.
static void test_nul(void) {
    expect_bad("model_type gpt2 + NUL", "{\"model_type\": \"gpt2\\u0000neo\"}",
               "\"model_type\" holds a NUL");
    expect_bad("activation relu + NUL", "{\"activation_function\": \"relu\\u0000x\"}",
               "\"activation_function\" holds a NUL");
    expect_bad("a key with a NUL", "{\"n_layer\\u0000\": 2}", "the key \"n_layer...\"");
    static const char raw[] = "{\"n_layer\": 2}\0{\"n_layer\": 3}";
    char err[KG_ERRLEN] = "";
    Gpt2Config c;
    int rc = gpt2_config_parse(&c, raw, sizeof raw - 1, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "NUL"), "raw NUL: rc %d (%s)", rc, err);
    printf("%-36s -> %s\n", "a raw NUL between two objects", err);
    rc = gpt2_config_parse(&c, "{\"model_type\": \"x\\ny\"}", 22, err);
    CHECK_MSG(rc == KG_EUNSUP && strstr(err, "model_type x?y") && !strchr(err, '\n'),
              "model_type with a newline: rc %d (%s)", rc, err);
    printf("%-36s -> %s\n", "model_type with a newline", err);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

static void test_files(void) {
    char err[KG_ERRLEN] = "", path[1200], dir[1100];
    Gpt2Config c, back;

    snprintf(path, sizeof path, "%s/absent.json", g_tmp);
    int rc = gpt2_config_load(&c, path, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "absent.json"), "missing file: %d %s", rc, err);
    printf("%-36s -> %s\n", "missing config file", err);

    snprintf(path, sizeof path, "%s/empty.json", g_tmp);
    write_file(path, "");
    rc = gpt2_config_load(&c, path, err);
    CHECK_MSG(rc == KG_EFORMAT && err[0], "empty file: %d %s", rc, err);
    printf("%-36s -> %s\n", "empty config file", err);
    unlink(path);

    rc = gpt2_config_load(&c, g_tmp, err);
    CHECK_MSG(rc != KG_OK && err[0], "a directory as config: %d %s", rc, err);
    printf("%-36s -> %s\n", "a directory as the config file", err);

    // save -> load gives the same config
    snprintf(path, sizeof path, "%s/saved.json", g_tmp);
    rc = gpt2_config_parse(&c, KOGPT2_CONFIG, strlen(KOGPT2_CONFIG), err);
    c.gelu = GPT2_GELU_ERF, c.n_inner = 1000, c.tie_embeddings = 0, c.pad_id = -1;
    CHECK_MSG(rc == KG_OK && gpt2_config_save(&c, path, err) == KG_OK, "save: %s", err);
    rc = gpt2_config_load(&back, path, err);
    CHECK_MSG(rc == KG_OK, "load what was saved: %s", err);
    CHECK(rc || (back.n_layer == c.n_layer && back.n_head == c.n_head && back.n_embd == c.n_embd &&
                 back.n_ctx == c.n_ctx && back.vocab_size == c.vocab_size &&
                 back.n_inner == c.n_inner && back.ln_eps == c.ln_eps && back.gelu == c.gelu &&
                 back.bos_id == c.bos_id && back.eos_id == c.eos_id && back.pad_id == c.pad_id &&
                 back.tie_embeddings == c.tie_embeddings));
    unlink(path);

    // model directories missing their parts
    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "backend: %s", err);
    Gpt2 m;
    snprintf(dir, sizeof dir, "%s/nodir", g_tmp);
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "nodir"), "missing dir: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: no such directory", err);

    snprintf(dir, sizeof dir, "%s/model", g_tmp);
    REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "config.json"), "no config.json: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: no config.json", err);

    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, "{\"n_layer\": \"2\"}");
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "n_layer"), "bad config: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: n_layer \"2\"", err);

    write_file(path, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, "
                     "\"n_positions\": 4}");
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "model.safetensors"), "no weights: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: no model.safetensors", err);

    char st_path[1200];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    write_file(st_path, "");
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc != KG_OK && strstr(err, "model.safetensors"), "empty weights: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: empty model.safetensors", err);

    FILE *f = fopen(st_path, "wb"); // a valid file: 8-byte length 16, "{}" and 14 spaces
    REQUIRE(f && fwrite("\x10\0\0\0\0\0\0\0{}              ", 1, 24, f) == 24 && fclose(f) == 0,
            "write %s", st_path);
    rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "wte"), "no tensors at all: %d %s", rc, err);
    printf("%-36s -> %s\n", "gpt2_open: a file with no tensors", err);

    unlink(st_path);
    unlink(path);
    rmdir(dir);
    kg_backend_free(be);
}

// A FIFO (or any non-regular file) as config.json or model.safetensors is refused at once:
// opening it to read would wait for a writer forever (issue 13: start-up hung at "loading").
// alarm() turns a hang into a failure instead of ctest's timeout.
static void test_not_regular(void) {
    char path[1100], err[KG_ERRLEN];
    snprintf(path, sizeof path, "%s/fifo", g_tmp);
    REQUIRE(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
    alarm(20);
    Gpt2Config c;
    int rc = gpt2_config_load(&c, path, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "not a regular file"), "config FIFO: %d %s", rc, err);
    SafeTensors st;
    rc = safetensors_open(&st, path, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "not a regular file"), "weights FIFO: %d %s", rc,
              err);
    rc = gpt2_config_load(&c, g_tmp, err); // a directory
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "not a regular file"), "config dir: %d %s", rc, err);
    alarm(0);
    printf("%-36s -> %s\n", "a FIFO as a model file", err);
    unlink(path);
}

// A NaN or infinite weight, in any dtype, matrix or vector, is refused at load with the
// tensor's name and the value's place (issue 13: such a model served "prob": null).
static void test_nonfinite(void) {
    char dir[900], path[1000], err[KG_ERRLEN]; // testmodel_write's paths hold 1024 bytes
    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "%s", err);
    const KgDtype dts[] = {KG_F32, KG_F16, KG_BF16};
    const uint32_t bits[] = {0x7fc00000u, 0x7c00u, 0xff80u}; // NaN f32, +inf f16, -inf bf16
    const char *names[] = {"transformer.h.1.mlp.c_fc.weight", "transformer.h.0.ln_1.bias",
                           "transformer.wte.weight"};
    const size_t at[] = {17, 3, 0};
    for (int d = 0; d < 3; d++) {
        snprintf(dir, sizeof dir, "%.800s/nonfinite%d", g_tmp, d);
        TestModelSpec spec = {
            .L = 2, .C = 16, .NH = 2, .T = 8, .V = 50, .dtype = dts[d], .seed = 3};
        REQUIRE(!testmodel_write(dir, &spec, err), "%s", err);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        SafeTensors st;
        REQUIRE(!safetensors_open(&st, path, err), "%s", err);
        const StTensor *t = safetensors_find(&st, names[d]);
        REQUIRE(t, "no %s", names[d]);
        long off = (long)((const char *)t->data - (const char *)st.map + at[d] * t->elem_size);
        size_t es = t->elem_size;
        safetensors_close(&st);
        FILE *f = fopen(path, "r+b"); // the value's bytes, little-endian
        REQUIRE(f && fseek(f, off, SEEK_SET) == 0 && fwrite(&bits[d], es, 1, f) == 1 && !fclose(f),
                "patch %s", path);
        Gpt2 m;
        int rc = gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err);
        char want[64];
        snprintf(want, sizeof want, "element %zu", at[d]);
        CHECK_MSG(rc == KG_EFORMAT && strstr(err, names[d] + 12) && strstr(err, want),
                  "non-finite %s: %d %s", names[d], rc, err);
        printf("%-36s -> %s\n", "gpt2_open: a non-finite weight", err);
        if (rc == KG_OK) gpt2_close(&m);
    }
    kg_backend_free(be);
}

int main(void) {
    const char *build = getenv("KG_BUILD_DIR");
    char parent[900];
    snprintf(parent, sizeof parent, "%s/testdata", build ? build : "/tmp");
    mkdir(parent, 0755);
    snprintf(g_tmp, sizeof g_tmp, "%s/cfg-XXXXXX", parent);
    REQUIRE(mkdtemp(g_tmp), "mkdtemp %s: %s", g_tmp, strerror(errno));
    test_valid();
    test_bad();
    test_options();
    test_nul();
    test_files();
    test_not_regular();
    test_nonfinite();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
