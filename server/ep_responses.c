// ep_responses.c — POST /v1/responses: OpenAI's Responses API for text, what the AI SDK's
// default provider call (openai('model')) and the openai SDK's client.responses.create send.
//
//   {"input": a string (one user message) or an array of messages [{"type": "message"
//    (optional), "role": "user"|"assistant"|"system"|"developer", "content": a string or
//    [{"type": "input_text"|"output_text", "text"}]}], "instructions" (a system message before
//    them), "max_output_tokens" (absent: to the end of the context), "temperature", "top_p",
//    "stream", and /v1/completions' other sampling fields as extensions; "model" absent or
//    the served one}
//   -> {id: "resp_...", object: "response", created_at, status: "completed"|"incomplete",
//       error: null, incomplete_details: null|{reason: "max_output_tokens"}, instructions,
//       max_output_tokens, model, output: [{type: "message", id: "msg_...", status, role:
//       "assistant", content: [{type: "output_text", text, annotations: []}]}], temperature,
//       top_p, usage: {input_tokens, input_tokens_details: {cached_tokens}, output_tokens,
//       output_tokens_details: {reasoning_tokens}, total_tokens}, and the fixed fields of a
//       text-only response (store false, tools [], ...)}
//   stream: named events ("event: TYPE" then "data: {type, sequence_number, ...}"), in
//     OpenAI's order: response.created and response.in_progress (the object, output [],
//     usage null), response.output_item.added (the message, content []),
//     response.content_part.added (an empty output_text), response.output_text.delta per
//     piece of text, response.output_text.done, response.content_part.done,
//     response.output_item.done, then response.completed (or response.incomplete when the
//     token limit or the context cut it) with the whole object. No "data: [DONE]". A stream
//     that fails or is cancelled midway (a second SIGTERM) ends with response.failed instead
//     of the *.done events: status "failed", error {code, message}, the message "incomplete".
//
// The messages become one prompt as chat's do (chat_prompt.h: the model's chat template).
// Nothing is stored: "store" is answered false, and previous_response_id and conversation
// are refused, as tools are (a base model cannot call them).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_prompt.h"
#include "job.h"
#include "server/http/json_in.h"

typedef struct {
    int *prompt; // (n_prompt) ids: the rendered messages
    size_t n_prompt;
    char *instructions;          // as given (NULL: none), echoed in the object
    long long max_output_tokens; // as given (0: none)
    double temperature, top_p;
    long long seq;   // the next event's sequence_number
    char msg_id[56]; // the one output message's id: "msg_" + the response's
    // a stream that failed or was cancelled midway: OpenAI's error code ("server_error", ...)
    // and the reason, for response.failed (NULL: it did not fail)
    const char *fail_code;
    char fail_message[KG_ERRLEN];
} Responses;

// "text": absent, or {"format": {"type": "text"}} (a JSON schema is refused by name).
static int responses_read_text(const ApiRequest *q, const ApiField *f, void *out,
                               const char **param, char *err) {
    (void)out;
    (void)param;
    const cJSON *j_format = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(q->j_req, f->name), "format");
    const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(j_format, "type");
    if (!cJSON_IsString(j_type) || !strcmp(j_type->valuestring, "text")) return KG_OK;
    return kg_err(err, KG_EUNSUP, "text.format %.*s is not supported (only text)",
                  api_quote_len(j_type->valuestring, 32), j_type->valuestring);
}

// OpenAI's request fields beside input, instructions, model and the sampling ones: what a base
// model without storage cannot do is refused by name (its default value passes), what changes
// nothing here is accepted and ignored on purpose; none is ignored by accident.
static const ApiField RESPONSES_FIELDS[] = {
    {"tools", API_REFUSED, .why = "tools: tool calls are not supported by this model"},
    {"tool_choice", API_REFUSED, .why = "tool_choice: tool calls are not supported by this model"},
    {"previous_response_id", API_REFUSED,
     .why = "previous_response_id: responses are not stored here; send the conversation as "
            "input"},
    {"conversation", API_REFUSED,
     .why = "conversation: conversations are not stored here; send the conversation as input"},
    {"prompt", API_REFUSED, .why = "prompt: stored prompts are not supported; send input"},
    {"text", API_READ, .read = responses_read_text},
    {"background", API_REFUSED, .accepts = "false",
     .why = "background: responses run in the foreground here (nothing is stored to poll)"},
    {"n", API_REFUSED, .accepts = "1",
     .why = "n: one output per response (send a request per sample)"},
    {"top_logprobs", API_REFUSED, .accepts = "0",
     .why = "top_logprobs: /v1/responses reports no logprobs here (/v1/chat/completions does)"},
    {"logprobs", API_REFUSED, .accepts = "0",
     .why = "logprobs: /v1/responses reports no logprobs here (/v1/chat/completions does)"},
    {"include", API_REFUSED, .accepts = "[]",
     .why = "include: no extra output (logprobs, reasoning, tool results) is made here"},
    {"truncation", API_REFUSED, .accepts = "\"disabled\"",
     .why = "truncation: only \"disabled\" (an input longer than the context is refused, never "
            "cut)"},
    {"reasoning", API_REFUSED,
     .why = "reasoning: this model does not reason (no effort or "
            "summary to set)"},
    {"store", API_IGNORED, .why = "nothing is stored: the response says \"store\": false"},
    {"metadata", API_IGNORED, .why = "kept with a stored response, and none is stored"},
    {"user", API_IGNORED, .why = "an end-user id for OpenAI's abuse monitoring"},
    {"safety_identifier", API_IGNORED, .why = "an end-user id for OpenAI's abuse monitoring"},
    {"prompt_cache_key", API_IGNORED, .why = "the prefix cache needs no key"},
    {"service_tier", API_IGNORED, .why = "one tier here"},
    {"parallel_tool_calls", API_IGNORED, .why = "tools are refused: no tool call to limit"},
    {"max_tool_calls", API_IGNORED, .why = "tools are refused: no tool call to limit"},
};

// --- the objects ---

// {"type": "output_text", "text", "annotations": []}; NULL on OOM.
static cJSON *responses_part(const char *text) {
    cJSON *j = cJSON_CreateObject();
    if (j && cJSON_AddStringToObject(j, "type", "output_text") &&
        cJSON_AddStringToObject(j, "text", text) && cJSON_AddArrayToObject(j, "annotations"))
        return j;
    cJSON_Delete(j);
    return NULL;
}

// The output message {"id", "type": "message", "status", "role": "assistant", "content"}:
// content [] while in progress (text NULL), else [the output_text part of text].
static cJSON *responses_message(const Responses *rs, const char *status, const char *text) {
    cJSON *j = cJSON_CreateObject();
    cJSON *j_content = NULL;
    int ok = j && cJSON_AddStringToObject(j, "id", rs->msg_id) &&
             cJSON_AddStringToObject(j, "type", "message") &&
             cJSON_AddStringToObject(j, "status", status) &&
             cJSON_AddStringToObject(j, "role", "assistant") &&
             (j_content = cJSON_AddArrayToObject(j, "content"));
    if (ok && text) {
        cJSON *j_part = responses_part(text);
        ok = cJSON_AddItemToArray(j_content, j_part);
        if (!ok) cJSON_Delete(j_part);
    }
    if (ok) return j;
    cJSON_Delete(j);
    return NULL;
}

// The finished choice's text, and the response's status: "failed" when a stream failed or
// was cancelled midway, "incomplete" when max_output_tokens or the context cut it, else
// "completed".
static const char *responses_text(const JobRequest *job) {
    return job->choices[0].text.p ? job->choices[0].text.p : "";
}
static const char *responses_status(const JobRequest *job) {
    const Responses *rs = job->ctx;
    if (rs->fail_code) return "failed";
    return job->choices[0].state == SCHED_DONE_LENGTH ? "incomplete" : "completed";
}

// usage {input_tokens, input_tokens_details {cached_tokens}, output_tokens,
// output_tokens_details {reasoning_tokens}, total_tokens} into j.
static int responses_add_usage(const JobRequest *job, cJSON *j) {
    size_t prompt, generated;
    job_usage(job, &prompt, &generated);
    SchedStats st;
    sched_seq_stats(job->choices[0].sched_seq, &st);
    cJSON *j_u = cJSON_AddObjectToObject(j, "usage");
    cJSON *j_in = j_u ? cJSON_AddObjectToObject(j_u, "input_tokens_details") : NULL;
    cJSON *j_out = j_u ? cJSON_AddObjectToObject(j_u, "output_tokens_details") : NULL;
    return j_in && j_out && cJSON_AddNumberToObject(j_u, "input_tokens", (double)prompt) &&
           cJSON_AddNumberToObject(j_in, "cached_tokens", (double)st.cached_tokens) &&
           cJSON_AddNumberToObject(j_u, "output_tokens", (double)generated) &&
           cJSON_AddNumberToObject(j_out, "reasoning_tokens", 0) &&
           cJSON_AddNumberToObject(j_u, "total_tokens", (double)(prompt + generated));
}

// The request's own values echoed in the object: instructions and max_output_tokens (null
// when not given, as OpenAI has them), temperature and top_p.
static int responses_add_request(const Responses *rs, cJSON *j) {
    cJSON *j_i = rs->instructions ? cJSON_AddStringToObject(j, "instructions", rs->instructions)
                                  : cJSON_AddNullToObject(j, "instructions");
    cJSON *j_m = rs->max_output_tokens ? cJSON_AddNumberToObject(j, "max_output_tokens",
                                                                 (double)rs->max_output_tokens)
                                       : cJSON_AddNullToObject(j, "max_output_tokens");
    return j_i && j_m && cJSON_AddNumberToObject(j, "temperature", rs->temperature) &&
           cJSON_AddNumberToObject(j, "top_p", rs->top_p);
}

// What a text-only response without storage always says.
static int responses_add_fixed(cJSON *j) {
    cJSON *j_text = cJSON_AddObjectToObject(j, "text");
    cJSON *j_format = j_text ? cJSON_AddObjectToObject(j_text, "format") : NULL;
    return j_format && cJSON_AddStringToObject(j_format, "type", "text") &&
           cJSON_AddNullToObject(j, "previous_response_id") && cJSON_AddFalseToObject(j, "store") &&
           cJSON_AddArrayToObject(j, "tools") &&
           cJSON_AddStringToObject(j, "tool_choice", "none") &&
           cJSON_AddFalseToObject(j, "parallel_tool_calls") &&
           cJSON_AddStringToObject(j, "truncation", "disabled") &&
           cJSON_AddObjectToObject(j, "metadata");
}

// "error": null, or {"code", "message"} of a failed response (OpenAI's ResponseError).
static int responses_add_error(const Responses *rs, cJSON *j) {
    if (!rs->fail_code) return cJSON_AddNullToObject(j, "error") != NULL;
    cJSON *j_e = cJSON_AddObjectToObject(j, "error");
    return j_e && cJSON_AddStringToObject(j_e, "code", rs->fail_code) &&
           cJSON_AddStringToObject(j_e, "message", rs->fail_message);
}

// The response object: in progress (output [], usage null) or finished (the message, the
// usage, incomplete_details when cut, error when failed; the message of a failed one is
// "incomplete", with the text it had). NULL on OOM.
static cJSON *responses_object(const JobRequest *job, int finished) {
    const Responses *rs = job->ctx;
    const char *status = finished ? responses_status(job) : "in_progress";
    int cut = finished && !strcmp(status, "incomplete");
    cJSON *j = cJSON_CreateObject();
    cJSON *j_output = NULL, *j_details = NULL;
    int ok = j && cJSON_AddStringToObject(j, "id", job->id) &&
             cJSON_AddStringToObject(j, "object", "response") &&
             cJSON_AddNumberToObject(j, "created_at", (double)job->created) &&
             cJSON_AddStringToObject(j, "status", status) &&
             cJSON_AddStringToObject(j, "model", job->model->name) &&
             (j_output = cJSON_AddArrayToObject(j, "output")) && responses_add_request(rs, j) &&
             responses_add_fixed(j) && responses_add_error(rs, j);
    if (ok && cut) {
        j_details = cJSON_AddObjectToObject(j, "incomplete_details");
        ok = cJSON_AddStringToObject(j_details, "reason", "max_output_tokens") != NULL;
    } else if (ok) {
        ok = cJSON_AddNullToObject(j, "incomplete_details") != NULL;
    }
    if (ok && finished) {
        const char *msg_status = rs->fail_code ? "incomplete" : status;
        cJSON *j_msg = responses_message(rs, msg_status, responses_text(job));
        ok = cJSON_AddItemToArray(j_output, j_msg);
        if (!ok) cJSON_Delete(j_msg);
        ok = ok && responses_add_usage(job, j);
    } else if (ok) {
        ok = cJSON_AddNullToObject(j, "usage") != NULL;
    }
    if (ok) return j;
    cJSON_Delete(j);
    return NULL;
}

// --- the stream's events ---

// A new event {"type", "sequence_number"} (the next number); NULL on OOM.
static cJSON *responses_event_new(JobRequest *job, const char *type) {
    Responses *rs = job->ctx;
    cJSON *j = cJSON_CreateObject();
    if (j && cJSON_AddStringToObject(j, "type", type) &&
        cJSON_AddNumberToObject(j, "sequence_number", (double)rs->seq++))
        return j;
    cJSON_Delete(j);
    return NULL;
}

// "event: TYPE\ndata: <j>\n\n" (j consumed; NULL counts as OOM).
static int responses_event_send(JobRequest *job, cJSON *j) {
    const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(j_type) || job_sse_raw(job, "event: ") ||
        job_sse_raw(job, j_type->valuestring) || job_sse_raw(job, "\n")) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

// j (an event; consumed, NULL counts as OOM) with j_what (consumed) as its member name, sent.
static int responses_send_with(JobRequest *job, cJSON *j, const char *name, cJSON *j_what) {
    if (!j || !j_what || !cJSON_AddItemToObject(j, name, j_what)) {
        cJSON_Delete(j);
        cJSON_Delete(j_what);
        return KG_ENOMEM;
    }
    return responses_event_send(job, j);
}

// An event about the message's one text part: {type, sequence_number, item_id, output_index
// 0, content_index 0}, more members to add; NULL on OOM.
static cJSON *responses_part_event(JobRequest *job, const char *type) {
    const Responses *rs = job->ctx;
    cJSON *j = responses_event_new(job, type);
    if (j && cJSON_AddStringToObject(j, "item_id", rs->msg_id) &&
        cJSON_AddNumberToObject(j, "output_index", 0) &&
        cJSON_AddNumberToObject(j, "content_index", 0))
        return j;
    cJSON_Delete(j);
    return NULL;
}

// An output_item event {type, sequence_number, output_index 0}, its item to add; NULL on OOM.
static cJSON *responses_item_event(JobRequest *job, const char *type) {
    cJSON *j = responses_event_new(job, type);
    if (j && cJSON_AddNumberToObject(j, "output_index", 0)) return j;
    cJSON_Delete(j);
    return NULL;
}

// Before any token: response.created, response.in_progress, the message and its part added.
static int responses_stream_begin(JobRequest *job) {
    const Responses *rs = job->ctx;
    int rc = responses_send_with(job, responses_event_new(job, "response.created"), "response",
                                 responses_object(job, 0));
    if (!rc)
        rc = responses_send_with(job, responses_event_new(job, "response.in_progress"), "response",
                                 responses_object(job, 0));
    if (!rc)
        rc = responses_send_with(job, responses_item_event(job, "response.output_item.added"),
                                 "item", responses_message(rs, "in_progress", NULL));
    if (!rc)
        rc = responses_send_with(job, responses_part_event(job, "response.content_part.added"),
                                 "part", responses_part(""));
    return rc;
}

// Streamed: response.output_text.delta with t's text (none for a token without text).
static int responses_token(JobRequest *job, size_t i, const SchedToken *t) {
    (void)i;
    if (!job->stream || t->prompt || !t->text_len) return KG_OK;
    char *s = strndup(t->text, t->text_len);
    cJSON *j = s ? responses_part_event(job, "response.output_text.delta") : NULL;
    int ok = j && cJSON_AddStringToObject(j, "delta", s) && cJSON_AddArrayToObject(j, "logprobs");
    free(s);
    if (!ok) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return responses_event_send(job, j);
}

// The message has ended: its text done, its part done, the item done. Not when it failed
// or was cancelled: responses_stream_fail then ends the stream with response.failed.
static int responses_choice_end(JobRequest *job, size_t i) {
    (void)i;
    const Responses *rs = job->ctx;
    SchedState state = job->choices[0].state;
    if (state == SCHED_DONE_ERROR || state == SCHED_DONE_CANCELLED) return KG_OK;
    const char *text = responses_text(job);
    cJSON *j = responses_part_event(job, "response.output_text.done");
    if (!j || !cJSON_AddStringToObject(j, "text", text) || !cJSON_AddArrayToObject(j, "logprobs")) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    int rc = responses_event_send(job, j);
    if (!rc)
        rc = responses_send_with(job, responses_part_event(job, "response.content_part.done"),
                                 "part", responses_part(text));
    if (!rc)
        rc = responses_send_with(job, responses_item_event(job, "response.output_item.done"),
                                 "item", responses_message(rs, responses_status(job), text));
    return rc;
}

// The last event: response.completed, or response.incomplete, with the whole object.
static int responses_stream_end(JobRequest *job) {
    const char *type =
        strcmp(responses_status(job), "incomplete") ? "response.completed" : "response.incomplete";
    return responses_send_with(job, responses_event_new(job, type), "response",
                               responses_object(job, 1));
}

// OpenAI's ResponseError code for a KG_E* error.
static const char *responses_error_code(int code) {
    switch (code) {
    case KG_EBUSY:
        return "rate_limit_exceeded";
    case KG_EINVAL:
    case KG_ERANGE:
    case KG_EUNSUP:
        return "invalid_prompt";
    default:
        return "server_error"; // cancelled (shutting down), out of memory, a backend failure
    }
}

// A stream that failed or was cancelled midway ends as OpenAI's does: response.failed with
// the response (status "failed", error {code, message}, the message so far "incomplete"),
// never the *.done events of a completed message.
static int responses_stream_fail(JobRequest *job, int code, const char *message) {
    Responses *rs = job->ctx;
    rs->fail_code = responses_error_code(code);
    snprintf(rs->fail_message, sizeof rs->fail_message, "%s", message);
    return responses_send_with(job, responses_event_new(job, "response.failed"), "response",
                               responses_object(job, 1));
}

static cJSON *responses_reply(JobRequest *job) { return responses_object(job, 1); }

static void responses_free(void *ctx) {
    Responses *rs = ctx;
    if (!rs) return;
    free(rs->prompt);
    free(rs->instructions);
    free(rs);
}

static const JobHooks RESPONSES_HOOKS = {.token = responses_token,
                                         .choice_end = responses_choice_end,
                                         .stream_end = responses_stream_end,
                                         .stream_fail = responses_stream_fail,
                                         .reply = responses_reply,
                                         .free = responses_free};

// --- the request ---

// Item i of an input array: a message (type "message" or none) with a role.
static int responses_item(ChatTurns *turns, const cJSON *j_item, size_t i, char *err) {
    static const char *const TEXT_PARTS[] = {"input_text", "output_text", NULL};
    char where[32];
    snprintf(where, sizeof where, "input[%zu]", i);
    const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(j_item, "type");
    const cJSON *j_role = cJSON_GetObjectItemCaseSensitive(j_item, "role");
    if (!cJSON_IsObject(j_item)) return kg_err(err, KG_EINVAL, "%s must be an object", where);
    if (cJSON_IsString(j_type) && strcmp(j_type->valuestring, "message"))
        return kg_err(err, KG_EUNSUP, "%s: items of type %.*s are not supported (only messages)",
                      where, api_quote_len(j_type->valuestring, 32), j_type->valuestring);
    if (!cJSON_IsString(j_role))
        return kg_err(err, KG_EINVAL, "%s must be a message with a string role", where);
    return chat_turns_add(turns, j_role->valuestring,
                          cJSON_GetObjectItemCaseSensitive(j_item, "content"), TEXT_PARTS, where,
                          err);
}

// instructions (a system message) and input (a string: one user message; or messages) into
// turns.
static int responses_turns(const cJSON *j_req, ChatTurns *turns, const char **param, char *err) {
    const cJSON *j_instr = cJSON_GetObjectItemCaseSensitive(j_req, "instructions");
    const cJSON *j_input = cJSON_GetObjectItemCaseSensitive(j_req, "input");
    *param = "instructions";
    if (j_instr && !cJSON_IsNull(j_instr) && !cJSON_IsString(j_instr))
        return kg_err(err, KG_EINVAL, "instructions must be a string");
    int rc = cJSON_IsString(j_instr)
                 ? chat_turns_add(turns, "system", j_instr, NULL, "instructions", err)
                 : KG_OK;
    *param = "input";
    if (rc) return rc;
    if (cJSON_IsString(j_input)) return chat_turns_add(turns, "user", j_input, NULL, "input", err);
    if (!cJSON_IsArray(j_input))
        return kg_err(err, KG_EINVAL, "input is required: a string or an array of messages");
    size_t n = (size_t)cJSON_GetArraySize(j_input);
    if (n == 0) return kg_err(err, KG_ERANGE, "input is empty");
    if (n > CHAT_MAX_MESSAGES)
        return kg_err(err, KG_ERANGE, "input: at most %d messages (got %zu)", CHAT_MAX_MESSAGES, n);
    size_t i = 0;
    for (const cJSON *j = j_input->child; !rc && j; j = j->next, i++)
        rc = responses_item(turns, j, i, err);
    return rc;
}

// The messages rendered and encoded into rs->prompt.
static int responses_prompt(const ApiModel *served, const cJSON *j_req, Responses *rs,
                            const char **param, char *err) {
    ChatTurns turns;
    int rc = chat_turns_init(&turns, CHAT_MAX_MESSAGES + 1, err); // + the instructions
    if (!rc) rc = responses_turns(j_req, &turns, param, err);
    if (!rc) rc = chat_turns_prompt(served, &turns, &rs->prompt, &rs->n_prompt, err);
    chat_turns_free(&turns);
    return rc;
}

// The request into *served (the model it names), rs and s. KG_OK, or the error with *param naming
// the field at fault.
static int responses_parse(const ApiApp *app, const cJSON *j_req, const ApiModel **served,
                           Responses *rs, ApiSampling *s, const char **param, char *err) {
    *param = "model";
    int rc = api_model(app, j_req, served, err);
    const ApiRequest q = {.model = *served, .j_req = j_req};
    char none; // the table's rows store nothing
    if (!rc)
        rc = api_fields(&q, RESPONSES_FIELDS, sizeof RESPONSES_FIELDS / sizeof *RESPONSES_FIELDS,
                        &none, param, err);
    if (!rc) rc = api_sampling(*served, j_req, s, 0, 1, param, err); // 0: not given
    if (rc) return rc;
    *param = "max_output_tokens";
    rc = json_int(j_req, "max_output_tokens", &rs->max_output_tokens, s->max_tokens, 1,
                  (long long)(*served)->n_ctx, err);
    if (!rc) rc = responses_prompt(*served, j_req, rs, param, err);
    if (rc) return rc;
    const cJSON *j_instr = cJSON_GetObjectItemCaseSensitive(j_req, "instructions");
    if (cJSON_IsString(j_instr) && !(rs->instructions = strdup(j_instr->valuestring)))
        return kg_err(err, KG_ENOMEM, "out of memory");
    s->max_tokens =
        rs->max_output_tokens ? rs->max_output_tokens : chat_max_tokens(*served, rs->n_prompt);
    s->n_logprobs = 0; // the text's logprobs are not reported here
    rs->temperature = s->temperature;
    rs->top_p = s->top_p;
    return KG_OK;
}

enum MHD_Result ep_responses(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    ApiSampling s = {0};
    JobRequest *job = NULL;
    Responses *rs = calloc(1, sizeof *rs);
    int rc = rs ? responses_parse(app, j_req, &served, rs, &s, &param, err)
                : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) job = job_new(served, &RESPONSES_HOOKS, rs, 1, "resp", s.stream);
    if (!rc && !job) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        responses_free(rs);
        api_sampling_free(&s);
        return srv_reply_kg(r, rc, err, param);
    }
    job->id[strlen("resp")] = '_'; // OpenAI's ids read "resp_...", "msg_..."
    snprintf(rs->msg_id, sizeof rs->msg_id, "msg_%s", job->id + strlen("resp_"));
    SchedParams params = api_sched_params(&s, rs->prompt, rs->n_prompt);
    params.stop_tokens = &served->chat_stop_id;
    params.n_stop_tokens = served->chat_stop_id >= 0;
    if (s.stream && responses_stream_begin(job)) job->oom = 1;
    ret = job_run(r, job, &params);
    api_sampling_free(&s); // sched_submit copied what it keeps
    return ret;
}
