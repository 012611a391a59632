// params.c — the request parsing every endpoint does the same way: readiness, the prompt,
// the model name, and request fields read from a table (api_fields: one row per field, in the
// order they are checked), the sampling parameters' table among them. Each check names the
// field at fault (*param), so a 400 or 422 says which one.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "server/http/json_in.h"

ApiApp *api_ready(SrvReq *r, enum MHD_Result *ret) {
    ApiApp *app = srv_app(r->srv);
    if (atomic_load(&app->ready)) return app;
    *ret = srv_reply_error(r, 503, "the model is loading", NULL);
    return NULL;
}

int api_prompt_from(const ApiModel *served, const char *text, size_t len, const cJSON *j_tokens,
                    const char *name, int **ids, size_t *n, char *err) {
    int rc;
    if (text) // stops at n_ctx: a megabyte of text costs no more than a prompt that fits
        rc = tok_encode_max(served->tok, text, len, served->n_ctx, ids, n, err);
    else
        rc = json_ids(j_tokens, name, ids, n, 0, (long long)served->vocab_size - 1, err);
    if (text && rc == KG_ERANGE)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens (more than %zu) exceeds n_ctx (%zu)",
                      served->n_ctx, served->n_ctx);
    if (rc) return rc;
    if (*n == 0) return kg_err(err, KG_ERANGE, "the prompt is empty");
    if (*n > served->n_ctx)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens (%zu) exceeds n_ctx (%zu)", *n,
                      served->n_ctx);
    return KG_OK;
}

int api_prompt(const ApiModel *served, const cJSON *j_req, int **ids, size_t *n, const char **param,
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
    return api_prompt_from(served, text, len, j_tokens, "tokens", ids, n, err);
}

// 1 when model is a URL, http(s)://host[:port][/...]: Hugging Face's clients send the
// endpoint they call as the model, and that endpoint is this server (the request reached it).
static int api_model_is_url(const char *model) {
    size_t n = !strncmp(model, "http://", 7) ? 7 : !strncmp(model, "https://", 8) ? 8 : 0;
    return n && model[n] && model[n] != '/';
}

const ApiModel *api_model_named(const ApiApp *app, const char *model, char *err) {
    for (size_t i = 0; i < app->n_models; i++)
        if (!strcmp(model, app->models[i].name)) return &app->models[i];
    char served[KG_ERRLEN] = "";
    size_t len = 0;
    for (size_t i = 0; i < app->n_models && len < sizeof served; i++) {
        const char *name = app->models[i].name;
        len += (size_t)snprintf(served + len, sizeof served - len, "%s'%.*s'", i ? ", " : "",
                                api_quote_len(name, 64), name);
    }
    kg_err(err, KG_ENOTFOUND,
           "the model '%.*s' does not exist here (model_not_found); this server serves %s",
           api_quote_len(model, 64), model, served);
    return NULL;
}

int api_model(const ApiApp *app, const cJSON *j_req, const ApiModel **served, char *err) {
    const char *model;
    *served = &app->models[0];
    int rc = json_str(j_req, "model", &model, NULL, err);
    if (rc || !model || api_model_is_url(model)) return rc;
    *served = api_model_named(app, model, err);
    return *served ? KG_OK : KG_ENOTFOUND;
}

// --- request fields as a table ---

// A row's upper bound when it is the model's figure, not a constant.
static double api_field_hi(const ApiModel *served, const ApiField *f) {
    if (f->hi_is == API_HI_N_CTX) return (double)served->n_ctx;
    if (f->hi_is == API_HI_VOCAB) return (double)served->vocab_size;
    return f->hi;
}

// A number in lo..hi; with open_lo, lo itself is refused too ("top_p must be in (0, 1]").
static int api_field_num(const cJSON *j_req, const ApiField *f, double hi, double *out, char *err) {
    int rc = json_num(j_req, f->name, out, f->def, f->lo, hi, err);
    if (rc || !f->open_lo || *out > f->lo) return rc;
    return kg_err(err, KG_ERANGE, "%s must be in (%g, %g]", f->name, f->lo, hi);
}

// A field a base model cannot honour: given (not null, not f->accepts), it is refused with
// f->why.
static int api_field_refused(const cJSON *j_req, const ApiField *f, char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, f->name);
    if (!j || cJSON_IsNull(j)) return KG_OK;
    if (f->accepts) {
        cJSON *j_ok = cJSON_Parse(f->accepts);
        if (!j_ok) return kg_err(err, KG_ENOMEM, "out of memory");
        int same = cJSON_Compare(j, j_ok, 1);
        cJSON_Delete(j_ok);
        if (same) return KG_OK;
    }
    return kg_err(err, KG_EUNSUP, "%s", f->why);
}

// One row: its value from q->j_req into out + f->offset.
static int api_field(const ApiRequest *q, const ApiField *f, void *out, const char **param,
                     char *err) {
    char *at = (char *)out + f->offset;
    double hi = api_field_hi(q->model, f);
    *param = f->name;
    switch (f->kind) {
    case API_INT:
        return json_int(q->j_req, f->name, (long long *)at, (long long)f->def, (long long)f->lo,
                        (long long)hi, err);
    case API_NUM:
        return api_field_num(q->j_req, f, hi, (double *)at, err);
    case API_BOOL:
        return json_bool(q->j_req, f->name, (int *)at, f->def != 0, err);
    case API_REFUSED:
        return api_field_refused(q->j_req, f, err);
    case API_IGNORED:
        return KG_OK;
    case API_READ:
        return f->read(q, f, out, param, err);
    }
    return kg_err(err, KG_EINVAL, "%s: no such kind of field", f->name); // not reached
}

int api_fields(const ApiRequest *q, const ApiField *fields, size_t n, void *out, const char **param,
               char *err) {
    for (size_t i = 0; i < n; i++) {
        int rc = api_field(q, &fields[i], out, param, err);
        if (rc) return rc;
    }
    return KG_OK;
}

int api_known_fields(const cJSON *j_obj, const ApiField *fields, size_t n, const char *what,
                     char *err) {
    for (const cJSON *j = j_obj ? j_obj->child : NULL; j; j = j->next) {
        size_t i = 0;
        while (i < n && strcmp(j->string, fields[i].name))
            i++;
        if (i < n) continue;
        char known[KG_ERRLEN] = "";
        size_t len = 0;
        for (size_t k = 0; k < n && len < sizeof known; k++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", k ? ", " : "",
                                    fields[k].name);
        return kg_err(err, KG_EINVAL, "%s: unknown field '%.*s' (fields: %s)", what,
                      api_quote_len(j->string, 64), j->string, known);
    }
    return KG_OK;
}

// --- the sampling fields ---

// A seed when the client gave none: different for every request.
static uint64_t api_random_seed(void) {
    static atomic_ulong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
    return x & ((1ull << 53) - 1);
}

// "max_tokens": the endpoint's default and minimum (q), at most the context.
static int api_read_max_tokens(const ApiRequest *q, const ApiField *f, void *out,
                               const char **param, char *err) {
    (void)param;
    ApiSampling *s = out;
    return json_int(q->j_req, f->name, &s->max_tokens, q->max_tokens_default, q->max_tokens_min,
                    (long long)q->model->n_ctx, err);
}

// "logprobs": a count 0..20 (completions, generate), or true with "top_logprobs" 0..20 (chat).
static int api_read_logprobs(const ApiRequest *q, const ApiField *f, void *out, const char **param,
                             char *err) {
    ApiSampling *s = out;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(q->j_req, f->name);
    const cJSON *j_top = cJSON_GetObjectItemCaseSensitive(q->j_req, "top_logprobs");
    if (cJSON_IsNumber(j_top) && j_top->valuedouble != 0 && (!j || cJSON_IsFalse(j))) {
        *param = "top_logprobs"; // chat's: it would be ignored, and OpenAI refuses it too
        return kg_err(err, KG_EINVAL, "top_logprobs needs \"logprobs\": true");
    }
    if (!cJSON_IsBool(j))
        return json_int(q->j_req, f->name, &s->n_logprobs, 0, 0, API_MAX_LOGPROBS, err);
    s->n_logprobs = 0;
    if (cJSON_IsFalse(j)) return KG_OK;
    *param = "top_logprobs";
    int rc = json_int(q->j_req, "top_logprobs", &s->n_logprobs, 0, 0, API_MAX_LOGPROBS, err);
    if (!rc && s->n_logprobs == 0) s->n_logprobs = 1; // true: the chosen token's own at least
    return rc;
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}.
static int api_read_logit_bias(const ApiRequest *q, const ApiField *f, void *out,
                               const char **param, char *err) {
    (void)param;
    ApiSampling *s = out;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(q->j_req, f->name);
    if (!j || cJSON_IsNull(j)) return KG_OK;
    if (!cJSON_IsObject(j))
        return kg_err(err, KG_EINVAL, "logit_bias must be an object of token id: bias");
    size_t n = (size_t)cJSON_GetArraySize(j);
    if (n > API_MAX_LOGIT_BIAS)
        return kg_err(err, KG_ERANGE, "logit_bias: at most %d entries (got %zu)",
                      API_MAX_LOGIT_BIAS, n);
    if (n) s->logit_bias = calloc(n, sizeof *s->logit_bias);
    if (n && !s->logit_bias) return kg_err(err, KG_ENOMEM, "out of memory");
    size_t vocab = q->model->vocab_size;
    for (const cJSON *e = j->child; e; e = e->next) {
        char *end;
        long id = strtol(e->string, &end, 10);
        if (end == e->string || *end || id < 0 || (size_t)id >= vocab)
            return kg_err(err, KG_ERANGE, "logit_bias: '%.*s' is not a token id (0..%zu)",
                          api_quote_len(e->string, 32), e->string, vocab - 1);
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

// "stream_options": null or an object; its "include_usage" a bool.
static int api_read_stream_options(const ApiRequest *q, const ApiField *f, void *out,
                                   const char **param, char *err) {
    (void)param;
    ApiSampling *s = out;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(q->j_req, f->name);
    if (j && !cJSON_IsNull(j) && !cJSON_IsObject(j))
        return kg_err(err, KG_EINVAL, "stream_options must be an object");
    return json_bool(j, "include_usage", &s->include_usage, 0, err); // j NULL: the default
}

// "stop": a string or up to API_MAX_STOP strings, each of at most API_MAX_STOP_LEN bytes.
static int api_read_stop(const ApiRequest *q, const ApiField *f, void *out, const char **param,
                         char *err) {
    (void)param;
    ApiSampling *s = out;
    int rc = json_str_list(q->j_req, f->name, &s->stop, &s->n_stop, API_MAX_STOP, err);
    if (rc) return rc;
    for (size_t i = 0; i < s->n_stop; i++)
        if (strlen(s->stop[i]) > API_MAX_STOP_LEN)
            return kg_err(err, KG_ERANGE, "stop[%zu]: at most %d bytes", i, API_MAX_STOP_LEN);
    return KG_OK;
}

#define API_SEED_MAX 9007199254740991.0 // 2^53 - 1: what a JSON number holds exactly
#define SAMPLING(m)  offsetof(ApiSampling, m)

// The sampling fields, checked in this order: the first bad one is the one reported.
static const ApiField SAMPLING_FIELDS[] = {
    {"max_tokens", API_READ, .read = api_read_max_tokens},
    {"temperature", API_NUM, SAMPLING(temperature), .def = 1, .lo = 0, .hi = 100},
    {"top_k", API_INT, SAMPLING(top_k), .def = 0, .lo = 0, .hi_is = API_HI_VOCAB},
    {"top_p", API_NUM, SAMPLING(top_p), .def = 1, .lo = 0, .hi = 1, .open_lo = 1},
    {"logprobs", API_READ, .read = api_read_logprobs},
    {"seed", API_INT, SAMPLING(seed), .def = -1, .lo = 0, .hi = API_SEED_MAX}, // -1: random
    {"presence_penalty", API_NUM, SAMPLING(presence_penalty), .def = 0, .lo = -2, .hi = 2},
    {"frequency_penalty", API_NUM, SAMPLING(frequency_penalty), .def = 0, .lo = -2, .hi = 2},
    {"repetition_penalty", API_NUM, SAMPLING(repetition_penalty), .def = 1, .lo = 0, .hi = 100,
     .open_lo = 1},
    {"logit_bias", API_READ, .read = api_read_logit_bias},
    {"stream", API_BOOL, SAMPLING(stream), .def = 0},
    {"stream_options", API_READ, .read = api_read_stream_options},
    {"ignore_eos", API_BOOL, SAMPLING(ignore_eos), .def = 0},
    {"utf8_strict", API_BOOL, SAMPLING(utf8_strict), .def = 1},
    {"stop", API_READ, .read = api_read_stop},
};

int api_sampling(const ApiModel *served, const cJSON *j_req, ApiSampling *s,
                 long long max_tokens_default, long long max_tokens_min, const char **param,
                 char *err) {
    const ApiRequest q = {.model = served,
                          .j_req = j_req,
                          .max_tokens_default = max_tokens_default,
                          .max_tokens_min = max_tokens_min};
    size_t n = sizeof SAMPLING_FIELDS / sizeof *SAMPLING_FIELDS;
    int rc = api_fields(&q, SAMPLING_FIELDS, n, s, param, err);
    if (rc) return rc;
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
                         .n_logprobs = (size_t)s->n_logprobs,
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
                         .ignore_eos = s->ignore_eos,
                         .utf8_strict = s->utf8_strict};
}

// --- shared JSON pieces ---

cJSON *api_ids_json(const int *ids, size_t n) {
    return n ? cJSON_CreateIntArray(ids, (int)n) : cJSON_CreateArray(); // (it refuses n = 0)
}

cJSON *api_token_json(const Tokenizer *tok, int id) {
    const char *piece = tok_piece(tok, id);
    char *bytes = NULL;
    size_t n = 0;
    if (!piece || tok_token_bytes(tok, id, &bytes, &n, NULL)) return NULL;
    int part = tok_byte(tok, id) >= 0x80; // a byte piece that is part of a character
    // a byte piece that is not a character on its own, and a control piece that decodes to
    // nothing, show as their piece; every other token as its text
    const char *text = part ? "\xEF\xBF\xBD" : bytes; // U+FFFD, as the decoder has it alone
    const char *display = part || n == 0 ? piece : bytes;
    cJSON *j = cJSON_CreateObject(), *j_bytes = NULL;
    int ok = j && cJSON_AddNumberToObject(j, "id", id) &&
             cJSON_AddStringToObject(j, "piece", piece) &&
             cJSON_AddStringToObject(j, "text", text) &&
             cJSON_AddStringToObject(j, "display", display) &&
             (j_bytes = cJSON_AddArrayToObject(j, "bytes"));
    for (size_t i = 0; ok && i < n; i++)
        ok = cJSON_AddItemToArray(j_bytes, cJSON_CreateNumber((unsigned char)bytes[i]));
    free(bytes);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

char *api_token_logprob_text(const Tokenizer *tok, int id, char **bytes, size_t *n) {
    char *b = NULL;
    size_t len = 0, bad;
    if (tok_token_bytes(tok, id, &b, &len, NULL)) return NULL;
    int text = json_utf8_valid(b, len, &bad) && !memchr(b, '\0', len);
    char *out = malloc(text ? len + 1 : 6 + 4 * len + 1); // "bytes:" and "\xNN" a byte
    if (out && text) {
        memcpy(out, b, len);
        out[len] = '\0';
    } else if (out) {
        size_t o = (size_t)sprintf(out, "bytes:");
        for (size_t i = 0; i < len; i++)
            o += (size_t)sprintf(out + o, "\\x%02x", (unsigned char)b[i]);
    }
    if (out && bytes) {
        *bytes = b;
        *n = len;
    } else {
        free(b);
    }
    return out;
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
