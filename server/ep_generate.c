// ep_generate.c — POST /v1/generate: kogpt2's own generation call.
//
//   {"text"|"tokens", "max_tokens" 1..n_ctx (32), "temperature" 0..100 (1; 0 greedy),
//    "top_k" 0..V (0 off), "top_p" (0,1] (1), "seed" 0..2^53-1 (random), "stop" string or
//    <= 4 strings, "logprobs" 0..20, "presence_penalty", "frequency_penalty" -2..2 (0),
//    "repetition_penalty" (0,100] (1), "logit_bias" {id: -100..100}, "ignore_eos", "stream"}
//   -> {model, prompt, text, tokens, finish_reason length|stop|eos, logprobs?, prompt_tokens,
//       cached_tokens, generated_tokens, timings}
//   stream: one SSE event per token {id, text, logprob, top?}, then a final
//       {done: true, ...the fields above}
//
// A token's logprob and top list are those of the raw distribution (temperature 1, no
// penalties), whatever the sampling used.
#include <stdlib.h>
#include <string.h>

#include "job.h"

typedef struct {
    int *prompt; // (n_prompt) ids
    size_t n_prompt;
    size_t n_logprobs; // top logprobs per token
    cJSON *j_ids;      // generated ids
    cJSON *j_logprobs; // per-token objects (when n_logprobs > 0)
} Generate;

// {"id", "text", "logprob", "top": [{id, text, bytes, logprob}...]} of one generated token (a
// candidate's text as api_token_logprob_text gives it, its bytes beside).
static cJSON *generate_token_json(const Tokenizer *tok, const SchedToken *t, int with_top) {
    cJSON *j_t = cJSON_CreateObject(), *j_top = NULL;
    char *s = strndup(t->text, t->text_len);
    if (!j_t || !s || !cJSON_AddNumberToObject(j_t, "id", t->id) ||
        !cJSON_AddStringToObject(j_t, "text", s) ||
        !cJSON_AddNumberToObject(j_t, "logprob", t->logprob) ||
        (with_top && !(j_top = cJSON_AddArrayToObject(j_t, "top"))))
        goto fail;
    for (size_t r = 0; j_top && r < t->n_candidates; r++) {
        const KgCandidate *c = &t->candidates[r];
        char *bytes = NULL;
        size_t n = 0;
        char *text = api_token_logprob_text(tok, c->id, &bytes, &n);
        cJSON *j_c = cJSON_CreateObject(), *j_bytes = NULL;
        int ok = text && cJSON_AddItemToArray(j_top, j_c) &&
                 cJSON_AddNumberToObject(j_c, "id", c->id) &&
                 cJSON_AddStringToObject(j_c, "text", text) &&
                 (j_bytes = cJSON_AddArrayToObject(j_c, "bytes")) &&
                 cJSON_AddNumberToObject(j_c, "logprob", c->logprob);
        for (size_t k = 0; ok && k < n; k++)
            ok = cJSON_AddItemToArray(j_bytes, cJSON_CreateNumber((unsigned char)bytes[k]));
        free(text);
        free(bytes);
        if (!ok) goto fail;
    }
    free(s);
    return j_t;
fail:
    free(s);
    cJSON_Delete(j_t);
    return NULL;
}

static int generate_token(JobRequest *job, size_t i, const SchedToken *t) {
    (void)i;
    Generate *g = job->ctx;
    if (t->id >= 0 && !cJSON_AddItemToArray(g->j_ids, cJSON_CreateNumber(t->id))) return KG_ENOMEM;
    if (g->j_logprobs &&
        !cJSON_AddItemToArray(g->j_logprobs, generate_token_json(job->model->tok, t, 1)))
        return KG_ENOMEM;
    if (job->stream)
        return job_sse_json(job, generate_token_json(job->model->tok, t, g->n_logprobs > 0));
    return KG_OK;
}

// The reply's fields (whole reply) or the final event's (stream: with "done": true).
static cJSON *generate_summary(JobRequest *job, int final_event) {
    Generate *g = job->ctx;
    SchedStats st;
    sched_seq_stats(job->choices[0].sched_seq, &st);
    const char *text = job->choices[0].text.p ? job->choices[0].text.p : "";
    cJSON *j = cJSON_CreateObject();
    if (!j || (final_event && !cJSON_AddTrueToObject(j, "done")) ||
        (!final_event && !cJSON_AddStringToObject(j, "model", job->model->name)) ||
        (!final_event &&
         !cJSON_AddItemToObject(j, "prompt", api_ids_json(g->prompt, g->n_prompt))) ||
        !cJSON_AddStringToObject(j, "text", text) ||
        !cJSON_AddItemReferenceToObject(j, "tokens", g->j_ids) ||
        !cJSON_AddStringToObject(j, "finish_reason", job_finish_reason(job, 0, 0)) ||
        (!final_event && g->j_logprobs &&
         !cJSON_AddItemReferenceToObject(j, "logprobs", g->j_logprobs)) ||
        !cJSON_AddNumberToObject(j, "prompt_tokens", (double)g->n_prompt) ||
        !cJSON_AddNumberToObject(j, "cached_tokens", (double)st.cached_tokens) ||
        !cJSON_AddNumberToObject(j, "generated_tokens", (double)st.generated_tokens) ||
        !api_add_timings(j, &st)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int generate_choice_end(JobRequest *job, size_t i) {
    (void)i;
    return job_sse_json(job, generate_summary(job, 1));
}

static cJSON *generate_reply(JobRequest *job) { return generate_summary(job, 0); }

static void generate_free(void *ctx) {
    Generate *g = ctx;
    if (!g) return;
    free(g->prompt);
    cJSON_Delete(g->j_ids);
    cJSON_Delete(g->j_logprobs);
    free(g);
}

static const JobHooks GENERATE_HOOKS = {.token = generate_token,
                                        .choice_end = generate_choice_end,
                                        .reply = generate_reply,
                                        .free = generate_free};

enum MHD_Result ep_generate(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    ApiSampling s = {0};
    Generate *g = calloc(1, sizeof *g);
    JobRequest *job = NULL;
    int rc = g ? api_model(app, j_req, &served, err) : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) rc = api_sampling(served, j_req, &s, 32, 1, &param, err);
    if (!rc) rc = api_prompt(served, j_req, &g->prompt, &g->n_prompt, &param, err);
    if (!rc) {
        g->n_logprobs = (size_t)s.n_logprobs;
        if (!(g->j_ids = cJSON_CreateArray()) ||
            (g->n_logprobs && !(g->j_logprobs = cJSON_CreateArray())) ||
            !(job = job_new(served, &GENERATE_HOOKS, g, 1, "gen", s.stream)))
            rc = kg_err(err, KG_ENOMEM, "out of memory");
    }
    if (rc) {
        generate_free(g);
        api_sampling_free(&s);
        return srv_reply_kg(r, rc, err, param);
    }
    SchedParams p = api_sched_params(&s, g->prompt, g->n_prompt);
    ret = job_run(r, job, &p);
    api_sampling_free(&s); // sched_submit copied what it keeps
    return ret;
}
