// ep_next_token.c — POST /v1/next-token: the Explorer's call.
//
//   {"text"|"tokens", "top_k" 1..100 (10), "temperature" (0,100] (1), "speculate" (false),
//    "explain" {"lens" (false), "top_k" 1..20 (5), "attention" (false), "position" (-1: the
//    last prompt token)} (absent: none)}
//   -> {model, tokens, candidates [{id, piece, text, display, bytes, prob, logprob}] best first,
//       entropy_bits, candidates_mass, prompt_tokens, cached_tokens,
//       timings {total_ms, queue_ms, prefill_ms, decode_ms},
//       explain? {lens?: {layers [{layer, top [token..]}], candidates [{token.., ranks, probs}],
//                         answer {id, first_layer, rank_before}},
//                 attention?: {position, layers, heads, weights (L, NH, P), mean (L, P)}}}
//
// "top_k" is the answer's size: n_candidates from here to the engine (SchedParams). The
// probabilities are the full-vocabulary softmax of the logits divided by temperature;
// entropy_bits is that distribution's entropy over the whole vocabulary (exact: the engine
// computes it from the full row of logits) and candidates_mass the sum of the candidates'
// probabilities (what the rest of the vocabulary leaves).
// "speculate": when idle, the engine precomputes the answers for the top candidates, so that
// asking next with one of them appended is answered from the prefix cache (the next click).
// "explain" (model/gpt2_capture.h): the logit lens at the last prompt position (layer 0 is the
// embedding, layer l the residual stream after block l, each through ln_f and the LM head at
// temperature 1: its top_k tokens, the answer's first 20 candidates' rank and probability at
// every layer, and the layer where the answer's top-1 first is top-1 with its rank before),
// and the attention of prompt position "position" over positions 0..position in every layer
// and head, and their mean per layer (probabilities to 6 decimals). Unknown fields of it are
// refused. It costs a prompt run without the prefix cache (all of it for the attention, its
// last token for the lens) and the LM head over L + 1 rows.
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "job.h"
#include "server/http/json_in.h"

#define NEXT_LENS_MAX_K 20 // lens tokens per layer

typedef struct {
    int lens, attention;
    long long top_k, position; // position -1: the last prompt token
} NextExplain;

typedef struct {
    long long top_k;
    double temperature;
    int speculate;
    NextExplain explain;
} NextParams;

typedef struct {
    int *prompt; // (n_prompt) ids
    size_t n_prompt;
    cJSON *j_candidates;
    cJSON *j_explain; // NULL when not asked
    double entropy;   // nats, the engine's
    double mass;      // the candidates' probabilities summed
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

// A JSON array of the n probabilities p[0 .. n) to 6 decimals ("0.419913", "1", "0"):
// a raw node printed here at ~8 bytes a value, not a cJSON number each (74k of them at 512
// tokens on KoGPT2-base: the per-node cost was most of the reply's time). NULL on OOM.
static cJSON *next_probs6_json(const float *p, size_t n) {
    char *buf = malloc(n * 10 + 3); // "0.123456," at most per value
    if (!buf) return NULL;
    size_t len = 0;
    buf[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        double x = p[i] < 0 ? 0 : p[i] > 1 ? 1 : p[i];
        int w = snprintf(buf + len, 10, "%.6f", x);
        while (w > 1 && buf[len + w - 1] == '0') // "0.500000" -> "0.5", "0.000000" -> "0"
            w--;
        if (buf[len + w - 1] == '.') w--;
        len += (size_t)w;
        if (i + 1 < n) buf[len++] = ',';
    }
    buf[len++] = ']';
    buf[len] = '\0';
    cJSON *j = cJSON_CreateRaw(buf);
    free(buf);
    return j;
}

// The lens: {layers [{layer, top}], candidates [{token.., ranks, probs}], answer}.
static cJSON *next_lens_json(const Tokenizer *tok, const Gpt2Lens *l) {
    cJSON *j = cJSON_CreateObject(), *j_layers = cJSON_AddArrayToObject(j, "layers");
    cJSON *j_cands = cJSON_AddArrayToObject(j, "candidates"), *j_answer;
    int ok = j_layers && j_cands;
    for (size_t st = 0; ok && st < l->n_stages; st++) {
        cJSON *j_st = cJSON_CreateObject(), *j_top;
        ok = cJSON_AddItemToArray(j_layers, j_st) &&
             cJSON_AddNumberToObject(j_st, "layer", (double)st) &&
             (j_top = cJSON_AddArrayToObject(j_st, "top"));
        for (size_t i = 0; ok && i < l->k; i++)
            ok = cJSON_AddItemToArray(j_top, next_candidate_json(tok, &l->top[st * l->k + i]));
    }
    for (size_t t = 0; ok && t < l->n_tracked; t++) {
        cJSON *j_c = api_token_json(tok, l->tracked[t]), *j_ranks, *j_probs;
        ok = cJSON_AddItemToArray(j_cands, j_c) &&
             (j_ranks = cJSON_AddArrayToObject(j_c, "ranks")) &&
             (j_probs = cJSON_AddArrayToObject(j_c, "probs"));
        for (size_t st = 0; ok && st < l->n_stages; st++) {
            size_t at = st * l->n_tracked + t;
            ok = cJSON_AddItemToArray(j_ranks, cJSON_CreateNumber((double)l->rank[at])) &&
                 cJSON_AddItemToArray(j_probs, cJSON_CreateNumber(exp(l->logprob[at])));
        }
    }
    ok = ok && (j_answer = cJSON_AddObjectToObject(j, "answer")) &&
         cJSON_AddNumberToObject(j_answer, "id", l->final_id) &&
         cJSON_AddNumberToObject(j_answer, "first_layer", (double)l->first_top_stage) &&
         (l->first_top_stage
              ? cJSON_AddNumberToObject(j_answer, "rank_before", (double)l->rank_before) != NULL
              : cJSON_AddNullToObject(j_answer, "rank_before") != NULL);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

// The attention: {position, layers, heads, weights (L, NH, P), mean (L, P)}.
static cJSON *next_attention_json(const SchedExplain *e) {
    const size_t L = e->layers, NH = e->heads, P = e->attention_pos + 1;
    float *mean = malloc(P * sizeof *mean);
    cJSON *j = cJSON_CreateObject(), *j_w = NULL, *j_mean = NULL;
    int ok = mean && j && cJSON_AddNumberToObject(j, "position", (double)e->attention_pos) &&
             cJSON_AddNumberToObject(j, "layers", (double)L) &&
             cJSON_AddNumberToObject(j, "heads", (double)NH) &&
             (j_w = cJSON_AddArrayToObject(j, "weights")) &&
             (j_mean = cJSON_AddArrayToObject(j, "mean"));
    for (size_t l = 0; ok && l < L; l++) {
        cJSON *j_layer = cJSON_CreateArray();
        ok = cJSON_AddItemToArray(j_w, j_layer);
        for (size_t h = 0; ok && h < NH; h++)
            ok =
                cJSON_AddItemToArray(j_layer, next_probs6_json(e->attention + (l * NH + h) * P, P));
        for (size_t p = 0; ok && p < P; p++) { // the heads' mean
            double sum = 0;
            for (size_t h = 0; h < NH; h++)
                sum += e->attention[(l * NH + h) * P + p];
            mean[p] = (float)(sum / (double)NH);
        }
        ok = ok && cJSON_AddItemToArray(j_mean, next_probs6_json(mean, P));
    }
    free(mean);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static cJSON *next_explain_json(const Tokenizer *tok, const SchedExplain *e) {
    cJSON *j = cJSON_CreateObject();
    cJSON *j_lens = j && e->lens.n_stages ? next_lens_json(tok, &e->lens) : NULL;
    cJSON *j_att = j && e->attention ? next_attention_json(e) : NULL;
    int ok = j && (!e->lens.n_stages || cJSON_AddItemToObject(j, "lens", j_lens)) &&
             (!e->attention || cJSON_AddItemToObject(j, "attention", j_att));
    if (!ok) {
        cJSON_Delete(j_lens);
        cJSON_Delete(j_att);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

// The engine's one entry for a next-token job carries the candidates (and the explanation).
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
    if (t->explain && !(nt->j_explain = next_explain_json(job->model->tok, t->explain)))
        return KG_ENOMEM;
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
    if (nt->j_explain && !cJSON_AddItemToObject(j_root, "explain", nt->j_explain)) {
        cJSON_Delete(j_root);
        return NULL;
    }
    nt->j_explain = NULL; // moved into the reply
    return j_root;
}

static void next_free(void *ctx) {
    NextToken *nt = ctx;
    if (!nt) return;
    free(nt->prompt);
    cJSON_Delete(nt->j_candidates);
    cJSON_Delete(nt->j_explain);
    free(nt);
}

static const JobHooks NEXT_TOKEN_HOOKS = {
    .token = next_token, .reply = next_reply, .free = next_free};

#define EXPLAIN(m) offsetof(NextExplain, m)

// "explain"'s fields; any other is refused by name.
static const ApiField EXPLAIN_FIELDS[] = {
    {"lens", API_BOOL, EXPLAIN(lens), .def = 0},
    {"top_k", API_INT, EXPLAIN(top_k), .def = 5, .lo = 1, .hi = NEXT_LENS_MAX_K},
    {"attention", API_BOOL, EXPLAIN(attention), .def = 0},
    {"position", API_INT, EXPLAIN(position), .def = -1, .lo = -1, .hi_is = API_HI_N_CTX},
};

// "explain": absent or null (nothing), or an object of EXPLAIN_FIELDS. A bad field inside is
// reported as "explain" with its own name in the message ("explain.top_k must be ...").
static int next_read_explain(const ApiRequest *q, const ApiField *f, void *out, const char **param,
                             char *err) {
    NextExplain *e = &((NextParams *)out)->explain;
    *e = (NextExplain){.top_k = 5, .position = -1};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(q->j_req, f->name);
    if (!j || cJSON_IsNull(j)) return KG_OK;
    if (!cJSON_IsObject(j))
        return kg_err(err, KG_EINVAL,
                      "explain must be an object: {\"lens\": true, \"attention\": true, ...}");
    const size_t n = sizeof EXPLAIN_FIELDS / sizeof *EXPLAIN_FIELDS;
    ApiRequest sub = *q;
    sub.j_req = j;
    const char *inner;
    char why[KG_ERRLEN];
    int rc = api_known_fields(j, EXPLAIN_FIELDS, n, "explain", err);
    if (!rc && (rc = api_fields(&sub, EXPLAIN_FIELDS, n, e, &inner, why)))
        kg_err(err, rc, "explain.%s", why);
    *param = f->name;
    return rc;
}

#define NEXT(m) offsetof(NextParams, m)

static const ApiField NEXT_FIELDS[] = {
    {"top_k", API_INT, NEXT(top_k), .def = 10, .lo = 1, .hi = API_MAX_CANDIDATES},
    {"temperature", API_NUM, NEXT(temperature), .def = 1, .lo = 1e-3, .hi = 100},
    {"speculate", API_BOOL, NEXT(speculate), .def = 0},
    {"explain", API_READ, .read = next_read_explain},
};

// The explanation asked for, over a prompt of n tokens: the position must be in it.
static int next_explain_check(NextExplain *e, size_t n, const char **param, char *err) {
    if (e->position < 0) e->position = (long long)n - 1;
    if ((size_t)e->position < n) return KG_OK;
    *param = "explain";
    return kg_err(err, KG_ERANGE, "explain.position must be in 0..%zu (the prompt's tokens)",
                  n - 1);
}

enum MHD_Result ep_next_token(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    NextParams np = {0};
    NextToken *nt = calloc(1, sizeof *nt);
    int rc = nt ? api_model(app, j_req, &served, err) : kg_err(err, KG_ENOMEM, "out of memory");
    const ApiRequest q = {.model = served, .j_req = j_req};
    size_t n_fields = sizeof NEXT_FIELDS / sizeof *NEXT_FIELDS;
    if (!rc) rc = api_fields(&q, NEXT_FIELDS, n_fields, &np, &param, err);
    if (!rc) rc = api_prompt(served, j_req, &nt->prompt, &nt->n_prompt, &param, err);
    if (!rc) rc = next_explain_check(&np.explain, nt->n_prompt, &param, err);
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
                     .n_candidates = (size_t)np.top_k,
                     .temperature = (float)np.temperature,
                     .speculate = np.speculate,
                     .lens = np.explain.lens,
                     .lens_k = (size_t)np.explain.top_k,
                     .attention = np.explain.attention,
                     .attention_pos = (size_t)np.explain.position};
    return job_run(r, job, &p);
}
