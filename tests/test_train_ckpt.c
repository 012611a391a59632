// test_train_ckpt.c — checkpoint directories: save -> gpt2_open serves it with the same
// weights (f32 exactly; f16 to half precision), the sidecar round-trips, a failed save
// leaves the previous checkpoint, ckpt_recover repairs what a kill mid-swap leaves, and
// ckpt_dir_kind tells a checkpoint from a model, an empty --out and one that is no directory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "model/kgmath.h"
#include "train/ckpt.h"

static int is_dir(const char *p) {
    struct stat sb;
    return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

int main(void) {
    char err[KG_ERRLEN], dir[256], path[512], tokf[512];
    snprintf(dir, sizeof dir, "/tmp/test_train_ckpt.%d", (int)getpid());
    mkdir(dir, 0755);
    snprintf(tokf, sizeof tokf, "%s/tok.model", dir);
    FILE *f = fopen(tokf, "wb");
    fputs("not really a tokenizer, only copied", f);
    fclose(f);

    KgBackend *be = kg_cpu_backend_new(1, err);
    REQUIRE(be, "%s", err);
    Gpt2Config c = gpt2_config_shape(2, 16, 2, 8, 50);
    c.bos_id = 1;
    c.eos_id = 2;
    Gpt2 m;
    REQUIRE(!gpt2_train_model_new(&m, &c, NULL, be, 7, err), "%s", err);
    size_t n = gpt2_param_count(&c);
    AdamW o;
    REQUIRE(!adamw_init(&o, be, n, err), "%s", err);
    for (size_t i = 0; i < n; i++) {
        o.m[i] = (float)i * 0.5f;
        o.v[i] = (float)i * 0.25f;
    }
    o.t = 17;
    char names[2][SHARD_NAME_MAX] = {"train_000001.bin", "train_000000.bin"};
    CkptState st = {.step = 17,
                    .total_steps = 100,
                    .seed = 5,
                    .B = 4,
                    .T = 8,
                    .ranks = 2,
                    .grad_accum = 3,
                    .n_params = n,
                    .pos = {1, 1, 9},
                    .names = names,
                    .n_names = 2};
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    REQUIRE(!ckpt_save(ck, &m, KG_F32, tokf, &st, &o, err), "%s", err);
    CHECK(ckpt_exists(ck));
    snprintf(path, sizeof path, "%s/tok.model", ck);
    CHECK(!access(path, R_OK));

    // served as it is: same weights
    Gpt2 served;
    REQUIRE(!gpt2_open(&served, ck, be, GPT2_DTYPE_AUTO, err), "%s", err);
    CHECK(served.config.n_layer == 2 && served.config.vocab_size == 50 &&
          served.config.eos_id == 2);
    Gpt2 back;
    REQUIRE(!gpt2_train_model_new(&back, &c, ck, be, 0, err), "%s", err);
    CHECK_MSG(!memcmp(back.params, m.params, n * sizeof(float)), "f32 checkpoint not bit-exact");
    gpt2_close(&back);
    gpt2_close(&served);

    // the sidecar
    CkptState rd;
    AdamW o2;
    REQUIRE(!adamw_init(&o2, be, n, err), "%s", err);
    REQUIRE(!ckpt_state_read(ck, &rd, &o2, err), "%s", err);
    CHECK(rd.step == 17 && rd.total_steps == 100 && rd.seed == 5 && rd.B == 4 && rd.T == 8 &&
          rd.ranks == 2 && rd.grad_accum == 3 && rd.n_params == n);
    CHECK(rd.pos.epoch == 1 && rd.pos.shard == 1 && rd.pos.window == 9 && rd.n_names == 2 &&
          !strcmp(rd.names[0], "train_000001.bin"));
    CHECK(o2.t == 17 && !memcmp(o2.m, o.m, n * sizeof(float)) &&
          !memcmp(o2.v, o.v, n * sizeof(float)));
    ckpt_state_free(&rd);
    AdamW small;
    REQUIRE(!adamw_init(&small, be, n - 1, err), "%s", err);
    CHECK(ckpt_state_read(ck, &rd, &small, err) == KG_EFORMAT); // another model's state
    adamw_free(&small);

    // a failed save (missing tokenizer file) keeps the previous checkpoint
    st.step = 18;
    CHECK(ckpt_save(ck, &m, KG_F32, "/nonexistent/tok.model", &st, &o, err) == KG_EIO);
    REQUIRE(!ckpt_state_read(ck, &rd, NULL, err), "%s", err);
    CHECK(rd.step == 17);
    ckpt_state_free(&rd);
    char tmp[400], old[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", ck);
    snprintf(old, sizeof old, "%s.old", ck);
    CHECK(!is_dir(tmp) && !is_dir(old));

    // a kill between the two renames: DIR gone, DIR.old complete -> recovered
    CHECK(!rename(ck, old));
    mkdir(tmp, 0755); // and a half-written DIR.tmp
    REQUIRE(!ckpt_recover(ck, err), "%s", err);
    CHECK(is_dir(ck) && !is_dir(old) && !is_dir(tmp) && ckpt_exists(ck));
    // a kill after the swap, before DIR.old was removed
    mkdir(old, 0755);
    REQUIRE(!ckpt_recover(ck, err), "%s", err);
    CHECK(is_dir(ck) && !is_dir(old));

    // export-style save in f16: no sidecar, weights to half precision
    char ex[300];
    snprintf(ex, sizeof ex, "%s/ex", dir);
    REQUIRE(!ckpt_save(ex, &m, KG_F16, tokf, NULL, NULL, err), "%s", err);
    CHECK(!ckpt_exists(ex));
    REQUIRE(!gpt2_train_model_new(&back, &c, ex, be, 0, err), "%s", err);
    float maxd = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(back.params[i] - kg_f16_to_f32(kg_f32_to_f16(m.params[i])));
        maxd = d > maxd ? d : maxd;
    }
    CHECK_MSG(maxd == 0, "f16 export differs from rounding by %g", maxd);
    gpt2_close(&back);

    // what an --out holds, for the trainer's refusals (issue 13): a checkpoint, a model
    // without the sidecar, nothing; a file or a directory with a subdirectory is no --out
    CkptDirKind kind;
    char first[64];
    CHECK(!ckpt_dir_kind(ck, &kind, first, sizeof first, err) && kind == CKPT_DIR_CKPT);
    CHECK(!ckpt_dir_kind(ex, &kind, first, sizeof first, err) && kind == CKPT_DIR_OTHER &&
          first[0]);
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(!ckpt_dir_kind(path, &kind, NULL, 0, err) && kind == CKPT_DIR_EMPTY);
    mkdir(path, 0755);
    CHECK(!ckpt_dir_kind(path, &kind, first, sizeof first, err) && kind == CKPT_DIR_EMPTY &&
          !first[0]);
    CHECK(ckpt_dir_kind(tokf, &kind, NULL, 0, err) == KG_EINVAL); // a file
    snprintf(path, sizeof path, "%s/none/sub", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(ckpt_dir_kind(path, &kind, NULL, 0, err) == KG_EINVAL && strstr(err, "sub"));

    adamw_free(&o);
    adamw_free(&o2);
    gpt2_close(&m);
    kg_backend_free(be);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    if (system(path)) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
