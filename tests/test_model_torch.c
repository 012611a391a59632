// test_model_torch.c — the checkpoints users actually have (issue 14), written by torch
// (tests/ref/torch_ckpt_ref.py into $KG_BUILD_DIR/testdata/torch, from the safetensors cases
// of gpt2_ref.py in testdata/gpt2):
//   (a) pytorch_model.bin in f32, f16 (nn.Parameters), bf16, tied (one storage), untied, with
//       the old attn.bias buffers, with non-contiguous views, with ZIP64 records; sharded
//       .bin and .safetensors sets: logits equal to the safetensors load of the same weights
//       bit for bit, and to the float64 reference within the parity tolerance;
//   (b) zero-copy: contiguous weights point into the mapping, a tied head at wte's bytes,
//       only the non-contiguous views copied;
//   (c) the Hugging Face cache by repo id (refs/main, @REV, a commit, HF_HOME, XDG), a local
//       directory before the cache, and the line that says how to download what is missing;
//   (d) format preference, TensorFlow-only directories;
//   (e) every malicious or broken file refused with its one line (bad/EXPECT.json), nothing
//       executed;
//   (f) gpt2_convert and `kogpt2 convert`: what they write loads to the same logits.
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "model/gpt2.h"
#include "model/hfcache.h"
#include "model/sampler.h"

#define REF_MAGIC   0x5250474Bu // gpt2_ref.py's ref.bin: "KGPR"
#define REF_VERSION 1u
#define PARITY_TOL  1e-4 // test_gpt2_parity.c's: float32 arithmetic vs the float64 reference

static char g_gpt2[1024], g_torch[1024], g_tmp[1100];
static KgBackend *g_be;

typedef struct {
    int V, n;
    int *tokens;     // (n)
    float *logprobs; // (n, V)
} Ref;

static void ref_load(Ref *r, const char *case_name) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/ref.bin", g_gpt2, case_name);
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "open %s: %s", path, strerror(errno));
    uint32_t head[2];
    int32_t dims[6];
    REQUIRE(fread(head, 4, 2, f) == 2 && head[0] == REF_MAGIC && head[1] == REF_VERSION &&
                fread(dims, 4, 6, f) == 6,
            "%s: not a reference file", path);
    r->V = dims[4], r->n = dims[5];
    r->tokens = malloc((size_t)r->n * sizeof *r->tokens);
    r->logprobs = malloc((size_t)r->n * r->V * sizeof *r->logprobs);
    REQUIRE(r->tokens && r->logprobs && fread(r->tokens, 4, (size_t)r->n, f) == (size_t)r->n &&
                fread(r->logprobs, 4, (size_t)r->n * r->V, f) == (size_t)r->n * r->V,
            "%s: short", path);
    fclose(f);
}

static void ref_free(Ref *r) {
    free(r->tokens);
    free(r->logprobs);
}

// Logits (n, V) of every position of r's tokens under the opened model m (malloc'd).
static float *model_logits(const Gpt2 *m, const Ref *r) {
    char err[KG_ERRLEN];
    Gpt2State s;
    KvSeq kv;
    size_t n = (size_t)r->n, V = m->config.vocab_size;
    REQUIRE(!gpt2_state_init(&s, m, n, n, err) && !kv_init(&kv, m, err), "%s", err);
    Gpt2Seq q = {&kv, r->tokens, n, GPT2_LOGITS_ALL};
    REQUIRE(!gpt2_forward(m, &s, &q, 1, err), "forward: %s", err);
    float *out = malloc(n * V * sizeof *out);
    REQUIRE(out, "oom");
    memcpy(out, s.logits_host, n * V * sizeof *out);
    kv_free(&kv);
    gpt2_state_free(&s, m);
    return out;
}

// max |log-softmax(logits) - ref| over every position and the whole vocabulary.
static double ref_diff(const float *logits, const Ref *r) {
    double worst = 0;
    for (int i = 0; i < r->n; i++) {
        const float *z = logits + (size_t)i * r->V;
        double lse = logits_logsumexp(z, (size_t)r->V, 1.0f);
        for (int v = 0; v < r->V; v++) {
            double d = fabs((z[v] - lse) - r->logprobs[(size_t)i * r->V + v]);
            if (!(d <= worst)) worst = d;
        }
    }
    return worst;
}

static int in_map(const Gpt2 *m, const void *p) {
    for (size_t f = 0; f < m->src.n_files; f++) {
        const char *b = m->src.files[f].map;
        if ((const char *)p >= b && (const char *)p < b + m->src.files[f].map_size) return 1;
    }
    return 0;
}

static size_t copied(const Gpt2 *m) {
    size_t n = 0;
    for (size_t f = 0; f < m->src.n_files; f++)
        n += m->src.files[f].n_copied;
    return n;
}

// Opens dir (under g_torch unless absolute), checks its logits against the safetensors case
// bit for bit and against the reference; leaves the model open in *m for more checks.
static void check_same(Gpt2 *m, const char *dir, const char *case_name) {
    char err[KG_ERRLEN], path[1300], st_dir[1200];
    if (dir[0] == '/')
        snprintf(path, sizeof path, "%s", dir);
    else
        snprintf(path, sizeof path, "%s/%s", g_torch, dir);
    snprintf(st_dir, sizeof st_dir, "%s/%s", g_gpt2, case_name);
    Ref r;
    ref_load(&r, case_name);
    Gpt2 st;
    REQUIRE(!gpt2_open(&st, st_dir, g_be, KG_DTYPE_AUTO, err), "%s: %s", st_dir, err);
    int rc = gpt2_open(m, path, g_be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_OK, "%s: %s", dir, err);
    if (rc) {
        gpt2_close(&st);
        ref_free(&r);
        return;
    }
    float *a = model_logits(m, &r), *b = model_logits(&st, &r);
    size_t bytes = (size_t)r.n * r.V * sizeof *a;
    double d = ref_diff(a, &r);
    CHECK_MSG(!memcmp(a, b, bytes), "%s: logits differ from %s's safetensors load", dir, case_name);
    CHECK_MSG(d <= PARITY_TOL, "%s: max |d logprob| %.3g vs the reference", dir, d);
    const char *label = strstr(dir, "/snapshots/") ? strstr(dir, "/models--") + 1 : dir;
    printf("%-14.40s = %-15s bit for bit, |ref| %.1e  (%s)%s%s\n", label, case_name, d, m->src.what,
           m->warning[0] ? "  warning: " : "", m->warning);
    free(a);
    free(b);
    gpt2_close(&st);
    ref_free(&r);
}

// (a), (b), (d)
static void test_formats(void) {
    Gpt2 m;
    check_same(&m, "pt_tied_f32", "tiny_tanh_f32");
    if (m.src.n_files) { // every tensor in place, the tied head at wte's bytes
        const StTensor *wte = wsrc_find(&m.src, "transformer.wte.weight");
        const StTensor *head = wsrc_find(&m.src, "lm_head.weight");
        CHECK(copied(&m) == 0 && in_map(&m, m.w.wte.data) && in_map(&m, m.layers[1].fc_w.data));
        CHECK(wte && head && wte->data == head->data && m.w.lm_head.data == m.w.wte.data);
        CHECK(strstr(m.src.what, "pytorch_model.bin: F32") && !m.warning[0]);
        CHECK((uintptr_t)m.layers[0].qkv_w.data % 64 == 0); // PyTorch aligns its entries
        gpt2_close(&m);
    }
    check_same(&m, "pt_param_f16", "small_tanh_f16");
    if (m.src.n_files) {
        CHECK(m.dtype == KG_F16 && copied(&m) == 0 && in_map(&m, m.layers[2].qkv_w.data));
        gpt2_close(&m);
    }
    check_same(&m, "pt_bf16", "small_erf_bf16");
    if (m.src.n_files) {
        CHECK(m.dtype == KG_BF16 && copied(&m) == 0 && strstr(m.src.what, "BF16"));
        gpt2_close(&m);
    }
    check_same(&m, "pt_untied_f32", "odd_untied_f32");
    if (m.src.n_files) {
        CHECK(m.w.lm_head.data != m.w.wte.data && in_map(&m, m.w.lm_head.data));
        gpt2_close(&m);
    }
    check_same(&m, "pt_views_f32", "noprefix_f32");
    if (m.src.n_files) { // c_fc transposed, wpe and a vector strided: copied; the rest in place
        CHECK_MSG(copied(&m) == 3, "%zu views copied, want 3", copied(&m));
        CHECK(!in_map(&m, m.layers[0].fc_w.data) && !in_map(&m, m.w.wpe.data));
        CHECK(in_map(&m, m.layers[0].qkv_w.data) && in_map(&m, m.layers[0].attproj_w.data));
        CHECK_MSG(strstr(m.warning, "ignored 1 tensor") && strstr(m.warning, "extra.scale"),
                  "warning: '%s'", m.warning);
        gpt2_close(&m);
    }
    check_same(&m, "pt_zip64_f32", "tiny_tanh_f32");
    if (m.src.n_files) gpt2_close(&m);
    check_same(&m, "sharded_bin", "odd_untied_f32");
    if (m.src.n_files) {
        CHECK(m.src.n_files == 2 && strstr(m.src.what, "in 2 shards") &&
              strstr(m.src.what, "pytorch_model.bin.index.json"));
        gpt2_close(&m);
    }
    check_same(&m, "sharded_st", "small_tanh_f16");
    if (m.src.n_files) {
        CHECK(m.src.n_files == 2 && strstr(m.src.what, "model.safetensors.index.json"));
        gpt2_close(&m);
    }
    check_same(&m, "prefer", "tiny_tanh_f32"); // the .bin there is another model
    if (m.src.n_files) {
        CHECK(!strncmp(m.src.what, "model.safetensors:", 18));
        gpt2_close(&m);
    }
    char dir[1200], err[KG_ERRLEN];
    snprintf(dir, sizeof dir, "%s/tf_only", g_torch);
    int rc = gpt2_open(&m, dir, g_be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_EUNSUP && strstr(err, "tf_model.h5") && strstr(err, "from_tf=True"),
              "TensorFlow only: %d %s", rc, err);
    printf("%-14s -> %s\n", "tf_only", err);
}

// kogpt2-train --init reads the same sources: its parameter buffer from a PyTorch file of
// views equals the one from the safetensors case.
static void test_train_init(void) {
    char pt[1200], st[1200], err[KG_ERRLEN];
    snprintf(pt, sizeof pt, "%s/pt_views_f32", g_torch);
    snprintf(st, sizeof st, "%s/noprefix_f32", g_gpt2);
    Gpt2 a, b;
    REQUIRE(!gpt2_train_model_new(&a, NULL, pt, g_be, 0, err), "train init %s: %s", pt, err);
    REQUIRE(!gpt2_train_model_new(&b, NULL, st, g_be, 0, err), "train init %s: %s", st, err);
    size_t n = gpt2_param_count(&a.config);
    CHECK(n == gpt2_param_count(&b.config) && !memcmp(a.params, b.params, n * sizeof(float)));
    printf("%-14s = %-15s %zu parameters for training, bit for bit\n", "pt_views_f32",
           "noprefix_f32", n);
    gpt2_close(&a);
    gpt2_close(&b);
}

// (c)
static void expect_resolved(const char *model, const char *case_name, const char *what) {
    char dir[4096], err[KG_ERRLEN];
    int rc = hfcache_resolve(model, dir, sizeof dir, err);
    CHECK_MSG(rc == KG_OK && strstr(dir, "/snapshots/"), "%s: %d %s", model, rc, err);
    if (rc) return;
    Gpt2 m;
    check_same(&m, dir, case_name);
    if (m.src.n_files) {
        CHECK_MSG(strstr(m.src.what, what), "%s: loaded %s, want %s", model, m.src.what, what);
        gpt2_close(&m);
    }
}

static void test_hf_cache(void) {
    char hub[1200], env[1200], dir[4096], err[KG_ERRLEN], cwd[PATH_MAX];
    snprintf(hub, sizeof hub, "%s/hub", g_torch);
    setenv("HF_HUB_CACHE", hub, 1);
    expect_resolved("kgtest/tiny", "tiny_tanh_f32", "pytorch_model.bin");
    expect_resolved("kgtest/tiny@v1", "tiny_tanh_f32", "model.safetensors");
    expect_resolved("kgtest/sharded", "odd_untied_f32", "in 2 shards");

    // a commit hash names its snapshot
    char ref[1300], hash[64] = "";
    snprintf(ref, sizeof ref, "%s/models--kgtest--tiny/refs/main", hub);
    FILE *f = fopen(ref, "r");
    REQUIRE(f && fgets(hash, sizeof hash, f), "read %s", ref);
    fclose(f);
    char by_hash[128];
    snprintf(by_hash, sizeof by_hash, "kgtest/tiny@%s", hash);
    expect_resolved(by_hash, "tiny_tanh_f32", "pytorch_model.bin");

    // not there: where it looked, and the command that downloads it
    int rc = hfcache_resolve("kgtest/absent", dir, sizeof dir, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "models--kgtest--absent/refs/main") &&
                  strstr(err, "huggingface-cli download kgtest/absent"),
              "absent repo: %d %s", rc, err);
    printf("%-14s -> %s\n", "absent repo", err);
    rc = hfcache_resolve("kgtest/tiny@v9", dir, sizeof dir, err);
    CHECK_MSG(rc == KG_EIO && strstr(err, "refs/v9") && strstr(err, "--revision v9"),
              "absent revision: %d %s", rc, err);
    printf("%-14s -> %s\n", "absent rev", err);
    Gpt2 m;
    rc = gpt2_open(&m, "kgtest/absent", g_be, KG_DTYPE_AUTO, err); // gpt2_open takes a dir
    CHECK(rc != KG_OK);

    // not shaped ORG/NAME: returned as it is, for gpt2_open to report
    const char *as_is[] = {"/no/such/dir",        "./kgtest/tiny",  "a/b/c",
                           "kgtest/tiny@../../x", "kgtest/../tiny", "org/na--me"};
    for (size_t i = 0; i < sizeof as_is / sizeof as_is[0]; i++) {
        rc = hfcache_resolve(as_is[i], dir, sizeof dir, err);
        CHECK_MSG(rc == KG_OK && !strcmp(dir, as_is[i]), "%s -> %d %s", as_is[i], rc, dir);
    }

    // HF_HOME/hub, then XDG_CACHE_HOME/huggingface/hub
    unsetenv("HF_HUB_CACHE");
    snprintf(env, sizeof env, "%s/hfhome", g_torch);
    setenv("HF_HOME", env, 1);
    expect_resolved("kgtest/tiny", "tiny_tanh_f32", "pytorch_model.bin");
    unsetenv("HF_HOME");
    snprintf(env, sizeof env, "%s/xdg/huggingface", g_tmp);
    REQUIRE(!mkdir(g_tmp, 0755) || errno == EEXIST, "mkdir");
    snprintf(dir, sizeof dir, "%s/xdg", g_tmp);
    mkdir(dir, 0755);
    mkdir(env, 0755);
    snprintf(dir, sizeof dir, "%s/hub", env);
    REQUIRE(!symlink(hub, dir) || errno == EEXIST, "symlink %s", dir);
    snprintf(env, sizeof env, "%s/xdg", g_tmp);
    setenv("XDG_CACHE_HOME", env, 1);
    expect_resolved("kgtest/sharded", "odd_untied_f32", "in 2 shards");
    unsetenv("XDG_CACHE_HOME");

    // a local directory shaped like a repo id is the directory
    REQUIRE(getcwd(cwd, sizeof cwd) && !chdir(g_tmp), "chdir %s", g_tmp);
    mkdir("kgtest", 0755);
    mkdir("kgtest/tiny", 0755);
    setenv("HF_HUB_CACHE", hub, 1);
    rc = hfcache_resolve("kgtest/tiny", dir, sizeof dir, err);
    CHECK_MSG(rc == KG_OK && !strcmp(dir, "kgtest/tiny"), "local dir first: %s", dir);
    REQUIRE(!chdir(cwd), "chdir back");
}

// (e)
static void test_refused(void) {
    char path[1300], err[KG_ERRLEN];
    snprintf(path, sizeof path, "%s/bad/EXPECT.json", g_torch);
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "open %s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *j_root = cJSON_Parse(text), *j_e;
    REQUIRE(cJSON_IsObject(j_root), "%s: not JSON", path);
    int n = 0;
    cJSON_ArrayForEach(j_e, j_root) {
        Gpt2 m;
        snprintf(path, sizeof path, "%s/bad/%s", g_torch, j_e->string);
        err[0] = '\0';
        int rc = gpt2_open(&m, path, g_be, KG_DTYPE_AUTO, err);
        const char *want = cJSON_GetStringValue(j_e);
        CHECK_MSG(rc != KG_OK && want && strstr(err, want) && !strchr(err, '\n'),
                  "%s: rc %d, '%s' does not say '%s'", j_e->string, rc, err, want);
        if (rc == KG_OK) gpt2_close(&m);
        // the message without the directory, which is the same for all
        const char *tail = strstr(err, j_e->string);
        printf("%-20s -> %s\n", j_e->string, tail ? tail + strlen(j_e->string) + 1 : err);
        n++;
    }
    cJSON_Delete(j_root);
    CHECK_MSG(n >= 20, "only %d refused files", n);
    snprintf(path, sizeof path, "%s/bad/PWNED", g_torch);
    CHECK_MSG(access(path, F_OK) != 0, "%s exists: something ran", path);
}

// (f)
static void test_convert(void) {
    char out[1300], src[1200], err[KG_ERRLEN], what[KG_ERRLEN], path[1400];
    Gpt2 m;
    snprintf(src, sizeof src, "%s/pt_tied_f32", g_torch);
    snprintf(out, sizeof out, "%s/conv_auto", g_tmp);
    int rc = gpt2_convert(src, out, KG_DTYPE_AUTO, NULL, what, err);
    CHECK_MSG(rc == KG_OK && strstr(what, "pytorch_model.bin"), "convert: %s", err);
    check_same(&m, out, "tiny_tanh_f32");
    if (m.src.n_files) {
        CHECK(!strncmp(m.src.what, "model.safetensors: F32", 22) && !m.warning[0]);
        gpt2_close(&m);
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
    CHECK_MSG(access(path, R_OK) == 0, "%s was not copied", path);

    snprintf(src, sizeof src, "%s/pt_views_f32", g_torch);
    snprintf(out, sizeof out, "%s/conv_views", g_tmp);
    rc = gpt2_convert(src, out, KG_DTYPE_AUTO, NULL, NULL, err);
    CHECK_MSG(rc == KG_OK, "convert views: %s", err);
    check_same(&m, out, "noprefix_f32");
    if (m.src.n_files) {
        CHECK(copied(&m) == 0 && !m.warning[0]); // clean: contiguous, no extras
        gpt2_close(&m);
    }

    snprintf(src, sizeof src, "%s/sharded_bin", g_torch);
    snprintf(out, sizeof out, "%s/conv_bf16", g_tmp);
    rc = gpt2_convert(src, out, KG_BF16, NULL, NULL, err);
    CHECK_MSG(rc == KG_OK, "convert to bf16: %s", err);
    rc = gpt2_open(&m, out, g_be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_OK, "open bf16: %s", err);
    if (!rc) {
        const StTensor *t = wsrc_find(&m.src, "transformer.ln_f.weight");
        CHECK(m.dtype == KG_BF16 && t && t->dtype == KG_BF16 && !m.config.tie_embeddings);
        CHECK(strstr(m.src.what, "BF16"));
        gpt2_close(&m);
    }
    rc = gpt2_convert(src, out, 7, NULL, NULL, err);
    CHECK(rc == KG_EINVAL);

    // the command line, from the HF cache by repo id
    const char *build = getenv("KG_BUILD_DIR");
    char cmd[4096];
    snprintf(path, sizeof path, "%s/kogpt2", build ? build : ".");
    if (access(path, X_OK)) {
        printf("SKIP: kogpt2 convert: %s is not built\n", path);
        return;
    }
    snprintf(out, sizeof out, "%s/conv_cli", g_tmp);
    snprintf(cmd, sizeof cmd, "%s convert --model kgtest/tiny --out %s --dtype f16", path, out);
    rc = system(cmd);
    CHECK_MSG(rc == 0, "%s: exit %d", cmd, rc);
    rc = gpt2_open(&m, out, g_be, KG_DTYPE_AUTO, err);
    CHECK_MSG(rc == KG_OK, "open what kogpt2 convert wrote: %s", err);
    if (!rc) {
        CHECK(m.dtype == KG_F16 && strstr(m.src.what, "model.safetensors: F16"));
        gpt2_close(&m);
    }
    snprintf(cmd, sizeof cmd, "%s convert --model kgtest/absent --out %s/x 2>/dev/null", path,
             g_tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s convert --model %s --out %s/x --dtype f8 2>/dev/null", path, src,
             g_tmp);
    CHECK(system(cmd) != 0);
}

int main(void) {
    const char *build = getenv("KG_BUILD_DIR");
    snprintf(g_gpt2, sizeof g_gpt2, "%s/testdata/gpt2", build ? build : ".");
    snprintf(g_torch, sizeof g_torch, "%s/testdata/torch", build ? build : ".");
    char stamp[1100];
    snprintf(stamp, sizeof stamp, "%s/STAMP", g_torch);
    if (access(stamp, R_OK)) SKIP("%s is absent (the torch_testdata fixture; needs torch)", stamp);
    snprintf(g_tmp, sizeof g_tmp, "%s/testdata/torch-run-%d", build ? build : ".", (int)getpid());
    REQUIRE(!mkdir(g_tmp, 0755), "mkdir %s: %s", g_tmp, strerror(errno));
    char err[KG_ERRLEN];
    REQUIRE((g_be = kg_cpu_backend_new(2, err)), "backend: %s", err);
    test_formats();
    test_train_init();
    test_hf_cache();
    test_refused();
    test_convert();
    kg_backend_free(g_be);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
