// main_args.c — kogpt2-train's flags (main_args.h): one table per subcommand, read by
// base/flags.h (kogpt2-train reads no environment variables), and the checks that follow.
#include "main_args.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/flags.h"
#include "base/kg.h"
#include "ckpt.h"
#include "model/backend.h"
#include "model/hfcache.h"

// The trainer's --precision: fp16 too (with loss scaling on a GPU), unlike kg_precision_parse.
static const KgFlagChoice PRECISIONS[] = {
    {"f32", KG_F32}, {"bf16", KG_BF16}, {"fp16", KG_F16}, {NULL, 0}};

#define TOKENIZER_NOTE                                                                             \
    "TOKENIZER: a SentencePiece .model (models/default/kogpt2-default.model), a\n"                 \
    "tokenizer.json, or a model directory holding one.\n"

// A directory flag without its trailing slashes ("ckpt/" -> "ckpt"; "/" stays): a checkpoint's
// temporary and old siblings are named by appending to it. kogpt2-train reads no variables,
// so value is one of argv's strings, which a program may modify (C11 5.1.2.2.1).
static int set_dir(void *field, const char *value, const char *from, char *err) {
    (void)from, (void)err;
    char *p = (char *)value;
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/';)
        p[--n] = '\0';
    *(const char **)field = p;
    return KG_OK;
}

// A model directory or ORG/NAME[@REV] (the Hugging Face cache's copy), into buf.
static int set_model(void *field, const char *value, const char *from, char *buf, size_t cap,
                     char *err) {
    char why[KG_ERRLEN];
    if (hfcache_resolve(value, buf, cap, why)) return kg_err(err, KG_EINVAL, "%s: %s", from, why);
    *(const char **)field = buf;
    return KG_OK;
}

static int set_init_model(void *field, const char *value, const char *from, char *err) {
    static char dir[PATH_MAX];
    return set_model(field, value, from, dir, sizeof dir, err);
}

static int set_eval_model(void *field, const char *value, const char *from, char *err) {
    static char dir[PATH_MAX];
    return set_model(field, value, from, dir, sizeof dir, err);
}

// t's defaults into args: -1, or 1 after saying what in the table is wrong (a bug).
static int defaults(const KgFlagTable *t, void *args) {
    char err[KG_ERRLEN];
    if (!kg_flags_defaults(t, args, err)) return -1;
    fprintf(stderr, "%s\n", err);
    return 1;
}

// Parses argv's flags into args (over what it holds): -1 to go on with seen filled, else the
// exit code after printing.
static int parse(const KgFlagTable *t, void *args, int argc, char **argv, KgFlagsSeen *seen) {
    char err[KG_ERRLEN];
    int rc = kg_flags_parse(t, args, argc, argv, seen, err);
    if (rc == KG_OK) return -1;
    if (rc == KG_FLAGS_HELP) {
        kg_flags_help(t, stdout);
        return 0;
    }
    if (rc == KG_FLAGS_VERSION) {
        printf("kogpt2-train %s (commit %s)\n", kg_version(), kg_commit());
        return 0;
    }
    fprintf(stderr, "%s: %s\n", t->program, err);
    if (rc != KG_EINVAL) return 1;
    fprintf(stderr, "(%s --help lists the flags)\n", t->program);
    return 2;
}

// A usage error found after the flags: its line, then the hint; returns 2.
static int usage_error(const KgFlagTable *t, const char *why) {
    fprintf(stderr, "%s: %s\n(%s --help lists the flags)\n", t->program, why, t->program);
    return 2;
}

#define HELP_ROWS                                                                                  \
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"}, \
    {                                                                                              \
        .name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"           \
    }

// --- prepare ---

// --max-line-bytes at most: SentencePiece holds ~70 bytes per byte of a line (shard.h), and
// a line of 1.3 GB failed in it with "out of memory" (issue 24)
#define PREPARE_MAX_LINE_LIMIT (1ll << 30)

static const KgFlag PREPARE_ROWS[] = {
    {.name = "tokenizer",
     .kind = KG_FLAG_STR,
     .metavar = "TOKENIZER",
     KG_FLAG_AT(PrepareArgs, tokenizer),
     .help = "the tokenizer the shards are made with"},
    {.name = "input",
     .kind = KG_FLAG_LIST,
     .metavar = "PATH",
     KG_FLAG_AT(PrepareArgs, inputs),
     KG_FLAG_COUNT_AT(PrepareArgs, pa.n_inputs),
     .max = MAIN_MAX_INPUTS,
     .help = "a file or a directory (its .txt, .tsv, .csv files, optionally .gz, recursively, in "
             "name order) or a pipe (--input /dev/stdin), not a device"},
    {.name = "out",
     .kind = KG_FLAG_STR,
     .metavar = "DIR",
     KG_FLAG_AT(PrepareArgs, pa.out_dir),
     .help = "where the shards go (created if missing)"},
    {.name = "val-every-doc",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(PrepareArgs, pa.val_every),
     .def = "100",
     .min = 0,
     .max = LLONG_MAX,
     .help = "every N-th document goes to validation; 0: none"},
    {.name = "shard-tokens",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(PrepareArgs, pa.shard_tokens),
     .def = "0",
     .min = 0,
     .max = LLONG_MAX,
     .help = "ids per train shard before a new one starts; 0: 2^26"},
    {.name = "max-line-bytes",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(PrepareArgs, pa.max_line_bytes),
     .def = KG_FLAG_DEF(SHARD_MAX_LINE_DEFAULT),
     .min = 1,
     .max = PREPARE_MAX_LINE_LIMIT,
     .help = "a longer line (CSV/TSV: a record) is dropped and counted, as one that is not "
             "UTF-8 is"},
    {.name = "append",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(PrepareArgs, append),
     .help = "add to the shards already in DIR"},
    {.name = "force",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(PrepareArgs, force),
     .help = "replace the shards already in DIR (once the new ones are complete); without "
             "--append or --force a DIR that holds shards is refused"},
    HELP_ROWS,
};

static const KgFlagTable PREPARE_FLAGS = {
    .program = "kogpt2-train prepare",
    .usage = "--tokenizer TOKENIZER --input PATH [--input PATH ...] --out DIR\n"
             "                            [--val-every-doc N] [--shard-tokens N] [--append | "
             "--force]\n"
             "                            [--max-line-bytes N]",
    .flags = PREPARE_ROWS,
    .n_flags = sizeof PREPARE_ROWS / sizeof PREPARE_ROWS[0],
    .notes = TOKENIZER_NOTE};

int main_args_prepare(PrepareArgs *p, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    KgFlagsSeen seen;
    int rc;
    if ((rc = defaults(&PREPARE_FLAGS, p)) >= 0 ||
        (rc = parse(&PREPARE_FLAGS, p, argc, argv, &seen)) >= 0)
        return rc;
    if (p->append && p->force)
        return usage_error(&PREPARE_FLAGS, "--append and --force exclude each other");
    if (!p->tokenizer || !p->pa.n_inputs || !p->pa.out_dir)
        return usage_error(&PREPARE_FLAGS, "--tokenizer, --input and --out are required");
    if (seen.first_arg < argc) {
        char why[KG_ERRLEN];
        snprintf(why, sizeof why, "unexpected argument '%s'", argv[seen.first_arg]);
        return usage_error(&PREPARE_FLAGS, why);
    }
    p->pa.inputs = p->inputs;
    p->pa.mode = p->append ? SHARD_APPEND : p->force ? SHARD_REPLACE : SHARD_NEW;
    return -1;
}

// --- train ---

// What the train table fills: the run's arguments and --resume's directory.
typedef struct {
    TrainArgs a;
    const char *resume_dir; // --resume=DIR (--resume DIR: the one argument left)
} TrainCmd;

// --resume [DIR] (field: the TrainCmd).
static int set_resume(void *field, const char *value, const char *from, char *err) {
    TrainCmd *c = field;
    c->a.resume = 1;
    return value ? set_dir(&c->resume_dir, value, from, err) : KG_OK;
}

// --wire: the gradients' dtype between ranks (train_sync.h).
static const KgFlagChoice WIRE_DTYPES[] = {
    {"f32", KG_F32}, {"bf16", KG_BF16}, {"f16", KG_F16}, {NULL, 0}};

// A count of the train table (>= least) landing in TrainArgs' member, and a number (>= least).
#define COUNT(flag, member, meta, dflt, least, text)                                               \
    {                                                                                              \
        .name = flag, .kind = KG_FLAG_INT, .metavar = meta, KG_FLAG_AT(TrainCmd, a.member),        \
        .def = dflt, .min = least, .max = LLONG_MAX, .help = text                                  \
    }
#define NUMBER(flag, member, dflt, least, text)                                                    \
    {                                                                                              \
        .name = flag, .kind = KG_FLAG_NUM, .metavar = "X", KG_FLAG_AT(TrainCmd, a.member),         \
        .def = dflt, .lo = least, .hi = INFINITY, .help = text                                     \
    }

static const KgFlag TRAIN_ROWS[] = {
    {.name = "data",
     .kind = KG_FLAG_STR,
     .metavar = "DIR",
     KG_FLAG_AT(TrainCmd, a.data_dir),
     .help = "the shards of kogpt2-train prepare"},
    {.name = "out",
     .kind = KG_FLAG_FUNC,
     .metavar = "CKPT_DIR",
     KG_FLAG_AT(TrainCmd, a.out_dir),
     .set = set_dir,
     .help = "where the checkpoints go"},
    {.name = "init",
     .kind = KG_FLAG_FUNC,
     .metavar = "MODEL_DIR",
     KG_FLAG_AT(TrainCmd, a.init),
     .set = set_init_model,
     .help = "fine-tune this model (or ORG/NAME[@REV] in the Hugging Face cache) instead of "
             "starting a new one"},
    {.name = "tokenizer",
     .kind = KG_FLAG_STR,
     .metavar = "TOKENIZER",
     KG_FLAG_AT(TrainCmd, a.tokenizer),
     .help = "a new model's tokenizer"},
    COUNT("n-layer", n_layer, "L", "4", 1, "a new model's layers"),
    COUNT("n-embd", n_embd, "C", "256", 1, "a new model's width"),
    COUNT("n-head", n_head, "H", "4", 1, "a new model's attention heads"),
    COUNT("n-ctx", n_ctx, "T", "256", 1, "a new model's context in tokens"),
    COUNT("steps", steps, "N", "1000", 1, "optimizer steps: the schedule spans them"),
    COUNT("batch", B, "B", "8", 1, "sequences per micro-step (per rank under mpirun)"),
    COUNT("seq", T, "T", "128", 1, "tokens per sequence"),
    NUMBER("lr", lr, "6e-4", 0, "peak learning rate"),
    {.name = "min-lr",
     .kind = KG_FLAG_NUM,
     .metavar = "X",
     KG_FLAG_AT(TrainCmd, a.min_lr),
     .def_text = "lr/10",
     .lo = 0,
     .hi = INFINITY,
     .help = "the floor: linear warmup to --lr over --warmup steps, then cosine decay to "
             "--min-lr at --steps"},
    COUNT("warmup", warmup, "N", "0", 0, "linear warmup steps"),
    NUMBER("weight-decay", weight_decay, "0.1", 0, "AdamW's decoupled weight decay"),
    COUNT("grad-accum", grad_accum, "K", "1", 1, "micro-steps per step"),
    NUMBER("clip", clip, "1.0", 0, "gradient norm clip"),
    COUNT("seed", seed, "S", "1337", 0, "the init and the data order"),
    {.name = "threads",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(TrainCmd, a.threads),
     .def = "0",
     .min = 0,
     .max = 4096,
     .help = "compute threads; 0: all cores, shared by the ranks on one machine"},
    {.name = "recompute",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(TrainCmd, a.recompute),
     .help = "recompute activations in backward (less memory)"},
    {.name = "val",
     .kind = KG_FLAG_STR,
     .metavar = "FILE|DIR",
     KG_FLAG_AT(TrainCmd, a.val),
     .def_text = "--data's val_*.bin",
     .help = "validate on this text (a file or directory, read as prepare reads it) or prepared "
             "directory's val_*.bin"},
    COUNT("val-every", val_every, "N", "250", 0,
          "validate every N steps, before the first and after the last; 0: never"),
    COUNT("val-tokens", val_tokens, "N", "65536", 0, "tokens validated at most; 0: all"),
    COUNT("save-every", save_every, "N", "500", 0, "checkpoint every N steps"),
    COUNT("log-every", log_every, "N", "1", 0, "a progress line every N steps"),
    {.name = "keep",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(TrainCmd, a.keep),
     .def = "1",
     .min = 1,
     .max = 100000,
     .help = "keep the last N checkpoints: CKPT_DIR and CKPT_DIR.step-S (the best by validation "
             "loss is always kept as CKPT_DIR.best)"},
    {.name = "resume",
     .kind = KG_FLAG_FUNC,
     .opts = KG_FLAG_OPTIONAL_VALUE,
     .metavar = "[DIR]",
     .offset = 0,
     .set = set_resume,
     .help = "continue the checkpoint in CKPT_DIR (there must be one): its data, shape, "
             "tokenizer, batch and schedule; flags given change them (not the shape), each change "
             "noted"},
    {.name = "force",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(TrainCmd, a.force),
     .help = "start over even if CKPT_DIR holds a checkpoint or files (they are replaced at the "
             "first save; its log, best and kept checkpoints at once); with --resume: resume if "
             "there is a checkpoint, else start over"},
    COUNT("stop-at", stop_at, "N", "0", 0, "stop after step N as an interruption would (tests)"),
    {.name = "device",
     .kind = KG_FLAG_FUNC,
     .metavar = "D",
     KG_FLAG_AT(TrainCmd, a.device),
     .set = kg_device_flag,
     .def = "auto",
     .help = "auto (GPU if any), cpu, cuda, cuda:N"},
    {.name = "precision",
     .kind = KG_FLAG_CHOICE,
     .metavar = "P",
     KG_FLAG_AT(TrainCmd, a.precision),
     .choices = PRECISIONS,
     .def = "f32",
     .help = "matmuls in f32, bf16 or fp16 (dynamic loss scaling) with f32 master weights; GPU "
             "only, the CPU computes in f32"},
    NUMBER("loss-scale", loss_scale, "65536", 1, "fp16: the loss scale's start"),
    // several ranks (mpirun; README "Training on several machines")
    {.name = "zero",
     .kind = KG_FLAG_INT,
     .metavar = "0|1",
     KG_FLAG_AT(TrainCmd, a.zero),
     .def = "0",
     .min = 0,
     .max = 1,
     .help = "1: ZeRO-1, AdamW's moments sharded over the ranks (1/N each), gradients "
             "reduce-scattered, weights all-gathered (CPU)"},
    {.name = "bucket-mb",
     .kind = KG_FLAG_NUM,
     .opts = KG_FLAG_OPEN_LOW,
     .metavar = "X",
     KG_FLAG_AT(TrainCmd, a.bucket_mb),
     .def = "8",
     .lo = 0,
     .hi = 8192,
     .help = "gradients fused into all-reduces of X MiB, each sent as soon as backward has "
             "filled it"},
    {.name = "wire",
     .kind = KG_FLAG_CHOICE,
     .metavar = "T",
     KG_FLAG_AT(TrainCmd, a.wire),
     .choices = WIRE_DTYPES,
     .def = "f32",
     .help = "the gradients on the wire (bf16 and f16: half the bytes)"},
    {.name = "dist-timeout",
     .kind = KG_FLAG_NUM,
     .metavar = "S",
     KG_FLAG_AT(TrainCmd, a.dist_timeout),
     .def = KG_FLAG_DEF(DIST_TIMEOUT_DEFAULT),
     .lo = 0,
     .hi = INFINITY,
     .help = "a collective not done in S seconds ends the run with an error naming the step and "
             "the ranks that did not answer; 0: no limit"},
    HELP_ROWS,
};

static const KgFlagTable TRAIN_FLAGS = {
    .program = "kogpt2-train train",
    .usage = "--data DIR --out CKPT_DIR\n"
             "                          (--init MODEL_DIR | --n-layer L --n-embd C --n-head H\n"
             "                           --n-ctx T --tokenizer TOKENIZER)\n"
             "                          --steps N --batch B --seq T [options]\n"
             "       kogpt2-train train --resume CKPT_DIR [options that change the run]",
    .flags = TRAIN_ROWS,
    .n_flags = sizeof TRAIN_ROWS / sizeof TRAIN_ROWS[0],
    .notes = TOKENIZER_NOTE
    "The run's log is CKPT_DIR.log.jsonl (one JSON record per step and validation; plot\n"
    "draws it). Validation bits per byte: every token of the text scored once, its nats /\n"
    "ln 2 / the text's UTF-8 bytes (eval gives the same figure for the same text and --seq).\n"
    "SIGINT, SIGTERM or SIGUSR1 saves a checkpoint at the end of the step under way and\n"
    "exits 0; a second one exits at once (the last complete checkpoint stays). Under\n"
    "mpirun send SIGUSR1 to mpirun (it forwards it) or any signal to one rank.\n"
    "A second run on a CKPT_DIR (or an export to it) that another holds is refused.\n"
    "Under mpirun --batch is per rank; only rank 0 prints and writes checkpoints\n"
    "(README \"Training on several machines\": --zero, --bucket-mb, --wire, --dist-timeout).\n"};

// The train table's defaults into c, a new run's arguments: -1, or 1 (a bug in the table).
static int train_defaults(TrainCmd *c) {
    *c = (TrainCmd){.a.min_lr = -1}; // lr / 10: a value no flag can give (--min-lr is >= 0)
    return defaults(&TRAIN_FLAGS, c);
}

// The train flags over *c (what they do not give stays), shape_given set, --resume's
// directory settled: -1, or the exit code after printing.
static int train_flags(TrainCmd *c, int argc, char **argv) {
    KgFlagsSeen seen;
    int rc = parse(&TRAIN_FLAGS, c, argc, argv, &seen);
    if (rc >= 0) return rc;
    static const struct {
        const char *name;
        unsigned bit;
    } SHAPE[] = {{"n-layer", TRAIN_GIVEN_N_LAYER},
                 {"n-embd", TRAIN_GIVEN_N_EMBD},
                 {"n-head", TRAIN_GIVEN_N_HEAD},
                 {"n-ctx", TRAIN_GIVEN_N_CTX}};
    for (size_t i = 0; i < sizeof SHAPE / sizeof SHAPE[0]; i++)
        if (kg_flags_from(&TRAIN_FLAGS, &seen, SHAPE[i].name) == KG_FLAG_FROM_ARG)
            c->a.shape_given |= SHAPE[i].bit;
    // a resume at another world size changes --grad-accum only when it was not given
    if (kg_flags_from(&TRAIN_FLAGS, &seen, "grad-accum") == KG_FLAG_FROM_ARG) c->a.accum_given = 1;
    int first = seen.first_arg;
    if (c->a.resume && !c->resume_dir && first + 1 == argc) // --resume DIR
        set_dir(&c->resume_dir, argv[first++], NULL, NULL);
    char why[KG_ERRLEN];
    if (first != argc) {
        snprintf(why, sizeof why, "unexpected argument '%s'", argv[first]);
        return usage_error(&TRAIN_FLAGS, why);
    }
    if (c->resume_dir && c->a.out_dir && strcmp(c->resume_dir, c->a.out_dir)) {
        snprintf(why, sizeof why, "--resume %s and --out %s name two directories", c->resume_dir,
                 c->a.out_dir);
        return usage_error(&TRAIN_FLAGS, why);
    }
    if (c->resume_dir) c->a.out_dir = c->resume_dir;
    return -1;
}

// The checks after parsing: -1, or 2 with the reason (one line) for a usage error. A run that
// --resume will refuse (no checkpoint there) skips the others: train_run says why. Counts of
// 0 and a loss scale below 1 can only come from a checkpoint's train_args.json (the flags
// refuse them), as can a --zero or --bucket-mb out of range.
static int train_check(const TrainArgs *a) {
    const char *why = NULL;
    int ckpt = a->out_dir && ckpt_exists(a->out_dir), resuming = a->resume && ckpt;
    if (!a->out_dir)
        why = "--out CKPT_DIR is required (or --resume CKPT_DIR to continue a run)";
    else if (a->resume && !ckpt && !a->force)
        return -1;
    else if (!a->data_dir && resuming)
        why = "--data DIR is required: the checkpoint has no " TRAIN_ARGS_FILE
              " (an older kogpt2-train's) to take it from";
    else if (!a->data_dir)
        why = "--data DIR is required (the shards of kogpt2-train prepare)";
    else if (a->init && a->shape_given)
        why = "--init takes the shape from the model: drop --n-*";
    else if (!a->init && !a->tokenizer && !resuming)
        why = "a new model needs --tokenizer PATH (a SentencePiece .model such as "
              "models/default/kogpt2-default.model, a tokenizer.json, or a model directory) "
              "or --init MODEL_DIR";
    else if (!a->steps || !a->B || !a->T || !a->grad_accum)
        why = "--steps, --batch, --seq and --grad-accum must be at least 1";
    else if (!(a->loss_scale >= 1))
        why = "--loss-scale must be at least 1";
    else if (a->zero < 0 || a->zero > 1 || !(a->bucket_mb > 0 && a->bucket_mb <= 8192))
        why = "--zero must be 0 or 1 and --bucket-mb in (0, 8192] (the checkpoint's "
              "train_args.json?)";
    return why ? usage_error(&TRAIN_FLAGS, why) : -1;
}

int main_args_train(TrainArgs *a, int argc, char **argv, char **owned) {
    char err[KG_ERRLEN], path[PATH_MAX];
    TrainCmd c;
    int rc;
    *owned = NULL;
    if ((rc = train_defaults(&c)) >= 0 || (rc = train_flags(&c, argc, argv)) >= 0) return rc;
    kg_path_join(path, sizeof path, c.a.out_dir ? c.a.out_dir : "", TRAIN_ARGS_FILE);
    if (c.a.resume && c.a.out_dir && !access(path, F_OK)) {
        // the run the checkpoint recorded, then the flags over it
        const char *dir = c.a.out_dir; // one of argv's strings: it outlives c
        if ((rc = train_defaults(&c)) >= 0) return rc;
        if (train_args_load(&c.a, dir, owned, err)) {
            fprintf(stderr, "kogpt2-train train: %s\n", err);
            return 1;
        }
        if ((rc = train_flags(&c, argc, argv)) >= 0) return rc;
    }
    *a = c.a;
    return train_check(a);
}

// --- eval ---

static const KgFlag EVAL_ROWS[] = {
    {.name = "model",
     .kind = KG_FLAG_FUNC,
     .metavar = "DIR",
     KG_FLAG_AT(EvalArgs, model),
     .set = set_eval_model,
     .help = "the model: a directory, or ORG/NAME[@REV] in the Hugging Face cache"},
    {.name = "val",
     .kind = KG_FLAG_STR,
     .metavar = "FILE|DIR",
     KG_FLAG_AT(EvalArgs, val),
     .help = "the text: a file or directory (read as prepare reads it) or a prepared "
             "directory's val_*.bin"},
    {.name = "seq",
     .kind = KG_FLAG_INT,
     .metavar = "T",
     KG_FLAG_AT(EvalArgs, seq),
     .def = "0",
     .min = 0,
     .max = LLONG_MAX,
     .help = "tokens per window; 0: the model's n_ctx"},
    {.name = "batch",
     .kind = KG_FLAG_INT,
     .metavar = "B",
     KG_FLAG_AT(EvalArgs, batch),
     .def = "8",
     .min = 1,
     .max = 4096,
     .help = "windows per forward pass"},
    {.name = "val-tokens",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(EvalArgs, val_tokens),
     .def = "0",
     .min = 0,
     .max = LLONG_MAX,
     .help = "tokens scored at most; 0: all"},
    {.name = "device",
     .kind = KG_FLAG_FUNC,
     .metavar = "D",
     KG_FLAG_AT(EvalArgs, device),
     .set = kg_device_flag,
     .def = "auto",
     .help = "auto (GPU if any), cpu, cuda, cuda:N"},
    {.name = "threads",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(EvalArgs, threads),
     .def = "0",
     .min = 0,
     .max = 4096,
     .help = "compute threads; 0: all cores"},
    {.name = "precision",
     .kind = KG_FLAG_CHOICE,
     .metavar = "P",
     KG_FLAG_AT(EvalArgs, precision),
     .choices = PRECISIONS,
     .def = "f32",
     .help = "matmuls in f32, or in bf16 or fp16 on a GPU, as the trainer validates"},
    HELP_ROWS,
};

static const KgFlagTable EVAL_FLAGS = {
    .program = "kogpt2-train eval",
    .usage = "--model DIR --val FILE|DIR [--seq T] [--batch B] [--val-tokens N] [options]",
    .flags = EVAL_ROWS,
    .n_flags = sizeof EVAL_ROWS / sizeof EVAL_ROWS[0],
    .notes = "Prints one line: eval loss L bpb B tokens N bytes N docs N seq T. Bits per byte:\n"
             "every token of the text scored once, its nats / ln 2 / the text's UTF-8 bytes.\n"};

int main_args_eval(EvalArgs *e, int argc, char **argv) {
    memset(e, 0, sizeof *e);
    KgFlagsSeen seen;
    int rc;
    if ((rc = defaults(&EVAL_FLAGS, e)) >= 0 ||
        (rc = parse(&EVAL_FLAGS, e, argc, argv, &seen)) >= 0)
        return rc;
    if (!e->model || !e->val || seen.first_arg != argc)
        return usage_error(&EVAL_FLAGS, "--model DIR and --val FILE|DIR are required");
    return -1;
}

// --- plot ---

static const KgFlag PLOT_ROWS[] = {
    {.name = "out",
     .kind = KG_FLAG_STR,
     .metavar = "PNG",
     KG_FLAG_AT(PlotArgs, out),
     .def_text = "the log's name with .png",
     .help = "where the picture goes"},
    {.name = "width",
     .kind = KG_FLAG_INT,
     .metavar = "W",
     KG_FLAG_AT(PlotArgs, width),
     .def = "1000",
     .min = 320,
     .max = 4096,
     .help = "pixels"},
    {.name = "height",
     .kind = KG_FLAG_INT,
     .metavar = "H",
     KG_FLAG_AT(PlotArgs, height),
     .def = "600",
     .min = 320,
     .max = 4096,
     .help = "pixels"},
    HELP_ROWS,
};

static const KgFlagTable PLOT_FLAGS = {
    .program = "kogpt2-train plot",
    .usage = "CKPT_DIR|LOG [--out PNG] [--width W] [--height H]",
    .flags = PLOT_ROWS,
    .n_flags = sizeof PLOT_ROWS / sizeof PLOT_ROWS[0],
    .notes = "Draws the loss curves of a run's log (CKPT_DIR stands for CKPT_DIR.log.jsonl).\n"};

int main_args_plot(PlotArgs *p, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    KgFlagsSeen seen;
    int rc;
    if ((rc = defaults(&PLOT_FLAGS, p)) >= 0 ||
        (rc = parse(&PLOT_FLAGS, p, argc, argv, &seen)) >= 0)
        return rc;
    if (seen.first_arg + 1 != argc)
        return usage_error(&PLOT_FLAGS, "one CKPT_DIR or LOG is required");
    set_dir(&p->log, argv[seen.first_arg], NULL, NULL);
    return -1;
}

// --- export ---

static const KgFlagChoice EXPORT_DTYPES[] = {{"f16", KG_F16}, {"f32", KG_F32}, {NULL, 0}};

static const KgFlag EXPORT_ROWS[] = {
    {.name = "from",
     .kind = KG_FLAG_STR,
     .metavar = "CKPT_DIR",
     KG_FLAG_AT(ExportArgs, from),
     .help = "a checkpoint (or any model directory)"},
    {.name = "out",
     .kind = KG_FLAG_FUNC,
     .metavar = "MODEL_DIR",
     KG_FLAG_AT(ExportArgs, out),
     .set = set_dir,
     .help = "the servable model directory to write"},
    {.name = "dtype",
     .kind = KG_FLAG_CHOICE,
     .metavar = "T",
     KG_FLAG_AT(ExportArgs, dtype),
     .choices = EXPORT_DTYPES,
     .def = "f16",
     .help = "model.safetensors' dtype"},
    {.name = "force",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(ExportArgs, force),
     .help = "replace the model files MODEL_DIR already holds (never anything else)"},
    HELP_ROWS,
};

static const KgFlagTable EXPORT_FLAGS = {
    .program = "kogpt2-train export",
    .usage = "--from CKPT_DIR --out MODEL_DIR [--dtype f16|f32] [--force]",
    .flags = EXPORT_ROWS,
    .n_flags = sizeof EXPORT_ROWS / sizeof EXPORT_ROWS[0],
    .notes = "The model without the training state: model.safetensors, config.json and the\n"
             "tokenizer file. A MODEL_DIR that a run holds is refused.\n"};

int main_args_export(ExportArgs *e, int argc, char **argv) {
    memset(e, 0, sizeof *e);
    KgFlagsSeen seen;
    int rc;
    if ((rc = defaults(&EXPORT_FLAGS, e)) >= 0 ||
        (rc = parse(&EXPORT_FLAGS, e, argc, argv, &seen)) >= 0)
        return rc;
    if (!e->from || !e->out || seen.first_arg != argc)
        return usage_error(&EXPORT_FLAGS, "--from CKPT_DIR and --out MODEL_DIR are required");
    return -1;
}

void main_args_usage(FILE *f) {
    static const KgFlagTable *const ALL[] = {&PREPARE_FLAGS, &TRAIN_FLAGS, &EVAL_FLAGS, &PLOT_FLAGS,
                                             &EXPORT_FLAGS};
    fprintf(f,
            "usage: kogpt2-train COMMAND [flags]   (kogpt2-train COMMAND --help: its flags)\n"
            "       kogpt2-train --version\n"
            "  prepare   token shards from text: files, directories, pipes (.txt .tsv .csv .gz)\n"
            "  train     train or fine-tune; --resume continues a run\n"
            "  eval      a model's loss and bits per byte on a text\n"
            "  plot      a run's loss curves as a PNG\n"
            "  export    a checkpoint as a servable model directory\n"
            "  mpirun -np N kogpt2-train train ...   data parallel (--batch is per rank)\n");
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++) {
        fputc('\n', f);
        kg_flags_help(ALL[i], f);
    }
}
