// kogpt2-train — prepare token shards, train or fine-tune a GPT-2, evaluate, plot, export.
//
//   kogpt2-train prepare --tokenizer PATH --input PATH [--input PATH ...] --out DATA_DIR
//       [--append | --force] [--max-line-bytes N]
//   kogpt2-train train --data DATA_DIR --out CKPT_DIR (--init MODEL_DIR | --n-layer L
//       --n-embd C --n-head H --n-ctx T --tokenizer PATH) --steps N --batch B --seq T
//       [--lr X] [--grad-accum K] [--seed S] [--val FILE|DIR] [--keep N] [--force] ...
//   kogpt2-train train --resume CKPT_DIR [flags to change]
//   kogpt2-train eval --model DIR --val FILE|DIR [--seq T]
//   kogpt2-train plot CKPT_DIR|LOG [--out PNG]
//   kogpt2-train export --from CKPT_DIR --out MODEL_DIR [--dtype f16|f32] [--force]
//   mpirun -np N kogpt2-train train ...   (data parallel; --batch is per rank)
// Each command's flags: one table in main_args.c (`kogpt2-train COMMAND --help` renders it).
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kg.h"
#include "ckpt.h"
#include "dist.h"
#include "main_args.h"
#include "model/safetensors.h"
#include "plot.h"
#include "prepare.h"
#include "tokenizer/tokenizer.h"
#include "train.h"

static int cmd_prepare(int argc, char **argv) {
    PrepareArgs *p = malloc(sizeof *p); // MAIN_MAX_INPUTS pointers: not on the stack
    if (!p) {
        fprintf(stderr, "kogpt2-train prepare: out of memory\n");
        return 1;
    }
    int rc = main_args_prepare(p, argc, argv);
    if (rc >= 0) {
        free(p);
        return rc;
    }
    ShardPrepareArgs pa = p->pa;
    pa.progress = stderr; // progress on stderr: stdout keeps the one summary line scripts read
    char err[KG_ERRLEN];
    Tokenizer *tok = NULL;
    ShardPrepareStats st;
    rc = tok_open(&tok, p->tokenizer, err);
    if (!rc) rc = shard_prepare(tok, &pa, &st, err);
    tok_free(tok);
    if (rc) {
        free(p);
        fprintf(stderr, "kogpt2-train prepare: %s\n", err);
        return 1;
    }
    char dropped[512];
    shard_prepare_dropped(&st, dropped, sizeof dropped);
    printf("prepared %llu files, %llu documents (%.1f MB): train %llu tokens in %d shards, "
           "val %llu tokens (%llu documents) in %d shards -> %s%s%s%s\n",
           (unsigned long long)st.files, (unsigned long long)st.docs, st.bytes_in / 1e6,
           (unsigned long long)st.train_tokens, st.train_shards, (unsigned long long)st.val_tokens,
           (unsigned long long)st.val_docs, st.val_shards, pa.out_dir,
           pa.mode == SHARD_APPEND    ? " (added)"
           : pa.mode == SHARD_REPLACE ? " (replaced)"
                                      : "",
           dropped[0] ? "; " : "", dropped);
    free(p);
    return 0;
}

// SIGINT, SIGTERM, SIGUSR1: the first asks the run to stop after the step under way
// (train_run saves then and returns); the handler only sets the flag, which is
// async-signal-safe. A second one takes the default action at once: a save it interrupts is
// atomic (ckpt.h), so the last complete checkpoint stays. SIGUSR1 is for mpirun, which
// forwards it to every rank, while it answers SIGINT/SIGTERM by killing the ranks a second
// later (Open MPI's odls_base_sigkill_timeout) and may stop draining their output first.
// The flag is a lock-free atomic, not a volatile sig_atomic_t: the handler may run on any
// thread (an OpenBLAS worker), and the main thread reads it.
static atomic_int stop_signal;

static void on_stop_signal(int sig) {
    int saved = errno; // the code it interrupted may be about to read errno
    if (atomic_exchange(&stop_signal, sig)) {
        signal(sig, SIG_DFL); // signal() and raise() are async-signal-safe
        raise(sig);           // delivered as the handler returns: the process ends
    }
    errno = saved;
}

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    // both blocked while either handler runs: a SIGTERM inside SIGINT's handler, before the
    // flag is set, would find it clear, and both would return
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sa.sa_flags = SA_RESTART; // a write of the log or a checkpoint is not cut short
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static int cmd_train(int argc, char **argv) {
    char err[KG_ERRLEN];
    Dist d;
    if (dist_init(&d, &argc, &argv, err)) {
        fprintf(stderr, "kogpt2-train train: %s\n", err);
        return 1;
    }
    TrainArgs a;
    char *owned;
    int rc = main_args_train(&a, argc, argv, &owned);
    if (rc >= 0) {
        free(owned);
        dist_finalize(&d);
        return rc;
    }
    catch_stop_signals(); // after MPI_Init, so that ours are the handlers
    a.stop = &stop_signal;
    rc = train_run(&a, &d, d.rank == 0 ? stdout : NULL, err);
    if (rc && d.size > 1) // mpirun forwards it: which rank, on which machine
        fprintf(stderr, "kogpt2-train train (rank %d of %d on %s): %s\n", d.rank, d.size, d.host,
                err);
    else if (rc)
        fprintf(stderr, "kogpt2-train train: %s\n", err);
    free(owned);
    dist_finalize(&d);
    return rc ? 1 : 0;
}

static int cmd_export(int argc, char **argv) {
    ExportArgs e;
    int rc = main_args_export(&e, argc, argv);
    if (rc >= 0) return rc;
    char err[KG_ERRLEN];
    if (train_export(e.from, e.out, e.dtype, e.force, err)) {
        fprintf(stderr, "kogpt2-train export: %s\n", err);
        return 1;
    }
    printf("exported %s -> %s (%s)\n", e.from, e.out, kg_dtype_name(e.dtype));
    return 0;
}

// eval: one line on stdout, "eval loss L bpb B tokens N bytes N docs N seq T" (scripts read
// it: models/eval_bpb.sh); the device line on stderr.
static int cmd_eval(int argc, char **argv) {
    EvalArgs e;
    char err[KG_ERRLEN];
    int rc = main_args_eval(&e, argc, argv);
    if (rc >= 0) return rc;
    TrainEval ev;
    if (train_eval(e.model, e.val, (size_t)e.seq, (size_t)e.batch, (uint64_t)e.val_tokens, e.device,
                   e.threads, e.precision, stderr, &ev, err)) {
        fprintf(stderr, "kogpt2-train eval: %s\n", err);
        return 1;
    }
    printf("eval loss %.6f bpb %.6f tokens %llu bytes %llu docs %llu seq %zu\n", ev.res.loss,
           ev.res.bpb, (unsigned long long)ev.res.tokens, (unsigned long long)ev.bytes,
           (unsigned long long)ev.docs, ev.T);
    if (ev.text_bytes && ev.text_bytes != ev.bytes)
        fprintf(stderr,
                "note: the tokenizer does not give back the text as written (%llu bytes, "
                "decoded %llu): bits per byte count the decoded bytes\n",
                (unsigned long long)ev.text_bytes, (unsigned long long)ev.bytes);
    return 0;
}

static int cmd_plot(int argc, char **argv) {
    PlotArgs p;
    int rc = main_args_plot(&p, argc, argv);
    if (rc >= 0) return rc;
    // a checkpoint directory stands for its log, CKPT_DIR.log.jsonl; the PNG goes beside it
    char log[4096], png[4096];
    if (ckpt_sibling(log, sizeof log, p.log, kg_is_dir(p.log) ? CKPT_LOG_SUFFIX : "")) {
        fprintf(stderr, "kogpt2-train plot: path too long\n");
        return 2;
    }
    size_t n = strlen(log) - (kg_ends_with(log, ".jsonl") ? strlen(".jsonl") : 0);
    snprintf(png, sizeof png, "%.*s.png", (int)n, log);
    const char *out = p.out ? p.out : png;
    char err[KG_ERRLEN];
    PlotCounts pc;
    if (plot_log(log, out, p.width, p.height, &pc, err)) {
        fprintf(stderr, "kogpt2-train plot: %s\n", err);
        return 1;
    }
    printf("plot: %zu train and %zu val records of %s -> %s\n", pc.train, pc.val, log, out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "kogpt2-train: no command given\n"
                        "(kogpt2-train --help lists the commands and their flags)\n");
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        main_args_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kogpt2-train %s (commit %s)\n", kg_version(), kg_commit());
        return 0;
    }
    // each command's flags are read with the command's name as argv[0]
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot")) return cmd_plot(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    fprintf(stderr,
            "kogpt2-train: unknown command %s\n"
            "(kogpt2-train --help lists the commands and their flags)\n",
            argv[1]);
    return 2;
}
