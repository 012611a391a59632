// json_in.h — validating a request's JSON at the door: parse with a length and an end
// pointer, then typed getters with a default and a range.
//
// Getters: an absent key or a JSON null takes the default; a value of the wrong type is
// KG_EINVAL (HTTP 400) and a value outside the range KG_ERANGE (HTTP 422), never silently
// defaulted. err names the parameter. Strings must be valid UTF-8 (KG_EINVAL otherwise).
// All functions are thread-safe (no cJSON global error state is read).
#ifndef JSON_IN_H
#define JSON_IN_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/kg.h"

// Parses body[0..len) (body[len] must be '\0') into a JSON object. KG_EINVAL for malformed
// or truncated JSON, trailing bytes or a top level that is not an object. Free with
// cJSON_Delete().
int json_parse_object(const char *body, size_t len, cJSON **out, char *err);

// 1 if s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF); *bad_at gets the offset of the first bad byte (may be NULL).
int json_utf8_valid(const char *s, size_t n, size_t *bad_at);

int json_int(const cJSON *j_obj, const char *name, long long *out, long long def, long long lo,
             long long hi, char *err);
int json_num(const cJSON *j_obj, const char *name, double *out, double def, double lo, double hi,
             char *err);
int json_bool(const cJSON *j_obj, const char *name, int *out, int def, char *err);
// *out points into j_obj (NULL when absent); *len its byte length.
int json_str(const cJSON *j_obj, const char *name, const char **out, size_t *len, char *err);
// An array of integers in [lo, hi] as a malloc'd int array (free(); NULL when empty).
int json_ids(const cJSON *j_arr, const char *name, int **out, size_t *n, long long lo, long long hi,
             char *err);
// A string or an array of at most max_n strings (e.g. "stop"), pointers into j_obj in a
// malloc'd array (free(); NULL when absent or empty).
int json_str_list(const cJSON *j_obj, const char *name, const char ***out, size_t *n, size_t max_n,
                  char *err);

#endif
