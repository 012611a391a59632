// routes.c — kogpt2d's one route table and its handlers.
//
// A handler validates the request at the door (json_in.h), builds the engine job's
// parameters and hands the job to route_job.c, which waits for it or streams it. HTTP
// never touches tensors: the engine does the math.
//
// The API (v1). Probabilities are the full-vocabulary softmax of the raw logits (divided
// by "temperature" first when given). Unknown keys are ignored; null means "not given".
//   POST /v1/next-token  {"text"|"tokens", "top_k" 1..100 (10), "temperature" (0,100] (1),
//        "speculate" (false): when idle, precompute the answers for the top candidates, so
//        that asking next with one of them appended is answered from the cache (the Explorer)}
//        -> {model, tokens, candidates [{id, piece, text, prob, logprob}] best first,
//            prompt_tokens, cached_tokens, timings {total_ms, queue_ms, prefill_ms, decode_ms}}
//   POST /v1/generate    {"text"|"tokens", "max_tokens" 1..n_ctx (32), "temperature" 0..100
//        (1; 0 greedy), "top_k" 0..V (0 off), "top_p" (0,1] (1), "seed" 0..2^53-1 (random),
//        "stop" string or <= 4 strings, "logprobs" 0..20, "ignore_eos", "stream"}
//        -> {model, prompt, text, tokens, finish_reason length|stop|eos, prompt_tokens,
//            cached_tokens, generated_tokens, timings}; stream: one SSE event per token
//            {id, text, logprob} and a final {done: true, ...the fields above}
//   POST /v1/completions OpenAI's legacy completions: prompt (string | ids | [one of them]),
//        max_tokens (16), temperature, top_p, top_k, logprobs 0..20, echo, stop, stream
//        (chunks, then "data: [DONE]"), seed, n = 1, best_of = 1. echo with logprobs scores
//        the prompt too (its tokens lead the logprobs, the first with null; max_tokens may
//        be 0; not streamed)
//   POST /v1/tokenize {"text"} -> {tokens, pieces};  POST /v1/detokenize {"tokens"} -> {text}
//        (at most --max-tokenize tokens either way, else 422)
//   GET /v1/models, /healthz, /readyz (503 loading or draining), /metrics; other GETs: web/
// Errors: {"error": {code, type, message, param}}: 400 malformed JSON, wrong type, invalid
// UTF-8, missing field; 401 API key; 404; 405 (+Allow); 413 body over --max-body; 415 not
// application/json; 422 value out of range, empty or over-long prompt (the message says
// n_prompt_tokens and n_ctx), token id outside the vocabulary; 429 queue full (+Retry-After);
// 503 loading, out of memory, cancelled by shutdown, or a connection over --max-connections
// (+Retry-After).
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_in.h"
#include "metrics.h"

#define ROUTE_MAX_TOP      100 // next-token candidates
#define ROUTE_MAX_LOGPROBS 20  // top logprobs per generated token (OpenAI's limit)
#define ROUTE_MAX_STOP     4   // stop strings (OpenAI's limit)
#define ROUTE_MAX_STOP_LEN 256 // bytes per stop string

static SrvApp *route_app(SrvReq *r) { return srv_app(r->srv); }

// --- the prompt: text or token ids ---

// Encodes text, or checks ids; then the prompt must be non-empty and fit the context.
// KG_OK and a malloc'd *ids; else the code with err and *param set.
static int route_prompt_from(const SrvApp *app, const char *text, size_t len, const cJSON *j_tokens,
                             const char *tokens_name, int **ids, size_t *n, char *err) {
    int rc;
    if (text)
        rc = tok_encode(app->tok, text, len, ids, n, err);
    else
        rc = json_ids(j_tokens, tokens_name, ids, n, 0, (long long)app->vocab_size - 1, err);
    if (rc) return rc;
    if (*n == 0) return kg_err(err, KG_ERANGE, "the prompt is empty");
    if (*n > app->n_ctx)
        return kg_err(err, KG_ERANGE, "n_prompt_tokens (%zu) exceeds n_ctx (%zu)", *n, app->n_ctx);
    return KG_OK;
}

// {"text": "..."} or {"tokens": [...]} (next-token, generate).
static int route_prompt(const SrvApp *app, const cJSON *j_req, int **ids, size_t *n,
                        const char **param, char *err) {
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
    return route_prompt_from(app, text, len, j_tokens, "tokens", ids, n, err);
}

// OpenAI's "prompt": a string, an array of ids, or a one-element array of either.
static int route_completion_prompt(const SrvApp *app, const cJSON *j_req, int **ids, size_t *n,
                                   char **echo_text, int echo, char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "prompt");
    if (!j || cJSON_IsNull(j)) return kg_err(err, KG_EINVAL, "prompt is required");
    if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1 &&
        (cJSON_IsString(j->child) || cJSON_IsArray(j->child)))
        j = j->child; // a batch of one
    const char *text = NULL;
    size_t len = 0;
    if (cJSON_IsString(j)) {
        text = j->valuestring;
        len = strlen(text);
        size_t bad;
        if (!json_utf8_valid(text, len, &bad))
            return kg_err(err, KG_EINVAL, "prompt: invalid UTF-8 at byte %zu", bad);
    } else if (!cJSON_IsArray(j)) {
        return kg_err(err, KG_EINVAL, "prompt must be a string or an array of token ids");
    } else if (cJSON_GetArraySize(j) > 1 && !cJSON_IsNumber(j->child)) {
        return kg_err(err, KG_EUNSUP, "prompt: one prompt per request (n = 1)");
    }
    int rc = route_prompt_from(app, text, len, j, "prompt", ids, n, err);
    if (rc || !echo) return rc;
    if (text) {
        *echo_text = strdup(text);
        return *echo_text ? KG_OK : kg_err(err, KG_ENOMEM, "prompt: out of memory");
    }
    return tok_decode(app->tok, *ids, *n, echo_text, NULL, err);
}

// The app if the model is loaded; otherwise a 503 has been queued into *ret.
static SrvApp *route_ready(SrvReq *r, enum MHD_Result *ret) {
    SrvApp *app = route_app(r);
    if (atomic_load(&app->ready)) return app;
    *ret = srv_reply_error(r, 503, "the model is loading", NULL);
    return NULL;
}

// A seed when the client gave none: different for every request.
static uint64_t route_random_seed(void) {
    static atomic_ulong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
    return x & ((1ull << 53) - 1);
}

// --- handlers ---

// POST /v1/next-token {"text"|"tokens", "top_k", "temperature", "speculate"}
static enum MHD_Result route_next_token(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = route_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "top_k";
    long long top_k;
    double temperature = 1;
    int *ids = NULL;
    size_t n = 0;
    int speculate = 0;
    int rc = json_int(j_req, "top_k", &top_k, 10, 1, ROUTE_MAX_TOP, err);
    if (!rc)
        rc = json_num(j_req, "temperature", &temperature, 1, 1e-3, 100, err), param = "temperature";
    if (!rc) rc = json_bool(j_req, "speculate", &speculate, 0, err), param = "speculate";
    if (!rc) rc = route_prompt(app, j_req, &ids, &n, &param, err);
    RouteJob *rj = rc ? NULL : route_job_new(app, ROUTE_NEXT);
    if (!rc && (!rj || !(rj->j_cands = cJSON_CreateArray())))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(ids);
        route_job_free(rj);
        return srv_reply_kg(r, rc, err, param);
    }
    rj->prompt = ids;
    rj->n_prompt = n;
    rj->n_top = (size_t)top_k;
    SchedParams p = {.kind = SCHED_NEXT_TOKEN,
                     .tokens = ids,
                     .n_tokens = n,
                     .n_top = (size_t)top_k,
                     .temperature = (float)temperature,
                     .speculate = speculate};
    return route_job_run(r, rj, &p);
}

// Sampling parameters shared by /v1/generate and /v1/completions; *param names a bad one.
typedef struct {
    long long max_tokens, top_k, logprobs, seed;
    double temperature, top_p;
    int stream, ignore_eos;
    const char **stop;
    size_t n_stop;
} RouteSampling;

static int route_sampling(const SrvApp *app, const cJSON *j_req, RouteSampling *s,
                          long long max_tokens_default, long long max_tokens_min,
                          const char **param, char *err) {
    int rc;
    const long long seed_max = (1ll << 53) - 1; // what a JSON number holds exactly
    if ((rc = json_int(j_req, *param = "max_tokens", &s->max_tokens, max_tokens_default,
                       max_tokens_min, (long long)app->n_ctx, err)) ||
        (rc = json_num(j_req, *param = "temperature", &s->temperature, 1, 0, 100, err)) ||
        (rc =
             json_int(j_req, *param = "top_k", &s->top_k, 0, 0, (long long)app->vocab_size, err)) ||
        (rc = json_num(j_req, *param = "top_p", &s->top_p, 1, 0, 1, err)) ||
        (s->top_p <= 0 && (rc = kg_err(err, KG_ERANGE, "top_p must be in (0, 1]"))) ||
        (rc = json_int(j_req, *param = "logprobs", &s->logprobs, 0, 0, ROUTE_MAX_LOGPROBS, err)) ||
        (rc = json_int(j_req, *param = "seed", &s->seed, -1, 0, seed_max, err)) ||
        (rc = json_bool(j_req, *param = "stream", &s->stream, 0, err)) ||
        (rc = json_bool(j_req, *param = "ignore_eos", &s->ignore_eos, 0, err)) ||
        (rc = json_str_list(j_req, *param = "stop", &s->stop, &s->n_stop, ROUTE_MAX_STOP, err)))
        return rc;
    for (size_t i = 0; i < s->n_stop; i++)
        if (strlen(s->stop[i]) > ROUTE_MAX_STOP_LEN)
            return kg_err(err, KG_ERANGE, "stop[%zu]: at most %d bytes", i, ROUTE_MAX_STOP_LEN);
    if (s->seed < 0) s->seed = (long long)route_random_seed();
    return KG_OK;
}

static SchedParams route_sched_params(const RouteJob *rj, const RouteSampling *s) {
    return (SchedParams){.kind = SCHED_GENERATE,
                         .tokens = rj->prompt,
                         .n_tokens = rj->n_prompt,
                         .n_top = (size_t)s->logprobs,
                         .temperature = (float)s->temperature,
                         .max_tokens = (size_t)s->max_tokens,
                         .top_k = (size_t)s->top_k,
                         .top_p = (float)s->top_p,
                         .seed = (uint64_t)s->seed,
                         .stop = s->stop,
                         .n_stop = s->n_stop,
                         .ignore_eos = s->ignore_eos};
}

// POST /v1/generate {"text"|"tokens", "max_tokens", "temperature", "top_k", "top_p",
// "seed", "stop", "logprobs", "stream"}
static enum MHD_Result route_generate(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = route_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = NULL;
    RouteSampling s = {0};
    int *ids = NULL;
    size_t n = 0;
    RouteJob *rj = NULL;
    int rc = route_sampling(app, j_req, &s, 32, 1, &param, err);
    if (!rc) rc = route_prompt(app, j_req, &ids, &n, &param, err);
    if (!rc && !(rj = route_job_new(app, ROUTE_GENERATE)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc && s.logprobs && !(rj->j_lp = cJSON_CreateArray()))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(ids);
        free(s.stop);
        route_job_free(rj);
        return srv_reply_kg(r, rc, err, param);
    }
    rj->prompt = ids;
    rj->n_prompt = n;
    rj->n_top = (size_t)s.logprobs;
    rj->stream = s.stream;
    SchedParams p = route_sched_params(rj, &s);
    ret = route_job_run(r, rj, &p);
    free(s.stop); // sched_submit copied the strings
    return ret;
}

// POST /v1/completions — OpenAI's legacy completions, n = 1.
static enum MHD_Result route_completions(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = route_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model", *model;
    RouteSampling s = {0};
    long long n_choices, best_of;
    int echo, *ids = NULL;
    size_t n = 0;
    char *echo_text = NULL;
    RouteJob *rj = NULL;
    const cJSON *j_lp = cJSON_GetObjectItemCaseSensitive(j_req, "logprobs");
    int want_logprobs = j_lp && !cJSON_IsNull(j_lp) && !cJSON_IsFalse(j_lp);
    int rc = json_str(j_req, "model", &model, NULL, err);
    if (!rc) rc = json_int(j_req, param = "n", &n_choices, 1, 1, 1, err);
    if (!rc) rc = json_int(j_req, param = "best_of", &best_of, 1, 1, 1, err);
    if (!rc) rc = json_bool(j_req, param = "echo", &echo, 0, err);
    // echo with logprobs scores the prompt (how evaluation harnesses ask for likelihoods);
    // max_tokens 0 then means "score only"
    int scoring = !rc && echo && want_logprobs;
    if (!rc) rc = route_sampling(app, j_req, &s, 16, scoring ? 0 : 1, &param, err);
    if (!rc && scoring && s.stream)
        param = "stream",
        rc = kg_err(err, KG_EUNSUP, "echo with logprobs (prompt scoring) is not streamed");
    if (!rc)
        rc = route_completion_prompt(app, j_req, &ids, &n, &echo_text, echo, err), param = "prompt";
    if (!rc && !(rj = route_job_new(app, ROUTE_COMPLETIONS)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc && want_logprobs && !(rj->j_lp = route_lp_object()))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        free(ids);
        free(echo_text);
        free(s.stop);
        route_job_free(rj);
        return srv_reply_kg(r, rc, err, param);
    }
    rj->prompt = ids;
    rj->n_prompt = n;
    rj->echo = echo_text;
    rj->want_logprobs = want_logprobs;
    rj->n_top = (size_t)s.logprobs;
    rj->stream = s.stream;
    if (rj->stream) { // the whole-reply logprobs object is not used when streaming
        cJSON_Delete(rj->j_lp);
        rj->j_lp = NULL;
    }
    SchedParams p = route_sched_params(rj, &s);
    p.score_prompt = scoring;
    ret = route_job_run(r, rj, &p);
    free(s.stop);
    return ret;
}

// POST /v1/tokenize {"text"} -> {"tokens": [...], "pieces": [...]}
static enum MHD_Result route_tokenize(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = route_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *text;
    size_t len, n = 0;
    int *ids = NULL;
    int rc = json_str(j_req, "text", &text, &len, err);
    if (!rc && !text) rc = kg_err(err, KG_EINVAL, "text is required");
    if (!rc) rc = tok_encode(app->tok, text, len, &ids, &n, err);
    if (!rc && n > app->max_tokenize) // the reply's tree would be ~100 bytes per token
        rc = kg_err(err, KG_ERANGE, "n_tokens (%zu) exceeds --max-tokenize (%zu)", n,
                    app->max_tokenize);
    if (rc) {
        free(ids);
        return srv_reply_kg(r, rc, err, "text");
    }
    cJSON *j_root = cJSON_CreateObject(), *j_pieces = cJSON_CreateArray();
    if (!cJSON_AddItemToObject(j_root, "tokens", route_ids_json(ids, n)) ||
        !cJSON_AddItemToObject(j_root, "pieces", j_pieces)) {
        cJSON_Delete(j_pieces);
        goto oom;
    }
    for (size_t i = 0; i < n; i++)
        if (!cJSON_AddItemToArray(j_pieces, cJSON_CreateString(tok_piece(app->tok, ids[i]))))
            goto oom;
    free(ids);
    return srv_reply_json(r, 200, j_root);
oom:
    free(ids);
    cJSON_Delete(j_root);
    return srv_reply_error(r, 503, "out of memory", NULL);
}

// POST /v1/detokenize {"tokens": [...]} -> {"text"}
static enum MHD_Result route_detokenize(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = route_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    int *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    const cJSON *j_tokens = cJSON_GetObjectItemCaseSensitive(j_req, "tokens");
    int rc = j_tokens
                 ? json_ids(j_tokens, "tokens", &ids, &n, 0, (long long)app->vocab_size - 1, err)
                 : kg_err(err, KG_EINVAL, "tokens is required");
    if (!rc && n > app->max_tokenize)
        rc = kg_err(err, KG_ERANGE, "n_tokens (%zu) exceeds --max-tokenize (%zu)", n,
                    app->max_tokenize);
    size_t len = 0;
    if (!rc) rc = tok_decode(app->tok, ids, n, &text, &len, err);
    // a byte token 0x00 decodes to a NUL, which a JSON string of cJSON would silently end at:
    // refused, never cut
    const char *nul = rc ? NULL : memchr(text, 0, len);
    if (nul)
        rc = kg_err(err, KG_ERANGE, "tokens: their text holds a NUL byte (at byte %zu)",
                    (size_t)(nul - text));
    free(ids);
    if (rc) return srv_reply_kg(r, rc, err, "tokens");
    cJSON *j_root = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(j_root, "text", text)) {
        cJSON_Delete(j_root);
        j_root = NULL;
    }
    free(text);
    return srv_reply_json(r, 200, j_root); // NULL: srv_reply_json answers 503
}

// GET /v1/models
static enum MHD_Result route_models(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    SrvApp *app = route_app(r);
    cJSON *j_root = cJSON_CreateObject(), *j_data, *j_m;
    if (!cJSON_AddStringToObject(j_root, "object", "list") ||
        !(j_data = cJSON_AddArrayToObject(j_root, "data")) ||
        !cJSON_AddItemToArray(j_data, j_m = cJSON_CreateObject()) ||
        !cJSON_AddStringToObject(j_m, "id", app->model_name) ||
        !cJSON_AddStringToObject(j_m, "object", "model") ||
        !cJSON_AddNumberToObject(j_m, "created", (double)app->created) ||
        !cJSON_AddStringToObject(j_m, "owned_by", "kogpt2") ||
        !cJSON_AddNumberToObject(j_m, "n_ctx", (double)app->n_ctx) ||
        !cJSON_AddNumberToObject(j_m, "vocab_size", (double)app->vocab_size) ||
        !cJSON_AddBoolToObject(j_m, "ready", atomic_load(&app->ready))) {
        cJSON_Delete(j_root);
        j_root = NULL;
    }
    return srv_reply_json(r, 200, j_root);
}

// GET /healthz: alive; never waits on the engine.
static enum MHD_Result route_healthz(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    static const char OK[] = "{\"status\":\"ok\"}";
    return srv_reply(r, 200, "application/json", OK, sizeof OK - 1, "Cache-Control", "no-store",
                     NULL);
}

// GET /readyz: 200 only when the model is loaded and warm and we are not draining.
static enum MHD_Result route_readyz(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    SrvApp *app = route_app(r);
    if (srv_draining(r->srv)) return srv_reply_error(r, 503, "draining: shutting down", NULL);
    if (!atomic_load(&app->ready)) return srv_reply_error(r, 503, "the model is loading", NULL);
    static const char OK[] = "{\"status\":\"ready\"}";
    return srv_reply(r, 200, "application/json", OK, sizeof OK - 1, "Cache-Control", "no-store",
                     NULL);
}

// GET /metrics: Prometheus text.
static enum MHD_Result route_metrics(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    SrvApp *app = route_app(r);
    MetricsGauges g = {.in_flight = srv_in_flight(r->srv),
                       .ready = atomic_load(&app->ready) && !srv_draining(r->srv)};
    if (atomic_load(&app->ready)) {
        SchedGauges sg;
        sched_gauges(app->sched, &sg);
        g.queue_depth = sg.queued;
        g.running = sg.running;
        g.batch_rows = sg.last_batch_rows;
        g.cache_bytes = sg.cache_bytes;
        g.cache_capacity = sg.cache_capacity;
        g.cache_entries = sg.cache_entries;
    }
    size_t len;
    char *text = metrics_render(&g, &len);
    if (!text) return srv_reply_error(r, 503, "out of memory", NULL);
    enum MHD_Result ret = srv_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len,
                                    "Cache-Control", "no-store", NULL);
    free(text);
    return ret;
}

// The one route table. GET paths not listed here are static files from --web-dir.
static const SrvRoute ROUTES[] = {
    {"POST", "/v1/next-token", route_next_token, SRV_ROUTE_JSON},
    {"POST", "/v1/generate", route_generate, SRV_ROUTE_JSON},
    {"POST", "/v1/completions", route_completions, SRV_ROUTE_JSON},
    {"POST", "/v1/tokenize", route_tokenize, SRV_ROUTE_JSON},
    {"POST", "/v1/detokenize", route_detokenize, SRV_ROUTE_JSON},
    {"GET", "/v1/models", route_models, 0},
    {"GET", "/healthz", route_healthz, SRV_ROUTE_OPEN},
    {"GET", "/readyz", route_readyz, SRV_ROUTE_OPEN},
    {"GET", "/metrics", route_metrics, SRV_ROUTE_OPEN},
};

const SrvRoute *route_table(size_t *n) {
    *n = sizeof ROUTES / sizeof ROUTES[0];
    return ROUTES;
}

size_t route_endpoints(const char **out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0] && n < cap; i++)
        out[n++] = ROUTES[i].path;
    return n;
}
