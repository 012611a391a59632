// kg_json.h — a check on the text of a JSON file before cJSON parses it (base/: the bytes
// only, no cJSON here, so that model/ and tokenizer/ both use it).
//
// cJSON decodes a \u0000 escape into its C string (and keeps a raw 0 byte), so the string
// ends early: a quantization scheme "q8_0\u0000x" compares equal to "q8_0", a tensor
// "wte.weight\u0000junk" is found as wte.weight, a dtype "F32\u0000" passes as F32. No file
// we read has a use for a NUL, so a text that holds one is refused before any name in it is
// compared.
#ifndef KG_JSON_H
#define KG_JSON_H

#include <stddef.h>

// KG_OK when text[0..len) holds no 0 byte and no \u0000 escape. Otherwise KG_EFORMAT with
// one line that names where, as far as nesting tells: "WHAT: the key "wte.weight..." holds
// a NUL", or "WHAT: "w": "dtype" holds a NUL (\u0000) in its value" (the key the string
// sits under, and that key's own); names from the file are shown with kg_show. Text that is
// not JSON passes unless it holds a NUL: the parser that follows says what else is wrong.
int kg_json_check_nul(const char *text, size_t len, const char *what, char *err);

#endif
