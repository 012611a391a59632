// cli.c — what the subcommands share: --version, flag values, getopt's errors, the model
// flags and opening a model (commands.h).
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "commands.h"
#include "model/hfcache.h"

const char *cli_version(char *out) {
    snprintf(out, KG_ERRLEN, "kogpt2 %s (commit %s)", kg_version(), kg_commit());
    return out;
}

int cli_parse_ids(const char *s, int **ids, size_t *n, size_t *cap) {
    while (*s) {
        if (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < -2147483647L || v > 2147483647L ||
            (*end && !strchr(", \t\r\n", *end)))
            return -1;
        if (KG_GROW(*ids, cap, *n + 1, NULL)) return -1;
        (*ids)[(*n)++] = (int)v;
        s = end;
    }
    return 0;
}

// At most 40 bytes of a value, for a message.
static int shown(const char *s) { return (int)strnlen(s, 40); }

int cli_int(const char *flag, const char *s, long long min, long long max, long long *out,
            char *err) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < min || v > max)
        return kg_err(err, KG_EINVAL, "%s must be an integer in %lld..%lld, got '%.*s'", flag, min,
                      max, shown(s), s);
    *out = v;
    return KG_OK;
}

int cli_num(const char *flag, const char *s, double min, double max, double *out, char *err) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= min && v <= max)) // NaN fails the range too
        return kg_err(err, KG_EINVAL, "%s must be a number in %g..%g, got '%.*s'", flag, min, max,
                      shown(s), s);
    *out = v;
    return KG_OK;
}

const char *cli_prompt_error(int argc, char **argv, int first, const char *text, const char *tokens,
                             char *err) {
    if (first < argc)
        snprintf(err, KG_ERRLEN, "unexpected argument '%s'", argv[first]);
    else if (!text && !tokens)
        snprintf(err, KG_ERRLEN, "no prompt: give --text TEXT or --tokens IDS");
    else if (text && tokens)
        snprintf(err, KG_ERRLEN, "give --text or --tokens, not both");
    else
        return NULL;
    return err;
}

const char *cli_opt_error(int c, char **argv, char *err) {
    // optind is past the refused word, except inside a group of short options (-xz)
    const char *word = optind > 0 ? argv[optind - 1] : "?";
    int name_len = (int)strcspn(word, "="), is_long = !strncmp(word, "--", 2);
    if (c == ':' && !is_long)
        kg_err(err, KG_EINVAL, "-%c needs a value", optopt);
    else if (c == ':')
        kg_err(err, KG_EINVAL, "%.*s needs a value", name_len, word);
    else if (is_long && optopt && word[name_len] == '=') // --json=1: a flag with no value
        kg_err(err, KG_EINVAL, "%.*s takes no value", name_len, word);
    else if (is_long || !optopt || optopt >= 128)
        kg_err(err, KG_EINVAL, "unknown option '%.*s'", shown(word), word);
    else
        kg_err(err, KG_EINVAL, "unknown option '-%c'", optopt);
    return err;
}

void cli_model_args_init(CliModelArgs *a) {
    memset(a, 0, sizeof *a);
    a->device = "auto";
    a->dtype = KG_DTYPE_AUTO;
    a->precision = KG_F32;
}

int cli_model_flag(CliModelArgs *a, int c, const char *value, char *err) {
    char why[KG_ERRLEN];
    long long threads;
    switch (c) {
    case CLI_OPT_MODEL:
        a->model = value;
        return 1;
    case CLI_OPT_TOKENIZER:
        a->tokenizer = value;
        return 1;
    case CLI_OPT_THREADS:
        if (cli_int("--threads", value, 0, 4096, &threads, err)) return KG_EINVAL;
        a->threads = (int)threads;
        return 1;
    case CLI_OPT_DTYPE:
        if (kg_dtype_parse(value, &a->dtype, why))
            return kg_err(err, KG_EINVAL, "--dtype: %s", why);
        return 1;
    case CLI_OPT_PRECISION: // f16 too would work on a GPU, but the CPU has no f16 kernels for it
        if (kg_precision_parse(value, &a->precision, why))
            return kg_err(err, KG_EINVAL, "--precision: %s", why);
        return 1;
    case CLI_OPT_DEVICE:
        if (kg_device_check(value, err)) return KG_EINVAL; // its message names --device
        a->device = value;
        return 1;
    default:
        return 0;
    }
}

int cli_model_resolve(CliModelArgs *a, char *err) {
    char found[sizeof a->dir];
    const char *model = a->model;
    char path[sizeof a->dir + 16];
    if (!model && !(model = kg_find_data_dir("models/default", found, sizeof found)))
        return kg_err(err, KG_EINVAL, "no --model DIR given and no default model (models/default)");
    int rc = hfcache_resolve(model, a->dir, sizeof a->dir, err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/config.json", a->dir);
    return gpt2_config_load(&a->config, path, err);
}

int cli_prompt_ids(const CliModelArgs *a, const char *text, const char *tokens,
                   const Tokenizer *tok, int **ids, size_t *n, char *err) {
    const Gpt2Config *c = &a->config;
    size_t cap = 0;
    *n = 0;
    if (text) {
        int rc = tok_encode_max(tok, text, strlen(text), c->n_ctx, ids, n, err);
        if (rc == KG_ERANGE) // stopped at n_ctx (kogpt2d's message)
            return kg_err(err, KG_EINVAL, "n_prompt_tokens (more than %zu) exceeds n_ctx (%zu)",
                          c->n_ctx, c->n_ctx);
        if (rc) return rc;
    } else if (cli_parse_ids(tokens, ids, n, &cap)) {
        return kg_err(err, KG_EINVAL, "--tokens: not a list of token ids: '%.*s'",
                      (int)strnlen(tokens, 60), tokens);
    }
    for (size_t i = 0; i < *n; i++)
        if ((*ids)[i] < 0 || (size_t)(*ids)[i] >= c->vocab_size)
            return kg_err(err, KG_EINVAL, "%s%d is not a token id of the model (0..%zu)",
                          text ? "the prompt's " : "--tokens: ", (*ids)[i], c->vocab_size - 1);
    if (*n == 0) return kg_err(err, KG_EINVAL, "the prompt is empty");
    if (*n > c->n_ctx)
        return kg_err(err, KG_EINVAL, "n_prompt_tokens (%zu) exceeds n_ctx (%zu)", *n, c->n_ctx);
    return KG_OK;
}

int cli_model_open_tokenizer(CliModel *cm, const CliModelArgs *a, int need_tok, char *err) {
    memset(cm, 0, sizeof *cm);
    int rc = tok_open(&cm->tok, a->tokenizer ? a->tokenizer : a->dir, err);
    return rc && (need_tok || a->tokenizer) ? rc : KG_OK;
}

int cli_model_open(CliModel *cm, const CliModelArgs *a, size_t max_rows, size_t max_logit_rows,
                   FILE *log, char *err) {
    int rc = KG_EINVAL;
    if (!(cm->be = kg_backend_new(a->device, a->threads, log, err))) goto fail;
    cm->be->mixed = a->precision;
    if ((rc = gpt2_open(&cm->m, a->dir, cm->be, a->dtype, err))) goto fail;
    if ((rc = gpt2_state_init(&cm->s, &cm->m, max_rows, max_logit_rows, err))) goto fail;
    return KG_OK;
fail:
    cli_model_close(cm);
    return rc;
}

void cli_model_close(CliModel *cm) {
    if (cm->m.be) gpt2_state_free(&cm->s, &cm->m);
    gpt2_close(&cm->m);
    kg_backend_free(cm->be);
    tok_free(cm->tok);
    memset(cm, 0, sizeof *cm);
}
