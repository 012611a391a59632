// test_server_encode.c — the encode limit kogpt2d puts on every prompt and /v1/tokenize text
// (issue 24): tok_encode_max() answers exactly what tok_encode() and a count would, stops
// early, and its byte bound (tok_max_bytes_per_token) never refuses a text that fits.
//
// For each tokenizer (KoGPT2 v2's tokenizer.json and v1's SentencePiece from the shared data,
// the project's default SentencePiece model from the repository) and each text (Korean
// sentences, and the kinds that make one token stand for the most bytes: NFKC folds, Hangul
// jamo that compose, runs of spaces, unknown characters): with n = tok_encode's count,
// tok_encode_max(max >= n) gives the same ids and max < n gives KG_ERANGE with nothing
// allocated; n * bound >= bytes wherever there is a bound. Then a megabyte of words with a
// limit of 100 tokens: stopped long before a full encode (the two times are printed).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"
#include "tokenizer/tokenizer.h"

// s repeated until the text is about n bytes (malloc'd, NUL-terminated).
static char *repeat(const char *s, size_t n) {
    size_t k = strlen(s), len = n / k * k;
    char *t = malloc(len + 1);
    REQUIRE(t, "out of memory");
    for (size_t i = 0; i < len; i += k)
        memcpy(t + i, s, k);
    t[len] = '\0';
    return t;
}

static const char *const TEXTS[] = {
    "안녕하세요. 한국어 GPT-2 입니다.😤:)l^o",
    "지미 카터는 조지아주 섬터 카운티 플레인스 마을에서 태어났다.",
    "<usr>오늘 날씨 어때?<sys>",
    "2019년 한해를 보내며, 1234567890 0987654321",
    "\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3\xef\xbc\xa4", // ＡＢＣＤ: NFKC 3 bytes -> 1
    "\xf0\x9d\x90\x80\xf0\x9d\x90\x81\xf0\x9d\x90\x82", // 𝐀𝐁𝐂: 4 bytes -> 1
    "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8\xe1\x84\x82\xe1\x85\xa2", // jamo: 9 bytes -> 3
    "U\xcc\x88\xcc\x84 e\xcc\x81 \xef\xac\x81",                     // combining marks, ﬁ
    "          many      spaces          ",
    "\x01\x02\x03 control \x7f and zero\xe2\x80\x8bwidth",
    "\xe4\xb8\x80\xe4\xb9\x99\xf0\x9f\x98\x80\xf0\x9f\x98\x81 \xe0\xb8\x81\xe0\xb8\x82",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "....................................................................",
};

static void check_text(const Tokenizer *t, const char *name, const char *text) {
    char err[KG_ERRLEN];
    size_t len = strlen(text), n, m;
    int *ids, *ids2;
    REQUIRE(tok_encode(t, text, len, &ids, &n, err) == KG_OK, "%s: %s", name, err);
    size_t bound = tok_max_bytes_per_token(t);
    CHECK_MSG(!bound || n * bound >= len, "%s: %zu tokens x %zu bytes < %zu bytes of '%s'", name, n,
              bound, len, text);
    size_t maxes[] = {n, n + 1, SIZE_MAX, n ? n - 1 : 0, n / 2, 1, 0};
    for (size_t k = 0; k < sizeof maxes / sizeof *maxes; k++) {
        size_t max = maxes[k];
        int rc = tok_encode_max(t, text, len, max, &ids2, &m, err);
        if (n <= max)
            CHECK_MSG(rc == KG_OK && m == n && (!n || !memcmp(ids, ids2, n * sizeof *ids)),
                      "%s: max %zu of %zu tokens: rc %d, %zu ids (%s)", name, max, n, rc, m, err);
        else
            CHECK_MSG(rc == KG_ERANGE && !ids2 && m == 0 && strstr(err, "more than"),
                      "%s: max %zu of %zu tokens: rc %d (%s)", name, max, n, rc, err);
        if (rc == KG_OK) free(ids2);
    }
    free(ids);
}

// A megabyte of short words with a limit of 100 tokens is refused unread where there is a byte
// bound; with a limit just above what the bound refuses (len / bound tokens), tokenizer.json
// BPE stops within a word of it, long before a full encode would end. A limit with room for
// the text changes nothing.
static void check_early_stop(const Tokenizer *t, const char *name) {
    char err[KG_ERRLEN];
    char *text = repeat("가나 다라 12 ab ", 1 << 20);
    size_t len = strlen(text), n, m, bound = tok_max_bytes_per_token(t);
    int *ids, *ids2;
    // each time the best of 5 runs: another tenant's load lengthens a run, never shortens it
    double full = 1e30, stopped[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; rep++) {
        double t0 = kg_now_s();
        REQUIRE(tok_encode(t, text, len, &ids, &n, err) == KG_OK, "%s: %s", name, err);
        full = fmin(full, kg_now_s() - t0);
        if (rep < 4) free(ids);
    }
    size_t limits[2] = {100, bound ? len / bound + 1 : 100};
    for (int k = 0; k < 2; k++) {
        for (int rep = 0; rep < 5; rep++) {
            double t0 = kg_now_s();
            int rc = tok_encode_max(t, text, len, limits[k], &ids2, &m, err);
            stopped[k] = fmin(stopped[k], kg_now_s() - t0);
            CHECK_MSG(rc == KG_ERANGE, "%s: 1 MiB in %zu tokens: rc %d", name, limits[k], rc);
        }
        // refused by length, unread, where there is a byte bound: the message says so
        if (k == 0 && bound)
            CHECK_MSG(strstr(err, " a token)") != NULL, "%s: 100 tokens: '%s'", name, err);
    }
    int rc = tok_encode_max(t, text, len, n, &ids2, &m, err);
    CHECK_MSG(rc == KG_OK && m == n && !memcmp(ids, ids2, n * sizeof *ids), "%s: at n", name);
    if (!rc) free(ids2);
    printf("  %s: %zu bytes, %zu tokens, bound %zu bytes a token: full encode %.1f ms; refused "
           "at %zu tokens after %.3f ms, at %zu after %.3f ms (best of 5)\n",
           name, len, n, bound, 1e3 * full, limits[0], 1e3 * stopped[0], limits[1],
           1e3 * stopped[1]);
    if (tok_kind(t) == TOK_BPE) // stopped by the count (libsentencepiece cannot stop)
        CHECK_MSG(stopped[1] * 2 < full, "%s: %.3f ms, full %.3f ms", name, 1e3 * stopped[1],
                  1e3 * full);
    free(ids);
    free(text);
}

// One tokenizer: every text, the early stop, and the bound it should have (0: none).
static void check_tokenizer(const char *path, const char *name, size_t want_bound) {
    Tokenizer *t;
    char err[KG_ERRLEN];
    if (tok_open(&t, path, err)) {
        printf("SKIP: %s: %s\n", name, err);
        return;
    }
    CHECK_MSG(tok_max_bytes_per_token(t) == want_bound, "%s: bound %zu, want %zu", name,
              tok_max_bytes_per_token(t), want_bound);
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++)
        check_text(t, name, TEXTS[i]);
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++) { // each one long: many words
        char *text = repeat(TEXTS[i], 20000);
        check_text(t, name, text);
        free(text);
    }
    check_early_stop(t, name);
    tok_free(t);
}

int main(void) {
    const char *src = getenv("KG_SOURCE_DIR"), *shared = getenv("KG_SHARED_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/default/kogpt2-default.model", src ? src : "..");
    // the project's model: identity normalization, no whitespace folding, byte fallback:
    // its longest piece (48 bytes) bounds a token
    check_tokenizer(path, "default (SentencePiece)", 48);
    snprintf(path, sizeof path, "%s/data/kogpt2/v2/tokenizer.no_endoftext.json",
             shared ? shared : "../shared");
    check_tokenizer(path, "KoGPT2 v2 (tokenizer.json)", 120); // 30-byte pieces x 4 (NFKC)
    snprintf(path, sizeof path, "%s/data/kogpt2/v1/kogpt2_news_wiki_ko_cased_818bfa919d.spiece",
             shared ? shared : "../shared");
    check_tokenizer(path, "KoGPT2 v1 (SentencePiece)", 0); // nmt_nfkc folds spaces: no bound
    return check_report();
}
