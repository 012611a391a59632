// commands.h — the subcommands of the kogpt2 command line. Each takes (argc, argv) with
// argv[0] = the subcommand's name, parses its own flags with getopt_long and returns the
// process exit code (0 ok, 1 failure, 2 usage). A usage error prints one line saying what
// was wrong ("kogpt2 next: --top-k must be ..."), then the usage when that helps.
//
// cli.c holds what several subcommands share: flag values, getopt's errors, the model flags
// and the model (backend, weights, state, tokenizer) they open. Those helpers never print:
// they return KG_* codes with one line in err, and the cmd_* function prints it.
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} CliCommand;

int cmd_next(int argc, char **argv);       // cmd_next.c
int cmd_generate(int argc, char **argv);   // cmd_generate.c
int cmd_tokenize(int argc, char **argv);   // cmd_tokenize.c
int cmd_detokenize(int argc, char **argv); // cmd_tokenize.c
int cmd_convert(int argc, char **argv);    // cmd_convert.c
int cmd_score(int argc, char **argv);      // cmd_score.c (score_run.c)

// What --version prints: "kogpt2 0.3.0 (commit 1a2b3c4d5e6f)" (kg_version, kg_commit) into
// out (KG_ERRLEN bytes). Returns out.
const char *cli_version(char *out);

// Appends the ids in s (decimal, separated by commas and/or whitespace) to *ids, which holds
// *n of *cap and grows with realloc. 0, or -1 on a malformed list or OOM (*ids stays the
// caller's to free).
int cli_parse_ids(const char *s, int **ids, size_t *n, size_t *cap);

// A flag's value as an integer in min..max (decimal, nothing after it), or a number in
// min..max (finite; strtod's syntax). KG_OK with *out, else KG_EINVAL with err naming the
// flag, the range and the value: "--top-k must be an integer in 1..100, got '0'".
int cli_int(const char *flag, const char *s, long long min, long long max, long long *out,
            char *err);
int cli_num(const char *flag, const char *s, double min, double max, double *out, char *err);

// The line for what getopt_long (with opterr = 0 and an optstring that starts with ':') just
// refused: c is '?' (an unknown option) or ':' (a missing value); argv is the one it read.
// Returns err: "unknown option '--frobnicate'", "--model needs a value".
const char *cli_opt_error(int c, char **argv, char *err);
// After the flags (argv[first ..] is what getopt left) of a command that takes a prompt as --text
// or --tokens (next, generate): what is wrong with the rest of argv and those two, written into err
// ("unexpected argument 'x'", no prompt, both given), or NULL when nothing is.
const char *cli_prompt_error(int argc, char **argv, int first, const char *text, const char *tokens,
                             char *err);

// The flags that pick and load a model, shared by next and generate. Their getopt_long vals:
#define CLI_OPT_MODEL     'm'
#define CLI_OPT_TOKENIZER 'T'
#define CLI_OPT_THREADS   'j'
#define CLI_OPT_DTYPE     'd'
#define CLI_OPT_PRECISION 'P'
#define CLI_OPT_DEVICE    'D'
// clang-format off
#define CLI_MODEL_OPTIONS                                                                          \
    {"model", required_argument, 0, CLI_OPT_MODEL},                                                \
    {"tokenizer", required_argument, 0, CLI_OPT_TOKENIZER},                                        \
    {"threads", required_argument, 0, CLI_OPT_THREADS},                                            \
    {"dtype", required_argument, 0, CLI_OPT_DTYPE},                                                \
    {"precision", required_argument, 0, CLI_OPT_PRECISION},                                        \
    {"device", required_argument, 0, CLI_OPT_DEVICE}
// clang-format on

typedef struct {
    const char *model;     // as given; NULL: the project's models/default
    const char *tokenizer; // NULL: the model directory's own
    const char *device;    // "auto" unless given
    int threads;           // 0: one per core
    KgDtype dtype;         // weights in memory (KG_DTYPE_AUTO: the file's)
    KgDtype precision;     // the backend's mixed precision: KG_F32 or KG_BF16
    char dir[4096];        // the model directory cli_model_resolve found
    Gpt2Config config;     // its config.json, for the flags' ranges (n_ctx, V)
} CliModelArgs;

// The defaults: device "auto", dtype auto, precision f32.
void cli_model_args_init(CliModelArgs *a);

// Takes option c with its value when it is one of the model flags: 1 (taken), 0 (not a model
// flag), or KG_EINVAL with err naming the flag and the value.
int cli_model_flag(CliModelArgs *a, int c, const char *value, char *err);

// After the flags: a->dir becomes the model directory (--model, an ORG/NAME in the Hugging
// Face cache, or models/default when none was given) and a->config its config.json. KG_OK,
// KG_EINVAL (no model at all), or KG_EIO / KG_EFORMAT (not in the cache, no config.json, a
// bad one), err filled.
int cli_model_resolve(CliModelArgs *a, char *err);

// The prompt of --text (encoded with tok, at most n_ctx tokens) or of --tokens (parsed; tok
// unused), checked against the model's config: not empty, ids < V, at most n_ctx tokens.
// KG_OK with *ids (malloc'd, *n of them), or KG_EINVAL / KG_ENOMEM with err filled (*ids is
// then the caller's to free, or NULL).
int cli_prompt_ids(const CliModelArgs *a, const char *text, const char *tokens,
                   const Tokenizer *tok, int **ids, size_t *n, char *err);

// A model opened for one sequence: backend, weights, forward state and tokenizer.
typedef struct {
    KgBackend *be;
    Gpt2 m;
    Gpt2State s;
    Tokenizer *tok; // NULL when none was found and none was required
} CliModel;

// First the tokenizer (--tokenizer, else the model directory's) into cm, zeroed first: with
// need_tok, failing to find one is an error, else cm->tok stays NULL. KG_OK, or an error with
// err filled and cm holding nothing. (A prompt can then be checked before the weights load.)
int cli_model_open_tokenizer(CliModel *cm, const CliModelArgs *a, int need_tok, char *err);

// Then the backend (its one device line goes to log, which may be NULL), the weights and a
// forward state of max_rows rows, max_logit_rows of them with logits (1..max_rows). KG_OK, or an
// error with err filled and cm holding nothing (its tokenizer closed too). Close with
// cli_model_close().
int cli_model_open(CliModel *cm, const CliModelArgs *a, size_t max_rows, size_t max_logit_rows,
                   FILE *log, char *err);
void cli_model_close(CliModel *cm);

#endif
