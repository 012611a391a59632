// test_train_shard.c — prepare + shard reader round trip.
//   test_train_shard TOKENIZER
// Writes a small corpus (.txt, .tsv with a header and ids, .csv with a quoted field that
// spans lines and "" escapes, a .gz text file, a .json file that a directory walk skips),
// prepares it, and checks: the train and val shards hold exactly tok_encode(document) + EOS
// for each document in order (every 3rd document held out), header counts and text bytes;
// the loader visits every window once per epoch, is deterministic in its seed, resumes from
// a saved position exactly, and picks up a shard dropped into the directory at the next
// epoch boundary; uint32 shards read back; a corrupt shard is rejected; lines that are not
// UTF-8, hold a NUL or pass max_line_bytes are dropped and counted.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "train/prepare.h"
#include "train/shard.h"

static char dir[256];

static void write_file(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/in/%s", dir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "open %s", path);
    fputs(text, f);
    fclose(f);
}

// Reads all shards with prefix in name order into one id array.
static int *read_all(const char *data, const char *prefix, size_t *n, ShardHeader *sum) {
    char(*names)[SHARD_NAME_MAX];
    size_t k;
    REQUIRE(!shard_list(data, prefix, &names, &k, NULL), "list");
    int *ids = NULL;
    *n = 0;
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < k; i++) {
        Shard s;
        char err[KG_ERRLEN];
        REQUIRE(!shard_open(&s, data, names[i], err), "%s", err);
        ids = realloc(ids, (*n + s.h.n_tokens) * sizeof *ids);
        for (uint64_t j = 0; j < s.h.n_tokens; j++)
            ids[(*n)++] = shard_id(&s, j);
        sum->n_docs += s.h.n_docs;
        sum->n_tokens += s.h.n_tokens;
        sum->text_bytes += s.h.text_bytes;
        CHECK(s.h.dtype_size == 2);
        shard_close(&s);
    }
    free(names);
    return ids;
}

static void append_doc(int **ids, size_t *n, const Tokenizer *tok, const char *text, int eos,
                       uint64_t *bytes) {
    int *d;
    size_t k;
    REQUIRE(!tok_encode(tok, text, strlen(text), &d, &k, NULL), "encode %s", text);
    *ids = realloc(*ids, (*n + k + 1) * sizeof **ids);
    memcpy(*ids + *n, d, k * sizeof *d);
    (*ids)[*n + k] = eos;
    *n += k + 1;
    *bytes += strlen(text) + 1;
    free(d);
}

// The next window and the shard it came from.
static void next_window(ShardLoader *l, int *in, int *tg, char *from) {
    char err[KG_ERRLEN];
    REQUIRE(!shard_loader_next(l, in, tg, 1, err), "%s", err);
    snprintf(from, SHARD_NAME_MAX, "%s", l->cur.name);
}

// Writes n bytes to dir/in/name; path gets its path.
static void write_bytes(char *path, size_t cap, const char *name, const char *bytes, size_t n) {
    snprintf(path, cap, "%s/in/%s", dir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "open %s", path);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

// Whether data's train shards hold exactly the documents docs (each + EOS).
static int train_ids_are(const Tokenizer *tok, int eos, const char *data, const char *const *docs,
                         size_t n_docs) {
    int *want = NULL;
    size_t n_want = 0, n_got;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n_docs; i++)
        append_doc(&want, &n_want, tok, docs[i], eos, &bytes);
    ShardHeader sum;
    int *got = read_all(data, "train_", &n_got, &sum);
    int same = n_got == n_want && !memcmp(got, want, n_want * sizeof *got);
    free(got);
    free(want);
    return same;
}

// Lines that are not UTF-8 or hold a NUL are dropped and counted, and a NUL does not end a
// line early (the line after one is read whole); input with nothing else is an error that
// leaves no directory behind; SHARD_REPLACE replaces the shards, numbered from 0 again.
static void test_dropped(const Tokenizer *tok, int eos) {
    char err[KG_ERRLEN], data[512], none[512], mixed[600], garbage[600], gz[600];
    snprintf(data, sizeof data, "%s/dropped", dir);
    snprintf(none, sizeof none, "%s/none", dir);
    snprintf(gz, sizeof gz, "%s/in/c.txt.gz", dir);
    const char mixed_text[] = "나는 학교에 갔다\n\xFF\xFE bad\nab\0cd\n우리는 바다에 갔다\n";
    write_bytes(mixed, sizeof mixed, "mixed.txt", mixed_text, sizeof mixed_text - 1);
    const char garbage_bytes[] = "\xC0\xC1\n\0\0\0\n\xED\xA0\x80\n";
    write_bytes(garbage, sizeof garbage, "garbage.bin", garbage_bytes, sizeof garbage_bytes - 1);
    const char *kept[] = {"나는 학교에 갔다", "우리는 바다에 갔다"};

    const char *mixed_in[] = {mixed};
    ShardPrepareArgs pa = {.inputs = mixed_in, .n_inputs = 1, .out_dir = data};
    ShardPrepareStats st;
    REQUIRE(!shard_prepare(tok, &pa, &st, err), "%s", err);
    CHECK_MSG(st.docs == 2 && st.dropped_utf8 == 1 && st.dropped_nul == 1,
              "%llu documents, %llu dropped for UTF-8, %llu for NUL", (unsigned long long)st.docs,
              (unsigned long long)st.dropped_utf8, (unsigned long long)st.dropped_nul);
    char summary[512];
    shard_prepare_dropped(&st, summary, sizeof summary);
    CHECK_MSG(strstr(summary, "2 lines dropped") && strstr(summary, "mixed.txt:2"), "%s", summary);
    CHECK_MSG(train_ids_are(tok, eos, data, kept, 2), "ids around the dropped lines differ");

    // nothing but dropped lines: an error with the counts, and no directory made
    const char *garbage_in[] = {garbage};
    ShardPrepareArgs bad = {.inputs = garbage_in, .n_inputs = 1, .out_dir = none};
    CHECK(shard_prepare(tok, &bad, NULL, err) == KG_EINVAL);
    CHECK_MSG(strstr(err, "3 lines dropped (2 not UTF-8, 1 with NUL"), "%s", err);
    CHECK(access(none, F_OK));
    // ... and into a directory with shards, even SHARD_REPLACE keeps them
    bad.out_dir = data;
    bad.mode = SHARD_REPLACE;
    CHECK(shard_prepare(tok, &bad, NULL, err) == KG_EINVAL);
    CHECK(train_ids_are(tok, eos, data, kept, 2));

    // SHARD_REPLACE: the old shards go, the new ones are numbered from 0
    const char *gz_in[] = {gz};
    ShardPrepareArgs repl = {
        .inputs = gz_in, .n_inputs = 1, .out_dir = data, .mode = SHARD_REPLACE};
    REQUIRE(!shard_prepare(tok, &repl, &st, err), "%s", err);
    char(*names)[SHARD_NAME_MAX];
    size_t n;
    REQUIRE(!shard_list(data, "", &names, &n, err), "%s", err);
    CHECK_MSG(n == 1 && !strcmp(names[0], "train_000000.bin"), "%zu shards, the first %s", n,
              n ? names[0] : "-");
    free(names);
    const char *gz_docs[] = {"선생님이 매일 바다에 갔습니다.", "아이들이 아침에 밥을 먹었다."};
    CHECK_MSG(train_ids_are(tok, eos, data, gz_docs, 2), "the replaced shards differ");
}

// Lines over max_line_bytes are dropped and counted, read past without being held: the
// limit is exact (a '\r' before the newline does not count), a line past the 64 KiB read
// buffer is skipped whole, and a CSV record is measured whole, its quotes followed past the
// limit (else the record after it would be swallowed as part of it).
static void test_long_lines(const Tokenizer *tok, int eos) {
    char err[KG_ERRLEN], data[512], txt[600], csv[600];
    snprintf(data, sizeof data, "%s/long", dir);
    size_t big = 100000;
    char *text = malloc(big + 256);
    REQUIRE(text, "oom");
    strcpy(text, "abcdefghijklmnop\n"    // 16 bytes: kept
                 "abcdefghijklmnopq\n"   // 17: dropped (line 2)
                 "abcdefghijklmnop\r\n"  // 16 and CR: kept
                 "abcdefghijklmnopq\r\n" // 17 and CR: dropped
                 "\xEB\x82\x98\xEB\x8A\x94 \xED\x95\x99\xEA\xB5\x90\xEC\x97\x90\n"); // 16: kept
    size_t n = strlen(text);
    memset(text + n, 'x', big); // one line over the read buffer: dropped
    n += big;
    n += (size_t)sprintf(text + n, "\n마지막 줄\n");
    write_bytes(txt, sizeof txt, "long.txt", text, n);
    free(text);
    // the first record is over 16 bytes, its closing quote and a "" past the limit
    const char rec[] = "id,text\n"
                       "1,\"가나다라마바사아 \"\"자\"\"\n차카\",0\n"
                       "2,\"짧은 줄\",1\n";
    write_bytes(csv, sizeof csv, "long.csv", rec, sizeof rec - 1);
    const char *in[] = {txt, csv};
    ShardPrepareArgs pa = {.inputs = in, .n_inputs = 2, .out_dir = data, .max_line_bytes = 16};
    ShardPrepareStats st;
    REQUIRE(!shard_prepare(tok, &pa, &st, err), "%s", err);
    CHECK_MSG(st.docs == 5 && st.dropped_long == 4 && !st.dropped_utf8 && !st.dropped_nul,
              "%llu documents, %llu dropped as over-long", (unsigned long long)st.docs,
              (unsigned long long)st.dropped_long);
    char summary[512];
    shard_prepare_dropped(&st, summary, sizeof summary);
    CHECK_MSG(strstr(summary, "4 lines dropped (0 not UTF-8, 0 with NUL bytes, 4 over 16 bytes)") &&
                  strstr(summary, "long.txt:2"),
              "%s", summary);
    const char *kept[] = {"abcdefghijklmnop", "abcdefghijklmnop", "나는 학교에", "마지막 줄",
                          "짧은 줄"};
    CHECK_MSG(train_ids_are(tok, eos, data, kept, 5), "the documents around over-long lines");
}

int main(int argc, char **argv) {
    if (argc < 2) SKIP("usage: test_train_shard TOKENIZER");
    char err[KG_ERRLEN];
    Tokenizer *tok;
    if (access(argv[1], R_OK)) SKIP("no tokenizer at %s (fixture missing)", argv[1]);
    REQUIRE(!tok_open(&tok, argv[1], err), "%s", err);
    const int eos = tok_special(tok).eos;

    snprintf(dir, sizeof dir, "/tmp/test_train_shard.%d", (int)getpid());
    char in[512], data[512];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdir(dir, 0755);
    mkdir(in, 0755);
    // documents in walk order: a.csv, b.tsv, c.txt.gz, d.txt (e.json skipped)
    write_file("a.csv", "\xEF\xBB\xBFQ,A,label\n"
                        "나는 학교에 갔다,\"그래, \"\"좋아\"\"\n두 줄\",0\n"
                        "오늘 바다에,\"산에, 갔다\",1\n");
    write_file("b.tsv", "id\tdocument\tlabel\n"
                        "1\t고양이가 책을 읽었다.\t0\n"
                        "2\tno korean here\t1\n"
                        "3\t친구가 노래를\t할머니가 그림을\r\n");
    char gz[600];
    snprintf(gz, sizeof gz, "%s/c.txt.gz", in);
    gzFile g = gzopen(gz, "wb");
    REQUIRE(g, "gzopen");
    gzputs(g, "선생님이 매일 바다에 갔습니다.\n\n아이들이 아침에 밥을 먹었다.\n");
    gzclose(g);
    write_file("d.txt", "우리는 주말에 영화를 보았다.\nplain ascii line\n마지막 줄");
    write_file("e.json", "[\"건너뛰는 파일\"]\n");
    char never[600]; // never trained on: skipped in a walk, refused when named
    snprintf(never, sizeof never, "%s/korean_hate_speech", in);
    mkdir(never, 0755);
    write_file("korean_hate_speech/x.txt", "읽으면 안 되는 줄\n");
    const char *docs[] = {"나는 학교에 갔다\n그래, \"좋아\"\n두 줄",
                          "오늘 바다에\n산에, 갔다",
                          "고양이가 책을 읽었다.",
                          "친구가 노래를\n할머니가 그림을",
                          "선생님이 매일 바다에 갔습니다.",
                          "아이들이 아침에 밥을 먹었다.",
                          "우리는 주말에 영화를 보았다.",
                          "plain ascii line",
                          "마지막 줄"};
    const size_t n_docs = sizeof docs / sizeof docs[0];

    const char *inputs[] = {in};
    ShardPrepareArgs pa = {
        .inputs = inputs, .n_inputs = 1, .out_dir = data, .shard_tokens = 20, .val_every = 3};
    ShardPrepareStats st;
    REQUIRE(!shard_prepare(tok, &pa, &st, err), "%s", err);
    CHECK(st.files == 4);
    snprintf(never, sizeof never, "%s/korean_hate_speech/x.txt", in);
    const char *never_in[] = {never};
    ShardPrepareArgs bad = {
        .inputs = never_in, .n_inputs = 1, .out_dir = data, .mode = SHARD_APPEND};
    CHECK(shard_prepare(tok, &bad, NULL, err) == KG_EINVAL);
    CHECK_MSG(st.docs == n_docs, "%llu documents", (unsigned long long)st.docs);
    CHECK(st.val_docs == 3);
    CHECK_MSG(st.train_shards >= 2, "%d train shards (20 ids each)", st.train_shards);

    int *want_tr = NULL, *want_va = NULL;
    size_t n_tr = 0, n_va = 0;
    uint64_t bytes_tr = 0, bytes_va = 0;
    for (size_t k = 0; k < n_docs; k++) {
        if (k % 3 == 2)
            append_doc(&want_va, &n_va, tok, docs[k], eos, &bytes_va);
        else
            append_doc(&want_tr, &n_tr, tok, docs[k], eos, &bytes_tr);
    }
    size_t got_n;
    ShardHeader sum;
    int *got = read_all(data, "train_", &got_n, &sum);
    CHECK_MSG(got_n == n_tr && !memcmp(got, want_tr, n_tr * sizeof *got),
              "train ids differ: %zu vs %zu", got_n, n_tr);
    CHECK(sum.n_docs == 6 && sum.text_bytes == bytes_tr && sum.n_tokens == st.train_tokens);
    free(got);
    got = read_all(data, "val_", &got_n, &sum);
    CHECK_MSG(got_n == n_va && !memcmp(got, want_va, n_va * sizeof *got),
              "val ids differ: %zu vs %zu", got_n, n_va);
    CHECK(sum.n_docs == 3 && sum.text_bytes == bytes_va);
    free(got);
    // the val text beside the val shard: its documents, one per line, text_bytes bytes
    char want_text[512], got_text[512], text_path[600];
    snprintf(want_text, sizeof want_text, "%s\n%s\n%s\n", docs[2], docs[5], docs[8]);
    snprintf(text_path, sizeof text_path, "%s/val_000000.txt", data);
    FILE *tf = fopen(text_path, "rb");
    REQUIRE(tf, "open %s", text_path);
    size_t text_len = fread(got_text, 1, sizeof got_text - 1, tf);
    fclose(tf);
    got_text[text_len] = 0;
    CHECK_MSG(!strcmp(got_text, want_text) && text_len == bytes_va, "val text: %s", got_text);

    // --- the loader: one epoch visits every window of every shard exactly once ---
    const size_t T = 4;
    ShardLoader l, l2;
    REQUIRE(!shard_loader_open(&l, data, T, 42, 400, NULL, NULL, 0, err), "%s", err);
    uint64_t total = 0;
    char(*names)[SHARD_NAME_MAX];
    size_t n_names;
    REQUIRE(!shard_list(data, "train_", &names, &n_names, err), "%s", err);
    for (size_t i = 0; i < n_names; i++) // checkpoints write whole slots: no stray heap bytes
        for (size_t k = strlen(names[i]); k < SHARD_NAME_MAX; k++)
            CHECK(names[i][k] == 0);
    uint8_t seen[64][64] = {{0}};
    for (size_t i = 0; i < n_names; i++) {
        Shard s;
        REQUIRE(!shard_open(&s, data, names[i], err), "%s", err);
        total += (s.h.n_tokens - 1) / T;
        shard_close(&s);
    }
    int inp[T], tgt[T];
    char from[SHARD_NAME_MAX];
    for (uint64_t w = 0; w < total; w++) {
        next_window(&l, inp, tgt, from);
        CHECK(l.pos.epoch == 0);
        size_t si = 0;
        while (si < n_names && strcmp(names[si], from))
            si++;
        uint64_t widx = l.perm[l.pos.window - 1];
        Shard s;
        REQUIRE(!shard_open(&s, data, from, err), "%s", err);
        for (size_t t = 0; t < T; t++)
            CHECK(inp[t] == shard_id(&s, widx * T + t) && tgt[t] == shard_id(&s, widx * T + t + 1));
        shard_close(&s);
        CHECK(si < 64 && widx < 64 && !seen[si][widx]);
        if (si < 64 && widx < 64) seen[si][widx] = 1;
    }
    // a loader reopened at a saved position continues the same stream
    ShardPos pos = l.pos;
    REQUIRE(!shard_loader_open(&l2, data, T, 42, 400, &pos, l.names, l.n_names, err), "%s", err);
    int a[T], b[T], ta[T], tb[T];
    int same = 1;
    for (int i = 0; i < 25; i++) {
        next_window(&l, a, ta, from);
        next_window(&l2, b, tb, from);
        same &= !memcmp(a, b, sizeof a) && !memcmp(ta, tb, sizeof ta);
    }
    CHECK_MSG(same, "resumed loader diverged");
    shard_loader_close(&l2);
    shard_loader_close(&l);

    // another seed gives another order; the same seed the same one
    ShardLoader l3;
    int d1[8 * T], d2[8 * T], d3[8 * T], tt[8 * T];
    REQUIRE(!shard_loader_open(&l, data, T, 42, 400, NULL, NULL, 0, err), "%s", err);
    REQUIRE(!shard_loader_open(&l2, data, T, 42, 400, NULL, NULL, 0, err), "%s", err);
    REQUIRE(!shard_loader_open(&l3, data, T, 43, 400, NULL, NULL, 0, err), "%s", err);
    REQUIRE(!shard_loader_next(&l, d1, tt, 8, err) && !shard_loader_next(&l2, d2, tt, 8, err) &&
                !shard_loader_next(&l3, d3, tt, 8, err),
            "%s", err);
    CHECK(!memcmp(d1, d2, sizeof d1));
    CHECK(memcmp(d1, d3, sizeof d1));
    shard_loader_close(&l2);
    shard_loader_close(&l3);

    // a second prepare into a directory with shards is refused (it would duplicate them)
    // and adds nothing; with SHARD_APPEND it adds
    const char *more_in[] = {gz};
    ShardPrepareArgs more = {.inputs = more_in, .n_inputs = 1, .out_dir = data};
    CHECK(shard_prepare(tok, &more, &st, err) == KG_EINVAL && strstr(err, "--append"));
    char(*names_after)[SHARD_NAME_MAX];
    size_t n_after;
    REQUIRE(!shard_list(data, "train_", &names_after, &n_after, err), "%s", err);
    CHECK_MSG(n_after == n_names, "a refused prepare left %zu train shards, not %zu", n_after,
              n_names);
    free(names_after);
    // a shard dropped in during epoch 0 joins at epoch 1, not before
    more.mode = SHARD_APPEND;
    REQUIRE(!shard_prepare(tok, &more, &st, err), "%s", err);
    char new_name[SHARD_NAME_MAX];
    snprintf(new_name, sizeof new_name, "train_%06zu.bin", n_names);
    Shard ns;
    REQUIRE(!shard_open(&ns, data, new_name, err), "%s", err);
    uint64_t new_windows = (ns.h.n_tokens - 1) / T;
    shard_close(&ns);
    int new_in_0 = 0, new_in_1 = 0;
    for (uint64_t w = 8; w < total; w++) { // rest of epoch 0
        next_window(&l, inp, tgt, from);
        new_in_0 += !strcmp(from, new_name);
    }
    for (uint64_t w = 0; w < total + new_windows; w++) { // all of epoch 1
        next_window(&l, inp, tgt, from);
        CHECK(l.pos.epoch == 1);
        new_in_1 += !strcmp(from, new_name);
    }
    CHECK_MSG(new_in_0 == 0 && (uint64_t)new_in_1 == new_windows && new_windows > 0,
              "new shard windows: %d in epoch 0, %d in epoch 1 of %llu", new_in_0, new_in_1,
              (unsigned long long)new_windows);
    // skipping moves over the same windows next() would hand out
    ShardPos before = l.pos;
    REQUIRE(!shard_loader_skip(&l, 5, err), "%s", err);
    CHECK(l.pos.epoch > before.epoch || l.pos.shard > before.shard ||
          l.pos.window == before.window + 5);
    shard_loader_close(&l);
    free(names);

    // uint32 ids read back; a corrupt shard is rejected
    char path[600];
    snprintf(path, sizeof path, "%s/u32.bin", data);
    FILE *f = fopen(path, "wb");
    unsigned char hdr[SHARD_HEADER_SIZE] = "KGSHARD";
    hdr[8] = 1;
    hdr[12] = 4;
    hdr[16 + 2] = 2; // vocab 131072
    hdr[24] = 3;     // 3 tokens
    uint32_t ids32[3] = {70000, 5, 131071};
    fwrite(hdr, 1, sizeof hdr, f);
    fwrite(ids32, 4, 3, f);
    fclose(f);
    Shard s32;
    REQUIRE(!shard_open(&s32, data, "u32.bin", err), "%s", err);
    CHECK(s32.h.vocab_size == 131072 && shard_id(&s32, 0) == 70000 && shard_id(&s32, 2) == 131071);
    shard_close(&s32);
    f = fopen(path, "r+b");
    fputc('X', f);
    fclose(f);
    CHECK(shard_open(&s32, data, "u32.bin", err) == KG_EFORMAT);
    printf("corrupt shard: %s\n", err);
    f = fopen(path, "ab");
    fputc(0, f); // size no longer matches too
    fclose(f);
    CHECK(shard_open(&s32, data, "u32.bin", err) == KG_EFORMAT);

    test_dropped(tok, eos);
    test_long_lines(tok, eos);

    free(want_tr);
    free(want_va);
    tok_free(tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
