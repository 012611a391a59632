// main_args.c — kogpt2d's flags (main_args.h): one table (MAIN_FLAGS), read by base/flags.h
// from the command line and the KOGPT2_* variables, and rendered by it as --help.
#include "main_args.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api.h"
#include "base/flags.h"
#include "base/kg.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/hfcache.h"
#include "server/http/http.h"

// The options a --model may carry after its directory, ",KEY=VALUE" each.
static const char *const MAIN_MODEL_KEYS[] = {"dtype", "ctx-size", "chat-template"};
#define MAIN_MODEL_MAX_OPTIONS 8 // ",KEY=VALUE" after one --model's directory, at most

// Where the next ",KEY=" of a known key starts in s, or its end: a directory (or a chat
// template's path) may hold commas, only not one followed by an option's name and '='.
static char *main_model_next_option(char *s) {
    for (char *c = strchr(s, ','); c; c = strchr(c + 1, ','))
        for (size_t k = 0; k < sizeof MAIN_MODEL_KEYS / sizeof *MAIN_MODEL_KEYS; k++) {
            size_t n = strlen(MAIN_MODEL_KEYS[k]);
            if (!strncmp(c + 1, MAIN_MODEL_KEYS[k], n) && c[1 + n] == '=') return c;
        }
    return s + strlen(s);
}

// Model i's own options from opts (",KEY=VALUE..." inside the model's copy of its flag's value,
// cut there into strings), each checked as its flag's row checks it: dtype as --dtype,
// ctx-size in --ctx-size's range, chat-template a file that is there. KG_OK, or KG_EINVAL
// with err naming from and the option ("--model's ctx-size must be an integer in ...").
static int main_model_options(MainArgs *a, size_t i, char *opts, const char *from, char *err) {
    char *cut[MAIN_MODEL_MAX_OPTIONS];
    size_t n = 0;
    for (char *c = opts; *c; c = main_model_next_option(c + 1)) {
        if (n == MAIN_MODEL_MAX_OPTIONS)
            return kg_err(err, KG_EINVAL, "%s: more than %d options after a directory", from,
                          MAIN_MODEL_MAX_OPTIONS);
        cut[n++] = c;
    }
    for (size_t k = 0; k < n; k++)
        *cut[k] = '\0'; // the directory and each value end there
    for (size_t k = 0; k < n; k++) {
        char *key = cut[k] + 1, *value = strchr(key, '=') + 1, what[64];
        value[-1] = '\0';
        snprintf(what, sizeof what, "%s's %s", from, key);
        long long v;
        struct stat st;
        int rc = KG_OK;
        if (!strcmp(key, "dtype")) {
            rc = kg_dtype_flag(&a->models[i].dtype, value, what, err);
            a->models[i].dtype_set = 1;
        } else if (!strcmp(key, "ctx-size")) {
            rc = kg_flag_int(what, value, 1, GPT2_MAX_CTX, &v, err);
            a->models[i].ctx_size = (long)v;
        } else if (stat(value, &st)) {
            rc = kg_err(err, KG_EINVAL, "%s: %s: %s", what, value, strerror(errno));
        } else {
            a->models[i].chat_template = value;
        }
        if (rc) return rc;
    }
    return KG_OK;
}

// One --model [NAME=]DIR[,KEY=VALUE...] (field: the MainArgs; an '=' before any '/' and before
// the options ends the name; the options are main_model_options'). The first replaces
// SageMaker's default model; the next ones add up. The model keeps one malloc'd copy of v
// (given: main_args_free frees it) that its name, directory and chat template point into.
static int main_set_model(void *field, const char *v, const char *from, char *err) {
    MainArgs *a = field;
    if (!a->models_given) a->n_models = 0;
    a->models_given = 1;
    if (a->n_models == MAIN_MAX_MODELS)
        return kg_err(err, KG_EINVAL, "%s: at most %d models", from, MAIN_MAX_MODELS);
    char *copy = strdup(v);
    if (!copy) return kg_err(err, KG_ENOMEM, "%s: out of memory", from);
    size_t i = a->n_models++;
    memset(&a->models[i], 0, sizeof a->models[i]);
    a->models[i].given = copy;
    snprintf(a->models[i].from, sizeof a->models[i].from, "%s", from);
    char *eq = strchr(copy, '='), *slash = strchr(copy, '/'), *opts = main_model_next_option(copy);
    char *dir = copy;
    if (eq && eq < opts && (!slash || eq < slash)) {
        if (eq == copy || eq + 1 == opts)
            return kg_err(err, KG_EINVAL, "%s: expected NAME=DIR, got '%s'", from, v);
        *eq = '\0';
        a->models[i].name = copy;
        dir = eq + 1;
    }
    a->models[i].dir = dir;
    return main_model_options(a, i, opts, from, err);
}

// One --api-key (field: the AuthKeys). Refused when empty (the row's KG_FLAG_NOT_EMPTY): a key
// that expanded to nothing must not leave the API open.
static int main_set_key(void *field, const char *v, const char *from, char *err) {
    char why[KG_ERRLEN];
    int rc = auth_add(field, v, why);
    return rc ? kg_err(err, rc == KG_ENOMEM ? rc : KG_EINVAL, "%s: %s", from, why) : KG_OK;
}

// One --api-key-file: its keys into the AuthKeys.
static int main_set_key_file(void *field, const char *v, const char *from, char *err) {
    char why[KG_ERRLEN];
    int rc = auth_add_file(field, v, why);
    return rc ? kg_err(err, rc == KG_ENOMEM ? rc : KG_EINVAL, "%s: %s", from, why) : KG_OK;
}

// --kv-dtype: a dtype the KV cache can hold (auto, f32, f16, bf16, q8_0; not q4_0).
static int main_set_kv_dtype(void *field, const char *v, const char *from, char *err) {
    int rc = kg_dtype_flag(field, v, from, err);
    if (!rc && *(KgDtype *)field == KG_Q4_0)
        return kg_err(err, KG_EINVAL,
                      "%s: q4_0 is not a KV cache dtype: auto, f32, f16, bf16 or q8_0", from);
    return rc;
}

static int main_set_log_format(void *field, const char *v, const char *from, char *err) {
    char why[KG_ERRLEN];
    if (log_format_parse(v, field, why)) return kg_err(err, KG_EINVAL, "%s: %s", from, why);
    return KG_OK;
}

// Every flag of kogpt2d, in --help's order. Each is also read from its KOGPT2_ variable
// (the flag's name in capitals, '-' as '_'; the README promises that rule).
static const KgFlag MAIN_ROWS[] = {
    {.name = "model",
     .short_name = 'm',
     .kind = KG_FLAG_FUNC,
     .metavar = "[NAME=]DIR",
     .offset = 0,
     .set = main_set_model,
     .def_text = "the project's models/default",
     .env = "KOGPT2_MODEL",
     .help = "a model directory (config.json, the weights, a tokenizer) or ORG/NAME[@REV] in the "
             "Hugging Face cache; repeat it to serve several (up to 8), each with its own engine "
             "and memory, picked by the request's \"model\" (absent: the first); "
             "DIR,dtype=T,ctx-size=N,chat-template=FILE (any of them) gives that model its own "
             "--dtype, --ctx-size, --chat-template"},
    {.name = "alias",
     .kind = KG_FLAG_STR,
     .metavar = "NAME",
     KG_FLAG_AT(MainArgs, alias),
     .def_text = "NAME=, else the directory's name",
     .env = "KOGPT2_ALIAS",
     .help = "the first model's name in replies"},
    {.name = "host",
     .short_name = 'H',
     .kind = KG_FLAG_STR,
     .metavar = "ADDR",
     KG_FLAG_AT(MainArgs, host),
     .def = "127.0.0.1",
     .env = "KOGPT2_HOST",
     .help = "address to listen on (0.0.0.0 for all)"},
    {.name = "port",
     .short_name = 'p',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, port),
     .def = "8080",
     .min = 0,
     .max = 65535,
     .env = "KOGPT2_PORT",
     .help = "TCP port; 0 picks a free one"},
    {.name = "device",
     .kind = KG_FLAG_FUNC,
     .metavar = "D",
     KG_FLAG_AT(MainArgs, device),
     .set = kg_device_flag,
     .def = "auto",
     .env = "KOGPT2_DEVICE",
     .help = "auto (a GPU when there is one, else the CPU), cpu, cuda, cuda:N; the log says what "
             "was chosen"},
    {.name = "threads",
     .short_name = 't',
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, threads),
     .def = "0",
     .min = 0,
     .max = 1024,
     .env = "KOGPT2_THREADS",
     .help = "compute threads on the CPU; 0: one per core"},
    {.name = "http-threads",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, http_threads),
     .def = "4",
     .min = 1,
     .max = 256,
     .env = "KOGPT2_HTTP_THREADS",
     .help = "HTTP worker threads: they read and write sockets and answer /healthz, /readyz, "
             "/metrics"},
    {.name = "work-threads",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, work_threads),
     .def = KG_FLAG_DEF(SRV_WORK_THREADS),
     .min = 1,
     .max = 256,
     .env = "KOGPT2_WORK_THREADS",
     .help = "threads that parse, tokenize and template request bodies, so that a large one "
             "never holds up a health check"},
    {.name = "max-work-queue",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_work_queue),
     .def = KG_FLAG_DEF(SRV_MAX_WORK_QUEUE),
     .min = 0,
     .max = 1 << 20,
     .env = "KOGPT2_MAX_WORK_QUEUE",
     .help = "requests waiting for a work thread; more get 503 + Retry-After"},
    {.name = "ctx-size",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, ctx_size),
     .def_text = "the model's n_ctx",
     .min = 1,
     .max = GPT2_MAX_CTX,
     .env = "KOGPT2_CTX_SIZE",
     .help = "longest prompt in tokens"},
    {.name = "max-batch",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_batch),
     .def = "64",
     .min = 1,
     .max = 1024,
     .env = "KOGPT2_MAX_BATCH",
     .help = "sequences advanced together per step, at most; fewer when the KV cache is full"},
    {.name = "max-batch-tokens",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, batch_tokens),
     .def = "32",
     .min = 1,
     .max = 1 << 16,
     .env = "KOGPT2_MAX_BATCH_TOKENS",
     .help = "rows per step: one per decoding sequence, prompt chunks in the rest (at least 16), "
             "so a long prompt enters between the streams' tokens (a prompt alone: 256)"},
    {.name = "max-queue",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_queue),
     .def = "64",
     .min = 0,
     .max = 1 << 20,
     .env = "KOGPT2_MAX_QUEUE",
     .help = "jobs waiting beyond the batch; more get 429"},
    {.name = "kv-cache-mb",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, kv_cache_mb),
     .def = "0",
     .min = 0,
     .max = 1 << 24,
     .env = "KOGPT2_KV_CACHE_MB",
     .help = "the KV cache per model in MiB: blocks of 16 positions shared by prompts with a "
             "common prefix; 0: enough for --max-batch full contexts, at most a quarter of the "
             "memory"},
    {.name = "kv-dtype",
     .kind = KG_FLAG_FUNC,
     .metavar = "T",
     KG_FLAG_AT(MainArgs, kv_dtype),
     .set = main_set_kv_dtype,
     .def = "auto",
     .env = "KOGPT2_KV_DTYPE",
     .help = "the KV cache's dtype: auto (the backend's: f32), f32, f16, bf16, q8_0 (CPU; half "
             "or a quarter of the bytes, logits move slightly)"},
    {.name = "cache-mb",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, cache_mb),
     .def = "256",
     .min = 0,
     .max = 1 << 20,
     .env = "KOGPT2_CACHE_MB",
     .help = "of the KV cache, what prefixes nobody uses may keep, in MiB; 0: no prefix cache"},
    {.name = "dtype",
     .kind = KG_FLAG_FUNC,
     .metavar = "T",
     KG_FLAG_AT(MainArgs, dtype),
     .set = kg_dtype_flag,
     .def = "auto",
     .env = "KOGPT2_DTYPE",
     .help = "weights in memory: auto (as stored), f32, f16, bf16, and on the CPU q8_0, q4_0 "
             "(quantized at load)"},
    {.name = "precision",
     .kind = KG_FLAG_FUNC,
     .metavar = "P",
     KG_FLAG_AT(MainArgs, precision),
     .set = kg_precision_flag,
     .def = "f32",
     .env = "KOGPT2_PRECISION",
     .help = "f32 or bf16: the layers' matmuls on bf16 operands, f32 sums: faster prompts with "
             "AVX512-BF16 (emulated, slower, on other CPUs); logits move ~1e-3 relative"},
    {.name = "no-speculate",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(MainArgs, no_speculate),
     .env = "KOGPT2_NO_SPECULATE",
     .help = "do not precompute likely next clicks when idle"},
    {.name = "api-key",
     .kind = KG_FLAG_FUNC,
     .opts = KG_FLAG_NOT_EMPTY,
     .metavar = "KEY",
     KG_FLAG_AT(MainArgs, keys),
     .set = main_set_key,
     .env = "KOGPT2_API_KEY",
     .help = "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (health, readiness, "
             "metrics and static files stay open); repeat it for several keys, any of which is "
             "accepted; an empty one is refused"},
    {.name = "api-key-file",
     .kind = KG_FLAG_FUNC,
     .opts = KG_FLAG_NOT_EMPTY,
     .metavar = "FILE",
     KG_FLAG_AT(MainArgs, keys),
     .set = main_set_key_file,
     .env = "KOGPT2_API_KEY_FILE",
     .help = "the keys in FILE too: one per line, '#' comments and blank lines skipped"},
    {.name = "cors-origin",
     .kind = KG_FLAG_STR,
     .metavar = "ORIGIN",
     KG_FLAG_AT(MainArgs, cors_origin),
     .env = "KOGPT2_CORS_ORIGIN",
     .help = "send Access-Control-Allow-Origin: ORIGIN, answer preflights"},
    {.name = "web-dir",
     .kind = KG_FLAG_STR,
     .metavar = "DIR",
     KG_FLAG_AT(MainArgs, web_dir),
     .def_text = "the project's web/",
     .env = "KOGPT2_WEB_DIR",
     .help = "the Explorer's files"},
    {.name = "chat-template",
     .kind = KG_FLAG_PATH,
     .metavar = "FILE",
     KG_FLAG_AT(MainArgs, chat_template),
     .def_text = "tokenizer_config.json's chat_template, else <usr>/<sys>",
     .env = "KOGPT2_CHAT_TEMPLATE",
     .help = "a Jinja chat template for /v1/chat/completions"},
    {.name = "timeout",
     .kind = KG_FLAG_INT,
     .metavar = "SEC",
     KG_FLAG_AT(MainArgs, timeout_s),
     .def = "30",
     .min = 1,
     .max = 86400,
     .env = "KOGPT2_TIMEOUT",
     .help = "idle connection timeout and shutdown drain time"},
    {.name = "request-timeout",
     .kind = KG_FLAG_INT,
     .metavar = "SEC",
     KG_FLAG_AT(MainArgs, request_timeout_s),
     .def = "30",
     .min = 0,
     .max = 86400,
     .env = "KOGPT2_REQUEST_TIMEOUT",
     .help = "a request (line, headers, body) must arrive within SEC of the connection's opening "
             "or its previous reply, else the connection is closed; 0: no limit"},
    {.name = "max-body",
     .kind = KG_FLAG_INT,
     .metavar = "BYTES",
     KG_FLAG_AT(MainArgs, max_body),
     .def = KG_FLAG_DEF(SRV_MAX_BODY),
     .min = 64,
     .max = 1l << 30,
     .env = "KOGPT2_MAX_BODY",
     .help = "largest request body"},
    {.name = "max-connections",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_connections),
     .def = KG_FLAG_DEF(SRV_MAX_CONNECTIONS),
     .min = 1,
     .max = 65536,
     .env = "KOGPT2_MAX_CONNECTIONS",
     .help = "connections admitted; the next N get 503 + Retry-After (and are closed after 2 s "
             "if their request has not come), past those a new one replaces the idle or slow "
             "connection that has waited longest for its request"},
    {.name = "max-connections-per-ip",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_connections_per_ip),
     .def = "0",
     .min = 0,
     .max = 65536,
     .env = "KOGPT2_MAX_CONNECTIONS_PER_IP",
     .help = "connections admitted from one client address; the next N get 503 + Retry-After, "
             "more 503 in place of the address's longest-waiting refused connection; 0: no "
             "limit (behind a proxy or NAT every client has the proxy's address, so set it only "
             "on a direct listener)"},
    {.name = "max-tokenize",
     .kind = KG_FLAG_INT,
     .metavar = "N",
     KG_FLAG_AT(MainArgs, max_tokenize),
     .def = KG_FLAG_DEF(API_MAX_TOKENIZE),
     .min = 1,
     .max = 1l << 24,
     .env = "KOGPT2_MAX_TOKENIZE",
     .help = "tokens per /v1/tokenize or /v1/detokenize; more get 422"},
    {.name = "quiet",
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(MainArgs, quiet),
     .env = "KOGPT2_QUIET",
     .help = "no request log"},
    {.name = "log-format",
     .kind = KG_FLAG_FUNC,
     .metavar = "F",
     KG_FLAG_AT(MainArgs, log_format),
     .set = main_set_log_format,
     .def = "text",
     .env = "KOGPT2_LOG_FORMAT",
     .help = "text or json: one JSON object per line with ts, level, msg (request lines: method, "
             "path, status, bytes, ms, request_id)"},
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable MAIN_FLAGS = {
    .program = "kogpt2d",
    .usage = "[serve] [--model [NAME=]DIR]... [options]",
    .flags = MAIN_ROWS,
    .n_flags = sizeof MAIN_ROWS / sizeof MAIN_ROWS[0],
    .notes = "serve: SageMaker's start (docker run IMAGE serve): listen on 0.0.0.0, port\n"
             "$SAGEMAKER_BIND_TO_PORT or 8080, serve /opt/ml/model when it holds a model; flags\n"
             "and variables still win.\n"
             "Every flag can also be set by the environment variable shown beside it: KOGPT2_\n"
             "and the flag's name in capitals, '-' as '_' (KOGPT2_MODEL, KOGPT2_PORT,\n"
             "KOGPT2_QUIET=1 ...). A flag given wins, and its variable is then not read; an empty\n"
             "variable counts as unset (KOGPT2_API_KEY and KOGPT2_API_KEY_FILE: an error).\n"};

// SageMaker starts a container as `IMAGE serve`: its contract's defaults, which KOGPT2_*
// variables and flags still override: every address, port $SAGEMAKER_BIND_TO_PORT (else 8080,
// the default anyway), and the model SageMaker unpacked into /opt/ml/model when it holds one
// (its config.json; else the default model). KG_OK or KG_EINVAL with err.
static int main_sagemaker(MainArgs *a, char *err) {
    a->host = "0.0.0.0";
    const char *port = getenv("SAGEMAKER_BIND_TO_PORT");
    long long p;
    if (port && *port) {
        if (kg_flag_int("SAGEMAKER_BIND_TO_PORT", port, 1, 65535, &p, err)) return KG_EINVAL;
        a->port = (long)p;
    }
    struct stat st;
    if (!stat(MAIN_SAGEMAKER_MODEL "/config.json", &st)) {
        a->models[0].dir = MAIN_SAGEMAKER_MODEL;
        snprintf(a->models[0].from, sizeof a->models[0].from, "serve");
        a->n_models = 1;
    }
    return KG_OK;
}

// Each model's directory (ORG/NAME: the Hugging Face cache's copy) and name: NAME=, the
// --alias for the first, ORG/NAME when so given, else the directory's base name. Names must
// differ, as a request picks a model by its name. A directory that is not there fails here,
// before "listening on" says all is well (the loading comes after the listen, so that
// /healthz answers while it runs), naming the flag or variable that gave it. -1, or the exit
// code after the message.
static int main_model_names(MainArgs *a) {
    static char dirs[MAIN_MAX_MODELS][PATH_MAX], bases[MAIN_MAX_MODELS][PATH_MAX];
    char why[KG_ERRLEN];
    for (size_t i = 0; i < a->n_models; i++) {
        const char *given = a->models[i].dir, *from = a->models[i].from;
        if (hfcache_resolve(given, dirs[i], sizeof dirs[i], why)) {
            fprintf(stderr, "kogpt2d: %s%s%s\n", from, from[0] ? ": " : "", why);
            return 1;
        }
        a->models[i].dir = dirs[i];
        struct stat st;
        if (stat(dirs[i], &st)) {
            fprintf(stderr, "kogpt2d: %s%sopen %s: %s\n", from, from[0] ? ": " : "", dirs[i],
                    strerror(errno));
            return 1;
        }
        if (!a->models[i].name && i == 0) a->models[i].name = a->alias;
        if (!a->models[i].name && strcmp(dirs[i], given)) a->models[i].name = given; // ORG/NAME
        snprintf(bases[i], sizeof bases[i], "%s", dirs[i]);
        if (!a->models[i].name) a->models[i].name = basename(bases[i]);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(a->models[k].name, a->models[i].name)) {
                fprintf(stderr,
                        "kogpt2d: --model: two models are named '%s' (give one a name: "
                        "--model NAME=DIR)\n",
                        a->models[i].name);
                return 2;
            }
    }
    return -1;
}

int main_args_parse(MainArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    char err[KG_ERRLEN];
    int rc = kg_flags_defaults(&MAIN_FLAGS, a, err);
    if (!rc && argc > 1 && !strcmp(argv[1], "serve")) { // `kogpt2d serve [flags]`: SageMaker's
        rc = main_sagemaker(a, err);
        argv[1] = argv[0]; // getopt then sees the flags after it alone
        argv++;
        argc--;
    }
    KgFlagsSeen seen;
    if (!rc) rc = kg_flags_parse(&MAIN_FLAGS, a, argc, argv, &seen, err);
    if (rc == KG_FLAGS_HELP) {
        kg_flags_help(&MAIN_FLAGS, stdout);
        return 0;
    }
    if (rc == KG_FLAGS_VERSION) {
        printf("kogpt2d %s (commit %s)\n", kg_version(), kg_commit());
        return 0;
    }
    if (!rc && seen.first_arg < argc)
        rc = kg_err(err, KG_EINVAL, "unexpected argument '%s'", argv[seen.first_arg]);
    if (rc) {
        fprintf(stderr, "kogpt2d: %s\n", err);
        if (rc != KG_EINVAL) return 1;
        fprintf(stderr, "(kogpt2d --help lists the flags and their variables)\n");
        return 2;
    }
    static char default_model[PATH_MAX];
    if (!a->n_models) {
        a->models[0].dir = kg_find_data_dir("models/default", default_model, sizeof default_model);
        if (!a->models[0].dir) {
            fprintf(stderr,
                    "kogpt2d: no --model DIR given and no default model (models/default)\n");
            return 2;
        }
        a->n_models = 1;
    }
    return main_model_names(a);
}

void main_args_free(MainArgs *a) {
    for (size_t i = 0; i < a->n_models; i++)
        free(a->models[i].given);
    auth_free(&a->keys);
}
