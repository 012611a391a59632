// cli.c — what the subcommands share: --version, the flag parse, lists of ids, the prompt,
// and opening a model (commands.h).
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "commands.h"
#include "model/hfcache.h"

const char *cli_version(char *out) {
    snprintf(out, KG_ERRLEN, "kogpt2 %s (commit %s)", kg_version(), kg_commit());
    return out;
}

// Skips blanks (spaces, tabs, line ends); *any says whether there were some.
static const char *skip_blanks(const char *s, int *any) {
    size_t n = strspn(s, " \t\r\n");
    if (any) *any = n > 0;
    return s + n;
}

int cli_parse_ids(const char *s, int spaces_too, int **ids, size_t *n, size_t *cap) {
    s = skip_blanks(s, NULL);
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10); // s is at a non-blank: strtol skips none
        if (end == s || errno || v < -2147483647L || v > 2147483647L) return -1;
        if (KG_GROW(*ids, cap, *n + 1, NULL)) return -1;
        (*ids)[(*n)++] = (int)v;
        int blank;
        s = skip_blanks(end, &blank);
        if (*s == ',') {
            s = skip_blanks(s + 1, NULL);
            if (!*s) return -1; // "1,": an empty last element
        } else if (*s && !(spaces_too && blank)) {
            return -1; // "1 2" where only commas separate, or "1x"
        }
    }
    return 0;
}

int cli_flags_parse(const KgFlagTable *t, void *args, int argc, char **argv, int *first_arg) {
    char err[KG_ERRLEN];
    KgFlagsSeen seen = {.first_arg = argc};
    int rc = kg_flags_defaults(t, args, err);
    if (!rc) rc = kg_flags_parse(t, args, argc, argv, &seen, err);
    *first_arg = seen.first_arg;
    if (rc == KG_OK) return -1;
    if (rc == KG_FLAGS_HELP) {
        kg_flags_help(t, stdout);
        return 0;
    }
    if (rc == KG_FLAGS_VERSION) {
        puts(cli_version(err));
        return 0;
    }
    fprintf(stderr, "%s: %s\n", t->program, err); // one line, as every usage error of kogpt2
    return rc == KG_EINVAL ? 2 : 1;
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
    } else if (cli_parse_ids(tokens, 0, ids, n, &cap)) {
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
