// commands.h — the subcommands of the kogpt2 command line. Each takes (argc, argv) with
// argv[0] = the subcommand's name, reads its flags from its own table (base/flags.h: one row
// per flag, --help rendered from the rows) and returns the process exit code (0 ok, 1
// failure, 2 usage). A usage error prints one line saying what was wrong ("kogpt2 next:
// --top-k must be ...").
//
// cli.c holds what several subcommands share: the flag parse, the model flags and the model
// (backend, weights, state, tokenizer) they open. Those helpers print only where they say so;
// the others return KG_* codes with one line in err, and the cmd_* function prints it.
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "base/flags.h"
#include "model/backend.h"
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

// Appends the ids in s (decimal) to *ids, which holds *n of *cap and grows with realloc. Ids
// are separated by commas, with blanks around them or not ("1,2", "1, 2"), and with
// spaces_too by blanks alone as well ("1 2": detokenize's words); blanks around the list are
// fine, an empty element is not ("1,,2", ",1", "1,"). 0, or -1 on a malformed list or OOM
// (*ids stays the caller's to free).
int cli_parse_ids(const char *s, int spaces_too, int **ids, size_t *n, size_t *cap);

// A subcommand's flags (its table t, base/flags.h) into args: the rows' defaults, then argv.
// -1 to go on with *first_arg where the arguments that are not flags start, else the exit
// code after printing: 0 after --help (t's help) or --version, 2 after a usage error (its line,
// "kogpt2 next: --top-k must be ..."), 1 when out of memory.
int cli_flags_parse(const KgFlagTable *t, void *args, int argc, char **argv, int *first_arg);

// After the flags (argv[first ..] is what getopt left) of a command that takes a prompt as --text
// or --tokens (next, generate): what is wrong with the rest of argv and those two, written into err
// ("unexpected argument 'x'", no prompt, both given), or NULL when nothing is.
const char *cli_prompt_error(int argc, char **argv, int first, const char *text, const char *tokens,
                             char *err);

// The flags that pick and load a model, shared by next and generate: rows of their tables,
// landing in the CliModelArgs called model inside their arguments T.
// clang-format off
#define CLI_MODEL_FLAGS(T)                                                                         \
    {.name = "model", .short_name = 'm', .kind = KG_FLAG_STR, .metavar = "DIR",                    \
     KG_FLAG_AT(T, model.model), .def_text = "the project's models/default",                       \
     .help = "a model directory (config.json + model.safetensors, shards or pytorch_model.bin) "   \
             "or ORG/NAME[@REV] in the Hugging Face cache"},                                       \
    {.name = "tokenizer", .short_name = 'T', .kind = KG_FLAG_STR, .metavar = "P",                  \
     KG_FLAG_AT(T, model.tokenizer), .def_text = "--model's",                                      \
     .help = "tokenizer.json, *.model or a directory"},                                            \
    {.name = "threads", .short_name = 'j', .kind = KG_FLAG_INT, .metavar = "N",                    \
     KG_FLAG_AT(T, model.threads), .def = "0", .min = 0, .max = 4096,                              \
     .help = "compute threads; 0: one per core"},                                                  \
    {.name = "dtype", .short_name = 'd', .kind = KG_FLAG_FUNC, .metavar = "T",                     \
     KG_FLAG_AT(T, model.dtype), .set = kg_dtype_flag, .def = "auto",                              \
     .help = "weights in memory: auto keeps the file's (zero-copy), f32, f16, bf16; q8_0 and "     \
             "q4_0 quantize the layers and LM head (cpu only)"},                                   \
    {.name = "precision", .short_name = 'P', .kind = KG_FLAG_FUNC, .metavar = "P",                 \
     KG_FLAG_AT(T, model.precision), .set = kg_precision_flag, .def = "f32",                       \
     .help = "f32 or bf16: the layers' matmuls on bf16 operands, f32 sums: faster prompts with "   \
             "AVX512-BF16 (emulated, slower, on other CPUs); logits move ~1e-3 relative"},         \
    {.name = "device", .short_name = 'D', .kind = KG_FLAG_FUNC, .metavar = "D",                    \
     KG_FLAG_AT(T, model.device), .set = kg_device_flag, .def = "auto",                            \
     .help = "auto (a GPU when there is one, else the CPU), cpu, cuda, cuda:N"}
// clang-format on

typedef struct {
    const char *model;     // as given; NULL: the project's models/default
    const char *tokenizer; // NULL: the model directory's own
    const char *device;    // auto, cpu, cuda, cuda:N
    int threads;           // 0: one per core
    KgDtype dtype;         // weights in memory (KG_DTYPE_AUTO: the file's)
    KgDtype precision;     // the backend's mixed precision: KG_F32 or KG_BF16
    char dir[4096];        // the model directory cli_model_resolve found
    Gpt2Config config;     // its config.json, for the flags' ranges (n_ctx, V)
} CliModelArgs;

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
