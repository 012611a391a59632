// kogpt2 score — how well the model predicts each document of a text or JSONL file (one
// document per line): its tokens, bytes, summed and mean log-probability and bits per byte, one
// JSON object per line in input order; what filtering a corpus with a language model needs.
//
// The definition is the trainer's validation's (train/val.h) applied to one document at a time,
// so a one-line file gives what models/eval_bpb.sh gives for it: the stream EOS, the document's
// tokens, EOS; every token after the first EOS scored once (the closing EOS too), in windows of
// --seq predicted tokens, each predicted from the tokens before it in its window; bytes = the
// document's UTF-8 bytes as its tokens decode + 1 (the newline its EOS stands for);
// bits_per_byte = -sum ln p / ln 2 / bytes; mean_logprob = sum ln p / tokens (nats). Each token's
// ln p is logit - log-sum-exp over the vocabulary (model/logits.h), /v1/score's logprob.
//
// The work is kogpt2d's scoring: gpt2_forward over several windows at once (--batch of them,
// --chunk rows each per pass, logits at every row), the same graph and kernels the daemon runs.
// Lines the trainer's prepare would drop are not scored but kept in the output, in their place:
// {"line": N, "skipped": "empty" | "not UTF-8" | "NUL byte" | "over --max-line-bytes"}; a JSONL
// line without the text field: {"line": N, "error": "..."}.
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/kg.h"
#include "base/progress.h"
#include "commands.h"
#include "score_run.h"

typedef struct {
    CliModelArgs model;
    const char *in, *out; // FILE ("-": stdin); --out (NULL: stdout)
    const char *field;    // JSONL: the text field
    int jsonl;            // -1: by the file name (.jsonl, .ndjson)
    long long seq, batch, chunk, max_line;
    int quiet;
} ScoreArgs;

static void score_usage(FILE *f) {
    fprintf(
        f,
        "usage: kogpt2 score FILE [--model DIR] [--format auto|text|jsonl] [--field NAME]\n"
        "                   [--out FILE] [--seq N] [--batch N] [--chunk N]\n"
        "                   [--max-line-bytes N] [--quiet] [--device D] [--threads N]\n"
        "                   [--dtype T] [--precision P] [--tokenizer P]\n"
        "  FILE                   one document per line: text, or JSONL with --format jsonl\n"
        "                         (auto: a .jsonl or .ndjson name); - reads stdin\n"
        "  --field NAME           JSONL: the field that holds the text (default text)\n"
        "  --out FILE             the JSONL output (default stdout): one object per line,\n"
        "                         {line, tokens, bytes, logprob, mean_logprob,\n"
        "                         bits_per_byte}, or {line, skipped} / {line, error}\n"
        "  --seq N                predicted tokens per window, 1..n_ctx (default n_ctx), as\n"
        "                         models/eval_bpb.sh's SEQ\n"
        "  --batch N              windows scored together, 1..64 (default 4)\n"
        "  --chunk N              rows of a window per forward pass, 1..256 (default 32)\n"
        "  --max-line-bytes N     longer lines are skipped (default 1048576, as prepare)\n"
        "  --quiet                no progress line on stderr\n"
        "  --model DIR            a model directory or ORG/NAME[@REV] in the Hugging Face cache\n"
        "                         (default: the project's models/default)\n"
        "  --tokenizer P          tokenizer.json, *.model or a directory (default: --model)\n"
        "  --device D             auto (a GPU when there is one, else the CPU), cpu, cuda[:N]\n"
        "  --threads N            compute threads (default: one per core)\n"
        "  --dtype T              auto|f32|f16|bf16|q8_0|q4_0: the weights in memory, as next\n"
        "  --precision P          f32 (default) or bf16, as next\n"
        "  --version              print the version and exit\n"
        "stderr: the device, the model, a progress line with an ETA, and a summary (documents,\n"
        "tokens, bytes, their bits per byte, tokens/s).\n");
}

// A flag that is neither a model flag nor --help/--version: KG_OK, 1 when c is none of them,
// or KG_EINVAL with err.
static int score_flag(ScoreArgs *a, int c, const char *v, char *err) {
    switch (c) {
    case 'f':
        if (!strcmp(v, "auto") || !strcmp(v, "text") || !strcmp(v, "jsonl")) {
            a->jsonl = !strcmp(v, "auto") ? -1 : !strcmp(v, "jsonl");
            return KG_OK;
        }
        return kg_err(err, KG_EINVAL, "--format must be auto, text or jsonl, got '%.*s'",
                      (int)strnlen(v, 40), v);
    case 'F':
        a->field = v;
        return KG_OK;
    case 'o':
        a->out = v;
        return KG_OK;
    case 's':
        return cli_int("--seq", v, 1, 1 << 20, &a->seq, err); // n_ctx checked once it is known
    case 'b':
        return cli_int("--batch", v, 1, SCORE_MAX_BATCH, &a->batch, err);
    case 'c':
        return cli_int("--chunk", v, 1, SCORE_MAX_CHUNK, &a->chunk, err);
    case 'L':
        return cli_int("--max-line-bytes", v, 1, 1ll << 30, &a->max_line, err);
    case 'q':
        a->quiet = 1;
        return KG_OK;
    default:
        return 1;
    }
}

// The command's flags into a: -1 to go on, else the exit code (0 after --help or --version, 2
// after a usage error, with its line printed).
static int parse_score_args(int argc, char **argv, ScoreArgs *a) {
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         {"format", required_argument, 0, 'f'},
                                         {"field", required_argument, 0, 'F'},
                                         {"out", required_argument, 0, 'o'},
                                         {"seq", required_argument, 0, 's'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"chunk", required_argument, 0, 'c'},
                                         {"max-line-bytes", required_argument, 0, 'L'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    *a = (ScoreArgs){.field = "text", .jsonl = -1, .batch = 4, .chunk = 32, .max_line = 1 << 20};
    cli_model_args_init(&a->model);
    char err[KG_ERRLEN] = "";
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:T:j:d:P:D:f:F:o:s:b:c:L:qh", opts, NULL)) != -1) {
        if ((rc = cli_model_flag(&a->model, c, optarg, err)) < 0) goto bad;
        if (rc) continue;
        if ((rc = score_flag(a, c, optarg, err)) < 0) goto bad;
        if (rc == KG_OK) continue;
        if (c == 'h') {
            score_usage(stdout);
            return 0;
        }
        if (c == 'V') {
            puts(cli_version(err));
            return 0;
        }
        fprintf(stderr, "kogpt2 score: %s\n", cli_opt_error(c, argv, err));
        score_usage(stderr);
        return 2;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kogpt2 score: %s\n",
                optind == argc ? "no FILE given" : "one FILE only (- for stdin)");
        score_usage(stderr);
        return 2;
    }
    a->in = argv[optind];
    if (a->jsonl < 0) {
        const char *dot = strrchr(a->in, '.');
        a->jsonl = dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".ndjson"));
    }
    if ((rc = cli_model_resolve(&a->model, err))) {
        fprintf(stderr, "kogpt2 score: %s\n", err);
        return rc == KG_EINVAL ? 2 : 1;
    }
    if (!a->seq) a->seq = (long long)a->model.config.n_ctx;
    if (a->seq > (long long)a->model.config.n_ctx) {
        kg_err(err, KG_EINVAL, "--seq must be an integer in 1..%zu (the model's n_ctx), got %lld",
               a->model.config.n_ctx, a->seq);
        goto bad;
    }
    return -1;
bad:
    fprintf(stderr, "kogpt2 score: %s\n", err);
    return 2;
}

// ---------------------------------------------------------------------------------------
// Reading documents

// The document of one input line (without its newline) into d: its text (a JSONL line's field),
// or why it is skipped or wrong. KG_OK, or KG_ENOMEM.
static int read_doc(const ScoreArgs *a, ScoreRun *run, char *line, size_t len, ScoreDoc *d,
                    char *err) {
    const char *text = line;
    cJSON *j = NULL;
    if (len > (size_t)a->max_line) return score_doc_skip(d, "over --max-line-bytes");
    if (memchr(line, '\0', len)) return score_doc_skip(d, "NUL byte");
    if (a->jsonl) {
        if (!len) return score_doc_skip(d, "empty");
        j = cJSON_ParseWithLength(line, len);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, a->field);
        if (!cJSON_IsString(f)) {
            cJSON_Delete(j);
            return score_doc_error(d, j ? "no string field" : "not JSON", a->field);
        }
        text = f->valuestring;
        len = strlen(text);
    }
    int rc = score_run_text(run, d, text, len, err);
    cJSON_Delete(j);
    return rc;
}

// ---------------------------------------------------------------------------------------
// The command

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

// Reads every line of in, scores it with run and writes the results to out in order. KG_OK or an
// error with err.
static int score_file(const ScoreArgs *a, ScoreRun *run, FILE *in, FILE *out, KgProgress *pr,
                      char *err) {
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t got;
    int rc = KG_OK;
    while (!rc && (got = getline(&line, &cap, in)) >= 0) {
        size_t len = (size_t)got, raw = len;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        ScoreDoc *d = score_run_add(run, ++lineno, raw, err);
        if (!d) rc = KG_ENOMEM;
        if (!rc) rc = read_doc(a, run, line, len, d, err);
        while (!rc && score_run_full(run))
            rc = score_run_step(run, out, pr, err);
    }
    free(line);
    if (!rc && ferror(in)) rc = kg_err(err, KG_EIO, "%s: read error", a->in);
    while (!rc && !score_run_done(run))
        rc = score_run_step(run, out, pr, err);
    return rc;
}

int cmd_score(int argc, char **argv) {
    ScoreArgs a;
    int rc = parse_score_args(argc, argv, &a);
    if (rc >= 0) return rc;
    rc = KG_OK;
    char err[KG_ERRLEN] = "";
    FILE *in = strcmp(a.in, "-") ? fopen(a.in, "rb") : stdin;
    if (!in) {
        fprintf(stderr, "kogpt2 score: %s: cannot open it\n", a.in);
        return 1;
    }
    struct stat sb;
    uint64_t total =
        in != stdin && !fstat(fileno(in), &sb) && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
    FILE *out = a.out ? fopen(a.out, "w") : stdout;
    CliModel cm;
    memset(&cm, 0, sizeof cm);
    ScoreRun run = {0};
    if (!out) rc = kg_err(err, KG_EIO, "%s: cannot write it", a.out);
    if (!rc) rc = cli_model_open_tokenizer(&cm, &a.model, 1, err);
    size_t rows = (size_t)(a.batch * a.chunk);
    if (!rc) rc = cli_model_open(&cm, &a.model, rows, rows, stderr, err);
    if (!rc) {
        const char *note = kg_precision_note(cm.be);
        if (note) fprintf(stderr, "kogpt2 score: %s\n", note);
        fprintf(stderr, "kogpt2 score: loaded %s%s%s\n", cm.m.src.what, cm.m.warning[0] ? "; " : "",
                cm.m.warning);
        rc = score_run_init(&run, &cm.m, &cm.s, cm.tok, (size_t)a.seq, (size_t)a.batch,
                            (size_t)a.chunk, err);
    }
    KgProgress pr;
    progress_start(&pr, a.quiet ? NULL : stderr, "score", total, 10);
    double t0 = now_s();
    if (!rc) rc = score_file(&a, &run, in, out, &pr, err);
    progress_end(&pr, pr.done);
    if (!rc && (fflush(out) || ferror(out)))
        rc = kg_err(err, KG_EIO, "write: the output is closed or full");
    if (rc) {
        fprintf(stderr, "kogpt2 score: %s\n", err);
    } else {
        const ScoreTotals *t = &run.totals;
        double s = now_s() - t0;
        fprintf(
            stderr,
            "kogpt2 score: %llu documents (%llu not scored), %llu tokens, %llu bytes: %.4f bits "
            "per byte, mean logprob %.4f; %.1f s (%.0f tokens/s)\n",
            (unsigned long long)t->docs, (unsigned long long)t->skipped,
            (unsigned long long)t->tokens, (unsigned long long)t->bytes,
            t->bytes ? -t->logprob / M_LN2 / (double)t->bytes : 0.0,
            t->tokens ? t->logprob / (double)t->tokens : 0.0, s,
            s > 0 ? (double)t->tokens / s : 0.0);
    }
    score_run_free(&run);
    cli_model_close(&cm);
    if (in != stdin) fclose(in);
    if (out && out != stdout) fclose(out);
    return rc ? 1 : 0;
}
