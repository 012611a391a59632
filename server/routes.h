// routes.h — what kogpt2d's handlers share: the app state (engine, tokenizer, the model's
// figures; main.c fills it) and the engine-job helpers of route_job.c that routes.c uses.
#ifndef ROUTES_H
#define ROUTES_H

#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "http.h"
#include "sched.h"

#define ROUTE_MAX_TOKENIZE 65536 // default --max-tokenize

typedef struct {
    // set before ready turns 1, read-only afterwards
    Sched *sched;
    const Tokenizer *tok;
    const char *model_name; // the --alias, or the model directory's name
    size_t n_ctx;           // longest prompt (--ctx-size, <= the model's positions)
    size_t vocab_size;      // V: token ids are 0 .. V-1
    size_t max_tokenize;    // tokens per /v1/tokenize or /v1/detokenize (--max-tokenize)
    time_t created;
    SrvServer *srv;
    atomic_int ready; // 1: model loaded and warm; 0: loading (/readyz 503)
} SrvApp;

// The endpoint names, for metrics_init(): each route's path.
size_t route_endpoints(const char **out, size_t cap);

// --- route_job.c: one engine job behind a request ---

typedef enum { ROUTE_NEXT, ROUTE_GENERATE, ROUTE_COMPLETIONS } RouteKind;

typedef struct {
    char *p;
    size_t len, cap;
} RouteBuf;

// One engine request: what was asked, what came back so far, and SSE bytes not yet sent.
typedef struct {
    RouteKind kind;
    SrvApp *app;
    SchedJob *job;
    SchedState state;
    int stream, finished, oom;
    size_t n_top;      // candidates (next-token) or top logprobs per token
    int want_logprobs; // completions: "logprobs" was given
    int *prompt;       // (n_prompt) ids
    size_t n_prompt;
    char *echo;      // completions with echo: the prompt's text (else NULL)
    size_t echo_off; // prompt scoring: bytes of the prompt's text scored so far
    size_t n_taken;  // tokens read from the engine
    RouteBuf text;   // generated text
    cJSON *j_ids;    // generated ids
    cJSON *j_cands;  // next-token candidates
    cJSON *j_lp;     // generate: array of per-token logprobs; completions: logprobs object
    RouteBuf out;    // SSE bytes waiting for the reader
    size_t out_pos;
    char id[48];
    time_t created;
} RouteJob;

// A job of the given kind with its reply's id and time; NULL on OOM. Free with
// route_job_free() until route_job_run() takes it.
RouteJob *route_job_new(SrvApp *app, RouteKind kind);
void route_job_free(RouteJob *rj);
// Submits p (whose arrays rj owns) and answers: streamed as SSE when rj->stream, else once
// the job is done. r owns rj from here (also on error: a 429/422/503 reply is queued).
enum MHD_Result route_job_run(SrvReq *r, RouteJob *rj, const SchedParams *p);
// An empty OpenAI logprobs object {tokens, token_logprobs, top_logprobs, text_offset}.
cJSON *route_lp_object(void);
// A JSON array of n ids (also for n = 0); NULL on OOM.
cJSON *route_ids_json(const int *ids, size_t n);

#endif
