// auth.c — the API keys (auth.h): a list of copies, a keys file, a constant-time match.
#include "auth.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

// A key's bytes: 1..AUTH_MAX_KEY_LEN of visible ASCII (0x21..0x7e).
static int auth_key_ok(const char *s, size_t n) {
    if (n == 0 || n > AUTH_MAX_KEY_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

// Appends a copy of s[0..n), already checked.
static int auth_push(AuthKeys *k, const char *s, size_t n, char *err) {
    char **keys = realloc(k->keys, (k->n + 1) * sizeof *keys);
    if (!keys) return kg_err(err, KG_ENOMEM, "API keys: out of memory");
    k->keys = keys;
    if (!(keys[k->n] = strndup(s, n))) return kg_err(err, KG_ENOMEM, "API keys: out of memory");
    k->n++;
    return KG_OK;
}

int auth_add(AuthKeys *k, const char *key, char *err) {
    if (!auth_key_ok(key, strlen(key)))
        return kg_err(err, KG_EINVAL,
                      "an API key is 1..%d bytes of visible ASCII (no spaces or control bytes)",
                      AUTH_MAX_KEY_LEN);
    return auth_push(k, key, strlen(key), err);
}

int auth_add_file(AuthKeys *k, const char *path, char *err) {
    char *text;
    size_t len;
    int rc = kg_read_file(path, AUTH_MAX_FILE, &text, &len, err);
    if (rc) return rc;
    size_t before = k->n, line_no = 0;
    for (const char *p = text, *end = text + len; !rc && p < end;) {
        // the line's length from the bytes, never from a C string: a NUL inside would stop
        // strcspn short of the newline, and the read position would never move
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *next = p + n + (nl != NULL);
        line_no++;
        if (memchr(p, '\0', n)) {
            rc = kg_err(err, KG_EFORMAT, "%s:%zu: a NUL byte in the line (not an API key)", path,
                        line_no);
            break;
        }
        while (n && strchr(" \t\r", p[n - 1])) // blanks around a key, \r of CRLF files
            n--;
        while (n && strchr(" \t", *p)) {
            p++;
            n--;
        }
        if (n && *p != '#')
            rc = auth_key_ok(p, n) ? auth_push(k, p, n, err)
                                   : kg_err(err, KG_EFORMAT,
                                            "%s:%zu: not an API key (1..%d bytes of visible "
                                            "ASCII)",
                                            path, line_no, AUTH_MAX_KEY_LEN);
        p = next;
    }
    free(text);
    if (!rc && k->n == before)
        rc = kg_err(err, KG_EFORMAT, "%s: no API key in it (one per line; '#' starts a comment)",
                    path);
    return rc;
}

int auth_match(const AuthKeys *k, const char *given) {
    if (!given) return 0;
    size_t gn = strnlen(given, AUTH_MAX_KEY_LEN + 1);
    unsigned char found = 0;
    for (size_t i = 0; i < k->n; i++) { // every key compared in full: no early exit
        const char *key = k->keys[i];
        size_t kn = strlen(key);
        unsigned char diff = (unsigned char)(gn != kn);
        for (size_t j = 0; j < kn; j++)
            diff |= (unsigned char)(key[j] ^ (j < gn ? given[j] : 0));
        found |= (unsigned char)(diff == 0);
    }
    return found;
}

void auth_free(AuthKeys *k) {
    for (size_t i = 0; i < k->n; i++)
        free(k->keys[i]);
    free(k->keys);
    k->keys = NULL;
    k->n = 0;
}
