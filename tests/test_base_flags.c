// test_base_flags.c — base/flags.h: every kind of row into fields of several widths, the
// ranges and their messages, the environment against the command line (a flag given wins and
// its variable is not read), repeated flags, unknown and malformed flags, positional
// arguments, defaults, and --help rendered from the rows.
#define _GNU_SOURCE // setenv, open_memstream
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "base/kg.h"
#include "check.h"

typedef struct {
    int verbose;
    int8_t tiny;
    unsigned short mid;
    int count;
    size_t bytes;
    uint64_t steps;
    long long offset;
    float rate;
    double ratio;
    const char *name, *file;
    int mode;
    const char *inputs[3];
    size_t n_inputs;
    char seen_from[32]; // the FUNC row's last from
    int funcs, opt_given;
    const char *opt_value;
} Args;

// A FUNC row: refuses "bad", notes from.
static int set_tag(void *field, const char *v, const char *from, char *err) {
    Args *a = field;
    if (!strcmp(v, "bad")) return kg_err(err, KG_EINVAL, "%s: not a tag: '%s'", from, v);
    a->funcs++;
    snprintf(a->seen_from, sizeof a->seen_from, "%s", from);
    return KG_OK;
}

// An OPTIONAL_VALUE FUNC row: value NULL when given alone.
static int set_opt(void *field, const char *v, const char *from, char *err) {
    (void)from, (void)err;
    Args *a = field;
    a->opt_given = 1;
    a->opt_value = v;
    return KG_OK;
}

static const KgFlagChoice MODES[] = {{"fast", 7}, {"slow", -3}, {NULL, 0}};

static const KgFlag ROWS[] = {
    {.name = "verbose",
     .short_name = 'v',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(Args, verbose),
     .env = "KGT_VERBOSE",
     .help = "say more"},
    {.name = "tiny",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(Args, tiny),
     .min = -100,
     .max = 100,
     .help = "an int8_t"},
    {.name = "mid",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(Args, mid),
     .min = 0,
     .max = 65535,
     .help = "an unsigned short"},
    {.name = "count",
     .short_name = 'n',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(Args, count),
     .def = "10",
     .min = 1,
     .max = 1000,
     .env = "KGT_COUNT",
     .help = "how many"},
    {.name = "bytes",
     .kind = KG_FLAG_INT,
     .metavar = "B",
     KG_FLAG_AT(Args, bytes),
     .min = 0,
     .max = LLONG_MAX,
     .help = "a size_t"},
    {.name = "steps",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(Args, steps),
     .def = "1000000000000",
     .min = 1,
     .max = 1000000000000000000ll,
     .help = "a uint64_t"},
    {.name = "offset",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(Args, offset),
     .min = LLONG_MIN,
     .max = LLONG_MAX,
     .help = "a long long"},
    {.name = "rate",
     .kind = KG_FLAG_NUM,
     .opts = KG_FLAG_OPEN_LOW,
     .metavar = "X",
     KG_FLAG_AT(Args, rate),
     .def = "0.5",
     .lo = 0,
     .hi = 1,
     .env = "KGT_RATE",
     .help = "a float in (0, 1]"},
    {.name = "ratio",
     .kind = KG_FLAG_NUM,
     .metavar = "X",
     KG_FLAG_AT(Args, ratio),
     .lo = 1,
     .hi = INFINITY,
     .help = "a double, at least 1"},
    {.name = "name",
     .kind = KG_FLAG_STR,
     .opts = KG_FLAG_NOT_EMPTY,
     .metavar = "S",
     KG_FLAG_AT(Args, name),
     .def_text = "the program's",
     .env = "KGT_NAME",
     .help = "a string that must not be empty"},
    {.name = "file",
     .kind = KG_FLAG_PATH,
     .metavar = "PATH",
     KG_FLAG_AT(Args, file),
     .env = "KGT_FILE",
     .help = "something that exists"},
    {.name = "mode",
     .kind = KG_FLAG_CHOICE,
     .metavar = "M",
     KG_FLAG_AT(Args, mode),
     .choices = MODES,
     .def = "fast",
     .help = "fast or slow"},
    {.name = "input",
     .short_name = 'i',
     .kind = KG_FLAG_LIST,
     .metavar = "P",
     KG_FLAG_AT(Args, inputs),
     KG_FLAG_COUNT_AT(Args, n_inputs),
     .max = 3,
     .env = "KGT_INPUT",
     .help = "repeat it"},
    {.name = "tag",
     .kind = KG_FLAG_FUNC,
     .metavar = "T",
     .offset = 0,
     .set = set_tag,
     .env = "KGT_TAG",
     .help = "parsed by a function"},
    {.name = "opt",
     .kind = KG_FLAG_FUNC,
     .opts = KG_FLAG_OPTIONAL_VALUE,
     .metavar = "[=V]",
     .offset = 0,
     .set = set_opt,
     .help = "a value or none"},
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "this help"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "the version"},
};

static const KgFlagTable TABLE = {.program = "kgt",
                                  .usage = "[options] FILE...",
                                  .flags = ROWS,
                                  .n_flags = sizeof ROWS / sizeof ROWS[0],
                                  .notes = "A note.\n"};

static const char *const ENVS[] = {"KGT_VERBOSE", "KGT_COUNT", "KGT_RATE", "KGT_NAME",
                                   "KGT_FILE",    "KGT_INPUT", "KGT_TAG"};

// Parses the words (NULL-terminated) into *a over the defaults: the rc, err filled.
static int parse(Args *a, KgFlagsSeen *seen, char *err, ...) {
    char *argv[32] = {"kgt"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *w; (w = va_arg(ap, char *)) && argc < 31;)
        argv[argc++] = w;
    va_end(ap);
    memset(a, 0, sizeof *a);
    err[0] = '\0';
    REQUIRE(kg_flags_defaults(&TABLE, a, err) == KG_OK, "defaults: %s", err);
    return kg_flags_parse(&TABLE, a, argc, argv, seen, err);
}

static void test_defaults_and_kinds(void) {
    Args a;
    char err[KG_ERRLEN];
    KgFlagsSeen seen;
    CHECK(parse(&a, &seen, err, NULL) == KG_OK);
    CHECK(a.count == 10 && a.steps == 1000000000000ull && a.rate == 0.5f && a.mode == 7);
    CHECK(!a.verbose && !a.name && a.n_inputs == 0 && seen.first_arg == 1);
    CHECK(kg_flags_from(&TABLE, &seen, "count") == KG_FLAG_FROM_DEFAULT);
    CHECK(kg_flags_from(&TABLE, &seen, "nope") == -1);
    // every kind, long and short forms, --name=value and --name value
    CHECK(parse(&a, &seen, err, "-v", "--tiny", "-100", "--mid=65535", "-n", "1000", "--bytes",
                "18446744073709551615", NULL) == KG_EINVAL); // past LLONG_MAX: refused
    CHECK_MSG(!strcmp(err, "--bytes must be an integer >= 0, got '18446744073709551615'"), "%s",
              err);
    CHECK(parse(&a, &seen, err, "-v", "--tiny", "-100", "--mid=65535", "-n", "1000", "--bytes",
                "9223372036854775807", "--steps", "1000000000000000000", "--offset",
                "-9223372036854775808", "--rate", "1", "--ratio", "1e300", "--name", "x", "--file",
                ".", "--mode", "slow", "--tag", "t", "--opt", NULL) == KG_OK);
    CHECK(a.verbose == 1 && a.tiny == -100 && a.mid == 65535 && a.count == 1000);
    CHECK(a.bytes == (size_t)LLONG_MAX && a.steps == 1000000000000000000ull);
    CHECK(a.offset == LLONG_MIN && a.rate == 1.0f && a.ratio == 1e300);
    CHECK(!strcmp(a.name, "x") && !strcmp(a.file, ".") && a.mode == -3);
    CHECK(a.funcs == 1 && !strcmp(a.seen_from, "--tag") && a.opt_given && !a.opt_value);
    CHECK(kg_flags_from(&TABLE, &seen, "verbose") == KG_FLAG_FROM_ARG);
    CHECK(parse(&a, NULL, err, "--opt=v", NULL) == KG_OK && !strcmp(a.opt_value, "v"));
}

// Each bad value and the message naming the flag, the range and the value.
static void test_bad_values(void) {
    static const struct {
        const char *flag, *value, *says;
    } CASES[] = {
        {"--count", "0", "--count must be an integer in 1..1000, got '0'"},
        {"--count", "1001", "--count must be an integer in 1..1000, got '1001'"},
        {"--count", "ten", "--count must be an integer in 1..1000, got 'ten'"},
        {"--count", "5x", "--count must be an integer in 1..1000, got '5x'"},
        {"--count", "", "--count must be an integer in 1..1000, got ''"},
        {"--count", "99999999999999999999", "--count must be an integer in 1..1000"},
        {"--tiny", "101", "--tiny must be an integer in -100..100, got '101'"},
        {"--rate", "0", "--rate must be a number in (0, 1], got '0'"},
        {"--rate", "1.5", "--rate must be a number in (0, 1], got '1.5'"},
        {"--rate", "nan", "--rate must be a number in (0, 1], got 'nan'"},
        {"--ratio", "inf", "--ratio must be a number >= 1, got 'inf'"},
        {"--ratio", "0.5", "--ratio must be a number >= 1, got '0.5'"},
        {"--name", "", "--name must not be empty"},
        {"--file", "/nonexistent/kgt", "--file: /nonexistent/kgt: No such file or directory"},
        {"--mode", "medium", "--mode must be one of fast, slow, got 'medium'"},
        {"--tag", "bad", "--tag: not a tag: 'bad'"},
        {"--count",
         "\x01\xff"
         "0123456789012345678901234567890123456789",
         "got '??01234567890123456789012345678901234567'"}, // unprintable: '?'; 40 bytes shown
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        Args a;
        char err[KG_ERRLEN];
        int rc = parse(&a, NULL, err, CASES[i].flag, CASES[i].value, NULL);
        CHECK_MSG(rc == KG_EINVAL && strstr(err, CASES[i].says), "%s %s: %d '%s'", CASES[i].flag,
                  CASES[i].value, rc, err);
    }
}

static void test_unknown_and_malformed(void) {
    static const struct {
        const char *word, *says;
    } CASES[] = {
        {"--bogus", "unknown option '--bogus'"},
        {"--bogus=1", "unknown option '--bogus=1'"},
        {"-Q", "unknown option '-Q'"},
        {"--count", "--count needs a value"},
        {"-n", "-n needs a value"},
        {"--verbose=1", "--verbose takes no value"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        Args a;
        char err[KG_ERRLEN];
        int rc = parse(&a, NULL, err, CASES[i].word, NULL);
        CHECK_MSG(rc == KG_EINVAL && !strcmp(err, CASES[i].says), "%s: %d '%s'", CASES[i].word, rc,
                  err);
    }
    Args a;
    char err[KG_ERRLEN];
    CHECK(parse(&a, NULL, err, "--count", "3", "--help", "--bogus", NULL) == KG_FLAGS_HELP);
    CHECK(parse(&a, NULL, err, "-h", NULL) == KG_FLAGS_HELP);
    CHECK(parse(&a, NULL, err, "--version", NULL) == KG_FLAGS_VERSION);
    CHECK(parse(&a, NULL, err, "--cou", "3", NULL) == KG_OK && a.count == 3); // an abbreviation
    // more flags than words: a group of short switches, and a value inside the group
    CHECK(parse(&a, NULL, err, "-vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv", "-vn5", NULL) ==
              KG_OK &&
          a.verbose == 1 && a.count == 5);
}

static void test_repeats_and_positionals(void) {
    Args a;
    char err[KG_ERRLEN];
    KgFlagsSeen seen;
    // a scalar: the last wins; a list: each value, in order; FUNC: every time
    CHECK(parse(&a, &seen, err, "one", "-n", "2", "--count=3", "-i", "x", "two", "--input", "y",
                "--tag", "a", "--tag", "b", "--", "--count", NULL) == KG_OK);
    CHECK(a.count == 3 && a.n_inputs == 2 && !strcmp(a.inputs[0], "x") &&
          !strcmp(a.inputs[1], "y") && a.funcs == 2);
    CHECK(seen.first_arg == 13); // "one", "two" and "--count" moved behind the flags
    // (argv as parse() built it: kgt + 15 words; getopt permuted them)
    CHECK(parse(&a, NULL, err, "-i", "a", "-i", "b", "-i", "c", "-i", "d", NULL) == KG_EINVAL);
    CHECK_MSG(!strcmp(err, "--input: at most 3"), "%s", err);
    // a list's first value replaces what it held (a program's own default list)
    memset(&a, 0, sizeof a);
    a.inputs[0] = "default";
    a.n_inputs = 1;
    char *argv[] = {"kgt", "-i", "given", NULL};
    CHECK(kg_flags_parse(&TABLE, &a, 3, argv, NULL, err) == KG_OK && a.n_inputs == 1 &&
          !strcmp(a.inputs[0], "given"));
}

static void clear_env(void) {
    for (size_t i = 0; i < sizeof ENVS / sizeof ENVS[0]; i++)
        unsetenv(ENVS[i]);
}

static void test_environment(void) {
    Args a;
    char err[KG_ERRLEN];
    KgFlagsSeen seen;
    clear_env();
    setenv("KGT_COUNT", "7", 1);
    setenv("KGT_VERBOSE", "Yes", 1);
    setenv("KGT_RATE", "0.25", 1);
    setenv("KGT_INPUT", "from-env", 1);
    setenv("KGT_TAG", "e", 1);
    CHECK(parse(&a, &seen, err, NULL) == KG_OK);
    CHECK(a.count == 7 && a.verbose == 1 && a.rate == 0.25f && a.n_inputs == 1 &&
          !strcmp(a.inputs[0], "from-env") && !strcmp(a.seen_from, "KGT_TAG"));
    CHECK(kg_flags_from(&TABLE, &seen, "count") == KG_FLAG_FROM_ENV);
    // the flag wins; the variable is then not read
    CHECK(parse(&a, &seen, err, "--count", "8", "-i", "x", NULL) == KG_OK && a.count == 8 &&
          a.n_inputs == 1 && !strcmp(a.inputs[0], "x"));
    CHECK(kg_flags_from(&TABLE, &seen, "count") == KG_FLAG_FROM_ARG);
    // a bad variable: an error naming it, unless the flag is given
    setenv("KGT_COUNT", "0", 1);
    CHECK(parse(&a, NULL, err, NULL) == KG_EINVAL);
    CHECK_MSG(!strcmp(err, "KGT_COUNT must be an integer in 1..1000, got '0'"), "%s", err);
    CHECK(parse(&a, NULL, err, "-n", "9", NULL) == KG_OK && a.count == 9);
    setenv("KGT_VERBOSE", "maybe", 1);
    CHECK(parse(&a, NULL, err, "-n", "9", NULL) == KG_EINVAL);
    CHECK_MSG(!strcmp(err, "KGT_VERBOSE must be 1, true, yes, on or 0, false, no, off, got "
                           "'maybe'"),
              "%s", err);
    CHECK(parse(&a, NULL, err, "-n", "9", "-v", NULL) == KG_OK && a.verbose);
    setenv("KGT_VERBOSE", "off", 1); // a switch's "off" leaves the field
    CHECK(parse(&a, NULL, err, "-n", "9", NULL) == KG_OK && !a.verbose);
    setenv("KGT_FILE", "/nonexistent/kgt", 1);
    CHECK(parse(&a, NULL, err, "-n", "9", NULL) == KG_EINVAL &&
          !strcmp(err, "KGT_FILE: /nonexistent/kgt: No such file or directory"));
    unsetenv("KGT_FILE");
    // empty: unset, except for a NOT_EMPTY row
    setenv("KGT_COUNT", "", 1);
    CHECK(parse(&a, NULL, err, NULL) == KG_OK && a.count == 10);
    setenv("KGT_NAME", "", 1);
    CHECK(parse(&a, NULL, err, NULL) == KG_EINVAL);
    CHECK_MSG(!strcmp(err, "KGT_NAME is set but empty (unset it, or give a value)"), "%s", err);
    CHECK(parse(&a, NULL, err, "--name", "n", NULL) == KG_OK && !strcmp(a.name, "n"));
    clear_env();
}

// A table whose default does not parse is a bug: KG_EINTERNAL naming the program.
static void test_bad_table(void) {
    static const KgFlag BAD[] = {{.name = "n",
                                  .kind = KG_FLAG_INT,
                                  KG_FLAG_AT(Args, count),
                                  .def = "0",
                                  .min = 1,
                                  .max = 2,
                                  .help = "x"}};
    KgFlagTable t = {.program = "bad", .usage = "", .flags = BAD, .n_flags = 1};
    Args a;
    char err[KG_ERRLEN];
    CHECK(kg_flags_defaults(&t, &a, err) == KG_EINTERNAL);
    CHECK_MSG(!strcmp(err, "bad: the default: --n must be an integer in 1..2, got '0'"), "%s", err);
    long long v;
    double x;
    CHECK(kg_flag_int("--top-k", "0", 1, 12000, &v, err) == KG_EINVAL &&
          !strcmp(err, "--top-k must be an integer in 1..12000, got '0'"));
    CHECK(kg_flag_num("--t", "2.5", 0, 100, &x, err) == KG_OK && x == 2.5);
}

// --help: the usage line, one entry per row with its short form, the sentence wrapped at 80
// columns, the range or choices, the default and the variable; then the notes.
static void test_help(void) {
    static const char WANT[] =
        "usage: kgt [options] FILE...\n"
        "  -v, --verbose           say more (env KGT_VERBOSE)\n"
        "      --tiny N            an int8_t (-100..100)\n"
        "      --mid N             an unsigned short (0..65535)\n"
        "  -n, --count N           how many (1..1000; default 10; env KGT_COUNT)\n"
        "      --bytes B           a size_t (>= 0)\n"
        "      --steps N           a uint64_t (1..1000000000000000000; default\n"
        "                          1000000000000)\n"
        "      --offset N          a long long (>= -9223372036854775808)\n"
        "      --rate X            a float in (0, 1] ((0, 1]; default 0.5; env KGT_RATE)\n"
        "      --ratio X           a double, at least 1 (>= 1)\n"
        "      --name S            a string that must not be empty (default the\n"
        "                          program's; env KGT_NAME)\n"
        "      --file PATH         something that exists (env KGT_FILE)\n"
        "      --mode M            fast or slow (fast|slow; default fast)\n"
        "  -i, --input P           repeat it (repeatable, up to 3; env KGT_INPUT)\n"
        "      --tag T             parsed by a function (env KGT_TAG)\n"
        "      --opt [=V]          a value or none\n"
        "  -h, --help              this help\n"
        "      --version           the version\n"
        "A note.\n";
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f, "open_memstream");
    kg_flags_help(&TABLE, f);
    fclose(f);
    CHECK_MSG(!strcmp(text, WANT), "--help:\n%s", text);
    for (char *line = text; *line;) { // no line past 80 columns
        size_t n = strcspn(line, "\n");
        CHECK_MSG(n <= 80, "%.*s", (int)n, line);
        line += n + (line[n] == '\n');
    }
    free(text);
}

int main(void) {
    test_defaults_and_kinds();
    test_bad_values();
    test_unknown_and_malformed();
    test_repeats_and_positionals();
    test_environment();
    test_bad_table();
    test_help();
    return check_report();
}
