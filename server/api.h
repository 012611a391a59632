// api.h — what kogpt2d's endpoints share: the app state (the served models, each with its
// engine, tokenizer and figures; main.c fills it), the request parsing every endpoint does the same
// way (params.c: readiness, prompt, model, and request fields read from a table), and one handler
// per endpoint (ep_*.c), which routes.c puts in the table.
//
// To add an endpoint: write its handler in a new ep_<name>.c (parse with api_fields() and a
// table of its fields; answer with srv_reply_*() or, for engine work, a JobRequest of job.h),
// declare it below, add its row to ROUTES in routes.c, and the file to kgapi in
// server/CMakeLists.txt (the daemon and the HTTP fuzzer both link that library).
#ifndef API_H
#define API_H

#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "server/engine/sched.h"
#include "server/http/http.h"

#define API_MAX_TOKENIZE   65536 // default --max-tokenize
#define API_MAX_CANDIDATES 100   // next-token candidates
#define API_MAX_LOGPROBS   20    // top logprobs per generated token (OpenAI's limit)
#define API_MAX_STOP       4     // stop strings (OpenAI's limit)
#define API_MAX_STOP_LEN   256   // bytes per stop string
#define API_MAX_CHOICES    16    // prompts x n per completions request
#define API_MAX_LOGIT_BIAS 1024  // logit_bias entries

typedef struct ChatTemplate ChatTemplate;
typedef struct ScoreMemo ScoreMemo;

// One served model: what an endpoint needs of it. --model given more than once serves several,
// each with its own tokenizer, weights and engine (its batching, memory and prefix cache); the
// request's "model" picks one (api_model).
typedef struct {
    const char *name; // NAME of --model NAME=DIR, the --alias, or the directory's name
    Sched *sched;
    const Tokenizer *tok;
    size_t n_ctx;                      // longest prompt (--ctx-size, <= the model's positions)
    size_t vocab_size;                 // V: token ids are 0 .. V-1
    size_t weight_bytes;               // the weights in memory (/v1/models reports them)
    const char *device;                // the backend serving ("cpu-avx2", "cuda:0 ...")
    const char *dtype;                 // the weights' dtype in memory ("f16", "q8_0", ...)
    const char *kv_dtype;              // the KV cache's dtype ("f32", "bf16", ...)
    const ChatTemplate *chat_template; // renders /v1/chat/completions messages (NULL: refused)
    char chat_error[KG_ERRLEN];        // why, when chat_template is NULL
    const char *bos_token, *eos_token; // their text, for the template
    int chat_stop_id;                  // a chat's reply also ends here (<usr>; -1: none)
    int chat_split_special; // the tokenizer reads bos/eos texts as characters (chat_prompt.h)
    ScoreMemo *score_memo;  // /v1/score's recent prompts (score_memo.h; NULL: none remembered)
} ApiModel;

typedef struct {
    // set before ready turns 1, read-only afterwards
    ApiModel *models; // (n_models) in --model order; the first answers a request naming none
    size_t n_models;
    size_t max_tokenize; // tokens per /v1/tokenize or /v1/detokenize (--max-tokenize)
    const char *web_dir; // the Explorer's files (NULL: none)
    size_t max_jobs;     // engine sequences per model before a 429 (--max-batch + --max-queue)
    time_t created;
    SrvServer *srv;
    atomic_int ready; // 1: every model loaded and warm; 0: loading (/readyz 503)
} ApiApp;

// The route table (routes.c) and the endpoint names, for metrics_init().
const SrvRoute *api_routes(size_t *n);
size_t api_endpoints(const char **out, size_t cap);

// --- params.c: parsing shared by the endpoints ---

// The app if the model is loaded; otherwise a 503 has been queued into *ret.
ApiApp *api_ready(SrvReq *r, enum MHD_Result *ret);

// {"text": "..."} or {"tokens": [...]}: a malloc'd, non-empty prompt that fits served's context.
int api_prompt(const ApiModel *served, const cJSON *j_req, int **ids, size_t *n, const char **param,
               char *err);

// A prompt as text (len bytes) or as an array of ids, checked like api_prompt.
int api_prompt_from(const ApiModel *served, const char *text, size_t len, const cJSON *j_tokens,
                    const char *name, int **ids, size_t *n, char *err);

// OpenAI's "model" into *served: absent, null or a URL (this server's, as Hugging Face's clients
// send it: http(s)://host[:port][/...]) is the first model, a served name that model; another is
// KG_ENOTFOUND (404, err naming the served models), a wrong type KG_EINVAL.
int api_model(const ApiApp *app, const cJSON *j_req, const ApiModel **served, char *err);
// The model served as name; NULL with api_model's 404 message in err.
const ApiModel *api_model_named(const ApiApp *app, const char *name, char *err);

// --- request fields as a table: one static ApiField row per field, read by api_fields() ---

typedef enum {
    API_INT,     // a whole number in lo..hi into a long long (exact up to 2^53)
    API_NUM,     // a finite number in lo..hi into a double; open_lo refuses lo itself
    API_BOOL,    // true or false into an int
    API_REFUSED, // absent, null or `accepts`, else refused: a base model cannot honour it
                 // (KG_EUNSUP, why)
    API_IGNORED, // any value, on purpose: it asks for nothing this server does differently
                 // (why says why; the README lists them). The table names every field of the
                 // API it follows, so that none is ignored by accident
    API_READ     // read by the row's own function: a field with rules of its own
} ApiKind;

// Where a row's upper bound comes from.
typedef enum {
    API_HI_CONST, // hi
    API_HI_N_CTX, // the model's n_ctx
    API_HI_VOCAB  // the model's vocab_size
} ApiHi;

// What a row is read from.
typedef struct {
    const ApiModel *model;
    const cJSON *j_req;
    long long max_tokens_default, max_tokens_min; // api_sampling's: the endpoint's choice
} ApiRequest;

typedef struct ApiField ApiField;
struct ApiField {
    const char *name;    // the request's field; *param when it is the bad one
    ApiKind kind;        // how it is read
    size_t offset;       // where its value goes: offsetof(the request shape's struct, member)
    double def, lo, hi;  // an absent or null field's value, and the range (API_INT, API_NUM)
    ApiHi hi_is;         // API_HI_CONST, or the model's figure instead of hi
    int open_lo;         // API_NUM: lo is excluded: "top_p must be in (0, 1]"
    const char *why;     // API_REFUSED: the message; API_IGNORED: why it changes nothing
    const char *accepts; // API_REFUSED: the one value that asks for nothing refused, as JSON
                         // text ("false", "1", "\"disabled\"", "[]"); NULL: none
    // API_READ: reads q->j_req into out (the whole struct); KG_OK or an error in err. It may
    // name a field of its own in *param (which the loop has set to name).
    int (*read)(const ApiRequest *q, const ApiField *f, void *out, const char **param, char *err);
};

// Reads fields[0..n) of q->j_req into out, in order. KG_OK; or, at the first bad field, its
// code (KG_EINVAL 400 for a wrong type, KG_ERANGE 422 out of range, KG_EUNSUP 422 refused,
// KG_ENOMEM) with *param naming it and err saying why. out is filled up to that field.
int api_fields(const ApiRequest *q, const ApiField *fields, size_t n, void *out, const char **param,
               char *err);

// KG_OK when every member of the object j_obj is one of fields[0..n); else KG_EINVAL with err
// naming the first other one and the fields there are: "explain: unknown field 'lense'
// (fields: lens, top_k, attention, position)" (what names it is what, the object's name). A
// nested object of options refuses a misspelt one rather than ignoring it.
int api_known_fields(const cJSON *j_obj, const ApiField *fields, size_t n, const char *what,
                     char *err);

// Sampling parameters shared by /v1/generate, completions and chat.
typedef struct {
    long long max_tokens, top_k, n_logprobs, seed;
    double temperature, top_p;
    double presence_penalty, frequency_penalty, repetition_penalty;
    KgLogitBias *logit_bias; // malloc'd (n_logit_bias)
    size_t n_logit_bias;
    int stream, ignore_eos, include_usage;
    int utf8_strict;   // sample only what can become valid UTF-8 (default on; sampler_utf8.h)
    const char **stop; // pointers into the request (malloc'd array)
    size_t n_stop;
} ApiSampling;

// Reads them with the sampling table (params.c: max_tokens defaults to max_tokens_default
// and must be >= max_tokens_min; n_logprobs comes from "logprobs" given as a number, or from
// "top_logprobs" when "logprobs" is true, as chat has it; a seed not given is random).
// *param names a bad one. Free with api_sampling_free, also after an error.
int api_sampling(const ApiModel *served, const cJSON *j_req, ApiSampling *s,
                 long long max_tokens_default, long long max_tokens_min, const char **param,
                 char *err);
void api_sampling_free(ApiSampling *s);

// The engine parameters of one generation: s's values over the prompt.
SchedParams api_sched_params(const ApiSampling *s, const int *prompt, size_t n_prompt);

// --- shared JSON pieces ---

// A JSON array of n ids (also for n = 0); NULL on OOM.
cJSON *api_ids_json(const int *ids, size_t n);
// A token as the Explorer and /v1/score show it: {"id", "piece" (as stored: "▁안녕", "<0xEC>",
// "</s>"), "text" (what it decodes to alone, inside a sentence, as /v1/detokenize has it; U+FFFD
// for a byte piece that is part of a character), "display" (the text, or the piece for a byte
// piece that is part of a character and for a control piece, which decodes to nothing),
// "bytes" (what it adds to the text's bytes, as OpenAI's logprobs give them; [] for a control
// piece)}. NULL for an id outside the vocabulary or on OOM.
cJSON *api_token_json(const Tokenizer *tok, int id);
// A candidate token as the logprob lists show it (completions' top_logprobs keys, chat's
// top_logprobs "token", /v1/generate's and TGI's top lists): what it adds to the text when that
// is UTF-8 on its own (" 안녕"; a control piece ""), else OpenAI's form of its bytes, "bytes:\xec"
// (a byte piece that is part of a character): never a piece such as "<0xEC>". malloc'd,
// NUL-terminated; with bytes, *bytes (malloc'd) and *n get the token's bytes. NULL for an id
// outside the vocabulary or on OOM.
char *api_token_logprob_text(const Tokenizer *tok, int id, char **bytes, size_t *n);
// {"total_ms", "queue_ms", "prefill_ms", "decode_ms"} into j_obj as "timings".
int api_add_timings(cJSON *j_obj, const SchedStats *st);
// OpenAI's usage object {prompt_tokens, completion_tokens, total_tokens} into j_obj.
int api_add_usage(cJSON *j_obj, size_t prompt_tokens, size_t completion_tokens);
// The bytes of s to quote in a message: its longest valid UTF-8 prefix of at most max bytes
// (a client's string cut mid-character, or not UTF-8 at all, must not make the reply
// invalid). Use as "%.*s", api_quote_len(s, 64), s.
int api_quote_len(const char *s, size_t max);
// Code points in s[0..n) of valid UTF-8: OpenAI's text offsets count characters.
size_t api_utf8_chars(const char *s, size_t n);

// --- the endpoints (ep_*.c), one handler each ---
enum MHD_Result ep_next_token(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_score(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_generate(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_completions(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_chat_completions(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_responses(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_tokenize(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_detokenize(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_models(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_model(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_healthz(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_readyz(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_metrics(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_static(SrvReq *r, const cJSON *j_req);
// ep_tgi.c: text-generation-inference's /generate, /generate_stream, /info, and its compat
// form ({inputs, parameters, stream}; the reply an array of one) for POST / and /invocations
enum MHD_Result ep_tgi_generate(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_tgi_generate_stream(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_tgi_compat(SrvReq *r, const cJSON *j_req);
enum MHD_Result ep_tgi_info(SrvReq *r, const cJSON *j_req);
// ep_sagemaker.c: SageMaker's POST /invocations (GET /ping is /readyz)
enum MHD_Result ep_invocations(SrvReq *r, const cJSON *j_req);

// Chat's setup, once the tokenizer is in served: the template (template_file, else the model
// directory's tokenizer_config.json chat_template, else the default: <usr>/<sys> where the
// tokenizer has those tokens, "role: content" lines otherwise), the bos/eos texts and the
// stop id (<usr>). KG_OK and *out (chat_template_free() it after the server stops). A
// template_file that cannot be used is an error naming it; a model's own template outside
// the subset is a warning line, and chat then answers 422 with the reason (served->chat_error).
int ep_chat_setup(ApiModel *served, const char *model_dir, const char *template_file,
                  ChatTemplate **out, char *err);

#endif
