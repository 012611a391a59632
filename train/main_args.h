// main_args.h — kogpt2-train's command lines: one flag table per subcommand (main_args.c, read
// and rendered as --help by base/flags.h) and what each parse hands main.c. Each
// main_args_<command> returns -1 to go on, else the exit code after printing what to print:
// 0 after --help or --version, 2 for a usage error (one line naming the flag, then where
// --help lists them), 1 when out of memory or (train) for an unreadable train_args.json.
#ifndef TRAIN_MAIN_ARGS_H
#define TRAIN_MAIN_ARGS_H

#include <stdio.h>

#include "model/dtype.h"
#include "prepare.h"
#include "train.h"

#define MAIN_MAX_INPUTS 4096 // prepare's --input given, together (a directory holds any number)

typedef struct {
    ShardPrepareArgs pa; // inputs point into inputs[] below; progress is main's to set
    const char *tokenizer;
    const char *inputs[MAIN_MAX_INPUTS];
    int append, force;
} PrepareArgs;

typedef struct {
    const char *model; // resolved: a directory (ORG/NAME: the Hugging Face cache's copy)
    const char *val, *device;
    long long seq, batch, val_tokens;
    int threads;
    KgDtype precision; // KG_F32, KG_BF16 or KG_F16
} EvalArgs;

typedef struct {
    const char *log; // CKPT_DIR or LOG, as given (trailing slashes dropped)
    const char *out; // NULL: beside the log
    int width, height;
} PlotArgs;

typedef struct {
    const char *from, *out;
    KgDtype dtype; // KG_F16 or KG_F32
    int force;
} ExportArgs;

int main_args_prepare(PrepareArgs *p, int argc, char **argv);

// train: the flags over the defaults or, with --resume and a checkpoint that recorded its run
// (train_args.json), over that run's arguments; then the checks that need no file. *owned
// holds the paths read from the checkpoint (free() it after the run; NULL otherwise).
int main_args_train(TrainArgs *a, int argc, char **argv, char **owned);

int main_args_eval(EvalArgs *e, int argc, char **argv);
int main_args_plot(PlotArgs *p, int argc, char **argv);
int main_args_export(ExportArgs *e, int argc, char **argv);

// `kogpt2-train --help`: the commands, then each one's flags, into f.
void main_args_usage(FILE *f);

#endif
