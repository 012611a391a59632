// auth.h — the API keys kogpt2d accepts (--api-key, repeatable, and --api-key-file) and the
// check of a request's key against them.
//
// A key is 1..AUTH_MAX_KEY_LEN bytes of visible ASCII (what a header carries unchanged).
// Threads: build the list before the server starts; auth_match() may then run on any thread.
#ifndef AUTH_H
#define AUTH_H

#include <stddef.h>

#define AUTH_MAX_KEY_LEN 256
#define AUTH_MAX_FILE    (1u << 20) // bytes of a keys file

typedef struct {
    char **keys; // (n) malloc'd copies
    size_t n;
} AuthKeys;

// Appends a copy of key. KG_OK; KG_EINVAL (not a key: empty, too long, a space or a control
// byte) or KG_ENOMEM with k unchanged.
int auth_add(AuthKeys *k, const char *key, char *err);

// Appends every key of the file at path: one per line, surrounding blanks trimmed, blank lines
// and lines starting with '#' skipped. KG_OK; KG_EIO (unreadable), KG_EFORMAT (no key in it,
// or a bad one, naming its line) or KG_ENOMEM; k may then hold the file's first keys.
int auth_add_file(AuthKeys *k, const char *path, char *err);

// 1 if given (NULL: none) equals one of the keys. Its time depends on the keys' count and
// lengths, never on where given first differs from any of them.
int auth_match(const AuthKeys *k, const char *given);

// Frees the copies; k is empty afterwards.
void auth_free(AuthKeys *k);

#endif
