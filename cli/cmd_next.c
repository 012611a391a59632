// kogpt2 next — the top-k next tokens of a prompt, as a table or as JSON.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "base/kg.h"
#include "commands.h"
#include "model/gpt2.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    CliModelArgs model;
    const char *text;
    const char *tokens;
    const char *top_k_flag; // as given: its range 1..V is known once the config is read
    int top_k;
    int json;
    int *ids; // the prompt, once known (--tokens: parsed with the flags); malloc'd
    size_t n_ids;
} NextArgs;

static const KgFlag NEXT_ROWS[] = {
    {.name = "text",
     .short_name = 'x',
     .kind = KG_FLAG_STR,
     .metavar = "TEXT",
     KG_FLAG_AT(NextArgs, text),
     .help = "the prompt as text (needs a tokenizer)"},
    {.name = "tokens",
     .short_name = 't',
     .kind = KG_FLAG_STR,
     .metavar = "LIST",
     KG_FLAG_AT(NextArgs, tokens),
     .help = "the prompt as token ids, comma-separated"},
    {.name = "top-k",
     .short_name = 'k',
     .kind = KG_FLAG_STR,
     .metavar = "K",
     KG_FLAG_AT(NextArgs, top_k_flag),
     .def_text = "10",
     .help = "candidates to print, 1..V (checked once the model's vocabulary V is known)"},
    {.name = "json",
     .short_name = 'J',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(NextArgs, json),
     .help = "print {\"tokens\":[...],\"candidates\":[...]}"},
    CLI_MODEL_FLAGS(NextArgs),
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable NEXT_FLAGS = {
    .program = "kogpt2 next",
    .usage = "[--model DIR] (--text TEXT | --tokens ID,ID,...) [--top-k K] [--json] [options]",
    .flags = NEXT_ROWS,
    .n_flags = sizeof NEXT_ROWS / sizeof NEXT_ROWS[0],
    .notes = "Plain output: one line per candidate: rank, id, probability, logprob and the\n"
             "candidate's text as a JSON string (quotes, backslashes and control characters\n"
             "escaped: a '\"' reads \"\\\"\"; non-ASCII as it is).\n"};

// Adds "piece" and "text" of id to j_c when there is a tokenizer. 0 on OOM.
static int add_piece(cJSON *j_c, const Tokenizer *tok, int id) {
    if (!tok) return 1;
    char *text = tok_piece_text(tok, id);
    int ok = text && cJSON_AddStringToObject(j_c, "piece", tok_piece(tok, id)) &&
             cJSON_AddStringToObject(j_c, "text", text);
    free(text);
    return ok;
}

static int print_json(const int *ids, size_t n, const KgCandidate *cand, size_t k,
                      const Tokenizer *tok) {
    int rc = 1;
    char *text = NULL;
    cJSON *j_root = cJSON_CreateObject();
    cJSON *j_tokens = cJSON_AddArrayToObject(j_root, "tokens");
    cJSON *j_cands = cJSON_AddArrayToObject(j_root, "candidates");
    if (!j_tokens || !j_cands) goto end;
    for (size_t i = 0; i < n; i++)
        if (!cJSON_AddItemToArray(j_tokens, cJSON_CreateNumber(ids[i]))) goto end;
    for (size_t i = 0; i < k; i++) {
        cJSON *j_c = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(j_cands, j_c) ||
            !cJSON_AddNumberToObject(j_c, "id", cand[i].id) || !add_piece(j_c, tok, cand[i].id) ||
            !cJSON_AddNumberToObject(j_c, "logprob", cand[i].logprob) ||
            !cJSON_AddNumberToObject(j_c, "prob", cand[i].prob))
            goto end;
    }
    if (!(text = cJSON_PrintUnformatted(j_root))) goto end;
    puts(text);
    rc = 0;
end:
    cJSON_free(text);
    cJSON_Delete(j_root);
    return rc;
}

// The next command's flags into a: -1 to go on, else the exit code (0 after --help or
// --version, 2 after a usage error, with its line printed).
static int parse_next_args(int argc, char **argv, NextArgs *a) {
    *a = (NextArgs){0};
    char err[KG_ERRLEN];
    long long top_k = 10;
    int first, rc = cli_flags_parse(&NEXT_FLAGS, a, argc, argv, &first);
    if (rc >= 0) return rc;
    const char *wrong = cli_prompt_error(argc, argv, first, a->text, a->tokens, err);
    if (wrong) {
        fprintf(stderr, "kogpt2 next: %s\n", wrong);
        return 2;
    }
    if ((rc = cli_model_resolve(&a->model, err))) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        return rc == KG_EINVAL ? 2 : 1;
    }
    if (a->tokens && cli_prompt_ids(&a->model, NULL, a->tokens, NULL, &a->ids, &a->n_ids, err))
        goto bad_value;
    if (a->top_k_flag && kg_flag_int("--top-k", a->top_k_flag, 1,
                                     (long long)a->model.config.vocab_size, &top_k, err))
        goto bad_value;
    a->top_k = (int)top_k;
    return -1;
bad_value:
    fprintf(stderr, "kogpt2 next: %s\n", err);
    free(a->ids);
    return 2;
}

// One table line per candidate; its text as a JSON string, so that a '"', a space or a
// newline reads unambiguously. 0, or 1 on OOM.
static int print_table(const KgCandidate *cand, size_t k, const Tokenizer *tok) {
    for (size_t i = 0; i < k; i++) {
        char *text = tok ? tok_piece_text(tok, cand[i].id) : NULL;
        cJSON *j_text = text ? cJSON_CreateString(text) : NULL;
        char *quoted = j_text ? cJSON_PrintUnformatted(j_text) : NULL;
        free(text);
        cJSON_Delete(j_text);
        if (tok && !quoted) return 1;
        printf("%2zu  %8d  %9.5f%%  logprob %8.4f%s%s\n", i + 1, cand[i].id, 100 * cand[i].prob,
               cand[i].logprob, quoted ? "  " : "", quoted ? quoted : "");
        cJSON_free(quoted);
    }
    return 0;
}

int cmd_next(int argc, char **argv) {
    NextArgs a;
    int rc = parse_next_args(argc, argv, &a);
    if (rc >= 0) return rc;
    char err[KG_ERRLEN];
    CliModel cm;
    KvSeq kv = {0};
    KgCandidate *cand = NULL;
    // a tokenizer: needed for --text, optional otherwise (it adds each candidate's text)
    if (cli_model_open_tokenizer(&cm, &a.model, a.text != NULL, err)) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        free(a.ids);
        return 1;
    }
    if (a.text && cli_prompt_ids(&a.model, a.text, NULL, cm.tok, &a.ids, &a.n_ids, err)) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        cli_model_close(&cm);
        free(a.ids);
        return 2;
    }
    // the device line goes to stderr: stdout stays the answer (JSON for --json)
    if (cli_model_open(&cm, &a.model, 512, 1, stderr, err)) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        free(a.ids);
        return 1;
    }
    const char *note = kg_precision_note(cm.be);
    if (note) fprintf(stderr, "kogpt2 next: %s\n", note);
    fprintf(stderr, "kogpt2 next: loaded %s%s%s\n", cm.m.src.what, cm.m.warning[0] ? "; " : "",
            cm.m.warning);
    rc = 1;
    const int *ids = a.ids;
    size_t n = a.n_ids;
    cm.s.logits_stay = 1; // only the top-k leave the backend
    if (kv_init(&kv, &cm.m, err) || gpt2_prefill(&cm.m, &cm.s, &kv, ids, n, 1, err)) goto fail;
    size_t V = cm.m.config.vocab_size, k = (size_t)a.top_k < V ? (size_t)a.top_k : V;
    if (!(cand = malloc(k * sizeof *cand))) {
        kg_err(err, KG_ENOMEM, "out of memory");
        goto fail;
    }
    k = cm.be->ops->logits_topk(cm.be, cm.s.logits, V, 1.0f, k, cand);
    rc = a.json ? print_json(ids, n, cand, k, cm.tok) : print_table(cand, k, cm.tok);
    if (rc) kg_err(err, KG_ENOMEM, "out of memory");
fail:
    if (rc) fprintf(stderr, "kogpt2 next: %s\n", err);
    free(cand);
    kv_free(&kv);
    cli_model_close(&cm);
    free(a.ids);
    return rc;
}
