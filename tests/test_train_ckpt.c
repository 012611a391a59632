// test_train_ckpt.c — checkpoint directories: save -> gpt2_open serves it with the same
// weights (f32 exactly; f16 to half precision), the sidecar round-trips, a failed save
// leaves the previous checkpoint, ckpt_recover repairs what a kill mid-swap leaves, and
// ckpt_dir_kind tells a checkpoint from a model, an empty --out and one that is no directory;
// a crafted sidecar is refused field by field, and the directory's lock holds off a second
// writer.
#include <fcntl.h>
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
#include "model/kgmath.h"
#include "train/ckpt.h"

// train_state.bin's layout (ckpt.h): 16 bytes, then u64 fields; the names at 120, then m, v.
enum { OFF_B = 48, OFF_T = 56, OFF_RANKS = 64, OFF_ACCUM = 72, OFF_NPARAMS = 80, OFF_SHARD = 96 };
enum { OFF_NNAMES = 112, OFF_NAMES = 120 };

// Copies the sidecar of good into bad with len bytes at off replaced by bytes (and the file
// cut to `cut` bytes when cut is not 0), reads it back with o (may be NULL), and checks that
// it is refused as KG_EFORMAT with a message holding want.
static void refused_state(const char *good, const char *bad, long off, const void *bytes,
                          size_t len, long cut, AdamW *o, const char *want) {
    char from[512], to[512], err[KG_ERRLEN] = "";
    snprintf(from, sizeof from, "%s/" CKPT_STATE_FILE, good);
    snprintf(to, sizeof to, "%s/" CKPT_STATE_FILE, bad);
    mkdir(bad, 0755);
    REQUIRE(!kg_copy_file(from, to, err), "%s", err);
    FILE *f = fopen(to, "r+b");
    REQUIRE(f, "open %s", to);
    if (len) {
        fseek(f, off, SEEK_SET);
        fwrite(bytes, 1, len, f);
    }
    fclose(f);
    if (cut) REQUIRE(!truncate(to, cut), "truncate %s", to);
    CkptState rd;
    int rc = ckpt_state_read(bad, &rd, o, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, want), "want '%s': rc %d, %s", want, rc, err);
    if (!rc)
        ckpt_state_free(&rd);
    else
        printf("refused: %s\n", strstr(err, CKPT_STATE_FILE));
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

// Every field of a crafted train_state.bin is checked before use, the message naming it
// (issue 24): shard names that would leave --data, counts of 0, sizes that do not match the
// file, moments that are not finite.
static void test_state_checks(const char *ck, const char *bad, AdamW *o, size_t n) {
    static const struct {
        const char *name, *want;
    } names[] = {{"../other/train_000000.bin", "shard name 1 '../other/train_000000.bin' is not"},
                 {"/tmp/train_000000.bin", "shard name 1 '/tmp/train_000000.bin' is not"},
                 {"train_/../../x.bin", "is not a train shard's file name"},
                 {"..", "shard name 1 '..' is not"},
                 {"", "shard name 1 '' is not"},
                 {"val_000000.bin", "shard name 1 'val_000000.bin' is not"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char slot[SHARD_NAME_MAX] = {0};
        memcpy(slot, names[i].name, strlen(names[i].name));
        refused_state(ck, bad, OFF_NAMES + SHARD_NAME_MAX, slot, sizeof slot, 0, NULL,
                      names[i].want);
    }
    char unterminated[SHARD_NAME_MAX];
    memset(unterminated, 'a', sizeof unterminated);
    refused_state(ck, bad, OFF_NAMES, unterminated, sizeof unterminated, 0, NULL,
                  "shard name 0 'aaaa");
    unsigned char zero[8] = {0}, big[8];
    refused_state(ck, bad, OFF_B, zero, 8, 0, NULL, ": B (--batch) is 0");
    refused_state(ck, bad, OFF_T, zero, 8, 0, NULL, ": T (--seq) is 0");
    refused_state(ck, bad, OFF_RANKS, zero, 8, 0, NULL, ": ranks is 0");
    refused_state(ck, bad, OFF_ACCUM, zero, 8, 0, NULL, ": grad_accum (--grad-accum) is 0");
    // sizes from the file: checked against its size before anything is allocated
    put_u64(big, (uint64_t)1 << 62);
    refused_state(ck, bad, OFF_NNAMES, big, 8, 0, NULL, "does not match its 4611686018427387904");
    refused_state(ck, bad, OFF_NPARAMS, big, 8, 0, NULL, "4611686018427387904 parameters");
    put_u64(big, UINT64_MAX);
    refused_state(ck, bad, OFF_NPARAMS, big, 8, 0, NULL, "does not match");
    refused_state(ck, bad, 0, NULL, 0, OFF_NAMES + 2 * SHARD_NAME_MAX + 8 * (long)n - 1, NULL,
                  "does not match"); // truncated
    put_u64(big, 3);
    refused_state(ck, bad, OFF_SHARD, big, 8, 0, NULL, "data position shard 3 is past its 2");
    // the moments: m after the names, then v
    const long m_at = OFF_NAMES + 2 * SHARD_NAME_MAX, v_at = m_at + 4 * (long)n;
    const float nan = NAN, inf = -INFINITY, neg = -1e-3f;
    refused_state(ck, bad, m_at + 4 * 123, &nan, 4, 0, o, ": adam m[123] is not finite");
    refused_state(ck, bad, v_at + 4 * (long)(n - 1), &inf, 4, 0, o, "adam v[");
    refused_state(ck, bad, v_at + 4 * 5, &neg, 4, 0, o, ": adam v[5] is negative");

    // the loader takes no name from a file that would leave its directory either
    char names2[2][SHARD_NAME_MAX] = {"train_000000.bin", "../other/train_000000.bin"};
    ShardLoader l;
    char err[KG_ERRLEN];
    CHECK(shard_loader_open(&l, bad, 4, 1, 50, NULL, names2, 2, err) == KG_EFORMAT &&
          strstr(err, "'../other/train_000000.bin' is not a file name in"));
    CHECK(shard_name_ok("train_000123.bin") && !shard_name_ok("train_0/../x.bin") &&
          !shard_name_ok("x/train_0.bin") && !shard_name_ok("train_0.bin.tmp"));
}

// The output directory's lock (issue 24): a second holder is refused naming the first one's
// pid, the lock is close-on-exec, and released (and its file removed) by ckpt_unlock.
static void test_lock(const char *ck) {
    char err[KG_ERRLEN], path[512], want[128];
    int fd, fd2;
    REQUIRE(!ckpt_lock(ck, "kogpt2-train", &fd, err), "%s", err);
    CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    snprintf(want, sizeof want, "is in use by kogpt2-train pid %ld", (long)getpid());
    CHECK_MSG(ckpt_lock(ck, "kogpt2-train export", &fd2, err) == KG_EBUSY && strstr(err, want) &&
                  fd2 == -1,
              "%s", err);
    printf("second lock: %s\n", err);
    snprintf(path, sizeof path, "%s.lock", ck);
    CHECK(!access(path, F_OK));
    ckpt_unlock(ck, fd);
    CHECK(access(path, F_OK)); // removed
    REQUIRE(!ckpt_lock(ck, "kogpt2-train", &fd2, err), "%s", err);
    ckpt_unlock(ck, fd2);
    snprintf(path, sizeof path, "%s/no/such/dir", ck);
    CHECK(ckpt_lock(path, "kogpt2-train", &fd, err) == KG_EIO &&
          strstr(err, "cannot write checkpoints to"));
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
    REQUIRE(!gpt2_open(&served, ck, be, KG_DTYPE_AUTO, err), "%s", err);
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
    // a ZeRO-1 rank reads its shard of the moments back (the file holds all of them)
    AdamW shard;
    size_t lo = n / 3, count = n / 3 + 1;
    REQUIRE(!adamw_init_shard(&shard, be, lo, count, n, err), "%s", err);
    REQUIRE(!ckpt_state_read(ck, &rd, &shard, err), "%s", err);
    CHECK(shard.t == 17 && !memcmp(shard.m, o.m + lo, count * sizeof(float)) &&
          !memcmp(shard.v, o.v + lo, count * sizeof(float)));
    ckpt_state_free(&rd);
    CHECK(ckpt_save(ck, &m, KG_F32, tokf, &st, &shard, err) == KG_EINVAL); // not the whole state
    adamw_free(&shard);
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
    CHECK(!kg_is_dir(tmp) && !kg_is_dir(old));

    // a kill between the two renames: DIR gone, DIR.old complete -> recovered
    CHECK(!rename(ck, old));
    mkdir(tmp, 0755); // and a half-written DIR.tmp
    REQUIRE(!ckpt_recover(ck, err), "%s", err);
    CHECK(kg_is_dir(ck) && !kg_is_dir(old) && !kg_is_dir(tmp) && ckpt_exists(ck));
    // a kill after the swap, before DIR.old was removed
    mkdir(old, 0755);
    REQUIRE(!ckpt_recover(ck, err), "%s", err);
    CHECK(kg_is_dir(ck) && !kg_is_dir(old));

    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    test_state_checks(ck, bad, &o2, n);
    test_lock(ck);

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
    // without the sidecar, nothing; a file or a directory with a subdirectory is no --out;
    // a model beside a file no save writes is the user's (issue 32 item 4), named first
    CkptDirKind kind;
    char first[64];
    CHECK(!ckpt_dir_kind(ck, &kind, first, sizeof first, err) && kind == CKPT_DIR_CKPT);
    CHECK(!ckpt_dir_kind(ex, &kind, first, sizeof first, err) && kind == CKPT_DIR_MODEL &&
          first[0]);
    snprintf(path, sizeof path, "%s/notes.txt", ex);
    FILE *nf = fopen(path, "w");
    REQUIRE(nf && fputs("mine\n", nf) >= 0 && !fclose(nf), "%s", path);
    CHECK(!ckpt_dir_kind(ex, &kind, first, sizeof first, err) && kind == CKPT_DIR_OTHER &&
          !strcmp(first, "notes.txt"));
    unlink(path);
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
