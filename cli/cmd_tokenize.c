// cmd_tokenize.c — `kogpt2 tokenize` (text -> ids and pieces) and `kogpt2 detokenize`
// (ids -> text), one-shot or in bulk over JSON lines for comparisons with other tokenizers.
//
//   kogpt2 tokenize [--tokenizer DIR_OR_FILE] [--json | --ids] TEXT...   (no TEXT: stdin)
//   kogpt2 tokenize [--tokenizer DIR_OR_FILE] --jsonl < strings.jsonl -> {"tokens","pieces"}/line
//   kogpt2 detokenize [--tokenizer DIR_OR_FILE] [--json] 25906,8702,...
//   kogpt2 detokenize [--tokenizer DIR_OR_FILE] --jsonl < id_arrays.jsonl -> {"text"}/line
// Without --tokenizer: the default model's (models/default), as next and generate use it.
// The JSON names are the HTTP API's (/v1/tokenize: tokens, pieces; /v1/detokenize: text).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/flags.h"
#include "base/kg.h"
#include "base/kg_json.h"
#include "commands.h"
#include "tokenizer/tokenizer.h"

typedef enum { OUT_PLAIN, OUT_IDS, OUT_JSON, OUT_JSONL } OutMode;

typedef struct {
    const char *tokenizer;
    int json, jsonl, ids; // the output flags: one at most
    OutMode mode;
    char dir[4096]; // the default tokenizer's directory, when --tokenizer is not given
} TokArgs;

// The flags of tokenize and detokenize (--ids is tokenize's only: detokenize says so).
static const KgFlag TOK_ROWS[] = {
    {.name = "tokenizer",
     .short_name = 't',
     .kind = KG_FLAG_STR,
     .metavar = "FILE_OR_DIR",
     KG_FLAG_AT(TokArgs, tokenizer),
     .def_text = "the project's models/default, as next uses",
     .help = "tokenizer.json, *.model / *.spiece, or a model directory"},
    {.name = "json",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(TokArgs, json),
     .help = "tokenize: {\"tokens\":[...],\"pieces\":[...]} (as POST /v1/tokenize); detokenize: "
             "{\"text\":\"...\"} (as POST /v1/detokenize)"},
    {.name = "ids",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(TokArgs, ids),
     .help = "tokenize only: the ids alone, comma-separated (the input of detokenize)"},
    {.name = "jsonl",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(TokArgs, jsonl),
     .help = "stdin holds one JSON string (tokenize) or array of ids (detokenize) per line; one "
             "object per line out"},
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable TOKENIZE_FLAGS = {
    .program = "kogpt2 tokenize",
    .usage = "[--tokenizer FILE_OR_DIR] [--json | --ids | --jsonl] [TEXT...]",
    .flags = TOK_ROWS,
    .n_flags = sizeof TOK_ROWS / sizeof TOK_ROWS[0],
    .notes = "TEXT words are joined by single spaces; without TEXT, stdin is read whole. Plain\n"
             "output: one line per token: id, tab, the piece as a JSON string (a piece may hold\n"
             "a newline, a tab or a quote: they are escaped).\n"};

static const KgFlagTable DETOKENIZE_FLAGS = {
    .program = "kogpt2 detokenize",
    .usage = "[--tokenizer FILE_OR_DIR] [--json | --jsonl] [IDS...]",
    .flags = TOK_ROWS,
    .n_flags = sizeof TOK_ROWS / sizeof TOK_ROWS[0],
    .notes = "IDS are separated by commas and/or spaces; without IDS, stdin is read. Plain\n"
             "output: the text and a newline.\n"};

// Parses the shared flags; returns -1 to go on with *first where the TEXT or IDS words start,
// else the exit code (0 after --help or --version, 2 after a usage error, with its line
// printed).
static int parse_args(int argc, char **argv, TokArgs *a, int *first) {
    const char *cmd = argv[0];
    int tokenize = !strcmp(cmd, "tokenize");
    memset(a, 0, sizeof(*a));
    int rc = cli_flags_parse(tokenize ? &TOKENIZE_FLAGS : &DETOKENIZE_FLAGS, a, argc, argv, first);
    if (rc >= 0) return rc;
    const char *wrong = NULL;
    char why[KG_ERRLEN];
    if (a->ids && !tokenize)
        wrong = "--ids is an output of tokenize only";
    else if (a->json + a->jsonl + a->ids > 1)
        wrong = "give one of --json, --ids and --jsonl";
    else if (a->jsonl && *first < argc) {
        snprintf(why, sizeof why, "--jsonl reads stdin: no %s arguments ('%s')",
                 tokenize ? "TEXT" : "IDS", argv[*first]);
        wrong = why;
    }
    if (wrong) {
        fprintf(stderr, "kogpt2 %s: %s\n", cmd, wrong);
        return 2;
    }
    a->mode = a->jsonl ? OUT_JSONL : a->json ? OUT_JSON : a->ids ? OUT_IDS : OUT_PLAIN;
    if (!a->tokenizer &&
        !(a->tokenizer = kg_find_data_dir("models/default", a->dir, sizeof a->dir))) {
        fprintf(stderr, "kogpt2 %s: no --tokenizer given and no default model (models/default)\n",
                cmd);
        return 2;
    }
    return -1;
}

// Reads all of f into a malloc'd, NUL-terminated buffer; NULL on failure.
static char *read_all(FILE *f, size_t *len) {
    KgBuf b = {0};
    char chunk[1 << 16];
    for (size_t got; (got = fread(chunk, 1, sizeof chunk, f)) > 0;)
        if (buf_append(&b, chunk, got)) {
            buf_free(&b);
            return NULL;
        }
    return buf_take(&b, len);
}

// Joins argv[first..argc) with single spaces; NULL on OOM.
static char *join_args(int first, int argc, char **argv, size_t *len) {
    size_t n = 0;
    for (int i = first; i < argc; i++)
        n += strlen(argv[i]) + 1;
    char *s = malloc(n + 1), *p = s;
    if (!s) return NULL;
    for (int i = first; i < argc; i++)
        p += sprintf(p, "%s%s", i > first ? " " : "", argv[i]);
    *len = (size_t)(p - s);
    return s;
}

// {"tokens":[...],"pieces":[...]} for ids (/v1/tokenize's reply); NULL on OOM. Free with
// cJSON_Delete().
static cJSON *ids_object(const Tokenizer *t, const int *ids, size_t n) {
    cJSON *j_root = cJSON_CreateObject();
    cJSON *j_ids = cJSON_AddArrayToObject(j_root, "tokens");
    cJSON *j_pieces = cJSON_AddArrayToObject(j_root, "pieces");
    if (!j_ids || !j_pieces) goto fail;
    for (size_t i = 0; i < n; i++) {
        cJSON *j_id = cJSON_CreateNumber(ids[i]), *j_p = cJSON_CreateString(tok_piece(t, ids[i]));
        if (!j_id || !j_p) {
            cJSON_Delete(j_id);
            cJSON_Delete(j_p);
            goto fail;
        }
        cJSON_AddItemToArray(j_ids, j_id);
        cJSON_AddItemToArray(j_pieces, j_p);
    }
    return j_root;
fail:
    cJSON_Delete(j_root);
    return NULL;
}

// Prints j unformatted on one line and deletes it. 0 ok, 1 on OOM.
static int print_json(cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) {
        fprintf(stderr, "kogpt2: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

static int print_error_json(const char *msg) {
    cJSON *j_root = cJSON_CreateObject();
    if (j_root && !cJSON_AddStringToObject(j_root, "error", msg)) {
        cJSON_Delete(j_root);
        j_root = NULL;
    }
    return print_json(j_root);
}

static int tokenize_one(const Tokenizer *t, const char *text, size_t len, OutMode mode) {
    char err[KG_ERRLEN];
    int *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, len, &ids, &n, err)) {
        fprintf(stderr, "kogpt2 tokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (mode == OUT_JSON) {
        rc = print_json(ids_object(t, ids, n));
    } else if (mode == OUT_IDS) {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        putchar('\n');
    } else { // a piece may hold a newline or a tab: as a JSON string, every line reads back
        for (size_t i = 0; !rc && i < n; i++) {
            cJSON *j_p = cJSON_CreateString(tok_piece(t, ids[i]));
            char *quoted = j_p ? cJSON_PrintUnformatted(j_p) : NULL;
            if (quoted)
                printf("%d\t%s\n", ids[i], quoted);
            else
                rc = print_json(NULL); // says out of memory
            cJSON_free(quoted);
            cJSON_Delete(j_p);
        }
    }
    free(ids);
    return rc;
}

// One JSON string per input line -> one {"tokens","pieces"} (or {"error"}) per output line.
static int tokenize_jsonl(const Tokenizer *t) {
    char *line = NULL, err[KG_ERRLEN + 32], msg[KG_ERRLEN];
    size_t cap = 0, lineno = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        const char *end = NULL;
        cJSON *j_s = cJSON_ParseWithLengthOpts(line, (size_t)got, &end, 0);
        int *ids = NULL;
        size_t n = 0;
        if (!cJSON_IsString(j_s)) {
            snprintf(err, sizeof(err), "line %zu: not a JSON string (or not valid JSON)", lineno);
            rc |= 1 | print_error_json(err);
        } else if (kg_json_check_nul(line, (size_t)got, "input", msg)) { // strlen would stop
            snprintf(err, sizeof(err), "line %zu: %s", lineno, msg);
            rc |= 1 | print_error_json(err);
        } else if (tok_encode(t, j_s->valuestring, strlen(j_s->valuestring), &ids, &n, msg)) {
            snprintf(err, sizeof(err), "line %zu: %s", lineno, msg);
            rc |= 1 | print_error_json(err);
        } else {
            rc |= print_json(ids_object(t, ids, n));
        }
        free(ids);
        cJSON_Delete(j_s);
    }
    free(line);
    fflush(stdout);
    return rc;
}

static Tokenizer *open_tokenizer(const char *cmd, const char *path) {
    char err[KG_ERRLEN];
    Tokenizer *t = NULL;
    if (tok_open(&t, path, err)) {
        fprintf(stderr, "kogpt2 %s: %s\n", cmd, err);
        return NULL;
    }
    if (tok_notes(t)[0]) fprintf(stderr, "kogpt2 %s: note: %s\n", cmd, tok_notes(t));
    return t;
}

int cmd_tokenize(int argc, char **argv) {
    TokArgs a;
    int first, rc = parse_args(argc, argv, &a, &first);
    if (rc >= 0) return rc;
    Tokenizer *t = open_tokenizer("tokenize", a.tokenizer);
    if (!t) return 1;
    if (a.mode == OUT_JSONL) {
        rc = tokenize_jsonl(t);
    } else {
        size_t len = 0;
        char *text = first < argc ? join_args(first, argc, argv, &len) : read_all(stdin, &len);
        rc = text ? tokenize_one(t, text, len, a.mode) : 1;
        if (!text) fprintf(stderr, "kogpt2 tokenize: cannot read the text\n");
        free(text);
    }
    tok_free(t);
    return rc;
}

// Decodes ids and prints the text: raw plus a newline, or as {"text":...}.
static int detokenize_one(const Tokenizer *t, const int *ids, size_t n, OutMode mode) {
    char err[KG_ERRLEN], *text = NULL;
    size_t len = 0;
    if (tok_decode(t, ids, n, &text, &len, err)) {
        if (mode == OUT_JSONL) return 1 | print_error_json(err);
        fprintf(stderr, "kogpt2 detokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (mode == OUT_PLAIN) {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    } else {
        cJSON *j_root = cJSON_CreateObject();
        if (j_root && !cJSON_AddStringToObject(j_root, "text", text)) {
            cJSON_Delete(j_root);
            j_root = NULL;
        }
        rc = print_json(j_root);
    }
    free(text);
    return rc;
}

static int detokenize_jsonl(const Tokenizer *t) {
    char *line = NULL, msg[KG_ERRLEN];
    size_t cap = 0, lineno = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        cJSON *j_a = cJSON_ParseWithLength(line, (size_t)got), *j_v;
        int *ids = NULL, ok = cJSON_IsArray(j_a);
        size_t n = 0, m = (size_t)cJSON_GetArraySize(j_a);
        if (ok && m && !(ids = malloc(m * sizeof(int)))) ok = 0;
        cJSON_ArrayForEach(j_v, j_a) {
            double d = cJSON_IsNumber(j_v) ? j_v->valuedouble : 0.5;
            if (!ok || !(d >= -2147483647.0 && d <= 2147483647.0 && d == (int)d)) {
                ok = 0;
                break;
            }
            ids[n++] = (int)d;
        }
        if (!ok) {
            snprintf(msg, sizeof(msg), "line %zu: not a JSON array of integer ids", lineno);
            rc |= 1 | print_error_json(msg);
        } else {
            rc |= detokenize_one(t, ids, n, OUT_JSONL);
        }
        free(ids);
        cJSON_Delete(j_a);
    }
    free(line);
    fflush(stdout);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    TokArgs a;
    int first, rc = parse_args(argc, argv, &a, &first);
    if (rc >= 0) return rc;
    Tokenizer *t = open_tokenizer("detokenize", a.tokenizer);
    if (!t) return 1;
    if (a.mode == OUT_JSONL) {
        rc = detokenize_jsonl(t);
    } else {
        int *ids = NULL;
        size_t n = 0, cap = 0, len;
        char *text = first < argc ? join_args(first, argc, argv, &len) : read_all(stdin, &len);
        if (!text || cli_parse_ids(text, 1, &ids, &n, &cap)) {
            fprintf(stderr, "kogpt2 detokenize: ids must be integers separated by commas and/or "
                            "spaces, none empty\n");
            rc = 1;
        } else {
            rc = detokenize_one(t, ids, n, a.mode);
        }
        free(text);
        free(ids);
    }
    tok_free(t);
    return rc;
}
