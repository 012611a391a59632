// test_tok_default.c — the default model's tokenizer (models/default, SentencePiece BPE with
// byte fallback, trained without whitespace removal) gives back every byte it is given:
// runs of spaces, leading and trailing ones, tabs, newlines, control bytes, emoji, invalid
// UTF-8. v0's tokenizer collapsed runs of spaces and dropped leading and trailing ones.
// With python3-sentencepiece installed, the ids also match libsentencepiece's own.
//
// Usage: test_tok_default [MODEL_DIR]   (default: the source tree's models/default)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "tokenizer/tokenizer.h"

static const char *const CASES[] = {
    "  앞 공백 두 개",
    "뒤 공백   ",
    "가  나   다    라",
    "\t탭\t문자\t",
    "줄\n바꿈\n\n두 번",
    "a \t b\r\nc",
    "  \n  \n",
    " ",
    "   ",
    "\n",
    "\t",
    "\xc2\xa0nbsp\xe3\x80\x80ideo",
    "emoji \xf0\x9f\x98\x80 and 漢字 and \xc3\xa9",
    "\x01 ctrl\x7f",
    "<s></s><unk>",
    "여러분 2019년 수고하셨습니다. 올해에는",
};

int main(int argc, char **argv) {
    char path[4096], err[KG_ERRLEN];
    const char *src = getenv("KG_SOURCE_DIR");
    if (argc > 1)
        snprintf(path, sizeof path, "%s/kogpt2-default.model", argv[1]);
    else
        snprintf(path, sizeof path, "%s/models/default/kogpt2-default.model", src ? src : ".");
    Tokenizer *t;
    REQUIRE(tok_open(&t, path, err) == KG_OK, "%s", err);
    size_t n_cases = sizeof CASES / sizeof *CASES;
    for (size_t i = 0; i < n_cases; i++) {
        const char *s = CASES[i];
        int *ids = NULL;
        size_t n = 0, len = 0;
        char *back = NULL;
        REQUIRE(tok_encode(t, s, strlen(s), &ids, &n, err) == KG_OK, "encode: %s", err);
        REQUIRE(tok_decode(t, ids, n, &back, &len, err) == KG_OK, "decode: %s", err);
        CHECK_MSG(len == strlen(s) && !memcmp(back, s, len),
                  "case %zu: %zu ids, %zu bytes back, not %zu", i, n, len, strlen(s));
        free(ids);
        free(back);
    }
    // a single space is one piece (the tokenizer has whitespace-only pieces)
    int *ids = NULL;
    size_t n = 0;
    REQUIRE(tok_encode(t, " ", 1, &ids, &n, err) == KG_OK, "%s", err);
    CHECK_MSG(n == 1, "\" \" is %zu pieces", n);
    free(ids);
    printf("%zu strings round-trip byte for byte through %s\n", n_cases, path);
    // a FIFO in a tokenizer's place is refused at once, not read forever
    char fifo[] = "/tmp/test_tok_default.XXXXXX";
    REQUIRE(mkdtemp(fifo), "mkdtemp");
    char fpath[64];
    snprintf(fpath, sizeof fpath, "%s/tokenizer.json", fifo);
    REQUIRE(mkfifo(fpath, 0600) == 0, "mkfifo %s", fpath);
    alarm(20);
    Tokenizer *bad = NULL;
    int rc = tok_open(&bad, fpath, err);
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "not a regular file"), "FIFO: %d %s", rc, err);
    rc = tok_open(&bad, fifo, err); // the directory: its tokenizer.json is the FIFO
    CHECK_MSG(rc == KG_EFORMAT && strstr(err, "not a regular file"), "dir: %d %s", rc, err);
    alarm(0);
    unlink(fpath);
    rmdir(fifo);
    tok_free(t);
    return check_report();
}
