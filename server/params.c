// params.c — the request parsing every endpoint does the same way: readiness, the prompt,
// the model name, the sampling parameters. Each check names the field at fault (*param),
// so a 400 or 422 says which one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "json_in.h"

SrvApp *api_ready(SrvReq *r, enum MHD_Result *ret) {
    SrvApp *app = srv_app(r->srv);
    if (atomic_load(&app->ready)) return app;
    *ret = srv_reply_error(r, 503, "the model is loading", NULL);
    return NULL;
}

int api_prompt_from(const SrvApp *app, const char *text, size_t len, const cJSON *j_tokens,
                    const char *name, int **ids, size_t *n, char *err) {
    int rc;
    if (text) // stops at n_ctx: a megabyte of text costs no more than a prompt that fits
        rc = tok_encode_max(app->tok, text, len, app->n_ctx, ids, n, err);
    else
        rc = json_ids(j_tokens, name, ids, n, 0, (long long)app->vocab_size - 1, err);
    if (text && rc == KG_ERANGE)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens (more than %zu) exceeds n_ctx (%zu)",
                      app->n_ctx, app->n_ctx);
    if (rc) return rc;
    if (*n == 0) return kg_err(err, KG_ERANGE, "the prompt is empty");
    if (*n > app->n_ctx)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens (%zu) exceeds n_ctx (%zu)", *n, app->n_ctx);
    return KG_OK;
}

int api_prompt(const SrvApp *app, const cJSON *j_req, int **ids, size_t *n, const char **param,
               char *err) {
    const char *text;
    size_t len;
    const cJSON *j_tokens = cJSON_GetObjectItemCaseSensitive(j_req, "tokens");
    if (cJSON_IsNull(j_tokens)) j_tokens = NULL;
    *param = "text";
    int rc = json_str(j_req, "text", &text, &len, err);
    if (rc) return rc;
    if (text && j_tokens) return kg_err(err, KG_EINVAL, "give text or tokens, not both");
    if (!text && !j_tokens) return kg_err(err, KG_EINVAL, "text or tokens is required");
    if (!text) *param = "tokens";
    return api_prompt_from(app, text, len, j_tokens, "tokens", ids, n, err);
}

int api_model(const SrvApp *app, const cJSON *j_req, char *err) {
    const char *model;
    int rc = json_str(j_req, "model", &model, NULL, err);
    if (rc || !model || !strcmp(model, app->model_name)) return rc;
    return kg_err(err, KG_ENOTFOUND,
                  "the model '%.*s' does not exist here (model_not_found); this server serves "
                  "'%.*s'",
                  api_quote_len(model, 64), model, api_quote_len(app->model_name, 64),
                  app->model_name);
}

// A seed when the client gave none: different for every request.
static uint64_t api_random_seed(void) {
    static atomic_ulong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
    return x & ((1ull << 53) - 1);
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}.
static int api_logit_bias(const SrvApp *app, const cJSON *j_req, ApiSampling *s, char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "logit_bias");
    if (!j || cJSON_IsNull(j)) return KG_OK;
    if (!cJSON_IsObject(j))
        return kg_err(err, KG_EINVAL, "logit_bias must be an object of token id: bias");
    size_t n = (size_t)cJSON_GetArraySize(j);
    if (n > API_MAX_LOGIT_BIAS)
        return kg_err(err, KG_ERANGE, "logit_bias: at most %d entries (got %zu)",
                      API_MAX_LOGIT_BIAS, n);
    if (n && !(s->logit_bias = calloc(n, sizeof *s->logit_bias)))
        return kg_err(err, KG_ENOMEM, "out of memory");
    for (const cJSON *e = j->child; e; e = e->next) {
        char *end;
        long id = strtol(e->string, &end, 10);
        if (end == e->string || *end || id < 0 || (size_t)id >= app->vocab_size)
            return kg_err(err, KG_ERANGE, "logit_bias: '%.*s' is not a token id (0..%zu)",
                          api_quote_len(e->string, 32), e->string, app->vocab_size - 1);
        if (!cJSON_IsNumber(e))
            return kg_err(err, KG_EINVAL, "logit_bias[%ld] must be a number", id);
        if (!(e->valuedouble >= -100 && e->valuedouble <= 100))
            return kg_err(err, KG_ERANGE, "logit_bias[%ld] must be in -100..100 (got %.17g)", id,
                          e->valuedouble);
        s->logit_bias[s->n_logit_bias++] =
            (KgLogitBias){.id = (int)id, .bias = (float)e->valuedouble};
    }
    return KG_OK;
}

// "logprobs": a count 0..20 (completions, generate), or true with "top_logprobs" 0..20 (chat).
static int api_n_candidates(const cJSON *j_req, long long *out, const char **param, char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "logprobs");
    *param = "logprobs";
    if (cJSON_IsBool(j)) {
        if (cJSON_IsFalse(j)) return *out = 0, KG_OK;
        *param = "top_logprobs";
        int rc = json_int(j_req, "top_logprobs", out, 0, 0, API_MAX_LOGPROBS, err);
        if (!rc && *out == 0) *out = 1; // logprobs true: the chosen token's own at least
        return rc;
    }
    return json_int(j_req, "logprobs", out, 0, 0, API_MAX_LOGPROBS, err);
}

int api_sampling(const SrvApp *app, const cJSON *j_req, ApiSampling *s,
                 long long max_tokens_default, long long max_tokens_min, const char **param,
                 char *err) {
    int rc;
    const long long seed_max = (1ll << 53) - 1; // what a JSON number holds exactly
    const cJSON *j_opts = cJSON_GetObjectItemCaseSensitive(j_req, "stream_options");
    if ((rc = json_int(j_req, *param = "max_tokens", &s->max_tokens, max_tokens_default,
                       max_tokens_min, (long long)app->n_ctx, err)) ||
        (rc = json_num(j_req, *param = "temperature", &s->temperature, 1, 0, 100, err)) ||
        (rc =
             json_int(j_req, *param = "top_k", &s->top_k, 0, 0, (long long)app->vocab_size, err)) ||
        (rc = json_num(j_req, *param = "top_p", &s->top_p, 1, 0, 1, err)) ||
        (s->top_p <= 0 && (rc = kg_err(err, KG_ERANGE, "top_p must be in (0, 1]"))) ||
        (rc = api_n_candidates(j_req, &s->n_candidates, param, err)) ||
        (rc = json_int(j_req, *param = "seed", &s->seed, -1, 0, seed_max, err)) ||
        (rc = json_num(j_req, *param = "presence_penalty", &s->presence_penalty, 0, -2, 2, err)) ||
        (rc =
             json_num(j_req, *param = "frequency_penalty", &s->frequency_penalty, 0, -2, 2, err)) ||
        (rc = json_num(j_req, *param = "repetition_penalty", &s->repetition_penalty, 1, 0, 100,
                       err)) ||
        (s->repetition_penalty <= 0 &&
         (rc = kg_err(err, KG_ERANGE, "repetition_penalty must be in (0, 100]"))) ||
        (*param = "logit_bias", rc = api_logit_bias(app, j_req, s, err)) ||
        (rc = json_bool(j_req, *param = "stream", &s->stream, 0, err)) ||
        (j_opts && !cJSON_IsNull(j_opts) && !cJSON_IsObject(j_opts) &&
         (*param = "stream_options",
          rc = kg_err(err, KG_EINVAL, "stream_options must be an object"))) ||
        (*param = "stream_options",
         rc = json_bool(j_opts, "include_usage", &s->include_usage, 0, err)) ||
        (rc = json_bool(j_req, *param = "ignore_eos", &s->ignore_eos, 0, err)) ||
        (rc = json_str_list(j_req, *param = "stop", &s->stop, &s->n_stop, API_MAX_STOP, err)))
        return rc;
    for (size_t i = 0; i < s->n_stop; i++)
        if (strlen(s->stop[i]) > API_MAX_STOP_LEN)
            return kg_err(err, KG_ERANGE, "stop[%zu]: at most %d bytes", i, API_MAX_STOP_LEN);
    if (s->seed < 0) s->seed = (long long)api_random_seed();
    return KG_OK;
}

void api_sampling_free(ApiSampling *s) {
    free(s->logit_bias);
    free(s->stop);
    s->logit_bias = NULL;
    s->stop = NULL;
}

SchedParams api_sched_params(const ApiSampling *s, const int *prompt, size_t n_prompt) {
    return (SchedParams){.kind = SCHED_GENERATE,
                         .tokens = prompt,
                         .n_tokens = n_prompt,
                         .n_candidates = (size_t)s->n_candidates,
                         .temperature = (float)s->temperature,
                         .max_tokens = (size_t)s->max_tokens,
                         .top_k = (size_t)s->top_k,
                         .top_p = (float)s->top_p,
                         .seed = (uint64_t)s->seed,
                         .penalties = {.bias = s->logit_bias,
                                       .n_bias = s->n_logit_bias,
                                       .presence = (float)s->presence_penalty,
                                       .frequency = (float)s->frequency_penalty,
                                       .repetition = (float)s->repetition_penalty},
                         .stop = s->stop,
                         .n_stop = s->n_stop,
                         .ignore_eos = s->ignore_eos};
}

// --- shared JSON pieces ---

cJSON *api_ids_json(const int *ids, size_t n) {
    return n ? cJSON_CreateIntArray(ids, (int)n) : cJSON_CreateArray(); // (it refuses n = 0)
}

int api_add_timings(cJSON *j_obj, const SchedStats *st) {
    cJSON *j_t = cJSON_AddObjectToObject(j_obj, "timings");
    return j_t && cJSON_AddNumberToObject(j_t, "total_ms", st->total_ms) &&
           cJSON_AddNumberToObject(j_t, "queue_ms", st->queue_ms) &&
           cJSON_AddNumberToObject(j_t, "prefill_ms", st->prefill_ms) &&
           cJSON_AddNumberToObject(j_t, "decode_ms", st->decode_ms);
}

int api_add_usage(cJSON *j_obj, size_t prompt_tokens, size_t completion_tokens) {
    cJSON *j_u = cJSON_AddObjectToObject(j_obj, "usage");
    return j_u && cJSON_AddNumberToObject(j_u, "prompt_tokens", (double)prompt_tokens) &&
           cJSON_AddNumberToObject(j_u, "completion_tokens", (double)completion_tokens) &&
           cJSON_AddNumberToObject(j_u, "total_tokens",
                                   (double)(prompt_tokens + completion_tokens));
}

int api_quote_len(const char *s, size_t max) {
    size_t n = strnlen(s, max), bad;
    if (!json_utf8_valid(s, n, &bad)) n = bad;
    return (int)n;
}

size_t api_utf8_chars(const char *s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += ((unsigned char)s[i] & 0xC0) != 0x80; // every byte but continuation bytes
    return chars;
}
