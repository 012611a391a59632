// ep_completions.c — POST /v1/completions: OpenAI's (legacy) completions.
//
//   {"prompt": a string, an array of ids, or an array of either (one choice each, "index" in
//    order), "n" 1..16 samples per prompt (each its own seed stream: seed + k), "max_tokens"
//    (16), "temperature", "top_p", "top_k", "logprobs" 0..20, "echo", "stop", "stream",
//    "stream_options": {"include_usage"}, "seed", the penalties and "logit_bias" (as
//    /v1/generate), "model" (absent or the served one; another is 404)}
//   -> {id, object: "text_completion", created, model, choices [{text, index, logprobs,
//       finish_reason}], usage}; stream: one chunk per token and choice, a last chunk per
//       choice with its finish_reason, with include_usage a chunk with "choices": [] and the
//       usage, then "data: [DONE]".
//   At most 16 choices (prompts x n). "suffix" and "best_of" > 1 are refused (422).
//   echo with logprobs scores the prompt too (how evaluation harnesses ask for likelihoods):
//   its tokens lead the logprobs, the first with null; max_tokens may then be 0; not streamed.
//   logprobs: OpenAI's parallel arrays; text_offset counts characters, as OpenAI's does.
//   The request's own fields are COMPLETIONS_FIELDS (a table, as params.c reads it); the
//   stream ends as openai.h has it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "openai.h"
#include "server/http/json_in.h"

// One prompt of the request; its n samples share it.
typedef struct {
    int *ids; // (n_ids)
    size_t n_ids;
    char *echo;        // its text when echoed (else NULL)
    size_t echo_chars; // characters of echo
} CompletionPrompt;

// One choice: prompt i / n, sample i % n.
typedef struct {
    size_t scored_chars; // prompt scoring: characters of the prompt scored so far
    size_t text_chars;   // characters before its next generated token (echo included)
    cJSON *j_logprobs;   // OpenAI's logprobs object (when "logprobs" was given)
} CompletionChoice;

typedef struct {
    size_t n_prompts, n;
    CompletionPrompt *prompts; // (n_prompts)
    CompletionChoice *choices; // (n_prompts * n)
    int want_logprobs, include_usage;
} Completions;

// The request's own fields (COMPLETIONS_FIELDS), beside the sampling ones.
typedef struct {
    long long n, best_of; // samples per prompt; best_of > 1 is refused
    int echo;             // the prompt leads each choice's text
} CompletionsFields;

#define COMPLETIONS(m) offsetof(CompletionsFields, m)

static const ApiField COMPLETIONS_FIELDS[] = {
    {"suffix", API_REFUSED, .why = "suffix (insertion) is not supported"},
    {"n", API_INT, COMPLETIONS(n), .def = 1, .lo = 1, .hi = API_MAX_CHOICES},
    {"best_of", API_INT, COMPLETIONS(best_of), .def = 1, .lo = 1, .hi = 1},
    {"echo", API_BOOL, COMPLETIONS(echo), .def = 0},
    {"user", API_IGNORED, .why = "an end-user id for OpenAI's abuse monitoring"},
};

// OpenAI's legacy logprobs object: parallel arrays tokens, token_logprobs, top_logprobs
// (objects keyed by token text), text_offset.
static cJSON *completions_logprobs_new(void) {
    cJSON *j_lp = cJSON_CreateObject();
    if (!j_lp || !cJSON_AddArrayToObject(j_lp, "tokens") ||
        !cJSON_AddArrayToObject(j_lp, "token_logprobs") ||
        !cJSON_AddArrayToObject(j_lp, "top_logprobs") ||
        !cJSON_AddArrayToObject(j_lp, "text_offset")) {
        cJSON_Delete(j_lp);
        return NULL;
    }
    return j_lp;
}

// Token t's top_logprobs entry: {token text: logprob} of its candidates, or null for the
// prompt's first token, which has no score (as OpenAI has it). NULL on OOM.
static cJSON *completions_top_logprobs(const Tokenizer *tok, const SchedToken *t) {
    if (isnan(t->logprob)) return cJSON_CreateNull();
    cJSON *j_top = cJSON_CreateObject();
    for (size_t k = 0; j_top && k < t->n_candidates; k++) {
        char *key = api_token_logprob_text(tok, t->candidates[k].id, NULL, NULL);
        int ok = key != NULL;
        if (ok && !cJSON_GetObjectItemCaseSensitive(j_top, key)) // the first of equal texts
            ok = cJSON_AddNumberToObject(j_top, key, t->candidates[k].logprob) != NULL;
        free(key);
        if (!ok) {
            cJSON_Delete(j_top);
            j_top = NULL;
        }
    }
    return j_top;
}

// Appends token t to a logprobs object at character offset off.
static int completions_logprobs_add(cJSON *j_lp, const Tokenizer *tok, const SchedToken *t,
                                    size_t off) {
    int first = isnan(t->logprob);
    cJSON *j_top = completions_top_logprobs(tok, t);
    char *s = strndup(t->text, t->text_len);
    cJSON *j_s = s ? cJSON_CreateString(s) : NULL;
    free(s);
    if (!j_top || !j_s) {
        cJSON_Delete(j_top);
        cJSON_Delete(j_s);
        return KG_ENOMEM;
    }
    if (!cJSON_AddItemToArray(cJSON_GetObjectItem(j_lp, "tokens"), j_s) ||
        !cJSON_AddItemToArray(cJSON_GetObjectItem(j_lp, "token_logprobs"),
                              first ? cJSON_CreateNull() : cJSON_CreateNumber(t->logprob)) ||
        !cJSON_AddItemToArray(cJSON_GetObjectItem(j_lp, "top_logprobs"), j_top) ||
        !cJSON_AddItemToArray(cJSON_GetObjectItem(j_lp, "text_offset"),
                              cJSON_CreateNumber((double)off)))
        return KG_ENOMEM;
    return KG_OK;
}

// Adds {"text", "index", "logprobs", "finish_reason"} to j_choices (j_lp consumed).
static int completions_add_choice(cJSON *j_choices, size_t index, const char *text, cJSON *j_lp,
                                  const char *finish) {
    cJSON *j_c = cJSON_CreateObject();
    if (!j_c || !cJSON_AddItemToArray(j_choices, j_c)) {
        cJSON_Delete(j_c);
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    if (!cJSON_AddStringToObject(j_c, "text", text) ||
        !cJSON_AddNumberToObject(j_c, "index", (double)index)) {
        cJSON_Delete(j_lp); // not attached
        return KG_ENOMEM;
    }
    if (openai_add_logprobs(j_c, j_lp)) return KG_ENOMEM;
    return openai_add_finish(j_c, finish);
}

// One chunk of a stream: choice i's text (and logprobs, consumed), or its finish_reason.
static int completions_chunk(JobRequest *job, size_t i, const char *text, cJSON *j_lp,
                             const char *finish) {
    cJSON *j_choices;
    cJSON *j = job_openai_object(job, "text_completion", &j_choices);
    if (!j) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    if (completions_add_choice(j_choices, i, text, j_lp, finish)) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

// Streaming: a chunk with token t's text at character offset off, and its logprobs if asked.
static int completions_token_chunk(JobRequest *job, size_t i, const SchedToken *t, size_t off) {
    Completions *c = job->ctx;
    cJSON *j_lp = NULL;
    if (c->want_logprobs) {
        j_lp = completions_logprobs_new();
        if (!j_lp || completions_logprobs_add(j_lp, job->model->tok, t, off)) {
            cJSON_Delete(j_lp);
            return KG_ENOMEM;
        }
    }
    char *s = strndup(t->text, t->text_len);
    if (!s) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    int rc = completions_chunk(job, i, s, j_lp, NULL);
    free(s);
    return rc;
}

static int completions_token(JobRequest *job, size_t i, const SchedToken *t) {
    Completions *c = job->ctx;
    CompletionChoice *ch = &c->choices[i];
    const Tokenizer *tok = job->model->tok;
    if (t->prompt) { // a prompt token's score (echo + logprobs): logprobs only
        int rc = KG_OK;
        if (ch->j_logprobs) rc = completions_logprobs_add(ch->j_logprobs, tok, t, ch->scored_chars);
        ch->scored_chars += api_utf8_chars(t->text, t->text_len);
        return rc;
    }
    // the text before this token: the echoed prompt, then what was generated before it
    size_t off = ch->text_chars;
    ch->text_chars += api_utf8_chars(t->text, t->text_len);
    if (ch->j_logprobs && completions_logprobs_add(ch->j_logprobs, tok, t, off)) return KG_ENOMEM;
    if (!job->stream) return KG_OK;
    return completions_token_chunk(job, i, t, off);
}

static int completions_choice_end(JobRequest *job, size_t i) {
    return completions_chunk(job, i, "", NULL, job_finish_reason(job, i, 1));
}

static int completions_stream_end(JobRequest *job) {
    Completions *c = job->ctx;
    return openai_stream_end(job, "text_completion", c->include_usage);
}

// Choice i of the whole reply: its echoed prompt and text, its logprobs (moved into it).
static int completions_reply_choice(JobRequest *job, cJSON *j_choices, size_t i) {
    Completions *c = job->ctx;
    const char *echo = c->prompts[i / c->n].echo;
    const char *text = job->choices[i].text.p ? job->choices[i].text.p : "";
    cJSON *j_lp = c->choices[i].j_logprobs;
    c->choices[i].j_logprobs = NULL; // moved into the reply
    char *full = NULL;
    if (echo) {
        full = malloc(strlen(echo) + strlen(text) + 1);
        if (!full) {
            cJSON_Delete(j_lp);
            return KG_ENOMEM;
        }
        strcpy(full, echo);
        strcat(full, text);
    }
    int rc = completions_add_choice(j_choices, i, full ? full : text, j_lp,
                                    job_finish_reason(job, i, 1));
    free(full);
    return rc;
}

static cJSON *completions_reply(JobRequest *job) {
    return openai_reply(job, "text_completion", completions_reply_choice);
}

static void completions_free(void *ctx) {
    Completions *c = ctx;
    if (!c) return;
    for (size_t i = 0; c->prompts && i < c->n_prompts; i++) {
        free(c->prompts[i].ids);
        free(c->prompts[i].echo);
    }
    for (size_t i = 0; c->choices && i < c->n_prompts * c->n; i++)
        cJSON_Delete(c->choices[i].j_logprobs);
    free(c->prompts);
    free(c->choices);
    free(c);
}

static const JobHooks COMPLETIONS_HOOKS = {.token = completions_token,
                                           .choice_end = completions_choice_end,
                                           .stream_end = completions_stream_end,
                                           .reply = completions_reply,
                                           .free = completions_free};

// A prompt given as a string: its text, checked for UTF-8.
static int completions_prompt_text(const cJSON *j, const char **text, size_t *len, char *err) {
    *text = j->valuestring;
    *len = strlen(*text);
    size_t bad;
    if (!json_utf8_valid(*text, *len, &bad))
        return kg_err(err, KG_EINVAL, "prompt: invalid UTF-8 at byte %zu", bad);
    return KG_OK;
}

// The text a prompt echoes: its own, or its ids decoded.
static int completions_prompt_echo(const ApiModel *served, const char *text, CompletionPrompt *pr,
                                   char *err) {
    if (text) {
        pr->echo = strdup(text);
        if (!pr->echo) return kg_err(err, KG_ENOMEM, "prompt: out of memory");
    } else {
        int rc = tok_decode(served->tok, pr->ids, pr->n_ids, &pr->echo, NULL, err);
        if (rc) return rc;
    }
    pr->echo_chars = api_utf8_chars(pr->echo, strlen(pr->echo));
    return KG_OK;
}

// One prompt: a string or an array of ids.
static int completions_prompt(const ApiModel *served, const cJSON *j, CompletionPrompt *pr,
                              int echo, char *err) {
    const char *text = NULL;
    size_t len = 0;
    if (!cJSON_IsString(j) && !cJSON_IsArray(j))
        return kg_err(err, KG_EINVAL,
                      "prompt must be a string, an array of token ids, or an "
                      "array of those");
    int rc = cJSON_IsString(j) ? completions_prompt_text(j, &text, &len, err) : KG_OK;
    if (!rc) rc = api_prompt_from(served, text, len, j, "prompt", &pr->ids, &pr->n_ids, err);
    if (rc || !echo) return rc;
    return completions_prompt_echo(served, text, pr, err);
}

// "prompt": one (a string or ids) or a batch (an array of strings or of id arrays).
static int completions_prompts(const ApiModel *served, const cJSON *j_req, Completions *c, int echo,
                               char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "prompt");
    if (!j || cJSON_IsNull(j)) return kg_err(err, KG_EINVAL, "prompt is required");
    int batch = cJSON_IsArray(j) && j->child && !cJSON_IsNumber(j->child);
    c->n_prompts = batch ? (size_t)cJSON_GetArraySize(j) : 1;
    if (c->n_prompts * c->n > API_MAX_CHOICES)
        return kg_err(err, KG_ERANGE, "at most %d choices per request (prompts x n: %zu x %zu)",
                      API_MAX_CHOICES, c->n_prompts, c->n);
    c->prompts = calloc(c->n_prompts, sizeof *c->prompts);
    c->choices = calloc(c->n_prompts * c->n, sizeof *c->choices);
    if (!c->prompts || !c->choices) return kg_err(err, KG_ENOMEM, "out of memory");
    const cJSON *j_p = batch ? j->child : j;
    for (size_t i = 0; i < c->n_prompts; i++, j_p = j_p->next) {
        int rc = completions_prompt(served, j_p, &c->prompts[i], echo, err);
        if (rc) return rc;
        for (size_t k = 0; k < c->n; k++) // its samples' text starts after the echo
            c->choices[i * c->n + k].text_chars = c->prompts[i].echo_chars;
    }
    return KG_OK;
}

// One engine request per choice (prompt i / n, sample i % n: its own seed stream, seed + k),
// and the logprobs object of each when they are asked for and not streamed.
static int completions_params(Completions *c, const ApiSampling *s, int scoring, SchedParams **out,
                              char *err) {
    size_t n_choices = c->n_prompts * c->n;
    SchedParams *params = calloc(n_choices, sizeof *params);
    *out = params;
    if (!params) return kg_err(err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_choices; i++) {
        const CompletionPrompt *pr = &c->prompts[i / c->n];
        params[i] = api_sched_params(s, pr->ids, pr->n_ids);
        params[i].seed = (uint64_t)s->seed + i % c->n; // each sample its own stream
        params[i].score_prompt = scoring;
    }
    if (!c->want_logprobs || s->stream) return KG_OK; // a stream's chunks carry their own
    for (size_t i = 0; i < n_choices; i++) {
        c->choices[i].j_logprobs = completions_logprobs_new();
        if (!c->choices[i].j_logprobs) return kg_err(err, KG_ENOMEM, "out of memory");
    }
    return KG_OK;
}

// The request into *served (the model it names), c, s and *params (one per choice, malloc'd).
// KG_OK, or the error with *param naming the field at fault.
static int completions_parse(const ApiApp *app, const cJSON *j_req, const ApiModel **served,
                             Completions *c, ApiSampling *s, SchedParams **params,
                             const char **param, char *err) {
    const size_t n_fields = sizeof COMPLETIONS_FIELDS / sizeof *COMPLETIONS_FIELDS;
    CompletionsFields f;
    *param = "model";
    int rc = api_model(app, j_req, served, err);
    const ApiRequest q = {.model = *served, .j_req = j_req};
    if (!rc) rc = api_fields(&q, COMPLETIONS_FIELDS, n_fields, &f, param, err);
    if (rc) return rc;
    const cJSON *j_lp = cJSON_GetObjectItemCaseSensitive(j_req, "logprobs");
    c->n = (size_t)f.n;
    c->want_logprobs = j_lp && !cJSON_IsNull(j_lp);
    int scoring = f.echo && c->want_logprobs; // scores the prompt: max_tokens 0 is "score only"
    rc = api_sampling(*served, j_req, s, 16, scoring ? 0 : 1, param, err);
    if (rc) return rc;
    if (scoring && s->stream) {
        *param = "stream";
        return kg_err(err, KG_EUNSUP, "echo with logprobs (prompt scoring) is not streamed");
    }
    c->include_usage = s->include_usage;
    *param = "prompt";
    rc = completions_prompts(*served, j_req, c, f.echo, err);
    if (rc) return rc;
    return completions_params(c, s, scoring, params, err);
}

enum MHD_Result ep_completions(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    ApiSampling s = {0};
    JobRequest *job = NULL;
    SchedParams *params = NULL;
    Completions *c = calloc(1, sizeof *c);
    int rc = c ? completions_parse(app, j_req, &served, c, &s, &params, &param, err)
               : kg_err(err, KG_ENOMEM, "out of memory");
    size_t n_choices = rc ? 0 : c->n_prompts * c->n;
    if (!rc) job = job_new(served, &COMPLETIONS_HOOKS, c, n_choices, "cmpl", s.stream);
    if (!rc && !job) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        completions_free(c);
        api_sampling_free(&s);
        free(params);
        return srv_reply_kg(r, rc, err, param);
    }
    job->n_per_prompt = c->n; // usage counts each prompt once, not n times
    for (size_t i = 0; s.stream && i < n_choices; i++) { // the echoed prompts lead the streams
        const char *echo = c->prompts[i / c->n].echo;
        if (echo && completions_chunk(job, i, echo, NULL, NULL)) job->oom = 1;
    }
    ret = job_run(r, job, params);
    api_sampling_free(&s); // sched_submit copied what it keeps
    free(params);
    return ret;
}
