// kogpt2 next — the top-k next tokens of a prompt, as a table or as JSON.
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "commands.h"
#include "model/gpt2.h"
#include "model/hfcache.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model;
    const char *tokenizer;
    const char *text;
    const char *tokens;
    int top_k;
    int threads;
    KgDtype dtype;
    KgDtype precision; // be->mixed: KG_F32 or KG_BF16
    int json;
    const char *device;
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
               "  --top-k K        candidates to print (default 10)\n"
               "  --json           print {\"tokens\":[...],\"candidates\":[...]}\n"
               "  --threads N      compute threads (default: one per core)\n"
               "  --dtype T        weights in memory: auto keeps the file's (zero-copy);\n"
               "                   q8_0/q4_0 quantize the layers and LM head (cpu only)\n"
               "  --precision P    f32 (default) or bf16: the layers' matmuls on bf16 operands,\n"
               "                   f32 sums: faster prompts with AVX512-BF16 (emulated, slower,\n"
               "                   on other CPUs); logits move ~1e-3 relative\n"
               "  --device D       auto (a GPU when there is one, else the CPU), cpu, cuda\n");
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

static int parse_next_args(int argc, char **argv, NextArgs *a) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"tokens", required_argument, 0, 't'},
        {"text", required_argument, 0, 'x'},   {"tokenizer", required_argument, 0, 'T'},
        {"top-k", required_argument, 0, 'k'},  {"threads", required_argument, 0, 'j'},
        {"dtype", required_argument, 0, 'd'},  {"json", no_argument, 0, 'J'},
        {"device", required_argument, 0, 'D'}, {"precision", required_argument, 0, 'P'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    *a = (NextArgs){.top_k = 10, .dtype = KG_DTYPE_AUTO, .precision = KG_F32, .device = "auto"};
    char err[KG_ERRLEN];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:x:T:k:j:d:D:P:Jh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            a->model = optarg;
            break;
        case 't':
            a->tokens = optarg;
            break;
        case 'x':
            a->text = optarg;
            break;
        case 'T':
            a->tokenizer = optarg;
            break;
        case 'k':
            a->top_k = atoi(optarg);
            break;
        case 'j':
            a->threads = atoi(optarg);
            break;
        case 'd':
            if (kg_dtype_parse(optarg, &a->dtype, err)) {
                fprintf(stderr, "kogpt2 next: --dtype: %s\n", err);
                return 2;
            }
            break;
        case 'J':
            a->json = 1;
            break;
        case 'D':
            a->device = optarg;
            break;
        case 'P': { // f16 too would work on a GPU, but the CPU has no f16 kernels for it
            if (kg_precision_parse(optarg, &a->precision, err)) {
                fprintf(stderr, "kogpt2 next: --precision: %s\n", err);
                return 2;
            }
            break;
        }
        case 'h':
            next_usage(stdout);
            exit(0);
        default:
            next_usage(stderr);
            return 2;
        }
    }
    static char default_model[4096], resolved[4096];
    if (!a->model &&
        !(a->model = kg_find_data_dir("models/default", default_model, sizeof default_model))) {
        fprintf(stderr,
                "kogpt2 next: no --model DIR given and no default model (models/default)\n");
        return 2;
    }
    if (hfcache_resolve(a->model, resolved, sizeof resolved, err)) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        return 1;
    }
    a->model = resolved;
    if (kg_device_check(a->device, err)) {
        fprintf(stderr, "kogpt2 next: %s\n", err);
        return 2;
    }
    if (!a->tokens == !a->text || a->top_k < 1 || a->threads < 0) {
        next_usage(stderr);
        return 2;
    }
    return 0;
}

// The prompt's ids, parsed from --tokens or encoded from --text: KG_OK and *ids (malloc'd,
// NULL when empty), or an error with err filled.
static int prompt_ids(const NextArgs *a, const Tokenizer *tok, int **ids, size_t *n, char *err) {
    if (a->text) return tok_encode(tok, a->text, strlen(a->text), ids, n, err);
    size_t cap = 0;
    *n = 0;
    if (cli_parse_ids(a->tokens, ids, n, &cap))
        return kg_err(err, KG_EINVAL, "--tokens: not a list of token ids: %s", a->tokens);
    return KG_OK;
}

int cmd_next(int argc, char **argv) {
    NextArgs a;
    int rc = parse_next_args(argc, argv, &a);
    if (rc) return rc;
    char err[KG_ERRLEN];
    Gpt2 m = {0};
    Gpt2State s = {0};
    KvCache kv = {0};
    KgCandidate *cand = NULL;
    Tokenizer *tok = NULL;
    int *ids = NULL;
    size_t n = 0;
    rc = 1;
    // a tokenizer: --tokenizer, else the model's own; needed for --text, optional otherwise
    if (tok_open(&tok, a.tokenizer ? a.tokenizer : a.model, err) && (a.text || a.tokenizer))
        goto fail;
    if (prompt_ids(&a, tok, &ids, &n, err)) goto fail;
    if (n == 0) {
        kg_err(err, KG_EINVAL, "the prompt is empty");
        goto fail;
    }
    // the device line goes to stderr: stdout stays the answer (JSON for --json)
    KgBackend *be = kg_backend_new(a.device, a.threads, stderr, err);
    if (!be) goto fail;
    be->mixed = a.precision;
    const char *note = kg_precision_note(be);
    if (note) fprintf(stderr, "kogpt2 next: %s\n", note);
    if (gpt2_open(&m, a.model, be, a.dtype, err) || gpt2_state_init(&s, &m, 512, 1, err))
        goto fail_model;
    fprintf(stderr, "kogpt2 next: loaded %s%s%s\n", m.src.what, m.warning[0] ? "; " : "",
            m.warning);
    s.logits_stay = 1; // only the top-k leave the backend
    if (kv_init(&kv, &m, n, err) || gpt2_prefill(&m, &s, &kv, ids, n, 1, err)) goto fail_model;
    cand = malloc((size_t)a.top_k * sizeof *cand);
    if (!cand) {
        kg_err(err, KG_ENOMEM, "out of memory");
        goto fail_model;
    }
    size_t k = be->ops->logits_topk(be, s.logits, m.config.vocab_size, 1.0f, (size_t)a.top_k, cand);
    if (a.json) {
        rc = print_json(ids, n, cand, k, tok);
    } else {
        for (size_t i = 0; i < k; i++) {
            char *text = tok ? tok_piece_text(tok, cand[i].id) : NULL;
            printf("%2zu  %8d  %9.5f%%  logprob %8.4f  %s%s%s\n", i + 1, cand[i].id,
                   100 * cand[i].prob, cand[i].logprob, text ? "\"" : "", text ? text : "",
                   text ? "\"" : "");
            free(text);
        }
        rc = 0;
    }
    goto done;
fail_model:
    fprintf(stderr, "kogpt2 next: %s\n", err);
done:
    free(cand);
    kv_free(&kv, &m);
    if (m.be) gpt2_state_free(&s, &m);
    gpt2_close(&m);
    kg_backend_free(be);
    free(ids);
    tok_free(tok);
    return rc;
fail:
    fprintf(stderr, "kogpt2 next: %s\n", err);
    free(ids);
    tok_free(tok);
    return 1;
}
