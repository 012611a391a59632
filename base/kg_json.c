// kg_json.c — the NUL check on JSON text (kg_json.h): one pass over the bytes that knows
// strings, escapes and nesting, and remembers the keys only to name one in the message.
#include "base/kg_json.h"

#include <stdint.h>
#include <string.h>

#include "base/kg.h"

#define JSON_KEY_DEPTH 64 // nesting levels whose keys a message can name; deeper is still read
#define NO_KEY         SIZE_MAX

typedef struct {
    size_t at, len; // a string's text, between its quotes; len NO_KEY when there is none
} JsonStr;

typedef struct {
    const char *s;
    size_t len;
    size_t depth;                 // 0 at the top level
    char kind[JSON_KEY_DEPTH];    // '{' or '[' at each depth
    JsonStr keys[JSON_KEY_DEPTH]; // the object's last key at each depth
} JsonScan;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The string whose text starts at byte at is a key: a ':' follows its closing quote.
static int is_key(const JsonScan *j, size_t at) {
    size_t i = at;
    while (i < j->len && j->s[i] != '"')
        i += j->s[i] == '\\' ? 2 : 1;
    for (i++; i < j->len && is_space(j->s[i]); i++)
        ;
    return i < j->len && j->s[i] == ':';
}

// The key of the innermost object at depth *d or below (*d becomes its depth): the key a
// value at depth *d sits under, its object's or its array's. NULL when there is none.
static const JsonStr *key_below(const JsonScan *j, size_t *d) {
    if (*d >= JSON_KEY_DEPTH) return NULL;
    for (; *d > 0; --*d)
        if (j->kind[*d] == '{') return j->keys[*d].len == NO_KEY ? NULL : &j->keys[*d];
    return NULL;
}

// The error for a NUL at byte at, inside the string whose text starts at str (or, when
// in_str is 0, between values): the key it is, or the key its value sits under and that
// key's own (a tensor's name, "__metadata__", "weight_map").
static int nul_error(const JsonScan *j, size_t at, int in_str, size_t str, const char *what,
                     char *err) {
    char shown[81], outer_shown[81];
    if (!in_str) return kg_err(err, KG_EFORMAT, "%s: a NUL byte at byte %zu", what, at);
    if (is_key(j, str))
        return kg_err(err, KG_EFORMAT, "%s: the key \"%s...\" holds a NUL (\\u0000) at byte %zu",
                      what, kg_show(shown, sizeof shown, j->s + str, at - str), at);
    size_t d = j->depth;
    const JsonStr *key = key_below(j, &d);
    if (!key)
        return kg_err(err, KG_EFORMAT, "%s: a string holds a NUL (\\u0000) at byte %zu", what, at);
    kg_show(shown, sizeof shown, j->s + key->at, key->len);
    d--;
    const JsonStr *outer = key_below(j, &d);
    if (outer) kg_show(outer_shown, sizeof outer_shown, j->s + outer->at, outer->len);
    return kg_err(err, KG_EFORMAT,
                  "%s: %s%s%s\"%s\" holds a NUL (\\u0000) in its value at byte %zu", what,
                  outer ? "\"" : "", outer ? outer_shown : "", outer ? "\": " : "", shown, at);
}

int kg_json_check_nul(const char *text, size_t len, const char *what, char *err) {
    JsonScan j = {.s = text, .len = len};
    j.keys[0].len = NO_KEY;
    JsonStr last = {0, NO_KEY}; // the string that closed last, while only blanks follow it
    size_t str = 0;             // where the open string's text starts
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '"') {
                in_str = 0;
                last = (JsonStr){str, i - str};
            } else if (c == '\\' && len - i > 5 && !memcmp(text + i + 1, "u0000", 5)) {
                return nul_error(&j, i, 1, str, what, err);
            } else if (c == '\\') {
                i++; // the escaped byte: \" does not end the string
            } else if (c == '\0') {
                return nul_error(&j, i, 1, str, what, err);
            }
            continue;
        }
        if (c == '\0') return nul_error(&j, i, 0, 0, what, err);
        if (is_space(c)) continue;
        if (c == '"') {
            in_str = 1;
            str = i + 1;
        } else if (c == ':' && last.len != NO_KEY && j.depth < JSON_KEY_DEPTH) {
            j.keys[j.depth] = last;
        } else if (c == '{' || c == '[') {
            if (++j.depth < JSON_KEY_DEPTH) {
                j.kind[j.depth] = c;
                j.keys[j.depth].len = NO_KEY;
            }
        } else if ((c == '}' || c == ']') && j.depth) {
            j.depth--;
        }
        last.len = NO_KEY;
    }
    return KG_OK;
}
