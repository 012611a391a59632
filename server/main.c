// kogpt2d — the KoGPT-2 HTTP daemon: loads a model and its tokenizer, starts the engine
// (sched.h) and the HTTP server (http.h), and drains cleanly on SIGTERM/SIGINT.
//
//   kogpt2d --model DIR [--host 127.0.0.1] [--port 8080] [--threads N] ...
//
// Start-up order: HTTP first (so /healthz answers and /readyz says 503 while loading),
// then tokenizer, weights, engine, one warm-up step, then /readyz turns 200.
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "base/kg.h"
#include "chat_template/chat_template.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "model/hfcache.h"
#include "sched.h"
#include "score_memo.h"
#include "tokenizer/tokenizer.h"

#ifndef KG_WEB_DIR
#define KG_WEB_DIR ""
#endif

#define MAIN_MAX_KEY_ARGS    64              // --api-key and --api-key-file given, together
#define MAIN_SAGEMAKER_MODEL "/opt/ml/model" // where SageMaker unpacks a model's files

typedef struct {
    const char *model, *alias, *host, *cors_origin, *web_dir, *device, *chat_template;
    long port, threads, http_threads, ctx_size, max_batch, max_queue, cache_mb, timeout_s;
    long max_body, max_connections, max_connections_per_ip, request_timeout_s, max_tokenize;
    long work_threads, max_work_queue;
    KgDtype dtype;     // --dtype: KG_DTYPE_AUTO keeps what the file stores
    KgDtype precision; // be->mixed: KG_F32 or KG_BF16
    int speculate, quiet;
    LogFormat log_format;
    // --api-key and --api-key-file (or their variables) in order, then the keys they give
    struct {
        const char *value;
        int file, from_env;
    } key_args[MAIN_MAX_KEY_ARGS];
    size_t n_key_args;
    AuthKeys keys;
} MainArgs;

static void main_usage(FILE *f) {
    fprintf(f,
            "usage: kogpt2d [serve] [--model DIR] [options]\n"
            "  serve                SageMaker's start (docker run IMAGE serve): listen on\n"
            "                       0.0.0.0, port $SAGEMAKER_BIND_TO_PORT or 8080, serve\n"
            "                       /opt/ml/model when it holds a model; flags still win\n"
            "  --model DIR          model directory: config.json, model.safetensors, tokenizer\n"
            "                       (default: the project's models/default)\n"
            "  --alias NAME         model name in replies (default: the directory's name)\n"
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
            "  --max-batch N        sequences advanced together per step (default 8)\n"
            "  --max-queue N        jobs waiting beyond the batch; more get 429 (default 64)\n"
            "  --cache-mb N         prefix cache memory in MiB (default 256)\n"
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
            "                       next N get 503 + Retry-After, more are closed at once\n"
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

// One flag's value v into a (from: the flag or the variable, for its error message). Exits
// with a message on a bad value (main only).
static void main_apply(MainArgs *a, int c, const char *v, const char *from, int from_env) {
    char err[KG_ERRLEN];
    switch (c) {
    case 'm':
        a->model = v;
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
    if (!stat(MAIN_SAGEMAKER_MODEL "/config.json", &st)) a->model = MAIN_SAGEMAKER_MODEL;
}

static void main_parse(MainArgs *a, int argc, char **argv) {
    *a = (MainArgs){.host = "127.0.0.1",
                    .port = 8080,
                    .http_threads = 4,
                    .max_batch = 8,
                    .max_queue = 64,
                    .cache_mb = 256,
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
    if (!a->model &&
        !(a->model = kg_find_data_dir("models/default", default_model, sizeof default_model))) {
        fprintf(stderr, "kogpt2d: no --model DIR given and no default model (models/default)\n");
        exit(2);
    }
    static char model_dir[PATH_MAX], why[KG_ERRLEN]; // ORG/NAME: the Hugging Face cache's copy
    if (hfcache_resolve(a->model, model_dir, sizeof model_dir, why)) {
        fprintf(stderr, "kogpt2d: %s\n", why);
        exit(1);
    }
    if (!a->alias && strcmp(model_dir, a->model)) a->alias = a->model; // served as ORG/NAME
    a->model = model_dir;
    main_keys(a);
}

// --web-dir, else the project's web/ (kg_find_data_dir); NULL when there is none (then
// only the API is served).
static const char *main_web_dir(const char *flag, char *buf, size_t cap) {
    return flag ? flag : kg_find_data_dir("web", buf, cap);
}

// The backend for --device. kg_backend_new writes its device line into a FILE: here a memory
// one, whose lines then go through the logger. NULL with err.
static KgBackend *main_backend(const MainArgs *a, char *err) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = a->quiet ? NULL : open_memstream(&text, &len);
    KgBackend *be = kg_backend_new(a->device, (int)a->threads, f, err);
    if (f) fclose(f);
    log_lines(LOG_INFO, text);
    free(text);
    return be;
}

static void main_warm_notify(void *ctx) { (void)ctx; }

// One next-token step through the engine, so the first user does not pay for cold caches.
static int main_warm_up(Sched *s, int token, char *err) {
    SchedParams p = {.kind = SCHED_NEXT_TOKEN,
                     .tokens = &token,
                     .n_tokens = 1,
                     .n_candidates = 1,
                     .temperature = 1};
    SchedJob *job;
    int rc = sched_submit(s, &p, main_warm_notify, NULL, &job, err);
    if (rc) return rc;
    SchedState state = SCHED_RUNNING;
    SchedToken t;
    while (state == SCHED_RUNNING) {
        sched_job_read(job, &t, 1, &state);
        if (state == SCHED_RUNNING) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (state == SCHED_DONE_ERROR) rc = sched_job_error(job, err);
    sched_job_release(job);
    return rc;
}

// SIGTERM and SIGINT write their number into this pipe; main reads it. A handler, not a
// blocked mask and sigwait(): a process-directed signal goes to any thread that does not block
// it, and libraries start threads before main runs (OpenBLAS's workers), which with the
// default action would kill the daemon at once and cut every stream.
static int g_signal_pipe[2] = {-1, -1};

static void main_on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(g_signal_pipe[1], &b, 1) < 0) { // full: signals are pending already
    }
    errno = saved;
}

// SIGBUS: the mapped model file shrank under the daemon (a cp or a truncate over it while it
// serves); the page it reads no longer exists. One line says so, then the default action
// (SA_RESETHAND) ends the process as before: nothing else can be done with the mapping.
static void main_on_sigbus(int sig) {
    static const char msg[] =
        "kogpt2d: SIGBUS: the model file changed or shrank while it was mapped (replace a served "
        "model by renaming a new file over it, never by writing into it); exiting\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
    }
}

// The handlers above; SIGHUP ignored (nothing to reload: a terminal's hang-up must not kill
// the daemon), SIGPIPE ignored (a write to a closed socket fails instead). 0 or -1.
static int main_signals(void) {
    if (pipe(g_signal_pipe)) return -1;
    fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK); // the handler never blocks
    for (int i = 0; i < 2; i++)
        fcntl(g_signal_pipe[i], F_SETFD, FD_CLOEXEC);
    struct sigaction sa = {.sa_handler = main_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    struct sigaction bus = {.sa_handler = main_on_sigbus, .sa_flags = SA_RESETHAND};
    sigemptyset(&bus.sa_mask);
    return sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL) ||
                   sigaction(SIGBUS, &bus, NULL) || signal(SIGHUP, SIG_IGN) == SIG_ERR ||
                   signal(SIGPIPE, SIG_IGN) == SIG_ERR
               ? -1
               : 0;
}

// The next signal's number from the pipe, waiting up to timeout_ms (-1: forever); 0 if none.
static int main_next_signal(int timeout_ms) {
    struct pollfd pfd = {.fd = g_signal_pipe[0], .events = POLLIN};
    int n;
    while ((n = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    unsigned char b = 0;
    if (n > 0 && read(g_signal_pipe[0], &b, 1) == 1) return b;
    return 0;
}

// Waits until no request is in flight or the deadline (monotonic seconds) passes; a further
// SIGTERM or SIGINT ends the wait at once (returns 1).
static int main_wait_idle(SrvServer *srv, double deadline) {
    while (srv_in_flight(srv) > 0 && srv_now() < deadline) {
        int sig = main_next_signal(10);
        if (sig) {
            log_msg(LOG_WARN, "%s again: ending the requests in flight now", strsignal(sig));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    MainArgs a;
    main_parse(&a, argc, argv);
    log_setup("kogpt2d", a.log_format); // every line from here on goes through log.h
    // A fixed mmap threshold: every allocation of 128 KiB or more (a request's body, its JSON,
    // the tokenizer's scratch for a long text) is its own mapping and goes back to the system
    // when freed. glibc's default raises the threshold to the largest block freed so far, so
    // those blocks then came from the threads' arenas and stayed: after rounds of 4 parallel
    // 1 MiB requests, idle RSS stayed at 81 MB instead of the 46 MB it started at (47 MB now).
    mallopt(M_MMAP_THRESHOLD, 128 << 10);

    // a model path that is not there fails now, before "listening on" says all is well (the
    // loading itself comes after the listen, so that /healthz answers while it runs)
    struct stat model_st;
    if (stat(a.model, &model_st)) {
        log_msg(LOG_ERROR, "open %s: %s", a.model, strerror(errno));
        auth_free(&a.keys);
        return 1;
    }
    if (main_signals()) {
        log_msg(LOG_ERROR, "signal handlers: %s", strerror(errno));
        return 1;
    }

    char err[KG_ERRLEN], web_buf[PATH_MAX], name_buf[PATH_MAX];
    snprintf(name_buf, sizeof name_buf, "%s", a.model);
    static SrvApp app;
    app.model_name = a.alias ? a.alias : basename(name_buf);
    app.created = time(NULL);
    app.max_tokenize = (size_t)a.max_tokenize;
    const char *endpoints[METRICS_MAX_ENDPOINTS];
    metrics_init(endpoints, api_endpoints(endpoints, METRICS_MAX_ENDPOINTS - 2));
    app.web_dir = main_web_dir(a.web_dir, web_buf, sizeof web_buf);
    app.score_memo = score_memo_new(); // made before the server starts
    size_t n_routes;
    const SrvRoute *routes = api_routes(&n_routes);

    SrvOptions so = {.host = a.host,
                     .port = (int)a.port,
                     .threads = (unsigned)a.http_threads,
                     .max_connections = (unsigned)a.max_connections,
                     .max_connections_per_ip = (unsigned)a.max_connections_per_ip,
                     .work_threads = (unsigned)a.work_threads,
                     .max_work_queue = (unsigned)a.max_work_queue,
                     .timeout_s = (unsigned)a.timeout_s,
                     .request_timeout_s = (unsigned)a.request_timeout_s,
                     .max_body = (size_t)a.max_body,
                     .api_keys = &a.keys,
                     .cors_origin = a.cors_origin,
                     .routes = routes,
                     .n_routes = n_routes,
                     .fallback = ep_static,
                     .app = &app,
                     .log = !a.quiet};
    SrvServer *srv;
    if (srv_start(&srv, &so, err)) {
        log_msg(LOG_ERROR, "%s", err);
        auth_free(&a.keys);
        return 1;
    }
    app.srv = srv;
    log_msg(LOG_INFO, "listening on http://%s:%d (web: %s)", a.host, srv_port(srv),
            app.web_dir ? app.web_dir : "none");

    Tokenizer *tok = NULL;
    KgBackend *be = NULL;
    Gpt2 model;
    int model_open = 0, rc = 1;
    Sched *sched = NULL;
    ChatTemplate *chat = NULL;
    if (tok_open(&tok, a.model, err)) goto fail;
    if (!(be = main_backend(&a, err))) goto fail;
    app.device = be->ops->name;
    be->mixed = a.precision; // before any matmul, the warm-up's included
    const char *note = kg_precision_note(be);
    if (note && !a.quiet) log_msg(LOG_INFO, "%s", note);
    if (gpt2_open(&model, a.model, be, a.dtype, err)) goto fail;
    model_open = 1;
    if (!a.quiet)
        log_msg(LOG_INFO, "loaded %s%s%s", model.src.what, model.warning[0] ? "; " : "",
                model.warning);
    if (tok_vocab_size(tok) > model.config.vocab_size) {
        kg_err(err, KG_EFORMAT, "%s: the tokenizer has %zu ids, the model only %zu", a.model,
               tok_vocab_size(tok), model.config.vocab_size);
        goto fail;
    }
    // the config's special ids must be the tokenizer's too (a short tokenizer.json would
    // otherwise fail later as "token id 2 is outside the vocabulary")
    const struct {
        const char *name;
        int id;
    } special[] = {{"bos_token_id", model.config.bos_id},
                   {"eos_token_id", model.config.eos_id},
                   {"pad_token_id", model.config.pad_id}};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        if (special[i].id >= 0 && (size_t)special[i].id >= tok_vocab_size(tok)) {
            kg_err(err, KG_EFORMAT,
                   "%s: config.json's %s %d is not an id of the tokenizer there (it has %zu)",
                   a.model, special[i].name, special[i].id, tok_vocab_size(tok));
            goto fail;
        }
    size_t n_ctx = model.config.n_ctx;
    if (a.ctx_size > 0 && (size_t)a.ctx_size < n_ctx) n_ctx = (size_t)a.ctx_size;
    SchedOptions sopt = {.max_batch = (size_t)a.max_batch,
                         .max_queue = (size_t)a.max_queue,
                         .cache_mb = (size_t)a.cache_mb,
                         .max_prompt = n_ctx,
                         .prefill_chunk = 256,
                         .speculate = a.speculate};
    if (sched_start(&sched, &model, tok, &sopt, err)) goto fail;
    int eos = model.config.eos_id >= 0 ? model.config.eos_id : 0;
    if (main_warm_up(sched, eos, err)) goto fail;
    app.sched = sched;
    app.tok = tok;
    app.n_ctx = n_ctx;
    app.vocab_size = tok_vocab_size(tok);
    app.dtype = kg_dtype_name(model.dtype);
    app.max_jobs = (size_t)(a.max_batch + a.max_queue);
    if (ep_chat_setup(&app, a.model, a.chat_template, &chat, err)) goto fail;
    atomic_store(&app.ready, 1);
    log_msg(LOG_INFO, "ready: %s (%zu layers, %zu wide, n_ctx %zu, vocab %zu) on %s, precision %s",
            app.model_name, model.config.n_layer, model.config.n_embd, n_ctx, app.vocab_size,
            be->ops->name, be->mixed == KG_BF16 ? "bf16" : "f32");

    int sig = main_next_signal(-1);
    log_msg(LOG_INFO, "%s: draining (up to %lds)", strsignal(sig), a.timeout_s);
    srv_drain(srv); // /readyz 503, no new connections
    double deadline = srv_now() + (double)a.timeout_s;
    if (main_wait_idle(srv, deadline)) deadline = srv_now(); // a second signal: no more waiting
    double left = deadline - srv_now();
    // cancels what is still running; a request still arriving on a kept-alive connection
    // gets 503 (the engine refuses it, and is freed only once the HTTP server has stopped)
    sched_stop(sched, left > 0 ? (int)(left * 1e3) : 0);
    main_wait_idle(srv, srv_now() + 2); // cancelled requests answer their 503s
    rc = 0;
    goto out;
fail:
    log_msg(LOG_ERROR, "%s", err);
    srv_drain(srv);
out:
    sched_stop(sched, 0);
    srv_stop(srv); // joins every HTTP thread: nothing can reach the engine after this
    sched_free(sched);
    chat_template_free(chat);
    score_memo_free(app.score_memo); // once the HTTP server has stopped
    if (model_open) gpt2_close(&model);
    if (be) kg_backend_free(be);
    tok_free(tok);
    auth_free(&a.keys);
    if (!rc) log_msg(LOG_INFO, "stopped");
    return rc;
}
