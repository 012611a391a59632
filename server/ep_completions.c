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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "json_in.h"

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

// Appends token t to a logprobs object at character offset off.
static int completions_logprobs_add(cJSON *j_lp, const Tokenizer *tok, const SchedToken *t,
                                    size_t off) {
    int first = isnan(t->logprob); // the prompt's first token has no score: null, as OpenAI
    cJSON *j_top = first ? cJSON_CreateNull() : cJSON_CreateObject();
    for (size_t k = 0; !first && j_top && k < t->n_candidates; k++) {
        char *key = tok_piece_text(tok, t->candidates[k].id);
        if (!key || (!cJSON_GetObjectItemCaseSensitive(j_top, key) &&
                     !cJSON_AddNumberToObject(j_top, key, t->candidates[k].logprob))) {
            cJSON_Delete(j_top);
            j_top = NULL;
        }
        free(key);
    }
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
        !cJSON_AddNumberToObject(j_c, "index", (double)index) ||
        !(j_lp ? cJSON_AddItemToObject(j_c, "logprobs", j_lp)
               : cJSON_AddNullToObject(j_c, "logprobs") != NULL)) {
        cJSON_Delete(j_lp); // not attached
        return KG_ENOMEM;
    }
    return (finish ? cJSON_AddStringToObject(j_c, "finish_reason", finish)
                   : cJSON_AddNullToObject(j_c, "finish_reason"))
               ? KG_OK
               : KG_ENOMEM;
}

// One chunk of a stream: choice i's text (and logprobs), or its finish_reason.
static int completions_chunk(Job *job, size_t i, const char *text, cJSON *j_lp,
                             const char *finish) {
    cJSON *j_choices, *j = job_openai_object(job, "text_completion", &j_choices);
    if (!j || completions_add_choice(j_choices, i, text, j_lp, finish)) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

static int completions_token(Job *job, size_t i, const SchedToken *t) {
    Completions *c = job->ctx;
    CompletionChoice *ch = &c->choices[i];
    const Tokenizer *tok = job->app->tok;
    if (t->prompt) { // a prompt token's score (echo + logprobs): logprobs only
        int rc = ch->j_logprobs ? completions_logprobs_add(ch->j_logprobs, tok, t, ch->scored_chars)
                                : KG_OK;
        ch->scored_chars += api_utf8_chars(t->text, t->text_len);
        return rc;
    }
    // the text before this token: the echoed prompt, then what was generated before it
    size_t off = ch->text_chars;
    ch->text_chars += api_utf8_chars(t->text, t->text_len);
    if (ch->j_logprobs && completions_logprobs_add(ch->j_logprobs, tok, t, off)) return KG_ENOMEM;
    if (!job->stream) return KG_OK;
    cJSON *j_lp = NULL;
    if (c->want_logprobs &&
        (!(j_lp = completions_logprobs_new()) || completions_logprobs_add(j_lp, tok, t, off))) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    char *s = strndup(t->text, t->text_len);
    int rc = s ? completions_chunk(job, i, s, j_lp, NULL) : (cJSON_Delete(j_lp), KG_ENOMEM);
    free(s);
    return rc;
}

static int completions_choice_end(Job *job, size_t i) {
    return completions_chunk(job, i, "", NULL, job_finish_reason(job, i, 1));
}

static int completions_stream_end(Job *job) {
    Completions *c = job->ctx;
    cJSON *j_choices;
    if (c->include_usage &&
        job_sse_usage(job, job_openai_object(job, "text_completion", &j_choices)))
        return KG_ENOMEM;
    return job_sse_raw(job, "data: [DONE]\n\n");
}

static cJSON *completions_reply(Job *job) {
    Completions *c = job->ctx;
    size_t prompt, generated;
    job_usage(job, &prompt, &generated);
    cJSON *j_choices, *j_root = job_openai_object(job, "text_completion", &j_choices);
    for (size_t i = 0; j_root && i < job->n_choices; i++) {
        CompletionChoice *ch = &c->choices[i];
        const char *echo = c->prompts[i / c->n].echo;
        const char *text = job->choices[i].text.p ? job->choices[i].text.p : "";
        char *full = NULL;
        if (echo && (full = malloc(strlen(echo) + strlen(text) + 1)))
            strcat(strcpy(full, echo), text);
        cJSON *j_lp = ch->j_logprobs;
        ch->j_logprobs = NULL; // moved into the reply
        int rc = echo && !full ? (cJSON_Delete(j_lp), KG_ENOMEM)
                               : completions_add_choice(j_choices, i, full ? full : text, j_lp,
                                                        job_finish_reason(job, i, 1));
        free(full);
        if (rc) {
            cJSON_Delete(j_root);
            return NULL;
        }
    }
    if (j_root && !api_add_usage(j_root, prompt, generated)) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
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

// One prompt: a string or an array of ids.
static int completions_prompt(const SrvApp *app, const cJSON *j, CompletionPrompt *pr, int echo,
                              char *err) {
    const char *text = NULL;
    size_t len = 0;
    if (cJSON_IsString(j)) {
        text = j->valuestring;
        len = strlen(text);
        size_t bad;
        if (!json_utf8_valid(text, len, &bad))
            return kg_err(err, KG_EINVAL, "prompt: invalid UTF-8 at byte %zu", bad);
    } else if (!cJSON_IsArray(j)) {
        return kg_err(err, KG_EINVAL,
                      "prompt must be a string, an array of token ids, or an "
                      "array of those");
    }
    int rc = api_prompt_from(app, text, len, j, "prompt", &pr->ids, &pr->n_ids, err);
    if (rc || !echo) return rc;
    if (text && !(pr->echo = strdup(text))) return kg_err(err, KG_ENOMEM, "prompt: out of memory");
    if (!text && (rc = tok_decode(app->tok, pr->ids, pr->n_ids, &pr->echo, NULL, err))) return rc;
    pr->echo_chars = api_utf8_chars(pr->echo, strlen(pr->echo));
    return KG_OK;
}

// "prompt": one (a string or ids) or a batch (an array of strings or of id arrays).
static int completions_prompts(const SrvApp *app, const cJSON *j_req, Completions *c, int echo,
                               char *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "prompt");
    if (!j || cJSON_IsNull(j)) return kg_err(err, KG_EINVAL, "prompt is required");
    int batch = cJSON_IsArray(j) && j->child && !cJSON_IsNumber(j->child);
    c->n_prompts = batch ? (size_t)cJSON_GetArraySize(j) : 1;
    if (c->n_prompts * c->n > API_MAX_CHOICES)
        return kg_err(err, KG_ERANGE, "at most %d choices per request (prompts x n: %zu x %zu)",
                      API_MAX_CHOICES, c->n_prompts, c->n);
    if (!(c->prompts = calloc(c->n_prompts, sizeof *c->prompts)) ||
        !(c->choices = calloc(c->n_prompts * c->n, sizeof *c->choices)))
        return kg_err(err, KG_ENOMEM, "out of memory");
    const cJSON *j_p = batch ? j->child : j;
    for (size_t i = 0; i < c->n_prompts; i++, j_p = j_p->next) {
        int rc = completions_prompt(app, j_p, &c->prompts[i], echo, err);
        if (rc) return rc;
        for (size_t k = 0; k < c->n; k++) // its samples' text starts after the echo
            c->choices[i * c->n + k].text_chars = c->prompts[i].echo_chars;
    }
    return KG_OK;
}

enum MHD_Result ep_completions(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    SrvApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    ApiSampling s = {0};
    long long n, best_of;
    int echo = 0;
    Job *job = NULL;
    SchedParams *params = NULL;
    Completions *c = calloc(1, sizeof *c);
    const cJSON *j_lp = cJSON_GetObjectItemCaseSensitive(j_req, "logprobs");
    const cJSON *j_suffix = cJSON_GetObjectItemCaseSensitive(j_req, "suffix");
    int rc = c ? api_model(app, j_req, err) : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc && j_suffix && !cJSON_IsNull(j_suffix))
        param = "suffix", rc = kg_err(err, KG_EUNSUP, "suffix (insertion) is not supported");
    if (!rc) rc = json_int(j_req, param = "n", &n, 1, 1, API_MAX_CHOICES, err);
    if (!rc) rc = json_int(j_req, param = "best_of", &best_of, 1, 1, 1, err);
    if (!rc) rc = json_bool(j_req, param = "echo", &echo, 0, err);
    if (!rc) c->n = (size_t)n, c->want_logprobs = j_lp && !cJSON_IsNull(j_lp);
    // echo with logprobs scores the prompt; max_tokens 0 then means "score only"
    int scoring = !rc && echo && c->want_logprobs;
    if (!rc) rc = api_sampling(app, j_req, &s, 16, scoring ? 0 : 1, &param, err);
    if (!rc && scoring && s.stream)
        param = "stream",
        rc = kg_err(err, KG_EUNSUP, "echo with logprobs (prompt scoring) is not streamed");
    if (!rc) rc = completions_prompts(app, j_req, c, echo, err), param = "prompt";
    size_t n_choices = rc ? 0 : c->n_prompts * c->n;
    if (!rc && !(params = calloc(n_choices, sizeof *params)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n_choices; i++) {
        const CompletionPrompt *pr = &c->prompts[i / c->n];
        if (c->want_logprobs && !s.stream && // a stream's chunks carry their own
            !(c->choices[i].j_logprobs = completions_logprobs_new()))
            rc = kg_err(err, KG_ENOMEM, "out of memory");
        params[i] = api_sched_params(&s, pr->ids, pr->n_ids);
        params[i].seed = (uint64_t)s.seed + i % c->n; // each sample its own stream
        params[i].score_prompt = scoring;
    }
    if (!rc) c->include_usage = s.include_usage;
    if (!rc && !(job = job_new(app, &COMPLETIONS_HOOKS, c, n_choices, "cmpl", s.stream)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) job->n_per_prompt = c->n; // usage counts each prompt once, not n times
    if (rc) {
        completions_free(c);
        api_sampling_free(&s);
        free(params);
        return srv_reply_kg(r, rc, err, param);
    }
    if (s.stream) // the echoed prompts lead their choices' streams
        for (size_t i = 0; i < n_choices; i++) {
            const char *echo = c->prompts[i / c->n].echo;
            if (echo && completions_chunk(job, i, echo, NULL, NULL)) job->oom = 1;
        }
    ret = job_run(r, job, params);
    api_sampling_free(&s); // sched_submit copied what it keeps
    free(params);
    return ret;
}
