// json_in.c — typed getters over cJSON with defaults, ranges and UTF-8 checks.
#include "json_in.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int json_parse_object(const char *body, size_t len, cJSON **out, char *err) {
    *out = NULL;
    if (len == 0) return kg_err(err, KG_EINVAL, "body: empty; expected a JSON object");
    const char *end = NULL;
    // len + 1: with require_null_terminated, the NUL must lie inside the length
    cJSON *j_root = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    if (!j_root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return kg_err(err, KG_EINVAL, "body: malformed JSON near byte %zu", at);
    }
    if (end != body + len) { // a NUL byte inside the body ends cJSON's parse early
        cJSON_Delete(j_root);
        return kg_err(err, KG_EINVAL, "body: unexpected bytes after the JSON value");
    }
    if (!cJSON_IsObject(j_root)) {
        cJSON_Delete(j_root);
        return kg_err(err, KG_EINVAL, "body: expected a JSON object");
    }
    // cJSON turns \u0000 into a NUL that ends its C string: "ab\u0000cd" would read as "ab".
    // Refused instead of cut. Each backslash starts an escape (outside strings the parse
    // above failed), so pairs are skipped and \\u0000 (a literal backslash) is not one.
    for (size_t i = 0; i + 1 < len; i++)
        if (body[i] == '\\') {
            if (body[i + 1] == 'u' && i + 5 < len && !strncmp(body + i + 2, "0000", 4)) {
                cJSON_Delete(j_root);
                return kg_err(err, KG_ERANGE, "body: a string holds \\u0000 (NUL) at byte %zu", i);
            }
            i++;
        }
    *out = j_root;
    return KG_OK;
}

int json_utf8_valid(const char *s, size_t n, size_t *bad_at) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k; // continuation bytes
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            goto bad;
        }
        if (n - i <= k) goto bad;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
        i += k + 1;
    }
    return 1;
bad:
    if (bad_at) *bad_at = i;
    return 0;
}

// The member called name, or NULL when absent or null.
static const cJSON *json_member(const cJSON *j_obj, const char *name) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_obj, name);
    return cJSON_IsNull(j) ? NULL : j;
}

// A JSON number that is a whole number within [lo, hi], checked in double first.
static int json_to_int(const cJSON *j, const char *what, long long *out, long long lo, long long hi,
                       char *err) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!cJSON_IsNumber(j) || !isfinite(v) || v != floor(v))
        return kg_err(err, KG_EINVAL, "%s must be an integer", what);
    if (!(v >= (double)lo && v <= (double)hi))
        return kg_err(err, KG_ERANGE, "%s must be in %lld..%lld (got %.17g)", what, lo, hi, v);
    *out = (long long)v;
    return KG_OK;
}

int json_int(const cJSON *j_obj, const char *name, long long *out, long long def, long long lo,
             long long hi, char *err) {
    const cJSON *j = json_member(j_obj, name);
    if (!j) {
        *out = def;
        return KG_OK;
    }
    return json_to_int(j, name, out, lo, hi, err);
}

int json_num(const cJSON *j_obj, const char *name, double *out, double def, double lo, double hi,
             char *err) {
    const cJSON *j = json_member(j_obj, name);
    if (!j) {
        *out = def;
        return KG_OK;
    }
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!cJSON_IsNumber(j) || !isfinite(v))
        return kg_err(err, KG_EINVAL, "%s must be a number", name);
    if (!(v >= lo && v <= hi))
        return kg_err(err, KG_ERANGE, "%s must be in %g..%g (got %.17g)", name, lo, hi, v);
    *out = v;
    return KG_OK;
}

int json_bool(const cJSON *j_obj, const char *name, int *out, int def, char *err) {
    const cJSON *j = json_member(j_obj, name);
    if (!j) {
        *out = def;
        return KG_OK;
    }
    if (!cJSON_IsBool(j)) return kg_err(err, KG_EINVAL, "%s must be true or false", name);
    *out = cJSON_IsTrue(j);
    return KG_OK;
}

// A string node's text, checked for UTF-8; what names it in err.
static int json_to_str(const cJSON *j, const char *what, const char **out, size_t *len, char *err) {
    if (!cJSON_IsString(j) || !j->valuestring)
        return kg_err(err, KG_EINVAL, "%s must be a string", what);
    size_t n = strlen(j->valuestring), bad;
    if (!json_utf8_valid(j->valuestring, n, &bad))
        return kg_err(err, KG_EINVAL, "%s: invalid UTF-8 at byte %zu", what, bad);
    *out = j->valuestring;
    if (len) *len = n;
    return KG_OK;
}

int json_str(const cJSON *j_obj, const char *name, const char **out, size_t *len, char *err) {
    const cJSON *j = json_member(j_obj, name);
    *out = NULL;
    if (len) *len = 0;
    if (!j) return KG_OK;
    return json_to_str(j, name, out, len, err);
}

int json_ids(const cJSON *j_arr, const char *name, int **out, size_t *n, long long lo, long long hi,
             char *err) {
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(j_arr))
        return kg_err(err, KG_EINVAL, "%s must be an array of integers", name);
    size_t count = (size_t)cJSON_GetArraySize(j_arr);
    if (count == 0) return KG_OK;
    int *ids = malloc(count * sizeof *ids);
    if (!ids) return kg_err(err, KG_ENOMEM, "%s: out of memory", name);
    size_t i = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, j_arr) {
        char what[64];
        snprintf(what, sizeof what, "%s[%zu]", name, i);
        long long v;
        int rc = json_to_int(j, what, &v, lo, hi, err);
        if (rc) {
            free(ids);
            return rc;
        }
        ids[i++] = (int)v;
    }
    *out = ids;
    *n = i;
    return KG_OK;
}

int json_str_list(const cJSON *j_obj, const char *name, const char ***out, size_t *n, size_t max_n,
                  char *err) {
    const cJSON *j = json_member(j_obj, name);
    *out = NULL;
    *n = 0;
    if (!j) return KG_OK;
    if (!cJSON_IsString(j) && !cJSON_IsArray(j))
        return kg_err(err, KG_EINVAL, "%s must be a string or an array of strings", name);
    size_t count = cJSON_IsString(j) ? 1 : (size_t)cJSON_GetArraySize(j);
    if (count > max_n)
        return kg_err(err, KG_ERANGE, "%s: at most %zu strings (got %zu)", name, max_n, count);
    if (count == 0) return KG_OK;
    const char **list = malloc(count * sizeof *list);
    if (!list) return kg_err(err, KG_ENOMEM, "%s: out of memory", name);
    size_t i = 0;
    const cJSON *j_s = cJSON_IsString(j) ? j : j->child;
    for (; i < count && j_s; i++, j_s = j_s->next) {
        char what[64];
        if (cJSON_IsString(j))
            snprintf(what, sizeof what, "%s", name);
        else
            snprintf(what, sizeof what, "%s[%zu]", name, i);
        int rc = json_to_str(j_s, what, &list[i], NULL, err);
        if (!rc && list[i][0] == '\0') rc = kg_err(err, KG_ERANGE, "%s: empty string", what);
        if (rc) {
            free(list);
            return rc;
        }
    }
    *out = list;
    *n = i;
    return KG_OK;
}
