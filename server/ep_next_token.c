// ep_next_token.c — POST /v1/next-token: the Explorer's call.
//
//   {"text"|"tokens", "top_k" 1..100 (10), "temperature" (0,100] (1), "speculate" (false)}
//   -> {model, tokens, candidates [{id, piece, text, display, bytes, prob, logprob}] best first,
//       entropy_bits, candidates_mass, prompt_tokens, cached_tokens,
//       timings {total_ms, queue_ms, prefill_ms, decode_ms}}
//
// "top_k" is the answer's size: n_candidates from here to the engine (SchedParams). The
// probabilities are the full-vocabulary softmax of the logits divided by temperature;
// entropy_bits is that distribution's entropy over the whole vocabulary (exact: the engine
// computes it from the full row of logits) and candidates_mass the sum of the candidates'
// probabilities (what the rest of the vocabulary leaves).
// "speculate": when idle, the engine precomputes the answers for the top candidates, so that
// asking next with one of them appended is answered from the prefix cache (the next click).
#include <math.h>
#include <stdlib.h>

#include "job.h"
#include "server/http/json_in.h"

typedef struct {
    int *prompt; // (n_prompt) ids
    size_t n_prompt;
    cJSON *j_candidates;
    double entropy; // nats, the engine's
    double mass;    // the candidates' probabilities summed
} NextToken;

// One candidate: api_token_json's {"id", "piece", "text", "display", "bytes"} and its "prob",
// "logprob".
static cJSON *next_candidate_json(const Tokenizer *tok, const KgCandidate *c) {
    cJSON *j_c = api_token_json(tok, c->id);
    if (!j_c || !cJSON_AddNumberToObject(j_c, "prob", c->prob) ||
        !cJSON_AddNumberToObject(j_c, "logprob", c->logprob)) {
        cJSON_Delete(j_c);
        return NULL;
    }
    return j_c;
}

// The engine's one entry for a next-token job carries the candidates.
static int next_token(JobRequest *job, size_t i, const SchedToken *t) {
    (void)i;
    NextToken *nt = job->ctx;
    nt->entropy = t->entropy;
    for (size_t r = 0; r < t->n_candidates; r++) { // best first
        if (!cJSON_AddItemToArray(nt->j_candidates,
                                  next_candidate_json(job->model->tok, &t->candidates[r])))
            return KG_ENOMEM;
        nt->mass += t->candidates[r].prob;
    }
    return KG_OK;
}

static cJSON *next_reply(JobRequest *job) {
    NextToken *nt = job->ctx;
    SchedStats st;
    sched_seq_stats(job->choices[0].sched_seq, &st);
    cJSON *j_root = cJSON_CreateObject();
    if (!j_root || !cJSON_AddStringToObject(j_root, "model", job->model->name) ||
        !cJSON_AddItemToObject(j_root, "tokens", api_ids_json(nt->prompt, nt->n_prompt)) ||
        !cJSON_AddItemToObject(j_root, "candidates", nt->j_candidates)) {
        cJSON_Delete(j_root);
        return NULL;
    }
    nt->j_candidates = NULL; // moved into the reply
    if (!cJSON_AddNumberToObject(j_root, "entropy_bits", nt->entropy / M_LN2) ||
        !cJSON_AddNumberToObject(j_root, "candidates_mass", nt->mass) ||
        !cJSON_AddNumberToObject(j_root, "prompt_tokens", (double)nt->n_prompt) ||
        !cJSON_AddNumberToObject(j_root, "cached_tokens", (double)st.cached_tokens) ||
        !api_add_timings(j_root, &st)) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
}

static void next_free(void *ctx) {
    NextToken *nt = ctx;
    if (!nt) return;
    free(nt->prompt);
    cJSON_Delete(nt->j_candidates);
    free(nt);
}

static const JobHooks NEXT_TOKEN_HOOKS = {
    .token = next_token, .reply = next_reply, .free = next_free};

enum MHD_Result ep_next_token(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    long long n_candidates;
    double temperature = 1;
    int speculate = 0;
    NextToken *nt = calloc(1, sizeof *nt);
    int rc = nt ? api_model(app, j_req, &served, err) : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) rc = json_int(j_req, param = "top_k", &n_candidates, 10, 1, API_MAX_CANDIDATES, err);
    if (!rc) rc = json_num(j_req, param = "temperature", &temperature, 1, 1e-3, 100, err);
    if (!rc) rc = json_bool(j_req, param = "speculate", &speculate, 0, err);
    if (!rc) rc = api_prompt(served, j_req, &nt->prompt, &nt->n_prompt, &param, err);
    if (!rc && !(nt->j_candidates = cJSON_CreateArray()))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    JobRequest *job = rc ? NULL : job_new(served, &NEXT_TOKEN_HOOKS, nt, 1, "next", 0);
    if (!rc && !job) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        next_free(nt);
        return srv_reply_kg(r, rc, err, param);
    }
    SchedParams p = {.kind = SCHED_NEXT_TOKEN,
                     .tokens = nt->prompt,
                     .n_tokens = nt->n_prompt,
                     .n_candidates = (size_t)n_candidates,
                     .temperature = (float)temperature,
                     .speculate = speculate};
    return job_run(r, job, &p);
}
