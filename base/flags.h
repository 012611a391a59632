// flags.h — a program's command line as one table of rows (redis config.c's static_configs[]):
// each row is one flag with its kind, default, range or choices, environment variable, help
// line and the field its value lands in. kg_flags_parse reads argv (getopt_long underneath)
// and the environment from the rows, naming the flag or variable in every error, and
// kg_flags_help renders --help from the same rows, so the three never disagree.
//
// How to add a flag: one row in the program's table (kogpt2d: server/main_args.c, kogpt2:
// cli/cmd_*.c, kogpt2-train: train/main_args.c) and the field it lands in, e.g.
//
//     {.name = "max-batch", .kind = KG_FLAG_INT, .metavar = "N", KG_FLAG_AT(MainArgs, max_batch),
//      .def = "64", .min = 1, .max = 1024, .env = "KOGPT2_MAX_BATCH",
//      .help = "sequences advanced together per step"},
//
// gives --max-batch N and KOGPT2_MAX_BATCH, checked against 1..1024 ("kogpt2d: --max-batch
// must be an integer in 1..1024, got '0'"), 64 until either is given, and the --help entry
//       --max-batch N       sequences advanced together per step (1..1024; default
//                           64; env KOGPT2_MAX_BATCH)
// (then say so where the README lists the program's flags). A value a kind cannot check (a dtype, a
// NAME=DIR pair) is a KG_FLAG_FUNC row whose .set parses it. The order of precedence: the row's
// .def, then its variable, then the flag; when the flag is given its variable is not read at all (a
// bad value there is ignored), and an empty variable counts as unset (except for a
// KG_FLAG_NOT_EMPTY row: an error, so that a secret that expanded to nothing never turns a check
// off).
#ifndef KG_FLAGS_H
#define KG_FLAGS_H

#include <stddef.h>
#include <stdio.h>

#define KG_FLAGS_MAX 128 // rows in one table

// kg_flags_parse's answers besides KG_OK and the errors: --help or --version was given (the
// caller prints and exits 0).
#define KG_FLAGS_HELP    1
#define KG_FLAGS_VERSION 2

typedef enum {
    KG_FLAG_SWITCH,  // no value: stores 1 into an int field (--no-speculate: no_speculate); its
                     // variable takes 1/true/yes/on (store) or 0/false/no/off (leave it)
    KG_FLAG_INT,     // a decimal integer in .min ..max into an integer field of any width
    KG_FLAG_NUM,     // a finite number in .lo ..hi (strtod's syntax) into a float or double
    KG_FLAG_STR,     // a string, kept as given (argv's or the environment's), into a const char *
    KG_FLAG_PATH,    // a STR that must name something that exists (a file or a directory)
    KG_FLAG_CHOICE,  // one of .choices' names: its value into an integer (or enum) field
    KG_FLAG_LIST,    // a repeatable STR: appended to a const char *[.max] with its count (a
                     // size_t) at .count_offset; the first value replaces what the list held
    KG_FLAG_FUNC,    // .set parses and stores the value (every time the flag is given)
    KG_FLAG_HELP,    // --help: kg_flags_parse returns KG_FLAGS_HELP
    KG_FLAG_VERSION, // --version: kg_flags_parse returns KG_FLAGS_VERSION
} KgFlagKind;

// KgFlag.opts
#define KG_FLAG_OPEN_LOW       (1u << 0) // NUM: .lo itself is refused: (lo, hi]
#define KG_FLAG_NOT_EMPTY      (1u << 1) // STR, PATH, LIST, FUNC: "" is an error (also from env)
#define KG_FLAG_OPTIONAL_VALUE (1u << 2) // FUNC: --name alone passes NULL; a value needs --name=V

// One of a CHOICE row's values; a table of them ends with {NULL, 0}.
typedef struct {
    const char *name;
    int value;
} KgFlagChoice;

typedef struct {
    const char *name; // the long flag without "--": "max-batch"
    char short_name;  // its one-letter form ('p' for -p), or 0
    KgFlagKind kind;
    unsigned opts;        // KG_FLAG_* bits above
    const char *metavar;  // the value's name in --help ("N", "DIR"); none for SWITCH/HELP/VERSION
    size_t offset, size;  // the field it lands in: KG_FLAG_AT(T, field) (FUNC: .set's field)
    const char *def;      // the default as one would type it, applied by kg_flags_defaults;
                          // NULL leaves the field as the program initialised it
    const char *def_text; // --help's words for a default .def cannot type ("the model's
                          // n_ctx"), or NULL
    long long min, max;   // INT: the range; LIST: .max is the array's capacity
    double lo, hi;        // NUM: the range (hi may be INFINITY)
    const KgFlagChoice *choices; // CHOICE
    size_t count_offset;         // LIST: KG_FLAG_COUNT_AT(T, n_field)
    const char *env;             // its environment variable ("KOGPT2_MAX_BATCH"), or NULL
    const char *help;            // one sentence; --help wraps it and adds the range, default
                                 // and variable
    // FUNC: parses value (NULL: an OPTIONAL_VALUE flag given alone) into field (the program's
    // struct + .offset; offset 0 gives it the whole struct). from names the flag or the
    // variable ("--model", "KOGPT2_MODEL") for its message. KG_OK, or a KG_E* with err filled.
    int (*set)(void *field, const char *value, const char *from, char *err);
} KgFlag;

// Where a row's value lands: .offset and .size of field in the program's struct T.
#define KG_FLAG_AT(T, field) .offset = offsetof(T, field), .size = sizeof(((T *)0)->field)
// A LIST row's count field (a size_t) in T.
#define KG_FLAG_COUNT_AT(T, field) .count_offset = offsetof(T, field)
// A .def from a macro that is a plain number: KG_FLAG_DEF(SRV_WORK_THREADS) is "2".
#define KG_FLAG_DEF(macro) KG_FLAG_QUOTE_(macro)
#define KG_FLAG_QUOTE_(x)  #x

typedef struct {
    const char *program; // "kogpt2d", "kogpt2 next": the help's first word
    const char *usage;   // what follows "usage: " (lines after the first start with spaces)
    const KgFlag *flags;
    size_t n_flags;
    const char *notes; // --help's paragraph after the flags, or NULL
} KgFlagTable;

// Which rows a parse set and where the arguments that are not flags start.
typedef struct {
    int first_arg;                    // argv[first_arg ..argc) are the positional arguments
    unsigned char from[KG_FLAGS_MAX]; // per row: KG_FLAG_FROM_*
} KgFlagsSeen;

enum { KG_FLAG_FROM_DEFAULT = 0, KG_FLAG_FROM_ENV, KG_FLAG_FROM_ARG };

// Applies every row's .def to args (the struct the rows' offsets point into); rows without
// one are left alone. KG_OK, or KG_EINTERNAL naming the row whose default does not parse (a
// bug in the table). Thread safety: touches args only.
int kg_flags_defaults(const KgFlagTable *t, void *args, char *err);

// Reads argv[1 ..argc) and the environment into args: for each row with a variable that no
// flag on the command line set, the variable (in table order), then the flags in their order
// (a repeated scalar flag: the last wins). Argument words that are not flags are moved
// behind the flags (GNU getopt's permutation; "--" ends the flags); seen (may be NULL) gets
// where they start and which rows were set. Returns KG_OK; KG_FLAGS_HELP or KG_FLAGS_VERSION
// as soon as such a row's flag is met; or KG_EINVAL (KG_ENOMEM, or what a FUNC row returned)
// with err naming the flag or variable: "--port must be an integer in 0..65535, got 'x'",
// "KOGPT2_PORT must be ...", "unknown option '--bogus'", "--tokens needs a value",
// "--json takes no value". args may then hold some of the values. KG_EINTERNAL: a table
// getopt cannot take (more than KG_FLAGS_MAX rows). Not thread safe: getopt_long's state is
// global (run it from main, before any thread that parses).
int kg_flags_parse(const KgFlagTable *t, void *args, int argc, char **argv, KgFlagsSeen *seen,
                   char *err);

// The --help text of t into f: "usage: PROGRAM USAGE", one entry per row ("  -p, --port N"
// then the help wrapped to 80 columns, with the range or choices, the default and the
// variable in parentheses), then the notes. Writes to f only.
void kg_flags_help(const KgFlagTable *t, FILE *f);

// Where the row called name (its long name) got its value in the parse that filled seen:
// a KG_FLAG_FROM_* value, or -1 when t has no such row.
int kg_flags_from(const KgFlagTable *t, const KgFlagsSeen *seen, const char *name);

// A value checked where its range is only known later (1..the vocabulary once the model's
// config is read): an integer in min..max (decimal, nothing after it) into *out, or a finite
// number in min..max. KG_OK, or KG_EINVAL with err naming from, the range and the value:
// "--top-k must be an integer in 1..12000, got '0'".
int kg_flag_int(const char *from, const char *s, long long min, long long max, long long *out,
                char *err);
int kg_flag_num(const char *from, const char *s, double min, double max, double *out, char *err);

#endif
