// ep_score.c — POST /v1/score: how surprising each prompt token was (the Explorer colours the
// prompt by it, as GLTR did).
//
//   {"text"|"tokens", "top_alternatives" 0..SCORE_MAX_ALTERNATIVES (0)}
//   -> {model, tokens, scores [{id, piece, text, display, bytes, logprob, prob, rank, top {id,
//       piece, text, display, bytes, logprob, prob}, alternatives [top_alternatives of them, as
//       top] (only when asked)}] one per prompt token, prompt_tokens, cached_tokens, timings}
//      (a token's fields as api_token_json gives them: text as /v1/detokenize has it)
//
// A token's logprob and prob are those of the full-vocabulary softmax of the raw logits at the
// prefix before it (what /v1/next-token answers there); rank is its place among all the
// vocabulary's tokens there, exact however far down (1: the model's own top choice, top);
// alternatives are the model's best tokens there, best first (GLTR's tooltip). The first token,
// which nothing predicts, has logprob, prob, rank, top and alternatives null.
//
// Cost. A position's score depends only on the tokens up to it, so positions of an earlier
// request sharing the prefix come from the model's memo (score_memo.h; cached_tokens counts
// them). The positions left become engine sequences, and which kind is this endpoint's choice
// (score_jobs): when at most SCORE_TAIL are left (a click appends one token; typing changes the
// last one or two), each is a next-token job at its prefix, answered from the engine's prefix
// cache when the Explorer has asked there (no forward pass). More are one prompt-scoring job:
// one forward pass over the whole prompt. The engine's batch planner then schedules either
// kind as it does every job.
#include <math.h>
#include <stdlib.h>

#include "job.h"
#include "server/engine/score_memo.h"
#include "server/http/json_in.h"

#define SCORE_TAIL 2 // positions left that go through the prefix cache

typedef struct {
    int *prompt; // (n_prompt) ids
    size_t n_prompt;
    ScorePos *pos;      // (n_prompt)
    size_t n_known;     // positions 0 .. n_known-1 came from the memo
    int whole;          // one prompt-scoring job (else one next-token job per position left)
    size_t next_prompt; // whole: the next prompt position the engine reports
    ScoreMemo *memo;    // the model's; NULL (out of memory): nothing is remembered
    size_t n_alt;       // alternatives per position in the reply (top_alternatives)
} Score;

// A position's score from the candidates there (best first): the best SCORE_MAX_ALTERNATIVES
// are kept whatever the request asks, so the memo serves any later one. rank and logprob are
// the engine's when it gives a rank; else (rank 0) the candidates are the whole vocabulary and
// the token's place among them is its rank.
static void score_set(ScorePos *p, const KgCandidate *c, size_t n, float logprob, size_t rank) {
    p->scored = 1;
    p->logprob = logprob;
    p->rank = (int)rank;
    for (size_t r = 0; !rank && r < n; r++)
        if (c[r].id == p->id) {
            p->rank = (int)r + 1;
            p->logprob = c[r].logprob;
            break;
        }
    p->n_alt = n < SCORE_MAX_ALTERNATIVES ? n : SCORE_MAX_ALTERNATIVES;
    for (size_t r = 0; r < p->n_alt; r++) {
        p->alt_id[r] = c[r].id;
        p->alt_logprob[r] = c[r].logprob;
    }
}

static int score_token(JobRequest *job, size_t i, const SchedToken *t) {
    Score *s = job->ctx;
    if (s->whole) { // the prompt's entries in order; the first has no candidates
        if (!t->prompt) return KG_OK;
        size_t k = s->next_prompt++;
        if (k > 0 && k < s->n_prompt)
            score_set(&s->pos[k], t->candidates, t->n_candidates, t->logprob, t->rank);
        return KG_OK;
    }
    if (t->id == -1 && t->n_candidates) // choice i: next-token at the prefix of position k
        score_set(&s->pos[s->n_known + i], t->candidates, t->n_candidates, NAN, 0);
    return KG_OK;
}

// api_token_json's {"id", "piece", "text", "display", "bytes"} of id, its "logprob" and
// "prob" (nulls when not scored).
static cJSON *score_piece_json(const Tokenizer *tok, int id, float logprob, int scored) {
    cJSON *j = api_token_json(tok, id);
    int ok = j != NULL;
    if (ok)
        ok = scored ? cJSON_AddNumberToObject(j, "logprob", logprob) &&
                          cJSON_AddNumberToObject(j, "prob", expf(logprob))
                    : cJSON_AddNullToObject(j, "logprob") && cJSON_AddNullToObject(j, "prob");
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

// The best n_alt of p's alternatives, or null for the first token.
static cJSON *score_alternatives_json(const Tokenizer *tok, const ScorePos *p, size_t n_alt) {
    if (!p->scored) return cJSON_CreateNull();
    cJSON *j_alt = cJSON_CreateArray();
    for (size_t r = 0; j_alt && r < n_alt && r < p->n_alt; r++)
        if (!cJSON_AddItemToArray(j_alt,
                                  score_piece_json(tok, p->alt_id[r], p->alt_logprob[r], 1))) {
            cJSON_Delete(j_alt);
            return NULL;
        }
    return j_alt;
}

// A position's entry: the token, its rank, the model's top choice and, when asked (n_alt > 0),
// its best n_alt.
static cJSON *score_pos_json(const Tokenizer *tok, const ScorePos *p, size_t n_alt) {
    cJSON *j = score_piece_json(tok, p->id, p->logprob, p->scored);
    int ok = j && (p->scored ? cJSON_AddNumberToObject(j, "rank", p->rank) != NULL
                             : cJSON_AddNullToObject(j, "rank") != NULL);
    cJSON *j_top = !ok         ? NULL
                   : p->scored ? score_piece_json(tok, p->alt_id[0], p->alt_logprob[0], 1)
                               : cJSON_CreateNull();
    if (ok && !cJSON_AddItemToObject(j, "top", j_top)) {
        cJSON_Delete(j_top);
        ok = 0;
    }
    cJSON *j_alt = ok && n_alt ? score_alternatives_json(tok, p, n_alt) : NULL;
    if (ok && n_alt && !cJSON_AddItemToObject(j, "alternatives", j_alt)) {
        cJSON_Delete(j_alt);
        ok = 0;
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

// The reply; timings are the slowest choice's (they ran in one batch).
static cJSON *score_reply_of(const ApiModel *served, const Score *s, JobRequest *job) {
    SchedStats st = {0}, one;
    size_t cached = s->n_known;
    for (size_t i = 0; job && i < job->n_choices; i++) {
        sched_seq_stats(job->choices[i].sched_seq, &one);
        if (one.total_ms >= st.total_ms) st = one;
        if (!s->whole) cached += one.cached_tokens == one.prompt_tokens; // from the prefix cache
    }
    cJSON *j_root = cJSON_CreateObject(), *j_scores = NULL;
    if (!j_root || !cJSON_AddStringToObject(j_root, "model", served->name) ||
        !cJSON_AddItemToObject(j_root, "tokens", api_ids_json(s->prompt, s->n_prompt)) ||
        !(j_scores = cJSON_AddArrayToObject(j_root, "scores")))
        goto fail;
    for (size_t k = 0; k < s->n_prompt; k++)
        if (!cJSON_AddItemToArray(j_scores, score_pos_json(served->tok, &s->pos[k], s->n_alt)))
            goto fail;
    if (!cJSON_AddNumberToObject(j_root, "prompt_tokens", (double)s->n_prompt) ||
        !cJSON_AddNumberToObject(j_root, "cached_tokens", (double)cached) ||
        !api_add_timings(j_root, &st))
        goto fail;
    return j_root;
fail:
    cJSON_Delete(j_root);
    return NULL;
}

static cJSON *score_reply(JobRequest *job) {
    Score *s = job->ctx;
    for (size_t k = 1; k < s->n_prompt; k++)
        if (!s->pos[k].scored) return NULL; // the engine left a position out: 503
    score_memo_insert(s->memo, s->prompt, s->pos, s->n_prompt);
    return score_reply_of(job->model, s, job);
}

static void score_free(void *ctx) {
    Score *s = ctx;
    if (!s) return;
    free(s->prompt);
    free(s->pos);
    free(s);
}

static const JobHooks SCORE_HOOKS = {
    .token = score_token, .reply = score_reply, .free = score_free};

// The engine sequences that score positions s->n_known .. (at least one is left): one next-token
// job at each prefix when at most SCORE_TAIL are left (the prefix cache may answer them), else
// one prompt-scoring job. Sets s->whole; returns how many jobs p holds.
static size_t score_jobs(const ApiModel *served, Score *s, SchedParams p[SCORE_TAIL]) {
    size_t n_left = s->n_prompt - s->n_known;
    s->whole = n_left > SCORE_TAIL;
    if (s->whole) { // every position's rank and best tokens in one pass
        p[0] = (SchedParams){.kind = SCHED_GENERATE,
                             .tokens = s->prompt,
                             .n_tokens = s->n_prompt,
                             .n_logprobs = SCORE_MAX_ALTERNATIVES < served->vocab_size
                                               ? SCORE_MAX_ALTERNATIVES
                                               : served->vocab_size,
                             .temperature = 1,
                             .top_p = 1,
                             .score_prompt = 1};
        return 1;
    }
    // the whole vocabulary ranked at each prefix (from the prefix cache's logits, no forward
    // pass): the token's place there is its exact rank
    for (size_t i = 0; i < n_left; i++)
        p[i] = (SchedParams){.kind = SCHED_NEXT_TOKEN,
                             .tokens = s->prompt,
                             .n_tokens = s->n_known + i,
                             .n_candidates = served->vocab_size,
                             .temperature = 1};
    return n_left;
}

enum MHD_Result ep_score(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    long long n_alt = 0;
    Score *s = calloc(1, sizeof *s);
    int rc = s ? api_model(app, j_req, &served, err) : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc)
        rc = json_int(j_req, param = "top_alternatives", &n_alt, 0, 0, SCORE_MAX_ALTERNATIVES, err);
    if (!rc) rc = api_prompt(served, j_req, &s->prompt, &s->n_prompt, &param, err);
    if (!rc && !(s->pos = calloc(s->n_prompt, sizeof *s->pos)))
        rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        score_free(s);
        return srv_reply_kg(r, rc, err, param);
    }
    for (size_t k = 0; k < s->n_prompt; k++)
        s->pos[k] = (ScorePos){.id = s->prompt[k]};
    s->n_alt = (size_t)n_alt;
    s->memo = served->score_memo;
    s->n_known = score_memo_lookup(s->memo, s->prompt, s->n_prompt, s->pos);
    if (s->n_known == 0) s->n_known = 1; // the first token has no score
    if (s->n_known == s->n_prompt) {     // all remembered: no engine work
        enum MHD_Result out = srv_reply_json(r, 200, score_reply_of(served, s, NULL));
        score_free(s);
        return out;
    }
    SchedParams p[SCORE_TAIL];
    size_t n_jobs = score_jobs(served, s, p);
    JobRequest *job = job_new(served, &SCORE_HOOKS, s, n_jobs, "score", 0);
    if (!job) {
        score_free(s);
        return srv_reply_kg(r, KG_ENOMEM, "out of memory", NULL);
    }
    return job_run(r, job, p);
}
