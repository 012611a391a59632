// test_base_json.c — base/kg_json: JSON text from a file that holds a NUL (a \u0000 escape
// or a raw 0 byte) is refused, naming the key, on one line; text without one passes, the
// look-alikes included (an escaped backslash before "u0000", other \u escapes). cJSON itself
// decodes \u0000 into its C string, which then ends early: that is what is checked first.
#include <cjson/cJSON.h>
#include <string.h>

#include "base/kg.h"
#include "base/kg_json.h"
#include "check.h"

// Checks text[0..len): rc KG_OK when want is NULL, else KG_EFORMAT and a one-line message
// that contains want.
static void expect_n(const char *what, const char *text, size_t len, const char *want) {
    char err[KG_ERRLEN] = "";
    int rc = kg_json_check_nul(text, len, "f.json", err);
    if (!want) {
        CHECK_MSG(rc == KG_OK, "%s: rc %d (%s)", what, rc, err);
    } else {
        CHECK_MSG(rc == KG_EFORMAT && strstr(err, want) && !strchr(err, '\n'),
                  "%s: rc %d, '%s' does not say '%s'", what, rc, err, want);
    }
    printf("%-32s -> %s\n", what, rc ? err : "ok");
}

static void expect(const char *what, const char *text, const char *want) {
    expect_n(what, text, strlen(text), want);
}

// Why the check exists: cJSON 1.7.15 reads "q8_0\u0000x" as the C string "q8_0".
static void test_cjson_truncates(void) {
    const char *text = "{\"kogpt2.quant\": \"q8_0\\u0000x\"}";
    cJSON *j = cJSON_Parse(text);
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kogpt2.quant"));
    CHECK_MSG(v && !strcmp(v, "q8_0"), "cJSON no longer truncates at \\u0000 (got '%s')",
              v ? v : "(null)");
    cJSON_Delete(j);
}

static void test_refused(void) {
    expect("value under a key", "{\"kogpt2.quant\": \"q8_0\\u0000x\"}",
           "\"kogpt2.quant\" holds a NUL (\\u0000) in its value");
    expect("nested value",
           "{\"__metadata__\": {\"format\": \"pt\", \"kogpt2.quant\": \"\\u0000\"}}",
           "\"kogpt2.quant\" holds a NUL");
    expect("a key", "{\"ok\": 1, \"wte.weight\\u0000junk\": {\"dtype\": \"F32\"}}",
           "the key \"wte.weight...\" holds a NUL");
    expect("a key, blank before ':'", "{\"a\\u0000\" \n : 1}", "the key \"a...\"");
    expect("an array's value: its key", "{\"merges\": [\"a b\", {\"x\": 1}, \"c\\u0000 d\"]}",
           "\"merges\" holds a NUL (\\u0000) in its value");
    expect("a dtype", "{\"dtype\": \"F32\\u0000\"}", "\"dtype\" holds a NUL");
    expect("a top-level string", "\"\\u0000\"", "a string holds a NUL (\\u0000) at byte 1");
    expect("after an escaped quote", "{\"k\": \"a\\\"b\\u0000\"}", "\"k\" holds a NUL");
    expect("after an escaped backslash", "{\"k\": \"a\\\\\\u0000\"}", "\"k\" holds a NUL");
    expect("a key with a newline in it", "{\"a\\nb\": \"\\u0000\"}", "\"a\\nb\" holds a NUL");
    static const char raw_in_str[] = "{\"model_type\": \"gpt2\0x\"}";
    expect_n("a raw 0 byte in a string", raw_in_str, sizeof raw_in_str - 1,
             "\"model_type\" holds a NUL");
    static const char raw_out[] = "{\"n_layer\": 2}\0 trailing";
    expect_n("a raw 0 byte after the value", raw_out, sizeof raw_out - 1, "a NUL byte at byte 14");
    // deeper than the keys remembered: still refused, named generically
    char deep[400] = "";
    for (int i = 0; i < 70; i++)
        strcat(deep, "[");
    strcat(deep, "\"\\u0000\"");
    expect("nested 70 deep", deep, "a string holds a NUL");
}

static void test_accepted(void) {
    expect("no NUL", "{\"a\": \"q8_0\", \"b\": [1, 2, {\"c\": \"\\u0041\"}]}", NULL);
    // a backslash, then the text u0000: the JSON "\\u0000" is 6 characters, no NUL
    expect("an escaped backslash before u0000", "{\"k\": \"\\\\u0000\"}", NULL);
    expect("\\u0001 and \\u0100", "{\"k\": \"\\u0001\", \"l\": \"\\u0100\"}", NULL);
    expect("u0000 outside any escape", "{\"u0000\": \"u0000\"}", NULL);
    expect("empty text", "", NULL);
    expect_n("cut inside an escape", "{\"k\": \"\\u000", 12, NULL); // cJSON refuses it
    expect("not JSON, no NUL", "{{{]]]\"", NULL);
}

int main(void) {
    test_cjson_truncates();
    test_refused();
    test_accepted();
    return check_report();
}
