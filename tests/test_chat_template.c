// test_chat_template.c — server/chat_template/ against Python's jinja2: every vector of
// tests/chat_templates/vectors.json (real templates, the two defaults and one construct at a
// time, written by tests/tools/chat_template_vectors.py in the environment transformers renders
// templates in) must render byte for byte, or fail where jinja2 fails. Then the refusals (what the
// subset lacks: clear one-line errors naming the line), the limits (nesting, parts, names, output,
// memory, work) and a mutation run over every vector template: no crash, no leak (ASan), and every
// failure one line starting "chat template: ". With --diff it is the C side of
// tests/tools/chat_template_diff_jinja2.py (random templates against jinja2; run by hand).
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kg.h"
#include "check.h"
#include "server/chat_template/chat_template.h"

typedef struct {
    ChatMessage *msgs;
    size_t n;
} Conv;

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
        if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        }
        if (buf) buf[size] = '\0', *n = (size_t)size;
    }
    fclose(f);
    return buf;
}

// The vectors beside this file: $KG_SOURCE_DIR (ctest sets it) or this source's directory.
static char *read_vectors(size_t *n) {
    char path[4096];
    const char *root = getenv("KG_SOURCE_DIR");
    if (root && *root)
        snprintf(path, sizeof path, "%s/tests/chat_templates/vectors.json", root);
    else {
        const char *slash = strrchr(__FILE__, '/');
        int dir = slash ? (int)(slash - __FILE__) : 1;
        snprintf(path, sizeof path, "%.*s/chat_templates/vectors.json", dir,
                 slash ? __FILE__ : ".");
    }
    char *text = read_file(path, n);
    REQUIRE(text, "%s: cannot read (set KG_SOURCE_DIR to the source tree)", path);
    return text;
}

// One conversation of the JSON as ChatMessages pointing into it (content null -> NULL).
static Conv conv_from_json(const cJSON *j_conv) {
    Conv c = {NULL, (size_t)cJSON_GetArraySize(j_conv)};
    c.msgs = calloc(c.n ? c.n : 1, sizeof *c.msgs);
    REQUIRE(c.msgs, "out of memory");
    size_t i = 0;
    const cJSON *j_msg;
    cJSON_ArrayForEach(j_msg, j_conv) {
        const cJSON *j_role = cJSON_GetObjectItemCaseSensitive(j_msg, "role");
        const cJSON *j_content = cJSON_GetObjectItemCaseSensitive(j_msg, "content");
        REQUIRE(cJSON_IsString(j_role), "a message without a role");
        c.msgs[i].role = j_role->valuestring;
        c.msgs[i].content = cJSON_IsString(j_content) ? j_content->valuestring : NULL;
        i++;
    }
    return c;
}

// s with control characters and non-ASCII escaped, for failure messages.
static void print_escaped(const char *label, const char *s, size_t n) {
    fprintf(stderr, "  %s (%zu bytes): \"", label, n);
    for (size_t i = 0; i < n && i < 400; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c < 0x20 || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fputs(n > 400 ? "...\"\n" : "\"\n", stderr);
}

static const char *json_str_or_null(const cJSON *j_obj, const char *name) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_obj, name);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

// Renders src with conv; KG code, output (malloc'd) and err.
static int render_src(const char *src, size_t len, const Conv *c, int gen, const char *bos,
                      const char *eos, char **out, size_t *n, char *err) {
    ChatTemplate *t;
    *out = NULL, *n = 0;
    int rc = chat_template_parse(&t, src, len, err);
    if (rc) return rc;
    rc = chat_template_render(t, c->msgs, c->n, gen, bos, eos, out, n, err);
    chat_template_free(t);
    return rc;
}

static int valid_error(const char *err) {
    return !strncmp(err, "chat template: ", 15) && !strchr(err, '\n') && strlen(err) > 15;
}

// --- jinja2's renderings ---

static void test_vectors(const cJSON *j_root, Conv *chat) {
    const cJSON *j_convs = cJSON_GetObjectItemCaseSensitive(j_root, "conversations");
    const cJSON *j_vectors = cJSON_GetObjectItemCaseSensitive(j_root, "vectors");
    REQUIRE(cJSON_IsObject(j_convs) && cJSON_IsArray(j_vectors), "vectors.json: bad shape");
    *chat = conv_from_json(cJSON_GetObjectItemCaseSensitive(j_convs, "chat"));
    int n_ok = 0, n_err = 0, n_usr_sys = 0, n_plain = 0;
    const cJSON *j_v;
    cJSON_ArrayForEach(j_v, j_vectors) {
        const char *name = json_str_or_null(j_v, "name");
        const char *src = json_str_or_null(j_v, "template");
        const char *conv = json_str_or_null(j_v, "messages");
        const char *expected = json_str_or_null(j_v, "expected");
        const char *error = json_str_or_null(j_v, "error");
        REQUIRE(name && src && conv && (expected || error), "vectors.json: a bad vector");
        if (!strncmp(name, "default_usr_sys_", 16)) {
            CHECK_MSG(!strcmp(src, CHAT_TEMPLATE_USR_SYS), "%s: not the C default", name);
            n_usr_sys++;
        }
        if (!strncmp(name, "default_plain_", 14)) {
            CHECK_MSG(!strcmp(src, CHAT_TEMPLATE_PLAIN), "%s: not the C default", name);
            n_plain++;
        }
        Conv c = conv_from_json(cJSON_GetObjectItemCaseSensitive(j_convs, conv));
        int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j_v, "add_generation_prompt"));
        char err[KG_ERRLEN] = "", *out;
        size_t n;
        int rc = render_src(src, strlen(src), &c, gen, json_str_or_null(j_v, "bos_token"),
                            json_str_or_null(j_v, "eos_token"), &out, &n, err);
        if (expected) {
            int same =
                rc == KG_OK && n == strlen(expected) && !memcmp(out, expected, n) && out[n] == '\0';
            CHECK_MSG(same, "%s: differs from jinja2 (rc %d: %s)", name, rc, err);
            if (!same) {
                print_escaped("jinja2", expected, strlen(expected));
                if (out) print_escaped("ours  ", out, n);
            }
            n_ok++;
        } else {
            CHECK_MSG(rc != KG_OK && !out, "%s: jinja2 fails (%s), we rendered", name, error);
            CHECK_MSG(rc == KG_OK || valid_error(err), "%s: error text '%s'", name, err);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j_v, "error_is_message")))
                CHECK_MSG(strstr(err, error), "%s: '%s' does not carry '%s'", name, err, error);
            if (rc) printf("  %-24s jinja2: %s\n  %-24s ours:   %s\n", name, error, "", err);
            n_err++;
        }
        free(out);
        free(c.msgs);
    }
    CHECK(n_usr_sys >= 3 && n_plain >= 3);
    printf("vectors: %d renderings and %d failures as in jinja2 %s\n", n_ok, n_err,
           json_str_or_null(j_root, "jinja2"));
}

// --- what the subset refuses, and why ---

typedef struct {
    const char *src;
    int code;
    const char *says;
} Refusal;

static const Refusal PARSE_REFUSALS[] = {
    {"{{ messages | tojson }}", KG_EUNSUP, "the filter 'tojson' is not supported (line 1)"},
    {"a\nb\n{{ x|map('upper') }}", KG_EUNSUP, "the filter 'map' is not supported (line 3)"},
    {"{% macro f() %}x{% endmacro %}", KG_EUNSUP, "the tag 'macro' is not supported"},
    {"{% call f() %}x{% endcall %}", KG_EUNSUP, "the tag 'call' is not supported"},
    {"{% include 'x.jinja' %}", KG_EUNSUP, "the tag 'include' is not supported"},
    {"{% import 'x' as y %}", KG_EUNSUP, "the tag 'import' is not supported"},
    {"{% from 'x' import y %}", KG_EUNSUP, "the tag 'from' is not supported"},
    {"{% extends 'base' %}", KG_EUNSUP, "the tag 'extends' is not supported"},
    {"{% block b %}{% endblock %}", KG_EUNSUP, "the tag 'block' is not supported"},
    {"{% raw %}{{ '{% endraw %}", KG_EUNSUP, "the tag 'raw' is not supported"},
    {"{% filter upper %}x{% endfilter %}", KG_EUNSUP, "the tag 'filter' is not supported"},
    {"{% for m in messages %}{% break %}{% endfor %}", KG_EUNSUP, "the tag 'break'"},
    {"{% generation %}x{% endgeneration %}", KG_EUNSUP, "the tag 'generation'"},
    {"\n\n{% frobnicate %}", KG_EUNSUP, "the tag 'frobnicate' is not supported (line 3)"},
    {"{% set ns = namespace(found=false) %}", KG_EUNSUP, "the function 'namespace'"},
    {"{% set ns.found = true %}", KG_EUNSUP, "namespace()"},
    {"{{ strftime_now('%Y-%m-%d') }}", KG_EUNSUP, "the function 'strftime_now'"},
    {"{{ range(3) }}", KG_EUNSUP, "the function 'range'"},
    {"{{ messages[0](1) }}", KG_EUNSUP, "calling this value"},
    {"{{ x|trim() () }}", KG_EUNSUP, "calling this value"},
    {"{{ 1.5 }}", KG_EUNSUP, "only decimal integers"},
    {"{{ 0x1f }}", KG_EUNSUP, "only decimal integers"},
    {"{{ 1e3 }}", KG_EUNSUP, "only decimal integers"},
    {"{{ 99999999999999999999 }}", KG_EUNSUP, "too large"},
    {"{{ {'a': 1} }}", KG_EUNSUP, "dict literals"},
    {"{{ (1, 2) }}", KG_EUNSUP, "tuples"},
    {"{{ x[1, 2] }}", KG_EUNSUP, "tuple subscripts"},
    {"{% set x = 1, 2 %}", KG_EUNSUP, "tuples"},
    {"{{ 1 < 2 < 3 }}", KG_EUNSUP, "chained comparisons"},
    {"{{ x is defined is defined }}", KG_EFORMAT, "tests cannot be chained with is"},
    {"{{ x is defined 'a' }}", KG_EUNSUP, "the test 'defined' takes no arguments"},
    {"{{ x is even.odd }}", KG_EUNSUP, "the test 'even.odd' is not supported"},
    {"{{ x|foo.bar }}", KG_EUNSUP, "the filter 'foo.bar' is not supported"},
    {"{% if 1 if true else 2 %}{% endif %}", KG_EFORMAT, "unexpected 'if'"}, // as in Jinja
    {"{{ 4 / 2 }}", KG_EUNSUP, "the operator '/' is not supported"},
    {"{{ 2 ** 3 }}", KG_EUNSUP, "the operator '**' is not supported"},
    {"{{ x is divisibleby(3) }}", KG_EUNSUP, "the test 'divisibleby' is not supported"},
    {"{{ x is defined(1) }}", KG_EUNSUP, "the test 'defined' takes no arguments"},
    {"{{ 'a'.split() }}", KG_EUNSUP, "the method 'split' is not supported"},
    {"{{ messages[0].get('content') }}", KG_EUNSUP, "the method 'get' is not supported"},
    {"{{ x|default(1, 2, 3) }}", KG_EFORMAT, "the filter 'default' takes 0 to 2 arguments, not 3"},
    {"{{ 'a'.startswith() }}", KG_EFORMAT, "the method 'startswith' takes 1 argument, not 0"},
    {"{{ raise_exception() }}", KG_EFORMAT, "raise_exception takes one argument"},
    {"{{ x|join(d='') }}", KG_EUNSUP, "keyword arguments"},
    {"{% for a, b in x %}{% endfor %}", KG_EUNSUP, "unpacking"},
    {"{% for x in y if x %}{% endfor %}", KG_EUNSUP, "for ... if is not supported"},
    {"{% for x in y recursive %}{% endfor %}", KG_EUNSUP, "for ... recursive"},
    {"{% set x %}a{% endset %}", KG_EUNSUP, "block assignments"},
    {"{% set true = 1 %}", KG_EFORMAT, "cannot assign to 'true'"},
    {"{{ '\\N{BULLET}' }}", KG_EUNSUP, "\\N{...} escapes"},
    {"{{ '\\ud800' }}", KG_EUNSUP, "gives no character"},
    {"{{ '\\\xc3\xa9' }}", KG_EUNSUP, "backslash before a non-ASCII"},
    {"{{ '\\x4' }}", KG_EFORMAT, "truncated \\x escape"},
    // syntax errors
    {"{{ x", KG_EFORMAT, "a tag is not closed (line 1)"},
    {"a\n{% if x", KG_EFORMAT, "a tag is not closed (line 2)"},
    {"{% if x %}", KG_EFORMAT, "missing {% endif %} for the if on line 1"},
    {"\n{% if x %}{% else %}", KG_EFORMAT, "missing {% endif %} for the if on line 2"},
    {"{% for x in y %}", KG_EFORMAT, "missing {% endfor %} for the for on line 1"},
    {"{% endif %}", KG_EFORMAT, "unexpected {% endif %} (line 1)"},
    {"{% else %}", KG_EFORMAT, "unexpected {% else %}"},
    {"{% if x %}{% endfor %}", KG_EFORMAT, "unexpected {% endfor %}"},
    {"{% if x %}{% else %}{% elif y %}{% endif %}", KG_EFORMAT, "unexpected {% elif %}"},
    {"{% if x %}{% endif y %}", KG_EFORMAT, "unexpected 'y'"},
    {"{{ 'abc }}", KG_EFORMAT, "a string is not closed"},
    {"{# x", KG_EFORMAT, "a comment is not closed"},
    {"{{ }}", KG_EFORMAT, "unexpected end of tag"},
    {"{{ x y }}", KG_EFORMAT, "unexpected 'y'"},
    {"{% if %}{% endif %}", KG_EFORMAT, "unexpected end of tag"},
    {"{% %}", KG_EFORMAT, "expected a tag name"},
    {"{{ x @ y }}", KG_EFORMAT, "unexpected character '@'"},
    {"{{ x ! y }}", KG_EFORMAT, "unexpected character '!'"},
    {"{{ x\x01 }}", KG_EFORMAT, "unexpected byte 0x01"},
    {"{{ (x }}", KG_EFORMAT, "unexpected '}'"}, // inside ( ), }} is two braces, as in Jinja
    {"{{ x not y }}", KG_EFORMAT, "unexpected 'y'"},
    {"{% for x on y %}{% endfor %}", KG_EFORMAT, "unexpected 'on'"},
    {"{{ x. }}", KG_EFORMAT, "unexpected end of tag"},
    {"{{ x[] }}", KG_EUNSUP, "tuple subscripts"},
};

static const Refusal RENDER_REFUSALS[] = {
    {"{{ messages }}", KG_EUNSUP, "turning a list into text is not supported (line 1)"},
    {"{{ messages[0] }}", KG_EUNSUP, "turning a dict into text"},
    {"{% for m in messages %}{{ loop }}{% endfor %}", KG_EUNSUP, "turning a loop into text"},
    {"{{ 'abc'[0] }}", KG_EUNSUP, "indexing a str is not supported"},
    {"{{ 'abc'[1:] }}", KG_EUNSUP, "slicing a str is not supported"},
    {"{% for c in 'abc' %}{% endfor %}", KG_EUNSUP, "looping over a str is not supported"},
    {"{% for k in messages[0] %}{% endfor %}", KG_EUNSUP, "looping over a dict"},
    {"{% for x in 5 %}{% endfor %}", KG_EINVAL, "cannot loop over int"},
    {"{{ 'abc'|first }}", KG_EUNSUP, "first/last of a str"},
    {"{{ 'abc'|join }}", KG_EUNSUP, "joining a str"},
    {"{{ [1, 2] < [1, 3] }}", KG_EUNSUP, "ordering lists is not supported"},
    {"{{ 'a %s' % 2 }}", KG_EUNSUP, "str % formatting is not supported"},
    {"{{ none[1:] }}", KG_EUNSUP, "slicing a none is not supported"},
    {"{% for m in messages %}{{ 'x' in loop }}{% endfor %}", KG_EUNSUP, "'in loop'"},
    {"{{ 9223372036854775807 + 1 }}", KG_ERANGE, "integer overflow"},
    {"{{ -(-9223372036854775807 - 1) }}", KG_ERANGE, "integer overflow"},
    {"{{ x.y }}", KG_EINVAL, "'x' is undefined (line 1)"},
    {"\n{{ messages[9].role }}", KG_EINVAL, "list index out of range (line 2)"},
    {"{{ 1 + 'a' }}", KG_EINVAL, "unsupported operand types for +: int and str"},
    {"{{ 1 // 0 }}{{ 1 % 0 }}", KG_EINVAL, "division or modulo by zero"},
    {"{{ [1][::0] }}", KG_EINVAL, "slice step cannot be zero"},
    {"{{ [1]['a':] }}", KG_EINVAL, "slice indices must be integers"},
    {"{{ none|length }}", KG_EINVAL, "none has no length"},
    {"{{ raise_exception('Roles must alternate') }}", KG_EINVAL,
     "chat template: Roles must alternate"},
};

static void check_refusal(const Refusal *f, const Conv *chat, int at_parse) {
    char err[KG_ERRLEN] = "", *out = NULL;
    size_t n;
    ChatTemplate *t = NULL;
    int rc = chat_template_parse(&t, f->src, strlen(f->src), err);
    if (at_parse) {
        CHECK_MSG(rc == f->code && !t, "parse '%s': rc %d, want %d (%s)", f->src, rc, f->code, err);
    } else {
        CHECK_MSG(rc == KG_OK, "parse '%s': %s", f->src, err);
        if (rc == KG_OK)
            rc = chat_template_render(t, chat->msgs, chat->n, 1, "<s>", "</s>", &out, &n, err);
        CHECK_MSG(rc == f->code && !out, "render '%s': rc %d, want %d (%s)", f->src, rc, f->code,
                  err);
    }
    CHECK_MSG(strstr(err, f->says) && valid_error(err), "'%s': '%s' does not say '%s'", f->src, err,
              f->says);
    chat_template_free(t);
    free(out);
}

static void test_refusals(const Conv *chat) {
    for (size_t i = 0; i < sizeof PARSE_REFUSALS / sizeof *PARSE_REFUSALS; i++)
        check_refusal(&PARSE_REFUSALS[i], chat, 1);
    for (size_t i = 0; i < sizeof RENDER_REFUSALS / sizeof *RENDER_REFUSALS; i++)
        check_refusal(&RENDER_REFUSALS[i], chat, 0);
    printf("refusals: %zu at parse time, %zu at render time\n",
           sizeof PARSE_REFUSALS / sizeof *PARSE_REFUSALS,
           sizeof RENDER_REFUSALS / sizeof *RENDER_REFUSALS);
}

// --- limits ---

// A growing string: append, abort on OOM.
typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static void buf_add(Buf *b, const char *s) {
    size_t k = strlen(s);
    if (b->n + k + 1 > b->cap) {
        b->cap = (b->n + k + 1) * 2;
        b->s = realloc(b->s, b->cap);
        REQUIRE(b->s, "out of memory");
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static void buf_repeat(Buf *b, const char *s, int times) {
    for (int i = 0; i < times; i++)
        buf_add(b, s);
}

// Parses (and, when it parses, renders) b with conv; the code; *out and b reset.
static int try_src(Buf *b, const Conv *c, char **out, size_t *n, char *err) {
    int rc = render_src(b->s ? b->s : "", b->n, c, 1, "<s>", "</s>", out, n, err);
    free(b->s);
    *b = (Buf){0};
    return rc;
}

static void test_limits(const Conv *chat) {
    char err[KG_ERRLEN], *out;
    size_t n;
    Buf b = {0};
    int rc;

    buf_repeat(&b, "{% if true %}", CHAT_TEMPLATE_MAX_DEPTH), buf_add(&b, "deep");
    buf_repeat(&b, "{% endif %}", CHAT_TEMPLATE_MAX_DEPTH);
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_OK && !strcmp(out, "deep"), "64 nested ifs: %s", err);
    free(out);
    buf_repeat(&b, "{% for m in messages %}", CHAT_TEMPLATE_MAX_DEPTH + 1);
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "nested deeper than 64"), "65 fors: %s", err);

    buf_add(&b, "{{ "), buf_repeat(&b, "(", 40), buf_add(&b, "7"), buf_repeat(&b, ")", 40);
    buf_add(&b, " }}");
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_OK && !strcmp(out, "7"), "40 parentheses: %s", err);
    free(out);
    static const char *const TOO_DEEP[][3] = {
        {"{{ ", "(", "1"}, {"{{ ", "not ", "1"}, {"{{ ", "-", "1"},           {"{{ 1", " ~ 1", ""},
        {"{{ ", "[", ""},  {"{{ x", "[0]", ""},  {"{{ 1", " if 1 else 1", ""}};
    for (size_t i = 0; i < sizeof TOO_DEEP / sizeof *TOO_DEEP; i++) {
        buf_add(&b, TOO_DEEP[i][0]), buf_repeat(&b, TOO_DEEP[i][1], 5000);
        buf_add(&b, TOO_DEEP[i][2]), buf_add(&b, " }}");
        rc = try_src(&b, chat, &out, &n, err);
        CHECK_MSG(rc == KG_ERANGE && strstr(err, "nested deeper than 64"), "'%s' x 5000: %s",
                  TOO_DEEP[i][1], err);
    }
    buf_add(&b, "{% if false %}"), buf_repeat(&b, "{% elif false %}", 20000);
    buf_add(&b, "{% else %}flat{% endif %}"); // an elif chain is not nesting
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_OK && !strcmp(out, "flat"), "20000 elifs: %s", err);
    free(out);

    buf_repeat(&b, "{{ 1 }}", 70000);
    CHECK(try_src(&b, chat, &out, &n, err) == KG_ERANGE && strstr(err, "more than 65536 parts"));
    for (int i = 0; i < 300; i++) {
        char set[48];
        snprintf(set, sizeof set, "{%% set v%d = %d %%}", i, i);
        buf_add(&b, set);
    }
    CHECK(try_src(&b, chat, &out, &n, err) == KG_ERANGE && strstr(err, "more than 256 variable"));
    buf_repeat(&b, "x", CHAT_TEMPLATE_MAX_SOURCE + 1);
    CHECK(try_src(&b, chat, &out, &n, err) == KG_ERANGE && strstr(err, "longer than 1048576"));

    // output: two 600 KB messages through GPT-2's template
    char *big = malloc(600001);
    REQUIRE(big, "out of memory");
    memset(big, 'a', 600000), big[600000] = '\0';
    ChatMessage two[2] = {{"user", big}, {"assistant", big}};
    Conv large = {two, 2};
    buf_add(&b, "{% for m in messages %}{{ m.content }}{% endfor %}");
    rc = try_src(&b, &large, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "longer than 1048576 bytes"), "output: %s", err);
    buf_add(&b, "{{ messages[0].content }}");
    rc = try_src(&b, &large, &out, &n, err);
    CHECK_MSG(rc == KG_OK && n == 600000, "600 KB: %s", err);
    free(out);
    free(big);

    // work: six nested loops over 30 messages would run 729 million iterations
    ChatMessage thirty[30];
    for (int i = 0; i < 30; i++)
        thirty[i] = (ChatMessage){"user", "x"};
    Conv many = {thirty, 30};
    buf_repeat(&b, "{% for m in messages %}", 6), buf_repeat(&b, "{% endfor %}", 6);
    rc = try_src(&b, &many, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "steps"), "work: %s", err);
    // memory: a list or a string doubled 40 times
    buf_add(&b, "{% set l = messages %}"), buf_repeat(&b, "{% set l = l + l %}", 40);
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "more than 16 MiB"), "list memory: %s", err);
    buf_add(&b, "{% set s = 'ab' %}"), buf_repeat(&b, "{% set s = s ~ s %}", 40);
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "more than"), "string memory: %s", err);
    // superlinear work is charged before it is done: lists sharing sublists, strip's chars
    buf_add(&b, "{% set a = [] %}"), buf_repeat(&b, "{% set a = [a, a] %}", 60);
    buf_add(&b, "{{ a == a }}");
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "steps"), "2^60 comparisons: %s", err);
    buf_add(&b, "{% set s = 'a' * 300000 %}{{ s.strip('b' * 300000) }}");
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "steps"), "strip 300000 x 300000: %s", err);
    buf_add(&b, "{{ (['ab'] * 100000)|join(',')|length }}"); // one copy, not 10^5 growing ones
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_OK && !strcmp(out, "299999"), "join of 100000: %s", err);
    free(out);
    // lists nested by repeated sets, not by the syntax
    buf_add(&b, "{% set a = [] %}"), buf_repeat(&b, "{% set a = [a] %}", 100);
    buf_add(&b, "{{ a == a }}");
    rc = try_src(&b, chat, &out, &n, err);
    CHECK_MSG(rc == KG_ERANGE && strstr(err, "lists are nested deeper"), "nested lists: %s", err);
    printf("limits: depth %d, output %d bytes, parts, names, memory and work enforced\n",
           CHAT_TEMPLATE_MAX_DEPTH, CHAT_TEMPLATE_MAX_OUTPUT);
}

// --- the API's edges ---

static void test_api(const Conv *chat) {
    ChatTemplate *t;
    char err[KG_ERRLEN], *out;
    size_t n;
    REQUIRE(chat_template_parse(&t, CHAT_TEMPLATE_USR_SYS, strlen(CHAT_TEMPLATE_USR_SYS), NULL) ==
                KG_OK,
            "the default does not parse");
    CHECK(chat_template_render(t, chat->msgs, chat->n, 1, NULL, "</s>", &out, NULL, NULL) == KG_OK);
    CHECK(out && !strcmp(out, "친절하게 답해요.<usr>안녕?<sys>반가워요!</s><usr>What's up?<sys>"));
    free(out);
    CHECK(chat_template_render(t, NULL, 0, 0, NULL, NULL, &out, &n, err) == KG_OK && n == 0 &&
          out && out[0] == '\0');
    free(out);
    ChatMessage no_role[1] = {{NULL, "x"}};
    CHECK(chat_template_render(t, no_role, 1, 0, NULL, NULL, &out, &n, err) == KG_EINVAL && !out &&
          strstr(err, "message 0 has no role"));
    CHECK(chat_template_render(t, NULL, 1, 0, NULL, NULL, &out, &n, err) == KG_EINVAL);
    ChatMessage unknown[1] = {{"tool", "x"}};
    CHECK(chat_template_render(t, unknown, 1, 0, NULL, NULL, &out, &n, err) == KG_EINVAL &&
          strstr(err, "not tool"));
    // a template renders the same twice (nothing of a render stays behind)
    char *again;
    CHECK(chat_template_render(t, chat->msgs, chat->n, 0, NULL, "</s>", &out, &n, err) == KG_OK);
    CHECK(chat_template_render(t, chat->msgs, chat->n, 0, NULL, "</s>", &again, &n, err) == KG_OK);
    CHECK(out && again && !strcmp(out, again));
    free(out), free(again);
    chat_template_free(t);
    chat_template_free(NULL);
    CHECK(chat_template_parse(&t, NULL, 0, err) == KG_OK); // the empty template renders ""
    CHECK(chat_template_render(t, chat->msgs, chat->n, 1, NULL, NULL, &out, &n, err) == KG_OK &&
          n == 0);
    free(out);
    chat_template_free(t);
    // raise_exception's text: one line, cut at a character boundary
    Buf b = {0};
    buf_add(&b, "{{ raise_exception('line\\nbreak ");
    buf_repeat(&b, "가", 200), buf_add(&b, "') }}");
    CHECK(render_src(b.s, b.n, chat, 0, NULL, NULL, &out, &n, err) == KG_EINVAL);
    size_t len = strlen(err);
    CHECK(valid_error(err) && strstr(err, "line break") && len < KG_ERRLEN);
    CHECK(kg_ends_with(err, "가")); // whole characters only
    free(b.s);
    // NUL bytes: in text they pass through; the length says where the prompt ends
    CHECK(render_src("a\0b{{ '\\0' }}", 13, chat, 0, NULL, NULL, &out, &n, err) == KG_OK &&
          n == 4 && !memcmp(out, "a\0b\0", 5));
    free(out);
}

// --- mutations: every vector template, edited at random, must fail cleanly or render ---

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t rng(void) { // xorshift64*
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static void test_mutations(const cJSON *j_root, const Conv *chat) {
    static const char *const PIECES[] = {"{{",
                                         "}}",
                                         "{%",
                                         "%}",
                                         "{#",
                                         "#}",
                                         "-",
                                         "+",
                                         "'",
                                         "\"",
                                         "\\",
                                         "(",
                                         ")",
                                         "[",
                                         "]",
                                         ":",
                                         "|",
                                         ".",
                                         "\n",
                                         " ",
                                         "{% for x in messages %}",
                                         "{% endfor %}",
                                         "{% if 1 %}",
                                         "{% endif %}",
                                         "{% else %}",
                                         "loop",
                                         "not ",
                                         " in ",
                                         "messages",
                                         "0",
                                         "-1",
                                         "~",
                                         "\xe3\x80\x80",
                                         "\xff"};
    const cJSON *j_v;
    long runs = 0, ok = 0;
    char err[KG_ERRLEN], *out;
    size_t n;
    cJSON_ArrayForEach(j_v, cJSON_GetObjectItemCaseSensitive(j_root, "vectors")) {
        const char *src = json_str_or_null(j_v, "template");
        size_t len = strlen(src);
        char *buf = malloc(len + 64);
        REQUIRE(buf, "out of memory");
        for (int k = 0; k < 200; k++, runs++) {
            memcpy(buf, src, len);
            size_t m = len;
            for (int edits = 1 + (int)(rng() % 3); edits > 0; edits--) {
                size_t at = m ? rng() % m : 0;
                const char *piece = PIECES[rng() % (sizeof PIECES / sizeof *PIECES)];
                size_t pn = strlen(piece), cut = rng() % 3 ? 0 : rng() % 8;
                if (cut > m - at) cut = m - at;
                if (m - cut + pn > len + 63) continue;
                memmove(buf + at + pn, buf + at + cut, m - at - cut);
                memcpy(buf + at, piece, pn);
                m = m - cut + pn;
            }
            if (rng() % 8 == 0) m = rng() % (m + 1); // truncated
            int rc = render_src(buf, m, chat, (int)(rng() & 1), "<s>", "</s>", &out, &n, err);
            if (rc == KG_OK) {
                CHECK_MSG(out && out[n] == '\0', "mutation of %s: bad output",
                          json_str_or_null(j_v, "name"));
                ok++;
            } else {
                CHECK_MSG(!out && valid_error(err), "mutation of %s: rc %d, err '%s'",
                          json_str_or_null(j_v, "name"), rc, err);
                CHECK_MSG(rc == KG_EFORMAT || rc == KG_EUNSUP || rc == KG_EINVAL || rc == KG_ERANGE,
                          "mutation of %s: rc %d", json_str_or_null(j_v, "name"), rc);
            }
            free(out);
        }
        free(buf);
    }
    printf("mutations: %ld runs, %ld rendered, the rest refused with one line\n", runs, ok);
}

// --diff: templates from stdin (each a 4-byte little-endian length, then its bytes) rendered
// with vectors.json's "chat" conversation, the generation prompt, <s> and </s>; each answer
// "OK <bytes>\n<text>" or "ERR <code> <message>\n". tests/tools/chat_template_diff_jinja2.py
// feeds it random templates and compares with jinja2.
static int diff_mode(const Conv *chat) {
    unsigned char len4[4];
    while (fread(len4, 1, 4, stdin) == 4) {
        size_t len = len4[0] | (size_t)len4[1] << 8 | (size_t)len4[2] << 16 | (size_t)len4[3] << 24;
        char *src = malloc(len ? len : 1), err[KG_ERRLEN], *out;
        size_t n;
        REQUIRE(src && fread(src, 1, len, stdin) == len, "--diff: short input");
        int rc = render_src(src, len, chat, 1, "<s>", "</s>", &out, &n, err);
        if (rc)
            printf("ERR %d %s\n", rc, err);
        else
            printf("OK %zu\n", n), fwrite(out, 1, n, stdout);
        free(out);
        free(src);
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t n;
    char *text = read_vectors(&n);
    cJSON *j_root = cJSON_ParseWithLength(text, n);
    REQUIRE(j_root, "vectors.json: malformed JSON");
    Conv chat;
    if (argc > 1 && !strcmp(argv[1], "--diff")) {
        const cJSON *j_convs = cJSON_GetObjectItemCaseSensitive(j_root, "conversations");
        chat = conv_from_json(cJSON_GetObjectItemCaseSensitive(j_convs, "chat"));
        int rc = diff_mode(&chat);
        free(chat.msgs), cJSON_Delete(j_root), free(text);
        return rc;
    }
    double t0 = kg_now_s();
    test_vectors(j_root, &chat);
    test_refusals(&chat);
    double t1 = kg_now_s();
    test_limits(&chat);
    double t2 = kg_now_s();
    test_api(&chat);
    test_mutations(j_root, &chat);
    printf("time: vectors and refusals %.2f s, limits %.2f s, api and mutations %.2f s\n", t1 - t0,
           t2 - t1, kg_now_s() - t2);
    free(chat.msgs);
    cJSON_Delete(j_root);
    free(text);
    return check_report();
}
