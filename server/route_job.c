// route_job.c — one engine job behind an HTTP request: submit it, wait for it (the request
// is suspended; the job's notify wakes it) or stream it as Server-Sent Events, and turn its
// tokens into the reply's JSON (kogpt2's own shape or OpenAI's text_completion).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "routes.h"

#define ROUTE_READ_BATCH 32 // tokens copied out of the engine per sched_job_read

// Appends n bytes; KG_ENOMEM leaves b as it was.
static int route_buf_add(RouteBuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return KG_ENOMEM;
        b->p = p; // p may move
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return KG_OK;
}

// A JSON array of n ids (cJSON_CreateIntArray refuses n = 0); NULL on OOM.
cJSON *route_ids_json(const int *ids, size_t n) {
    return n ? cJSON_CreateIntArray(ids, (int)n) : cJSON_CreateArray();
}

static cJSON *route_add_piece_text(cJSON *j_obj, const char *name, const Tokenizer *tok, int id) {
    char *text = tok_piece_text(tok, id);
    cJSON *j = text ? cJSON_AddStringToObject(j_obj, name, text) : NULL;
    free(text);
    return j;
}

// --- JSON pieces ---

static int route_add_timings(cJSON *j_obj, const SchedStats *st) {
    cJSON *j_t = cJSON_AddObjectToObject(j_obj, "timings");
    return j_t && cJSON_AddNumberToObject(j_t, "total_ms", st->total_ms) &&
           cJSON_AddNumberToObject(j_t, "queue_ms", st->queue_ms) &&
           cJSON_AddNumberToObject(j_t, "prefill_ms", st->prefill_ms) &&
           cJSON_AddNumberToObject(j_t, "decode_ms", st->decode_ms);
}

// One candidate: {"id", "piece", "text", "prob", "logprob"} (next-token), or
// {"id", "text", "logprob"} (a generated token's "top").
static cJSON *route_cand_json(const Tokenizer *tok, const KgCandidate *c, int full) {
    const char *piece = tok_piece(tok, c->id);
    cJSON *j_c = cJSON_CreateObject();
    if (!j_c || !cJSON_AddNumberToObject(j_c, "id", c->id) ||
        (full && !cJSON_AddStringToObject(j_c, "piece", piece ? piece : "")) ||
        !route_add_piece_text(j_c, "text", tok, c->id) ||
        (full && !cJSON_AddNumberToObject(j_c, "prob", c->prob)) ||
        !cJSON_AddNumberToObject(j_c, "logprob", c->logprob)) {
        cJSON_Delete(j_c);
        return NULL;
    }
    return j_c;
}

static const char *route_finish_reason(const RouteJob *rj) {
    switch (rj->state) {
    case SCHED_DONE_STOP:
        return "stop";
    case SCHED_DONE_EOS:
        return rj->kind == ROUTE_COMPLETIONS ? "stop" : "eos";
    case SCHED_DONE_CANCELLED:
        return "cancelled";
    case SCHED_DONE_ERROR:
        return "error";
    default:
        return "length";
    }
}

// OpenAI's legacy logprobs object: parallel arrays tokens, token_logprobs, top_logprobs
// (objects keyed by token text), text_offset.
cJSON *route_lp_object(void) {
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

// Appends token t to a logprobs object (completions) at text offset off.
static int route_lp_add_openai(cJSON *j_lp, const Tokenizer *tok, const SchedToken *t, size_t off) {
    cJSON *j_top = cJSON_CreateObject();
    if (!j_top) return KG_ENOMEM;
    for (size_t k = 0; k < t->n_top; k++) {
        char *key = tok_piece_text(tok, t->top[k].id);
        if (!key || (!cJSON_GetObjectItemCaseSensitive(j_top, key) &&
                     !cJSON_AddNumberToObject(j_top, key, t->top[k].logprob))) {
            free(key);
            cJSON_Delete(j_top);
            return KG_ENOMEM;
        }
        free(key);
    }
    char *s = strndup(t->text, t->text_len);
    cJSON *j_s = s ? cJSON_CreateString(s) : NULL;
    free(s);
    if (!j_s) {
        cJSON_Delete(j_top);
        return KG_ENOMEM;
    }
    // the prompt's first token has no score: null, as OpenAI's API writes it
    int first = isnan(t->logprob);
    if (first) {
        cJSON_Delete(j_top);
        j_top = cJSON_CreateNull();
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

// {"id", "text", "logprob", "top": [...]} of one generated token (generate).
static cJSON *route_token_json(const Tokenizer *tok, const SchedToken *t) {
    cJSON *j_t = cJSON_CreateObject(), *j_top;
    char *s = strndup(t->text, t->text_len);
    if (!j_t || !s) goto fail;
    if (!cJSON_AddNumberToObject(j_t, "id", t->id) || !cJSON_AddStringToObject(j_t, "text", s) ||
        !cJSON_AddNumberToObject(j_t, "logprob", t->logprob) ||
        !(j_top = cJSON_AddArrayToObject(j_t, "top")))
        goto fail;
    for (size_t k = 0; k < t->n_top; k++)
        if (!cJSON_AddItemToArray(j_top, route_cand_json(tok, &t->top[k], 0))) goto fail;
    free(s);
    return j_t;
fail:
    free(s);
    cJSON_Delete(j_t);
    return NULL;
}

// --- SSE events ---

// Appends "data: <json>\n\n" (j consumed).
static int route_sse_json(RouteJob *rj, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    int rc = text ? KG_OK : KG_ENOMEM;
    if (!rc) rc = route_buf_add(&rj->out, "data: ", 6);
    if (!rc) rc = route_buf_add(&rj->out, text, strlen(text));
    if (!rc) rc = route_buf_add(&rj->out, "\n\n", 2);
    cJSON_free(text);
    return rc;
}

// An OpenAI text_completion object with one choice (chunk or whole reply).
static cJSON *route_completion_json(const RouteJob *rj, const char *text, cJSON *j_lp,
                                    const char *finish) {
    cJSON *j_root = cJSON_CreateObject(), *j_choices, *j_c;
    if (!j_root || !cJSON_AddStringToObject(j_root, "id", rj->id) ||
        !cJSON_AddStringToObject(j_root, "object", "text_completion") ||
        !cJSON_AddNumberToObject(j_root, "created", (double)rj->created) ||
        !cJSON_AddStringToObject(j_root, "model", rj->app->model_name) ||
        !(j_choices = cJSON_AddArrayToObject(j_root, "choices")) ||
        !cJSON_AddItemToArray(j_choices, j_c = cJSON_CreateObject()) ||
        !cJSON_AddStringToObject(j_c, "text", text) || !cJSON_AddNumberToObject(j_c, "index", 0) ||
        !(j_lp ? cJSON_AddItemToObject(j_c, "logprobs", j_lp)
               : cJSON_AddNullToObject(j_c, "logprobs") != NULL) ||
        !(finish ? cJSON_AddStringToObject(j_c, "finish_reason", finish)
                 : cJSON_AddNullToObject(j_c, "finish_reason"))) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
}

// The event(s) for one new token.
static int route_sse_token(RouteJob *rj, const SchedToken *t) {
    const Tokenizer *tok = rj->app->tok;
    if (rj->kind == ROUTE_GENERATE) {
        cJSON *j_t = route_token_json(tok, t);
        if (j_t && !rj->n_top) cJSON_DeleteItemFromObject(j_t, "top");
        return route_sse_json(rj, j_t);
    }
    cJSON *j_lp = NULL;
    if (rj->want_logprobs && (!(j_lp = route_lp_object()) ||
                              route_lp_add_openai(j_lp, tok, t, rj->text.len - t->text_len))) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    char *s = strndup(t->text, t->text_len);
    cJSON *j = s ? route_completion_json(rj, s, j_lp, NULL) : (cJSON_Delete(j_lp), NULL);
    free(s);
    return route_sse_json(rj, j);
}

// --- the job's output ---

// Takes one token out of the engine into the job's text, ids, logprobs and SSE buffer.
static void route_job_take(RouteJob *rj, const SchedToken *t) {
    const Tokenizer *tok = rj->app->tok;
    if (rj->kind == ROUTE_NEXT) {
        for (size_t k = 0; k < t->n_top && rj->j_cands; k++)
            if (!cJSON_AddItemToArray(rj->j_cands, route_cand_json(tok, &t->top[k], 1)))
                rj->oom = 1;
        return;
    }
    if (t->prompt) { // a prompt token's score (echo + logprobs): logprobs only
        if (rj->j_lp && route_lp_add_openai(rj->j_lp, tok, t, rj->echo_off)) rj->oom = 1;
        rj->echo_off += t->text_len;
        return;
    }
    size_t off = (rj->echo ? strlen(rj->echo) : 0) + rj->text.len;
    rj->n_taken++;
    if (route_buf_add(&rj->text, t->text, t->text_len) ||
        !cJSON_AddItemToArray(rj->j_ids, cJSON_CreateNumber(t->id)))
        rj->oom = 1;
    if (rj->kind == ROUTE_GENERATE && rj->j_lp &&
        !cJSON_AddItemToArray(rj->j_lp, route_token_json(tok, t)))
        rj->oom = 1;
    if (rj->kind == ROUTE_COMPLETIONS && rj->j_lp && route_lp_add_openai(rj->j_lp, tok, t, off))
        rj->oom = 1;
    if (rj->stream && route_sse_token(rj, t)) rj->oom = 1;
}

// The final SSE event(s): a summary, or an error; completions end with [DONE].
static void route_sse_final(RouteJob *rj) {
    SchedStats st;
    sched_job_stats(rj->job, &st);
    cJSON *j = NULL;
    if (rj->state == SCHED_DONE_ERROR || rj->state == SCHED_DONE_CANCELLED) {
        char err[KG_ERRLEN] = "cancelled: the server is shutting down";
        int code = rj->state == SCHED_DONE_ERROR ? sched_job_error(rj->job, err) : KG_ECANCEL;
        j = cJSON_CreateObject();
        cJSON *j_e = cJSON_AddObjectToObject(j, "error");
        if (!j_e || !cJSON_AddNumberToObject(j_e, "code", srv_status_from_err(code)) ||
            !cJSON_AddStringToObject(j_e, "type", kg_strerror(code)) ||
            !cJSON_AddStringToObject(j_e, "message", err))
            rj->oom = 1;
        if (route_sse_json(rj, j)) rj->oom = 1;
        return;
    }
    if (rj->kind == ROUTE_GENERATE) {
        j = cJSON_CreateObject();
        if (!cJSON_AddTrueToObject(j, "done") ||
            !cJSON_AddStringToObject(j, "finish_reason", route_finish_reason(rj)) ||
            !cJSON_AddStringToObject(j, "text", rj->text.p ? rj->text.p : "") ||
            !cJSON_AddItemReferenceToObject(j, "tokens", rj->j_ids) ||
            !cJSON_AddNumberToObject(j, "prompt_tokens", (double)rj->n_prompt) ||
            !cJSON_AddNumberToObject(j, "cached_tokens", (double)st.cached_tokens) ||
            !cJSON_AddNumberToObject(j, "generated_tokens", (double)st.generated_tokens) ||
            !route_add_timings(j, &st))
            rj->oom = 1;
        if (route_sse_json(rj, j)) rj->oom = 1;
        return;
    }
    j = route_completion_json(rj, "", NULL, route_finish_reason(rj));
    if (route_sse_json(rj, j) || route_buf_add(&rj->out, "data: [DONE]\n\n", 14)) rj->oom = 1;
}

// Copies out everything the engine has for the job; at the end, the final events.
static void route_job_poll(RouteJob *rj) {
    SchedToken toks[ROUTE_READ_BATCH];
    size_t n;
    do {
        n = sched_job_read(rj->job, toks, ROUTE_READ_BATCH, &rj->state);
        for (size_t i = 0; i < n; i++)
            route_job_take(rj, &toks[i]);
    } while (n == ROUTE_READ_BATCH);
    if (rj->state != SCHED_RUNNING && rj->stream && !rj->finished) {
        route_sse_final(rj);
        rj->finished = 1;
    }
}

void route_job_free(RouteJob *rj) {
    if (!rj) return;
    free(rj->prompt);
    free(rj->echo);
    free(rj->text.p);
    free(rj->out.p);
    cJSON_Delete(rj->j_ids);
    cJSON_Delete(rj->j_cands);
    cJSON_Delete(rj->j_lp);
    free(rj);
}

// The request completed (answered, hung up or shut down): count tokens, drop the job.
static void route_job_done(SrvReq *r, int aborted) {
    RouteJob *rj = r->ctx;
    if (rj->job) {
        if (aborted) sched_job_cancel(rj->job);
        SchedStats st;
        sched_job_stats(rj->job, &st);
        // a cancelled job may not have its final figures yet: count what was sent
        size_t generated = st.generated_tokens > rj->n_taken ? st.generated_tokens : rj->n_taken;
        metrics_tokens(st.prompt_tokens, st.cached_tokens, generated);
        sched_job_release(rj->job); // after this the engine never calls srv_wake(r)
    }
    route_job_free(rj);
    r->ctx = NULL;
}

// The whole answer of a finished job (not streamed).
static enum MHD_Result route_job_reply(SrvReq *r, RouteJob *rj) {
    if (rj->state == SCHED_DONE_ERROR || rj->state == SCHED_DONE_CANCELLED) {
        char err[KG_ERRLEN] = "cancelled: the server is shutting down";
        int code = rj->state == SCHED_DONE_ERROR ? sched_job_error(rj->job, err) : KG_ECANCEL;
        return srv_reply_kg(r, code, err, NULL);
    }
    if (rj->oom) return srv_reply_error(r, 503, "out of memory", NULL);
    SchedStats st;
    sched_job_stats(rj->job, &st);
    const char *text = rj->text.p ? rj->text.p : "";
    cJSON *j_root = NULL;
    if (rj->kind == ROUTE_COMPLETIONS) {
        char *full = NULL;
        if (rj->echo && (full = malloc(strlen(rj->echo) + strlen(text) + 1)))
            strcat(strcpy(full, rj->echo), text);
        cJSON *j_lp = rj->j_lp;
        rj->j_lp = NULL; // moved into the reply
        j_root = route_completion_json(rj, full ? full : text, j_lp, route_finish_reason(rj));
        free(full);
        cJSON *j_u = j_root ? cJSON_AddObjectToObject(j_root, "usage") : NULL;
        if (!j_u || !cJSON_AddNumberToObject(j_u, "prompt_tokens", (double)rj->n_prompt) ||
            !cJSON_AddNumberToObject(j_u, "completion_tokens", (double)st.generated_tokens) ||
            !cJSON_AddNumberToObject(j_u, "total_tokens",
                                     (double)(rj->n_prompt + st.generated_tokens)))
            goto oom;
        return srv_reply_json(r, 200, j_root);
    }
    j_root = cJSON_CreateObject();
    cJSON *j_prompt = route_ids_json(rj->prompt, rj->n_prompt);
    if (!j_root || !cJSON_AddStringToObject(j_root, "model", rj->app->model_name) ||
        !cJSON_AddItemToObject(j_root, rj->kind == ROUTE_NEXT ? "tokens" : "prompt", j_prompt))
        goto oom;
    if (rj->kind == ROUTE_NEXT) {
        cJSON_AddItemToObject(j_root, "candidates", rj->j_cands);
        rj->j_cands = NULL;
    } else {
        if (!cJSON_AddStringToObject(j_root, "text", text) ||
            !cJSON_AddItemToObject(j_root, "tokens", rj->j_ids) ||
            !cJSON_AddStringToObject(j_root, "finish_reason", route_finish_reason(rj)))
            goto oom;
        rj->j_ids = NULL;
        if (rj->j_lp) {
            cJSON_AddItemToObject(j_root, "logprobs", rj->j_lp);
            rj->j_lp = NULL;
        }
    }
    if (!cJSON_AddNumberToObject(j_root, "prompt_tokens", (double)rj->n_prompt) ||
        !cJSON_AddNumberToObject(j_root, "cached_tokens", (double)st.cached_tokens) ||
        (rj->kind != ROUTE_NEXT &&
         !cJSON_AddNumberToObject(j_root, "generated_tokens", (double)st.generated_tokens)) ||
        !route_add_timings(j_root, &st))
        goto oom;
    return srv_reply_json(r, 200, j_root);
oom:
    cJSON_Delete(j_root);
    return srv_reply_error(r, 503, "out of memory", NULL);
}

// MHD calls this again after each srv_wake(): answer when the job is done, else wait.
static enum MHD_Result route_job_resume(SrvReq *r) {
    RouteJob *rj = r->ctx;
    for (;;) {
        route_job_poll(rj);
        if (rj->state != SCHED_RUNNING) return route_job_reply(r, rj);
        if (srv_client_gone(r)) return MHD_NO; // hung up: close; route_job_done cancels
        if (srv_wait(r)) return MHD_YES;
    }
}

static ssize_t route_stream_pull(SrvReq *r, char *buf, size_t max) {
    RouteJob *rj = r->ctx;
    if (rj->out_pos == rj->out.len) {
        rj->out.len = rj->out_pos = 0;
        if (rj->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        route_job_poll(rj);
        if (rj->oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rj->out.len == 0) return 0; // nothing yet: wait for the engine
    }
    size_t n = rj->out.len - rj->out_pos < max ? rj->out.len - rj->out_pos : max;
    memcpy(buf, rj->out.p + rj->out_pos, n);
    rj->out_pos += n;
    return (ssize_t)n;
}

static void route_notify(void *ctx) { srv_wake(ctx); }

// Submits the job and answers: streamed, or once it is done. rj is owned by r from here.
enum MHD_Result route_job_run(SrvReq *r, RouteJob *rj, const SchedParams *p) {
    char err[KG_ERRLEN];
    int rc = sched_submit(rj->app->sched, p, route_notify, r, &rj->job, err);
    if (rc) {
        route_job_free(rj);
        return srv_reply_kg(r, rc, err, NULL);
    }
    r->ctx = rj;
    r->done = route_job_done;
    if (rj->stream) {
        if (rj->echo && rj->kind == ROUTE_COMPLETIONS)
            rj->oom |= route_sse_json(rj, route_completion_json(rj, rj->echo, NULL, NULL)) != 0;
        return srv_stream_start(r, route_stream_pull);
    }
    r->resume = route_job_resume;
    return route_job_resume(r);
}

RouteJob *route_job_new(SrvApp *app, RouteKind kind) {
    RouteJob *rj = calloc(1, sizeof *rj);
    if (!rj) return NULL;
    rj->kind = kind;
    rj->app = app;
    rj->state = SCHED_RUNNING;
    rj->created = time(NULL);
    static atomic_ulong seq;
    snprintf(rj->id, sizeof rj->id, "cmpl-%lx-%lu", (unsigned long)rj->created,
             (unsigned long)atomic_fetch_add(&seq, 1));
    rj->j_ids = cJSON_CreateArray();
    if (!rj->j_ids) {
        free(rj);
        return NULL;
    }
    return rj;
}
