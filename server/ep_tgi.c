// ep_tgi.c — Hugging Face text-generation-inference's API (TGI), so that its clients
// (@huggingface/inference, huggingface_hub, text_generation) and TGI users' scripts work.
//
//   POST /generate {"inputs": text, "parameters": {"max_new_tokens" 1..n_ctx (to the end of
//     the context), "do_sample" (false; true when "parameters" is absent, as TGI has it),
//     "temperature", "top_k", "top_p" (any of them turns sampling on), "seed",
//     "repetition_penalty", "frequency_penalty", "stop" (<= 4), "details" (false),
//     "decoder_input_details" (false), "top_n_tokens" 0..20, "return_full_text" (false),
//     "truncate" (keep the last N prompt tokens), "best_of" 1, "watermark" false}}
//   -> {generated_text, details?: {finish_reason length|eos_token|stop_sequence,
//       generated_tokens, seed (null when greedy), prefill [{id, text, logprob}] (with
//       decoder_input_details; the first logprob null), tokens [{id, text, logprob, special}],
//       top_tokens? [[token...] per generated token] (with top_n_tokens)}}
//   POST /generate_stream (same body) -> SSE, one event per generated token:
//       {index, token, top_tokens?, generated_text: null, details: null}; the last event
//       carries the last token, generated_text and, with "details", {finish_reason,
//       generated_tokens, seed, input_length}. No [DONE] (TGI sends none).
//   GET /info -> TGI's Info: model_id, model_dtype, model_device_type, max_input_tokens,
//       max_total_tokens, max_concurrent_requests, max_stop_sequences, version, ...
//   POST / (TGI's compat route, where huggingface_hub's InferenceClient posts when its model is
//       a URL) and POST /invocations' TGI form: "stream" in the body picks the stream, and the
//       whole reply is an array of one, as TGI's compat route and HF's SageMaker containers
//       answer.
//
// Errors on these routes are TGI's {"error": message, "error_type"} (the route flag
// SRV_ROUTE_TGI, http.h). typical_p, grammar and adapter_id are refused by name (422): this
// engine has no such sampling, grammar or adapters; so are transformers' generate() arguments
// that people put in "parameters" (num_return_sequences, num_beams, max_length, ...), and
// logprobs and stream, which TGI spells otherwise (TGI_FIELDS lists each, and the few ignored). The
// end-of-text token is not one of the tokens (the engine stops before it), so generated_tokens
// counts only the text's tokens.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "server/http/json_in.h"

#define TGI_MAX_TOP_N 20 // top_n_tokens (TGI's default limit is 5; ours is logprobs')

// TGI's own parameters (TGI_FIELDS), beside the sampling ones api_sampling reads.
typedef struct {
    long long max_new_tokens; // 0: to the end of the context
    long long top_n_tokens, truncate, best_of;
    int do_sample, details, decoder_input_details, return_full_text, watermark;
} TgiFields;

#define TGI(m) offsetof(TgiFields, m)

static const ApiField TGI_FIELDS[] = {
    {"max_new_tokens", API_INT, TGI(max_new_tokens), .def = 0, .lo = 1, .hi_is = API_HI_N_CTX},
    {"details", API_BOOL, TGI(details), .def = 0},
    {"decoder_input_details", API_BOOL, TGI(decoder_input_details), .def = 0},
    {"return_full_text", API_BOOL, TGI(return_full_text), .def = 0},
    {"top_n_tokens", API_INT, TGI(top_n_tokens), .def = 0, .lo = 0, .hi = TGI_MAX_TOP_N},
    {"truncate", API_INT, TGI(truncate), .def = 0, .lo = 1, .hi_is = API_HI_N_CTX},
    {"best_of", API_INT, TGI(best_of), .def = 1, .lo = 1, .hi = 1},
    {"watermark", API_BOOL, TGI(watermark), .def = 0},
    {"typical_p", API_REFUSED, .why = "typical_p (typical decoding) is not supported"},
    {"grammar", API_REFUSED, .why = "grammar (constrained decoding) is not supported"},
    {"adapter_id", API_REFUSED, .why = "adapter_id: this server has no adapters"},
    // not TGI's, but what transformers' generate() takes and people put in "parameters" (the
    // old Inference API read some): refused by name rather than ignored
    {"num_return_sequences", API_REFUSED, .accepts = "1",
     .why = "num_return_sequences: one sequence per request (send a request per sample)"},
    {"n", API_REFUSED, .accepts = "1",
     .why = "n: one sequence per request (send a request per sample)"},
    {"num_beams", API_REFUSED, .accepts = "1", .why = "num_beams: beam search is not supported"},
    {"max_length", API_REFUSED,
     .why = "max_length is not supported: max_new_tokens bounds the generated tokens"},
    {"min_new_tokens", API_REFUSED, .accepts = "0",
     .why = "min_new_tokens: a minimum length is not supported"},
    {"min_length", API_REFUSED, .accepts = "0",
     .why = "min_length: a minimum length is not supported"},
    {"no_repeat_ngram_size", API_REFUSED, .accepts = "0",
     .why = "no_repeat_ngram_size is not supported (repetition_penalty is)"},
    {"max_time", API_REFUSED,
     .why = "max_time: a time limit is not supported (max_new_tokens bounds the work)"},
    {"penalty_alpha", API_REFUSED, .why = "penalty_alpha (contrastive search) is not supported"},
    {"min_p", API_REFUSED, .why = "min_p is not supported (top_k and top_p are)"},
    {"epsilon_cutoff", API_REFUSED, .why = "epsilon_cutoff is not supported (top_k and top_p are)"},
    {"eta_cutoff", API_REFUSED, .why = "eta_cutoff is not supported (top_k and top_p are)"},
    {"stop_sequences", API_REFUSED, .why = "stop_sequences: TGI's field is stop"},
    {"logprobs", API_REFUSED, .accepts = "0",
     .why = "logprobs: TGI's field is top_n_tokens (with details)"},
    {"stream", API_REFUSED, .accepts = "false",
     .why = "stream: POST /generate_stream streams (or \"stream\" beside \"inputs\")"},
    {"length_penalty", API_IGNORED, .why = "it weighs beams, and beam search is refused"},
    {"early_stopping", API_IGNORED, .why = "it ends beams, and beam search is refused"},
    {"use_cache", API_IGNORED, .why = "the KV cache is always used; the tokens are the same"},
};

typedef struct {
    int *prompt; // (n_prompt) ids
    size_t n_prompt;
    char *full_text; // return_full_text: the inputs, which lead generated_text (else NULL)
    TgiFields f;
    int sampling;     // seed reported (greedy: null)
    long long seed;   // the sampler's seed
    int wrap;         // the compat form: the reply is [reply]
    size_t index;     // stream: tokens sent so far (an event's "index" counts from 1)
    cJSON *j_tokens;  // details.tokens
    cJSON *j_top;     // details.top_tokens (top_n_tokens > 0)
    cJSON *j_prefill; // details.prefill (decoder_input_details)
    cJSON *j_held;    // stream: the latest token's event, sent at the next token or the end
} Tgi;

// A number, or null where there is none (the first prompt token's logprob).
static cJSON *tgi_logprob(float logprob) {
    return isnan(logprob) ? cJSON_CreateNull() : cJSON_CreateNumber(logprob);
}

// TGI's Token {id, text, logprob, special} (special: one of the tokenizer's special ids);
// with_special 0 gives its PrefillToken {id, text, logprob}. NULL on OOM.
static cJSON *tgi_token_json(const Tokenizer *tok, int id, const char *text, size_t len,
                             float logprob, int with_special) {
    TokSpecial sp = tok_special(tok);
    int special = id >= 0 && (id == sp.bos || id == sp.eos || id == sp.pad || id == sp.unk);
    cJSON *j_t = cJSON_CreateObject();
    char *s = strndup(text ? text : "", len);
    if (!j_t || !s || !cJSON_AddNumberToObject(j_t, "id", id) ||
        !cJSON_AddStringToObject(j_t, "text", s) ||
        !cJSON_AddItemToObject(j_t, "logprob", tgi_logprob(logprob)) ||
        (with_special && !cJSON_AddBoolToObject(j_t, "special", special))) {
        cJSON_Delete(j_t);
        j_t = NULL;
    }
    free(s);
    return j_t;
}

// The top_n_tokens candidates of a generated token, as Tokens; NULL on OOM.
static cJSON *tgi_top_json(const Tokenizer *tok, const SchedToken *t) {
    cJSON *j_top = cJSON_CreateArray();
    for (size_t k = 0; j_top && k < t->n_candidates; k++) {
        const KgCandidate *c = &t->candidates[k];
        char *text = api_token_logprob_text(tok, c->id, NULL, NULL);
        cJSON *j_c = text ? tgi_token_json(tok, c->id, text, strlen(text), c->logprob, 1) : NULL;
        free(text);
        if (!cJSON_AddItemToArray(j_top, j_c)) {
            cJSON_Delete(j_c);
            cJSON_Delete(j_top);
            return NULL;
        }
    }
    return j_top;
}

// Appends s[0..n) to a Token's text: the bytes the engine held back until the end (a
// character or stop string cut short) belong to the last token.
static int tgi_append_text(cJSON *j_token, const char *s, size_t n) {
    const cJSON *j_text = cJSON_GetObjectItemCaseSensitive(j_token, "text");
    const char *old = cJSON_GetStringValue(j_text);
    KgBuf b = {0};
    int rc = old ? buf_append(&b, old, strlen(old)) : KG_EINVAL;
    if (!rc) rc = buf_append(&b, s, n);
    if (!rc) rc = buf_append(&b, "", 1); // NUL
    cJSON *j_new = rc ? NULL : cJSON_CreateString(b.p);
    buf_free(&b);
    if (!j_new) return KG_ENOMEM;
    return cJSON_ReplaceItemInObjectCaseSensitive(j_token, "text", j_new) ? KG_OK : KG_ENOMEM;
}

// A stream event {index, token, top_tokens?, generated_text: null, details: null}; j_token
// and j_top consumed. NULL on OOM.
static cJSON *tgi_event(size_t index, cJSON *j_token, cJSON *j_top) {
    cJSON *j = cJSON_CreateObject();
    if (!j || !cJSON_AddNumberToObject(j, "index", (double)index) ||
        !cJSON_AddItemToObject(j, "token", j_token)) {
        cJSON_Delete(j);
        cJSON_Delete(j_token);
        cJSON_Delete(j_top);
        return NULL;
    }
    if ((j_top && !cJSON_AddItemToObject(j, "top_tokens", j_top)) ||
        !cJSON_AddNullToObject(j, "generated_text") || !cJSON_AddNullToObject(j, "details")) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int tgi_token(JobRequest *job, size_t i, const SchedToken *t) {
    (void)i;
    Tgi *g = job->ctx;
    const Tokenizer *tok = job->model->tok;
    if (t->prompt) // decoder_input_details: a prompt token and its logprob
        return cJSON_AddItemToArray(g->j_prefill,
                                    tgi_token_json(tok, t->id, t->text, t->text_len, t->logprob, 0))
                   ? KG_OK
                   : KG_ENOMEM;
    if (t->id < 0) { // held-back text at the end: the last token's
        int n = cJSON_GetArraySize(g->j_tokens);
        cJSON *j_last = job->stream ? cJSON_GetObjectItemCaseSensitive(g->j_held, "token")
                                    : cJSON_GetArrayItem(g->j_tokens, n - 1);
        return j_last && t->text_len ? tgi_append_text(j_last, t->text, t->text_len) : KG_OK;
    }
    cJSON *j_t = tgi_token_json(tok, t->id, t->text, t->text_len, t->logprob, 1);
    cJSON *j_top = g->f.top_n_tokens ? tgi_top_json(tok, t) : NULL;
    if (!j_t || (g->f.top_n_tokens && !j_top)) goto oom;
    if (job->stream) { // send the event held so far; hold this one (it may be the last)
        int rc = g->j_held ? job_sse_json(job, g->j_held) : KG_OK; // consumed
        g->j_held = tgi_event(++g->index, j_t, j_top);             // consumed
        return rc || !g->j_held ? KG_ENOMEM : KG_OK;
    }
    if (!cJSON_AddItemToArray(g->j_tokens, j_t)) goto oom;
    j_t = NULL; // g->j_tokens's now
    if (j_top && !cJSON_AddItemToArray(g->j_top, j_top)) goto oom;
    return KG_OK;
oom:
    cJSON_Delete(j_t);
    cJSON_Delete(j_top);
    return KG_ENOMEM;
}

// TGI's finish_reason of the one choice.
static const char *tgi_finish_reason(const JobRequest *job) {
    switch (job->choices[0].state) {
    case SCHED_DONE_EOS:
        return "eos_token";
    case SCHED_DONE_STOP:
        return "stop_sequence";
    default:
        return "length";
    }
}

// generated_text (the inputs first with return_full_text) into j. 0 on OOM.
static int tgi_add_generated_text(const JobRequest *job, cJSON *j) {
    const Tgi *g = job->ctx;
    const KgBuf *text = &job->choices[0].text;
    KgBuf b = {0};
    int rc = g->full_text ? buf_append(&b, g->full_text, strlen(g->full_text)) : KG_OK;
    if (!rc && text->p) rc = buf_append(&b, text->p, text->len);
    if (!rc) rc = buf_append(&b, "", 1); // NUL
    int ok = !rc && cJSON_AddStringToObject(j, "generated_text", b.p);
    buf_free(&b);
    return ok;
}

// details' common head {finish_reason, generated_tokens, seed} into j_d. 0 on OOM.
static int tgi_add_details_head(const JobRequest *job, cJSON *j_d) {
    const Tgi *g = job->ctx;
    SchedStats st;
    sched_seq_stats(job->choices[0].sched_seq, &st);
    return cJSON_AddStringToObject(j_d, "finish_reason", tgi_finish_reason(job)) &&
           cJSON_AddNumberToObject(j_d, "generated_tokens", (double)st.generated_tokens) &&
           (g->sampling ? cJSON_AddNumberToObject(j_d, "seed", (double)g->seed)
                        : cJSON_AddNullToObject(j_d, "seed"));
}

// The last event: the last token (the end-of-text token, special, when the model ended
// before any), generated_text and the stream's details.
static int tgi_choice_end(JobRequest *job, size_t i) {
    (void)i;
    Tgi *g = job->ctx;
    SchedState state = job->choices[0].state;
    if (state == SCHED_DONE_ERROR || state == SCHED_DONE_CANCELLED) return KG_OK; // error event
    cJSON *j = g->j_held, *j_d = NULL;
    g->j_held = NULL;
    if (!j) // the model ended at once: the end-of-text token is the one to show
        j = tgi_event(
            ++g->index,
            tgi_token_json(job->model->tok, tok_special(job->model->tok).eos, "", 0, NAN, 1), NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "generated_text"); // (both null so far)
    cJSON_DeleteItemFromObjectCaseSensitive(j, "details");
    int ok = j && tgi_add_generated_text(job, j) &&
             (g->f.details ? (j_d = cJSON_AddObjectToObject(j, "details")) &&
                                 tgi_add_details_head(job, j_d) &&
                                 cJSON_AddNumberToObject(j_d, "input_length", (double)g->n_prompt)
                           : cJSON_AddNullToObject(j, "details") != NULL);
    if (!ok) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

// {generated_text, details?}, or [that] in the compat form.
static cJSON *tgi_reply(JobRequest *job) {
    Tgi *g = job->ctx;
    cJSON *j = cJSON_CreateObject(), *j_d;
    if (!j || !tgi_add_generated_text(job, j)) goto oom;
    if (g->f.details) {
        if (!(j_d = cJSON_AddObjectToObject(j, "details")) || !tgi_add_details_head(job, j_d) ||
            !cJSON_AddItemReferenceToObject(j_d, "prefill", g->j_prefill) ||
            !cJSON_AddItemReferenceToObject(j_d, "tokens", g->j_tokens) ||
            (g->j_top && !cJSON_AddItemReferenceToObject(j_d, "top_tokens", g->j_top)))
            goto oom;
    }
    if (!g->wrap) return j;
    cJSON *j_arr = cJSON_CreateArray();
    if (cJSON_AddItemToArray(j_arr, j)) return j_arr;
    cJSON_Delete(j_arr);
oom:
    cJSON_Delete(j);
    return NULL;
}

static void tgi_free(void *ctx) {
    Tgi *g = ctx;
    if (!g) return;
    free(g->prompt);
    free(g->full_text);
    cJSON_Delete(g->j_tokens);
    cJSON_Delete(g->j_top);
    cJSON_Delete(g->j_prefill);
    cJSON_Delete(g->j_held);
    free(g);
}

static const JobHooks TGI_HOOKS = {
    .token = tgi_token, .choice_end = tgi_choice_end, .reply = tgi_reply, .free = tgi_free};

// 1 when j_obj has name, not null.
static int tgi_given(const cJSON *j_obj, const char *name) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_obj, name);
    return j && !cJSON_IsNull(j);
}

// "parameters" (absent or null: TGI's defaults, sampling on), read into g and s.
static int tgi_parameters(const ApiModel *served, const cJSON *j_req, Tgi *g, ApiSampling *s,
                          const char **param, char *err) {
    const cJSON *j_p = cJSON_GetObjectItemCaseSensitive(j_req, "parameters");
    if (cJSON_IsNull(j_p)) j_p = NULL;
    *param = "parameters";
    if (j_p && !cJSON_IsObject(j_p)) return kg_err(err, KG_EINVAL, "parameters must be an object");
    const ApiRequest q = {.model = served, .j_req = j_p};
    int rc = api_fields(&q, TGI_FIELDS, sizeof TGI_FIELDS / sizeof *TGI_FIELDS, &g->f, param, err);
    if (!rc) rc = json_bool(j_p, "do_sample", &g->f.do_sample, j_p == NULL, err);
    if (rc) return rc;
    if (g->f.watermark) return kg_err(err, KG_EUNSUP, "watermark is not supported");
    // the engine stops at a full context: "to the end" is at most n_ctx tokens
    rc = api_sampling(served, j_p, s, (long long)served->n_ctx, 1, param, err);
    if (rc) return rc;
    if (g->f.max_new_tokens) s->max_tokens = g->f.max_new_tokens;
    s->n_logprobs = g->f.top_n_tokens;
    s->stream = 0; // (TGI's stream is the route, or the compat body's own "stream")
    // TGI samples when asked to or when any warper is given; else greedy
    g->sampling = g->f.do_sample || tgi_given(j_p, "temperature") || tgi_given(j_p, "top_k") ||
                  tgi_given(j_p, "top_p");
    if (!g->sampling) s->temperature = 0;
    g->seed = s->seed;
    return KG_OK;
}

// Parses the request and runs it; stream: -1 reads the body's "stream" (the compat form).
static enum MHD_Result tgi_run(SrvReq *r, const cJSON *j_req, int stream, int wrap) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model", *inputs;
    const ApiModel *served = NULL;
    size_t len;
    ApiSampling s = {0};
    Tgi *g = calloc(1, sizeof *g);
    JobRequest *job = NULL;
    // TGI serves one model; here a "model" beside "inputs" picks one as on the other routes
    int rc = g ? api_model(app, j_req, &served, err) : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) rc = json_str(j_req, param = "inputs", &inputs, &len, err);
    if (!rc && !inputs) rc = kg_err(err, KG_EINVAL, "inputs is required");
    if (!rc && stream < 0) {
        param = "stream";
        rc = json_bool(j_req, "stream", &stream, 0, err);
    }
    if (!rc) rc = tgi_parameters(served, j_req, g, &s, &param, err);
    if (!rc && stream && g->f.decoder_input_details) {
        param = "decoder_input_details";
        rc = kg_err(err, KG_ERANGE, "decoder_input_details is not supported when streaming");
    }
    if (!rc) {
        param = "inputs";
        rc = api_prompt_from(served, inputs, len, NULL, "inputs", &g->prompt, &g->n_prompt, err);
    }
    if (!rc && g->f.truncate && g->n_prompt > (size_t)g->f.truncate) { // keep the last ones
        size_t drop = g->n_prompt - (size_t)g->f.truncate;
        memmove(g->prompt, g->prompt + drop, (size_t)g->f.truncate * sizeof *g->prompt);
        g->n_prompt = (size_t)g->f.truncate;
    }
    if (!rc) {
        g->wrap = wrap;
        if ((g->f.return_full_text && !(g->full_text = strndup(inputs, len))) ||
            !(g->j_tokens = cJSON_CreateArray()) || !(g->j_prefill = cJSON_CreateArray()) ||
            (g->f.top_n_tokens && !(g->j_top = cJSON_CreateArray())) ||
            !(job = job_new(served, &TGI_HOOKS, g, 1, "tgi", stream)))
            rc = kg_err(err, KG_ENOMEM, "out of memory");
    }
    if (rc) {
        tgi_free(g);
        api_sampling_free(&s);
        return srv_reply_kg(r, rc, err, param);
    }
    SchedParams p = api_sched_params(&s, g->prompt, g->n_prompt);
    p.score_prompt = g->f.decoder_input_details;
    ret = job_run(r, job, &p);
    api_sampling_free(&s); // sched_submit copied what it keeps
    return ret;
}

enum MHD_Result ep_tgi_generate(SrvReq *r, const cJSON *j_req) { return tgi_run(r, j_req, 0, 0); }

enum MHD_Result ep_tgi_generate_stream(SrvReq *r, const cJSON *j_req) {
    return tgi_run(r, j_req, 1, 0);
}

enum MHD_Result ep_tgi_compat(SrvReq *r, const cJSON *j_req) { return tgi_run(r, j_req, -1, 1); }

enum MHD_Result ep_tgi_info(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    const ApiModel *served = &app->models[0]; // TGI's /info describes one model: the default one
    const char *device = served->device ? served->device : "cpu";
    cJSON *j = cJSON_CreateObject();
    if (!j || !cJSON_AddStringToObject(j, "model_id", served->name) ||
        !cJSON_AddNullToObject(j, "model_sha") ||
        !cJSON_AddStringToObject(j, "model_dtype", served->dtype ? served->dtype : "f32") ||
        !cJSON_AddStringToObject(j, "model_device_type",
                                 strncmp(device, "cuda", 4) ? "cpu" : "cuda") ||
        !cJSON_AddStringToObject(j, "model_pipeline_tag", "text-generation") ||
        !cJSON_AddNumberToObject(j, "max_concurrent_requests", (double)app->max_jobs) ||
        !cJSON_AddNumberToObject(j, "max_best_of", 1) ||
        !cJSON_AddNumberToObject(j, "max_stop_sequences", API_MAX_STOP) ||
        !cJSON_AddNumberToObject(j, "max_input_tokens", (double)(served->n_ctx - 1)) ||
        !cJSON_AddNumberToObject(j, "max_total_tokens", (double)served->n_ctx) ||
        !cJSON_AddNumberToObject(j, "max_client_batch_size", 1) ||
        !cJSON_AddStringToObject(j, "router", "kogpt2d") ||
        !cJSON_AddStringToObject(j, "version", kg_version()) ||
        !cJSON_AddStringToObject(j, "sha", kg_commit()) ||
        !cJSON_AddNullToObject(j, "docker_label")) {
        cJSON_Delete(j);
        j = NULL;
    }
    return srv_reply_json(r, 200, j); // NULL: 503
}
