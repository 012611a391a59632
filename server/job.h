// job.h — the engine work behind one HTTP request: one engine job per choice (a completions
// request with two prompts and n = 2 has four), submitted together so the engine batches
// them, then either waited for (the request is suspended; each job's notify wakes it) or
// streamed as Server-Sent Events.
//
// What the reply looks like is the endpoint's: it gives a JobHooks table (as a backend gives
// KgBackendOps), and job.c calls it for every token, at the end of every choice, at the end
// of the stream, and for the whole reply.
#ifndef JOB_H
#define JOB_H

#include <time.h>

#include "api.h"

// A growing byte buffer (NUL-terminated).
typedef struct {
    char *p;
    size_t len, cap;
} JobBuf;

// Appends n bytes; KG_ENOMEM leaves b as it was.
int job_buf_add(JobBuf *b, const char *s, size_t n);

// One choice: its engine job and what it has produced.
typedef struct {
    SchedJob *sched_job;
    SchedState state;
    size_t n_generated; // generated tokens read from the engine
    JobBuf text;        // generated text
    int ended;          // its end has been handled (hooks->choice_end)
} JobChoice;

typedef struct Job Job;

typedef struct {
    // A token of choice i (a prompt token's score when t->prompt); the text is already in
    // choices[i].text. Streaming: append its event(s) with job_sse_json().
    int (*token)(Job *job, size_t i, const SchedToken *t);
    // Streaming: choice i has ended (choices[i].state says how): its final event. May be NULL.
    int (*choice_end)(Job *job, size_t i);
    // Streaming: every choice has ended: the last events (usage, [DONE]). May be NULL.
    int (*stream_end)(Job *job);
    // Not streaming: the whole reply once every choice has ended; NULL on OOM.
    cJSON *(*reply)(Job *job);
    // Frees the endpoint's state (ctx).
    void (*free)(void *ctx);
} JobHooks;

struct Job {
    const JobHooks *hooks;
    void *ctx; // the endpoint's own state
    SrvApp *app;
    int stream, finished, oom;
    size_t n_choices;
    JobChoice *choices;
    JobBuf out; // SSE bytes waiting for the stream reader
    size_t out_pos;
    char id[48]; // the reply's id: prefix + time + sequence ("cmpl-...", "chatcmpl-...")
    time_t created;
    double t_start;       // when the request was submitted, for the time to first token
    int first_token_seen; // the time to first token has been recorded
};

// A job of n_choices choices with its reply's id and time, owning ctx from here (freed by
// hooks->free); NULL on OOM (ctx is then still the caller's). Free with job_free() until
// job_run() takes it.
Job *job_new(SrvApp *app, const JobHooks *hooks, void *ctx, size_t n_choices, const char *id_prefix,
             int stream);
void job_free(Job *job);

// Submits params[0..n_choices) (their arrays are copied by the engine) and answers: streamed
// when job->stream, else once every choice is done. r owns job from here, also on error
// (a 429, 422 or 503 reply is queued and the choices already submitted are cancelled).
enum MHD_Result job_run(SrvReq *r, Job *job, const SchedParams *params);

// Appends the SSE event "data: <j>\n\n" (j consumed; NULL counts as OOM), or raw bytes.
int job_sse_json(Job *job, cJSON *j);
int job_sse_raw(Job *job, const char *s);

// An OpenAI reply or chunk {"id", "object", "created", "model", "choices": []} (text_completion,
// chat.completion, chat.completion.chunk) and its empty choices array; NULL on OOM.
cJSON *job_openai_object(const Job *job, const char *object, cJSON **j_choices);

// OpenAI's usage chunk of a stream: j (a chunk with empty "choices"; consumed, NULL counts as
// OOM) gets the usage of every choice and is appended as an event.
int job_sse_usage(Job *job, cJSON *j);

// OpenAI's finish_reason of choice i ("stop" for the end-of-text token, "length"), or
// kogpt2's own ("eos" for the end-of-text token) when openai is 0.
const char *job_finish_reason(const Job *job, size_t i, int openai);

// Prompt and generated tokens over every choice (a prompt counts once per choice).
void job_usage(const Job *job, size_t *prompt_tokens, size_t *generated_tokens);

#endif
