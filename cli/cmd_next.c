// kogpt2 next — the top-k next tokens of a prompt, as a table or as JSON.
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void next_usage(FILE *f) {
    fprintf(f, "usage: kogpt2 next [--model DIR] (--text TEXT | --tokens ID,ID,...) [--top-k K]\n"
               "                   [--json] [--threads N] [--dtype auto|f32|f16|bf16|q8_0|q4_0]\n"
               "                   [--device auto|cpu|cuda|cuda:N] [--precision f32|bf16]\n"
               "  --model DIR      Hugging Face layout: config.json + model.safetensors,\n"
               "                   shards or pytorch_model.bin; or ORG/NAME[@REV] in the\n"
               "                   Hugging Face cache (default: the project's models/default)\n"
               "  --text TEXT      the prompt as text (needs a tokenizer)\n"
               "  --tokens LIST    the prompt as token ids, comma-separated\n"
               "  --tokenizer P    tokenizer.json, *.model or a directory (default: --model)\n"
               "  --top-k K        candidates to print, 1..V (default 10)\n"
               "  --json           print {\"tokens\":[...],\"candidates\":[...]}\n"
               "  --threads N      compute threads (default: one per core)\n"
               "  --dtype T        weights in memory: auto keeps the file's (zero-copy);\n"
               "                   q8_0/q4_0 quantize the layers and LM head (cpu only)\n"
               "  --precision P    f32 (default) or bf16: the layers' matmuls on bf16 operands,\n"
               "                   f32 sums: faster prompts with AVX512-BF16 (emulated, slower,\n"
               "                   on other CPUs); logits move ~1e-3 relative\n"
               "  --device D       auto (a GPU when there is one, else the CPU), cpu, cuda\n"
               "  --version        print the version and exit\n"
               "Plain output: one line per candidate: rank, id, probability, logprob and the\n"
               "candidate's text as a JSON string (quotes, backslashes and control characters\n"
               "escaped: a '\"' reads \"\\\"\"; non-ASCII as it is).\n");
}

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
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         {"tokens", required_argument, 0, 't'},
                                         {"text", required_argument, 0, 'x'},
                                         {"top-k", required_argument, 0, 'k'},
                                         {"json", no_argument, 0, 'J'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    *a = (NextArgs){.top_k = 10};
    cli_model_args_init(&a->model);
    char err[KG_ERRLEN];
    long long top_k = 10;
    int c, taken;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:t:x:T:k:j:d:D:P:Jh", opts, NULL)) != -1) {
        if ((taken = cli_model_flag(&a->model, c, optarg, err)) < 0) goto bad_value;
        if (taken) continue;
        switch (c) {
        case 't':
            a->tokens = optarg;
            break;
        case 'x':
            a->text = optarg;
            break;
        case 'k':
            a->top_k_flag = optarg;
            break;
        case 'J':
            a->json = 1;
            break;
        case 'h':
            next_usage(stdout);
            return 0;
        case 'V':
            puts(cli_version(err));
            return 0;
        default:
            fprintf(stderr, "kogpt2 next: %s\n", cli_opt_error(c, argv, err));
            next_usage(stderr);
            return 2;
        }
    }
    const char *wrong = cli_prompt_error(argc, argv, optind, a->text, a->tokens, err);
    if (wrong) {
        fprintf(stderr, "kogpt2 next: %s\n", wrong);
        next_usage(stderr);
        return 2;
    }
    int rc = cli_model_resolve(&a->model, err);
    if (rc) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        return rc == KG_EINVAL ? 2 : 1;
    }
    if (a->tokens && cli_prompt_ids(&a->model, NULL, a->tokens, NULL, &a->ids, &a->n_ids, err))
        goto bad_value;
    if (a->top_k_flag &&
        cli_int("--top-k", a->top_k_flag, 1, (long long)a->model.config.vocab_size, &top_k, err))
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
