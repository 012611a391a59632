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

static const KgFlagChoice SCORE_FORMATS[] = {{"auto", -1}, {"text", 0}, {"jsonl", 1}, {NULL, 0}};

static const KgFlag SCORE_ROWS[] = {
    {.name = "format",
     .short_name = 'f',
     .kind = KG_FLAG_CHOICE,
     .metavar = "F",
     KG_FLAG_AT(ScoreArgs, jsonl),
     .choices = SCORE_FORMATS,
     .def = "auto",
     .help = "one document per line: text, or JSONL (auto: JSONL for a .jsonl or .ndjson name)"},
    {.name = "field",
     .short_name = 'F',
     .kind = KG_FLAG_STR,
     .metavar = "NAME",
     KG_FLAG_AT(ScoreArgs, field),
     .def = "text",
     .help = "JSONL: the field that holds the text"},
    {.name = "out",
     .short_name = 'o',
     .kind = KG_FLAG_STR,
     .metavar = "FILE",
     KG_FLAG_AT(ScoreArgs, out),
     .def_text = "stdout",
     .help = "the JSONL output: one object per line, {line, tokens, bytes, logprob, "
             "mean_logprob, bits_per_byte}, or {line, skipped} / {line, error}"},
    {.name = "seq",
     .short_name = 's',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(ScoreArgs, seq),
     .def_text = "n_ctx",
     .min = 1,
     .max = 1 << 20, // n_ctx checked once it is known
     .help = "predicted tokens per window, at most the model's n_ctx, as models/eval_bpb.sh's "
             "SEQ"},
    {.name = "batch",
     .short_name = 'b',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(ScoreArgs, batch),
     .def = "4",
     .min = 1,
     .max = SCORE_MAX_BATCH,
     .help = "windows scored together"},
    {.name = "chunk",
     .short_name = 'c',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(ScoreArgs, chunk),
     .def = "32",
     .min = 1,
     .max = SCORE_MAX_CHUNK,
     .help = "rows of a window per forward pass"},
    {.name = "max-line-bytes",
     .short_name = 'L',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(ScoreArgs, max_line),
     .def = "1048576",
     .min = 1,
     .max = 1ll << 30,
     .help = "longer lines are skipped (as prepare)"},
    {.name = "quiet",
     .short_name = 'q',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(ScoreArgs, quiet),
     .help = "no progress line on stderr"},
    CLI_MODEL_FLAGS(ScoreArgs),
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable SCORE_FLAGS = {
    .program = "kogpt2 score",
    .usage = "FILE [--model DIR] [--format auto|text|jsonl] [--field NAME] [--out FILE] [options]",
    .flags = SCORE_ROWS,
    .n_flags = sizeof SCORE_ROWS / sizeof SCORE_ROWS[0],
    .notes = "FILE: one document per line; - reads stdin.\n"
             "stderr: the device, the model, a progress line with an ETA, and a summary\n"
             "(documents, tokens, bytes, their bits per byte, tokens/s).\n"};

// The command's flags into a: -1 to go on, else the exit code (0 after --help or --version, 2
// after a usage error, with its line printed).
static int parse_score_args(int argc, char **argv, ScoreArgs *a) {
    *a = (ScoreArgs){0};
    char err[KG_ERRLEN] = "";
    int first, rc = cli_flags_parse(&SCORE_FLAGS, a, argc, argv, &first);
    if (rc >= 0) return rc;
    if (first + 1 != argc) {
        fprintf(stderr, "kogpt2 score: %s\n",
                first == argc ? "no FILE given" : "one FILE only (- for stdin)");
        return 2;
    }
    a->in = argv[first];
    if (a->jsonl < 0) {
        const char *dot = strrchr(a->in, '.');
        a->jsonl = dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".ndjson"));
    }
    if ((rc = cli_model_resolve(&a->model, err))) {
        fprintf(stderr, "kogpt2 score: %s\n", err);
        return rc == KG_EINVAL ? 2 : 1;
    }
    long long n_ctx = (long long)a->model.config.n_ctx;
    if (!a->seq) a->seq = n_ctx;
    if (a->seq > n_ctx) {
        fprintf(stderr,
                "kogpt2 score: --seq must be an integer in 1..%lld (the model's n_ctx), "
                "got %lld\n",
                n_ctx, a->seq);
        return 2;
    }
    return -1;
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
    double t0 = kg_now_s();
    if (!rc) rc = score_file(&a, &run, in, out, &pr, err);
    progress_end(&pr, pr.done);
    if (!rc && (fflush(out) || ferror(out)))
        rc = kg_err(err, KG_EIO, "write: the output is closed or full");
    if (rc) {
        fprintf(stderr, "kogpt2 score: %s\n", err);
    } else {
        const ScoreTotals *t = &run.totals;
        double s = kg_now_s() - t0;
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
