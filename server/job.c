// job.c — the engine work behind one HTTP request: submit one engine sequence per choice, wait
// for them or stream them, and hand every token to the endpoint's hooks (job.h).
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "server/http/metrics.h"

#define JOB_READ_BATCH 32 // tokens copied out of the engine per sched_seq_read

int job_sse_raw(JobRequest *job, const char *s) { return buf_append(&job->out, s, strlen(s)); }

int job_sse_json(JobRequest *job, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    int rc = text ? KG_OK : KG_ENOMEM;
    if (!rc) rc = job_sse_raw(job, "data: ");
    if (!rc) rc = job_sse_raw(job, text);
    if (!rc) rc = job_sse_raw(job, "\n\n");
    cJSON_free(text);
    return rc;
}

cJSON *job_openai_object(const JobRequest *job, const char *object, cJSON **j_choices) {
    cJSON *j_root = cJSON_CreateObject();
    if (!j_root || !cJSON_AddStringToObject(j_root, "id", job->id) ||
        !cJSON_AddStringToObject(j_root, "object", object) ||
        !cJSON_AddNumberToObject(j_root, "created", (double)job->created) ||
        !cJSON_AddStringToObject(j_root, "model", job->model->name) ||
        !(*j_choices = cJSON_AddArrayToObject(j_root, "choices"))) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
}

int job_sse_usage(JobRequest *job, cJSON *j) {
    size_t prompt, generated;
    job_usage(job, &prompt, &generated);
    if (!j || !api_add_usage(j, prompt, generated)) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

const char *job_finish_reason(const JobRequest *job, size_t i, int openai) {
    switch (job->choices[i].state) {
    case SCHED_DONE_STOP:
        return "stop";
    case SCHED_DONE_EOS:
        return openai ? "stop" : "eos";
    case SCHED_DONE_CANCELLED:
        return "cancelled";
    case SCHED_DONE_ERROR:
        return "error";
    default:
        return "length";
    }
}

void job_usage(const JobRequest *job, size_t *prompt_tokens, size_t *generated_tokens) {
    *prompt_tokens = *generated_tokens = 0;
    for (size_t i = 0; i < job->n_choices; i++) {
        SchedStats st;
        sched_seq_stats(job->choices[i].sched_seq, &st);
        if (i % job->n_per_prompt == 0) *prompt_tokens += st.prompt_tokens; // its first sample
        *generated_tokens += st.generated_tokens;
    }
}

// The first failed choice's error code and message, or KG_OK.
static int job_error(const JobRequest *job, char *err) {
    for (size_t i = 0; i < job->n_choices; i++) {
        SchedState st = job->choices[i].state;
        if (st == SCHED_DONE_ERROR) return sched_seq_error(job->choices[i].sched_seq, err);
        if (st == SCHED_DONE_CANCELLED)
            return kg_err(err, KG_ECANCEL, "cancelled: the server is shutting down");
    }
    return KG_OK;
}

// Copies out everything the engine has for choice i; at its end, its final event.
static void job_poll_choice(JobRequest *job, size_t i) {
    JobChoice *c = &job->choices[i];
    SchedToken toks[JOB_READ_BATCH];
    size_t n;
    do {
        n = sched_seq_read(c->sched_seq, toks, JOB_READ_BATCH, &c->state);
        for (size_t k = 0; k < n; k++) {
            const SchedToken *t = &toks[k];
            if (!t->prompt && t->id >= 0 && !job->first_token_seen) {
                job->first_token_seen = 1;
                metrics_first_token(job->model->name, kg_now_s() - job->t_start);
            }
            if (!t->prompt && t->id >= 0) c->n_generated++;
            // (an entry with no text adds nothing: its text may be NULL)
            if (!t->prompt && t->text_len && buf_append(&c->text, t->text, t->text_len))
                job->oom = 1;
            if (job->hooks->token(job, i, t)) job->oom = 1;
        }
    } while (n == JOB_READ_BATCH);
    if (c->state != SCHED_RUNNING && !c->ended) {
        c->ended = 1;
        if (job->stream && job->hooks->choice_end && job->hooks->choice_end(job, i)) job->oom = 1;
    }
}

// Polls every choice. 1 when every one has ended.
static int job_poll(JobRequest *job) {
    int all_ended = 1;
    for (size_t i = 0; i < job->n_choices; i++) {
        job_poll_choice(job, i);
        all_ended &= job->choices[i].ended;
    }
    return all_ended;
}

// The request completed (answered, hung up or shut down): count tokens, drop the job.
static void job_done(SrvReq *r, int aborted) {
    JobRequest *job = r->ctx;
    for (size_t i = 0; i < job->n_choices; i++) {
        JobChoice *c = &job->choices[i];
        if (!c->sched_seq) continue;
        if (aborted) sched_seq_cancel(c->sched_seq);
        SchedStats st;
        sched_seq_stats(c->sched_seq, &st);
        // a cancelled job may not have its final figures yet: count what was sent
        size_t generated =
            st.generated_tokens > c->n_generated ? st.generated_tokens : c->n_generated;
        metrics_tokens(r->endpoint, job->model->name, st.prompt_tokens, st.cached_tokens, generated,
                       st.decode_ms);
        sched_seq_release(c->sched_seq); // after this the engine never calls srv_wake(r)
    }
    job_free(job);
    r->ctx = NULL;
}

// The whole answer once every choice is done (not streamed).
static enum MHD_Result job_reply(SrvReq *r, JobRequest *job) {
    char err[KG_ERRLEN];
    int code = job_error(job, err);
    if (code) return srv_reply_kg(r, code, err, NULL);
    if (job->oom) return srv_reply_error(r, 503, "out of memory", NULL);
    return srv_reply_json(r, 200, job->hooks->reply(job)); // NULL: 503
}

// MHD calls this again after each srv_wake(): answer when every choice is done, else wait.
static enum MHD_Result job_resume(SrvReq *r) {
    JobRequest *job = r->ctx;
    for (;;) {
        if (job_poll(job)) return job_reply(r, job);
        if (srv_client_gone(r)) return MHD_NO; // reset: close; job_done cancels
        if (srv_wait(r)) return MHD_YES;
    }
}

// The stream's last events: if a choice failed (the others are cancelled), the endpoint's
// failure events or else an error event in r's route's shape; else the endpoint's end.
static void job_stream_end(SrvReq *r, JobRequest *job) {
    char err[KG_ERRLEN];
    int code = job_error(job, err);
    if (code) {
        for (size_t i = 0; i < job->n_choices; i++)
            sched_seq_cancel(job->choices[i].sched_seq);
        int rc =
            job->hooks->stream_fail
                ? job->hooks->stream_fail(job, code, err)
                : job_sse_json(job, srv_req_error_json(r, srv_status_from_err(code), err, NULL));
        if (rc) job->oom = 1;
    } else if (job->hooks->stream_end && job->hooks->stream_end(job)) {
        job->oom = 1;
    }
    job->finished = 1;
}

static ssize_t job_stream_pull(SrvReq *r, char *buf, size_t max) {
    JobRequest *job = r->ctx;
    if (job->out_pos == job->out.len) {
        job->out.len = job->out_pos = 0;
        if (job->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        char err[KG_ERRLEN];
        if (job_poll(job) || job_error(job, err)) job_stream_end(r, job);
        if (job->oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (job->out.len == 0) return 0; // nothing yet: wait for the engine
    }
    size_t n = job->out.len - job->out_pos < max ? job->out.len - job->out_pos : max;
    memcpy(buf, job->out.p + job->out_pos, n);
    job->out_pos += n;
    return (ssize_t)n;
}

static void job_notify(void *ctx) { srv_wake(ctx); }

enum MHD_Result job_run(SrvReq *r, JobRequest *job, const SchedParams *params) {
    char err[KG_ERRLEN];
    r->ctx = job;
    r->done = job_done; // from here every path ends in job_done: it releases what was submitted
    job->t_start = kg_now_s();
    for (size_t i = 0; i < job->n_choices; i++) {
        int rc = sched_submit(job->model->sched, &params[i], job_notify, r,
                              &job->choices[i].sched_seq, err);
        if (rc) {
            for (size_t k = 0; k < i; k++)
                sched_seq_cancel(job->choices[k].sched_seq);
            return srv_reply_kg(r, rc, err, NULL);
        }
    }
    if (job->stream) return srv_stream_start(r, job_stream_pull);
    r->resume = job_resume;
    return job_resume(r);
}

JobRequest *job_new(const ApiModel *model, const JobHooks *hooks, void *ctx, size_t n_choices,
                    const char *id_prefix, int stream) {
    JobRequest *job = calloc(1, sizeof *job);
    JobChoice *choices = calloc(n_choices, sizeof *choices);
    if (!job || !choices) {
        free(job);
        free(choices);
        return NULL;
    }
    *job = (JobRequest){.hooks = hooks,
                        .ctx = ctx,
                        .model = model,
                        .stream = stream,
                        .n_choices = n_choices,
                        .choices = choices,
                        .n_per_prompt = 1,
                        .created = time(NULL)};
    for (size_t i = 0; i < n_choices; i++)
        choices[i].state = SCHED_RUNNING;
    static atomic_ulong seq;
    snprintf(job->id, sizeof job->id, "%s-%lx-%lu", id_prefix, (unsigned long)job->created,
             (unsigned long)atomic_fetch_add(&seq, 1));
    return job;
}

void job_free(JobRequest *job) {
    if (!job) return;
    job->hooks->free(job->ctx);
    for (size_t i = 0; i < job->n_choices; i++)
        buf_free(&job->choices[i].text);
    free(job->choices);
    buf_free(&job->out);
    free(job);
}
