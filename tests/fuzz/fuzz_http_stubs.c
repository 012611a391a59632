// fuzz_http_stubs.c — stand-ins for what the endpoints (ep_*.c, job.c) call below them: the
// reply helpers of http.c (no MHD: a reply is recorded on the request and its JSON printed
// and checked) and the engine of sched.c (no model: sched_submit() checks that the request
// is valid, then the job finishes at once with one made-up token, so the reply and SSE code
// runs too). Only fuzz_http links this file.
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_http.h"
#include "server/http/json_in.h"
#include "server/http/metrics.h"

static ApiApp *fuzz_app;
static int fuzz_sched_token;

void fuzz_http_set_app(ApiApp *app) { fuzz_app = app; }
Sched *fuzz_http_sched(void) { return (Sched *)&fuzz_sched_token; }

// --- http.c ---

void *srv_app(const SrvServer *s) {
    (void)s;
    return fuzz_app;
}
int srv_draining(const SrvServer *s) {
    (void)s;
    return 0;
}
size_t srv_in_flight(const SrvServer *s) {
    (void)s;
    return 1;
}
void srv_gauges(SrvServer *s, SrvGauges *g) {
    (void)s;
    memset(g, 0, sizeof *g);
}

// One reply per request, and its body is valid UTF-8 (it goes out as JSON or text).
static enum MHD_Result fuzz_reply(SrvReq *r, int status, const char *body, size_t len) {
    FUZZ_CHECK(r->status == 0);
    FUZZ_CHECK(json_utf8_valid(body, len, NULL));
    r->status = status;
    r->bytes_out = len;
    return MHD_YES;
}

enum MHD_Result srv_reply(SrvReq *r, int status, const char *type, const char *body, size_t len,
                          ...) {
    (void)type;
    return fuzz_reply(r, status, body, len);
}

enum MHD_Result srv_reply_json(SrvReq *r, int status, cJSON *j_root) {
    char *text = j_root ? cJSON_PrintUnformatted(j_root) : NULL;
    cJSON_Delete(j_root);
    enum MHD_Result ret =
        text ? fuzz_reply(r, status, text, strlen(text)) : fuzz_reply(r, 503, "", 0);
    cJSON_free(text);
    return ret;
}

enum MHD_Result srv_reply_error(SrvReq *r, int status, const char *message, const char *param) {
    (void)param;
    return fuzz_reply(r, status, message, strlen(message));
}

cJSON *srv_error_json(int status, const char *message, const char *param) {
    cJSON *j = cJSON_CreateObject(), *j_e = cJSON_AddObjectToObject(j, "error");
    if (!j_e || !cJSON_AddNumberToObject(j_e, "code", status) ||
        !cJSON_AddStringToObject(j_e, "message", message) ||
        !(param ? cJSON_AddStringToObject(j_e, "param", param)
                : cJSON_AddNullToObject(j_e, "param"))) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *srv_req_error_json(const SrvReq *r, int status, const char *message, const char *param) {
    (void)r;
    return srv_error_json(status, message, param);
}

int srv_status_from_err(int kg_code) {
    switch (kg_code) {
    case KG_EINVAL:
        return 400;
    case KG_ENOTFOUND:
        return 404;
    case KG_ERANGE:
    case KG_EUNSUP:
        return 422;
    case KG_EBUSY:
        return 429;
    case KG_ECANCEL:
    case KG_ENOMEM:
        return 503;
    default:
        return 500;
    }
}

enum MHD_Result srv_reply_kg(SrvReq *r, int kg_code, const char *message, const char *param) {
    return srv_reply_error(r, srv_status_from_err(kg_code), message, param);
}

enum MHD_Result srv_stream_start(SrvReq *r, SrvPull pull) {
    FUZZ_CHECK(r->status == 0);
    r->status = 200;
    r->pull = pull;
    return MHD_YES;
}

int srv_wait(SrvReq *r) {
    (void)r;
    return 0; // every job is finished by the time anyone waits
}
void srv_wake(SrvReq *r) { (void)r; }
int srv_client_gone(SrvReq *r) {
    (void)r;
    return 0;
}

// Reads a streamed reply to its end (it must end: the job is finished), then completes.
void fuzz_http_complete(SrvReq *r) {
    for (int i = 0; r->pull; i++) {
        char buf[SRV_STREAM_BLOCK];
        ssize_t n = r->pull(r, buf, sizeof buf);
        FUZZ_CHECK(i < 10000 && n != 0 && n != MHD_CONTENT_READER_END_WITH_ERROR);
        if (n == MHD_CONTENT_READER_END_OF_STREAM) break;
        FUZZ_CHECK(n > 0 && (size_t)n <= sizeof buf);
    }
    if (r->done) r->done(r, 0);
    // a client's body gets 200, 400, 404 (a model not served) or 422: never a 500 (a bug) nor
    // a 503 (no OOM here)
    FUZZ_CHECK(r->status == 200 || r->status == 400 || r->status == 404 || r->status == 422);
}

// --- sched.h (sched.c, sched_seq.c) ---

struct SchedSeq {
    SchedParams p;
    int id;           // the one made-up token: the prompt's last
    int read;         // it was handed out
    size_t n_scored;  // scoring: prompt entries handed out
    char *text;       // its text
    KgCandidate *top; // n_top candidates
    size_t n_top;     // next-token: p.n_candidates; generate: p.n_logprobs
};

// Everything sched_submit() may assume of a request that passed validation.
static void fuzz_check_params(const SchedParams *p) {
    FUZZ_CHECK(p->n_tokens >= 1 && p->n_tokens <= fuzz_app->models[0].n_ctx);
    for (size_t i = 0; i < p->n_tokens; i++)
        FUZZ_CHECK(p->tokens[i] >= 0 && (size_t)p->tokens[i] < fuzz_app->models[0].vocab_size);
    FUZZ_CHECK(isfinite(p->temperature) && p->temperature >= 0 && p->temperature <= 100);
    if (p->kind == SCHED_NEXT_TOKEN) { // (/v1/score ranks the whole vocabulary at a position)
        FUZZ_CHECK(p->n_candidates >= 1 && p->n_candidates <= fuzz_app->models[0].vocab_size &&
                   p->temperature > 0);
        // explain (issue 36): the lens's tokens per layer, the attention's position in the prompt
        FUZZ_CHECK(!p->lens || (p->lens_k >= 1 && p->lens_k <= 20));
        FUZZ_CHECK(!p->attention || p->attention_pos < p->n_tokens);
        return;
    }
    FUZZ_CHECK(!p->lens && !p->attention);
    // a prompt-scoring job (echo + logprobs; /v1/score's 100 ranks) may generate nothing
    FUZZ_CHECK(p->kind == SCHED_GENERATE &&
               p->n_logprobs <= (p->score_prompt ? API_MAX_CANDIDATES : API_MAX_LOGPROBS));
    FUZZ_CHECK((p->max_tokens >= 1 || p->score_prompt) &&
               p->max_tokens <= fuzz_app->models[0].n_ctx);
    FUZZ_CHECK(p->top_k <= fuzz_app->models[0].vocab_size);
    FUZZ_CHECK(p->top_p > 0 && p->top_p <= 1);
    FUZZ_CHECK(p->seed < (1ull << 53));
    FUZZ_CHECK(p->n_stop <= 4 && (p->n_stop == 0 || p->stop));
    for (size_t i = 0; i < p->n_stop; i++)
        FUZZ_CHECK(p->stop[i] && json_utf8_valid(p->stop[i], strlen(p->stop[i]), NULL));
    const KgPenalties *pen = &p->penalties;
    FUZZ_CHECK(pen->presence >= -2 && pen->presence <= 2 && pen->frequency >= -2 &&
               pen->frequency <= 2 && pen->repetition >= 0 && pen->repetition <= 100);
    FUZZ_CHECK(pen->n_bias <= API_MAX_LOGIT_BIAS && (pen->n_bias == 0 || pen->bias));
    for (size_t i = 0; i < pen->n_bias; i++)
        FUZZ_CHECK(pen->bias[i].id >= 0 &&
                   (size_t)pen->bias[i].id < fuzz_app->models[0].vocab_size &&
                   pen->bias[i].bias >= -100 && pen->bias[i].bias <= 100);
}

int sched_submit(Sched *s, const SchedParams *p, void (*notify)(void *ctx), void *ctx,
                 SchedSeq **job, char *err) {
    (void)notify;
    (void)ctx;
    FUZZ_CHECK(s == fuzz_http_sched());
    fuzz_check_params(p);
    SchedSeq *j = calloc(1, sizeof *j);
    FUZZ_CHECK(j);
    j->p = *p;
    j->p.tokens = NULL; // not kept: the caller owns them
    j->p.stop = NULL;
    j->p.stop_tokens = NULL;
    j->p.penalties.bias = NULL;
    j->id = p->tokens[p->n_tokens - 1];
    j->text = tok_piece_text(fuzz_app->models[0].tok, j->id);
    j->n_top = p->kind == SCHED_NEXT_TOKEN ? p->n_candidates : p->n_logprobs;
    j->top = calloc(j->n_top ? j->n_top : 1, sizeof *j->top);
    FUZZ_CHECK(j->text && j->top);
    for (size_t k = 0; k < j->n_top; k++)
        j->top[k] = (KgCandidate){.id = p->tokens[k % p->n_tokens],
                                  .logit = 0,
                                  .prob = 1.0f / (float)(k + 2),
                                  .logprob = -logf((float)(k + 2))};
    *job = j;
    (void)err;
    return KG_OK;
}

// A scoring job first yields one entry per prompt token (the first with no score), as the
// engine does; then every job yields its one made-up token.
size_t sched_seq_read(SchedSeq *j, SchedToken *out, size_t cap, SchedState *state) {
    *state = SCHED_DONE_LENGTH;
    size_t n = 0;
    for (; j->p.score_prompt && j->n_scored < j->p.n_tokens && n < cap; j->n_scored++, n++)
        out[n] = (SchedToken){.id = j->id,
                              .logprob = j->n_scored ? -1.0f : NAN,
                              .text = j->text,
                              .text_len = strlen(j->text),
                              .candidates = j->n_scored ? j->top : NULL,
                              .n_candidates = j->n_scored ? j->n_top : 0,
                              .prompt = 1};
    if (n == cap) {
        *state = SCHED_RUNNING;
        return n;
    }
    if (j->read) return n;
    j->read = 1;
    int next = j->p.kind == SCHED_NEXT_TOKEN;
    out[n] = (SchedToken){.id = next ? -1 : j->id,
                          .logprob = next ? 0 : -1,
                          .text = next ? "" : j->text,
                          .text_len = next ? 0 : strlen(j->text),
                          .candidates = j->top,
                          .n_candidates = j->n_top};
    return n + 1;
}

int sched_seq_error(SchedSeq *j, char *err) {
    (void)j;
    return kg_err(err, KG_EINTERNAL, "fuzz: no job ends in an error");
}

void sched_seq_stats(SchedSeq *j, SchedStats *stats) {
    *stats = (SchedStats){.prompt_tokens = 1, .generated_tokens = j->read};
}

void sched_seq_cancel(SchedSeq *j) { (void)j; }

void sched_seq_release(SchedSeq *j) {
    free(j->text);
    free(j->top);
    free(j);
}

void sched_gauges(Sched *s, SchedGauges *g) {
    (void)s;
    memset(g, 0, sizeof *g);
}
