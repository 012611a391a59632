// kogpt2-train — prepare token shards, train or fine-tune a GPT-2, export a model.
//
//   kogpt2-train prepare --tokenizer PATH --input PATH [--input PATH ...] --out DATA_DIR
//       [--append | --force] [--max-line-bytes N]
//   kogpt2-train train --data DATA_DIR --out CKPT_DIR (--init MODEL_DIR | --n-layer L
//       --n-embd C --n-head H --n-ctx T --tokenizer PATH) --steps N --batch B --seq T
//       [--lr X] [--grad-accum K] [--seed S] [--resume] [--force] ...
//   kogpt2-train export --from CKPT_DIR --out MODEL_DIR [--dtype f16|f32]
//   mpirun -np N kogpt2-train train ...   (data parallel; --batch is per rank)
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "dist.h"
#include "model/backend.h"
#include "model/hfcache.h"
#include "model/safetensors.h"
#include "shard.h"
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
        "       kogpt2-train export --from CKPT_DIR --out MODEL_DIR [--dtype f16|f32]\n"
        "train options:\n"
        "  --lr X            peak learning rate (6e-4)       --min-lr X   floor (lr/10)\n"
        "  --warmup N        linear warmup steps (0)         --weight-decay X (0.1)\n"
        "  --grad-accum K    micro-steps per step (1)        --clip X     grad norm (1.0)\n"
        "  --seed S          init and data order (1337)      --threads N  (0: all cores, shared\n"
        "                                                   by the ranks on one machine)\n"
        "  --recompute       recompute activations in backward (less memory)\n"
        "  --val-every N     validate every N steps (250)    --val-tokens N (65536)\n"
        "  --save-every N    checkpoint every N steps (500)  --log-every N (1)\n"
        "  --resume          continue the checkpoint in CKPT_DIR (there must be one)\n"
        "  --force           start over even if CKPT_DIR holds a checkpoint or files (they\n"
        "                    are replaced at the first save); with --resume: resume if there\n"
        "                    is a checkpoint, else start over\n"
        "  --stop-at N       stop after step N as an interruption would (tests)\n"
        "  --device D        auto (GPU if any), cpu, cuda, cuda:N (auto)\n"
        "  --precision P     matmuls in f32, bf16 or fp16 (dynamic loss scaling) with f32\n"
        "                    master weights; GPU only, the CPU computes in f32 (f32)\n"
        "  --loss-scale X    fp16: the loss scale's start (65536)\n"
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
    ShardPrepareArgs pa = {.inputs = inputs, .val_every = 100};
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
    OPT_HELP
};

// Fills a from argv; 0, or 2 with a message for a usage error.
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
                                         {"val-every", required_argument, 0, OPT_VAL_EVERY},
                                         {"val-tokens", required_argument, 0, OPT_VAL_TOKENS},
                                         {"save-every", required_argument, 0, OPT_SAVE_EVERY},
                                         {"log-every", required_argument, 0, OPT_LOG_EVERY},
                                         {"resume", no_argument, 0, OPT_RESUME},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"stop-at", required_argument, 0, OPT_STOP_AT},
                                         {"device", required_argument, 0, OPT_DEVICE},
                                         {"precision", required_argument, 0, OPT_PRECISION},
                                         {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
                                         {"help", no_argument, 0, OPT_HELP},
                                         {0, 0, 0, 0}};
    int bad_precision = 0;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        long long v = 0;
        double x = 0;
        char *end = NULL;
        if (c == OPT_LR || c == OPT_MIN_LR || c == OPT_WD || c == OPT_CLIP || c == OPT_LOSS_SCALE) {
            x = strtod(optarg, &end);
            if (end == optarg || *end || !(x >= 0)) {
                fprintf(stderr, "kogpt2-train train: not a non-negative number: %s\n", optarg);
                return 2;
            }
        } else if (optarg && c != OPT_DATA && c != OPT_OUT && c != OPT_INIT && c != OPT_TOKENIZER &&
                   c != OPT_DEVICE && c != OPT_PRECISION && (v = parse_count(optarg)) < 0) {
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
        case OPT_RESUME:
            a->resume = 1;
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
            else
                bad_precision = 1;
            break;
        case OPT_LOSS_SCALE:
            a->loss_scale = (float)x;
            break;
        case OPT_HELP:
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    char derr[KG_ERRLEN];
    const char *why = NULL;
    if (optind != argc)
        why = "unexpected argument";
    else if (!a->data_dir || !a->out_dir)
        why = "--data and --out are required";
    else if (a->init && a->shape_given)
        why = "--init takes the shape from the model: drop --n-*";
    else if (!a->init && !a->tokenizer)
        why = "a new model needs --tokenizer (or use --init)";
    else if (!a->steps || !a->B || !a->T || !a->grad_accum)
        why = "--steps, --batch, --seq and --grad-accum must be at least 1";
    else if (a->threads < 0)
        why = "--threads must be 0 (all cores) to 4096";
    else if (bad_precision)
        why = "--precision must be f32, bf16 or fp16";
    else if (!(a->loss_scale >= 1))
        why = "--loss-scale must be at least 1";
    else if (kg_device_check(a->device, derr))
        why = derr;
    if (why) {
        fprintf(stderr, "kogpt2-train train: %s\n", why);
        usage(stderr);
        return 2;
    }
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
    TrainArgs a = train_defaults();
    int rc = parse_train(argc, argv, &a);
    if (rc) {
        dist_finalize(&d);
        return rc == 1 ? 0 : rc;
    }
    catch_stop_signals(); // after MPI_Init, so that ours are the handlers
    a.stop = &stop_signal;
    rc = train_run(&a, &d, d.rank == 0 ? stdout : NULL, err);
    if (rc && d.size > 1)
        fprintf(stderr, "kogpt2-train train (rank %d): %s\n", d.rank, err);
    else if (rc)
        fprintf(stderr, "kogpt2-train train: %s\n", err);
    dist_finalize(&d);
    return rc ? 1 : 0;
}

static int cmd_export(int argc, char **argv) {
    static const struct option opts[] = {{"from", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'},
                                         {"dtype", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *from = NULL, *out = NULL;
    KgDtype dtype = KG_F16;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        } else if (c == 'f')
            from = optarg;
        else if (c == 'o')
            out = dir_arg(optarg);
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
    if (train_export(from, out, dtype, err)) {
        fprintf(stderr, "kogpt2-train export: %s\n", err);
        return 1;
    }
    printf("exported %s -> %s (%s)\n", from, out, kg_dtype_name(dtype));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    // getopt_long sees the subcommand as argv[0]
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    fprintf(stderr, "kogpt2-train: unknown command %s\n", argv[1]);
    usage(stderr);
    return 2;
}
