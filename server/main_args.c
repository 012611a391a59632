// main_args.c — kogpt2d's flags (main_args.h): one getopt_long table, read once from the
// environment (KOGPT2_<FLAG>) and once from the command line, so that a flag given wins.
#include "main_args.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "api.h"
#include "base/kg.h"
#include "model/hfcache.h"
#include "server/http/http.h"

static void main_usage(FILE *f) {
    fprintf(f,
            "usage: kogpt2d [serve] [--model DIR] [options]\n"
            "  serve                SageMaker's start (docker run IMAGE serve): listen on\n"
            "                       0.0.0.0, port $SAGEMAKER_BIND_TO_PORT or 8080, serve\n"
            "                       /opt/ml/model when it holds a model; flags still win\n"
            "  --model [NAME=]DIR   model directory: config.json, model.safetensors, tokenizer\n"
            "                       (default: the project's models/default); repeat it to serve\n"
            "                       several (up to 8), each with its own engine and memory,\n"
            "                       picked by the request's \"model\" (absent: the first);\n"
            "                       DIR,dtype=T,ctx-size=N,chat-template=FILE (any of them)\n"
            "                       gives that model its own --dtype, --ctx-size, --chat-template\n"
            "  --alias NAME         the first model's name in replies (default: NAME=, else the\n"
            "                       directory's name)\n"
            "  --host ADDR          address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
            "  --port N             TCP port (default 8080; 0 picks a free one)\n"
            "  --device D           auto (a GPU when there is one, else the CPU), cpu, cuda,\n"
            "                       cuda:N (default auto; the log says what was chosen)\n"
            "  --threads N          compute threads on the CPU (default: one per core)\n"
            "  --http-threads N     HTTP worker threads: they read and write sockets and answer\n"
            "                       /healthz, /readyz, /metrics (default 4)\n"
            "  --work-threads N     threads that parse, tokenize and template request bodies,\n"
            "                       so that a large one never holds up a health check (default 2)\n"
            "  --max-work-queue N   requests waiting for a work thread; more get 503 +\n"
            "                       Retry-After (default 64)\n"
            "  --ctx-size N         longest prompt in tokens (default: the model's n_ctx)\n"
            "  --max-batch N        sequences advanced together per step, at most; fewer when\n"
            "                       the KV cache is full (default 64)\n"
            "  --max-batch-tokens N rows per step: one per decoding sequence, prompt chunks in\n"
            "                       the rest (at least 16), so a long prompt enters between the\n"
            "                       streams' tokens (default 32; a prompt alone: 256)\n"
            "  --max-queue N        jobs waiting beyond the batch; more get 429 (default 64)\n"
            "  --kv-cache-mb N      the KV cache per model in MiB: blocks of 16 positions shared\n"
            "                       by prompts with a common prefix (default 0: enough for\n"
            "                       --max-batch full contexts, at most a quarter of the memory)\n"
            "  --kv-dtype T         the KV cache's dtype: f32 (default), f16, bf16, q8_0 (CPU;\n"
            "                       half or a quarter of the bytes, logits move slightly)\n"
            "  --cache-mb N         of the KV cache, what prefixes nobody uses may keep, in MiB\n"
            "                       (default 256; 0: no prefix cache)\n"
            "  --dtype T            weights in memory: auto (as stored), f32, f16, bf16, and on\n"
            "                       the CPU q8_0, q4_0 (quantized at load)\n"
            "  --precision P        f32 (default) or bf16: the layers' matmuls on bf16 operands,\n"
            "                       f32 sums: faster prompts with AVX512-BF16 (emulated, slower,\n"
            "                       on other CPUs); logits move ~1e-3 relative\n"
            "  --no-speculate       do not precompute likely next clicks when idle\n"
            "  --api-key KEY        require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                       (health, readiness, metrics and static files stay open);\n"
            "                       repeat it for several keys, any of which is accepted\n"
            "  --api-key-file FILE  the keys in FILE too: one per line, '#' comments and blank\n"
            "                       lines skipped\n"
            "  --cors-origin ORIGIN send Access-Control-Allow-Origin: ORIGIN, answer preflights\n"
            "  --web-dir DIR        the Explorer's files (default: the project's web/)\n"
            "  --chat-template FILE a Jinja chat template for /v1/chat/completions (default:\n"
            "                       tokenizer_config.json's chat_template, else <usr>/<sys>)\n"
            "  --timeout SEC        idle connection timeout and shutdown drain time (default 30)\n"
            "  --request-timeout SEC  a request (line, headers, body) must arrive within SEC of\n"
            "                       the connection's opening or its previous reply, else the\n"
            "                       connection is closed (default 30; 0: no limit)\n"
            "  --max-body BYTES     largest request body (default 1048576)\n"
            "  --max-connections N  connections admitted; the next N get 503 + Retry-After (and\n"
            "                       are closed after 2 s if their request has not come), past\n"
            "                       those a new one replaces the idle or slow connection that has\n"
            "                       waited longest for its request (default 256)\n"
            "  --max-connections-per-ip N  connections admitted from one client address; the\n"
            "                       next N get 503 + Retry-After, more 503 in place of the\n"
            "                       address's longest-waiting refused connection\n"
            "                       (default 0: no limit; behind a proxy or NAT every client\n"
            "                       has the proxy's address, so set it only on a direct listener)\n"
            "  --max-tokenize N     tokens per /v1/tokenize or /v1/detokenize; more get 422\n"
            "                       (default 65536)\n"
            "  --quiet              no request log\n"
            "  --log-format F       text (default) or json: one JSON object per line with ts,\n"
            "                       level, msg (request lines: method, path, status, bytes, ms,\n"
            "                       request_id)\n"
            "  --version            print the version and exit\n"
            "\n"
            "Every flag can also be set by an environment variable: KOGPT2_ and the flag's name\n"
            "in capitals, '-' as '_' (KOGPT2_MODEL, KOGPT2_PORT, KOGPT2_API_KEY, KOGPT2_QUIET=1\n"
            "...). A flag given wins over its variable; an empty variable counts as unset.\n");
}

// A whole decimal number in [lo, hi]; exits with a message naming flag (the flag or the
// environment variable it came from) otherwise (main only).
static long main_num(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "kogpt2d: %s: expected a number in %ld..%ld, got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return v;
}

enum {
    O_ALIAS = 256,
    O_HTTP_THREADS,
    O_CTX,
    O_BATCH,
    O_QUEUE,
    O_CACHE,
    O_BATCH_TOKENS,
    O_KV_MB,
    O_KV_DTYPE,
    O_KEY,
    O_KEY_FILE,
    O_CORS,
    O_WEB,
    O_TIMEOUT,
    O_BODY,
    O_CONNS,
    O_CONNS_IP,
    O_WORK_THREADS,
    O_WORK_QUEUE,
    O_REQ_TO,
    O_MAX_TOK,
    O_DTYPE,
    O_PRECISION,
    O_DEVICE,
    O_NOSPEC,
    O_QUIET,
    O_LOG_FORMAT,
    O_CHAT,
    O_VERSION
};

// The flags; each but --help and --version is also read from KOGPT2_<NAME> (main_env).
static const struct option OPTS[] = {
    {"model", required_argument, NULL, 'm'},
    {"alias", required_argument, NULL, O_ALIAS},
    {"host", required_argument, NULL, 'H'},
    {"port", required_argument, NULL, 'p'},
    {"threads", required_argument, NULL, 't'},
    {"http-threads", required_argument, NULL, O_HTTP_THREADS},
    {"ctx-size", required_argument, NULL, O_CTX},
    {"max-batch", required_argument, NULL, O_BATCH},
    {"max-queue", required_argument, NULL, O_QUEUE},
    {"cache-mb", required_argument, NULL, O_CACHE},
    {"max-batch-tokens", required_argument, NULL, O_BATCH_TOKENS},
    {"kv-cache-mb", required_argument, NULL, O_KV_MB},
    {"kv-dtype", required_argument, NULL, O_KV_DTYPE},
    {"api-key", required_argument, NULL, O_KEY},
    {"api-key-file", required_argument, NULL, O_KEY_FILE},
    {"cors-origin", required_argument, NULL, O_CORS},
    {"web-dir", required_argument, NULL, O_WEB},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"max-body", required_argument, NULL, O_BODY},
    {"max-connections", required_argument, NULL, O_CONNS},
    {"max-connections-per-ip", required_argument, NULL, O_CONNS_IP},
    {"work-threads", required_argument, NULL, O_WORK_THREADS},
    {"max-work-queue", required_argument, NULL, O_WORK_QUEUE},
    {"request-timeout", required_argument, NULL, O_REQ_TO},
    {"max-tokenize", required_argument, NULL, O_MAX_TOK},
    {"dtype", required_argument, NULL, O_DTYPE},
    {"precision", required_argument, NULL, O_PRECISION},
    {"device", required_argument, NULL, O_DEVICE},
    {"no-speculate", no_argument, NULL, O_NOSPEC},
    {"quiet", no_argument, NULL, O_QUIET},
    {"log-format", required_argument, NULL, O_LOG_FORMAT},
    {"chat-template", required_argument, NULL, O_CHAT},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0}};

// "--port" for getopt's value c (error messages name the long flag, also for -p).
static const char *main_flag_name(int c, char *buf, size_t cap) {
    for (const struct option *o = OPTS; o->name; o++)
        if (o->val == c) {
            snprintf(buf, cap, "--%s", o->name);
            return buf;
        }
    return "?";
}

// Where a key argument came from, for its error message.
static const char *main_key_source(int file, int from_env) {
    if (from_env) return file ? "KOGPT2_API_KEY_FILE" : "KOGPT2_API_KEY";
    return file ? "--api-key-file" : "--api-key";
}

// One --api-key or --api-key-file. A flag replaces what the same variable gave (the flag
// wins); several flags add up. An empty value is none (--api-key "" in a script).
static void main_key_arg(MainArgs *a, int file, const char *v, int from_env) {
    size_t n = 0;
    for (size_t i = 0; i < a->n_key_args; i++)
        if (!(a->key_args[i].file == file && a->key_args[i].from_env && !from_env))
            a->key_args[n++] = a->key_args[i];
    a->n_key_args = n;
    if (!*v) return;
    if (n == MAIN_MAX_KEY_ARGS) {
        fprintf(stderr, "kogpt2d: %s: more than %d keys and key files given (use a key file)\n",
                main_key_source(file, from_env), MAIN_MAX_KEY_ARGS);
        exit(2);
    }
    a->key_args[a->n_key_args].value = v;
    a->key_args[a->n_key_args].file = file;
    a->key_args[a->n_key_args++].from_env = from_env;
}

// The options a --model may carry after its directory, ",KEY=VALUE" each.
static const char *const MAIN_MODEL_KEYS[] = {"dtype", "ctx-size", "chat-template"};

// Where the next ",KEY=" of a known key starts in s, or its end: a directory (or a chat
// template's path) may hold commas, only not one followed by an option's name and '='.
static const char *main_model_next_option(const char *s) {
    for (const char *c = strchr(s, ','); c; c = strchr(c + 1, ','))
        for (size_t k = 0; k < sizeof MAIN_MODEL_KEYS / sizeof *MAIN_MODEL_KEYS; k++) {
            size_t n = strlen(MAIN_MODEL_KEYS[k]);
            if (!strncmp(c + 1, MAIN_MODEL_KEYS[k], n) && c[1 + n] == '=') return c;
        }
    return s + strlen(s);
}

// The options of model i from opts (",KEY=VALUE..."): exits 2 naming a bad one (main only).
static void main_model_options(MainArgs *a, size_t i, const char *opts) {
    static char chats[MAIN_MAX_MODELS][PATH_MAX]; // each model's chat template, as given
    char err[KG_ERRLEN], value[PATH_MAX];
    while (*opts) {
        const char *eq = strchr(opts + 1, '='), *end = main_model_next_option(eq);
        size_t len = (size_t)(end - eq - 1);
        if (len >= sizeof value) {
            fprintf(stderr, "kogpt2d: --model: an option's value of %zu bytes is too long\n", len);
            exit(2);
        }
        memcpy(value, eq + 1, len);
        value[len] = '\0';
        if (!strncmp(opts + 1, "dtype=", 6)) {
            if (kg_dtype_parse(value, &a->models[i].dtype, err)) {
                fprintf(stderr, "kogpt2d: --model ...,dtype=: %s\n", err);
                exit(2);
            }
            a->models[i].dtype_set = 1;
        } else if (!strncmp(opts + 1, "ctx-size=", 9)) {
            a->models[i].ctx_size = main_num("--model ...,ctx-size=", value, 1, GPT2_MAX_CTX);
        } else {
            a->models[i].chat_template = memcpy(chats[i], value, len + 1);
        }
        opts = end;
    }
}

// One --model [NAME=]DIR[,KEY=VALUE...] (an '=' before any '/' ends the name; the options are
// main_model_options'). The variable, and the first flag, replace what came before
// (SageMaker's default, then the variable); later flags add up.
static void main_model_arg(MainArgs *a, const char *v, int from_env) {
    if (from_env || !a->models_from_flags) a->n_models = 0;
    a->models_from_flags |= !from_env;
    if (a->n_models == MAIN_MAX_MODELS) {
        fprintf(stderr, "kogpt2d: --model: at most %d models\n", MAIN_MAX_MODELS);
        exit(2);
    }
    const char *eq = strchr(v, '='), *slash = strchr(v, '/'), *opts = main_model_next_option(v);
    char *name = NULL;
    if (eq && eq < opts && (!slash || eq < slash)) {
        if (eq == v || eq + 1 == opts) {
            fprintf(stderr, "kogpt2d: --model: expected NAME=DIR, got '%s'\n", v);
            exit(2);
        }
        if (!(name = strndup(v, (size_t)(eq - v)))) exit(1); // lives as long as the process
        v = eq + 1;
    }
    static char dirs[MAIN_MAX_MODELS][PATH_MAX]; // the DIR before the options, as given
    size_t i = a->n_models++, len = (size_t)(opts - v);
    if (len >= sizeof dirs[i]) {
        fprintf(stderr, "kogpt2d: --model: a directory name of %zu bytes is too long\n", len);
        exit(2);
    }
    memset(&a->models[i], 0, sizeof a->models[i]);
    a->models[i].name = name;
    a->models[i].dir = memcpy(dirs[i], v, len);
    dirs[i][len] = '\0';
    main_model_options(a, i, opts);
}

// One flag's value v into a (from: the flag or the variable, for its error message). Exits
// with a message on a bad value (main only).
static void main_apply(MainArgs *a, int c, const char *v, const char *from, int from_env) {
    char err[KG_ERRLEN];
    switch (c) {
    case 'm':
        main_model_arg(a, v, from_env);
        break;
    case O_ALIAS:
        a->alias = v;
        break;
    case 'H':
        a->host = v;
        break;
    case 'p':
        a->port = main_num(from, v, 0, 65535);
        break;
    case 't':
        a->threads = main_num(from, v, 0, 1024);
        break;
    case O_HTTP_THREADS:
        a->http_threads = main_num(from, v, 1, 256);
        break;
    case O_CTX:
        a->ctx_size = main_num(from, v, 1, GPT2_MAX_CTX);
        break;
    case O_BATCH:
        a->max_batch = main_num(from, v, 1, 1024);
        break;
    case O_QUEUE:
        a->max_queue = main_num(from, v, 0, 1 << 20);
        break;
    case O_CACHE:
        a->cache_mb = main_num(from, v, 0, 1 << 20);
        break;
    case O_BATCH_TOKENS:
        a->batch_tokens = main_num(from, v, 1, 1 << 16);
        break;
    case O_KV_MB:
        a->kv_cache_mb = main_num(from, v, 0, 1 << 24);
        break;
    case O_KV_DTYPE:
        if (kg_dtype_parse(v, &a->kv_dtype, err)) goto bad;
        if (a->kv_dtype == KG_Q4_0) {
            snprintf(err, sizeof err, "q4_0 is not a KV cache dtype: auto, f32, f16, bf16 or q8_0");
            goto bad;
        }
        break;
    case O_KEY:
    case O_KEY_FILE:
        main_key_arg(a, c == O_KEY_FILE, v, from_env);
        break;
    case O_CORS:
        a->cors_origin = v;
        break;
    case O_WEB:
        a->web_dir = v;
        break;
    case O_CHAT:
        a->chat_template = v;
        break;
    case O_TIMEOUT:
        a->timeout_s = main_num(from, v, 1, 86400);
        break;
    case O_BODY:
        a->max_body = main_num(from, v, 64, 1l << 30);
        break;
    case O_CONNS:
        a->max_connections = main_num(from, v, 1, 65536);
        break;
    case O_CONNS_IP:
        a->max_connections_per_ip = main_num(from, v, 0, 65536);
        break;
    case O_WORK_THREADS:
        a->work_threads = main_num(from, v, 1, 256);
        break;
    case O_WORK_QUEUE:
        a->max_work_queue = main_num(from, v, 0, 1 << 20);
        break;
    case O_REQ_TO:
        a->request_timeout_s = main_num(from, v, 0, 86400);
        break;
    case O_MAX_TOK:
        a->max_tokenize = main_num(from, v, 1, 1l << 24);
        break;
    case O_DTYPE:
        if (kg_dtype_parse(v, &a->dtype, err)) goto bad;
        break;
    case O_PRECISION:
        if (kg_precision_parse(v, &a->precision, err)) goto bad;
        break;
    case O_LOG_FORMAT:
        if (log_format_parse(v, &a->log_format, err)) goto bad;
        break;
    case O_DEVICE: // the last --device wins (a Deployment overrides the image's)
        if (kg_device_check(v, err)) goto bad;
        a->device = v;
        break;
    case O_NOSPEC:
        a->speculate = 0;
        break;
    case O_QUIET:
        a->quiet = 1;
        break;
    case 'h':
        main_usage(stdout);
        exit(0);
    case O_VERSION:
        printf("kogpt2d %s (commit %s)\n", kg_version(), kg_commit());
        exit(0);
    default:
        main_usage(stderr);
        exit(2);
    }
    return;
bad:
    fprintf(stderr, "kogpt2d: %s: %s\n", from, err);
    exit(2);
}

// Every flag from its environment variable, KOGPT2_ + the name in capitals with '_' for '-'
// (--max-batch: KOGPT2_MAX_BATCH), before the command line so that a flag given wins. A
// switch (--quiet) takes 1/true/yes/on or 0/false/no/off.
static void main_env(MainArgs *a) {
    for (const struct option *o = OPTS; o->name; o++) {
        if (o->val == 'h' || o->val == O_VERSION) continue;
        char name[64];
        int n = snprintf(name, sizeof name, "KOGPT2_%s", o->name);
        for (int i = 7; i < n; i++)
            name[i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
        const char *v = getenv(name);
        if (!v || !*v) continue;
        if (o->has_arg == no_argument) {
            int on = !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
                     !strcasecmp(v, "on");
            if (!on && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no") &&
                strcasecmp(v, "off")) {
                fprintf(stderr,
                        "kogpt2d: %s: expected 1, true, yes, on or 0, false, no, off, "
                        "got '%s'\n",
                        name, v);
                exit(2);
            }
            if (!on) continue;
        }
        main_apply(a, o->val, v, name, 1);
    }
}

// The keys of --api-key and --api-key-file (and their variables) into a->keys; exits with a
// message naming the flag at fault (main only).
static void main_keys(MainArgs *a) {
    char err[KG_ERRLEN];
    for (size_t i = 0; i < a->n_key_args; i++) {
        int rc = a->key_args[i].file ? auth_add_file(&a->keys, a->key_args[i].value, err)
                                     : auth_add(&a->keys, a->key_args[i].value, err);
        if (rc) {
            fprintf(stderr, "kogpt2d: %s: %s\n",
                    main_key_source(a->key_args[i].file, a->key_args[i].from_env), err);
            exit(2);
        }
    }
}

// SageMaker starts a container as `IMAGE serve`: its contract's defaults, which KOGPT2_*
// variables and flags still override: every address, port $SAGEMAKER_BIND_TO_PORT (else 8080,
// the default anyway), and the model SageMaker unpacked into /opt/ml/model when it holds one
// (its config.json; else the default model).
static void main_sagemaker(MainArgs *a) {
    a->host = "0.0.0.0";
    const char *port = getenv("SAGEMAKER_BIND_TO_PORT");
    if (port && *port) a->port = main_num("SAGEMAKER_BIND_TO_PORT", port, 1, 65535);
    struct stat st;
    if (!stat(MAIN_SAGEMAKER_MODEL "/config.json", &st)) {
        a->models[0].dir = MAIN_SAGEMAKER_MODEL;
        a->n_models = 1;
    }
}

// Each model's directory (ORG/NAME: the Hugging Face cache's copy) and name: NAME=, the
// --alias for the first, ORG/NAME when so given, else the directory's base name. Names must
// differ, as a request picks a model by its name. A directory that is not there fails here,
// before "listening on" says all is well (the loading comes after the listen, so that
// /healthz answers while it runs). Exits with a message (main only).
static void main_model_names(MainArgs *a) {
    static char dirs[MAIN_MAX_MODELS][PATH_MAX], bases[MAIN_MAX_MODELS][PATH_MAX];
    char why[KG_ERRLEN];
    for (size_t i = 0; i < a->n_models; i++) {
        const char *given = a->models[i].dir;
        if (hfcache_resolve(given, dirs[i], sizeof dirs[i], why)) {
            fprintf(stderr, "kogpt2d: %s\n", why);
            exit(1);
        }
        a->models[i].dir = dirs[i];
        struct stat st;
        if (stat(dirs[i], &st)) {
            fprintf(stderr, "kogpt2d: open %s: %s\n", dirs[i], strerror(errno));
            exit(1);
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
                exit(2);
            }
    }
}

void main_args_parse(MainArgs *a, int argc, char **argv) {
    *a = (MainArgs){.host = "127.0.0.1",
                    .port = 8080,
                    .http_threads = 4,
                    .max_batch = 64,
                    .batch_tokens = 32,
                    .max_queue = 64,
                    .cache_mb = 256,
                    .kv_dtype = KG_DTYPE_AUTO,
                    .timeout_s = 30,
                    .max_body = SRV_MAX_BODY,
                    .max_connections = SRV_MAX_CONNECTIONS,
                    .work_threads = SRV_WORK_THREADS,
                    .max_work_queue = SRV_MAX_WORK_QUEUE,
                    .request_timeout_s = 30,
                    .max_tokenize = API_MAX_TOKENIZE,
                    .dtype = KG_DTYPE_AUTO,
                    .precision = KG_F32,
                    .device = "auto",
                    .speculate = 1};
    if (argc > 1 && !strcmp(argv[1], "serve")) { // `kogpt2d serve [flags]`: SageMaker's start
        main_sagemaker(a);
        argv[1] = argv[0]; // getopt then sees the flags after it alone
        argv++;
        argc--;
    }
    main_env(a);
    char from[64];
    int c;
    while ((c = getopt_long(argc, argv, "m:H:p:t:h", OPTS, NULL)) != -1)
        main_apply(a, c, optarg, main_flag_name(c, from, sizeof from), 0);
    if (optind < argc) {
        fprintf(stderr, "kogpt2d: unexpected argument '%s'\n", argv[optind]);
        main_usage(stderr);
        exit(2);
    }
    static char default_model[PATH_MAX];
    if (!a->n_models) {
        a->models[0].dir = kg_find_data_dir("models/default", default_model, sizeof default_model);
        if (!a->models[0].dir) {
            fprintf(stderr,
                    "kogpt2d: no --model DIR given and no default model (models/default)\n");
            exit(2);
        }
        a->n_models = 1;
    }
    main_model_names(a);
    main_keys(a);
}
