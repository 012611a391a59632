// test_server_auth.c — server/http/auth.c, the API keys kogpt2d accepts (issue 33 item 6:
// reached only end to end before): what a key may be (1..256 bytes of visible ASCII, the
// bytes a header carries unchanged: RFC 9110's VCHAR), the list left unchanged by a refused
// key, a keys file's comments, blank lines, surrounding blanks and CRLF, a bad line named by
// its number, and the match: the whole key or nothing (no prefix, no longer string, case
// counts, any of several keys). The expectations are auth.h's contract, by hand.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kg.h"
#include "check.h"
#include "server/http/auth.h"

static void test_add(void) {
    AuthKeys k = {0};
    char err[KG_ERRLEN], key[AUTH_MAX_KEY_LEN + 2];
    CHECK(auth_add(&k, "s3cret", err) == KG_OK && k.n == 1 && !strcmp(k.keys[0], "s3cret"));
    CHECK(auth_add(&k, "!~{}()<>@,;:\\\"/[]?=", err) == KG_OK); // every visible byte is fine
    memset(key, 'a', AUTH_MAX_KEY_LEN);
    key[AUTH_MAX_KEY_LEN] = 0;
    CHECK(auth_add(&k, key, err) == KG_OK && k.n == 3); // 256 bytes: the longest
    key[AUTH_MAX_KEY_LEN] = 'a', key[AUTH_MAX_KEY_LEN + 1] = 0;
    const char *bad[] = {"",        key,    "with space", "tab\there", "line\nbreak",
                         "del\x7f", "\x01", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        CHECK_MSG(auth_add(&k, bad[i], err) == KG_EINVAL && strstr(err, "visible ASCII"),
                  "key %zu refused (%s)", i, err);
    }
    CHECK(k.n == 3); // refused keys leave the list as it was
    auth_free(&k);
    CHECK(k.n == 0 && k.keys == NULL);
}

static void test_match(void) {
    AuthKeys k = {0};
    char err[KG_ERRLEN];
    CHECK(!auth_match(&k, "anything")); // no keys: nothing matches
    REQUIRE(auth_add(&k, "key-one", err) == KG_OK && auth_add(&k, "key-two", err) == KG_OK, "%s",
            err);
    CHECK(auth_match(&k, "key-one") && auth_match(&k, "key-two"));
    CHECK(!auth_match(&k, NULL) && !auth_match(&k, ""));
    CHECK(!auth_match(&k, "key-on") && !auth_match(&k, "key-one ") && !auth_match(&k, "key-onex"));
    CHECK(!auth_match(&k, "KEY-ONE") && !auth_match(&k, "key-three"));
    char longer[AUTH_MAX_KEY_LEN + 10]; // past the longest key: never a match, read no further
    memset(longer, 'k', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK(!auth_match(&k, longer));
    auth_free(&k);
}

// Writes text to a new temporary file; its path in path.
static void write_file(char *path, size_t size, const char *text) {
    snprintf(path, size, "/tmp/kg_test_auth_XXXXXX");
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
}

static void test_file(void) {
    AuthKeys k = {0};
    char err[KG_ERRLEN], path[64];
    write_file(path, sizeof path,
               "# the team's keys\n\n  key-three  \r\n\tkey-four\n#key-five\nkey-six");
    CHECK(auth_add_file(&k, path, err) == KG_OK);
    CHECK(k.n == 3 && !strcmp(k.keys[0], "key-three") && !strcmp(k.keys[1], "key-four") &&
          !strcmp(k.keys[2], "key-six")); // trimmed; comments, blanks and #key-five skipped
    CHECK(auth_match(&k, "key-six") && !auth_match(&k, "#key-five"));
    unlink(path);
    auth_free(&k);

    write_file(path, sizeof path, "good\nbad key\n");
    CHECK(auth_add_file(&k, path, err) == KG_EFORMAT && strstr(err, ":2: not an API key"));
    unlink(path);
    auth_free(&k);

    write_file(path, sizeof path, "# only a comment\n\n");
    CHECK(auth_add_file(&k, path, err) == KG_EFORMAT && strstr(err, "no API key in it"));
    CHECK(k.n == 0);
    unlink(path);

    CHECK(auth_add_file(&k, "/nonexistent/kg_keys", err) != KG_OK && k.n == 0);
    auth_free(&k);
}

int main(void) {
    test_add();
    test_match();
    test_file();
    return check_report();
}
