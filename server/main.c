// kogpt2d — the KoGPT-2 HTTP daemon: loads a model and its tokenizer, starts the engine
// (sched.h) and the HTTP server (http.h), and drains cleanly on SIGTERM/SIGINT.
//
//   kogpt2d --model DIR [--host 127.0.0.1] [--port 8080] [--threads N] ...
//
// Start-up order: HTTP first (so /healthz answers and /readyz says 503 while loading),
// then tokenizer, weights, engine, one warm-up step, then /readyz turns 200.
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "base/kg.h"
#include "chat_template/chat_template.h"
#include "http.h"
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

typedef struct {
    const char *model, *alias, *host, *api_key, *cors_origin, *web_dir, *device, *chat_template;
    long port, threads, http_threads, ctx_size, max_batch, max_queue, cache_mb, timeout_s;
    long max_body, max_connections, max_connections_per_ip, request_timeout_s, max_tokenize;
    long work_threads, max_work_queue;
    KgDtype dtype;     // --dtype: KG_DTYPE_AUTO keeps what the file stores
    KgDtype precision; // be->mixed: KG_F32 or KG_BF16
    int speculate, quiet;
} MainArgs;

static void main_usage(FILE *f) {
    fprintf(f,
            "usage: kogpt2d [--model DIR] [options]\n"
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
            "  --api-key KEY        require 'Authorization: Bearer KEY' (health, readiness,\n"
            "                       metrics and static files stay open); also $KOGPT2_API_KEY\n"
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
            "  --quiet              no request log\n");
}

// A whole decimal number in [lo, hi]; exits with a message otherwise (main only).
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

static void main_parse(MainArgs *a, int argc, char **argv) {
    enum {
        O_ALIAS = 256,
        O_HTTP_THREADS,
        O_CTX,
        O_BATCH,
        O_QUEUE,
        O_CACHE,
        O_KEY,
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
        O_CHAT
    };
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
        {"chat-template", required_argument, NULL, O_CHAT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
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
    a->api_key = getenv("KOGPT2_API_KEY");
    char err[KG_ERRLEN];
    int c;
    while ((c = getopt_long(argc, argv, "m:H:p:t:h", OPTS, NULL)) != -1) {
        switch (c) {
        case 'm':
            a->model = optarg;
            break;
        case O_ALIAS:
            a->alias = optarg;
            break;
        case 'H':
            a->host = optarg;
            break;
        case 'p':
            a->port = main_num("--port", optarg, 0, 65535);
            break;
        case 't':
            a->threads = main_num("--threads", optarg, 0, 1024);
            break;
        case O_HTTP_THREADS:
            a->http_threads = main_num("--http-threads", optarg, 1, 256);
            break;
        case O_CTX:
            a->ctx_size = main_num("--ctx-size", optarg, 1, GPT2_MAX_CTX);
            break;
        case O_BATCH:
            a->max_batch = main_num("--max-batch", optarg, 1, 1024);
            break;
        case O_QUEUE:
            a->max_queue = main_num("--max-queue", optarg, 0, 1 << 20);
            break;
        case O_CACHE:
            a->cache_mb = main_num("--cache-mb", optarg, 0, 1 << 20);
            break;
        case O_KEY:
            a->api_key = optarg;
            break;
        case O_CORS:
            a->cors_origin = optarg;
            break;
        case O_WEB:
            a->web_dir = optarg;
            break;
        case O_CHAT:
            a->chat_template = optarg;
            break;
        case O_TIMEOUT:
            a->timeout_s = main_num("--timeout", optarg, 1, 86400);
            break;
        case O_BODY:
            a->max_body = main_num("--max-body", optarg, 64, 1l << 30);
            break;
        case O_CONNS:
            a->max_connections = main_num("--max-connections", optarg, 1, 65536);
            break;
        case O_CONNS_IP:
            a->max_connections_per_ip = main_num("--max-connections-per-ip", optarg, 0, 65536);
            break;
        case O_WORK_THREADS:
            a->work_threads = main_num("--work-threads", optarg, 1, 256);
            break;
        case O_WORK_QUEUE:
            a->max_work_queue = main_num("--max-work-queue", optarg, 0, 1 << 20);
            break;
        case O_REQ_TO:
            a->request_timeout_s = main_num("--request-timeout", optarg, 0, 86400);
            break;
        case O_MAX_TOK:
            a->max_tokenize = main_num("--max-tokenize", optarg, 1, 1l << 24);
            break;
        case O_DTYPE:
            if (kg_dtype_parse(optarg, &a->dtype, err)) {
                fprintf(stderr, "kogpt2d: --dtype: %s\n", err);
                exit(2);
            }
            break;
        case O_PRECISION:
            if (kg_precision_parse(optarg, &a->precision, err)) {
                fprintf(stderr, "kogpt2d: --precision: %s\n", err);
                exit(2);
            }
            break;
        case O_DEVICE: // the last --device wins (a Deployment overrides the image's)
            if (kg_device_check(optarg, err)) {
                fprintf(stderr, "kogpt2d: %s\n", err);
                exit(2);
            }
            a->device = optarg;
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
        default:
            main_usage(stderr);
            exit(2);
        }
    }
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
    if (a->api_key && !a->api_key[0]) a->api_key = NULL;
}

// --web-dir, else the project's web/ (kg_find_data_dir); NULL when there is none (then
// only the API is served).
static const char *main_web_dir(const char *flag, char *buf, size_t cap) {
    return flag ? flag : kg_find_data_dir("web", buf, cap);
}

static void main_log(const char *line) { fprintf(stderr, "%s\n", line); }

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
            fprintf(stderr, "kogpt2d: %s again: ending the requests in flight now\n",
                    strsignal(sig));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    MainArgs a;
    main_parse(&a, argc, argv);
    // A fixed mmap threshold: every allocation of 128 KiB or more (a request's body, its JSON,
    // the tokenizer's scratch for a long text) is its own mapping and goes back to the system
    // when freed. glibc's default raises the threshold to the largest block freed so far, so
    // those blocks then came from the threads' arenas and stayed: after rounds of 4 parallel
    // 1 MiB requests, idle RSS stayed at 81 MB instead of the 46 MB it started at (47 MB now).
    mallopt(M_MMAP_THRESHOLD, 128 << 10);

    if (main_signals()) {
        fprintf(stderr, "kogpt2d: signal handlers: %s\n", strerror(errno));
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
                     .api_key = a.api_key,
                     .cors_origin = a.cors_origin,
                     .routes = routes,
                     .n_routes = n_routes,
                     .fallback = ep_static,
                     .app = &app,
                     .log = a.quiet ? NULL : main_log};
    SrvServer *srv;
    if (srv_start(&srv, &so, err)) {
        fprintf(stderr, "kogpt2d: %s\n", err);
        return 1;
    }
    app.srv = srv;
    fprintf(stderr, "kogpt2d: listening on http://%s:%d (web: %s)\n", a.host, srv_port(srv),
            app.web_dir ? app.web_dir : "none");

    Tokenizer *tok = NULL;
    KgBackend *be = NULL;
    Gpt2 model;
    int model_open = 0, rc = 1;
    Sched *sched = NULL;
    ChatTemplate *chat = NULL;
    if (tok_open(&tok, a.model, err)) goto fail;
    if (!(be = kg_backend_new(a.device, (int)a.threads, a.quiet ? NULL : stderr, err))) goto fail;
    be->mixed = a.precision; // before any matmul, the warm-up's included
    const char *note = kg_precision_note(be);
    if (note && !a.quiet) fprintf(stderr, "kogpt2d: %s\n", note);
    if (gpt2_open(&model, a.model, be, a.dtype, err)) goto fail;
    model_open = 1;
    if (!a.quiet)
        fprintf(stderr, "kogpt2d: loaded %s%s%s\n", model.src.what, model.warning[0] ? "; " : "",
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
    if (ep_chat_setup(&app, a.model, a.chat_template, &chat, err)) goto fail;
    atomic_store(&app.ready, 1);
    fprintf(stderr,
            "kogpt2d: ready: %s (%zu layers, %zu wide, n_ctx %zu, vocab %zu) on %s, precision %s\n",
            app.model_name, model.config.n_layer, model.config.n_embd, n_ctx, app.vocab_size,
            be->ops->name, be->mixed == KG_BF16 ? "bf16" : "f32");

    int sig = main_next_signal(-1);
    fprintf(stderr, "kogpt2d: %s: draining (up to %lds)\n", strsignal(sig), a.timeout_s);
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
    fprintf(stderr, "kogpt2d: %s\n", err);
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
    if (!rc) fprintf(stderr, "kogpt2d: stopped\n");
    return rc;
}
