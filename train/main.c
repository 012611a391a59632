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
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "ckpt.h"
#include "dist.h"
#include "model/backend.h"
#include "model/hfcache.h"
#include "model/safetensors.h"
#include "plot.h"
#include "prepare.h"
#include "tokenizer/tokenizer.h"
#include "train.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: kogpt2-train prepare --tokenizer PATH --input PATH [--input PATH ...] --out DIR\n"
        "                            [--val-every-doc N] [--shard-tokens N] [--append | --force]\n"
        "                            [--max-line-bytes N]\n"
        "       kogpt2-train train --data DIR --out CKPT_DIR\n"
        "                          (--init MODEL_DIR | --n-layer L --n-embd C --n-head H\n"
        "                           --n-ctx T --tokenizer PATH)\n"
        "                          --steps N --batch B --seq T [options]\n"
        "       kogpt2-train train --resume CKPT_DIR [options that change the run]\n"
        "       kogpt2-train eval --model DIR --val FILE|DIR [--seq T] [--batch B]\n"
        "                         [--val-tokens N] [--device D] [--threads N] [--precision P]\n"
        "       kogpt2-train plot CKPT_DIR|LOG [--out PNG] [--width W] [--height H]\n"
        "       kogpt2-train export --from CKPT_DIR --out MODEL_DIR [--dtype f16|f32] [--force]\n"
        "       kogpt2-train --version\n"
        "TOKENIZER: a SentencePiece .model (models/default/kogpt2-default.model), a\n"
        "tokenizer.json, or a model directory holding one.\n"
        "train options:\n"
        "  --lr X            peak learning rate (6e-4)       --min-lr X   floor (lr/10)\n"
        "  --warmup N        linear warmup steps (0)         --weight-decay X (0.1)\n"
        "                    the schedule: linear warmup to lr over --warmup steps, then cosine\n"
        "                    decay to --min-lr at --steps\n"
        "  --grad-accum K    micro-steps per step (1)        --clip X     grad norm (1.0)\n"
        "  --seed S          init and data order (1337)      --threads N  (0: all cores, shared\n"
        "                                                   by the ranks on one machine)\n"
        "  --recompute       recompute activations in backward (less memory)\n"
        "  --val FILE|DIR    validate on this text (a file or directory, read as prepare\n"
        "                    reads it) or prepared directory's val_*.bin (default: --data's)\n"
        "  --val-every N     validate every N steps, before the first and after the last (250;\n"
        "                    0: never)                       --val-tokens N (65536; 0: all)\n"
        "  --save-every N    checkpoint every N steps (500)  --log-every N (1)\n"
        "  --keep N          keep the last N checkpoints: CKPT_DIR and CKPT_DIR.step-S (1)\n"
        "                    (the best by validation loss is always kept as CKPT_DIR.best)\n"
        "  --resume [DIR]    continue the checkpoint in CKPT_DIR (there must be one): its\n"
        "                    data, shape, tokenizer, batch and schedule; flags given change them\n"
        "                    (not the shape), each change noted\n"
        "  --force           start over even if CKPT_DIR holds a checkpoint or files (they\n"
        "                    are replaced at the first save; its log, best and kept checkpoints\n"
        "                    at once); with --resume: resume if there is a checkpoint, else\n"
        "                    start over\n"
        "  --stop-at N       stop after step N as an interruption would (tests)\n"
        "  --device D        auto (GPU if any), cpu, cuda, cuda:N (auto)\n"
        "  --precision P     matmuls in f32, bf16 or fp16 (dynamic loss scaling) with f32\n"
        "                    master weights; GPU only, the CPU computes in f32 (f32)\n"
        "  --loss-scale X    fp16: the loss scale's start (65536)\n"
        "several ranks (mpirun; README \"Training on several machines\"):\n"
        "  --zero 1          ZeRO-1: AdamW's moments sharded over the ranks (1/N each),\n"
        "                    gradients reduce-scattered, weights all-gathered (CPU) (0)\n"
        "  --bucket-mb X     gradients fused into all-reduces of X MiB, each sent as soon as\n"
        "                    backward has filled it (8)\n"
        "  --wire T          gradients on the wire: f32, bf16 or f16 (half the bytes) (f32)\n"
        "  --dist-timeout S  a collective not done in S seconds ends the run with an error\n"
        "                    naming the step and the ranks that did not answer (600; 0: none)\n"
        "The run's log is CKPT_DIR.log.jsonl (one JSON record per step and validation; plot\n"
        "draws it). Validation bits per byte: every token of the text scored once, its nats /\n"
        "ln 2 / the text's UTF-8 bytes (eval gives the same figure for the same text and --seq).\n"
        "SIGINT, SIGTERM or SIGUSR1 saves a checkpoint at the end of the step under way and\n"
        "exits 0; a second one exits at once (the last complete checkpoint stays). Under\n"
        "mpirun send SIGUSR1 to mpirun (it forwards it) or any signal to one rank.\n"
        "prepare: --append adds to the shards already in DIR, --force replaces them (without\n"
        "either, a DIR that holds shards is refused). A line (CSV/TSV: a record) longer than\n"
        "--max-line-bytes (1048576) is dropped and counted, as one that is not UTF-8 is.\n"
        "Inputs are files, directories or pipes (--input /dev/stdin), not devices.\n"
        "A second run on a CKPT_DIR (or an export to it) that another holds is refused.\n"
        "Under mpirun --batch is per rank; only rank 0 prints and writes checkpoints.\n");
}

// A directory argument without its trailing slashes ("ckpt/" -> "ckpt"; "/" stays): the
// checkpoint's temporary and old siblings are named by appending to it.
static char *dir_arg(char *p) {
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/';)
        p[--n] = '\0';
    return p;
}

// Parses a non-negative integer flag value; -1 on junk or out of range.
static long long parse_count(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return (end == s || *end || v < 0 || errno == ERANGE) ? -1 : v;
}

// --max-line-bytes at most: SentencePiece holds ~70 bytes per byte of a line (shard.h), and
// a line of 1.3 GB failed in it with "out of memory" (issue 24)
#define PREPARE_MAX_LINE_LIMIT (1ll << 30)

static int cmd_prepare(int argc, char **argv) {
    static const struct option opts[] = {{"tokenizer", required_argument, 0, 't'},
                                         {"input", required_argument, 0, 'i'},
                                         {"out", required_argument, 0, 'o'},
                                         {"val-every-doc", required_argument, 0, 'v'},
                                         {"shard-tokens", required_argument, 0, 's'},
                                         {"max-line-bytes", required_argument, 0, 'm'},
                                         {"append", no_argument, 0, 'a'},
                                         {"force", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *tok_path = NULL;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) return 1;
    // progress on stderr: stdout keeps the one summary line scripts read
    ShardPrepareArgs pa = {.inputs = inputs, .val_every = 100, .progress = stderr};
    long long v;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 't':
            tok_path = optarg;
            break;
        case 'i':
            inputs[pa.n_inputs++] = optarg;
            break;
        case 'o':
            pa.out_dir = optarg;
            break;
        case 'a':
        case 'f':
            if (pa.mode != SHARD_NEW && pa.mode != (c == 'a' ? SHARD_APPEND : SHARD_REPLACE)) {
                fprintf(stderr, "kogpt2-train prepare: --append and --force exclude each other\n");
                free(inputs);
                return 2;
            }
            pa.mode = c == 'a' ? SHARD_APPEND : SHARD_REPLACE;
            break;
        case 'v':
        case 's':
        case 'm':
            if ((v = parse_count(optarg)) < 0) {
                fprintf(stderr, "kogpt2-train prepare: not a count: %s\n", optarg);
                free(inputs);
                return 2;
            }
            if (c == 'm' && (v < 1 || v > PREPARE_MAX_LINE_LIMIT)) {
                fprintf(stderr, "kogpt2-train prepare: --max-line-bytes must be 1 to %lld\n",
                        PREPARE_MAX_LINE_LIMIT);
                free(inputs);
                return 2;
            }
            if (c == 'v')
                pa.val_every = (uint64_t)v;
            else if (c == 's')
                pa.shard_tokens = (uint64_t)v;
            else
                pa.max_line_bytes = (size_t)v;
            break;
        case 'h':
            usage(stdout);
            free(inputs);
            return 0;
        default:
            usage(stderr);
            free(inputs);
            return 2;
        }
    }
    if (!tok_path || !pa.n_inputs || !pa.out_dir || optind != argc) {
        usage(stderr);
        free(inputs);
        return 2;
    }
    char err[KG_ERRLEN];
    Tokenizer *tok = NULL;
    ShardPrepareStats st;
    int rc = tok_open(&tok, tok_path, err);
    if (!rc) rc = shard_prepare(tok, &pa, &st, err);
    tok_free(tok);
    free(inputs);
    if (rc) {
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
    return 0;
}

enum {
    OPT_DATA = 256,
    OPT_OUT,
    OPT_INIT,
    OPT_TOKENIZER,
    OPT_N_LAYER,
    OPT_N_EMBD,
    OPT_N_HEAD,
    OPT_N_CTX,
    OPT_STEPS,
    OPT_BATCH,
    OPT_SEQ,
    OPT_LR,
    OPT_MIN_LR,
    OPT_WARMUP,
    OPT_WD,
    OPT_ACCUM,
    OPT_CLIP,
    OPT_SEED,
    OPT_THREADS,
    OPT_RECOMPUTE,
    OPT_VAL_EVERY,
    OPT_VAL_TOKENS,
    OPT_SAVE_EVERY,
    OPT_LOG_EVERY,
    OPT_RESUME,
    OPT_FORCE,
    OPT_STOP_AT,
    OPT_DEVICE,
    OPT_PRECISION,
    OPT_LOSS_SCALE,
    OPT_VAL,
    OPT_KEEP,
    OPT_ZERO,
    OPT_BUCKET_MB,
    OPT_WIRE,
    OPT_DIST_TIMEOUT,
    OPT_HELP
};

// Fills a from argv's flags: 0; 1 after --help; 2 with a message for a usage error. Called
// twice when resuming (over the checkpoint's arguments the second time), so it only sets.
static int parse_train(int argc, char **argv, TrainArgs *a) {
    static const struct option opts[] = {{"data", required_argument, 0, OPT_DATA},
                                         {"out", required_argument, 0, OPT_OUT},
                                         {"init", required_argument, 0, OPT_INIT},
                                         {"tokenizer", required_argument, 0, OPT_TOKENIZER},
                                         {"n-layer", required_argument, 0, OPT_N_LAYER},
                                         {"n-embd", required_argument, 0, OPT_N_EMBD},
                                         {"n-head", required_argument, 0, OPT_N_HEAD},
                                         {"n-ctx", required_argument, 0, OPT_N_CTX},
                                         {"steps", required_argument, 0, OPT_STEPS},
                                         {"batch", required_argument, 0, OPT_BATCH},
                                         {"seq", required_argument, 0, OPT_SEQ},
                                         {"lr", required_argument, 0, OPT_LR},
                                         {"min-lr", required_argument, 0, OPT_MIN_LR},
                                         {"warmup", required_argument, 0, OPT_WARMUP},
                                         {"weight-decay", required_argument, 0, OPT_WD},
                                         {"grad-accum", required_argument, 0, OPT_ACCUM},
                                         {"clip", required_argument, 0, OPT_CLIP},
                                         {"seed", required_argument, 0, OPT_SEED},
                                         {"threads", required_argument, 0, OPT_THREADS},
                                         {"recompute", no_argument, 0, OPT_RECOMPUTE},
                                         {"val", required_argument, 0, OPT_VAL},
                                         {"val-every", required_argument, 0, OPT_VAL_EVERY},
                                         {"val-tokens", required_argument, 0, OPT_VAL_TOKENS},
                                         {"save-every", required_argument, 0, OPT_SAVE_EVERY},
                                         {"log-every", required_argument, 0, OPT_LOG_EVERY},
                                         {"keep", required_argument, 0, OPT_KEEP},
                                         {"resume", optional_argument, 0, OPT_RESUME},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"stop-at", required_argument, 0, OPT_STOP_AT},
                                         {"device", required_argument, 0, OPT_DEVICE},
                                         {"precision", required_argument, 0, OPT_PRECISION},
                                         {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
                                         {"zero", required_argument, 0, OPT_ZERO},
                                         {"bucket-mb", required_argument, 0, OPT_BUCKET_MB},
                                         {"wire", required_argument, 0, OPT_WIRE},
                                         {"dist-timeout", required_argument, 0, OPT_DIST_TIMEOUT},
                                         {"help", no_argument, 0, OPT_HELP},
                                         {0, 0, 0, 0}};
    const char *resume_dir = NULL;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        long long v = 0;
        double x = 0;
        char *end = NULL;
        if (c == OPT_LR || c == OPT_MIN_LR || c == OPT_WD || c == OPT_CLIP || c == OPT_LOSS_SCALE ||
            c == OPT_BUCKET_MB || c == OPT_DIST_TIMEOUT) {
            x = strtod(optarg, &end);
            if (end == optarg || *end || !(x >= 0)) {
                fprintf(stderr, "kogpt2-train train: not a non-negative number: %s\n", optarg);
                return 2;
            }
        } else if (optarg && c != OPT_DATA && c != OPT_OUT && c != OPT_INIT && c != OPT_TOKENIZER &&
                   c != OPT_DEVICE && c != OPT_PRECISION && c != OPT_VAL && c != OPT_RESUME &&
                   c != OPT_WIRE && (v = parse_count(optarg)) < 0) {
            fprintf(stderr, "kogpt2-train train: not a count: %s\n", optarg);
            return 2;
        }
        switch (c) {
        case OPT_DATA:
            a->data_dir = optarg;
            break;
        case OPT_OUT:
            a->out_dir = dir_arg(optarg);
            break;
        case OPT_INIT: { // ORG/NAME[@REV]: the Hugging Face cache's copy
            static char init_dir[4096];
            char herr[KG_ERRLEN];
            if (hfcache_resolve(optarg, init_dir, sizeof init_dir, herr)) {
                fprintf(stderr, "kogpt2-train train: --init %s\n", herr);
                return 2;
            }
            a->init = init_dir;
            break;
        }
        case OPT_TOKENIZER:
            a->tokenizer = optarg;
            break;
        case OPT_N_LAYER:
            a->n_layer = (size_t)v;
            a->shape_given |= TRAIN_GIVEN_N_LAYER;
            break;
        case OPT_N_EMBD:
            a->n_embd = (size_t)v;
            a->shape_given |= TRAIN_GIVEN_N_EMBD;
            break;
        case OPT_N_HEAD:
            a->n_head = (size_t)v;
            a->shape_given |= TRAIN_GIVEN_N_HEAD;
            break;
        case OPT_N_CTX:
            a->n_ctx = (size_t)v;
            a->shape_given |= TRAIN_GIVEN_N_CTX;
            break;
        case OPT_STEPS:
            a->steps = (uint64_t)v;
            break;
        case OPT_BATCH:
            a->B = (size_t)v;
            break;
        case OPT_SEQ:
            a->T = (size_t)v;
            break;
        case OPT_LR:
            a->lr = (float)x;
            break;
        case OPT_MIN_LR:
            a->min_lr = (float)x;
            break;
        case OPT_WARMUP:
            a->warmup = (uint64_t)v;
            break;
        case OPT_WD:
            a->weight_decay = (float)x;
            break;
        case OPT_ACCUM:
            a->grad_accum = (size_t)v;
            a->accum_given = 1;
            break;
        case OPT_CLIP:
            a->clip = (float)x;
            break;
        case OPT_SEED:
            a->seed = (uint64_t)v;
            break;
        case OPT_THREADS:
            a->threads = v > 4096 ? -1 : (int)v;
            break;
        case OPT_RECOMPUTE:
            a->recompute = 1;
            break;
        case OPT_VAL:
            a->val = optarg;
            break;
        case OPT_VAL_EVERY:
            a->val_every = (uint64_t)v;
            break;
        case OPT_VAL_TOKENS:
            a->val_tokens = (uint64_t)v;
            break;
        case OPT_SAVE_EVERY:
            a->save_every = (uint64_t)v;
            break;
        case OPT_LOG_EVERY:
            a->log_every = (uint64_t)v;
            break;
        case OPT_KEEP:
            if (v < 1 || v > 100000) {
                fprintf(stderr, "kogpt2-train train: --keep must be 1 to 100000\n");
                return 2;
            }
            a->keep = (unsigned)v;
            break;
        case OPT_RESUME: // --resume=DIR here; --resume DIR is the one argument left below
            a->resume = 1;
            if (optarg) resume_dir = dir_arg(optarg);
            break;
        case OPT_FORCE:
            a->force = 1;
            break;
        case OPT_STOP_AT:
            a->stop_at = (uint64_t)v;
            break;
        case OPT_DEVICE:
            a->device = optarg;
            break;
        case OPT_PRECISION:
            // fp16 too (with loss scaling on a GPU): the trainer's list, not kg_precision_parse's
            if (!strcmp(optarg, "f32"))
                a->precision = KG_F32;
            else if (!strcmp(optarg, "bf16"))
                a->precision = KG_BF16;
            else if (!strcmp(optarg, "fp16"))
                a->precision = KG_F16;
            else {
                fprintf(stderr, "kogpt2-train train: --precision must be f32, bf16 or fp16\n");
                return 2;
            }
            break;
        case OPT_LOSS_SCALE:
            a->loss_scale = (float)x;
            break;
        case OPT_ZERO:
            if (v > 1) {
                fprintf(stderr, "kogpt2-train train: --zero must be 0 or 1 (ZeRO stage 1)\n");
                return 2;
            }
            a->zero = (int)v;
            break;
        case OPT_BUCKET_MB:
            if (!(x > 0 && x <= 8192)) {
                fprintf(stderr, "kogpt2-train train: --bucket-mb must be above 0, at most 8192\n");
                return 2;
            }
            a->bucket_mb = (float)x;
            break;
        case OPT_WIRE:
            if (strcmp(optarg, "f32") && strcmp(optarg, "bf16") && strcmp(optarg, "f16")) {
                fprintf(stderr, "kogpt2-train train: --wire must be f32, bf16 or f16\n");
                return 2;
            }
            a->wire = !strcmp(optarg, "f32") ? KG_F32 : !strcmp(optarg, "bf16") ? KG_BF16 : KG_F16;
            break;
        case OPT_DIST_TIMEOUT:
            a->dist_timeout = x;
            break;
        case OPT_HELP:
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (a->resume && !resume_dir && optind + 1 == argc) resume_dir = dir_arg(argv[optind++]);
    if (optind != argc) {
        fprintf(stderr, "kogpt2-train train: unexpected argument %s\n", argv[optind]);
        return 2;
    }
    if (resume_dir && a->out_dir && strcmp(resume_dir, a->out_dir)) {
        fprintf(stderr, "kogpt2-train train: --resume %s and --out %s name two directories\n",
                resume_dir, a->out_dir);
        return 2;
    }
    if (resume_dir) a->out_dir = resume_dir;
    return 0;
}

// The checks after parsing: 0, or 2 with the reason (one line) for a usage error. A run that
// --resume will refuse (no checkpoint there) skips the others: train_run says why.
static int check_train(const TrainArgs *a) {
    char derr[KG_ERRLEN];
    const char *why = NULL;
    int ckpt = a->out_dir && ckpt_exists(a->out_dir), resuming = a->resume && ckpt;
    if (!a->out_dir)
        why = "--out CKPT_DIR is required (or --resume CKPT_DIR to continue a run)";
    else if (a->resume && !ckpt && !a->force)
        return 0;
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
    else if (a->threads < 0)
        why = "--threads must be 0 (all cores) to 4096";
    else if (a->zero > 1 || !(a->bucket_mb > 0))
        why = "--zero must be 0 or 1 and --bucket-mb above 0 (the checkpoint's train_args.json?)";
    else if (!(a->loss_scale >= 1))
        why = "--loss-scale must be at least 1";
    else if (kg_device_check(a->device, derr))
        why = derr;
    if (!why) return 0;
    fprintf(stderr, "kogpt2-train train: %s\n(kogpt2-train train --help lists the options)\n", why);
    return 2;
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

// The arguments of `train`: the flags over the defaults, or, with --resume and a checkpoint
// that recorded its run (train_args.json), the flags over that run's arguments. 0, 1 after
// --help, 2 for a usage error (said), 3 for an unreadable train_args.json (said). *owned
// holds the paths read from the checkpoint (free() after the run).
static int train_args(int argc, char **argv, TrainArgs *a, char **owned) {
    char err[KG_ERRLEN], path[4096];
    *a = train_defaults();
    *owned = NULL;
    int rc = parse_train(argc, argv, a);
    if (rc || !a->resume || !a->out_dir) return rc ? rc : check_train(a);
    kg_path_join(path, sizeof path, a->out_dir, TRAIN_ARGS_FILE);
    if (access(path, F_OK)) return check_train(a); // none: a new run, or an older checkpoint
    const char *dir = a->out_dir;
    *a = train_defaults();
    if (train_args_load(a, dir, owned, err)) {
        fprintf(stderr, "kogpt2-train train: %s\n", err);
        return 3;
    }
    optind = 0; // getopt_long starts over (GNU)
    rc = parse_train(argc, argv, a);
    return rc ? rc : check_train(a);
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
    int rc = train_args(argc, argv, &a, &owned);
    if (rc) {
        free(owned);
        dist_finalize(&d);
        return rc == 1 ? 0 : rc == 3 ? 1 : rc;
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
    static const struct option opts[] = {
        {"from", required_argument, 0, 'f'},  {"out", required_argument, 0, 'o'},
        {"dtype", required_argument, 0, 'd'}, {"force", no_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *from = NULL, *out = NULL;
    KgDtype dtype = KG_F16;
    int force = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        } else if (c == 'f')
            from = optarg;
        else if (c == 'o')
            out = dir_arg(optarg);
        else if (c == 'F')
            force = 1;
        else if (c == 'd' && (!strcmp(optarg, "f16") || !strcmp(optarg, "f32")))
            dtype = !strcmp(optarg, "f16") ? KG_F16 : KG_F32;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!from || !out || optind != argc) {
        usage(stderr);
        return 2;
    }
    char err[KG_ERRLEN];
    if (train_export(from, out, dtype, force, err)) {
        fprintf(stderr, "kogpt2-train export: %s\n", err);
        return 1;
    }
    printf("exported %s -> %s (%s)\n", from, out, kg_dtype_name(dtype));
    return 0;
}

// eval: one line on stdout, "eval loss L bpb B tokens N bytes N docs N seq T" (scripts read
// it: models/eval_bpb.sh); the device line on stderr.
static int cmd_eval(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"val", required_argument, 0, 'v'},
                                         {"seq", required_argument, 0, 's'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"val-tokens", required_argument, 0, 'n'},
                                         {"device", required_argument, 0, 'd'},
                                         {"threads", required_argument, 0, 't'},
                                         {"precision", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *val = NULL, *device = "auto";
    long long seq = 0, batch = 8, tokens = 0, threads = 0;
    KgDtype precision = KG_F32;
    char err[KG_ERRLEN];
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        long long *count = c == 's'   ? &seq
                           : c == 'b' ? &batch
                           : c == 'n' ? &tokens
                           : c == 't' ? &threads
                                      : NULL;
        if (count && (*count = parse_count(optarg)) < 0) {
            fprintf(stderr, "kogpt2-train eval: not a count: %s\n", optarg);
            return 2;
        }
        if (c == 'h') {
            usage(stdout);
            return 0;
        } else if (c == 'm') {
            static char model_dir[4096]; // ORG/NAME[@REV]: the Hugging Face cache's copy
            if (hfcache_resolve(optarg, model_dir, sizeof model_dir, err)) {
                fprintf(stderr, "kogpt2-train eval: --model %s\n", err);
                return 2;
            }
            model = model_dir;
        } else if (c == 'v')
            val = optarg;
        else if (c == 'd')
            device = optarg;
        else if (c == 'p' &&
                 (!strcmp(optarg, "f32") || !strcmp(optarg, "bf16") || !strcmp(optarg, "fp16")))
            precision = !strcmp(optarg, "f32")    ? KG_F32
                        : !strcmp(optarg, "bf16") ? KG_BF16
                                                  : KG_F16;
        else if (!count) {
            usage(stderr);
            return 2;
        }
    }
    const char *why = !model || !val || optind != argc
                          ? "--model DIR and --val FILE|DIR are required"
                      : batch < 1 || batch > 4096    ? "--batch must be 1 to 4096"
                      : threads > 4096               ? "--threads must be 0 (all cores) to 4096"
                      : kg_device_check(device, err) ? err
                                                     : NULL;
    if (why) {
        fprintf(stderr, "kogpt2-train eval: %s\n(kogpt2-train --help lists the options)\n", why);
        return 2;
    }
    TrainEval ev;
    if (train_eval(model, val, (size_t)seq, (size_t)batch, (uint64_t)tokens, device, (int)threads,
                   precision, stderr, &ev, err)) {
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
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"width", required_argument, 0, 'w'},
                                         {"height", required_argument, 0, 'H'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL;
    long long width = 1000, height = 600;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        } else if (c == 'o')
            out = optarg;
        else if ((c == 'w' && (width = parse_count(optarg)) >= 0) ||
                 (c == 'H' && (height = parse_count(optarg)) >= 0))
            continue;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kogpt2-train plot: one CKPT_DIR or LOG is required\n");
        return 2;
    }
    // a checkpoint directory stands for its log, CKPT_DIR.log.jsonl; the PNG goes beside it
    char log[4096], png[4096];
    struct stat sb;
    const char *arg = dir_arg(argv[optind]);
    int is_dir = !stat(arg, &sb) && S_ISDIR(sb.st_mode);
    if (ckpt_sibling(log, sizeof log, arg, is_dir ? CKPT_LOG_SUFFIX : "")) {
        fprintf(stderr, "kogpt2-train plot: path too long\n");
        return 2;
    }
    size_t n = strlen(log), k = strlen(".jsonl");
    snprintf(png, sizeof png, "%.*s.png",
             (int)(n > k && !strcmp(log + n - k, ".jsonl") ? n - k : n), log);
    if (!out) out = png;
    char err[KG_ERRLEN];
    PlotCounts pc;
    if (plot_log(log, out, width > 4096 ? 0 : (int)width, height > 4096 ? 0 : (int)height, &pc,
                 err)) {
        fprintf(stderr, "kogpt2-train plot: %s\n", err);
        return 1;
    }
    printf("plot: %zu train and %zu val records of %s -> %s\n", pc.train, pc.val, log, out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kogpt2-train %s (commit %s)\n", kg_version(), kg_commit());
        return 0;
    }
    // getopt_long sees the subcommand as argv[0]
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot")) return cmd_plot(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    fprintf(stderr, "kogpt2-train: unknown command %s\n", argv[1]);
    usage(stderr);
    return 2;
}
