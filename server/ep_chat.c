// ep_chat.c — POST /v1/chat/completions: OpenAI's chat completions, which most client code
// speaks (LangChain's ChatOpenAI, the AI SDK's chat model).
//
//   {"messages": [{"role": "system"|"user"|"assistant", "content": a string or an array of
//    {"type": "text", "text"} parts}], "n" 1..16, "max_tokens" (or "max_completion_tokens";
//    absent: to the end of the context, as OpenAI's chat has it), "stream", "stream_options":
//    {"include_usage"}, "logprobs" (bool) with "top_logprobs" 0..20, and the sampling fields of
//    /v1/completions; "model" absent or the served one}
//   -> {id, object: "chat.completion", created, model, choices [{index, message {role:
//       "assistant", content}, logprobs, finish_reason}], usage}; stream: chat.completion.chunk
//       objects: a first delta {role, content: ""} per choice, content deltas, a last delta {}
//       with its finish_reason, the usage chunk if asked, then "data: [DONE]".
//
// KoGPT2 is a base model: the messages become one prompt through the model's chat template
// (tokenizer_config.json's chat_template, --chat-template FILE, or the default: KoGPT2-chatbot's
// <usr>/<sys> form where the tokenizer has those tokens, "role: content" lines otherwise;
// chat_template/chat_template.h; rendered and encoded by chat_prompt.h, which /v1/responses
// shares). The reply ends at the end-of-text token or where the model
// starts the user's next turn (<usr>). The request's own fields are CHAT_FIELDS (a table, as
// params.c reads it); the stream ends as openai.h has it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kg_json.h"
#include "chat_prompt.h"
#include "chat_template/chat_template.h"
#include "job.h"
#include "openai.h"
#include "server/http/json_in.h"
#include "server/http/log.h"

typedef struct {
    int *prompt; // (n_prompt) ids: the rendered messages
    size_t n_prompt;
    int want_logprobs, include_usage;
    size_t n_choices;
    cJSON **j_logprobs; // (n_choices) OpenAI's {"content": [...]} when logprobs is true
} Chat;

// The request's own fields (CHAT_FIELDS), beside the sampling ones.
typedef struct {
    long long n; // samples of the one prompt
} ChatFields;

// "response_format": absent, or of type "text".
static int chat_read_response_format(const ApiRequest *q, const ApiField *f, void *out,
                                     const char **param, char *err) {
    (void)out;
    (void)param;
    const cJSON *j_format = cJSON_GetObjectItemCaseSensitive(q->j_req, f->name);
    const cJSON *j_type = cJSON_GetObjectItemCaseSensitive(j_format, "type");
    if (!cJSON_IsString(j_type) || !strcmp(j_type->valuestring, "text")) return KG_OK;
    return kg_err(err, KG_EUNSUP, "response_format %.*s is not supported (only text)",
                  api_quote_len(j_type->valuestring, 32), j_type->valuestring);
}

// OpenAI's request fields beside messages, model and the sampling ones. What a base model
// cannot do is refused by name, never ignored: tools and functions, and a response_format
// other than text (LangChain's bindTools and withStructuredOutput send them), audio, reasoning;
// what changes nothing here is accepted and ignored on purpose.
static const ApiField CHAT_FIELDS[] = {
    {"tools", API_REFUSED, .why = "tools: tool calls are not supported by this model"},
    {"tool_choice", API_REFUSED, .why = "tool_choice: tool calls are not supported by this model"},
    {"functions", API_REFUSED, .why = "functions: tool calls are not supported by this model"},
    {"function_call", API_REFUSED,
     .why = "function_call: tool calls are not supported by this model"},
    {"response_format", API_READ, .read = chat_read_response_format},
    {"n", API_INT, offsetof(ChatFields, n), .def = 1, .lo = 1, .hi = API_MAX_CHOICES},
    {"audio", API_REFUSED, .why = "audio: this model reads and writes text only"},
    {"modalities", API_REFUSED, .accepts = "[\"text\"]",
     .why = "modalities: this model writes text only ([\"text\"])"},
    {"reasoning_effort", API_REFUSED,
     .why = "reasoning_effort: this model does not reason (no effort to set)"},
    {"verbosity", API_REFUSED,
     .why = "verbosity: not supported (max_tokens and stop bound a reply's length)"},
    {"web_search_options", API_REFUSED, .why = "web_search_options: this server has no web search"},
    {"prediction", API_IGNORED, .why = "a hint that speeds a reply up; the reply is the same"},
    {"store", API_IGNORED, .why = "nothing is stored here"},
    {"metadata", API_IGNORED, .why = "kept with a stored completion, and none is stored"},
    {"user", API_IGNORED, .why = "an end-user id for OpenAI's abuse monitoring"},
    {"safety_identifier", API_IGNORED, .why = "an end-user id for OpenAI's abuse monitoring"},
    {"prompt_cache_key", API_IGNORED, .why = "the prefix cache needs no key"},
    {"service_tier", API_IGNORED, .why = "one tier here"},
    {"parallel_tool_calls", API_IGNORED, .why = "tools are refused: no tool call to limit"},
};

// {"token", "logprob", "bytes"}: token (NUL-terminated) and bytes[0..len).
static cJSON *chat_token_logprob(const char *token, const char *bytes, size_t len, float logprob) {
    cJSON *j = cJSON_CreateObject();
    cJSON *j_bytes = NULL;
    int ok = token && j && cJSON_AddStringToObject(j, "token", token) &&
             cJSON_AddNumberToObject(j, "logprob", logprob);
    if (ok) j_bytes = cJSON_AddArrayToObject(j, "bytes");
    ok = j_bytes != NULL;
    for (size_t i = 0; ok && i < len; i++)
        ok = cJSON_AddItemToArray(j_bytes, cJSON_CreateNumber((unsigned char)bytes[i]));
    if (ok) return j;
    cJSON_Delete(j);
    return NULL;
}

// One generated token's entry of logprobs.content (the text it completes), with its
// top_logprobs (each candidate as api_token_logprob_text gives it, its bytes beside).
static cJSON *chat_logprob_entry(const Tokenizer *tok, const SchedToken *t) {
    char *s = t->text_len ? strndup(t->text, t->text_len) : strdup(""); // (text may be NULL)
    cJSON *j = chat_token_logprob(s, t->text, t->text_len, t->logprob);
    free(s);
    cJSON *j_top = j ? cJSON_AddArrayToObject(j, "top_logprobs") : NULL;
    for (size_t k = 0; j_top && k < t->n_candidates; k++) {
        char *bytes = NULL;
        size_t n = 0;
        char *text = api_token_logprob_text(tok, t->candidates[k].id, &bytes, &n);
        cJSON *j_c = text ? chat_token_logprob(text, bytes, n, t->candidates[k].logprob) : NULL;
        free(text);
        free(bytes);
        if (!cJSON_AddItemToArray(j_top, j_c)) {
            cJSON_Delete(j_c);
            j_top = NULL;
        }
    }
    if (j_top) return j;
    cJSON_Delete(j);
    return NULL;
}

// Choice i of a chunk: {"index", "delta": {role?, content?}, "logprobs", "finish_reason"}
// into j_choices (j_lp consumed).
static int chat_chunk_choice(cJSON *j_choices, size_t i, int with_role, const char *content,
                             cJSON *j_lp, const char *finish) {
    cJSON *j_c = cJSON_CreateObject();
    cJSON *j_delta = NULL;
    if (!j_c || !cJSON_AddItemToArray(j_choices, j_c)) {
        cJSON_Delete(j_c);
        goto oom;
    }
    if (!cJSON_AddNumberToObject(j_c, "index", (double)i)) goto oom;
    j_delta = cJSON_AddObjectToObject(j_c, "delta");
    if (!j_delta) goto oom;
    if (with_role && !cJSON_AddStringToObject(j_delta, "role", "assistant")) goto oom;
    if (content && !cJSON_AddStringToObject(j_delta, "content", content)) goto oom;
    if (openai_add_logprobs(j_c, j_lp)) return KG_ENOMEM;
    return openai_add_finish(j_c, finish);
oom:
    cJSON_Delete(j_lp);
    return KG_ENOMEM;
}

// A chunk of choice i: delta {role?, content?}, logprobs (j_lp consumed), finish_reason.
static int chat_chunk(JobRequest *job, size_t i, int with_role, const char *content, cJSON *j_lp,
                      const char *finish) {
    cJSON *j_choices;
    cJSON *j = job_openai_object(job, "chat.completion.chunk", &j_choices);
    if (!j) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    if (chat_chunk_choice(j_choices, i, with_role, content, j_lp, finish)) {
        cJSON_Delete(j);
        return KG_ENOMEM;
    }
    return job_sse_json(job, j);
}

// Not streamed: j_entry (consumed; NULL: none) joins choice i's logprobs.content.
static int chat_logprobs_keep(Chat *ch, size_t i, cJSON *j_entry) {
    if (!j_entry) return KG_OK;
    if (cJSON_AddItemToArray(cJSON_GetObjectItem(ch->j_logprobs[i], "content"), j_entry))
        return KG_OK;
    cJSON_Delete(j_entry);
    return KG_ENOMEM;
}

// Streamed: a chunk of token t's text with, when asked, {"content": [j_entry]} (consumed).
static int chat_token_chunk(JobRequest *job, size_t i, const SchedToken *t, cJSON *j_entry) {
    cJSON *j_lp = NULL;
    if (j_entry) {
        j_lp = cJSON_CreateObject();
        cJSON *j_content = j_lp ? cJSON_AddArrayToObject(j_lp, "content") : NULL;
        if (!cJSON_AddItemToArray(j_content, j_entry)) {
            cJSON_Delete(j_lp);
            cJSON_Delete(j_entry);
            return KG_ENOMEM;
        }
    }
    char *s = strndup(t->text, t->text_len);
    if (!s) {
        cJSON_Delete(j_lp);
        return KG_ENOMEM;
    }
    int rc = chat_chunk(job, i, 0, s, j_lp, NULL);
    free(s);
    return rc;
}

static int chat_token(JobRequest *job, size_t i, const SchedToken *t) {
    Chat *ch = job->ctx;
    cJSON *j_entry = NULL;
    if (ch->want_logprobs) {
        j_entry = chat_logprob_entry(job->model->tok, t);
        if (!j_entry) return KG_ENOMEM;
    }
    if (!job->stream) return chat_logprobs_keep(ch, i, j_entry);
    return chat_token_chunk(job, i, t, j_entry);
}

static int chat_choice_end(JobRequest *job, size_t i) {
    return chat_chunk(job, i, 0, NULL, NULL, job_finish_reason(job, i, 1));
}

static int chat_stream_end(JobRequest *job) {
    Chat *ch = job->ctx;
    return openai_stream_end(job, "chat.completion.chunk", ch->include_usage);
}

// Choice i of the whole reply: {"index", "message": {role, content}, "logprobs" (moved into
// the reply), "finish_reason"} into j_choices.
static int chat_reply_choice(JobRequest *job, cJSON *j_choices, size_t i) {
    Chat *ch = job->ctx;
    const char *text = job->choices[i].text.p ? job->choices[i].text.p : "";
    cJSON *j_lp = NULL;
    if (ch->j_logprobs) {
        j_lp = ch->j_logprobs[i];
        ch->j_logprobs[i] = NULL; // moved into the reply
    }
    cJSON *j_c = cJSON_CreateObject();
    cJSON *j_m = NULL;
    if (!j_c || !cJSON_AddItemToArray(j_choices, j_c)) {
        cJSON_Delete(j_c);
        goto oom;
    }
    if (!cJSON_AddNumberToObject(j_c, "index", (double)i)) goto oom;
    j_m = cJSON_AddObjectToObject(j_c, "message");
    if (!j_m || !cJSON_AddStringToObject(j_m, "role", "assistant") ||
        !cJSON_AddStringToObject(j_m, "content", text))
        goto oom;
    if (openai_add_logprobs(j_c, j_lp)) return KG_ENOMEM;
    return openai_add_finish(j_c, job_finish_reason(job, i, 1));
oom:
    cJSON_Delete(j_lp);
    return KG_ENOMEM;
}

static cJSON *chat_reply(JobRequest *job) {
    return openai_reply(job, "chat.completion", chat_reply_choice);
}

static void chat_free(void *ctx) {
    Chat *ch = ctx;
    if (!ch) return;
    for (size_t i = 0; ch->j_logprobs && i < ch->n_choices; i++)
        cJSON_Delete(ch->j_logprobs[i]);
    free(ch->j_logprobs);
    free(ch->prompt);
    free(ch);
}

static const JobHooks CHAT_HOOKS = {.token = chat_token,
                                    .choice_end = chat_choice_end,
                                    .stream_end = chat_stream_end,
                                    .reply = chat_reply,
                                    .free = chat_free};

// The messages rendered by the chat template and encoded into ch->prompt (chat_prompt.h).
static int chat_prompt(const ApiModel *served, const cJSON *j_req, Chat *ch, char *err) {
    static const char *const TEXT_PARTS[] = {"text", NULL};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_req, "messages");
    if (!cJSON_IsArray(j)) return kg_err(err, KG_EINVAL, "messages must be an array of messages");
    size_t n = (size_t)cJSON_GetArraySize(j);
    if (n == 0) return kg_err(err, KG_ERANGE, "messages is empty");
    if (n > CHAT_MAX_MESSAGES)
        return kg_err(err, KG_ERANGE, "messages: at most %d (got %zu)", CHAT_MAX_MESSAGES, n);
    ChatTurns turns;
    int rc = chat_turns_init(&turns, n, err);
    size_t i = 0;
    for (const cJSON *j_msg = j->child; !rc && j_msg; j_msg = j_msg->next, i++) {
        const cJSON *j_role = cJSON_GetObjectItemCaseSensitive(j_msg, "role");
        char where[32];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!cJSON_IsObject(j_msg) || !cJSON_IsString(j_role))
            rc = kg_err(err, KG_EINVAL, "%s must be an object with a string role", where);
        else
            rc = chat_turns_add(&turns, j_role->valuestring,
                                cJSON_GetObjectItemCaseSensitive(j_msg, "content"), TEXT_PARTS,
                                where, err);
    }
    if (!rc) rc = chat_turns_prompt(served, &turns, &ch->prompt, &ch->n_prompt, err);
    chat_turns_free(&turns);
    return rc;
}

// Non-streamed logprobs: one {"content": []} per choice, filled token by token.
static int chat_logprobs_new(Chat *ch, char *err) {
    ch->j_logprobs = calloc(ch->n_choices, sizeof *ch->j_logprobs);
    if (!ch->j_logprobs) return kg_err(err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; i < ch->n_choices; i++) {
        ch->j_logprobs[i] = cJSON_CreateObject();
        if (!ch->j_logprobs[i] || !cJSON_AddArrayToObject(ch->j_logprobs[i], "content"))
            return kg_err(err, KG_ENOMEM, "out of memory");
    }
    return KG_OK;
}

// The request into ch and s, for the model it names (*served). KG_OK, or the error with *param
// naming the field at fault.
static int chat_parse(const ApiApp *app, const cJSON *j_req, const ApiModel **served, Chat *ch,
                      ApiSampling *s, const char **param, char *err) {
    ChatFields f;
    *param = "model";
    int rc = api_model(app, j_req, served, err);
    if (rc) return rc;
    const ApiRequest q = {.model = *served, .j_req = j_req};
    rc = api_fields(&q, CHAT_FIELDS, sizeof CHAT_FIELDS / sizeof *CHAT_FIELDS, &f, param, err);
    if (!rc) rc = api_sampling(*served, j_req, s, 0, 1, param, err); // 0: not given
    if (rc) return rc;
    // "max_completion_tokens", the newer name of max_tokens, wins when both are given
    *param = "max_completion_tokens";
    rc = json_int(j_req, "max_completion_tokens", &s->max_tokens, s->max_tokens, 1,
                  (long long)(*served)->n_ctx, err);
    if (rc) return rc;
    *param = "messages";
    rc = chat_prompt(*served, j_req, ch, err);
    if (rc) return rc;
    if (!s->max_tokens) s->max_tokens = chat_max_tokens(*served, ch->n_prompt);
    ch->want_logprobs = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j_req, "logprobs"));
    ch->include_usage = s->include_usage;
    ch->n_choices = (size_t)f.n;
    if (ch->want_logprobs && !s->stream) return chat_logprobs_new(ch, err);
    return KG_OK;
}

enum MHD_Result ep_chat_completions(SrvReq *r, const cJSON *j_req) {
    enum MHD_Result ret = MHD_NO;
    ApiApp *app = api_ready(r, &ret);
    if (!app) return ret;
    char err[KG_ERRLEN];
    const char *param = "model";
    const ApiModel *served = NULL;
    ApiSampling s = {0};
    JobRequest *job = NULL;
    SchedParams params[API_MAX_CHOICES];
    Chat *ch = calloc(1, sizeof *ch);
    int rc = ch ? chat_parse(app, j_req, &served, ch, &s, &param, err)
                : kg_err(err, KG_ENOMEM, "out of memory");
    if (!rc) job = job_new(served, &CHAT_HOOKS, ch, ch->n_choices, "chatcmpl", s.stream);
    if (!rc && !job) rc = kg_err(err, KG_ENOMEM, "out of memory");
    if (rc) {
        chat_free(ch);
        api_sampling_free(&s);
        return srv_reply_kg(r, rc, err, param);
    }
    job->n_per_prompt = ch->n_choices; // one prompt: usage counts it once
    for (size_t i = 0; i < ch->n_choices; i++) {
        params[i] = api_sched_params(&s, ch->prompt, ch->n_prompt);
        params[i].seed = (uint64_t)s.seed + i; // each sample its own stream
        params[i].stop_tokens = &served->chat_stop_id;
        params[i].n_stop_tokens = served->chat_stop_id >= 0;
        if (s.stream && chat_chunk(job, i, 1, "", NULL, NULL)) job->oom = 1; // role first
    }
    ret = job_run(r, job, params);
    api_sampling_free(&s); // sched_submit copied what it keeps
    return ret;
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (the
// "default" one). *source is malloc'd, NULL when there is none.
static int chat_config_template(const char *model_dir, char **source, char *err) {
    *source = NULL;
    char path[4096], *text;
    if (kg_path_join(path, sizeof path, model_dir, "tokenizer_config.json") || access(path, F_OK))
        return KG_OK;
    size_t len;
    int rc = kg_read_file(path, 16 << 20, &text, &len, err);
    if (rc) return rc;
    // a NUL in a string would cut the template short, or make "default\u0000x" "default"
    if ((rc = kg_json_check_nul(text, len, path, err))) {
        free(text);
        return rc;
    }
    cJSON *j_root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j_root) return kg_err(err, KG_EFORMAT, "%s: not JSON", path);
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(j_root, "chat_template");
    if (cJSON_IsArray(j))
        for (const cJSON *e = j->child; e; e = e->next) {
            const cJSON *j_name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(j_name) && !strcmp(j_name->valuestring, "default"))
                j = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
    if (cJSON_IsString(j)) {
        *source = strdup(j->valuestring);
        if (!*source) rc = kg_err(err, KG_ENOMEM, "out of memory");
    }
    cJSON_Delete(j_root);
    return rc;
}

// 1 when the tokenizer encodes the text of the special token id as that one id (tokenizer.json's
// added tokens do; SentencePiece reads "</s>" as four characters), or there is no such token.
static int chat_reads_special(const Tokenizer *tok, int id) {
    if (id < 0) return 1;
    const char *text = tok_piece(tok, id);
    int *ids = NULL;
    size_t n = 0;
    int one = !tok_encode(tok, text, strlen(text), &ids, &n, NULL) && n == 1 && ids[0] == id;
    free(ids);
    return one;
}

int ep_chat_setup(ApiModel *served, const char *model_dir, const char *template_file,
                  ChatTemplate **out, char *err) {
    *out = NULL;
    const Tokenizer *tok = served->tok;
    TokSpecial sp = tok_special(tok);
    served->bos_token = sp.bos >= 0 ? tok_piece(tok, sp.bos) : "";
    served->eos_token = sp.eos >= 0 ? tok_piece(tok, sp.eos) : "";
    served->chat_split_special =
        !chat_reads_special(tok, sp.bos) || !chat_reads_special(tok, sp.eos);
    int usr = tok_piece_id(tok, "<usr>"), sys = tok_piece_id(tok, "<sys>");
    served->chat_stop_id = usr;
    char *source = NULL;
    size_t source_len = 0;
    const char *what = "the default chat template";
    int rc = KG_OK;
    if (template_file) {
        rc = kg_read_file(template_file, 1 << 20, &source, &source_len, err);
        what = template_file;
        const char *nul = rc ? NULL : memchr(source, 0, source_len);
        if (nul) { // the parse below measures the text with strlen: it would end there
            rc = kg_err(err, KG_EFORMAT, "%s: a NUL byte at byte %zu (not a template)",
                        template_file, (size_t)(nul - source));
            free(source);
        }
    } else {
        rc = chat_config_template(model_dir, &source, err);
        if (source) what = "tokenizer_config.json's chat_template";
    }
    if (rc) return rc;
    const char *text = source                 ? source
                       : usr >= 0 && sys >= 0 ? CHAT_TEMPLATE_USR_SYS
                                              : CHAT_TEMPLATE_PLAIN;
    char why[KG_ERRLEN];
    rc = chat_template_parse(out, text, strlen(text), why);
    free(source);
    if (!rc) {
        served->chat_template = *out;
        return KG_OK;
    }
    kg_err(err, rc, "%s: %s", what, why);
    if (template_file) return rc; // asked for by name: refuse to start
    // the model's own template is outside the subset (tool branches often are): the rest of
    // the API still serves, and chat answers 422 with this reason instead of guessing a format
    snprintf(served->chat_error, sizeof served->chat_error, "%s; pass --chat-template FILE", err);
    log_msg(LOG_WARN, "/v1/chat/completions is refused: %s", served->chat_error);
    return KG_OK;
}
