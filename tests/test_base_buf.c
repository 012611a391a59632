// test_base_buf.c — base/: the byte buffer (appends, formatted appends, take, the size
// checks), the little-endian helpers against byte arrays written out by hand, the checked
// sizes, the progress line off a terminal, and the small helpers: a suffix, a directory, the
// monotonic clock (against libc's CLOCK_MONOTONIC read around it).
#define _GNU_SOURCE // mkdtemp, symlink
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/kg.h"
#include "base/le.h"
#include "base/progress.h"
#include "check.h"

static void test_buf(void) {
    KgBuf b = {0};
    CHECK(buf_append(&b, NULL, 0) == KG_OK && b.len == 0 && b.p && b.p[0] == '\0');
    for (int i = 0; i < 1000; i++) // many small appends: doubling keeps this linear
        CHECK(buf_append(&b, "ab", 2) == KG_OK);
    CHECK(b.len == 2000 && b.cap > b.len && b.p[b.len] == '\0');
    CHECK(!memcmp(b.p + 1998, "ab", 2));
    CHECK(buf_printf(&b, "|%d|%s|", 42, "x") == KG_OK);
    CHECK(b.len == 2006 && !strcmp(b.p + 2000, "|42|x|"));
    // a formatted string longer than what is left: one reserve, then the text
    char big[5000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(buf_printf(&b, "%s", big) == KG_OK && b.len == 2006 + 4999 && b.p[b.len - 1] == 'z');
    // a size that would overflow size_t is refused, b unchanged
    size_t len = b.len, cap = b.cap;
    char *p = b.p;
    CHECK(buf_reserve(&b, SIZE_MAX) == KG_ENOMEM && b.len == len && b.cap == cap && b.p == p);
    CHECK(buf_reserve(&b, SIZE_MAX - len) == KG_ENOMEM && b.p == p);
    size_t n;
    char *taken = buf_take(&b, &n);
    CHECK(taken == p && n == len && b.p == NULL && b.len == 0 && b.cap == 0);
    free(taken);
    char *empty = buf_take(&b, &n); // an empty buffer gives an empty string, never NULL
    CHECK(empty && n == 0 && empty[0] == '\0');
    free(empty);
    CHECK(buf_append(&b, "q", 1) == KG_OK && !strcmp(b.p, "q"));
    buf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    buf_free(&b); // twice is fine
}

static void test_le(void) {
    const uint8_t bytes[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0xF8};
    CHECK(kg_get_le16(bytes) == 0x0201);
    CHECK(kg_get_le32(bytes) == 0x04030201u);
    CHECK(kg_get_le64(bytes) == 0xF807060504030201ull);
    uint8_t out[8] = {0};
    kg_put_le64(out, 0xF807060504030201ull);
    CHECK(!memcmp(out, bytes, 8));
    memset(out, 0, sizeof out);
    kg_put_le32(out + 1, 0x04030201u);
    CHECK(out[0] == 0 && !memcmp(out + 1, bytes, 4) && out[5] == 0);
}

static void test_checked(void) {
    size_t r = 7;
    CHECK(!kg_mul_overflow(3, 5, &r) && r == 15);
    CHECK(kg_mul_overflow(SIZE_MAX / 2 + 1, 2, &r));
    CHECK(kg_mul_overflow((size_t)1 << 62, 64, &r)); // pytorch.c's 2^62-element view of 8 bytes
    CHECK(!kg_add_overflow(SIZE_MAX - 1, 1, &r) && r == SIZE_MAX);
    CHECK(kg_add_overflow(SIZE_MAX, 1, &r));
}

// Off a terminal: one line per step_pct percent, 100 % once, nothing when out is NULL.
static void test_progress(void) {
    FILE *f = tmpfile();
    REQUIRE(f, "tmpfile");
    KgProgress p;
    progress_start(&p, f, "convert", 1000, 30);
    for (uint64_t done = 0; done <= 1000; done += 50)
        progress_update(&p, done);
    progress_end(&p, 1000);
    progress_start(&p, NULL, "silent", 10, 10);
    progress_update(&p, 10);
    progress_end(&p, 10);
    rewind(f);
    char line[256];
    int lines = 0, hundred = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        CHECK_MSG(!strncmp(line, "convert: ", 9) && strstr(line, " MB/s, ETA "), "%s", line);
        hundred += strstr(line, "100%") != NULL;
    }
    CHECK_MSG(lines == 4 && hundred == 1, "%d lines, %d at 100%%", lines, hundred); // 30 60 90 100
    fclose(f);
}

static void test_small_helpers(void) {
    CHECK(kg_ends_with("model.json", ".json") && kg_ends_with(".json", ".json"));
    CHECK(kg_ends_with("x", "") && !kg_ends_with("json", ".json"));
    CHECK(!kg_ends_with("a.json.gz", ".json") && !kg_ends_with("a.JSON", ".json"));
    char dir[] = "/tmp/kg_base_XXXXXX", file[64], link[64];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(file, sizeof file, "%s/f", dir);
    snprintf(link, sizeof link, "%s/l", dir);
    FILE *f = fopen(file, "w");
    REQUIRE(f && !fclose(f) && !symlink(dir, link), "a file and a link in %s", dir);
    CHECK(kg_is_dir(dir) && kg_is_dir(link) && kg_is_dir("/"));
    CHECK(!kg_is_dir(file) && !kg_is_dir("") && !kg_is_dir("/nonexistent/kg"));
    unlink(link);
    unlink(file);
    rmdir(dir);
    // kg_now_s lies between two readings of CLOCK_MONOTONIC taken around it
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    double t = kg_now_s();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ta = (double)a.tv_sec + 1e-9 * (double)a.tv_nsec;
    double tb = (double)b.tv_sec + 1e-9 * (double)b.tv_nsec;
    CHECK_MSG(ta <= t && t <= tb, "%.9f <= %.9f <= %.9f", ta, t, tb);
    double ms = kg_now_ms();
    CHECK(ms >= t * 1e3); // later, in milliseconds
}

int main(void) {
    test_buf();
    test_small_helpers();
    test_progress();
    test_le();
    test_checked();
    return check_report();
}
